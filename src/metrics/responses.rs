//! The rows of the lengths and prefixes frames: how the variance of a response's log-ratio
//! grows with its length (across responses) and along its first ℓ tokens (within the same
//! responses), over a step's off-policy updates.

use super::ratio::mean_var;
use super::rows::{CellId, Row, Val, f};
use crate::rl::{OldLogp, StepOutput, UpdateRecord};

/// Width of the response-length bins of the lengths frame (1–4, 5–8, …).
pub const LEN_BIN: usize = 4;

/// Whether an update's ratios compare two different policies: every minibatch after the first,
/// and the first as well when π_old is the engine's or a stale policy's.
fn off_policy(id: &CellId, u: &UpdateRecord, staleness: usize) -> bool {
    u.minibatch > 0 || id.old_logp == OldLogp::Rollout || staleness > 0
}

/// Per length bin, the step's off-policy updates pooled: the within-(update, exact length)
/// variance of Σ_t log w and of mean_t log w over responses (GSPO §4: the token-level ratio's
/// noise accumulates with length). Grouping by exact length first keeps the spread of the mean
/// log-ratio between lengths out of the variance.
pub fn length_rows(id: &CellId, out: &StepOutput) -> Vec<Row> {
    use std::collections::BTreeMap;
    // bin → (responses, df, Σ length, pooled Σ(S − S̄)², pooled Σ(M − M̄)²)
    let mut bins: BTreeMap<usize, (usize, usize, usize, f64, f64)> = BTreeMap::new();
    for u in out
        .updates
        .iter()
        .filter(|u| off_policy(id, u, out.staleness))
    {
        let mut by_len: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut at = 0;
        for &l in &u.lens {
            let s: f64 = u.stats.ratio_tok[at..at + l]
                .iter()
                .map(|&w| f64::from(w).ln())
                .sum();
            at += l;
            by_len.entry(l).or_default().push(s);
        }
        for (l, sums) in by_len {
            let (_, var) = mean_var(&sums);
            let df = sums.len() - 1;
            let m2 = if df > 0 { var * sums.len() as f64 } else { 0.0 };
            let b = bins.entry(l.saturating_sub(1) / LEN_BIN).or_default();
            b.0 += sums.len();
            b.1 += df;
            b.2 += l * sums.len();
            b.3 += m2;
            b.4 += m2 / (l * l).max(1) as f64;
        }
    }
    bins.into_iter()
        .map(|(b, (n, df, len, m2s, m2m))| {
            let mut row = id.row(out.step);
            let pooled = |m2: f64| f(if df > 0 { m2 / df as f64 } else { f64::NAN });
            row.extend([
                ("len_lo", Val::I((b * LEN_BIN + 1) as i64)),
                ("len_hi", Val::I(((b + 1) * LEN_BIN) as i64)),
                ("n_resp", Val::I(n as i64)),
                ("df", Val::I(df as i64)),
                ("len_mean", f(len as f64 / n as f64)),
                ("logw_sum_var", pooled(m2s)),
                ("logw_mean_var", pooled(m2m)),
            ]);
            row
        })
        .collect()
}

/// Per prefix length ℓ: (responses, df, Σ (S_ℓ − S̄_ℓ)², Σ_{t<ℓ} Σ (x_t − x̄_t)²).
type PrefixAcc = std::collections::BTreeMap<usize, (usize, usize, f64, f64)>;

/// Add one group of responses of one exact length (each its per-token log-ratios) to `acc`.
fn add_prefix_group(acc: &mut PrefixAcc, rows: &[Vec<f64>]) {
    let (n, len) = (rows.len(), rows.first().map_or(0, Vec::len));
    for &p in PREFIX_LENS.iter().filter(|&&p| p <= len) {
        let e = acc.entry(p).or_default();
        e.0 += n;
        if n < 2 {
            continue;
        }
        e.1 += n - 1;
        let sums: Vec<f64> = rows.iter().map(|x| x[..p].iter().sum()).collect();
        e.2 += mean_var(&sums).1 * n as f64;
        for t in 0..p {
            let col: Vec<f64> = rows.iter().map(|x| x[t]).collect();
            e.3 += mean_var(&col).1 * n as f64;
        }
    }
}

/// Prefix lengths of the prefixes frame.
pub const PREFIX_LENS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// Per prefix length ℓ, the step's off-policy updates pooled: the within-(update, exact length)
/// variance over responses of S_ℓ = Σ_{t<ℓ} log w_t, and the sum over the first ℓ positions of
/// the per-position variance of log w_t (what Var(S_ℓ) would be with uncorrelated tokens). Every
/// ℓ reads the same responses to the same prompts, so the growth of Var(S_ℓ) with ℓ is
/// accumulation along a response with the task's difficulty held fixed (GSPO §4).
pub fn prefix_rows(id: &CellId, out: &StepOutput) -> Vec<Row> {
    use std::collections::BTreeMap;
    let mut acc = PrefixAcc::new();
    for u in out
        .updates
        .iter()
        .filter(|u| off_policy(id, u, out.staleness))
    {
        let mut by_len: BTreeMap<usize, Vec<Vec<f64>>> = BTreeMap::new();
        let mut at = 0;
        for &l in &u.lens {
            let x = u.stats.ratio_tok[at..at + l]
                .iter()
                .map(|&w| f64::from(w).ln())
                .collect();
            at += l;
            by_len.entry(l).or_default().push(x);
        }
        for rows in by_len.values() {
            add_prefix_group(&mut acc, rows);
        }
    }
    acc.into_iter()
        .map(|(p, (n, df, m2s, m2t))| {
            let mut row = id.row(out.step);
            let pooled = |m2: f64| f(if df > 0 { m2 / df as f64 } else { f64::NAN });
            row.extend([
                ("prefix", Val::I(p as i64)),
                ("n_resp", Val::I(n as i64)),
                ("df", Val::I(df as i64)),
                ("prefix_sum_var", pooled(m2s)),
                ("pos_var_sum", pooled(m2t)),
            ]);
            row
        })
        .collect()
}

#[cfg(test)]
mod prefix_tests {
    use super::*;

    /// Tokens that repeat their response's log-ratio are fully correlated: Var(S_ℓ) is ℓ times
    /// the uncorrelated-token value. A one-response group adds responses but no df.
    #[test]
    fn fully_correlated_tokens_inflate_the_prefix_variance_by_its_length() {
        let rows: Vec<Vec<f64>> = [0.1, -0.2, 0.3].iter().map(|&a| vec![a; 9]).collect();
        let mut acc = PrefixAcc::new();
        add_prefix_group(&mut acc, &rows);
        add_prefix_group(&mut acc, &[vec![0.5; 9]]);
        assert_eq!(acc.keys().copied().collect::<Vec<_>>(), vec![1, 2, 4, 8]);
        for (&l, &(n, df, m2s, m2t)) in &acc {
            assert_eq!((n, df), (4, 2));
            assert!(
                (m2s / m2t - l as f64).abs() < 1e-12,
                "ℓ = {l}: {}",
                m2s / m2t
            );
        }
    }
}
