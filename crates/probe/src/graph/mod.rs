//! The dependency tier: a health score in `[0, 1]` for every node of a declared dependency DAG.
//!
//! A service is only as healthy as what it calls. Nodes are either *probed* (a target whose
//! results are fed in) or *groups* (a name for a set of dependencies, e.g. "checkout"). Scores
//! are computed as follows:
//! - a probed node keeps a sliding window of its last [`GraphConfig::window`] results; its
//!   *success ratio* is `(good + degraded_credit * degraded) / len`. Results recorded while the
//!   node is in MAINTENANCE are left out, so planned work does not lower anyone's score;
//! - a leaf (a probed node with no dependencies) scores its success ratio, times its *SLA* when
//!   the embedder gives one ([`Graph::set_sla`]: its uptime over a long window), so a node that
//!   does well now but has failed often scores below one that never failed;
//! - a parent scores the weighted mean of its children's scores (weights normalised per parent)
//!   times its own *stability*: its success ratio if probed, 1 for a group;
//! - a *critical* dependency that is DOWN caps its parent at [`GraphConfig::critical_cap`] and
//!   marks it `dependency_down`. The parent's own state does not change, and grandparents feel
//!   it only through the parent's score (and their own critical edges);
//! - a score is *unknown* while a probed node has not reached its first verdict (UP, DEGRADED or
//!   DOWN: until then, in PROBING, its few results are not conclusive), and unknown propagates
//!   upward: a parent with an unknown child is unknown, never guessed healthy or failed. A
//!   verdict, once reached, keeps the node's results counting through later PROBING spells.
//!
//! Why it is fast: after validation the graph is compiled into flat arrays numbered children
//! first, level by level (the `compiled` submodule), so a full rescore is one linear pass that
//! reads each child's 8-byte score from a nearby level; and a new result ([`Graph::record`])
//! rescores only the node's ancestors, lowest index first from a deduplicated queue (a bitmap,
//! the `score` submodule), stopping wherever a node's score (unknown included) and DOWN-ness come
//! out unchanged, since its parents read nothing else. Both paths evaluate a node with the same
//! function, in the same summation order, so the incremental result is bit-identical to
//! [`Graph::full_rescore`]; the property tests check exactly that. An update allocates nothing.
//!
//! Topology changes ([`Graph::apply`]) keep every surviving node's results and state.
//!
//! A group's verdict (UP, DEGRADED, DOWN or PROBING) is its score and critical dependencies
//! judged by its [`GroupRule`], on a target's state machine, once every [`JUDGE_EVERY`]
//! ([`Graph::judge`], the `judge` submodule): the one verdict every reader shows.
//!
//! [`Causes::of`] reads an [`Export`] for the roots of its failures: the DOWN nodes that make
//! others `dependency_down`, each with what it impacts (the `causes` submodule).
//!
//! ```
//! use probe::graph::{Dependency, Graph, GraphConfig, NodeKind, NodeSpec};
//! use probe::health::{HealthState, Quality};
//! use probe::TargetId;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let id = |s: &str| TargetId::new(s);
//! let specs = vec![
//!     NodeSpec { id: id("db")?, kind: NodeKind::Probed, depends_on: vec![] },
//!     NodeSpec {
//!         id: id("checkout")?,
//!         kind: NodeKind::Group,
//!         depends_on: vec![Dependency::new(id("db")?, "probes/checkout.yaml:4:7")],
//!     },
//! ];
//! let mut graph = Graph::build(GraphConfig::default(), &specs).map_err(|e| format!("{e:?}"))?;
//! graph.record(&id("db")?, Quality::Good, HealthState::Up)?;
//! graph.record(&id("db")?, Quality::Failed, HealthState::Probing)?;
//! assert_eq!(graph.view().status(&id("checkout")?).and_then(|s| s.score), Some(0.5));
//! # Ok(()) }
//! ```

mod causes;
mod compiled;
mod explain;
mod judge;
mod readiness;
mod score;
#[cfg(test)]
mod tests;
mod validate;
mod view;

pub use causes::Causes;
use compiled::{Child, Compiled, normalised};
pub use explain::{ChildExplanation, Edge, Explanation, Export, NodeStatus};
use judge::Judges;
pub use judge::{GroupRule, GroupRuleError, GroupTransition, JUDGE_EVERY};
pub use readiness::{
    GraphReadiness, NodeCheck, ReadinessLatch, ReadinessPolicy, ReadinessPolicyError,
};
use score::{Inputs, Nodes, Pending, probed_stability};
pub use validate::GraphError;
use validate::{Target, Validated, validate};
pub use view::GraphView;

