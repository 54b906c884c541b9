//! Load harness: HTTP probes per CPU-second of the library's HTTP tier, with kept-alive
//! connections and with a fresh connection per probe, against Prometheus' blackbox_exporter.
//!
//! ```text
//! probe-bench http-load [--duration-s 10] [--warmup-s 2]
//!     [--concurrency 64] [--threads 1] [--server-threads 1]
//!     [--mode both|reuse|fresh] [--blackbox PATH|none] [--blackbox-concurrency 64]
//! ```
//!
//! **Server**: a minimal axum server (`GET /ready` answers `200`, a small JSON body) runs in a
//! child process (this same binary as `http-load --serve N`, `--server-threads` tokio workers),
//! so that its CPU is not counted as the prober's. It is shared by every phase.
//!
//! **Prober phases** (`reuse`, then `fresh`): this process runs `--concurrency` tasks on a
//! `--threads`-worker tokio runtime, each with its own [`HttpProbe`] (as the engine has one per
//! target) and checking in a loop, as fast as the server answers: a saturating load, so the
//! figure is the prober's cost per probe, not a rate someone chose. The spec is a plain `GET`
//! expecting `2xx` (what blackbox's `http_2xx` module checks), with `fresh_connection` off, then
//! on. Each phase warms up for `--warmup-s`, then measures `--duration-s`: probes completed and
//! this process's CPU time (`utime + stime` from `/proc/self/stat`). The server's CPU is shown
//! for information.
//!
//! **blackbox_exporter phase**: starts `--blackbox` (default `prometheus-blackbox-exporter`, the
//! Debian package's binary; skipped with a note when missing or with `--blackbox none`) on a
//! loopback port with an `http_2xx` module, and drives its `/probe?target=...&module=http_2xx`
//! endpoint from this process with `--blackbox-concurrency` concurrent requests (kept-alive
//! connections to the exporter, each reply checked for `probe_success 1`). blackbox_exporter
//! makes a new HTTP client, and so a new connection, for every probe: it compares with the
//! `fresh` phase. Its CPU is read from `/proc/PID/stat`; the driver's own CPU is not counted.
//!
//! The report gives probes per CPU-second and CPU microseconds per probe for each phase, and the
//! ratios to blackbox_exporter (goal: `fresh` at least 8x blackbox_exporter). After each prober
//! phase it also counts the `TIME_WAIT` sockets towards the server's port (`/proc/net/tcp`):
//! none are expected, since `fresh_connection` resets its connections.
//!
//! Every phase also reads the whole machine's busy CPU (`/proc/stat`) over its window, for probes
//! per box CPU-second (server, driver and anything else running included). Every figure is also
//! printed as a line `RESULT scenario=http metric=<name> value=<number> unit=<unit>` for
//! `scripts/bench`.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use probe::outcome::Verdict;
use probe::tier::Probe;
use probe::tier::http::{HttpProbe, HttpSpec};
use tokio::time::Instant;

use crate::support::{self, ChildGuard, TICKS_PER_SEC};

/// The per-probe timeout, for the library's probes and blackbox_exporter's module alike.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The goal: the library in fresh-connection mode against blackbox_exporter, per CPU-second.
const GOAL_RATIO: f64 = 8.0;
/// The body the test server answers with.
const BODY: &str = r#"{"status":"UP"}"#;

/// Flags of `probe-bench http-load`.
#[derive(clap::Args)]
pub struct Args {
    /// Measured time of each phase, in seconds (fractions allowed).
    #[arg(long = "duration-s", value_name = "S", default_value = "10", value_parser = support::secs)]
    duration: Duration,
    /// Warm-up of each phase before it is measured, in seconds.
    #[arg(long = "warmup-s", value_name = "S", default_value = "2", value_parser = support::secs)]
    warmup: Duration,
    /// Concurrent probes of the prober phases, each in its own checking loop.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Worker threads of the prober's tokio runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Worker threads of the server process.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// The prober phases: kept-alive connections (reuse), a fresh one per probe, or both.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    mode: Mode,
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
    /// Runs as the server process with this many threads (how the harness starts its server).
    #[arg(long, value_name = "THREADS", hide = true)]
    serve: Option<usize>,
}

/// The `--mode` choices.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Both prober phases, reuse then fresh.
    Both,
    /// Kept-alive connections only.
    Reuse,
    /// A fresh connection per probe only.
    Fresh,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.duration.is_zero()
            || self.concurrency == 0
            || self.threads == 0
            || self.server_threads == 0
            || self.blackbox_concurrency == 0
        {
            bail!("--duration-s must be above 0, --concurrency and the thread counts at least 1");
        }
        Ok(())
    }
}

/// Runs `probe-bench http-load`, or its server process with `--serve`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.serve {
        Some(threads) => serve(threads),
        None => {
            args.validate()?;
            measure_all(args)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server process.

/// `--serve THREADS`: binds 127.0.0.1:0, prints the port on stdout, serves until stdin closes
/// (the harness holds it open, so the server cannot outlive the harness).
fn serve(threads: usize) -> anyhow::Result<()> {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?.port());
        std::io::stdout().flush()?;
        let app = axum::Router::new().route(
            "/ready",
            axum::routing::get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    BODY,
                )
            }),
        );
        axum::serve(listener, app).await?;
        anyhow::Ok(())
    })
}

