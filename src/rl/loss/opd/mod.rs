//! On-policy distillation (OPD): the student samples, a frozen teacher scores what it sampled.
//! Three objectives, `gvpd`, `opd_pg` and `opd_kl` in the algorithm registry, each a pure
//! function of log-probs or logits with an `objective` that reads them from a
//! [`super::PolicyBatch`] carrying the teacher's side ([`super::TeacherBatch`], filled by the
//! π_old pass from `rl.teacher`, see [`crate::rl::teacher`]). The sources, their commits and
//! the checked test vectors are in `docs/opd_sources.md`.
//!
//! - [`gvpd`]: GVPO's squared loss with the teacher as the implicit reward's anchor (GVPO++),
//!   its length-weighted family, and teacher-anchored RL through GVPO itself.
//! - [`pg`]: token-level policy-gradient OPD (tinker-cookbook, slime): the per-token reward
//!   `−λ(log π_old − log π_T)` added to the advantage, importance-sampled or PPO-clipped.
//! - [`jsd`]: the full-vocabulary generalised Jensen–Shannon divergence of TRL's distillation
//!   trainers (β = 1 reverse KL, β = 0 forward KL), a direct (not policy-gradient) loss.
//!
//! `logp_teacher` is `[n_tok]`, aligned with [`super::PolicyBatch`]'s tokens: the teacher's
//! log-probability of each sampled response token, without graph.

pub mod gvpd;
pub mod jsd;
pub mod pg;

pub use gvpd::{GvpdConfig, teacher_anchored};
pub use jsd::OpdKlConfig;
pub use pg::{OpdPgConfig, OpdStudent, PgForm};
