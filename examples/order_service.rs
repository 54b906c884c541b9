//! An order service that embeds `probe`: the gate in front of its API, the engine probing its
//! dependencies, and a graceful stop on `SIGTERM` that loses no request and no background job.
//!
//! ```text
//! cargo run --example order_service -- [--listen 127.0.0.1:8080]
//!     [--grpc-listen 127.0.0.1:8081] [--config examples/order_service.yaml] [--drain-delay 6s]
//!     [--grace 20s] [--work 100ms] [--confirm 300ms]
//! ```
//!
//! Routes:
//! - `POST /orders` (JSON `{"item": "book", "quantity": 2}`) takes `--work` (the stand-in for a
//!   database write), spawns a tracked background job that "sends the confirmation" (takes
//!   `--confirm`), and answers `201 Created` with the order as JSON;
//! - `GET /orders`: how many orders were taken and confirmed, and the latest few;
//! - `/livez`, `/readyz`, `/startupz`: the gate's three checks, for an orchestrator;
//! - with `--grpc-listen`, grpc.health.v1 on a second port ([`HealthService`]): `""` is what
//!   `/readyz` says and `"liveness"` what `/livez` says, for Kubernetes `grpc:` probes (and a
//!   dependency's id its health); NOT_SERVING from the first step of the stop.
//!
//! The two order routes sit behind [`GateLayer`]: while the gate is not Serving they answer 503
//! with `Connection: close` and `Retry-After`. The health routes sit outside it, so that they
//! keep answering (with 503 where due) while the service drains.
//!
//! **Dependencies** come from a YAML file in the daemon's syntax (`--config`), probed by an
//! embedded [`Engine`] that is the gate's readiness source: `/readyz` is 503 while the file's
//! `readiness` policy fails. `${LISTEN}` in the file stands for the bound address, so the
//! default file probes the service's own listener and `/livez` and works out of the box.
//!
//! **Startup** completes once the listener is bound and the engine has its targets, without
//! waiting for their first verdicts: readiness already waits for those, and a startup check
//! that waited on dependencies would have the orchestrator restart an instance for a database
//! outage, which a restart does not fix (a dependency failure fails readiness only).
//!
//! **On `SIGTERM` or `SIGINT`** it runs [`probe::gate::shutdown`], in this order:
//! 1. `/readyz` turns 503 at once while requests are still served, for `--drain-delay`, so that
//!    load balancers stop sending before anything is refused;
//! 2. the gate stops admitting (503 + `Connection: close`) and waits up to `--grace` for the
//!    requests in flight and the confirmation jobs they spawned;
//! 3. cleanup hooks, in order, each within [`HOOK_TIMEOUT`]: stop probing (cancel the engine and
//!    wait for the probes in flight), then flush the confirmations still buffered, which is
//!    only complete once every job has finished: hence after the drain;
//! 4. the HTTP server stops: it closes the listener and waits (up to [`SERVER_CLOSE`]) for the
//!    open connections, which the refusals have mostly closed already. A client still sending
//!    at this point may see its connection closed unanswered (an HTTP/1 server cannot tell a
//!    client "no more requests" on an idle connection): the drain delay is what keeps load
//!    balancers from sending by then;
//! 5. it prints `stopped: orders=N confirmations=M drain=clean|unclean` on stdout and exits 0.
//!
//! A second signal during the stop exits at once, with status 1. The worst-case stop time is
//! `--drain-delay + --grace + 2 x HOOK_TIMEOUT + SERVER_CLOSE`: the orchestrator's grace period
//! (Kubernetes' `terminationGracePeriodSeconds`) must cover it.
//!
//! stdout carries two lines, for scripts and tests: `listening on ADDR` once it is ready to
//! take requests (then `grpc health on ADDR` with `--grpc-listen`), and the `stopped:` line.
//! Logs go to stderr (`RUST_LOG`, default `info`).

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, anyhow};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use probe::gate::{Gate, GateConfig, GateLayer, Hook, ShutdownPlan, shutdown};
use probe::serve::grpc::HealthService;
use probe::topology::Topology;
use probe::{Engine, EngineConfig};
use serde::{Deserialize, Serialize};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// How long each cleanup hook may take.
const HOOK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the server may wait for open connections once the gate has stopped. Every request
/// is refused with `Connection: close` by then, so only an idle or stalled client can hold it.
const SERVER_CLOSE: Duration = Duration::from_secs(2);
/// Confirmations are sent in batches of this many; the last, partial batch at shutdown.
const BATCH: usize = 64;
/// How many orders `GET /orders` shows.
const RECENT: usize = 10;
/// The placeholder for the bound address in the dependencies file.
const LISTEN_PLACEHOLDER: &str = "${LISTEN}";

