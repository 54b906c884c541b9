//! The routes that only look: liveness, readiness and startup (answered by the gate), the
//! targets, one target, an explanation, the graph, the topology's sources, and `/metrics`.
//!
//! None changes anything. Liveness, readiness and startup are always open; the others pass the
//! read guard ([`Readable`]: open unless read tokens are configured). Each answers from the
//! engine's snapshot, never from a probe run on request. Those that walk every target do it on a blocking thread
//! ([`blocking`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::TargetId;
use probe::engine::{Engine, EngineError};
use probe::graph::Causes;
use serde::Deserialize;
use serde_json::json;

use super::auth::Readable;
use super::filter::Filter;
use super::shared::{ApiError, ApiState, blocking, error, parse_id};
use super::verbose;
use super::views::{ChildView, EdgeView, NodeView, TargetDetail, rfc3339};
use crate::topology::TopologyStatus;

/// `GET /livez`: the gate's liveness; dependencies never fail it.
pub(super) async fn livez(
    State(state): State<Arc<ApiState>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    match checks_query(query) {
        Ok(query) if query.is_plain() => state.gate.liveness().into_response(),
        Ok(query) => verbose::livez(&state, &query),
        Err(refused) => refused.into_response(),
    }
}

/// `GET /startupz`: the gate's startup check, passed once the config is loaded and the API
/// listens.
pub(super) async fn startupz(State(state): State<Arc<ApiState>>) -> Response {
    state.gate.startup().into_response()
}

/// The query of `/readyz` and `/livez` (`?verbose`, `?exclude=`), or the 400 that refuses it.
fn checks_query(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<verbose::Query, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    verbose::Query::parse(&pairs).map_err(|why| ApiError::new(StatusCode::BAD_REQUEST, why))
}

/// `GET /readyz`. Not `Check::into_response`: the daemon's answers name what they are about.
/// With `?verbose` or `?exclude=`, the checks one by one ([`verbose`]).
pub(super) async fn readyz(
    State(state): State<Arc<ApiState>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let query = match checks_query(query) {
        Ok(query) => query,
        Err(refused) => return refused.into_response(),
    };
    if !query.is_plain() {
        // The engine's checks may be every target: listed off the API's thread.
        return blocking("listing readiness checks", move || {
            verbose::readyz(&state, &query)
        })
        .await;
    }
    match state.gate.readiness().reason {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

/// `GET /metrics`: the Prometheus text exposition: the process-wide series the recorder holds,
/// then the per-target series written from the live targets.
pub(super) async fn metrics(State(state): State<Arc<ApiState>>, _: Readable) -> Response {
    let Some(handle) = state.metrics.clone() else {
        return error(StatusCode::NOT_FOUND, "metrics are not enabled");
    };
    blocking("rendering metrics", move || {
        if let Some(open) = crate::limits::open() {
            metrics::gauge!("probe_engine_open_fds").set(open as f64);
        }
        metrics::gauge!("probe_engine_requests_in_flight").set(state.gate.requests() as f64);
        let ready = if state.gate.readiness().ok { 1.0 } else { 0.0 };
        metrics::gauge!("probe_engine_ready").set(ready);
        let mut text = handle.render();
        state.engine.encode_metrics(&mut text);
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response()
    })
    .await
}

/// `GET /v1/targets`: the targets' statuses, filtered and paged as the query says
/// ([`Filter`]); in a cluster, the targets this member probes (`?scope=local`, the default) or
/// every target of the cluster (`?scope=cluster`), each with its owner.
pub(super) async fn targets(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let filter = match query {
        Ok(Query(pairs)) => match Filter::parse(&pairs, state.cluster.is_some()) {
            Ok(filter) => filter,
            Err(why) => return error(StatusCode::BAD_REQUEST, why),
        },
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    blocking("listing targets", move || {
        let (listed, next) = match filter.page(&state.engine, &state.engine.graph()) {
            Ok(page) => page,
            Err(why) => return error(StatusCode::BAD_REQUEST, why),
        };
        match state.listing.render(&listed, next.as_ref()) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("listing targets: {e}"),
            ),
        }
    })
    .await
}

/// `GET /v1/alerts`: the alerts firing now; 404 without an `alerts` section.
pub(super) async fn alerts(State(state): State<Arc<ApiState>>, _: Readable) -> Response {
    match &state.alerts {
        Some(alerter) => Json(json!({ "alerts": alerter.firing() })).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "no alerts: this daemon's config has no alerts section",
        ),
    }
}

