//! Passive health in the engine on paused tokio time: pools eject members on real traffic, hold
//! them DOWN, readmit them through recovery and ramp them back; circuit breakers make `pick`
//! fail fast; real traffic can stand in for active probes.

#[path = "support/switch.rs"]
mod switch;

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use probe::TargetId;
use probe::engine::{CircuitCommand, Engine, EngineConfig, EngineError, Event, PickError};
use probe::graph::{Dependency, NodeKind, NodeSpec};
use probe::health::{Cause, HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::passive::breaker::{BreakerConfig, CircuitState, Window};
use probe::passive::outlier::{OutlierConfig, OutlierSettings};
use probe::passive::recovery::{RecoveryConfig, RecoveryPhase, RecoverySettings};
use probe::passive::slow_start::SlowStartConfig;
use probe::passive::{Call, CallOutcome, PoolPolicy};
use probe::scheduler::SchedulerConfig;
use probe::tier::{CustomProbe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::topology::{Topology, TopologyError};
use switch::Switch;
use tokio::sync::broadcast::Receiver;
use tokio_util::sync::CancellationToken;

fn id(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

fn target(name: &str, probe: Arc<Switch>) -> TargetSpec {
    TargetSpec::new(id(name), ProbeSpec::Custom(CustomProbe::new(probe)))
        .with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval: SECOND,
                timeout: SECOND / 2,
                jitter: 0.0,
                backoff_jitter: Some(0.0),
                ..ScheduleSettings::default()
            })
            .unwrap(),
        )
        .with_thresholds(Thresholds::new(
            NonZeroU32::new(1).unwrap(),
            NonZeroU32::new(3).unwrap(),
        ))
        .with_flap(None)
}

fn start() -> (Engine, CancellationToken) {
    let cancel = CancellationToken::new();
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_in_flight: NonZeroUsize::new(8).unwrap(),
            min_workers: 2,
            worker_idle: Duration::from_secs(30),
        },
        history: 4,
        ..EngineConfig::default()
    };
    (Engine::start(config, cancel.clone()), cancel)
}

/// Ejections of 30 s, a 10 s cool-down, 2 passes to return, a 60 s linear ramp from 0.1.
fn policy() -> PoolPolicy {
    PoolPolicy {
        outlier: OutlierConfig::try_new(OutlierSettings {
            max_ejection_percent: 50,
            ..OutlierSettings::default()
        })
        .unwrap(),
        recovery: RecoveryConfig::try_new(RecoverySettings {
            cooldown: Duration::from_secs(10),
            passes: 2,
            ..RecoverySettings::default()
        })
        .unwrap(),
        slow_start: Some(SlowStartConfig::try_new(Duration::from_secs(60), 0.1, 1.0).unwrap()),
    }
}

/// Pool `api` over `a`, `b` and `c`.
fn pool(switches: &[Arc<Switch>], targets: impl Fn(TargetSpec) -> TargetSpec) -> Topology {
    let names = ["a", "b", "c"];
    Topology {
        targets: names
            .iter()
            .zip(switches)
            .map(|(n, s)| targets(target(n, s.clone())))
            .collect(),
        nodes: vec![NodeSpec {
            id: id("api"),
            kind: NodeKind::Group,
            depends_on: names
                .iter()
                .map(|n| Dependency::new(id(n), "test"))
                .collect(),
        }],
        pools: BTreeMap::from([(id("api"), policy())]),
        ..Topology::default()
    }
}

fn switches() -> Vec<Arc<Switch>> {
    (0..3).map(|_| Arc::new(Switch::default())).collect()
}

async fn wait_for(events: &mut Receiver<Event>, name: &str, state: HealthState) -> Event {
    loop {
        let event = events.recv().await.unwrap();
        if event.target.as_str() == name && event.to == state {
            return event;
        }
    }
}

async fn all_up(engine: &Engine, events: &mut Receiver<Event>) {
    for name in ["a", "b", "c"] {
        if engine.status(&id(name)).unwrap().state != HealthState::Up {
            wait_for(events, name, HealthState::Up).await;
        }
    }
}

fn weight(engine: &Engine, name: &str) -> f64 {
    engine.status(&id(name)).unwrap().pool.unwrap().weight
}

