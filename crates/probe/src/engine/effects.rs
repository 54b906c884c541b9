//! The one place where what happens at a target reaches the rest of the engine.
//!
//! A target turns each result, operator action or ejection into [`Effects`] under its own lock,
//! releases the lock, and hands them to the [`Hub`]. The hub then:
//! 1. applies them to the readiness tally and the dependency graph, under the hub's `core` lock;
//! 2. feeds an ejected member's active result to its pools, under the `pools` lock;
//! 3. publishes what changed for readers who take no lock: the readiness verdict and the pools'
//!    routing tables as immutable snapshots, which `/readyz` and
//!    [`Pools::pick`](super::Pools::pick) load; the graph's scores and verdicts in its
//!    [`GraphView`], which the graph updates in place as it rescores, and a new view swapped in
//!    when the topology changes;
//! 4. and only then logs, counts and broadcasts each transition, so a subscriber that sees an
//!    event sees readiness already moved.
//!
//! The hub holds one of its two locks at a time, and never a target's: nothing in this module
//! can reach one (it knows targets only by their [`Seat`]). That is the whole lock order.
//!
//! Effects of one target are applied in the order its state machine made them, even when two
//! threads race (a probe result and an operator's maintenance): each carries the target's
//! transition count, and the hub drops a state older than the one it applied last.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use super::metrics::{Counted, Meters};
use super::readiness::Tally;
use super::view::{Event, HeldRuns, Readiness, Record, Runs, Vote};
use crate::graph::{
    GraphConfig, GraphView, GroupRule, GroupTransition, NodeKind, NodeSpec, ReadinessPolicy,
};
use crate::health::state::{HealthState, Quality, Transition};
use crate::passive::PoolPolicy;
use crate::passive::breaker::{CircuitBreaker, CircuitTransition, Permit, Rejected};
use crate::passive::call::Call;
use crate::passive::outlier::{MemberStatus, OutlierEvent, Share, Shares};
use crate::passive::pools::{PoolEvent, Pools};
use crate::passive::recovery::RecoveryEvent;
use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;
use crate::topology::{Dependencies, TopologyError};

/// How many state changes a slow subscriber may fall behind before it misses some.
const EVENT_BACKLOG: usize = 1024;

/// What the rest of the engine reads of a target without its lock: who it is, how it is probed,
/// the state the hub last applied, its circuit breaker and what real traffic said since its last
/// run.
pub(crate) struct Seat {
    pub id: TargetId,
    /// Kept to tell a changed spec from the same one, and for leases (a client finds the
    /// member's address in it).
    pub probe: ProbeSpec,
    /// Boxed: most targets have none, and a breaker is over 200 bytes.
    pub breaker: Option<Box<Breaker>>,
    /// The state the hub applied last, the transition count it came with, and whether the target
    /// left the engine ([`Applied`]). Written by the hub only, under its core lock.
    applied: AtomicU64,
    /// Passive successes since the last run (the low 31 bits, saturating) and whether a passive
    /// failure came in meanwhile (the top bit).
    passive: AtomicU32,
    /// What the target counts about itself, for the scrape.
    pub meters: Meters,
}

/// A [`Seat`]'s `applied` word.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Applied {
    /// The target's transition count when the state was applied (its low 32 bits).
    seq: u32,
    state: HealthState,
    removed: bool,
}

impl Applied {
    fn pack(self) -> u64 {
        (u64::from(self.seq) << 32) | (u64::from(self.removed) << 8) | self.state as u64
    }

    fn unpack(word: u64) -> Self {
        Self {
            seq: (word >> 32) as u32,
            state: HealthState::ALL[(word & 0xff) as usize % HealthState::ALL.len()],
            removed: word & (1 << 8) != 0,
        }
    }
}

/// Whether transition count `seq` is later than `applied` (counts wrap at 2^32).
fn later(seq: u32, applied: u32) -> bool {
    (seq.wrapping_sub(applied) as i32) > 0
}

const PASSIVE_FAILED: u32 = 1 << 31;

impl Seat {
    pub fn new(id: TargetId, probe: ProbeSpec, breaker: Option<CircuitBreaker>) -> Self {
        Self {
            breaker: breaker.map(|b| Box::new(Breaker::new(b))),
            applied: AtomicU64::new(
                Applied {
                    seq: 0,
                    state: HealthState::Probing,
                    removed: false,
                }
                .pack(),
            ),
            passive: AtomicU32::new(0),
            meters: Meters::new(),
            id,
            probe,
        }
    }

    /// The state the hub applied last: what readiness and the graph count the target as.
    pub fn state(&self) -> HealthState {
        Applied::unpack(self.applied.load(Ordering::Acquire)).state
    }

    /// Counts a real call's outcome towards skipping the next active run.
    pub fn passive_call(&self, failed: bool) {
        if failed {
            self.passive.fetch_or(PASSIVE_FAILED, Ordering::AcqRel);
        } else {
            let _ = self
                .passive
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                    let successes = word & !PASSIVE_FAILED;
                    (successes < PASSIVE_FAILED - 1).then_some(word + 1)
                });
        }
    }

    /// The passive successes since the last run and whether one failed, starting afresh.
    pub fn take_passive(&self) -> (u32, bool) {
        let word = self.passive.swap(0, Ordering::AcqRel);
        (word & !PASSIVE_FAILED, word & PASSIVE_FAILED != 0)
    }
}