use std::sync::Arc;

use crate::health::state::{HealthState, Quality};
use crate::target::TargetId;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A target with probe results and a health state.
    Probed,
    /// A named set of dependencies, with no results or state of its own.
    Group,
}

/// One declared dependency of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    /// The node depended on.
    pub target: TargetId,
    /// The relative share of this dependency in the parent's score: a number in
    /// `(0, MAX_WEIGHT]`. Weights are normalised per parent, so `[1, 1]` and `[5, 5]` mean the
    /// same.
    pub weight: f64,
    /// Whether the parent cannot work without it: when the target is DOWN, the parent's score
    /// is capped and the parent marked `dependency_down`.
    pub critical: bool,
    /// Where the dependency was declared (e.g. `probes/a.yaml:12:9`), quoted by errors. The graph
    /// does not interpret it.
    pub origin: String,
}

impl Dependency {
    /// The weight of a dependency that does not set one.
    pub const DEFAULT_WEIGHT: f64 = 1.0;
    /// The largest weight. Shares beyond a million to one mean nothing, and the bound keeps a
    /// node's sum of weights finite, so normalising cannot turn every weight into 0.
    pub const MAX_WEIGHT: f64 = 1e6;

    /// A non-critical dependency on `target` with the default weight.
    pub fn new(target: TargetId, origin: impl Into<String>) -> Self {
        Self {
            target,
            weight: Self::DEFAULT_WEIGHT,
            critical: false,
            origin: origin.into(),
        }
    }
}

/// One declared node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The node's id; a probed node shares it with its target.
    pub id: TargetId,
    /// Probed or group.
    pub kind: NodeKind,
    /// What it depends on, in the order its score sums them.
    pub depends_on: Vec<Dependency>,
}

/// Why a [`GraphConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphConfigError {
    /// The window holds at least one result and at most [`GraphConfig::MAX_WINDOW`].
    #[error("window {0} is outside 1..={max}", max = GraphConfig::MAX_WINDOW)]
    Window(usize),
    /// A degraded result counts as a fraction of a good one.
    #[error("degraded_credit {0} is outside 0..=1")]
    DegradedCredit(f64),
    /// The cap is a score.
    #[error("critical_cap {0} is outside 0..=1")]
    CriticalCap(f64),
}

/// How scores are computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GraphConfig {
    window: usize,
    degraded_credit: f64,
    critical_cap: f64,
}

impl GraphConfig {
    /// The default window: 20 results, i.e. 100 s of history at the default 5 s interval.
    pub const DEFAULT_WINDOW: usize = 20;
    /// The default credit of a degraded result: half a good one.
    pub const DEFAULT_DEGRADED_CREDIT: f64 = 0.5;
    /// The default cap when a critical dependency is DOWN: 0, the parent cannot work.
    pub const DEFAULT_CRITICAL_CAP: f64 = 0.0;
    /// The largest window. Every node has a slot of `window` bytes for its results, so the
    /// bound keeps a large graph's memory predictable (100 MB at 100k nodes).
    pub const MAX_WINDOW: usize = 1000;

    /// Builds a configuration.
    ///
    /// # Errors
    /// One [`GraphConfigError`] naming the first invalid field: `window` outside
    /// `1..=MAX_WINDOW`, `degraded_credit` or `critical_cap` outside `0..=1` (or NaN).
    pub fn try_new(
        window: usize,
        degraded_credit: f64,
        critical_cap: f64,
    ) -> Result<Self, GraphConfigError> {
        if !(1..=Self::MAX_WINDOW).contains(&window) {
            return Err(GraphConfigError::Window(window));
        }
        if !(0.0..=1.0).contains(&degraded_credit) {
            return Err(GraphConfigError::DegradedCredit(degraded_credit));
        }
        if !(0.0..=1.0).contains(&critical_cap) {
            return Err(GraphConfigError::CriticalCap(critical_cap));
        }
        Ok(Self {
            window,
            degraded_credit,
            critical_cap,
        })
    }

    /// How many recent results a probed node's success ratio covers.
    pub fn window(&self) -> usize {
        self.window
    }

    /// What a degraded result counts for, a good one counting 1.
    pub fn degraded_credit(&self) -> f64 {
        self.degraded_credit
    }

