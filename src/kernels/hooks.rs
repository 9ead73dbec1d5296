//! What a test needs to hold one kernel path against the other: counts of the fast nodes run,
//! and switches that turn one path off, all per thread, all scoped by a guard.
//!
//! Counts are kept on the thread that ran the node, so a test reads only what its own forwards
//! did: a sibling test running in parallel cannot raise them. A test that proves a fast node ran
//! takes a [`Counts`] scope, runs, and asserts the count moved; its negative twin runs the same
//! under [`force_reference`] and asserts it stayed at 0 — so a node that silently fell back to
//! the reference would fail the first, not compare the reference with itself and pass.
//!
//! Switches are set by a [`Switch`] guard and restored when it drops, a panic's unwinding
//! included; they nest.

use std::cell::Cell;

crate::named_enum! {
    /// A fast node whose runs are counted ([`Counts`]).
    pub enum Node ("kernel node") {
        /// The attention core with q, k, v given (a graph with a cache).
        AttnCore = "attn_core",
        /// RoPE, the split of the extended projection and the core as one node.
        AttnQkv = "attn_qkv",
        /// The core over a host key/value cache (generation).
        AttnCached = "attn_cached",
        /// The core over the compact rows of groups that share a prefix.
        AttnShared = "attn_shared",
        /// The extended QKV projection computing its first three blocks.
        Projection = "projection",
        /// The extended QKV weights built by moving and negating instead of multiplying.
        ExtendQkv = "extend_qkv",
        /// The fused expert node with a graph.
        FusedExperts = "fused_experts",
        /// The fused expert products without a graph.
        PlainExperts = "plain_experts",
        /// The SwiGLU product node with a graph.
        SiluNode = "silu_node",
        /// `silu(a)·b` on the host without a graph.
        SiluHost = "silu_host",
        /// RMS norm in one host pass.
        RmsNorm = "rms_norm",
        /// `e^x` on the host.
        Exp = "exp",
        /// Per-tensor sums of squares on the host.
        Squares = "squares",
        /// A forward that computed the positions a group's rows share once.
        SharedForward = "shared_forward",
        /// Padding queries the attention node left out (counted per query, not per call).
        QueriesLeftOut = "queries_left_out",
        /// Finished rows a decoding step left out (counted per row).
        RowsLeftOut = "rows_left_out",
    }
}

crate::named_enum! {
    /// A path switch for one comparison, set while its [`Guard`] lives.
    pub enum Switch ("kernel switch") {
        /// Every op takes its reference form (plain burn tensor ops), on any device.
        Reference = "reference",
        /// The attention node computes every query, padding ones included.
        EveryQuery = "every_query",
        /// Forwards never compute shared positions once ([`Node::SharedForward`]).
        FullForwards = "full_forwards",
        /// Decoding steps never leave finished rows out ([`Node::RowsLeftOut`]).
        EveryRow = "every_row",
    }
}

const NODES: usize = Node::ALL.len();
const SWITCHES: usize = Switch::ALL.len();

thread_local! {
    static COUNTS: [Cell<usize>; NODES] = const { [const { Cell::new(0) }; NODES] };
    static DEPTH: [Cell<usize>; SWITCHES] = const { [const { Cell::new(0) }; SWITCHES] };
}

/// Count `n` runs of `node` on this thread.
pub fn count(node: Node, n: usize) {
    COUNTS.with(|c| {
        let c = &c[node as usize];
        c.set(c.get() + n)
    });
}

/// The runs of `node` on this thread since it started.
fn total(node: Node) -> usize {
    COUNTS.with(|c| c[node as usize].get())
}

/// The counts of this thread from the moment it is taken ([`counts`]).
pub struct Counts {
    start: [usize; NODES],
}

/// A counts scope: what this thread's nodes ran from now on.
pub fn counts() -> Counts {
    Counts {
        start: std::array::from_fn(|i| total(Node::ALL[i])),
    }
}

impl Counts {
    /// Runs of `node` on this thread since the scope was taken.
    pub fn of(&self, node: Node) -> usize {
        total(node) - self.start[node as usize]
    }

    /// Runs of every node since the scope was taken, summed (0: nothing fast ran).
    pub fn any(&self) -> usize {
        Node::ALL.iter().map(|&n| self.of(n)).sum()
    }
}

/// A switch held on this thread until dropped.
#[must_use = "the switch holds only while the guard lives"]
pub struct Guard {
    switch: Switch,
    /// Not `Send`: a switch belongs to the thread that set it.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Turn `switch` on for this thread while the returned guard lives.
pub fn set(switch: Switch) -> Guard {
    DEPTH.with(|d| {
        let d = &d[switch as usize];
        d.set(d.get() + 1)
    });
    Guard {
        switch,
        _thread: std::marker::PhantomData,
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        DEPTH.with(|d| {
            let d = &d[self.switch as usize];
            d.set(d.get() - 1)
        });
    }
}

/// Every op on this thread takes its reference form while the guard lives.
pub fn force_reference() -> Guard {
    set(Switch::Reference)
}

/// Whether `switch` is on for this thread.
pub fn is_on(switch: Switch) -> bool {
    DEPTH.with(|d| d[switch as usize].get() > 0)
}

/// `f` with `switch` on (a guard for one call).
pub fn with<T>(switch: Switch, f: impl FnOnce() -> T) -> T {
    let _g = set(switch);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_this_threads_and_switches_restore_on_panic() {
        let c = counts();
        count(Node::Exp, 2);
        std::thread::spawn(|| count(Node::Exp, 5)).join().unwrap();
        assert_eq!(
            c.of(Node::Exp),
            2,
            "another thread's runs are not this thread's"
        );
        assert_eq!(c.any(), 2);
        let caught = std::panic::catch_unwind(|| {
            let _g = force_reference();
            assert!(is_on(Switch::Reference));
            panic!("inside");
        });
        assert!(caught.is_err());
        assert!(!is_on(Switch::Reference), "the guard restored the switch");
        let outer = set(Switch::EveryQuery);
        with(Switch::EveryQuery, || assert!(is_on(Switch::EveryQuery)));
        assert!(
            is_on(Switch::EveryQuery),
            "nested guards keep the outer one"
        );
        drop(outer);
        assert!(!is_on(Switch::EveryQuery));
    }
}
