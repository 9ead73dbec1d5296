//! Buffers a kernel writes in full before reading, kept uninitialised (behind `MaybeUninit`)
//! until it has.

use std::mem::MaybeUninit;

/// `len` floats for a kernel to write before anything reads them, without the zeroing pass
/// `vec![0.0; len]` would make: the buffers of the hand-written nodes are megabytes each,
/// allocated for every layer of every forward, so that pass (and the page faults it takes) was
/// a tenth of an experiment cell's step. The memory stays behind `MaybeUninit` until the kernel
/// has written it: it is written through [`Scratch::out`] ([`super::host_mm::gemm_to`], `write` per element,
/// the fastmath kernels' `MaybeUninit` outputs), read back only through [`written`] /
/// [`written_ref`] over what was written, and becomes a `Vec<f32>` only through
/// [`Scratch::written`] — each `unsafe` with the caller vouching for what was written.
pub struct Scratch(Box<[MaybeUninit<f32>]>);

impl Scratch {
    pub fn new(len: usize) -> Self {
        Scratch(Box::new_uninit_slice(len))
    }

    /// The storage, to write.
    pub fn out(&mut self) -> &mut [MaybeUninit<f32>] {
        &mut self.0
    }

    /// The floats, every one written.
    ///
    /// # Safety
    /// Every element was written.
    pub unsafe fn written(self) -> Vec<f32> {
        // SAFETY: every element is initialised (the caller's word); `MaybeUninit<f32>` has
        // `f32`'s layout.
        unsafe { self.0.assume_init().into_vec() }
    }
}

/// `x` as floats.
///
/// # Safety
/// Every element of `x` was written.
pub unsafe fn written(x: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: initialised (the caller's word); same layout.
    unsafe { &mut *(x as *mut [MaybeUninit<f32>] as *mut [f32]) }
}

/// `x` as floats, read only.
///
/// # Safety
/// Every element of `x` was written.
pub unsafe fn written_ref(x: &[MaybeUninit<f32>]) -> &[f32] {
    // SAFETY: initialised (the caller's word); same layout.
    unsafe { &*(x as *const [MaybeUninit<f32>] as *const [f32]) }
}
