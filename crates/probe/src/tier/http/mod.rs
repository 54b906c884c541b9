//! The HTTP tier: one request per check, judged by declared conditions.
//!
//! A check sends the spec's request and reads the reply, then evaluates, in this order:
//! 1. transport: a failure to resolve, connect, complete TLS or read the reply is classified as
//!    `dns`, `refused`, `timeout`, `tls`, `reset`, `unreachable` or `io`;
//! 2. [`Expect`]: status (`status`), body substring (`body`), headers, JSON values and a
//!    latency limit (`assertion`): all must hold; then the [`ReplyPatterns`] (regexes over the
//!    body and headers, TLS and the HTTP version);
//! 3. [`DegradedIf`]: for a reply that meets the expectations, "slow but correct" (latency) or
//!    "up but limited" (a JSON value such as `$.mode == "readonly"`) make it `Degraded`;
//! 4. [`SignalRule`]s: business events recognised in any reply, passing or not.
//!
//! The check's `timeout` covers everything from sending the request to the end of the body, and
//! the failure says which part ran out. The body is read up to [`MAX_BODY`]: beyond that, a check
//! whose conditions look at the body fails as `body`, and one whose conditions do not stops
//! reading (and gives up the connection instead of reusing it).
//!
//! Connections are reused between checks by default (one reqwest client, and so one connection
//! pool, per probe); `fresh_connection` makes every check open its own, through a lean one-shot
//! transport that closes it with a reset (see `fresh` for why). Request header values are
//! treated as secrets throughout (see [`headers`]).
//!
//! The one piece of process-wide state is a read-only copy of the system's trust store, loaded
//! on first use and shared by every HTTPS probe (see `tier::tls::trust`).
//!
//! For embedders that use reqwest themselves: this tier hands reqwest its own rustls
//! configuration (with the pure-Rust `ring` provider) and so enables reqwest's
//! `rustls-no-provider` feature. Cargo unifies features, so in the same build a `reqwest::Client`
//! created the default way finds no crypto provider and panics; install one at start-up, e.g.
//! `rustls::crypto::ring::default_provider().install_default()`.

pub mod conditions;
pub mod headers;
pub mod json_path;
pub mod patterns;
pub(crate) mod spec;
pub(crate) mod transport;

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// The TLS trust a spec's `tls` names, shared with the other tiers that speak TLS.
pub use crate::tier::tls::{CaBundle, InvalidCa, TlsTrust};
pub use conditions::{
    Comparison, DegradedIf, Expect, HeaderMatch, JsonMatch, JsonScalar, JsonTest, Match, Pattern,
    SignalRule, StatusPattern, StatusSet,
};
pub use headers::{RequestHeaders, expand_env};
pub use json_path::JsonPath;
pub use patterns::{HeaderPattern, HttpVersion, ReplyPatterns};
/// The HTTP types that appear in this module's API (`Method`, `Url`, `header::HeaderName`, ...).
pub use reqwest::{Method, Url, header};
pub use spec::{HttpSpec, HttpUrl, InvalidUrl};

use crate::outcome::{CheckResult, Failure, HttpObserved, HttpPhases, Observed, Remarks, Verdict};
use crate::tier::probe::Probe;
use conditions::Reply;
use transport::exchange::{Pooled, Transport};
use transport::wire::Limits;
pub use transport::wire::MAX_BODY;
use transport::{client, dns, fresh};

/// Probes an HTTP endpoint as its [`HttpSpec`] says.
pub struct HttpProbe {
    spec: HttpSpec,
    /// Built once. An error (no usable trust store) fails every check with its reason, so that
    /// the problem shows on the target instead of stopping the whole configuration.
    transport: Result<Transport, Failure>,
    /// Whether some condition reads the body.
    keep_body: bool,
    /// The resolver, with this probe's slot for what a lookup worked around.
    dns: std::sync::Arc<dns::ProbeDns>,
    /// What its TLS handshakes showed; `None` for a probe that never makes one.
    tls: Option<std::sync::Arc<crate::tier::tls::facts::Noting>>,
}

impl HttpProbe {
    /// A probe for `spec`, with its own client and connection pool (or, with
    /// `fresh_connection`, its own connection per check), resolving names through `names`.
    pub fn new(spec: HttpSpec, names: crate::tier::resolve::Names) -> Self {
        let dns = dns::ProbeDns::new(names);
        let mut noting = None;
        let transport = client::spec_tls(&spec).and_then(|(tls, facts)| {
            noting = facts;
            let fresh = fresh::Fresh::new(&spec, &tls, dns.clone());
            if spec.fresh_connection {
                return Ok(Transport::Fresh(fresh));
            }
            let opened = client::Opened::default();
            let client = client::build(tls, opened.clone(), dns.clone())?;
            Ok(Transport::Pooled(Pooled {
                client,
                opened,
                fresh,
            }))
        });
        Self {
            transport,
            keep_body: spec.needs_body(),
            spec,
            dns,
            tls: noting,
        }
    }

