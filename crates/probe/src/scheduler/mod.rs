//! The scheduler: one dispatcher deciding *when*, an elastic pool of workers doing the probing.
//!
//! Design goals, and how they are met:
//! - **Bounded concurrency.** A worker runs one probe at a time and there are at most
//!   `max_in_flight` workers, so probes in flight never exceed it. Due jobs beyond that wait in a
//!   bounded queue, and the wait shows up as scheduling lag rather than as unbounded memory.
//! - **Elastic workers.** The pool starts at `min_workers`, grows by one whenever the queue of due
//!   jobs is at least as long as the number of idle workers. A worker leaves when it finishes a
//!   run while more than twice the minimum are idle, or after idling for `worker_idle` (never
//!   below the minimum). A quiet engine holds a handful of tasks; a burst of slow targets gets
//!   as many as the cap allows, and gives them back once served.
//! - **No bursts.** Each target's runs sit on a grid anchored at a deterministic offset within
//!   its interval (a hash of its id), measured from one epoch shared by all targets, so 10k
//!   targets with the same interval start evenly spread, also after a reload. Each run then
//!   starts up to `jitter * step` late, at random.
//! - **No drift.** The next run is planned from the previous *planned* time, not from when the
//!   probe finished, so a probe's latency never shifts the grid.
//! - **Isolation.** Targets are inserted and removed one by one; nothing else is restarted. A
//!   result for a target that was removed or replaced meanwhile is dropped.
//! - **Measured.** The lag between the planned and the actual start of every run is recorded as
//!   `probe_scheduler_lag_seconds`, and the probes in flight as `probe_in_flight`.
//! - **Cancellation.** Every wait selects on the cancellation token. On cancellation no new probe
//!   starts; probes already running finish (their own timeout bounds them) and
//!   [`Scheduler::stopped`] resolves when every task has exited.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::target::TargetId;

/// Something the scheduler runs periodically: the engine's per-target runtime.
#[async_trait::async_trait]
pub(crate) trait Job: Send + Sync + 'static {
    /// The target's id: jobs with the same id replace each other.
    fn id(&self) -> &TargetId;
    /// The settled period, used to place the first run.
    fn interval(&self) -> Duration;
    /// The per-run start jitter, as a fraction of the step.
    fn jitter(&self) -> f64;
    /// Runs once; returns the step from this run's planned start to the next one's.
    async fn run(&self) -> Duration;
}

/// Scheduler limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The most probes running at once, which is also the most workers.
    pub max_in_flight: NonZeroUsize,
    /// Workers kept even when idle, so a quiet engine reacts without spawning.
    pub min_workers: usize,
    /// How long a worker above the minimum idles before it exits.
    pub worker_idle: Duration,
}

impl Default for SchedulerConfig {
    /// - `max_in_flight`: 4096 (a blackholed tenth of 10k targets with 1 s timeouts fits);
    /// - `min_workers`: 4;
    /// - `worker_idle`: 30 s.
    fn default() -> Self {
        Self {
            max_in_flight: NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
            min_workers: 4,
            worker_idle: Duration::from_secs(30),
        }
    }
}

enum Command {
    Reserve(usize),
    /// A job, and how soon its first run must come (`None`: at its place on its grid).
    Insert(Arc<dyn Job>, Option<Duration>),
    Remove(TargetId),
    Expedite(TargetId),
}

/// A due run handed to a worker.
struct Dispatch {
    key: u64,
    job: Arc<dyn Job>,
    planned: Instant,
}

/// A finished run, handed back to the dispatcher.
struct Done {
    key: u64,
    step: Duration,
}

struct Stats {
    workers: AtomicUsize,
    idle: AtomicUsize,
    in_flight: AtomicUsize,
    cap: Cap,
}

