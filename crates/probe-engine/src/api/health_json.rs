//! `GET /health`: every target, the resolver, etcd and the cluster membership as one
//! `application/health+json` answer
//! (IETF draft "Health Check Response Format").
//!
//! Apart from the `/v1` views because its format is not ours: the draft fixes the field names
//! (`status`, `checks`, `componentId`, `observedValue`...) and the three statuses, and tools that
//! read it expect a 503 when the overall status is `fail`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::graph::NodeStatus;
use probe::health::HealthState;
use serde::Serialize;
use serde_json::json;

use super::auth::Readable;
use super::shared::{ApiState, blocking};
use super::views::rfc3339;

/// A check's status in `application/health+json`, ordered from best to worst.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum CheckStatus {
    Pass,
    Warn,
    Fail,
}

/// `application/health+json`: `pass` when every target and group is UP, `fail` when any is
/// DOWN, `warn` otherwise (DEGRADED, PROBING, MAINTENANCE). Each target is a `checks` entry
/// keyed `<id>:responseTime`, each group one keyed `<id>:score` (its verdict, its score
/// observed).
pub(super) async fn health(State(state): State<Arc<ApiState>>, _: Readable) -> Response {
    blocking("reporting health", move || health_report(&state)).await
}

/// A target's state or a group's verdict as a check's status.
fn check_status(state: HealthState) -> CheckStatus {
    match state {
        HealthState::Up => CheckStatus::Pass,
        HealthState::Degraded | HealthState::Probing | HealthState::Maintenance => {
            CheckStatus::Warn
        }
        HealthState::Down => CheckStatus::Fail,
    }
}

fn health_report(state: &ApiState) -> Response {
    let statuses = state.engine.statuses();
    let mut checks = serde_json::Map::new();
    let mut overall = CheckStatus::Pass;
    for s in &statuses {
        let status = check_status(s.state);
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
    // Each group by its verdict, as its rule judges it (keyed `<id>:score`, its score observed).
    let groups: Vec<NodeStatus> = state.engine.graph().groups().collect();
    for node in groups {
        let verdict = node.state.unwrap_or(HealthState::Probing);
        let status = check_status(verdict);
        overall = overall.max(status);
        let mut output = format!("state {verdict}");
        if node.flapping {
            output.push_str(": flapping");
        }
        if node.dependency_down {
            output.push_str("; a critical dependency is DOWN");
        }
        let mut check = json!({
            "componentId": node.id.as_str(),
            "componentType": "group",
            "status": status,
            "output": output,
        });
        if let Some(score) = node.score {
            check["observedValue"] = json!(score);
            check["observedUnit"] = json!("score");
        }
        checks.insert(format!("{}:score", node.id), json!([check]));
    }
    // A resolver outage is the engine's own trouble: a warning (targets are not failed for it).
    let resolver = state.resolver.health();
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
    // Like etcd's: a member out of touch keeps probing, so it warns, never fails.
    if let Some(cluster) = &state.cluster {
        let view = cluster.view().borrow().clone();
        let (status, output) = match (view.lease, view.stale) {
            (probe_etcd::membership::Lease::Lost, _) => (
                CheckStatus::Warn,
                Some(
                    "not a member: its lease expired; it probes what it owned, and none of its \
                     verdicts is written until it joins again"
                        .to_owned(),
                ),
            ),
            (_, true) => (
                CheckStatus::Warn,
                Some("etcd out of reach: the member set is the last one seen".to_owned()),
            ),
            _ => (CheckStatus::Pass, None),
        };
        overall = overall.max(status);
        let mut check = json!({
            "componentId": cluster.name().as_str(),
            "componentType": "system",
            "status": status,
            "observedValue": view.members.len(),
            "observedUnit": "members",
        });
        if let Some(output) = output {
            check["output"] = json!(output);
        }
        checks.insert("cluster:membership".to_owned(), json!([check]));
    }
    // History that cannot be written is worth a warning: probing and health go on without it.
    if let Some(history) = &state.history {
        let status = history.status();
        let (check_status, output) = match status.state {
            "failing" | "off" => (
                CheckStatus::Warn,
                Some(format!(
                    "history {}: {}",
                    if status.state == "off" {
                        "is off"
                    } else {
                        "writes fail, rows wait"
                    },
                    status.error.as_deref().unwrap_or("unknown error")
                )),
            ),
            _ => (CheckStatus::Pass, None),
        };
        overall = overall.max(check_status);
        let mut check = json!({
            "componentId": status.location,
            "componentType": "datastore",
            "status": check_status,
            "observedValue": status.pending,
            "observedUnit": "rows pending",
        });
        if let Some(output) = output {
            check["output"] = json!(output);
        }
        checks.insert("history:database".to_owned(), json!([check]));
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
