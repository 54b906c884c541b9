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

/// Colours dark enough for white text (WCAG AA at this size).
const GREEN: &str = "#2e7d32";
const AMBER: &str = "#a35200";
const RED: &str = "#c62828";
const BLUE: &str = "#1565c0";
const GREY: &str = "#616161";

impl Message {
    fn state(state: HealthState) -> Self {
        let colour = match state {
            HealthState::Up => GREEN,
            HealthState::Degraded => AMBER,
            HealthState::Down => RED,
            HealthState::Maintenance => BLUE,
            HealthState::Probing => GREY,
        };
        Self {
            text: state.as_str().to_owned(),
            colour,
        }
    }

    fn group(dependency_down: bool, score: Option<f64>) -> Self {
        match (dependency_down, score) {
            (true, _) => Self::state(HealthState::Down),
            (false, None) => Self::grey("unknown"),
            (false, Some(score)) => Self {
                text: format!("{:.0}%", score * 100.0),
                colour: if score >= 0.8 {
                    GREEN
                } else if score >= 0.5 {
                    AMBER
                } else {
                    RED
                },
            },
        }
    }

    fn grey(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            colour: GREY,
        }
    }
}

/// The badge: `label` on grey, `message` on its colour, each half as wide as its text.
fn svg(label: &str, message: &Message) -> String {
    let (lw, mw) = (width(label), width(&message.text));
    let (label, text) = (escape(label), escape(&message.text));
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

/// About how wide `text` is in 11 px Verdana, with 10 px on either side.
fn width(text: &str) -> u32 {
    let glyphs: u32 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '|' | '!' | '\'' => 3,
            ' ' | '-' | 'f' | 'r' | 't' | '(' | ')' => 4,
            'm' | 'w' | 'M' | 'W' | '%' => 10,
            'A'..='Z' => 8,
            _ => 7,
        })
        .sum();
    glyphs + 20
}

/// `text` safe inside an XML element or attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
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
        assert!(width("MAINTENANCE") > width("UP"));
        assert_eq!(width(""), 20);
    }
}
