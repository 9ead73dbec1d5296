//! What sets drift per update (claim (o)): a multiplicative model of a per-cell metric y on the
//! configuration's factors, ln y = c + Σ_f b_f ln x_f over depth, width, expert count,
//! learning rate and minibatches per step, fitted per seed by least squares over the fitting
//! configurations, checked on held-out ones and carried to the GSPO paper's model.

use crate::metrics::frames::{f64_col, i64_col, str_col};
use crate::util::moments::mean;
use anyhow::Result;
use polars::prelude::DataFrame;
use std::collections::BTreeMap;

/// The factors of one configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Factors {
    pub layers: f64,
    pub d_model: f64,
    pub experts: f64,
    pub top_k: f64,
    pub lr: f64,
    pub minibatches: f64,
}

/// The factors' names, in the model's order (after the intercept).
pub const FACTORS: [&str; 5] = ["n_layers", "d_model", "n_experts", "lr", "minibatches"];

/// Parameters of the model: the intercept and one exponent per factor.
pub const P: usize = 6;

/// The GSPO paper's model, Qwen3-30B-A3B: 48 layers, hidden size 2048, 128 experts top-8; the
/// paper splits each rollout batch into 4 minibatches; its learning rate is not stated: 1e-6
/// is assumed.
pub const PAPER: Factors = Factors {
    layers: 48.0,
    d_model: 2048.0,
    experts: 128.0,
    top_k: 8.0,
    lr: 1e-6,
    minibatches: 4.0,
};

impl Factors {
    /// The design row `[1, ln layers, ln d_model, ln experts, ln lr, ln minibatches]`.
    pub fn row(&self) -> [f64; P] {
        [
            1.0,
            self.layers.ln(),
            self.d_model.ln(),
            self.experts.ln(),
            self.lr.ln(),
            self.minibatches.ln(),
        ]
    }

    /// The model's prediction at these factors.
    pub fn predict(&self, b: &[f64; P]) -> f64 {
        self.row()
            .iter()
            .zip(b)
            .map(|(x, b)| x * b)
            .sum::<f64>()
            .exp()
    }

    /// In words, as the report lists a configuration.
    pub fn describe(&self) -> String {
        format!(
            "{} layers, d {}, {} experts top-{}, lr {:e}, N {}",
            self.layers, self.d_model, self.experts, self.top_k, self.lr, self.minibatches
        )
    }
}

/// Least squares of y on the rows (normal equations, Gaussian elimination with partial
/// pivoting); `None` when the design does not identify every parameter.
pub fn ols(rows: &[([f64; P], f64)]) -> Option<[f64; P]> {
    if rows.len() < P {
        return None;
    }
    let mut a = [[0.0f64; P + 1]; P];
    for (x, y) in rows {
        for i in 0..P {
            for j in 0..P {
                a[i][j] += x[i] * x[j];
            }
            a[i][P] += x[i] * y;
        }
    }
    let scale = (0..P).map(|i| a[i][i].abs()).fold(0.0, f64::max).max(1.0);
    for c in 0..P {
        let piv = (c..P).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[piv][c].abs() < 1e-10 * scale {
            return None;
        }
        a.swap(c, piv);
        for r in 0..P {
            if r != c {
                let f = a[r][c] / a[c][c];
                for k in c..=P {
                    a[r][k] -= f * a[c][k];
                }
            }
        }
    }
    let mut b = [0.0; P];
    for i in 0..P {
        b[i] = a[i][P] / a[i][i];
    }
    Some(b)
}

/// Per seed, the mean over a cell's rows of column `col` of `df` (arm `arm`); cells without a
/// finite value are left out.
pub fn cell_values(df: &DataFrame, col: &str, arm: &str) -> Result<BTreeMap<i64, f64>> {
    if df.height() == 0 || df.column(col).is_err() {
        return Ok(BTreeMap::new());
    }
    let (arms, seeds, v) = (str_col(df, "arm")?, i64_col(df, "seed")?, f64_col(df, col)?);
    let mut acc: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
    for i in 0..arms.len() {
        if arms[i] != arm {
            continue;
        }
        if let Some(x) = v[i].filter(|x| x.is_finite()) {
            let e = acc.entry(seeds[i]).or_insert((0.0, 0));
            e.0 += x;
            e.1 += 1;
        }
    }
    Ok(acc
        .into_iter()
        .map(|(s, (sum, n))| (s, sum / n as f64))
        .collect())
}

/// Which frame a metric lives in.
#[derive(Clone, Copy, Debug)]
pub enum From {
    Updates,
    Steps,
}

/// One metric's per-configuration values: (regime, its factors, held out, per seed value).
pub type Points = Vec<(String, Factors, bool, BTreeMap<i64, f64>)>;

