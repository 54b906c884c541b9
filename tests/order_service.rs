//! The order service example (`examples/order_service.rs`) as a real process: SIGTERM in the
//! middle of a load of orders, and the stop loses nothing.
//!
//! A rolling deploy's stop, end to end: clients post orders as fast as the service answers; SIGTERM arrives; `/readyz` turns 503 at once while orders are still taken for the
//! drain delay; then every new order is refused with 503 + `Connection: close`, the admitted
//! ones and their confirmation jobs finish, and the process exits 0 within its budget, having
//! answered every order it took and sent every confirmation. Its gRPC health (`--grpc-listen`)
//! says what `/readyz` says, before and after the signal.
//!
//! What counts, precisely:
//! - every answer (a status line) is a 201 with the order, or a 503 with `Connection: close`;
//! - nothing admitted was cut: the service's count of orders equals the 201s the clients read
//!   in full, and every one of them was confirmed;
//! - transport errors: a refused connection (the listener had closed) is expected and counted
//!   apart; any other (a reset, a connection closed before an answer) fails the test. Closing an
//!   HTTP/1 server while clients still send can close a connection whose request it never read
//!   (hyper sees it idle), which a client cannot tell from a cut answer; here every client meets
//!   its refusal first, since the confirmation jobs (`--confirm 300ms`) keep the drain, and so
//!   the listener, open longer than a round trip. Behind a load balancer the drain delay is
//!   what ensures that nobody is still sending at the close.
//!
//! Cargo gives integration tests the path of their own package's binaries only, not of examples,
//! so the test asks the `cargo` that runs it for the workspace's test build, `cargo test
//! --workspace --no-run`, into the same target directory, and runs the example that build
//! links. Under the suite (`scripts/test`) that build is the one already made, so the step
//! costs a fingerprint check. A narrower build (`cargo build --example order_service`) would
//! not be: it resolves the dependencies' features for one package, not for the workspace's
//! tests, and so compiles a second copy of half the tree.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Load clients: tasks posting orders one after the other, sharing one connection pool.
const CLIENTS: usize = 48;
/// How long the load runs before SIGTERM.
const LOAD_BEFORE_SIGNAL: Duration = Duration::from_secs(2);
/// The fewest orders that make a load: a debug build on two busy cores takes about 2 000 in the
/// seconds before refusals start (48 clients, 50 ms of work, ~70 ms a request); the floor only
/// says that there was a load, so it leaves room for a much slower machine.
const MIN_ORDERS: usize = 100;
const DRAIN_DELAY: Duration = Duration::from_secs(3);
const GRACE: Duration = Duration::from_secs(5);
/// How much later than delay + grace the process may exit: hooks and closing the server.
const EXIT_MARGIN: Duration = Duration::from_secs(2);
/// How soon after the signal `/readyz` must fail: inside the drain delay, which is what lets a
/// load balancer notice before new orders are refused (a bound on order, not on speed).
const NOT_READY_WITHIN: Duration = Duration::from_secs(2);
/// The bound on every wait for the service that the scenario does not time itself.
const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_no_order() {
    let binary = build_example();
    let (delay, grace) = (
        humantime::format_duration(DRAIN_DELAY).to_string(),
        humantime::format_duration(GRACE).to_string(),
    );
    let mut service = Service::start(
        &binary,
        &[
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--drain-delay",
            &delay,
            "--grace",
            &grace,
            "--work",
            "50ms",
            "--confirm",
            "300ms",
        ],
    )
    .await;
    let health = client();
    let addr = service.addr;
    let url = |path: &str| format!("http://{addr}{path}");

    // Startup completes once bound; readiness waits for the dependencies' first verdicts, and
    // traffic waits for readiness, as behind a load balancer.
    let startupz = health.get(url("/startupz")).send().await.unwrap();
    assert_eq!(startupz.status(), 200);
    let ready = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(r) = health.get(url("/readyz")).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ready.is_ok(), "never ready; logs:\n{}", service.logs());
    // A Kubernetes `grpc:` readiness probe (service "") agrees.
    let mut grpc = service.grpc_health().await;
    assert_eq!(grpc_ready(&mut grpc).await, ServingStatus::Serving);

    let started = Instant::now();
    let give_up = started + LOAD_BEFORE_SIGNAL + DRAIN_DELAY + GRACE + EXIT_MARGIN;
    // One pool: building a client loads the root certificates, far slower than a request.
    let load = client();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|n| tokio::spawn(order_loop(load.clone(), url("/orders"), n, give_up)))
        .collect();
    // The load's own duration: the one sleep of the scenario.
    tokio::time::sleep(LOAD_BEFORE_SIGNAL).await;
    let listing: Value = health
        .get(url("/orders"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listing["created"].as_u64().unwrap() > 0, "{listing}");

    let signalled = Instant::now();
    service.signal("-TERM");
    let not_ready = tokio::time::timeout(NOT_READY_WITHIN, async {
        let mut poll = tokio::time::interval(Duration::from_millis(5));
        loop {
            poll.tick().await;
            let response = health.get(url("/readyz")).send().await.unwrap();
            if response.status() == 503 {
                let at = Instant::now();
                return (at, response.text().await.unwrap());
            }
        }
    })
    .await;
    let Ok((not_ready, reason)) = not_ready else {
        panic!(
            "/readyz still 200 {NOT_READY_WITHIN:?} after SIGTERM; logs:\n{}",
            service.logs()
        );
    };
    assert_eq!(reason, "shutting down\n");
    assert_eq!(grpc_ready(&mut grpc).await, ServingStatus::NotServing);
    let livez = health.get(url("/livez")).send().await.unwrap();
    assert_eq!(livez.status(), 200, "liveness holds while leaving");

    let mut tally = Tally::default();
    for client in clients {
        let report = tokio::time::timeout_at(give_up + WAIT, client)
            .await
            .expect("a client never ended")
            .unwrap();
        tally.add(report);
    }
    let exited = service
        .wait_exit(signalled + DRAIN_DELAY + GRACE + EXIT_MARGIN)
        .await;
    let Some((status, exited_at)) = exited else {
        panic!(
            "still running {:?} after SIGTERM; logs:\n{}",
            DRAIN_DELAY + GRACE + EXIT_MARGIN,
            service.logs()
        );
    };
    let summary = service.stopped_line().await;

    let served_after_not_ready = tally.created.iter().filter(|&&t| t >= not_ready).count();
    println!(
        "order_service: {} orders created ({served_after_not_ready} sent after /readyz turned \
         503), {} refused with 503, {} connection errors; /readyz 503 {:?} after SIGTERM, \
         first refusal {:?} after it, exit {:?} after it; {summary}",
        tally.created.len(),
        tally.refused.len(),
        tally.connect_errors,
        not_ready - signalled,
        tally.refused.iter().min().map(|&t| t - signalled),
        exited_at - signalled,
    );

    // Every response was a 201 or a proper refusal, and no transport error but refusals.
    assert!(
        tally.unexpected.is_empty(),
        "{} unexpected outcomes, e.g. {:?}",
        tally.unexpected.len(),
        &tally.unexpected[..tally.unexpected.len().min(5)]
    );
    assert!(
        tally.created.len() >= MIN_ORDERS,
        "not much of a load: {} orders",
        tally.created.len()
    );
    // Each client ended on a refusal (or, had the listener closed first, a refused connection),
    // not on the deadline.
    assert_eq!(
        tally.refused.len() + tally.connect_errors,
        CLIENTS,
        "{tally:?}"
    );
    // Orders were taken after readiness failed (the drain delay), and none was refused before
    // the delay was over.
    assert!(
        served_after_not_ready > 0,
        "nothing served during the delay"
    );
    let first_refusal = tally.refused.iter().min().copied();
    assert!(
        first_refusal.is_none_or(|t| t >= signalled + DRAIN_DELAY),
        "refused {:?} after SIGTERM, inside the drain delay",
        first_refusal.map(|t| t - signalled)
    );

    assert!(status.success(), "{status}; logs:\n{}", service.logs());
    // The service answered every order it took with a 201 that arrived in full (nothing
    // admitted was cut), and sent every confirmation: the drain waited for the jobs, the flush
    // came after them.
    assert_eq!(
        summary,
        format!(
            "stopped: orders={n} confirmations={n} drain=clean",
            n = tally.created.len()
        ),
        "logs:\n{}",
        service.logs()
    );
    service.assert_logged_in_order(&[
        "SIGTERM",
        "shutdown: not ready",
        "shutdown: draining",
        "shutdown: drained",
        "shutdown: probes stopped",
        "shutdown: confirmations flushed",
        "shutdown: server stopped",
    ]);
}

