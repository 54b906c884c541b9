//! The engine: the set of targets, the scheduler that probes them, and the health snapshot that
//! servers read.
//!
//! Serving health never probes. Each probe run updates its target's status under a short,
//! uncontended lock, and the engine keeps running totals (targets, healthy targets) so that the
//! hot readiness question is two atomic loads. A status or listing request copies what the last
//! runs left behind.
//!
//! Topology changes arrive as a whole desired set ([`Engine::apply`]) and are applied as a diff:
//! targets whose spec did not change keep their state, counters, schedule and score; removed
//! targets stop; added and changed targets start fresh in `PROBING`.
//!
//! Each result also feeds the dependency graph ([`crate::graph`]), which rescores the target's
//! ancestors right away, so scores, `dependency_down` marks and a graph-based readiness verdict
//! (when the topology has a [`ReadinessPolicy`](crate::graph::ReadinessPolicy)) are as fresh as
//! the last result, and reading them is a lookup.
//!
//! Every transition is logged once, counted once (`probe_state_transitions_total`) and reflected
//! in `probe_target_up` and broadcast to subscribers ([`Engine::subscribe`]), all from one place.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod passive;
pub(crate) mod spec;
mod topology;

use crate::passive::pools::Pools;
pub use passive::{CircuitCommand, Lease, PickError, Reporter};
pub use spec::TargetSpec;
use topology::{Dependencies, by_id, graph_nodes};
pub use topology::{Topology, TopologyError};

use crate::graph::{Graph, GraphReadiness};
use crate::outcome::{CheckResult, DnsTrouble, Failure, FailureReason, Outcome, Signal, Verdict};
use crate::passive::breaker::{BreakerConfig, CircuitBreaker, CircuitSnapshot};
use crate::passive::outlier::MemberStatus;
use crate::resolve::{Names, Resolver};
use crate::scheduler::{Job, Scheduler, SchedulerConfig};
use crate::sync::{lock, read, write};
use crate::target::TargetId;
use crate::tier::probe::Probe;
use crate::tier::spec::ProbeSpec;
use crate::verdict::backoff::SuccessWindow;
use crate::verdict::maintenance::MaintenanceWindow;
use crate::verdict::policy::{FlapPolicy, Schedule, Thresholds};
use crate::verdict::self_health::{SelfHealth, SelfHealthConfig};
use crate::verdict::state::{Cause, HealthState, Pending, Quality, StateMachine, Transition};

/// Engine settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Limits of the worker pool.
    pub scheduler: SchedulerConfig,
    /// How many recent results each target keeps for the API.
    pub history: usize,
    /// How the engine notices its own slowness ([`crate::verdict`]); `None` trusts every
    /// timeout.
    pub self_health: Option<SelfHealthConfig>,
}

impl Default for EngineConfig {
    /// The scheduler's defaults, a history of 16 results (256 bytes per target, which keeps a
    /// target under 1 KiB in all) and self-health awareness with its defaults.
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            history: 16,
            self_health: Some(SelfHealthConfig::default()),
        }
    }
}

/// What [`Engine::apply`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Targets that were not there before.
    pub added: Vec<TargetId>,
    /// Targets that are gone.
    pub removed: Vec<TargetId>,
    /// Targets whose spec changed: restarted in `PROBING`.
    pub changed: Vec<TargetId>,
    /// How many targets were left untouched.
    pub unchanged: usize,
}

impl Diff {
    /// Whether the apply changed nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// A copy of one target's health, as the API shows it.
#[derive(Clone, Debug)]
pub struct TargetStatus {
    /// The target's id.
    pub id: TargetId,
    /// The current state.
    pub state: HealthState,
    /// Whether the target is held in PROBING for flapping.
    pub flapping: bool,
    /// A change of verdict being confirmed (toward DOWN after a failure of an UP target, say);
    /// the state is the verdict in force until it completes.
    pub pending: Option<Pending>,
    /// The latest run, if any.
    pub last: Option<Outcome>,
    /// The latest failure with its detail, kept after later successes for diagnosis.
    pub last_failure: Option<Failure>,
    /// Why the latest run was degraded; empty when it was not.
    pub degraded_reasons: Vec<String>,
    /// The business signals of the latest run.
    pub signals: Vec<Signal>,
    /// What the latest run worked around to reach its verdict ([`Remarks::describe`]), e.g. a
    /// stale DNS answer used while the resolver failed.
    ///
    /// [`Remarks::describe`]: crate::outcome::Remarks::describe
    pub note: Option<String>,
    /// The maintenance in force, if any.
    pub maintenance: Option<MaintenanceInfo>,
    /// Passing results in a row.
    pub consecutive_successes: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// State changes since the target was added.
    pub transitions: u64,
    /// The target's schedule.
    pub schedule: Schedule,
    /// Recent results, oldest first; empty in listings.
    pub history: Vec<Outcome>,
    /// The dependency-graph score in `[0, 1]`; `None` while unknown.
    pub score: Option<f64>,
    /// Whether a critical dependency is DOWN. The target's own state is not affected: it keeps
    /// being probed, and alerts on it can be suppressed on this basis.
    pub dependency_down: bool,
    /// The target's standing in its pool ([`Topology::pools`]): ejection, recovery phase and
    /// routing weight; `None` when it is in no pool. In several pools: the one that has it out,
    /// with its smallest weight.
    pub pool: Option<MemberStatus>,
    /// Its circuit breaker's state and figures; `None` without one.
    pub circuit: Option<CircuitSnapshot>,
}

impl TargetStatus {
    /// Whether the target serves (UP or DEGRADED).
    pub fn healthy(&self) -> bool {
        self.state.is_healthy()
    }
}

/// Where a maintenance comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceSource {
    /// Set through the API (or restored from the daemon's state file).
    Operator,
    /// A window declared with the target.
    Window,
}