    /// The highest score of a node with a critical dependency DOWN.
    pub fn critical_cap(&self) -> f64 {
        self.critical_cap
    }
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self {
            window: Self::DEFAULT_WINDOW,
            degraded_credit: Self::DEFAULT_DEGRADED_CREDIT,
            critical_cap: Self::DEFAULT_CRITICAL_CAP,
        }
    }
}

/// Why a result or state could not be recorded for a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The id is not in the graph (not every target has to be).
    #[error("{0} is not in the dependency graph")]
    Unknown(TargetId),
    /// Groups have no results or state of their own.
    #[error("{0} is a group; only probed nodes have results and a state")]
    Group(TargetId),
}

/// What [`Graph::apply`] changed. Ids are sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Nodes that were not there before.
    pub added: Vec<TargetId>,
    /// Nodes that are gone, with their results.
    pub removed: Vec<TargetId>,
    /// Nodes whose kind or dependencies changed.
    pub changed: Vec<TargetId>,
    /// Whether the previous compiled graph was extended rather than rebuilt (see
    /// [`Graph::apply`]).
    pub incremental: bool,
}

/// The dependency graph with its scores. Its writer is whoever holds it mutably (wrap it in a
/// lock to share the writing); its readers read its [`GraphView`], without a lock.
#[derive(Debug)]
pub struct Graph {
    config: GraphConfig,
    /// Shared with the view, which reads ids and edges from it.
    topo: Arc<Compiled>,
    nodes: Nodes,
    /// Scratch of the incremental walk, kept so an update allocates nothing.
    pending: Pending,
    /// The nodes the last update rescored, to publish: scratch as `pending` is.
    rescored: Vec<u32>,
    /// The groups' rules and verdicts (the `judge` submodule).
    judges: Judges,
    /// What readers see (the `view` submodule).
    view: Arc<GraphView>,
}

impl Clone for Graph {
    /// A copy with a view of its own: the copy's changes never reach the original's readers.
    fn clone(&self) -> Self {
        let mut copy = Self {
            config: self.config,
            topo: self.topo.clone(),
            nodes: self.nodes.clone(),
            pending: self.pending.clone(),
            rescored: Vec::new(),
            judges: self.judges.clone(),
            view: self.view.clone(),
        };
        copy.fresh_view();
        copy
    }
}

impl Graph {
    /// A graph without nodes, to grow with [`Graph::apply`].
    pub fn empty(config: GraphConfig) -> Self {
        let mut topo = Compiled::with_capacity(0, 0);
        topo.finish();
        Self::new(config, topo, Nodes::with_capacity(config.window, 0))
    }

    /// A graph of `topo` and `nodes`, its view not yet published: the caller scores and
    /// publishes every node ([`Graph::full_rescore`]) before the graph is shared (a graph without
    /// nodes has nothing to publish).
    fn new(config: GraphConfig, topo: Compiled, nodes: Nodes) -> Self {
        let topo = Arc::new(topo);
        let view = Arc::new(GraphView::new(topo.clone(), 0));
        Self {
            config,
            pending: Pending::new(topo.len()),
            rescored: Vec::new(),
            topo,
            nodes,
            judges: Judges::default(),
            view,
        }
    }

    /// Validates and compiles `specs`. Every node starts unknown, probed ones in PROBING.
    ///
    /// # Errors
    /// Every [`GraphError`] found, in declaration order, cycles last.
    pub fn build(config: GraphConfig, specs: &[NodeSpec]) -> Result<Self, Vec<GraphError>> {
        let topo = compile(specs)?;
        let mut nodes = Nodes::with_capacity(config.window, topo.len());
        for &kind in &topo.kinds {
            nodes.push_fresh(kind);
        }
        let mut graph = Self::new(config, topo, nodes);
        graph.full_rescore();
        Ok(graph)
    }

    /// The configuration.
    pub fn config(&self) -> &GraphConfig {
        &self.config
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.topo.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.topo.len() == 0
    }

    /// Records a probed node's result and the state it left the node in, then rescores the
    /// node's ancestors as far as anything changes.
    ///
    /// A result whose state is MAINTENANCE is not added to the window (planned work does not
    /// count against the node), but the state is recorded. Returns how many nodes were
    /// rescored, the node itself included.
    ///
    /// # Errors
    /// [`NodeError`] when the id is not in the graph or is a group; nothing changes then.
    pub fn record(
        &mut self,
        id: &TargetId,
        quality: Quality,
        state: HealthState,
    ) -> Result<usize, NodeError> {
        let i = self.probed(id)?;
        if state != HealthState::Maintenance {
            self.nodes.windows.record(i, quality);
        }
        Ok(self.update(i, state))
    }