/// Anything that has a [`Seat`]: the engine's targets. Routing tables hold members this way, so
/// the hub needs to know nothing else of a target.
pub(crate) trait Seated: Send + Sync + 'static {
    fn seat(&self) -> &Seat;
}

/// A target's circuit breaker, with the word [`Permit::without_lock`] reads published beside it,
/// so that a call through a closed circuit takes no lock.
pub(crate) struct Breaker {
    machine: Mutex<CircuitBreaker>,
    word: AtomicU64,
}

impl Breaker {
    fn new(machine: CircuitBreaker) -> Self {
        Self {
            word: AtomicU64::new(machine.permit_word()),
            machine: Mutex::new(machine),
        }
    }

    /// Runs `f` on the breaker and publishes its new permit word.
    pub fn with<R>(&self, f: impl FnOnce(&mut CircuitBreaker) -> R) -> R {
        let mut machine = self.machine.lock();
        let r = f(&mut machine);
        self.word.store(machine.permit_word(), Ordering::Release);
        r
    }

    /// A permit for one call now (`now` reads the clock, only when the breaker must be asked):
    /// without the lock while the circuit lets every call through, else as
    /// [`CircuitBreaker::try_acquire`] decides.
    pub fn try_acquire(&self, now: impl FnOnce() -> Instant) -> Result<Permit, Rejected> {
        match Permit::without_lock(self.word.load(Ordering::Acquire)) {
            Some(permit) => Ok(permit),
            None => {
                let now = now();
                self.with(|b| b.try_acquire(now))
            }
        }
    }
}

/// Logs a circuit transition.
pub(crate) fn announce_circuit(id: &TargetId, t: Option<CircuitTransition>) {
    let Some(t) = t else { return };
    tracing::info!(
        target_id = id.as_str(),
        from = t.from.as_str(),
        to = t.to.as_str(),
        cause = t.cause.as_str(),
        "circuit changed"
    );
}

/// What one change at a target means beyond the target itself: made under the target's lock,
/// applied by [`Hub::apply`] once it is released.
#[derive(Default)]
pub(crate) struct Effects {
    /// Transitions in the order they happened, each with the detail to announce.
    transitions: Vec<(Transition, Option<String>)>,
    /// The state after them, the transition count it came with and whether the target is
    /// ejected.
    after: Option<(u32, HealthState, bool)>,
    /// A result for the dependency graph, and the state it left the target in.
    score: Option<(Quality, HealthState)>,
    /// An ejected member's active result, for its pools' recovery.
    recovery: Option<bool>,
    /// This member's new vote on a replicated target, for the cluster.
    vote: Option<HealthState>,
}

impl Effects {
    /// Whether a transition is booked.
    pub fn moves(&self) -> bool {
        !self.transitions.is_empty()
    }

    /// Books transition `t`, the target's `count`-th, after which it is in `state` (ejected or
    /// not).
    pub fn transition(&mut self, t: Transition, detail: Option<String>, count: u64, ejected: bool) {
        self.after = Some((count as u32, t.to, ejected));
        self.transitions.push((t, detail));
    }

    /// Books a result for the graph.
    pub fn score(&mut self, quality: Quality, state: HealthState) {
        self.score = Some((quality, state));
    }

    /// Books an ejected member's active result for its recovery.
    pub fn recovery(&mut self, passed: bool) {
        self.recovery = Some(passed);
    }

    /// Books a new vote of this member on a replicated target.
    pub fn vote(&mut self, vote: HealthState) {
        self.vote = Some(vote);
    }
}

/// The graph and the tally, changed together.
struct Core {
    deps: Dependencies,
    tally: Tally,
}

/// The pools and the members they route to.
struct PoolsCore {
    pools: Pools,
    /// Every pool member's seat, for the routing tables.
    members: HashMap<TargetId, Arc<dyn Seated>>,
}

/// One pool's routing table: every member with its share of traffic over time.
pub(crate) struct Route {
    pub members: Vec<(Arc<dyn Seated>, Share)>,
    /// In panic, health is ignored: every member not ejected permanently takes traffic.
    pub panic: bool,
}

/// Every pool's routing table, by pool id: a sorted map, since a service has a handful of pools
/// and comparing a few short ids is cheaper than hashing one.
pub(crate) type Routes = BTreeMap<TargetId, Route>;

