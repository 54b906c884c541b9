//! The pooled HTTP client behind a probe, the TLS configuration and resolver shared with the
//! `fresh_connection` transport, and the mapping of errors onto [`FailureReason`]s.
//!
//! Each probe without `fresh_connection` owns one `reqwest::Client`, built once, so a kept-alive
//! connection is reused from one check to the next. The client is set up for probing rather than
//! browsing: no proxy from the environment (a probe tests the path to the target, not
//! to a proxy), no retries (a retry would hide the very failure a probe is for), no automatic
//! `Referer`, HTTP/1.1 only, no redirects (`exchange` follows them).
//!
//! TLS is rustls with the pure-Rust `ring` provider, configured by `tier::tls::trust` and handed
//! to reqwest, so the library installs no process-wide crypto provider that an embedder might
//! want to choose.
//!
//! Name resolution goes through the engine's resolver (see `dns`), whose errors have their own
//! type: reqwest's default resolver reports failures as plain I/O errors, which could not be told
//! apart from a connection failure.

use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use super::dns::{DnsError, ProbeDns, Reqwest};
use crate::outcome::{Failure, FailureReason};
use crate::tier::http::spec::HttpSpec;
use crate::tier::tls::facts::Noting;
use crate::tier::tls::trust::{client_config, noting_config};

/// Sent as `User-Agent`, so that probes are recognisable in the target's access logs.
pub(crate) const USER_AGENT: &str = concat!("probe-engine/", env!("CARGO_PKG_VERSION"));

/// Builds the pooled client a spec needs, resolving through `dns`, whose connector counts the
/// connections it opens in `opened` (see [`Opened`]). Fails only on TLS set-up problems (no
/// usable trust store).
pub(crate) fn build(
    tls: rustls::ClientConfig,
    opened: Opened,
    dns: Arc<ProbeDns>,
) -> Result<reqwest::Client, Failure> {
    reqwest::Client::builder()
        .connector_layer(opened)
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .retry(reqwest::retry::never())
        .referer(false)
        // Redirects are followed by `exchange`, the same way for both transports.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
        .dns_resolver(Arc::new(Reqwest(dns)))
        // The check's deadline bounds every wait; TCP keepalive probes and a user timeout would
        // only add four system calls to every new connection.
        .tcp_keepalive(None)
        .tcp_keepalive_interval(None)
        .tcp_keepalive_retries(None)
        .tcp_user_timeout(None)
        .build()
        .map_err(|e| {
            Failure::new(
                FailureReason::Io,
                format_args!("cannot build the HTTP client: {}", innermost(&e)),
            )
        })
}

/// The rustls configuration a spec needs, and the verifier that notes what its handshakes show
/// (see `tier::tls::facts`). A plain-HTTP probe that follows no redirect never makes a TLS
/// connection: it does not need the system trust store (which may be missing on a minimal host),
/// and gets a configuration that trusts nothing.
pub(crate) fn spec_tls(
    spec: &HttpSpec,
) -> Result<(rustls::ClientConfig, Option<Arc<Noting>>), Failure> {
    let tls_needed = spec.url.is_https() || spec.follow_redirects;
    let (mut config, noting) = if tls_needed {
        let (config, noting) = noting_config(&spec.tls)?;
        (config, Some(noting))
    } else {
        (client_config(None)?, None)
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, noting))
}

/// Counts the connections a pooled client opens, so that a failed request can tell whether it
/// ran on a kept-alive connection (none opened meanwhile) or on a new one. reqwest does not say
/// which, and only a reused connection can have been closed by the server an instant earlier.
/// A probe's client serves one check at a time, so the count before and after a request speaks
/// of that request alone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Opened(Arc<AtomicU64>);

impl Opened {
    /// Connections opened so far.
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl<S> tower_layer::Layer<S> for Opened {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            opened: self.clone(),
        }
    }
}

/// The connector wrapped by [`Opened`].
#[derive(Clone, Debug)]
pub(crate) struct Counting<S> {
    inner: S,
    opened: Opened,
}

