//! The engine: the set of targets, the scheduler that probes them, and the health snapshots
//! that servers read.
//!
//! Serving health never probes and never waits on a prober. A probe run changes its target under
//! the target's own short lock and books what that means elsewhere as effects; one place, the
//! hub (`effects`), applies them to the readiness tally, the dependency graph and the pools, and
//! publishes immutable snapshots: [`Engine::readiness`] and [`Pools::pick`] load one and take
//! no lock.
//!
//! Topology changes arrive as a whole desired set ([`Engine::apply`]) and are applied as a diff
//! (`apply`): targets whose spec did not change keep their state, counters, schedule and score;
//! removed targets stop; added and changed targets start fresh in `PROBING`.
//!
//! Each result also feeds the dependency graph ([`crate::graph`]), which rescores the target's
//! ancestors right away, so scores, `dependency_down` marks and a graph-based readiness verdict
//! (when the topology has a [`ReadinessPolicy`](crate::graph::ReadinessPolicy)) are as fresh as
//! the last result.
//!
//! Every transition is logged once, counted once (`probe_state_transitions_total`), reflected in
//! `probe_target_up` and broadcast to subscribers ([`Engine::subscribe`]), all from the hub,
//! after the snapshots it changed are published.
//!
//! The folder: `shared` (the parts every method reaches), `runtime` (a target as it runs),
//! `effects` (the hub), `readiness` (the tally), `apply` (topology diffs), `cluster` (the
//! engine's place in a cluster changing), `passive` (real traffic: reports, picks, circuits),
//! `resources` (the engine's own resource faults), `view` (the output) and `metrics`. What it
//! is asked to run is [`crate::topology`].

mod apply;
mod cluster;
mod effects;
mod metrics;
mod passive;
mod readiness;
mod resources;
mod runtime;
mod shared;
mod view;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use cluster::{Cluster, Loads, Reassigned};
pub use metrics::{DURATION_BUCKETS, describe_metrics, target_metric_families};
pub use passive::{CircuitCommand, Lease, PickError, Pools, Reporter};
pub use view::{
    Diff, EngineError, Event, Listed, MaintenanceInfo, MaintenanceSource, Readiness, Record, Run,
    Runs, TargetStatus, Vote, Workload,
};

use crate::graph::{GraphView, NodeKind};
use crate::health::self_health::{SelfHealth, SelfHealthConfig};
use crate::passive::outlier::MemberStatus;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::target::TargetId;
use crate::tier::resolve::Resolver;
use crate::tier::spec::ProbeSpec;
use crate::topology::{Topology, TopologyError};
use effects::{Hub, Seated};
use runtime::{ActiveMaintenance, Context};
use shared::Inner;

/// Engine settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Limits of the worker pool.
    pub scheduler: SchedulerConfig,
    /// How many recent results each target keeps for the API.
    pub history: usize,
    /// How the engine notices its own slowness ([`crate::health`]); `None` trusts every
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

