//! The gate itself: its state and counts in one atomic word, admissions and tracked work,
//! heartbeats, the three orchestrator answers, and the stop sequence (see the module above).

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use tokio::time::Instant;

/// Where the gate is in its life. Only ever moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateState {
    /// Not ready yet: nothing is admitted until [`Gate::startup_complete`].
    Starting,
    /// Admitting requests.
    Serving,
    /// Refusing new requests, waiting for the admitted ones and background work.
    Draining,
    /// Done: nothing is admitted or tracked.
    Stopped,
}

impl GateState {
    /// The lowercase name used in APIs and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Serving => "serving",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
        }
    }

    const fn bits(self) -> u64 {
        self as u64
    }

    const fn from_bits(bits: u64) -> Self {
        match bits & STATE_MASK {
            0 => Self::Starting,
            1 => Self::Serving,
            2 => Self::Draining,
            _ => Self::Stopped,
        }
    }
}

// The gate's word: the state in bits 0..2, admitted requests in bits 2..32, background tasks in
// bits 32..62. Thirty bits hold a billion of each, far beyond any real concurrency; a full count
// refuses rather than wraps.
const STATE_MASK: u64 = 0b11;
const REQUEST: u64 = 1 << 2;
const TASK: u64 = 1 << 32;
const COUNT_MAX: u64 = (1 << 30) - 1;

const fn requests(word: u64) -> u64 {
    (word >> 2) & COUNT_MAX
}

const fn tasks(word: u64) -> u64 {
    (word >> 32) & COUNT_MAX
}

/// The gate's settings. The default has no startup deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateConfig {
    /// How long startup may take: past it without [`Gate::startup_complete`], liveness fails so
    /// that the orchestrator restarts the instance. `None`: no deadline.
    pub startup_deadline: Option<Duration>,
}

/// What a readiness check says: ready or not, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Whether the check passes.
    pub ok: bool,
    /// Why it fails; `None` when it passes.
    pub reason: Option<String>,
}

impl Check {
    /// The check as a plain-text HTTP answer: 200 `ok`, or 503 with the reason, for `/livez`,
    /// `/readyz` and `/startupz` handlers of any framework.
    pub fn into_response<B: From<String>>(self) -> http::Response<B> {
        let (status, text) = match self.reason {
            None => (http::StatusCode::OK, "ok\n".to_owned()),
            Some(reason) => (http::StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
        };
        let mut response = http::Response::new(B::from(text));
        *response.status_mut() = status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }

    /// A passing check.
    pub fn pass() -> Self {
        Self {
            ok: true,
            reason: None,
        }
    }

    /// A failing check.
    pub fn fail(reason: impl Into<String>) -> Self {
        Self {
            ok: false,
            reason: Some(reason.into()),
        }
    }
}

/// A source of readiness beyond the gate's own state: usually the engine's verdict on the
/// service's dependencies (the engine implements it: the gate knows nothing of the engine).
pub trait ReadinessCheck: Send + Sync {
    /// Whether the dependencies allow serving, and why not. Called on every readiness request:
    /// it must read a snapshot, not probe.
    fn check(&self) -> Check;
}

/// What [`Gate::drain`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Whether every request and background task finished before the deadline.
    pub clean: bool,
    /// Requests still in flight at the end.
    pub requests: u64,
    /// Background tasks still running at the end.
    pub tasks: u64,
    /// How long the drain took.
    pub took: Duration,
}

/// The gate. Cheap to clone; clones share the same state.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    /// State and counts; see the module docs for why they share one word.
    word: AtomicU64,
    /// Set when a stop begins: readiness fails at once while requests are still admitted, so
    /// load balancers can notice before anything is refused.
    leaving: AtomicBool,
    /// Wakes drains when the last request or task of a draining gate finishes.
    idle: Notify,
    started: Instant,
    config: GateConfig,
    /// Read on each readiness request; set once at wiring time, hence a plain mutex.
    /// The dependency check, swapped in whole and read without a lock: `/readyz` asks it on
    /// every request, from every thread at once.
    readiness: ArcSwapOption<Arc<dyn ReadinessCheck>>,
    heartbeats: Mutex<Vec<Arc<HeartbeatState>>>,
    /// Marked on every move of the state and when a stop begins ([`Gate::changes`]): a
    /// watch rather than a [`Notify`], so that a move between two waits is not lost.
    changed: watch::Sender<()>,
}

