//! Load harness: the real engine with 10k TLS certificate targets every minute against one local
//! TLS server: scheduler lag and the engine's CPU.
//!
//! ```text
//! probe-bench tls-load [--targets 10000] [--interval-s 60] [--intervals 2] [--warmup-s S]
//!     [--threads 2] [--server-threads 1] [--scenario tls-10k]
//! ```
//!
//! **Server**: a rustls server on 127.0.0.1 presenting a certificate for `127.0.0.1` signed by a
//! CA of its own (rcgen, ECDSA P-256), in a child process (this same binary as `tls-load
//! --serve N --ca-file PATH`, `--server-threads` tokio workers), which writes the CA to
//! `PATH` and prints its port. It completes each handshake and drops the connection. Being a
//! process of its own, its CPU is not the engine's: it is printed for information.
//!
//! **Engine**: the real [`Engine`] in this process, on a `--threads`-worker runtime, with
//! `--targets` targets, each with its own [`TlsSpec`] (the server's address, checked as
//! `127.0.0.1` against the CA: a full handshake every run, session resumption being off in the
//! tier) on a `--interval-s` schedule (jitter 0.1, timeout 5 s). The first runs spread over the
//! first interval (each target's grid offset); `--warmup-s` (one interval by default) covers
//! them, then `--intervals` whole intervals are measured: 10,000 targets a minute are 167
//! handshakes a second.
//!
//! **Figures**, over the measured window: probe runs and failed runs (a recorder that counts
//! `probe_fleet_duration_seconds` records and `probe_fleet_failures_total`), the scheduler lag
//! (`probe_scheduler_lag_seconds`, into the same log-linear histogram `tcp-load` uses: p50, p99,
//! p99.9, max), this process's CPU (`utime + stime` from `/proc/self/stat`) as CPU seconds per
//! minute, cores and microseconds per probe, the TLS server process's CPU likewise (not counted
//! as the engine's), the machine's busy CPU, and the engine's `VmRSS` growth per target. Printed
//! as `RESULT scenario=<--scenario> metric=<name> ...` lines for `scripts/bench`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::tier::ProbeSpec;
use probe::tier::tls::{CaBundle, TlsSpec, TlsTrust};
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, ChildGuard, RunCounter, TICKS_PER_SEC};
use crate::tcp_load::LagStats;

/// Flags of `probe-bench tls-load`.
#[derive(clap::Args)]
pub struct Args {
    /// TLS certificate targets, all against the one server.
    #[arg(long, default_value_t = 10_000)]
    targets: usize,
    /// Each target's interval, in seconds.
    #[arg(long = "interval-s", value_name = "S", default_value = "60", value_parser = support::secs)]
    interval: Duration,
    /// Whole intervals measured after the warm-up.
    #[arg(long, default_value_t = 2)]
    intervals: u32,
    /// Warm-up before the measured window, in seconds (default: one interval, which holds every
    /// target's first run).
    #[arg(long = "warmup-s", value_name = "S", value_parser = support::secs)]
    warmup: Option<Duration>,
    /// Worker threads of the engine's tokio runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Worker threads of the TLS server process.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// The `scenario` of the RESULT lines.
    #[arg(long, default_value = "tls-10k")]
    scenario: String,
    /// Runs as the TLS server process with this many threads (how the harness starts it).
    #[arg(long, value_name = "THREADS", hide = true)]
    serve: Option<usize>,
    /// Where the server process writes its CA certificate (with `--serve`).
    #[arg(long, value_name = "PATH", hide = true)]
    ca_file: Option<PathBuf>,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.targets == 0 || self.threads == 0 || self.server_threads == 0 {
            bail!("--targets and the thread counts must be at least 1");
        }
        if self.interval < Duration::from_secs(1) || self.intervals == 0 {
            bail!("--interval-s must be at least 1 and --intervals at least 1");
        }
        Ok(())
    }

    fn warmup(&self) -> Duration {
        self.warmup.unwrap_or(self.interval)
    }

    /// The probe timeout: 5 s, less on a short interval.
    fn timeout(&self) -> Duration {
        (self.interval / 2).min(Duration::from_secs(5))
    }

    fn planned_rate(&self) -> f64 {
        self.targets as f64 / self.interval.as_secs_f64()
    }
}

