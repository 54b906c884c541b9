//! A target as the engine runs it: its probe, its state machine and what its runs left behind.
//!
//! Everything that changes a target (a probe result, an operator's maintenance, an ejection)
//! changes it under its own short lock and books what that means elsewhere as [`Effects`]; the
//! [`Hub`] applies them once the lock is released. The lock is never held while another is
//! taken.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::effects::{Effects, Hub, Seat, Seated, announce_circuit};
use super::metrics::Counted;
use super::resources::Resources;
use super::view::{
    HeldRuns, MaintenanceInfo, MaintenanceSource, RUNS_HELD_FOR, RUNS_PER_BATCH, Run, TargetStatus,
};
use crate::cluster::MemberId;
use crate::cluster::{Placed, Published, Replication, Role};
use crate::health::backoff::SuccessWindow;
use crate::health::maintenance::MaintenanceWindow;
use crate::health::policy::{FlapPolicy, Schedule, Thresholds};
use crate::health::self_health::SelfHealth;
use crate::health::state::{HealthState, Quality, StateMachine, Transition};
use crate::outcome::{
    CheckResult, DnsTrouble, Failure, FailureReason, Outcome, Signal, TlsFacts, Verdict,
    from_unix_ms, unix_ms,
};
use crate::passive::breaker::{BreakerConfig, CircuitBreaker, CircuitSnapshot};
use crate::passive::outlier::MemberStatus;
use crate::scheduler::Job;
use crate::target::TargetId;
use crate::tier::build::build;
use crate::tier::probe::Probe;
use crate::tier::resolve::{Names, Resolver};
use crate::tier::spec::ProbeSpec;

/// What every target shares: one pointer in each rather than four.
pub(crate) struct Context {
    pub hub: Hub,
    /// Results kept per target.
    pub history: usize,
    pub self_health: Option<Arc<SelfHealth>>,
    /// The one resolver every probe looks its names up through.
    pub resolver: Arc<Resolver>,
    /// `probe_fleet_duration_seconds`, by probe kind (as [`ProbeSpec::KINDS`] orders them).
    pub fleet: Vec<(&'static str, metrics::Histogram)>,
    /// Whether each target keeps a histogram of its own durations (128 bytes).
    pub per_target_histograms: AtomicBool,
    /// The engine's own resource faults.
    pub resources: Arc<Resources>,
    /// This engine's name in a cluster, once it joined one.
    pub member: std::sync::OnceLock<MemberId>,
}

/// A target's spec besides its id and probe: what it weighs most. Targets declared alike (most
/// of them: a file's defaults) share one copy.
#[derive(Debug, PartialEq)]
pub(crate) struct Policy {
    pub schedule: Schedule,
    pub thresholds: Thresholds,
    pub flap: Option<FlapPolicy>,
    pub maintenance: Vec<MaintenanceWindow>,
    pub circuit_breaker: Option<BreakerConfig>,
    pub skip_active_after: Option<NonZeroU32>,
    pub dns_stale_for: Duration,
    pub replication: Option<Replication>,
}

/// A maintenance in force.
#[derive(Clone)]
pub(crate) struct ActiveMaintenance {
    pub info: MaintenanceInfo,
    /// When an operator's maintenance expires, on the engine's clock (so paused-time tests and
    /// wall-clock jumps agree). Windows end by the wall clock instead.
    pub deadline: Option<Instant>,
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
    /// What the latest TLS handshake showed.
    tls: Option<Arc<TlsFacts>>,
    /// The reason the state in force was entered with (the transition's detail, or the one a
    /// published verdict came with): what a cluster member publishes, the same until the state
    /// changes, whatever the runs since said.
    verdict: Option<String>,
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
            && result.tls.is_none()
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
        if result.tls.is_some() {
            details.tls.clone_from(&result.tls);
        }
    }
}

/// Identical results in a row, counted so that a target whose graph window is already full of
/// them does not take the hub's lock to record one more that changes nothing.
#[derive(Clone, Copy)]
struct Streak {
    quality: Quality,
    /// Saturating: windows hold at most `GraphConfig::MAX_WINDOW` (1000) results.
    count: u16,
    /// The hub's apply count when the streak began: an apply may change the window.
    epoch: u32,
}

