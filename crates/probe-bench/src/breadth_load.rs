//! Load harness: CPU per probe of the library's gRPC, DNS and ICMP tiers against Prometheus'
//! blackbox_exporter's `grpc`, `dns` and `icmp` modules, on the same local servers, in one run.
//!
//! ```text
//! probe-bench breadth-load [--kinds grpc,dns,icmp] [--duration-s 10] [--warmup-s 2]
//!     [--concurrency 32] [--threads 1] [--grpc-server-threads 1]
//!     [--blackbox PATH|none] [--blackbox-concurrency 32]
//! ```
//!
//! **Servers**, all on 127.0.0.1 and shared by the library's phase and blackbox_exporter's:
//! - gRPC: a tonic server with tonic-health's `grpc.health.v1.Health` (the server as a whole,
//!   service `""`, is `SERVING`), in a child process (this same binary as `breadth-load
//!   --serve-grpc N`, `--grpc-server-threads` tokio workers), so that its CPU is nobody's;
//! - DNS: dnsmasq on a free loopback port answering `bench.test A 127.0.0.1` from a hosts file of
//!   the harness's own (no `/etc/resolv.conf`, no `/etc/hosts`, no upstream), as the tests start
//!   it;
//! - ICMP: 127.0.0.1 itself: the kernel answers the echoes.
//!
//! **Library phases**: this process runs `--concurrency` tasks on a `--threads`-worker tokio
//! runtime, each with its own probe (as the engine has one per target) checking in a loop as
//! fast as the server answers: a saturating load, so the figure is the prober's cost per probe,
//! not a rate someone chose. gRPC runs twice: `reuse` (the tier's default, one kept HTTP/2
//! connection a probe) and `fresh` (`fresh_connection`: a new connection each check, which is
//! what blackbox_exporter's `grpc` module does, so the goal is on it). DNS asks `bench.test A`
//! over UDP, expecting `NOERROR` and an answer. ICMP sends one echo of 56 bytes to 127.0.0.1.
//! Every probe has a 2 s timeout.
//!
//! **blackbox_exporter phases**: for each kind, `--blackbox` (default
//! `prometheus-blackbox-exporter`, the Debian package's binary; skipped with a note when missing
//! or with `--blackbox none`) is started on a loopback port with one module (`grpc`: `service:
//! ""`, `tls: false`; `dns`: `query_name: bench.test`, `query_type: A`, `transport_protocol:
//! udp`, `valid_rcodes: [NOERROR]`; `icmp`; each `preferred_ip_protocol: ip4` without fallback
//! and a 2 s timeout), and its `/probe?target=...&module=...` endpoint is driven from this
//! process by `--blackbox-concurrency` concurrent requests (kept-alive connections to the
//! exporter, each reply checked for `probe_success 1`), as `http-load` does.
//!
//! **CPU attribution**: each phase counts the probes completed and the prober's own CPU time
//! (`utime + stime` from `/proc/PID/stat`) over the same measured window (`--duration-s`, after
//! `--warmup-s`): this process's for the library (nothing else runs in it during its phases:
//! the gRPC server is a child process, dnsmasq another, and no driver runs), blackbox_exporter's
//! process's for it (the driver is this process and is not counted). The servers' CPU (the gRPC
//! server's, dnsmasq's) is printed for information, and the whole machine's busy CPU
//! (`/proc/stat`) for probes per box CPU-second. Kernel work loopback does on the sender's
//! behalf (the server's half of a TCP handshake, the kernel's echo reply) is charged to
//! whichever task sent the packet: the same for both probers.
//!
//! **ICMP sockets**: the library pings with datagram ICMP sockets when
//! `net.ipv4.ping_group_range` allows the process's group, else raw ones (`CAP_NET_RAW`);
//! blackbox_exporter tries the same datagram ("unprivileged") socket first on Linux and falls
//! back to a raw one. The harness prints the library's choice and counts blackbox_exporter's
//! open ICMP sockets by kind (`/proc/PID/fd` against `/proc/net/raw` and `/proc/net/icmp`) during
//! its phase. A raw socket receives every echo reply from its peer, so with raw sockets each
//! reply is read by every concurrent probe's socket (and by anyone else's raw ICMP socket on the
//! machine): the cost per probe grows with the concurrency, for both probers alike.
//!
//! The figures, per kind, as `RESULT scenario=grpc|dns|icmp metric=<phase>_<figure> ...`:
//! probes/s, probes per CPU-second, CPU microseconds per probe, probes per box CPU-second and
//! failed probes for each phase, and the library's probes per CPU-second over
//! blackbox_exporter's (`fresh_vs_blackbox` for gRPC, `library_vs_blackbox` for DNS and ICMP;
//! goal: at least 8x).

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use probe::Address;
use probe::outcome::Verdict;
use probe::tier::Probe;
use probe::tier::dns::{DnsProbe, DnsSpec, DnsType};
use probe::tier::grpc::{GrpcProbe, GrpcSpec};
use probe::tier::http::HttpProbe;
use probe::tier::icmp::{IcmpHost, IcmpProbe, IcmpSpec};
use probe::tier::resolve::Names;
use tokio::time::Instant;

