//! Load harness: probes per CPU-second of the real engine's TCP tier, against a bare tokio floor.
//!
//! ```text
//! probe-bench tcp-load [--targets 1000] [--interval-ms 100]
//!     [--duration-s 10] [--warmup-s 1] [--ports 4] [--threads 2]
//!     [--metrics count|prometheus] [--floor-tasks N] [--floor-timeout]
//!     [--phase all|both|engine|floor|blackbox] [--max-in-flight N] [--probe tcp|lean]
//!     [--blackbox PATH|none] [--blackbox-concurrency 64] [--scenario tcp] [--windows 1]
//! ```
//!
//! `--duration-s` and `--warmup-s` take fractions (`0.5`).
//!
//! Two phases run one after the other in this process, on the same multi-thread runtime
//! (`--threads` workers), against the same loopback listeners:
//!
//! 1. **engine**: the real [`Engine`] with `--targets` TCP connect targets (`SO_LINGER 0`) on a
//!    `--interval-ms` schedule (jitter 0.1, fast interval = interval, so the rate is uniform:
//!    1000 targets at 100 ms = 10k probes/s; timeout half the interval, at most 1 s);
//! 2. **floor**: a bare tokio loop at the same rate: as many tasks as the engine had workers at
//!    the end of its phase (`--floor-tasks` overrides), each doing
//!    `TcpStream::connect` + `set_zero_linger` + drop on its share of the slots
//!    (`--floor-timeout` wraps each connect in `tokio::time::timeout`, as a real prober would).
//!
//! Each phase warms up for `--warmup-s`, then runs `--duration-s`; over that window the harness
//! reads this process's CPU time (`utime + stime` from `/proc/self/stat`, 100 ticks/s) and counts
//! probes, and prints CPU microseconds per probe for both and their ratio (target: engine
//! <= 1.3x floor), plus the context switches per probe of the non-listener threads
//! (`/proc/self/task/*/status`). The engine phase also prints the scheduler lag (mean, max) and
//! its worker count.
//!
//! **Listeners** accept and drop, each on its own OS thread named `tcp-listen-N`. A listener that
//! never accepts does not work on Linux: a connection the prober resets while it still sits in
//! the accept queue stays queued until accepted, so after `backlog` probes the queue is full, the
//! listener drops SYNs and connects time out. Accepting costs CPU in this process, so the harness
//! also reads the listener threads' own CPU (`/proc/self/task/*/stat`) and prints the per-probe
//! cost and ratio both with and without it. Kernel work that loopback does on the sender's behalf
//! (the listener's half of the handshake) is charged to whichever thread sent the packet, so even
//! the "without" figures include some server-side kernel time, the same for both phases.
//!
//! **Counting**: `--metrics count` (default) installs a tiny recorder that only counts
//! `probe_fleet_duration_seconds` records (one per run), `probe_fleet_failures_total`
//! increments and the scheduler lag (count, sum, max), with relaxed atomics. `--metrics
//! prometheus` installs the Prometheus recorder configured like the daemon (bucketed
//! histograms), to show the cost of real metrics; runs are then counted from the engine's
//! statuses (consecutive successes and failures) and the failure total is read back from the
//! rendered metrics at the end. The per-target series live in the engine either way (their
//! cost is in the RSS figures); `--per-target-histograms false` drops the targets' own
//! duration histograms, to size them.
//!
//! **Experiments**: `--phase` runs one phase only (for `perf`/`strace`); `--max-in-flight` caps
//! the engine's worker pool; `--probe lean` runs the engine with a custom connect-only probe
//! ([`LeanConnect`]) instead of the TCP tier, to size what the tier's extras cost.
//!
//! **blackbox_exporter phase** (with `--phase all`, the default): starts `--blackbox` (default
//! `prometheus-blackbox-exporter`, the Debian package's binary; skipped with a note when missing
//! or with `--blackbox none`) on a loopback port with a `tcp_connect` module and drives its
//! `/probe?target=127.0.0.1:PORT&module=tcp_connect` endpoint from this process with
//! `--blackbox-concurrency` concurrent requests (kept-alive connections to the exporter, each
//! reply checked for `probe_success 1`) against the same listeners: a saturating load, as in
//! `http_load`. Its probes per CPU-second count the exporter's CPU only (`/proc/PID/stat`); the
//! driver's and the listeners' CPU are in this process and not counted. The module's timeout is
//! 1 s, whatever the engine's. Every phase also reads
//! the whole machine's busy CPU (`/proc/stat`) over its window, for probes per box CPU-second.
//!
//! **Figures for `scripts/bench`**: besides the human output, every figure is printed as a line
//! `RESULT scenario=<--scenario> metric=<name> value=<number> unit=<unit>`. The engine phase
//! also gives the scheduler lag's p50/p99/p99.9 over its measured window (a log-linear
//! histogram, 1/16 relative precision) and `VmRSS` growth per target (before the specs exist to
//! the end of the window), for the 100k-target scale run (`--targets 100000 --interval-ms
//! 10000 --warmup-s 12 --phase engine`).
//!
//! **Windows** (`--windows N`, for the soak): the engine phase's measured time is cut into `N`
//! consecutive windows of equal length, and the engine's figures (rate, CPU, failures, lag,
//! workers, RSS) are printed once per window instead of once: one long run then gives `N`
//! samples with a median and a spread, as `N` runs would, without `N` warm-ups. Per window,
//! `engine_failed` counts that window's failed probes; `engine_failed_total` (printed once)
//! counts the whole phase's, warm-up included. Such a run also samples the whole machine's
//! sockets on 127.0.0.0/8 from `/proc/net/tcp` every 2 s, on an OS thread of its own (its CPU is
//! kept apart with the listeners'): per window `time_wait_max`, `loopback_sockets_max` (any
//! state but `LISTEN`) and `time_wait_samples`, and once `time_wait_at_start`, from before the
//! engine started (what the steps before left in `TIME_WAIT`).
//!
//! At the end it reports failed probes (should be 0) and the sockets towards the listener ports
//! from `/proc/net/tcp` by state, `TIME_WAIT` in particular (should be 0: the prober resets, and
//! the listener's close never ends in `TIME_WAIT` either, since the peer never sends a FIN).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusHandle;
use probe::health::{Schedule, ScheduleSettings, Thresholds};
use probe::outcome::{CheckResult, Failure, FailureReason};
use probe::tier::tcp::TcpSpec;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, RunCounter, TICKS_PER_SEC, lock};

