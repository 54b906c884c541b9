//! The health API: views of the engine's snapshot (never a probe on request), plus the few
//! operator actions.
//!
//! | route | answer |
//! |---|---|
//! | `GET /livez` | 200 until the daemon has stopped (dependencies never fail it) |
//! | `GET /readyz` | 200 when ready, else 503 with a reason: not while starting or stopping; then from the `readiness` policy when the config has one, else when every target is UP, DEGRADED or in MAINTENANCE |
//! | `GET /startupz` | 200 once the daemon has loaded its config and listens |
//! | `POST /v1/drain` | stops the daemon as `SIGTERM` does: not ready, drain, exit |
//! | `GET /v1/targets` | every target's status as JSON, with its score |
//! | `GET /v1/targets/{id}` | one target with its recent results |
//! | `GET /v1/targets/{id}/explain` | why a target or group scores what it does |
//! | `GET /v1/graph` | the dependency graph: nodes with state and score, edges with weight; `?format=dot` for Graphviz |
//! | `PUT /v1/targets/{id}/maintenance` | start maintenance: `{"reason": "...", "duration": "30m"}` |
//! | `DELETE /v1/targets/{id}/maintenance` | end it |
//! | `POST /v1/targets/{id}/calls` | report a real call: `{"status": 503, "latency_ms": 12}` or `{"outcome": "timeout", "latency_ms": 1000}`; it feeds the target's circuit breaker and pools, and a failure re-probes a healthy target at once |
//! | `POST /v1/targets/{id}/circuit` | command its circuit breaker: `{"command": "force_open"}`, `"disable"` or `"reset"` |
//! | `DELETE /v1/targets/{id}/ejection` | put an ejected target back in its pools (permanent ejections too), through slow start |
//! | `GET /v1/events` | state changes as Server-Sent Events |
//! | `GET /v1/topology` | where targets come from: the files and etcd, their state, rejected entries |
//! | `GET /health` | `application/health+json` (IETF draft "Health Check Response Format") |
//! | `GET /metrics` | Prometheus text exposition |
//!
//! Errors are JSON `{"error": "..."}`: 400 for a malformed id, body or query, 401/403 for a refused
//! mutation, 404 for an unknown target or path, 405 for a wrong method, 409 for a conflict.
//!
//! Mutations are accepted from loopback peers only, unless a token is configured; then every
//! mutation needs `Authorization: Bearer <token>`, wherever it comes from.
//!
//! The `/v1` routes are admitted through the daemon's [`Gate`]: once it drains they answer 503
//! with `Connection: close`, while the health routes and `/metrics` keep answering.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use metrics_exporter_prometheus::PrometheusHandle;
use probe::engine::{CircuitCommand, Engine, EngineError, Event, MaintenanceInfo, TargetStatus};
use probe::graph::{ChildExplanation, Edge, NodeKind, NodeStatus};
use probe::outcome::{Outcome, Signal};
use probe::passive::breaker::CircuitSnapshot;
use probe::passive::outlier::MemberStatus;
use probe::passive::recovery::RecoveryPhase;
use probe::passive::{Call, CallOutcome};
use probe::target::TargetId;
use probe::verdict::{HealthState, Pending};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::persist::StateStore;
use crate::topology::{Topology, TopologyStatus};
use probe::gate::{Gate, GateLayer};

/// The longest maintenance an operator can set in one request.
const MAX_MAINTENANCE: Duration = Duration::from_secs(30 * 86_400);

/// What the handlers read.
pub struct ApiState {
    /// The engine whose snapshot is served.
    pub engine: Engine,
    /// Renders `/metrics`; `None` when no recorder is installed (then `/metrics` is 404).
    pub metrics: Option<PrometheusHandle>,
    /// When set, mutations need this bearer token; when not, they need a loopback peer.
    pub token: Option<Arc<str>>,
    /// Where operator maintenance is saved, so it survives a restart.
    pub store: Option<StateStore>,
    /// The sources of the targets, for `/v1/topology` and `/health`.
    pub topology: Topology,
    /// Ends long-lived responses (the event stream) when the daemon stops.
    pub shutdown: CancellationToken,
    /// Admits the `/v1` requests, and answers liveness, readiness and startup.
    pub gate: Gate,
    /// Cancelled to start the stop sequence (`POST /v1/drain`).
    pub stop: CancellationToken,
}

