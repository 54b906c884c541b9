//! Who may read and who may change: the guard every request passes before it acts.
//!
//! Credentials are bearer tokens (`tokens`), each with a name (for the audit log) and a role:
//! - an **operator** token (`--api-token`, `--api-token-file`) may read and change;
//! - a **read** token (`--read-token`, `--read-token-file`) may read only.
//!
//! Reads (`/v1/*` GETs, `/health`, `/metrics`) stay open unless a read token is configured;
//! `/livez`, `/readyz` and `/startupz` always are, since orchestrators and load balancers poll
//! them without credentials. Changes need an operator token, with one exception kept for a
//! daemon run by hand: with no operator token configured, a loopback peer may change things,
//! but only while the API listens on loopback alone. Listening beyond it, a loopback peer proves
//! nothing (behind a reverse proxy or a sidecar on the same host every request comes from
//! loopback), so every untokened change is then refused. Drain (`POST /v1/drain`) stops the
//! daemon, so it needs an operator token always; signals remain for local control.
//!
//! A web config (`--web-config`) adds a door before all of it. With `basic_auth_users`, every
//! request but the health checks needs a valid basic user or a valid bearer token (any role);
//! a basic user may then read as a read token does, and changes still need an operator token.
//! Its `rate_limit` refuses requests past the bucket with a 429, and its headers go on every
//! answer. The health checks stay open, as above: an orchestrator's probe carries no password.
//!
//! Tokens read from files are read again on every reload (SIGHUP), so a rotated Kubernetes
//! Secret takes effect without a restart; a file that cannot be read keeps the tokens in force.
//! Handlers meet the rule as extractors ([`Authorized`] for changes, [`Readable`] for reads), so
//! that a route cannot be written without passing it, and every accepted change is logged with
//! who made it: the token's name, or the peer address.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::shared::{ApiError, ApiState, error};
use super::tokens::{Credential, Credentials, Role};
use crate::web::WebConfig;

/// What a request asks to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Need {
    Read,
    Change,
    /// Stop the daemon: an operator token, always.
    Drain,
}

/// Who made an accepted request, for the audit log.
#[derive(Debug, PartialEq, Eq)]
struct Actor {
    /// The token's name, or the peer's address.
    name: String,
    /// "token", "loopback" or "open" (reads without read tokens).
    credential: &'static str,
}

/// A change the guard let through. Extracting it refuses the request (401 or 403) unless
/// [`authorize`] accepts it, and logs it when it does; it needs the peer address, so the API
/// must be served with `into_make_service_with_connect_info::<SocketAddr>()`.
pub(super) struct Authorized(pub(super) String);

impl FromRequestParts<Arc<ApiState>> for Authorized {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Response> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let need = if parts.method == Method::POST && parts.uri.path() == "/v1/drain" {
            Need::Drain
        } else {
            Need::Change
        };
        let actor = authorize(
            &state.tokens.load(),
            need,
            state.loopback_only,
            peer,
            &parts.headers,
            None,
        )
        .map_err(IntoResponse::into_response)?;
        tracing::info!(
            actor = actor.name,
            credential = actor.credential,
            %peer,
            method = %parts.method,
            path = parts.uri.path(),
            "api change"
        );
        Ok(Self(actor.name))
    }
}

/// A basic user the door let in.
#[derive(Clone)]
struct BasicUser(String);

/// The door of a web config: the rate limit, then basic credentials or a bearer token when it
/// has basic users, for every request but the health checks; then its headers on every answer.
pub(super) async fn door(
    State(state): State<Arc<ApiState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let web = state.web.current();
    let health = matches!(request.uri().path(), "/livez" | "/readyz" | "/startupz");
    let mut response = if health {
        next.run(request).await
    } else {
        match admit(&state, &web, &mut request).await {
            Ok(()) => next.run(request).await,
            Err(refused) => refused,
        }
    };
    for (name, value) in &web.headers {
        response.headers_mut().insert(name, value.clone());
    }
    response
}

