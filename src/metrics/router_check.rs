//! The router check's columns (`rl.router_check`, [`crate::rl::engine_router`]): in the steps
//! frame pooled over the MoE layers, in the layers frame per layer on minibatch 0's rows.

use crate::rl::engine_router::RouterCheck;

/// The three columns, in schema order, of [`RouterCheck::shares`].
pub const COLUMNS: [&str; 3] = [
    "router_disagree_frac",
    "router_bf16_tie_frac",
    "router_bf16_tie_flip_frac",
];

/// The steps frame's shares: the layers' counts summed (null when the step ran no check).
pub fn pooled_shares(layers: &[RouterCheck]) -> [Option<f64>; 3] {
    if layers.is_empty() {
        return [None; 3];
    }
    let mut pooled = RouterCheck::default();
    layers.iter().for_each(|c| pooled.add(c));
    pooled.shares()
}

/// Layer `l`'s shares on minibatch 0's row (null on the others, and without a check).
pub fn layer_shares(layers: &[RouterCheck], l: usize, minibatch: usize) -> [Option<f64>; 3] {
    match layers.get(l).filter(|_| minibatch == 0) {
        Some(c) => c.shares(),
        None => [None; 3],
    }
}
