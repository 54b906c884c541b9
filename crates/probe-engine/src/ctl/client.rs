//! The API as `ctl` calls it: one base URL, the token, the trust for an https API, and the
//! errors that decide the exit code.

use std::path::PathBuf;
use std::time::Duration;

use probe::tier::tls::{CaBundle, TlsTrust, client_config};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

/// Why a call failed, each with its exit code: the API said no (1), the daemon could not be
/// reached (3), or it refused the token (4).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A 4xx or 5xx other than a refused token, with the API's own `error`.
    #[error("{status}: {message}")]
    Api {
        /// The status.
        status: StatusCode,
        /// The API's `error`, or the body when it has none.
        message: String,
    },
    /// Nothing answered (or not HTTP): a wrong `--api`, or the daemon is down.
    #[error("cannot reach the daemon at {url}: {why}")]
    Unreachable {
        /// Where.
        url: String,
        /// What the connection said.
        why: String,
    },
    /// 401 or 403: no token, or not one the daemon takes for this.
    #[error("the daemon refused the token ({status}): {message}")]
    Refused {
        /// 401 or 403.
        status: StatusCode,
        /// The API's `error`.
        message: String,
    },
    /// Not a call at all: a flag's file could not be read, an answer was not JSON.
    #[error("{0}")]
    Local(String),
}

impl CallError {
    /// The process's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Api { .. } | Self::Local(_) => 1,
            Self::Unreachable { .. } => 3,
            Self::Refused { .. } => 4,
        }
    }
}

/// Where the API is and how to call it.
#[derive(Debug, clap::Args)]
pub struct Connection {
    /// The daemon's API.
    #[arg(
        long,
        env = "PROBE_ENGINE_API",
        default_value = "http://127.0.0.1:9464",
        global = true
    )]
    api: String,
    /// A bearer token (an operator's, for changes).
    #[arg(
        long,
        env = "PROBE_ENGINE_API_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    /// A file whose first line is the token.
    #[arg(long, value_name = "PATH", conflicts_with = "token", global = true)]
    token_file: Option<PathBuf>,
    /// A CA file (PEM) to trust for an https API, besides the system's.
    #[arg(long, value_name = "PATH", global = true)]
    cacert: Option<PathBuf>,
}

/// A client of one daemon's API.
pub struct Api {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    /// The client `connection` describes.
    pub fn new(connection: &Connection) -> Result<Self, CallError> {
        let base = Url::parse(connection.api.trim_end_matches('/'))
            .map_err(|e| CallError::Local(format!("--api {}: {e}", connection.api)))?;
        let token = match &connection.token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| CallError::Local(format!("--token-file {}: {e}", path.display())))?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            ),
            None => connection.token.clone(),
        };
        let trust = match &connection.cacert {
            Some(path) => TlsTrust::WithCa(
                CaBundle::from_file(path)
                    .map_err(|e| CallError::Local(format!("--cacert: {e}")))?,
            ),
            None => TlsTrust::System,
        };
        let tls = client_config(Some(&trust))
            .map_err(|e| CallError::Local(format!("TLS: {}", e.detail)))?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CallError::Local(format!("HTTP client: {e}")))?;
        Ok(Self { base, token, http })
    }

    /// The URL of `path` (which may carry a query) on the API.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.as_str().trim_end_matches('/'))
    }

    /// A request, with the token when there is one.
    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` and reads a JSON answer (`null` for an empty one).
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, CallError> {
        let response = self.open(request).await?;
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| CallError::Local(format!("the answer is not JSON ({e}): {text}")))
    }

    /// Sends `request` and returns the response once its status is a success.
    pub async fn open(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.trim().to_owned());
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                CallError::Refused { status, message }
            }
            _ => CallError::Api { status, message },
        })
    }

    fn unreachable(&self, e: &reqwest::Error) -> CallError {
        // The innermost cause says what happened ("Connection refused"); reqwest's own line
        // only that a request failed.
        let mut why = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            why = inner.to_string();
            source = inner.source();
        }
        CallError::Unreachable {
            url: self.base.to_string(),
            why,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, CallError> {
        self.send(self.request(Method::GET, path)).await
    }

    /// `GET path`, answered as a stream (Server-Sent Events).
    pub async fn stream(&self, path: &str) -> Result<reqwest::Response, CallError> {
        self.open(self.request(Method::GET, path)).await
    }

    /// `method path` with a JSON body, or none.
    pub async fn change(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let request = self.request(method, path);
        let request = match body {
            Some(body) => request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string()),
            None => request,
        };
        self.send(request).await
    }
}

/// `path` with `pairs` as its query, each value escaped.
pub fn with_query(path: &str, pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return path.to_owned();
    }
    // Any base will do: only the path and query are kept.
    let Ok(mut url) = Url::parse(&format!("http://api{path}")) else {
        return path.to_owned();
    };
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in pairs {
            query.append_pair(name, value);
        }
    }
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    }
}