/// An order service behind a readiness gate, with graceful drain on SIGTERM.
#[derive(Parser)]
#[command(name = "order_service")]
struct Flags {
    /// Address to listen on (port 0: any free port; the `listening on` line says which).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Also serve grpc.health.v1 here (plaintext HTTP/2), for Kubernetes `grpc:` probes.
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
    /// The dependencies to probe: one YAML file in the daemon's syntax; `${LISTEN}` in it
    /// stands for the bound address.
    #[arg(long, default_value = "examples/order_service.yaml")]
    config: PathBuf,
    /// How long to keep serving after readiness turns 503 on SIGTERM, so that load balancers
    /// notice: at least the readiness probe's period x failure threshold, plus a period.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    drain_delay: Duration,
    /// How long the drain may wait for requests in flight and confirmation jobs.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// How long handling `POST /orders` takes.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    work: Duration,
    /// How long sending an order's confirmation takes (background work, after the response).
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    confirm: Duration,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logging();
    match run(flags) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn run(flags: Flags) -> anyhow::Result<ExitCode> {
    // Installed first: without a handler, SIGTERM kills the process outright.
    let mut signals = Signals::install()?;
    let listener = tokio::net::TcpListener::bind(flags.listen)
        .await
        .with_context(|| format!("binding {}", flags.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;

    let topology = load_dependencies(&flags.config, addr)?;
    // The engine stops with its own token, from a shutdown hook: it keeps probing while the
    // service drains (its verdicts no longer matter then, but the hook shows the order).
    let stop_probing = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), stop_probing.clone());
    let diff = engine
        .apply(topology)
        .map_err(|e| anyhow!("{}: {e}", flags.config.display()))?;
    tracing::info!(
        targets = diff.added.len(),
        config = %flags.config.display(),
        "probing dependencies"
    );

    let gate = Gate::new(GateConfig::default());
    gate.set_readiness(Arc::new(engine.clone()));
    let app = Arc::new(App {
        gate: gate.clone(),
        work: flags.work,
        confirm: flags.confirm,
        next_id: AtomicU64::new(1),
        created: AtomicU64::new(0),
        recent: Mutex::new(VecDeque::with_capacity(RECENT)),
        outbox: Outbox::default(),
    });
    let stop_server = CancellationToken::new();
    let mut server = tokio::spawn(
        axum::serve(listener, router(app.clone()))
            .with_graceful_shutdown(stop_server.clone().cancelled_owned())
            .into_future(),
    );
    let grpc = match flags.grpc_listen {
        Some(at) => Some(serve_grpc_health(at, &engine, &gate, &stop_server).await?),
        None => None,
    };
    gate.startup_complete();
    tracing::info!(%addr, "listening");
    say(&format!("listening on {addr}"));
    if let Some((grpc_addr, _)) = &grpc {
        say(&format!("grpc health on {grpc_addr}"));
    }

    let received = tokio::select! {
        name = signals.recv() => name,
        ended = &mut server => {
            return match ended {
                Ok(Ok(())) => Err(anyhow!("the server stopped on its own")),
                Ok(Err(e)) => Err(anyhow!(e).context("serving")),
                Err(e) => Err(anyhow!(e).context("the server task")),
            };
        }
    };
    tracing::info!(signal = received, "shutting down");

    let plan = ShutdownPlan {
        propagation_delay: flags.drain_delay,
        grace: flags.grace,
        hooks: vec![
            Hook::new("stop probing", {
                let engine = engine.clone();
                async move {
                    tracing::info!("shutdown: stopping probes");
                    stop_probing.cancel();
                    engine.stopped().await;
                    tracing::info!("shutdown: probes stopped");
                }
            }),
            Hook::new("flush confirmations", {
                let app = app.clone();
                async move {
                    let flushed = app.outbox.flush();
                    tracing::info!(
                        flushed,
                        sent = app.outbox.sent(),
                        "shutdown: confirmations flushed"
                    );
                }
            }),
        ],
        hook_timeout: HOOK_TIMEOUT,
    };
    let report = tokio::select! {
        report = shutdown(&gate, plan) => report,
        again = signals.recv() => {
            tracing::warn!(signal = again, "second signal: exiting now");
            return Ok(ExitCode::FAILURE);
        }
    };

    tracing::info!("shutdown: closing the listener and the connections left");
    stop_server.cancel();
    match tokio::time::timeout(SERVER_CLOSE, &mut server).await {
        Ok(Ok(Ok(()))) => tracing::info!("shutdown: server stopped"),
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "shutdown: the server failed"),
        Ok(Err(e)) => tracing::warn!(error = %e, "shutdown: the server task failed"),
        Err(_) => tracing::warn!(
            after = ?SERVER_CLOSE,
            "shutdown: connections still open; exiting anyway"
        ),
    }
    if let Some((_, grpc)) = grpc {
        match tokio::time::timeout(SERVER_CLOSE, grpc).await {
            Ok(Ok(Ok(()))) => tracing::info!("shutdown: grpc health stopped"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "shutdown: grpc health failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "shutdown: the grpc health task failed"),
            Err(_) => tracing::warn!("shutdown: grpc health connections still open"),
        }
    }
    let drain = if report.drain.clean {
        "clean"
    } else {
        "unclean"
    };
    say(&format!(
        "stopped: orders={} confirmations={} drain={drain}",
        app.created.load(Ordering::Acquire),
        app.outbox.sent()
    ));
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Serves grpc.health.v1 on `at` until `stop`, answering from the gate (so NOT_SERVING from the
/// stop's first step, with `/readyz`) and the engine; returns the bound address and the server.
async fn serve_grpc_health(
    at: SocketAddr,
    engine: &Engine,
    gate: &Gate,
    stop: &CancellationToken,
) -> anyhow::Result<(SocketAddr, GrpcServer)> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("binding gRPC health to {at}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let health = HealthService::new(engine.clone(), stop.clone()).with_gate(gate.clone());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health.into_server())
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                stop.clone().cancelled_owned(),
            ),
    );
    tracing::info!(%addr, "grpc health listening");
    Ok((addr, server))
}

/// The gRPC health server's task.
type GrpcServer = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// The routes: orders behind the gate, health checks beside it.
fn router(app: Arc<App>) -> Router {
    let orders = Router::new()
        .route("/orders", get(list_orders).post(create_order))
        .layer(GateLayer::new(app.gate.clone()))
        .with_state(app.clone());
    let check = |check: fn(&Gate) -> probe::gate::Check| {
        let gate = app.gate.clone();
        get(move || async move { check(&gate).into_response::<axum::body::Body>() })
    };
    orders
        .route("/livez", check(Gate::liveness))
        .route("/readyz", check(Gate::readiness))
        .route("/startupz", check(Gate::startup))
}

/// The service's state, shared by the handlers.
struct App {
    /// Admits the requests (through the layer) and counts the confirmation jobs as in flight.
    gate: Gate,
    work: Duration,
    confirm: Duration,
    /// Order ids; an id whose job could not start is skipped, hence apart from `created`.
    next_id: AtomicU64,
    /// Orders answered with 201, for the `stopped:` line.
    created: AtomicU64,
    /// The latest orders, for `GET /orders`; bounded, so a plain mutex held for a push.
    recent: Mutex<VecDeque<Order>>,
    outbox: Outbox,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewOrder {
    item: String,
    quantity: u32,
}

#[derive(Clone, Serialize)]
struct Order {
    id: u64,
    item: String,
    quantity: u32,
    /// `pending` in the 201 answer: the confirmation is sent after it.
    confirmation: &'static str,
}

#[derive(Serialize)]
struct Listing {
    created: u64,
    confirmations_sent: u64,
    recent: Vec<Order>,
}

async fn create_order(
    State(app): State<Arc<App>>,
    Json(new): Json<NewOrder>,
) -> Result<(StatusCode, Json<Order>), Response> {
    let item = new.item.trim();
    if item.is_empty() || item.len() > 100 || new.quantity == 0 {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "an order needs an item (1 to 100 bytes) and a quantity of at least 1",
        ));
    }
    // The stand-in for the real work: a database write, say.
    tokio::time::sleep(app.work).await;
    let id = app.next_id.fetch_add(1, Ordering::Relaxed);
    let job = app.clone();
    // Tracked, so the drain waits for it: a confirmation must not be lost to a restart.
    if app
        .gate
        .spawn(async move {
            tokio::time::sleep(job.confirm).await;
            job.outbox.push(id);
        })
        .is_none()
    {
        // Only when the drain timed out with this request in flight: the gate is Stopped.
        let mut refused = error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
        refused
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Err(refused);
    }
    let order = Order {
        id,
        item: item.to_owned(),
        quantity: new.quantity,
        confirmation: "pending",
    };
    {
        let mut recent = lock(&app.recent);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(order.clone());
    }
    app.created.fetch_add(1, Ordering::AcqRel);
    Ok((StatusCode::CREATED, Json(order)))
}

