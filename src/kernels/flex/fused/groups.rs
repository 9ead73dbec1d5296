//! The routed (token, slot) pairs of a layer grouped by expert: the order in which the fused
//! expert node and its gather node visit the rows.

/// The routed (token, slot) pairs grouped by expert: rows `start[e]..start[e + 1]`.
#[derive(Debug)]
pub struct Groups {
    pub(super) t: usize,
    pub(super) k: usize,
    pub(super) tok: Vec<usize>,
    pub(super) slot: Vec<usize>,
    pub(super) start: Vec<usize>,
}

impl Groups {
    /// From the `used` expert ids `[t·k]` of the `active` tokens.
    pub fn new(used: &[u16], active: &[bool], n_experts: usize, k: usize) -> Self {
        let t = active.len();
        let mut count = vec![0usize; n_experts + 1];
        for tok in (0..t).filter(|&i| active[i]) {
            for j in 0..k {
                count[used[tok * k + j] as usize + 1] += 1;
            }
        }
        for e in 0..n_experts {
            count[e + 1] += count[e];
        }
        let start = count.clone();
        let n = start[n_experts];
        let (mut tok_of, mut slot_of) = (vec![0; n], vec![0; n]);
        for tok in (0..t).filter(|&i| active[i]) {
            for j in 0..k {
                let e = used[tok * k + j] as usize;
                tok_of[count[e]] = tok;
                slot_of[count[e]] = tok * k + j;
                count[e] += 1;
            }
        }
        Groups {
            t,
            k,
            tok: tok_of,
            slot: slot_of,
            start,
        }
    }

    pub(super) fn experts(&self) -> usize {
        self.start.len() - 1
    }
}