/// The probe engine. Cheap to clone (one pointer); clones share the same targets.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
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
        let self_health = config.self_health.map(|c| Arc::new(SelfHealth::new(c)));
        let scheduler = Scheduler::start(config.scheduler, cancel.clone());
        let resources = Arc::new(resources::Resources::new(
            scheduler.clone(),
            self_health.clone(),
        ));
        tokio::spawn(resources.clone().watch(cancel.clone()));
        let inner = Arc::new(Inner {
            targets: ArcSwap::default(),
            scheduler,
            ctx: Arc::new(Context {
                hub: Hub::new(),
                history: config.history,
                self_health: self_health.clone(),
                resolver,
                fleet: ProbeSpec::KINDS
                    .into_iter()
                    .map(|kind| {
                        let h =
                            ::metrics::histogram!("probe_fleet_duration_seconds", "kind" => kind);
                        (kind, h)
                    })
                    .collect(),
                per_target_histograms: true.into(),
                resources,
                member: std::sync::OnceLock::new(),
            }),
            listing: Mutex::default(),
            membership: Mutex::new(None),
            published: Mutex::default(),
        });
        if let Some(health) = self_health {
            tokio::spawn(health.watch(cancel.clone()));
        }
        tokio::spawn(judge_groups(inner.clone(), cancel.clone()));
        tokio::spawn(passive::tick_pools(inner.clone(), cancel));
        Self { inner }
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
        apply::apply(&self.inner, topology.into())
    }

    /// Whether the engine has a target of this id.
    pub fn contains(&self, id: &TargetId) -> bool {
        self.inner.targets.load().contains_key(id)
    }

    /// One target's status with its recent history.
    pub fn status(&self, id: &TargetId) -> Option<TargetStatus> {
        let mut status = self.inner.target(id).ok()?.status(true);
        score(&self.inner.hub().graph(), &mut status);
        status.pool = self.inner.hub().member(id, Instant::now());
        Some(status)
    }

    /// Every target's status, sorted by id, without history.
    pub fn statuses(&self) -> Vec<TargetStatus> {
        let targets = self.inner.targets.load_full();
        let mut statuses: Vec<_> = targets.values().map(|t| t.status(false)).collect();
        let graph = self.inner.hub().graph();
        for status in &mut statuses {
            score(&graph, status);
        }
        let now = Instant::now();
        for status in &mut statuses {
            status.pool = self.inner.hub().member(&status.id, now);
        }
        statuses
    }

    /// Every target's status, sorted by id, without history, for a listing served often: each
    /// target's copy is shared with the previous listing while nothing of it changed, so a
    /// caller that keeps what it derived from a copy (a serialised fragment, keyed by the
    /// `Arc`'s pointer) redoes only the targets that changed.
    pub fn listing(&self) -> Vec<Arc<TargetStatus>> {
        self.listing_where(None, None, |_| true).targets
    }

    /// A page of [`Engine::listing`]: the targets after `after` (by id) that `keep` accepts, at
    /// most `limit` of them. The filter runs on each target's shared copy before anything is
    /// cloned for the page, and the walk starts at `after` and stops once the page is full, so
    /// a page or a narrow filter costs what it shows, not a copy of the whole fleet.
    pub fn listing_where(
        &self,
        after: Option<&TargetId>,
        limit: Option<usize>,
        mut keep: impl FnMut(&TargetStatus) -> bool,
    ) -> Listed {
        use std::ops::Bound;
        let targets = self.inner.targets.load_full();
        let graph = self.inner.hub().graph();
        let now = Instant::now();
        let members: std::collections::HashMap<TargetId, MemberStatus> = self
            .inner
            .hub()
            .members(now)
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut listed = Listed {
            targets: Vec::with_capacity(limit.unwrap_or(targets.len()).min(targets.len())),
            more: false,
            of: targets.len(),
        };
        // Held throughout, while targets are locked one by one: listings run one at a time, so
        // each finds the copies the last one left (taken out instead, a listing running beside
        // another would start from none and rebuild every copy). Nothing else takes this lock.
        let mut copies = self.inner.listing.lock();
        for (id, target) in targets.range::<TargetId, _>((start, Bound::Unbounded)) {
            let score = graph
                .status(id)
                .map_or((None, false), |n| (n.score, n.dependency_down));
            let pool = members.get(id).cloned();
            let status = match copies.get_mut(id) {
                Some(slot) => {
                    if let Some(fresh) = target.listed(Some(&*slot), score, pool, now) {
                        *slot = fresh;
                    }
                    &slot.1
                }
                None => {
                    let Some(fresh) = target.listed(None, score, pool, now) else {
                        continue;
                    };
                    &copies.entry(id.clone()).or_insert(fresh).1
                }
            };
            if !keep(status) {
                continue;
            }
            if limit == Some(listed.targets.len()) {
                listed.more = true;
                break;
            }
            listed.targets.push(status.clone());
        }
        // Updated in place; the copies of targets that left go once they outnumber the rest.
        if copies.len() > 2 * targets.len() {
            copies.retain(|id, _| targets.contains_key(id));
        }
        listed
    }

    /// The dependency graph's scores, states and group verdicts, for statuses, explanations and
    /// exports. Read without a lock: a reader never holds up a probe result, and never waits for
    /// one or for a topology being applied (see [`GraphView`]).
    pub fn graph(&self) -> Arc<GraphView> {
        self.inner.hub().graph()
    }

    /// Marked each time any node of the graph moves (a score, a state, a group's verdict) and on
    /// each topology applied: for a watcher that shows the graph, which looks when this says and
    /// compares, instead of looking every so often.
    pub fn graph_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.inner.hub().graph_changes()
    }

    /// Sets a target's SLA, its uptime over a long window that the embedder keeps (the engine
    /// keeps no history): its score in the dependency graph is its success ratio times it
    /// ([`Graph::set_sla`](crate::graph::Graph::set_sla)). `None` scores it by its success ratio alone. A target not in the
    /// graph is left alone.
    pub fn set_sla(&self, id: &TargetId, sla: Option<f64>) {
        self.inner.hub().set_sla(id, sla);
    }

    /// Appends the per-target series to `out`, in the Prometheus text format, from the targets
    /// as they are now: `probe_success`, `probe_duration_seconds` (while per-target histograms
    /// are on), `probe_target_up`, the per-target counters, `probe_health_score` and
    /// `probe_dependency_down` for every graph node (groups included), `probe_target_weight`
    /// and `probe_ejected` for every pool member, `probe_circuit_state` for every circuit
    /// breaker.
    ///
    /// An exporter appends this to its own rendering of the process-wide series (the `metrics`
    /// facade's). A removed target is in no scrape after its removal (see `metrics`).
    pub fn encode_metrics(&self, out: &mut String) {
        let mut encoder = metrics::Encoder::new();
        let now = Instant::now();
        let targets = self.inner.targets.load();
        for target in targets.values() {
            // In a cluster each target is in the scrape of the member that decides it only, so
            // sums over the members count it once.
            if !target.role().decides() {
                continue;
            }
            let seat = target.seat();
            encoder.target(seat.id.as_str(), seat.state(), &seat.meters);
            if let Some(circuit) = target.circuit(now) {
                encoder.circuit(seat.id.as_str(), circuit.state.code());
            }
            if let Some(facts) = target.tls() {
                encoder.tls(seat.id.as_str(), &facts);
            }
        }
        for member in self.inner.hub().members(now) {
            encoder.member(member.id.as_str(), member.weight, member.ejected);
        }
        for node in self.graph().export().nodes {
            let group_state = node.state.filter(|_| node.kind == NodeKind::Group);
            encoder.node(
                node.id.as_str(),
                node.score,
                node.dependency_down,
                group_state,
            );
        }
        encoder.finish(out);
    }

    /// Turns the targets' own duration histograms (`probe_duration_seconds{target}`, 128 bytes
    /// each) on or off; on by default. `probe_fleet_duration_seconds{kind}` is kept either way.
    /// Turning them off frees them.
    pub fn set_per_target_histograms(&self, on: bool) {
        let was = self
            .inner
            .ctx
            .per_target_histograms
            .swap(on, std::sync::atomic::Ordering::Relaxed);
        if was && !on {
            for target in self.inner.targets.load().values() {
                target.seat().meters.drop_histogram();
            }
        }
    }

    /// Whether the instance should receive traffic: from the readiness policy when the topology
    /// has one, else whether every target is UP, DEGRADED or in MAINTENANCE. A snapshot load:
    /// no lock, no walk over the targets.
    pub fn readiness(&self) -> Readiness {
        Readiness::clone(&self.inner.hub().readiness())
    }

    /// A signal marked each time the readiness verdict is published anew: when it changes, and
    /// whenever a topology is applied (targets added or removed, the graph rewired). On
    /// `changed()`, read [`Engine::readiness`] (or a target's state) again; marks that come
    /// while nobody waits fold into one. For servers that push readiness to their clients
    /// (gRPC health's `Watch`) rather than being polled.
    pub fn readiness_changes(&self) -> watch::Receiver<()> {
        self.inner.hub().readiness_changes()
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
        let target = self.inner.target(id)?;
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
        if self.inner.target(id)?.end_maintenance() {
            Ok(())
        } else {
            Err(EngineError::NotInMaintenance(id.clone()))
        }
    }

    /// Maintenance set by operators and still in force, for a front end to persist.
    pub fn operator_maintenance(&self) -> Vec<(TargetId, MaintenanceInfo)> {
        self.inner
            .targets
            .load()
            .values()
            .filter_map(|t| Some((t.id().clone(), t.operator_maintenance()?.info)))
            .collect()
    }

    /// This engine's side of a cluster: joining one, following its member set, and the verdicts
    /// and votes it exchanges with the other members (for a front end such as the etcd source;
    /// an engine on its own never needs it).
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster { inner: &self.inner }
    }

    /// Passive health: what real traffic says of targets, their pools and circuit breakers, and
    /// choosing a pool member for a call.
    pub fn pools(&self) -> Pools<'_> {
        Pools { inner: &self.inner }
    }

    /// A stream of every state change from now on. A subscriber that falls more than 1024
    /// events behind misses the oldest (and is told so by `RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.hub().subscribe()
    }

    /// A feed of every transition and every run that counts as a target's result (a target's
    /// runs in batches: [`Runs`]), from now on, for an embedder that keeps history. Unlike [`Engine::subscribe`], nothing is missed
    /// while the receiver keeps up; one that falls `capacity` records behind loses the newest,
    /// counted in `probe_record_feed_dropped_total`, since probing never waits for it. One feed
    /// per engine: a second call replaces the first.
    pub fn record_feed(&self, capacity: usize) -> tokio::sync::mpsc::Receiver<Record> {
        self.inner.hub().record_feed(capacity)
    }

    /// Has every target hand the runs it holds to the record feed now (see [`Runs`]): what an
    /// embedder calls before it closes an hour or takes a snapshot of its counts, and before
    /// its last drain at a stop, so that no run is counted late or lost.
    pub fn flush_runs(&self) {
        for target in self.inner.targets.load().values() {
            target.flush_runs();
        }
    }

    /// How busy the engine is now: its workers, its probes in flight against their cap, and
    /// how late it runs. For an embedder's figures, and to turn away work of its own (ad-hoc
    /// probes) while scheduled probes take the whole cap.
    pub fn workload(&self) -> Workload {
        let scheduler = &self.inner.scheduler;
        Workload {
            workers: scheduler.workers(),
            in_flight: scheduler.in_flight(),
            in_flight_cap: scheduler.in_flight_cap(),
            lateness: self.inner.ctx.self_health.as_ref().map(|h| h.multiplier()),
        }
    }

    /// Resolves once the engine was cancelled and in-flight probes have finished.
    pub async fn stopped(&self) {
        self.inner.scheduler.stopped().await;
    }
}

