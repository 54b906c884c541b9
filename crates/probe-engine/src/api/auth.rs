//! Who may read and who may change: the guard every request passes before it acts.
//!
//! Credentials are bearer tokens, each with a name (for the audit log) and a role:
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
//! Tokens read from files are read again on every reload (SIGHUP), so a rotated Kubernetes
//! Secret takes effect without a restart; a file that cannot be read keeps the tokens in force.
//! Handlers meet the rule as extractors ([`Authorized`] for changes, [`Readable`] for reads), so
//! that a route cannot be written without passing it, and every accepted change is logged with
//! who made it: the token's name, or the peer address.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::shared::{ApiError, ApiState};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Read,
    /// Read and change.
    Operator,
}

impl Role {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operator => "operator",
        }
    }
}

/// One bearer token.
#[derive(Clone, PartialEq, Eq)]
struct Credential {
    /// Shown in the audit log; the token itself never is.
    name: String,
    secret: String,
    role: Role,
}

/// Every token the API accepts, replaced whole on a reload.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials(Vec<Credential>);

impl Credentials {
    fn has(&self, role: Role) -> bool {
        self.0.iter().any(|c| c.role == role)
    }

    /// The credential whose token was presented. Every token is compared in full, each without
    /// an early exit, so the time taken reveals neither a prefix nor which token matched.
    fn find(&self, presented: &str) -> Option<&Credential> {
        let mut found = None;
        for credential in &self.0 {
            if constant_time_eq(presented.as_bytes(), credential.secret.as_bytes()) {
                found = Some(credential);
            }
        }
        found
    }

    /// The names and roles, for the log.
    fn describe(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|c| format!("{} ({})", c.name, c.role.as_str()))
            .collect()
    }
}

/// Where the tokens come from: the command line and files.
#[derive(Clone, Debug, Default)]
pub struct TokenSources {
    /// `--api-token [NAME=]TOKEN`, repeatable.
    pub operator: Vec<String>,
    /// `--api-token-file PATH`, repeatable.
    pub operator_files: Vec<PathBuf>,
    /// `--read-token [NAME=]TOKEN`, repeatable.
    pub read: Vec<String>,
    /// `--read-token-file PATH`, repeatable.
    pub read_files: Vec<PathBuf>,
}

/// Why the tokens could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A token file could not be read.
    #[error("token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A token file holds no token.
    #[error("token file {0} holds no token")]
    EmptyFile(PathBuf),
    /// A token is empty, or its name is.
    #[error("{0}: an empty token is no secret")]
    Empty(String),
}

impl TokenSources {
    /// Reads every token: each value (and each line of each file that is neither empty nor a
    /// `#` comment) is `TOKEN` or `NAME=TOKEN`; an unnamed token is named after its role.
    ///
    /// # Errors
    /// A file that cannot be read or holds no token, or an empty token.
    pub fn load(&self) -> Result<Credentials, TokenError> {
        let mut credentials = Vec::new();
        for (values, files, role) in [
            (&self.operator, &self.operator_files, Role::Operator),
            (&self.read, &self.read_files, Role::Read),
        ] {
            for value in values {
                credentials.push(parse(value, role, "a token on the command line")?);
            }
            for path in files {
                let lines = read_file(path)?;
                for line in lines {
                    credentials.push(parse(&line, role, &path.display().to_string())?);
                }
            }
        }
        Ok(Credentials(credentials))
    }
}

fn read_file(path: &Path) -> Result<Vec<String>, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: path.to_owned(),
        source,
    })?;
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if lines.is_empty() {
        return Err(TokenError::EmptyFile(path.to_owned()));
    }
    Ok(lines)
}

/// `TOKEN` or `NAME=TOKEN`. A name is `[A-Za-z0-9._-]`, at most 64 long; anything else before
/// the first `=` (or nothing after it, as in base64 padding) makes the whole value the token.
fn parse(value: &str, role: Role, whence: &str) -> Result<Credential, TokenError> {
    let named = value.split_once('=').filter(|(name, secret)| {
        !name.is_empty()
            && name.len() <= 64
            && !secret.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    });
    let (name, secret) = named.unwrap_or((role.as_str(), value));
    if secret.trim().is_empty() {
        return Err(TokenError::Empty(whence.to_owned()));
    }
    Ok(Credential {
        name: name.to_owned(),
        secret: secret.to_owned(),
        role,
    })
}

/// The API's tokens, shared with the daemon, which replaces them on a reload.
#[derive(Clone, Default)]
pub struct Tokens(Arc<ArcSwap<Credentials>>);

impl Tokens {
    /// Serves `credentials` until the next reload.
    pub fn new(credentials: Credentials) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(credentials)))
    }

    /// Whether any change can be made with a token (else only from loopback, if at all).
    pub fn has_operator(&self) -> bool {
        self.0.load().has(Role::Operator)
    }

    /// Reads the sources again; keeps the tokens in force when they cannot be read.
    pub fn reload(&self, sources: &TokenSources) {
        match sources.load() {
            Ok(credentials) if credentials == **self.0.load() => {}
            Ok(credentials) => {
                tracing::info!(tokens = ?credentials.describe(), "api tokens reloaded");
                self.0.store(Arc::new(credentials));
            }
            Err(e) => tracing::error!(
                error = %e,
                "the api tokens cannot be read again; the tokens in force stay"
            ),
        }
    }
}

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
            &state.tokens.0.load(),
            need,
            state.loopback_only,
            peer,
            &parts.headers,
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
        authorize(
            &state.tokens.0.load(),
            Need::Read,
            state.loopback_only,
            peer,
            &parts.headers,
        )
        .map(|_| Self)
        .map_err(IntoResponse::into_response)
    }
}