/// `GET /v1/cluster`: the members as this one sees them, with how many targets each owns and
/// probes as a replica, and this member's name; 404 outside a cluster.
pub(super) async fn cluster(State(state): State<Arc<ApiState>>, _: Readable) -> Response {
    let Some(cluster) = state.cluster.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            "not in a cluster: this daemon's config has no cluster section",
        );
    };
    let engine = state.engine.clone();
    blocking("listing the cluster", move || {
        let view = cluster.view().borrow().clone();
        let loads = engine
            .cluster()
            .loads()
            .map(|l| l.members)
            .unwrap_or_default();
        let lease = match view.lease {
            probe_etcd::membership::Lease::Live => "live",
            probe_etcd::membership::Lease::Lost => "lost",
        };
        let members: Vec<serde_json::Value> = view
            .members
            .iter()
            .map(|(name, record)| {
                let (owned, replicated) = loads.get(name).copied().unwrap_or_default();
                let since = std::time::UNIX_EPOCH
                    + std::time::Duration::from_millis(record.started_unix_ms);
                json!({
                    "name": name.as_str(),
                    "address": record.api,
                    "since": rfc3339(since),
                    "version": record.version,
                    "owned": owned,
                    "replicated": replicated,
                    // What this member knows of another's lease: its key is there.
                    "lease": if name == cluster.name() { lease } else { "live" },
                })
            })
            .collect();
        Json(json!({
            "member": cluster.name().as_str(),
            "stale": view.stale,
            "lease": lease,
            "members": members,
        }))
        .into_response()
    })
    .await
}

/// One target with its recent results: `GET /v1/targets/{id}`'s answer, and what a change to
/// a target answers with, so that the caller sees its effect.
pub(super) fn detail(engine: &Engine, id: &TargetId) -> Result<Response, ApiError> {
    let status = engine
        .status(id)
        .ok_or_else(|| EngineError::UnknownTarget(id.clone()))?;
    Ok(Json(TargetDetail::from(&status)).into_response())
}

/// `GET /v1/openapi.json`: the API's description, kept as YAML beside the router (see
/// `openapi.yaml`), served as JSON.
pub(super) async fn openapi(_: Readable) -> Response {
    // Made once, then shared: each answer is a reference to the same bytes.
    static DESCRIPTION: std::sync::LazyLock<Result<axum::body::Bytes, String>> =
        std::sync::LazyLock::new(|| {
            serde_saphyr::from_str::<serde_json::Value>(include_str!("openapi.yaml"))
                .map_err(|e| e.to_string())
                .and_then(|doc| serde_json::to_vec(&doc).map_err(|e| e.to_string()))
                .map(axum::body::Bytes::from)
        });
    match &*DESCRIPTION {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the API's description does not parse: {e}"),
        ),
    }
}

/// `GET /v1/targets/{id}`.
pub(super) async fn target(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    detail(&state.engine, &parse_id(&id)?)
}

/// A node's explanation and the graph's root causes, or a 404: what `explain` answers with, here
/// and on the status page. Both from one view of the graph, read without a lock; the walk for
/// causes is over the whole graph, as an explanation is asked for by a person, not
/// polled.
pub(super) fn explained(
    engine: &Engine,
    id: &TargetId,
) -> Result<(probe::graph::Explanation, Causes), ApiError> {
    let graph = engine.graph();
    graph
        .explain(id)
        .map(|e| (e, Causes::of(&graph.export())))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no target or group {:?}", id.as_str()),
            )
        })
}

/// `GET /v1/targets/{id}/explain`: the node's score and state, and each dependency's part.
pub(super) async fn explain(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let (explanation, causes) = explained(&state.engine, &id)?;
    let children: Vec<ChildView> = explanation.children.iter().map(ChildView::from).collect();
    let names = |set: Option<&std::collections::BTreeSet<TargetId>>| -> Vec<String> {
        set.into_iter().flatten().map(ToString::to_string).collect()
    };
    Ok(Json(json!({
        "node": NodeView::from(&explanation.node),
        "stability": explanation.stability,
        "sla": explanation.sla,
        "summary": explanation.to_string(),
        "children": children,
        "root_causes": names(causes.roots.get(&id)),
        "impacts": names(causes.impacts.get(&id)),
    }))
    .into_response())
}

/// The query of `GET /v1/graph`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GraphQuery {
    format: Option<String>,
}

/// `GET /v1/graph`: every node and edge as JSON, as Graphviz DOT with `?format=dot`, or drawn
/// as SVG with `?format=svg`.
pub(super) async fn graph(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    query: Result<Query<GraphQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    match query.format.as_deref() {
        None | Some("json") => {
            let export = state.engine.graph().export();
            let nodes: Vec<NodeView> = export.nodes.iter().map(NodeView::from).collect();
            let edges: Vec<EdgeView> = export.edges.iter().map(EdgeView::from).collect();
            Ok(Json(json!({ "nodes": nodes, "edges": edges })).into_response())
        }
        Some("dot") => Ok((
            [(header::CONTENT_TYPE, "text/vnd.graphviz; charset=utf-8")],
            state.engine.graph().to_dot(),
        )
            .into_response()),
        Some("svg") => {
            // Copied under the graph's lock, drawn after it.
            let export = state.engine.graph().export();
            let svg = super::draw::graph(&export);
            Ok((
                [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
                svg,
            )
                .into_response())
        }
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: expected \"json\", \"dot\" or \"svg\""),
        )),
    }
}

/// `GET /v1/topology`: the sources, their state, and the entries left out.
pub(super) async fn topology(
    State(state): State<Arc<ApiState>>,
    _: Readable,
) -> Json<serde_json::Value> {
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
        "history": state.history.as_ref().map(crate::history::History::status),
    }))
}
