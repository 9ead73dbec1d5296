//! The stability fixes: `[rl]` settings that weigh or mask the policy loss's tokens against the
//! rollout engine (TIS, IcePop, MIS, OPSM). Each fix is one file, `rl/fixes/<key>.rs`, holding
//! its settings, their checks, its weight or mask, the updates-frame column logging what it
//! masked, and its docs; [`stability_fixes!`] lists them once, and everything that reads the
//! fixes expands that list: [`RlConfig`](crate::rl::RlConfig)'s keys (parsing, defaults,
//! `config.json`) and its validation, the loss's weights ([`weigh`]), the updates frame's
//! columns ([`SHARES`], [`Masked::shares`]), `learn --fix` and `bench --rl`.
//!
//! # Adding a fix
//!
//! 1. A file `rl/fixes/<key>.rs`: its settings struct (`Serialize`, `Deserialize`,
//!    `#[serde(deny_unknown_fields, default)]`, `Default` = the paper's defaults) and its
//!    [`Fix`] impl: `validate`, `weigh` (multiply [`Weights::mask`] per token, or give an
//!    importance weight at both levels with [`Weights::ratio`]; return what it masked) and, when
//!    it masks, `SHARE`, its logged column; `ENGINE_RATIO = true` when its weight multiplies in
//!    the engine ratio π_old / π_engine.
//! 2. One line `<key>: <Settings>,` in [`stability_fixes!`].
//!
//! # How the weights reach the objectives
//!
//! Every fix that is on gives one detached weight per token; they multiply the objective's
//! per-token loss. The masking fixes' weights multiply into one mask weight per token
//! ([`Weights::mask`]): a sequence-level objective (GSPO, GMPO, GVPO) multiplies its
//! per-response loss by the mask's token mean over the response, which is what broadcasting a
//! sequence loss to its tokens and averaging them gives. An importance weight
//! ([`Weights::ratio`], TIS) comes at both levels and each objective takes its own: token-level
//! objectives the per-token one, sequence-level ones the per-response one. Masked tokens keep
//! their place in the loss's denominator, as in slime, TRL and verl's older `mask` mode
//! (current verl's rejection sampling removes them from it instead). A minibatch whose every
//! token is masked takes no optimizer step (its update row reads `applied = 0`, its reason is
//! kept, and the events frame gets an `all_masked` event) rather than stepping on the auxiliary
//! losses alone.
//!
//! # Stacking
//!
//! TIS, IcePop and MIS each weigh a token by the same engine ratio π_old / π_engine (TIS's
//! min(r, cap), IcePop's k inside its band, MIS's r inside its band): two of them on at once
//! multiply it in twice, correcting for the engine twice. [`check_stacking`] refuses such a
//! config at validation, naming the fixes and the reason, unless it declares
//! `allow_stacked_engine_ratio = true` ([`Fix::ENGINE_RATIO`] marks the fixes it counts).
//!
//! Notation: `logp_tis` is the ratios' π_old before any router shift (the trainer's recompute
//! with `old_logp = recompute`; the engine's own log-prob with `old_logp = rollout`, where every
//! engine ratio is 1 and nothing is masked or reweighted), `logp_mu` the engine's log-prob,
//! `logp` π_θ at the current parameters.

use anyhow::Result;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::TypeId;
use std::cell::OnceCell;

/// The registry of stability fixes: each fix's `[rl]` key and its settings type, defined in
/// `rl/fixes/<key>.rs`, in the order `config.json` writes them. `stability_fixes!(then)`
/// expands to `then! { key: Settings, … }`; this module, `RlConfig` and nothing else expand it.
macro_rules! stability_fixes {
    ($then:ident) => {
        $then! {
            tis: TisConfig,
            icepop: IcePopConfig,
            mis: MisConfig,
            opsm: OpsmConfig,
        }
    };
}
pub(crate) use stability_fixes;

