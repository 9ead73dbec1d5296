//! The CPU backend's (burn-flex) fast forms of the kernels: hand-written nodes on host slices,
//! each entered only through [`crate::kernels`]'s surface, which chooses it over the reference
//! form. Each returns `None` where it does not apply (a graph it does not support, a shape off
//! the paths [`crate::kernels::gemm_paths`] names), and the surface takes the reference.

//!
//! [`fastmath`], [`scratch`] and [`transpose`] are plain Rust (vectorisable `exp`, sigmoid, a lane
//! transpose, and the `wide!` dispatch the optimiser's host update also uses), built with or
//! without the backend.

#[cfg(feature = "flex")]
pub mod attn_core;
pub mod fastmath;
#[cfg(feature = "flex")]
pub mod fused;
#[cfg(feature = "flex")]
pub mod host_mm;
#[cfg(feature = "flex")]
pub mod host_ops;
pub mod scratch;
#[cfg(feature = "flex")]
pub mod silu_node;
#[cfg(feature = "flex")]
pub mod squares;
pub mod transpose;