impl MaintenanceSource {
    /// The lowercase name used in the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Window => "window",
        }
    }
}

/// A maintenance in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceInfo {
    /// Why, as the operator said (or "scheduled window").
    pub reason: String,
    /// Who set it.
    pub source: MaintenanceSource,
    /// When it ends by itself (wall clock).
    pub until: SystemTime,
}

/// One state change, as broadcast to subscribers ([`Engine::subscribe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The target that moved.
    pub target: TargetId,
    /// The state before.
    pub from: HealthState,
    /// The state after.
    pub to: HealthState,
    /// Why it moved.
    pub cause: Cause,
    /// When (wall clock).
    pub at: SystemTime,
    /// The failure or maintenance reason behind it, when there is one.
    pub detail: Option<String>,
}

/// Why an operator request on a target could not be done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No target has this id.
    #[error("no target {:?}", .0.as_str())]
    UnknownTarget(TargetId),
    /// Ending maintenance of a target that is not in maintenance.
    #[error("target {:?} is not in maintenance", .0.as_str())]
    NotInMaintenance(TargetId),
    /// Commanding the circuit breaker of a target that has none.
    #[error("target {:?} has no circuit breaker", .0.as_str())]
    NoCircuitBreaker(TargetId),
    /// Clearing the ejection of a target that no pool has out.
    #[error("target {:?} is not ejected", .0.as_str())]
    NotEjected(TargetId),
}

/// The engine's readiness verdict.
///
/// Without a readiness policy: ready when every target is UP, DEGRADED or in MAINTENANCE, and
/// the counts are of targets. With one: ready when every required node passes (see
/// [`ReadinessLatch`](crate::graph::ReadinessLatch)), and the counts are of required nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Whether the instance should receive traffic.
    pub ready: bool,
    /// Targets in the engine, or required nodes.
    pub total: usize,
    /// Targets that keep the engine ready (UP, DEGRADED or MAINTENANCE), or passing required
    /// nodes.
    pub healthy: usize,
    /// A short reason when not ready: up to five of the other targets, or why each failing
    /// required node fails.
    pub reason: Option<String>,
}

/// Running totals, so readiness does not walk every target.
#[derive(Default)]
struct Tally {
    total: AtomicUsize,
    ready: AtomicUsize,
    /// The targets that keep the engine from being ready, so that naming a few of them takes a
    /// glance rather than a walk over a million healthy ones. Changed on transitions only.
    unready: Mutex<BTreeSet<TargetId>>,
}

impl Tally {
    fn add(&self, id: &TargetId) {
        self.total.fetch_add(1, Ordering::AcqRel);
        lock(&self.unready).insert(id.clone());
    }

    fn remove(&self, id: &TargetId, ready: bool) {
        self.total.fetch_sub(1, Ordering::AcqRel);
        if ready {
            self.ready.fetch_sub(1, Ordering::AcqRel);
        } else {
            lock(&self.unready).remove(id);
        }
    }

    fn moved(&self, id: &TargetId, from: bool, to: bool) {
        match (from, to) {
            (false, true) => {
                self.ready.fetch_add(1, Ordering::AcqRel);
                lock(&self.unready).remove(id);
            }
            (true, false) => {
                self.ready.fetch_sub(1, Ordering::AcqRel);
                lock(&self.unready).insert(id.clone());
            }
            _ => {}
        }
    }
}

/// How many state changes a slow subscriber may fall behind before it misses some.
const EVENT_BACKLOG: usize = 1024;

/// The probe engine. Cheap to clone; clones share the same targets.
#[derive(Clone)]
pub struct Engine {
    targets: Arc<RwLock<BTreeMap<TargetId, Arc<Target>>>>,
    /// The readiness policy's verdict, published by the graph (`None` without a policy).
    verdict: Arc<RwLock<Option<GraphReadiness>>>,
    scheduler: Scheduler,
    shared: Arc<Shared>,
}

/// What the engine and every target share: one pointer in each target rather than six.
struct Shared {
    deps: Mutex<Dependencies>,
    pools: Mutex<Pools>,
    tally: Tally,
    events: broadcast::Sender<Event>,
    /// Results kept per target.
    history: usize,
    self_health: Option<Arc<SelfHealth>>,
    /// The one resolver every probe looks its names up through.
    resolver: Arc<Resolver>,
}

impl Engine {
    /// Starts an engine with no targets on the current tokio runtime, resolving names with the
    /// host's configuration ([`Resolver::system`]).
    ///
    /// Cancelling `cancel` stops probing; [`Engine::stopped`] then resolves when in-flight probes
    /// have finished.
    pub fn start(config: EngineConfig, cancel: CancellationToken) -> Self {
        Self::start_with_resolver(config, Arc::new(Resolver::system()), cancel)
    }