impl<S: tower_service::Service<R>, R> tower_service::Service<R> for Counting<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.opened.0.fetch_add(1, Ordering::Relaxed);
        self.inner.call(request)
    }
}

/// Whether a request failed the way a kept-alive connection closed by the server fails: reset,
/// broken or ended before the reply (hyper's "connection closed before message completed"), or
/// cancelled because the connection was going away. A timeout, a refusal or a TLS error is not
/// that race.
pub(crate) fn closed_under_us(err: &reqwest::Error) -> bool {
    use std::io::ErrorKind as K;
    if err.is_connect() || err.is_timeout() {
        return false;
    }
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof
            );
        }
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// Classifies a reqwest error met while `doing` something ("request", "reading the body").
///
/// The cause is found by walking the error's source chain: our [`DnsError`], a rustls error (also
/// when wrapped in an I/O error, as the TLS stream does), an I/O error (refused, reset, ...), or
/// hyper's "connection closed before the message completed", which is a reset from the probe's
/// point of view. The detail is the innermost error's message, which says what happened without
/// reqwest's generic wrappers (and never contains a header value); a TLS error's is put in words
/// as the TLS tier's are.
pub(crate) fn classify(err: &reqwest::Error, doing: &str) -> Failure {
    classify_error(err, if err.is_connect() { "connect" } else { doing })
}

/// Classifies any error of the HTTP stack met while `doing` something, as [`classify`] explains.
pub(crate) fn classify_error(err: &(dyn StdError + 'static), doing: &str) -> Failure {
    let mut reason = None;
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        match cause(e) {
            // A definite cause ends the walk: what wraps deeper is detail.
            Some(
                definite @ (FailureReason::Dns | FailureReason::Tls | FailureReason::Exhausted(_)),
            ) => {
                reason = Some(definite);
                break;
            }
            // Otherwise the deepest cause is the most precise.
            Some(found) => reason = Some(found),
            None => {}
        }
        source = e.source();
    }
    let detail = match rustls_error(err) {
        Some(tls) => crate::tier::tls::refusal::describe(tls),
        None => innermost(err),
    };
    Failure::new(
        reason.unwrap_or(FailureReason::Io),
        format_args!("{doing}: {detail}"),
    )
}

/// The rustls error in the chain, also inside an I/O error (where the TLS stream puts it): its
/// own message prints webpki's enums with `Debug`, so it is put in words instead.
fn rustls_error<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut source = Some(err);
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(inner);
        }
        source = e.source();
    }
    None
}

/// What one error of the chain says about the cause, if anything.
fn cause(e: &(dyn StdError + 'static)) -> Option<FailureReason> {
    if e.is::<DnsError>() {
        return Some(FailureReason::Dns);
    }
    if e.is::<rustls::Error>() {
        return Some(FailureReason::Tls);
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        // An I/O error's `source()` skips the error it wraps (the TLS stream and the connector
        // wrap theirs in I/O errors): look at it directly.
        let inner = io.get_ref().map(|inner| inner as &(dyn StdError + 'static));
        return match inner.and_then(cause) {
            Some(
                definite @ (FailureReason::Dns | FailureReason::Tls | FailureReason::Exhausted(_)),
            ) => Some(definite),
            _ => Some(FailureReason::from_io(io)),
        };
    }
    e.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_incomplete_message)
        .then_some(FailureReason::Reset)
}

/// The message of the deepest error in the chain, including what an I/O error wraps.
fn innermost(err: &(dyn StdError + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Exhausted;

    #[test]
    fn running_out_of_descriptors_is_found_under_the_wrappers() {
        // As the connector reports it: an I/O error wrapping another.
        let inner = std::io::Error::from_raw_os_error(libc::EMFILE);
        let wrapped = std::io::Error::other(inner);
        let failure = classify_error(&wrapped, "connect");
        assert_eq!(
            failure.reason,
            FailureReason::Exhausted(Exhausted::Descriptors)
        );
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(
            classify_error(&refused, "connect").reason,
            FailureReason::Refused
        );
    }
}
