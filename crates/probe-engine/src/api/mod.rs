//! The health API: views of the engine's snapshot (never a probe on request), plus the few
//! operator actions.
//!
//! Every route, with what it answers and an example, is in `docs/api.md` (the only route
//! table: a test holds it to this router, route for route).
//!
//! Errors are JSON `{"error": "..."}`: 400 for a malformed id, body or query, 401/403 for a refused
//! mutation, 404 for an unknown target or path, 405 for a wrong method, 409 for a conflict.
//!
//! Who may read and change is `auth`'s: operator and read bearer tokens, loopback peers while
//! the API listens on loopback alone and no operator token is set, drain with an operator token
//! only; and before them, the web config's basic users, rate limit and headers.
//!
//! The `/v1` routes are admitted through the daemon's [`Gate`](probe::gate::Gate): once it drains they answer 503
//! with `Connection: close`, while the health routes and `/metrics` keep answering.
//!
//! This module is the wiring only: the state the handlers read, the router, and the error answer
//! and helpers every handler shares. The handlers live by what they do, so that a route's code is
//! found from its method: `reads` (the routes that only look, no authorization), `actions` (every
//! change, each let through by `auth` first), `events` (the SSE stream) and `health_json`
//! (`/health`); `views` holds the JSON shapes the answers are made of.

mod actions;
mod adhoc;
mod auth;
mod badges;
mod draw;
mod etag;
mod events;
mod filter;
mod health_json;
mod history;
mod page;
mod reads;
mod shared;
mod tokens;
mod verbose;
mod views;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::get;
use probe::gate::GateLayer;

pub(crate) use auth::UNTOKENED_BEYOND_LOOPBACK;
pub(crate) use page::Rows;
use shared::error;
pub use shared::{ApiState, Ui};
pub use tokens::{Credentials, Role, TokenError, TokenSources, Tokens};

/// Builds the router. Serve it with `into_make_service_with_connect_info::<SocketAddr>()`: the
/// mutation guard needs the peer address.
pub fn router(state: ApiState) -> Router {
    let state = Arc::new(state);
    Router::new()
        .route(
            "/v1/targets",
            get(reads::targets).layer(from_fn(etag::etag)),
        )
        .route("/v1/openapi.json", get(reads::openapi))
        .route("/v1/targets/{id}", get(reads::target))
        .route("/v1/targets/{id}/explain", get(reads::explain))
        .route("/v1/targets/{id}/uptime", get(history::uptime))
        .route("/v1/uptime", get(history::uptimes))
        .route("/v1/targets/{id}/history", get(history::record))
        .route("/v1/graph", get(reads::graph).layer(from_fn(etag::etag)))
        .route(
            "/v1/targets/{id}/maintenance",
            axum::routing::put(actions::start_maintenance).delete(actions::end_maintenance),
        )
        .route(
            "/v1/targets/{id}/calls",
            axum::routing::post(actions::report_call),
        )
        .route(
            "/v1/targets/{id}/circuit",
            axum::routing::post(actions::command_circuit),
        )
        .route(
            "/v1/targets/{id}/ejection",
            axum::routing::delete(actions::clear_ejection),
        )
        .route("/v1/events", get(events::events))
        .route("/v1/topology", get(reads::topology))
        .route(
            "/v1/cluster",
            get(reads::cluster).layer(from_fn(etag::etag)),
        )
        .route("/v1/alerts", get(reads::alerts))
        .route("/v1/badges/{id}/health.svg", get(badges::health))
        .route("/v1/badges/{id}/uptime.svg", get(badges::uptime))
        .merge(page::routes(state.ui.is_some()))
        .route("/v1/alerts/test", axum::routing::post(actions::test_alert))
        .route("/v1/drain", axum::routing::post(actions::drain))
        .route("/probe", get(adhoc::probe))
        .layer(GateLayer::new(state.gate.clone()))
        // Added after the layer: not admitted through the gate, so they answer while draining.
        .route("/livez", get(reads::livez))
        .route("/readyz", get(reads::readyz))
        .route("/startupz", get(reads::startupz))
        .route("/health", get(health_json::health))
        .route("/metrics", get(reads::metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path") })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        // Outermost: the web config's door sees every request first, and its headers go on
        // every answer, refusals included.
        .layer(from_fn_with_state(state.clone(), auth::door))
        // Shared, not cloned: axum hands every request its own copy of the state.
        .with_state(state)
}