/// The graph, the tally and the pools, the snapshots drawn from them, and the event stream.
pub(crate) struct Hub {
    core: Mutex<Core>,
    pools: Mutex<PoolsCore>,
    readiness: ArcSwap<Readiness>,
    /// Marked after each store of `readiness`, for those who wait for it to change rather than
    /// load it on request ([`Hub::readiness_changes`]).
    readiness_changed: watch::Sender<()>,
    routes: ArcSwap<Routes>,
    /// The graph's view ([`GraphView`]): the one its graph writes into, swapped when a topology
    /// change replaces it.
    graph: ArcSwap<GraphView>,
    /// Marked after each change that moved any node of the graph (see [`Hub::graph_changes`]).
    graph_changed: watch::Sender<()>,
    events: broadcast::Sender<Event>,
    /// This member's votes on replicated targets, as they change.
    votes: broadcast::Sender<Vote>,
    /// Where transitions and runs go for an embedder's history, once it asked
    /// ([`Hub::record_feed`]).
    feed: ArcSwapOption<mpsc::Sender<Record>>,
    /// Whether there is a feed: read at every run, which keeps its runs only then.
    feeding: AtomicBool,
    /// The graph's result window, and a count of the applies that may have changed any node's
    /// window: a target that has sent this many identical results in a row since the last one
    /// knows its window is full of them, and that one more changes nothing ([`Hub::window`]).
    window: AtomicUsize,
    epoch: AtomicU32,
}

impl Hub {
    pub fn new() -> Self {
        let core = Core {
            deps: Dependencies::new(),
            tally: Tally::default(),
        };
        Self {
            readiness: ArcSwap::from_pointee(core.tally.readiness(None)),
            readiness_changed: watch::Sender::new(()),
            graph: ArcSwap::new(core.deps.graph.view().clone()),
            graph_changed: watch::Sender::new(()),
            core: Mutex::new(core),
            pools: Mutex::new(PoolsCore {
                pools: Pools::default(),
                members: HashMap::new(),
            }),
            routes: ArcSwap::from_pointee(Routes::new()),
            events: broadcast::channel(EVENT_BACKLOG).0,
            votes: broadcast::channel(EVENT_BACKLOG).0,
            feed: ArcSwapOption::empty(),
            feeding: AtomicBool::new(false),
            window: AtomicUsize::new(GraphConfig::default().window()),
            epoch: AtomicU32::new(0),
        }
    }

    /// The readiness verdict as of the last change. A guard, not an `Arc`: loading one writes
    /// nothing shared (no reference count), so `/readyz` from many threads at once does not
    /// bounce a cache line between them.
    pub fn readiness(&self) -> arc_swap::Guard<Arc<Readiness>> {
        self.readiness.load()
    }

    /// Marked each time the readiness verdict is published: on a change of verdict and on every
    /// topology applied.
    pub fn readiness_changes(&self) -> watch::Receiver<()> {
        self.readiness_changed.subscribe()
    }

    /// The dependency graph as readers see it, without a lock (see [`GraphView`]).
    pub fn graph(&self) -> Arc<GraphView> {
        self.graph.load_full()
    }

    /// Marked each time any node of the graph moves (a score, a state, a verdict) and on each
    /// topology applied: a watcher waits for it rather than looks every so often.
    pub fn graph_changes(&self) -> watch::Receiver<()> {
        self.graph_changed.subscribe()
    }

    /// Runs `change` on the core under its lock, then, once the lock is released, marks the
    /// graph changed if any node moved meanwhile (the view's generation tells).
    fn change<R>(&self, change: impl FnOnce(&mut Core) -> R) -> R {
        let (result, moved) = {
            let mut core = self.core.lock();
            let generation = core.deps.graph.view().generation();
            let result = change(&mut core);
            (result, core.deps.graph.view().generation() != generation)
        };
        if moved {
            self.graph_changed.send_replace(());
        }
        result
    }

    /// The pools' routing tables as of the last change.
    pub fn routes(&self) -> arc_swap::Guard<Arc<Routes>> {
        self.routes.load()
    }

    /// A stream of every state change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Starts the history feed (see [`Engine::record_feed`](super::Engine::record_feed)).
    pub fn record_feed(&self, capacity: usize) -> mpsc::Receiver<Record> {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        self.feed.store(Some(Arc::new(sender)));
        self.feeding.store(true, Ordering::Release);
        receiver
    }

    /// Whether an embedder takes records: targets keep their runs for it only then.
    pub fn feeding(&self) -> bool {
        self.feeding.load(Ordering::Acquire)
    }

    /// Hands a record to the history feed, if there is one, without waiting: a full feed loses
    /// it, counted.
    pub fn feed(&self, record: impl FnOnce() -> Record) {
        let feed = self.feed.load();
        if let Some(sender) = feed.as_ref()
            && sender.try_send(record()).is_err()
        {
            metrics::counter!("probe_record_feed_dropped_total").increment(1);
        }
    }

    /// A target's runs, for the history feed.
    pub fn feed_runs(&self, target: &TargetId, runs: HeldRuns) {
        self.feed(|| {
            Record::Runs(Runs {
                target: target.clone(),
                runs,
            })
        });
    }

    /// A stream of this member's votes from now on.
    pub fn subscribe_votes(&self) -> broadcast::Receiver<Vote> {
        self.votes.subscribe()
    }

