//! Defects found in the code after a committed run had used it: which cells they touched, the
//! builds that had them, and what a report of such a run must say. A report knows its run's
//! build from `config.json` (`git_commit`) and the build of its cost figure from `bench.json`,
//! so the caveat comes with every re-report of the run, never from a hand edit of its
//! `report.md`, and a run of a corrected build gets none.

use super::run_info::RunInfo;
use crate::experiment::CellConfig;

/// A defect of the code, fixed since.
pub struct Defect {
    /// The cells that ran it (by what they set, not by arm name).
    pub applies: fn(&CellConfig) -> bool,
    /// The commit that fixed it (abbreviated).
    pub fixed_in: &'static str,
    /// Every build that had it, abbreviated to 7 hex digits: the commits from the feature's
    /// introduction to the one before the fix (`git rev-list --ancestry-path INTRO^..FIX^`).
    pub builds: &'static [&'static str],
    /// What such a cell ran, completing "ran …".
    pub what: &'static str,
    /// The short name the figures give it.
    pub short: &'static str,
}

/// PR²'s π_old (src/rl/predictor.rs): until abd885b π_old kept the native pass's log-probs,
/// not those of the predicted routes the updates replay, so once W_p moved a route the first
/// minibatch's ratios were not 1 there. It came with PR² itself (e1d94b1).
const PR2_OLD_LOGP: Defect = Defect {
    applies: |c| c.rl.pr2.is_some(),
    fixed_in: "abd885b",
    builds: &[
        "e1d94b1", "197d61b", "a3c7a2f", "8e7b8b4", "96e3eda", "89e2656", "beed5aa", "c831e1d",
        "bc1b33c", "ed52ae0", "ce1b579", "d1c0dac", "c32e105", "8aaf50c", "db5d2bf", "751211b",
        "abc03f4", "497d8a8", "fc8d3d8",
    ],
    what: "PR² with the since-fixed π_old defect: π_old kept the native pass's log-probs instead of those of the predicted routes the updates replay, so once the predictor moved a route, the first minibatch's token ratios were not 1 there (fixed in `abd885b`, src/rl/predictor.rs)",
    short: "PR² with the π_old defect",
};

/// Every known defect.
pub static DEFECTS: &[Defect] = &[PR2_OLD_LOGP];

impl Defect {
    /// Whether the build `commit` (config.json's `git_commit`, possibly `…-dirty-…`) had it.
    pub fn in_build(&self, commit: Option<&str>) -> bool {
        commit.is_some_and(|c| c.len() >= 7 && self.builds.contains(&&c[..7]))
    }
}

/// The arms of `regime` (every regime when `None`), in spec order, that ran a known defect: the
/// defect is in the run's build and one of the arm's cells sets what it touches.
pub fn affected(info: &RunInfo, regime: Option<&str>) -> Vec<(String, &'static Defect)> {
    let mut out: Vec<(String, &'static Defect)> = Vec::new();
    for d in DEFECTS
        .iter()
        .filter(|d| d.in_build(info.git_commit.as_deref()))
    {
        for c in info.ran_cells() {
            if regime.is_some_and(|r| r != c.regime) || !(d.applies)(c) {
                continue;
            }
            if !out
                .iter()
                .any(|(a, x)| *a == c.arm && x.fixed_in == d.fixed_in)
            {
                out.push((c.arm.clone(), d));
            }
        }
    }
    out
}

/// The report's paragraph on the defects its run's build had, or "" when none.
pub fn header_md(info: &RunInfo) -> String {
    let all = affected(info, None);
    let mut md = String::new();
    for d in DEFECTS {
        let arms: Vec<String> = all
            .iter()
            .filter(|(_, x)| x.fixed_in == d.fixed_in)
            .map(|(a, _)| format!("`{a}`"))
            .collect();
        if arms.is_empty() {
            continue;
        }
        let build = info.git_commit.as_deref().unwrap_or_default();
        let (the, that) = if arms.len() == 1 {
            ("the arm", "that arm")
        } else {
            ("the arms", "those arms")
        };
        md.push_str(&format!(
            "**A defect of this run's build** (`{}`): {the} {} ran {}. Every number of {that} here is that version's, not the code's now; the other arms are untouched.\n\n",
            &build[..7.min(build.len())],
            arms.join(", "),
            d.what,
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The committed fix_leaderboard ran PR² on a build with the π_old defect: its `grpo_pr2`
    /// arm, in both regimes, and no other arm, is marked, and the report says so; the same run
    /// on the fixing build (or an unknown one) is not.
    #[test]
    fn the_committed_leaderboard_ran_pr2_with_the_old_logp_defect() {
        let mut info = RunInfo::load(Path::new("results/fix_leaderboard")).unwrap();
        assert!(info.git_commit.as_deref().unwrap().starts_with("abc03f4"));
        let arms: Vec<String> = affected(&info, None).into_iter().map(|(a, _)| a).collect();
        assert_eq!(arms, ["grpo_pr2"]);
        assert_eq!(affected(&info, Some("stale4_d20")).len(), 1);
        let md = header_md(&info);
        assert!(md.contains("`grpo_pr2`") && md.contains("abd885b"), "{md}");
        for build in [Some("abd885b0000".to_string()), None] {
            info.git_commit = build;
            assert!(affected(&info, None).is_empty());
            assert_eq!(header_md(&info), "");
        }
    }
}