/// Floor tasks when the engine phase does not run to set the concurrency.
const DEFAULT_FLOOR_TASKS: usize = 4;
/// The thread-name prefix of the listener threads, to tell their CPU apart.
const LISTENER_THREAD: &str = "tcp-listen-";

/// How the engine's runs and failures are counted.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MetricsMode {
    /// A recorder that only counts, with relaxed atomics.
    Count,
    /// The Prometheus recorder configured like the daemon's, to show what real metrics cost.
    Prometheus,
}

/// Flags of `probe-bench tcp-load`.
#[derive(clap::Args)]
pub struct Args {
    /// TCP connect targets of the engine phase.
    #[arg(long, default_value_t = 1000)]
    targets: usize,
    /// Each target's interval, in ms (the rate is targets / interval).
    #[arg(long = "interval-ms", value_name = "MS", default_value = "100", value_parser = support::millis)]
    interval: Duration,
    /// Measured time of each phase, in seconds (fractions allowed).
    #[arg(long = "duration-s", value_name = "S", default_value = "10", value_parser = support::secs)]
    duration: Duration,
    /// Warm-up of each phase before it is measured, in seconds.
    #[arg(long = "warmup-s", value_name = "S", default_value = "1", value_parser = support::secs)]
    warmup: Duration,
    /// Loopback listeners (accept and drop), one OS thread each.
    #[arg(long, default_value_t = 4)]
    ports: usize,
    /// Worker threads of the tokio runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// How the engine's runs are counted.
    #[arg(long, value_enum, default_value_t = MetricsMode::Count)]
    metrics: MetricsMode,
    /// Tasks of the floor phase (default: the engine's workers at the end of its phase).
    #[arg(long)]
    floor_tasks: Option<usize>,
    /// Wraps each floor connect in `tokio::time::timeout`, as a real prober would.
    #[arg(long)]
    floor_timeout: bool,
    /// Which phases run: all, engine and floor (both), or one of them.
    #[arg(long, value_enum, default_value_t = Phase::All)]
    phase: Phase,
    /// Caps the engine's worker pool.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// The engine phase's probe: the library's TCP tier, or a connect-only experiment.
    #[arg(long, value_enum, default_value_t = ProbeKind::Tcp)]
    probe: ProbeKind,
    /// blackbox_exporter's binary, or `none` to skip its phase.
    #[arg(
        long,
        value_name = "PATH|none",
        default_value = "prometheus-blackbox-exporter"
    )]
    blackbox: String,
    /// Concurrent `/probe` requests driving blackbox_exporter.
    #[arg(long, default_value_t = 64)]
    blackbox_concurrency: usize,
    /// The `scenario` of the RESULT lines.
    #[arg(long, default_value = "tcp")]
    scenario: String,
    /// Consecutive windows the engine phase's measured time is cut into (1: one figure).
    #[arg(long, default_value_t = 1)]
    windows: u32,
    /// Whether each target keeps its own duration histogram (`metrics.per_target_histograms`),
    /// to size what it costs per target.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    per_target_histograms: bool,
}

/// Which probe the engine phase runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProbeKind {
    /// The library's TCP tier (`ProbeSpec::Tcp`): what the daemon runs.
    Tcp,
    /// `LeanConnect`, a custom connect-only probe: an experiment, not a product path.
    Lean,
}

/// The `--phase` choices.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Engine, floor and blackbox_exporter.
    All,
    /// Engine and floor.
    Both,
    /// The engine only.
    Engine,
    /// The floor only.
    Floor,
    /// blackbox_exporter only.
    Blackbox,
}

/// Which phases run.
#[derive(Clone, Copy)]
struct Phases {
    engine: bool,
    floor: bool,
    blackbox: bool,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.targets == 0 || self.ports == 0 || self.threads == 0 {
            bail!("--targets, --ports and --threads must be at least 1");
        }
        if self.interval < Duration::from_millis(2) || self.duration.is_zero() {
            bail!("--interval-ms must be at least 2 and --duration-s above 0");
        }
        if self.windows == 0 {
            bail!("--windows must be at least 1");
        }
        if self.blackbox_concurrency == 0 {
            bail!("--blackbox-concurrency must be at least 1");
        }
        if self.floor_tasks == Some(0) {
            bail!("--floor-tasks must be at least 1");
        }
        Ok(())
    }

    fn phases(&self) -> Phases {
        let (engine, floor, blackbox) = match self.phase {
            Phase::All => (true, true, true),
            Phase::Both => (true, true, false),
            Phase::Engine => (true, false, false),
            Phase::Floor => (false, true, false),
            Phase::Blackbox => (false, false, true),
        };
        Phases {
            engine,
            floor,
            blackbox,
        }
    }

    /// blackbox_exporter's binary, unless `--blackbox none`.
    fn blackbox(&self) -> Option<&str> {
        (self.blackbox != "none").then_some(self.blackbox.as_str())
    }

    /// The probe timeout: half the interval, at most one second.
    fn timeout(&self) -> Duration {
        (self.interval / 2).min(Duration::from_secs(1))
    }

    fn planned_rate(&self) -> f64 {
        self.targets as f64 / self.interval.as_secs_f64()
    }
}

/// Runs `probe-bench tcp-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let counters = install_metrics(args.metrics)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run_phases(args, counters))
}

