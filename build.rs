//! Records the commit the binary is built from, so a run's `config.json` names the sources that
//! produced its numbers (not whatever the checkout holds when the run starts), and `--resume`
//! and `merge` compare binaries rather than checkouts.
//!
//! `DRIFTLAB_BUILD_COMMIT` is `git rev-parse HEAD`, suffixed `-dirty-<16 hex>` when the sources
//! that go into the binary differ from HEAD (the suffix is a hash of that diff and of the
//! untracked files under `src/`, so two different dirty builds do not look alike), and empty
//! outside a git checkout.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Command;

/// What goes into the binary: a change to any of these makes a build dirty.
const SOURCES: &[&str] = &[
    "src",
    "assets",
    "vendor",
    "Cargo.toml",
    "Cargo.lock",
    "build.rs",
];

fn git(args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then_some(out.stdout)
}

fn main() {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    // HEAD (or the branch it names) moves on commit, checkout and reset, and HEAD's reflog
    // grows with each of them. Paths from `git rev-parse --git-path` work in worktrees too;
    // only paths that exist are watched (cargo reruns a script whose watched path is missing
    // every time, and a packed branch has no file of its own). The index is left out: the id
    // diffs against HEAD, so staging alone does not change it.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".into(), "logs/HEAD".into()];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(String::from_utf8_lossy(&r).trim().to_string());
    }
    for what in &watch {
        if let Some(p) = git(&["rev-parse", "--git-path", what]) {
            let p = String::from_utf8_lossy(&p).trim().to_string();
            if Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    let commit = git(&["rev-parse", "HEAD"])
        .map(|c| String::from_utf8_lossy(&c).trim().to_string())
        .unwrap_or_default();
    let mut id = commit.clone();
    if !commit.is_empty() {
        let mut diff_args = vec!["diff", "--no-ext-diff", "--no-textconv", "HEAD", "--"];
        diff_args.extend(SOURCES);
        let diff = git(&diff_args).unwrap_or_default();
        let untracked =
            git(&["ls-files", "--others", "--exclude-standard", "--", "src"]).unwrap_or_default();
        if !diff.is_empty() || !untracked.is_empty() {
            let mut h = DefaultHasher::new();
            diff.hash(&mut h);
            for f in String::from_utf8_lossy(&untracked).lines() {
                f.hash(&mut h);
                std::fs::read(f).unwrap_or_default().hash(&mut h);
            }
            id = format!("{commit}-dirty-{:016x}", h.finish());
        }
    }
    println!("cargo:rustc-env=DRIFTLAB_BUILD_COMMIT={id}");
}