impl Gate {
    /// A gate in Starting.
    pub fn new(config: GateConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                word: AtomicU64::new(GateState::Starting.bits()),
                leaving: AtomicBool::new(false),
                idle: Notify::new(),
                started: Instant::now(),
                config,
                readiness: ArcSwapOption::empty(),
                heartbeats: Mutex::new(Vec::new()),
                changed: watch::Sender::new(()),
            }),
        }
    }

    /// The current state.
    pub fn state(&self) -> GateState {
        GateState::from_bits(self.inner.word.load(Ordering::Acquire))
    }

    /// Requests admitted and not yet released.
    pub fn requests(&self) -> u64 {
        requests(self.inner.word.load(Ordering::Acquire))
    }

    /// Background tasks tracked and not yet finished.
    pub fn tasks(&self) -> u64 {
        tasks(self.inner.word.load(Ordering::Acquire))
    }

    /// Ends startup: Starting -> Serving. Returns whether this call did it (false when startup
    /// was complete already, or the gate is draining or stopped).
    pub fn startup_complete(&self) -> bool {
        self.transition(|state| (state == GateState::Starting).then_some(GateState::Serving))
    }

    /// Admits a request while Serving; `None` otherwise. The request counts as in flight until
    /// the guard drops.
    pub fn admit(&self) -> Option<Admission> {
        self.take(REQUEST, |state| state == GateState::Serving)
            .map(|inner| Admission { inner })
    }

    /// Counts a piece of background work as in flight until the guard drops. Accepted until the
    /// gate is Stopped: work started by an admitted request while draining belongs to it.
    pub fn track(&self) -> Option<Work> {
        self.take(TASK, |state| state != GateState::Stopped)
            .map(|inner| Work { inner })
    }

    /// Spawns `future` on the current runtime as tracked background work; `None` (and the future
    /// is dropped unstarted) once the gate is Stopped.
    pub fn spawn<F>(&self, future: F) -> Option<tokio::task::JoinHandle<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let work = self.track()?;
        Some(tokio::spawn(async move {
            let _work = work;
            future.await
        }))
    }

    /// Adds `one` (a request or a task) if `allowed(state)`, in one CAS with the state check.
    fn take(&self, one: u64, allowed: impl Fn(GateState) -> bool) -> Option<Arc<Inner>> {
        let word = &self.inner.word;
        let shift = if one == REQUEST { 2 } else { 32 };
        let mut current = word.load(Ordering::Acquire);
        loop {
            if !allowed(GateState::from_bits(current))
                || (current >> shift) & COUNT_MAX == COUNT_MAX
            {
                return None;
            }
            match word.compare_exchange_weak(
                current,
                current + one,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(self.inner.clone()),
                Err(now) => current = now,
            }
        }
    }

    /// Moves the state as `next` says, in one CAS; returns whether it moved.
    fn transition(&self, next: impl Fn(GateState) -> Option<GateState>) -> bool {
        let word = &self.inner.word;
        let mut current = word.load(Ordering::Acquire);
        loop {
            let Some(to) = next(GateState::from_bits(current)) else {
                return false;
            };
            let updated = (current & !STATE_MASK) | to.bits();
            match word.compare_exchange_weak(current, updated, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.inner.changed.send_replace(());
                    return true;
                }
                Err(now) => current = now,
            }
        }
    }

    /// Fails readiness from now on, while still admitting: the first step of a stop, so that load
    /// balancers take the instance out before it refuses anything.
    pub fn leave(&self) {
        if !self.inner.leaving.swap(true, Ordering::AcqRel) {
            self.inner.changed.send_replace(());
        }
    }

    /// Whether a stop has begun: [`Gate::leave`] was called, as [`Gate::drain`] and [`shutdown`]
    /// do first. Readiness fails from then on.
    pub fn stopping(&self) -> bool {
        self.inner.leaving.load(Ordering::Acquire)
    }

    /// A signal marked each time the gate moves (startup complete, a stop begun, draining,
    /// stopped), for a server that pushes readiness to its clients rather than being polled
    /// (gRPC health's `Watch`): on `changed()`, read [`Gate::readiness`] and [`Gate::liveness`]
    /// again. The readiness source and heartbeats are not signalled here: the engine has
    /// [`Engine::readiness_changes`](crate::Engine::readiness_changes), and heartbeats go stale
    /// with time alone.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.inner.changed.subscribe()
    }

    /// Stops admitting, waits up to `timeout` for every admitted request and background task,
    /// and ends in Stopped whatever happens.
    ///
    /// Idempotent and safe to call from several places at once: each call waits with its own
    /// deadline and reports what it saw; once Stopped, a call returns at once.
    pub async fn drain(&self, timeout: Duration) -> DrainReport {
        let began = Instant::now();
        self.leave();
        self.transition(|state| (state < GateState::Draining).then_some(GateState::Draining));
        let deadline = began + timeout;
        let clean = loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            // Registered before the check, so a release between the check and the wait wakes it.
            idle.as_mut().enable();
            let word = self.inner.word.load(Ordering::Acquire);
            if requests(word) == 0 && tasks(word) == 0 {
                break true;
            }
            if GateState::from_bits(word) == GateState::Stopped {
                break false;
            }
            tokio::select! {
                () = &mut idle => {}
                () = tokio::time::sleep_until(deadline) => break false,
            }
        };
        self.transition(|state| (state != GateState::Stopped).then_some(GateState::Stopped));
        // Wakes other drains waiting with later deadlines: the gate is stopped now.
        self.inner.idle.notify_waiters();
        let word = self.inner.word.load(Ordering::Acquire);
        DrainReport {
            clean: clean || (requests(word) == 0 && tasks(word) == 0),
            requests: requests(word),
            tasks: tasks(word),
            took: began.elapsed(),
        }
    }

    /// Attaches what readiness depends on besides the gate: the engine's verdict, usually.
    pub fn set_readiness(&self, source: Arc<dyn ReadinessCheck>) {
        self.inner.readiness.store(Some(Arc::new(source)));
    }

    /// Registers a liveness check: something that must show progress at least every `max_age`
    /// (a worker loop calls [`Heartbeat::beat`]); liveness fails while it does not.
    pub fn heartbeat(&self, name: impl Into<String>, max_age: Duration) -> Heartbeat {
        let state = Arc::new(HeartbeatState {
            name: name.into(),
            max_age,
            last: Mutex::new(Instant::now()),
        });
        self.inner.heartbeats.lock().push(state.clone());
        Heartbeat { state }
    }

    /// Whether the process should be left running: fails only when Stopped, when a heartbeat is
    /// stuck, or when startup overran its deadline. Dependencies never fail it, and while
    /// startup is in progress (within its deadline) nothing does.
    pub fn liveness(&self) -> Check {
        let state = self.state();
        if state == GateState::Stopped {
            return Check::fail("stopped");
        }
        if state == GateState::Starting {
            return match self.startup_overrun() {
                Some(deadline) => Check::fail(format!(
                    "startup did not complete within {}",
                    humantime::format_duration(deadline)
                )),
                None => Check::pass(),
            };
        }
        let now = Instant::now();
        let stuck: Vec<String> = self
            .inner
            .heartbeats
            .lock()
            .iter()
            .filter_map(|h| {
                let age = now.saturating_duration_since(*h.last.lock());
                (age > h.max_age).then(|| {
                    format!(
                        "{} silent for {}",
                        h.name,
                        humantime::format_duration(Duration::from_millis(age.as_millis() as u64))
                    )
                })
            })
            .collect();
        if stuck.is_empty() {
            Check::pass()
        } else {
            Check::fail(stuck.join("; "))
        }
    }

    /// Whether the instance should receive traffic: Serving, not leaving, and the attached
    /// readiness source passes.
    pub fn readiness(&self) -> Check {
        let serving = self.serving();
        if !serving.ok {
            return serving;
        }
        match self.inner.readiness.load().as_deref() {
            Some(source) => source.check(),
            None => Check::pass(),
        }
    }

    /// The gate's own part of [`Gate::readiness`], without the readiness source's: Serving and
    /// not leaving. A verbose readiness answer shows it as a check of its own, beside the
    /// source's.
    pub fn serving(&self) -> Check {
        match self.state() {
            GateState::Serving if self.inner.leaving.load(Ordering::Acquire) => {
                Check::fail("shutting down")
            }
            GateState::Serving => Check::pass(),
            state => Check::fail(state.as_str()),
        }
    }

    /// Whether startup has completed: for a startup probe, which holds off the liveness and
    /// readiness probes until it passes.
    pub fn startup(&self) -> Check {
        match self.state() {
            GateState::Starting => match self.startup_overrun() {
                Some(deadline) => Check::fail(format!(
                    "startup did not complete within {}",
                    humantime::format_duration(deadline)
                )),
                None => Check::fail("starting"),
            },
            _ => Check::pass(),
        }
    }

    /// The startup deadline, when it has passed.
    fn startup_overrun(&self) -> Option<Duration> {
        self.inner
            .config
            .startup_deadline
            .filter(|deadline| self.inner.started.elapsed() > *deadline)
    }
}

