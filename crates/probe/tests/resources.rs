//! The engine's own resource faults are not its targets': this process runs short of file
//! descriptors on purpose (a test binary of its own, so no other test shares its limit), while
//! probes that hang hold descriptors, and healthy targets must stay UP.

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use probe::engine::{Engine, EngineConfig};
use probe::health::Thresholds;
use probe::scheduler::SchedulerConfig;
use probe::tier::tcp::TcpExpect;
use probe::topology::TargetSpec;
use probe::{Address, HealthState, ProbeSpec, Schedule, ScheduleSettings, TargetId, TcpSpec};
use tokio_util::sync::CancellationToken;

/// Counts `probe_engine_resource_errors_total` by kind; every other metric is a no-op.
#[derive(Clone, Default)]
struct Faults(Arc<parking_lot::Mutex<HashMap<String, Arc<AtomicU64>>>>);

impl Faults {
    /// The count of `kind`.
    fn of(&self, kind: &str) -> u64 {
        self.0
            .lock()
            .get(kind)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

impl Recorder for Faults {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != "probe_engine_resource_errors_total" {
            return Counter::noop();
        }
        let kind = key
            .labels()
            .find(|l| l.key() == "kind")
            .map(|l| l.value().to_owned())
            .unwrap_or_default();
        Counter::from_arc(self.0.lock().entry(kind).or_default().clone())
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Lowers the soft `RLIMIT_NOFILE` of this process to `limit`.
fn set_soft_limit(limit: u64) {
    let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
    rlimit::Resource::NOFILE.set(limit, hard).unwrap();
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn spec(id: &str, tcp: TcpSpec, interval: Duration, timeout: Duration) -> TargetSpec {
    TargetSpec::new(TargetId::new(id).unwrap(), ProbeSpec::Tcp(tcp))
        .with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval,
                timeout,
                jitter: 0.1,
                ..ScheduleSettings::default()
            })
            .unwrap(),
        )
        .with_thresholds(Thresholds::new(NonZeroU32::MIN, NonZeroU32::MIN))
        .with_flap(None)
}

#[test]
fn running_out_of_descriptors_is_never_blamed_on_a_target() {
    let faults = Faults::default();
    metrics::set_global_recorder(faults.clone()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A listener that accepts and drops (its accepts may fail for want of descriptors too:
        // the kernel completes the handshake first, so the probe still connects), and one that
        // accepts and never answers, so that its probes hold their descriptors until timeout.
        let healthy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let healthy_addr = healthy.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                if healthy.accept().await.is_err() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                match silent.accept().await {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });

        let cancel = CancellationToken::new();
        let engine = Engine::start(
            EngineConfig {
                scheduler: SchedulerConfig {
                    max_in_flight: NonZeroUsize::new(512).unwrap(),
                    ..SchedulerConfig::default()
                },
                // Off, so that deferred timeouts cannot hide anything: every failure counts.
                self_health: None,
                ..EngineConfig::default()
            },
            cancel.clone(),
        );
        let mut specs: Vec<TargetSpec> = (0..20)
            .map(|i| {
                spec(
                    &format!("healthy-{i:02}"),
                    TcpSpec::connect(Address::Socket(healthy_addr)),
                    Duration::from_millis(200),
                    Duration::from_millis(150),
                )
            })
            .collect();
        let mut events = engine.subscribe();
        engine.apply(specs.clone()).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while engine.statuses().iter().any(|s| s.state != HealthState::Up) {
            assert!(tokio::time::Instant::now() < deadline, "never all UP");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Now the limit: the descriptors open plus 40, while 120 probes hang for 2 s each.
        let limit = open_fds() + 40;
        set_soft_limit(limit);
        specs.extend((0..120).map(|i| {
            spec(
                &format!("hang-{i:03}"),
                TcpSpec::connect(Address::Socket(silent_addr))
                    .with_send(b"PING\r\n".to_vec())
                    .with_expect(TcpExpect::Contains(b"PONG".to_vec())),
                Duration::from_secs(3),
                Duration::from_secs(2),
            )
        }));
        engine.apply(specs).unwrap();
        tokio::time::sleep(Duration::from_secs(6)).await;

        assert!(
            faults.of("descriptors") > 0,
            "probe_engine_resource_errors_total{{kind=\"descriptors\"}} never rose: the \
             descriptors never ran out, and the test proves nothing"
        );
        while let Ok(event) = events.try_recv() {
            assert!(
                !(event.target.as_str().starts_with("healthy") && event.to != HealthState::Up),
                "a healthy target was blamed: {event:?}"
            );
        }
        for status in engine.statuses() {
            if status.id.as_str().starts_with("healthy") {
                assert_eq!(status.state, HealthState::Up, "{status:?}");
                assert_eq!(status.last_failure, None, "{status:?}");
            } else {
                // The hanging targets fail for real (their timeouts), never for the engine.
                if let Some(failure) = &status.last_failure {
                    assert!(
                        !failure.detail.contains("Too many open files"),
                        "{status:?}"
                    );
                }
            }
        }
        cancel.cancel();
        engine.stopped().await;
    });
}
