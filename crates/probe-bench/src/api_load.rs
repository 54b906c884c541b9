//! Load harness: the daemon's health API under load, while it probes 10k TCP targets a second.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench --bin probe-engine --bin probe-bench
//! ./target/release/probe-bench api-load [--targets 10000] [--interval-ms 1000]
//!     [--listeners 16] [--duration-s 10] [--wrk-threads 2] [--connections 64]
//!     [--paths /readyz,/v1/targets] [--down 0] [--schemes http,https]
//!     [--connection keep-alive|close|both] [--daemon PATH] [--wrk PATH] [--up-timeout-s 60]
//! ```
//!
//! 1. **Listeners**: `--listeners` loopback listeners on `127.0.0.2`, `127.0.0.3`, ... (one OS
//!    thread each, accept and drop, as in `tcp_load`), in this process.
//! 2. **Daemon**: writes a config of `--targets` TCP connect targets spread over them, every
//!    `--interval-ms` (jitter 0.1, fast interval = interval, timeout half the interval, at most
//!    1 s, `rise` 1 so that start-up takes one interval), and starts the real daemon binary
//!    (`--daemon`, default `probe-engine` next to this binary, i.e.
//!    `target/release/probe-engine`) as
//!    `probe-engine run --config DIR --listen 127.0.0.1:PORT` with `RUST_LOG=warn`.
//! 3. Waits until no target is PROBING (`/v1/targets?state=PROBING`): every target UP, or DOWN
//!    for the last `--down` ones, which point at a closed loopback port; then one interval
//!    more, so that the start-up's transitions are over.
//! 4. For each of `--paths` runs `wrk -t<--wrk-threads> -c<--connections> -d<--duration-s>s
//!    --latency` against it, prints wrk's report, and parses its requests per second and latency
//!    percentiles. Over each wrk run it also reads the daemon's CPU (`/proc/PID/stat`) and the
//!    probes it ran (the connections the listeners accepted, counted in this process), so the
//!    figures show whether probing kept its rate under API load. (The daemon's own count, the
//!    sum of `probe_duration_seconds_count` in `/metrics`, would add a scrape of every target's
//!    histogram to each run; a probe that failed before reaching a listener, none is expected,
//!    is missing from the count the listeners keep.) `--paths /metrics` measures the scrape
//!    itself.
//!
//! `--schemes http,https` measures the same paths against a plain daemon, then one serving its
//! API over TLS (`--web-config` with a certificate of the harness's own; wrk speaks https):
//! what TLS costs, side by side in one run. `--connection close` (or `both`) sends every request
//! with `Connection: close`, so each is a new connection (and under TLS a full handshake), as
//! the checks of many load balancers are. Figures over TLS are `scenario=api_tls`, those of
//! closed connections end in `_close`.
//!
//! wrk, the daemon and the listeners share the machine: on 2 cores the figures are what that
//! machine does with all three, not the API's ceiling. Every figure is also printed as a line
//! `RESULT scenario=api metric=<name> value=<number> unit=<unit>` for `scripts/bench`; goal:
//! `/readyz` at least 50k requests per second with p99 at most 5 ms.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::time::Instant;

use crate::support::{self, ChildGuard, TICKS_PER_SEC};

/// Targets per config file the harness writes.
const TARGETS_PER_FILE: usize = 20_000;