    /// The graph's window and the apply count: identical results in a row beyond the window,
    /// since the apply count last changed, leave the graph as it is.
    pub fn window(&self) -> (usize, u32) {
        (
            self.window.load(Ordering::Acquire),
            self.epoch.load(Ordering::Acquire),
        )
    }

    /// Applies one target's effects (see the module doc). Returns whether its pools now have it
    /// out, when its recovery moved, for the caller to bring its state machine in line.
    pub fn apply(&self, seat: &Seat, effects: Effects) -> Option<bool> {
        let Effects {
            transitions,
            after,
            score,
            recovery,
            vote,
        } = effects;
        let mut groups = Vec::new();
        if after.is_some() || score.is_some() {
            self.change(|core| {
                let applied = Applied::unpack(seat.applied.load(Ordering::Acquire));
                if applied.removed {
                    return;
                }
                let mut moved = false;
                if let Some((seq, state, ejected)) = after
                    && later(seq, applied.seq)
                {
                    core.tally.moved(&seat.id, applied.state, state);
                    core.deps.set_state(&seat.id, state);
                    core.deps.set_out(&seat.id, ejected);
                    seat.applied.store(
                        Applied {
                            seq,
                            state,
                            removed: false,
                        }
                        .pack(),
                        Ordering::Release,
                    );
                    moved = true;
                }
                if let Some((quality, state)) = score {
                    core.deps.record(&seat.id, quality, state);
                }
                if moved {
                    groups = core.deps.judge_critical(&seat.id);
                }
                self.publish_readiness(core, moved);
            });
        }
        let out = recovery.and_then(|passed| {
            let moved = self.pools_changed(|pools, now| pools.active(&seat.id, passed, now));
            moved
                .into_iter()
                .find(|(id, _)| *id == seat.id)
                .map(|(_, out)| out)
        });
        for (t, detail) in transitions {
            self.announce(seat, t, detail);
        }
        self.announce_groups(groups);
        if let Some(state) = vote {
            let _ = self.votes.send(Vote {
                target: seat.id.clone(),
                state,
            });
        }
        out
    }

    /// Publishes the readiness verdict if it changed: on any tally change (`moved`), or when the
    /// policy's verdict (which every result may move) differs from the published one.
    fn publish_readiness(&self, core: &Core, moved: bool) {
        let policy = core.deps.verdict();
        let current = self.readiness.load();
        let changed = moved
            || policy.is_some_and(|v| {
                current.ready != v.ready
                    || current.total != v.required
                    || current.healthy != v.passing
                    || current.reason != v.reason
            });
        if changed {
            self.readiness.store(Arc::new(core.tally.readiness(policy)));
            self.readiness_changed.send_replace(());
        }
    }

    /// Logs, counts and broadcasts a transition: the one place an event is emitted.
    fn announce(&self, seat: &Seat, t: Transition, detail: Option<String>) {
        let id = seat.id.as_str();
        seat.meters.count(Counted::Transition {
            from: t.from,
            to: t.to,
        });
        tracing::info!(
            target_id = id,
            from = t.from.as_str(),
            to = t.to.as_str(),
            cause = t.cause.as_str(),
            detail = detail.as_deref().unwrap_or(""),
            "target state changed"
        );
        self.emit(Event {
            target: seat.id.clone(),
            kind: NodeKind::Probed,
            from: t.from,
            to: t.to,
            cause: t.cause,
            at: SystemTime::now(),
            detail,
        });
    }

    /// Hands an event to the history feed and the subscribers. No subscribers is fine: the
    /// event is still logged (and a target's counted).
    fn emit(&self, event: Event) {
        self.feed(|| Record::Transition(event.clone()));
        let _ = self.events.send(event);
    }

    /// Judges every group once and announces each change of verdict, as a target's is (logged
    /// and broadcast), once the lock is released.
    pub fn judge(&self) {
        let moved = self.change(|core| core.deps.judge());
        self.announce_groups(moved);
    }

    /// Logs and broadcasts groups' changes of verdict.
    fn announce_groups(&self, moved: Vec<GroupTransition>) {
        for GroupTransition {
            group,
            transition: t,
            detail,
        } in moved
        {
            tracing::info!(
                group = group.as_str(),
                from = t.from.as_str(),
                to = t.to.as_str(),
                cause = t.cause.as_str(),
                detail = detail.as_str(),
                "group state changed"
            );
            self.emit(Event {
                target: group,
                kind: NodeKind::Group,
                from: t.from,
                to: t.to,
                cause: t.cause,
                at: SystemTime::now(),
                detail: Some(detail),
            });
        }
    }

    /// Installs a topology's graph, scoring, group rules and readiness policy; nothing changes on
    /// error.
    pub fn apply_graph(
        &self,
        nodes: &[NodeSpec],
        scoring: GraphConfig,
        rules: BTreeMap<TargetId, GroupRule>,
        readiness: Option<ReadinessPolicy>,
    ) -> Result<(), TopologyError> {
        // A new topology is a new view (one generation on), the one place the graph replaces it.
        self.change(|core| {
            core.deps.apply(nodes, scoring, rules, readiness)?;
            self.graph.store(core.deps.graph.view().clone());
            self.window.store(scoring.window(), Ordering::Release);
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.publish_readiness(core, true);
            Ok(())
        })
    }

