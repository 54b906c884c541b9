//! History: every transition, hourly rollups and operator actions, kept in a database, read
//! back as uptime, SLA and incidents.
//!
//! The engine hands every transition and run to [`History`] through its record feed
//! ([`Engine::record_feed`]), never waiting: probing does not slow down for the database. A
//! target hands its runs over in batches (at most 10 s of them), and the counter has every
//! target hand over what it holds before an hour closes and at a stop. Two tasks do the rest:
//! - the *counter* takes the records as they come, counts each target's hour in memory
//!   (`rollup`) and queues transitions, finished days and actions for the writer; it never
//!   waits on the database either;
//! - the *writer* writes the queue once a second, in one transaction (`store`). A failed write
//!   keeps its rows for the next second, counted and shown in [`HistoryStatus`] (so in
//!   `/v1/topology` and `/health`); past [`PENDING_LIMIT`] rows the oldest go, counted. Every
//!   5 minutes it also writes each target's day so far, so that a crash loses five minutes of
//!   run counts and latencies at most (never a transition: those are written within the
//!   second), and every hour it applies retention and the size cap.
//!
//! Groups have no runs: their verdicts' transitions come on the same feed (the engine judges
//! each group by its rule, [`probe::graph::GroupRule`]), and are recorded as a target's are, so
//! their uptime is computed like a target's (to the second) from the verdict every other reader
//! shows.
//!
//! A database that cannot be opened is reported and the daemon goes on without history; a
//! SQLite file that is not a sound database is moved aside first (`store`).
//!
//! [`Engine::record_feed`]: probe::engine::Engine::record_feed

pub mod codec;
pub mod events;
pub mod rollup;
pub mod store;
pub mod uptime;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use probe::TargetId;
use probe::engine::{Engine, Event, Record};
use probe::graph::NodeKind;
use probe::health::Cause;
use probe::outcome::{FailureReason, unix_ms};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use rollup::{DAY_MS, DayRow, Rollups};
pub use store::{ActionRow, Backend, Batch, Store, StoreError, TransitionRow};
pub use uptime::Uptime;

/// Rows waiting for the writer, at most; past it the oldest transitions and actions go.
pub const PENDING_LIMIT: usize = 200_000;

/// How many records the engine's feed holds for the counter.
const FEED: usize = 65_536;

/// How often the writer writes.
const WRITE_EVERY: Duration = Duration::from_secs(1);

/// How often the counter takes what the feed holds: 1000 records at 10k runs a second, far
/// within the feed's room.
const COUNT_EVERY: Duration = Duration::from_millis(100);

/// How often every target's day so far is written: what a crash may lose of the hour's run
/// counts and latencies (a stop loses nothing; transitions go within the second). Each is a
/// row for every target, which at 10k targets cost about as much as all the rest of the
/// history together when it was every minute (on a busy 2-core machine, the share went from
/// +4.7% to +2.4% of the daemon's CPU).
const SNAPSHOT_EVERY: Duration = Duration::from_secs(300);

/// When it is written first after the start.
const FIRST_SNAPSHOT: Duration = Duration::from_secs(5);

/// How often every probed target's SLA is computed again; a target's own transitions have it
/// computed within [`SLA_SETTLE`] besides.
const SLA_EVERY: Duration = Duration::from_secs(300);

/// How long the SLA task lets transitions gather before it computes their targets' SLAs.
const SLA_SETTLE: Duration = Duration::from_secs(1);

/// How long it waits, at most, for them to be written (a failing database may never).
const SLA_WRITTEN: Duration = Duration::from_secs(10);

/// How often retention and the size cap are applied.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// What the `history` section says, with `--state-dir` resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryConfig {
    /// Where it is kept.
    pub backend: Backend,
    /// How long transitions and operator actions are kept.
    pub transitions: Duration,
    /// How long hourly rollups are kept.
    pub rollups: Duration,
    /// The most bytes the history may take; past it the oldest days go first.
    pub max_bytes: u64,
    /// `scoring.sla_window`: each probed target's uptime over it is given to the graph as its
    /// SLA.
    pub sla_window: Option<Duration>,
}