impl Streak {
    /// Counts `quality`; returns whether the graph's window of `window` results (as of apply
    /// `epoch`) held only results like it already, so that recording it changes nothing.
    fn unchanged(&mut self, quality: Quality, window: usize, epoch: u32) -> bool {
        if self.epoch != epoch || self.quality != quality {
            *self = Self {
                quality,
                count: 0,
                epoch,
            };
        }
        let full = usize::from(self.count) >= window;
        self.count = self.count.saturating_add(1);
        full
    }
}

struct Status {
    machine: StateMachine,
    window: SuccessWindow,
    last: Option<Outcome>,
    details: Option<Box<Details>>,
    history: VecDeque<Outcome>,
    /// State changes since the target was added; also the order of its effects at the hub.
    transitions: u64,
    /// When the current state began, in milliseconds since the Unix epoch; 0 before the first
    /// verdict. Wall-clock, since it is shown and handed to other members: an alert's episode
    /// is named by it, so every member that takes the target over names it the same.
    since_ms: u64,
    /// Boxed: rare, and 64 bytes inline for every target.
    maintenance: Option<Box<ActiveMaintenance>>,
    /// A declared window an operator ended early: it does not restart before this time.
    window_ended_early: Option<SystemTime>,
    /// Set when the target leaves the engine: its late results no longer move anything.
    retired: bool,
    streak: Streak,
    /// Runs in a row that found a resource of the engine exhausted: the next try waits longer.
    exhausted: u8,
    /// Bumped by every change of what [`Target::status`] shows, so that a listing rebuilds only
    /// the targets that changed since the last one.
    version: u32,
    /// Its standing in a cluster; `None` outside one (it decides alone). Boxed: 80 bytes that an
    /// engine outside a cluster does not need.
    placed: Option<Box<Placed>>,
    /// The runs it holds for the record feed; `None` until there is a feed.
    held: Option<Box<Held>>,
}

/// A target's runs not yet handed to the record feed (see [`Runs`](super::view::Runs)).
struct Held {
    runs: HeldRuns,
    /// When the first of them was held.
    since: Instant,
}

/// Holds `run` for the record feed; the runs to hand over, once they are [`RUNS_PER_BATCH`]
/// or the first is [`RUNS_HELD_FOR`] old (or the target moved: see `Target::record`). Room
/// for `expected` runs is made when a batch starts, the only time it is asked. What is handed
/// over leaves nothing held, so two handovers of one target cannot pass each other on their
/// way to the feed: the next needs that many runs or that long again.
fn hold(
    held: &mut Option<Box<Held>>,
    run: &Run,
    now: Instant,
    expected: impl FnOnce() -> usize,
) -> Option<HeldRuns> {
    let held = held.get_or_insert_with(|| {
        Box::new(Held {
            runs: HeldRuns::default(),
            since: now,
        })
    });
    if held.runs.is_empty() {
        held.runs.reserve_exact(expected());
        held.since = now;
    }
    held.runs.push(run);
    (held.runs.len() >= RUNS_PER_BATCH || now.duration_since(held.since) >= RUNS_HELD_FOR)
        .then(|| std::mem::take(&mut held.runs))
}

/// The runs held, taken (none when there are none).
fn take_held(held: &mut Option<Box<Held>>) -> Option<HeldRuns> {
    held.as_mut()
        .filter(|h| !h.runs.is_empty())
        .map(|h| std::mem::take(&mut h.runs))
}

impl Status {
    fn role(&self) -> Role {
        self.placed.as_ref().map_or(Role::Decide, |p| p.role)
    }
}

/// A target as the engine runs it.
pub(crate) struct Target {
    seat: Seat,
    pub policy: Arc<Policy>,
    probe: Arc<dyn Probe>,
    status: Mutex<Status>,
    ctx: Arc<Context>,
}

impl Seated for Target {
    fn seat(&self) -> &Seat {
        &self.seat
    }
}