/// Flags of `probe-bench api-load`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    fleet: support::FleetArgs,
    /// Each wrk run's duration, in whole seconds (wrk's `-d`).
    #[arg(long = "duration-s", value_name = "S", default_value_t = 10)]
    duration: u64,
    /// wrk's threads (`-t`).
    #[arg(long, default_value_t = 2)]
    wrk_threads: usize,
    /// wrk's connections (`-c`), at least one per thread.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// The API paths wrk runs against, one run each.
    #[arg(long, value_delimiter = ',', default_value = "/readyz,/v1/targets")]
    paths: Vec<String>,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// The wrk binary.
    #[arg(long, value_name = "PATH", default_value = "wrk")]
    wrk: String,
    /// Of the targets, this many (the last) point at a closed loopback port: DOWN, for the
    /// filtered listings (`/v1/targets?state=DOWN`).
    #[arg(long, default_value_t = 0)]
    down: usize,
    /// How the API is served, one daemon each, one after the other: `http`, `https` (TLS from a
    /// web config with a certificate of the harness's own).
    #[arg(long, value_delimiter = ',', default_value = "http")]
    schemes: Vec<Scheme>,
    /// `keep-alive` (wrk's), `close` (a new connection per request), or `both`, one run each.
    #[arg(long, default_value = "keep-alive")]
    connection: Connection,
    /// How long the daemon may take to be ready, in seconds.
    #[arg(long = "up-timeout-s", value_name = "S", default_value = "60", value_parser = support::secs)]
    up_timeout: Duration,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.fleet.targets == 0
            || self.fleet.listeners == 0
            || self.fleet.listeners > 250
            || self.duration == 0
            || self.wrk_threads == 0
            || self.connections < self.wrk_threads
            || self.paths.iter().all(String::is_empty)
            || self.down > self.fleet.targets
        {
            bail!(
                "--targets, --duration-s, --wrk-threads must be at least 1, --listeners 1..=250, \
                 --connections at least --wrk-threads, --paths not empty, --down at most \
                 --targets"
            );
        }
        if self.fleet.interval < Duration::from_millis(10) {
            bail!("--interval-ms must be at least 10");
        }
        Ok(())
    }
}

/// How the daemon serves its API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// TLS.
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// Whether wrk keeps its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Connection {
    /// wrk's own way: each connection reused.
    KeepAlive,
    /// `Connection: close`: a new connection (and TLS handshake) per request.
    Close,
    /// One run each.
    Both,
}

impl Connection {
    /// For each run, whether it closes.
    fn closes(self) -> &'static [bool] {
        match self {
            Self::KeepAlive => &[false],
            Self::Close => &[true],
            Self::Both => &[false, true],
        }
    }
}