async fn list_orders(State(app): State<Arc<App>>) -> Json<Listing> {
    Json(Listing {
        created: app.created.load(Ordering::Acquire),
        confirmations_sent: app.outbox.sent(),
        recent: lock(&app.recent).iter().rev().cloned().collect(),
    })
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// Confirmations waiting to be sent, in batches: the stand-in for a message producer's buffer.
/// Whatever a batch has not taken when the service stops must be flushed after the last job has
/// pushed its own, which is why the flush is a shutdown hook, run after the drain.
#[derive(Default)]
struct Outbox {
    /// Order ids not sent yet; at most [`BATCH`].
    pending: Mutex<Vec<u64>>,
    /// Confirmations sent so far.
    sent: AtomicU64,
}

impl Outbox {
    fn push(&self, id: u64) {
        let full = {
            let mut pending = lock(&self.pending);
            pending.push(id);
            (pending.len() >= BATCH).then(|| std::mem::take(&mut *pending))
        };
        if let Some(batch) = full {
            self.send(&batch);
        }
    }

    /// Sends what is pending; returns how many.
    fn flush(&self) -> usize {
        let batch = std::mem::take(&mut *lock(&self.pending));
        self.send(&batch);
        batch.len()
    }

    fn send(&self, batch: &[u64]) {
        if batch.is_empty() {
            return;
        }
        tracing::debug!(count = batch.len(), first = batch[0], "confirmations sent");
        self.sent.fetch_add(batch.len() as u64, Ordering::AcqRel);
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each value is left whole between statements: a panicked holder leaves it usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the dependencies file, with `${LISTEN}` replaced by the address probes can reach the
/// service at.
///
/// One file only: the daemon's directory merge and etcd source are not for an embedded engine
/// whose targets are the service's own dependencies.
fn load_dependencies(path: &Path, bound: SocketAddr) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the dependencies file {}", path.display()))?;
    let text = text.replace(LISTEN_PLACEHOLDER, &reachable(bound).to_string());
    let config = probe_config::parse(path, &text).map_err(|errors| {
        anyhow!(
            "{} errors in the dependencies file:\n{errors}",
            errors.0.len()
        )
    })?;
    if config.etcd.is_some() {
        tracing::warn!("the file's topology.etcd section is ignored: only its targets are probed");
    }
    Ok(config.topology)
}

/// The address to probe a listener bound to `bound` at: an unspecified IP (`0.0.0.0`, `::`)
/// is reached through loopback.
fn reachable(bound: SocketAddr) -> SocketAddr {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bound.port())
}

/// SIGTERM (what orchestrators send) and SIGINT (Ctrl-C).
struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for either; returns its name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

/// Prints a line for scripts on stdout, flushed at once so that a reader never waits for it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        tracing::warn!(line, "could not write to stdout");
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
