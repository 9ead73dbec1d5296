//! The log of the routes a generation used (read back per forward, or kept on the device and
//! read once at the end), and where a generation keeps what its forwards make.

use crate::model::NO_ROUTE;
use crate::util::tensors::to_vec;
use burn::tensor::{Int, Tensor};

/// The ids a forward used per MoE layer: read back (`[tokens · k]` each), or still on the
/// device (`[tokens, k]` each, [`ForwardOptions::routes_on_device`]).
pub(super) enum Used {
    Host(Vec<Vec<u16>>),
    Device(Vec<Tensor<2, Int>>),
}

/// Where a generation keeps what its forwards make: the last logits (for
/// [`super::pick_on_device`]) and the routes (read once, at the end).
#[derive(Clone, Copy, Debug)]
pub(super) struct OnDevice {
    pub logits: bool,
    pub routes: bool,
}

/// The rows, positions and active flags of one forward's tokens.
type Where = (Vec<usize>, Vec<usize>, Vec<bool>);

/// The routes a generation used, as (row, position, k ids) per layer; laid out at the end.
/// Routes left on the device wait, with their rows and positions, for one read back of all of
/// them ([`RouteLog::into_layout`]).
pub(super) struct RouteLog {
    k: usize,
    layers: Vec<Vec<(usize, usize, Vec<u16>)>>,
    on_device: Vec<(Vec<Tensor<2, Int>>, Where)>,
}

impl RouteLog {
    pub(super) fn new(k: usize) -> Self {
        RouteLog {
            k,
            layers: Vec::new(),
            on_device: Vec::new(),
        }
    }

    /// Record the used ids of the active tokens of one forward, given each token's row and
    /// position.
    pub(super) fn record(
        &mut self,
        used: Used,
        rows: &[usize],
        positions: &[usize],
        active: &[bool],
    ) {
        match used {
            Used::Host(ids) => self.record_host(&ids, rows, positions, active),
            Used::Device(ids) => self
                .on_device
                .push((ids, (rows.to_vec(), positions.to_vec(), active.to_vec()))),
        }
    }

    fn record_host(
        &mut self,
        used: &[Vec<u16>],
        rows: &[usize],
        positions: &[usize],
        active: &[bool],
    ) {
        let k = self.k;
        if self.layers.len() < used.len() {
            self.layers.resize_with(used.len(), Vec::new);
        }
        for (l, ids) in used.iter().enumerate() {
            for (i, ((&row, &pos), &a)) in rows.iter().zip(positions).zip(active).enumerate() {
                if a {
                    self.layers[l].push((row, pos, ids[i * k..(i + 1) * k].to_vec()));
                }
            }
        }
    }

    /// The routes still on the device, read back in one buffer and recorded.
    fn read_back(&mut self) {
        let pending = std::mem::take(&mut self.on_device);
        let all: Vec<Tensor<2>> = (pending.iter())
            .flat_map(|(ids, _)| ids.iter().map(|t| t.clone().float()))
            .collect();
        if all.is_empty() {
            return;
        }
        let flat = to_vec(Tensor::cat(all, 0));
        let mut at = 0;
        for (ids, (rows, positions, active)) in pending {
            let used: Vec<Vec<u16>> = (ids.iter())
                .map(|t| {
                    let n = t.dims()[0] * self.k;
                    at += n;
                    flat[at - n..at].iter().map(|&e| e as u16).collect()
                })
                .collect();
            self.record_host(&used, &rows, &positions, &active);
        }
    }

    /// Per layer `[b · seq, k]` in the batch layout, `NO_ROUTE` where nothing was routed.
    pub(super) fn into_layout(mut self, b: usize, seq: usize) -> Vec<Vec<u16>> {
        self.read_back();
        let k = self.k;
        self.layers
            .into_iter()
            .map(|entries| {
                let mut r = vec![NO_ROUTE; b * seq * k];
                for (row, pos, ids) in entries {
                    r[(row * seq + pos) * k..(row * seq + pos + 1) * k].copy_from_slice(&ids);
                }
                r
            })
            .collect()
    }
}

/// A forward's used ids: its device routes when they stayed there, else its traces'.
pub(super) fn used_of(
    traces: Vec<crate::model::RoutingTrace>,
    device_routes: Vec<Tensor<2, Int>>,
    on_device: bool,
) -> Used {
    if on_device {
        Used::Device(device_routes)
    } else {
        Used::Host(traces.into_iter().map(|t| t.used).collect())
    }
}