/// Runs `probe-bench api-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let daemon = support::daemon_binary(args.daemon.as_deref())?;
    let accepted = Arc::new(AtomicU64::new(0));
    let listeners = start_listeners(args.fleet.listeners, &accepted)?;
    let dir = tempfile::tempdir()?;
    let config_dir = dir.path().join("config");
    std::fs::create_dir(&config_dir)?;
    let timeout = (args.fleet.interval / 2).min(Duration::from_secs(1));
    // `rise: 1`: a target is UP after its first run, so the daemon is ready one interval after
    // it starts instead of two; what is measured starts after that.
    // Files of at most 20k targets: one YAML document is kept under the parser's budget of
    // nodes (250k), which a single file of 100k targets would exceed.
    let defaults = format!(
        "defaults:\n  interval: {}ms\n  timeout: {}ms\n  jitter: 0.1\n  fast_interval: {}ms\n  \
         rise: 1\ntargets:\n",
        args.fleet.interval.as_millis(),
        timeout.as_millis(),
        args.fleet.interval.as_millis()
    );
    // A port nothing listens on: bound, then let go.
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let up = args.fleet.targets - args.down;
    for (file, first) in (0..args.fleet.targets)
        .step_by(TARGETS_PER_FILE)
        .enumerate()
    {
        let mut yaml = defaults.clone();
        for i in first..(first + TARGETS_PER_FILE).min(args.fleet.targets) {
            let address = if i < up {
                listeners[i % listeners.len()]
            } else {
                closed
            };
            writeln!(
                yaml,
                "  - id: t-{i:06}\n    tcp:\n      address: \"{address}\""
            )?;
        }
        std::fs::write(config_dir.join(format!("targets-{file:02}.yaml")), yaml)?;
    }

    for &scheme in &args.schemes {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let api = SocketAddr::from(([127, 0, 0, 1], port));
        let log_path = dir.path().join("daemon.log");
        let tls = (scheme == Scheme::Https)
            .then(|| web_config(dir.path()))
            .transpose()?;
        let mut command = Command::new(&daemon);
        command.arg("run");
        if let Some((web, _)) = &tls {
            command.arg("--web-config").arg(web);
        }
        let client = Client {
            api,
            trust: tls.map(|(_, trust)| trust),
        };
        let started = Instant::now();
        let child = ChildGuard(
            command
                .arg("--config")
                .arg(&config_dir)
                .arg("--listen")
                .arg(api.to_string())
                .args(["--state-dir", "none"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log_path)?)
                .spawn()
                .with_context(|| format!("starting {}", daemon.display()))?,
        );
        let pid = child.0.id().to_string();
        println!(
            "api_load: daemon {} (pid {pid}) on {}://{api}: {} TCP targets every {} ms ({:.0} probes/s) \
             over {} listeners on 127.0.0.2-{}; wrk -t{} -c{} -d{}s --latency",
            daemon.display(),
            scheme.as_str(),
            args.fleet.targets,
            args.fleet.interval.as_millis(),
            args.fleet.targets as f64 / args.fleet.interval.as_secs_f64(),
            listeners.len(),
            listeners.len() + 1,
            args.wrk_threads,
            args.connections,
            args.duration
        );

        // Started = every target has its verdict (UP, or DOWN for the --down ones): none PROBING.
        let deadline = started + args.up_timeout;
        loop {
            match client.get("/v1/targets?state=PROBING&limit=1") {
                Ok((200, body)) if body.starts_with("{\"targets\":[]") => break,
                _ if Instant::now() >= deadline => {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(10).collect();
                    bail!(
                        "the daemon's targets had no verdict within {:?}; its last log lines: \
                         {tail:?}",
                        args.up_timeout
                    );
                }
                // Verdicts have no push channel to wait on: poll, often enough to waste little.
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let up_after = started.elapsed();
        println!(
            "every target decided (none PROBING) {:.1} s after the start",
            up_after.as_secs_f64()
        );
        // One interval more, so that the start-up (every target's first run and its PROBING -> UP
        // transition, all within the first interval) is over before anything is measured.
        std::thread::sleep(args.fleet.interval);
        if scheme == Scheme::Http {
            support::result("api", "ready_after", up_after.as_secs_f64(), "s");
        }

        for (path, close) in args
            .paths
            .iter()
            .filter(|p| !p.is_empty())
            .flat_map(|path| args.connection.closes().iter().map(move |c| (path, *c)))
        {
            let probes0 = accepted.load(Ordering::Relaxed);
            let (cpu0, at0) = (support::cpu_ticks(&pid)?, Instant::now());
            let url = format!("{}://{api}{path}", scheme.as_str());
            let mut wrk = Command::new(&args.wrk);
            if close {
                wrk.args(["-H", "Connection: close"]);
            }
            let output = wrk
                .arg(format!("-t{}", args.wrk_threads))
                .arg(format!("-c{}", args.connections))
                .arg(format!("-d{}s", args.duration))
                .arg("--latency")
                .arg(&url)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("running {} (apt-get install wrk)", args.wrk))?;
            let (cpu1, at1) = (support::cpu_ticks(&pid)?, Instant::now());
            let probes1 = accepted.load(Ordering::Relaxed);
            let text = String::from_utf8_lossy(&output.stdout);
            println!(
                "\n$ wrk -t{} -c{} -d{}s --latency {url}",
                args.wrk_threads, args.connections, args.duration
            );
            print!("{text}");
            if !output.status.success() {
                bail!(
                    "wrk failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let wrk = WrkReport::parse(&text)?;
            let wall = (at1 - at0).as_secs_f64();
            let cpu = (cpu1 - cpu0) as f64 / TICKS_PER_SEC;
            let probes_per_s = (probes1 - probes0) as f64 / wall;
            let rss = support::vm_rss_of(&pid)?;
            println!(
                "{path}: {:.0} requests/s, latency p50 {:.3} ms, p99 {:.3} ms, non-2xx {}, socket \
                 errors {}; daemon CPU {:.2} cores, {probes_per_s:.0} probes/s over the wrk run \
                 (planned {:.0}), RSS {} MiB",
                wrk.requests_per_s,
                wrk.p50_ms,
                wrk.p99_ms,
                wrk.non_2xx,
                wrk.socket_errors,
                cpu / wall,
                args.fleet.targets as f64 / args.fleet.interval.as_secs_f64(),
                rss / (1024 * 1024)
            );
            let name = path.trim_start_matches('/').replace('/', "_");
            let scenario = match scheme {
                Scheme::Http => "api",
                Scheme::Https => "api_tls",
            };
            let close = if close { "_close" } else { "" };
            let result = |metric: &str, value: f64, unit: &str| {
                support::result(scenario, &format!("{name}{close}_{metric}"), value, unit)
            };
            result("req_per_s", wrk.requests_per_s, "req/s");
            result("p50", wrk.p50_ms, "ms");
            result("p99", wrk.p99_ms, "ms");
            result("non_2xx", wrk.non_2xx as f64, "responses");
            result("socket_errors", wrk.socket_errors as f64, "errors");
            result("daemon_cpu_cores", cpu / wall, "cores");
            result("probes_per_s", probes_per_s, "probes/s");
            result("daemon_rss", rss as f64 / (1024.0 * 1024.0), "MiB");
        }
        drop(child);
    }
    Ok(())
}

/// What is read from wrk's `--latency` report.
pub(crate) struct WrkReport {
    pub(crate) requests_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) non_2xx: u64,
    pub(crate) socket_errors: u64,
}

impl WrkReport {
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let mut report = Self {
            requests_per_s: f64::NAN,
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            non_2xx: 0,
            socket_errors: 0,
        };
        for line in text.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("Requests/sec:") {
                report.requests_per_s = v.trim().parse().context("wrk's Requests/sec")?;
            } else if let Some(v) = line.strip_prefix("50%") {
                report.p50_ms = wrk_duration_ms(v.trim())?;
            } else if let Some(v) = line.strip_prefix("99%") {
                report.p99_ms = wrk_duration_ms(v.trim())?;
            } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
                report.non_2xx = v.trim().parse().context("wrk's non-2xx count")?;
            } else if let Some(v) = line.strip_prefix("Socket errors:") {
                // "connect 0, read 0, write 0, timeout 0"
                report.socket_errors = v
                    .split(',')
                    .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .sum();
            }
        }
        if report.requests_per_s.is_nan() || report.p99_ms.is_nan() {
            bail!("could not read Requests/sec and the 99% latency from wrk's output");
        }
        Ok(report)
    }
}