/// Why a read of the history failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// There is no database to read: it is opening, or could not be opened.
    #[error("history is unavailable: {0}")]
    Unavailable(String),
    /// The database failed.
    #[error("history: {0}")]
    Store(#[from] StoreError),
}

/// How the history is doing, for `/v1/topology` and `/health`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HistoryStatus {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The file, or the URL without its password.
    pub location: String,
    /// `opening`, `ok`, `failing` (its writes fail; rows wait) or `off` (no database).
    pub state: &'static str,
    /// The last error, while it matters.
    pub error: Option<String>,
    /// Writes that failed since the start.
    pub write_errors: u64,
    /// Rows lost: the queue was full, or the engine's feed was.
    pub dropped: u64,
    /// Rows dropped by retention and by the size cap since the start.
    pub expired: u64,
    /// Rows dropped by the size cap since the start, oldest first.
    pub capped: u64,
    /// Rows waiting for the writer.
    pub pending: usize,
    /// The bytes the history takes, as of the last look.
    pub bytes: u64,
    /// Where an unusable database file was moved at start.
    pub moved_aside: Option<String>,
}

/// A target's (or group's) record over a span: its transitions, its hours and what operators
/// did to it.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    /// Transitions, newest first.
    pub transitions: Vec<TransitionRow>,
    /// Hours with what they counted, oldest first.
    pub hours: Vec<HourRow>,
    /// Operator actions, newest first.
    pub actions: Vec<ActionRow>,
}

/// One hour of rollups.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HourRow {
    /// The hour's start, Unix milliseconds.
    pub start_ms: i64,
    /// Runs.
    pub runs: u32,
    /// Failed runs.
    pub failures: u32,
    /// Degraded runs.
    pub degraded: u32,
    /// Latency quantiles in milliseconds (within 4%); `None` without runs.
    pub p50_ms: Option<f64>,
    /// p90.
    pub p90_ms: Option<f64>,
    /// p99.
    pub p99_ms: Option<f64>,
    /// Milliseconds in each state, by its name.
    pub time_ms: HashMap<&'static str, u32>,
}

impl HourRow {
    fn new(day: i64, hour: usize, h: &codec::Hour) -> Self {
        let ms = |code| codec::latency(code).map(|d| d.as_secs_f64() * 1e3);
        Self {
            start_ms: day * DAY_MS + hour as i64 * rollup::HOUR_MS,
            runs: h.runs,
            failures: h.failures,
            degraded: h.degraded,
            p50_ms: ms(h.latency[0]),
            p90_ms: ms(h.latency[1]),
            p99_ms: ms(h.latency[2]),
            time_ms: codec::STATES
                .iter()
                .zip(h.time_ms)
                .filter(|(_, ms)| *ms > 0)
                .map(|(s, ms)| (s.as_str(), ms))
                .collect(),
        }
    }

    /// The share of the hour's judged time spent up, from its state times.
    pub fn uptime(&self) -> Option<f64> {
        let t = |s: &str| f64::from(self.time_ms.get(s).copied().unwrap_or(0));
        let up = t("UP") + t("DEGRADED");
        let judged = up + t("DOWN");
        (judged > 0.0).then(|| up / judged)
    }
}

/// The history of a running daemon. Cheap to clone.
#[derive(Clone)]
pub struct History {
    inner: Arc<Inner>,
}

