//! Entity tags on the reads that pollers repeat (`/v1/targets`, `/v1/graph`, `/v1/cluster`):
//! each 200 carries an `ETag`, a hash of its body, and a request whose `If-None-Match` names
//! it gets a bodiless 304, so a dashboard or script polling a 10k-target fleet every few
//! seconds moves and parses nothing while nothing changed.
//!
//! The tag is computed from the body the handler made, not from a version counter, so it
//! changes exactly when the answer does (a score moving, a page's cursor, a format), and two
//! members of a cluster answering the same body give the same tag.

use std::hash::BuildHasher;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The middleware: tags a 200's body, and answers 304 when the request already holds it.
pub(super) async fn etag(request: Request, next: Next) -> Response {
    let held = request.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return super::shared::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the answer to tag it: {e}"),
            );
        }
    };
    let tag = format!(
        "\"{:016x}\"",
        foldhash::fast::FixedState::with_seed(0).hash_one(&bytes[..])
    );
    if let Ok(value) = HeaderValue::from_str(&tag) {
        parts.headers.insert(header::ETAG, value);
    }
    if held.as_ref().is_some_and(|held| matches(held, &tag)) {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    }
    Response::from_parts(parts, Body::from(bytes)).into_response()
}

/// Whether `If-None-Match` (`*`, or a list of tags, weak ones compared weakly as the header
/// wants) holds `tag`.
fn matches(held: &HeaderValue, tag: &str) -> bool {
    let Ok(held) = held.to_str() else {
        return false;
    };
    held.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_holds_a_tag_in_any_of_its_forms() {
        let tag = "\"00000000000000ab\"";
        for (value, holds) in [
            ("\"00000000000000ab\"", true),
            ("W/\"00000000000000ab\"", true),
            ("\"1\", \"00000000000000ab\"", true),
            ("*", true),
            ("\"00000000000000ac\"", false),
            ("00000000000000ab", false),
        ] {
            assert_eq!(
                matches(&HeaderValue::from_static(value), tag),
                holds,
                "{value}"
            );
        }
    }
}
