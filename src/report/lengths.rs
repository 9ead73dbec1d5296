//! Claims (e) and (m) cell by cell: the off-policy token and sequence ratio variances of each
//! cell (its updates averaged first, so that ~50 autocorrelated updates count once), and how
//! the variance of a response's log-ratio grows with its length, fitted within each cell on the
//! length bins of the lengths frame (e) or on the prefix lengths of the prefixes frame (m).

use crate::metrics::frames::{f64_col, i64_col, str_col};
use anyhow::Result;
use polars::prelude::*;
use std::collections::BTreeMap;

/// Length bins with fewer pooled degrees of freedom than this are left out of a fit (the
/// log of a variance estimate with df degrees of freedom has a spread of about √(2/df)).
pub const MIN_DF: i64 = 10;

/// One length bin of one cell, pooled over the cell's steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Bin {
    pub len_lo: i64,
    pub len_mean: f64,
    pub df: i64,
    /// Pooled variance of Σ_t log w.
    pub sum_var: f64,
    /// Pooled variance of mean_t log w.
    pub mean_var: f64,
}

/// Per (arm, seed) of one regime's lengths frame, its bins in length order.
pub fn cell_bins(lengths: &DataFrame) -> Result<BTreeMap<(String, i64), Vec<Bin>>> {
    let mut out: BTreeMap<(String, i64), Vec<Bin>> = BTreeMap::new();
    if lengths.height() == 0 {
        return Ok(out);
    }
    let g = lengths
        .clone()
        .lazy()
        .filter(col("df").gt(lit(0)))
        .with_columns([
            (col("logw_sum_var") * col("df").cast(DataType::Float64)).alias("ss"),
            (col("logw_mean_var") * col("df").cast(DataType::Float64)).alias("sm"),
            (col("len_mean") * col("n_resp").cast(DataType::Float64)).alias("ln"),
        ])
        .group_by([col("arm"), col("seed"), col("len_lo")])
        .agg([
            col("df").sum(),
            col("n_resp").sum(),
            col("ss").sum(),
            col("sm").sum(),
            col("ln").sum(),
        ])
        .sort(["arm", "seed", "len_lo"], SortMultipleOptions::default())
        .collect()?;
    let (arm, seed, lo) = (
        str_col(&g, "arm")?,
        i64_col(&g, "seed")?,
        i64_col(&g, "len_lo")?,
    );
    let (df, n) = (i64_col(&g, "df")?, i64_col(&g, "n_resp")?);
    let (ss, sm, ln) = (f64_col(&g, "ss")?, f64_col(&g, "sm")?, f64_col(&g, "ln")?);
    for i in 0..g.height() {
        let d = df[i] as f64;
        out.entry((arm[i].clone(), seed[i])).or_default().push(Bin {
            len_lo: lo[i],
            len_mean: ln[i].unwrap_or(f64::NAN) / n[i] as f64,
            df: df[i],
            sum_var: ss[i].unwrap_or(f64::NAN) / d,
            mean_var: sm[i].unwrap_or(f64::NAN) / d,
        });
    }
    Ok(out)
}

/// The exponent β of `var ∝ length^β`: the least-squares slope of ln(var) on ln(mean length)
/// over the bins with at least [`MIN_DF`] degrees of freedom and a positive variance, each
/// weighted by its df. NaN with fewer than three such bins.
pub fn length_exponent(bins: &[Bin], var: impl Fn(&Bin) -> f64) -> f64 {
    power_exponent(bins.iter().map(|b| (b.len_mean, var(b), b.df)))
}