use crate::support::{self, ChildGuard, TICKS_PER_SEC};

/// Every probe's timeout, the library's and blackbox_exporter's modules' alike.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The driver's timeout for one `/probe` request: above the module's, so that a slow probe is
/// reported by the exporter rather than cut by the driver.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(3);
/// The goal, per kind: the library's probes per CPU-second over blackbox_exporter's.
const GOAL_RATIO: f64 = 8.0;
/// The name dnsmasq answers.
const DNS_NAME: &str = "bench.test";

/// The probe kinds this harness compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Kind {
    /// grpc.health.v1 Check against a tonic-health server.
    Grpc,
    /// An A query over UDP to dnsmasq.
    Dns,
    /// One echo to 127.0.0.1.
    Icmp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::Dns => "dns",
            Self::Icmp => "icmp",
        }
    }
}

/// Flags of `probe-bench breadth-load`.
#[derive(clap::Args)]
pub struct Args {
    /// The kinds compared, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "grpc,dns,icmp"
    )]
    kinds: Vec<Kind>,
    /// Measured time of each phase, in seconds (fractions allowed).
    #[arg(long = "duration-s", value_name = "S", default_value = "10", value_parser = support::secs)]
    duration: Duration,
    /// Warm-up of each phase before it is measured, in seconds.
    #[arg(long = "warmup-s", value_name = "S", default_value = "2", value_parser = support::secs)]
    warmup: Duration,
    /// Concurrent probes of the library's phases, each in its own checking loop.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Worker threads of the prober's tokio runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Worker threads of the gRPC server process.
    #[arg(long, default_value_t = 1)]
    grpc_server_threads: usize,
    /// blackbox_exporter's binary, or `none` to skip its phases.
    #[arg(
        long,
        value_name = "PATH|none",
        default_value = "prometheus-blackbox-exporter"
    )]
    blackbox: String,
    /// Concurrent `/probe` requests driving blackbox_exporter.
    #[arg(long, default_value_t = 32)]
    blackbox_concurrency: usize,
    /// Runs as the gRPC server process with this many threads (how the harness starts it).
    #[arg(long, value_name = "THREADS", hide = true)]
    serve_grpc: Option<usize>,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.duration.is_zero()
            || self.concurrency == 0
            || self.threads == 0
            || self.grpc_server_threads == 0
            || self.blackbox_concurrency == 0
        {
            bail!("--duration-s must be above 0, --concurrency and the thread counts at least 1");
        }
        if self.kinds.is_empty() {
            bail!("--kinds names no kind");
        }
        Ok(())
    }
}

/// Runs `probe-bench breadth-load`, or its gRPC server process with `--serve-grpc`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.serve_grpc {
        Some(threads) => serve_grpc(threads),
        None => {
            args.validate()?;
            measure_all(&args)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The servers.

/// `--serve-grpc THREADS`: a grpc.health.v1 server on 127.0.0.1:0 whose `""` is SERVING; prints
/// the port on stdout and serves until stdin closes (the harness holds it open, so the server
/// cannot outlive the harness).
fn serve_grpc(threads: usize) -> anyhow::Result<()> {
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
        let port = listener.local_addr()?.port();
        // `health_reporter` sets the server as a whole (`""`) SERVING.
        let (_reporter, service) = tonic_health::server::health_reporter();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        println!("{port}");
        std::io::stdout().flush()?;
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await?;
        anyhow::Ok(())
    })
}