/// A gRPC `Check` of service `""`: what a Kubernetes `grpc:` readiness probe asks.
async fn grpc_ready(client: &mut HealthClient<Channel>) -> ServingStatus {
    let request = HealthCheckRequest {
        service: String::new(),
    };
    client.check(request).await.unwrap().into_inner().status()
}

/// What one client saw.
#[derive(Debug, Default)]
struct Report {
    /// When each order answered 201 was sent.
    created: Vec<Instant>,
    /// When the refusal that ended the client arrived, if one did.
    refused: Option<Instant>,
    /// Whether a refused connection ended the client.
    connect_error: bool,
    /// Anything else: another status, a refusal without `Connection: close`, a transport error
    /// once connected (a reset, a connection closed before or during the answer), the deadline.
    unexpected: Vec<String>,
}

/// Posts orders one after the other until refused.
async fn order_loop(http: reqwest::Client, url: String, n: usize, give_up: Instant) -> Report {
    let mut report = Report::default();
    loop {
        if Instant::now() >= give_up {
            report.unexpected.push(format!("client {n} never refused"));
            return report;
        }
        let sent = Instant::now();
        let body = serde_json::json!({ "item": format!("book-{n}"), "quantity": 1 + n % 3 });
        let response = match http.post(&url).json(&body).send().await {
            Ok(response) => response,
            Err(e) if e.is_connect() => {
                report.connect_error = true;
                return report;
            }
            Err(e) => {
                report.unexpected.push(format!("client {n}: {e:?}"));
                return report;
            }
        };
        match response.status().as_u16() {
            201 => match response.json::<Value>().await {
                Ok(order) if order["id"].is_u64() && order["confirmation"] == "pending" => {
                    report.created.push(sent);
                }
                Ok(order) => report.unexpected.push(format!("201 with {order}")),
                Err(e) => report.unexpected.push(format!("201 cut: {e:?}")),
            },
            503 => {
                let at = Instant::now();
                let headers = response.headers();
                if headers.get("connection").is_none_or(|v| v != "close")
                    || !headers.contains_key("retry-after")
                {
                    report.unexpected.push(format!(
                        "a refusal without close or retry-after: {headers:?}"
                    ));
                }
                report.refused = Some(at);
                return report;
            }
            status => {
                let text = response.text().await.unwrap_or_default();
                report.unexpected.push(format!("{status}: {text}"));
            }
        }
    }
}

