//! The graph as its readers see it: the topology of the last apply, and each node's score, state,
//! cap flag, stability and SLA in cells of atomics that the one writer (the [`Graph`]) updates in
//! place as it rescores, so a reader takes no lock and never waits for the writer.
//!
//! Why cells rather than a copy of the graph per change: a probe result rescores a node and the
//! few ancestors whose score moved, and at 10k results a second a copy of every node per result
//! would cost more than the scoring itself. Publishing a node is a handful of stores, made only
//! for the nodes the writer just rescored. A topology change publishes a new view (new cells over
//! the new topology), which the engine swaps in ([`arc_swap`]).
//!
//! What a reader gets: each node's values as of its last rescore. Every value read is one the
//! writer published, never a torn one; but a read that races an update may take some values
//! from before it and some from after (a child's new score beside its parent's old one, or a
//! node's new score beside its old state), for the few microseconds the update takes. The
//! [`generation`](GraphView::generation) moves once per change that moved any node, which is how
//! a watcher knows there is something new to look at.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::Graph;
use super::compiled::Compiled;
use crate::health::state::HealthState;

/// The dependency graph as published for readers (see the module doc): what the API, the page
/// and readiness read. [`Graph::view`] gives it; an engine's is
/// [`Engine::graph`](crate::engine::Engine::graph).
pub struct GraphView {
    pub(super) topo: Arc<Compiled>,
    cells: Box<[Cell]>,
    generation: AtomicU64,
}

/// One node's published values. Scores are f64 bits (NaN for unknown, as the writer keeps them).
#[derive(Default)]
struct Cell {
    score: AtomicU64,
    stability: AtomicU64,
    /// NaN for none.
    sla: AtomicU64,
    /// The state (its index in `HealthState::ALL` + 1, 0 for none), then [`DEPENDENCY_DOWN`]
    /// and [`FLAPPING`].
    word: AtomicU32,
}

const STATE_BITS: u32 = 0b111;
const DEPENDENCY_DOWN: u32 = 1 << 3;
const FLAPPING: u32 = 1 << 4;

/// One node's values, as published and as read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Published {
    /// NaN while unknown.
    pub score: f64,
    /// NaN while unknown.
    pub stability: f64,
    pub sla: Option<f64>,
    /// A probed node's state, a group's verdict.
    pub state: Option<HealthState>,
    pub dependency_down: bool,
    pub flapping: bool,
}

impl Published {
    fn word(&self) -> u32 {
        let state = self.state.map_or(0, |s| s as u32 + 1);
        state
            | if self.dependency_down {
                DEPENDENCY_DOWN
            } else {
                0
            }
            | if self.flapping { FLAPPING } else { 0 }
    }
}

impl GraphView {
    /// A view of `topo` with every cell empty, at `generation`: its writer publishes every node
    /// before anyone reads it.
    pub(super) fn new(topo: Arc<Compiled>, generation: u64) -> Self {
        Self {
            cells: (0..topo.len()).map(|_| Cell::default()).collect(),
            topo,
            generation: AtomicU64::new(generation),
        }
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.topo.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.topo.len() == 0
    }

    /// A count that moves each time any node's published values change, and with each new
    /// topology (a new view starts one past the one it replaces). Equal counts mean nothing
    /// moved in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Stores node `i`'s values; returns whether they differ from what was there. A value is
    /// stored only when it changed: loads are plain reads, an atomic swap is not.
    pub(super) fn publish(&self, i: usize, values: &Published) -> bool {
        fn put64(cell: &AtomicU64, value: u64) -> bool {
            let moved = cell.load(Ordering::Relaxed) != value;
            if moved {
                cell.store(value, Ordering::Relaxed);
            }
            moved
        }
        let cell = &self.cells[i];
        let word = values.word();
        let word_moved = cell.word.load(Ordering::Relaxed) != word;
        if word_moved {
            cell.word.store(word, Ordering::Relaxed);
        }
        put64(&cell.score, values.score.to_bits())
            | put64(&cell.stability, values.stability.to_bits())
            | put64(&cell.sla, values.sla.unwrap_or(f64::NAN).to_bits())
            | word_moved
    }

    /// Marks a change published: readers that load the generation after this see it (and every
    /// value stored before it).
    pub(super) fn advance(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Node `i`'s values as last published.
    pub(super) fn read(&self, i: usize) -> Published {
        let cell = &self.cells[i];
        let word = cell.word.load(Ordering::Relaxed);
        let sla = f64::from_bits(cell.sla.load(Ordering::Relaxed));
        Published {
            score: f64::from_bits(cell.score.load(Ordering::Relaxed)),
            stability: f64::from_bits(cell.stability.load(Ordering::Relaxed)),
            sla: (!sla.is_nan()).then_some(sla),
            state: match word & STATE_BITS {
                0 => None,
                s => HealthState::ALL.get(s as usize - 1).copied(),
            },
            dependency_down: word & DEPENDENCY_DOWN != 0,
            flapping: word & FLAPPING != 0,
        }
    }
}

impl fmt::Debug for GraphView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphView")
            .field("nodes", &self.len())
            .field("generation", &self.generation())
            .finish()
    }
}

impl Graph {
    /// What readers see of this graph (see [`GraphView`]): kept up to date by every change, and
    /// replaced by a new one when the topology changes.
    pub fn view(&self) -> &Arc<GraphView> {
        &self.view
    }

    /// Node `i`'s values as the writer has them.
    pub(super) fn published(&self, i: usize) -> Published {
        let (state, flapping) = self.judged(i);
        Published {
            score: self.nodes.scores[i],
            stability: self.nodes.stability[i],
            sla: self.nodes.sla[i],
            state,
            dependency_down: self.nodes.dependency_down[i],
            flapping,
        }
    }

    /// Publishes nodes `indices`, and moves the generation if any of them changed.
    pub(super) fn publish(&self, indices: impl IntoIterator<Item = usize>) {
        let mut changed = false;
        for i in indices {
            changed |= self.view.publish(i, &self.published(i));
        }
        if changed {
            self.view.advance();
        }
    }

    /// Publishes every node.
    pub(super) fn publish_all(&self) {
        self.publish(0..self.topo.len());
    }

    /// A new view over the current topology, one generation past the old one, with every node
    /// published: after the topology changed, and for a clone, which must not write into the
    /// original's cells.
    pub(super) fn fresh_view(&mut self) {
        let generation = self.view.generation() + 1;
        self.view = Arc::new(GraphView::new(self.topo.clone(), generation));
        for i in 0..self.topo.len() {
            self.view.publish(i, &self.published(i));
        }
    }
}
