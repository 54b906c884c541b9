//! The engine embedded in a program: one TCP dependency probed, its state changes received as
//! events, and readiness read as the dependency comes and goes.
//!
//! ```text
//! cargo run --example embed
//! ```
//!
//! The dependency is a listener this program opens on 127.0.0.1 (any free port) and later
//! closes, so the example needs nothing else running and ends by itself within a few seconds:
//! the target goes PROBING -> UP once the listener answers, and UP -> DOWN after it closes, and
//! readiness follows. A real service would declare its database or broker the same way and
//! stop taking traffic while `readiness().ready` is false.

use std::num::NonZeroU32;
use std::time::Duration;

use probe::engine::Event;
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::tier::ProbeSpec;
use probe::tier::tcp::TcpSpec;
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// How long the example waits for each state before it calls the run a failure.
const PATIENCE: Duration = Duration::from_secs(10);
/// Failed probes in a row before DOWN (the default is 3, to ride out a blip). Checked when
/// compiling, like any constant.
const FALL: NonZeroU32 = NonZeroU32::new(2).unwrap();

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The dependency: a listener accepting (and closing) connections until it is aborted.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let dependency = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });

    // The engine stops when this token is cancelled; it owns no signal handler of its own.
    let cancel = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    // Subscribed before the targets are applied, so no state change is missed.
    let mut events = engine.subscribe();

    // Probed every 500 ms, 200 ms to answer, no start jitter; UP after one good probe (the
    // default is 2), DOWN after `FALL` failed ones in a row.
    let schedule = Schedule::try_new(ScheduleSettings {
        interval: Duration::from_millis(500),
        timeout: Duration::from_millis(200),
        jitter: 0.0,
        ..ScheduleSettings::default()
    })?;
    let id = TargetId::new("orders-db")?;
    let mut spec = TargetSpec::new(
        id.clone(),
        ProbeSpec::Tcp(TcpSpec::connect(Address::Socket(address))),
    );
    spec.schedule = schedule;
    spec.thresholds = Thresholds::new(NonZeroU32::MIN, FALL);
    engine.apply(vec![spec])?;
    println!("probing {id} at {address}");

    wait_for(&mut events, HealthState::Up).await?;
    println!("ready: {}", engine.readiness().ready);

    // The dependency goes away: connects are refused from now on.
    dependency.abort();
    let _ = dependency.await;
    wait_for(&mut events, HealthState::Down).await?;
    let readiness = engine.readiness();
    println!(
        "ready: {} ({})",
        readiness.ready,
        readiness.reason.as_deref().unwrap_or("no reason given")
    );
    if let Some(status) = engine.status(&id) {
        let failure = status.last_failure.map(|f| f.to_string());
        println!("last failure: {}", failure.as_deref().unwrap_or("none"));
    }

    // Stop probing and wait for the probes in flight.
    cancel.cancel();
    engine.stopped().await;
    Ok(())
}

/// Prints every state change until one enters `state`, within [`PATIENCE`].
async fn wait_for(
    events: &mut broadcast::Receiver<Event>,
    state: HealthState,
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .map_err(|_| format!("no target became {state} within {PATIENCE:?}"))??;
        println!(
            "{}: {} -> {} ({})",
            event.target,
            event.from,
            event.to,
            event.cause.as_str()
        );
        if event.to == state {
            return Ok(());
        }
    }
}
