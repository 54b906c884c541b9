//! The engine: the set of targets, the scheduler that probes them, and the health snapshot that
//! servers read.
//!
//! Serving health never probes. Each probe run updates its target's status under a short,
//! uncontended lock, and the engine keeps running totals (targets, healthy targets) so that the
//! hot readiness question is two atomic loads. A status or listing request copies what the last
//! runs left behind.
//!
//! Topology changes arrive as a whole desired set ([`Engine::apply`]) and are applied as a diff:
//! targets whose spec did not change keep their state, counters and schedule; removed targets
//! stop; added and changed targets start fresh in `PROBING`.
//!
//! Every transition is logged once, counted once (`probe_state_transitions_total`) and reflected
//! in `probe_target_up`, all from one place ([`Target::record`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::SuccessWindow;
use crate::outcome::{CheckResult, Failure, FailureReason, Outcome};
use crate::probe::{self, Probe};
use crate::scheduler::{Job, Scheduler, SchedulerConfig};
use crate::state::{HealthState, Hysteresis, Transition};
use crate::target::{Schedule, TargetId, TargetSpec};

/// Engine settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Limits of the worker pool.
    pub scheduler: SchedulerConfig,
    /// How many recent results each target keeps for the API.
    pub history: usize,
}

impl Default for EngineConfig {
    /// The scheduler's defaults and a history of 16 results (256 bytes per target, which keeps
    /// a target under 1 KiB in all).
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            history: 16,
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
    /// The current verdict.
    pub state: HealthState,
    /// The latest run, if any.
    pub last: Option<Outcome>,
    /// The latest failure with its detail, kept after later successes for diagnosis.
    pub last_failure: Option<Failure>,
    /// Successes in a row.
    pub consecutive_successes: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Verdict changes since the target was added.
    pub transitions: u64,
    /// The target's schedule.
    pub schedule: Schedule,
    /// Recent results, oldest first; empty in listings.
    pub history: Vec<Outcome>,
}

impl TargetStatus {
    /// Whether the target counts as healthy (UP).
    pub fn healthy(&self) -> bool {
        self.state == HealthState::Up
    }
}

/// The engine's readiness verdict: ready when every target is healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Whether every target is healthy.
    pub ready: bool,
    /// Targets in the engine.
    pub total: usize,
    /// Targets that are UP.
    pub healthy: usize,
    /// A short reason when not ready, naming up to five unhealthy targets.
    pub reason: Option<String>,
}

/// Running totals, so readiness does not walk every target.
#[derive(Default)]
struct Tally {
    total: AtomicUsize,
    healthy: AtomicUsize,
}

/// The probe engine. Cheap to clone; clones share the same targets.
#[derive(Clone)]
pub struct Engine {
    targets: Arc<RwLock<BTreeMap<TargetId, Arc<Target>>>>,
    tally: Arc<Tally>,
    scheduler: Scheduler,
    history: usize,
}

impl Engine {
    /// Starts an engine with no targets on the current tokio runtime.
    ///
    /// Cancelling `cancel` stops probing; [`Engine::stopped`] then resolves when in-flight probes
    /// have finished.
    pub fn start(config: EngineConfig, cancel: CancellationToken) -> Self {
        Self {
            targets: Arc::default(),
            tally: Arc::default(),
            scheduler: Scheduler::start(config.scheduler, cancel),
            history: config.history,
        }
    }

    /// Makes `specs` the engine's whole set of targets, touching only what changed.
    ///
    /// Ids are expected to be unique (front ends validate this); of duplicates the last wins.
    pub fn apply(&self, specs: Vec<TargetSpec>) -> Diff {
        let desired: BTreeMap<TargetId, TargetSpec> =
            specs.into_iter().map(|s| (s.id.clone(), s)).collect();
        let mut targets = write(&self.targets);
        let mut diff = Diff::default();
        targets.retain(|id, target| {
            let keep = desired.contains_key(id);
            if !keep {
                target.retire();
                self.scheduler.remove(id);
                diff.removed.push(id.clone());
            }
            keep
        });
        for (id, spec) in desired {
            match targets.get(&id) {
                Some(current) if current.spec == spec => diff.unchanged += 1,
                Some(current) => {
                    current.retire();
                    diff.changed.push(id.clone());
                    targets.insert(id, self.launch(spec));
                }
                None => {
                    diff.added.push(id.clone());
                    targets.insert(id, self.launch(spec));
                }
            }
        }
        diff
    }

    fn launch(&self, spec: TargetSpec) -> Arc<Target> {
        let target = Arc::new(Target::new(spec, self.tally.clone(), self.history));
        self.scheduler.insert(target.clone());
        target
    }

    /// One target's status with its recent history.
    pub fn status(&self, id: &TargetId) -> Option<TargetStatus> {
        let target = read(&self.targets).get(id).cloned()?;
        Some(target.status(true))
    }

    /// Every target's status, sorted by id, without history.
    pub fn statuses(&self) -> Vec<TargetStatus> {
        let targets: Vec<_> = read(&self.targets).values().cloned().collect();
        targets.iter().map(|t| t.status(false)).collect()
    }