struct Inner {
    store: arc_swap::ArcSwapOption<Store>,
    rollups: Mutex<Rollups>,
    pending: Mutex<Pending>,
    status: Mutex<HistoryStatus>,
    config: HistoryConfig,
    /// Whether the database is shared by a cluster's members.
    shared: bool,
    /// When this daemon's session began: its span counts as recorded.
    started_ms: i64,
    /// Set once the writer is done.
    written: tokio::sync::watch::Sender<bool>,
    /// Writes that succeeded: what waits for rows to be in the database watches it.
    flushed: tokio::sync::watch::Sender<u64>,
    /// Transitions written so far (see [`History::transitions_written`]).
    transitions_written: tokio::sync::watch::Sender<u64>,
}

/// What waits for the writer.
#[derive(Default)]
struct Pending {
    transitions: VecDeque<TransitionRow>,
    /// The newest of each `(day, target)`: a newer blob holds all an older one did.
    days: HashMap<(i64, TargetId), Vec<u8>>,
    actions: VecDeque<ActionRow>,
}

impl Pending {
    fn len(&self) -> usize {
        self.transitions.len() + self.days.len() + self.actions.len()
    }

    fn take(&mut self) -> Batch {
        Batch {
            transitions: self.transitions.drain(..).collect(),
            days: self.days.drain().map(|((d, t), h)| (d, t, h)).collect(),
            actions: self.actions.drain(..).collect(),
        }
    }

    /// Puts back a batch that could not be written, before what came since.
    fn restore(&mut self, batch: Batch) {
        for t in batch.transitions.into_iter().rev() {
            self.transitions.push_front(t);
        }
        for a in batch.actions.into_iter().rev() {
            self.actions.push_front(a);
        }
        for (d, t, h) in batch.days {
            self.days.entry((d, t)).or_insert(h);
        }
    }

    /// Drops the oldest transitions and actions past the limit; how many.
    fn bound(&mut self) -> u64 {
        let mut dropped = 0;
        while self.len() > PENDING_LIMIT {
            if self.transitions.len() >= self.actions.len() {
                self.transitions.pop_front();
            } else {
                self.actions.pop_front();
            }
            dropped += 1;
            if self.transitions.is_empty() && self.actions.is_empty() {
                break;
            }
        }
        dropped
    }
}

/// Which groups this member records: in a cluster sharing one database, the first member by
/// name does, since groups have no owner.
pub type GroupsOurs = Arc<dyn Fn() -> bool + Send + Sync>;

impl History {
    /// Starts recording `engine`'s history into `config`'s database as `member`: the database
    /// is opened in the background, and reads say so until it is.
    pub fn start(
        engine: Engine,
        config: HistoryConfig,
        member: String,
        groups_ours: GroupsOurs,
        cancel: CancellationToken,
    ) -> Self {
        let shared = matches!(config.backend, Backend::Postgres(_));
        let status = HistoryStatus {
            backend: config.backend.kind(),
            location: config.backend.describe(),
            state: "opening",
            ..HistoryStatus::default()
        };
        let history = Self {
            inner: Arc::new(Inner {
                store: arc_swap::ArcSwapOption::empty(),
                rollups: Mutex::default(),
                pending: Mutex::default(),
                status: Mutex::new(status),
                config,
                shared,
                started_ms: now_ms(),
                written: tokio::sync::watch::Sender::new(false),
                flushed: tokio::sync::watch::Sender::new(0),
                transitions_written: tokio::sync::watch::Sender::new(0),
            }),
        };
        let feed = engine.record_feed(FEED);
        let opened = tokio::sync::watch::channel(false);
        let counted = tokio::sync::watch::channel(false);
        tokio::spawn(history.clone().count(
            engine.clone(),
            feed,
            groups_ours,
            opened.1.clone(),
            counted.0,
            cancel.clone(),
        ));
        if let Some(window) = history.inner.config.sla_window {
            tokio::spawn(history.clone().keep_slas(
                engine.clone(),
                window,
                opened.1.clone(),
                cancel.clone(),
            ));
        }
        tokio::spawn(
            history
                .clone()
                .write(engine, member, opened.0, counted.1, cancel),
        );
        history
    }

