//! The HTTP tier: one request per check, judged by declared conditions.
//!
//! A check sends the spec's request and reads the reply, then evaluates, in this order:
//! 1. transport: a failure to resolve, connect, complete TLS or read the reply is classified as
//!    `dns`, `refused`, `timeout`, `tls`, `reset`, `unreachable` or `io`;
//! 2. [`Expect`]: status (`status`), body substring (`body`), headers and JSON values
//!    (`assertion`): all must hold;
//! 3. [`DegradedIf`]: for a reply that meets the expectations, "slow but correct" (latency) or
//!    "up but limited" (a JSON value such as `$.mode == "readonly"`) make it `Degraded`;
//! 4. [`SignalRule`]s: business events recognised in any reply, passing or not.
//!
//! The check's `timeout` covers everything from sending the request to the end of the body, and
//! the failure says which part ran out. The body is read up to [`MAX_BODY`]: beyond that, a check
//! whose conditions look at the body fails as `body`, and one whose conditions do not stops
//! reading (and gives up the connection instead of reusing it).
//!
//! Connections are reused between checks by default (one client, and so one connection pool,
//! per probe); `fresh_connection` makes every check open its own. Request header values are
//! treated as secrets throughout (see [`headers`]).
//!
//! The one piece of process-wide state is a read-only copy of the system's trust store, loaded
//! on first use and shared by every HTTPS probe (see `client::system_roots`).
//!
//! For embedders that use reqwest themselves: this tier hands reqwest its own rustls
//! configuration (with the pure-Rust `ring` provider) and so enables reqwest's
//! `rustls-no-provider` feature. Cargo unifies features, so in the same build a `reqwest::Client`
//! created the default way finds no crypto provider and panics; install one at start-up, e.g.
//! `rustls::crypto::ring::default_provider().install_default()`.

mod client;
pub mod conditions;
pub mod headers;
pub mod json_path;
mod spec;

use std::fmt;
use std::time::Duration;

use reqwest::header::{CONNECTION, HeaderValue};
use tokio::time::{Instant, timeout_at};

pub use conditions::{
    DegradedIf, Expect, HeaderMatch, JsonMatch, JsonScalar, Match, SignalRule, StatusPattern,
    StatusSet,
};
pub use headers::{RequestHeaders, expand_env};
pub use json_path::JsonPath;
/// The HTTP types that appear in this module's API (`Method`, `header::HeaderName`, ...).
pub use reqwest::{Method, StatusCode, Url, header};
pub use spec::{CaBundle, HttpSpec, HttpUrl, InvalidCa, InvalidUrl, TlsTrust};

use crate::outcome::{CheckResult, Failure, FailureReason, Verdict};
use crate::probe::Probe;
use conditions::Reply;

/// The most body bytes read from a reply.
pub const MAX_BODY: usize = 1024 * 1024;

/// Probes an HTTP endpoint as its [`HttpSpec`] says.
pub struct HttpProbe {
    spec: HttpSpec,
    /// Built once. An error (no usable trust store) fails every check with its reason, so that
    /// the problem shows on the target instead of stopping the whole configuration.
    client: Result<reqwest::Client, Failure>,
    /// Whether some condition reads the body.
    keep_body: bool,
}

impl HttpProbe {
    /// A probe for `spec`, with its own client and connection pool.
    pub fn new(spec: HttpSpec) -> Self {
        Self {
            client: client::build(&spec),
            keep_body: spec.needs_body(),
            spec,
        }
    }

    /// The spec the probe runs.
    pub fn spec(&self) -> &HttpSpec {
        &self.spec
    }

    async fn run(&self, timeout: Duration) -> CheckResult {
        let client = match &self.client {
            Ok(client) => client,
            Err(failure) => return CheckResult::failed(failure.clone()),
        };
        let started = Instant::now();
        let deadline = started + timeout;
        let within = humantime::format_duration(timeout);

        let mut request =
            reqwest::Request::new(self.spec.method.clone(), self.spec.url.as_url().clone());
        *request.headers_mut() = self.spec.headers.expose().clone();
        if self.spec.fresh_connection {
            // Tells the server too, so that it closes its side first and keeps the TIME_WAIT.
            request
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(body) = &self.spec.body {
            *request.body_mut() = Some(body.clone().into());
        }

        let mut response = match timeout_at(deadline, client.execute(request)).await {
            Err(_) => {
                return CheckResult::failed(Failure::new(
                    FailureReason::Timeout,
                    format_args!("no response within {within}"),
                ));
            }
            Ok(Err(err)) => return CheckResult::failed(client::classify(&err, "request")),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        // Taken rather than cloned: reading the body needs the response mutably.
        let headers = std::mem::take(response.headers_mut());
        let body = match timeout_at(deadline, read_body(&mut response, self.keep_body)).await {
            Err(_) => Err(Failure::new(
                FailureReason::Timeout,
                format_args!("body not complete within {within}"),
            )),
            Ok(body) => body,
        };
        let latency = started.elapsed();
        match body {
            Ok(body) => self.judge(&Reply::new(status, &headers, &body, latency)),
            // Signals still apply: status and headers were received.
            Err(failure) => CheckResult {
                verdict: Verdict::Failed(failure),
                signals: self.signals(&Reply::new(status, &headers, &[], latency)),
            },
        }
    }

    fn judge(&self, reply: &Reply<'_>) -> CheckResult {
        let verdict = match self.spec.expect.check(reply) {
            Err(failure) => Verdict::Failed(failure),
            Ok(()) => {
                let reasons = self.spec.degraded_if.reasons(reply);
                if reasons.is_empty() {
                    Verdict::Up
                } else {
                    Verdict::Degraded(reasons)
                }
            }
        };
        CheckResult {
            verdict,
            signals: self.signals(reply),
        }
    }

    fn signals(&self, reply: &Reply<'_>) -> Vec<crate::outcome::Signal> {
        self.spec
            .signals
            .iter()
            .filter_map(|rule| rule.fire(reply))
            .collect()
    }
}

/// Reads the body: kept up to [`MAX_BODY`] when `keep`, else drained (so that the connection
/// can be reused) up to the same limit and dropped.
async fn read_body(response: &mut reqwest::Response, keep: bool) -> Result<Vec<u8>, Failure> {
    let over = |size: &dyn fmt::Display| {
        Failure::new(
            FailureReason::Body,
            format_args!(
                "body is {size} bytes, over the {} KiB limit",
                MAX_BODY / 1024
            ),
        )
    };
    let limit = u64::try_from(MAX_BODY).unwrap_or(u64::MAX);
    if keep && let Some(len) = response.content_length().filter(|len| *len > limit) {
        return Err(over(&len));
    }
    let mut body = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| client::classify(&e, "reading the body"))?
    {
        total = total.saturating_add(chunk.len());
        if total > MAX_BODY {
            if keep {
                return Err(over(&format_args!("more than {MAX_BODY}")));
            }
            // Nothing looks at the body: stop here and let the connection go.
            return Ok(Vec::new());
        }
        if keep {
            body.extend_from_slice(&chunk);
        }
    }
    Ok(body)
}

impl fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProbe")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Probe for HttpProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        self.run(timeout).await
    }
}
