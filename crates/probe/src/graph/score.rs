//! Per-node data and the one scoring function.
//!
//! Everything is stored as parallel arrays indexed like the compiled topology, each holding only
//! what one step reads, so the hot loops stream through small arrays:
//! - a parent reads 8 bytes per child (`scores`), plus 1 byte (`states`) for a critical one;
//! - unknown is NaN in `scores` and `stability`. NaN propagates through the weighted sum by itself,
//!   so no per-child flag is needed. Stored NaNs are always the `f64::NAN` constant, so equal
//!   values have equal bits, and NaN never leaves the module: the API turns it into `None`;
//! - result windows are one flat ring buffer of `window` bytes per node plus an 8-byte header,
//!   so recording a result allocates nothing and a stability is computed from the header alone.

use super::NodeKind;
use super::compiled::Compiled;
use crate::health::state::{HealthState, Quality};

/// Where one node's window is and what it holds.
#[derive(Clone, Copy, Debug, Default)]
struct Head {
    /// The position of the oldest result within the node's slot.
    oldest: u16,
    len: u16,
    good: u16,
    degraded: u16,
}

/// The last results of every node, a fixed slot of `capacity` results each (groups' slots stay
/// empty: simpler than a second index, and small).
#[derive(Clone, Debug)]
pub(super) struct Windows {
    capacity: usize,
    ring: Vec<Quality>,
    heads: Vec<Head>,
}

impl Windows {
    /// Room for `nodes` windows of `capacity` results; `capacity` is at most
    /// [`GraphConfig::MAX_WINDOW`](super::GraphConfig::MAX_WINDOW), so counts fit in `u16`.
    fn with_capacity(capacity: usize, nodes: usize) -> Self {
        Self {
            capacity,
            ring: Vec::with_capacity(capacity * nodes),
            heads: Vec::with_capacity(nodes),
        }
    }

    /// Appends an empty window.
    fn push_empty(&mut self) {
        self.ring
            .resize(self.ring.len() + self.capacity, Quality::Failed);
        self.heads.push(Head::default());
    }

    /// Appends a copy of `old`'s window `i` (same capacity).
    fn push_copy(&mut self, old: &Self, i: usize) {
        self.ring.extend_from_slice(old.slot(i));
        self.heads.push(old.heads[i]);
    }

    fn slot(&self, i: usize) -> &[Quality] {
        &self.ring[i * self.capacity..(i + 1) * self.capacity]
    }

    /// Appends a result to window `i`, forgetting the oldest when full.
    pub fn record(&mut self, i: usize, quality: Quality) {
        let capacity = self.capacity;
        let head = &mut self.heads[i];
        let slot = &mut self.ring[i * capacity..(i + 1) * capacity];
        let len = usize::from(head.len);
        let at = (usize::from(head.oldest) + len) % capacity;
        if len == capacity {
            match slot[at] {
                Quality::Good => head.good -= 1,
                Quality::Degraded => head.degraded -= 1,
                Quality::Failed => {}
            }
            head.oldest = ((at + 1) % capacity) as u16;
        } else {
            head.len += 1;
        }
        match quality {
            Quality::Good => head.good += 1,
            Quality::Degraded => head.degraded += 1,
            Quality::Failed => {}
        }
        slot[at] = quality;
    }

    /// Window `i`'s success ratio, NaN (unknown) before its first result.
    pub fn ratio(&self, i: usize, degraded_credit: f64) -> f64 {
        let head = self.heads[i];
        if head.len == 0 {
            return f64::NAN;
        }
        let passed = f64::from(head.good) + degraded_credit * f64::from(head.degraded);
        passed / f64::from(head.len)
    }

    /// Empties window `i`.
    pub fn clear(&mut self, i: usize) {
        self.heads[i] = Head::default();
    }

    /// Window `i`'s results, oldest first.
    pub fn recent(&self, i: usize) -> Vec<Quality> {
        let head = self.heads[i];
        let slot = self.slot(i);
        (0..usize::from(head.len))
            .map(|k| slot[(usize::from(head.oldest) + k) % self.capacity])
            .collect()
    }
}

/// Every node's score, stability, state, cap flag and window.
#[derive(Clone, Debug)]
pub(super) struct Nodes {
    /// Scores in `[0, 1]`, NaN while unknown: what parents read.
    pub scores: Vec<f64>,
    /// The factor a node's children's mean is multiplied by: the success ratio of a probed node
    /// (NaN before its first result), 1 for a group. Updated with each result, so incremental
    /// scoring does not read the windows.
    pub stability: Vec<f64>,
    /// Probed nodes' states; `None` for groups.
    pub states: Vec<Option<HealthState>>,
    /// Whether a critical dependency is DOWN.
    pub dependency_down: Vec<bool>,
    /// Whether the probed node has reached a verdict (UP, DEGRADED or DOWN) since it was added
    /// or reset. Before that its results are not conclusive: its stability is unknown.
    pub decided: Vec<bool>,
    /// Whether the probed node is out of service for its dependents (ejected from its pool):
    /// its stability is 0 whatever its results.
    pub out: Vec<bool>,
    /// The probed node's SLA (its uptime over a long window, given by the embedder), which its
    /// success ratio is multiplied by.
    pub sla: Vec<Option<f64>>,
    pub windows: Windows,
}

