//! The service manager's notification protocol (`sd_notify`), for a `Type=notify` unit
//! (`deploy/systemd/probe-engine.service`): READY once the config is loaded and the API listens,
//! STOPPING when the stop sequence begins, and a watchdog ping while the daemon is alive.
//!
//! Without `$NOTIFY_SOCKET` (not under systemd, or a unit of another type) every call does
//! nothing, so the daemon behaves the same anywhere.

use std::time::Duration;

use probe::gate::Gate;
use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// Sends `states`; a failure is logged, never fatal: the daemon serves whether or not its
/// manager hears it.
fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "could not notify the service manager");
    }
}

/// Startup is complete: the manager may start what is ordered after the daemon.
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The stop sequence has begun.
pub fn stopping() {
    notify(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// With `WatchdogSec=` set, pings the manager at half the watchdog period while the gate's
/// liveness passes (not stopped, startup within its deadline, no task stuck), until `cancel`.
/// The ping runs on the runtime that runs the probes, so a wedged runtime misses it and the
/// manager restarts the daemon, as it would for a failing `/livez`.
pub async fn watchdog(gate: Gate, cancel: CancellationToken) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_micros(usec) / 2);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let alive = gate.liveness();
        if alive.ok {
            notify(&[NotifyState::Watchdog]);
        } else {
            tracing::warn!(
                reason = alive.reason.as_deref().unwrap_or_default(),
                "not alive: the watchdog goes unpinged"
            );
        }
    }
}
