//! gRPC health (`grpc.health.v1`) served from the engine and the gate, so that Kubernetes
//! `grpc:` probes, grpc-health-probe and gRPC load balancers can ask what `/readyz` answers.
//!
//! [`HealthService`] implements tonic-health's `Health` trait itself, over the engine's
//! snapshots, rather than mirroring every target into tonic-health's `HealthReporter`: that
//! would be a watch channel per target (100k of them for a large fleet) and a second copy of
//! the state, kept in step by a task that can lag. Here a `Check` reads the same snapshots as
//! the HTTP API, and a `Watch` re-reads them when told that something moved.
//!
//! Service names:
//! - `""`: the instance's readiness: [`Gate::readiness`] with a gate (what `/readyz` answers),
//!   else [`Engine::readiness`];
//! - [`LIVENESS`] (`"liveness"`): [`Gate::liveness`] with a gate, else always SERVING;
//! - a target's id: SERVING while it is UP, DEGRADED or in MAINTENANCE, NOT_SERVING otherwise
//!   (PROBING included: no verdict yet);
//! - a group's id: SERVING unless a critical dependency is DOWN (its `dependency_down`): a group
//!   has no state of its own, and a non-critical dependency, by the graph's own rule, only
//!   lowers its score;
//! - any other name: `Check` fails with `NOT_FOUND`, `Watch` sends SERVICE_UNKNOWN and stays
//!   open, reporting the status once a target or group of that name appears.
//!
//! From the first step of a stop ([`Gate::stopping`]) every known service but `"liveness"` is
//! NOT_SERVING, as `/readyz` turns 503, so that clients watching any of them move away.
//! `"liveness"` stays what `/livez` says (SERVING until the process has stopped): a liveness
//! probe that failed during the drain would have the kubelet kill the container before it
//! finished serving what it had, the very thing a graceful drain is for.
//!
//! The library serves no socket: [`HealthService::into_server`] is a tonic service to add to
//! the embedder's own tonic server, next to its other services.

mod watch;

use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::engine::Engine;
use crate::gate::Gate;
use crate::target::TargetId;

pub use watch::WatchStream;

/// The service name that answers liveness rather than readiness.
pub const LIVENESS: &str = "liveness";

/// `grpc.health.v1.Health` over an [`Engine`] and, optionally, the [`Gate`] in front of the
/// service. Cheap to clone.
#[derive(Clone)]
pub struct HealthService {
    engine: Engine,
    gate: Option<Gate>,
    /// Ends every `Watch` stream: without it a graceful server shutdown would wait for streams
    /// that never end on their own.
    cancel: CancellationToken,
}

impl HealthService {
    /// Answers from `engine` alone: `""` is [`Engine::readiness`], `"liveness"` always SERVING.
    /// `Watch` streams end when `cancel` is cancelled.
    pub fn new(engine: Engine, cancel: CancellationToken) -> Self {
        Self {
            engine,
            gate: None,
            cancel,
        }
    }

    /// Answers `""` and `"liveness"` from `gate` (what `/readyz` and `/livez` say), and turns
    /// every service but `"liveness"` NOT_SERVING once the gate's stop begins. `Watch` of `""` is woken by the
    /// gate's moves and by the engine's readiness changes, so the gate's readiness source should
    /// be this engine (`gate.set_readiness(Arc::new(engine.clone()))`). Heartbeats going stale
    /// are seen by `Check` only: they signal nothing.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The tonic service to add to a server (`Server::builder().add_service(...)`) or a
    /// `tonic::service::Routes`.
    pub fn into_server(self) -> HealthServer<Self> {
        HealthServer::new(self)
    }

    /// The status of `service` now; SERVICE_UNKNOWN for a name that is not known.
    fn status(&self, service: &Service) -> ServingStatus {
        let stopping = self.gate.as_ref().is_some_and(Gate::stopping);
        let serving = match service {
            Service::Unknown => return ServingStatus::ServiceUnknown,
            Service::Overall => match &self.gate {
                Some(gate) => gate.readiness().ok,
                None => self.engine.readiness().ready,
            },
            // What `/livez` says, through the stop too (see the module docs).
            Service::Liveness => {
                return if self.gate.as_ref().is_none_or(|g| g.liveness().ok) {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
            }
            Service::Node(id) => {
                let Some(node) = self.engine.graph().status(id) else {
                    return ServingStatus::ServiceUnknown;
                };
                // A target's state, a group's verdict: SERVING in UP, DEGRADED (and a target in
                // MAINTENANCE, which readiness counts too).
                node.state.is_some_and(|s| s.counts_as_ready())
            }
        };
        if serving && !stopping {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    }
}

/// What a request's service name stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Service {
    Overall,
    Liveness,
    /// A target or group, whether it exists now or not.
    Node(TargetId),
    /// A name no target can have: never known.
    Unknown,
}

impl Service {
    fn parse(name: &str) -> Self {
        match name {
            "" => Self::Overall,
            LIVENESS => Self::Liveness,
            name => TargetId::new(name).map_or(Self::Unknown, Self::Node),
        }
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status.into(),
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let name = request.into_inner().service;
        match self.status(&Service::parse(&name)) {
            ServingStatus::ServiceUnknown => {
                Err(Status::not_found(format!("unknown service {name:?}")))
            }
            status => Ok(Response::new(response(status))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = Service::parse(&request.into_inner().service);
        Ok(Response::new(watch::stream(self.clone(), service)))
    }
}