fn bad_gateway() -> Call {
    Call::http(503, Duration::from_millis(2))
}

/// The pool of `a`, `b` and `c` (as `tune` adjusts it) with every member UP, then `b` ejected by
/// three gateway failures.
async fn with_b_ejected(
    tune: impl FnOnce(&mut Topology),
) -> (Engine, CancellationToken, Receiver<Event>, Vec<Arc<Switch>>) {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    let mut topology = pool(&switches, |t| t);
    tune(&mut topology);
    engine.apply(topology).unwrap();
    all_up(&engine, &mut events).await;
    for _ in 0..3 {
        engine.pools().report(&id("b"), &bad_gateway()).unwrap();
    }
    (engine, cancel, events, switches)
}

#[tokio::test(start_paused = true)]
async fn a_failing_member_is_ejected_at_once_held_down_and_ramped_back() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    engine.apply(pool(&switches, |t| t)).unwrap();
    all_up(&engine, &mut events).await;
    let score = |engine: &Engine| engine.graph().status(&id("api")).unwrap().score;
    assert_eq!(score(&engine), Some(1.0));

    // Three gateway failures eject `a` there and then, while its active probe still passes.
    engine.pools().report(&id("a"), &bad_gateway()).unwrap();
    engine.pools().report(&id("a"), &bad_gateway()).unwrap();
    assert_eq!(engine.status(&id("a")).unwrap().state, HealthState::Up);
    engine.pools().report(&id("a"), &bad_gateway()).unwrap();
    let ejected_at = tokio::time::Instant::now();
    let status = engine.status(&id("a")).unwrap();
    assert_eq!(status.state, HealthState::Down);
    let member = status.pool.unwrap();
    assert!(member.ejected);
    assert_eq!(member.weight, 0.0);
    let ejection = member.ejection.unwrap();
    assert_eq!(ejection.reason.as_str(), "consecutive_gateway_failures");
    assert_eq!(ejection.until, Some(ejected_at + Duration::from_secs(30)));
    let event = wait_for(&mut events, "a", HealthState::Down).await;
    assert_eq!(event.cause, Cause::Ejected);
    // The graph sees it DOWN: the pool's score drops by a third right away.
    assert!((score(&engine).unwrap() - 2.0 / 3.0).abs() < 1e-9);

    // No call goes to it while it is out.
    for _ in 0..200 {
        let lease = engine.pools().pick(&id("api"), &[]).unwrap();
        assert_ne!(lease.id().as_str(), "a");
        lease.finish(&Call::http(200, Duration::from_millis(1)));
    }

    // Passing probes do not bring it back before its ejection time and cool-down (40 s) and two
    // passes on probation.
    tokio::time::sleep(Duration::from_secs(39)).await;
    assert_eq!(engine.status(&id("a")).unwrap().state, HealthState::Down);
    let back = wait_for(&mut events, "a", HealthState::Probing).await;
    assert_eq!(back.cause, Cause::Readmitted);
    let returned = tokio::time::Instant::now();
    let took = returned - ejected_at;
    assert!(
        took >= Duration::from_secs(40) && took <= Duration::from_secs(42),
        "{took:?}"
    );
    wait_for(&mut events, "a", HealthState::Up).await;

    // Its weight ramps from 0.1 to 1 over 60 s.
    assert!(
        (weight(&engine, "a") - 0.1).abs() < 0.02,
        "{}",
        weight(&engine, "a")
    );
    tokio::time::sleep_until(returned + Duration::from_secs(30)).await;
    assert!((weight(&engine, "a") - 0.5).abs() < 1e-6);
    tokio::time::sleep_until(returned + Duration::from_secs(45)).await;
    assert!((weight(&engine, "a") - 0.75).abs() < 1e-6);
    tokio::time::sleep_until(returned + Duration::from_secs(60)).await;
    assert_eq!(weight(&engine, "a"), 1.0);
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_failing_on_probation_relapses_and_an_operator_can_clear_it() {
    let (engine, cancel, mut events, switches) = with_b_ejected(|_| {}).await;
    // Its probe fails too: on probation (after 40 s) it relapses into a doubled cool-down.
    switches[1].down.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(45)).await;
    let member = engine.status(&id("b")).unwrap().pool.unwrap();
    assert_eq!(member.phase.as_str(), "cooling_down");
    assert_eq!(
        engine.pools().clear_ejection(&id("a")),
        Err(EngineError::NotEjected(id("a")))
    );

    // An operator puts it back: PROBING, then its results decide (it still fails: DOWN).
    engine.pools().clear_ejection(&id("b")).unwrap();
    let status = engine.status(&id("b")).unwrap();
    assert_eq!(status.state, HealthState::Probing);
    assert!(!status.pool.unwrap().ejected);
    switches[1].down.store(false, Ordering::SeqCst);
    wait_for(&mut events, "b", HealthState::Up).await;
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn at_most_max_ejection_percent_is_ejected() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    engine.apply(pool(&switches, |t| t)).unwrap();
    all_up(&engine, &mut events).await;
    // 50% of 3 members is 1: the second failing member stays in, and keeps getting traffic.
    for name in ["a", "b"] {
        for _ in 0..3 {
            engine.pools().report(&id(name), &bad_gateway()).unwrap();
        }
    }
    assert!(engine.status(&id("a")).unwrap().pool.unwrap().ejected);
    let b = engine.status(&id("b")).unwrap();
    assert!(!b.pool.unwrap().ejected);
    assert_eq!(b.state, HealthState::Up);
    cancel.cancel();
    engine.stopped().await;
}

