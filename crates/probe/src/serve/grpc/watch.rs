//! `Watch`: the current status at once, then each change, driven by what the engine and the gate
//! announce (never by polling), until the client goes or the service is cancelled.
//!
//! A stream re-reads the status it watches whenever something that could move it was
//! announced, and sends it only when it differs from the last one sent, so clients never see
//! the same status twice in a row. What wakes it:
//! - the engine's transitions ([`Engine::subscribe`](crate::Engine::subscribe)) of the watched
//!   target, and any transition into or out of DOWN (which may move a group's
//!   `dependency_down`);
//! - the engine's readiness publications ([`Engine::readiness_changes`](crate::Engine::readiness_changes)),
//!   which also follow every topology applied: a target that appears or leaves;
//! - the gate's moves ([`Gate::changes`](crate::gate::Gate::changes)).
//!
//! A stream holds the same few things whatever happens: a broadcast receiver (a cursor into the
//! engine's bounded event buffer, shared by all), two watch receivers and the last status. It
//! produces a message only when tonic asks for one, so a slow client holds no queue; its
//! receiver falls behind instead, and a lagged receiver re-reads the status, which is all a
//! missed event could have changed.

use std::pin::Pin;

use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tonic::Status;
use tonic_health::pb::HealthCheckResponse;
use tonic_health::pb::health_check_response::ServingStatus;

use super::{HealthService, Service, response};
use crate::engine::Event;
use crate::health::state::HealthState;

/// The stream a `Watch` call answers with.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

/// One `Watch` call's state between messages.
struct Watcher {
    health: HealthService,
    service: Service,
    /// Transitions, for a target or group only: `""` and `"liveness"` move with the readiness
    /// verdict and the gate alone.
    events: Option<broadcast::Receiver<Event>>,
    readiness: Option<watch::Receiver<()>>,
    gate: Option<watch::Receiver<()>>,
    last: Option<ServingStatus>,
}

/// The stream of `service`'s statuses. Every receiver is taken before the first status is
/// read, so nothing that moves it afterwards goes unannounced.
pub(super) fn stream(health: HealthService, service: Service) -> WatchStream {
    let watcher = Watcher {
        events: matches!(service, Service::Node(_)).then(|| health.engine.subscribe()),
        readiness: Some(health.engine.readiness_changes()),
        gate: health.gate.as_ref().map(|g| g.changes()),
        health,
        service,
        last: None,
    };
    Box::pin(futures_util::stream::unfold(watcher, |mut w| async move {
        let status = w.next().await?;
        Some((Ok(response(status)), w))
    }))
}

impl Watcher {
    /// The next status to send: the current one if it differs from the last sent, else the
    /// first that does once something moves; `None` once cancelled.
    async fn next(&mut self) -> Option<ServingStatus> {
        loop {
            let now = self.health.status(&self.service);
            if self.last != Some(now) {
                self.last = Some(now);
                return Some(now);
            }
            let cancel = self.health.cancel.clone();
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = transition(&mut self.events, &self.service) => {}
                () = signalled(&mut self.readiness) => {}
                () = signalled(&mut self.gate) => {}
            }
        }
    }
}

/// Resolves on a transition that may move `service`, or when the receiver lagged (the missed
/// events may have); never once the engine's sender is gone.
async fn transition(events: &mut Option<broadcast::Receiver<Event>>, service: &Service) {
    if let Some(receiver) = events.as_mut() {
        loop {
            match receiver.recv().await {
                Ok(event) if moves(&event, service) => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => break,
            }
        }
        *events = None;
    }
    std::future::pending().await
}

/// Whether `event` may move `service`: the target's own transitions, and for a group any change
/// into or out of DOWN, the only kind that moves a `dependency_down`.
fn moves(event: &Event, service: &Service) -> bool {
    match service {
        Service::Node(id) => {
            event.target == *id || event.from == HealthState::Down || event.to == HealthState::Down
        }
        _ => false,
    }
}

/// Resolves when `signal` is marked; never once its sender is gone (the receiver is dropped
/// then, so a closed signal cannot spin the loop).
async fn signalled(signal: &mut Option<watch::Receiver<()>>) {
    if let Some(receiver) = signal.as_mut() {
        if receiver.changed().await.is_ok() {
            return;
        }
        *signal = None;
    }
    std::future::pending().await
}
