//! Every rule that keeps driftlab's numbers bitwise while its fast paths change which rows a
//! product runs on, named once with its reason. No threshold literal of these rules appears
//! anywhere else: a bare `65` or `512` in a sampler is a trap for the next person who changes a
//! batch.
//!
//! The facts they rest on, all about the `gemm` crate burn-flex multiplies with (and burn-flex's
//! own row sums):
//! - **The general path.** An output of a product on gemm's general path is one chain of fused
//!   multiply-adds over the inner dimension, in order, from +0, whatever the number of rows and
//!   columns — so a row's values do not depend on the other rows of its product *as long as
//!   every product stays on that path*. A product leaves it when it is too small: one output
//!   column (gemm computes the transposed product of a row-major output, so one *row* of ours)
//!   is its vector path, and at most 16 rows or few outputs can take its small-product kernels,
//!   which add in another order.
//! - **One block.** An inner dimension up to 512 is one k-block for every shape; beyond it gemm
//!   blocks the inner dimension by a rule that differs for products of at most 64 rows and 64
//!   columns.
//! - **Enough outputs.** The small kernels apply to products of at most 256 outputs; more than
//!   256 keeps the general path.

/// At least this many rows keep a token-wise product off gemm's vector path (one row of a
/// row-major output is one column of the transposed product gemm computes).
pub const FEWEST_ROWS: usize = 2;

/// A product with at most this many outputs may take gemm's small-product kernels, which add
/// in another order; more keeps the general path.
pub const SMALL_PRODUCT_OUTPUTS: usize = 256;

/// Inner dimensions up to this are one k-block for every shape ("one block").
pub const ONE_BLOCK_INNER: usize = 512;

/// Beyond [`ONE_BLOCK_INNER`], products of at most this many rows (and columns) are blocked by
/// another rule.
pub const SMALL_BLOCKING_ROWS: usize = 64;

/// Rows at which gemm may take its small-product kernels for an expert's products.
pub const SMALL_KERNEL_ROWS: usize = 16;

/// Whether a product of `rows` rows with `outputs` outputs per row (its narrowest) stays on
/// gemm's general path, so each row keeps the bits it has in any larger product on it.
pub fn keeps_general_path(rows: usize, outputs: usize) -> bool {
    rows >= FEWEST_ROWS && rows.saturating_mul(outputs) > SMALL_PRODUCT_OUTPUTS
}

/// Whether an inner dimension is one k-block for every shape.
pub fn one_block(inner: usize) -> bool {
    inner <= ONE_BLOCK_INNER
}

/// The rows an expert's products run on when its `m` rows stand for `full` rows of a larger
/// batch: `m`, unless gemm would take another path with `m` rows than with `full` (at most
/// [`SMALL_KERNEL_ROWS`] rows can mean its vector or small-product kernels), then
/// `min(full, SMALL_KERNEL_ROWS + 1)`.
pub fn padded_rows(m: usize, full: usize) -> usize {
    if full > m && m <= SMALL_KERNEL_ROWS {
        full.min(SMALL_KERNEL_ROWS + 1)
    } else {
        m
    }
}

/// The fewest rows a decoding shard of `n` rows keeps when it leaves finished rows out, so
/// every product of the step keeps the path (and blocking) it takes with all rows: with an
/// inner dimension beyond one block, a shard of more than [`SMALL_BLOCKING_ROWS`] rows keeps
/// more than that many; otherwise [`FEWEST_ROWS`] (or all, if fewer).
pub fn decode_row_floor(n: usize, long_inner: bool) -> usize {
    if long_inner && n > SMALL_BLOCKING_ROWS {
        SMALL_BLOCKING_ROWS + 1
    } else {
        n.min(FEWEST_ROWS)
    }
}

/// The fewest queries of an attention span over `kv` keys whose products take gemm's general
/// path: at least 3 rows (the backward sums over them) and more than
/// [`SMALL_PRODUCT_OUTPUTS`] scores.
pub fn fewest_queries(kv: usize) -> usize {
    3.max(SMALL_PRODUCT_OUTPUTS / kv + 1)
}

/// Whether an attention of `s` queries over `kv` keys is small enough that the node computes
/// every query (leaving padding queries out could move it off the general path).
pub fn every_query_needed(s: usize, kv: usize) -> bool {
    s * kv <= SMALL_PRODUCT_OUTPUTS
}

/// Inner dimensions up to this take gemm's small-inner kernels rather than the general path.
pub const TINY_INNER: usize = 2;

/// Whether the extended QKV projection of `n` rows of width `d` (its inner dimension) stays
/// on the general path with three of its five blocks as with all five, so computing the three
/// alone gives the full product's bits.
pub fn projection_general(n: usize, d: usize) -> bool {
    n >= FEWEST_ROWS && n * 3 * d > SMALL_PRODUCT_OUTPUTS && d > TINY_INNER
}

/// Whether a shared-prefix forward of `s` positions has enough scores per row to be worth it
/// and to keep the attention products on the general path.
pub fn sharing_worthwhile(s: usize) -> bool {
    s * s > SMALL_PRODUCT_OUTPUTS
}

/// burn-flex sums a contiguous f32 tensor of at least this many values in parallel chunks (in
/// another order); smaller tensors are summed by its eight-accumulator kernel, which the host
/// sums of squares reproduce.
pub const PARALLEL_SUM: usize = 4 * 1024 * 1024;

/// Products of at least this many multiply-adds run on gemm's thread pool.
pub const PARALLEL_PRODUCT: usize = 1024 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_keep_their_documented_values() {
        assert!(!keeps_general_path(1, 10_000));
        assert!(!keeps_general_path(2, 128));
        assert!(keeps_general_path(2, 129));
        assert_eq!(padded_rows(3, 40), 17);
        assert_eq!(padded_rows(3, 5), 5);
        assert_eq!(padded_rows(20, 40), 20);
        assert_eq!(decode_row_floor(100, true), 65);
        assert_eq!(decode_row_floor(100, false), 2);
        assert_eq!(decode_row_floor(1, false), 1);
        assert_eq!(fewest_queries(8), 33);
        assert_eq!(fewest_queries(1000), 3);
        assert!(one_block(512) && !one_block(513));
    }
}