impl Target {
    pub fn new(id: TargetId, probe: ProbeSpec, policy: Arc<Policy>, ctx: Arc<Context>) -> Self {
        Self {
            probe: build(
                &probe,
                &Names::new(ctx.resolver.clone(), policy.dns_stale_for),
            ),
            status: Mutex::new(Status {
                machine: StateMachine::new(policy.thresholds, policy.flap),
                window: SuccessWindow::default(),
                last: None,
                details: None,
                history: VecDeque::new(),
                transitions: 0,
                since_ms: 0,
                maintenance: None,
                window_ended_early: None,
                retired: false,
                streak: Streak {
                    quality: Quality::Failed,
                    count: 0,
                    epoch: 0,
                },
                exhausted: 0,
                version: 0,
                placed: None,
                held: None,
            }),
            seat: Seat::new(id, probe, policy.circuit_breaker.map(CircuitBreaker::new)),
            ctx,
            policy,
        }
    }

    pub fn id(&self) -> &TargetId {
        &self.seat.id
    }

    /// The runs a batch of its holds at its interval: room for them is made once a batch.
    fn runs_per_batch(&self) -> usize {
        let interval = self
            .policy
            .schedule
            .interval()
            .max(Duration::from_millis(1));
        let within = RUNS_HELD_FOR.as_millis() / interval.as_millis() + 1;
        usize::try_from(within).map_or(RUNS_PER_BATCH, |n| n.min(RUNS_PER_BATCH))
    }

    /// Books transition `t` (if any) in `effects`, unless the target was retired.
    fn book(
        status: &mut Status,
        effects: &mut Effects,
        t: Option<Transition>,
        detail: impl FnOnce() -> Option<String>,
    ) {
        let Some(t) = t else { return };
        status.version = status.version.wrapping_add(1);
        status.transitions += 1;
        status.since_ms = unix_ms(SystemTime::now());
        let detail = detail();
        if detail.is_some() || status.details.is_some() {
            status
                .details
                .get_or_insert_default()
                .verdict
                .clone_from(&detail);
        }
        if !status.retired {
            effects.transition(t, detail, status.transitions, status.machine.is_ejected());
        }
    }

    /// Hands `effects` to the hub, and follows an ejection change they caused.
    fn apply(&self, effects: Effects) {
        if let Some(out) = self.ctx.hub.apply(&self.seat, effects) {
            self.set_ejected(out);
        }
    }

    /// Puts the target in `maintenance`, replacing any in force.
    pub fn enter_maintenance(&self, maintenance: ActiveMaintenance) {
        let mut effects = Effects::default();
        {
            let mut status = self.status.lock();
            let reason = maintenance.info.reason.clone();
            status.version = status.version.wrapping_add(1);
            status.maintenance = Some(Box::new(maintenance));
            let t = status.machine.start_maintenance();
            Self::book(&mut status, &mut effects, t, || Some(reason));
        }
        self.apply(effects);
    }

    /// Ends the maintenance in force; `false` when there is none. Ending a declared window keeps
    /// it from starting again until the window is over.
    pub fn end_maintenance(&self) -> bool {
        let mut effects = Effects::default();
        {
            let mut status = self.status.lock();
            let Some(ended) = status.maintenance.take() else {
                return false;
            };
            status.version = status.version.wrapping_add(1);
            if ended.info.source == MaintenanceSource::Window {
                status.window_ended_early = Some(ended.info.until);
            }
            let t = status.machine.end_maintenance();
            Self::book(&mut status, &mut effects, t, || {
                Some("ended by operator".to_owned())
            });
        }
        self.apply(effects);
        true
    }

    /// The operator's maintenance in force, if any: what a restarted target carries over, and
    /// what a front end persists.
    pub fn operator_maintenance(&self) -> Option<ActiveMaintenance> {
        self.status
            .lock()
            .maintenance
            .as_deref()
            .filter(|m| m.info.source == MaintenanceSource::Operator)
            .cloned()
    }

    /// Marks the target as gone: its late results move nothing any more.
    pub fn retire(&self) {
        let held = {
            let mut status = self.status.lock();
            status.retired = true;
            take_held(&mut status.held)
        };
        self.hand_over(held);
    }

    /// Hands the runs it holds to the record feed now ([`Engine::flush_runs`]).
    ///
    /// [`Engine::flush_runs`]: super::Engine::flush_runs
    pub fn flush_runs(&self) {
        let held = take_held(&mut self.status.lock().held);
        self.hand_over(held);
    }

