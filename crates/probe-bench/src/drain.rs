//! Load harness: an instance stopped behind a load balancer loses no request when its readiness
//! gate keeps serving through a drain delay, and loses some without it.
//!
//! ```text
//! cargo build --release -p probe-bench -p probe-engine-workspace --bin probe-bench \
//!     --example order_service
//! ./target/release/probe-bench drain [--rate 400] [--connections 16] [--before-s 1]
//!     [--after-s 0.3] [--inter-ms 100] [--fall 2] [--rise 2] [--drain-delay-ms 600]
//!     [--work-ms 10] [--confirm-ms 50] [--modes delay,no-delay] [--service PATH]
//!     [--haproxy PATH]
//! ```
//!
//! The README's advice ("health-check `/readyz`; `--drain-delay` must cover the time the balancer
//! takes to notice") measured with a real balancer. Each mode runs, from scratch:
//!
//! 1. **Two instances** of `examples/order_service.rs` (`--service`, default
//!    `examples/order_service` beside this binary, where Cargo puts the example), `a` on
//!    127.0.0.2 and `b` on 127.0.0.3 (port 0; each prints `listening on ADDR`), with `--work`
//!    and `--confirm` as given, `--grace 5s`, and a dependencies file of one target, the
//!    instance's own listener, probed every 100 ms (`rise` 1), so that `/readyz` is 200 within
//!    a probe of the start. Mode `delay` starts them with `--drain-delay` `--drain-delay-ms`;
//!    mode `no-delay` with `--drain-delay 0s`, a stop without the readiness lead time: the gate
//!    refuses new requests (503 with `Connection: close`) as soon as the signal arrives.
//! 2. **haproxy** (`--haproxy`, default `haproxy`, Debian's package) in the foreground (`-db`),
//!    its configuration in a temporary directory: a frontend on 127.0.0.4 (a free port), a
//!    round-robin backend of `a` and `b` health-checked with `option httpchk GET /readyz`
//!    (`inter` `--inter-ms`, `fall` `--fall`, `rise` `--rise`, check timeout = `inter`),
//!    `retries 3` and `option redispatch` (a refused connection is retried on the other
//!    instance, as a production configuration would: what is left are failures haproxy cannot
//!    retry), and a response header naming the server that answered. The harness waits on
//!    haproxy's stats socket (`show stat`) until both servers are UP with a passing check.
//! 3. **Load**: `--connections` tasks, each with its own keep-alive connection to haproxy
//!    (one `reqwest` client each), send `POST /orders` at `--rate` requests a second in all,
//!    evenly paced, for `--before-s`; then `a` gets `SIGTERM` (kill(1): the workspace forbids
//!    unsafe code, hence no `libc::kill`); the load goes on until `a` has exited and haproxy has
//!    logged it DOWN, and `--after-s` more. Then `b` gets `SIGTERM` (the load is over) and
//!    haproxy is killed.
//!
//! Measured per mode (`RESULT scenario=drain metric=<name>_<mode> ...`, mode `with_delay` or
//! `no_delay`):
//! - `failed`: requests through haproxy that did not end in a 2xx answer: transport errors
//!   (`transport_errors`: a connection cut, a timeout) plus non-2xx answers (`non_2xx`: the gate's
//!   503 refusals that reached a client, or haproxy's own 5xx). Goal with the delay: 0;
//! - `lb_down_after_signal` (ms): from the signal to the moment haproxy reported `a` DOWN (its
//!   `Server orders/a is DOWN` warning on stderr, timestamped when the harness read it);
//! - `last_to_draining` (ms): from the signal to the start of the last request that `a` answered
//!   (the response header names it): when haproxy stopped sending to it, as the clients saw it;
//!   `to_draining_after_signal` counts the requests `a` answered after the signal;
//! - `stop_after_signal` (ms): from the signal to `a`'s exit;
//! - `orders`, `confirmations` (both instances' `stopped:` lines), `lost_confirmations` (orders
//!   whose background job was lost: goal 0 in both modes, since the gate's drain waits for the
//!   jobs whatever the delay), `unanswered_orders` (orders the instances took whose 201 never
//!   reached a client), `requests` and `rate` (achieved requests a second);
//! - `latency_p99`, `latency_max` (ms, nearest rank): what the stop costs those that were not
//!   refused. Without the delay haproxy keeps choosing `a` for a while after it has exited; its
//!   connects are refused, and haproxy waits its turn-around time (`timeout connect`, 1 s here)
//!   before retrying them on `b`: they succeed, a second late.
//!
//! The signal's instant is taken when kill(1) returns, so the signal was sent by then: the
//! delays above are short by at most the time kill(1) takes to run (about a millisecond).
//!
//! What the delay must be: haproxy marks a server DOWN after `fall` failed checks, `inter` apart,
//! and the check in flight when readiness flipped may still pass: at most `(fall + 1) x inter`
//! (300 ms with the defaults; `propagation_bound` below), plus scheduling on a loaded machine.
//! The default `--drain-delay-ms` is twice that. Every address is on 127.0.0.0/8.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, ChildGuard, lock};

