//! The gather of the fused expert node's routed rows (`mod.rs`), as an autodiff node of
//! its own whose backward adds the input's gradient in the sparse path's order.

use super::groups::Groups;
use crate::kernels::flex::host_mm::host;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use std::sync::Arc;

type Ad = Autodiff<Flex, NoCheckpointing>;

/// The gather of the routed rows, `x` `[t, d]` → `xg` `[n, d]` in the groups' order, as its own
/// node so that the input's gradient is added up as the sparse path adds it, bit for bit.
///
/// In the sparse path every expert's `select` of `x` returns a zeroed `[t, d]` buffer with its
/// rows' gradients in it, and burn adds it to what `x` already holds. The router's product sits
/// at the same graph depth as those selects and burn's traversal reaches it first (through the
/// gates), and the selects come last expert first (the concatenation's parents are popped from
/// a stack). So each row's gradient is the router's, plus its experts' contributions from the
/// highest expert id down. This node sits at that depth too, after the router's product, and
/// adds the rows in that order into the gradient `x` holds, in place: no `[t, d]` buffer per
/// expert. Only where `x` is a leaf that keeps its gradient (tests) is the held buffer shared;
/// there each expert's rows are registered as the sparse path registers them.
#[derive(Debug)]
struct GatherBackward;

#[derive(Clone, Debug)]
struct GatherState {
    g: Arc<Groups>,
    d: usize,
}

impl Backward<Flex, 1> for GatherBackward {
    type State = GatherState;

    fn backward(self, ops: Ops<GatherState, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dxg = grads.consume::<Flex>(&ops.node);
        let [Some(parent)] = &ops.parents else {
            return;
        };
        let (g, d) = (&*ops.state.g, ops.state.d);
        let dxg = host(&dxg);
        let add_rows = |dx: &mut [f32], e: usize| {
            for r in g.start[e]..g.start[e + 1] {
                let tok = g.tok[r];
                for (o, &v) in dx[tok * d..(tok + 1) * d]
                    .iter_mut()
                    .zip(&dxg[r * d..(r + 1) * d])
                {
                    *o += v;
                }
            }
        };
        let experts = (0..g.experts())
            .rev()
            .filter(|&e| g.start[e] < g.start[e + 1]);
        // This node's own requirement is "needed in backward"; a parent with the same one is
        // an intermediate whose held gradient `consume` hands over (a leaf's stays held).
        // The router's product has registered its part before this node runs (same depth,
        // earlier in the traversal), so there is a held gradient to take.
        if parent.requirement == ops.node.requirement {
            let mut held = grads.consume::<Flex>(parent);
            if held.layout().contiguous_offsets().is_none() {
                held = held.to_contiguous();
            }
            let (a, b) = held
                .layout()
                .contiguous_offsets()
                .expect("a contiguous gradient");
            // Copied first only if something else still shares the buffer.
            let dx = &mut held.storage_mut::<f32>()[a..b];
            experts.for_each(|e| add_rows(dx, e));
            grads.register::<Flex>(parent.id, held);
        } else {
            for e in experts {
                let mut dx = vec![0.0; g.t * d];
                add_rows(&mut dx, e);
                let dx = FlexTensor::from_data(TensorData::new(dx, [g.t, d]));
                grads.register::<Flex>(parent.id, dx);
            }
        }
    }
}

/// The rows of `x` `[t, d]` in the groups' order, `[n, d]`.
pub(super) fn gather_rows(x: &FlexTensor, g: &Groups, d: usize) -> FlexTensor {
    let xh = host(x);
    let n = g.tok.len();
    // Row by row into an unzeroed buffer: every value is one of `x`'s.
    let mut xg = Vec::with_capacity(n * d);
    for &tok in &g.tok {
        xg.extend_from_slice(&xh[tok * d..(tok + 1) * d]);
    }
    FlexTensor::from_data(TensorData::new(xg, [n, d]))
}

/// `x`'s routed rows through the gather node; `None` when `x` is not an autodiff flex tensor.
pub(super) fn gather(x: Tensor<2>, g: &Arc<Groups>) -> Option<Tensor<2>> {
    let d = x.dims()[1];
    let p = x.try_into_primitive::<Ad>().ok()?;
    let guard = p.node();
    let out = gather_rows(&p.into_primitive(), g, d);
    let state = GatherState { g: g.clone(), d };
    let y = match GatherBackward
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(state, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Ad>(y))
}