    /// Hands `runs` to the record feed; called without the status lock.
    fn hand_over(&self, runs: Option<HeldRuns>) {
        if let Some(runs) = runs {
            self.ctx.hub.feed_runs(&self.seat.id, runs);
        }
    }

    /// Holds the target DOWN while a pool has it out, and lets it go once none does.
    pub fn set_ejected(&self, out: bool) {
        let mut effects = Effects::default();
        {
            let mut status = self.status.lock();
            if status.machine.is_ejected() == out {
                return;
            }
            status.version = status.version.wrapping_add(1);
            let t = if out {
                status.machine.eject()
            } else {
                status.machine.readmit()
            };
            Self::book(&mut status, &mut effects, t, || {
                Some(
                    if out {
                        "ejected from its pool by real traffic"
                    } else {
                        "back in its pool"
                    }
                    .to_owned(),
                )
            });
        }
        self.apply(effects);
    }

    /// A copy of the target's health; the graph's and the pools' figures are the caller's to
    /// fill in.
    pub fn status(&self, with_history: bool) -> TargetStatus {
        let circuit = self.circuit(Instant::now());
        self.view(&self.status.lock(), with_history, circuit)
    }

    /// The target's status for a listing, with its graph figures (`score`, `dependency_down`)
    /// and pool standing, with the version it was built at; `None` while `previous` (the last
    /// listing's copy) still holds, so that a listing of many targets builds, and clones, only
    /// the few that changed.
    pub fn listed(
        &self,
        previous: Option<&(u32, Arc<TargetStatus>)>,
        score: (Option<f64>, bool),
        pool: Option<MemberStatus>,
        now: Instant,
    ) -> Option<(u32, Arc<TargetStatus>)> {
        let circuit = self.circuit(now);
        let status = self.status.lock();
        if let Some((version, listed)) = previous
            && *version == status.version
            && (listed.score, listed.dependency_down) == score
            && listed.pool == pool
            && listed.circuit == circuit
        {
            return None;
        }
        let mut view = self.view(&status, false, circuit);
        (view.score, view.dependency_down) = score;
        view.pool = pool;
        Some((status.version, Arc::new(view)))
    }

    fn view(
        &self,
        status: &Status,
        with_history: bool,
        circuit: Option<CircuitSnapshot>,
    ) -> TargetStatus {
        let details = status.details.as_deref();
        TargetStatus {
            id: self.seat.id.clone(),
            kind: self.seat.probe.kind(),
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
            tls: details.and_then(|d| d.tls.clone()),
            maintenance: status.maintenance.as_ref().map(|m| m.info.clone()),
            consecutive_successes: status.machine.consecutive_successes(),
            consecutive_failures: status.machine.consecutive_failures(),
            transitions: status.transitions,
            since: from_unix_ms(status.since_ms),
            schedule: self.policy.schedule,
            history: if with_history {
                status.history.iter().copied().collect()
            } else {
                Vec::new()
            },
            score: None,
            dependency_down: false,
            pool: None,
            circuit,
            placement: status
                .placed
                .as_ref()
                .map(|p| p.view(self.ctx.member.get())),
        }
    }

    /// What the latest TLS handshake of its probe showed, for its metrics.
    pub fn tls(&self) -> Option<Arc<TlsFacts>> {
        self.status.lock().details.as_ref()?.tls.clone()
    }

    /// Its circuit breaker's state at `now`, once an open circuit whose time has passed has moved
    /// to half-open (announced): readers of the status and the gauge see the state the next call
    /// would meet, not the one the last call left.
    pub fn circuit(&self, now: Instant) -> Option<CircuitSnapshot> {
        let breaker = self.seat.breaker.as_ref()?;
        let (moved, snapshot) = breaker.with(|b| (b.advance(now), b.snapshot(now)));
        announce_circuit(&self.seat.id, moved);
        Some(snapshot)
    }