impl Inner {
    /// Releases `one` (a request or a task), waking drains when the gate has gone idle.
    fn release(&self, one: u64) {
        let before = self.word.fetch_sub(one, Ordering::AcqRel);
        let after = before - one;
        if requests(after) == 0
            && tasks(after) == 0
            && GateState::from_bits(after) >= GateState::Draining
        {
            self.idle.notify_waiters();
        }
    }
}

/// An admitted request; dropping it releases the slot.
#[must_use = "the request counts as in flight only while the admission is held"]
pub struct Admission {
    inner: Arc<Inner>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.inner.release(REQUEST);
    }
}

/// Tracked background work; dropping it marks the work done.
#[must_use = "the work counts as in flight only while the guard is held"]
pub struct Work {
    inner: Arc<Inner>,
}

impl Drop for Work {
    fn drop(&mut self) {
        self.inner.release(TASK);
    }
}

struct HeartbeatState {
    name: String,
    max_age: Duration,
    last: Mutex<Instant>,
}

/// A registered liveness check ([`Gate::heartbeat`]).
#[derive(Clone)]
pub struct Heartbeat {
    state: Arc<HeartbeatState>,
}

impl Heartbeat {
    /// Records progress.
    pub fn beat(&self) {
        *self.state.last.lock() = Instant::now();
    }
}