async fn run_phases(args: Args, counters: Counters) -> anyhow::Result<()> {
    let listeners = start_listeners(args.ports)?;
    let ports: Vec<u16> = listeners.iter().map(SocketAddr::port).collect();
    println!(
        "tcp_load: {} targets every {} ms = {:.0} probes/s planned, timeout {} ms, \
         {} loopback listener ports (accept+drop), {} runtime threads, metrics={}",
        args.targets,
        args.interval.as_millis(),
        args.planned_rate(),
        args.timeout().as_millis(),
        args.ports,
        args.threads,
        match args.metrics {
            MetricsMode::Count => "count",
            MetricsMode::Prometheus => "prometheus",
        },
    );
    println!(
        "each phase: {} s warm-up, then {} s measured",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );

    let phases = args.phases();
    let (engine, workers, extra) = if phases.engine {
        let (measured, workers, extra) = engine_phase(&args, &listeners, &counters).await?;
        (Some(measured), workers, Some(extra))
    } else {
        (None, DEFAULT_FLOOR_TASKS, None)
    };
    let engine_tw = socket_states(&ports)?;
    let floor_tasks = args.floor_tasks.unwrap_or(workers);
    let floor = if phases.floor {
        Some(floor_phase(&args, &listeners, floor_tasks).await?)
    } else {
        None
    };
    let blackbox = match (args.blackbox(), phases.blackbox) {
        (Some(path), true) => match support::which(path) {
            Some(binary) => Some(blackbox_phase(&args, &listeners, &binary).await?),
            None => {
                println!(
                    "blackbox_exporter: {path:?} not found, comparison skipped \
                     (apt-get install prometheus-blackbox-exporter)"
                );
                None
            }
        },
        _ => None,
    };
    let final_tw = socket_states(&ports)?;

    println!();
    println!(
        "{:<7} {:>9} {:>7} {:>7} {:>7} {:>9} {:>12} {:>9} {:>16} {:>12}",
        "phase",
        "probes",
        "failed",
        "wall_s",
        "cpu_s",
        "listen_s",
        "probes/cpu_s",
        "us/probe",
        "us/probe-listen",
        "ctxsw/probe"
    );
    for (name, phase) in [
        ("engine", &engine),
        ("floor", &floor),
        ("blackbox", &blackbox),
    ] {
        if let Some(measured) = phase {
            measured.print(name);
        }
    }
    if blackbox.is_some() {
        println!(
            "(blackbox: cpu_s is blackbox_exporter's own CPU; listen_s is this process's \
             listeners and driver, not counted)"
        );
    }
    println!();
    if engine.is_some() {
        println!("engine workers at the end of its phase: {workers}");
    }
    if floor.is_some() {
        println!(
            "floor tasks: {floor_tasks}{}",
            if args.floor_timeout {
                " (each connect under tokio::time::timeout)"
            } else {
                ""
            }
        );
    }
    if let (Some(engine), Some(floor)) = (&engine, &floor) {
        let ratio = engine.us_per_probe() / floor.us_per_probe();
        let ratio_excl = engine.us_per_probe_excl() / floor.us_per_probe_excl();
        let verdict = |r: f64| if r <= 1.3 { "met" } else { "MISSED" };
        println!(
            "engine/floor CPU per probe (target <= 1.30x): {ratio:.2}x whole process ({}), \
             {ratio_excl:.2}x without the listener threads ({})",
            verdict(ratio),
            verdict(ratio_excl)
        );
    }
    if let (Some(engine), Some(bb)) = (&engine, &blackbox) {
        let ratio = engine.per_cpu_s_excl() / bb.per_cpu_s_excl().max(f64::MIN_POSITIVE);
        let ratio_box = engine.per_box_cpu_s() / bb.per_box_cpu_s().max(f64::MIN_POSITIVE);
        println!(
            "engine / blackbox_exporter, probes per prober CPU-second (goal >= 10x): {ratio:.1}x \
             ({}); per whole-box CPU-second: {ratio_box:.1}x",
            if ratio >= 10.0 { "met" } else { "MISSED" }
        );
    }
    for (name, phase) in [
        ("engine", &engine),
        ("floor", &floor),
        ("blackbox", &blackbox),
    ] {
        if let Some(measured) = phase {
            println!(
                "{name}: whole-box CPU {:.2} s over {:.2} s ({:.0} probes per box CPU-second)",
                measured.box_s(),
                measured.wall.as_secs_f64(),
                measured.per_box_cpu_s()
            );
        }
    }
    for (name, phase) in [
        ("engine", &engine),
        ("floor", &floor),
        ("blackbox", &blackbox),
    ] {
        if let Some(measured) = phase {
            println!(
                "{name}: achieved {:.0} probes/s (planned {:.0}/s), failed probes {} over the \
                 whole phase",
                measured.probes as f64 / measured.wall.as_secs_f64(),
                args.planned_rate(),
                measured.failed_total
            );
        }
    }
    println!(
        "sockets towards the listener ports, by state (LISTEN excluded): after engine {}, \
         at the end {}",
        fmt_states(&engine_tw),
        fmt_states(&final_tw)
    );
    println!(
        "TIME_WAIT towards the listener ports at the end: {}",
        final_tw.get("TIME_WAIT").copied().unwrap_or(0)
    );

    // The same figures for scripts/bench.
    let scenario = args.scenario.as_str();
    let result =
        |metric: &str, value: f64, unit: &str| support::result(scenario, metric, value, unit);
    // A windowed run prints the engine's figures once per window instead of once: each window
    // is then one sample of every figure, like one run of a step.
    let windows = extra.as_ref().map_or(&[][..], |e| &e.windows[..]);
    for (name, phase) in [
        ("engine", &engine),
        ("floor", &floor),
        ("blackbox", &blackbox),
    ] {
        let Some(m) = phase else { continue };
        if name == "engine" && !windows.is_empty() {
            continue;
        }
        phase_results(&result, name, m);
    }
    if let (Some(engine), Some(floor)) = (&engine, &floor) {
        result(
            "engine_vs_floor_cpu",
            engine.us_per_probe_excl() / floor.us_per_probe_excl(),
            "x",
        );
        result(
            "engine_vs_floor_cpu_with_listeners",
            engine.us_per_probe() / floor.us_per_probe(),
            "x",
        );
        result(
            "engine_vs_floor_box_cpu",
            floor.per_box_cpu_s() / engine.per_box_cpu_s().max(f64::MIN_POSITIVE),
            "x",
        );
    }
    if let (Some(engine), Some(bb)) = (&engine, &blackbox) {
        result(
            "engine_vs_blackbox",
            engine.per_cpu_s_excl() / bb.per_cpu_s_excl().max(f64::MIN_POSITIVE),
            "x",
        );
        result(
            "engine_vs_blackbox_box_cpu",
            engine.per_box_cpu_s() / bb.per_box_cpu_s().max(f64::MIN_POSITIVE),
            "x",
        );
    }
    if let Some(extra) = &extra {
        let lag_results = |lag_ms: Option<[f64; 4]>| {
            if let Some([p50, p99, p999, max]) = lag_ms {
                result("lag_p50", p50, "ms");
                result("lag_p99", p99, "ms");
                result("lag_p999", p999, "ms");
                result("lag_max", max, "ms");
            }
        };
        if windows.is_empty() {
            result("engine_workers", workers as f64, "workers");
            result("rss_per_target", extra.rss_per_target, "bytes");
            lag_results(extra.lag_ms);
        }
        for w in windows {
            phase_results(&result, "engine", &w.measured);
            result("engine_workers", w.workers as f64, "workers");
            result("rss_per_target", w.rss_per_target, "bytes");
            lag_results(w.lag_ms);
            result("time_wait_max", w.sockets.time_wait_max as f64, "sockets");
            result("loopback_sockets_max", w.sockets.all_max as f64, "sockets");
            result("time_wait_samples", w.sockets.samples as f64, "samples");
        }
        if let (Some(engine), false) = (&engine, windows.is_empty()) {
            result("engine_failed_total", engine.failed_total as f64, "probes");
        }
        if let Some(at_start) = extra.sockets_at_start {
            result("time_wait_at_start", at_start.time_wait as f64, "sockets");
        }
    }
    result(
        "time_wait_end",
        final_tw.get("TIME_WAIT").copied().unwrap_or(0) as f64,
        "sockets",
    );
    Ok(())
}

