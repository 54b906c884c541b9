//! Engine and scheduler behaviour on paused tokio time, with probes driven by the test.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use probe::TargetId;
use probe::engine::{Engine, EngineConfig, Record};
use probe::graph::{Dependency, GraphConfig, GraphError, NodeKind, NodeSpec, ReadinessPolicy};
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::outcome::{CheckResult, Failure, FailureReason};
use probe::scheduler::SchedulerConfig;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::{TargetSpec, Topology, TopologyError};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A probe that reports each run's start time and answers from a script (then succeeds).
struct Scripted {
    script: Mutex<std::collections::VecDeque<bool>>,
    latency: Duration,
    starts: mpsc::UnboundedSender<Instant>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl Scripted {
    fn new(script: &[bool], latency: Duration) -> (Arc<Self>, mpsc::UnboundedReceiver<Instant>) {
        let (starts, rx) = mpsc::unbounded_channel();
        let probe = Arc::new(Self {
            script: Mutex::new(script.iter().copied().collect()),
            latency,
            starts,
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
        });
        (probe, rx)
    }
}

#[async_trait::async_trait]
impl Probe for Scripted {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let _ = self.starts.send(Instant::now());
        tokio::time::sleep(self.latency).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        let ok = self.script.lock().unwrap().pop_front().unwrap_or(true);
        if ok {
            CheckResult::up()
        } else {
            CheckResult::failed(Failure::new(FailureReason::Refused, "scripted failure"))
        }
    }
}

fn target(
    id: &str,
    probe: Arc<dyn Probe>,
    interval: Duration,
    jitter: f64,
    rise: u32,
    fall: u32,
) -> TargetSpec {
    TargetSpec::new(
        TargetId::new(id).unwrap(),
        ProbeSpec::Custom(CustomProbe::new(probe)),
    )
    .with_schedule(
        Schedule::try_new(ScheduleSettings {
            interval,
            timeout: interval / 2,
            jitter,
            backoff_jitter: Some(0.0),
            ..ScheduleSettings::default()
        })
        .unwrap(),
    )
    .with_thresholds(Thresholds::new(
        NonZeroU32::new(rise).unwrap(),
        NonZeroU32::new(fall).unwrap(),
    ))
    .with_flap(None)
}

fn start(max_in_flight: usize) -> (Engine, CancellationToken) {
    let cancel = CancellationToken::new();
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_in_flight: NonZeroUsize::new(max_in_flight).unwrap(),
            min_workers: 2,
            worker_idle: Duration::from_secs(30),
        },
        history: 32,
        ..EngineConfig::default()
    };
    (Engine::start(config, cancel.clone()), cancel)
}