/// The most probes in flight right now: `max_in_flight`, cut while the engine runs out of a
/// resource (descriptors, buffers, ports) and raised back one run at a time once it has not
/// for a second. Additive increase, multiplicative decrease, as TCP paces itself: a cut takes
/// back a quarter of what was in flight when the resource ran out, and since every run that
/// hits the wall says so, cuts come at most once per [`Cap::CUT_EVERY`], so one moment of
/// exhaustion is one cut.
struct Cap {
    max: usize,
    current: AtomicUsize,
    epoch: Instant,
    /// When the cap was last cut, in nanoseconds since `epoch`; `u64::MAX` for never.
    last_cut: AtomicU64,
}

impl Cap {
    /// The lowest the cap goes: a few probes always run, so the engine learns when the
    /// resource is back.
    const FLOOR: usize = 4;
    const CUT_EVERY: Duration = Duration::from_millis(100);
    const QUIET_BEFORE_GROWTH: Duration = Duration::from_secs(1);

    fn new(max: usize) -> Self {
        Self {
            max,
            current: AtomicUsize::new(max),
            epoch: Instant::now(),
            last_cut: AtomicU64::new(u64::MAX),
        }
    }

    fn get(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    fn since_cut(&self, now: Instant) -> Option<Duration> {
        let at = self.last_cut.load(Ordering::Acquire);
        (at != u64::MAX).then(|| {
            now.saturating_duration_since(self.epoch)
                .saturating_sub(Duration::from_nanos(at))
        })
    }

    /// A run found a resource exhausted with `in_flight` runs going.
    fn cut(&self, in_flight: usize, now: Instant) {
        if self.since_cut(now).is_some_and(|d| d < Self::CUT_EVERY) {
            return;
        }
        let nanos = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX - 1);
        self.last_cut.store(nanos, Ordering::Release);
        let target = (in_flight.min(self.get()) * 3 / 4).max(Self::FLOOR.min(self.max));
        self.current.fetch_min(target, Ordering::AcqRel);
    }

    /// A run finished: one more may run at once, if the last cut is a second old.
    fn grow(&self, now: Instant) {
        if self.get() >= self.max
            || self
                .since_cut(now)
                .is_some_and(|d| d < Self::QUIET_BEFORE_GROWTH)
        {
            return;
        }
        let _ = self
            .current
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c < self.max).then_some(c + 1)
            });
    }
}

/// A handle to a running scheduler. Cheap to clone; all clones drive the same scheduler.
#[derive(Clone)]
pub struct Scheduler {
    commands: mpsc::UnboundedSender<Command>,
    stats: Arc<Stats>,
    tracker: TaskTracker,
}

