//! What the engine is asked to run, and the dependency graph it keeps in step with its targets.
//!
//! A [`Topology`] is the whole desired state: targets, the dependencies between them and the
//! groups over them, how scores are computed and what readiness requires. The engine applies it
//! at once or not at all ([`TopologyError`]), so a bad reload never leaves a half-applied graph.

mod discovery;
mod spec;

use std::collections::{BTreeMap, HashSet};

pub use discovery::{Catalog, CatalogEntry, Declaration, Discovery, Merged, Merger, Rejection};
pub use spec::TargetSpec;

use crate::graph::{
    Graph, GraphConfig, GraphError, GraphReadiness, GroupRule, GroupTransition, NodeError,
    NodeKind, NodeSpec, ReadinessLatch, ReadinessPolicy,
};
use crate::health::state::{HealthState, Quality};
use crate::passive::PoolPolicy;
use crate::target::TargetId;

/// Everything the engine runs.
///
/// A plain list of targets converts into a topology without dependencies, scored with the
/// defaults and with the all-targets readiness.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// What to probe. Of duplicate ids the last wins.
    pub targets: Vec<TargetSpec>,
    /// What depends on what: a [`NodeKind::Probed`] node for each target that has dependencies,
    /// and a [`NodeKind::Group`] node for each group. A target without a node is a leaf.
    pub nodes: Vec<NodeSpec>,
    /// How scores are computed.
    pub scoring: GraphConfig,
    /// What readiness requires: `None` for "every target UP, DEGRADED or in MAINTENANCE". A
    /// required id that is in no target or group fails readiness (it may come from a source that
    /// has not declared it yet).
    pub readiness: Option<ReadinessPolicy>,
    /// Groups run as pools, by group id: their target members are ejected on real-traffic
    /// failures, readmitted through recovery and ramped back by slow start.
    pub pools: BTreeMap<TargetId, PoolPolicy>,
    /// How groups are judged, by group id ([`GroupRule`]); a group not listed has the default
    /// rule.
    pub groups: BTreeMap<TargetId, GroupRule>,
}

impl From<Vec<TargetSpec>> for Topology {
    fn from(targets: Vec<TargetSpec>) -> Self {
        Self {
            targets,
            ..Self::default()
        }
    }
}

/// Why a [`Topology`] was not applied. Nothing changed then.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// The dependencies do not form a valid graph; every problem is listed.
    #[error("invalid dependency graph: {}", located(.0))]
    Graph(Vec<GraphError>),
    /// A probed node needs a target to be probed.
    #[error("node {0} is declared as probed but no target has its id")]
    NotATarget(TargetId),
    /// A group has no probe, so it cannot share its id with a target.
    #[error("group {0} has the id of a target")]
    GroupIsTarget(TargetId),
    /// A pool is a group of members: a target or an unknown id cannot be one.
    #[error("pool {0} is not a group")]
    PoolNotAGroup(TargetId),
    /// A group rule judges a group's score: a target or an unknown id cannot have one.
    #[error("group rule for {0}, which is not a group")]
    RuleNotAGroup(TargetId),
}

impl Topology {
    /// Checks the topology as [`Engine::apply`](super::Engine::apply) does, without applying
    /// it: for a front end that merges sources and wants to know what the engine would refuse.
    ///
    /// # Errors
    /// What `apply` would return.
    pub fn check(&self) -> Result<(), TopologyError> {
        let mut ids: Vec<&TargetId> = self.targets.iter().map(|t| &t.id).collect();
        ids.sort();
        ids.dedup();
        let nodes = graph_nodes(&ids, self.nodes.clone(), &self.pools, &self.groups)?;
        Graph::build(self.scoring, &nodes)
            .map(drop)
            .map_err(TopologyError::Graph)
    }
}

/// Graph errors on one line, each after its origin.
fn located(errors: &[GraphError]) -> String {
    let shown: Vec<String> = errors
        .iter()
        .map(|e| match e.origin() {
            Some(origin) if !origin.is_empty() => format!("{origin}: {e}"),
            _ => e.to_string(),
        })
        .collect();
    shown.join("; ")
}

/// The targets sorted by id, of duplicate ids the last: the engine's desired set, kept in the one
/// allocation it came in (a map of 100k specs would leave 40 MB of freed nodes behind in the
/// allocator, resident for good).
pub(crate) fn by_id(mut specs: Vec<TargetSpec>) -> Vec<TargetSpec> {
    // Stable: duplicates stay in declaration order, and each later one replaces the kept one.
    specs.sort_by(|a, b| a.id.cmp(&b.id));
    specs.dedup_by(|later, kept| {
        let duplicate = later.id == kept.id;
        if duplicate {
            std::mem::swap(later, kept);
        }
        duplicate
    });
    specs
}