/// The exponent β of `y ∝ x^β` over `(x, y, df)` points: the df-weighted least-squares slope
/// of ln y on ln x over the points with at least [`MIN_DF`] degrees of freedom and a positive,
/// finite y. NaN with fewer than three such points.
pub fn power_exponent(points: impl IntoIterator<Item = (f64, f64, i64)>) -> f64 {
    let pts: Vec<(f64, f64, f64)> = points
        .into_iter()
        .filter(|&(_, y, df)| df >= MIN_DF && y > 0.0 && y.is_finite())
        .map(|(x, y, df)| (x.ln(), y.ln(), df as f64))
        .collect();
    if pts.len() < 3 {
        return f64::NAN;
    }
    let w: f64 = pts.iter().map(|p| p.2).sum();
    let mx = pts.iter().map(|p| p.0 * p.2).sum::<f64>() / w;
    let my = pts.iter().map(|p| p.1 * p.2).sum::<f64>() / w;
    let sxy: f64 = pts.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    if sxx > 0.0 { sxy / sxx } else { f64::NAN }
}

/// One prefix length of one cell, pooled over the cell's steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Prefix {
    pub len: i64,
    pub df: i64,
    /// Pooled variance of Σ_{t<ℓ} log w_t.
    pub sum_var: f64,
    /// Σ_{t<ℓ} of the pooled per-position variances: `sum_var` for uncorrelated tokens.
    pub pos_var: f64,
}

impl Prefix {
    /// Variance of the prefix's mean log-ratio, Var(S_ℓ / ℓ).
    pub fn mean_var(&self) -> f64 {
        self.sum_var / (self.len * self.len) as f64
    }

    /// The design effect Var(S_ℓ) / Σ_t Var(log w_t): 1 for uncorrelated tokens, above 1 when
    /// their log-ratios are positively correlated along the response.
    pub fn inflation(&self) -> f64 {
        self.sum_var / self.pos_var
    }
}

/// Per (arm, seed) of one regime's prefixes frame, its prefix lengths in order.
pub fn cell_prefixes(prefixes: &DataFrame) -> Result<BTreeMap<(String, i64), Vec<Prefix>>> {
    let mut out: BTreeMap<(String, i64), Vec<Prefix>> = BTreeMap::new();
    if prefixes.height() == 0 {
        return Ok(out);
    }
    let d = || col("df").cast(DataType::Float64);
    let g = prefixes
        .clone()
        .lazy()
        .filter(col("df").gt(lit(0)))
        .with_columns([
            (col("prefix_sum_var") * d()).alias("ss"),
            (col("pos_var_sum") * d()).alias("sp"),
        ])
        .group_by([col("arm"), col("seed"), col("prefix")])
        .agg([col("df").sum(), col("ss").sum(), col("sp").sum()])
        .sort(["arm", "seed", "prefix"], SortMultipleOptions::default())
        .collect()?;
    let (arm, seed, len) = (
        str_col(&g, "arm")?,
        i64_col(&g, "seed")?,
        i64_col(&g, "prefix")?,
    );
    let (df, ss, sp) = (i64_col(&g, "df")?, f64_col(&g, "ss")?, f64_col(&g, "sp")?);
    for i in 0..g.height() {
        let d = df[i] as f64;
        out.entry((arm[i].clone(), seed[i]))
            .or_default()
            .push(Prefix {
                len: len[i],
                df: df[i],
                sum_var: ss[i].unwrap_or(f64::NAN) / d,
                pos_var: sp[i].unwrap_or(f64::NAN) / d,
            });
    }
    Ok(out)
}

/// The exponent of `f(prefix) ∝ ℓ^β` over a cell's prefix lengths ([`power_exponent`]).
pub fn prefix_exponent(ps: &[Prefix], f: impl Fn(&Prefix) -> f64) -> f64 {
    power_exponent(ps.iter().map(|p| (p.len as f64, f(p), p.df)))
}