    /// [`Engine::start`], with names resolved through `resolver`, shared by every probe (and
    /// by the embedder, who may keep a clone to read its health).
    pub fn start_with_resolver(
        config: EngineConfig,
        resolver: Arc<Resolver>,
        cancel: CancellationToken,
    ) -> Self {
        let verdict = Arc::default();
        let engine = Self {
            targets: Arc::default(),
            shared: Arc::new(Shared {
                deps: Mutex::new(Dependencies::new(Arc::clone(&verdict))),
                pools: Mutex::default(),
                tally: Tally::default(),
                events: broadcast::channel(EVENT_BACKLOG).0,
                history: config.history,
                self_health: config.self_health.map(|c| Arc::new(SelfHealth::new(c))),
                resolver,
            }),
            verdict,
            scheduler: Scheduler::start(config.scheduler, cancel.clone()),
        };
        if let Some(health) = &engine.shared.self_health {
            tokio::spawn(health.clone().watch(cancel.clone()));
        }
        tokio::spawn(engine.clone().tick_pools(cancel));
        engine
    }

    /// Makes `topology` the engine's whole desired state, touching only what changed: a plain
    /// `Vec<TargetSpec>` will do when there are no dependencies.
    ///
    /// Target ids are expected to be unique (front ends validate this); of duplicates the last
    /// wins. Changing only a target's dependencies does not restart it.
    ///
    /// # Errors
    /// [`TopologyError`] when the dependencies or the readiness policy do not fit the targets;
    /// nothing changes then.
    pub fn apply(&self, topology: impl Into<Topology>) -> Result<Diff, TopologyError> {
        let Topology {
            targets: specs,
            nodes,
            scoring,
            readiness,
            pools,
        } = topology.into();
        let desired = by_id(specs);
        let ids: Vec<&TargetId> = desired.iter().map(|s| &s.id).collect();
        let nodes = graph_nodes(&ids, nodes, &pools)?;
        let is_desired = |id: &TargetId| ids.binary_search(&id).is_ok();
        // Held throughout, so that applies do not interleave.
        let mut targets = write(&self.targets);
        // Lock order (status, then graph) forbids holding the graph lock while retiring; the graph
        // is changed first since it is the step that can fail.
        lock(&self.shared.deps).apply(&nodes, scoring, readiness)?;
        let mut diff = Diff::default();
        targets.retain(|id, target| {
            let keep = is_desired(id);
            if !keep {
                target.retire();
                self.scheduler.remove(id);
                diff.removed.push(id.clone());
            }
            keep
        });
        // Each with the operator maintenance it carries over from its previous spec.
        drop(ids);
        let mut launch = Vec::new();
        let mut policies = Policies::default();
        for spec in desired {
            let (id, probe, policy) = Policy::split(spec);
            match targets.get(&id) {
                Some(current) if current.probe_spec == probe && *current.policy == policy => {
                    diff.unchanged += 1;
                }
                Some(current) => {
                    current.retire();
                    diff.changed.push(id.clone());
                    let maintenance = current
                        .lock()
                        .maintenance
                        .clone()
                        .filter(|m| m.info.source == MaintenanceSource::Operator);
                    launch.push((id, probe, policies.intern(policy), maintenance));
                }
                None => {
                    diff.added.push(id.clone());
                    launch.push((id, probe, policies.intern(policy), None));
                }
            }
        }
        // Retired, the old probes no longer record: forget their results before the new ones
        // can record theirs.
        {
            let mut deps = lock(&self.shared.deps);
            for id in &diff.changed {
                deps.reset(id);
            }
        }
        self.scheduler.reserve(launch.len());
        for (id, probe, policy, maintenance) in launch {
            let target = self.launch(id, probe, policy);
            if let Some(maintenance) = maintenance {
                target.enter_maintenance(*maintenance);
            }
            targets.insert(target.id.clone(), target);
        }
        let pooled = {
            let mut current = lock(&self.shared.pools);
            let before = !current.is_empty();
            current.apply(
                &pools,
                &nodes,
                |id| targets.contains_key(id),
                Instant::now(),
            );
            before || !current.is_empty()
        };
        // Members that left a pool come back, restarted members stay out. Without pools before
        // or after, no target can be ejected: nothing to look at.
        if pooled {
            let pools = lock(&self.shared.pools);
            let ejected: Vec<_> = targets
                .values()
                .map(|t| (t.clone(), pools.is_out(&t.id)))
                .collect();
            drop(pools);
            for (target, out) in ejected {
                target.set_ejected(out);
            }
        }
        Ok(diff)
    }

    fn launch(&self, id: TargetId, probe: ProbeSpec, policy: Arc<Policy>) -> Arc<Target> {
        let target = Arc::new(Target::new(id, probe, policy, self.shared.clone()));
        self.scheduler.insert(target.clone());
        target
    }