fn id(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

#[tokio::test(start_paused = true)]
async fn hysteresis_needs_exactly_fall_failures_and_rise_successes() {
    let (engine, cancel) = start(8);
    let script = [true, true, false, false, false, false, true, true];
    // The probe takes 1 ms, so the test reads the status while run n+1 is in flight: after run n
    // was recorded and before run n+1 is.
    let (probe, mut starts) = Scripted::new(&script, Duration::from_millis(1));
    engine
        .apply(vec![target("db", probe, Duration::from_secs(1), 0.0, 2, 3)])
        .unwrap();
    let mut states = Vec::new();
    for _ in 0..=script.len() {
        starts.recv().await.unwrap();
        states.push(engine.status(&id("db")).unwrap().state);
    }
    use HealthState::*;
    // UP stays UP while its failures are confirmed and is DOWN at the third; DOWN stays DOWN
    // at the first success and is UP at the second.
    assert_eq!(
        states,
        [Probing, Probing, Up, Up, Up, Down, Down, Down, Up],
        "states seen before each run"
    );
    let status = engine.status(&id("db")).unwrap();
    assert_eq!(status.transitions, 3, "each transition counted once");
    assert_eq!(status.history.len(), script.len());
    assert_eq!(
        status.last_failure.map(|f| f.reason),
        Some(FailureReason::Refused)
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn no_drift_over_a_hundred_intervals() {
    let (engine, cancel) = start(8);
    let interval = Duration::from_secs(10);
    let jitter = 0.2;
    // Slow probes must not push the schedule: 300 ms latency per run.
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(300));
    let spec = |jitter| target("t", probe.clone(), interval, jitter, 1, 1);
    // Without jitter the first run starts on the target's grid point; restarted with jitter,
    // the target keeps its grid.
    engine.apply(vec![spec(0.0)]).unwrap();
    let grid = starts.recv().await.unwrap();
    engine.apply(vec![spec(jitter)]).unwrap();
    let window = interval.mul_f64(jitter);
    for k in 1..=100u32 {
        let at = starts.recv().await.unwrap();
        let point = grid + interval * k;
        assert!(
            // tokio's timers fire on whole milliseconds: up to 1 ms past the window.
            at >= point && at <= point + window + Duration::from_millis(1),
            "run {k} at {:?} after the grid's first point; it says {:?} + [0, {window:?})",
            at - grid,
            interval * k
        );
    }
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn start_offsets_spread_over_the_interval() {
    const TARGETS: usize = 1000;
    let (engine, cancel) = start(64);
    let t0 = Instant::now();
    let interval = Duration::from_secs(10);
    let (probe, mut starts) = Scripted::new(&[], Duration::ZERO);
    let specs: Vec<_> = (0..TARGETS)
        .map(|i| target(&format!("target-{i}"), probe.clone(), interval, 0.0, 1, 1))
        .collect();
    engine.apply(specs).unwrap();
    let mut buckets = [0usize; 10];
    for _ in 0..TARGETS {
        let at = starts.recv().await.unwrap();
        let tenth = ((at - t0).as_secs_f64() / interval.as_secs_f64() * 10.0) as usize;
        buckets[tenth.min(9)] += 1;
    }
    let mean = TARGETS / 10;
    assert!(
        buckets.iter().all(|&b| b <= 2 * mean && b > 0),
        "first starts per tenth of the interval: {buckets:?}"
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn in_flight_is_capped_and_workers_shrink_back() {
    const CAP: usize = 4;
    let (engine, cancel) = start(CAP);
    let interval = Duration::from_secs(10);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_secs(4));
    let specs: Vec<_> = (0..40)
        .map(|i| target(&format!("slow-{i}"), probe.clone(), interval, 0.0, 1, 1))
        .collect();
    engine.apply(specs).unwrap();
    // Every target still gets its turn.
    for _ in 0..40 {
        starts.recv().await.unwrap();
    }
    assert_eq!(probe.max_running.load(Ordering::SeqCst), CAP);
    assert!(engine.workload().workers <= CAP);

    // With nothing to do, the pool returns to its minimum after the idle timeout.
    engine.apply(Vec::new()).unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(engine.workload().workers, 2);
    cancel.cancel();
    engine.stopped().await;
    assert_eq!(engine.workload().workers, 0);
}

#[tokio::test(start_paused = true)]
async fn pool_grows_with_the_backlog() {
    let (engine, cancel) = start(64);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_secs(2));
    // All ten land in the same tenth of a second; each probe takes 2 s.
    let specs: Vec<_> = (0..10)
        .map(|i| {
            let mut t = target(
                &format!("burst-{i}"),
                probe.clone(),
                Duration::from_secs(10),
                0.0,
                1,
                1,
            );
            t.schedule = Schedule::try_new(ScheduleSettings {
                interval: Duration::from_millis(100),
                timeout: Duration::from_millis(50),
                jitter: 0.0,
                ..ScheduleSettings::default()
            })
            .unwrap();
            t
        })
        .collect();
    engine.apply(specs).unwrap();
    for _ in 0..10 {
        starts.recv().await.unwrap();
    }
    assert_eq!(
        probe.max_running.load(Ordering::SeqCst),
        10,
        "all ran at once"
    );
    assert!(engine.workload().workers >= 10);
    cancel.cancel();
    engine.stopped().await;
}

/// The records waiting in `feed`: each `Runs`' run count, and the transitions (as 0).
fn waiting(feed: &mut mpsc::Receiver<Record>) -> Vec<usize> {
    std::iter::from_fn(|| feed.try_recv().ok())
        .map(|record| match record {
            Record::Runs(batch) => {
                assert_eq!(batch.target, id("db"));
                assert!(batch.iter().is_sorted_by_key(|r| r.at), "oldest first");
                batch.iter().len()
            }
            Record::Transition(_) => 0,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn runs_reach_the_record_feed_together_and_none_is_left_behind() {
    let (engine, cancel) = start(8);
    let mut feed = engine.record_feed(1024);
    // 1 ms a run: after run n+1 starts, run n is recorded.
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(1));
    let interval = Duration::from_secs(1);
    let spec = target("db", probe, interval, 0.0, 1, 1);
    engine.apply(vec![spec]).unwrap();
    for _ in 0..5 {
        starts.recv().await.unwrap();
    }
    // Four runs: the first made the target UP, and came before its transition; the others
    // are held.
    assert_eq!(waiting(&mut feed), [1, 0]);
    // The run 10 s after the second (the longest a target holds a run) hands the eleven over.
    let held_runs = (10 / interval.as_secs()) as usize + 1;
    for _ in 5..=held_runs + 1 {
        starts.recv().await.unwrap();
    }
    assert_eq!(waiting(&mut feed), [held_runs]);
    // What is held goes when the embedder asks...
    for _ in 0..3 {
        starts.recv().await.unwrap();
    }
    engine.flush_runs();
    assert_eq!(waiting(&mut feed), [3]);
    engine.flush_runs();
    assert!(waiting(&mut feed).is_empty(), "nothing twice");
    // ... and when the target leaves the engine.
    for _ in 0..2 {
        starts.recv().await.unwrap();
    }
    engine.apply(Vec::new()).unwrap();
    assert_eq!(waiting(&mut feed), [2]);
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn adding_and_removing_one_target_leaves_the_others_alone() {
    let (engine, cancel) = start(8);
    let interval = Duration::from_secs(1);
    let (stay, mut stay_starts) = Scripted::new(&[], Duration::ZERO);
    let (gone, mut gone_starts) = Scripted::new(&[], Duration::ZERO);
    let stay_spec = target("stay", stay, interval, 0.0, 2, 2);
    let gone_spec = target("gone", gone, interval, 0.0, 2, 2);
    engine.apply(vec![stay_spec.clone(), gone_spec]).unwrap();
    for _ in 0..6 {
        stay_starts.recv().await.unwrap();
    }
    gone_starts.recv().await.unwrap();
    let before = engine.status(&id("stay")).unwrap();
    assert_eq!(before.state, HealthState::Up);

    let (added, mut added_starts) = Scripted::new(&[], Duration::ZERO);
    let diff = engine
        .apply(vec![
            stay_spec.clone(),
            target("added", added, interval, 0.0, 2, 2),
        ])
        .unwrap();
    assert_eq!(diff.added, [id("added")]);
    assert_eq!(diff.removed, [id("gone")]);
    assert_eq!(diff.unchanged, 1);
    assert!(engine.status(&id("gone")).is_none());
    added_starts.recv().await.unwrap();
    for _ in 0..3 {
        stay_starts.recv().await.unwrap();
    }
    let after = engine.status(&id("stay")).unwrap();
    assert_eq!(after.state, HealthState::Up);
    assert_eq!(after.transitions, before.transitions, "no restart");
    assert!(
        after.consecutive_successes >= before.consecutive_successes + 3,
        "counters kept: {} then {}",
        before.consecutive_successes,
        after.consecutive_successes
    );
    // The removed target does not run any more.
    while gone_starts.try_recv().is_ok() {}
    tokio::time::sleep(interval * 5).await;
    assert!(
        gone_starts.try_recv().is_err(),
        "removed target still probed"
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_counts_healthy_targets() {
    let (engine, cancel) = start(8);
    let (good, mut good_starts) = Scripted::new(&[], Duration::ZERO);
    let (bad, mut bad_starts) = Scripted::new(&[false; 64], Duration::ZERO);
    let good_spec = target("good", good, Duration::from_secs(1), 0.0, 1, 1);
    engine
        .apply(vec![
            good_spec.clone(),
            target("bad", bad, Duration::from_secs(1), 0.0, 1, 1),
        ])
        .unwrap();
    assert!(!engine.readiness().ready, "PROBING is not ready");
    for _ in 0..3 {
        good_starts.recv().await.unwrap();
        bad_starts.recv().await.unwrap();
    }
    let r = engine.readiness();
    assert!(!r.ready);
    assert_eq!((r.total, r.healthy), (2, 1));
    assert_eq!(
        r.reason.as_deref(),
        Some("1 of 2 targets not healthy: bad (DOWN)")
    );
    // Removing the bad target makes the engine ready; the good one keeps its verdict.
    engine.apply(vec![good_spec]).unwrap();
    let r = engine.readiness();
    assert!(r.ready, "{r:?}");
    assert_eq!((r.total, r.healthy), (1, 1));
    // An empty engine is vacuously ready.
    engine.apply(Vec::new()).unwrap();
    assert_eq!(engine.readiness().total, 0);
    assert!(engine.readiness().ready);
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn maintenance_holds_the_state_keeps_probing_and_expires() {
    let (engine, cancel) = start(8);
    let mut events = engine.subscribe();
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(1));
    let interval = Duration::from_secs(10);
    engine
        .apply(vec![target("db", probe, interval, 0.0, 1, 1)])
        .unwrap();
    starts.recv().await.unwrap();
    starts.recv().await.unwrap();
    assert_eq!(engine.status(&id("db")).unwrap().state, HealthState::Up);

    let info = engine
        .start_maintenance(&id("db"), "disk swap".into(), Duration::from_secs(1800))
        .unwrap();
    assert_eq!(info.reason, "disk swap");
    let status = engine.status(&id("db")).unwrap();
    assert_eq!(status.state, HealthState::Maintenance);
    assert_eq!(status.maintenance.unwrap().reason, "disk swap");
    assert!(
        engine.readiness().ready,
        "maintenance does not fail readiness"
    );
    assert_eq!(
        engine.operator_maintenance().len(),
        1,
        "operator maintenance is listed for persisting"
    );

    // Probes keep running during maintenance.
    let runs_before = engine.status(&id("db")).unwrap().history.len();
    for _ in 0..3 {
        starts.recv().await.unwrap();
    }
    let status = engine.status(&id("db")).unwrap();
    assert!(status.history.len() > runs_before);
    assert_eq!(status.state, HealthState::Maintenance);

    // It expires by itself: the first run after 30 minutes ends it, in PROBING (never straight
    // to UP); the next results decide from there.
    tokio::time::sleep(Duration::from_secs(1800)).await;
    let status = engine.status(&id("db")).unwrap();
    assert!(status.maintenance.is_none());
    assert_eq!(status.state, HealthState::Up);

    let seen: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.from, e.to, e.cause))
        .collect();
    use HealthState::*;
    use probe::health::Cause;
    assert_eq!(
        seen,
        [
            (Probing, Up, Cause::Results),
            (Up, Maintenance, Cause::MaintenanceStarted),
            (Maintenance, Probing, Cause::MaintenanceEnded),
            (Probing, Up, Cause::Results),
        ]
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn ending_maintenance_early_and_errors() {
    let (engine, cancel) = start(8);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(1));
    engine
        .apply(vec![target("db", probe, Duration::from_secs(1), 0.0, 1, 1)])
        .unwrap();
    starts.recv().await.unwrap();
    use probe::engine::EngineError;
    assert_eq!(
        engine.end_maintenance(&id("db")),
        Err(EngineError::NotInMaintenance(id("db")))
    );
    assert_eq!(
        engine
            .start_maintenance(&id("nope"), "x".into(), Duration::from_secs(1))
            .unwrap_err(),
        EngineError::UnknownTarget(id("nope"))
    );
    engine
        .start_maintenance(&id("db"), "x".into(), Duration::from_secs(3600))
        .unwrap();
    engine.end_maintenance(&id("db")).unwrap();
    assert_eq!(
        engine.status(&id("db")).unwrap().state,
        HealthState::Probing
    );
    assert!(engine.operator_maintenance().is_empty());
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn declared_windows_put_targets_in_maintenance() {
    use probe::health::{MaintenanceWindow, WindowStart};
    let (engine, cancel) = start(8);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(1));
    let mut spec = target("db", probe, Duration::from_secs(1), 0.0, 1, 1);
    // A window that started a minute ago (wall clock) and lasts an hour.
    spec.maintenance = vec![
        MaintenanceWindow::try_new(
            WindowStart::Once(std::time::SystemTime::now() - Duration::from_secs(60)),
            Duration::from_secs(3600),
        )
        .unwrap(),
    ];
    engine.apply(vec![spec]).unwrap();
    starts.recv().await.unwrap();
    starts.recv().await.unwrap();
    let status = engine.status(&id("db")).unwrap();
    assert_eq!(status.state, HealthState::Maintenance);
    assert_eq!(
        status.maintenance.unwrap().source,
        probe::engine::MaintenanceSource::Window
    );
    // Ended early by an operator, the window does not restart.
    engine.end_maintenance(&id("db")).unwrap();
    starts.recv().await.unwrap();
    starts.recv().await.unwrap();
    assert_ne!(
        engine.status(&id("db")).unwrap().state,
        HealthState::Maintenance
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn a_flapping_target_is_held_in_probing_until_stable() {
    use probe::health::FlapPolicy;
    let (engine, cancel) = start(8);
    // Alternating results flip a rise 1 / fall 1 target on every run; then it stays up.
    let script: Vec<bool> = (0..20).map(|i| i % 2 == 0).collect();
    let (probe, mut starts) = Scripted::new(&script, Duration::from_millis(1));
    let mut spec = target("flaky", probe, Duration::from_secs(10), 0.0, 1, 1);
    spec.flap = Some(FlapPolicy {
        transitions: 4,
        window: Duration::from_secs(600),
        min_stable: Duration::from_secs(60),
    });
    engine.apply(vec![spec]).unwrap();
    let mut events = engine.subscribe();
    for _ in 0..21 {
        starts.recv().await.unwrap();
    }
    let status = engine.status(&id("flaky")).unwrap();
    assert!(status.flapping);
    assert_eq!(status.state, HealthState::Probing);
    // The first verdict and 19 flips, yet only the verdict and the first 4 flips became
    // transitions, then one into PROBING for flapping.
    assert_eq!(status.transitions, 6);
    // The script ends in successes: after 60 s of agreement the target is released with the
    // verdict the results point to.
    let released = loop {
        let e = events.recv().await.unwrap();
        if e.cause == probe::health::Cause::Settled {
            break e;
        }
    };
    assert_eq!(
        (released.from, released.to),
        (HealthState::Probing, HealthState::Up)
    );
    assert!(!engine.status(&id("flaky")).unwrap().flapping);
    cancel.cancel();
    engine.stopped().await;
}

/// A probe that passes or fails as the test says.
struct Switch(std::sync::atomic::AtomicBool);

impl Switch {
    fn new() -> Arc<Self> {
        Arc::new(Self(std::sync::atomic::AtomicBool::new(true)))
    }

    fn set(&self, up: bool) {
        self.0.store(up, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Probe for Switch {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        if self.0.load(Ordering::SeqCst) {
            CheckResult::up()
        } else {
            CheckResult::failed(Failure::new(FailureReason::Refused, "switched off"))
        }
    }
}

/// Waits (on paused time) for `id` to enter `state`.
async fn wait_for(
    events: &mut tokio::sync::broadcast::Receiver<probe::engine::Event>,
    id: &str,
    state: HealthState,
) {
    loop {
        let event = events.recv().await.unwrap();
        if event.target.as_str() == id && event.to == state {
            return;
        }
    }
}

fn node_score(engine: &Engine, name: &str) -> Option<f64> {
    engine.graph().status(&id(name)).unwrap().score
}

/// `svc` needs a critical `db` (weight 4) and a non-critical `cache` (weight 1); readiness
/// requires `svc` at 0.8 with a 0.1 margin.
fn service(db: Arc<Switch>, cache: Arc<Switch>) -> Topology {
    let second = Duration::from_secs(1);
    let dependency = |target: &str, weight: f64, critical: bool| Dependency {
        weight,
        critical,
        ..Dependency::new(id(target), "test")
    };
    Topology {
        targets: vec![
            target("db", db, second, 0.0, 1, 1),
            target("cache", cache, second, 0.0, 1, 1),
        ],
        nodes: vec![NodeSpec {
            id: id("svc"),
            kind: NodeKind::Group,
            depends_on: vec![dependency("db", 4.0, true), dependency("cache", 1.0, false)],
        }],
        scoring: GraphConfig::default(),
        readiness: Some(ReadinessPolicy::try_new(vec![id("svc")], 0.8, 0.1).unwrap()),
        ..Topology::default()
    }
}

#[tokio::test(start_paused = true)]
async fn results_feed_scores_and_readiness_follows_the_policy() {
    let (engine, cancel) = start(8);
    let mut events = engine.subscribe();
    let (db, cache) = (Switch::new(), Switch::new());
    engine.apply(service(db.clone(), cache.clone())).unwrap();
    let r = engine.readiness();
    assert!(!r.ready, "no verdict before results");
    assert_eq!(r.reason.as_deref(), Some("svc has no score yet"));
    wait_for(&mut events, "db", HealthState::Up).await;
    wait_for(&mut events, "cache", HealthState::Up).await;
    assert!(engine.readiness().ready);
    assert_eq!(
        (engine.readiness().total, engine.readiness().healthy),
        (1, 1)
    );
    assert_eq!(node_score(&engine, "svc"), Some(1.0));
    let listed = engine.statuses();
    assert!(
        listed
            .iter()
            .all(|s| s.score == Some(1.0) && !s.dependency_down)
    );
    assert_eq!(listed.len(), 2, "groups are not probed");

    // The cache goes DOWN: lower, still ready.
    cache.set(false);
    wait_for(&mut events, "cache", HealthState::Down).await;
    let svc = node_score(&engine, "svc").unwrap();
    assert!((0.8..1.0).contains(&svc), "{svc}");
    assert!(engine.readiness().ready);

    // The database in maintenance: its failures do not count, and it is not DOWN.
    engine
        .start_maintenance(&id("db"), "swap".into(), Duration::from_secs(60))
        .unwrap();
    db.set(false);
    let before = engine.status(&id("db")).unwrap().score;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let during = engine.status(&id("db")).unwrap();
    assert_eq!(during.state, HealthState::Maintenance);
    assert_eq!(during.score, before);
    assert!(engine.readiness().ready);

    // Maintenance over, the database goes DOWN: capped, marked, not ready.
    engine.end_maintenance(&id("db")).unwrap();
    wait_for(&mut events, "db", HealthState::Down).await;
    assert_eq!(node_score(&engine, "svc"), Some(0.0));
    assert!(engine.graph().status(&id("svc")).unwrap().dependency_down);
    let r = engine.readiness();
    assert!(!r.ready);
    assert_eq!(
        r.reason.as_deref(),
        Some("svc has a critical dependency DOWN (db)")
    );
    assert_eq!(
        engine.graph().explain(&id("svc")).unwrap().to_string(),
        format!(
            "svc 0.00 DOWN, dependency down: db {:.2} (w 0.80, critical, caps) DOWN; cache {:.2} (w 0.20) DOWN",
            engine.status(&id("db")).unwrap().score.unwrap(),
            engine.status(&id("cache")).unwrap().score.unwrap(),
        )
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn dependency_changes_keep_targets_and_probe_changes_reset_scores() {
    let (engine, cancel) = start(8);
    let mut events = engine.subscribe();
    let (db, cache) = (Switch::new(), Switch::new());
    let mut topology = service(db.clone(), cache.clone());
    engine.apply(topology.clone()).unwrap();
    wait_for(&mut events, "db", HealthState::Up).await;
    wait_for(&mut events, "cache", HealthState::Up).await;
    cache.set(false);
    wait_for(&mut events, "cache", HealthState::Down).await;
    let cache_before = engine.status(&id("cache")).unwrap();
    assert!(cache_before.score.unwrap() < 1.0);

    // New weights and no readiness policy: no target restarts, scores are kept.
    topology.nodes[0].depends_on[1].weight = 4.0;
    topology.readiness = None;
    let diff = engine.apply(topology.clone()).unwrap();
    assert!(diff.is_empty(), "{diff:?}");
    let cache_after = engine.status(&id("cache")).unwrap();
    assert_eq!(cache_after.transitions, cache_before.transitions);
    assert_eq!(cache_after.state, HealthState::Down);
    assert_eq!(cache_after.score, cache_before.score);
    let readiness = engine.readiness();
    assert!(
        !readiness.ready,
        "all-targets readiness again: the cache is DOWN"
    );
    assert_eq!(readiness.total, 2);

    // A new probe for the cache: restarted, its old results forgotten.
    topology.targets[1] = target("cache", Switch::new(), Duration::from_secs(2), 0.0, 1, 1);
    let diff = engine.apply(topology).unwrap();
    assert_eq!(diff.changed, [id("cache")]);
    let restarted = engine.status(&id("cache")).unwrap();
    assert_eq!(restarted.state, HealthState::Probing);
    assert_eq!(restarted.transitions, 0);
    assert_eq!(restarted.score, None);
    assert_eq!(node_score(&engine, "svc"), None, "unknown propagates");
    wait_for(&mut events, "cache", HealthState::Up).await;
    assert_eq!(engine.status(&id("cache")).unwrap().score, Some(1.0));
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_topology_changes_nothing() {
    let (engine, cancel) = start(8);
    let (db, cache) = (Switch::new(), Switch::new());
    let valid = service(db.clone(), cache.clone());
    engine.apply(valid.clone()).unwrap();

    let mut cycle = valid.clone();
    cycle.nodes.push(NodeSpec {
        id: id("db"),
        kind: NodeKind::Probed,
        depends_on: vec![Dependency::new(id("svc"), "db.yaml:3:5")],
    });
    let Err(TopologyError::Graph(errors)) = engine.apply(cycle) else {
        panic!("a cycle must be refused");
    };
    assert!(
        matches!(&errors[..], [GraphError::Cycle { chain, .. }] if chain.len() == 3),
        "{errors:?}"
    );

    let mut group_is_target = valid.clone();
    group_is_target.nodes[0].id = id("db");
    assert_eq!(
        engine.apply(group_is_target),
        Err(TopologyError::GroupIsTarget(id("db")))
    );
    let mut not_a_target = valid.clone();
    not_a_target.nodes[0].kind = NodeKind::Probed;
    assert_eq!(
        engine.apply(not_a_target),
        Err(TopologyError::NotATarget(id("svc")))
    );
    // Still the valid topology.
    let nodes = engine.graph().export().nodes.len();
    assert_eq!(nodes, 3);
    assert_eq!(engine.readiness().total, 1, "the policy stayed");
    assert!(engine.apply(valid.clone()).unwrap().is_empty());

    // Requiring a node no source declares (yet) is no error: it is not ready.
    let mut unknown = valid;
    unknown.readiness = Some(ReadinessPolicy::try_new(vec![id("web")], 0.8, 0.0).unwrap());
    engine.apply(unknown).unwrap();
    assert_eq!(
        engine.readiness().reason.as_deref(),
        Some("web is not in the dependency graph")
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn operator_maintenance_survives_a_spec_change() {
    let (engine, cancel) = start(8);
    let second = Duration::from_secs(1);
    engine
        .apply(vec![target("db", Switch::new(), second, 0.0, 1, 1)])
        .unwrap();
    let info = engine
        .start_maintenance(&id("db"), "disk swap".into(), Duration::from_secs(600))
        .unwrap();
    let diff = engine
        .apply(vec![target("db", Switch::new(), 2 * second, 0.0, 1, 1)])
        .unwrap();
    assert_eq!(diff.changed, [id("db")]);
    let status = engine.status(&id("db")).unwrap();
    assert_eq!(status.state, HealthState::Maintenance);
    assert_eq!(status.maintenance, Some(info.clone()));
    assert_eq!(engine.operator_maintenance(), [(id("db"), info)]);
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn a_passive_failure_re_probes_at_once() {
    use probe::passive::{Call, CallOutcome};
    let (engine, cancel) = start(8);
    let interval = Duration::from_secs(60);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_millis(1));
    engine
        .apply(vec![target("db", probe, interval, 0.0, 1, 1)])
        .unwrap();
    starts.recv().await.unwrap();
    starts.recv().await.unwrap();
    assert_eq!(engine.status(&id("db")).unwrap().state, HealthState::Up);
    let settled = starts.recv().await.unwrap();

    // A success changes nothing: the next run is one interval later.
    let ok = Call {
        outcome: CallOutcome::Success,
        latency: Duration::from_millis(3),
    };
    engine.pools().report(&id("db"), &ok).unwrap();
    assert_eq!(starts.recv().await.unwrap() - settled, interval);

    // Failures re-probe now, once for a burst, and the grid is kept afterwards.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let reported = Instant::now();
    let failed = Call::http(503, Duration::from_millis(3));
    for _ in 0..5 {
        engine.pools().report(&id("db"), &failed).unwrap();
    }
    let expedited = starts.recv().await.unwrap();
    assert_eq!(expedited, reported, "re-probed at once");
    let next = starts.recv().await.unwrap();
    assert_eq!(
        next - settled,
        2 * interval,
        "one extra run; the grid is kept"
    );
    // While a run is in flight (it takes 1 ms): one more right after it.
    engine.pools().report(&id("db"), &failed).unwrap();
    let after = starts.recv().await.unwrap();
    assert_eq!(after - next, Duration::from_millis(1));
    assert_eq!(starts.recv().await.unwrap() - settled, 3 * interval);
    assert_eq!(
        engine.pools().report(&id("ghost"), &failed),
        Err(probe::engine::EngineError::UnknownTarget(id("ghost")))
    );
    cancel.cancel();
    engine.stopped().await;
}

/// A probe whose runs can be starved: the clock jumps 200 ms while it runs (what a prober that
/// lost the CPU sees) and it reports a timeout. Each run announces its start.
struct Starved {
    starve: std::sync::atomic::AtomicBool,
    starts: mpsc::UnboundedSender<()>,
}

#[async_trait::async_trait]
impl Probe for Starved {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        let _ = self.starts.send(());
        if !self.starve.load(Ordering::SeqCst) {
            return CheckResult::up();
        }
        tokio::time::advance(Duration::from_millis(200)).await;
        CheckResult::failed(Failure::new(FailureReason::Timeout, "no reply in time"))
    }
}

/// Runs a target through three starved runs; returns its state and the engine's multiplier.
async fn starve(config: EngineConfig) -> (HealthState, Option<u32>, Option<FailureReason>) {
    let cancel = CancellationToken::new();
    let engine = Engine::start(config, cancel.clone());
    let (starts, mut started) = mpsc::unbounded_channel();
    let probe = Arc::new(Starved {
        starve: std::sync::atomic::AtomicBool::new(false),
        starts,
    });
    engine
        .apply(vec![target(
            "db",
            probe.clone(),
            Duration::from_secs(1),
            0.0,
            1,
            1,
        )])
        .unwrap();
    started.recv().await.unwrap();
    started.recv().await.unwrap();
    assert_eq!(engine.status(&id("db")).unwrap().state, HealthState::Up);
    probe.starve.store(true, Ordering::SeqCst);
    for _ in 0..4 {
        started.recv().await.unwrap();
    }
    let status = engine.status(&id("db")).unwrap();
    let result = (
        status.state,
        engine.workload().lateness,
        status.last_failure.map(|f| f.reason),
    );
    cancel.cancel();
    engine.stopped().await;
    result
}

#[tokio::test(start_paused = true)]
async fn timeouts_while_the_engine_runs_late_do_not_take_targets_down() {
    // With self-health awareness the timeouts are recorded but their verdict deferred.
    let (state, multiplier, last) = starve(EngineConfig::default()).await;
    assert_eq!(state, HealthState::Up);
    assert!(multiplier.unwrap() >= 1, "{multiplier:?}");
    assert_eq!(last, Some(FailureReason::Timeout));
    // Without it, the same runs take the target DOWN.
    let (state, multiplier, _) = starve(EngineConfig {
        self_health: None,
        ..EngineConfig::default()
    })
    .await;
    assert_eq!(state, HealthState::Down);
    assert_eq!(multiplier, None);
}

/// The gaps between the starts of runs `0..=n`.
async fn gaps(starts: &mut mpsc::UnboundedReceiver<Instant>, n: usize) -> Vec<Duration> {
    let mut last = starts.recv().await.unwrap();
    let mut gaps = Vec::new();
    for _ in 0..n {
        let at = starts.recv().await.unwrap();
        gaps.push(at - last);
        last = at;
    }
    gaps
}

#[tokio::test(start_paused = true)]
async fn a_pending_verdict_re_runs_at_fast_interval_and_down_backs_off_to_backoff_max() {
    let (engine, cancel) = start(8);
    // Up (two passes), five failures, two passes.
    let script = [
        true, true, false, false, false, false, false, false, true, true,
    ];
    let (probe, mut starts) = Scripted::new(&script, Duration::from_millis(1));
    // 1 s interval, fast interval 500 ms, backoff up to 4 s (the default 4 x interval), no
    // jitter on either.
    engine
        .apply(vec![target("db", probe, Duration::from_secs(1), 0.0, 2, 3)])
        .unwrap();
    let ms = |ms: u64| Duration::from_millis(ms);
    let seen = gaps(&mut starts, script.len()).await;
    assert_eq!(
        seen,
        [
            ms(500),  // PROBING, 1 of 2 passes: fast
            ms(1000), // UP: the interval
            ms(500),  // UP, 1 of 3 failures pending: fast
            ms(500),  // 2 of 3
            // DOWN: backoff attempt 0 with 2 of the last 5 results good: 1 s x (1 + 2 x 0.6)
            ms(2200),
            ms(4000), // attempt 1 would be 4.67 s: capped at backoff.max
            ms(4000),
            ms(4000),
            ms(500),  // DOWN, 1 of 2 passes pending: fast
            ms(1000), // UP again: the interval
        ]
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn jitter_only_ever_starts_a_run_late() {
    let (engine, cancel) = start(8);
    let interval = Duration::from_secs(1);
    let (probe, mut starts) = Scripted::new(&[], Duration::ZERO);
    let spec = |jitter| target("t", probe.clone(), interval, jitter, 1, 1);
    // Without jitter, runs start on the target's grid point.
    engine.apply(vec![spec(0.0)]).unwrap();
    let grid = starts.recv().await.unwrap();
    // The same target with jitter 0.3 (restarted on the same grid) starts each run within 300
    // ms after a grid point (plus tokio's 1 ms timer resolution), never before one.
    engine.apply(vec![spec(0.3)]).unwrap();
    let mut latest = Duration::ZERO;
    for _ in 0..200 {
        let at = starts.recv().await.unwrap();
        let late = Duration::from_nanos(((at - grid).as_nanos() % interval.as_nanos()) as u64);
        assert!(
            late <= interval.mul_f64(0.3) + Duration::from_millis(1),
            "a run {late:?} after its grid point"
        );
        latest = latest.max(late);
    }
    assert!(
        latest > Duration::from_millis(200),
        "jitter never applied: {latest:?}"
    );
    cancel.cancel();
    engine.stopped().await;
}

/// How a [`Lagging`] probe answers while the clock jumps under it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Lag {
    /// Passes, on time.
    None,
    /// The clock jumps 200 ms, then a timeout.
    Timeout,
    /// The clock jumps 200 ms, then a refusal.
    Refused,
}

/// A probe whose runs can be starved, recording the timeout each run was given and the
/// engine's multiplier when it started.
struct Lagging {
    mode: std::sync::atomic::AtomicU8,
    engine: std::sync::OnceLock<Engine>,
    runs: Mutex<Vec<(Duration, u32)>>,
    starts: mpsc::UnboundedSender<()>,
}

#[async_trait::async_trait]
impl Probe for Lagging {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let multiplier = self
            .engine
            .get()
            .and_then(|e| e.workload().lateness)
            .unwrap_or(0);
        self.runs.lock().unwrap().push((timeout, multiplier));
        let _ = self.starts.send(());
        let reason = match self.mode.load(Ordering::SeqCst) {
            m if m == Lag::Timeout as u8 => FailureReason::Timeout,
            m if m == Lag::Refused as u8 => FailureReason::Refused,
            _ => return CheckResult::up(),
        };
        tokio::time::advance(Duration::from_millis(200)).await;
        CheckResult::failed(Failure::new(reason, "lagging"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_starved_engine_widens_timeouts_and_still_counts_refusals() {
    let (engine, cancel) = start(8);
    let (starts, mut started) = mpsc::unbounded_channel();
    let probe = Arc::new(Lagging {
        mode: std::sync::atomic::AtomicU8::new(Lag::None as u8),
        engine: std::sync::OnceLock::new(),
        runs: Mutex::new(Vec::new()),
        starts,
    });
    let _ = probe.engine.set(engine.clone());
    // A 1 s interval and a 100 ms timeout: room to widen it by 1 + multiplier.
    let timeout = Duration::from_millis(100);
    let interval = Duration::from_secs(1);
    let spec = target("db", probe.clone(), interval, 0.0, 1, 1).with_schedule(
        Schedule::try_new(ScheduleSettings {
            interval,
            timeout,
            jitter: 0.0,
            backoff_jitter: Some(0.0),
            ..ScheduleSettings::default()
        })
        .unwrap(),
    );
    engine.apply(vec![spec]).unwrap();
    started.recv().await.unwrap();
    assert_eq!(
        *probe.runs.lock().unwrap(),
        [(timeout, 0)],
        "on time: as configured"
    );

    // Starved: the timeouts are deferred (the target stays UP), and each run gets
    // timeout x (1 + the multiplier at its start), up to the interval.
    probe.mode.store(Lag::Timeout as u8, Ordering::SeqCst);
    for _ in 0..6 {
        started.recv().await.unwrap();
    }
    assert_eq!(engine.status(&id("db")).unwrap().state, HealthState::Up);
    let runs = probe.runs.lock().unwrap().clone();
    assert!(runs.iter().any(|(_, m)| *m > 0), "never starved: {runs:?}");
    for (given, multiplier) in &runs {
        let widened = (timeout * (1 + multiplier)).min(interval);
        assert_eq!(*given, widened, "multiplier {multiplier}: {runs:?}");
    }

    // A refusal is a definite answer: it counts, starved or not.
    probe.mode.store(Lag::Refused as u8, Ordering::SeqCst);
    started.recv().await.unwrap();
    started.recv().await.unwrap();
    let status = engine.status(&id("db")).unwrap();
    let (_, multiplier) = *probe.runs.lock().unwrap().last().unwrap();
    assert!(multiplier >= 1, "not starved when refused");
    assert_eq!(status.state, HealthState::Down);
    assert_eq!(
        status.last_failure.map(|f| f.reason),
        Some(FailureReason::Refused)
    );
    cancel.cancel();
    engine.stopped().await;
}

/// A probe that passes at once: its targets' first runs are seconds away on their default
/// schedule anyway.
struct Idle;

#[async_trait::async_trait]
impl Probe for Idle {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        CheckResult::up()
    }
}

/// `/readyz`'s question is answered while an apply of 10k targets is under way: readiness is a
/// published snapshot, not a walk over the targets the apply is replacing. (Reading it behind
/// the apply's locks, a reader would complete a call or two in all while the apply runs.)
#[test]
fn readiness_answers_while_a_ten_thousand_target_apply_runs() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let engine = runtime.block_on(async { Engine::start(EngineConfig::default(), cancel.clone()) });
    let probe: Arc<dyn Probe> = Arc::new(Idle);
    let specs = |prefix: &str| -> Vec<TargetSpec> {
        (0..10_000)
            .map(|i| {
                TargetSpec::new(
                    id(&format!("{prefix}-{i}")),
                    ProbeSpec::Custom(CustomProbe::new(probe.clone())),
                )
            })
            .collect()
    };
    // Not ready: ten thousand targets in PROBING, so every answer names some.
    runtime.block_on(async { engine.apply(specs("a")).unwrap() });
    let applying = std::sync::atomic::AtomicBool::new(true);
    let answered = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut answered = 0u64;
            while applying.load(std::sync::atomic::Ordering::SeqCst) {
                let readiness = engine.readiness();
                assert!(!readiness.ready);
                if applying.load(std::sync::atomic::Ordering::SeqCst) {
                    answered += 1;
                }
            }
            answered
        });
        // Every target replaced: ten thousand removed and ten thousand added in one apply.
        runtime.block_on(async { engine.apply(specs("b")).unwrap() });
        applying.store(false, std::sync::atomic::Ordering::SeqCst);
        reader.join().unwrap()
    });
    assert!(
        answered >= 10,
        "readiness answered only {answered} times while the apply ran"
    );
    assert_eq!(engine.readiness().total, 10_000);
    cancel.cancel();
    runtime.block_on(engine.stopped());
}

/// A page of the listing: the targets after the cursor that the filter keeps, at most the
/// limit, with whether more follow; the same copies as the whole listing's.
#[tokio::test(start_paused = true)]
async fn a_listing_page_starts_after_its_cursor_and_stops_when_full() {
    let (engine, cancel) = start(4);
    let ids = ["a", "b", "c", "d", "e"];
    engine
        .apply(
            ids.iter()
                .map(|id| target(id, Arc::new(Idle), Duration::from_secs(3600), 0.0, 1, 1))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let names = |listed: &probe::engine::Listed| {
        listed
            .targets
            .iter()
            .map(|s| s.id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let all = engine.listing();
    let first = engine.listing_where(None, Some(2), |_| true);
    assert_eq!(
        (names(&first), first.more, first.of),
        (vec!["a".into(), "b".into()], true, 5)
    );
    let cursor = first.targets[1].id.clone();
    let second = engine.listing_where(Some(&cursor), Some(2), |_| true);
    assert_eq!(
        (names(&second), second.more),
        (vec!["c".into(), "d".into()], true)
    );
    // The last page is not full: nothing follows it.
    let last = engine.listing_where(Some(&second.targets[1].id), Some(2), |_| true);
    assert_eq!((names(&last), last.more), (vec!["e".into()], false));
    // A full page with nothing after it kept says no more either.
    let vowels = engine.listing_where(None, Some(2), |s| ["a", "e"].contains(&s.id.as_str()));
    assert_eq!(
        (names(&vowels), vowels.more),
        (vec!["a".into(), "e".into()], false)
    );
    let odd = engine.listing_where(None, None, |s| s.id.as_str() != "b");
    assert_eq!(names(&odd), ["a", "c", "d", "e"]);
    assert!(
        Arc::ptr_eq(&odd.targets[1], &all[2]),
        "the listing's own copies"
    );
    cancel.cancel();
    engine.stopped().await;
}

/// A listing rebuilds only what changed: an unchanged target's copy is the previous listing's
/// (the same `Arc`), a target that got a result since has a new one, and the listing says what
/// `statuses` says.
#[tokio::test(start_paused = true)]
async fn a_listing_shares_the_copies_of_targets_that_did_not_change() {
    let (engine, cancel) = start(4);
    let slow = target(
        "a-slow",
        Arc::new(Idle),
        Duration::from_secs(3600),
        0.0,
        1,
        1,
    );
    let fast = target("b-fast", Arc::new(Idle), Duration::from_secs(1), 0.0, 1, 1);
    engine.apply(vec![slow, fast]).unwrap();
    // Both have run once (first runs fall within the interval, the slow one's anywhere in its
    // hour), then the fast one runs again.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let first = engine.listing();
    let again = engine.listing();
    assert!(first.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = engine.listing();
    assert!(
        Arc::ptr_eq(&first[0], &later[0]),
        "a-slow did not run again"
    );
    assert!(!Arc::ptr_eq(&first[1], &later[1]), "b-fast did");
    assert!(later[1].consecutive_successes > first[1].consecutive_successes);
    let statuses = engine.statuses();
    assert_eq!(
        later
            .iter()
            .map(|s| (s.id.clone(), s.state))
            .collect::<Vec<_>>(),
        statuses
            .iter()
            .map(|s| (s.id.clone(), s.state))
            .collect::<Vec<_>>()
    );
    cancel.cancel();
    engine.stopped().await;
}

/// The scheduler's count of probes in flight follows the probe: one while it runs, none after.
#[tokio::test(start_paused = true)]
async fn the_scheduler_counts_the_probes_in_flight() {
    let (engine, cancel) = start(4);
    let (probe, mut starts) = Scripted::new(&[], Duration::from_secs(4));
    engine
        .apply(vec![target(
            "slow",
            probe,
            Duration::from_secs(10),
            0.0,
            1,
            1,
        )])
        .unwrap();
    assert_eq!(engine.workload().in_flight, 0);
    starts.recv().await.unwrap();
    assert_eq!(engine.workload().in_flight, 1);
    // The run takes 4 s; the next one is 10 s after this one began.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(engine.workload().in_flight, 0);
    cancel.cancel();
    engine.stopped().await;
}

/// Answers in turn from a script of (passes, latency).
struct Paced {
    script: Mutex<std::collections::VecDeque<(bool, Duration)>>,
    starts: mpsc::UnboundedSender<Instant>,
}

#[async_trait::async_trait]
impl Probe for Paced {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        let _ = self.starts.send(Instant::now());
        let (ok, latency) = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or((true, Duration::ZERO));
        tokio::time::sleep(latency).await;
        if ok {
            CheckResult::up()
        } else {
            CheckResult::failed(Failure::new(FailureReason::Refused, "scripted failure"))
        }
    }
}

/// A run that overruns its step starts the grid again from its end: slow failures run back to
/// back (each 8 s against a fast interval of 5 s), and once the target passes, its next run is
/// a full interval later, not a catch-up burst towards the old grid.
#[tokio::test(start_paused = true)]
async fn a_run_that_overruns_its_step_restarts_the_grid_without_a_burst() {
    let (engine, cancel) = start(4);
    let (starts_tx, mut starts) = mpsc::unbounded_channel();
    let slow = Duration::from_secs(8);
    let probe = Arc::new(Paced {
        script: Mutex::new(
            [
                (false, slow),
                (false, slow),
                (false, slow),
                (true, Duration::ZERO),
            ]
            .into_iter()
            .collect(),
        ),
        starts: starts_tx,
    });
    let interval = Duration::from_secs(10);
    let spec = target("overrun", probe, interval, 0.0, 1, 5).with_schedule(
        Schedule::try_new(ScheduleSettings {
            interval,
            timeout: Duration::from_secs(9),
            jitter: 0.0,
            fast_interval: Some(Duration::from_secs(5)),
            backoff_jitter: Some(0.0),
            ..ScheduleSettings::default()
        })
        .unwrap(),
    );
    engine.apply(vec![spec]).unwrap();
    let mut at = Vec::new();
    for _ in 0..6 {
        at.push(starts.recv().await.unwrap());
    }
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps[..3],
        [slow, slow, slow],
        "overrunning runs go back to back"
    );
    assert_eq!(
        gaps[3..],
        [interval, interval],
        "then the grid, from the last overrun"
    );
    cancel.cancel();
    engine.stopped().await;
}

/// After a burst, surplus workers leave as they finish, down to twice the minimum, without
/// waiting for the idle timeout: twenty slow first runs at once grow the pool to twenty, and
/// a second after they end (runs go on, instant ones, so no worker ever idles for 30 s) it is
/// back to six for a minimum of three.
#[tokio::test(start_paused = true)]
async fn surplus_workers_leave_right_after_a_burst() {
    let cancel = CancellationToken::new();
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_in_flight: NonZeroUsize::new(64).unwrap(),
            min_workers: 3,
            worker_idle: Duration::from_secs(30),
        },
        ..EngineConfig::default()
    };
    let engine = Engine::start(config, cancel.clone());
    let (starts_tx, mut starts) = mpsc::unbounded_channel();
    let specs: Vec<_> = (0..20)
        .map(|i| {
            let probe = Arc::new(Paced {
                // The first run is held to its deadline (the backstop ends it at 100 ms).
                script: Mutex::new([(true, Duration::from_secs(2))].into_iter().collect()),
                starts: starts_tx.clone(),
            });
            target(
                &format!("burst-{i}"),
                probe,
                Duration::from_secs(10),
                0.0,
                1,
                1,
            )
            .with_schedule(
                Schedule::try_new(ScheduleSettings {
                    interval: Duration::from_millis(100),
                    timeout: Duration::from_millis(50),
                    jitter: 0.0,
                    ..ScheduleSettings::default()
                })
                .unwrap(),
            )
        })
        .collect();
    engine.apply(specs).unwrap();
    for _ in 0..20 {
        starts.recv().await.unwrap();
    }
    assert_eq!(engine.workload().workers, 20, "the burst grew the pool");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.workload().workers, 6);
    cancel.cancel();
    engine.stopped().await;
}

/// The lines of `engine`'s per-target series that name `target`.
fn series_of(engine: &Engine, target: &str) -> Vec<String> {
    let mut text = String::new();
    engine.encode_metrics(&mut text);
    let label = format!("target=\"{target}\"");
    text.lines()
        .filter(|l| l.contains(&label))
        .map(str::to_owned)
        .collect()
}

fn value(lines: &[String], prefix: &str) -> Option<f64> {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn series_leave_with_their_target_and_survive_a_changed_spec() {
    let (engine, cancel) = start(8);
    let (gone, mut gone_starts) = Scripted::new(&[false, false], Duration::from_millis(1));
    let (kept, mut kept_starts) = Scripted::new(&[false, false], Duration::from_millis(1));
    let kept = kept as Arc<dyn Probe>;
    let second = Duration::from_secs(1);
    engine
        .apply(vec![
            target("gone", gone, second, 0.0, 1, 1),
            target("kept", kept.clone(), second, 0.0, 1, 1),
        ])
        .unwrap();
    // Two runs each recorded: the third has started.
    for _ in 0..3 {
        gone_starts.recv().await.unwrap();
        kept_starts.recv().await.unwrap();
    }
    let failures = "probe_failures_total{target=\"kept\",reason=\"refused\"}";
    let lines = series_of(&engine, "kept");
    assert_eq!(value(&lines, failures), Some(2.0), "{lines:#?}");
    assert!(
        value(&lines, "probe_duration_seconds_count{target=\"kept\"}").is_some_and(|n| n >= 2.0),
        "{lines:#?}"
    );
    assert!(!series_of(&engine, "gone").is_empty());

    // `gone` leaves and `kept` changes its interval: it restarts, its series go on.
    engine
        .apply(vec![target("kept", kept, second * 2, 0.0, 1, 1)])
        .unwrap();
    assert_eq!(
        series_of(&engine, "gone"),
        Vec::<String>::new(),
        "a removed target leaves no series"
    );
    let lines = series_of(&engine, "kept");
    assert_eq!(value(&lines, failures), Some(2.0), "{lines:#?}");
    assert_eq!(
        value(&lines, "probe_target_up{target=\"kept\"}"),
        Some(0.0),
        "restarted: PROBING"
    );

    // Without per-target histograms, the target's histogram goes and its counters stay.
    engine.set_per_target_histograms(false);
    let lines = series_of(&engine, "kept");
    assert!(
        lines
            .iter()
            .all(|l| !l.starts_with("probe_duration_seconds")),
        "{lines:#?}"
    );
    kept_starts.recv().await.unwrap();
    kept_starts.recv().await.unwrap();
    let lines = series_of(&engine, "kept");
    assert!(
        lines
            .iter()
            .all(|l| !l.starts_with("probe_duration_seconds")),
        "a run does not bring it back: {lines:#?}"
    );
    assert!(value(&lines, failures).is_some());
    cancel.cancel();
    engine.stopped().await;
}