/// The fixes' modules, their keys and their logged columns, from the registry.
macro_rules! declare {
    ($($key:ident: $fix:ident,)*) => {
        $(pub mod $key;)*
        pub use self::{$($key::$fix),*};

        /// The `[rl]` key of each fix, in registry order.
        pub const KEYS: [&str; COUNT] = [$(stringify!($key)),*];
        const SHARE_OF: [Option<Share>; COUNT] = [$(<$fix as Fix>::SHARE),*];

        /// Where fix `F` sits in the registry.
        fn position<F: Fix>() -> usize {
            [$(TypeId::of::<$fix>()),*]
                .iter()
                .position(|&t| t == TypeId::of::<F>())
                .expect("every Fix is registered")
        }
    };
}
/// Registered fixes.
pub const COUNT: usize = {
    macro_rules! count {
        ($($key:ident: $fix:ident,)*) => { [$(stringify!($key)),*].len() };
    }
    stability_fixes!(count)
};
stability_fixes!(declare);

/// A stability fix: its settings are an `[rl]` table, off when the key is absent.
pub trait Fix:
    Clone + std::fmt::Debug + PartialEq + Default + Serialize + DeserializeOwned + 'static
{
    /// `config.json` writes the key as `null` when the fix is off (TIS, whose key it has always
    /// written); every other fix's key is left out when off, so older configs read the same.
    const NULL_WHEN_OFF: bool = false;
    /// The updates frame's column logging the share of what it masked (`None`: it masks nothing).
    const SHARE: Option<Share> = None;
    /// Whether its weight multiplies in the engine ratio π_old / π_engine (TIS's truncated
    /// ratio, IcePop's and MIS's ratio inside their bands): two such fixes on at once weigh a
    /// token by that ratio twice, which [`check_stacking`] refuses unless declared.
    const ENGINE_RATIO: bool = false;
    /// The checks of its settings, with an error naming the key.
    fn validate(&self) -> Result<()>;
    /// Multiply its weights into `w`; returns what it masked, tokens `[n_tok]` or responses
    /// `[R]` (`None` when it masks nothing).
    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>>;
}

/// The object-safe face of a [`Fix`] that is on, as the trainer iterates over them.
pub trait On {
    fn validate(&self) -> Result<()>;
    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>>;
    /// [`Fix::ENGINE_RATIO`].
    fn engine_ratio(&self) -> bool;
}

impl<F: Fix> On for F {
    fn validate(&self) -> Result<()> {
        Fix::validate(self)
    }
    fn engine_ratio(&self) -> bool {
        F::ENGINE_RATIO
    }
    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>> {
        Fix::weigh(self, batch, w)
    }
}

/// The fixes that are on (`on`, by registry position) may stack: at most one of them weighs
/// tokens by the engine ratio π_old / π_engine ([`Fix::ENGINE_RATIO`]: tis, icepop, mis), unless
/// the config declares the stacking (`allowed`: `[rl] allow_stacked_engine_ratio = true`). Two
/// of them multiply the same ratio into one token's weight (TIS's min(r, cap) times IcePop's or
/// MIS's r, or IcePop's k times MIS's r), so the product corrects for the engine twice.
pub fn check_stacking(on: &[Option<&dyn On>; COUNT], allowed: bool) -> Result<()> {
    let stacked: Vec<&str> = (KEYS.iter().zip(on))
        .filter(|(_, f)| f.is_some_and(|f| f.engine_ratio()))
        .map(|(&k, _)| k)
        .collect();
    anyhow::ensure!(
        stacked.len() < 2 || allowed,
        "the stability fixes {} are on together, and each weighs a token by the same engine \
         ratio π_old / π_engine (exp(logp_old − logp_engine)): their weights multiply, so the \
         product corrects for the engine twice (e.g. tis's min(r, cap) × icepop's r ≈ r²). Keep \
         one of them, or declare the stacking with `allow_stacked_engine_ratio = true` in the \
         same `rl` table (`learn --allow-stacked-engine-ratio`)",
        stacked.join(" and ")
    );
    Ok(())
}

/// `serde`'s `skip_serializing_if` of every fix's field in `RlConfig` (see [`Fix::NULL_WHEN_OFF`]).
pub fn unwritten<F: Fix>(f: &Option<F>) -> bool {
    f.is_none() && !F::NULL_WHEN_OFF
}