    fn target(&self, id: &TargetId) -> Result<Arc<Target>, EngineError> {
        read(&self.targets)
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::UnknownTarget(id.clone()))
    }

    /// One target's status with its recent history.
    pub fn status(&self, id: &TargetId) -> Option<TargetStatus> {
        let mut status = self.target(id).ok()?.status(true);
        score(&lock(&self.shared.deps).graph, &mut status);
        status.pool = lock(&self.shared.pools).member(id, Instant::now());
        Some(status)
    }

    /// Every target's status, sorted by id, without history.
    pub fn statuses(&self) -> Vec<TargetStatus> {
        let targets: Vec<_> = read(&self.targets).values().cloned().collect();
        let mut statuses: Vec<_> = targets.iter().map(|t| t.status(false)).collect();
        {
            let deps = lock(&self.shared.deps);
            for status in &mut statuses {
                score(&deps.graph, status);
            }
        }
        let pools = lock(&self.shared.pools);
        let now = Instant::now();
        for status in &mut statuses {
            status.pool = pools.member(&status.id, now);
        }
        statuses
    }

    /// Runs `f` on the dependency graph, for explanations and exports. The graph is locked
    /// meanwhile, holding up every probe's result: copy out what you need and return.
    pub fn with_graph<R>(&self, f: impl FnOnce(&Graph) -> R) -> R {
        f(&lock(&self.shared.deps).graph)
    }

    /// Sets the gauges that move with time or with results elsewhere:
    /// `probe_health_score{target}` (NaN while unknown) and `probe_dependency_down{target}` for
    /// every node of the graph, groups included; `probe_target_weight{target}` and
    /// `probe_ejected{target}` for every pool member; `probe_circuit_state{target}` for every
    /// circuit breaker.
    ///
    /// Scores move with every result somewhere below a node and weights with the clock (slow
    /// start), so rather than touching gauges on each change, an exporter calls this right
    /// before it renders.
    pub fn publish_gauges(&self) {
        let nodes = self.with_graph(|g| g.export().nodes);
        for node in nodes {
            let label = node.id.as_str().to_owned();
            metrics::gauge!("probe_health_score", "target" => label.clone())
                .set(node.score.unwrap_or(f64::NAN));
            metrics::gauge!("probe_dependency_down", "target" => label)
                .set(if node.dependency_down { 1.0 } else { 0.0 });
        }
        // Only pool members and targets with a breaker: not a full status copy of every target.
        let now = Instant::now();
        let members = lock(&self.shared.pools).members(now);
        for member in members {
            let label = member.id.as_str().to_owned();
            metrics::gauge!("probe_target_weight", "target" => label.clone()).set(member.weight);
            metrics::gauge!("probe_ejected", "target" => label).set(if member.ejected {
                1.0
            } else {
                0.0
            });
        }
        let breakers: Vec<Arc<Target>> = read(&self.targets)
            .values()
            .filter(|t| t.breaker.is_some())
            .cloned()
            .collect();
        for target in breakers {
            if let Some(circuit) = target.circuit(now) {
                metrics::gauge!("probe_circuit_state", "target" => target.id.as_str().to_owned())
                    .set(f64::from(circuit.state.code()));
            }
        }
    }

    /// Whether the instance should receive traffic: from the readiness policy when the topology
    /// has one, else whether every target is UP, DEGRADED or in MAINTENANCE (O(1) when it is).
    pub fn readiness(&self) -> Readiness {
        if let Some(verdict) = read(&self.verdict).as_ref() {
            return Readiness {
                ready: verdict.ready,
                total: verdict.required,
                healthy: verdict.passing,
                reason: verdict.reason.clone(),
            };
        }
        let total = self.shared.tally.total.load(Ordering::Acquire);
        let healthy = self.shared.tally.ready.load(Ordering::Acquire);
        if healthy >= total {
            return Readiness {
                ready: true,
                total,
                healthy,
                reason: None,
            };
        }
        const NAMED: usize = 5;
        let named: Vec<TargetId> = lock(&self.shared.tally.unready)
            .iter()
            .take(NAMED)
            .cloned()
            .collect();
        let others: Vec<String> = named
            .iter()
            .filter_map(|id| {
                let state = self.target(id).ok()?.lock().machine.state();
                Some(format!("{id} ({state})"))
            })
            .collect();
        let more = (total - healthy).saturating_sub(others.len());
        let mut reason = format!(
            "{} of {total} targets not healthy: {}",
            total - healthy,
            others.join(", ")
        );
        if more > 0 {
            reason.push_str(&format!(" and {more} more"));
        }
        Readiness {
            ready: false,
            total,
            healthy,
            reason: Some(reason),
        }
    }

    /// Puts a target in maintenance for `duration`, replacing any maintenance in force. Probes
    /// keep running; the state stays MAINTENANCE until it expires or [`Engine::end_maintenance`].
    /// It survives a change of the target's spec.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`].
    pub fn start_maintenance(
        &self,
        id: &TargetId,
        reason: String,
        duration: Duration,
    ) -> Result<MaintenanceInfo, EngineError> {
        let target = self.target(id)?;
        let info = MaintenanceInfo {
            reason,
            source: MaintenanceSource::Operator,
            until: SystemTime::now() + duration,
        };
        target.enter_maintenance(ActiveMaintenance {
            info: info.clone(),
            deadline: Some(Instant::now() + duration),
        });
        Ok(info)
    }

    /// Ends a target's maintenance now: the target goes to PROBING. Ending a declared window
    /// keeps it from starting again until the window is over.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`], or [`EngineError::NotInMaintenance`].
    pub fn end_maintenance(&self, id: &TargetId) -> Result<(), EngineError> {
        let target = self.target(id)?;
        let transition = {
            let mut status = target.lock();
            let ended = status
                .maintenance
                .take()
                .ok_or_else(|| EngineError::NotInMaintenance(id.clone()))?;
            if ended.info.source == MaintenanceSource::Window {
                status.window_ended_early = Some(ended.info.until);
            }
            let t = status.machine.end_maintenance();
            target.change(&mut status, t)
        };
        target.announce(transition, Some("ended by operator"));
        Ok(())
    }

    /// Maintenance set by operators and still in force, for a front end to persist.
    pub fn operator_maintenance(&self) -> Vec<(TargetId, MaintenanceInfo)> {
        let targets: Vec<_> = read(&self.targets).values().cloned().collect();
        targets
            .iter()
            .filter_map(|t| {
                let status = t.lock();
                let m = status.maintenance.as_ref()?;
                (m.info.source == MaintenanceSource::Operator)
                    .then(|| (t.id.clone(), m.info.clone()))
            })
            .collect()
    }

    /// A stream of every state change from now on. A subscriber that falls more than 1024
    /// events behind misses the oldest (and is told so by `RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// The engine's local health multiplier (0 when it keeps time); `None` without self-health
    /// awareness.
    pub fn self_health(&self) -> Option<u32> {
        self.shared.self_health.as_ref().map(|h| h.multiplier())
    }

    /// The resolver the probes share: its health ([`Resolver::health`]) says whether it is out,
    /// and [`Resolver::reconfigure`] points it elsewhere.
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.shared.resolver
    }

    /// The scheduler, for its live figures (workers, probes in flight).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Resolves once the engine was cancelled and in-flight probes have finished.
    pub async fn stopped(&self) {
        self.scheduler.stopped().await;
    }
}