    /// Records a state change without a result (maintenance started or ended, a state restored
    /// from disk), then rescores as [`Graph::record`] does. Only a change into or out of DOWN
    /// can move another node's score.
    ///
    /// # Errors
    /// [`NodeError`] when the id is not in the graph or is a group; nothing changes then.
    pub fn set_state(&mut self, id: &TargetId, state: HealthState) -> Result<usize, NodeError> {
        let i = self.probed(id)?;
        Ok(self.update(i, state))
    }

    /// Marks a probed node out of service (ejected from its pool by real traffic) or back: while
    /// out its stability is 0, whatever its results, so its dependents' scores show the lost
    /// capacity at once. Rescores as [`Graph::record`] does.
    ///
    /// # Errors
    /// [`NodeError`] when the id is not in the graph or is a group; nothing changes then.
    pub fn set_out(&mut self, id: &TargetId, out: bool) -> Result<usize, NodeError> {
        let i = self.probed(id)?;
        if self.nodes.out[i] == out {
            return Ok(0);
        }
        self.nodes.out[i] = out;
        let state = self.nodes.states[i].unwrap_or(HealthState::Probing);
        Ok(self.update(i, state))
    }

    /// Sets a probed node's SLA: its uptime over a long window, which its success ratio is
    /// multiplied by (the short window says how it does now, the SLA how it has done), or
    /// `None` to score by the success ratio alone. Clamped to `[0, 1]`; NaN counts as none.
    /// Rescores as [`Graph::record`] does.
    ///
    /// # Errors
    /// [`NodeError`] when the id is not in the graph or is a group; nothing changes then.
    pub fn set_sla(&mut self, id: &TargetId, sla: Option<f64>) -> Result<usize, NodeError> {
        let i = self.probed(id)?;
        let sla = sla.filter(|s| !s.is_nan()).map(|s| s.clamp(0.0, 1.0));
        if self.nodes.sla[i].map(f64::to_bits) == sla.map(f64::to_bits) {
            return Ok(0);
        }
        self.nodes.sla[i] = sla;
        let state = self.nodes.states[i].unwrap_or(HealthState::Probing);
        Ok(self.update(i, state))
    }

    /// A probed node's SLA, when one is set.
    pub fn sla(&self, id: &TargetId) -> Option<f64> {
        self.nodes.sla[self.probed(id).ok()?]
    }

    /// Forgets a probed node's results and puts it back in PROBING, as when its target's probe
    /// changed: the old results say nothing about the new probe. Rescores as [`Graph::record`]
    /// does.
    ///
    /// # Errors
    /// [`NodeError`] when the id is not in the graph or is a group; nothing changes then.
    pub fn reset(&mut self, id: &TargetId) -> Result<usize, NodeError> {
        let i = self.probed(id)?;
        self.nodes.windows.clear(i);
        self.nodes.decided[i] = false;
        self.nodes.out[i] = false;
        Ok(self.update(i, HealthState::Probing))
    }

    /// Changes how scores are computed, keeping every node's most recent results (as many as the
    /// new window holds), and rescores everything.
    pub fn reconfigure(&mut self, config: GraphConfig) {
        if config == self.config {
            return;
        }
        if config.window != self.config.window {
            self.nodes = self.nodes.with_window(config.window);
        }
        self.config = config;
        self.full_rescore();
    }

    /// Recomputes every stability and score from the windows and states, children first. The
    /// incremental updates keep the scores equal to what this computes, so it is needed only to
    /// check them.
    pub fn full_rescore(&mut self) {
        let credit = self.config.degraded_credit;
        // One pass: a node's stability is refreshed right before it is read.
        for i in 0..self.nodes.scores.len() {
            self.nodes.stability[i] = match self.topo.kinds[i] {
                NodeKind::Probed => probed_stability(&self.nodes, i, credit),
                NodeKind::Group => 1.0,
            };
            let inputs = Inputs {
                topo: &self.topo,
                states: &self.nodes.states,
                critical_cap: self.config.critical_cap,
            };
            (self.nodes.scores[i], self.nodes.dependency_down[i]) =
                inputs.evaluate(&self.nodes.scores, self.nodes.stability[i], i);
        }
        self.publish_all();
    }

    /// The index of a probed node.
    fn probed(&self, id: &TargetId) -> Result<usize, NodeError> {
        let i = *self
            .topo
            .index
            .get(id)
            .ok_or_else(|| NodeError::Unknown(id.clone()))? as usize;
        match self.topo.kinds[i] {
            NodeKind::Probed => Ok(i),
            NodeKind::Group => Err(NodeError::Group(id.clone())),
        }
    }