/// The `RESULT` lines of one phase (or one window of the engine phase).
fn phase_results(result: &impl Fn(&str, f64, &str), name: &str, m: &Measured) {
    result(
        &format!("{name}_probes_per_s"),
        m.probes as f64 / m.wall.as_secs_f64(),
        "probes/s",
    );
    result(
        &format!("{name}_probes_per_cpu_s"),
        m.per_cpu_s_excl(),
        "probes/cpu-s",
    );
    result(&format!("{name}_us_per_probe"), m.us_per_probe_excl(), "us");
    result(
        &format!("{name}_probes_per_box_cpu_s"),
        m.per_box_cpu_s(),
        "probes/cpu-s",
    );
    result(&format!("{name}_failed"), m.failed_total as f64, "probes");
    if name != "blackbox" {
        result(
            &format!("{name}_us_per_probe_with_listeners"),
            m.us_per_probe(),
            "us",
        );
        result(
            &format!("{name}_cpu_cores"),
            (m.cpu_s() - m.listener_s()) / m.wall.as_secs_f64(),
            "cores",
        );
    }
}

/// What the engine phase measured besides [`Measured`].
struct EngineExtra {
    /// `VmRSS` growth from before the specs existed to the end of the window, per target.
    rss_per_target: f64,
    /// Scheduler lag p50, p99, p99.9 and max over the measured window, in ms (counting recorder
    /// only).
    lag_ms: Option<[f64; 4]>,
    /// With `--windows` above 1, each window's own figures, in order.
    windows: Vec<EngineWindow>,
    /// With `--windows` above 1, the loopback sockets before the phase.
    sockets_at_start: Option<SocketSample>,
}

/// One of the consecutive windows of a `--windows` run.
struct EngineWindow {
    measured: Measured,
    /// Engine workers at the end of the window.
    workers: usize,
    /// As [`EngineExtra::rss_per_target`], at the end of the window.
    rss_per_target: f64,
    lag_ms: Option<[f64; 4]>,
    /// Loopback sockets over the window, from the sampler.
    sockets: SocketWindow,
}

/// The counters of the engine phase at one instant: a window is the difference of two.
struct Mark {
    runs: u64,
    failed: u64,
    workers: usize,
    lag: Option<Vec<u64>>,
    cpu: CpuSnapshot,
    rss: u64,
}

impl Mark {
    fn take(counters: &Counters, engine: &Engine) -> anyhow::Result<Self> {
        let (runs, failed) = counters.read(engine);
        Ok(Self {
            runs,
            failed,
            workers: engine.workload().workers,
            lag: counters.lag_buckets(),
            cpu: CpuSnapshot::take()?,
            rss: support::vm_rss()?,
        })
    }

    /// What happened from `self` to `later`.
    fn until(&self, later: &Self, failed_total: u64) -> Measured {
        Measured {
            probes: later.runs - self.runs,
            failed: later.failed - self.failed,
            failed_total,
            wall: later.cpu.at - self.cpu.at,
            cpu_ticks: later.cpu.process - self.cpu.process,
            listener_ticks: later.cpu.listeners - self.cpu.listeners,
            switches: later.cpu.switches - self.cpu.switches,
            box_ticks: later.cpu.whole_box - self.cpu.whole_box,
        }
    }

    /// Lag p50, p99, p99.9 and max from `self` to `later`, in ms (counting recorder only).
    fn lag_until(&self, later: &Self) -> Option<[f64; 4]> {
        let (Some(before), Some(after)) = (&self.lag, &later.lag) else {
            return None;
        };
        let window: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        let q = |q: f64| LagStats::quantile_ms(&window, q);
        Some([q(0.5), q(0.99), q(0.999), q(1.0)])
    }
}

/// Sockets on 127.0.0.0/8 (the whole machine's, from `/proc/net/tcp`) at one instant: in
/// `TIME_WAIT`, and in any state but `LISTEN`.
#[derive(Clone, Copy)]
struct SocketSample {
    at: Instant,
    time_wait: usize,
    all: usize,
}

/// The largest counts of the samples taken within a window, and how many there were.
#[derive(Default)]
struct SocketWindow {
    time_wait_max: usize,
    all_max: usize,
    samples: usize,
}

/// The thread name of the socket sampler, whose CPU is kept apart like the listeners'.
const SAMPLER_THREAD: &str = "socket-sampler";
/// How often the sampler reads `/proc/net/tcp`.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Samples loopback sockets every [`SAMPLE_EVERY`] on an OS thread of its own (reading
/// `/proc/net/tcp` with thousands of sockets takes milliseconds, which a runtime worker would
/// show as scheduler lag), until dropped.
struct SocketSampler {
    samples: Arc<std::sync::Mutex<Vec<SocketSample>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SocketSampler {
    fn start() -> anyhow::Result<Self> {
        let samples = Arc::new(std::sync::Mutex::new(vec![loopback_sockets()?]));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name(SAMPLER_THREAD.into())
            .spawn({
                let (samples, stop) = (samples.clone(), stop.clone());
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(SAMPLE_EVERY);
                        // A failed read (none expected) leaves a gap, which `samples` shows.
                        if let Ok(sample) = loopback_sockets() {
                            lock(&samples).push(sample);
                        }
                    }
                }
            })
            .context("spawning the socket sampler")?;
        Ok(Self {
            samples,
            stop,
            thread: Some(thread),
        })
    }

    /// The first sample, taken before the phase began.
    fn first(&self) -> Option<SocketSample> {
        lock(&self.samples).first().copied()
    }

    /// The samples taken in `[from, to)`.
    fn window(&self, from: Instant, to: Instant) -> SocketWindow {
        lock(&self.samples)
            .iter()
            .filter(|s| s.at >= from && s.at < to)
            .fold(SocketWindow::default(), |w, s| SocketWindow {
                time_wait_max: w.time_wait_max.max(s.time_wait),
                all_max: w.all_max.max(s.all),
                samples: w.samples + 1,
            })
    }
}