/// How long the draining instance may take to stop on top of its delay and grace.
const STOP_MARGIN: Duration = Duration::from_secs(5);
/// The bound on every wait for a process to come up.
const START_WITHIN: Duration = Duration::from_secs(10);
/// How long a client waits for an answer before counting a transport error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The gate's grace (`--grace`): far above the work plus the confirmation.
const GRACE: Duration = Duration::from_secs(5);
/// The backend's name in haproxy's configuration, and the two servers'.
const BACKEND: &str = "orders";
const DRAINING: &str = "a";
const STAYING: &str = "b";

/// Flags of `probe-bench drain`.
#[derive(clap::Args)]
pub struct Args {
    /// `POST /orders` a second, in all, evenly paced.
    #[arg(long, default_value_t = 400.0)]
    rate: f64,
    /// Client tasks, each with its own keep-alive connection to haproxy.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Load before instance `a` gets SIGTERM, in seconds.
    #[arg(long = "before-s", value_name = "S", default_value = "1", value_parser = support::secs)]
    before: Duration,
    /// Load after `a` has exited and haproxy logged it DOWN, in seconds.
    #[arg(long = "after-s", value_name = "S", default_value = "0.3", value_parser = support::secs)]
    after: Duration,
    /// haproxy's check interval (`inter`), in ms; also its check timeout.
    #[arg(long = "inter-ms", value_name = "MS", default_value = "100", value_parser = support::millis)]
    inter: Duration,
    /// Failed checks before haproxy marks a server DOWN.
    #[arg(long, default_value_t = 2)]
    fall: u32,
    /// Passing checks before haproxy marks a server UP.
    #[arg(long, default_value_t = 2)]
    rise: u32,
    /// The instances' `--drain-delay` in mode `delay`, in ms.
    #[arg(long = "drain-delay-ms", value_name = "MS", default_value = "600", value_parser = support::millis)]
    drain_delay: Duration,
    /// The instances' `--work`, in ms.
    #[arg(long = "work-ms", value_name = "MS", default_value = "10", value_parser = support::millis)]
    work: Duration,
    /// The instances' `--confirm`, in ms.
    #[arg(long = "confirm-ms", value_name = "MS", default_value = "50", value_parser = support::millis)]
    confirm: Duration,
    /// The modes to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "delay,no-delay"
    )]
    modes: Vec<Mode>,
    /// The order service binary (default: `examples/order_service` beside this binary).
    #[arg(long, value_name = "PATH")]
    service: Option<PathBuf>,
    /// The haproxy binary.
    #[arg(long, value_name = "PATH", default_value = "haproxy")]
    haproxy: String,
}

/// How the draining instance is stopped.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// With `--drain-delay`: readiness fails first, requests are still served meanwhile.
    Delay,
    /// With `--drain-delay 0s`: refusals start with the signal.
    NoDelay,
}

impl Mode {
    /// The suffix of this mode's metrics.
    fn suffix(self) -> &'static str {
        match self {
            Self::Delay => "with_delay",
            Self::NoDelay => "no_delay",
        }
    }
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.rate.is_finite() && self.rate > 0.0,
            "--rate must be above 0"
        );
        ensure!(self.connections >= 1, "--connections must be at least 1");
        ensure!(
            self.fall >= 1 && self.rise >= 1,
            "--fall and --rise must be at least 1"
        );
        ensure!(
            self.inter >= Duration::from_millis(10),
            "--inter-ms must be at least 10"
        );
        ensure!(!self.modes.is_empty(), "--modes must name a mode");
        Ok(())
    }

    /// The longest haproxy may take to mark a server DOWN once its checks fail: `fall` failed
    /// checks `inter` apart, after the one in flight when readiness flipped.
    fn propagation_bound(&self) -> Duration {
        self.inter * (self.fall + 1)
    }
}