/// Per seed, the fit over the fitting (not held-out) configurations with a positive value.
pub fn fits(p: &Points) -> BTreeMap<i64, [f64; P]> {
    let mut by: BTreeMap<i64, Vec<([f64; P], f64)>> = BTreeMap::new();
    for (_, f, held, v) in p {
        if *held {
            continue;
        }
        for (s, y) in v {
            if *y > 0.0 {
                by.entry(*s).or_default().push((f.row(), y.ln()));
            }
        }
    }
    by.into_iter()
        .filter_map(|(s, rows)| ols(&rows).map(|b| (s, b)))
        .collect()
}

/// Per seed, the mean |ln predicted − ln measured| over the held-out configurations.
pub fn holdout_error(p: &Points, fits: &BTreeMap<i64, [f64; P]>) -> BTreeMap<i64, f64> {
    let mut acc: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for (_, f, held, v) in p {
        if !*held {
            continue;
        }
        for (s, y) in v {
            if let (Some(b), true) = (fits.get(s), *y > 0.0) {
                acc.entry(*s)
                    .or_default()
                    .push((f.predict(b).ln() - y.ln()).abs());
            }
        }
    }
    acc.into_iter().map(|(s, e)| (s, mean(&e))).collect()
}

/// The share of tokens with at least one of `layers` layers changed when each changes its
/// expert set with probability `routers`, independently.
pub fn tokens_from_routers(routers: f64, layers: f64) -> f64 {
    1.0 - (1.0 - routers.clamp(0.0, 1.0)).powf(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 layers, d 64, 8 experts top-2, lr 1e-4, N 4.
    fn centre() -> Factors {
        Factors {
            layers: 4.0,
            d_model: 64.0,
            experts: 8.0,
            top_k: 2.0,
            lr: 1e-4,
            minibatches: 4.0,
        }
    }

    #[test]
    fn least_squares_recovers_an_exact_multiplicative_law() {
        // y = 0.01 · L^0.5 · d^-1 · E^0.2 · lr^1 · N^0.3 on a one-factor-at-a-time design.
        let b = [0.01f64.ln(), 0.5, -1.0, 0.2, 1.0, 0.3];
        let c = centre();
        let mut cfgs = vec![c];
        for l in [2.0, 8.0] {
            cfgs.push(Factors { layers: l, ..c });
        }
        cfgs.push(Factors {
            d_model: 128.0,
            ..c
        });
        cfgs.push(Factors { experts: 32.0, ..c });
        cfgs.push(Factors { lr: 1e-3, ..c });
        cfgs.push(Factors {
            minibatches: 8.0,
            ..c
        });
        let rows: Vec<_> = cfgs.iter().map(|f| (f.row(), f.predict(&b).ln())).collect();
        let got = ols(&rows).unwrap();
        for (g, w) in got.iter().zip(&b) {
            assert!((g - w).abs() < 1e-9, "{got:?} vs {b:?}");
        }
        // A design that moves two factors together cannot tell them apart.
        let tied: Vec<_> = cfgs
            .iter()
            .map(|f| Factors {
                d_model: 16.0 * f.layers,
                ..*f
            })
            .map(|f| (f.row(), 0.0))
            .collect();
        assert!(ols(&tied).is_none());
    }

    #[test]
    fn held_out_configurations_are_predicted_not_fitted() {
        let c = centre();
        let b = [0.001f64.ln(), 0.5, -0.5, 0.25, 0.8, 0.3];
        let fit_cfgs = [
            c,
            Factors { layers: 8.0, ..c },
            Factors {
                d_model: 128.0,
                ..c
            },
            Factors { experts: 32.0, ..c },
            Factors { lr: 1e-3, ..c },
            Factors {
                minibatches: 1.0,
                ..c
            },
        ];
        let held = Factors {
            layers: 12.0,
            lr: 3e-4,
            ..c
        };
        let mut p: Points = fit_cfgs
            .iter()
            .map(|f| {
                let v = BTreeMap::from([(7, f.predict(&b)), (8, f.predict(&b))]);
                ("fit".to_string(), *f, false, v)
            })
            .collect();
        // Measured at twice the law's value: the held-out error is ln 2, and the held-out
        // point does not move the fit.
        let off = BTreeMap::from([(7, 2.0 * held.predict(&b)), (8, 2.0 * held.predict(&b))]);
        p.push(("held".to_string(), held, true, off));
        let f = fits(&p);
        assert_eq!(f.len(), 2);
        for (g, w) in f[&7].iter().zip(&b) {
            assert!((g - w).abs() < 1e-9);
        }
        let e = holdout_error(&p, &f);
        assert!((e[&7] - 2f64.ln()).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn tokens_follow_routers_for_independent_layers() {
        assert_eq!(tokens_from_routers(0.0, 48.0), 0.0);
        assert!((tokens_from_routers(0.1, 2.0) - 0.19).abs() < 1e-12);
        // The R3 paper's ~10% of routers over 48 layers: 99.4% of tokens.
        assert!((tokens_from_routers(0.1, 48.0) - 0.9936).abs() < 1e-4);
    }
}