async fn admit(
    state: &ApiState,
    web: &Arc<WebConfig>,
    request: &mut Request,
) -> Result<(), Response> {
    if let Some(rate) = &web.rate
        && !rate.admit()
    {
        return Err(error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests: over the web config's rate_limit",
        ));
    }
    if web.users.is_empty() {
        return Ok(());
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '));
    match presented {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            if state.tokens.load().find(token.trim()).is_some() {
                Ok(())
            } else {
                Err(challenge("invalid bearer token"))
            }
        }
        Some((scheme, encoded)) if scheme.eq_ignore_ascii_case("basic") => {
            let Some((user, password)) = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .and_then(|pair| {
                    pair.split_once(':')
                        .map(|(u, p)| (u.to_owned(), p.to_owned()))
                })
            else {
                return Err(challenge("malformed basic credentials"));
            };
            let (web, name) = (web.clone(), user.clone());
            // bcrypt takes tens of milliseconds: not on the server's one thread.
            let verified = tokio::task::spawn_blocking(move || web.users.verify(&name, &password))
                .await
                .unwrap_or(false);
            if verified {
                request.extensions_mut().insert(BasicUser(user));
                Ok(())
            } else {
                Err(challenge("wrong user or password"))
            }
        }
        _ => Err(challenge(
            "this API needs basic credentials or a bearer token",
        )),
    }
}

/// A 401 that asks a browser for basic credentials.
fn challenge(message: &str) -> Response {
    let mut refused = error(StatusCode::UNAUTHORIZED, message);
    refused.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"probe-engine\", charset=\"UTF-8\""),
    );
    refused
}

/// A read the guard let through: open unless read tokens are configured.
pub(super) struct Readable;

impl FromRequestParts<Arc<ApiState>> for Readable {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<ApiState>,
    ) -> Result<Self, Response> {
        // The peer does not matter to a read.
        let peer = SocketAddr::from(([0, 0, 0, 0], 0));
        let basic = parts.extensions.get::<BasicUser>().map(|b| b.0.as_str());
        authorize(
            &state.tokens.load(),
            Need::Read,
            state.loopback_only,
            peer,
            &parts.headers,
            basic,
        )
        .map(|_| Self)
        .map_err(IntoResponse::into_response)
    }
}

/// Lets a request through, saying who made it, or says why not. `loopback_only`: whether the
/// API listens on loopback addresses alone; `basic`: the basic user the door let in, who may
/// read as a read token does.
fn authorize(
    credentials: &Credentials,
    need: Need,
    loopback_only: bool,
    peer: SocketAddr,
    headers: &HeaderMap,
    basic: Option<&str>,
) -> Result<Actor, ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let token = |credential: &Credential| Actor {
        name: credential.name.clone(),
        credential: "token",
    };
    if need == Need::Read {
        if !credentials.has(Role::Read) {
            return Ok(Actor {
                name: peer.to_string(),
                credential: "open",
            });
        }
        return match (presented, basic) {
            (None, Some(user)) => Ok(Actor {
                name: user.to_owned(),
                credential: "basic",
            }),
            (None, None) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "reads need a bearer token: the daemon has read tokens",
            )),
            (Some(p), _) => credentials
                .find(p)
                .map(token)
                .ok_or_else(|| ApiError::new(StatusCode::FORBIDDEN, "invalid bearer token")),
        };
    }
    if let Some(p) = presented {
        return match credentials.find(p) {
            Some(c) if c.role == Role::Operator => Ok(token(c)),
            Some(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "this token may read, not change: changes need an operator token (--api-token)",
            )),
            None => Err(ApiError::new(StatusCode::FORBIDDEN, "invalid bearer token")),
        };
    }
    if credentials.has(Role::Operator) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token",
        ));
    }
    if need == Need::Drain {
        return Err(ApiError::new(StatusCode::FORBIDDEN, DRAIN_NEEDS_A_TOKEN));
    }
    if !loopback_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            UNTOKENED_BEYOND_LOOPBACK,
        ));
    }
    if peer.ip().to_canonical().is_loopback() {
        Ok(Actor {
            name: peer.to_string(),
            credential: "loopback",
        })
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "changes are accepted from loopback only unless the daemon has an --api-token",
        ))
    }
}

/// Why an untokened change is refused when the API listens beyond loopback, and what to do.
pub(crate) const UNTOKENED_BEYOND_LOOPBACK: &str = "the API listens beyond loopback, where a \
     loopback peer may be a proxy for anyone, so changes need a token: start the daemon with \
     --api-token or --api-token-file (or PROBE_ENGINE_API_TOKEN)";

/// Why an untokened drain is refused.
const DRAIN_NEEDS_A_TOKEN: &str = "drain stops the daemon, so it needs an operator token: start \
     the daemon with --api-token or --api-token-file, or send it SIGTERM";

#[cfg(test)]
mod tests {
    use super::super::tokens::TokenSources;
    use super::*;

    fn credentials(operator: &[&str], read: &[&str]) -> Credentials {
        TokenSources {
            operator: operator.iter().map(|s| (*s).to_owned()).collect(),
            read: read.iter().map(|s| (*s).to_owned()).collect(),
            ..TokenSources::default()
        }
        .load()
        .unwrap()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        headers
    }