/// An update is off-policy (its ratios compare two different policies) on every minibatch
/// after the first, and on the first as well when π_old is the engine's or a stale policy's:
/// the rule of the lengths frame.
fn off_policy(df: &DataFrame) -> Result<Vec<bool>> {
    let mb = i64_col(df, "minibatch")?;
    let rollout = str_col(df, "old_logp")
        .map(|v| v.iter().map(|s| s == "rollout").collect::<Vec<_>>())
        .unwrap_or_else(|_| vec![false; mb.len()]);
    let stale = i64_col(df, "rollout_staleness").unwrap_or_else(|_| vec![0; mb.len()]);
    Ok((0..mb.len())
        .map(|i| mb[i] > 0 || rollout[i] || stale[i] > 0)
        .collect())
}

/// Per (arm, seed): the means over the cell's off-policy updates of the token and the
/// sequence ratio variance.
pub fn off_policy_variances(updates: &DataFrame) -> Result<BTreeMap<(String, i64), (f64, f64)>> {
    let mut out = BTreeMap::new();
    if updates.height() == 0 {
        return Ok(out);
    }
    let keep = off_policy(updates)?;
    let mut df = updates.clone();
    df.with_column(Column::new("__off".into(), keep))?;
    let g = df
        .lazy()
        .filter(col("__off"))
        .group_by([col("arm"), col("seed")])
        .agg([col("ratio_tok_var").mean(), col("ratio_seq_var").mean()])
        .collect()?;
    let (arm, seed) = (str_col(&g, "arm")?, i64_col(&g, "seed")?);
    let (t, s) = (f64_col(&g, "ratio_tok_var")?, f64_col(&g, "ratio_seq_var")?);
    for i in 0..g.height() {
        out.insert(
            (arm[i].clone(), seed[i]),
            (t[i].unwrap_or(f64::NAN), s[i].unwrap_or(f64::NAN)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(len: f64, df: i64, var: f64) -> Bin {
        Bin {
            len_lo: len as i64,
            len_mean: len,
            df,
            sum_var: var,
            mean_var: var / (len * len),
        }
    }

    #[test]
    fn the_exponent_of_a_power_law_is_recovered() {
        // Var(Σ log w) = 0.01 L: exponent 1; Var(mean log w) = 0.01 / L: exponent −1.
        let bins: Vec<Bin> = [4.0, 8.0, 12.0, 16.0]
            .iter()
            .map(|&l| bin(l, 20, 0.01 * l))
            .collect();
        assert!((length_exponent(&bins, |b| b.sum_var) - 1.0).abs() < 1e-12);
        assert!((length_exponent(&bins, |b| b.mean_var) + 1.0).abs() < 1e-12);
    }

    #[test]
    fn thin_bins_are_left_out_and_two_bins_are_too_few() {
        let mut bins: Vec<Bin> = [4.0, 8.0, 16.0]
            .iter()
            .map(|&l| bin(l, 20, 0.01 * l * l))
            .collect();
        bins.push(bin(32.0, MIN_DF - 1, 1e9));
        assert!((length_exponent(&bins, |b| b.sum_var) - 2.0).abs() < 1e-12);
        bins.remove(0);
        assert!(length_exponent(&bins, |b| b.sum_var).is_nan());
    }

    /// Uncorrelated tokens whose variance grows along the response: Var(S_ℓ) grows faster
    /// than ℓ (β_sum > 1), yet the design effect is 1 at every ℓ, so β_infl = 0.
    #[test]
    fn uncorrelated_tokens_of_growing_variance_have_no_inflation_exponent() {
        let ps: Vec<Prefix> = [1i64, 2, 4, 8, 16]
            .iter()
            .map(|&l| {
                let v: f64 = (1..=l).map(|t| 0.01 * t as f64).sum();
                Prefix {
                    len: l,
                    df: 50,
                    sum_var: v,
                    pos_var: v,
                }
            })
            .collect();
        assert!(prefix_exponent(&ps, Prefix::inflation).abs() < 1e-12);
        let sum = prefix_exponent(&ps, |p| p.sum_var);
        assert!(sum > 1.5, "{sum}");
        assert!((prefix_exponent(&ps, Prefix::mean_var) - (sum - 2.0)).abs() < 1e-12);
    }
}
