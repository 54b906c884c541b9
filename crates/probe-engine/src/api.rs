//! The health API: read-only views of the engine's snapshot, never a probe on request.
//!
//! | route | answer |
//! |---|---|
//! | `GET /livez` | 200 while the process serves at all |
//! | `GET /readyz` | 200 when every target is UP, else 503 with a plain-text reason |
//! | `GET /v1/targets` | every target's status as JSON |
//! | `GET /v1/targets/{id}` | one target with its recent results |
//! | `GET /health` | `application/health+json` (IETF draft "Health Check Response Format") |
//! | `GET /metrics` | Prometheus text exposition |
//!
//! Errors are JSON `{"error": "..."}`: 400 for a malformed id, 404 for an unknown target or path,
//! 405 for a wrong method.

use std::time::SystemTime;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use probe::engine::{Engine, TargetStatus};
use probe::outcome::Outcome;
use probe::state::HealthState;
use probe::target::TargetId;
use serde::Serialize;
use serde_json::{Value, json};

/// What the handlers read.
#[derive(Clone)]
pub struct ApiState {
    /// The engine whose snapshot is served.
    pub engine: Engine,
    /// Renders `/metrics`; `None` when no recorder is installed (then `/metrics` is 404).
    pub metrics: Option<PrometheusHandle>,
}

/// Builds the router.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/targets", get(targets))
        .route("/v1/targets/{id}", get(target))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path") })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<ApiState>) -> Response {
    let readiness = state.engine.readiness();
    match readiness.reason {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<ApiState>) -> Response {
    match state.metrics {
        // Rendering walks every series (several per target): keep it off the async workers,
        // which also run the probes.
        Some(handle) => match tokio::task::spawn_blocking(move || handle.render()).await {
            Ok(text) => (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response(),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("rendering metrics: {e}"),
            ),
        },
        None => error(StatusCode::NOT_FOUND, "metrics are not enabled"),
    }
}

async fn targets(State(state): State<ApiState>) -> Json<Value> {
    let targets: Vec<TargetView> = state
        .engine
        .statuses()
        .iter()
        .map(TargetView::from)
        .collect();
    Json(json!({ "targets": targets }))
}

async fn target(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let id = match TargetId::new(&id) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    match state.engine.status(&id) {
        Some(status) => Json(TargetDetail {
            target: TargetView::from(&status),
            history: status.history.iter().map(OutcomeView::from).collect(),
        })
        .into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no target {:?}", id.as_str()),
        ),
    }
}

/// One target as `/v1/targets` shows it. Field names are a public contract.
#[derive(Serialize)]
struct TargetView {
    id: String,
    state: &'static str,
    healthy: bool,
    last: Option<OutcomeView>,
    last_failure: Option<FailureView>,
    consecutive_successes: u32,
    consecutive_failures: u32,
    transitions: u64,
    interval_ms: u128,
    timeout_ms: u128,
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
    latency_ms: f64,
    reason: Option<&'static str>,
    at: String,
}

#[derive(Serialize)]
struct FailureView {
    reason: &'static str,
    detail: String,
}

impl From<&Outcome> for OutcomeView {
    fn from(o: &Outcome) -> Self {
        Self {
            ok: o.ok(),
            latency_ms: o.latency().as_secs_f64() * 1000.0,
            reason: o.reason().map(|r| r.as_str()),
            at: rfc3339(o.at()),
        }
    }
}

impl From<&TargetStatus> for TargetView {
    fn from(s: &TargetStatus) -> Self {
        Self {
            id: s.id.to_string(),
            state: s.state.as_str(),
            healthy: s.healthy(),
            last: s.last.as_ref().map(OutcomeView::from),
            last_failure: s.last_failure.as_ref().map(|f| FailureView {
                reason: f.reason.as_str(),
                detail: f.detail.clone(),
            }),
            consecutive_successes: s.consecutive_successes,
            consecutive_failures: s.consecutive_failures,
            transitions: s.transitions,
            interval_ms: s.schedule.interval().as_millis(),
            timeout_ms: s.schedule.timeout().as_millis(),
        }
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
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
/// while verdicts are pending. Each target is a `checks` entry keyed `<id>:responseTime`.
async fn health(State(state): State<ApiState>) -> Response {
    let statuses = state.engine.statuses();
    let mut checks = serde_json::Map::new();
    let mut overall = CheckStatus::Pass;
    for s in &statuses {
        let status = match s.state {
            HealthState::Up => CheckStatus::Pass,
            HealthState::Probing => CheckStatus::Warn,
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
        if status != CheckStatus::Pass {
            let output = match (&s.last_failure, s.state) {
                (Some(f), HealthState::Down) => format!("{}: {}", f.reason, f.detail),
                _ => format!("state {}", s.state),
            };
            check["output"] = json!(output);
        }
        checks.insert(format!("{}:responseTime", s.id), json!([check]));
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