/// A cleanup step of [`shutdown`]: closing a pool, flushing a buffer.
pub struct Hook {
    name: String,
    run: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Hook {
    /// A named cleanup step.
    pub fn new(name: impl Into<String>, run: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            name: name.into(),
            run: Box::pin(run),
        }
    }
}

/// How a stop goes: see [`shutdown`].
pub struct ShutdownPlan {
    /// How long to keep serving after readiness fails, so that load balancers notice: the
    /// readiness probe's period times its failure threshold, plus a margin.
    pub propagation_delay: Duration,
    /// How long the drain may wait for in-flight requests and background work.
    pub grace: Duration,
    /// Cleanup steps, run in order after the drain.
    pub hooks: Vec<Hook>,
    /// How long each cleanup step may take.
    pub hook_timeout: Duration,
}

impl ShutdownPlan {
    /// The propagation delay for a readiness probe run every `period` that takes
    /// `failure_threshold` failures to take the instance out, plus one period of margin for the
    /// probe in flight when readiness flipped.
    pub fn propagation_delay_for(period: Duration, failure_threshold: u32) -> Duration {
        period.saturating_mul(failure_threshold.saturating_add(1))
    }
}

impl Default for ShutdownPlan {
    /// - `propagation_delay`: 10 s, for a readiness probe every 5 s that fails once
    ///   ([`ShutdownPlan::propagation_delay_for`]);
    /// - `grace`: 20 s;
    /// - no hooks, 5 s each.
    fn default() -> Self {
        Self {
            propagation_delay: Self::propagation_delay_for(Duration::from_secs(5), 1),
            grace: Duration::from_secs(20),
            hooks: Vec::new(),
            hook_timeout: Duration::from_secs(5),
        }
    }
}

/// What [`shutdown`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The drain's outcome.
    pub drain: DrainReport,
    /// The hooks that did not finish within their timeout, by name.
    pub hooks_timed_out: Vec<String>,
}