    /// The spec the probe runs.
    pub fn spec(&self) -> &HttpSpec {
        &self.spec
    }

    async fn run(&self, timeout: Duration) -> (CheckResult, Observed) {
        let transport = match &self.transport {
            Ok(transport) => transport,
            Err(failure) => return (CheckResult::failed(failure.clone()), Observed::default()),
        };
        let started = Instant::now();
        let limits = Limits {
            follow_redirects: self.spec.follow_redirects,
            keep_body: self.keep_body,
            deadline: started + timeout,
            timeout,
        };
        let mut remarks = Remarks::default();
        let mut phases = HttpPhases::default();
        let exchanged = transport
            .exchange(&self.spec, limits, &mut remarks, &mut phases)
            .await;
        let received = match exchanged {
            Ok(received) => received,
            Err(failure) => {
                let result = CheckResult {
                    remarks,
                    ..CheckResult::failed(failure)
                };
                // No reply, but the phases it went through.
                let http = HttpObserved {
                    phases,
                    ..HttpObserved::default()
                };
                let observed = Observed {
                    http: Some(http),
                    ..Observed::default()
                };
                return (result, observed);
            }
        };
        let latency = started.elapsed();
        let (status, headers) = (received.status, &received.headers);
        let exchanged = patterns::Exchanged {
            version: received.version,
            tls: received.tls,
        };
        let mut observed = Observed {
            addr: received.remote.map(|a| a.ip()),
            http: Some(HttpObserved {
                status: status.as_u16(),
                version: version_number(received.version),
                // A redirect not followed is counted too, as Go's client (and so
                // blackbox_exporter) counts the redirects it meets.
                redirects: received.redirects
                    + usize::from(
                        !self.spec.follow_redirects
                            && status.is_redirection()
                            && headers.contains_key(reqwest::header::LOCATION),
                    ),
                content_length: headers
                    .get(reqwest::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok()),
                body_length: received.body_length,
                tls: received.tls,
                last_modified: headers
                    .get(reqwest::header::LAST_MODIFIED)
                    .and_then(|v| httpdate::parse_http_date(v.to_str().ok()?).ok()),
                failed_due_to_regex: false,
                phases,
            }),
            ..Observed::default()
        };
        let mut result = match received.body {
            Ok(body) => {
                let reply = Reply::new(status, headers, &body, latency);
                let (result, regex_failed) = self.judge(&reply, exchanged);
                if let Some(http) = &mut observed.http {
                    http.failed_due_to_regex = regex_failed;
                }
                result
            }
            // Signals still apply: status and headers were received.
            Err(failure) => CheckResult {
                signals: self.signals(&Reply::new(status, headers, &[], latency)),
                ..CheckResult::failed(failure)
            },
        };
        result.remarks = remarks;
        (result, observed)
    }

    /// The verdict on a reply, and whether a body or header regex is what failed it.
    fn judge(&self, reply: &Reply<'_>, exchanged: patterns::Exchanged) -> (CheckResult, bool) {
        let patterns = &self.spec.patterns;
        let mut regex_failed = false;
        let checked = self.spec.expect.check(reply).and_then(|()| {
            patterns
                .check_regexes(reply)
                .inspect_err(|_| regex_failed = true)?;
            patterns.check_exchange(exchanged)
        });
        let verdict = match checked {
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
        let result = CheckResult {
            signals: self.signals(reply),
            ..CheckResult::of(verdict)
        };
        (result, regex_failed)
    }

    fn signals(&self, reply: &Reply<'_>) -> Vec<crate::outcome::Signal> {
        self.spec
            .signals
            .iter()
            .filter_map(|rule| rule.fire(reply))
            .collect()
    }
}

impl fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProbe")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// A reply's HTTP version as blackbox_exporter's `probe_http_version` writes it.
fn version_number(version: reqwest::Version) -> f64 {
    match version {
        reqwest::Version::HTTP_09 => 0.9,
        reqwest::Version::HTTP_10 => 1.0,
        reqwest::Version::HTTP_2 => 2.0,
        reqwest::Version::HTTP_3 => 3.0,
        _ => 1.1,
    }
}

#[async_trait::async_trait]
impl Probe for HttpProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        self.observe(timeout).await.0
    }

    async fn observe(&self, timeout: Duration) -> (CheckResult, Observed) {
        self.dns.begin(Instant::now() + timeout);
        let (mut result, observed) = self.run(timeout).await;
        result.remarks.dns_trouble = self.dns.finish();
        result.tls = self.tls.as_ref().and_then(|noting| noting.facts());
        (result, observed)
    }
}
