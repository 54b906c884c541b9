//! A tower layer that admits each request through the [`Gate`] (feature `tower`).
//!
//! Works with any `http` service (axum, hyper, tonic): a request is admitted while the gate is
//! Serving and counts as in flight until its response is ready; otherwise it is answered at once
//! with `503 Service Unavailable`, `Connection: close` (so that keep-alive clients reconnect,
//! reaching another instance) and `Retry-After`. Each admitted request's outcome (status or
//! error, latency) can be reported to an [`ObserveRequests`], for passive health.
//!
//! A streamed response body (server-sent events, say) is in flight only until its headers are
//! ready: the gate sees requests, not connections.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode, header};
use tokio::time::Instant;

use super::admission::{Admission, Gate};

/// How one admitted request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestOutcome {
    /// The response status; `None` when the service failed without one (an error, a timeout
    /// layer giving up).
    pub status: Option<StatusCode>,
    /// From admission to the response.
    pub latency: Duration,
}

impl RequestOutcome {
    /// Whether the request failed on the server's side: an error, or a 5xx.
    pub fn failed(&self) -> bool {
        self.status.is_none_or(|s| s.is_server_error())
    }
}

/// Receives the outcome of every admitted request.
pub trait ObserveRequests: Send + Sync {
    /// Called once per admitted request, when its response (or error) is ready.
    fn observe(&self, outcome: &RequestOutcome);
}

/// Admits requests through a [`Gate`]; see the module docs.
#[derive(Clone)]
pub struct GateLayer {
    gate: Gate,
    retry_after: HeaderValue,
    observer: Option<Arc<dyn ObserveRequests>>,
}

impl GateLayer {
    /// A layer over `gate` whose refusals ask clients to retry after 1 s.
    pub fn new(gate: Gate) -> Self {
        Self {
            gate,
            retry_after: HeaderValue::from_static("1"),
            observer: None,
        }
    }

    /// Sets the `Retry-After` of refusals, in whole seconds (at least 1).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = HeaderValue::from(after.as_secs().max(1));
        self
    }

    /// Reports every admitted request's outcome to `observer`.
    pub fn observe(mut self, observer: Arc<dyn ObserveRequests>) -> Self {
        self.observer = Some(observer);
        self
    }
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of a [`GateLayer`].
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    layer: GateLayer,
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for GateService<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let Some(admission) = self.layer.gate.admit() else {
            let mut refused = Response::new(ResBody::default());
            *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            let headers = refused.headers_mut();
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            headers.insert(header::RETRY_AFTER, self.layer.retry_after.clone());
            return ResponseFuture {
                state: State::Refused {
                    response: Some(refused),
                },
            };
        };
        ResponseFuture {
            state: State::Admitted {
                future: self.inner.call(request),
                admission: Some(admission),
                started: Instant::now(),
                observer: self.layer.observer.clone(),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`GateService`]: the inner service's, or a refusal.
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Refused { response: Option<Response<B>> },
        Admitted {
            #[pin]
            future: F,
            // Released when the response is ready (or when the future is dropped).
            admission: Option<Admission>,
            started: Instant,
            observer: Option<Arc<dyn ObserveRequests>>,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                // Polled again after completion: a contract breach by the caller.
                None => Poll::Pending,
            },
            StateProj::Admitted {
                future,
                admission,
                started,
                observer,
            } => {
                let result = std::task::ready!(future.poll(cx));
                if let Some(observer) = observer {
                    observer.observe(&RequestOutcome {
                        status: result.as_ref().ok().map(Response::status),
                        latency: started.elapsed(),
                    });
                }
                drop(admission.take());
                Poll::Ready(result)
            }
        }
    }
}