impl Drop for SocketSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Counts the sockets on 127.0.0.0/8 now (local address; `/proc/net/tcp` prints it as the hex
/// of a host-order `u32`, so the first octet is the last two digits).
fn loopback_sockets() -> anyhow::Result<SocketSample> {
    let table = std::fs::read_to_string("/proc/net/tcp").context("reading /proc/net/tcp")?;
    let (mut time_wait, mut all) = (0, 0);
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let (Some(local), Some(state)) = (fields.nth(1), fields.nth(1)) else {
            continue;
        };
        let loopback = local
            .split_once(':')
            .is_some_and(|(ip, _)| ip.len() == 8 && ip.ends_with("7F"));
        if loopback && state != "0A" {
            all += 1;
            time_wait += usize::from(state == "06");
        }
    }
    Ok(SocketSample {
        at: Instant::now(),
        time_wait,
        all,
    })
}

/// What one phase measured over its window.
struct Measured {
    probes: u64,
    failed: u64,
    failed_total: u64,
    wall: Duration,
    cpu_ticks: u64,
    listener_ticks: u64,
    switches: u64,
    /// Busy CPU of the whole machine (`/proc/stat`) over the window.
    box_ticks: u64,
}

impl Measured {
    fn box_s(&self) -> f64 {
        self.box_ticks as f64 / TICKS_PER_SEC
    }
    fn per_box_cpu_s(&self) -> f64 {
        self.probes as f64 / self.box_s().max(f64::MIN_POSITIVE)
    }
    fn per_cpu_s_excl(&self) -> f64 {
        self.probes as f64 / (self.cpu_s() - self.listener_s()).max(f64::MIN_POSITIVE)
    }
    fn cpu_s(&self) -> f64 {
        self.cpu_ticks as f64 / TICKS_PER_SEC
    }
    fn listener_s(&self) -> f64 {
        self.listener_ticks as f64 / TICKS_PER_SEC
    }
    fn us_per_probe(&self) -> f64 {
        self.cpu_s() * 1e6 / self.probes.max(1) as f64
    }
    fn us_per_probe_excl(&self) -> f64 {
        (self.cpu_s() - self.listener_s()) * 1e6 / self.probes.max(1) as f64
    }
    fn print(&self, phase: &str) {
        println!(
            "{:<7} {:>9} {:>7} {:>7.2} {:>7.2} {:>9.2} {:>12.0} {:>9.2} {:>16.2} {:>12.3}",
            phase,
            self.probes,
            self.failed,
            self.wall.as_secs_f64(),
            self.cpu_s(),
            self.listener_s(),
            self.probes as f64 / self.cpu_s().max(f64::MIN_POSITIVE),
            self.us_per_probe(),
            self.us_per_probe_excl(),
            self.switches as f64 / self.probes.max(1) as f64,
        );
    }
}

/// CPU ticks of the whole process and of the listener threads, and the context switches of
/// every other thread, at one instant.
#[derive(Clone, Copy)]
struct CpuSnapshot {
    at: Instant,
    process: u64,
    listeners: u64,
    switches: u64,
    whole_box: u64,
}

impl CpuSnapshot {
    fn take() -> anyhow::Result<Self> {
        let process = support::stat_ticks(&std::fs::read_to_string("/proc/self/stat")?)?;
        let mut listeners = 0;
        let mut switches = 0;
        for task in std::fs::read_dir("/proc/self/task")? {
            let dir = task?.path();
            // A thread may exit between listing and reading; it then is no listener of ours.
            let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
                continue;
            };
            let comm = comm.trim_end();
            if comm.starts_with(LISTENER_THREAD) || comm == SAMPLER_THREAD {
                listeners += support::stat_ticks(&std::fs::read_to_string(dir.join("stat"))?)?;
            } else if let Ok(status) = std::fs::read_to_string(dir.join("status")) {
                switches += status
                    .lines()
                    .filter(|l| l.contains("ctxt_switches:"))
                    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .sum::<u64>();
            }
        }
        Ok(Self {
            at: Instant::now(),
            process,
            listeners,
            switches,
            whole_box: support::box_ticks()?,
        })
    }
}

fn start_listeners(count: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let mut addrs = Vec::with_capacity(count);
    for i in 0..count {
        addrs.push(support::accept_and_drop(
            [127, 0, 0, 1],
            format!("{LISTENER_THREAD}{i}"),
        )?);
    }
    Ok(addrs)
}

