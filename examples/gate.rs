//! A readiness gate in front of an axum service: requests are admitted only while the gate is
//! serving, `/readyz` follows an embedded engine's verdict on a dependency, and `SIGTERM` or
//! Ctrl-C drains the service without cutting a request.
//!
//! ```text
//! cargo run --example gate -- [ADDR]          # default 127.0.0.1:8080 (port 0: any free port)
//! curl -i localhost:8080/hello                # 200 after 100 ms of "work"
//! curl -i localhost:8080/readyz               # 503, then 200 once the dependency is UP
//!                                             # (two passing probes: ~6 s at the defaults)
//! kill -TERM <pid>                            # or Ctrl-C
//! ```
//!
//! The stop goes in the order a load balancer needs ([`probe::gate::shutdown`]): `/readyz`
//! turns 503 at once while `/hello` is still served for [`DRAIN_DELAY`] (so that balancers
//! polling `/readyz` stop sending first), then new requests get 503 with `Connection: close`
//! while those in flight finish (up to [`GRACE`]), then the engine stops probing, then the
//! server closes. `/livez` and `/readyz` sit beside the gate, so they keep answering throughout.
//!
//! The dependency is the service's own listener, so the example runs alone; a real service
//! would point the target at its database.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use probe::gate::{Gate, GateConfig, GateLayer, Hook, ShutdownPlan, shutdown};
use probe::tier::ProbeSpec;
use probe::tier::tcp::TcpSpec;
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// How long `/hello` is still served once `/readyz` fails: a balancer polling every second that
/// takes one failure to drop the instance notices within it.
const DRAIN_DELAY: Duration = Duration::from_secs(2);
/// How long requests in flight may take to finish once admission stops.
const GRACE: Duration = Duration::from_secs(5);
/// How long stopping the probes may take.
const HOOK_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The gate logs each step of the stop (RUST_LOG filters; default info).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let listen: SocketAddr = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|e| format!("{arg:?}: {e}"))?,
        None => SocketAddr::from(([127, 0, 0, 1], 8080)),
    };
    // Before anything else: without a handler, SIGTERM would kill the process outright.
    let mut terminate = signal(SignalKind::terminate())?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;

    // The engine decides readiness; it stops with its own token, from a shutdown hook, so that
    // it keeps probing while the service drains.
    let stop_probing = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), stop_probing.clone());
    engine.apply(vec![TargetSpec::new(
        TargetId::new("dependency")?,
        ProbeSpec::Tcp(TcpSpec::connect(Address::Socket(addr))),
    )])?;

    let gate = Gate::new(GateConfig::default());
    gate.set_readiness(Arc::new(engine.clone()));
    let check = |check: fn(&Gate) -> probe::gate::Check| {
        let gate = gate.clone();
        get(move || async move { check(&gate).into_response::<axum::body::Body>() })
    };
    let app = Router::new()
        .route("/hello", get(hello))
        .layer(GateLayer::new(gate.clone()))
        .route("/livez", check(Gate::liveness))
        .route("/readyz", check(Gate::readiness));
    let stop_server = CancellationToken::new();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stop_server.clone().cancelled_owned())
            .into_future(),
    );
    // Started: readiness now depends on the dependency's verdict alone.
    gate.startup_complete();
    println!("listening on {addr}");

    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let plan = ShutdownPlan {
        propagation_delay: DRAIN_DELAY,
        grace: GRACE,
        hooks: vec![Hook::new("stop probing", async move {
            stop_probing.cancel();
            engine.stopped().await;
        })],
        hook_timeout: HOOK_TIMEOUT,
    };
    let report = shutdown(&gate, plan).await;
    // Every request is refused with `Connection: close` by now: the connections left are idle.
    stop_server.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    println!(
        "stopped: drain {}",
        if report.drain.clean {
            "clean"
        } else {
            "unclean"
        }
    );
    Ok(())
}

/// The gated work: the stand-in for a handler that takes a while.
async fn hello() -> &'static str {
    tokio::time::sleep(Duration::from_millis(100)).await;
    "hello\n"
}