/// Builds the router. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`: the
/// mutation guard needs the peer address.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/targets", get(targets))
        .route("/v1/targets/{id}", get(target))
        .route("/v1/targets/{id}/explain", get(explain))
        .route("/v1/graph", get(graph))
        .route(
            "/v1/targets/{id}/maintenance",
            axum::routing::put(start_maintenance).delete(end_maintenance),
        )
        .route("/v1/targets/{id}/calls", axum::routing::post(report_call))
        .route(
            "/v1/targets/{id}/circuit",
            axum::routing::post(command_circuit),
        )
        .route(
            "/v1/targets/{id}/ejection",
            axum::routing::delete(clear_ejection),
        )
        .route("/v1/events", get(events))
        .route("/v1/topology", get(topology))
        .route("/v1/drain", axum::routing::post(drain))
        .layer(GateLayer::new(state.gate.clone()))
        // Added after the layer: not admitted through the gate, so they answer while draining.
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/startupz", get(startupz))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path") })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        // Shared, not cloned: axum hands every request its own copy of the state.
        .with_state(Arc::new(state))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    ApiError::new(status, message).into_response()
}

/// An error answer: a status and a reason, rendered as `{"error": "..."}`.
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
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

async fn livez(State(state): State<Arc<ApiState>>) -> Response {
    state.gate.liveness().into_response()
}

async fn startupz(State(state): State<Arc<ApiState>>) -> Response {
    state.gate.startup().into_response()
}

/// Not `Check::into_response`: the daemon's answers name what they are about.
async fn readyz(State(state): State<Arc<ApiState>>) -> Response {
    match state.gate.readiness().reason {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

/// `POST /v1/drain`: starts the stop sequence (idempotent); answers at once with 202.
async fn drain(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    if !state.stop.is_cancelled() {
        tracing::info!(%peer, "drain requested through the API");
        state.stop.cancel();
    }
    Ok((StatusCode::ACCEPTED, Json(json!({ "state": "draining" }))).into_response())
}

/// Builds an answer that walks every target on a blocking thread: with 10k targets that is tens
/// of milliseconds, during which the API's single thread would answer nobody else (`/readyz`
/// least of all), and several such requests may run in parallel there.
async fn blocking(
    what: &'static str,
    answer: impl FnOnce() -> Response + Send + 'static,
) -> Response {
    tokio::task::spawn_blocking(answer)
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}")))
}

async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    let Some(handle) = state.metrics.clone() else {
        return error(StatusCode::NOT_FOUND, "metrics are not enabled");
    };
    blocking("rendering metrics", move || {
        state.engine.publish_gauges();
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            handle.render(),
        )
            .into_response()
    })
    .await
}

/// `GET /v1/targets`'s body.
#[derive(Serialize)]
struct TargetList {
    targets: Vec<TargetView>,
}

async fn targets(State(state): State<Arc<ApiState>>) -> Response {
    blocking("listing targets", move || {
        let targets = state
            .engine
            .statuses()
            .iter()
            .map(TargetView::from)
            .collect();
        Json(TargetList { targets }).into_response()
    })
    .await
}

fn parse_id(id: &str) -> Result<TargetId, ApiError> {
    TargetId::new(id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))
}

fn detail(engine: &Engine, id: &TargetId) -> Result<Response, ApiError> {
    let status = engine
        .status(id)
        .ok_or_else(|| EngineError::UnknownTarget(id.clone()))?;
    Ok(Json(TargetDetail {
        target: TargetView::from(&status),
        history: status.history.iter().map(OutcomeView::from).collect(),
    })
    .into_response())
}

async fn target(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    detail(&state.engine, &parse_id(&id)?)
}

/// `GET /v1/targets/{id}/explain`: the node's score and state, and each dependency's part.
async fn explain(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let explanation = state.engine.with_graph(|g| g.explain(&id)).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no target or group {:?}", id.as_str()),
        )
    })?;
    let children: Vec<ChildView> = explanation.children.iter().map(ChildView::from).collect();
    Ok(Json(json!({
        "node": NodeView::from(&explanation.node),
        "stability": explanation.stability,
        "summary": explanation.to_string(),
        "children": children,
    }))
    .into_response())
}

