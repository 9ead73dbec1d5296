//! The published claims a report can test, named in specs (`claims = ["a", "k"]`), in
//! `config.json` and in `endpoints.json` by their letter. What each claim compares lives in
//! `src/report/claims/`, one file per family; this module only names them, so that the
//! experiment layer never imports the report.

use serde::{Serialize, Serializer};
use std::fmt;

/// The registry of claims: one row a claim (variant, letter, what it claims). The enum, its
/// [`Claim::ALL`] order and [`CLAIM_LETTERS`] are all generated from these rows, so a new claim
/// is one row here plus its definition in its family's file under `src/report/claims/`.
macro_rules! claims {
    ($( $(#[$doc:meta])* $V:ident = $letter:literal ),+ $(,)?) => {
        /// A claim the report knows, in report order.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Claim { $( $(#[$doc])* $V ),+ }

        /// The letters of the claims, in [`Claim::ALL`] order.
        pub const CLAIM_LETTERS: &[char] = &[$($letter),+];

        impl Claim {
            /// Every claim, in report order.
            pub const ALL: &'static [Claim] = &[$(Claim::$V),+];
        }
    };
}

claims! {
    /// (a) share of activated experts that change per update.
    DriftShare = 'a',
    /// (b) GRPO without Routing Replay against GRPO with R2/R3.
    Replay = 'b',
    /// (c) GSPO without replay not worse than GRPO with R2.
    GspoStable = 'c',
    /// (d) GSPO clips far more tokens than GRPO.
    GspoClips = 'd',
    /// (e) token-ratio noise accumulates with length; the length-normalised ratio does not.
    RatioVariance = 'e',
    /// (f) the engine/trainer mismatch: MoE above dense, R3 below native.
    Mismatch = 'f',
    /// (g) tokens with an engine/trainer ratio beyond 2: MoE above dense, R3 below native.
    ExtremeShare = 'g',
    /// (h) GVPO at least as good as GRPO, on- and off-policy.
    GvpoReward = 'h',
    /// (i) truncated importance sampling against the engine helps GRPO.
    TisReward = 'i',
    /// (j) GSPO reaches GRPO + R2's reward with less compute.
    ComputeToReach = 'j',
    /// (k) more experts change per update in deeper models.
    DepthDrift = 'k',
    /// (l) every arm against its regime's control (the stability map).
    Control = 'l',
    /// (m) claim (e) with difficulty held fixed: token-ratio noise accumulates along the
    /// prefixes of the same responses beyond uncorrelated tokens; their mean does not.
    PrefixVariance = 'm',
    /// (n) where GRPO breaks (a drift regime with a control), every fix against GRPO without
    /// replay on the final greedy eval accuracy: one primary family.
    FixLeaderboard = 'n',
    /// (o) what sets drift per update: a multiplicative fit on depth, width, experts, learning
    /// rate and minibatches, checked on held-out configurations and carried to the paper's model.
    ScaleDrift = 'o',
    /// (p) on-policy distillation of a MoE student: GVPD against token-level PG-OPD on the
    /// final greedy eval accuracy; drift per update against GRPO; R3 under an engine mismatch.
    Opd = 'p',
    /// (q) C2 with drift from the router's own updates: R2/R3 against GRPO where a regime has a
    /// control, and every fix's arm × drift interaction.
    Organic = 'q',
    /// (r) router precision in the rollout engine: a bf16 router against an fp32 one in the
    /// same bf16 engine (route mismatch, mismatch KL, final accuracy), and R3's interaction.
    RouterPrecision = 'r',
    /// (s) drift per update against width alone (a width sweep with one cold-start lr): the
    /// exponent with and without the widest point, and its extrapolation (described).
    WidthDrift = 's',
}

/// The claims a spec that names none tests: (a)–(f), the flagship's family.
pub const DEFAULT_CLAIMS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f'];

impl Claim {
    /// The claim's letter.
    pub fn letter(self) -> char {
        CLAIM_LETTERS[self as usize]
    }

    /// The claim of a letter; None for a letter no claim has.
    pub fn from_letter(c: char) -> Option<Claim> {
        Claim::ALL.iter().copied().find(|x| x.letter() == c)
    }

    /// Claims of letters a spec has already validated (unknown letters are dropped).
    pub fn of_letters(letters: &[char]) -> Vec<Claim> {
        letters
            .iter()
            .filter_map(|c| Claim::from_letter(*c))
            .collect()
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// As its letter, the form specs and reports have always used.
impl Serialize for Claim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_char(self.letter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_and_claims_correspond_one_to_one() {
        assert_eq!(CLAIM_LETTERS.len(), Claim::ALL.len());
        for (i, &c) in Claim::ALL.iter().enumerate() {
            assert_eq!(c as usize, i);
            assert_eq!(Claim::from_letter(c.letter()), Some(c));
        }
        assert_eq!(Claim::from_letter('z'), None);
        assert_eq!(serde_json::to_string(&Claim::DepthDrift).unwrap(), "\"k\"");
    }
}

/// What claim (j)'s compute-to-reach target is read from (the spec's `compute_target`,
/// declared before the run): `GAIN_SHARE` of the way from the reference arm's first reward EMA
/// to its best (`best`, the default, as the exploratory runs) or to its mean over the last
/// tenth of its steps (`final_reward`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeTarget {
    #[default]
    Best,
    FinalReward,
}

impl ComputeTarget {
    pub fn is_best(&self) -> bool {
        *self == ComputeTarget::Best
    }
}