/// All clients' reports together.
#[derive(Debug, Default)]
struct Tally {
    created: Vec<Instant>,
    refused: Vec<Instant>,
    connect_errors: usize,
    unexpected: Vec<String>,
}

impl Tally {
    fn add(&mut self, report: Report) {
        self.created.extend(report.created);
        self.refused.extend(report.refused);
        self.connect_errors += usize::from(report.connect_error);
        self.unexpected.extend(report.unexpected);
    }
}

/// Builds the example into this test's target directory and profile; returns its path.
fn build_example() -> PathBuf {
    // This test runs as TARGET/PROFILE/deps/order_service-HASH.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from TARGET/PROFILE/deps");
    let target_dir = profile_dir.parent().expect("a target directory");
    let mut cargo = Command::new(env!("CARGO"));
    // Cargo runs tests with the package's own variables set (CARGO_MANIFEST_DIR, CARGO_PKG_*,
    // ...). Build scripts that watch them (ring's does) would see a change from a plain
    // `cargo build` and rebuild half the tree each time: the nested build runs without them.
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            )
        {
            cargo.env_remove(name);
        }
    }
    cargo
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "--workspace", "--no-run", "--quiet", "--locked"])
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some(profile) => {
            cargo.args(["--profile", profile]);
        }
    }
    let output = cargo.output().expect("running cargo");
    assert!(
        output.status.success(),
        "building the example failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    profile_dir
        .join("examples")
        .join(format!("order_service{}", std::env::consts::EXE_SUFFIX))
}

