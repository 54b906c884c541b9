//! Badges: a target's or group's health, or its uptime over a window, as a small SVG for
//! READMEs and wikis (`GET /v1/badges/{id}/health.svg`, `GET /v1/badges/{id}/uptime.svg`).
//!
//! The image is drawn here, in the shape badge services use (a grey label, a coloured message),
//! from the same snapshot reads (and the same history) the API answers from. Its text says the
//! state or the share in words, so it never leans on colour alone, and every value in it is
//! escaped.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::graph::NodeKind;
use probe::health::HealthState;
use serde::Deserialize;

use super::auth::Readable;
use super::draw;
use super::history::{kept, known};
use super::shared::{ApiError, ApiState, parse_id};
use crate::history::uptime::WINDOWS;
use crate::history::{Uptime, now_ms};

/// `GET /v1/badges/{id}/health.svg`: the target's state (a group's: DOWN when a critical
/// dependency is, else its score); a grey `not found` badge, with 404, for an unknown id.
pub(super) async fn health(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let message = match state.engine.status(&id) {
        Some(status) => Some(Message::state(status.state)),
        None => state
            .engine
            .graph()
            .status(&id)
            .filter(|node| node.kind == NodeKind::Group)
            .map(|node| Message::state(node.state.unwrap_or(HealthState::Probing))),
    };
    Ok(match message {
        Some(message) => answer(StatusCode::OK, id.as_str(), &message),
        None => answer(
            StatusCode::NOT_FOUND,
            id.as_str(),
            &Message::grey("not found"),
        ),
    })
}

/// The query of `GET /v1/badges/{id}/uptime.svg`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UptimeQuery {
    window: Option<String>,
}

/// `GET /v1/badges/{id}/uptime.svg?window=7d`: a target's or group's uptime over the last
/// `24h`, `7d` (the default), `30d` or `90d`, as `/v1/targets/{id}/uptime` computes it. A
/// grey `no data` badge when nothing had a verdict in the window, a grey `not found` one with
/// 404 for an unknown id; a bad window is a 400, and a daemon without history (or whose
/// database cannot be read) answers 503 with why, as the history routes do.
pub(super) async fn uptime(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    Path(id): Path<String>,
    query: Result<Query<UptimeQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    let window = query.window.as_deref().unwrap_or("7d");
    // Named windows only: a badge is embedded for good, so it shows a span that moves.
    let Some(&(_, length)) = WINDOWS.iter().find(|(name, _)| *name == window) else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown window {window:?}: expected 24h, 7d, 30d or 90d"),
        ));
    };
    let label = format!("uptime {window}");
    let id = match known(&state, &id) {
        Ok(id) => id,
        Err(e) if e.status == StatusCode::NOT_FOUND => {
            return Ok(answer(
                StatusCode::NOT_FOUND,
                &label,
                &Message::grey("not found"),
            ));
        }
        Err(e) => return Err(e),
    };
    let now = now_ms();
    let ratio = kept(&state)?
        .uptimes(&[id.as_str()], now - length, now)
        .await?
        .get(id.as_str())
        .and_then(Uptime::ratio);
    let (text, tone) = uptime_look(ratio);
    let message = Message {
        text,
        colour: draw::state_colour(tone),
    };
    Ok(answer(StatusCode::OK, &label, &message))
}

/// An uptime in words, and the state whose colour it is shown in: UP's from 99.9%, DEGRADED's
/// from 99%, DOWN's below, and PROBING's grey for `no data` (nothing had a verdict). Shares
/// are cut, never rounded, to two decimals, so that anything short of 100% never reads as it.
pub(super) fn uptime_look(ratio: Option<f64>) -> (String, HealthState) {
    let Some(ratio) = ratio else {
        return ("no data".to_owned(), HealthState::Probing);
    };
    let words = if ratio >= 1.0 {
        "100%".to_owned()
    } else {
        format!("{:.2}%", (ratio * 10_000.0).floor() / 100.0)
    };
    let tone = if ratio >= 0.999 {
        HealthState::Up
    } else if ratio >= 0.99 {
        HealthState::Degraded
    } else {
        HealthState::Down
    };
    (words, tone)
}

/// A badge as an answer: an SVG nobody caches, since pages that embed it should show what is
/// true now.
fn answer(status: StatusCode, label: &str, message: &Message) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "image/svg+xml; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache, max-age=0"),
        ],
        svg(label, message),
    )
        .into_response()
}

/// The right half of a badge.
struct Message {
    text: String,
    colour: &'static str,
}

impl Message {
    fn state(state: HealthState) -> Self {
        Self {
            text: state.as_str().to_owned(),
            colour: draw::state_colour(state),
        }
    }

    fn grey(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            colour: draw::GREY,
        }
    }
}

/// The badge: `label` on grey, `message` on its colour, each half as wide as its text.
fn svg(label: &str, message: &Message) -> String {
    let (lw, mw) = (draw::width(label), draw::width(&message.text));
    let (label, text) = (draw::escape(label), draw::escape(&message.text));
    let mut out = String::with_capacity(600);
    let _ = write!(
        out,
        concat!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="20" role="img" aria-label="{label}: {text}">"#,
            "<title>{label}: {text}</title>",
            r##"<rect width="{lw}" height="20" fill="#555"/>"##,
            r#"<rect x="{lw}" width="{mw}" height="20" fill="{colour}"/>"#,
            r##"<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">"##,
            r#"<text x="{lx}" y="14">{label}</text><text x="{mx}" y="14">{text}</text></g></svg>"#,
        ),
        w = lw + mw,
        lw = lw,
        mw = mw,
        lx = lw / 2,
        mx = lw + mw / 2,
        colour = message.colour,
        label = label,
        text = text,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_escaped() {
        let badge = svg("a<b>&\"'", &Message::grey("<script>alert(1)</script>"));
        assert!(!badge.contains("<script>"), "{badge}");
        assert!(
            badge.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{badge}"
        );
        assert!(badge.contains("a&lt;b&gt;&amp;&quot;&#39;"), "{badge}");
    }

    #[test]
    fn uptimes_are_cut_not_rounded_and_coloured_by_threshold() {
        assert_eq!(uptime_look(Some(1.0)), ("100%".to_owned(), HealthState::Up));
        assert_eq!(
            uptime_look(Some(0.999_99)),
            ("99.99%".to_owned(), HealthState::Up)
        );
        assert_eq!(
            uptime_look(Some(0.995)),
            ("99.50%".to_owned(), HealthState::Degraded)
        );
        assert_eq!(
            uptime_look(Some(0.5)),
            ("50.00%".to_owned(), HealthState::Down)
        );
        assert_eq!(
            uptime_look(None),
            ("no data".to_owned(), HealthState::Probing)
        );
    }

    #[test]
    fn a_longer_text_makes_a_wider_half() {
        assert!(draw::width("MAINTENANCE") > draw::width("UP"));
        assert_eq!(draw::width(""), 20);
    }
}