/// The engine's verdict as the readiness gate's dependency check (the gate knows nothing of the
/// engine).
impl crate::gate::ReadinessCheck for Engine {
    fn check(&self) -> crate::gate::Check {
        match self.readiness().reason {
            None => crate::gate::Check::pass(),
            Some(reason) => crate::gate::Check::fail(reason),
        }
    }
}

/// Copies a target's graph figures into its status.
fn score(graph: &GraphView, status: &mut TargetStatus) {
    if let Some(node) = graph.status(&status.id) {
        status.score = node.score;
        status.dependency_down = node.dependency_down;
    }
}

/// Judges every group once every [`JUDGE_EVERY`](crate::graph::JUDGE_EVERY) until cancelled.
async fn judge_groups(inner: Arc<Inner>, cancel: CancellationToken) {
    let mut ticks = tokio::time::interval(crate::graph::JUDGE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        inner.hub().judge();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Schedule, ScheduleSettings};
    use crate::outcome::CheckResult;
    use crate::tier::{CustomProbe, Probe, ProbeSpec};
    use crate::topology::TargetSpec;

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
        slow.schedule = Schedule::try_new(ScheduleSettings {
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
            jitter: 0.1,
            ..ScheduleSettings::default()
        })
        .unwrap();
        // Sorted by id, the odd one sits between the others.
        engine
            .apply(vec![spec("a"), slow, spec("c"), spec("d")])
            .unwrap();
        let policy = |id: &str| {
            engine.inner.targets.load()[&TargetId::new(id).unwrap()]
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