/// Copies a target's graph figures into its status.
fn score(graph: &Graph, status: &mut TargetStatus) {
    if let Some(node) = graph.status(&status.id) {
        status.score = node.score;
        status.dependency_down = node.dependency_down;
    }
}

/// A target's spec besides its id and probe: what it weighs most. Targets declared alike (most
/// of them: a file's defaults) share one copy.
#[derive(Debug, PartialEq)]
struct Policy {
    schedule: Schedule,
    thresholds: Thresholds,
    flap: Option<FlapPolicy>,
    maintenance: Vec<MaintenanceWindow>,
    circuit_breaker: Option<BreakerConfig>,
    skip_active_after: Option<NonZeroU32>,
    dns_stale_for: Duration,
}

impl Policy {
    /// A spec as the engine keeps it: id, probe and policy.
    fn split(spec: TargetSpec) -> (TargetId, ProbeSpec, Self) {
        let TargetSpec {
            id,
            probe,
            schedule,
            thresholds,
            flap,
            maintenance,
            circuit_breaker,
            skip_active_after,
            dns_stale_for,
        } = spec;
        let policy = Self {
            schedule,
            thresholds,
            flap,
            maintenance,
            circuit_breaker,
            skip_active_after,
            dns_stale_for,
        };
        (id, probe, policy)
    }
}

/// The policies met lately in one apply, so that targets declared alike share one. A few are
/// kept, not all: targets come sorted by id, so kinds declared in turn (HTTP and TCP targets
/// in one file) alternate, while a search through every distinct policy would cost an apply of
/// a million targets, each with its own, a quadratic time.
#[derive(Default)]
struct Policies(Vec<Arc<Policy>>);

impl Policies {
    const KEPT: usize = 8;

    fn intern(&mut self, policy: Policy) -> Arc<Policy> {
        if let Some(known) = self.0.iter().find(|known| ***known == policy) {
            return known.clone();
        }
        let policy = Arc::new(policy);
        self.0.insert(0, policy.clone());
        self.0.truncate(Self::KEPT);
        policy
    }
}

/// A target as the engine runs it.
struct Target {
    id: TargetId,
    /// How it is probed: kept to tell a changed spec from the same one, and for leases.
    probe_spec: ProbeSpec,
    policy: Arc<Policy>,
    probe: Arc<dyn Probe>,
    status: Mutex<Status>,
    /// Boxed: most targets have none, and a breaker is 224 bytes.
    breaker: Option<Box<Mutex<CircuitBreaker>>>,
    shared: Arc<Shared>,
    /// Handles registered once, so a probe run updates metrics without a registry lookup.
    success: metrics::Gauge,
    up: metrics::Gauge,
    duration: metrics::Histogram,
}

#[derive(Clone)]
struct ActiveMaintenance {
    info: MaintenanceInfo,
    /// When an operator's maintenance expires, on the engine's clock (so paused-time tests and
    /// wall-clock jumps agree). Windows end by the wall clock instead.
    deadline: Option<Instant>,
}

impl ActiveMaintenance {
    fn is_over(&self, now: Instant, wall: SystemTime) -> bool {
        match self.deadline {
            Some(deadline) => now >= deadline,
            None => wall >= self.info.until,
        }
    }
}

/// What runs said beyond pass or fail. Boxed in the status, allocated at the first run that
/// says any of it: most targets never fail, degrade or signal, and inline these are 80 bytes in
/// every one of them.
#[derive(Default)]
struct Details {
    /// The latest failure, kept after later successes for diagnosis.
    last_failure: Option<Failure>,
    /// Why the latest run was degraded; empty when it was not.
    degraded_reasons: Vec<String>,
    /// The business signals of the latest run.
    signals: Vec<Signal>,
    /// What the latest run worked around, in words.
    note: Option<String>,
}

impl Details {
    /// Keeps what the run `result` said in `details`.
    fn record(details: &mut Option<Box<Self>>, result: &CheckResult) {
        let reasons: &[String] = match &result.verdict {
            Verdict::Degraded(reasons) => reasons,
            Verdict::Up | Verdict::Failed(_) => &[],
        };
        let failure = result.failure();
        if details.is_none()
            && failure.is_none()
            && reasons.is_empty()
            && result.signals.is_empty()
            && result.remarks.is_empty()
        {
            return;
        }
        let details = details.get_or_insert_default();
        if let Some(failure) = failure {
            details.last_failure = Some(failure.clone());
        }
        details.degraded_reasons.clear();
        details.degraded_reasons.extend_from_slice(reasons);
        details.signals.clone_from(&result.signals);
        details.note = result.remarks.describe();
    }
}