impl Nodes {
    /// Room for `nodes` nodes with windows of `window` results.
    pub fn with_capacity(window: usize, nodes: usize) -> Self {
        Self {
            scores: Vec::with_capacity(nodes),
            stability: Vec::with_capacity(nodes),
            states: Vec::with_capacity(nodes),
            dependency_down: Vec::with_capacity(nodes),
            decided: Vec::with_capacity(nodes),
            out: Vec::with_capacity(nodes),
            sla: Vec::with_capacity(nodes),
            windows: Windows::with_capacity(window, nodes),
        }
    }

    /// Appends a node that has seen nothing yet: unknown, and PROBING if probed.
    pub fn push_fresh(&mut self, kind: NodeKind) {
        let (stability, state) = match kind {
            NodeKind::Probed => (f64::NAN, Some(HealthState::Probing)),
            NodeKind::Group => (1.0, None),
        };
        self.scores.push(f64::NAN);
        self.stability.push(stability);
        self.states.push(state);
        self.dependency_down.push(false);
        self.decided.push(false);
        self.out.push(false);
        self.sla.push(None);
        self.windows.push_empty();
    }

    /// Appends a copy of `old`'s node `i`, scores included.
    pub fn push_copy(&mut self, old: &Self, i: usize) {
        self.scores.push(old.scores[i]);
        self.stability.push(old.stability[i]);
        self.states.push(old.states[i]);
        self.dependency_down.push(old.dependency_down[i]);
        self.decided.push(old.decided[i]);
        self.out.push(old.out[i]);
        self.sla.push(old.sla[i]);
        self.windows.push_copy(&old.windows, i);
    }

    /// A copy with windows of `capacity` results, each keeping its most recent results.
    pub fn with_window(&self, capacity: usize) -> Self {
        let mut windows = Windows::with_capacity(capacity, self.scores.len());
        for i in 0..self.scores.len() {
            windows.push_empty();
            let recent = self.windows.recent(i);
            for &quality in &recent[recent.len().saturating_sub(capacity)..] {
                windows.record(i, quality);
            }
        }
        Self {
            scores: self.scores.clone(),
            stability: self.stability.clone(),
            states: self.states.clone(),
            dependency_down: self.dependency_down.clone(),
            decided: self.decided.clone(),
            out: self.out.clone(),
            sla: self.sla.clone(),
            windows,
        }
    }

    /// Overwrites node `i` with `old`'s node `j`'s state and results (not its score).
    pub fn carry_over(&mut self, i: usize, old: &Self, j: usize) {
        self.states[i] = old.states[j];
        self.stability[i] = old.stability[j];
        self.decided[i] = old.decided[j];
        self.out[i] = old.out[j];
        self.sla[i] = old.sla[j];
        let capacity = self.windows.capacity;
        self.windows.ring[i * capacity..(i + 1) * capacity].copy_from_slice(old.windows.slot(j));
        self.windows.heads[i] = old.windows.heads[j];
    }
}

/// Probed node `i`'s stability: 0 while it is out of service, else its success ratio times its
/// SLA once it has reached a verdict (`decided`), unknown (NaN) before.
pub(super) fn probed_stability(nodes: &Nodes, i: usize, credit: f64) -> f64 {
    if nodes.out[i] {
        0.0
    } else if nodes.decided[i] {
        nodes.windows.ratio(i, credit) * nodes.sla[i].unwrap_or(1.0)
    } else {
        f64::NAN
    }
}

/// What scoring reads besides a node's stability and its children's scores.
pub(super) struct Inputs<'a> {
    pub topo: &'a Compiled,
    pub states: &'a [Option<HealthState>],
    pub critical_cap: f64,
}

impl Inputs<'_> {
    /// Node `i`'s score and `dependency_down`, from its stability and its children's scores and
    /// states: the one scoring function, shared by the full and the incremental paths, so both
    /// sum in the same order and get the same bits. Inlined into both loops, which matters for
    /// the full rescore's 100k calls.
    #[inline(always)]
    pub fn evaluate(&self, scores: &[f64], stability: f64, i: usize) -> (f64, bool) {
        let children = self.topo.children(i);
        let mut mean = 0.0;
        let mut dependency_down = false;
        for child in children {
            // An unknown (NaN) child makes the mean NaN.
            mean += child.weight * scores[child.index as usize];
            if child.critical {
                dependency_down |= self.states[child.index as usize] == Some(HealthState::Down);
            }
        }
        let base = if children.is_empty() { 1.0 } else { mean };
        let score = base * stability;
        if score.is_nan() {
            return (f64::NAN, dependency_down);
        }
        // Normalised weights may sum to a hair above 1.
        let score = score.min(1.0);
        if dependency_down {
            (score.min(self.critical_cap), true)
        } else {
            (score, false)
        }
    }
}