    /// Takes targets that left (`removed`, whose late effects are dropped from now on) out of the
    /// tally, forgets the results of restarted ones (`reset`), and counts new ones (`added`) in
    /// PROBING. Done before the new targets run, so none of their effects comes first.
    pub fn admit<'a>(
        &self,
        removed: &[&Seat],
        reset: &[TargetId],
        added: impl Iterator<Item = &'a TargetId>,
    ) {
        self.change(|core| {
            for seat in removed {
                let applied = Applied::unpack(seat.applied.load(Ordering::Acquire));
                if applied.removed {
                    continue;
                }
                core.tally.remove(&seat.id, applied.state);
                seat.applied.store(
                    Applied {
                        removed: true,
                        ..applied
                    }
                    .pack(),
                    Ordering::Release,
                );
            }
            for id in reset {
                core.deps.reset(id);
            }
            for id in added {
                core.tally.add(id);
            }
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.publish_readiness(core, true);
        });
    }

    /// Installs the topology's pools at `now`, over the targets `target` finds by id; returns
    /// whether any pool existed before or exists now (without, no target can be out).
    pub fn apply_pools(
        &self,
        policies: &BTreeMap<TargetId, PoolPolicy>,
        nodes: &[NodeSpec],
        target: impl Fn(&TargetId) -> Option<Arc<dyn Seated>>,
        now: Instant,
    ) -> bool {
        let mut pools = self.pools.lock();
        let before = !pools.pools.is_empty();
        pools
            .pools
            .apply(policies, nodes, |id| target(id).is_some(), now);
        pools.members = pools
            .pools
            .members(now)
            .into_iter()
            .filter_map(|m| Some((m.id.clone(), target(&m.id)?)))
            .collect();
        self.publish_routes(&pools);
        before || !pools.pools.is_empty()
    }

    /// Whether any pool has `id` out.
    pub fn is_out(&self, id: &TargetId) -> bool {
        self.pools.lock().pools.is_out(id)
    }

    /// Judges a real call to `id`, made at `now`, in each of its pools; returns the members
    /// whose standing moved, with whether they are out now.
    pub fn record_call(&self, id: &TargetId, call: &Call, now: Instant) -> Vec<(TargetId, bool)> {
        self.pools_changed(|pools, _| pools.record(id, call, now))
    }

    /// An operator puts `id` back in each pool that has it out; `None` when none has.
    pub fn clear(&self, id: &TargetId) -> Option<Vec<(TargetId, bool)>> {
        let mut cleared = false;
        let moved = self.pools_changed(|pools, now| {
            let events = pools.clear(id, now);
            cleared = !events.is_empty();
            events
        });
        cleared.then_some(moved)
    }

    /// The pools' time-driven changes at now.
    pub fn tick(&self) -> Vec<(TargetId, bool)> {
        self.pools_changed(|pools, now| pools.tick(now))
    }

    /// Runs `change` on the pools; logs and counts its events, republishes the routing tables
    /// when something moved, and returns the members whose standing moved, each with whether it
    /// is out now.
    fn pools_changed(
        &self,
        change: impl FnOnce(&mut Pools, Instant) -> Vec<PoolEvent>,
    ) -> Vec<(TargetId, bool)> {
        let (events, moved, ejected) = {
            let mut pools = self.pools.lock();
            let events = change(&mut pools.pools, Instant::now());
            if events.is_empty() {
                return Vec::new();
            }
            let ejected: Vec<_> = events
                .iter()
                .filter_map(|(_, event)| match event {
                    OutlierEvent::Ejected(e) => {
                        Some((pools.members.get(&e.id)?.clone(), e.reason.as_str()))
                    }
                    _ => None,
                })
                .collect();
            let moved: Vec<(TargetId, bool)> = members_moved(&events)
                .into_iter()
                .map(|id| {
                    let out = pools.pools.is_out(&id);
                    (id, out)
                })
                .collect();
            self.publish_routes(&pools);
            (events, moved, ejected)
        };
        // Counted once the pools' lock is released: a target's meters have a lock of their own.
        for (member, reason) in ejected {
            member.seat().meters.count(Counted::Ejection(reason));
        }
        announce_pools(&events);
        moved
    }

    /// Publishes every pool's routing table.
    fn publish_routes(&self, pools: &PoolsCore) {
        let routes: Routes = pools
            .pools
            .shares()
            .map(|(group, Shares { members, panic })| {
                let members = members
                    .into_iter()
                    .filter_map(|(id, share)| Some((pools.members.get(&id)?.clone(), share)))
                    .collect();
                (group.clone(), Route { members, panic })
            })
            .collect();
        self.routes.store(Arc::new(routes));
    }

    /// `id`'s standing in its pools, for the API.
    pub fn member(&self, id: &TargetId, now: Instant) -> Option<MemberStatus> {
        self.pools.lock().pools.member(id, now)
    }

    /// Every pool member's standing, for the gauges.
    pub fn members(&self, now: Instant) -> Vec<MemberStatus> {
        self.pools.lock().pools.members(now)
    }

    /// Sets a target's SLA in the graph, and publishes readiness if that moved it.
    pub fn set_sla(&self, id: &TargetId, sla: Option<f64>) {
        self.change(|core| {
            core.deps.set_sla(id, sla);
            self.publish_readiness(core, false);
        });
    }
}