/// Starts the gRPC server process; its guard and address.
fn start_grpc_server(threads: usize) -> anyhow::Result<(ChildGuard, SocketAddr)> {
    let threads = threads.to_string();
    support::start_child_server(
        &[
            "breadth-load".as_ref(),
            "--serve-grpc".as_ref(),
            threads.as_ref(),
        ],
        "gRPC server",
    )
}

/// dnsmasq on a free loopback port, answering [`DNS_NAME`] from a hosts file of its own and
/// nothing else; stopped when dropped.
struct Dnsmasq {
    child: ChildGuard,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    fn start() -> anyhow::Result<Self> {
        let binary = support::which("dnsmasq")
            .context("dnsmasq not found (apt-get install dnsmasq-base, or scripts/setup)")?;
        let dir = tempfile::tempdir()?;
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, format!("127.0.0.1 {DNS_NAME}\n"))?;
        // A port free for both UDP and TCP, released just before dnsmasq binds it.
        let port = loop {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
            let port = udp.local_addr()?.port();
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                break port;
            }
        };
        let child = ChildGuard(
            Command::new(binary)
                .args([
                    "--keep-in-foreground",
                    "--no-resolv",
                    "--no-hosts",
                    "--no-poll",
                    "--bind-interfaces",
                    "--listen-address=127.0.0.1",
                    // As root, do not drop to `nobody`, who cannot read the temporary directory.
                    "--user=root",
                    "--pid-file=",
                    "--log-facility=/dev/null",
                    // Other `.test` names are NXDOMAIN here, never asked of anyone.
                    "--local=/test/",
                ])
                .arg(format!("--port={port}"))
                .arg(format!("--addn-hosts={}", hosts.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting dnsmasq")?,
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let server = Self {
            child,
            addr,
            _dir: dir,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)).is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("dnsmasq did not start listening on {addr}")
    }
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
    /// CPU of the kind's server (the gRPC server process, dnsmasq; none for ICMP).
    server_ticks: u64,
    box_ticks: u64,
}

impl Measured {
    fn cpu_s(&self) -> f64 {
        self.cpu_ticks as f64 / TICKS_PER_SEC
    }
    fn per_cpu_s(&self) -> f64 {
        self.probes as f64 / self.cpu_s().max(f64::MIN_POSITIVE)
    }
    fn us_per_probe(&self) -> f64 {
        self.cpu_s() * 1e6 / self.probes.max(1) as f64
    }
    fn per_box_cpu_s(&self) -> f64 {
        self.probes as f64 / (self.box_ticks as f64 / TICKS_PER_SEC).max(f64::MIN_POSITIVE)
    }
    fn print(&self, kind: Kind) {
        println!(
            "{:<5} {:<9} {:>9} {:>7} {:>7.2} {:>9.0} {:>7.2} {:>13.0} {:>10.1} {:>11.2}",
            kind.name(),
            self.name,
            self.probes,
            self.failed,
            self.wall.as_secs_f64(),
            self.probes as f64 / self.wall.as_secs_f64(),
            self.cpu_s(),
            self.per_cpu_s(),
            self.us_per_probe(),
            self.server_ticks as f64 / TICKS_PER_SEC,
        );
    }
}