impl Scheduler {
    /// Starts the dispatcher and the minimum number of workers on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub(crate) fn start(config: SchedulerConfig, cancel: CancellationToken) -> Self {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (jobs_tx, jobs_rx) = async_channel::bounded(config.max_in_flight.get());
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats {
            workers: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            cap: Cap::new(config.max_in_flight.get()),
        });
        let tracker = TaskTracker::new();
        let mut dispatcher = Dispatcher {
            config,
            epoch: Instant::now(),
            heap: BinaryHeap::new(),
            entries: Slab::default(),
            keys: HashMap::new(),
            jobs_tx,
            jobs_rx,
            done_tx,
            stats: stats.clone(),
            tracker: tracker.clone(),
            cancel: cancel.clone(),
            rng: rand::rngs::SmallRng::from_rng(&mut rand::rng()),
        };
        for _ in 0..config.min_workers.min(config.max_in_flight.get()) {
            dispatcher.spawn_worker();
        }
        tracker.spawn(dispatcher.run(commands_rx, done_rx));
        tracker.close();
        Self {
            commands,
            stats,
            tracker,
        }
    }

    /// Makes room for `additional` jobs about to be inserted, so that a large insertion grows the
    /// dispatcher's tables once, up front, rather than rehashing a million entries in the middle
    /// of dispatching due runs.
    pub(crate) fn reserve(&self, additional: usize) {
        let _ = self.commands.send(Command::Reserve(additional));
    }

    /// Schedules `job`, replacing any job with the same id (its in-flight result is dropped).
    pub(crate) fn insert(&self, job: Arc<dyn Job>) {
        // Fails only after shutdown, when there is nothing left to schedule.
        let _ = self.commands.send(Command::Insert(job, None));
    }

    /// [`insert`](Self::insert), with the first run within `within` from now instead of at its
    /// place on its grid, if that comes later: for a target that must be probed soon (one a
    /// cluster member takes over from a member that died). Its place within `within` is a hash
    /// of its id, so many such jobs at once are spread over it, and the runs after the first are
    /// on its grid again.
    pub(crate) fn insert_within(&self, job: Arc<dyn Job>, within: Duration) {
        let _ = self.commands.send(Command::Insert(job, Some(within)));
    }

    /// Stops scheduling the job with this id. A run in flight finishes but is not recorded.
    pub(crate) fn remove(&self, id: &TargetId) {
        let _ = self.commands.send(Command::Remove(id.clone()));
    }

    /// Runs the job with this id once more, now (right after its current run, when one is in
    /// flight). The regular runs keep their grid, unless the extra run's result asks for an
    /// earlier one. Requests while a run is due or in flight count once, so a burst of failures
    /// from real traffic costs one extra probe.
    pub(crate) fn expedite(&self, id: &TargetId) {
        let _ = self.commands.send(Command::Expedite(id.clone()));
    }

    /// The number of live workers.
    pub fn workers(&self) -> usize {
        self.stats.workers.load(Ordering::Relaxed)
    }

    /// The number of probes running now.
    pub fn in_flight(&self) -> usize {
        self.stats.in_flight.load(Ordering::Relaxed)
    }

    /// The most probes allowed in flight now: `max_in_flight`, or less while the engine runs
    /// out of resources (a probe found descriptors, buffers, memory or ports exhausted).
    pub fn in_flight_cap(&self) -> usize {
        self.stats.cap.get()
    }

    /// Says that a run found a resource of the engine exhausted: fewer runs go at once for a
    /// while. Workers above the new cap leave as they finish; the cap grows back by one with
    /// each run once the engine has not run out for a second.
    pub(crate) fn resource_exhausted(&self) {
        self.stats
            .cap
            .cut(self.stats.in_flight.load(Ordering::Acquire), Instant::now());
    }

    /// Resolves once the scheduler was cancelled and every worker has finished its probe.
    pub async fn stopped(&self) {
        self.tracker.wait().await;
    }
}

struct Entry {
    job: Arc<dyn Job>,
    /// The planned (un-jittered) start of the current or next run.
    anchor: Instant,
    /// When its run in the heap fires; `None` while a run is in flight. A heap item for this
    /// key with another time is stale (the run was expedited) and skipped.
    queued: Option<Instant>,
    /// Run again as soon as the run in flight finishes.
    expedite: bool,
    /// The run queued or in flight is an extra one: `anchor` still holds the regular run's time.
    extra: bool,
}

/// The live entries, in a vector indexed by the low half of a key. A slot freed by a removal is
/// reused with its generation (the key's high half) bumped, so a key names one insertion. A
/// hash map by key would cost twice the memory at a million entries (its buckets are a power of
/// two, at most 7/8 full) and a hash per dispatch.
#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    /// Indices of the empty slots.
    free: Vec<u32>,
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

impl Slab {
    fn reserve(&mut self, additional: usize) {
        self.slots
            .reserve(additional.saturating_sub(self.free.len()));
    }

    /// Stores `entry`; returns its key.
    fn insert(&mut self, entry: Entry) -> u64 {
        // The index takes the key's low 32 bits: 4 billion slots would be 256 GiB.
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.entry = Some(entry);
        (u64::from(slot.generation) << 32) | index as u64
    }

