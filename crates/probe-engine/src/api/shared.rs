//! What every handler shares: the state they read, the error answer, the blocking-thread
//! helper for answers that walk every target, and the id in a path.

use std::sync::Arc;

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::PrometheusHandle;
use probe::TargetId;
use probe::engine::{Engine, EngineError};
use probe::gate::Gate;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::tokens::Tokens;
use super::views::ListingCache;
use crate::persist::StateStore;
use crate::topology::TopologyHandle;

/// What the handlers read.
pub struct ApiState {
    /// The engine whose snapshot is served.
    pub engine: Engine,
    /// The engine's resolver, whose health `/health` shows.
    pub resolver: Arc<probe::tier::resolve::Resolver>,
    /// Renders `/metrics`; `None` when no recorder is installed (then `/metrics` is 404).
    pub metrics: Option<PrometheusHandle>,
    /// The bearer tokens reads and changes are checked against (see `auth`).
    pub tokens: Tokens,
    /// Whether the API listens on loopback addresses alone: only then does a loopback peer stand
    /// for a local operator.
    pub loopback_only: bool,
    /// Where operator maintenance is saved, so it survives a restart.
    pub store: Option<StateStore>,
    /// The sources of the targets, for `/v1/topology` and `/health`.
    pub topology: TopologyHandle,
    /// Ends long-lived responses (the event stream) when the daemon stops.
    pub shutdown: CancellationToken,
    /// Admits the `/v1` requests, and answers liveness, readiness and startup.
    pub gate: Gate,
    /// Cancelled to start the stop sequence (`POST /v1/drain`).
    pub stop: CancellationToken,
    /// `/v1/targets`' serialised views, kept between requests.
    pub(crate) listing: ListingCache,
    /// The cluster this daemon is a member of, if any.
    pub cluster: Option<probe_etcd::cluster::Cluster>,
    /// The alerting loop, when the config has an `alerts` section.
    pub alerts: Option<crate::alerts::Alerter>,
    /// The history, when it is kept (`--state-dir` or a `history` section).
    pub history: Option<crate::history::History>,
    /// The status page; `None` with `--ui false`.
    pub ui: Option<Ui>,
    /// blackbox_exporter's `GET /probe`, with `--blackbox-config`; `None` (and a 404) without.
    pub adhoc: Option<Arc<crate::adhoc::AdHoc>>,
    /// The page's rows' changes besides transitions, while the page is on.
    pub(crate) page_rows: Option<super::Rows>,
    /// The web config in force (`--web-config`): its basic users, rate limit and headers.
    pub web: crate::web::Web,
}

/// The status page's settings.
#[derive(Clone, Debug, Default)]
pub struct Ui {
    /// The token its reads need (`--ui-token`); without one they need none.
    pub token: Option<String>,
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    ApiError::new(status, message).into_response()
}

/// An error answer: a status and a reason, rendered as `{"error": "..."}`.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.message }));
        if self.status == StatusCode::UNAUTHORIZED {
            (self.status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let status = match e {
            EngineError::UnknownTarget(_) => StatusCode::NOT_FOUND,
            EngineError::NotInMaintenance(_)
            | EngineError::NoCircuitBreaker(_)
            | EngineError::NotEjected(_) => StatusCode::CONFLICT,
        };
        Self::new(status, e.to_string())
    }
}

/// Builds an answer that walks every target on a blocking thread: with 10k targets that is tens
/// of milliseconds, during which the API's single thread would answer nobody else (`/readyz`
/// least of all), and several such requests may run in parallel there.
pub(super) async fn blocking(
    what: &'static str,
    answer: impl FnOnce() -> Response + Send + 'static,
) -> Response {
    tokio::task::spawn_blocking(answer)
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}")))
}

/// The id in a request's path, or a 400 saying why it is not one.
pub(super) fn parse_id(id: &str) -> Result<TargetId, ApiError> {
    TargetId::new(id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))
}