fn start_server(threads: usize) -> anyhow::Result<(ChildGuard, SocketAddr)> {
    let threads = threads.to_string();
    support::start_child_server(
        &["http-load".as_ref(), "--serve".as_ref(), threads.as_ref()],
        "server",
    )
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// One phase's figures over its measured window.
struct Measured {
    name: &'static str,
    probes: u64,
    failed: u64,
    wall: Duration,
    /// CPU of the process doing the probing (this one, or blackbox_exporter).
    cpu_ticks: u64,
    /// CPU of the test server, for information.
    server_ticks: u64,
    /// Busy CPU of the whole machine (`/proc/stat`) over the window.
    box_ticks: u64,
}

impl Measured {
    fn cpu_s(&self) -> f64 {
        self.cpu_ticks as f64 / TICKS_PER_SEC
    }
    fn per_cpu_s(&self) -> f64 {
        self.probes as f64 / self.cpu_s().max(f64::MIN_POSITIVE)
    }
    fn per_box_cpu_s(&self) -> f64 {
        self.probes as f64 / (self.box_ticks as f64 / TICKS_PER_SEC).max(f64::MIN_POSITIVE)
    }
    fn print(&self) {
        println!(
            "{:<10} {:>9} {:>7} {:>7.2} {:>9.0} {:>7.2} {:>13.0} {:>10.1} {:>11.2}",
            self.name,
            self.probes,
            self.failed,
            self.wall.as_secs_f64(),
            self.probes as f64 / self.wall.as_secs_f64(),
            self.cpu_s(),
            self.per_cpu_s(),
            self.cpu_s() * 1e6 / self.probes.max(1) as f64,
            self.server_ticks as f64 / TICKS_PER_SEC,
        );
    }
}

/// Runs `tasks` loops of `probe` (one per task) for warm-up plus duration, measuring `pid`'s CPU
/// over the window after the warm-up.
async fn measure(
    name: &'static str,
    args: &Args,
    probes: Vec<Arc<dyn Probe>>,
    pid: &str,
    server_pid: &str,
) -> anyhow::Result<Measured> {
    let counts = Arc::new(support::Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let mut first_failure = None;
    for probe in probes {
        let (counts, stop) = (counts.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut failure = None;
            while !stop.load(Ordering::Relaxed) {
                let result = probe.check(PROBE_TIMEOUT).await;
                if let Verdict::Failed(f) = result.verdict {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    failure.get_or_insert(f);
                } else {
                    counts.ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            failure
        }));
    }
    tokio::time::sleep(args.warmup).await;
    let (probes0, failed0) = counts.read();
    let (cpu0, server0, box0, at0) = (
        support::cpu_ticks(pid)?,
        support::cpu_ticks(server_pid)?,
        support::box_ticks()?,
        Instant::now(),
    );
    tokio::time::sleep(args.duration).await;
    let (cpu1, server1, box1, at1) = (
        support::cpu_ticks(pid)?,
        support::cpu_ticks(server_pid)?,
        support::box_ticks()?,
        Instant::now(),
    );
    let (probes1, failed1) = counts.read();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        if let Some(f) = handle.await.context("a probe task panicked")? {
            first_failure.get_or_insert(f);
        }
    }
    if let Some(f) = first_failure {
        println!("{name}: first failure: {f}");
    }
    Ok(Measured {
        name,
        probes: probes1 - probes0,
        failed: failed1 - failed0,
        wall: at1 - at0,
        cpu_ticks: cpu1 - cpu0,
        server_ticks: server1 - server0,
        box_ticks: box1 - box0,
    })
}

// ---------------------------------------------------------------------------------------------
// Phases.

fn measure_all(args: Args) -> anyhow::Result<()> {
    let (server, addr) = start_server(args.server_threads)?;
    let server_pid = server.pid().to_string();
    let target = format!("http://{addr}/ready");
    println!(
        "http_load: server {target} (pid {server_pid}, {} threads); prober: {} concurrent \
         probes on {} runtime threads; {} s warm-up + {} s measured per phase",
        args.server_threads,
        args.concurrency,
        args.threads,
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    let mut phases = Vec::new();
    let mut time_waits = Vec::new();
    let (want_reuse, want_fresh) = match args.mode {
        Mode::Both => (true, true),
        Mode::Reuse => (true, false),
        Mode::Fresh => (false, true),
    };
    for (name, fresh, wanted) in [("reuse", false, want_reuse), ("fresh", true, want_fresh)] {
        if !wanted {
            continue;
        }
        // One resolver for all probes, as in an engine.
        let names = probe::tier::resolve::Names::system();
        let probes = (0..args.concurrency)
            .map(|_| {
                let mut spec = HttpSpec::get(target.parse()?);
                spec.fresh_connection = fresh;
                Ok(Arc::new(HttpProbe::new(spec, names.clone())) as Arc<dyn Probe>)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        phases.push(runtime.block_on(measure(name, &args, probes, "self", &server_pid))?);
        let tw = time_wait(addr.port())?;
        println!("{name}: TIME_WAIT sockets towards the server port: {tw}");
        time_waits.push((name, tw));
    }
    let blackbox = match (args.blackbox != "none").then_some(args.blackbox.as_str()) {
        None => None,
        Some(path) => match support::which(path) {
            Some(binary) => {
                Some(runtime.block_on(blackbox_phase(&args, &binary, &target, &server_pid))?)
            }
            None => {
                println!(
                    "blackbox_exporter: {path:?} not found, comparison skipped \
                     (apt-get install prometheus-blackbox-exporter)"
                );
                None
            }
        },
    };

    println!();
    println!(
        "{:<10} {:>9} {:>7} {:>7} {:>9} {:>7} {:>13} {:>10} {:>11}",
        "phase",
        "probes",
        "failed",
        "wall_s",
        "probes/s",
        "cpu_s",
        "probes/cpu_s",
        "us/probe",
        "server_cpu"
    );
    for phase in phases.iter().chain(&blackbox) {
        phase.print();
    }
    if let Some(bb) = &blackbox {
        println!();
        for phase in &phases {
            let ratio = phase.per_cpu_s() / bb.per_cpu_s().max(f64::MIN_POSITIVE);
            let goal = if phase.name == "fresh" {
                let verdict = if ratio >= GOAL_RATIO { "met" } else { "MISSED" };
                format!(" (goal >= {GOAL_RATIO:.0}x: {verdict})")
            } else {
                String::new()
            };
            println!(
                "{} / blackbox_exporter, probes per CPU-second: {ratio:.1}x{goal}",
                phase.name
            );
        }
    }
    println!();
    for phase in phases.iter().chain(&blackbox) {
        println!(
            "{}: whole-box CPU {:.2} s over {:.2} s ({:.0} probes per box CPU-second)",
            phase.name,
            phase.box_ticks as f64 / TICKS_PER_SEC,
            phase.wall.as_secs_f64(),
            phase.per_box_cpu_s()
        );
    }

    // The same figures for scripts/bench.
    let result =
        |metric: &str, value: f64, unit: &str| support::result("http", metric, value, unit);
    for phase in phases.iter().chain(&blackbox) {
        let name = phase.name;
        result(
            &format!("{name}_probes_per_s"),
            phase.probes as f64 / phase.wall.as_secs_f64(),
            "probes/s",
        );
        result(
            &format!("{name}_probes_per_cpu_s"),
            phase.per_cpu_s(),
            "probes/cpu-s",
        );
        result(
            &format!("{name}_us_per_probe"),
            phase.cpu_s() * 1e6 / phase.probes.max(1) as f64,
            "us",
        );
        result(
            &format!("{name}_probes_per_box_cpu_s"),
            phase.per_box_cpu_s(),
            "probes/cpu-s",
        );
        result(&format!("{name}_failed"), phase.failed as f64, "probes");
    }
    for (name, tw) in &time_waits {
        result(&format!("{name}_time_wait"), *tw as f64, "sockets");
    }
    if let Some(bb) = &blackbox {
        for phase in &phases {
            let name = phase.name;
            result(
                &format!("{name}_vs_blackbox"),
                phase.per_cpu_s() / bb.per_cpu_s().max(f64::MIN_POSITIVE),
                "x",
            );
            result(
                &format!("{name}_vs_blackbox_box_cpu"),
                phase.per_box_cpu_s() / bb.per_box_cpu_s().max(f64::MIN_POSITIVE),
                "x",
            );
        }
    }
    Ok(())
}

/// Sockets in `TIME_WAIT` (state `06` in `/proc/net/tcp`) whose local or remote port is `port`.
fn time_wait(port: u16) -> anyhow::Result<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").context("reading /proc/net/tcp")?;
    let port_of = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    Ok(table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.get(3) == Some(&"06"))
        .filter(|f| {
            [f.get(1), f.get(2)]
                .into_iter()
                .flatten()
                .any(|a| port_of(a) == Some(port))
        })
        .count())
}

async fn blackbox_phase(
    args: &Args,
    binary: &std::path::Path,
    target: &str,
    server_pid: &str,
) -> anyhow::Result<Measured> {
    let exporter = support::Blackbox::start(binary, "http_2xx", "http", PROBE_TIMEOUT)?;
    println!(
        "blackbox_exporter: {} (pid {}, 127.0.0.1:{}), module http_2xx, driven by {} \
         concurrent /probe requests",
        exporter.version(),
        exporter.pid(),
        exporter.port(),
        args.blackbox_concurrency
    );
    let spec = exporter.spec(target)?;
    exporter.wait_ready(spec.clone(), PROBE_TIMEOUT).await?;
    let names = probe::tier::resolve::Names::system();
    let probes = (0..args.blackbox_concurrency)
        .map(|_| Arc::new(HttpProbe::new(spec.clone(), names.clone())) as Arc<dyn Probe>)
        .collect();
    let pid = exporter.pid().to_string();
    measure("blackbox", args, probes, &pid, server_pid).await
}
