//! Badges: a target's or group's health as a small SVG, for READMEs and wikis
//! (`GET /v1/badges/{id}/health.svg`).
//!
//! The image is drawn here, in the shape badge services use (a grey label, a coloured message),
//! from the same snapshot reads the API answers from. Its text says the state in words, so it
//! never leans on colour alone, and every value in it is escaped.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::graph::NodeKind;
use probe::verdict::HealthState;

use super::auth::Readable;
use super::draw;
use super::shared::{ApiError, ApiState, parse_id};

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
            .with_graph(|g| g.status(&id))
            .filter(|node| node.kind == NodeKind::Group)
            .map(|node| Message::group(node.dependency_down, node.score)),
    };
    let (status, message) = match message {
        Some(message) => (StatusCode::OK, message),
        None => (StatusCode::NOT_FOUND, Message::grey("not found")),
    };
    Ok((
        status,
        [
            (header::CONTENT_TYPE, "image/svg+xml; charset=utf-8"),
            // Pages that embed it fetch it again rather than show a stale state.
            (header::CACHE_CONTROL, "no-cache, max-age=0"),
        ],
        svg(id.as_str(), &message),
    )
        .into_response())
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

    fn group(dependency_down: bool, score: Option<f64>) -> Self {
        let (text, colour) = draw::group_look(dependency_down, score);
        Self { text, colour }
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
    fn a_longer_text_makes_a_wider_half() {
        assert!(draw::width("MAINTENANCE") > draw::width("UP"));
        assert_eq!(draw::width(""), 20);
    }
}