/// The graph nodes of a topology: the declared ones, checked against the targets (`ids`, sorted
/// and unique), the pools and the group rules, plus a leaf for every target without one.
pub(crate) fn graph_nodes(
    ids: &[&TargetId],
    declared: Vec<NodeSpec>,
    pools: &BTreeMap<TargetId, PoolPolicy>,
    rules: &BTreeMap<TargetId, GroupRule>,
) -> Result<Vec<NodeSpec>, TopologyError> {
    let is_target = |id: &TargetId| ids.binary_search(&id).is_ok();
    let mut named = HashSet::new();
    for node in &declared {
        match (node.kind, is_target(&node.id)) {
            (NodeKind::Probed, false) => return Err(TopologyError::NotATarget(node.id.clone())),
            (NodeKind::Group, true) => return Err(TopologyError::GroupIsTarget(node.id.clone())),
            _ => {}
        }
        named.insert(node.id.clone());
    }
    let groups: HashSet<&TargetId> = declared
        .iter()
        .filter(|n| n.kind == NodeKind::Group)
        .map(|n| &n.id)
        .collect();
    if let Some(pool) = pools.keys().find(|id| !groups.contains(id)) {
        return Err(TopologyError::PoolNotAGroup(pool.clone()));
    }
    if let Some(rule) = rules.keys().find(|id| !groups.contains(id)) {
        return Err(TopologyError::RuleNotAGroup(rule.clone()));
    }
    let leaves: Vec<NodeSpec> = ids
        .iter()
        .filter(|id| !named.contains(**id))
        .map(|id| NodeSpec {
            id: (*id).clone(),
            kind: NodeKind::Probed,
            depends_on: Vec::new(),
        })
        .collect();
    let mut nodes = declared;
    nodes.extend(leaves);
    Ok(nodes)
}

/// The graph and the readiness policy's latch over it, changed together by the hub.
pub(crate) struct Dependencies {
    pub graph: Graph,
    latch: Option<ReadinessLatch>,
}

impl Dependencies {
    pub fn new() -> Self {
        Self {
            graph: Graph::empty(GraphConfig::default()),
            latch: None,
        }
    }

    /// Installs a new topology's graph, scoring, group rules and policy.
    pub fn apply(
        &mut self,
        nodes: &[NodeSpec],
        scoring: GraphConfig,
        rules: BTreeMap<TargetId, GroupRule>,
        readiness: Option<ReadinessPolicy>,
    ) -> Result<(), TopologyError> {
        self.graph.apply(nodes).map_err(TopologyError::Graph)?;
        self.graph.reconfigure(scoring);
        self.graph.set_group_rules(rules);
        self.latch = match (self.latch.take(), readiness) {
            (_, None) => None,
            (Some(mut latch), Some(policy)) => {
                latch.set_policy(policy);
                Some(latch)
            }
            (None, Some(policy)) => Some(ReadinessLatch::new(policy)),
        };
        self.refresh();
        Ok(())
    }

    /// Records a target's result and the state it left the target in.
    pub fn record(&mut self, id: &TargetId, quality: Quality, state: HealthState) {
        let recorded = self.graph.record(id, quality, state);
        self.after(recorded);
    }

    /// Records a target's state change without a result.
    pub fn set_state(&mut self, id: &TargetId, state: HealthState) {
        let recorded = self.graph.set_state(id, state);
        self.after(recorded);
    }

    /// Marks a target out of service (ejected) or back.
    pub fn set_out(&mut self, id: &TargetId, out: bool) {
        let recorded = self.graph.set_out(id, out);
        self.after(recorded);
    }

    /// Sets a target's SLA (see [`Graph::set_sla`]).
    pub fn set_sla(&mut self, id: &TargetId, sla: Option<f64>) {
        let recorded = self.graph.set_sla(id, sla);
        self.after(recorded);
    }

    /// Forgets a restarted target's results.
    pub fn reset(&mut self, id: &TargetId) {
        let recorded = self.graph.reset(id);
        self.after(recorded);
    }

    /// Judges every group once ([`Graph::judge`]).
    pub fn judge(&mut self) -> Vec<GroupTransition> {
        self.graph.judge(tokio::time::Instant::now())
    }

    /// Takes down the groups whose critical dependency `id` went DOWN
    /// ([`Graph::judge_critical`]).
    pub fn judge_critical(&mut self, id: &TargetId) -> Vec<GroupTransition> {
        self.graph.judge_critical(id)
    }

    /// The policy's verdict; `None` without a policy.
    pub fn verdict(&self) -> Option<&GraphReadiness> {
        self.latch.as_ref().map(ReadinessLatch::verdict)
    }

    /// A target that just left the topology may still report one last result; it is not in the
    /// graph any more, which is fine.
    fn after(&mut self, recorded: Result<usize, NodeError>) {
        if recorded.is_ok() {
            self.refresh();
        }
    }

    /// Re-evaluates readiness, logging a flip.
    fn refresh(&mut self) {
        let Some(latch) = &mut self.latch else { return };
        if latch.update(&self.graph) {
            let GraphReadiness { ready, reason, .. } = latch.verdict();
            tracing::info!(
                ready,
                reason = reason.as_deref().unwrap_or(""),
                "readiness changed"
            );
        }
    }
}
