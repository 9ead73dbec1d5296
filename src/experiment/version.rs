//! The build a results folder records in `config.json` (`crate_version`, `git_commit`), which
//! `--resume` compares with the running binary's.

/// The commit the running binary was built from (see `build.rs`): `-dirty-<hash>` when its
/// sources differed from that commit, `None` when it was built outside a git checkout. Not the
/// checkout's HEAD at run start: a long run and its resumption may outlive several commits.
pub(crate) fn git_commit() -> Option<String> {
    let c = env!("DRIFTLAB_BUILD_COMMIT");
    (!c.is_empty()).then(|| c.to_string())
}
