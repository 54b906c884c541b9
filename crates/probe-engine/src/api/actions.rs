//! The routes that change something: operator maintenance, reported calls, circuit commands,
//! readmitting an ejected target, the drain, and a test notification.
//!
//! Each handler takes an [`Authorized`] extractor, so that none runs for a peer the guard refuses;
//! it then validates its body into the library's types (with the limits an operator request must
//! respect) before it touches the engine, and answers with the target as it now is.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use probe::TargetId;
use probe::engine::CircuitCommand;
use probe::passive::{Call, CallOutcome};
use serde::Deserialize;
use serde_json::json;

use super::auth::Authorized;
use super::reads::detail;
use super::shared::{ApiError, ApiState, parse_id};

/// The longest maintenance an operator can set in one request.
const MAX_MAINTENANCE: Duration = Duration::from_secs(30 * 86_400);

/// `POST /v1/drain`: starts the stop sequence (idempotent); answers at once with 202.
pub(super) async fn drain(
    State(state): State<Arc<ApiState>>,
    Authorized(actor): Authorized,
) -> Response {
    if !state.stop.is_cancelled() {
        tracing::info!(%actor, "drain requested through the API");
        // Not ready before the answer says so: the stop sequence that `stop` starts runs on a
        // task of its own, and a client that reads `/readyz` after this 202 must see it.
        state.gate.leave();
        state.stop.cancel();
    }
    (StatusCode::ACCEPTED, Json(json!({ "state": "draining" }))).into_response()
}

/// `POST /v1/alerts/test`: a test notification to every receiver, answered with each one's
/// outcome once all have answered (200 when every one took it, 502 when one did not); 404
/// without an `alerts` section.
pub(super) async fn test_alert(
    State(state): State<Arc<ApiState>>,
    Authorized(actor): Authorized,
) -> Response {
    let Some(alerter) = &state.alerts else {
        return super::shared::error(
            StatusCode::NOT_FOUND,
            "no alerts: this daemon's config has no alerts section",
        );
    };
    tracing::info!(%actor, "test notification requested through the API");
    let results = alerter.test().await;
    let status = if results.iter().all(|r| r.delivered) {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    (status, Json(json!({ "receivers": results }))).into_response()
}

/// The body of `PUT /v1/targets/{id}/maintenance`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MaintenanceRequest {
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

/// `PUT /v1/targets/{id}/maintenance`: operator maintenance, saved so that it survives a restart.
pub(super) async fn start_maintenance(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Authorized(actor): Authorized,
    body: Result<Json<MaintenanceRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let (reason, duration) = body
        .map_err(|e| e.body_text())
        .and_then(|Json(r)| r.validate())
        .map_err(|message| ApiError::new(StatusCode::BAD_REQUEST, message))?;
    state
        .engine
        .start_maintenance(&id, reason.clone(), duration)?;
    if let Some(cluster) = &state.cluster {
        // Shared through etcd, which every member (this one too) applies it from.
        if let Err(e) = cluster.start_maintenance(&id, &reason, duration).await {
            let _ = state.engine.end_maintenance(&id);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("maintenance not set: the cluster could not share it: {e}"),
            ));
        }
    }
    record(
        &state,
        &id,
        "maintenance_set",
        &actor,
        Some(format!(
            "{reason} (for {})",
            humantime::format_duration(duration)
        )),
    );
    persist(&state).await?;
    detail(&state.engine, &id)
}

/// Keeps an operator's action in the history, with who did it.
fn record(state: &ApiState, id: &TargetId, action: &str, actor: &str, detail: Option<String>) {
    if let Some(history) = &state.history {
        history.action(id, action, actor, detail);
    }
}

/// `DELETE /v1/targets/{id}/maintenance`: ends operator maintenance, and saves that too.
pub(super) async fn end_maintenance(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Authorized(actor): Authorized,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    state.engine.end_maintenance(&id)?;
    record(&state, &id, "maintenance_ended", &actor, None);
    if let Some(cluster) = &state.cluster
        && let Err(e) = cluster.end_maintenance(&id).await
    {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("maintenance ended here only: the cluster could not share it: {e}"),
        ));
    }
    persist(&state).await?;
    detail(&state.engine, &id)
}

/// The body of `POST /v1/targets/{id}/calls`: a status, or an outcome for calls without one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CallReport {
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
pub(super) async fn report_call(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Authorized(_): Authorized,
    body: Result<Json<CallReport>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let call = body
        .map_err(|e| e.body_text())
        .and_then(|Json(r)| r.validate())
        .map_err(|message| ApiError::new(StatusCode::BAD_REQUEST, message))?;
    state.engine.pools().report(&id, &call)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "target": id.as_str(), "outcome": call.outcome.as_str() })),
    )
        .into_response())
}

/// The body of `POST /v1/targets/{id}/circuit`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CircuitRequest {
    command: String,
}

/// `POST /v1/targets/{id}/circuit`: force the circuit open, disable it, or reset it to closed.
pub(super) async fn command_circuit(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Authorized(actor): Authorized,
    body: Result<Json<CircuitRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
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
    state.engine.pools().command_circuit(&id, command)?;
    record(
        &state,
        &id,
        &format!("circuit_{}", request.command),
        &actor,
        None,
    );
    tracing::info!(%actor, target_id = %id, command = request.command, "circuit commanded through the API");
    detail(&state.engine, &id)
}

/// `DELETE /v1/targets/{id}/ejection`: an operator readmits an ejected target.
pub(super) async fn clear_ejection(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Authorized(actor): Authorized,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    state.engine.pools().clear_ejection(&id)?;
    record(&state, &id, "ejection_cleared", &actor, None);
    tracing::info!(%actor, target_id = %id, "ejection cleared through the API");
    detail(&state.engine, &id)
}

/// Saves operator maintenance, so that the change is acknowledged only once it would survive a
/// restart. When it cannot be saved the change still holds in memory, and the answer says so
/// (500): the operator knows it would not survive a restart.
async fn persist(state: &ApiState) -> Result<(), ApiError> {
    let Some(store) = &state.store else {
        return Ok(());
    };
    store.save(&state.engine).await.map_err(|e| {
        tracing::error!(error = %e, "could not save maintenance state");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the change holds, but it could not be saved and would not survive a restart: {e}"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