/// Runs `probe-bench drain`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let service = match &args.service {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("locating the target directory")?
            .join("examples")
            .join("order_service"),
    };
    ensure!(
        service.is_file(),
        "no order service at {} (cargo build --release -p probe-engine-workspace --example \
         order_service)",
        service.display()
    );
    let haproxy = support::which(&args.haproxy).with_context(|| {
        format!(
            "{:?} not found (apt-get install haproxy, or --haproxy PATH)",
            args.haproxy
        )
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(async {
        println!(
            "drain: {:.0} POST /orders a second over {} connections through haproxy ({}), \
             checks every {} ms, fall {}, rise {}; instance a stopped after {:.1} s of load; \
             drain delay {} ms (propagation bound (fall + 1) x inter = {} ms) vs 0; work {} ms, \
             confirmation {} ms",
            args.rate,
            args.connections,
            haproxy.display(),
            args.inter.as_millis(),
            args.fall,
            args.rise,
            args.before.as_secs_f64(),
            args.drain_delay.as_millis(),
            args.propagation_bound().as_millis(),
            args.work.as_millis(),
            args.confirm.as_millis(),
        );
        support::result(
            "drain",
            "propagation_bound",
            ms(args.propagation_bound()),
            "ms",
        );
        for &mode in &args.modes {
            let started = Instant::now();
            let phase = phase(&args, mode, &service, &haproxy)
                .await
                .with_context(|| format!("mode {}", mode.suffix()))?;
            phase.report(mode);
            println!(
                "({} took {:.1} s)",
                mode.suffix(),
                started.elapsed().as_secs_f64()
            );
        }
        anyhow::Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// One mode

/// What one mode measured.
struct Phase {
    drain_delay: Duration,
    outcomes: Vec<Outcome>,
    /// From the first request to the end of the load (requests in flight then still count).
    load_wall: Duration,
    signalled: Instant,
    /// When haproxy reported the draining instance DOWN, if it did.
    lb_down: Option<Instant>,
    draining_exit: Instant,
    draining: Stopped,
    staying: Stopped,
}

async fn phase(args: &Args, mode: Mode, service: &Path, haproxy: &Path) -> anyhow::Result<Phase> {
    let dir = tempfile::tempdir()?;
    let deps = dir.path().join("dependencies.yaml");
    std::fs::write(
        &deps,
        "# The instance's own listener, probed often so that /readyz is 200 within a probe.\n\
         defaults:\n  interval: 100ms\n  timeout: 50ms\n  rise: 1\n  fall: 2\n\
         targets:\n  - id: listener\n    tcp:\n      address: \"${LISTEN}\"\n",
    )?;
    let drain_delay = match mode {
        Mode::Delay => args.drain_delay,
        Mode::NoDelay => Duration::ZERO,
    };
    let options = ServiceOptions {
        binary: service,
        dependencies: &deps,
        drain_delay,
        work: args.work,
        confirm: args.confirm,
    };
    let (mut draining, mut staying) = tokio::try_join!(
        Service::start(&options, [127, 0, 0, 2]),
        Service::start(&options, [127, 0, 0, 3]),
    )?;
    let balancer = Haproxy::start(
        haproxy,
        dir.path(),
        args,
        &[(DRAINING, draining.addr), (STAYING, staying.addr)],
    )?;
    balancer.wait_up(&[DRAINING, STAYING]).await?;
    println!(
        "{}: a on {}, b on {}, haproxy on {}; both UP",
        mode.suffix(),
        draining.addr,
        staying.addr,
        balancer.addr
    );

    let stop_load = CancellationToken::new();
    let load_started = Instant::now();
    let load = tokio::spawn(load(
        format!("http://{}/orders", balancer.addr),
        args.rate,
        args.connections,
        stop_load.clone(),
    ));
    // The load runs this long before the signal: the scenario's own timing, not a wait for
    // anything.
    tokio::time::sleep(args.before).await;
    let signalled = draining.terminate()?;
    let draining_stopped = draining
        .stopped(signalled + drain_delay + GRACE + STOP_MARGIN)
        .await
        .context("instance a")?;
    let draining_exit = Instant::now();
    // Without the delay, a can be gone before haproxy notices: keep the load going until it
    // has, so that what happens meanwhile is counted.
    let lb_down = balancer
        .down_after(DRAINING, signalled, args.propagation_bound() * 4)
        .await;
    tokio::time::sleep(args.after).await;
    stop_load.cancel();
    let load_wall = load_started.elapsed();
    let outcomes = load.await.context("the load task panicked")??;
    staying.terminate()?;
    let staying_stopped = staying
        .stopped(Instant::now() + drain_delay + GRACE + STOP_MARGIN)
        .await
        .context("instance b")?;
    drop(balancer);
    Ok(Phase {
        drain_delay,
        outcomes,
        load_wall,
        signalled,
        lb_down,
        draining_exit,
        draining: draining_stopped,
        staying: staying_stopped,
    })
}

impl Phase {
    fn report(&self, mode: Mode) {
        let suffix = mode.suffix();
        let result = |metric: &str, value: f64, unit: &str| {
            support::result("drain", &format!("{metric}_{suffix}"), value, unit);
        };
        let since_signal = |at: Instant| ms(at.saturating_duration_since(self.signalled));
        let ok = |o: &&Outcome| o.status.is_some_and(|s| (200..300).contains(&s));
        let requests = self.outcomes.len();
        let succeeded = self.outcomes.iter().filter(ok).count();
        let transport = self.outcomes.iter().filter(|o| o.status.is_none()).count();
        let non_2xx = requests - succeeded - transport;
        let created = self
            .outcomes
            .iter()
            .filter(|o| o.status == Some(201))
            .count() as u64;
        let to_draining: Vec<&Outcome> = self
            .outcomes
            .iter()
            .filter(|o| o.server.as_deref() == Some(DRAINING) && o.sent >= self.signalled)
            .collect();
        let last_to_draining = to_draining
            .iter()
            .map(|o| o.sent)
            .max()
            .map_or(f64::NAN, since_signal);
        let orders = self.draining.orders + self.staying.orders;
        let confirmations = self.draining.confirmations + self.staying.confirmations;
        let lb_down = self.lb_down.map_or(f64::NAN, since_signal);
        let mut latencies: Vec<f64> = self.outcomes.iter().map(|o| ms(o.took)).collect();
        latencies.sort_by(f64::total_cmp);
        let latency = |q: f64| {
            let rank = (q * latencies.len() as f64).ceil() as usize;
            latencies.get(rank.max(1) - 1).copied().unwrap_or(f64::NAN)
        };
        println!(
            "{suffix}: {requests} requests ({:.0}/s), {} failed ({transport} transport errors, \
             {non_2xx} non-2xx); haproxy had a DOWN {lb_down:.0} ms after SIGTERM, the last \
             request a answered started {last_to_draining:.0} ms after it ({} since the signal), \
             a exited after {:.0} ms; orders {orders} (a {}, b {}), confirmations \
             {confirmations}, 201s received {created}; drains: a {}, b {}; latency p50 {:.1} \
             / p99 {:.1} / max {:.1} ms",
            requests as f64 / self.load_wall.as_secs_f64(),
            requests - succeeded,
            to_draining.len(),
            since_signal(self.draining_exit),
            self.draining.orders,
            self.staying.orders,
            self.draining.drain,
            self.staying.drain,
            latency(0.5),
            latency(0.99),
            latency(1.0),
        );
        let mut errors: Vec<&str> = self
            .outcomes
            .iter()
            .filter(|o| !ok(o))
            .filter_map(|o| o.error.as_deref())
            .collect();
        errors.sort_unstable();
        errors.dedup();
        errors.truncate(3);
        if !errors.is_empty() {
            println!("{suffix}: failures, e.g. {errors:?}");
        }
        result("drain_delay", ms(self.drain_delay), "ms");
        result("requests", requests as f64, "requests");
        result(
            "rate",
            requests as f64 / self.load_wall.as_secs_f64(),
            "req/s",
        );
        result("failed", (requests - succeeded) as f64, "requests");
        result("transport_errors", transport as f64, "requests");
        result("non_2xx", non_2xx as f64, "requests");
        result("latency_p99", latency(0.99), "ms");
        result("latency_max", latency(1.0), "ms");
        result("lb_down_after_signal", lb_down, "ms");
        result("last_to_draining", last_to_draining, "ms");
        result(
            "to_draining_after_signal",
            to_draining.len() as f64,
            "requests",
        );
        result("stop_after_signal", since_signal(self.draining_exit), "ms");
        result("orders", orders as f64, "orders");
        result("confirmations", confirmations as f64, "orders");
        result(
            "lost_confirmations",
            orders.saturating_sub(confirmations) as f64,
            "orders",
        );
        result(
            "unanswered_orders",
            orders.saturating_sub(created) as f64,
            "orders",
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// The load

/// One request's fate.
struct Outcome {
    /// When it was sent.
    sent: Instant,
    /// How long until its answer was read whole (or it failed).
    took: Duration,
    /// The answer's status; `None` for a transport error.
    status: Option<u16>,
    /// The server that answered, from haproxy's response header.
    server: Option<String>,
    /// What went wrong, for failures.
    error: Option<String>,
}

/// `connections` tasks, each on its own kept-alive connection, send `POST url` at `rate` a
/// second in all, evenly staggered, until `stop`; every request's outcome, in no order.
async fn load(
    url: String,
    rate: f64,
    connections: usize,
    stop: CancellationToken,
) -> anyhow::Result<Vec<Outcome>> {
    let period = Duration::from_secs_f64(connections as f64 / rate);
    // The workspace builds reqwest with `rustls-no-provider`, so building a client needs a
    // process-wide crypto provider, even for plain HTTP. An error only says that one is
    // installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(connections);
    for i in 0..connections {
        // One client per task: a connection of its own, as separate clients of a service have.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building an HTTP client")?;
        let (url, stop) = (url.clone(), stop.clone());
        let first = start + period.mul_f64(i as f64 / connections as f64);
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(first, period);
            // A slow answer delays the next request rather than bunching the missed ones.
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut outcomes = Vec::new();
            loop {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    _ = ticks.tick() => {}
                }
                outcomes.push(order(&client, &url).await);
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.context("a load task panicked")?);
    }
    Ok(outcomes)
}

/// One `POST /orders`, read to the end.
async fn order(client: &reqwest::Client, url: &str) -> Outcome {
    let sent = Instant::now();
    let response = client
        .post(url)
        .json(&serde_json::json!({ "item": "book", "quantity": 1 }))
        .send()
        .await;
    let response = match response {
        Ok(response) => response,
        Err(e) => {
            return Outcome {
                sent,
                took: sent.elapsed(),
                status: None,
                server: None,
                error: Some(error_kind(&e)),
            };
        }
    };
    let status = response.status().as_u16();
    let server = response
        .headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match response.bytes().await {
        Ok(_) => Outcome {
            sent,
            took: sent.elapsed(),
            status: Some(status),
            server,
            error: (!(200..300).contains(&status)).then(|| format!("status {status}")),
        },
        // The answer was cut: the client never got it whole.
        Err(e) => Outcome {
            sent,
            took: sent.elapsed(),
            status: None,
            server,
            error: Some(error_kind(&e)),
        },
    }
}

/// A short, low-cardinality name for a client error.
fn error_kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else if e.is_body() || e.is_decode() {
        "body cut".into()
    } else {
        format!("request: {e}")
    }
}

// ---------------------------------------------------------------------------------------------
// The order service instances

/// How both instances are started.
struct ServiceOptions<'a> {
    binary: &'a Path,
    dependencies: &'a Path,
    drain_delay: Duration,
    work: Duration,
    confirm: Duration,
}

/// An order service instance, killed if still running when dropped.
struct Service {
    child: ChildGuard,
    addr: SocketAddr,
    /// Its stdout lines; closed when it exits (its stdout reaches end of file).
    lines: mpsc::UnboundedReceiver<String>,
    /// Its log (stderr), for error messages.
    log: Arc<Mutex<Vec<String>>>,
}

/// An instance's `stopped:` line.
struct Stopped {
    orders: u64,
    confirmations: u64,
    drain: String,
}

impl Service {
    /// Starts an instance on `ip` (any free port) and waits for its `listening on` line.
    async fn start(options: &ServiceOptions<'_>, ip: [u8; 4]) -> anyhow::Result<Self> {
        let humantime = |d: Duration| humantime::format_duration(d).to_string();
        let mut child = Command::new(options.binary)
            .arg("--listen")
            .arg(SocketAddr::from((ip, 0)).to_string())
            .arg("--config")
            .arg(options.dependencies)
            .args(["--drain-delay", &humantime(options.drain_delay)])
            .args(["--grace", &humantime(GRACE)])
            .args(["--work", &humantime(options.work)])
            .args(["--confirm", &humantime(options.confirm)])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", options.binary.display()))?;
        let stdout = child.stdout.take().context("the instance's stdout")?;
        let stderr = child.stderr.take().context("the instance's stderr")?;
        let child = ChildGuard(child);
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let log = log.clone();
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lock(&log).push(line);
                }
            }
        });
        let mut service = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            lines,
            log,
        };
        let first = tokio::time::timeout(START_WITHIN, service.lines.recv()).await;
        let addr = match first {
            Ok(Some(line)) => line
                .strip_prefix("listening on ")
                .and_then(|a| a.trim().parse().ok()),
            _ => None,
        };
        service.addr =
            addr.with_context(|| format!("no `listening on` line; its log: {}", service.log()))?;
        Ok(service)
    }

    /// Sends SIGTERM; returns the instant kill(1) returned, when the signal had been sent.
    fn terminate(&self) -> anyhow::Result<Instant> {
        let status = Command::new("kill")
            .args(["-s", "TERM", &self.child.pid().to_string()])
            .status()
            .context("running kill(1)")?;
        ensure!(
            status.success(),
            "kill -s TERM {}: {status}",
            self.child.pid()
        );
        Ok(Instant::now())
    }

    /// Waits until `deadline` for the `stopped:` line and the exit (end of its stdout), and
    /// checks that it exited 0.
    async fn stopped(&mut self, deadline: Instant) -> anyhow::Result<Stopped> {
        let mut stopped = None;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    if let Some(rest) = line.strip_prefix("stopped: ") {
                        stopped = Some(parse_stopped(rest)?);
                    }
                }
                // End of its stdout: it exited.
                Ok(None) => break,
                Err(_) => bail!("still running at its deadline; its log: {}", self.log()),
            }
        }
        // The process closed its stdout on exit, so this wait is short.
        let status = self.child.0.wait().context("waiting for the instance")?;
        ensure!(
            status.success(),
            "exited with {status}; its log: {}",
            self.log()
        );
        stopped.with_context(|| format!("no `stopped:` line; its log: {}", self.log()))
    }

    fn log(&self) -> String {
        lock(&self.log).join("\n")
    }
}

