//! One check's HTTP exchange, whichever transport carries it: the request (and the redirects it
//! leads to), the reply, and reading the body within its limit.
//!
//! Redirects are followed here rather than by reqwest, so that both transports follow the same
//! rules: at most [`HttpSpec::MAX_REDIRECTS`]; `303` (and `301`/`302` after a `POST`) continue
//! as `GET` without a body; and the configured headers, all of which are treated as secrets, are
//! not sent to another origin (reqwest would drop only the ones it knows to be sensitive).

use reqwest::{Method, StatusCode};
use tokio::time::timeout_at;

use super::wire::{Hop, Limits, Received, Request, body_by, read_body, redirect, timed_out};
use super::{client, fresh};
use crate::outcome::{Failure, FailureReason, HttpPhases, Remarks};
use crate::tier::http::spec::HttpSpec;

/// How a probe reaches its target.
pub(crate) enum Transport {
    /// A reqwest client whose pool keeps the connection alive between checks.
    Pooled(Pooled),
    /// A new connection per check (`fresh_connection`), see [`fresh`].
    Fresh(fresh::Fresh),
}

/// The pooled transport: reqwest's client, the count of connections it opened, and a one-shot
/// transport for the retry after a kept-alive connection failed.
pub(crate) struct Pooled {
    pub client: reqwest::Client,
    pub opened: client::Opened,
    pub fresh: fresh::Fresh,
}

impl Transport {
    /// Sends the spec's request, follows redirects if asked, and reads the reply; the phases a
    /// fresh connection went through are added to `phases`.
    pub(crate) async fn exchange(
        &self,
        spec: &HttpSpec,
        limits: Limits,
        remarks: &mut Remarks,
        phases: &mut HttpPhases,
    ) -> Result<Received, Failure> {
        let mut url = spec.url.as_url().clone();
        let mut method = spec.method.clone();
        let mut body = spec.body.clone();
        let mut headers = Some(spec.headers.expose());
        let mut redirects = 0;
        loop {
            let request = Request {
                url: &url,
                method: &method,
                headers,
                body: body.clone(),
            };
            let hop = match self {
                Self::Pooled(pooled) => pooled.hop(request, limits, remarks, phases).await?,
                Self::Fresh(fresh) => fresh.hop(request, limits, phases).await?,
            };
            let (status, next) = match hop {
                Hop::Done(received) => {
                    return Ok(Received {
                        redirects,
                        ..received
                    });
                }
                Hop::Redirect(status, next) => (status, next),
            };
            if redirects == HttpSpec::MAX_REDIRECTS {
                return Err(Failure::new(
                    FailureReason::Status,
                    format_args!("more than {} redirects", HttpSpec::MAX_REDIRECTS),
                ));
            }
            redirects += 1;
            if next.origin() != url.origin() {
                headers = None;
            }
            let see_other = status == StatusCode::SEE_OTHER && method != Method::HEAD;
            let after_post = method == Method::POST
                && matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND);
            if see_other || after_post {
                method = Method::GET;
                body = None;
            }
            url = next;
        }
    }
}

impl Pooled {
    /// One request through the pooled client.
    ///
    /// The keep-alive race: a server may close an idle connection (its idle timeout, its
    /// request limit) just as the probe sends on it, and the request fails before any byte of
    /// the reply, although the server is fine. Browsers, Go's `http.Transport` and hyper's own
    /// pool send such a request again, and so does this: once, at once, on a fresh connection
    /// and within the same deadline, for idempotent methods only (a POST may have been acted
    /// on). Only the fresh attempt's failure counts. A failure on a connection opened for this
    /// request is never retried: it is the server's.
    async fn hop(
        &self,
        request: Request<'_>,
        limits: Limits,
        remarks: &mut Remarks,
        phases: &mut HttpPhases,
    ) -> Result<Hop, Failure> {
        let mut outgoing = reqwest::Request::new(request.method.clone(), request.url.clone());
        if let Some(headers) = request.headers {
            outgoing.headers_mut().clone_from(headers);
        }
        if let Some(body) = &request.body {
            *outgoing.body_mut() = Some(body.clone().into());
        }
        let opened = self.opened.count();
        let mut response = match timeout_at(limits.deadline, self.client.execute(outgoing)).await {
            Err(_) => return Err(timed_out("no response within", limits.timeout)),
            Ok(Err(err)) => {
                let reused = self.opened.count() == opened;
                if reused && request.method.is_idempotent() && client::closed_under_us(&err) {
                    remarks.stale_connection_retried = true;
                    return self.fresh.hop(request, limits, phases).await;
                }
                return Err(client::classify(&err, "request"));
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let version = response.version();
        // Taken rather than cloned: reading the body needs the response mutably.
        let headers = std::mem::take(response.headers_mut());
        if let Some(next) = redirect(limits.follow_redirects, request.url, status, &headers)? {
            return Ok(Hop::Redirect(status, next));
        }
        let reading = read_body(&mut response, limits.keep_body);
        let (body, body_length) = body_by(&limits, reading).await;
        let remote = response.remote_addr();
        Ok(Hop::Done(Received {
            status,
            headers,
            body,
            body_length,
            version,
            tls: request.url.scheme() == "https",
            redirects: 0,
            remote,
        }))
    }
}