/// The query of `GET /v1/graph`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphQuery {
    format: Option<String>,
}

/// `GET /v1/graph`: every node and edge as JSON, or as Graphviz DOT with `?format=dot`.
async fn graph(
    State(state): State<Arc<ApiState>>,
    query: Result<Query<GraphQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    match query.format.as_deref() {
        None | Some("json") => {
            let export = state.engine.with_graph(probe::graph::Graph::export);
            let nodes: Vec<NodeView> = export.nodes.iter().map(NodeView::from).collect();
            let edges: Vec<EdgeView> = export.edges.iter().map(EdgeView::from).collect();
            Ok(Json(json!({ "nodes": nodes, "edges": edges })).into_response())
        }
        Some("dot") => Ok((
            [(header::CONTENT_TYPE, "text/vnd.graphviz; charset=utf-8")],
            state.engine.with_graph(probe::graph::Graph::to_dot),
        )
            .into_response()),
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: expected \"json\" or \"dot\""),
        )),
    }
}

/// Lets a mutation through, or says why not.
fn authorize(token: Option<&str>, peer: SocketAddr, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = token else {
        return if peer.ip().to_canonical().is_loopback() {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "changes are accepted from loopback only unless the daemon has an --api-token",
            ))
        };
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token",
        )),
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::FORBIDDEN, "invalid bearer token")),
    }
}

/// Compares without an early exit, so response times do not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The body of `PUT /v1/targets/{id}/maintenance`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaintenanceRequest {
    reason: String,
    duration: String,
}

impl MaintenanceRequest {
    fn validate(self) -> Result<(String, Duration), String> {
        let reason = self.reason.trim().to_owned();
        if reason.is_empty() || reason.len() > 512 {
            return Err("reason must be 1 to 512 characters".into());
        }
        let duration = humantime::parse_duration(&self.duration)
            .map_err(|e| format!("invalid duration {:?}: {e}", self.duration))?;
        if duration.is_zero() || duration > MAX_MAINTENANCE {
            return Err("duration must be more than 0 and at most 30 days".into());
        }
        Ok((reason, duration))
    }
}

async fn start_maintenance(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<MaintenanceRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    let id = parse_id(&id)?;
    let (reason, duration) = body
        .map_err(|e| e.body_text())
        .and_then(|Json(r)| r.validate())
        .map_err(|message| ApiError::new(StatusCode::BAD_REQUEST, message))?;
    state.engine.start_maintenance(&id, reason, duration)?;
    persist(&state);
    detail(&state.engine, &id)
}

async fn end_maintenance(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    let id = parse_id(&id)?;
    state.engine.end_maintenance(&id)?;
    persist(&state);
    detail(&state.engine, &id)
}

/// The body of `POST /v1/targets/{id}/calls`: a status, or an outcome for calls without one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallReport {
    status: Option<u16>,
    outcome: Option<String>,
    latency_ms: f64,
}

impl CallReport {
    fn validate(self) -> Result<Call, String> {
        if !(0.0..=MAX_MAINTENANCE.as_millis() as f64).contains(&self.latency_ms) {
            return Err("latency_ms must be a number of milliseconds, 0 or more".into());
        }
        let latency = Duration::from_secs_f64(self.latency_ms / 1000.0);
        let outcome = match (self.status, self.outcome.as_deref()) {
            (Some(status), None) if (100..=599).contains(&status) => {
                CallOutcome::from_status(status)
            }
            (Some(status), None) => return Err(format!("status {status} is not an HTTP status")),
            (None, Some(name)) => CallOutcome::from_name(name).ok_or_else(|| {
                let names: Vec<&str> = CallOutcome::ALL.iter().map(|o| o.as_str()).collect();
                format!(
                    "unknown outcome {name:?}: expected one of {}",
                    names.join(", ")
                )
            })?,
            _ => return Err("give either status or outcome".into()),
        };
        Ok(Call { outcome, latency })
    }
}