/// The example running as a child process. Killed if the test ends first.
struct Service {
    child: Child,
    addr: SocketAddr,
    /// stdout lines after `listening on`.
    stdout: mpsc::UnboundedReceiver<String>,
    /// stderr: the logs, for failure messages and the order of the shutdown steps.
    logs: Arc<Mutex<Vec<String>>>,
}

impl Service {
    async fn start(binary: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(binary)
            .args(args)
            .arg("--config")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/order_service.yaml"
            ))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the example");
        let (lines, mut stdout) = mpsc::unbounded_channel();
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let logs = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn({
            let logs = logs.clone();
            move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push(line);
                }
            }
        });
        let first = tokio::time::timeout(WAIT, stdout.recv()).await;
        let mut service = Self {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            stdout,
            logs,
        };
        let addr = match first {
            Ok(Some(line)) => line.strip_prefix("listening on ").map(str::parse),
            _ => None,
        };
        match addr {
            Some(Ok(addr)) => service.addr = addr,
            _ => panic!("no `listening on` line; logs:\n{}", service.logs()),
        }
        service
    }

    /// A gRPC health client of the service's `--grpc-listen` port, from the stdout line that
    /// follows `listening on`.
    async fn grpc_health(&mut self) -> HealthClient<Channel> {
        let line = tokio::time::timeout(WAIT, self.stdout.recv()).await;
        let addr: SocketAddr = match line {
            Ok(Some(line)) => line
                .strip_prefix("grpc health on ")
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("not a `grpc health on` line: {line}")),
            _ => panic!("no `grpc health on` line; logs:\n{}", self.logs()),
        };
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        HealthClient::new(channel)
    }

    /// Sends a signal (`-TERM`) with kill(1): the workspace forbids unsafe code, hence libc.
    fn signal(&self, which: &str) {
        let status = Command::new("kill")
            .args([which, &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {which}: {status}");
    }

    /// Waits for the process to exit until `deadline`; returns its status and when it was seen.
    async fn wait_exit(&mut self, deadline: Instant) -> Option<(ExitStatus, Instant)> {
        let mut poll = tokio::time::interval(Duration::from_millis(5));
        loop {
            poll.tick().await;
            if let Some(status) = self.child.try_wait().expect("waiting for the example") {
                return Some((status, Instant::now()));
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// The `stopped:` line the example prints last.
    async fn stopped_line(&mut self) -> String {
        loop {
            match tokio::time::timeout(WAIT, self.stdout.recv()).await {
                Ok(Some(line)) if line.starts_with("stopped:") => return line,
                Ok(Some(_)) => {}
                _ => panic!("no `stopped:` line; logs:\n{}", self.logs()),
            }
        }
    }

    fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Each message appears in the logs, after the one before it.
    fn assert_logged_in_order(&self, messages: &[&str]) {
        let logs = self.logs.lock().unwrap().clone();
        let mut from = 0;
        for message in messages {
            match logs[from..].iter().position(|l| l.contains(message)) {
                Some(i) => from += i + 1,
                None => panic!(
                    "{message:?} not logged after the steps before it; logs:\n{}",
                    logs.join("\n")
                ),
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Only when the test failed before the process exited; errors mean it had.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP client with bounded waits. The workspace builds reqwest with
/// `rustls-no-provider`, so building one needs a process-wide crypto provider first.
fn client() -> reqwest::Client {
    // An error only says that one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}
