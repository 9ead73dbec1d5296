//! Thin entry point: parse, run, print the error chain, exit code.

use clap::Parser;

fn main() {
    driftlab::keep_freed_memory();
    let cli = driftlab::cli::Cli::parse();
    if let Err(e) = driftlab::commands::run(cli) {
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        std::process::exit(1);
    }
}