    /// Whether every target is healthy; O(1) when it is.
    pub fn readiness(&self) -> Readiness {
        let total = self.tally.total.load(Ordering::Acquire);
        let healthy = self.tally.healthy.load(Ordering::Acquire);
        if healthy >= total {
            return Readiness {
                ready: true,
                total,
                healthy,
                reason: None,
            };
        }
        const NAMED: usize = 5;
        let unhealthy: Vec<String> = read(&self.targets)
            .values()
            .filter_map(|t| {
                let state = t.lock().machine.state();
                (state != HealthState::Up).then(|| format!("{} ({state})", t.spec.id))
            })
            .take(NAMED)
            .collect();
        let more = (total - healthy).saturating_sub(unhealthy.len());
        let mut reason = format!(
            "{} of {total} targets not healthy: {}",
            total - healthy,
            unhealthy.join(", ")
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

    /// The scheduler, for its live figures (workers, probes in flight).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Resolves once the engine was cancelled and in-flight probes have finished.
    pub async fn stopped(&self) {
        self.scheduler.stopped().await;
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // A panic while holding the lock cannot leave the map half-updated (every update is a single
    // insert or remove), so a poisoned lock is still consistent.
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A target as the engine runs it.
struct Target {
    spec: TargetSpec,
    probe: Arc<dyn Probe>,
    status: Mutex<Status>,
    tally: Arc<Tally>,
    history: usize,
    /// Handles registered once, so a probe run updates metrics without a registry lookup.
    success: metrics::Gauge,
    up: metrics::Gauge,
    duration: metrics::Histogram,
}

struct Status {
    machine: Hysteresis,
    window: SuccessWindow,
    last: Option<Outcome>,
    last_failure: Option<Failure>,
    history: VecDeque<Outcome>,
    transitions: u64,
    /// Set when the target leaves the engine: its late results no longer move the totals.
    retired: bool,
}

impl Target {
    fn new(spec: TargetSpec, tally: Arc<Tally>, history: usize) -> Self {
        tally.total.fetch_add(1, Ordering::AcqRel);
        let label = spec.id.as_str().to_owned();
        let up = metrics::gauge!("probe_target_up", "target" => label.clone());
        up.set(0.0);
        Self {
            probe: probe::build(&spec.probe),
            status: Mutex::new(Status {
                machine: Hysteresis::new(spec.thresholds),
                window: SuccessWindow::default(),
                last: None,
                last_failure: None,
                history: VecDeque::new(),
                transitions: 0,
                retired: false,
            }),
            tally,
            history,
            success: metrics::gauge!("probe_success", "target" => label.clone()),
            up,
            duration: metrics::histogram!("probe_duration_seconds", "target" => label),
            spec,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        // Status updates are plain field writes; a poisoned lock still holds a usable status.
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn retire(&self) {
        let mut status = self.lock();
        if !status.retired {
            status.retired = true;
            self.tally.total.fetch_sub(1, Ordering::AcqRel);
            if status.machine.state() == HealthState::Up {
                self.tally.healthy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    fn status(&self, with_history: bool) -> TargetStatus {
        let status = self.lock();
        TargetStatus {
            id: self.spec.id.clone(),
            state: status.machine.state(),
            last: status.last,
            last_failure: status.last_failure.clone(),
            consecutive_successes: status.machine.consecutive_successes(),
            consecutive_failures: status.machine.consecutive_failures(),
            transitions: status.transitions,
            schedule: self.spec.schedule,
            history: if with_history {
                status.history.iter().copied().collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Records one run: status, totals, metrics and the transition log, all in one place.
    /// Returns the step to the next run.
    fn record(&self, result: CheckResult, latency: Duration) -> Duration {
        let outcome = Outcome::new(SystemTime::now(), latency, &result.verdict);
        let (transition, step, retired) = {
            let mut status = self.lock();
            let ok = outcome.ok();
            status.window.record(ok);
            status.last = Some(outcome);
            if let Some(failure) = result.failure() {
                status.last_failure = Some(failure.clone());
            }
            if self.history > 0 {
                if status.history.len() >= self.history {
                    status.history.pop_front();
                }
                status.history.push_back(outcome);
            }
            let transition = status.machine.observe(ok);
            if let Some(t) = transition {
                status.transitions += 1;
                if !status.retired {
                    self.move_totals(t);
                }
            }
            let step =
                status
                    .machine
                    .next_delay(&self.spec.schedule, &status.window, &mut rand::rng());
            (transition, step, status.retired)
        };
        self.success.set(if outcome.ok() { 1.0 } else { 0.0 });
        self.duration.record(latency);
        if let Some(failure) = result.failure() {
            metrics::counter!(
                "probe_failures_total",
                "target" => self.spec.id.as_str().to_owned(),
                "reason" => failure.reason.as_str()
            )
            .increment(1);
        }
        if let Some(t) = transition.filter(|_| !retired) {
            self.announce(t, result.failure());
        }
        step
    }

    fn move_totals(&self, t: Transition) {
        if t.to == HealthState::Up {
            self.tally.healthy.fetch_add(1, Ordering::AcqRel);
        } else if t.from == HealthState::Up {
            self.tally.healthy.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn announce(&self, t: Transition, failure: Option<&Failure>) {
        let id = self.spec.id.as_str();
        self.up.set(if t.to == HealthState::Up { 1.0 } else { 0.0 });
        metrics::counter!(
            "probe_state_transitions_total",
            "target" => id.to_owned(),
            "from" => t.from.as_str(),
            "to" => t.to.as_str()
        )
        .increment(1);
        match failure {
            Some(f) => tracing::warn!(
                target_id = id,
                from = t.from.as_str(),
                to = t.to.as_str(),
                reason = f.reason.as_str(),
                detail = %f.detail,
                "target state changed"
            ),
            None => tracing::info!(
                target_id = id,
                from = t.from.as_str(),
                to = t.to.as_str(),
                "target state changed"
            ),
        }
    }
}

#[async_trait::async_trait]
impl Job for Target {
    fn id(&self) -> &TargetId {
        &self.spec.id
    }

    fn interval(&self) -> Duration {
        self.spec.schedule.interval()
    }

    fn jitter(&self) -> f64 {
        self.spec.schedule.jitter()
    }

    async fn run(&self) -> Duration {
        let timeout = self.spec.schedule.timeout();
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
        self.record(result, started.elapsed())
    }
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
}