    /// How the history is doing.
    pub fn status(&self) -> HistoryStatus {
        let mut status = self.inner.status.lock().clone();
        status.pending = self.inner.pending.lock().len();
        status
    }

    /// Records an operator action on `target`.
    pub fn action(&self, target: &TargetId, action: &str, who: &str, detail: Option<String>) {
        let row = ActionRow {
            target: target.to_string(),
            at_ms: now_ms(),
            action: action.to_owned(),
            who: who.to_owned(),
            detail,
        };
        let mut pending = self.inner.pending.lock();
        pending.actions.push_back(row);
        let dropped = pending.bound();
        drop(pending);
        self.count_dropped(dropped);
    }

    fn store(&self) -> Result<Arc<Store>, HistoryError> {
        self.inner.store.load_full().ok_or_else(|| {
            let status = self.inner.status.lock();
            HistoryError::Unavailable(match &status.error {
                Some(e) => format!("{}: {e}", status.state),
                None => status.state.to_owned(),
            })
        })
    }

    /// The uptime of each of `targets` over `[from_ms, until_ms)`.
    ///
    /// # Errors
    /// [`HistoryError`].
    pub async fn uptimes(
        &self,
        targets: &[&str],
        from_ms: i64,
        until_ms: i64,
    ) -> Result<HashMap<String, Uptime>, HistoryError> {
        let store = self.store()?;
        let (changes, mut sessions) = store.timeline(targets, from_ms, until_ms).await?;
        // This session is recording now, though its last write may be a second old.
        sessions.push((self.started_ms(), now_ms()));
        Ok(targets
            .iter()
            .map(|t| {
                let changes = changes.get(*t).map_or(&[][..], Vec::as_slice);
                let until = until_ms.min(now_ms());
                (
                    (*t).to_owned(),
                    uptime::compute(changes, &sessions, from_ms, until),
                )
            })
            .collect())
    }

    fn started_ms(&self) -> i64 {
        self.inner.started_ms
    }

    /// A target's record over `[since_ms, until_ms)`: at most `limit` transitions and actions,
    /// and every hour.
    ///
    /// # Errors
    /// [`HistoryError`].
    pub async fn span(
        &self,
        target: &TargetId,
        since_ms: i64,
        until_ms: i64,
        limit: i64,
    ) -> Result<Span, HistoryError> {
        let store = self.store()?;
        let name = target.as_str();
        let transitions = store
            .transitions(Some(name), since_ms, until_ms, limit)
            .await?;
        let actions = store.actions(name, since_ms, until_ms, limit).await?;
        let days = self
            .days(
                &[name],
                since_ms.div_euclid(DAY_MS),
                (until_ms - 1).div_euclid(DAY_MS),
            )
            .await?;
        let hours = days
            .get(name)
            .into_iter()
            .flatten()
            .flat_map(|(day, hours)| {
                hours
                    .iter()
                    .enumerate()
                    .filter_map(move |(h, hour)| hour.map(|hour| HourRow::new(*day, h, &hour)))
            })
            .filter(|h| h.start_ms + rollup::HOUR_MS > since_ms && h.start_ms < until_ms)
            .collect();
        Ok(Span {
            transitions,
            hours,
            actions,
        })
    }