/// The members whose standing pool events changed.
fn members_moved(events: &[PoolEvent]) -> BTreeSet<TargetId> {
    events
        .iter()
        .filter_map(|(_, event)| match event {
            OutlierEvent::Ejected(e) => Some(e.id.clone()),
            OutlierEvent::Recovery { id, .. } | OutlierEvent::Cleared { id } => Some(id.clone()),
            OutlierEvent::EjectionSkipped { .. }
            | OutlierEvent::PanicStarted { .. }
            | OutlierEvent::PanicEnded { .. } => None,
        })
        .collect()
}

/// Logs pool events.
fn announce_pools(events: &[PoolEvent]) {
    for (pool, event) in events {
        let pool = pool.as_str();
        match event {
            OutlierEvent::Ejected(e) => {
                tracing::warn!(
                    target_id = e.id.as_str(),
                    pool,
                    reason = e.reason.as_str(),
                    times_ejected = e.times_ejected,
                    permanent = e.until.is_none(),
                    "target ejected"
                );
            }
            OutlierEvent::EjectionSkipped { id, reason, limit } => tracing::warn!(
                target_id = id.as_str(),
                pool,
                reason = reason.as_str(),
                limit = limit.as_str(),
                "ejection held back"
            ),
            OutlierEvent::Recovery { id, event } => {
                if matches!(event, RecoveryEvent::Permanent(_)) {
                    tracing::warn!(
                        target_id = id.as_str(),
                        pool,
                        "target ejected permanently: an operator must clear it"
                    );
                } else {
                    tracing::info!(
                        target_id = id.as_str(),
                        pool,
                        step = event.as_str(),
                        "ejected target recovering"
                    );
                }
            }
            OutlierEvent::Cleared { id } => {
                tracing::info!(
                    target_id = id.as_str(),
                    pool,
                    "ejection cleared by operator"
                );
            }
            OutlierEvent::PanicStarted { serving, members } => tracing::warn!(
                pool,
                serving,
                members,
                "pool in panic: too few members serving, routing to all of them"
            ),
            OutlierEvent::PanicEnded { serving, members } => {
                tracing::info!(pool, serving, members, "pool out of panic");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::num::NonZeroU32;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use proptest::prelude::*;
    use tokio::sync::Notify;
    use tokio_util::sync::CancellationToken;

    use crate::engine::{Engine, EngineConfig};
    use crate::graph::{Dependency, Graph, NodeKind};
    use crate::health::policy::{Schedule, ScheduleSettings, Thresholds};
    use crate::health::state::StateMachine;
    use crate::outcome::{CheckResult, Failure, FailureReason, Verdict};
    use crate::tier::{CustomProbe, Probe, ProbeSpec};
    use crate::topology::{TargetSpec, Topology};

    /// A probe that answers a script, says when it is through it, then repeats its last answer.
    /// It logs every answer it gives: the engine has recorded each by the time the test task
    /// runs again, since a run records its result in the same poll as the answer.
    struct Script {
        answers: Mutex<Answers>,
        finished: Arc<(AtomicUsize, Notify)>,
    }

    struct Answers {
        script: VecDeque<u8>,
        log: Vec<u8>,
        told: bool,
    }

    #[async_trait::async_trait]
    impl Probe for Script {
        async fn check(&self, _timeout: Duration) -> CheckResult {
            let code = {
                let mut answers = self.answers.lock();
                let code = match answers.script.pop_front() {
                    Some(code) => code,
                    None => answers.log.last().copied().unwrap_or(0),
                };
                answers.log.push(code);
                if answers.script.is_empty() && !answers.told {
                    answers.told = true;
                    self.finished.0.fetch_add(1, Ordering::SeqCst);
                    self.finished.1.notify_one();
                }
                code
            };
            CheckResult {
                verdict: verdict(code),
                ..CheckResult::up()
            }
        }
    }

    fn verdict(code: u8) -> Verdict {
        match code {
            0 => Verdict::Up,
            1 => Verdict::Degraded(vec!["slow".into()]),
            _ => Verdict::Failed(Failure::new(FailureReason::Refused, "refused")),
        }
    }

    const NAMES: [&str; 4] = ["a", "b", "c", "d"];

    fn nodes() -> Vec<NodeSpec> {
        let dep = |to: &str, critical: bool, weight: f64| Dependency {
            weight,
            critical,
            ..Dependency::new(TargetId::new(to).unwrap(), "test")
        };
        vec![
            NodeSpec {
                id: TargetId::new("a").unwrap(),
                kind: NodeKind::Probed,
                depends_on: vec![dep("b", true, 3.0), dep("c", false, 1.0)],
            },
            NodeSpec {
                id: TargetId::new("g").unwrap(),
                kind: NodeKind::Group,
                depends_on: vec![dep("a", false, 1.0), dep("d", true, 2.0)],
            },
        ]
    }

    fn thresholds() -> Thresholds {
        Thresholds::new(NonZeroU32::new(2).unwrap(), NonZeroU32::new(3).unwrap())
    }

    /// The engine's states and scores after `scripts`, each target's results applied by the hub,
    /// and the answers each target got (its script, and repeats while the others finished).
    type Seen = (Vec<(HealthState, Option<f64>)>, Vec<Vec<u8>>);

    fn through_the_engine(scripts: &[Vec<u8>]) -> Seen {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let cancel = CancellationToken::new();
            let engine = Engine::start(
                EngineConfig {
                    self_health: None,
                    ..EngineConfig::default()
                },
                cancel.clone(),
            );
            let finished = Arc::new((AtomicUsize::new(0), Notify::new()));
            let schedule = Schedule::try_new(ScheduleSettings {
                interval: Duration::from_secs(60),
                timeout: Duration::from_secs(59),
                jitter: 0.0,
                backoff_jitter: Some(0.0),
                ..ScheduleSettings::default()
            })
            .unwrap();
            let probes: Vec<Arc<Script>> = scripts
                .iter()
                .map(|script| {
                    Arc::new(Script {
                        answers: Mutex::new(Answers {
                            script: script.iter().copied().collect(),
                            log: Vec::new(),
                            told: false,
                        }),
                        finished: finished.clone(),
                    })
                })
                .collect();
            let targets = NAMES
                .iter()
                .zip(&probes)
                .map(|(name, probe)| {
                    TargetSpec::new(
                        TargetId::new(name).unwrap(),
                        ProbeSpec::Custom(CustomProbe::new(probe.clone())),
                    )
                    .with_schedule(schedule)
                    .with_thresholds(thresholds())
                    .with_flap(None)
                })
                .collect();
            engine
                .apply(Topology {
                    targets,
                    nodes: nodes(),
                    ..Topology::default()
                })
                .unwrap();
            while finished.0.load(Ordering::SeqCst) < NAMES.len() {
                finished.1.notified().await;
            }
            let seen = NAMES
                .iter()
                .chain(&["g"])
                .map(|name| {
                    let id = TargetId::new(name).unwrap();
                    let state = engine.status(&id).map_or(HealthState::Probing, |s| s.state);
                    let score = engine.graph().status(&id).and_then(|n| n.score);
                    (state, score)
                })
                .collect();
            let logs = probes
                .iter()
                .map(|p| p.answers.lock().log.clone())
                .collect();
            cancel.cancel();
            (seen, logs)
        })
    }

    /// The same results driven straight through a state machine per target and the graph, in
    /// the order the engine applied them before the hub: state change, then the result.
    fn by_hand(scripts: &[Vec<u8>]) -> Vec<(HealthState, Option<f64>)> {
        let now = Instant::now();
        let mut graph = Graph::build(GraphConfig::default(), &{
            let mut all = nodes();
            all.extend(["b", "c", "d"].iter().map(|n| NodeSpec {
                id: TargetId::new(n).unwrap(),
                kind: NodeKind::Probed,
                depends_on: Vec::new(),
            }));
            all
        })
        .unwrap();
        let mut states = Vec::new();
        for (name, script) in NAMES.iter().zip(scripts) {
            let id = TargetId::new(name).unwrap();
            let mut machine = StateMachine::new(thresholds(), None);
            for code in script {
                let quality = Quality::from(&verdict(*code));
                if let Some(t) = machine.observe(quality, now) {
                    graph.set_state(&id, t.to).unwrap();
                }
                graph.record(&id, quality, machine.state()).unwrap();
            }
            states.push(machine.state());
        }
        states.push(HealthState::Probing);
        NAMES
            .iter()
            .chain(&["g"])
            .zip(states)
            .map(|(name, state)| {
                let score = graph
                    .view()
                    .status(&TargetId::new(name).unwrap())
                    .and_then(|n| n.score);
                (state, score)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Applying effects in one place (and skipping the results that cannot change the
        /// graph) gives the states and scores that driving each state machine and the graph
        /// directly gives, over random runs of passing, degraded and failing results long
        /// enough to fill the graph's window many times over.
        #[test]
        fn the_hub_gives_the_states_and_scores_of_the_direct_path(
            scripts in prop::collection::vec(
                prop::collection::vec(prop_oneof![6 => Just(0u8), 1 => Just(1u8), 3 => Just(2u8)], 1..120),
                NAMES.len(),
            )
        ) {
            let (engine, answers) = through_the_engine(&scripts);
            let direct = by_hand(&answers);
            for ((name, (state, score)), (want_state, want_score)) in
                NAMES.iter().chain(&["g"]).zip(&engine).zip(&direct)
            {
                if *name != "g" {
                    prop_assert_eq!(state, want_state, "state of {}", name);
                }
                let same = match (score, want_score) {
                    (Some(a), Some(b)) => (a - b).abs() < 1e-12,
                    (a, b) => a == b,
                };
                prop_assert!(same, "score of {}: {:?} vs {:?}", name, score, want_score);
            }
        }
    }

    #[test]
    fn applied_words_round_trip_and_counts_wrap() {
        for state in HealthState::ALL {
            for (seq, removed) in [(0, false), (7, true), (u32::MAX, false)] {
                let a = Applied {
                    seq,
                    state,
                    removed,
                };
                assert!(Applied::unpack(a.pack()) == a);
            }
        }
        assert!(later(1, 0));
        assert!(!later(0, 0));
        assert!(!later(3, 5));
        assert!(later(2, u32::MAX), "counts wrap");
    }

    /// 10k probed nodes under 100 groups of 100, each group named `g<k>` over `t<k>-<j>`.
    fn wide_graph(targets_per_group: usize) -> Vec<NodeSpec> {
        let id = |s: String| TargetId::new(&s).unwrap();
        let mut nodes = Vec::new();
        for k in 0..100 {
            let members: Vec<TargetId> = (0..targets_per_group)
                .map(|j| id(format!("t{k}-{j}")))
                .collect();
            nodes.extend(members.iter().map(|m| NodeSpec {
                id: m.clone(),
                kind: NodeKind::Probed,
                depends_on: Vec::new(),
            }));
            nodes.push(NodeSpec {
                id: id(format!("g{k}")),
                kind: NodeKind::Group,
                depends_on: members
                    .into_iter()
                    .map(|m| Dependency::new(m, "test"))
                    .collect(),
            });
        }
        nodes
    }

    /// The graph's readers (status, explanation, export, DOT) and readiness answer while another
    /// thread holds the hub's core lock, as a result being applied or a 10k-target topology
    /// being compiled holds it: they read the published view and never wait for the writer.
    #[test]
    fn graph_reads_answer_while_the_hub_is_busy() {
        let hub = Arc::new(Hub::new());
        hub.apply_graph(
            &wide_graph(100),
            GraphConfig::default(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
        let first = TargetId::new("t0-0").unwrap();
        hub.core
            .lock()
            .deps
            .record(&first, Quality::Good, HealthState::Up);
        let busy = hub.core.lock();
        let (told, answer) = std::sync::mpsc::channel();
        let reader = {
            let hub = hub.clone();
            std::thread::spawn(move || {
                let graph = hub.graph();
                let export = graph.export();
                let explained = graph.explain(&TargetId::new("g0").unwrap()).unwrap();
                let dot = graph.to_dot();
                let ready = hub.readiness().ready;
                let _ = told.send((
                    export.nodes.len(),
                    export.edges.len(),
                    graph.status(&TargetId::new("t0-0").unwrap()).unwrap().score,
                    explained.children.len(),
                    dot.len() > 10_000,
                    ready,
                ));
            })
        };
        // Not a wait for the reader to be done at some time: if it took the lock it would never
        // answer while `busy` is held, and the test would fail here rather than hang.
        let seen = answer.recv_timeout(std::time::Duration::from_secs(60));
        drop(busy);
        reader.join().unwrap();
        assert_eq!(
            seen.expect("the reader waited for the hub's lock"),
            (10_100, 10_000, Some(1.0), 100, true, true)
        );
    }

    /// A topology change swaps in a new view, and the view before it stays whole for whoever
    /// still reads it; a watcher is told of every move, and of nothing else.
    #[test]
    fn a_new_topology_is_a_new_view_and_watchers_are_told_of_moves() {
        let hub = Hub::new();
        let mut changes = hub.graph_changes();
        hub.apply_graph(
            &wide_graph(2),
            GraphConfig::default(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
        assert!(changes.has_changed().unwrap(), "a topology applied");
        changes.mark_unchanged();
        let before = hub.graph();
        assert_eq!(before.len(), 300);

        let first = TargetId::new("t0-0").unwrap();
        hub.set_sla(&first, Some(0.5));
        assert!(changes.has_changed().unwrap(), "an SLA moved a node");
        changes.mark_unchanged();
        assert_eq!(hub.graph().explain(&first).unwrap().sla, Some(0.5));
        hub.set_sla(&first, Some(0.5));
        assert!(
            !changes.has_changed().unwrap(),
            "the same SLA moved nothing"
        );
        hub.judge();
        assert!(
            !changes.has_changed().unwrap(),
            "a judgment of unknown scores moved nothing"
        );

        hub.apply_graph(
            &wide_graph(3),
            GraphConfig::default(),
            BTreeMap::new(),
            None,
        )
        .unwrap();
        assert!(changes.has_changed().unwrap());
        assert_eq!(hub.graph().len(), 400);
        assert!(hub.graph().generation() > before.generation());
        assert_eq!(
            before.len(),
            300,
            "the old view still reads its own topology"
        );
        assert_eq!(before.explain(&first).unwrap().sla, Some(0.5));
        assert_eq!(hub.graph().explain(&first).unwrap().sla, Some(0.5), "kept");
    }
}
