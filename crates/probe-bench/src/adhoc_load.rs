//! Load harness: `GET /probe` under wrk, the daemon against blackbox_exporter on the same
//! `blackbox.yml` and the same targets, in one run.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench --bin probe-engine --bin probe-bench
//! ./target/release/probe-bench adhoc-load [--duration-s 10] [--connections 16]
//!     [--ladder 1,2,4,8,16,32,64] [--ladder-duration-s 4] [--modules tcp_connect,http_2xx]
//!     [--daemon PATH] [--blackbox PATH] [--wrk PATH]
//! ```
//!
//! 1. **Targets**, in this process: a TCP listener that accepts and drops (the `tcp_connect`
//!    module's target), and an HTTP/1.1 server answering `200 ok` and closing (`http_2xx`'s), each
//!    served by a few threads.
//! 2. **Peers**: the real daemon (`probe-engine run --blackbox-config FILE`, with no scheduled
//!    target) and blackbox_exporter (`--blackbox`, default `prometheus-blackbox-exporter`) on the
//!    same file: `tcp_connect` and `http_2xx`, IPv4, 1 s timeout.
//! 3. **CPU per request**: for each module and peer, `wrk -t1 -c<--connections>
//!    -d<--duration-s>s --latency` on `/probe?module=M&target=T`; the peer's CPU over the run
//!    (`/proc/PID/stat`) over the requests it answered. The ratio exporter/daemon is the goal's
//!    figure (at least 8).
//! 4. **Scrapes per second at p99 <= 50 ms**: wrk again, `--ladder` connections, the highest
//!    rate whose p99 is at most 50 ms.
//!
//! wrk, the targets and the peer share the machine's cores; each peer runs alone (the other is
//! idle), so the CPU figures are each peer's own. Every figure is also printed as a `RESULT
//! scenario=adhoc ...` line for `scripts/bench`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::api_load::WrkReport;
use crate::support::{self, ChildGuard, TICKS_PER_SEC};

/// Flags of `probe-bench adhoc-load`.
#[derive(clap::Args)]
pub struct Args {
    /// Each CPU run's duration, in whole seconds (wrk's `-d`).
    #[arg(long = "duration-s", value_name = "S", default_value_t = 10)]
    duration: u64,
    /// wrk's connections for the CPU runs.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// The connections of the p99 ladder, one short run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    ladder: Vec<usize>,
    /// Each ladder run's duration, in whole seconds.
    #[arg(long = "ladder-duration-s", value_name = "S", default_value_t = 4)]
    ladder_duration: u64,
    /// The modules measured.
    #[arg(long, value_delimiter = ',', default_value = "tcp_connect,http_2xx")]
    modules: Vec<String>,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// The blackbox_exporter binary.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "prometheus-blackbox-exporter"
    )]
    blackbox: PathBuf,
    /// The wrk binary.
    #[arg(long, value_name = "PATH", default_value = "wrk")]
    wrk: String,
}

/// The file both peers load.
const BLACKBOX_YML: &str = "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 1s\n    tcp:\n      \
     preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n  http_2xx:\n    prober: \
     http\n    timeout: 1s\n    http:\n      preferred_ip_protocol: ip4\n      \
     ip_protocol_fallback: false\n";

/// One peer answering `/probe`.
struct Peer {
    name: &'static str,
    addr: SocketAddr,
    pid: String,
}

