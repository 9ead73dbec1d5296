//! `silu(a1) ⊙ a3` as one autodiff node on the CPU backend, with the exp-free backward of
//! [`super::moe::silu_mul`]: `c3 = silu(a1)`, `c1 = a3 ⊙ silu'(a1)` are computed once in the
//! forward ([`crate::kernels::flex::fastmath::silu_mul_consts`]), the value is `a3 ⊙ c3`, and the backward is
//! `da1 = dy ⊙ c1`, `da3 = dy ⊙ c3`.
//!
//! The tensor form it replaces, `(a1 − sg(a1)) ⊙ c1 + a3 ⊙ c3`, has the same value and the same
//! gradients bitwise (its first term is exactly zero; its mul, sub and add nodes pass exactly
//! `dy ⊙ c1` and `dy ⊙ c3` back), but costs four graph nodes, their buffers and a copy of each
//! input; this node reads its inputs in place and writes three buffers.

use super::host_mm::host;
use crate::kernels::flex::fastmath::silu_mul_consts_vec;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use std::sync::Arc;

type Ad = Autodiff<Flex, NoCheckpointing>;

#[derive(Debug)]
struct SiluMulBackward;

/// The backward's constants, `[c1, c3]`, and the shape.
#[derive(Clone, Debug)]
struct Consts {
    c: [Arc<Vec<f32>>; 2],
    dims: [usize; 2],
}

impl Backward<Flex, 2> for SiluMulBackward {
    type State = Consts;

    fn backward(self, ops: Ops<Consts, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let dy = host(&dy);
        for (parent, c) in ops.parents.into_iter().zip(&ops.state.c) {
            if let Some(node) = parent {
                let g: Vec<f32> = dy.iter().zip(c.iter()).map(|(&d, &c)| d * c).collect();
                let shape = ops.state.dims.to_vec();
                grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(g, shape)));
            }
        }
    }
}

/// `silu(a1) ⊙ a3` as one node, where both are autodiff flex tensors without checkpointing;
/// `None` otherwise (the caller then builds the tensor form).
pub fn silu_mul_tracked(a1: &Tensor<2>, a3: &Tensor<2>) -> Option<Tensor<2>> {
    let dims = a1.dims();
    let p1 = a1.clone().try_into_primitive::<Ad>().ok()?;
    let p3 = a3.clone().try_into_primitive::<Ad>().ok()?;
    let guards: [NodeGuard; 2] = [p1.node(), p3.node()];
    let (x1, x3) = (p1.into_primitive(), p3.into_primitive());
    let (x1, x3) = (host(&x1), host(&x3));
    let (c1, c3) = silu_mul_consts_vec(&x1, &x3);
    let y: Vec<f32> = x3.iter().zip(&c3).map(|(&b, &c)| b * c).collect();
    let out = FlexTensor::from_data(TensorData::new(y, dims));
    let y = match SiluMulBackward
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(
            Consts {
                c: [Arc::new(c1), Arc::new(c3)],
                dims,
            },
            out,
        ),
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Ad>(y))
}