    /// The days of `targets` from `first_day` to `last_day`, oldest first, today's as counted
    /// so far (the current hour too).
    ///
    /// # Errors
    /// [`HistoryError`].
    pub async fn days(
        &self,
        targets: &[&str],
        first_day: i64,
        last_day: i64,
    ) -> Result<HashMap<String, Vec<(i64, codec::Day)>>, HistoryError> {
        let store = self.store()?;
        let mut out: HashMap<String, Vec<(i64, codec::Day)>> = HashMap::new();
        for (name, day, hours) in store.days(targets, first_day, last_day).await? {
            if let Ok(decoded) = codec::decode(&hours) {
                out.entry(name).or_default().push((day, decoded));
            }
        }
        let now = now_ms();
        let today = now.div_euclid(DAY_MS);
        if (first_day..=last_day).contains(&today) {
            let rollups = self.inner.rollups.lock();
            for name in targets {
                let Ok(id) = TargetId::new(name) else {
                    continue;
                };
                if let Some(mut live) = rollups.today(&id, now) {
                    let days = out.entry((*name).to_owned()).or_default();
                    if let Some(i) = days.iter().position(|(d, _)| *d == today) {
                        codec::fill(&mut live, &days.swap_remove(i).1);
                    }
                    days.push((today, live));
                }
            }
        }
        for days in out.values_mut() {
            days.sort_by_key(|(d, _)| *d);
        }
        Ok(out)
    }

    /// The latest transitions of every target since `since_ms`, newest first.
    ///
    /// # Errors
    /// [`HistoryError`].
    pub async fn recent(
        &self,
        since_ms: i64,
        limit: i64,
    ) -> Result<Vec<TransitionRow>, HistoryError> {
        Ok(self
            .store()?
            .transitions(None, since_ms, i64::MAX, limit)
            .await?)
    }

    /// How many transitions have been written so far: it moves once they are in the database,
    /// at most once a second, so that what shows them (the status page's incidents) reads them
    /// again then, and not before they can be read.
    pub fn transitions_written(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.transitions_written.subscribe()
    }

    fn count_dropped(&self, dropped: u64) {
        if dropped > 0 {
            metrics::counter!("probe_history_dropped_total", "reason" => "queue_full")
                .increment(dropped);
            self.inner.status.lock().dropped += dropped;
        }
    }

    /// The counter: records in, hours counted, rows queued.
    async fn count(
        self,
        engine: Engine,
        mut feed: mpsc::Receiver<Record>,
        groups_ours: GroupsOurs,
        mut opened: tokio::sync::watch::Receiver<bool>,
        counted: tokio::sync::watch::Sender<bool>,
        cancel: CancellationToken,
    ) {
        // Today's rollups first, so that a restart's hours add to what was counted before it.
        tokio::select! {
            () = cancel.cancelled() => {
                let _ = counted.send(true);
                return;
            }
            _ = opened.wait_for(|o| *o) => {}
        }
        // The feed is drained on a clock, never awaited record by record: a waiting receiver
        // would be woken by every one of 10k runs a second, and the wake-ups would cost more
        // than the counting.
        let mut tick = tokio::time::interval(COUNT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut records = Vec::with_capacity(1024);
        let mut counted_hour = now_ms().div_euclid(rollup::HOUR_MS);
        let mut second = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            self.drain(&mut feed, &mut records, groups_ours());
            let now = now_ms();
            let whole_second = second.elapsed() >= WRITE_EVERY;
            if whole_second {
                second = tokio::time::Instant::now();
                // Hours end for every target at once: the engine is asked who is gone only
                // then.
                let hour = now.div_euclid(rollup::HOUR_MS);
                if hour != counted_hour {
                    counted_hour = hour;
                    // The hour's last runs, still held by their targets, before it closes.
                    engine.flush_runs();
                    self.drain(&mut feed, &mut records, groups_ours());
                    let gone = self.not_counted(&engine);
                    let finished = self
                        .inner
                        .rollups
                        .lock()
                        .close(now, |id| !gone.contains(id));
                    self.queue_days(finished);
                }
            }
        }
        // What came before the stop still counts, the runs targets hold too.
        engine.flush_runs();
        self.drain(&mut feed, &mut records, groups_ours());
        let _ = counted.send(true);
    }

    /// Counts what the feed holds, a handful of records at a time; groups' transitions are
    /// recorded only when `groups` (see [`GroupsOurs`]).
    fn drain(&self, feed: &mut mpsc::Receiver<Record>, records: &mut Vec<Record>, groups: bool) {
        while let Ok(record) = feed.try_recv() {
            records.push(record);
            if records.len() == records.capacity() {
                self.take(records, groups);
            }
        }
        self.take(records, groups);
    }

