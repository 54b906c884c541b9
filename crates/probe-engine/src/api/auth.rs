//! Who may change things: the guard every mutation passes before it acts.
//!
//! The rule lives in one function, tested alone: with a configured token, every change needs
//! `Authorization: Bearer <token>`, wherever it comes from; without one, changes are accepted
//! from loopback peers only. Handlers meet it as the [`Authorized`] extractor, so that a change
//! cannot be written without passing it.

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
        authorize(state.token.as_deref(), peer, &parts.headers)
            .map_err(IntoResponse::into_response)?;
        Ok(Self(peer))
    }
}

/// Lets a mutation through, or says why not.
fn authorize(token: Option<&str>, peer: SocketAddr, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = token else {
        return if peer.ip().to_canonical().is_loopback() {
            Ok(())
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
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(StatusCode::FORBIDDEN, "invalid bearer token")),
    }
}

/// Compares without an early exit, so response times do not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_token_only_loopback_peers_may_change_things() {
        let none = HeaderMap::new();
        for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert!(
                authorize(None, peer.parse().unwrap(), &none).is_ok(),
                "{peer}"
            );
        }
        for peer in ["10.1.2.3:1", "[2001:db8::1]:1", "[::ffff:192.0.2.1]:1"] {
            let refused = authorize(None, peer.parse().unwrap(), &none).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{peer}");
        }
        // With a token, loopback is no excuse.
        let refused = authorize(Some("t"), "127.0.0.1:1".parse().unwrap(), &none).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        assert!(authorize(Some("t"), "192.0.2.1:1".parse().unwrap(), &bearer).is_ok());
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