/// Runs each of `probes` in a loop of its own task for warm-up plus duration, measuring `pid`'s
/// CPU (and `server_pid`'s, when there is a server) over the window after the warm-up.
/// `during` is called once in the middle of the window (for a sample of the prober's sockets).
async fn measure(
    name: &'static str,
    args: &Args,
    probes: Vec<(Arc<dyn Probe>, Duration)>,
    pid: &str,
    server_pid: Option<&str>,
    during: impl FnOnce(),
) -> anyhow::Result<Measured> {
    let counts = Arc::new(support::Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for (probe, timeout) in probes {
        let (counts, stop) = (counts.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut failure = None;
            while !stop.load(Ordering::Relaxed) {
                let result = probe.check(timeout).await;
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
    let server_ticks = || server_pid.map_or(Ok(0), support::cpu_ticks);
    tokio::time::sleep(args.warmup).await;
    let (probes0, failed0) = counts.read();
    let (cpu0, server0, box0, at0) = (
        support::cpu_ticks(pid)?,
        server_ticks()?,
        support::box_ticks()?,
        Instant::now(),
    );
    tokio::time::sleep(args.duration / 2).await;
    during();
    tokio::time::sleep_until(at0 + args.duration).await;
    let (cpu1, server1, box1, at1) = (
        support::cpu_ticks(pid)?,
        server_ticks()?,
        support::box_ticks()?,
        Instant::now(),
    );
    let (probes1, failed1) = counts.read();
    stop.store(true, Ordering::Relaxed);
    let mut first_failure = None;
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

/// Where the kinds' servers are, and their processes (for their CPU).
struct Servers {
    grpc: Option<(ChildGuard, SocketAddr)>,
    dns: Option<Dnsmasq>,
}

impl Servers {
    fn start(args: &Args) -> anyhow::Result<Self> {
        let grpc = if args.kinds.contains(&Kind::Grpc) {
            Some(start_grpc_server(args.grpc_server_threads)?)
        } else {
            None
        };
        let dns = if args.kinds.contains(&Kind::Dns) {
            Some(Dnsmasq::start()?)
        } else {
            None
        };
        Ok(Self { grpc, dns })
    }

    /// The pid of `kind`'s server process, if it has one.
    fn pid(&self, kind: Kind) -> Option<String> {
        match kind {
            Kind::Grpc => self.grpc.as_ref().map(|(c, _)| c.pid().to_string()),
            Kind::Dns => self.dns.as_ref().map(|d| d.child.pid().to_string()),
            Kind::Icmp => None,
        }
    }

    /// blackbox_exporter's `target` for `kind`.
    fn target(&self, kind: Kind) -> anyhow::Result<String> {
        Ok(match kind {
            Kind::Grpc => self.grpc_addr()?.to_string(),
            Kind::Dns => self.dns_addr()?.to_string(),
            Kind::Icmp => "127.0.0.1".to_owned(),
        })
    }

    fn grpc_addr(&self) -> anyhow::Result<SocketAddr> {
        self.grpc
            .as_ref()
            .map(|(_, a)| *a)
            .context("no gRPC server")
    }

    fn dns_addr(&self) -> anyhow::Result<SocketAddr> {
        self.dns.as_ref().map(|d| d.addr).context("no DNS server")
    }
}

/// The library's probes of `kind`, `--concurrency` of them (`fresh` for gRPC: a new connection
/// each check).
fn library_probes(
    kind: Kind,
    fresh: bool,
    args: &Args,
    servers: &Servers,
) -> anyhow::Result<Vec<(Arc<dyn Probe>, Duration)>> {
    // One resolver for all probes, as in an engine (the addresses are IPs: nothing is resolved).
    let names = Names::system();
    (0..args.concurrency)
        .map(|_| {
            let probe: Arc<dyn Probe> = match kind {
                Kind::Grpc => {
                    let mut spec = GrpcSpec::new(Address::Socket(servers.grpc_addr()?));
                    spec.fresh_connection = fresh;
                    Arc::new(GrpcProbe::new(spec, names.clone()))
                }
                Kind::Dns => Arc::new(DnsProbe::new(DnsSpec::new(
                    servers.dns_addr()?,
                    DNS_NAME,
                    DnsType::A,
                )?)),
                Kind::Icmp => Arc::new(IcmpProbe::new(
                    IcmpSpec::echo(IcmpHost::Ip([127, 0, 0, 1].into())),
                    names.clone(),
                )),
            };
            Ok((probe, PROBE_TIMEOUT))
        })
        .collect()
}

/// blackbox_exporter's `blackbox.yml` with the one module of `kind`, named after it.
fn blackbox_config(kind: Kind) -> String {
    let timeout = PROBE_TIMEOUT.as_millis();
    let prober = match kind {
        Kind::Grpc => "grpc:\n      service: \"\"\n      tls: false\n".to_owned(),
        Kind::Dns => format!(
            "dns:\n      query_name: {DNS_NAME}\n      query_type: A\n      \
             transport_protocol: udp\n      valid_rcodes: [NOERROR]\n"
        ),
        Kind::Icmp => "icmp:\n".to_owned(),
    };
    let name = kind.name();
    format!(
        "modules:\n  {name}:\n    prober: {name}\n    timeout: {timeout}ms\n    {prober}      \
         preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n"
    )
}

/// blackbox_exporter's phase for `kind`: its module driven through `/probe`, its own CPU counted.
async fn blackbox_phase(
    kind: Kind,
    args: &Args,
    binary: &std::path::Path,
    servers: &Servers,
) -> anyhow::Result<Measured> {
    let exporter = support::Blackbox::start_with(binary, kind.name(), &blackbox_config(kind))?;
    println!(
        "blackbox_exporter: {} (pid {}, 127.0.0.1:{}), module {}, driven by {} concurrent /probe \
         requests",
        exporter.version(),
        exporter.pid(),
        exporter.port(),
        kind.name(),
        args.blackbox_concurrency
    );
    let spec = exporter.spec(&servers.target(kind)?)?;
    exporter.wait_ready(spec.clone(), DRIVER_TIMEOUT).await?;
    let names = Names::system();
    let probes = (0..args.blackbox_concurrency)
        .map(|_| {
            (
                Arc::new(HttpProbe::new(spec.clone(), names.clone())) as Arc<dyn Probe>,
                DRIVER_TIMEOUT,
            )
        })
        .collect();
    let pid = exporter.pid().to_string();
    let server_pid = servers.pid(kind);
    let sample_sockets = || {
        if kind == Kind::Icmp {
            match icmp_sockets_of(&pid) {
                Ok((raw, datagram)) => println!(
                    "blackbox_exporter's open ICMP sockets mid-phase: {raw} raw, {datagram} \
                     datagram"
                ),
                Err(e) => println!("blackbox_exporter's ICMP sockets: unknown ({e:#})"),
            }
        }
    };
    measure(
        "blackbox",
        args,
        probes,
        &pid,
        server_pid.as_deref(),
        sample_sockets,
    )
    .await
}

/// How many of process `pid`'s open sockets are raw ICMP sockets (`/proc/net/raw`, protocol 1)
/// and datagram ICMP ones (`/proc/net/icmp`).
fn icmp_sockets_of(pid: &str) -> anyhow::Result<(usize, usize)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing /proc/{pid}/fd"))?
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let text = target.to_string_lossy().into_owned();
            text.strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect();
    let count = |table: &str, raw_protocol: bool| -> anyhow::Result<usize> {
        let text = std::fs::read_to_string(table).with_context(|| format!("reading {table}"))?;
        Ok(text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            // In /proc/net/raw the local address's "port" is the protocol: 1 is ICMP.
            .filter(|f| !raw_protocol || f.get(1).is_some_and(|a| a.ends_with(":0001")))
            .filter(|f| f.get(9).is_some_and(|inode| inodes.contains(*inode)))
            .count())
    };
    Ok((
        count("/proc/net/raw", true)?,
        count("/proc/net/icmp", false)?,
    ))
}

// ---------------------------------------------------------------------------------------------
// The run.

fn measure_all(args: &Args) -> anyhow::Result<()> {
    let servers = Servers::start(args)?;
    println!(
        "breadth_load: kinds {}; gRPC server {} (pid {}, {} threads), dnsmasq {} (pid {}); \
         prober: {} concurrent probes on {} runtime threads, timeout {} ms; {} s warm-up + {} s \
         measured per phase",
        args.kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(","),
        servers
            .grpc_addr()
            .map_or_else(|_| "-".to_owned(), |a| a.to_string()),
        servers.pid(Kind::Grpc).unwrap_or_else(|| "-".into()),
        args.grpc_server_threads,
        servers
            .dns_addr()
            .map_or_else(|_| "-".to_owned(), |a| a.to_string()),
        servers.pid(Kind::Dns).unwrap_or_else(|| "-".into()),
        args.concurrency,
        args.threads,
        PROBE_TIMEOUT.as_millis(),
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64()
    );
    if args.kinds.contains(&Kind::Icmp) {
        println!("library ICMP sockets: {}", probe::tier::icmp::sockets());
    }
    let blackbox = match (args.blackbox != "none").then_some(args.blackbox.as_str()) {
        None => None,
        Some(path) => {
            let found = support::which(path);
            if found.is_none() {
                println!(
                    "blackbox_exporter: {path:?} not found, comparison skipped \
                     (apt-get install prometheus-blackbox-exporter)"
                );
            }
            found
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;

    let mut figures: Vec<(Kind, Vec<Measured>, Option<Measured>)> = Vec::new();
    for &kind in &args.kinds {
        let server_pid = servers.pid(kind);
        let phases: &[(&'static str, bool)] = match kind {
            Kind::Grpc => &[("reuse", false), ("fresh", true)],
            Kind::Dns | Kind::Icmp => &[("library", false)],
        };
        let mut library = Vec::new();
        for &(name, fresh) in phases {
            let probes = library_probes(kind, fresh, args, &servers)?;
            library.push(runtime.block_on(measure(
                name,
                args,
                probes,
                "self",
                server_pid.as_deref(),
                || {},
            ))?);
        }
        let bb = match &blackbox {
            Some(binary) => Some(runtime.block_on(blackbox_phase(kind, args, binary, &servers))?),
            None => None,
        };
        figures.push((kind, library, bb));
    }

    println!();
    println!(
        "{:<5} {:<9} {:>9} {:>7} {:>7} {:>9} {:>7} {:>13} {:>10} {:>11}",
        "kind",
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
    for (kind, library, bb) in &figures {
        for phase in library.iter().chain(bb) {
            phase.print(*kind);
        }
    }
    println!(
        "(cpu_s: the prober's own process, this one for the library, blackbox_exporter's for it; \
         server_cpu: the gRPC server process or dnsmasq, not counted)"
    );
    println!();
    for (kind, library, bb) in &figures {
        let Some(bb) = bb else { continue };
        for phase in library {
            let ratio = phase.per_cpu_s() / bb.per_cpu_s().max(f64::MIN_POSITIVE);
            let goal = if goal_phase(*kind) == phase.name {
                let verdict = if ratio >= GOAL_RATIO { "met" } else { "MISSED" };
                format!(" (goal >= {GOAL_RATIO:.0}x: {verdict})")
            } else {
                String::new()
            };
            println!(
                "{} {} / blackbox_exporter, probes per CPU-second: {ratio:.1}x{goal}",
                kind.name(),
                phase.name
            );
        }
    }
    println!();
    for (kind, library, bb) in &figures {
        for phase in library.iter().chain(bb) {
            println!(
                "{} {}: whole-box CPU {:.2} s over {:.2} s ({:.0} probes per box CPU-second)",
                kind.name(),
                phase.name,
                phase.box_ticks as f64 / TICKS_PER_SEC,
                phase.wall.as_secs_f64(),
                phase.per_box_cpu_s()
            );
        }
    }

    // The same figures for scripts/bench.
    for (kind, library, bb) in &figures {
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(kind.name(), metric, value, unit);
        };
        for phase in library.iter().chain(bb) {
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
            result(&format!("{name}_us_per_probe"), phase.us_per_probe(), "us");
            result(
                &format!("{name}_probes_per_box_cpu_s"),
                phase.per_box_cpu_s(),
                "probes/cpu-s",
            );
            result(&format!("{name}_failed"), phase.failed as f64, "probes");
        }
        if let Some(bb) = bb {
            for phase in library {
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
    }
    Ok(())
}

/// The library phase of `kind` the goal is on: the one that does what blackbox_exporter's
/// module does (for gRPC, a new connection per probe).
fn goal_phase(kind: Kind) -> &'static str {
    match kind {
        Kind::Grpc => "fresh",
        Kind::Dns | Kind::Icmp => "library",
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, blackbox_config};

    /// The modules' YAML: the keys blackbox_exporter 0.23 reads (it refuses unknown ones), each
    /// under its prober.
    #[test]
    fn the_blackbox_modules_are_written_as_the_exporter_reads_them() {
        assert_eq!(
            blackbox_config(Kind::Dns),
            "modules:\n  dns:\n    prober: dns\n    timeout: 2000ms\n    dns:\n      \
             query_name: bench.test\n      query_type: A\n      transport_protocol: udp\n      \
             valid_rcodes: [NOERROR]\n      preferred_ip_protocol: ip4\n      \
             ip_protocol_fallback: false\n"
        );
        assert!(blackbox_config(Kind::Grpc).contains(
            "    grpc:\n      service: \"\"\n      tls: false\n      preferred_ip_protocol: ip4\n"
        ));
        assert!(
            blackbox_config(Kind::Icmp).contains("    icmp:\n      preferred_ip_protocol: ip4\n")
        );
    }
}