    /// Gives the graph every probed target's uptime over `window` as its SLA: all of them every
    /// [`SLA_EVERY`], and a target soon after each of its transitions.
    async fn keep_slas(
        self,
        engine: Engine,
        window: Duration,
        mut opened: tokio::sync::watch::Receiver<bool>,
        cancel: CancellationToken,
    ) {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = opened.wait_for(|o| *o) => {}
        }
        let mut events = engine.subscribe();
        let mut every = tokio::time::interval(SLA_EVERY);
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX / 2);
        loop {
            let ids: Vec<TargetId> = tokio::select! {
                () = cancel.cancelled() => return,
                _ = every.tick() => engine
                    .graph()
                    .nodes()
                    .filter(|n| n.kind == probe::graph::NodeKind::Probed)
                    .map(|n| n.id)
                    .collect(),
                event = events.recv() => {
                    let mut ids = match event {
                        // A group has no SLA: its score is its dependencies'.
                        Ok(event) if event.kind == NodeKind::Group => continue,
                        Ok(event) => vec![event.target],
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Vec::new(),
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    };
                    let settle = tokio::time::sleep(SLA_SETTLE);
                    tokio::pin!(settle);
                    loop {
                        tokio::select! {
                            () = &mut settle => break,
                            () = cancel.cancelled() => return,
                            event = events.recv() => match event {
                                Ok(event) if event.kind == NodeKind::Group => {}
                                Ok(event) => ids.push(event.target),
                                // Too many to follow one by one: all of them, then.
                                Err(_) => { every.reset_immediately(); break }
                            },
                        }
                    }
                    ids.sort_unstable();
                    ids.dedup();
                    // Computed from the database: once the transitions are in it, two writes
                    // after the settling (the first may have begun before they were queued).
                    let mut flushed = self.inner.flushed.subscribe();
                    let then = *flushed.borrow_and_update();
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        _ = flushed.wait_for(|f| *f >= then + 2) => {}
                        () = tokio::time::sleep(SLA_WRITTEN) => {}
                    }
                    ids
                }
            };
            for chunk in ids.chunks(500) {
                let names: Vec<&str> = chunk.iter().map(TargetId::as_str).collect();
                let now = now_ms();
                match self.uptimes(&names, now - window_ms, now).await {
                    Ok(uptimes) => {
                        for id in chunk {
                            let sla = uptimes.get(id.as_str()).and_then(Uptime::ratio);
                            engine.set_sla(id, sla);
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "history: SLAs not computed"),
                }
            }
        }
    }

    /// The counted targets whose rollups this daemon no longer keeps: those gone from the
    /// engine, and in a database shared by a cluster those it does not decide, so that one
    /// member writes each target's row. Asked of the engine before the rollups are locked.
    fn not_counted(&self, engine: &Engine) -> std::collections::HashSet<TargetId> {
        let ids = self.inner.rollups.lock().ids();
        ids.into_iter()
            .filter(|id| {
                if self.inner.shared {
                    engine.cluster().decided(id).is_none()
                } else {
                    !engine.contains(id)
                }
            })
            .collect()
    }

    /// Counts a handful of records and queues their transitions (a group's when `groups`).
    fn take(&self, records: &mut Vec<Record>, groups: bool) {
        let mut transitions = Vec::new();
        let mut finished = Vec::new();
        {
            let mut rollups = self.inner.rollups.lock();
            for record in records.drain(..) {
                match record {
                    Record::Runs(batch) => {
                        let runs = batch.iter().map(|r| (ms(r.at), r.quality, r.latency));
                        finished.extend(rollups.runs(&batch.target, runs));
                    }
                    // In a shared database, a verdict adopted from its owner is the owner's to
                    // write and to count.
                    Record::Transition(event)
                        if self.inner.shared && event.cause == Cause::Cluster => {}
                    // A group has no runs to count: its transitions are its history.
                    Record::Transition(event) if event.kind == NodeKind::Group => {
                        if groups {
                            transitions.push(row_of(&event));
                        }
                    }
                    Record::Transition(event) => {
                        finished.extend(rollups.transition(&event.target, ms(event.at), event.to));
                        transitions.push(row_of(&event));
                    }
                }
            }
        }
        self.queue_days(finished);
        if transitions.is_empty() {
            return;
        }
        let mut pending = self.inner.pending.lock();
        pending.transitions.extend(transitions);
        let dropped = pending.bound();
        drop(pending);
        self.count_dropped(dropped);
    }

    fn queue_days(&self, days: Vec<DayRow>) {
        if days.is_empty() {
            return;
        }
        let mut pending = self.inner.pending.lock();
        for (day, target, hours) in days {
            pending.days.insert((day, target), hours);
        }
    }

    /// The writer: opens the database, then writes what is queued once a second.
    async fn write(
        self,
        engine: Engine,
        member: String,
        opened: tokio::sync::watch::Sender<bool>,
        mut counted: tokio::sync::watch::Receiver<bool>,
        cancel: CancellationToken,
    ) {
        let backend = self.inner.config.backend.clone();
        let store = tokio::select! {
            () = cancel.cancelled() => {
                let _ = self.inner.written.send(true);
                return;
            }
            store = Store::open(backend.clone(), &member, self.started_ms()) => store,
        };
        let store = match store {
            Ok(opened) => {
                if let Some((aside, why)) = &opened.moved_aside {
                    tracing::error!(
                        history = %backend.describe(),
                        moved_to = %aside.display(),
                        error = %why,
                        "history database unusable: moved aside, starting a new one"
                    );
                    self.inner.status.lock().moved_aside = Some(aside.display().to_string());
                }
                Arc::new(opened.store)
            }
            Err(e) => {
                tracing::error!(history = %backend.describe(), error = %e, "history database could not be opened: going on without history");
                let mut status = self.inner.status.lock();
                status.state = "off";
                status.error = Some(e.to_string());
                let _ = self.inner.written.send(true);
                return;
            }
        };
        match store.today(now_ms()).await {
            Ok(days) => {
                let now = now_ms();
                // Every one of them: the first topology may not be applied yet. Those this
                // daemon does not count are forgotten before anything is written.
                let mut rollups = self.inner.rollups.lock();
                for (id, day, hours) in days {
                    rollups.resume(id, day, &hours, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, "history: today's rollups could not be read"),
        }
        self.inner.store.store(Some(store.clone()));
        {
            let mut status = self.inner.status.lock();
            status.state = "ok";
        }
        let _ = opened.send(true);
        tracing::info!(history = %backend.describe(), "history recording");
        let mut tick = tokio::time::interval(WRITE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let start = tokio::time::Instant::now();
        // The first soon: a new member's hours show in a shared history without a period's
        // wait.
        let mut snapshot = start + FIRST_SNAPSHOT;
        let mut prune = start;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = tokio::time::Instant::now();
            if now >= snapshot {
                snapshot = now + SNAPSHOT_EVERY;
                self.snapshot(&engine);
            }
            self.flush(&store).await;
            if now >= prune {
                prune = now + PRUNE_EVERY;
                self.prune(&store).await;
            }
        }
        // Once the counter has taken what the engine sent before the stop, a last snapshot
        // and write keep the hour so far.
        let _ = counted.wait_for(|c| *c).await;
        self.snapshot(&engine);
        self.flush(&store).await;
        store.close().await;
        let _ = self.inner.written.send(true);
    }

    /// Resolves once the last write after cancellation is done (or there was no database):
    /// the daemon waits for it before it exits, so that a stop loses nothing.
    pub async fn stopped(&self) {
        let mut written = self.inner.written.subscribe();
        let _ = written.wait_for(|w| *w).await;
    }

    /// Queues every target's day so far.
    fn snapshot(&self, engine: &Engine) {
        let gone = self.not_counted(engine);
        let days = self
            .inner
            .rollups
            .lock()
            .snapshot(now_ms(), |id| !gone.contains(id));
        self.queue_days(days);
    }

    /// Writes what is queued; a failure keeps it queued.
    async fn flush(&self, store: &Store) {
        let batch = self.inner.pending.lock().take();
        let rows = batch.len();
        match store.write(&batch, now_ms()).await {
            Ok(()) => {
                self.inner.flushed.send_modify(|f| *f += 1);
                if !batch.transitions.is_empty() {
                    let written = batch.transitions.len() as u64;
                    self.inner
                        .transitions_written
                        .send_modify(|n| *n += written);
                }
                let mut status = self.inner.status.lock();
                if status.state == "failing" {
                    tracing::info!("history writes succeed again");
                }
                status.state = "ok";
                status.error = None;
            }
            Err(e) => {
                metrics::counter!("probe_history_write_errors_total").increment(1);
                let first = {
                    let mut status = self.inner.status.lock();
                    status.write_errors += 1;
                    let first = status.state != "failing";
                    status.state = "failing";
                    status.error = Some(e.to_string());
                    first
                };
                if first {
                    tracing::warn!(error = %e, rows, "history write failed: its rows wait for the next");
                }
                let mut pending = self.inner.pending.lock();
                pending.restore(batch);
                let dropped = pending.bound();
                drop(pending);
                self.count_dropped(dropped);
            }
        }
        metrics::gauge!("probe_history_pending_rows").set(self.inner.pending.lock().len() as f64);
    }

    /// Applies retention and the size cap.
    async fn prune(&self, store: &Store) {
        let config = &self.inner.config;
        match store
            .prune(
                now_ms(),
                config.transitions,
                config.rollups,
                config.max_bytes,
            )
            .await
        {
            Ok(dropped) => {
                metrics::counter!("probe_history_dropped_total", "reason" => "retention")
                    .increment(dropped.expired);
                metrics::counter!("probe_history_dropped_total", "reason" => "size_cap")
                    .increment(dropped.capped);
                if dropped.capped > 0 {
                    tracing::warn!(
                        rows = dropped.capped,
                        max_bytes = config.max_bytes,
                        "history over its size cap: the oldest days dropped"
                    );
                }
                let bytes = store.size().await.unwrap_or(0);
                metrics::gauge!("probe_history_bytes").set(bytes as f64);
                let mut status = self.inner.status.lock();
                status.expired += dropped.expired;
                status.capped += dropped.capped;
                status.bytes = bytes;
            }
            Err(e) => tracing::warn!(error = %e, "history retention failed"),
        }
    }
}

/// The transition row of an engine event.
fn row_of(e: &Event) -> TransitionRow {
    TransitionRow {
        target: e.target.to_string(),
        at_ms: ms(e.at),
        from: e.from.as_str().to_owned(),
        to: e.to.as_str().to_owned(),
        cause: e.cause.as_str().to_owned(),
        reason: e.detail.as_deref().and_then(reason_of),
        detail: e.detail.clone(),
    }
}

/// The closed failure reason a detail starts with (`refused: connection refused`).
fn reason_of(detail: &str) -> Option<String> {
    let head = detail.split(':').next()?;
    FailureReason::ALL
        .iter()
        .find(|r| r.as_str() == head)
        .map(|r| r.as_str().to_owned())
}

/// A wall-clock time in Unix milliseconds.
pub fn ms(at: SystemTime) -> i64 {
    i64::try_from(unix_ms(at)).unwrap_or(i64::MAX)
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    ms(SystemTime::now())
}