    /// The live slot `key` names, if it still does.
    fn slot(&mut self, key: u64) -> Option<&mut Slot> {
        let slot = self.slots.get_mut(key as u32 as usize)?;
        (u64::from(slot.generation) == key >> 32).then_some(slot)
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Entry> {
        self.slot(key)?.entry.as_mut()
    }

    fn remove(&mut self, key: u64) {
        if let Some(slot) = self.slot(key)
            && slot.entry.take().is_some()
        {
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(key as u32);
        }
    }
}

struct Dispatcher {
    config: SchedulerConfig,
    /// The origin of every target's grid, so offsets spread targets relative to each other.
    epoch: Instant,
    /// Due times, earliest first. Entries of removed keys are skipped when popped.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Live entries by key. A key names one insertion, so a replaced target's late result
    /// (old key) cannot touch its successor.
    entries: Slab,
    keys: HashMap<TargetId, u64>,
    jobs_tx: async_channel::Sender<Dispatch>,
    /// Kept to hand to new workers.
    jobs_rx: async_channel::Receiver<Dispatch>,
    done_tx: mpsc::UnboundedSender<Done>,
    stats: Arc<Stats>,
    tracker: TaskTracker,
    cancel: CancellationToken,
    rng: rand::rngs::SmallRng,
}

impl Dispatcher {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut done: mpsc::UnboundedReceiver<Done>,
    ) {
        /// Commands handled per turn, so a flood of inserts (start-up, a large reload) cannot
        /// hold up runs that are due, nor the other way round.
        const COMMAND_BATCH: usize = 1024;
        let cancelled = self.cancel.clone().cancelled_owned();
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(cancelled, timer);
        loop {
            for _ in 0..COMMAND_BATCH {
                match commands.try_recv() {
                    Ok(cmd) => self.command(cmd),
                    Err(_) => break,
                }
            }
            while let Ok(d) = done.try_recv() {
                self.reschedule(d);
            }
            if !self.dispatch_due().await {
                break;
            }
            let next_due = self.heap.peek().map(|Reverse((at, _))| *at);
            if let Some(at) = next_due {
                timer.as_mut().reset(at);
            }
            // Wait for something to do; the work itself happens at the top of the loop.
            tokio::select! {
                biased;
                () = &mut cancelled => break,
                () = &mut timer, if next_due.is_some() => {}
                Some(d) = done.recv() => self.reschedule(d),
                Some(cmd) = commands.recv() => self.command(cmd),
            }
        }
        // Dropping the dispatcher closes the job queue; idle workers see it and exit.
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Reserve(additional) => {
                self.heap.reserve(additional);
                self.entries.reserve(additional);
                self.keys.reserve(additional);
            }
            Command::Insert(job, within) => self.insert(job, within),
            Command::Remove(id) => {
                if let Some(key) = self.keys.remove(&id) {
                    self.entries.remove(key);
                }
            }
            Command::Expedite(id) => self.expedite(&id),
        }
    }

    fn expedite(&mut self, id: &TargetId) {
        let Some(&key) = self.keys.get(id) else {
            return;
        };
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let now = Instant::now();
        match entry.queued {
            None => entry.expedite = true,
            Some(at) if at > now => {
                entry.queued = Some(now);
                entry.extra = true;
                self.heap.push(Reverse((now, key)));
            }
            // Due already.
            Some(_) => {}
        }
    }

    fn insert(&mut self, job: Arc<dyn Job>, within: Option<Duration>) {
        let id = job.id().clone();
        let now = Instant::now();
        let anchor = first_anchor(self.epoch, now, job.interval(), &id);
        let mut fire =
            anchor + crate::health::state::jitter(job.interval(), job.jitter(), &mut self.rng);
        if let Some(within) = within {
            // Before its grid point, so the next run (planned from the anchor) is on the grid.
            let offset = fnv1a(id.as_str().as_bytes())
                % u64::try_from(within.as_nanos().max(1)).unwrap_or(u64::MAX);
            fire = fire.min(now + Duration::from_nanos(offset));
        }
        let key = self.entries.insert(Entry {
            job,
            anchor,
            queued: Some(fire),
            expedite: false,
            extra: false,
        });
        self.heap.push(Reverse((fire, key)));
        if let Some(old) = self.keys.insert(id, key) {
            self.entries.remove(old);
        }
    }

    fn reschedule(&mut self, done: Done) {
        let Some(entry) = self.entries.get_mut(done.key) else {
            return;
        };
        let now = Instant::now();
        if std::mem::take(&mut entry.extra) {
            // The regular run stays planned, unless this result asks for an earlier one.
            entry.anchor = entry.anchor.min(now + done.step);
        } else {
            entry.anchor += done.step;
            if entry.anchor < now {
                // The run overran its step: start again now and keep the grid from here.
                entry.anchor = now;
            }
        }
        let fire = if std::mem::take(&mut entry.expedite) {
            entry.extra = true;
            now
        } else {
            entry.anchor
                + crate::health::state::jitter(done.step, entry.job.jitter(), &mut self.rng)
        };
        entry.queued = Some(fire);
        self.heap.push(Reverse((fire, done.key)));
    }

    /// Hands every due run to the workers. Returns false when cancelled meanwhile.
    async fn dispatch_due(&mut self) -> bool {
        let now = Instant::now();
        while let Some(Reverse((at, key))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(entry) = self.entries.get_mut(key) else {
                continue;
            };
            if entry.queued != Some(at) {
                continue;
            }
            entry.queued = None;
            let dispatch = Dispatch {
                key,
                job: entry.job.clone(),
                planned: at,
            };
            // Grow while the backlog outnumbers the idle workers.
            if self.jobs_tx.len() >= self.stats.idle.load(Ordering::Acquire)
                && self.stats.workers.load(Ordering::Acquire) < self.stats.cap.get()
            {
                self.spawn_worker();
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return false,
                sent = self.jobs_tx.send(dispatch) => if sent.is_err() { return false },
            }
        }
        true
    }

    fn spawn_worker(&mut self) {
        self.stats.workers.fetch_add(1, Ordering::AcqRel);
        // Counted idle from birth: it is about to take a queued job, so the next dispatch does
        // not spawn another one for the same job.
        self.stats.idle.fetch_add(1, Ordering::AcqRel);
        let worker = Worker {
            jobs: self.jobs_rx.clone(),
            done: self.done_tx.clone(),
            stats: self.stats.clone(),
            cancel: self.cancel.clone(),
            min_workers: self.config.min_workers,
            idle: self.config.worker_idle,
        };
        self.tracker.spawn(worker.run());
    }
}