/// The stop sequence, once the caller has decided to stop (a signal, an API call):
/// 1. readiness fails at once ([`Gate::leave`]), requests are still admitted;
/// 2. `propagation_delay` passes, so load balancers stop sending;
/// 3. the gate stops admitting and drains requests and background work, for up to `grace`;
/// 4. the hooks run in order, each for up to `hook_timeout`, after the work that uses what they
///    close;
/// 5. it returns; exiting is the caller's business.
pub async fn shutdown(gate: &Gate, plan: ShutdownPlan) -> ShutdownReport {
    gate.leave();
    tracing::info!(
        delay = %humantime::format_duration(plan.propagation_delay),
        "shutdown: not ready; serving until load balancers notice"
    );
    tokio::time::sleep(plan.propagation_delay).await;
    tracing::info!(grace = %humantime::format_duration(plan.grace), "shutdown: draining");
    let drain = gate.drain(plan.grace).await;
    if drain.clean {
        tracing::info!(took = ?drain.took, "shutdown: drained");
    } else {
        tracing::warn!(
            requests = drain.requests,
            tasks = drain.tasks,
            "shutdown: work still in flight at the deadline"
        );
    }
    let mut hooks_timed_out = Vec::new();
    for hook in plan.hooks {
        if tokio::time::timeout(plan.hook_timeout, hook.run)
            .await
            .is_err()
        {
            tracing::warn!(hook = %hook.name, "shutdown: cleanup step timed out");
            hooks_timed_out.push(hook.name);
        }
    }
    ShutdownReport {
        drain,
        hooks_timed_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving() -> Gate {
        let gate = Gate::new(GateConfig::default());
        assert!(gate.startup_complete());
        gate
    }

    #[tokio::test(start_paused = true)]
    async fn admits_only_while_serving() {
        let gate = Gate::new(GateConfig::default());
        assert!(gate.admit().is_none(), "starting");
        assert_eq!(gate.readiness(), Check::fail("starting"));
        gate.startup_complete();
        assert!(!gate.startup_complete(), "once");
        let first = gate.admit().unwrap();
        let second = gate.admit().unwrap();
        assert_eq!(gate.requests(), 2);
        drop(first);
        assert_eq!(gate.requests(), 1);
        drop(second);
        let report = gate.drain(Duration::from_secs(1)).await;
        assert!(report.clean);
        assert_eq!(report.took, Duration::ZERO);
        assert_eq!(gate.state(), GateState::Stopped);
        assert!(gate.admit().is_none());
        assert!(gate.track().is_none());
        assert!(gate.spawn(async {}).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_requests_and_background_work() {
        let gate = serving();
        let request = gate.admit().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let job = gate
            .spawn(async move {
                let _ = rx.await;
            })
            .unwrap();
        assert_eq!(gate.tasks(), 1);
        let draining = tokio::spawn({
            let gate = gate.clone();
            async move { gate.drain(Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(gate.state(), GateState::Draining);
        assert!(gate.admit().is_none(), "no request after the drain began");
        let late = gate
            .track()
            .expect("work of an admitted request is still tracked");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(request);
        drop(late);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!draining.is_finished(), "the job still runs");
        tx.send(()).unwrap();
        job.await.unwrap();
        let report = draining.await.unwrap();
        assert!(report.clean, "{report:?}");
        assert_eq!(report.took, Duration::from_secs(2));
        assert_eq!(gate.state(), GateState::Stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_times_out_and_still_stops() {
        let gate = serving();
        let stuck = gate.admit().unwrap();
        let report = gate.drain(Duration::from_secs(5)).await;
        assert_eq!(
            report,
            DrainReport {
                clean: false,
                requests: 1,
                tasks: 0,
                took: Duration::from_secs(5)
            }
        );
        assert_eq!(gate.state(), GateState::Stopped);
        drop(stuck);
        assert_eq!(gate.requests(), 0);
        // Idempotent: a later drain returns at once.
        let again = gate.drain(Duration::from_secs(5)).await;
        assert!(again.clean);
        assert_eq!(again.took, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_drains_all_end_stopped() {
        let gate = serving();
        let request = gate.admit().unwrap();
        let drains: Vec<_> = [1, 3, 30]
            .into_iter()
            .map(|s| {
                let gate = gate.clone();
                tokio::spawn(async move { gate.drain(Duration::from_secs(s)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(request);
        let mut reports = Vec::new();
        for drain in drains {
            reports.push(drain.await.unwrap());
        }
        assert!(!reports[0].clean, "the 1 s drain timed out");
        assert_eq!(reports[0].took, Duration::from_secs(1));
        // The first to time out stopped the gate; the others returned then too.
        assert!(
            reports[1..]
                .iter()
                .all(|r| r.took == Duration::from_secs(1))
        );
        assert_eq!(gate.state(), GateState::Stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn guards_release_on_cancellation_and_panic() {
        let gate = serving();
        let admitted = gate.clone();
        let task = tokio::spawn(async move {
            let _admission = admitted.admit().unwrap();
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        assert_eq!(gate.requests(), 1);
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(gate.requests(), 0, "released by cancellation");

        let panicking = gate.spawn(async { panic!("job failed") }).unwrap();
        assert!(panicking.await.unwrap_err().is_panic());
        assert_eq!(gate.tasks(), 0, "released by the panic");
    }

    struct Dependencies(AtomicBool);

    impl ReadinessCheck for Dependencies {
        fn check(&self) -> Check {
            if self.0.load(Ordering::SeqCst) {
                Check::pass()
            } else {
                Check::fail("orders-db has a critical dependency DOWN")
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn dependencies_fail_readiness_never_liveness() {
        let gate = Gate::new(GateConfig {
            startup_deadline: Some(Duration::from_secs(30)),
        });
        let deps = Arc::new(Dependencies(AtomicBool::new(false)));
        gate.set_readiness(deps.clone());
        // Startup masks everything but itself.
        assert!(gate.liveness().ok);
        assert_eq!(gate.startup(), Check::fail("starting"));
        assert_eq!(gate.readiness(), Check::fail("starting"));
        gate.startup_complete();
        assert!(gate.startup().ok);
        assert!(gate.liveness().ok, "a dependency never fails liveness");
        assert_eq!(
            gate.readiness(),
            Check::fail("orders-db has a critical dependency DOWN")
        );
        deps.0.store(true, Ordering::SeqCst);
        assert!(gate.readiness().ok);
        gate.leave();
        assert_eq!(gate.readiness(), Check::fail("shutting down"));
        assert!(gate.admit().is_some(), "still admitting while leaving");
    }

    #[tokio::test(start_paused = true)]
    async fn startup_has_a_deadline_and_heartbeats_must_beat() {
        let gate = Gate::new(GateConfig {
            startup_deadline: Some(Duration::from_secs(30)),
        });
        let worker = gate.heartbeat("consumer", Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(
            gate.liveness().ok,
            "a stuck heartbeat is masked during startup"
        );
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(
            gate.liveness(),
            Check::fail("startup did not complete within 30s")
        );
        assert_eq!(
            gate.startup(),
            Check::fail("startup did not complete within 30s")
        );
        gate.startup_complete();
        assert_eq!(gate.liveness(), Check::fail("consumer silent for 31s"));
        worker.beat();
        assert!(gate.liveness().ok);
        gate.drain(Duration::ZERO).await;
        assert_eq!(gate.liveness(), Check::fail("stopped"));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_goes_in_order() {
        let gate = serving();
        let order = Arc::new(Mutex::new(Vec::new()));
        let request = gate.admit().unwrap();
        let log = |what: &'static str| {
            let order = order.clone();
            async move { order.lock().push(what) }
        };
        // A background job that outlives the request: the hooks wait for it too.
        let job = log("job done");
        gate.spawn(async move {
            tokio::time::sleep(Duration::from_secs(15)).await;
            job.await;
        })
        .unwrap();
        let plan = ShutdownPlan {
            propagation_delay: Duration::from_secs(10),
            grace: Duration::from_secs(20),
            hooks: vec![
                Hook::new("close consumers", log("consumers")),
                Hook::new("stuck", std::future::pending()),
                Hook::new("close pool", log("pool")),
            ],
            hook_timeout: Duration::from_secs(1),
        };
        let stopping = tokio::spawn({
            let gate = gate.clone();
            async move { shutdown(&gate, plan).await }
        });
        tokio::task::yield_now().await;
        assert!(!gate.readiness().ok, "not ready at once");
        assert!(gate.admit().is_some(), "still serving during the delay");
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(gate.admit().is_none(), "draining after the delay");
        order.lock().push("request done");
        drop(request);
        let report = stopping.await.unwrap();
        assert!(report.drain.clean);
        assert_eq!(report.hooks_timed_out, ["stuck"]);
        assert_eq!(
            *order.lock(),
            ["request done", "job done", "consumers", "pool"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_move_is_signalled_once_a_stop_begins_it_is_stopping() {
        let gate = Gate::new(GateConfig::default());
        let mut changes = gate.changes();
        assert!(!changes.has_changed().unwrap());
        gate.startup_complete();
        assert!(changes.has_changed().unwrap(), "startup complete");
        changes.mark_unchanged();
        assert!(!gate.stopping());
        gate.leave();
        assert!(gate.stopping());
        assert!(changes.has_changed().unwrap(), "a stop begun");
        changes.mark_unchanged();
        gate.leave();
        assert!(!changes.has_changed().unwrap(), "leaving twice is one move");
        gate.drain(Duration::ZERO).await;
        assert!(changes.has_changed().unwrap(), "draining and stopped");
    }

    #[test]
    fn the_propagation_delay_covers_the_probe() {
        assert_eq!(
            ShutdownPlan::propagation_delay_for(Duration::from_secs(10), 3),
            Duration::from_secs(40)
        );
    }
}
