//! `driftlab list`: the experiments in the spec folder, each with its description.

use crate::experiment::list_specs;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[arg(long, default_value = "experiments")]
    pub specs: PathBuf,
}

pub fn run(a: &ListArgs) -> Result<()> {
    for (name, spec) in list_specs(&a.specs)? {
        println!(
            "{name:<16} {}",
            spec.map(|s| s.description)
                .unwrap_or_else(|e| format!("(invalid: {e:#})"))
        );
    }
    Ok(())
}
