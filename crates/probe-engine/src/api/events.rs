//! `GET /v1/events`: the engine's state changes as Server-Sent Events.
//!
//! The one long-lived answer of the API, so it is the one that must end by itself: the stream
//! stops when the daemon shuts down, and a subscriber too slow for the engine's broadcast is told
//! how many events it missed (a `lagged` event) rather than being cut off.
//!
//! `?target=ID` (repeated, or comma-separated) keeps the transitions of those targets and groups
//! only, so following one target of a 10k fleet does not carry the fleet's changes to the
//! client.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use probe::TargetId;
use probe::engine::Event;
use probe::graph::NodeKind;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use super::auth::Readable;
use super::shared::{ApiError, ApiState};
use super::views::rfc3339;

/// `GET /v1/events`: every state change as an SSE `transition` event with a JSON body; with
/// `?target=`, those of the targets and groups named.
pub(super) async fn events(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let mut only = HashSet::new();
    for (key, value) in &pairs {
        if key != "target" {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown parameter {key:?}: /v1/events takes target"),
            ));
        }
        for id in value.split(',').map(str::trim).filter(|id| !id.is_empty()) {
            let id = TargetId::new(id)
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
            if state.engine.graph().status(&id).is_none() {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no target or group {:?}", id.as_str()),
                ));
            }
            only.insert(id);
        }
    }
    let page = PageFeeds {
        only: (!only.is_empty()).then_some(only),
        ..PageFeeds::default()
    };
    Ok(stream(&state, page).into_response())
}

/// What the status page's stream has besides the engine's state changes.
#[derive(Default)]
pub(super) struct PageFeeds {
    /// The rows' other changes, each look's as one `nodes` event.
    pub(super) rows: Option<broadcast::Receiver<Arc<str>>>,
    /// The transitions written to the history: an `incidents` event (with how many so far)
    /// once newer ones can be read.
    pub(super) written: Option<watch::Receiver<u64>>,
    /// The targets and groups whose transitions are sent; all of them when `None`.
    pub(super) only: Option<HashSet<TargetId>>,
}

/// The engine's state changes as an SSE stream, until the daemon stops: `/v1/events`' answer,
/// and the status page's (`/status/events`), which also has its [`PageFeeds`] and differs in
/// who may read it.
pub(super) fn stream(
    state: &ApiState,
    page: PageFeeds,
) -> Sse<impl Stream<Item = Result<sse::Event, Infallible>> + use<>> {
    let receiver = state.engine.subscribe();
    let shutdown = state.shutdown.clone();
    let PageFeeds {
        rows,
        written,
        only,
    } = page;
    let only = Arc::new(only);
    let stream = futures_util::stream::unfold(
        (receiver, rows, written, shutdown),
        move |(mut receiver, mut rows, mut written, shutdown)| {
            let only = only.clone();
            async move {
                let wanted = |event: &Event| {
                    only.as_ref()
                        .as_ref()
                        .is_none_or(|o| o.contains(&event.target))
                };
                let event = loop {
                    break tokio::select! {
                        () = shutdown.cancelled() => return None,
                        next = receiver.recv() => match next {
                            Ok(event) if !wanted(&event) => continue,
                            Ok(event) => transition_event(&event),
                            Err(RecvError::Lagged(missed)) => lagged(missed),
                            Err(RecvError::Closed) => return None,
                        },
                        Some(next) = async {
                            match rows.as_mut() {
                                Some(rows) => Some(rows.recv().await),
                                None => None,
                            }
                        } => match next {
                            Ok(nodes) => sse::Event::default().event("nodes").data(nodes.as_ref()),
                            Err(RecvError::Lagged(missed)) => lagged(missed),
                            Err(RecvError::Closed) => return None,
                        },
                        // A history that stopped writing (its sender gone) just sends no more.
                        Some(count) = async {
                            let written = written.as_mut()?;
                            written.changed().await.ok()?;
                            Some(*written.borrow_and_update())
                        } => sse::Event::default().event("incidents").data(count.to_string()),
                    };
                };
                Some((Ok(event), (receiver, rows, written, shutdown)))
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Told to a subscriber too slow for its stream: how many events it missed.
fn lagged(missed: u64) -> sse::Event {
    sse::Event::default()
        .event("lagged")
        .data(json!({ "missed": missed }).to_string())
}

fn transition_event(e: &Event) -> sse::Event {
    sse::Event::default().event("transition").data(
        json!({
            "target": e.target.as_str(),
            "kind": match e.kind {
                NodeKind::Probed => "target",
                NodeKind::Group => "group",
            },
            "from": e.from.as_str(),
            "to": e.to.as_str(),
            "cause": e.cause.as_str(),
            "at": rfc3339(e.at),
            "detail": e.detail,
        })
        .to_string(),
    )
}