    /// Starts or ends maintenance as its expiry and the declared windows say, at a run.
    fn sync_maintenance(
        &self,
        status: &mut Status,
        effects: &mut Effects,
        now: Instant,
        wall: SystemTime,
    ) {
        if let Some(m) = &status.maintenance {
            if !m.is_over(now, wall) {
                return;
            }
            status.maintenance = None;
            let t = status.machine.end_maintenance();
            Self::book(status, effects, t, || None);
            return;
        }
        let Some(until) = self
            .policy
            .maintenance
            .iter()
            .filter_map(|w| w.active_until(wall))
            .max()
        else {
            return;
        };
        if status.window_ended_early.is_some_and(|skip| skip >= until) {
            return;
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
        Self::book(status, effects, t, || Some("scheduled window".into()));
    }

    /// Records one run: status, metrics and effects, all in one place. A `deferred` run (a
    /// timeout while the engine itself ran late, or resolver trouble while the resolver is out)
    /// is recorded and shown but moves neither the state machine nor the score. Returns the step
    /// to the next run.
    fn record(&self, result: CheckResult, latency: Duration, deferred: bool) -> Duration {
        let wall = SystemTime::now();
        let now = Instant::now();
        let outcome = Outcome::new(wall, latency, &result.verdict);
        let (window, epoch) = self.ctx.hub.window();
        let mut effects = Effects::default();
        let (step, handed) = {
            let mut status = self.status.lock();
            status.version = status.version.wrapping_add(1);
            status.exhausted = 0;
            self.sync_maintenance(&mut status, &mut effects, now, wall);
            if !deferred {
                status.window.record(outcome.ok());
            }
            status.last = Some(outcome);
            Details::record(&mut status.details, &result);
            if self.ctx.history > 0 {
                if status.history.len() >= self.ctx.history {
                    status.history.pop_front();
                }
                status.history.push_back(outcome);
            }
            let role = status.role();
            // A result that comes in after the target went to another member moves nothing.
            if !deferred && role.probes() {
                let quality = Quality::from(&result.verdict);
                if status.machine.is_ejected() && !status.retired {
                    // Its active results are its way back into the pool.
                    effects.recovery(outcome.ok());
                }
                let t = if role == Role::Decide {
                    status.machine.observe(quality, now)
                } else {
                    self.vote(&mut status, &mut effects, quality, now)
                };
                let moved = t.is_some();
                Self::book(&mut status, &mut effects, t, || detail(&result.verdict));
                let state = status.machine.state();
                // Results in maintenance do not enter the graph's window.
                let unchanged = if state == HealthState::Maintenance {
                    !moved
                } else {
                    status.streak.unchanged(quality, window, epoch) && !moved
                };
                if !status.retired && !unchanged {
                    effects.score(quality, state);
                }
            }
            // A voter paces itself by its own verdict, which is what its results move.
            let machine = status
                .placed
                .as_ref()
                .and_then(|p| p.vote.as_ref())
                .unwrap_or(&status.machine);
            let step = machine.next_delay(&self.policy.schedule, &status.window, &mut rand::rng());
            let handed = if !deferred && role.probes() && self.ctx.hub.feeding() {
                let run = Run {
                    at: wall,
                    quality: Quality::from(&result.verdict),
                    latency,
                };
                let held = hold(&mut status.held, &run, now, || self.runs_per_batch());
                // With a transition, the runs that led to it: the history's hours then agree
                // with its transitions at once (and a steady target's batches stay long).
                held.or_else(|| {
                    effects
                        .moves()
                        .then(|| take_held(&mut status.held))
                        .flatten()
                })
            } else {
                None
            };
            (step, handed)
        };
        self.count(&result, outcome.ok(), latency, deferred);
        self.hand_over(handed);
        self.apply(effects);
        step
    }

    /// Feeds a result to this member's vote of a replicated target (booked when it changed),
    /// and, on its owner, brings the state to what the votes decide.
    fn vote(
        &self,
        status: &mut Status,
        effects: &mut Effects,
        quality: Quality,
        now: Instant,
    ) -> Option<Transition> {
        let Status {
            placed,
            machine,
            retired,
            ..
        } = status;
        let placed = placed.as_mut()?;
        if let Some(vote) = placed.observe(quality, now)
            && !*retired
        {
            effects.vote(vote);
        }
        placed.lead(machine)
    }

    /// Places the target in the cluster: `role` among `members` (owner first). Returns the role
    /// it had, and whether it had members before (a target that moves between members, rather
    /// than one placed for the first time).
    pub fn place(&self, role: Role, members: Vec<MemberId>, quorum: usize) -> (Role, bool) {
        let mut effects = Effects::default();
        let was = {
            let mut status = self.status.lock();
            status.version = status.version.wrapping_add(1);
            let was = (
                status.role(),
                status
                    .placed
                    .as_ref()
                    .is_some_and(|p| !p.members.is_empty()),
            );
            let Status {
                placed, machine, ..
            } = &mut *status;
            match placed {
                Some(placed) => placed.set(role, members, quorum, machine),
                None => *placed = Some(Box::new(Placed::new(role, members, quorum, machine))),
            }
            // A verdict of MAINTENANCE adopted from an owner whose maintenance this member does
            // not hold ends here, or it would never end.
            if role.decides()
                && status.machine.state() == HealthState::Maintenance
                && status.maintenance.is_none()
            {
                let t = status.machine.end_maintenance();
                Self::book(&mut status, &mut effects, t, || None);
            }
            let Status {
                placed, machine, ..
            } = &mut *status;
            let t = placed.as_ref().and_then(|p| p.lead(machine));
            Self::book(&mut status, &mut effects, t, || None);
            was
        };
        self.apply(effects);
        was
    }

    /// Takes the verdict the member that decides the target published; `false` (ignored) when
    /// this member decides it itself. An operator's maintenance held here stands over it.
    pub fn adopt(&self, published: &Published) -> bool {
        self.mirror(published, false)
    }

    /// Starts a target that has just arrived from the verdict published for it before it did,
    /// whatever its role: a target this member is to decide goes on from there.
    pub fn resume(&self, published: &Published) {
        self.mirror(published, true);
    }

    fn mirror(&self, published: &Published, over_own: bool) -> bool {
        let mut effects = Effects::default();
        {
            let mut status = self.status.lock();
            if status.role().decides() && !over_own {
                return false;
            }
            if let Some(m) = &status.maintenance
                && m.is_over(Instant::now(), SystemTime::now())
            {
                status.maintenance = None;
            }
            status.version = status.version.wrapping_add(1);
            let state = if status.maintenance.is_some() {
                HealthState::Maintenance
            } else {
                published.state
            };
            let t = status.machine.adopt(
                state,
                published.consecutive_successes,
                published.consecutive_failures,
            );
            Self::book(&mut status, &mut effects, t, || published.detail.clone());
            // The state began when its decider says, not when this member heard of it.
            if status.machine.state() == published.state
                && let Some(since) = published.since
            {
                status.since_ms = unix_ms(since);
            }
        }
        self.apply(effects);
        true
    }

    /// Records another member's vote (`None`: it withdrew it); on the owner, the decision
    /// follows.
    pub fn set_vote(&self, member: &MemberId, vote: Option<HealthState>) {
        let mut effects = Effects::default();
        {
            let mut status = self.status.lock();
            let Status {
                placed, machine, ..
            } = &mut *status;
            let Some(placed) = placed else { return };
            placed.set_vote(member, vote);
            let t = placed.lead(machine);
            status.version = status.version.wrapping_add(1);
            Self::book(&mut status, &mut effects, t, || Some("votes".to_owned()));
        }
        self.apply(effects);
    }

    /// The verdict to publish, when this member decides the target. The counters are capped
    /// at the thresholds: beyond them they change nothing a successor needs, and capped they
    /// stop changing once a verdict is settled, so a settled target's record is written once,
    /// not again at every change of the member set.
    pub fn decided(&self) -> Option<Published> {
        let status = self.status.lock();
        if !status.role().decides() {
            return None;
        }
        let t = &self.policy.thresholds;
        let passes = t.rise.max(t.degrade).max(t.recover).get();
        let state = status.machine.state();
        let detail = status.details.as_ref().and_then(|d| d.verdict.clone());
        Some(Published {
            state,
            consecutive_successes: status.machine.consecutive_successes().min(passes),
            consecutive_failures: status.machine.consecutive_failures().min(t.fall.get()),
            detail,
            since: from_unix_ms(status.since_ms),
        })
    }

    /// This member's vote, when it probes a replicated target.
    pub fn own_vote(&self) -> Option<HealthState> {
        let status = self.status.lock();
        status
            .placed
            .as_ref()?
            .vote
            .as_ref()
            .map(StateMachine::state)
    }

    /// What this member does with the target.
    pub fn role(&self) -> Role {
        self.status.lock().role()
    }

    /// The per-run metrics.
    fn count(&self, result: &CheckResult, ok: bool, latency: Duration, deferred: bool) {
        let kind = self.seat.probe.kind();
        if let Some((_, fleet)) = self.ctx.fleet.iter().find(|(k, _)| *k == kind) {
            fleet.record(latency);
        }
        if let Some(failure) = result.failure() {
            metrics::counter!(
                "probe_fleet_failures_total",
                "kind" => kind,
                "reason" => failure.reason.as_str()
            )
            .increment(1);
        }
        let own = self.ctx.per_target_histograms.load(Ordering::Relaxed);
        let remarks = &result.remarks;
        let counted = [
            remarks
                .stale_connection_retried
                .then_some(Counted::StaleConnectionRetry),
            deferred.then_some(Counted::Deferred),
            result.failure().map(|f| Counted::Failure(f.reason)),
            remarks
                .dns_trouble
                .as_ref()
                .is_some_and(DnsTrouble::used_stale_answer)
                .then_some(Counted::DnsStaleAnswer),
        ]
        .into_iter()
        .flatten()
        .chain(
            result
                .signals
                .iter()
                .map(|signal| Counted::Signal(signal.name.clone())),
        );
        self.seat.meters.run(ok, own.then_some(latency), counted);
    }

    /// The step to the next try after a run that found a resource of the engine exhausted: soon,
    /// doubling with each such run in a row, never later than the interval. The run is not the
    /// target's result: nothing else about the target changes.
    fn retry_exhausted(&self) -> Duration {
        let tries = {
            let mut status = self.status.lock();
            status.exhausted = status.exhausted.saturating_add(1);
            status.exhausted
        };
        EXHAUSTED_RETRY
            .saturating_mul(1 << u32::from(tries.min(16) - 1))
            .min(self.policy.schedule.interval())
    }

    /// Whether this run can be skipped because real traffic already proves the target healthy;
    /// starts counting afresh either way.
    fn skip_for_traffic(&self) -> bool {
        let (successes, failed) = self.seat.take_passive();
        let skip = self.policy.skip_active_after.is_some_and(|n| {
            successes >= n.get() && !failed && self.seat.state() == HealthState::Up
        });
        if skip {
            self.seat.meters.count(Counted::ActiveSkipped);
        }
        skip
    }
}

/// The failure or degradation behind a transition, in words.
fn detail(verdict: &Verdict) -> Option<String> {
    match verdict {
        Verdict::Failed(f) => Some(format!("{}: {}", f.reason, f.detail)),
        Verdict::Degraded(reasons) => Some(reasons.join("; ")),
        Verdict::Up => None,
    }
}

#[async_trait::async_trait]
impl Job for Target {
    fn id(&self) -> &TargetId {
        &self.seat.id
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
        let multiplier = || self.ctx.self_health.as_ref().map_or(0, |h| h.multiplier());
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
        if let Some(failure) = result.failure()
            && let FailureReason::Exhausted(kind) = failure.reason
        {
            self.ctx.resources.fault(kind, &failure.detail);
            return self.retry_exhausted();
        }
        // A timeout noticed long after it was due is the engine's own lateness, seen first hand:
        // it counts as a late wake-up.
        let overshoot = took.saturating_sub(timeout);
        let late = self
            .ctx
            .self_health
            .as_ref()
            .is_some_and(|h| overshoot > h.config().threshold && h.observe(overshoot) > 0);
        let deferred = (late || before.max(multiplier()) > 0)
            && result
                .failure()
                .is_some_and(|f| f.reason == FailureReason::Timeout);
        // Resolver trouble while the resolver is out (or may be) is the engine's fault too (see
        // `crate::tier::resolve`): a name it could not answer says nothing about the target.
        let deferred =
            deferred || (dns_trouble_failure(&result) && self.ctx.resolver.outage_possible());
        self.record(result, took, deferred)
    }
}

/// The first retry after a resource fault: soon enough that a target is not left unprobed for
/// long, late enough for the resource to come back.
const EXHAUSTED_RETRY: Duration = Duration::from_millis(100);

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