/// Lets a request through, saying who made it, or says why not. `loopback_only`: whether the
/// API listens on loopback addresses alone.
fn authorize(
    credentials: &Credentials,
    need: Need,
    loopback_only: bool,
    peer: SocketAddr,
    headers: &HeaderMap,
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
        return match presented {
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "reads need a bearer token: the daemon has read tokens",
            )),
            Some(p) => credentials
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

/// Compares without an early exit, so response times do not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn without_a_token_only_loopback_peers_may_change_things() {
        let none = Credentials::default();
        let no_header = HeaderMap::new();
        for peer in ["127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            let actor = authorize(&none, Need::Change, true, peer.parse().unwrap(), &no_header);
            assert_eq!(actor.unwrap().credential, "loopback", "{peer}");
        }
        for peer in ["10.1.2.3:1", "[2001:db8::1]:1", "[::ffff:192.0.2.1]:1"] {
            let refused = authorize(&none, Need::Change, true, peer.parse().unwrap(), &no_header);
            assert_eq!(status(refused), StatusCode::FORBIDDEN, "{peer}");
        }
        // Listening beyond loopback, a loopback peer may be a proxy: refused too.
        let refused = authorize(
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
            authorize(&none, Need::Drain, true, LOCAL.parse().unwrap(), &no_header).unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(refused.message, DRAIN_NEEDS_A_TOKEN);
    }

    #[test]
    fn roles_decide_and_names_are_the_actors() {
        let creds = credentials(&["ci=op-secret", "plain-secret"], &["grafana=read-secret"]);
        let local = LOCAL.parse().unwrap();
        let far = "192.0.2.1:1".parse().unwrap();
        // With an operator token, loopback is no excuse.
        let refused = authorize(&creds, Need::Change, true, local, &HeaderMap::new());
        assert_eq!(status(refused), StatusCode::UNAUTHORIZED);
        for need in [Need::Change, Need::Drain, Need::Read] {
            let actor = authorize(&creds, need, false, far, &bearer("op-secret")).unwrap();
            assert_eq!(
                actor,
                Actor {
                    name: "ci".into(),
                    credential: "token"
                }
            );
        }
        let unnamed = authorize(&creds, Need::Change, false, far, &bearer("plain-secret"));
        assert_eq!(unnamed.unwrap().name, "operator");
        // A read token reads and cannot change.
        let read = authorize(&creds, Need::Read, false, far, &bearer("read-secret"));
        assert_eq!(read.unwrap().name, "grafana");
        for need in [Need::Change, Need::Drain] {
            let refused = authorize(&creds, need, true, local, &bearer("read-secret"));
            assert_eq!(status(refused), StatusCode::FORBIDDEN, "{need:?}");
        }
        // With read tokens, reads need one; a wrong token is refused.
        let refused = authorize(&creds, Need::Read, true, local, &HeaderMap::new());
        assert_eq!(status(refused), StatusCode::UNAUTHORIZED);
        let refused = authorize(&creds, Need::Read, true, local, &bearer("nope"));
        assert_eq!(status(refused), StatusCode::FORBIDDEN);
        // Without read tokens, reads are open.
        let open = credentials(&["op"], &[]);
        let read = authorize(&open, Need::Read, false, far, &HeaderMap::new());
        assert_eq!(read.unwrap().credential, "open");
    }

    #[test]
    fn a_value_is_named_only_when_its_name_is_one() {
        let creds = credentials(&["ci=a", "abc=", "a b=c", "=x", "x=y=z"], &[]);
        let parsed: Vec<(&str, &str)> = creds
            .0
            .iter()
            .map(|c| (c.name.as_str(), c.secret.as_str()))
            .collect();
        assert_eq!(
            parsed,
            [
                ("ci", "a"),
                ("operator", "abc="),
                ("operator", "a b=c"),
                ("operator", "=x"),
                ("x", "y=z")
            ]
        );
        let empty = TokenSources {
            read: vec!["name= ".into()],
            ..TokenSources::default()
        };
        assert!(matches!(empty.load(), Err(TokenError::Empty(_))));
    }

    #[test]
    fn files_hold_a_token_a_line_and_must_hold_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "# rotated monthly\n\n  deploy=s3cret  \nbare\n").unwrap();
        let sources = TokenSources {
            operator_files: vec![path.clone()],
            ..TokenSources::default()
        };
        let creds = sources.load().unwrap();
        assert_eq!(
            creds.describe(),
            ["deploy (operator)", "operator (operator)"]
        );
        assert!(creds.find("s3cret").is_some() && creds.find("bare").is_some());
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(matches!(sources.load(), Err(TokenError::EmptyFile(_))));
        let missing = TokenSources {
            read_files: vec![dir.path().join("missing")],
            ..TokenSources::default()
        };
        assert!(matches!(missing.load(), Err(TokenError::Read { .. })));
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
