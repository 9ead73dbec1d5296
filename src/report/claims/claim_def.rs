//! What defines a claim: its heading, where its endpoints come from, its context line.

use super::compare::RegimeData;
use crate::report::endpoints::Endpoint;
use crate::report::regime::Regime;
use anyhow::Result;

/// Where a claim's endpoints come from.
pub enum Scope {
    /// Each regime on its own.
    PerRegime(fn(&RegimeData, &mut Vec<Endpoint>) -> Result<()>),
    /// All regimes together (a sweep's fit, regimes against their controls); their endpoints
    /// follow every per-regime one.
    AcrossRegimes(fn(&[Regime]) -> Vec<Endpoint>),
}

/// A claim's definition: what the report prints above its table, how its endpoints are
/// declared, and the line each regime writes under the table.
pub struct ClaimDef {
    pub heading: &'static str,
    pub scope: Scope,
    pub context: fn(&mut String, &Regime) -> Result<()>,
}