fn breaker() -> BreakerConfig {
    BreakerConfig::builder()
        .window(Window::Count(NonZeroUsize::new(4).unwrap()))
        .minimum_calls(4)
        .open_for(Duration::from_secs(10))
        .half_open_calls(1)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn open_circuits_make_pick_skip_members_then_fail_fast() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    engine
        .apply(pool(&switches, |t| t.with_circuit_breaker(Some(breaker()))))
        .unwrap();
    all_up(&engine, &mut events).await;
    // Open every circuit by operator command, one by one: pick avoids the open ones.
    engine
        .pools()
        .command_circuit(&id("a"), CircuitCommand::ForceOpen)
        .unwrap();
    engine
        .pools()
        .command_circuit(&id("b"), CircuitCommand::ForceOpen)
        .unwrap();
    for _ in 0..50 {
        assert_eq!(
            engine.pools().pick(&id("api"), &[]).unwrap().id().as_str(),
            "c"
        );
    }
    // `c` opens on its own: half of its window of four calls timed out (never two in a row, so
    // its pool does not eject it).
    for timed_out in [true, false, true, false] {
        let lease = engine.pools().pick(&id("api"), &[]).unwrap();
        lease.finish(&if timed_out {
            Call {
                outcome: CallOutcome::Timeout,
                latency: Duration::from_secs(1),
            }
        } else {
            Call::http(200, Duration::from_millis(1))
        });
    }
    let circuit = engine.status(&id("c")).unwrap().circuit.unwrap();
    assert_eq!(circuit.state, CircuitState::Open);
    match engine.pools().pick(&id("api"), &[]) {
        Err(PickError::Unavailable {
            rejected,
            retry_after,
            ..
        }) => {
            assert_eq!(rejected, 3);
            assert_eq!(retry_after, Some(Duration::from_secs(10)));
        }
        other => panic!("expected fail-fast, got {other:?}"),
    }
    // Ten seconds on, `c` is half-open with one trial call: a lease dropped unfinished gives
    // its slot back, so the trial can still be made.
    tokio::time::sleep(Duration::from_secs(10)).await;
    drop(engine.pools().pick(&id("api"), &[]).unwrap());
    let trial = engine.pools().pick(&id("api"), &[]).unwrap();
    assert!(
        engine.pools().pick(&id("api"), &[]).is_err(),
        "one trial at a time"
    );
    trial.finish(&Call::http(200, Duration::from_millis(1)));
    let circuit = engine.status(&id("c")).unwrap().circuit.unwrap();
    assert_eq!(circuit.state, CircuitState::Closed);

    assert_eq!(
        engine
            .pools()
            .command_circuit(&id("a"), CircuitCommand::Reset),
        Ok(CircuitState::Closed)
    );
    assert_eq!(
        engine.pools().pick(&id("a"), &[]).unwrap_err(),
        PickError::NotAPool(id("a"))
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn pick_leaves_out_the_excluded_member_and_down_members() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    engine.apply(pool(&switches, |t| t)).unwrap();
    all_up(&engine, &mut events).await;
    for _ in 0..50 {
        let lease = engine.pools().pick(&id("api"), &[id("a")]).unwrap();
        assert_ne!(lease.id().as_str(), "a");
    }
    // Active probes take `b` DOWN: it is skipped without being ejected.
    switches[1].down.store(true, Ordering::SeqCst);
    wait_for(&mut events, "b", HealthState::Down).await;
    assert!(!engine.status(&id("b")).unwrap().pool.unwrap().ejected);
    for _ in 0..50 {
        let lease = engine.pools().pick(&id("api"), &[id("a")]).unwrap();
        assert_eq!(lease.id().as_str(), "c");
    }
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn real_traffic_stands_in_for_active_probes() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    engine
        .apply(pool(&switches, |t| {
            t.with_skip_active_after(NonZeroU32::new(5))
        }))
        .unwrap();
    all_up(&engine, &mut events).await;
    let runs = |i: usize| switches[i].runs.load(Ordering::SeqCst);
    // `a` gets 5 successful calls every second: its probe stops running. `b` gets 4: it does not.
    let before = (runs(0), runs(1));
    let ok = Call::http(200, Duration::from_millis(1));
    for _ in 0..10 {
        for _ in 0..5 {
            engine.pools().report(&id("a"), &ok).unwrap();
        }
        for _ in 0..4 {
            engine.pools().report(&id("b"), &ok).unwrap();
        }
        tokio::time::sleep(SECOND).await;
    }
    assert!(
        runs(0) - before.0 <= 1,
        "a probed {} times",
        runs(0) - before.0
    );
    assert!(
        runs(1) - before.1 >= 9,
        "b probed {} times",
        runs(1) - before.1
    );
    // A failure among the successes brings the probe back at once.
    let before = runs(0);
    for _ in 0..5 {
        engine.pools().report(&id("a"), &ok).unwrap();
    }
    engine
        .pools()
        .report(&id("a"), &Call::http(500, SECOND))
        .unwrap();
    tokio::time::sleep(SECOND / 10).await;
    assert_eq!(runs(0), before + 1, "re-probed on the failure");
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn pools_must_be_groups_and_leaving_a_pool_readmits() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    let mut topology = pool(&switches, |t| t);
    topology.pools.insert(id("a"), policy());
    assert_eq!(
        engine.apply(topology.clone()),
        Err(TopologyError::PoolNotAGroup(id("a")))
    );
    topology.pools.remove(&id("a"));
    engine.apply(topology.clone()).unwrap();
    all_up(&engine, &mut events).await;
    for _ in 0..3 {
        engine.pools().report(&id("c"), &bad_gateway()).unwrap();
    }
    assert_eq!(engine.status(&id("c")).unwrap().state, HealthState::Down);
    // The group stops being a pool: nothing holds `c` out any more.
    topology.pools.clear();
    engine.apply(topology).unwrap();
    let status = engine.status(&id("c")).unwrap();
    assert_eq!(status.state, HealthState::Probing);
    assert!(status.pool.is_none());
    cancel.cancel();
    engine.stopped().await;
}

/// Waits on the engine's clock until `name` has failed `n` times in a row.
async fn failures(engine: &Engine, name: &str, n: u32) {
    while engine.status(&id(name)).unwrap().consecutive_failures < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many of 300 picks from the pool go to `name`.
fn picks_of(engine: &Engine, name: &str) -> usize {
    (0..300)
        .filter(|_| {
            let lease = engine.pools().pick(&id("api"), &[]).unwrap();
            let hit = lease.id().as_str() == name;
            lease.finish(&Call::http(200, Duration::from_millis(1)));
            hit
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_failure_being_confirmed_is_not_a_verdict() {
    let (engine, cancel) = start();
    let mut events = engine.subscribe();
    let switches = switches();
    let mut topology = pool(&switches, |t| {
        t.with_thresholds(Thresholds::new(
            NonZeroU32::new(2).unwrap(),
            NonZeroU32::new(3).unwrap(),
        ))
    });
    // `a` is critical to the pool, so a DOWN `a` marks it.
    topology.nodes[0].depends_on[0].critical = true;
    engine.apply(topology).unwrap();
    all_up(&engine, &mut events).await;

    let graph_state = |engine: &Engine| engine.graph().status(&id("a")).unwrap().state;
    let dependency_down =
        |engine: &Engine| engine.graph().status(&id("api")).unwrap().dependency_down;
    switches[0].down.store(true, Ordering::SeqCst);
    for n in 1..=2 {
        failures(&engine, "a", n).await;
        let status = engine.status(&id("a")).unwrap();
        assert_eq!(status.state, HealthState::Up, "after {n} failures");
        let pending = status.pending.expect("a pending change");
        assert_eq!(
            (pending.toward, pending.count, pending.of),
            (HealthState::Down, n, 3)
        );
        assert!(engine.readiness().ready, "ready after {n} failures");
        assert_eq!(graph_state(&engine), Some(HealthState::Up));
        assert!(!dependency_down(&engine));
        assert!(picks_of(&engine, "a") > 0, "picked after {n} failures");
    }

    // The third failure is the verdict, everywhere at once.
    failures(&engine, "a", 3).await;
    let status = engine.status(&id("a")).unwrap();
    assert_eq!((status.state, status.pending), (HealthState::Down, None));
    let readiness = engine.readiness();
    assert!(!readiness.ready);
    assert!(readiness.reason.unwrap().contains('a'));
    assert_eq!(graph_state(&engine), Some(HealthState::Down));
    assert!(dependency_down(&engine));
    assert_eq!(picks_of(&engine, "a"), 0);
    let event = wait_for(&mut events, "a", HealthState::Down).await;
    assert_eq!((event.from, event.cause), (HealthState::Up, Cause::Results));

    // On the way back, a DOWN target collecting passes stays DOWN until `rise`.
    switches[0].down.store(false, Ordering::SeqCst);
    while engine.status(&id("a")).unwrap().consecutive_successes < 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = engine.status(&id("a")).unwrap();
    assert_eq!(status.state, HealthState::Down);
    let pending = status.pending.expect("a pending change");
    assert_eq!(
        (pending.toward, pending.count, pending.of),
        (HealthState::Up, 1, 2)
    );
    assert!(!engine.readiness().ready);
    assert_eq!(picks_of(&engine, "a"), 0);
    let event = wait_for(&mut events, "a", HealthState::Up).await;
    assert_eq!(event.from, HealthState::Down);
    assert!(engine.readiness().ready);
    cancel.cancel();
    engine.stopped().await;
}

/// Polls the engine's clock (every 10 ms) until `name`'s recovery phase is `want`; returns
/// the phase.
async fn phase(engine: &Engine, name: &str, want: &str) -> RecoveryPhase {
    loop {
        let phase = engine.status(&id(name)).unwrap().pool.unwrap().phase;
        if phase.as_str() == want {
            return phase;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// When a phase ends.
fn until(phase: RecoveryPhase) -> tokio::time::Instant {
    match phase {
        RecoveryPhase::Ejected { until } | RecoveryPhase::CoolingDown { until } => until,
        other => panic!("no end to {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_relapse_on_probation_doubles_the_cooldown() {
    let (engine, cancel, _, switches) = with_b_ejected(|_| {}).await;
    switches[1].down.store(true, Ordering::SeqCst);
    let ejected_until = until(engine.status(&id("b")).unwrap().pool.unwrap().phase);
    // After its 30 s ejection, the first cool-down: 10 s.
    let first = until(phase(&engine, "b", "cooling_down").await);
    assert_eq!(first - ejected_until, Duration::from_secs(10));
    // On probation its probe fails: back to a cool-down twice as long, from the relapse.
    phase(&engine, "b", "probation").await;
    let second = until(phase(&engine, "b", "cooling_down").await);
    let left = second - tokio::time::Instant::now();
    assert!(
        left > Duration::from_millis(19_980) && left <= Duration::from_secs(20),
        "{left:?}"
    );
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_ejection_holds_until_an_operator_clears_it() {
    // The first ejection without a stable spell is permanent.
    let (engine, cancel, mut events, _) = with_b_ejected(|topology| {
        topology.pools.get_mut(&id("api")).unwrap().recovery =
            RecoveryConfig::try_new(RecoverySettings {
                permanent_after: NonZeroU32::new(1),
                ..RecoverySettings::default()
            })
            .unwrap();
    })
    .await;
    let member = engine.status(&id("b")).unwrap().pool.unwrap();
    assert!(
        matches!(member.phase, RecoveryPhase::Permanent(_)),
        "{:?}",
        member.phase
    );
    // Its probes pass, and an hour later it is still out.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let status = engine.status(&id("b")).unwrap();
    assert_eq!(status.state, HealthState::Down);
    let member = status.pool.unwrap();
    assert!(member.ejected && member.weight == 0.0, "{member:?}");
    assert!(matches!(member.phase, RecoveryPhase::Permanent(_)));

    // Cleared: back through PROBING, then UP, and ramped from the slow start's 0.1.
    engine.pools().clear_ejection(&id("b")).unwrap();
    assert_eq!(engine.status(&id("b")).unwrap().state, HealthState::Probing);
    wait_for(&mut events, "b", HealthState::Up).await;
    let member = engine.status(&id("b")).unwrap().pool.unwrap();
    assert!(!member.ejected);
    assert!(member.weight < 0.2, "{member:?}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(weight(&engine, "b"), 1.0);
    cancel.cancel();
    engine.stopped().await;
}

/// Eight threads pick and report at once while the pool changes under them: a member taken out
/// of the pool is never picked once its removal is published (the apply returned), and every
/// pick names a member of the pool as it was.
#[test]
fn picks_under_eight_threads_never_return_a_removed_member() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (engine, cancel) = runtime.block_on(async { start() });
    let switches = switches();
    let without_policy = |t: TargetSpec| {
        // Hours between runs: the probes stay out of the picture.
        t.with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval: 3600 * SECOND,
                timeout: SECOND,
                jitter: 0.0,
                backoff_jitter: Some(0.0),
                ..ScheduleSettings::default()
            })
            .unwrap(),
        )
    };
    runtime.block_on(async { engine.apply(pool(&switches, without_policy)).unwrap() });
    let removed = std::sync::atomic::AtomicBool::new(false);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let picked = AtomicUsize::new(0);
    let picks_reach = |n: usize| {
        while picked.load(Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    };
    let ok = Call::http(200, Duration::from_millis(2));
    let (before, after) = std::thread::scope(|scope| {
        let pickers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let _runtime = runtime.enter();
                    let (mut before, mut after) = (BTreeMap::<String, u32>::new(), 0);
                    while !stop.load(Ordering::SeqCst) {
                        // Read the flag before the pick: a pick that starts after the removal
                        // was published must not see the removed member.
                        let published = removed.load(Ordering::SeqCst);
                        let lease = engine.pools().pick(&id("api"), &[]).unwrap();
                        let name = lease.id().as_str().to_owned();
                        lease.finish(&ok);
                        picked.fetch_add(1, Ordering::SeqCst);
                        if published {
                            assert_ne!(name, "c", "picked a member after its removal");
                            after += 1;
                        } else {
                            *before.entry(name).or_default() += 1;
                        }
                    }
                    (before, after)
                })
            })
            .collect();
        // A thousand picks, then `c` leaves the pool (it stays a target), then a thousand more.
        picks_reach(1000);
        let mut smaller = pool(&switches, without_policy);
        smaller.nodes[0]
            .depends_on
            .retain(|d| d.target.as_str() != "c");
        runtime.block_on(async { engine.apply(smaller).unwrap() });
        removed.store(true, Ordering::SeqCst);
        picks_reach(picked.load(Ordering::SeqCst) + 1000);
        stop.store(true, Ordering::SeqCst);
        let mut before = BTreeMap::<String, u32>::new();
        let mut after = 0;
        for picker in pickers {
            let (b, a) = picker.join().unwrap();
            for (name, n) in b {
                *before.entry(name).or_default() += n;
            }
            after += a;
        }
        (before, after)
    });
    assert_eq!(
        before.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "c"],
        "before the removal every member is picked"
    );
    assert!(after > 0, "picks went on after the removal");
    cancel.cancel();
    runtime.block_on(engine.stopped());
}