/// A column of the updates frame: the share of the minibatch's tokens or responses a fix masked.
#[derive(Clone, Copy, Debug)]
pub struct Share {
    pub column: &'static str,
    pub doc: &'static str,
}

const N_SHARES: usize = {
    let (mut i, mut n) = (0, 0);
    while i < COUNT {
        if SHARE_OF[i].is_some() {
            n += 1;
        }
        i += 1;
    }
    n
};

/// The logged columns of the fixes that mask, in registry order (the updates frame's schema).
pub const SHARES: [Share; N_SHARES] = {
    let mut out = [Share {
        column: "",
        doc: "",
    }; N_SHARES];
    let (mut i, mut n) = (0, 0);
    while i < COUNT {
        if let Some(s) = SHARE_OF[i] {
            out[n] = s;
            n += 1;
        }
        i += 1;
    }
    out
};

/// What a fix reads of one micro-batch: `n_tok` response tokens in `R` responses (the fields
/// of [`PolicyBatch`](crate::rl::loss::PolicyBatch) of the same names).
pub struct Batch<'a> {
    /// log π_old before any router shift, `[n_tok]`.
    pub logp_tis: &'a [f32],
    /// Log-probs the rollout engine recorded, `[n_tok]`.
    pub logp_mu: &'a [f32],
    /// Advantage of each response, `[R]`.
    pub adv: &'a [f32],
    /// Response index of each token, `[n_tok]`.
    pub seg: &'a [usize],
    /// Tokens per response, `[R]`, each ≥ 1.
    pub lens: &'a [usize],
    /// Reads log π_θ at the current parameters (a host copy), for the fixes that need it.
    read_logp: Box<dyn Fn() -> Vec<f32> + 'a>,
    logp: OnceCell<Vec<f32>>,
    engine: OnceCell<Vec<f64>>,
}

impl<'a> Batch<'a> {
    pub fn new(
        logp_tis: &'a [f32],
        logp_mu: &'a [f32],
        adv: &'a [f32],
        seg: &'a [usize],
        lens: &'a [usize],
        read_logp: Box<dyn Fn() -> Vec<f32> + 'a>,
    ) -> Self {
        Batch {
            logp_tis,
            logp_mu,
            adv,
            seg,
            lens,
            read_logp,
            logp: OnceCell::new(),
            engine: OnceCell::new(),
        }
    }
    pub fn n_tok(&self) -> usize {
        self.seg.len()
    }
    pub fn n_resp(&self) -> usize {
        self.lens.len()
    }
    /// log π_θ at the current parameters, `[n_tok]`: one host copy, made when first asked.
    pub fn logp(&self) -> &[f32] {
        self.logp.get_or_init(|| (self.read_logp)())
    }
    /// The engine log-ratio of each token, ln(π_old / π_engine) = logp_tis − logp_mu, `[n_tok]`.
    pub fn engine(&self) -> &[f64] {
        self.engine.get_or_init(|| {
            (self.logp_tis.iter())
                .zip(self.logp_mu)
                .map(|(o, m)| f64::from(o - m))
                .collect()
        })
    }
}

/// The fixes' detached weights over one micro-batch, as the objectives read them
/// ([`PolicyBatch::fixes`](crate::rl::loss::PolicyBatch::fixes)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    /// Product of the masking fixes' per-token weights, `[n_tok]`; `None` when none is on.
    pub mask: Option<Vec<f32>>,
    /// An importance weight against the engine at both levels; `None` when none is on.
    pub ratio: Option<Ratio>,
}

/// An importance weight per token, `[n_tok]`, for token-level objectives, and per response,
/// `[R]`, for sequence-level ones.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub tok: Vec<f32>,
    pub seq: Vec<f32>,
}