/// The first grid point at or after `now` for a target: `epoch + offset + k * interval`.
fn first_anchor(epoch: Instant, now: Instant, interval: Duration, id: &TargetId) -> Instant {
    let period = interval.as_nanos().max(1);
    let offset = u128::from(fnv1a(id.as_str().as_bytes())) % period;
    let since = now.saturating_duration_since(epoch).as_nanos();
    let periods = since.saturating_sub(offset).div_ceil(period);
    let at = offset + periods * period;
    epoch + Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX))
}

/// FNV-1a: a fixed hash, so a target keeps its offset across restarts and machines.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

struct Worker {
    jobs: async_channel::Receiver<Dispatch>,
    done: mpsc::UnboundedSender<Done>,
    stats: Arc<Stats>,
    cancel: CancellationToken,
    min_workers: usize,
    idle: Duration,
}

impl Worker {
    async fn run(self) {
        let lag = metrics::histogram!("probe_scheduler_lag_seconds");
        let in_flight = metrics::gauge!("probe_in_flight");
        let cancelled = self.cancel.clone().cancelled_owned();
        tokio::pin!(cancelled);
        loop {
            let next = tokio::select! {
                biased;
                () = &mut cancelled => break,
                next = tokio::time::timeout(self.idle, self.jobs.recv()) => next,
            };
            let dispatch = match next {
                Err(_idle) => {
                    if self.jobs.is_empty() && self.retire() {
                        return;
                    }
                    continue;
                }
                Ok(Err(_closed)) => break,
                Ok(Ok(dispatch)) => dispatch,
            };
            self.stats.idle.fetch_sub(1, Ordering::AcqRel);
            lag.record(Instant::now().saturating_duration_since(dispatch.planned));
            in_flight.set(self.stats.in_flight.fetch_add(1, Ordering::AcqRel) as f64 + 1.0);
            let step = dispatch.job.run().await;
            in_flight.set(self.stats.in_flight.fetch_sub(1, Ordering::AcqRel) as f64 - 1.0);
            let idle = self.stats.idle.fetch_add(1, Ordering::AcqRel) + 1;
            let _ = self.done.send(Done {
                key: dispatch.key,
                step,
            });
            self.stats.cap.grow(Instant::now());
            // Above a cap cut since it started: leave, down to the cap.
            if self.stats.workers.load(Ordering::Acquire) > self.stats.cap.get()
                && self.retire_above(self.stats.cap.get())
            {
                return;
            }
            // A burst grows the pool by its size; once the burst is served, surplus workers
            // leave at once rather than sharing the steady load (which would keep every one of
            // them from ever idling long enough to retire).
            if idle > 2 * self.min_workers.max(1) && self.jobs.is_empty() && self.retire() {
                return;
            }
        }
        self.stats.idle.fetch_sub(1, Ordering::AcqRel);
        self.stats.workers.fetch_sub(1, Ordering::AcqRel);
    }

