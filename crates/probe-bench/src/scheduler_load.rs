//! Load harness: scheduling lag, spread and memory of the engine with 100k no-op targets.
//!
//! ```text
//! probe-bench scheduler-load [--targets 100000] [--interval-s 10]
//!     [--intervals 3] [--jitter 0.1] [--threads 2] [--history 32] [--metrics full|lag]
//!     [--upkeep-s 5] [--scenario scheduler]
//! ```
//!
//! Every target runs a no-op custom probe (one shared instance that returns `Ok` at once) on a
//! `--interval-s` schedule with `--jitter`; the fast interval is set to the interval, so a new
//! target does not run at twice the rate while PROBING and the start rate is uniform. The harness
//! runs for `--intervals` intervals and prints:
//!
//! - **lag**: `probe_scheduler_lag_seconds` (planned vs actual start of every run) rendered by the
//!   Prometheus recorder as a summary with quantiles 0.5, 0.99, 0.999 and 1 (the max, within the
//!   sketch's accuracy); targets p99 <= 10 ms. With `--metrics lag` the samples taken once every
//!   target has run twice are also summarised apart (`lag_steady_*`): start-up (the insertions,
//!   every first run and every PROBING -> UP transition) and the steady state are different
//!   loads;
//! - **memory**: `VmRSS` from `/proc/self/status` before the engine and the specs exist, and once
//!   every target has run at least twice (every target UP with `rise = 2`, checked after
//!   `interval * (2 + jitter)`), divided by the target count; target <= 1024 bytes per target.
//!   The RSS at the end is printed too. A target's result history (`--history`, 16 bytes a
//!   result) keeps growing until it is full, so the steady-state figure is higher: run
//!   `--intervals` above the history length to see it;
//! - **spread**: the probe counts starts per 100 ms bucket (an atomic array indexed by
//!   `tokio::time::Instant` since the start); the busiest bucket is compared with the mean over
//!   the steady part (from one interval after the start to the end);
//! - runs, and CPU seconds and microseconds per run (`/proc/self/stat`).
//!
//! `--metrics full` (default) installs the Prometheus recorder for every process-wide metric,
//! configured like the daemon (`probe_fleet_duration_seconds` as a bucketed histogram) except
//! that summaries are the default, so the lag renders as one. `--metrics lag` passes only the
//! lag histogram to Prometheus. The per-target series are the engine's own either way (counted
//! in each target, written at scrape time), so RSS includes them in both modes. Upkeep (draining
//! histogram samples into summaries and buckets) runs every `--upkeep-s` seconds (default 5, as
//! the exporter's own task would; 0 = never, so samples pile up until the final render, as with
//! a recorder that nobody scrapes), on its own OS thread, off the runtime's workers.
//!
//! Every figure is also printed as a line `RESULT scenario=<--scenario, default scheduler>
//! metric=<name> value=<number> unit=<unit>` for `scripts/bench`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};
use probe::TargetId;
use probe::health::{Schedule, ScheduleSettings, Thresholds};
use probe::outcome::CheckResult;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Engine, EngineConfig};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, TICKS_PER_SEC};

const LAG: &str = "probe_scheduler_lag_seconds";
const BUCKET: Duration = Duration::from_millis(100);

/// What the Prometheus recorder is given.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MetricsMode {
    /// Every metric, configured like the daemon's: RSS includes the per-target series.
    Full,
    /// The scheduler lag only: RSS is the engine's own footprint.
    Lag,
}

/// Flags of `probe-bench scheduler-load`.
#[derive(clap::Args)]
pub struct Args {
    /// No-op targets.
    #[arg(long, default_value_t = 100_000)]
    targets: usize,
    /// Each target's interval, in seconds.
    #[arg(long = "interval-s", value_name = "S", default_value = "10", value_parser = support::secs)]
    interval: Duration,
    /// How many intervals the run lasts (at least 3: every target runs twice, then the steady
    /// state).
    #[arg(long, default_value_t = 3)]
    intervals: u32,
    /// Start jitter, as a fraction of the interval.
    #[arg(long, default_value_t = 0.1)]
    jitter: f64,
    /// Worker threads of the tokio runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Results kept per target (16 bytes each).
    #[arg(long, default_value_t = EngineConfig::default().history)]
    history: usize,
    /// What the Prometheus recorder is given.
    #[arg(long, value_enum, default_value_t = MetricsMode::Full)]
    metrics: MetricsMode,
    /// Seconds between metric upkeeps, on a thread of their own (0: never, as with a recorder
    /// nobody scrapes).
    #[arg(long = "upkeep-s", value_name = "S", default_value = "5", value_parser = support::secs)]
    upkeep: Duration,
    /// The `scenario` of the RESULT lines.
    #[arg(long, default_value = "scheduler")]
    scenario: String,
    /// Whether each target keeps its own duration histogram (`metrics.per_target_histograms`),
    /// to size what it costs per target.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    per_target_histograms: bool,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.targets == 0 || self.threads == 0 || self.interval.is_zero() {
            bail!("--targets and --threads must be at least 1, --interval-s above 0");
        }
        if self.intervals < 3 {
            bail!("--intervals must be at least 3, so every target runs at least twice");
        }
        Ok(())
    }

    /// How often upkeep runs, if at all.
    fn upkeep(&self) -> Option<Duration> {
        (!self.upkeep.is_zero()).then_some(self.upkeep)
    }

    fn run_for(&self) -> Duration {
        self.interval * self.intervals
    }
}

