//! Rounding to bfloat16 precision, kept in f32: what a lower-precision rollout engine does to
//! its weights, residual stream and (`router_precision`) router logits.

use burn::tensor::Tensor;

/// Round a float to the nearest bfloat16 value (ties to even), kept in f32.
pub fn bf16_round(v: f32) -> f32 {
    if !v.is_finite() {
        return v;
    }
    let b = v.to_bits();
    let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) & 0xFFFF_0000;
    f32::from_bits(rounded)
}

/// Round every element of `x` to bfloat16 precision (through the host; rollout only).
pub fn round_bf16<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let dims = x.dims();
    let device = x.device();
    let v: Vec<f32> = super::tensors::to_vec(x)
        .into_iter()
        .map(bf16_round)
        .collect();
    super::tensors::floats(v, dims, &device)
}