/// Runs `probe-bench adhoc-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.duration == 0 || args.ladder_duration == 0 || args.connections == 0 {
        bail!("--duration-s, --ladder-duration-s and --connections must be at least 1");
    }
    let tcp_target = serve(false)?;
    let http_target = serve(true)?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("blackbox.yml");
    std::fs::write(&config, BLACKBOX_YML)?;
    std::fs::write(dir.path().join("probes.yaml"), "targets: []\n")?;

    let daemon_binary = support::daemon_binary(args.daemon.as_deref())?;
    let api = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let daemon = ChildGuard(
        Command::new(&daemon_binary)
            .arg("run")
            .arg("--config")
            .arg(dir.path().join("probes.yaml"))
            .arg("--listen")
            .arg(api.to_string())
            .arg("--blackbox-config")
            .arg(&config)
            .arg("--ui")
            .arg("false")
            .args(["--state-dir", "none"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", daemon_binary.display()))?,
    );
    let exporter = probe_testkit::Blackbox::start_binary(&args.blackbox, BLACKBOX_YML)
        .with_context(|| format!("starting {}", args.blackbox.display()))?;
    let peers = [
        Peer {
            name: "daemon",
            addr: api,
            pid: daemon.pid().to_string(),
        },
        Peer {
            name: "blackbox_exporter",
            addr: exporter.addr(),
            pid: exporter.pid().to_string(),
        },
    ];
    println!(
        "adhoc_load: daemon {} (pid {}) on {api}, {} (pid {}) on {}; targets tcp {tcp_target}, \
         http {http_target}",
        daemon_binary.display(),
        peers[0].pid,
        exporter.version,
        peers[1].pid,
        exporter.addr()
    );
    for peer in &peers {
        wait_answering(peer.addr)?;
    }

    for module in &args.modules {
        let target = match module.as_str() {
            "tcp_connect" => tcp_target.to_string(),
            "http_2xx" => format!("http://{http_target}/"),
            other => bail!("unknown module {other:?}: tcp_connect or http_2xx"),
        };
        let path = format!("/probe?module={module}&target={target}");
        let mut cpu_per_request = Vec::new();
        for peer in &peers {
            let (wrk, cpu) = wrk_run(&args.wrk, peer, &path, args.connections, args.duration)?;
            let per_request_us = cpu / (wrk.requests_per_s * args.duration as f64) * 1e6;
            println!(
                "{module} {}: {:.0} requests/s, p50 {:.3} ms, p99 {:.3} ms, non-2xx {}, CPU \
                 {per_request_us:.1} us a request",
                peer.name, wrk.requests_per_s, wrk.p50_ms, wrk.p99_ms, wrk.non_2xx
            );
            let scenario = format!("{module}_{}", peer.name);
            support::result(
                "adhoc",
                &format!("{scenario}_cpu_per_request"),
                per_request_us,
                "us",
            );
            support::result(
                "adhoc",
                &format!("{scenario}_req_per_s"),
                wrk.requests_per_s,
                "req/s",
            );
            support::result("adhoc", &format!("{scenario}_p99"), wrk.p99_ms, "ms");
            cpu_per_request.push(per_request_us);
        }
        let ratio = cpu_per_request[1] / cpu_per_request[0];
        println!(
            "{module}: blackbox_exporter spends {ratio:.1}x the daemon's CPU a request (goal: at least 8x)"
        );
        support::result("adhoc", &format!("{module}_cpu_ratio"), ratio, "x");

        for peer in &peers {
            let mut best = (0, 0.0);
            for &connections in &args.ladder {
                let (wrk, _) = wrk_run(&args.wrk, peer, &path, connections, args.ladder_duration)?;
                println!(
                    "{module} {} -c{connections}: {:.0} requests/s, p99 {:.3} ms",
                    peer.name, wrk.requests_per_s, wrk.p99_ms
                );
                if wrk.p99_ms <= 50.0 && wrk.non_2xx == 0 && wrk.requests_per_s > best.1 {
                    best = (connections, wrk.requests_per_s);
                }
            }
            let (connections, rate) = best;
            println!(
                "{module} {}: {rate:.0} scrapes/s at p99 <= 50 ms (at -c{connections})",
                peer.name
            );
            support::result(
                "adhoc",
                &format!("{module}_{}_scrapes_per_s_p99_50ms", peer.name),
                rate,
                "req/s",
            );
        }
    }
    drop(daemon);
    Ok(())
}

/// One wrk run against `peer`, and the peer's CPU seconds over it.
fn wrk_run(
    wrk: &str,
    peer: &Peer,
    path: &str,
    connections: usize,
    duration: u64,
) -> anyhow::Result<(WrkReport, f64)> {
    let url = format!("http://{}{path}", peer.addr);
    let cpu0 = support::cpu_ticks(&peer.pid)?;
    let output = Command::new(wrk)
        .arg("-t1")
        .arg(format!("-c{connections}"))
        .arg(format!("-d{duration}s"))
        .arg("--latency")
        .arg(&url)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {wrk} (apt-get install wrk)"))?;
    let cpu = (support::cpu_ticks(&peer.pid)? - cpu0) as f64 / TICKS_PER_SEC;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "wrk failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok((WrkReport::parse(&text)?, cpu))
}

/// Waits (10 s at most) until `addr` answers a `/probe` without a target with its 400.
fn wait_answering(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(addr) {
            let _ = write!(
                stream,
                "GET /probe HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 400") {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{addr} did not answer /probe within 10 s");
        }
        // No signal to wait on from another process: poll, rarely enough to cost nothing.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback target served by four threads: accept and drop, or (`http`) read the request,
/// answer `200 ok` and close.
fn serve(http: bool) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    for _ in 0..4 {
        let listener = listener.try_clone()?;
        std::thread::Builder::new()
            .name(format!("target-{addr}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    if http {
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        let _ = conn.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                    }
                }
            })
            .context("spawning a target thread")?;
    }
    Ok(addr)
}