/// Runs `probe-bench scheduler-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let handle = install_metrics(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(measure(args, handle))
}

/// The no-op probe: counts its start in the current 100 ms bucket and succeeds.
struct Noop {
    start: Instant,
    buckets: Box<[AtomicU32]>,
}

#[async_trait::async_trait]
impl Probe for Noop {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        let i = (self.start.elapsed().as_millis() / BUCKET.as_millis()) as usize;
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        CheckResult::up()
    }
}

async fn measure(
    args: Args,
    handle: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    println!(
        "scheduler_load: {} targets, interval {} s, jitter {}, {} intervals, {} runtime threads, \
         history {}, metrics={}, upkeep every {}",
        args.targets,
        args.interval.as_secs_f64(),
        args.jitter,
        args.intervals,
        args.threads,
        args.history,
        match args.metrics {
            MetricsMode::Full => "full",
            MetricsMode::Lag => "lag",
        },
        args.upkeep()
            .map_or_else(|| "never".to_owned(), |d| format!("{} s", d.as_secs_f64()))
    );
    // The exporter's rolling summary silently drops a sample older than its first bucket, and the
    // first bucket starts at the first sample it is fed, newest first. One sample recorded and
    // drained now, before any probe runs, starts that bucket here, so every real lag sample
    // counts. (One extra zero among ~300k changes no quantile shown.)
    metrics::histogram!(LAG).record(0.0);
    handle.run_upkeep();
    // Upkeep runs on its own OS thread, not on the runtime: draining 100k per-target histograms
    // takes long enough (about half a second the first time, when every distribution is created)
    // that doing it on a runtime worker would stall the scheduler and show up as lag.
    let upkeep_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let upkeep = match args.upkeep() {
        Some(every) => {
            let handle = handle.clone();
            let stop = upkeep_stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("metrics-upkeep".into())
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::park_timeout(every);
                            handle.run_upkeep();
                        }
                    })
                    .context("spawning the upkeep thread")?,
            )
        }
        None => None,
    };
    let buckets_len = (args.run_for() + args.interval).as_millis() / BUCKET.as_millis() + 1;
    let start = Instant::now();
    let noop = Arc::new(Noop {
        start,
        buckets: (0..buckets_len).map(|_| AtomicU32::new(0)).collect(),
    });
    let rss_before = support::vm_rss()?;
    let cpu_before = support::cpu_ticks("self")?;

    let schedule = Schedule::try_new(ScheduleSettings {
        interval: args.interval,
        timeout: (args.interval / 10).min(Duration::from_secs(1)),
        jitter: args.jitter,
        fast_interval: Some(args.interval),
        ..ScheduleSettings::default()
    })?;
    let probe = CustomProbe::new(noop.clone());
    let specs = (0..args.targets)
        .map(|i| {
            Ok(TargetSpec::new(
                TargetId::new(&format!("target-{i:07}"))?,
                ProbeSpec::Custom(probe.clone()),
            )
            .with_schedule(schedule)
            .with_thresholds(Thresholds::default()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cancel = CancellationToken::new();
    let engine = Engine::start(
        EngineConfig {
            history: args.history,
            ..EngineConfig::default()
        },
        cancel.clone(),
    );
    engine.set_per_target_histograms(args.per_target_histograms);
    let applied = Instant::now();
    engine
        .apply(specs)
        .map_err(|e| anyhow::anyhow!("applying the targets: {e}"))?;
    let apply_time = applied.elapsed();

    // Every target is UP (rise = 2) once it has run twice. The first run is at most one interval
    // plus jitter after its insert, the second one interval later, so wait that long before
    // looking: `readiness()` walks every target while some are not UP, and polling it often would
    // disturb the lag being measured.
    let applied_at = Instant::now();
    tokio::time::sleep(args.interval.mul_f64(2.0 + args.jitter) + Duration::from_millis(500)).await;
    let give_up =
        applied_at + args.interval.mul_f64(2.0 * (1.0 + args.jitter)) + Duration::from_secs(5);
    let (rss_twice, twice_at) = loop {
        let healthy = engine.readiness().healthy;
        if healthy == args.targets {
            // Anchors the steady-state summary (see the anchoring zero above), then splits.
            metrics::histogram!(LAG_STEADY).record(0.0);
            handle.run_upkeep();
            STEADY.store(true, Ordering::Relaxed);
            break (support::vm_rss()?, start.elapsed());
        }
        if Instant::now() > give_up {
            // What was reached, for scripts/bench, before giving up.
            let result = |metric: &str, value: f64, unit: &str| {
                support::result(&args.scenario, metric, value, unit)
            };
            result("apply", apply_time.as_secs_f64() * 1e3, "ms");
            result(
                "ran_twice_at_give_up",
                healthy as f64 * 100.0 / args.targets as f64,
                "%",
            );
            result(
                "rss_per_target_at_give_up",
                support::vm_rss()?.saturating_sub(rss_before) as f64 / args.targets as f64,
                "bytes",
            );
            bail!(
                "only {healthy} of {} targets ran twice within {:.1} s",
                args.targets,
                (give_up - start).as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    tokio::time::sleep_until(start + args.run_for()).await;
    let end = start.elapsed();
    let rss_end = support::vm_rss()?;
    let cpu = support::cpu_ticks("self")? - cpu_before;
    let workers = engine.workload().workers;
    cancel.cancel();
    engine.stopped().await;
    upkeep_stop.store(true, Ordering::Relaxed);
    if let Some(upkeep) = upkeep {
        upkeep.thread().unpark();
        let _ = upkeep.join();
    }

    let statuses = engine.statuses();
    let runs: u64 = statuses
        .iter()
        .map(|s| u64::from(s.consecutive_successes))
        .sum();
    let failed = statuses.iter().filter(|s| s.last_failure.is_some()).count();
    drop(statuses);
    let text = handle.render();
    let quantile_of = |name: &str, q: &str| -> anyhow::Result<f64> {
        let prefix = format!("{name}{{quantile=\"{q}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .with_context(|| format!("no {name} quantile {q} in the rendered metrics"))?
            .trim()
            .parse()
            .context("parsing a quantile")
    };
    let quantile = |q: &str| quantile_of(LAG, q);
    // Only `--metrics lag` splits the steady state off.
    let steady = quantile_of(LAG_STEADY, "0.99")
        .and_then(|p99| {
            Ok((
                p99,
                quantile_of(LAG_STEADY, "0.999")?,
                quantile_of(LAG_STEADY, "1")?,
            ))
        })
        .ok();
    let lag_count = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{LAG}_count ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        // Without the anchoring zero.
        .map_or(0.0, |n| n - 1.0);
    let (p50, p99, p999, max) = (
        quantile("0.5")?,
        quantile("0.99")?,
        quantile("0.999")?,
        quantile("1")?,
    );

    let per_target = |rss: u64| (rss.saturating_sub(rss_before)) as f64 / args.targets as f64;
    let result =
        |metric: &str, value: f64, unit: &str| support::result(&args.scenario, metric, value, unit);
    println!();
    println!(
        "apply of {} targets: {:.1} ms (the dispatcher inserts them concurrently)",
        args.targets,
        apply_time.as_secs_f64() * 1e3
    );
    println!(
        "runs: {runs} (sum of consecutive successes), lag samples {lag_count:.0}, failed targets \
         {failed}, {:.0} runs/s over {:.1} s, workers at the end {workers}",
        runs as f64 / end.as_secs_f64(),
        end.as_secs_f64()
    );
    println!(
        "lag: p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms; target p99 <= 10 ms: {}",
        p50 * 1e3,
        p99 * 1e3,
        p999 * 1e3,
        max * 1e3,
        if p99 <= 0.010 { "met" } else { "MISSED" }
    );
    if let Some((p99, p999, max)) = steady {
        println!(
            "lag once every target ran twice: p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms; \
             target p99 <= 10 ms: {}",
            p99 * 1e3,
            p999 * 1e3,
            max * 1e3,
            if p99 <= 0.010 { "met" } else { "MISSED" }
        );
    }
    println!(
        "RSS: before {} KiB, all ran twice (at {:.1} s) {} KiB, end {} KiB",
        rss_before / 1024,
        twice_at.as_secs_f64(),
        rss_twice / 1024,
        rss_end / 1024
    );
    println!(
        "RSS per target: {:.0} bytes after two runs, {:.0} bytes at the end; target <= 1024: {}",
        per_target(rss_twice),
        per_target(rss_end),
        if per_target(rss_twice) <= 1024.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "CPU: {:.2} s, {:.2} us per run (including startup)",
        cpu as f64 / TICKS_PER_SEC,
        cpu as f64 / TICKS_PER_SEC * 1e6 / runs.max(1) as f64
    );

    // Spread: 100 ms buckets from one interval after the start to the last full bucket.
    let first = (args.interval.as_millis() / BUCKET.as_millis()) as usize;
    // A run that overran its planned length (a slow machine, a profiler) has no buckets past it.
    let last = ((end.as_millis() / BUCKET.as_millis()) as usize).min(noop.buckets.len());
    let counts: Vec<u32> = noop.buckets[first..last.max(first)]
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .collect();
    result("apply", apply_time.as_secs_f64() * 1e3, "ms");
    result("runs_per_s", runs as f64 / end.as_secs_f64(), "runs/s");
    result("failed_targets", failed as f64, "targets");
    result("lag_p50", p50 * 1e3, "ms");
    result("lag_p99", p99 * 1e3, "ms");
    result("lag_p999", p999 * 1e3, "ms");
    result("lag_max", max * 1e3, "ms");
    if let Some((p99, p999, max)) = steady {
        result("lag_steady_p99", p99 * 1e3, "ms");
        result("lag_steady_p999", p999 * 1e3, "ms");
        result("lag_steady_max", max * 1e3, "ms");
    }
    result("rss_per_target", per_target(rss_twice), "bytes");
    result("rss_per_target_end", per_target(rss_end), "bytes");
    result(
        "us_per_run",
        cpu as f64 / TICKS_PER_SEC * 1e6 / runs.max(1) as f64,
        "us",
    );
    result(
        "cpu_cores",
        cpu as f64 / TICKS_PER_SEC / end.as_secs_f64(),
        "cores",
    );
    if let (Some(max_n), Some(min_n)) = (counts.iter().max(), counts.iter().min()) {
        let mean = counts.iter().map(|&n| f64::from(n)).sum::<f64>() / counts.len() as f64;
        let busiest = counts.iter().position(|n| n == max_n).unwrap_or(0) + first;
        println!(
            "starts per 100 ms over {:.1}-{:.1} s: mean {:.1}, busiest {} ({:.2}x the mean, \
             window at {:.1} s), quietest {}",
            first as f64 / 10.0,
            last as f64 / 10.0,
            mean,
            max_n,
            f64::from(*max_n) / mean,
            busiest as f64 / 10.0,
            min_n
        );
        result("starts_per_100ms_mean", mean, "starts");
        result("busiest_window_vs_mean", f64::from(*max_n) / mean, "x");
    }
    Ok(())
}

/// Installs the Prometheus recorder, given every metric or the lag only (`--metrics`), with
/// summaries whose buckets cover the whole run.
fn install_metrics(args: &Args) -> anyhow::Result<metrics_exporter_prometheus::PrometheusHandle> {
    const DURATION_BUCKETS: &[f64] = &[
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    // Three summary buckets that together cover the whole run, so the quantiles are over it all.
    let recorder = PrometheusBuilder::new()
        .set_quantiles(&[0.5, 0.99, 0.999, 1.0])?
        .set_bucket_duration(args.run_for() + args.interval)?
        .set_buckets_for_metric(
            Matcher::Full("probe_fleet_duration_seconds".into()),
            DURATION_BUCKETS,
        )?
        .build_recorder();
    let handle = recorder.handle();
    let installed = match args.metrics {
        MetricsMode::Full => metrics::set_global_recorder(recorder).map_err(|e| e.to_string()),
        MetricsMode::Lag => {
            metrics::set_global_recorder(LagOnly(recorder)).map_err(|e| e.to_string())
        }
    };
    installed.map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    probe::engine::describe_metrics();
    Ok(handle)
}

/// Set once every target has run twice: lag samples from then on also go to [`LAG_STEADY`].
static STEADY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The lag once start-up is over (every target inserted, through PROBING, run twice), kept apart
/// from the whole run's so that a million first runs and transitions do not hide the steady
/// state, nor the other way round.
const LAG_STEADY: &str = "probe_scheduler_lag_steady_seconds";

/// Records every lag sample, and the steady-state ones a second time.
struct SplitLag {
    all: Histogram,
    steady: Histogram,
}

impl metrics::HistogramFn for SplitLag {
    fn record(&self, value: f64) {
        self.all.record(value);
        if STEADY.load(Ordering::Relaxed) {
            self.steady.record(value);
        }
    }
}

/// Passes only the scheduler lag to Prometheus (whole run and steady state); every other metric
/// is a no-op.
struct LagOnly(PrometheusRecorder);

impl Recorder for LagOnly {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if key.as_str() == LAG {
            self.0.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match key.name() {
            LAG => Histogram::from_arc(Arc::new(SplitLag {
                all: self.0.register_histogram(key, metadata),
                steady: self
                    .0
                    .register_histogram(&Key::from_static_name(LAG_STEADY), metadata),
            })),
            LAG_STEADY => self.0.register_histogram(key, metadata),
            _ => Histogram::noop(),
        }
    }
}
