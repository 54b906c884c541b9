//! The status page: the daemon's health for people, at `/` and `/status`, read-only.
//!
//! | route | answer |
//! |---|---|
//! | `GET /`, `GET /status` | the page: the overview, recent incidents, the groups and targets (filtered by `?state`, `?group`, `?q`, 100 a `?page`), the dependency graph |
//! | `GET /status/explain/{id}` | why a node scores what it does, as an HTML fragment for the page's side panel |
//! | `GET /status/incidents` | the recent incidents alone, as an HTML fragment for the page to put in place of its own |
//! | `GET /status/events` | the state changes, as `GET /v1/events` streams them, the rows' and the graph's other changes (groups' states, scores, node labels: [`live`]), and an `incidents` event once the history has written newer transitions, for the page's live updates |
//! | `GET /status/assets/page.css`, `GET /status/assets/page.js` | its stylesheet and script, embedded in the binary |
//!
//! Not mounted with `--ui false`. The page is rendered on the server from the same snapshot the
//! JSON API answers from (never a probe on request), so it is complete with JavaScript off: the
//! filter is a GET form and paging is links. The script only adds to it: live updates of the
//! rows' states and scores, the overview's counts and the incidents from the event stream, and
//! the explanation of a node of the graph clicked. Nothing is fetched from elsewhere (no CDN, no web font), which
//! the Content-Security-Policy every answer carries enforces: `'self'` only, not even inline
//! scripts or styles.
//!
//! The page stays small and quick at 10k targets: one walk of the listing on a blocking thread
//! picks the page's 100 rows, and only those are looked up in the history (one `uptimes` call
//! per window, one `days` call for the daily bars and latency sparklines). The graph is drawn
//! whole up to [`GRAPH_LIMIT`] nodes; past it, only when the page is filtered by a group whose
//! part of the graph is that small, else the page links to `GET /v1/graph?format=svg`: a
//! drawing of 10k nodes is megabytes no one can read.
//!
//! Who may look is [`access`]'s: anyone, unless `--ui-token` is set.

mod access;
mod charts;
mod incidents;
mod live;
mod model;
mod render;

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::draw;
use super::shared::{ApiError, ApiState, blocking, parse_id};
use crate::history::codec::STATES;
use access::Viewer;
pub(crate) use live::Rows;
use model::{Filter, PageQuery, Snapshot};

/// Rows on one page.
const ROWS_PER_PAGE: usize = 100;

/// The most nodes the page draws the graph with.
const GRAPH_LIMIT: usize = 200;

/// How long the page waits for the history before it shows its rows without.
const HISTORY_TIMEOUT: Duration = Duration::from_secs(2);

/// What every answer of the page's routes may load: itself, nothing else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The page's routes; none with `--ui false`.
pub(super) fn routes(ui: bool) -> Router<Arc<ApiState>> {
    if !ui {
        return Router::new();
    }
    Router::new()
        .route("/", get(page))
        .route("/status", get(page))
        .route("/status/explain/{id}", get(explain))
        .route("/status/incidents", get(recent_incidents))
        .route("/status/events", get(events))
        .route("/status/assets/page.css", get(stylesheet))
        .route("/status/assets/page.js", get(script))
        .layer(axum::middleware::map_response(secured))
}