    fn status(result: Result<Actor, ApiError>) -> StatusCode {
        result.map_or_else(|e| e.status, |_| StatusCode::OK)
    }

    const LOCAL: &str = "127.0.0.1:1";

    /// A request with no basic user.
    fn check(
        credentials: &Credentials,
        need: Need,
        loopback_only: bool,
        peer: SocketAddr,
        headers: &HeaderMap,
    ) -> Result<Actor, ApiError> {
        authorize(credentials, need, loopback_only, peer, headers, None)
    }

    #[test]
    fn a_basic_user_reads_as_a_read_token_does_and_changes_nothing() {
        let creds = credentials(&["op"], &["read"]);
        let far = "192.0.2.1:1".parse().unwrap();
        let none = HeaderMap::new();
        let read = authorize(&creds, Need::Read, false, far, &none, Some("prometheus"));
        assert_eq!(
            read.unwrap(),
            Actor {
                name: "prometheus".into(),
                credential: "basic"
            }
        );
        // A wrong bearer token beside it is still wrong.
        let refused = authorize(&creds, Need::Read, false, far, &bearer("nope"), Some("p"));
        assert_eq!(status(refused), StatusCode::FORBIDDEN);
        for need in [Need::Change, Need::Drain] {
            let refused = authorize(&creds, need, false, far, &none, Some("prometheus"));
            assert_eq!(status(refused), StatusCode::UNAUTHORIZED, "{need:?}");
        }
    }

    #[test]
    fn without_a_token_only_loopback_peers_may_change_things() {
        let none = Credentials::default();
        let no_header = HeaderMap::new();
        for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            let actor = check(&none, Need::Change, true, peer.parse().unwrap(), &no_header);
            assert_eq!(actor.unwrap().credential, "loopback", "{peer}");
        }
        for peer in ["10.1.2.3:1", "[2001:db8::1]:1", "[::ffff:192.0.2.1]:1"] {
            let refused = check(&none, Need::Change, true, peer.parse().unwrap(), &no_header);
            assert_eq!(status(refused), StatusCode::FORBIDDEN, "{peer}");
        }
        // Listening beyond loopback, a loopback peer may be a proxy: refused too.
        let refused = check(
            &none,
            Need::Change,
            false,
            LOCAL.parse().unwrap(),
            &no_header,
        )
        .unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(refused.message, UNTOKENED_BEYOND_LOOPBACK);
        // Drain needs a token even from loopback on a loopback-only API.
        let refused =
            check(&none, Need::Drain, true, LOCAL.parse().unwrap(), &no_header).unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(refused.message, DRAIN_NEEDS_A_TOKEN);
    }

    #[test]
    fn roles_decide_and_names_are_the_actors() {
        let creds = credentials(&["ci=op-secret", "plain-secret"], &["grafana=read-secret"]);
        let local = LOCAL.parse().unwrap();
        let far = "192.0.2.1:1".parse().unwrap();
        // With an operator token, loopback is no excuse.
        let refused = check(&creds, Need::Change, true, local, &HeaderMap::new());
        assert_eq!(status(refused), StatusCode::UNAUTHORIZED);
        for need in [Need::Change, Need::Drain, Need::Read] {
            let actor = check(&creds, need, false, far, &bearer("op-secret")).unwrap();
            assert_eq!(
                actor,
                Actor {
                    name: "ci".into(),
                    credential: "token"
                }
            );
        }
        let unnamed = check(&creds, Need::Change, false, far, &bearer("plain-secret"));
        assert_eq!(unnamed.unwrap().name, "operator");
        // A read token reads and cannot change.
        let read = check(&creds, Need::Read, false, far, &bearer("read-secret"));
        assert_eq!(read.unwrap().name, "grafana");
        for need in [Need::Change, Need::Drain] {
            let refused = check(&creds, need, true, local, &bearer("read-secret"));
            assert_eq!(status(refused), StatusCode::FORBIDDEN, "{need:?}");
        }
        // With read tokens, reads need one; a wrong token is refused.
        let refused = check(&creds, Need::Read, true, local, &HeaderMap::new());
        assert_eq!(status(refused), StatusCode::UNAUTHORIZED);
        let refused = check(&creds, Need::Read, true, local, &bearer("nope"));
        assert_eq!(status(refused), StatusCode::FORBIDDEN);
        // Without read tokens, reads are open.
        let open = credentials(&["op"], &[]);
        let read = check(&open, Need::Read, false, far, &HeaderMap::new());
        assert_eq!(read.unwrap().credential, "open");
    }
}