/// `POST /v1/targets/{id}/calls`: what real traffic saw, for passive health.
async fn report_call(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<CallReport>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    let id = parse_id(&id)?;
    let call = body
        .map_err(|e| e.body_text())
        .and_then(|Json(r)| r.validate())
        .map_err(|message| ApiError::new(StatusCode::BAD_REQUEST, message))?;
    state.engine.report(&id, &call)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "target": id.as_str(), "outcome": call.outcome.as_str() })),
    )
        .into_response())
}

/// The body of `POST /v1/targets/{id}/circuit`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CircuitRequest {
    command: String,
}

/// `POST /v1/targets/{id}/circuit`: force the circuit open, disable it, or reset it to closed.
async fn command_circuit(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<CircuitRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    let id = parse_id(&id)?;
    let Json(request) = body.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let command = match request.command.as_str() {
        "force_open" => CircuitCommand::ForceOpen,
        "disable" => CircuitCommand::Disable,
        "reset" => CircuitCommand::Reset,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown command {other:?}: expected force_open, disable or reset"),
            ));
        }
    };
    state.engine.command_circuit(&id, command)?;
    tracing::info!(%peer, target_id = %id, command = request.command, "circuit commanded through the API");
    detail(&state.engine, &id)
}

/// `DELETE /v1/targets/{id}/ejection`: an operator readmits an ejected target.
async fn clear_ejection(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    authorize(state.token.as_deref(), peer, &headers)?;
    let id = parse_id(&id)?;
    state.engine.clear_ejection(&id)?;
    tracing::info!(%peer, target_id = %id, "ejection cleared through the API");
    detail(&state.engine, &id)
}

/// Saves operator maintenance; a failure is logged, the change itself stands.
fn persist(state: &ApiState) {
    if let Some(store) = &state.store
        && let Err(e) = store.save(&state.engine.operator_maintenance())
    {
        tracing::error!(error = %e, "could not save maintenance state");
    }
}

