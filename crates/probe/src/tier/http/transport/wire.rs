//! What one HTTP request and its reply are, whichever transport carries them: the request as
//! sent, the limits it runs under, the reply, how a redirect is recognised, and reading a body
//! within its limit. Both transports (the pooled one in `exchange`, the one-shot one in `fresh`)
//! build on these, so neither depends on the other's module.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use tokio::time::{Instant, timeout_at};

use super::client;
use crate::outcome::{Failure, FailureReason};

/// The most body bytes read from a reply.
pub const MAX_BODY: usize = 1024 * 1024;

/// A reply as a transport delivers it. The body (or why it could not be read) comes after the
/// status and headers, which the signals can use either way.
pub(crate) struct Received {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Result<Vec<u8>, Failure>,
    /// How many bytes of body were read (decoded, and at most just over [`MAX_BODY`]).
    pub body_length: usize,
    /// The HTTP version the reply came in.
    pub version: reqwest::Version,
    /// Whether the request that got this reply (the last, after redirects) went over TLS.
    pub tls: bool,
    /// How many redirects were followed to reach it.
    pub redirects: usize,
    /// The server's address, when the transport tells.
    pub remote: Option<std::net::SocketAddr>,
}

/// What one request of the exchange is.
pub(crate) struct Request<'a> {
    pub url: &'a Url,
    pub method: &'a Method,
    /// The configured headers, unless a redirect left their origin.
    pub headers: Option<&'a HeaderMap>,
    pub body: Option<Bytes>,
}

/// The limits one request runs under.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Whether a redirect is to be followed rather than judged.
    pub follow_redirects: bool,
    /// Whether some condition reads the body.
    pub keep_body: bool,
    /// When the whole check must be over.
    pub deadline: Instant,
    /// The check's timeout, for messages.
    pub timeout: Duration,
}

/// What one request ended with.
pub(crate) enum Hop {
    /// A reply that is not to be followed.
    Done(Received),
    /// A redirect to follow: its status and where it leads.
    Redirect(StatusCode, Url),
}

/// The redirect to follow, if `status` and `headers` are one and `follow` says to.
pub(crate) fn redirect(
    follow: bool,
    base: &Url,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Option<Url>, Failure> {
    if !follow || !status.is_redirection() {
        return Ok(None);
    }
    let Some(location) = headers.get(header::LOCATION) else {
        return Ok(None);
    };
    let bad = |why: &dyn fmt::Display| {
        Failure::new(
            FailureReason::Status,
            format_args!("redirect with an unusable Location: {why}"),
        )
    };
    let text = location.to_str().map_err(|_| bad(&"not text"))?;
    let next = base.join(text).map_err(|e| bad(&e))?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(bad(&"not an http or https URL"));
    }
    Ok(Some(next))
}

impl Request<'_> {
    /// As an HTTP/1.1 request on its own connection (origin-form target, `Host`, `User-Agent`,
    /// `Accept` and `Connection: close` as a pooled client would send them).
    pub(crate) fn to_http1<B>(&self, body: B) -> Result<http::Request<B>, Failure> {
        let url = self.url;
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let invalid =
            |e: &dyn fmt::Display| Failure::new(FailureReason::Io, format_args!("request: {e}"));
        let mut request = http::Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = target.parse().map_err(|e| invalid(&e))?;
        let headers = request.headers_mut();
        if let Some(configured) = self.headers {
            headers.clone_from(configured);
        }
        // The URL's authority, unless a `Host` header was configured (virtual-host probes).
        if !headers.contains_key(header::HOST) {
            let host = url.host_str().unwrap_or_default();
            let authority = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            let value = HeaderValue::from_str(&authority).map_err(|e| invalid(&e))?;
            headers.insert(header::HOST, value);
        }
        headers
            .entry(header::USER_AGENT)
            .or_insert(HeaderValue::from_static(client::USER_AGENT));
        headers
            .entry(header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok(request)
    }
}

/// A timeout failure: `what` followed by the check's timeout ("no response within 1s").
pub(crate) fn timed_out(what: &str, timeout: Duration) -> Failure {
    Failure::new(
        FailureReason::Timeout,
        format_args!("{what} {}", humantime::format_duration(timeout)),
    )
}

/// A reply body that can be read chunk by chunk, whichever transport it comes from.
pub(crate) trait Chunks {
    /// The body's length, when the reply says it.
    fn content_length(&self) -> Option<u64>;
    /// The next chunk; `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Failure>;
}

impl Chunks for reqwest::Response {
    fn content_length(&self) -> Option<u64> {
        reqwest::Response::content_length(self)
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        self.chunk()
            .await
            .map_err(|e| client::classify(&e, "reading the body"))
    }
}

/// Waits for `reading` (a [`read_body`]) until the deadline: the body or why there is none, and
/// how many bytes were read.
pub(crate) async fn body_by(
    limits: &Limits,
    reading: impl Future<Output = Result<(Vec<u8>, usize), Failure>>,
) -> (Result<Vec<u8>, Failure>, usize) {
    match timeout_at(limits.deadline, reading).await {
        Err(_) => (
            Err(timed_out("body not complete within", limits.timeout)),
            0,
        ),
        Ok(Ok((body, length))) => (Ok(body), length),
        Ok(Err(failure)) => (Err(failure), 0),
    }
}

/// Reads the body: kept up to [`MAX_BODY`] when `keep`, else drained (so that a pooled
/// connection can be reused) up to the same limit and dropped. With it, how many bytes were
/// read.
pub(crate) async fn read_body(
    body: &mut impl Chunks,
    keep: bool,
) -> Result<(Vec<u8>, usize), Failure> {
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
    if keep && let Some(len) = body.content_length().filter(|len| *len > limit) {
        return Err(over(&len));
    }
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = body.next_chunk().await? {
        total = total.saturating_add(chunk.len());
        if total > MAX_BODY {
            if keep {
                return Err(over(&format_args!("more than {MAX_BODY}")));
            }
            // Nothing looks at the body: stop here and let the connection go.
            return Ok((Vec::new(), total));
        }
        if keep {
            kept.extend_from_slice(&chunk);
        }
    }
    Ok((kept, total))
}