    /// Leaves the pool if it is above its minimum size (or the cap, when that is lower).
    fn retire(&self) -> bool {
        self.retire_above(self.min_workers.min(self.stats.cap.get()))
    }

    /// Leaves the pool if it has more than `keep` workers.
    fn retire_above(&self, keep: usize) -> bool {
        let retired = self
            .stats
            .workers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w > keep).then(|| w - 1)
            })
            .is_ok();
        if retired {
            self.stats.idle.fetch_sub(1, Ordering::AcqRel);
        }
        retired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_cap_is_cut_once_per_moment_and_grows_back_after_a_quiet_second() {
        let cap = Cap::new(100);
        let t0 = Instant::now();
        cap.cut(80, t0);
        assert_eq!(cap.get(), 60, "a quarter of what was in flight");
        cap.cut(60, t0 + Duration::from_millis(50));
        assert_eq!(cap.get(), 60, "the same moment: one cut");
        cap.cut(200, t0 + Duration::from_millis(150));
        assert_eq!(cap.get(), 45, "never above the cap in force");
        cap.grow(t0 + Duration::from_millis(900));
        assert_eq!(cap.get(), 45, "not within a second of a cut");
        for _ in 0..10 {
            cap.grow(t0 + Duration::from_millis(1200));
        }
        assert_eq!(cap.get(), 55, "one a run");
        for _ in 0..100 {
            cap.grow(t0 + Duration::from_secs(5));
        }
        assert_eq!(cap.get(), 100, "up to max_in_flight");
        for i in 0..20 {
            cap.cut(cap.get(), t0 + Duration::from_secs(6 + i));
        }
        assert_eq!(cap.get(), Cap::FLOOR);
    }

    #[test]
    fn first_anchor_is_on_the_grid_and_not_in_the_past() {
        let epoch = Instant::now();
        let id = TargetId::new("a").unwrap();
        let interval = Duration::from_secs(10);
        let a0 = first_anchor(epoch, epoch, interval, &id);
        assert!(a0 >= epoch && a0 < epoch + interval);
        let later = epoch + Duration::from_secs(95);
        let a1 = first_anchor(epoch, later, interval, &id);
        assert!(a1 >= later && a1 < later + interval);
        assert_eq!((a1 - a0).as_nanos() % interval.as_nanos(), 0);
    }

    struct Noop(TargetId);

    #[async_trait::async_trait]
    impl Job for Noop {
        fn id(&self) -> &TargetId {
            &self.0
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(1)
        }
        fn jitter(&self) -> f64 {
            0.0
        }
        async fn run(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    fn entry(id: &str) -> Entry {
        Entry {
            job: Arc::new(Noop(TargetId::new(id).unwrap())),
            anchor: Instant::now(),
            queued: None,
            expedite: false,
            extra: false,
        }
    }

    /// Records when it runs.
    struct Timed(TargetId, std::sync::Mutex<Vec<Instant>>);

    #[async_trait::async_trait]
    impl Job for Timed {
        fn id(&self) -> &TargetId {
            &self.0
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(10)
        }
        fn jitter(&self) -> f64 {
            0.0
        }
        async fn run(&self) -> Duration {
            self.1.lock().unwrap().push(Instant::now());
            Duration::from_secs(10)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_wanted_soon_runs_within_its_bound_then_on_its_grid() {
        let cancel = CancellationToken::new();
        // The dispatcher's epoch: time stands still until the test sleeps.
        let epoch = Instant::now();
        let scheduler = Scheduler::start(SchedulerConfig::default(), cancel.clone());
        // Ids whose grid points fall late in the interval, so that the bound is what brings
        // their first run forward.
        let jobs: Vec<Arc<Timed>> = (0..40)
            .map(|i| TargetId::new(&format!("t{i}")).unwrap())
            .filter(|id| {
                first_anchor(epoch, epoch, Duration::from_secs(10), id)
                    > epoch + Duration::from_secs(3)
            })
            .map(|id| Arc::new(Timed(id, Default::default())))
            .collect();
        assert!(jobs.len() >= 10);
        let inserted = Instant::now();
        for job in &jobs {
            scheduler.insert_within(job.clone(), Duration::from_secs(2));
        }
        tokio::time::sleep(Duration::from_secs(25)).await;
        let mut firsts = Vec::new();
        for job in &jobs {
            let runs = job.1.lock().unwrap().clone();
            assert!(
                runs.len() >= 2,
                "{} ran {} times",
                job.0.as_str(),
                runs.len()
            );
            let first = runs[0] - inserted;
            assert!(
                first < Duration::from_secs(2),
                "{}: first run after {first:?}",
                job.0.as_str()
            );
            firsts.push(first);
            // The next one is on the grid (to the timer's millisecond).
            let anchor = first_anchor(epoch, inserted, Duration::from_secs(10), &job.0);
            let grid = anchor + Duration::from_secs(10);
            let off = runs[1].max(grid) - runs[1].min(grid);
            assert!(
                off < Duration::from_millis(2),
                "{}: {off:?} off the grid",
                job.0.as_str()
            );
        }
        // Spread over the bound, not all at once.
        firsts.sort();
        assert!(
            firsts
                .last()
                .unwrap()
                .saturating_sub(*firsts.first().unwrap())
                > Duration::from_millis(500)
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_reused_slot_does_not_answer_to_its_old_key() {
        let mut slab = Slab::default();
        let a = slab.insert(entry("a"));
        let b = slab.insert(entry("b"));
        slab.remove(a);
        assert!(slab.get_mut(a).is_none());
        // The freed slot is reused for the next insertion, under a new key.
        let c = slab.insert(entry("c"));
        assert_eq!(c as u32, a as u32);
        assert_ne!(c, a);
        assert_eq!(slab.slots.len(), 2);
        // A late result or removal for the old key does not touch its successor.
        assert!(slab.get_mut(a).is_none());
        slab.remove(a);
        assert_eq!(slab.get_mut(c).map(|e| e.job.id().as_str()), Some("c"));
        assert_eq!(slab.get_mut(b).map(|e| e.job.id().as_str()), Some("b"));
    }
}
