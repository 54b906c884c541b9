//! Criterion benchmark: the cost of [`Engine::apply`] with 10k targets.
//!
//! - `apply_new/build`: a fresh engine applies 10k new targets with no-op custom probes; timed is
//!   the `apply` call itself (diffing against an empty set, building every target, queueing the
//!   scheduler inserts);
//! - `apply_new/build_and_schedule`: the same, timed until the scheduler has also processed every
//!   insert. The last target (by id, so its insert is queued last) is a sentinel that is due
//!   within a millisecond and signals when it runs. The runtime's clock is paused, so once the
//!   dispatcher is idle the clock jumps straight to the sentinel's start: the measurement holds
//!   no timer wait, only the work;
//! - `apply_unchanged`: re-applying the same 10k specs to an engine that already runs them (every
//!   target compares equal: the diff cost, nothing restarts).
//!
//! Everything runs on one current-thread runtime; spec vectors are cloned outside the timing.
//!
//! ```text
//! cargo bench --bench scheduler -- --quick
//! ```

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use probe::TargetId;
use probe::health::{Schedule, ScheduleSettings, Thresholds};
use probe::outcome::CheckResult;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Engine, EngineConfig};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Wall-clock time for the measurements: the runtime's clock is paused, so
/// `tokio::time::Instant` (which the workspace's clippy.toml prescribes) would not move.
#[allow(clippy::disallowed_types)]
mod wall {
    use std::time::{Duration, Instant};

    /// Measures elapsed wall-clock time.
    pub struct Stopwatch(Instant);

    impl Stopwatch {
        /// Starts measuring now.
        pub fn start() -> Self {
            Self(Instant::now())
        }

        /// The wall-clock time since [`Stopwatch::start`].
        pub fn elapsed(&self) -> Duration {
            self.0.elapsed()
        }
    }
}
use wall::Stopwatch;

/// Targets per apply, the sentinel included.
const TARGETS: usize = 10_000;

/// Succeeds at once.
struct Noop;

#[async_trait::async_trait]
impl Probe for Noop {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        CheckResult::up()
    }
}

/// Succeeds at once and signals that it ran.
struct Sentinel(Arc<Notify>);

#[async_trait::async_trait]
impl Probe for Sentinel {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        self.0.notify_one();
        CheckResult::up()
    }
}

/// `TARGETS - 1` no-op targets on a 10 s schedule (sharing one probe) plus a sentinel whose id
/// sorts last and which is due within 1 ms. Returns the specs and the sentinel's signal.
fn specs() -> (Vec<TargetSpec>, Arc<Notify>) {
    let schedule = Schedule::try_new(ScheduleSettings {
        interval: Duration::from_secs(10),
        timeout: Duration::from_secs(1),
        jitter: 0.1,
        ..ScheduleSettings::default()
    })
    .expect("valid no-op schedule");
    let noop = CustomProbe::new(Arc::new(Noop));
    let mut specs: Vec<TargetSpec> = (0..TARGETS - 1)
        .map(|i| {
            TargetSpec::new(
                TargetId::new(&format!("target-{i:05}")).expect("valid target id"),
                ProbeSpec::Custom(noop.clone()),
            )
            .with_schedule(schedule)
            .with_thresholds(Thresholds::default())
        })
        .collect();
    let notify = Arc::new(Notify::new());
    specs.push(
        TargetSpec::new(
            TargetId::new("zz-sentinel").expect("valid sentinel id"),
            ProbeSpec::Custom(CustomProbe::new(Arc::new(Sentinel(notify.clone())))),
        )
        .with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval: Duration::from_millis(1),
                timeout: Duration::from_micros(500),
                jitter: 0.0,
                fast_interval: Some(Duration::from_millis(1)),
                ..ScheduleSettings::default()
            })
            .expect("valid sentinel schedule"),
        )
        .with_thresholds(Thresholds::default()),
    );
    (specs, notify)
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("building the current-thread runtime")
}

fn apply(c: &mut Criterion) {
    let runtime = paused_runtime();
    let mut group = c.benchmark_group("apply_10k");
    group.throughput(Throughput::Elements(TARGETS as u64));
    group.sample_size(20);

    group.bench_function("new/build", |b| {
        let (specs, _) = specs();
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let cancel = CancellationToken::new();
                    let engine = Engine::start(EngineConfig::default(), cancel.clone());
                    let specs = specs.clone();
                    let start = Stopwatch::start();
                    let diff = engine.apply(specs).expect("targets without dependencies");
                    total += start.elapsed();
                    assert_eq!(diff.added.len(), TARGETS, "every target is new");
                    cancel.cancel();
                    engine.stopped().await;
                }
                total
            })
        });
    });

    group.bench_function("new/build_and_schedule", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // A fresh sentinel each time, so no stored permit ends the wait early.
                    let (specs, sentinel) = specs();
                    let cancel = CancellationToken::new();
                    let engine = Engine::start(EngineConfig::default(), cancel.clone());
                    let start = Stopwatch::start();
                    engine.apply(specs).expect("targets without dependencies");
                    sentinel.notified().await;
                    total += start.elapsed();
                    cancel.cancel();
                    engine.stopped().await;
                }
                total
            })
        });
    });

    group.bench_function("unchanged", |b| {
        let (specs, sentinel) = specs();
        let cancel = CancellationToken::new();
        let engine = runtime.block_on(async {
            let engine = Engine::start(EngineConfig::default(), cancel.clone());
            engine
                .apply(specs.clone())
                .expect("targets without dependencies");
            sentinel.notified().await;
            engine
        });
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let specs = specs.clone();
                let start = Stopwatch::start();
                let diff = engine.apply(specs).expect("targets without dependencies");
                total += start.elapsed();
                assert_eq!(diff.unchanged, TARGETS, "every target is unchanged");
            }
            total
        });
        cancel.cancel();
        runtime.block_on(engine.stopped());
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = apply
}
criterion_main!(benches);