/// The nodes waiting to be rescored during an update: a bitmap by index, with a summary bitmap
/// of its non-zero words.
///
/// This is the walk's priority queue keyed by topological position, deduplicated. Because the
/// index is the position and every node queued while rescoring node `i` is one of its parents
/// (above `i`), the lowest queued node is always found by scanning forward from `i`: inserting is
/// two ORs, a node queued twice is one bit, and the summary lets a pop skip 4096 nodes per word,
/// so an update does not pay for the width of the graph. It replaces a binary heap plus a flag
/// per node, whose sifts were the largest cost of a wide walk.
#[derive(Clone, Debug, Default)]
pub(super) struct Pending {
    words: Vec<u64>,
    summary: Vec<u64>,
}

impl Pending {
    /// An empty set for `nodes` nodes.
    pub fn new(nodes: usize) -> Self {
        let words = nodes.div_ceil(64);
        Self {
            words: vec![0; words],
            summary: vec![0; words.div_ceil(64)],
        }
    }

    /// Queues node `i`, once.
    pub fn insert(&mut self, i: u32) {
        let word = i as usize / 64;
        self.words[word] |= 1 << (i % 64);
        self.summary[word / 64] |= 1 << (word % 64);
    }

    /// Takes the lowest queued node, given that none is below `from`.
    pub fn pop_from(&mut self, from: usize) -> Option<usize> {
        let first = from / 64;
        let mut s = first / 64;
        let mut live = self.summary.get(s)? & (u64::MAX << (first % 64));
        while live == 0 {
            s += 1;
            live = *self.summary.get(s)?;
        }
        let word = s * 64 + live.trailing_zeros() as usize;
        let bits = &mut self.words[word];
        let node = word * 64 + bits.trailing_zeros() as usize;
        *bits &= *bits - 1;
        if *bits == 0 {
            self.summary[s] &= !(1 << (word % 64));
        }
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Quality::{Degraded as D, Failed as F, Good as G};

    /// Over many wrap-arounds of a full window, the counts and the order follow exactly the
    /// last `capacity` results: what leaves the window (degraded or good) leaves the counts.
    #[test]
    fn a_full_window_forgets_its_oldest_result_of_every_kind() {
        let mut windows = Windows::with_capacity(3, 2);
        windows.push_empty();
        windows.push_empty();
        for q in [D, D, D] {
            windows.record(1, q);
        }
        assert_eq!(windows.ratio(1, 0.5), 0.5);
        for q in [G, G, G] {
            windows.record(1, q);
        }
        assert_eq!(windows.ratio(1, 0.5), 1.0, "the degraded results left");
        let stream = [F, G, D, G, G, F, D, D, G, F, G, D, F];
        let mut all = vec![D, D, D, G, G, G];
        for q in stream {
            windows.record(1, q);
            all.push(q);
            let last = &all[all.len() - 3..];
            assert_eq!(windows.recent(1), last);
            let credit = |q: &Quality| match q {
                G => 1.0,
                D => 0.5,
                F => 0.0,
            };
            let expected = last.iter().map(credit).sum::<f64>() / 3.0;
            assert!((windows.ratio(1, 0.5) - expected).abs() < 1e-12, "{last:?}");
        }
        assert!(
            windows.ratio(0, 0.5).is_nan(),
            "the other window is untouched"
        );
    }

    /// Queued nodes come out lowest first, each once, across the summary words that let a pop
    /// skip 4096 nodes at a time (graphs wider than the unit tests' others).
    #[test]
    fn pending_nodes_pop_in_order_across_summary_words() {
        let nodes = 3 * 4096 + 100;
        let mut pending = Pending::new(nodes);
        let mut want = std::collections::BTreeSet::new();
        // A spread of nodes, some twice, in no order, on both sides of each 64 and 4096 bound.
        for k in 0..700u32 {
            let i = (k * 7919 + 13) % nodes as u32;
            pending.insert(i);
            want.insert(i as usize);
        }
        for i in [0, 63, 64, 4095, 4096, 4097, 8191, 8192, nodes as u32 - 1] {
            pending.insert(i);
            pending.insert(i);
            want.insert(i as usize);
        }
        let mut from = 0;
        let mut got = Vec::new();
        while let Some(node) = pending.pop_from(from) {
            got.push(node);
            from = node;
        }
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        assert_eq!(pending.pop_from(0), None, "empty once everything was taken");
    }
}