    /// Sets node `i`'s state, rescores it (its stability may have changed) and walks its
    /// ancestors lowest index first: when a node is taken from `pending`, all its rescored
    /// descendants have lower indices and are done, so each node is computed once, from final
    /// inputs. A node's parents are queued only if its score changed (NaN, unknown, compares
    /// equal to itself by bits), or, for node `i` alone, its DOWN-ness: parents read nothing
    /// else, so a node's own `dependency_down` does not matter to them.
    fn update(&mut self, i: usize, state: HealthState) -> usize {
        let is_down = |state: Option<HealthState>| state == Some(HealthState::Down);
        let mut moved = is_down(self.nodes.states[i]) != is_down(Some(state));
        self.nodes.states[i] = Some(state);
        let verdict = matches!(
            state,
            HealthState::Up | HealthState::Degraded | HealthState::Down
        );
        self.nodes.decided[i] |= verdict;
        self.nodes.stability[i] = probed_stability(&self.nodes, i, self.config.degraded_credit);
        let Nodes {
            scores,
            stability,
            states,
            dependency_down,
            ..
        } = &mut self.nodes;
        let inputs = Inputs {
            topo: &self.topo,
            states,
            critical_cap: self.config.critical_cap,
        };
        let mut node = i;
        self.rescored.clear();
        loop {
            let before = scores[node];
            (scores[node], dependency_down[node]) = inputs.evaluate(scores, stability[node], node);
            self.rescored.push(node as u32);
            if moved || before.to_bits() != scores[node].to_bits() {
                for &parent in inputs.topo.parents(node) {
                    self.pending.insert(parent);
                }
            }
            moved = false;
            match self.pending.pop_from(node) {
                Some(next) => node = next,
                None => break,
            }
        }
        let rescored = std::mem::take(&mut self.rescored);
        self.publish(rescored.iter().map(|&n| n as usize));
        let count = rescored.len();
        self.rescored = rescored;
        count
    }

    /// Replaces the topology with `specs`, keeping the results and state of every node that is
    /// still probed.
    ///
    /// What is incremental: when no surviving node changed its kind or dependencies and none
    /// depended on a removed node, only the added nodes are validated (they cannot form a cycle
    /// with the others, which do not depend on them), the surviving nodes are copied into the new
    /// arrays with their scores, and only the added nodes are scored. Otherwise the whole set is
    /// validated and compiled, and every score recomputed. Either way the scores are those a
    /// full rescore of the new graph gives.
    ///
    /// # Errors
    /// Every [`GraphError`] found; the graph is left as it was.
    pub fn apply(&mut self, specs: &[NodeSpec]) -> Result<Applied, Vec<GraphError>> {
        let mut applied = Applied::default();
        let mut kept = vec![false; self.topo.len()];
        let mut repeated = false;
        let mut added = Vec::new();
        for spec in specs {
            let Some(&i) = self.topo.index.get(&spec.id) else {
                applied.added.push(spec.id.clone());
                added.push(spec);
                continue;
            };
            let i = i as usize;
            repeated |= kept[i];
            kept[i] = true;
            if self.topo.kinds[i] != spec.kind || !self.topo.same_dependencies(i, &spec.depends_on)
            {
                applied.changed.push(spec.id.clone());
            }
        }
        applied.removed = (0..self.topo.len())
            .filter(|&i| !kept[i])
            .map(|i| self.topo.ids[i].clone())
            .collect();
        let orphaned = (0..self.topo.len()).any(|i| {
            kept[i]
                && self
                    .topo
                    .children(i)
                    .iter()
                    .any(|child| !kept[child.index as usize])
        });
        applied.incremental = applied.changed.is_empty() && !repeated && !orphaned;
        if applied.incremental {
            self.extend(&kept, &added)?;
        } else {
            self.rebuild(specs)?;
        }
        applied.added.sort();
        applied.removed.sort();
        applied.changed.sort();
        applied.changed.dedup();
        Ok(applied)
    }

