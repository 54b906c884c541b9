//! Criterion benchmark: writing the per-target series at scrape time
//! ([`Engine::encode_metrics`]), for 10k and 100k targets that have each run and failed once
//! (so each has `probe_success`, `probe_target_up`, a failure counter and, when on, its
//! duration histogram), with and without per-target histograms.
//!
//! The targets run no-op custom probes on a paused clock: one interval is advanced so that every
//! target ran, then the clock stays still, and only the encoding is timed.
//!
//! ```text
//! cargo bench --bench metrics -- --quick
//! ```

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use probe::TargetId;
use probe::health::{Schedule, ScheduleSettings};
use probe::outcome::{CheckResult, Failure, FailureReason};
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Engine, EngineConfig};
use tokio_util::sync::CancellationToken;

/// Fails at once: a failure counter per target, as a fleet with some trouble has.
struct Refused;

#[async_trait::async_trait]
impl Probe for Refused {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        CheckResult::failed(Failure::new(FailureReason::Refused, "refused"))
    }
}

/// An engine whose `targets` targets have each run once.
fn engine(runtime: &tokio::runtime::Runtime, targets: usize, histograms: bool) -> Engine {
    runtime.block_on(async {
        let engine = Engine::start(EngineConfig::default(), CancellationToken::new());
        engine.set_per_target_histograms(histograms);
        let probe = ProbeSpec::Custom(CustomProbe::new(Arc::new(Refused)));
        let schedule = Schedule::try_new(ScheduleSettings {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            ..ScheduleSettings::default()
        })
        .expect("a valid schedule");
        let specs: Vec<TargetSpec> = (0..targets)
            .map(|i| {
                TargetSpec::new(
                    TargetId::new(&format!("target-{i:06}")).expect("a valid id"),
                    probe.clone(),
                )
                .with_schedule(schedule)
            })
            .collect();
        engine.apply(specs).expect("the targets apply");
        // Every first run falls within one interval (plus jitter).
        tokio::time::sleep(Duration::from_secs(12)).await;
        engine
    })
}

fn encode(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("metrics/encode");
    group.sample_size(10);
    for targets in [10_000, 100_000] {
        for histograms in [true, false] {
            let engine = engine(&runtime, targets, histograms);
            let mut text = String::new();
            engine.encode_metrics(&mut text);
            println!(
                "{targets} targets, per-target histograms {histograms}: {} bytes, {} lines",
                text.len(),
                text.lines().count()
            );
            group.throughput(Throughput::Elements(targets as u64));
            let name = if histograms {
                "histograms"
            } else {
                "no_histograms"
            };
            group.bench_with_input(BenchmarkId::new(name, targets), &engine, |b, engine| {
                b.iter(|| {
                    let mut out = String::with_capacity(text.len());
                    engine.encode_metrics(&mut out);
                    out
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