struct Status {
    machine: StateMachine,
    window: SuccessWindow,
    last: Option<Outcome>,
    details: Option<Box<Details>>,
    history: VecDeque<Outcome>,
    transitions: u64,
    /// Boxed: rare, and 64 bytes inline for every target.
    maintenance: Option<Box<ActiveMaintenance>>,
    /// A declared window an operator ended early: it does not restart before this time.
    window_ended_early: Option<SystemTime>,
    /// Set when the target leaves the engine: its late results no longer move the totals.
    retired: bool,
    /// Passive successes since the last run, and whether a passive failure came in meanwhile.
    passive_successes: u32,
    passive_failed: bool,
}

impl Target {
    fn new(id: TargetId, probe_spec: ProbeSpec, policy: Arc<Policy>, shared: Arc<Shared>) -> Self {
        shared.tally.add(&id);
        let label = id.as_str().to_owned();
        let up = metrics::gauge!("probe_target_up", "target" => label.clone());
        up.set(0.0);
        Self {
            probe: crate::tier::build(
                &probe_spec,
                &Names::new(shared.resolver.clone(), policy.dns_stale_for),
            ),
            status: Mutex::new(Status {
                machine: StateMachine::new(policy.thresholds, policy.flap),
                window: SuccessWindow::default(),
                last: None,
                details: None,
                history: VecDeque::new(),
                transitions: 0,
                maintenance: None,
                window_ended_early: None,
                retired: false,
                passive_successes: 0,
                passive_failed: false,
            }),
            breaker: policy
                .circuit_breaker
                .map(|c| Box::new(Mutex::new(CircuitBreaker::new(c)))),
            shared,
            success: metrics::gauge!("probe_success", "target" => label.clone()),
            up,
            duration: metrics::histogram!("probe_duration_seconds", "target" => label),
            id,
            probe_spec,
            policy,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        lock(&self.status)
    }

    /// Puts the target in `maintenance`, replacing any in force.
    fn enter_maintenance(&self, maintenance: ActiveMaintenance) {
        let reason = maintenance.info.reason.clone();
        let transition = {
            let mut status = self.lock();
            status.maintenance = Some(Box::new(maintenance));
            let t = status.machine.start_maintenance();
            self.change(&mut status, t)
        };
        self.announce(transition, Some(&reason));
    }

    fn retire(&self) {
        let mut status = self.lock();
        if !status.retired {
            status.retired = true;
            self.shared
                .tally
                .remove(&self.id, status.machine.state().counts_as_ready());
        }
    }

    fn status(&self, with_history: bool) -> TargetStatus {
        let circuit = self.circuit(Instant::now());
        let status = self.lock();
        let details = status.details.as_deref();
        TargetStatus {
            id: self.id.clone(),
            state: status.machine.state(),
            flapping: status.machine.is_flapping(),
            pending: status.machine.pending(),
            last: status.last,
            last_failure: details.and_then(|d| d.last_failure.clone()),
            degraded_reasons: details
                .map(|d| d.degraded_reasons.clone())
                .unwrap_or_default(),
            signals: details.map(|d| d.signals.clone()).unwrap_or_default(),
            note: details.and_then(|d| d.note.clone()),
            maintenance: status.maintenance.as_ref().map(|m| m.info.clone()),
            consecutive_successes: status.machine.consecutive_successes(),
            consecutive_failures: status.machine.consecutive_failures(),
            transitions: status.transitions,
            schedule: self.policy.schedule,
            history: if with_history {
                status.history.iter().copied().collect()
            } else {
                Vec::new()
            },
            // Filled from the graph and the pools by the engine, which must not take their locks
            // under this one.
            score: None,
            dependency_down: false,
            pool: None,
            circuit,
        }
    }

    /// Books a transition under the status lock: counts it, moves the readiness totals and
    /// tells the graph. Returns it for announcing once the lock is released, unless the target
    /// was retired.
    fn change(&self, status: &mut Status, t: Option<Transition>) -> Option<Transition> {
        let t = t?;
        status.transitions += 1;
        if status.retired {
            return None;
        }
        {
            let mut deps = lock(&self.shared.deps);
            deps.set_state(&self.id, t.to);
            deps.set_out(&self.id, status.machine.is_ejected());
        }
        self.shared
            .tally
            .moved(&self.id, t.from.counts_as_ready(), t.to.counts_as_ready());
        Some(t)
    }

    /// Starts or ends maintenance as its expiry and the declared windows say, at a run.
    fn sync_maintenance(
        &self,
        status: &mut Status,
        now: Instant,
        wall: SystemTime,
    ) -> Option<Transition> {
        if let Some(m) = &status.maintenance {
            if !m.is_over(now, wall) {
                return None;
            }
            status.maintenance = None;
            let t = status.machine.end_maintenance();
            return self.change(status, t);
        }
        let until = self
            .policy
            .maintenance
            .iter()
            .filter_map(|w| w.active_until(wall))
            .max()?;
        if status.window_ended_early.is_some_and(|skip| skip >= until) {
            return None;
        }
        status.maintenance = Some(Box::new(ActiveMaintenance {
            info: MaintenanceInfo {
                reason: "scheduled window".into(),
                source: MaintenanceSource::Window,
                until,
            },
            deadline: None,
        }));
        let t = status.machine.start_maintenance();
        self.change(status, t)
    }

    /// Records one run: status, totals, metrics, events and logs, all in one place. A `deferred`
    /// run (a timeout while the engine itself ran late, or resolver trouble while the resolver
    /// is out) is recorded and shown but moves neither the state machine nor the score. Returns
    /// the step to the next run.
    fn record(&self, result: CheckResult, latency: Duration, deferred: bool) -> Duration {
        let wall = SystemTime::now();
        let now = Instant::now();
        let outcome = Outcome::new(wall, latency, &result.verdict);
        let ejected;
        let (maintenance_change, result_change, step, maintenance_reason) = {
            let mut status = self.lock();
            let maintenance_change = self.sync_maintenance(&mut status, now, wall);
            if !deferred {
                status.window.record(outcome.ok());
            }
            status.last = Some(outcome);
            Details::record(&mut status.details, &result);
            if self.shared.history > 0 {
                if status.history.len() >= self.shared.history {
                    status.history.pop_front();
                }
                status.history.push_back(outcome);
            }
            let quality = Quality::from(&result.verdict);
            ejected = status.machine.is_ejected() && !deferred;
            let t = if deferred {
                None
            } else {
                status.machine.observe(quality, now)
            };
            let result_change = self.change(&mut status, t);
            if !status.retired && !deferred {
                let state = status.machine.state();
                lock(&self.shared.deps).record(&self.id, quality, state);
            }
            let step =
                status
                    .machine
                    .next_delay(&self.policy.schedule, &status.window, &mut rand::rng());
            let reason = status.maintenance.as_ref().map(|m| m.info.reason.clone());
            (maintenance_change, result_change, step, reason)
        };
        self.success.set(if outcome.ok() { 1.0 } else { 0.0 });
        self.duration.record(latency);
        if result.remarks.stale_connection_retried {
            metrics::counter!(
                "probe_http_stale_connection_retries_total",
                "target" => self.id.as_str().to_owned()
            )
            .increment(1);
        }
        if deferred {
            metrics::counter!(
                "probe_verdicts_deferred_total",
                "target" => self.id.as_str().to_owned()
            )
            .increment(1);
        }
        if let Some(failure) = result.failure() {
            metrics::counter!(
                "probe_failures_total",
                "target" => self.id.as_str().to_owned(),
                "reason" => failure.reason.as_str()
            )
            .increment(1);
        }
        if result
            .remarks
            .dns_trouble
            .as_ref()
            .is_some_and(DnsTrouble::used_stale_answer)
        {
            metrics::counter!(
                "probe_dns_stale_answers_total",
                "target" => self.id.as_str().to_owned()
            )
            .increment(1);
        }
        for signal in &result.signals {
            metrics::counter!(
                "probe_signals_total",
                "target" => self.id.as_str().to_owned(),
                "signal" => signal.name.to_string()
            )
            .increment(1);
        }
        if ejected {
            // Its active results are its way back into the pool.
            let events = lock(&self.shared.pools).active(&self.id, outcome.ok(), now);
            if !passive::announce(&events).is_empty() {
                self.sync_ejection();
            }
        }
        self.announce(maintenance_change, maintenance_reason.as_deref());
        let detail = match &result.verdict {
            Verdict::Failed(f) => Some(format!("{}: {}", f.reason, f.detail)),
            Verdict::Degraded(reasons) => Some(reasons.join("; ")),
            Verdict::Up => None,
        };
        self.announce(result_change, detail.as_deref());
        step
    }

    /// Logs, counts and broadcasts a transition: the one place an event is emitted.
    fn announce(&self, t: Option<Transition>, detail: Option<&str>) {
        let Some(t) = t else { return };
        let id = self.id.as_str();
        self.up.set(if t.to == HealthState::Up { 1.0 } else { 0.0 });
        metrics::counter!(
            "probe_state_transitions_total",
            "target" => id.to_owned(),
            "from" => t.from.as_str(),
            "to" => t.to.as_str()
        )
        .increment(1);
        tracing::info!(
            target_id = id,
            from = t.from.as_str(),
            to = t.to.as_str(),
            cause = t.cause.as_str(),
            detail = detail.unwrap_or(""),
            "target state changed"
        );
        // No subscribers is fine: the event is still logged and counted.
        let _ = self.shared.events.send(Event {
            target: self.id.clone(),
            from: t.from,
            to: t.to,
            cause: t.cause,
            at: SystemTime::now(),
            detail: detail.map(str::to_owned),
        });
    }
}

#[async_trait::async_trait]
impl Job for Target {
    fn id(&self) -> &TargetId {
        &self.id
    }