/// `orders=N confirmations=M drain=clean|unclean`.
fn parse_stopped(text: &str) -> anyhow::Result<Stopped> {
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name} in `stopped: {text}`"))
    };
    let count = |name: &str| -> anyhow::Result<u64> {
        let value = field(name)?;
        value
            .parse()
            .with_context(|| format!("{name}={value:?} in `stopped: {text}`"))
    };
    Ok(Stopped {
        orders: count("orders")?,
        confirmations: count("confirmations")?,
        drain: field("drain")?.to_owned(),
    })
}

// ---------------------------------------------------------------------------------------------
// haproxy

/// haproxy in the foreground, killed when dropped.
struct Haproxy {
    _child: ChildGuard,
    addr: SocketAddr,
    socket: PathBuf,
    /// The servers haproxy reported DOWN, with when the harness read the report.
    downs: watch::Receiver<Vec<(String, Instant)>>,
    /// Its stderr, for error messages.
    log: Arc<Mutex<Vec<String>>>,
}

impl Haproxy {
    /// Writes the configuration into `dir` and starts haproxy on 127.0.0.4 (a free port).
    fn start(
        binary: &Path,
        dir: &Path,
        args: &Args,
        servers: &[(&str, SocketAddr)],
    ) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.4:0")
            .context("finding a free port on 127.0.0.4")?
            .local_addr()?
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 4], port));
        let socket = dir.join("haproxy.sock");
        let inter = args.inter.as_millis();
        let mut config = format!(
            "global\n    maxconn 4096\n    stats socket {} mode 600 level admin\n\n\
             defaults\n    mode http\n    timeout connect 1s\n    timeout client 10s\n    \
             timeout server 10s\n    timeout check {inter}ms\n    retries 3\n    \
             option redispatch\n\n\
             frontend orders_in\n    bind {addr}\n    default_backend {BACKEND}\n\n\
             backend {BACKEND}\n    balance roundrobin\n    option httpchk GET /readyz\n    \
             http-check expect status 200\n    \
             http-response set-header X-Served-By %[srv_name]\n    \
             default-server inter {inter}ms fall {} rise {}\n",
            socket.display(),
            args.fall,
            args.rise,
        );
        for (name, server) in servers {
            config.push_str(&format!("    server {name} {server} check\n"));
        }
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, &config)?;
        let mut child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stderr = child.stderr.take().context("haproxy's stderr")?;
        let child = ChildGuard(child);
        let (downs_tx, downs) = watch::channel(Vec::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let prefix = format!("Server {BACKEND}/");
        std::thread::spawn({
            let log = log.clone();
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let at = Instant::now();
                    // `[WARNING]  (pid) : Server orders/a is DOWN, reason: ...`
                    let down = line
                        .split_once(&prefix)
                        .and_then(|(_, rest)| rest.split_once(" is DOWN"))
                        .map(|(name, _)| name.to_owned());
                    if let Some(name) = down {
                        downs_tx.send_modify(|downs| downs.push((name, at)));
                    }
                    lock(&log).push(line);
                }
            }
        });
        Ok(Self {
            _child: child,
            addr,
            socket,
            downs,
            log,
        })
    }

    /// Waits until every one of `servers` is UP with a passing check. haproxy pushes no event
    /// for a passing check, so this reads its stats socket every 20 ms.
    async fn wait_up(&self, servers: &[&str]) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let last = match self.stats().await {
                Ok(rows) => {
                    let up = |name: &&str| {
                        rows.iter().any(|r| {
                            r.server == *name && r.status == "UP" && r.check_status == "L7OK"
                        })
                    };
                    if servers.iter().all(up) {
                        return Ok(());
                    }
                    rows.iter()
                        .map(|r| format!("{} {} {}", r.server, r.status, r.check_status))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
                Err(e) => format!("{e:#}"),
            };
            ensure!(
                Instant::now() < deadline,
                "haproxy's servers not UP within {START_WITHIN:?} ({last}); its log: {}",
                lock(&self.log).join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The servers of the backend from `show stat`.
    async fn stats(&self) -> anyhow::Result<Vec<StatRow>> {
        let mut stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .context("connecting to haproxy's stats socket")?;
        stream.write_all(b"show stat\n").await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .and_then(|h| h.strip_prefix("# "))
            .context("no header in `show stat`")?
            .split(',')
            .collect();
        let column = |name: &str| {
            header
                .iter()
                .position(|c| *c == name)
                .with_context(|| format!("no {name} column in `show stat`"))
        };
        let (px, sv, status, check) = (
            column("pxname")?,
            column("svname")?,
            column("status")?,
            column("check_status")?,
        );
        Ok(lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.get(px) == Some(&BACKEND))
            .filter_map(|f| {
                Some(StatRow {
                    server: (*f.get(sv)?).to_owned(),
                    status: (*f.get(status)?).to_owned(),
                    check_status: (*f.get(check)?).to_owned(),
                })
            })
            .collect())
    }

    /// When haproxy reported `server` DOWN after `since`, waiting up to `within` after `since`
    /// for it; `None` if it did not.
    async fn down_after(&self, server: &str, since: Instant, within: Duration) -> Option<Instant> {
        let mut downs = self.downs.clone();
        let found = tokio::time::timeout_at(
            since + within,
            downs.wait_for(|d| d.iter().any(|(n, at)| n == server && *at >= since)),
        )
        .await;
        let downs = match found {
            Ok(Ok(downs)) => downs,
            _ => return None,
        };
        downs
            .iter()
            .filter(|(n, at)| n == server && *at >= since)
            .map(|(_, at)| *at)
            .min()
    }
}

/// One server's line of `show stat`.
struct StatRow {
    server: String,
    status: String,
    check_status: String,
}