/// Every answer of the page's routes: loads nothing from elsewhere, is not framed, and leaves
/// no referrer behind (a `?token=` in the address would be in it).
async fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET /` and `GET /status`: the page.
async fn page(
    State(state): State<Arc<ApiState>>,
    viewer: Viewer,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<(Viewer, Response), ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let filter = Filter::parse(&query)?;
    let response = blocking("rendering the status page", move || {
        match render_page(&state, &filter) {
            Ok(html) => html_answer(html),
            Err(e) => e.into_response(),
        }
    })
    .await;
    Ok((viewer, response))
}

/// The page, on a blocking thread: the walk that picks the rows, the history's lookups for
/// them, and the HTML. The lookups are async; they are awaited here, on the runtime's handle,
/// rather than split the answer into a walk, an await and a second walk on another thread.
fn render_page(state: &ApiState, filter: &Filter) -> Result<String, ApiError> {
    let snapshot = Snapshot::take(state);
    let selection = snapshot.select(filter, ROWS_PER_PAGE, GRAPH_LIMIT)?;
    let history = match &state.history {
        None => model::Recorded::Off,
        Some(history) => {
            let ids: Vec<&str> = selection.rows.iter().map(|r| r.id.as_str()).collect();
            tokio::runtime::Handle::current().block_on(async {
                in_time(model::Recorded::look_up(history, &ids))
                    .await
                    .unwrap_or_else(model::Recorded::Failed)
            })
        }
    };
    Ok(render::page(&snapshot, &selection, filter, &history))
}

/// `read` of the history, or why not if it takes longer than [`HISTORY_TIMEOUT`].
async fn in_time<T>(read: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(HISTORY_TIMEOUT, read)
        .await
        .map_err(|_| {
            format!(
                "the history did not answer within {}",
                humantime::format_duration(HISTORY_TIMEOUT)
            )
        })
}

/// `GET /status/explain/{id}`: the side panel's explanation of a node, from the same graph read
/// as `GET /v1/targets/{id}/explain`.
async fn explain(
    State(state): State<Arc<ApiState>>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<(Viewer, Response), ApiError> {
    let id = parse_id(&id)?;
    let (explanation, causes) = super::reads::explained(&state.engine, &id)?;
    Ok((
        viewer,
        html_answer(render::explanation(&explanation, &causes)),
    ))
}

/// `GET /status/incidents`: the incidents section, from the graph as it is and the history's
/// transitions of the last day, as the page shows it.
async fn recent_incidents(
    State(state): State<Arc<ApiState>>,
    viewer: Viewer,
) -> Result<(Viewer, Response), ApiError> {
    let Some(history) = &state.history else {
        return Ok((viewer, html_answer(render::incidents_section(None))));
    };
    let recent = in_time(model::recent_transitions(history, crate::history::now_ms()))
        .await
        .and_then(|read| read.map_err(|e| e.to_string()))
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why))?;
    let response = blocking("rendering the incidents", move || {
        let export = state.engine.graph().export();
        html_answer(render::incidents_section(Some((&recent, &export))))
    })
    .await;
    Ok((viewer, response))
}

/// `GET /status/events`: the engine's state changes, as `/v1/events` streams them, and the
/// page's own events.
async fn events(State(state): State<Arc<ApiState>>, viewer: Viewer) -> (Viewer, Response) {
    let feeds = super::events::PageFeeds {
        rows: state.page_rows.as_ref().map(Rows::subscribe),
        written: state
            .history
            .as_ref()
            .map(crate::history::History::transitions_written),
        only: None,
    };
    (viewer, super::events::stream(&state, feeds).into_response())
}

/// `GET /status/assets/page.css`: the stylesheet, headed by the state colours the SVG
/// drawings use ([`draw::state_colour`]), so that a state looks the same in a row, a badge and
/// the graph.
async fn stylesheet(viewer: Viewer) -> (Viewer, Response) {
    static CSS: LazyLock<String> = LazyLock::new(|| {
        let mut css = String::from(":root{");
        for state in STATES {
            let _ = write!(css, "--{}:{};", state.as_str(), draw::state_colour(state));
        }
        css.push_str("}\n");
        for state in STATES {
            let _ = writeln!(
                css,
                "[data-state={0}],.s-{0}{{--c:var(--{0})}}",
                state.as_str()
            );
        }
        css.push_str(include_str!("assets/page.css"));
        css
    });
    (viewer, asset("text/css; charset=utf-8", CSS.as_str()))
}

/// `GET /status/assets/page.js`: the script.
async fn script(viewer: Viewer) -> (Viewer, Response) {
    (
        viewer,
        asset(
            "text/javascript; charset=utf-8",
            include_str!("assets/page.js"),
        ),
    )
}

/// An embedded asset. Checked again on every load (`no-cache`): a few KB over loopback or a
/// LAN, and a daemon upgraded under an open page serves it its new script at once.
fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A page or fragment: never stored, since it is a moment's snapshot.
fn html_answer(html: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}
