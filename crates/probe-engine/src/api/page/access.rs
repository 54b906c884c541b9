//! Who may look at the status page: anyone, unless the daemon has a `--ui-token`. Then every
//! page route needs it, as `Authorization: Bearer <token>` (scripts, `curl`), as `?token=` in
//! the address (a person's first visit, a bookmark), or as the cookie that `?token=` sets, so
//! that the page's own requests (its stylesheet, script, explanations and event stream, which
//! a browser sends without the address's query) get through too.
//!
//! The cookie is `HttpOnly` (no script reads it) and `SameSite=Strict` (no other site's page
//! sends it), and holds the token hex-encoded, since a token may hold what a cookie may not.
//! Tokens are compared in constant time, as the API's own are (`tokens::constant_time_eq`).
//! The page's token is its own: the API's read tokens do not open it, nor it the API.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use serde::Deserialize;

use super::super::shared::{ApiError, ApiState};
use super::super::tokens::constant_time_eq;

/// The cookie that carries the token.
const COOKIE: &str = "probe_ui";

/// Why a request without the token is refused, and how to send it.
const MISSING: &str = "the status page needs its token (--ui-token): send \
     Authorization: Bearer <token>, or open /status?token=<token> once";

/// A request the page's guard let through. As a part of the answer, it sets the cookie when
/// the token came in the address.
pub(super) struct Viewer {
    cookie: Option<HeaderValue>,
}

/// Where the token may be in the address.
#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

impl FromRequestParts<Arc<ApiState>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Response> {
        let Some(expected) = state.ui.as_ref().and_then(|ui| ui.token.as_deref()) else {
            return Ok(Self { cookie: None });
        };
        let refuse = |why: &str| ApiError::new(StatusCode::UNAUTHORIZED, why).into_response();
        let bearer = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let in_address = Query::<TokenQuery>::try_from_uri(&parts.uri)
            .ok()
            .and_then(|Query(q)| q.token);
        let (presented, from_address) = match (bearer, in_address) {
            (Some(token), _) => (token, false),
            (None, Some(token)) => (token, true),
            (None, None) => match from_cookie(&parts.headers) {
                Some(token) => (token, false),
                None => return Err(refuse(MISSING)),
            },
        };
        if !matches(expected, &presented) {
            return Err(refuse("wrong status page token (--ui-token)"));
        }
        let cookie = if from_address {
            let value = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                hex(presented.as_bytes())
            );
            // Hex digits and the attributes: always a valid header value.
            HeaderValue::from_str(&value).ok()
        } else {
            None
        };
        Ok(Self { cookie })
    }
}

impl IntoResponseParts for Viewer {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut res: ResponseParts) -> Result<ResponseParts, Self::Error> {
        if let Some(cookie) = self.cookie {
            res.headers_mut().append(header::SET_COOKIE, cookie);
        }
        Ok(res)
    }
}

/// Whether `presented` is the page's token, compared as the API compares its tokens: in full,
/// without an early exit. An empty token matches nothing.
fn matches(expected: &str, presented: &str) -> bool {
    !expected.is_empty() && constant_time_eq(expected.as_bytes(), presented.as_bytes())
}

/// The token in the page's cookie, if one came.
fn from_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .and_then(unhex)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_holds_any_token_and_only_the_token_matches() {
        let token = "a b;c=d\u{e9}";
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={}", hex(token.as_bytes()))
                .parse()
                .unwrap(),
        );
        assert_eq!(from_cookie(&headers).as_deref(), Some(token));
        assert!(matches(token, token));
        assert!(matches("x=y", "x=y"), "an = in a token is kept");
        assert!(!matches(token, "a b;c=d"));
        assert!(!matches("", ""));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