    /// The incremental [`Graph::apply`]: drops the nodes not `kept` and appends `added`.
    fn extend(&mut self, kept: &[bool], added: &[&NodeSpec]) -> Result<(), Vec<GraphError>> {
        let old = &self.topo;
        let validated = validate(
            added,
            |id| old.index.get(id).copied().filter(|&i| kept[i as usize]),
            old.len(),
        )?;
        let survivors = kept.iter().filter(|&&k| k).count();
        let n = survivors + added.len();
        let mut topo = Compiled::with_capacity(n, old.edge_count() + validated.targets.len());
        let mut nodes = Nodes::with_capacity(self.config.window, n);
        let mut remap = vec![0u32; old.len()];
        for i in (0..old.len()).filter(|&i| kept[i]) {
            remap[i] = topo.next_index();
            let children = old.children(i).iter().map(|&child| Child {
                index: remap[child.index as usize],
                ..child
            });
            topo.push(old.ids[i].clone(), old.kinds[i], children);
            nodes.push_copy(&self.nodes, i);
        }
        push_validated(&mut topo, added, validated, &remap);
        topo.finish();
        for &kind in &topo.kinds[survivors..] {
            nodes.push_fresh(kind);
        }
        self.install(topo, nodes);
        let Nodes {
            scores,
            stability,
            states,
            dependency_down,
            ..
        } = &mut self.nodes;
        let inputs = Inputs {
            topo: &self.topo,
            states,
            critical_cap: self.config.critical_cap,
        };
        for i in survivors..n {
            (scores[i], dependency_down[i]) = inputs.evaluate(scores, stability[i], i);
        }
        self.publish(survivors..n);
        Ok(())
    }

    /// The full [`Graph::apply`]: compiles `specs` anew, carrying results and states over by id.
    fn rebuild(&mut self, specs: &[NodeSpec]) -> Result<(), Vec<GraphError>> {
        let topo = compile(specs)?;
        let mut nodes = Nodes::with_capacity(self.config.window, topo.len());
        for (i, (id, &kind)) in topo.ids.iter().zip(&topo.kinds).enumerate() {
            nodes.push_fresh(kind);
            let Some(&old) = self.topo.index.get(id) else {
                continue;
            };
            let old = old as usize;
            if kind == NodeKind::Probed && self.topo.kinds[old] == NodeKind::Probed {
                nodes.carry_over(i, &self.nodes, old);
            }
        }
        self.install(topo, nodes);
        self.full_rescore();
        Ok(())
    }

    /// Swaps in a new topology with its per-node data, resizes the scratch, and publishes a new
    /// view of it.
    fn install(&mut self, topo: Compiled, nodes: Nodes) {
        self.pending = Pending::new(topo.len());
        self.topo = Arc::new(topo);
        self.nodes = nodes;
        self.fresh_view();
    }
}

/// Validates and compiles a whole set of specs.
fn compile(specs: &[NodeSpec]) -> Result<Compiled, Vec<GraphError>> {
    let specs: Vec<&NodeSpec> = specs.iter().collect();
    let validated = validate(&specs, |_| None, 0)?;
    let mut topo = Compiled::with_capacity(specs.len(), validated.targets.len());
    push_validated(&mut topo, &specs, validated, &[]);
    topo.finish();
    Ok(topo)
}

/// Appends validated specs children first, in level order: by height (the longest path down to
/// a leaf), so that a parent's children sit mostly in the level just below it. A full rescore then
/// reads children from a small window of the arrays rather than from anywhere, which keeps them
/// in cache. Sorting by height keeps the order topological, since a child is lower than its
/// parents. `remap` gives the new index of each outside node.
fn push_validated(topo: &mut Compiled, specs: &[&NodeSpec], validated: Validated, remap: &[u32]) {
    let targets = |j: usize| &validated.targets[validated.starts[j]..validated.starts[j + 1]];
    let mut height = vec![0u32; specs.len()];
    for &j in &validated.order {
        height[j] = targets(j)
            .iter()
            .filter_map(|t| match *t {
                Target::Spec(t) => Some(height[t] + 1),
                Target::Outside(_) => None,
            })
            .max()
            .unwrap_or(0);
    }
    let mut order = validated.order;
    order.sort_by_key(|&j| height[j]);
    let base = topo.next_index();
    let mut rank = vec![0u32; specs.len()];
    for (r, &j) in order.iter().enumerate() {
        rank[j] = base + r as u32;
    }
    for j in order {
        let spec = specs[j];
        let children = targets(j)
            .iter()
            .zip(&spec.depends_on)
            .zip(normalised(&spec.depends_on))
            .map(|((target, dep), weight)| Child {
                weight,
                index: match *target {
                    Target::Spec(t) => rank[t],
                    Target::Outside(o) => remap[o as usize],
                },
                critical: dep.critical,
            });
        topo.push(spec.id.clone(), spec.kind, children);
    }
}