    fn interval(&self) -> Duration {
        self.policy.schedule.interval()
    }

    fn jitter(&self) -> f64 {
        self.policy.schedule.jitter()
    }

    async fn run(&self) -> Duration {
        if self.skip_for_traffic() {
            return self.policy.schedule.interval();
        }
        let multiplier = || {
            self.shared
                .self_health
                .as_ref()
                .map_or(0, |h| h.multiplier())
        };
        let before = multiplier();
        let timeout = SelfHealth::scale(
            self.policy.schedule.timeout(),
            before,
            self.policy.schedule.interval(),
        );
        let started = Instant::now();
        // The probe honours the timeout itself and says which phase ran out; this is the
        // backstop for one that does not.
        let backstop = timeout + BACKSTOP_GRACE;
        let result = tokio::time::timeout(backstop, self.probe.check(timeout))
            .await
            .unwrap_or_else(|_| {
                CheckResult::failed(Failure::new(
                    FailureReason::Timeout,
                    format_args!("no verdict within {}", humantime::format_duration(timeout)),
                ))
            });
        let took = started.elapsed();
        // A timeout noticed long after it was due is the engine's own lateness, seen first hand:
        // it counts as a late wake-up.
        let overshoot = took.saturating_sub(timeout);
        let late = self
            .shared
            .self_health
            .as_ref()
            .is_some_and(|h| overshoot > h.config().threshold && h.observe(overshoot) > 0);
        let deferred = (late || before.max(multiplier()) > 0)
            && result
                .failure()
                .is_some_and(|f| f.reason == FailureReason::Timeout);
        // Resolver trouble while the resolver is out (or may be) is the engine's fault too (see
        // `crate::resolve`): a name it could not answer says nothing about the target.
        let deferred =
            deferred || (dns_trouble_failure(&result) && self.shared.resolver.outage_possible());
        self.record(result, took, deferred)
    }
}

/// Whether `result` failed as `dns` because of resolver trouble, not an answer.
fn dns_trouble_failure(result: &CheckResult) -> bool {
    result
        .failure()
        .is_some_and(|f| f.reason == FailureReason::Dns)
        && result
            .remarks
            .dns_trouble
            .as_ref()
            .is_some_and(|t| !t.used_stale_answer())
}

/// How long past its timeout a probe may run before the engine gives up on it.
const BACKSTOP_GRACE: Duration = Duration::from_millis(50);

/// Registers descriptions and units of every metric the library emits.
///
/// Call it once after installing a `metrics` recorder, so exporters can print `# HELP` lines.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        "probe_success",
        "Whether the latest probe of the target succeeded (1) or failed (0)."
    );
    describe_histogram!(
        "probe_duration_seconds",
        Unit::Seconds,
        "How long probe runs took."
    );
    describe_gauge!(
        "probe_target_up",
        "Whether the target's verdict is UP (1) or not (0)."
    );
    describe_counter!(
        "probe_state_transitions_total",
        "Verdict changes of the target, by from and to state."
    );
    describe_counter!(
        "probe_failures_total",
        "Failed probe runs, by closed failure reason."
    );
    describe_histogram!(
        "probe_scheduler_lag_seconds",
        Unit::Seconds,
        "Delay between a run's planned and actual start."
    );
    describe_gauge!("probe_in_flight", "Probe runs in progress.");
    describe_gauge!(
        "probe_health_score",
        "Dependency-graph health score of the target or group in [0, 1]; NaN while unknown."
    );
    describe_gauge!(
        "probe_dependency_down",
        "Whether a critical dependency of the target or group is DOWN (1) or not (0)."
    );
    describe_counter!(
        "probe_signals_total",
        "Business signals recognised in probe replies, by target and signal."
    );
    describe_gauge!(
        "probe_self_health_multiplier",
        "The engine's local health multiplier: 0 when it keeps time; timeouts scale by 1 + it."
    );
    describe_counter!(
        "probe_verdicts_deferred_total",
        "Probe failures not counted towards DOWN because the engine itself ran late, or its \
         resolver was out."
    );
    describe_gauge!(
        "probe_resolver_up",
        "Whether the engine's resolver works (1) or is out (0): trouble for most recent names."
    );
    describe_counter!(
        "probe_resolver_outages_total",
        "Outages of the engine's resolver: DNS failures are not counted against targets meanwhile."
    );
    describe_counter!(
        "probe_http_stale_connection_retries_total",
        "HTTP probe requests sent again on a fresh connection because a reused kept-alive one \
         closed before the reply."
    );
    describe_counter!(
        "probe_dns_stale_answers_total",
        "Probe runs that used a name's last good answer because the resolver had trouble."
    );
    passive::describe_metrics();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::spec::CustomProbe;

    struct Pass;

    #[async_trait::async_trait]
    impl Probe for Pass {
        async fn check(&self, _timeout: Duration) -> CheckResult {
            CheckResult::up()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn targets_declared_alike_share_one_policy() {
        let cancel = CancellationToken::new();
        let engine = Engine::start(EngineConfig::default(), cancel.clone());
        let probe = ProbeSpec::Custom(CustomProbe::new(Arc::new(Pass)));
        let spec = |id: &str| TargetSpec::new(TargetId::new(id).unwrap(), probe.clone());
        let mut slow = spec("b");
        slow.schedule = Schedule::try_new(
            Duration::from_secs(60),
            Duration::from_secs(1),
            0.1,
            None,
            None,
            None,
        )
        .unwrap();
        // Sorted by id, the odd one sits between the others.
        engine
            .apply(vec![spec("a"), slow, spec("c"), spec("d")])
            .unwrap();
        let policy = |id: &str| {
            read(&engine.targets)[&TargetId::new(id).unwrap()]
                .policy
                .clone()
        };
        assert!(Arc::ptr_eq(&policy("a"), &policy("c")));
        assert!(Arc::ptr_eq(&policy("a"), &policy("d")));
        assert!(!Arc::ptr_eq(&policy("a"), &policy("b")));
        assert_eq!(policy("b").schedule.interval(), Duration::from_secs(60));
        cancel.cancel();
        engine.stopped().await;
    }
}