/// Runs the engine phase; returns its figures and the engine's worker count at the end.
async fn engine_phase(
    args: &Args,
    listeners: &[SocketAddr],
    counters: &Counters,
) -> anyhow::Result<(Measured, usize, EngineExtra)> {
    let rss0 = support::vm_rss()?;
    let schedule = Schedule::try_new(ScheduleSettings {
        interval: args.interval,
        timeout: args.timeout(),
        jitter: 0.1,
        fast_interval: Some(args.interval),
        ..ScheduleSettings::default()
    })?;
    let specs = (0..args.targets)
        .map(|i| {
            Ok(TargetSpec::new(
                TargetId::new(&format!("tcp-{i:06}"))?,
                match args.probe {
                    ProbeKind::Tcp => ProbeSpec::Tcp(TcpSpec::connect(Address::Socket(
                        listeners[i % listeners.len()],
                    ))),
                    ProbeKind::Lean => ProbeSpec::Custom(CustomProbe::new(Arc::new(LeanConnect(
                        listeners[i % listeners.len()],
                    )))),
                },
            )
            .with_schedule(schedule)
            .with_thresholds(Thresholds::default()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    let cancel = CancellationToken::new();
    let mut config = EngineConfig::default();
    if let Some(max) = args.max_in_flight {
        // Also the most workers the elastic pool may grow to.
        config.scheduler.max_in_flight =
            NonZeroUsize::new(max).context("--max-in-flight must be at least 1")?;
    }
    // Only a windowed run (the soak) reports sockets by window; started before the engine, so
    // its first sample is the machine's state before this phase.
    let sampler = if args.windows > 1 {
        Some(SocketSampler::start()?)
    } else {
        None
    };
    let engine = Engine::start(config, cancel.clone());
    engine.set_per_target_histograms(args.per_target_histograms);
    engine
        .apply(specs)
        .map_err(|e| anyhow::anyhow!("applying the targets: {e}"))?;
    tokio::time::sleep(args.warmup).await;

    let first = Mark::take(counters, &engine)?;
    let mut marks = vec![first];
    let window = args.duration / args.windows;
    for i in 1..=args.windows {
        let end = if i == args.windows {
            marks[0].cpu.at + args.duration
        } else {
            marks[0].cpu.at + window * i
        };
        tokio::time::sleep_until(end).await;
        marks.push(Mark::take(counters, &engine)?);
    }
    let (first, last) = (&marks[0], &marks[marks.len() - 1]);
    let (rss1, workers) = (last.rss, last.workers);
    println!(
        "engine workers: {} after the warm-up, {workers} at the end",
        first.workers
    );
    let per_target = |rss: u64| rss.saturating_sub(rss0) as f64 / args.targets as f64;
    let windows: Vec<EngineWindow> = if args.windows > 1 {
        marks
            .windows(2)
            .map(|pair| {
                let (from, to) = (&pair[0], &pair[1]);
                let measured = from.until(to, to.failed - from.failed);
                EngineWindow {
                    measured,
                    workers: to.workers,
                    rss_per_target: per_target(to.rss),
                    lag_ms: from.lag_until(to),
                    sockets: sampler
                        .as_ref()
                        .map(|s| s.window(from.cpu.at, to.cpu.at))
                        .unwrap_or_default(),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let at_start = sampler.as_ref().and_then(SocketSampler::first);
    drop(sampler);
    for (i, w) in windows.iter().enumerate() {
        let [p50, p99, ..] = w.lag_ms.unwrap_or([f64::NAN; 4]);
        println!(
            "window {}/{}: {:.0} probes/s, {} failed, {:.0} probes per CPU-second, lag p50 {p50:.3} \
             / p99 {p99:.3} ms, {} workers, TIME_WAIT max {} ({} loopback sockets max, {} samples)",
            i + 1,
            windows.len(),
            w.measured.probes as f64 / w.measured.wall.as_secs_f64(),
            w.measured.failed,
            w.measured.per_cpu_s_excl(),
            w.workers,
            w.sockets.time_wait_max,
            w.sockets.all_max,
            w.sockets.samples
        );
    }
    if let Some(s) = at_start {
        println!(
            "loopback sockets before the phase: {} in TIME_WAIT, {} in all",
            s.time_wait, s.all
        );
    }

    cancel.cancel();
    engine.stopped().await;
    if let Counters::Count(_, _, lag) = counters {
        let n = lag.count.load(Ordering::Relaxed).max(1);
        println!(
            "engine scheduler lag over the whole phase: mean {:.3} ms, max {:.3} ms ({} runs)",
            lag.sum_ns.load(Ordering::Relaxed) as f64 / n as f64 / 1e6,
            lag.max_ns.load(Ordering::Relaxed) as f64 / 1e6,
            n
        );
    }
    let lag_ms = match (&first.lag, &last.lag) {
        (Some(before), Some(after)) => {
            let window: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
            let q = |q: f64| LagStats::quantile_ms(&window, q);
            let quantiles = [q(0.5), q(0.99), q(0.999), q(1.0)];
            println!(
                "engine scheduler lag over the measured window: p50 {:.3} ms, p99 {:.3} ms, \
                 p99.9 {:.3} ms, max {:.3} ms ({} runs; log-linear buckets, upper bounds)",
                quantiles[0],
                quantiles[1],
                quantiles[2],
                quantiles[3],
                window.iter().sum::<u64>()
            );
            Some(quantiles)
        }
        _ => None,
    };
    let rss_per_target = per_target(rss1);
    println!(
        "RSS: {} KiB before the specs, {} KiB at the end of the window: {rss_per_target:.0} \
         bytes per target",
        rss0 / 1024,
        rss1 / 1024
    );
    let failed_total = counters.failures_total();
    if failed_total > 0 {
        let mut details: Vec<String> = engine
            .statuses()
            .into_iter()
            .filter_map(|s| s.last_failure.map(|f| f.to_string()))
            .collect();
        details.sort();
        details.dedup();
        details.truncate(3);
        println!("engine failures, e.g.: {details:?}");
    }
    Ok((
        first.until(last, failed_total),
        workers,
        EngineExtra {
            rss_per_target,
            lag_ms,
            windows,
            sockets_at_start: at_start,
        },
    ))
}

#[derive(Default)]
struct FloorCounts {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// Runs the floor: `tasks` tasks share the slots of `--targets` targets round-robin, each slot
/// one bare connect + `SO_LINGER 0` + drop.
async fn floor_phase(
    args: &Args,
    listeners: &[SocketAddr],
    tasks: usize,
) -> anyhow::Result<Measured> {
    let counts = Arc::new(FloorCounts::default());
    let start = Instant::now();
    let end = start + args.warmup + args.duration;
    // Slot k of the whole floor is at start + k * interval / targets; task j takes k = j mod tasks.
    let slot = args.interval / u32::try_from(args.targets).context("--targets too large")?;
    let step = slot * u32::try_from(tasks).context("too many floor tasks")?;
    let timeout = args.floor_timeout.then(|| args.timeout());
    let mut handles = Vec::with_capacity(tasks);
    for j in 0..tasks {
        let counts = counts.clone();
        let listeners = listeners.to_vec();
        let first = start + slot * u32::try_from(j).context("too many floor tasks")?;
        handles.push(tokio::spawn(async move {
            let mut next = first;
            let mut k = j;
            while next < end {
                tokio::time::sleep_until(next).await;
                let now = Instant::now();
                while next <= now && next < end {
                    let addr = listeners[k % listeners.len()];
                    let ok = match timeout {
                        Some(t) => tokio::time::timeout(t, bare_connect(addr))
                            .await
                            .unwrap_or(false),
                        None => bare_connect(addr).await,
                    };
                    let counter = if ok { &counts.ok } else { &counts.failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                    next += step;
                    k += tasks;
                }
            }
        }));
    }

    let read = || {
        (
            counts.ok.load(Ordering::Relaxed) + counts.failed.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
        )
    };
    tokio::time::sleep_until(start + args.warmup).await;
    let (runs0, failed0) = read();
    let cpu0 = CpuSnapshot::take()?;
    tokio::time::sleep_until(end).await;
    let cpu1 = CpuSnapshot::take()?;
    let (runs1, failed1) = read();
    for handle in handles {
        handle.await.context("a floor task panicked")?;
    }
    Ok(Measured {
        probes: runs1 - runs0,
        failed: failed1 - failed0,
        failed_total: counts.failed.load(Ordering::Relaxed),
        wall: cpu1.at - cpu0.at,
        cpu_ticks: cpu1.process - cpu0.process,
        listener_ticks: cpu1.listeners - cpu0.listeners,
        switches: cpu1.switches - cpu0.switches,
        box_ticks: cpu1.whole_box - cpu0.whole_box,
    })
}

/// An experiment (`--probe lean`): the TCP tier's connect path for a plain connect target, minus
/// what a connect-only probe does not need: no `TCP_NODELAY` (nothing is sent) and no 4 KiB read
/// buffer inside the future (the library's `TcpProbe::check` future is about 4.5 KiB, boxed by
/// `async_trait` on every run). The same syscalls otherwise (non-blocking connect, `SO_LINGER 0`,
/// a deadline, the `SO_ERROR` check), run through the engine as a custom probe.
struct LeanConnect(SocketAddr);

#[async_trait::async_trait]
impl Probe for LeanConnect {
    async fn check(&self, timeout: Duration) -> CheckResult {
        self.connect(timeout).await.into()
    }
}

impl LeanConnect {
    async fn connect(&self, timeout: Duration) -> Result<(), Failure> {
        let io = |e: std::io::Error| Failure::io("connect", &e);
        let socket = if self.0.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .map_err(io)?;
        socket.set_zero_linger().map_err(io)?;
        // tokio's connect: a non-blocking connect, then writability and `SO_ERROR`.
        match tokio::time::timeout(timeout, socket.connect(self.0)).await {
            Err(_) => Err(Failure::new(FailureReason::Timeout, "connect timed out")),
            Ok(Err(e)) => Err(io(e)),
            Ok(Ok(_stream)) => Ok(()),
        }
    }
}

/// The floor's probe: connect, reset on close, drop.
async fn bare_connect(addr: SocketAddr) -> bool {
    match tokio::net::TcpStream::connect(addr).await {
        Ok(stream) => stream.set_zero_linger().is_ok(),
        Err(_) => false,
    }
}

/// Counts sockets in `/proc/net/tcp` whose local or remote port is one of `ports`, by state,
/// leaving out the listeners themselves.
fn socket_states(ports: &[u16]) -> anyhow::Result<BTreeMap<&'static str, usize>> {
    let table = std::fs::read_to_string("/proc/net/tcp").context("reading /proc/net/tcp")?;
    let mut states = BTreeMap::new();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(state)) =
            (fields.get(1), fields.get(2), fields.get(3))
        else {
            continue;
        };
        let port = |addr: &str| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        let ours = [port(local), port(remote)]
            .iter()
            .any(|p| p.is_some_and(|p| ports.contains(&p)));
        if !ours {
            continue;
        }
        let name = match *state {
            "01" => "ESTABLISHED",
            "02" => "SYN_SENT",
            "03" => "SYN_RECV",
            "04" => "FIN_WAIT1",
            "05" => "FIN_WAIT2",
            "06" => "TIME_WAIT",
            "07" => "CLOSE",
            "08" => "CLOSE_WAIT",
            "09" => "LAST_ACK",
            "0A" => continue, // LISTEN
            "0B" => "CLOSING",
            _ => "OTHER",
        };
        *states.entry(name).or_insert(0) += 1;
    }
    Ok(states)
}

fn fmt_states(states: &BTreeMap<&'static str, usize>) -> String {
    if states.is_empty() {
        return "none".into();
    }
    states
        .iter()
        .map(|(s, n)| format!("{s}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where run and failure counts come from.
enum Counters {
    /// The counting recorder's atomics.
    Count(Arc<RunCounter>, Arc<AtomicU64>, Arc<LagStats>),
    /// The Prometheus recorder, for the exact failure total at the end; runs are counted from
    /// the engine's statuses, since rendering 1000 targets' histograms inside the measured window
    /// would skew it.
    Prometheus(PrometheusHandle),
}

impl Counters {
    /// (runs, failed runs) so far. With Prometheus, from the statuses: the sum of consecutive
    /// successes and failures, exact as long as no target mixes results (then failures > 0 shows).
    fn read(&self, engine: &Engine) -> (u64, u64) {
        match self {
            Self::Count(runs, failures, _) => (
                runs.0.load(Ordering::Relaxed),
                failures.load(Ordering::Relaxed),
            ),
            Self::Prometheus(_) => engine.statuses().iter().fold((0, 0), |(runs, failed), s| {
                let (ok, bad) = (
                    u64::from(s.consecutive_successes),
                    u64::from(s.consecutive_failures),
                );
                (runs + ok + bad, failed + bad)
            }),
        }
    }

    /// The lag histogram's bucket counts so far (counting recorder only).
    fn lag_buckets(&self) -> Option<Vec<u64>> {
        match self {
            Self::Count(_, _, lag) => Some(
                lag.buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            ),
            Self::Prometheus(_) => None,
        }
    }

    /// Failed runs since the start, exactly.
    fn failures_total(&self) -> u64 {
        match self {
            Self::Count(_, failures, _) => failures.load(Ordering::Relaxed),
            Self::Prometheus(handle) => sum_series(&handle.render(), "probe_fleet_failures_total"),
        }
    }
}

/// Sums every series of `name` (any labels) in a Prometheus text exposition.
fn sum_series(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Installs the [`CountingRecorder`] as the process's recorder: what it counts (runs, failed
/// runs, the scheduler's lag), for the harnesses that read the engine's own figures.
pub(crate) fn install_counting_recorder()
-> anyhow::Result<(Arc<RunCounter>, Arc<AtomicU64>, Arc<LagStats>)> {
    let runs = Arc::new(RunCounter::default());
    let failures = Arc::new(AtomicU64::new(0));
    let lag = Arc::new(LagStats::default());
    metrics::set_global_recorder(CountingRecorder {
        runs: runs.clone(),
        failures: failures.clone(),
        lag: lag.clone(),
    })
    .map_err(|e| anyhow::anyhow!("installing the counting recorder: {e}"))?;
    Ok((runs, failures, lag))
}

fn install_metrics(mode: MetricsMode) -> anyhow::Result<Counters> {
    match mode {
        MetricsMode::Count => {
            let (runs, failures, lag) = install_counting_recorder()?;
            Ok(Counters::Count(runs, failures, lag))
        }
        MetricsMode::Prometheus => {
            // The daemon's configuration: bucketed histograms for the per-target durations and
            // the scheduler lag.
            // The daemon's own exporter settings, so the figures match what it pays.
            let handle = probe_engine::daemon::prometheus_builder()?
                .install_recorder()
                .context("installing the Prometheus recorder")?;
            probe::engine::describe_metrics();
            Ok(Counters::Prometheus(handle))
        }
    }
}

/// Count, sum and max of the scheduler lag, in nanoseconds, and a log-linear histogram of it in
/// microseconds for quantiles.
pub(crate) struct LagStats {
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    pub(crate) buckets: Box<[AtomicU64]>,
}

/// Buckets of [`LagStats`]: 1 us wide below 32 us, then 16 per power of two (up to 2^40 us).
const LAG_BUCKETS: usize = 32 + 36 * 16;

impl Default for LagStats {
    fn default() -> Self {
        Self {
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            buckets: (0..LAG_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LagStats {
    fn bucket(us: u64) -> usize {
        if us < 32 {
            return us as usize;
        }
        let exp = 63 - u64::from(us.leading_zeros()); // >= 5
        let sub = (us >> (exp - 4)) & 15;
        (32 + (exp - 5) * 16 + sub).min(LAG_BUCKETS as u64 - 1) as usize
    }

    /// The exclusive upper bound of bucket `i`, in microseconds.
    fn upper_us(i: usize) -> u64 {
        if i < 32 {
            return i as u64 + 1;
        }
        let exp = (i - 32) / 16 + 5;
        let sub = ((i - 32) % 16) as u64;
        (16 + sub + 1) << (exp - 4)
    }

    /// The `q` quantile of `counts` (bucket counts), as its bucket's upper bound, in ms.
    pub(crate) fn quantile_ms(counts: &[u64], q: f64) -> f64 {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::upper_us(i) as f64 / 1e3;
            }
        }
        Self::upper_us(counts.len() - 1) as f64 / 1e3
    }
}

impl metrics::HistogramFn for LagStats {
    fn record(&self, seconds: f64) {
        let ns = (seconds.max(0.0) * 1e9) as u64;
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        self.buckets[Self::bucket(ns / 1000)].fetch_add(1, Ordering::Relaxed);
    }
}

/// A recorder that counts runs and failures, keeps lag statistics and ignores every other
/// metric.
pub(crate) struct CountingRecorder {
    pub(crate) runs: Arc<RunCounter>,
    pub(crate) failures: Arc<AtomicU64>,
    pub(crate) lag: Arc<LagStats>,
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == "probe_fleet_failures_total" {
            Counter::from_arc(self.failures.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() == "probe_fleet_duration_seconds" {
            Histogram::from_arc(self.runs.clone())
        } else if key.name() == "probe_scheduler_lag_seconds" {
            Histogram::from_arc(self.lag.clone())
        } else {
            Histogram::noop()
        }
    }
}

/// Runs blackbox_exporter's `tcp_connect` module against the listeners, driven through its
/// `/probe` endpoint by `--blackbox-concurrency` tasks for warm-up plus duration; measures the
/// exporter's CPU over the window.
async fn blackbox_phase(
    args: &Args,
    listeners: &[SocketAddr],
    binary: &std::path::Path,
) -> anyhow::Result<Measured> {
    use probe::outcome::Verdict;
    use probe::tier::http::HttpProbe;

    // Not the engine's timeout (half the interval): a saturated exporter needs the headroom, and
    // its timeout sets no rate.
    let timeout = Duration::from_secs(1);
    let exporter = support::Blackbox::start(binary, "tcp_connect", "tcp", timeout)?;
    let (pid, port, version) = (
        exporter.pid().to_string(),
        exporter.port(),
        exporter.version(),
    );
    println!(
        "blackbox_exporter: {} (pid {pid}, 127.0.0.1:{port}), module tcp_connect (timeout {} ms), \
         driven by {} concurrent /probe requests; {} s warm-up, then {} s measured",
        version.trim(),
        timeout.as_millis(),
        args.blackbox_concurrency,
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let spec = |target: SocketAddr| exporter.spec(&target.to_string());
    exporter
        .wait_ready(spec(listeners[0])?, Duration::from_secs(2))
        .await?;

    let counts = Arc::new(FloorCounts::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut handles = Vec::new();
    let names = probe::tier::resolve::Names::system();
    for i in 0..args.blackbox_concurrency {
        let probe = HttpProbe::new(spec(listeners[i % listeners.len()])?, names.clone());
        let (counts, stop) = (counts.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut failure = None;
            while !stop.load(Ordering::Relaxed) {
                match probe.check(Duration::from_secs(2)).await.verdict {
                    Verdict::Failed(f) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                        failure.get_or_insert(f);
                    }
                    _ => {
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            failure
        }));
    }
    let read = || {
        (
            counts.ok.load(Ordering::Relaxed) + counts.failed.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
        )
    };
    tokio::time::sleep(args.warmup).await;
    let (runs0, failed0) = read();
    let (cpu0, box0, at0) = (
        support::cpu_ticks(&pid)?,
        support::box_ticks()?,
        Instant::now(),
    );
    tokio::time::sleep(args.duration).await;
    let (cpu1, box1, at1) = (
        support::cpu_ticks(&pid)?,
        support::box_ticks()?,
        Instant::now(),
    );
    let (runs1, failed1) = read();
    stop.store(true, Ordering::Relaxed);
    let mut first_failure = None;
    for handle in handles {
        if let Some(f) = handle.await.context("a blackbox driver task panicked")? {
            first_failure.get_or_insert(f);
        }
    }
    if let Some(f) = first_failure {
        println!("blackbox: first failure: {f}");
    }
    Ok(Measured {
        probes: runs1 - runs0,
        failed: failed1 - failed0,
        failed_total: counts.failed.load(Ordering::Relaxed),
        wall: at1 - at0,
        cpu_ticks: cpu1 - cpu0,
        listener_ticks: 0,
        switches: 0,
        box_ticks: box1 - box0,
    })
}