/// A wrk duration (`812.00us`, `1.23ms`, `2.01s`, `1.50m`) in milliseconds.
fn wrk_duration_ms(text: &str) -> anyhow::Result<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .with_context(|| format!("wrk duration {text:?} without a unit"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .with_context(|| format!("wrk duration {text:?}"))?;
    let scale = match unit.trim() {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        other => bail!("wrk duration unit {other:?}"),
    };
    Ok(number * scale)
}

/// A self-signed certificate for 127.0.0.1 and a web config that serves it, in `dir`: the web
/// config's path, and the trust that accepts the certificate.
fn web_config(dir: &std::path::Path) -> anyhow::Result<(PathBuf, Arc<rustls::ClientConfig>)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.self_signed(&key)?;
    std::fs::write(dir.join("api.crt"), cert.pem())?;
    std::fs::write(dir.join("api.key"), key.serialize_pem())?;
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: api.crt\n  key_file: api.key\n",
    )?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone())?;
    let trust = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok((web, Arc::new(trust)))
}

/// The harness's own calls to the API, over TLS when it has the trust for it.
struct Client {
    api: SocketAddr,
    trust: Option<Arc<rustls::ClientConfig>>,
}

impl Client {
    /// An HTTP/1.1 GET with `Connection: close`: (status, body).
    fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let stream = TcpStream::connect_timeout(&self.api, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let raw = match &self.trust {
            None => exchange(stream, self.api, path)?,
            Some(trust) => {
                let name = rustls::pki_types::ServerName::IpAddress(self.api.ip().into());
                let connection = rustls::ClientConnection::new(trust.clone(), name)?;
                exchange(rustls::StreamOwned::new(connection, stream), self.api, path)?
            }
        };
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("no HTTP status line")?;
        let body = text
            .split_once("\r\n\r\n")
            .map_or_else(String::new, |(_, b)| b.to_owned());
        Ok((status, body))
    }
}

/// Sends the GET on `stream` and reads the answer to its end. A TLS peer that closes without
/// `close_notify` ends it too: the answer is whole by then, `Connection: close` asked for that.
fn exchange(mut stream: impl Read + Write, api: SocketAddr, path: &str) -> anyhow::Result<Vec<u8>> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => Ok(raw),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e.into()),
    }
}

/// `count` accept-and-drop listeners on 127.0.0.2, 127.0.0.3, ..., one OS thread each, counting
/// the connections they accept in `accepted`.
fn start_listeners(count: usize, accepted: &Arc<AtomicU64>) -> anyhow::Result<Vec<SocketAddr>> {
    let mut addrs = Vec::with_capacity(count);
    for i in 0..count {
        let ip = [
            127,
            0,
            0,
            u8::try_from(i + 2).context("too many listeners")?,
        ];
        addrs.push(support::accept_and_count(
            ip,
            format!("tcp-listen-{i}"),
            Some(accepted.clone()),
        )?);
    }
    Ok(addrs)
}