/// Runs `probe-bench tls-load`, or its server process with `--serve`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(threads) = args.serve {
        let ca_file = args.ca_file.as_deref().context("--serve needs --ca-file")?;
        return serve(threads, ca_file);
    }
    args.validate()?;
    let (runs, failures, lag) = crate::tcp_load::install_counting_recorder()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(measure(&args, &runs, &failures, &lag))
}

// ---------------------------------------------------------------------------------------------
// The server process.

/// `--serve THREADS --ca-file PATH`: makes a CA and a certificate for 127.0.0.1, writes the CA
/// to `PATH`, binds 127.0.0.1:0, prints the port and completes handshakes until stdin closes
/// (the harness holds it open, so the server cannot outlive the harness).
fn serve(threads: usize, ca_file: &Path) -> anyhow::Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let ca_key = KeyPair::generate().context("CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "probe-bench CA");
    let ca = ca_params.self_signed(&ca_key).context("CA certificate")?;
    std::fs::write(ca_file, ca.pem()).with_context(|| format!("writing {}", ca_file.display()))?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().context("server key")?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let leaf = params
        .signed_by(&key, &issuer)
        .context("server certificate")?;
    let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone(), ca.der().clone()];
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, PrivateKeyDer::Pkcs8(key.serialize_der().into()))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?.port());
        std::io::stdout().flush()?;
        loop {
            // An accept error (out of descriptors) is the server's, not a probe's: try again.
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // The probe resets once its handshake is done: nothing more to serve.
                let _ = acceptor.accept(stream).await;
            });
        }
    })
}

/// Starts the server process; its guard, address and CA.
fn start_server(threads: usize, dir: &Path) -> anyhow::Result<(ChildGuard, SocketAddr, Vec<u8>)> {
    let ca_file = dir.join("ca.pem");
    let threads = threads.to_string();
    let (guard, addr) = support::start_child_server(
        &[
            "tls-load".as_ref(),
            "--serve".as_ref(),
            threads.as_ref(),
            "--ca-file".as_ref(),
            ca_file.as_os_str(),
        ],
        "TLS server",
    )?;
    let ca = std::fs::read(&ca_file).with_context(|| format!("reading {}", ca_file.display()))?;
    Ok((guard, addr, ca))
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// The counters at one instant: the window is the difference of two.
struct Mark {
    at: Instant,
    runs: u64,
    failed: u64,
    lag: Vec<u64>,
    cpu: u64,
    server_cpu: u64,
    whole_box: u64,
    rss: u64,
}

impl Mark {
    fn take(
        runs: &RunCounter,
        failures: &AtomicU64,
        lag: &LagStats,
        server_pid: &str,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            at: Instant::now(),
            runs: runs.0.load(Ordering::Relaxed),
            failed: failures.load(Ordering::Relaxed),
            lag: lag
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            cpu: support::cpu_ticks("self")?,
            server_cpu: support::cpu_ticks(server_pid)?,
            whole_box: support::box_ticks()?,
            rss: support::vm_rss()?,
        })
    }
}