/// `GET /v1/events`: every state change as an SSE `transition` event with a JSON body.
async fn events(
    State(state): State<Arc<ApiState>>,
) -> Sse<impl Stream<Item = Result<sse::Event, Infallible>>> {
    let receiver = state.engine.subscribe();
    let shutdown = state.shutdown.clone();
    let stream = futures_util::stream::unfold(
        (receiver, shutdown),
        |(mut receiver, shutdown)| async move {
            let event = tokio::select! {
                () = shutdown.cancelled() => return None,
                next = receiver.recv() => match next {
                    Ok(event) => transition_event(&event),
                    Err(RecvError::Lagged(missed)) => sse::Event::default()
                        .event("lagged")
                        .data(json!({ "missed": missed }).to_string()),
                    Err(RecvError::Closed) => return None,
                },
            };
            Some((Ok(event), (receiver, shutdown)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn transition_event(e: &Event) -> sse::Event {
    sse::Event::default().event("transition").data(
        json!({
            "target": e.target.as_str(),
            "from": e.from.as_str(),
            "to": e.to.as_str(),
            "cause": e.cause.as_str(),
            "at": rfc3339(e.at),
            "detail": e.detail,
        })
        .to_string(),
    )
}

/// One target as `/v1/targets` shows it. Field names are a public contract.
#[derive(Serialize)]
struct TargetView {
    id: String,
    state: &'static str,
    healthy: bool,
    flapping: bool,
    /// A change of verdict being confirmed; `null` when the results agree with the state.
    pending: Option<PendingView>,
    last: Option<LastView>,
    last_failure: Option<FailureView>,
    degraded_reasons: Vec<String>,
    signals: Vec<SignalView>,
    maintenance: Option<MaintenanceView>,
    consecutive_successes: u32,
    consecutive_failures: u32,
    transitions: u64,
    interval_ms: u128,
    timeout_ms: u128,
    /// The dependency-graph score; `null` while unknown.
    score: Option<f64>,
    dependency_down: bool,
    /// Its share of its pool's traffic in `[0, 1]`; `null` when it is in no pool.
    weight: Option<f64>,
    /// Whether a pool has it out.
    ejected: bool,
    /// The ejection and recovery while it is out; `null` otherwise.
    ejection: Option<EjectionView>,
    /// Its circuit breaker; `null` without one.
    circuit: Option<CircuitView>,
}

/// A confirmation in progress, as HAProxy shows "UP 1/3".
#[derive(Serialize)]
struct PendingView {
    toward: &'static str,
    count: u32,
    of: u32,
}

impl From<Pending> for PendingView {
    fn from(p: Pending) -> Self {
        Self {
            toward: p.toward.as_str(),
            count: p.count,
            of: p.of,
        }
    }
}

#[derive(Serialize)]
struct EjectionView {
    /// `ejected`, `cooling_down`, `probation` or `permanent`.
    phase: &'static str,
    reason: Option<&'static str>,
    since: Option<String>,
    /// When the ejection time ends; `null` when permanent.
    until: Option<String>,
    times_ejected: Option<u32>,
    /// Passes counted so far on probation.
    passes: Option<u32>,
    permanent: bool,
}

#[derive(Serialize)]
struct CircuitView {
    /// `closed`, `open`, `half_open`, `forced_open` or `disabled`.
    state: &'static str,
    calls: u64,
    failures: u64,
    slow_calls: u64,
    failure_rate: f64,
    slow_call_rate: f64,
    open_until: Option<String>,
    reopens: u32,
}

/// The wall-clock time of an engine instant.
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    if at >= now {
        SystemTime::now() + (at - now)
    } else {
        SystemTime::now() - (now - at)
    }
}

impl From<&MemberStatus> for EjectionView {
    fn from(m: &MemberStatus) -> Self {
        let ejection = m.ejection.as_ref();
        Self {
            phase: m.phase.as_str(),
            reason: ejection.map(|e| e.reason.as_str()),
            since: ejection.map(|e| rfc3339(wall(e.since))),
            until: ejection.and_then(|e| e.until).map(|at| rfc3339(wall(at))),
            times_ejected: ejection.map(|e| e.times_ejected),
            passes: match m.phase {
                RecoveryPhase::Probation { passes } => Some(passes),
                _ => None,
            },
            permanent: matches!(m.phase, RecoveryPhase::Permanent(_)),
        }
    }
}

impl From<&CircuitSnapshot> for CircuitView {
    fn from(c: &CircuitSnapshot) -> Self {
        Self {
            state: c.state.as_str(),
            calls: c.calls,
            failures: c.failures,
            slow_calls: c.slow_calls,
            failure_rate: c.failure_rate,
            slow_call_rate: c.slow_call_rate,
            open_until: c.open_until.map(|at| rfc3339(wall(at))),
            reopens: c.reopens,
        }
    }
}

/// A graph node as `/v1/graph` and explanations show it. Field names are a public contract.
#[derive(Serialize)]
struct NodeView {
    id: String,
    kind: &'static str,
    /// `null` for a group.
    state: Option<&'static str>,
    /// `null` while unknown.
    score: Option<f64>,
    /// Whether the score is unknown: no results yet below the node.
    unknown: bool,
    dependency_down: bool,
}

#[derive(Serialize)]
struct EdgeView {
    from: String,
    to: String,
    /// Normalised: a node's edges sum to 1.
    weight: f64,
    critical: bool,
}

#[derive(Serialize)]
struct ChildView {
    #[serde(flatten)]
    node: NodeView,
    weight: f64,
    critical: bool,
    /// Critical and DOWN: this dependency caps the parent.
    caps: bool,
}

impl From<&NodeStatus> for NodeView {
    fn from(n: &NodeStatus) -> Self {
        Self {
            id: n.id.to_string(),
            kind: match n.kind {
                NodeKind::Probed => "target",
                NodeKind::Group => "group",
            },
            state: n.state.map(HealthState::as_str),
            score: n.score,
            unknown: n.score.is_none(),
            dependency_down: n.dependency_down,
        }
    }
}

impl From<&Edge> for EdgeView {
    fn from(e: &Edge) -> Self {
        Self {
            from: e.from.to_string(),
            to: e.to.to_string(),
            weight: e.weight,
            critical: e.critical,
        }
    }
}

impl From<&ChildExplanation> for ChildView {
    fn from(c: &ChildExplanation) -> Self {
        Self {
            node: NodeView::from(&c.node),
            weight: c.weight,
            critical: c.critical,
            caps: c.caps,
        }
    }
}

/// One target with its recent results, oldest first.
#[derive(Serialize)]
struct TargetDetail {
    #[serde(flatten)]
    target: TargetView,
    history: Vec<OutcomeView>,
}

#[derive(Serialize)]
struct OutcomeView {
    ok: bool,
    degraded: bool,
    latency_ms: f64,
    reason: Option<&'static str>,
    at: String,
}

/// The latest run: its outcome, and what the check worked around to reach it.
#[derive(Serialize)]
struct LastView {
    #[serde(flatten)]
    outcome: OutcomeView,
    note: Option<String>,
}

#[derive(Serialize)]
struct FailureView {
    reason: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct SignalView {
    name: String,
    severity: &'static str,
}

#[derive(Serialize)]
struct MaintenanceView {
    reason: String,
    source: &'static str,
    until: String,
}

impl From<&Outcome> for OutcomeView {
    fn from(o: &Outcome) -> Self {
        Self {
            ok: o.ok(),
            degraded: o.degraded(),
            latency_ms: o.latency().as_secs_f64() * 1000.0,
            reason: o.reason().map(|r| r.as_str()),
            at: rfc3339(o.at()),
        }
    }
}

impl From<&Signal> for SignalView {
    fn from(s: &Signal) -> Self {
        Self {
            name: s.name.to_string(),
            severity: s.severity.as_str(),
        }
    }
}

impl From<&MaintenanceInfo> for MaintenanceView {
    fn from(m: &MaintenanceInfo) -> Self {
        Self {
            reason: m.reason.clone(),
            source: m.source.as_str(),
            until: rfc3339(m.until),
        }
    }
}

impl From<&TargetStatus> for TargetView {
    fn from(s: &TargetStatus) -> Self {
        Self {
            id: s.id.to_string(),
            state: s.state.as_str(),
            healthy: s.healthy(),
            flapping: s.flapping,
            pending: s.pending.map(PendingView::from),
            last: s.last.as_ref().map(|o| LastView {
                outcome: OutcomeView::from(o),
                note: s.note.clone(),
            }),
            last_failure: s.last_failure.as_ref().map(|f| FailureView {
                reason: f.reason.as_str(),
                detail: f.detail.clone(),
            }),
            degraded_reasons: s.degraded_reasons.clone(),
            signals: s.signals.iter().map(SignalView::from).collect(),
            maintenance: s.maintenance.as_ref().map(MaintenanceView::from),
            consecutive_successes: s.consecutive_successes,
            consecutive_failures: s.consecutive_failures,
            transitions: s.transitions,
            interval_ms: s.schedule.interval().as_millis(),
            timeout_ms: s.schedule.timeout().as_millis(),
            score: s.score,
            dependency_down: s.dependency_down,
            weight: s.pool.as_ref().map(|m| m.weight),
            ejected: s.pool.as_ref().is_some_and(|m| m.ejected),
            ejection: s
                .pool
                .as_ref()
                .filter(|m| m.ejected)
                .map(EjectionView::from),
            circuit: s.circuit.as_ref().map(CircuitView::from),
        }
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// `GET /v1/topology`: the sources, their state, and the entries left out.
async fn topology(State(state): State<Arc<ApiState>>) -> Json<serde_json::Value> {
    let TopologyStatus {
        generation,
        last_change,
        files,
        etcd,
        rejected,
    } = state.topology.status();
    let mut sources = vec![json!({
        "name": "files",
        "state": if files.last_error.is_empty() { "synced" } else { "error" },
        "path": files.path.display().to_string(),
        "files": files.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "last_reload": files.last_reload.map(rfc3339),
        "last_error": files.last_error,
        "last_good_generation": files.last_good_generation,
    })];
    if let Some(etcd) = etcd {
        let mut source = json!({
            "name": "etcd",
            "endpoints": etcd.endpoints,
            "prefix": etcd.prefix,
        });
        match (&etcd.sync, &etcd.error) {
            (Some(sync), _) => {
                let (since, last_error) = match &sync.state {
                    probe_etcd::SyncState::Stale { since, last_error } => {
                        (Some(rfc3339(*since)), Some(last_error.clone()))
                    }
                    probe_etcd::SyncState::Syncing { last_error } => (None, last_error.clone()),
                    probe_etcd::SyncState::Synced => (None, None),
                };
                source["state"] = json!(sync.state.as_str());
                source["stale_since"] = json!(since);
                source["last_error"] = json!(last_error);
                source["revision"] = json!(sync.revision);
                source["entries"] = json!(sync.entries);
                source["last_change"] = json!(sync.last_change.map(rfc3339));
                source["last_resync"] = json!(sync.last_resync.map(rfc3339));
            }
            // Not started (its TLS files cannot be read, say): the same fields, with nothing
            // synced.
            (None, error) => {
                source["state"] = json!("error");
                source["stale_since"] = serde_json::Value::Null;
                source["last_error"] = json!(error);
                source["revision"] = serde_json::Value::Null;
                source["entries"] = serde_json::Value::Null;
                source["last_change"] = serde_json::Value::Null;
                source["last_resync"] = serde_json::Value::Null;
            }
        }
        sources.push(source);
    }
    let rejected: Vec<serde_json::Value> = rejected
        .iter()
        .map(|r| {
            json!({
                "source": r.source,
                "name": r.name,
                "origin": r.origin,
                "reason": r.reason,
                "kept_previous": r.kept_previous,
            })
        })
        .collect();
    Json(json!({
        "generation": generation,
        "last_change": last_change.map(rfc3339),
        "sources": sources,
        "rejected": rejected,
    }))
}

/// A check's status in `application/health+json`, ordered from best to worst.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum CheckStatus {
    Pass,
    Warn,
    Fail,
}

/// `application/health+json`: `pass` when every target is UP, `fail` when any is DOWN, `warn`
/// otherwise (DEGRADED, PROBING, MAINTENANCE). Each target is a `checks` entry keyed
/// `<id>:responseTime`.
async fn health(State(state): State<Arc<ApiState>>) -> Response {
    blocking("reporting health", move || health_report(&state)).await
}

fn health_report(state: &ApiState) -> Response {
    let statuses = state.engine.statuses();
    let mut checks = serde_json::Map::new();
    let mut overall = CheckStatus::Pass;
    for s in &statuses {
        let status = match s.state {
            HealthState::Up => CheckStatus::Pass,
            HealthState::Degraded | HealthState::Probing | HealthState::Maintenance => {
                CheckStatus::Warn
            }
            HealthState::Down => CheckStatus::Fail,
        };
        overall = overall.max(status);
        let mut check = json!({
            "componentId": s.id.as_str(),
            "componentType": "component",
            "status": status,
        });
        if let Some(last) = &s.last {
            check["observedValue"] = json!(last.latency().as_secs_f64() * 1000.0);
            check["observedUnit"] = json!("ms");
            check["time"] = json!(rfc3339(last.at()));
        }
        let output = match (s.state, &s.last_failure, &s.maintenance) {
            (HealthState::Up, ..) => s
                .pending
                .map(|p| format!("{} of {} results toward {}", p.count, p.of, p.toward)),
            (HealthState::Down, Some(f), _) => Some(format!("{}: {}", f.reason, f.detail)),
            (HealthState::Degraded, ..) => {
                Some(format!("degraded: {}", s.degraded_reasons.join("; ")))
            }
            (HealthState::Maintenance, _, Some(m)) => Some(format!(
                "maintenance until {}: {}",
                rfc3339(m.until),
                m.reason
            )),
            (state, ..) if s.flapping => Some(format!("state {state}: flapping")),
            (state, ..) => Some(format!("state {state}")),
        };
        let output = match output {
            Some(output) if s.dependency_down => {
                Some(format!("{output}; a critical dependency is DOWN"))
            }
            None if s.dependency_down => Some("a critical dependency is DOWN".to_owned()),
            output => output,
        };
        if let Some(output) = output {
            check["output"] = json!(output);
        }
        if let Some(score) = s.score {
            check["score"] = json!(score);
        }
        checks.insert(format!("{}:responseTime", s.id), json!([check]));
    }
    // A resolver outage is the engine's own trouble: a warning (targets are not failed for it).
    let resolver = state.engine.resolver().health();
    let (status, output) = if resolver.up {
        (CheckStatus::Pass, None)
    } else {
        (
            CheckStatus::Warn,
            Some(format!(
                "resolver out since {}: {} of {} recent names failed ({}); DNS failures are not \
                 counted against targets",
                resolver.since.map(rfc3339).unwrap_or_default(),
                resolver.troubled,
                resolver.names,
                resolver.last_error.as_deref().unwrap_or("no detail")
            )),
        )
    };
    overall = overall.max(status);
    let mut check = json!({
        "componentId": "resolver",
        "componentType": "system",
        "status": status,
        "observedValue": resolver.troubled,
        "observedUnit": "names failing",
    });
    if let Some(output) = output {
        check["output"] = json!(output);
    }
    checks.insert("resolver:dns".to_owned(), json!([check]));
    // A stale topology source is worth a warning, never a failure: the last content is probed.
    if let Some(etcd) = state.topology.status().etcd {
        let (status, output) = match (&etcd.sync, &etcd.error) {
            (Some(sync), _) => match &sync.state {
                probe_etcd::SyncState::Synced => (CheckStatus::Pass, None),
                probe_etcd::SyncState::Stale { since, last_error } => (
                    CheckStatus::Warn,
                    Some(format!("stale since {}: {last_error}", rfc3339(*since))),
                ),
                probe_etcd::SyncState::Syncing { last_error } => (
                    CheckStatus::Warn,
                    Some(format!(
                        "syncing{}",
                        last_error
                            .as_deref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    )),
                ),
            },
            (None, error) => (CheckStatus::Warn, error.clone()),
        };
        overall = overall.max(status);
        let mut check = json!({
            "componentId": "etcd",
            "componentType": "datastore",
            "status": status,
        });
        if let Some(output) = output {
            check["output"] = json!(output);
        }
        checks.insert("topology:etcd".to_owned(), json!([check]));
    }
    let code = if overall == CheckStatus::Fail {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = json!({
        "status": overall,
        "serviceId": "probe-engine",
        "description": "health of the targets probed by this probe-engine",
        "checks": checks,
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/health+json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_token_only_loopback_peers_may_change_things() {
        let none = HeaderMap::new();
        for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert!(
                authorize(None, peer.parse().unwrap(), &none).is_ok(),
                "{peer}"
            );
        }
        for peer in ["10.1.2.3:1", "[2001:db8::1]:1", "[::ffff:192.0.2.1]:1"] {
            let refused = authorize(None, peer.parse().unwrap(), &none).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{peer}");
        }
        // With a token, loopback is no excuse.
        let refused = authorize(Some("t"), "127.0.0.1:1".parse().unwrap(), &none).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        assert!(authorize(Some("t"), "192.0.2.1:1".parse().unwrap(), &bearer).is_ok());
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }

    #[test]
    fn maintenance_requests_are_validated() {
        let req = |reason: &str, duration: &str| MaintenanceRequest {
            reason: reason.into(),
            duration: duration.into(),
        };
        assert_eq!(
            req(" upgrade ", "30m").validate(),
            Ok(("upgrade".into(), Duration::from_secs(1800)))
        );
        assert!(req("", "30m").validate().is_err());
        assert!(req("x", "soon").validate().unwrap_err().contains("soon"));
        assert!(req("x", "0s").validate().is_err());
        assert!(req("x", "365d").validate().is_err());
    }

    #[test]
    fn call_reports_are_validated() {
        let report = |status: Option<u16>, outcome: Option<&str>, latency_ms: f64| CallReport {
            status,
            outcome: outcome.map(str::to_owned),
            latency_ms,
        };
        assert_eq!(
            report(Some(503), None, 12.0).validate(),
            Ok(Call::http(503, Duration::from_millis(12)))
        );
        assert_eq!(
            report(None, Some("timeout"), 1000.0)
                .validate()
                .map(|c| c.outcome),
            Ok(CallOutcome::Timeout)
        );
        assert!(report(Some(503), Some("timeout"), 1.0).validate().is_err());
        assert!(report(None, None, 1.0).validate().is_err());
        assert!(
            report(Some(42), None, 1.0)
                .validate()
                .unwrap_err()
                .contains("42")
        );
        assert!(
            report(None, Some("meh"), 1.0)
                .validate()
                .unwrap_err()
                .contains("refused")
        );
        assert!(report(Some(200), None, -1.0).validate().is_err());
        assert!(report(Some(200), None, f64::NAN).validate().is_err());
    }
}
