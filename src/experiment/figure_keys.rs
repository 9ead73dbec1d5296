//! The keys of the paper-figure experiments, checked when a spec loads: declared and secondary
//! claims, a sweep axis, controls and map places.

use super::spec::{CLAIM_LETTERS, DEFAULT_CLAIMS, ExperimentSpec};
use crate::util::names::unknown;
use anyhow::{Result, bail};

impl ExperimentSpec {
    /// The keys of the paper-figure experiments: declared claims, a sweep axis with every
    /// regime's `x`, controls that name other regimes, map places taken once.
    pub(super) fn validate_figure_keys(&self) -> Result<()> {
        if let Some(c) = &self.claims {
            if c.is_empty() {
                bail!("key 'claims': name at least one claim, or leave the key out for (a)-(f)");
            }
            if let Some(x) = c.iter().find(|x| !CLAIM_LETTERS.contains(x)) {
                bail!(
                    "key 'claims': unknown claim '{x}' (known: {})",
                    CLAIM_LETTERS.iter().collect::<String>()
                );
            }
        }
        let declared = self.claims.as_deref().unwrap_or(DEFAULT_CLAIMS);
        if let Some(x) = self.secondary.iter().find(|x| !declared.contains(x)) {
            bail!(
                "key 'secondary': claim '{x}' is not among the declared claims ({})",
                declared.iter().collect::<String>()
            );
        }
        if let Some(axis) = &self.sweep {
            if self.regimes.is_empty() {
                bail!("key 'sweep' ('{axis}'): a sweep needs regimes, each with its `x`");
            }
            if let Some(r) = self
                .regimes
                .iter()
                .find(|r| r.x.is_none_or(|x| !x.is_finite()))
            {
                bail!(
                    "regime '{}': the spec sweeps '{axis}', so the regime needs a finite `x`",
                    r.name
                );
            }
        } else if let Some(r) = self.regimes.iter().find(|r| r.x.is_some()) {
            bail!(
                "regime '{}' sets `x` but the spec names no `sweep` axis",
                r.name
            );
        }
        self.validate_holdout(declared)?;
        if let Some(r) = self
            .regimes
            .iter()
            .find(|r| r.coldstart.contains_key("ulp_jitter"))
        {
            bail!(
                "regime '{}', key 'coldstart.ulp_jitter': the last-bit draw is set for a whole run, with `--ulp-jitter`",
                r.name
            );
        }
        let regime_known: Vec<&str> = self.regimes.iter().map(|r| r.name.as_str()).collect();
        for r in &self.regimes {
            if let Some(c) = &r.control {
                if *c == r.name {
                    bail!(
                        "regime '{}', key 'control': a regime cannot be its own control",
                        r.name
                    );
                }
                if !regime_known.contains(&c.as_str()) {
                    bail!(
                        "regime '{}', key 'control': {}",
                        r.name,
                        unknown("regime", c, &regime_known)
                    );
                }
                // Paired by seed against its control, a regime must start from the same
                // checkpoint: the same task, model and cold-start keys.
                let ctl = self.regimes.iter().find(|x| x.name == *c).expect("known");
                for (key, mine, theirs) in [
                    ("task", &r.task, &ctl.task),
                    ("model", &r.model, &ctl.model),
                    ("coldstart", &r.coldstart, &ctl.coldstart),
                ] {
                    if mine != theirs {
                        bail!(
                            "regime '{}' sets other '{key}' keys than its control '{c}': a regime is compared seed by seed with a control that starts from the same cold start, so they must share task, model and coldstart",
                            r.name
                        );
                    }
                }
            }
        }
        let mut places = std::collections::HashSet::new();
        for r in &self.regimes {
            if let Some(m) = &r.map
                && !places.insert((m.row.as_str(), m.col.as_str()))
            {
                bail!(
                    "regime '{}', key 'map': row '{}', column '{}' is taken by another regime",
                    r.name,
                    m.row,
                    m.col
                );
            }
        }
        Ok(())
    }
}

impl ExperimentSpec {
    /// `holdout` regimes exist for claim (o)'s fit, which needs some regimes left in it.
    fn validate_holdout(&self, declared: &[char]) -> Result<()> {
        if let Some(r) = self.regimes.iter().find(|r| r.holdout)
            && !declared.contains(&'o')
        {
            bail!(
                "regime '{}' sets `holdout`, which only claim (o)'s fit reads: declare 'o' in `claims`",
                r.name
            );
        }
        if declared.contains(&'o') && self.regimes.iter().all(|r| r.holdout) {
            bail!(
                "claim (o) fits over the regimes without `holdout`: leave some regimes in the fit"
            );
        }
        Ok(())
    }
}