async fn measure(
    args: &Args,
    runs: &RunCounter,
    failures: &AtomicU64,
    lag: &LagStats,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (server, addr, ca) = start_server(args.server_threads, dir.path())?;
    let server_pid = server.pid().to_string();
    let warmup = args.warmup();
    let window = args.interval * args.intervals;
    println!(
        "tls_load: {} TLS targets every {} s = {:.1} handshakes/s planned, timeout {} ms, \
         against {addr} (server pid {server_pid}, {} threads); engine on {} runtime threads; \
         {} s warm-up, then {} intervals ({} s) measured",
        args.targets,
        args.interval.as_secs_f64(),
        args.planned_rate(),
        args.timeout().as_millis(),
        args.server_threads,
        args.threads,
        warmup.as_secs_f64(),
        args.intervals,
        window.as_secs_f64()
    );

    let rss0 = support::vm_rss()?;
    let schedule = Schedule::try_new(ScheduleSettings {
        interval: args.interval,
        timeout: args.timeout(),
        jitter: 0.1,
        ..ScheduleSettings::default()
    })?;
    let trust = TlsTrust::WithCa(CaBundle::from_pem(&ca)?);
    let specs = (0..args.targets)
        .map(|i| {
            let mut tls = TlsSpec::new(Address::Socket(addr))?;
            tls.trust = trust.clone();
            Ok(TargetSpec::new(
                TargetId::new(&format!("tls-{i:05}"))?,
                ProbeSpec::Tls(Box::new(tls)),
            )
            .with_schedule(schedule)
            .with_thresholds(Thresholds::default()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cancel = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    engine
        .apply(specs)
        .map_err(|e| anyhow::anyhow!("applying the targets: {e}"))?;
    tokio::time::sleep(warmup).await;
    let first = Mark::take(runs, failures, lag, &server_pid)?;
    let workers0 = engine.workload().workers;
    tokio::time::sleep_until(first.at + window).await;
    let last = Mark::take(runs, failures, lag, &server_pid)?;
    let workers = engine.workload().workers;
    let statuses = engine.statuses();
    let up = statuses
        .iter()
        .filter(|s| s.state == HealthState::Up)
        .count();
    let mut failures_seen: Vec<String> = statuses
        .iter()
        .filter_map(|s| s.last_failure.as_ref().map(ToString::to_string))
        .collect();
    failures_seen.sort();
    failures_seen.dedup();
    failures_seen.truncate(3);
    cancel.cancel();
    engine.stopped().await;
    drop(server);

    let wall = (last.at - first.at).as_secs_f64();
    let probes = last.runs - first.runs;
    let failed = last.failed - first.failed;
    let cpu_s = (last.cpu - first.cpu) as f64 / TICKS_PER_SEC;
    let server_s = (last.server_cpu - first.server_cpu) as f64 / TICKS_PER_SEC;
    let box_s = (last.whole_box - first.whole_box) as f64 / TICKS_PER_SEC;
    let buckets: Vec<u64> = last
        .lag
        .iter()
        .zip(&first.lag)
        .map(|(a, b)| a - b)
        .collect();
    let q = |q: f64| LagStats::quantile_ms(&buckets, q);
    let (p50, p99, p999, max) = (q(0.5), q(0.99), q(0.999), q(1.0));
    let rss_per_target = last.rss.saturating_sub(rss0) as f64 / args.targets as f64;
    let per_min = 60.0 / wall;

    println!(
        "measured {wall:.1} s: {probes} runs ({:.1}/s, planned {:.1}/s), {failed} failed; \
         {up}/{} targets UP at the end",
        probes as f64 / wall,
        args.planned_rate(),
        args.targets
    );
    if !failures_seen.is_empty() {
        println!("failures, e.g.: {failures_seen:?}");
    }
    println!(
        "engine CPU (this process): {cpu_s:.2} s = {:.2} CPU-s per minute, {:.3} cores, {:.0} us \
         per probe",
        cpu_s * per_min,
        cpu_s / wall,
        cpu_s * 1e6 / probes.max(1) as f64
    );
    println!(
        "TLS server CPU (its own process, not counted): {server_s:.2} s = {:.2} CPU-s per \
         minute, {:.0} us per handshake; whole box: {box_s:.2} s",
        server_s * per_min,
        server_s * 1e6 / probes.max(1) as f64
    );
    println!(
        "scheduler lag over the window: p50 {p50:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, \
         max {max:.3} ms ({} runs; log-linear buckets, upper bounds); workers {workers0} after \
         the warm-up, {workers} at the end",
        buckets.iter().sum::<u64>()
    );
    println!(
        "RSS: {} KiB before the specs, {} KiB at the end: {rss_per_target:.0} bytes per target",
        rss0 / 1024,
        last.rss / 1024
    );

    let scenario = args.scenario.as_str();
    let result =
        |metric: &str, value: f64, unit: &str| support::result(scenario, metric, value, unit);
    result("probes_per_s", probes as f64 / wall, "probes/s");
    result("planned_probes_per_s", args.planned_rate(), "probes/s");
    result("failed", failed as f64, "probes");
    result("up_at_end", up as f64, "targets");
    result("cpu_s_per_min", cpu_s * per_min, "cpu-s/min");
    result("cpu_cores", cpu_s / wall, "cores");
    result("us_per_probe", cpu_s * 1e6 / probes.max(1) as f64, "us");
    result("server_cpu_s_per_min", server_s * per_min, "cpu-s/min");
    result(
        "server_us_per_handshake",
        server_s * 1e6 / probes.max(1) as f64,
        "us",
    );
    result("box_cpu_s_per_min", box_s * per_min, "cpu-s/min");
    result("lag_p50", p50, "ms");
    result("lag_p99", p99, "ms");
    result("lag_p999", p999, "ms");
    result("lag_max", max, "ms");
    result("engine_workers", workers as f64, "workers");
    result("rss_per_target", rss_per_target, "bytes");
    Ok(())
}
