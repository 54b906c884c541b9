//! The routes that read the history: a target's or group's uptime over a window, the uptime of
//! many at once (one read of the history for a fleet's table), and a target's record
//! (transitions, hourly rollups, operator actions) over a span.
//!
//! Both answer from the database the daemon writes (`crate::history`), never from a probe; a
//! daemon without history answers 503 with why (the recent results still show in
//! `/v1/targets/{id}/history`, which the engine keeps in memory).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use probe::TargetId;
use probe::engine::EngineError;
use serde_json::json;

use super::auth::Readable;
use super::shared::{ApiError, ApiState, parse_id};
use super::views::{OutcomeView, rfc3339};
use crate::history::{self, History, HistoryError, uptime};

/// The most transitions and actions one request is answered with.
const MAX_LIMIT: i64 = 10_000;

/// The limit when the request sets none.
const DEFAULT_LIMIT: i64 = 100;

impl From<HistoryError> for ApiError {
    fn from(e: HistoryError) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

/// The history, or a 503 saying there is none.
pub(super) fn kept(state: &ApiState) -> Result<&History, ApiError> {
    state.history.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no history: the config says history: false, or the daemon runs with --state-dir none",
        )
    })
}

/// The id of a target or group the engine knows, or a 404.
pub(super) fn known(state: &ApiState, id: &str) -> Result<TargetId, ApiError> {
    let id = parse_id(id)?;
    if state.engine.contains(&id) || state.engine.graph().status(&id).is_some() {
        Ok(id)
    } else {
        Err(EngineError::UnknownTarget(id).into())
    }
}

fn query(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<HashMap<String, String>, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))
}

fn at(ms: i64) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// `GET /v1/targets/{id}/uptime?window=24h|7d|30d|90d|FROM..UNTIL` (default `24h`).
pub(super) async fn uptime(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let id = known(&state, &id)?;
    let window = q.get("window").map_or("24h", String::as_str);
    let mut answers = uptimes_of(&state, &[id], window).await?;
    Ok(Json(answers.swap_remove(0)).into_response())
}

/// `GET /v1/uptime?window=...&target=a,b`: the uptime of each target or group named (of every
/// one without `target`) over one window, read from the history at once: a table of the fleet
/// makes one call, not one per row.
pub(super) async fn uptimes(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    if let Some(other) = q
        .keys()
        .find(|k| !["window", "target"].contains(&k.as_str()))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown parameter {other:?}: /v1/uptime takes window and target"),
        ));
    }
    let ids = match q.get("target") {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(|id| known(&state, id))
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            let mut ids: Vec<TargetId> = state.engine.graph().nodes().map(|node| node.id).collect();
            ids.sort();
            ids
        }
    };
    let mut seen = std::collections::HashSet::new();
    let ids: Vec<TargetId> = ids
        .into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect();
    let window = q.get("window").map_or("24h", String::as_str);
    let answers = uptimes_of(&state, &ids, window).await?;
    Ok(Json(json!({ "uptimes": answers })).into_response())
}

/// Each of `ids`' uptime over `window`, in their order, as `/v1/targets/{id}/uptime` answers it.
async fn uptimes_of(
    state: &ApiState,
    ids: &[TargetId],
    window: &str,
) -> Result<Vec<serde_json::Value>, ApiError> {
    let (from, until) = uptime::window(window, history::now_ms())
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    let history = kept(state)?;
    let names: Vec<&str> = ids.iter().map(TargetId::as_str).collect();
    let mut found = history.uptimes(&names, from, until).await?;
    Ok(names
        .iter()
        .map(|id| {
            let u = found.remove(*id).unwrap_or_default();
            json!({
                "target": id,
                "window": window,
                "from": at(u.from_ms),
                "until": at(u.until_ms),
                "uptime": u.ratio(),
                "up_ms": u.up_ms,
                "down_ms": u.down_ms,
                "maintenance_ms": u.maintenance_ms,
                "no_verdict_ms": u.no_verdict_ms,
                "unknown_ms": u.unknown_ms,
            })
        })
        .collect())
}

/// A time in a query: RFC 3339, or a duration before now (`24h`).
fn instant(name: &str, value: &str, now_ms: i64) -> Result<i64, ApiError> {
    if let Ok(ago) = humantime::parse_duration(value) {
        return Ok(now_ms - i64::try_from(ago.as_millis()).unwrap_or(i64::MAX / 2));
    }
    humantime::parse_rfc3339_weak(value)
        .map(history::ms)
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{name} {value:?} is neither RFC 3339 nor a duration ago: {e}"),
            )
        })
}

/// `GET /v1/targets/{id}/history?since&until&limit`: the recent results the engine keeps, and
/// from the database the transitions, hourly rollups and operator actions of `[since, until)`
/// (default: the last 24 hours; `limit` transitions and actions, default 100, at most 10000).
pub(super) async fn record(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let id = known(&state, &id)?;
    let now = history::now_ms();
    let until = q
        .get("until")
        .map(|v| instant("until", v, now))
        .transpose()?
        .unwrap_or(now);
    let since = q
        .get("since")
        .map(|v| instant("since", v, now))
        .transpose()?
        .unwrap_or(until - 86_400_000);
    if until <= since {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "until must be after since",
        ));
    }
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<i64>() {
            Ok(l) if (1..=MAX_LIMIT).contains(&l) => l,
            _ => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("limit {l:?} must be a number from 1 to {MAX_LIMIT}"),
                ));
            }
        },
    };
    let results: Vec<OutcomeView> = state
        .engine
        .status(&id)
        .map(|s| s.history.iter().map(OutcomeView::from).collect())
        .unwrap_or_default();
    let mut body = json!({
        "target": id.as_str(),
        "since": at(since),
        "until": at(until),
        "results": results,
    });
    let span = kept(&state)?.span(&id, since, until, limit).await?;
    let transitions: Vec<serde_json::Value> = span
        .transitions
        .iter()
        .map(|t| {
            json!({
                "at": at(t.at_ms),
                "from": t.from,
                "to": t.to,
                "cause": t.cause,
                "reason": t.reason,
                "detail": t.detail,
            })
        })
        .collect();
    let actions: Vec<serde_json::Value> = span
        .actions
        .iter()
        .map(|a| {
            json!({
                "at": at(a.at_ms),
                "action": a.action,
                "who": a.who,
                "detail": a.detail,
            })
        })
        .collect();
    let hours: Vec<serde_json::Value> = span
        .hours
        .iter()
        .map(|h| {
            json!({
                "start": at(h.start_ms),
                "runs": h.runs,
                "failures": h.failures,
                "degraded": h.degraded,
                "latency_ms": { "p50": h.p50_ms, "p90": h.p90_ms, "p99": h.p99_ms },
                "time_ms": h.time_ms,
                "uptime": h.uptime(),
            })
        })
        .collect();
    body["transitions"] = json!(transitions);
    body["hours"] = json!(hours);
    body["actions"] = json!(actions);
    Ok(Json(body).into_response())
}