impl Weights {
    /// The mask weights, all 1 until a masking fix multiplies into them.
    pub fn mask(&mut self, n_tok: usize) -> &mut Vec<f32> {
        self.mask.get_or_insert_with(|| vec![1.0; n_tok])
    }
    /// Multiply an importance weight in (set it when it is the first).
    pub fn ratio(&mut self, tok: Vec<f32>, seq: Vec<f32>) {
        let times = |a: &mut Vec<f32>, b: Vec<f32>| a.iter_mut().zip(b).for_each(|(x, y)| *x *= y);
        match &mut self.ratio {
            Some(r) => {
                times(&mut r.tok, tok);
                times(&mut r.seq, seq);
            }
            None => self.ratio = Some(Ratio { tok, seq }),
        }
    }
    /// Every token's mask weight is 0 (the update is skipped).
    pub fn all_masked(&self) -> bool {
        self.mask
            .as_ref()
            .is_some_and(|m| m.iter().all(|&w| w == 0.0))
    }
}

/// The weights of `batch` from the fixes that are on (`on`, by registry position), applied in
/// registry order, and what each masked.
pub fn weigh(on: &[Option<&dyn On>; COUNT], batch: &Batch) -> (Weights, Masked) {
    let mut w = Weights::default();
    let mut masked = Masked::default();
    for (fix, m) in on.iter().zip(&mut masked.0) {
        if let Some(fix) = fix {
            *m = fix.weigh(batch, &mut w);
        }
    }
    (w, masked)
}

/// What each registered fix masked in one update, by registry position: tokens `[n_tok]` or
/// responses `[R]`; `None` for a fix that is off or masks nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Masked(pub [Option<Vec<bool>>; COUNT]);

impl Default for Masked {
    fn default() -> Self {
        Masked(std::array::from_fn(|_| None))
    }
}

impl Masked {
    /// What fix `F` masked.
    pub fn of<F: Fix>(&self) -> Option<&[bool]> {
        self.0[position::<F>()].as_deref()
    }
    /// Append a later micro-batch's masks (in row order).
    pub fn extend(&mut self, later: Masked) {
        for (acc, m) in self.0.iter_mut().zip(later.0) {
            if let Some(m) = m {
                acc.get_or_insert_with(Vec::new).extend(m);
            }
        }
    }
    /// (key, masked, total) of each fix that masked anything, in registry order.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, usize, usize)> + '_ {
        (KEYS.iter().zip(&self.0)).filter_map(|(&k, m)| {
            m.as_ref()
                .map(|m| (k, m.iter().filter(|&&x| x).count(), m.len()))
        })
    }
    /// The value of each of [`SHARES`]' columns: the share masked, `None` when the fix is off.
    pub fn shares(&self) -> Vec<(&'static str, Option<f64>)> {
        (SHARE_OF.iter().zip(&self.0))
            .filter_map(|(s, m)| {
                s.map(|s| {
                    let share = |v: &Vec<bool>| {
                        v.iter().filter(|&&x| x).count() as f64 / v.len().max(1) as f64
                    };
                    (s.column, m.as_ref().map(share))
                })
            })
            .collect()
    }
}

/// verl's `SAFETY_BOUND`: log-ratios are clamped to ±20 before `exp`.
pub const LOG_BOUND: f64 = 20.0;

/// Multiply each token's mask weight by its ratio exp(x) (x a log-ratio, clamped to ±20) when
/// `ln low ≤ x ≤ ln high`, set it to 0 otherwise (`low = 0` has no lower bound: ln 0 = −∞);
/// returns the tokens masked.
pub fn band(mask: &mut [f32], x: &[f64], low: f64, high: f64) -> Vec<bool> {
    x.iter()
        .zip(mask.iter_mut())
        .map(|(&x, w)| {
            let keep = x >= low.ln() && x <= high.ln();
            *w = if keep {
                *w * x.clamp(-LOG_BOUND, LOG_BOUND).exp() as f32
            } else {
                0.0
            };
            !keep
        })
        .collect()
}

/// The checks of a band `[low, high]` on an engine ratio (`what` names the key).
pub fn check_band(what: &str, low: f64, high: f64) -> Result<()> {
    anyhow::ensure!(
        low.is_finite() && high.is_finite() && low >= 0.0 && low < high,
        "{what}: need 0 <= low < high (got low {low}, high {high})"
    );
    anyhow::ensure!(
        low <= 1.0 && 1.0 <= high,
        "{what}: the band [low, high] = [{low}, {high}] must contain 1, or a run without any \
         mismatch would mask tokens"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
