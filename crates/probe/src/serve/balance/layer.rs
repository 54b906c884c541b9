//! A client-side balancer as a tower layer: a service calling its upstreams through the engine's
//! view of them.
//!
//! [`BalanceLayer`] wraps any HTTP client service (hyper's, say) so that each request goes to a
//! member of a pool ([`Topology::pools`](crate::topology::Topology::pools)) chosen by
//! [`Pools::pick`](crate::engine::Pools::pick):
//! - by weight: ejected members get nothing, returning ones ramp up through slow start, DOWN
//!   members are skipped;
//! - failing fast, without a connection attempt, when every member is out or behind an open
//!   circuit ([`PickError`](crate::engine::PickError));
//! - reporting each outcome back (status, or the transport error's kind, and latency), which
//!   feeds the member's circuit breaker and its pool's outlier detection: a member that starts
//!   failing is out after a handful of calls;
//! - retrying a failed request once on another member when it is idempotent (GET, HEAD, OPTIONS
//!   or an `Idempotency-Key` header, see [`retry::is_retryable`]) and the retry budget allows
//!   (10% of requests over 10 s, at least one per second, by default). A POST without a key is
//!   never retried.
//!
//! The request's scheme and authority are replaced by the member's: its HTTP probe URL's, or
//! `http://` and its TCP probe address; path and query are kept. A retried request is a copy:
//! method, URI, version, headers and body (hence `B: Clone`), not its extensions.

use parking_lot::Mutex;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use tokio::time::Instant;

use crate::engine::{Engine, Lease};
use crate::passive::call::{Call, CallOutcome};
use crate::serve::balance::retry::{self, RetryBudget};
use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;

/// The error type of [`Balance`]: the inner service's, a [`PickError`](crate::engine::PickError), or [`NoAddress`].
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A member has no address to send requests to (a custom probe's target).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("member {:?} has no HTTP or TCP address", .0.as_str())]
pub struct NoAddress(pub TargetId);

/// Balances requests over pool `pool` of `engine`; see the module docs.
#[derive(Clone)]
pub struct BalanceLayer {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Engine,
    pool: TargetId,
    budget: Option<Mutex<RetryBudget>>,
}

impl BalanceLayer {
    /// A layer over pool `pool`, retrying within the usual budget (10% of requests over 10 s,
    /// at least one retry per second).
    pub fn new(engine: Engine, pool: TargetId) -> Self {
        let budget = RetryBudget::try_new(
            RetryBudget::DEFAULT_WINDOW,
            RetryBudget::DEFAULT_RATIO,
            RetryBudget::DEFAULT_MIN_PER_SECOND,
            Instant::now(),
        )
        .ok();
        Self::with_retry_budget(engine, pool, budget)
    }

    /// A layer over pool `pool` with its own retry budget; `None` never retries.
    pub fn with_retry_budget(engine: Engine, pool: TargetId, budget: Option<RetryBudget>) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                pool,
                budget: budget.map(Mutex::new),
            }),
        }
    }
}

impl<S> tower_layer::Layer<S> for BalanceLayer {
    type Service = Balance<S>;

    fn layer(&self, inner: S) -> Balance<S> {
        Balance {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`BalanceLayer`] makes.
#[derive(Clone)]
pub struct Balance<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B, RB> tower_service::Service<Request<B>> for Balance<S>
where
    S: tower_service::Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Clone + Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was polled ready takes this call; a retry waits for a clone's turn.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let retry = retry::is_retryable(&request).then(|| copy(&request));
            if let Some(budget) = &shared.budget {
                budget.lock().deposit(Instant::now());
            }
            let first = shared.engine.pools().pick(&shared.pool, &[])?;
            let tried = first.id().clone();
            let (failed, result) = send(inner.clone(), first, request).await;
            let Some(again) = retry.filter(|_| failed && shared.may_retry()) else {
                return result;
            };
            let Ok(second) = shared.engine.pools().pick(&shared.pool, &[tried]) else {
                return result;
            };
            let mut inner = inner;
            std::future::poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            send(inner, second, again).await.1
        })
    }
}

impl Shared {
    fn may_retry(&self) -> bool {
        self.budget
            .as_ref()
            .is_some_and(|budget| budget.lock().withdraw(Instant::now()))
    }
}

/// Sends `request` to `lease`'s member through `inner` and reports how it went; returns whether
/// the member failed it, with the inner service's answer.
async fn send<S, B, RB>(
    mut inner: S,
    lease: Lease,
    mut request: Request<B>,
) -> (bool, Result<Response<RB>, BoxError>)
where
    S: tower_service::Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
{
    let uri = match member_uri(&lease, request.uri()) {
        Ok(uri) => uri,
        // Not the member's fault: nothing to report, nothing to retry.
        Err(e) => return (false, Err(e)),
    };
    *request.uri_mut() = uri;
    let started = Instant::now();
    let result = inner.call(request).await.map_err(Into::into);
    let latency = started.elapsed();
    let outcome = match &result {
        Ok(response) => CallOutcome::from_status(response.status().as_u16()),
        Err(e) => transport_outcome(e.as_ref()),
    };
    lease.finish(&Call { outcome, latency });
    (outcome.is_failure(), result)
}

/// `uri` with the scheme and authority of `lease`'s member.
fn member_uri(lease: &Lease, uri: &Uri) -> Result<Uri, BoxError> {
    let (scheme, authority) = match lease.probe() {
        ProbeSpec::Http(spec) => {
            let url = spec.url.as_url();
            let host = url.host_str().unwrap_or_default();
            let port = url.port_or_known_default().unwrap_or(80);
            let scheme = if spec.url.is_https() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            };
            (scheme, Authority::try_from(format!("{host}:{port}"))?)
        }
        ProbeSpec::Tcp(spec) => (Scheme::HTTP, Authority::try_from(spec.address.to_string())?),
        ProbeSpec::Grpc(spec) => (
            if spec.tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            },
            Authority::try_from(spec.address.to_string())?,
        ),
        // A member whose certificate is probed serves TLS.
        ProbeSpec::Tls(spec) => (
            Scheme::HTTPS,
            Authority::try_from(spec.address.to_string())?,
        ),
        ProbeSpec::Custom(_) => return Err(Box::new(NoAddress(lease.id().clone()))),
        // A question to a DNS server, a host without a port, a UDP port: nothing to send HTTP
        // requests to.
        ProbeSpec::Dns(_) | ProbeSpec::Icmp(_) | ProbeSpec::Udp(_) => {
            return Err(Box::new(NoAddress(lease.id().clone())));
        }
    };
    let mut parts = uri.clone().into_parts();
    parts.scheme = Some(scheme);
    parts.authority = Some(authority);
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    Ok(Uri::from_parts(parts)?)
}

/// What a transport error says about the member, from the first I/O error in its chain.
fn transport_outcome(error: &(dyn StdError + 'static)) -> CallOutcome {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::ConnectionRefused => CallOutcome::Refused,
                io::ErrorKind::TimedOut => CallOutcome::Timeout,
                _ => CallOutcome::Reset,
            };
        }
        next = e.source();
    }
    CallOutcome::Reset
}

/// A copy of `request` for a retry: everything but the extensions.
fn copy<B: Clone>(request: &Request<B>) -> Request<B> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}
