//! Who may change things: the guard every mutation passes before it acts.
//!
//! The rule lives in one function, tested alone: with a configured token, every change needs
//! `Authorization: Bearer <token>`, wherever it comes from; without one, changes are accepted
//! from loopback peers only, and only while the API listens on loopback alone. Listening beyond
//! it, a loopback peer proves nothing: behind a reverse proxy or a sidecar on the same host every
//! request comes from loopback, so the daemon then refuses every untokened change. Handlers meet
//! the rule as the [`Authorized`] extractor, so that a change cannot be written without passing
//! it, and every change it lets through is logged with who made it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::shared::{ApiError, ApiState};

/// A request the guard let through, with its peer for the logs. Extracting it refuses the
/// request (401 or 403) unless [`authorize`] accepts it; it needs the peer address, so the API
/// must be served with `into_make_service_with_connect_info::<SocketAddr>()`.
pub(super) struct Authorized(pub(super) SocketAddr);

impl FromRequestParts<Arc<ApiState>> for Authorized {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Response> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let credential = authorize(
            state.token.as_deref(),
            state.loopback_only,
            peer,
            &parts.headers,
        )
        .map_err(IntoResponse::into_response)?;
        tracing::info!(
            actor = %peer,
            credential,
            method = %parts.method,
            path = parts.uri.path(),
            "api change"
        );
        Ok(Self(peer))
    }
}

/// Lets a mutation through, saying on what grounds ("token" or "loopback"), or says why not.
/// `loopback_only`: whether the API listens on loopback addresses alone.
fn authorize(
    token: Option<&str>,
    loopback_only: bool,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<&'static str, ApiError> {
    let Some(token) = token else {
        return if !loopback_only {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                UNTOKENED_BEYOND_LOOPBACK,
            ))
        } else if peer.ip().to_canonical().is_loopback() {
            Ok("loopback")
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "changes are accepted from loopback only unless the daemon has an --api-token",
            ))
        };
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token",
        )),
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => Ok("token"),
        Some(_) => Err(ApiError::new(StatusCode::FORBIDDEN, "invalid bearer token")),
    }
}

/// Why an untokened change is refused when the API listens beyond loopback, and what to do.
pub(crate) const UNTOKENED_BEYOND_LOOPBACK: &str = "the API listens beyond loopback, where a \
     loopback peer may be a proxy for anyone, so changes need a token: start the daemon with \
     --api-token (or PROBE_ENGINE_API_TOKEN)";

/// Compares without an early exit, so response times do not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_token_only_loopback_peers_may_change_things() {
        let none = HeaderMap::new();
        for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert_eq!(
                authorize(None, true, peer.parse().unwrap(), &none).ok(),
                Some("loopback"),
                "{peer}"
            );
        }
        for peer in ["10.1.2.3:1", "[2001:db8::1]:1", "[::ffff:192.0.2.1]:1"] {
            let refused = authorize(None, true, peer.parse().unwrap(), &none).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{peer}");
        }
        // Listening beyond loopback, a loopback peer may be a proxy: refused too.
        let refused = authorize(None, false, "127.0.0.1:1".parse().unwrap(), &none).unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(refused.message, UNTOKENED_BEYOND_LOOPBACK);
        // With a token, loopback is no excuse.
        let refused =
            authorize(Some("t"), true, "127.0.0.1:1".parse().unwrap(), &none).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        for loopback_only in [true, false] {
            let accepted = authorize(
                Some("t"),
                loopback_only,
                "192.0.2.1:1".parse().unwrap(),
                &bearer,
            );
            assert_eq!(accepted.ok(), Some("token"));
        }
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
