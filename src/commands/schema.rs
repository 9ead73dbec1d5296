//! `driftlab schema`: the columns and dtypes of every frame (steps, updates, layers, events) as
//! JSON. It takes no arguments.

use anyhow::Result;

pub fn run() -> Result<()> {
    println!("{}", crate::metrics::schema::to_json()?);
    Ok(())
}
