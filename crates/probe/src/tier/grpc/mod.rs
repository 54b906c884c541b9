//! The gRPC tier: `grpc.health.v1.Health/Check`, the protocol Kubernetes, Envoy and load
//! balancers ask gRPC servers about their health.
//!
//! The tier makes its own connections, through the TCP tier's connect and this crate's TLS (so
//! a check has one deadline, names resolve through the engine's resolver, certificate facts are
//! noted, and the engine's own resource faults are told apart), and hands each one to tonic for
//! HTTP/2 and the call. By default the connection is kept for the next check: when the server
//! has closed it meanwhile, the check is made again on a new one within the same deadline (and
//! says so in its remarks), as the HTTP tier does for a kept-alive connection.
//!
//! The verdict: `SERVING` passes (DEGRADED over `latency_over`); `NOT_SERVING` or `UNKNOWN`
//! fails as `status`; `NOT_FOUND` (the service is unknown) fails as `assertion`; a server
//! without the health service (`UNIMPLEMENTED`) fails as `status`; `DEADLINE_EXCEEDED` or no
//! answer in time fails as `timeout`.

pub(crate) mod spec;

use std::error::Error as StdError;
use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::outcome::{CheckResult, Failure, FailureReason, Remarks, Verdict};
use crate::resolve::Names;
use crate::tier::probe::Probe;
use crate::tier::tcp::{CloseMode, connect_any, resolve};
use crate::tier::tls::facts::Noting;
use crate::tier::tls::{handshake_failure, trust};
pub use spec::GrpcSpec;

/// A connection as tonic is handed it: plain TCP or TLS over it.
type Io = Either<TcpStream, TlsStream<TcpStream>>;

/// Probes a gRPC server's health as its [`GrpcSpec`] says.
pub struct GrpcProbe {
    spec: GrpcSpec,
    names: Names,
    /// The TLS connector and its verifier when the spec uses TLS; the set-up error (no usable
    /// trust store) otherwise, reported by every check.
    tls: Result<Option<(TlsConnector, Arc<Noting>)>, Failure>,
    /// The connection kept from the last check (not with `fresh_connection`).
    kept: Mutex<Option<Channel>>,
}

impl GrpcProbe {
    /// A probe for `spec`, resolving a host name through `names`.
    pub fn new(spec: GrpcSpec, names: Names) -> Self {
        let tls = spec
            .tls
            .as_ref()
            .map(|trust| {
                trust::noting_config(trust).map(|(mut config, noting)| {
                    config.alpn_protocols = vec![b"h2".to_vec()];
                    (TlsConnector::from(Arc::new(config)), noting)
                })
            })
            .transpose();
        Self {
            spec,
            names,
            tls,
            kept: Mutex::new(None),
        }
    }

    async fn run(&self, deadline: Instant, remarks: &mut Remarks) -> Verdict {
        let started = Instant::now();
        let kept = if self.spec.fresh_connection {
            None
        } else {
            self.kept.lock().take()
        };
        let reused = kept.is_some();
        let answer = match kept {
            Some(channel) => match self.call(channel.clone(), deadline).await {
                // The kept connection is gone: the server closed it since the last check.
                Err(Called::Gone) => {
                    remarks.stale_connection_retried = true;
                    self.call_fresh(deadline, remarks).await
                }
                answer => answer.map(|status| (status, channel)),
            },
            None => self.call_fresh(deadline, remarks).await,
        };
        let latency = started.elapsed();
        match answer {
            Ok((status, channel)) => {
                if !self.spec.fresh_connection {
                    *self.kept.lock() = Some(channel);
                }
                self.judge(status, latency)
            }
            Err(Called::Failed(failure)) => Verdict::Failed(failure),
            Err(Called::Gone) => Verdict::Failed(Failure::new(
                FailureReason::Reset,
                if reused {
                    "the server closed the new connection too"
                } else {
                    "the server closed the connection"
                },
            )),
        }
    }

    /// Connects anew and calls on that connection.
    async fn call_fresh(
        &self,
        deadline: Instant,
        remarks: &mut Remarks,
    ) -> Result<(i32, Channel), Called> {
        let channel = self.connect(deadline, remarks).await?;
        let status = self.call(channel.clone(), deadline).await?;
        Ok((status, channel))
    }

    /// A channel over a new connection, HTTP/2 set up.
    async fn connect(&self, deadline: Instant, remarks: &mut Remarks) -> Result<Channel, Called> {
        let tls = self.tls.as_ref().map_err(|f| Called::Failed(f.clone()))?;
        let addrs = resolve(&self.spec.address, &self.names, deadline, remarks).await?;
        let stream = connect_any(&addrs, CloseMode::Reset, true, deadline).await?;
        let io: Io = match tls {
            None => Either::Left(stream),
            Some((connector, _)) => {
                let name = server_name(&self.spec)?;
                match timeout_at(deadline, connector.connect(name, stream)).await {
                    Err(_) => return Err(timed_out("TLS handshake timed out")),
                    Ok(Err(err)) => return Err(Called::Failed(handshake_failure(&err))),
                    Ok(Ok(tls)) => Either::Right(tls),
                }
            }
        };
        let endpoint = Endpoint::from_shared(format!("http://{}", self.spec.address))
            .map_err(|e| Called::Failed(Failure::new(FailureReason::Io, e)))?
            .user_agent(crate::tier::http::transport::client::USER_AGENT)
            .map_err(|e| Called::Failed(Failure::new(FailureReason::Io, e)))?;
        let handover = Handover(Arc::new(Mutex::new(Some(io))));
        match timeout_at(deadline, endpoint.connect_with_connector(handover)).await {
            Err(_) => Err(timed_out("HTTP/2 set-up timed out")),
            Ok(Err(err)) => Err(Called::Failed(transport_failure(&err, "HTTP/2 set-up"))),
            Ok(Ok(channel)) => Ok(channel),
        }
    }

    /// One `Check` call; the serving status answered.
    async fn call(&self, channel: Channel, deadline: Instant) -> Result<i32, Called> {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: self.spec.service.clone(),
        });
        *request.metadata_mut() =
            tonic::metadata::MetadataMap::from_headers(self.spec.metadata.expose().clone());
        // The server is told the deadline too, so that it can give up when the probe does.
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let mut client = HealthClient::new(channel);
        match timeout_at(deadline, client.check(request)).await {
            Err(_) => Err(timed_out("no Check answer in time")),
            Ok(Ok(response)) => Ok(response.into_inner().status),
            Ok(Err(status)) => Err(self.refused(&status)),
        }
    }

    /// What an error status from the server (or the transport) means.
    fn refused(&self, status: &tonic::Status) -> Called {
        use tonic::Code;
        if caused_by::<Spent>(status) {
            return Called::Gone;
        }
        // The call's own deadline, which tonic enforces too (it sends it as `grpc-timeout`).
        if caused_by::<tonic::TimeoutExpired>(status) {
            return timed_out("no Check answer in time");
        }
        let failure = match status.code() {
            Code::NotFound => Failure::new(
                FailureReason::Assertion,
                format_args!(
                    "the server does not know service {:?} (SERVICE_UNKNOWN)",
                    self.spec.service
                ),
            ),
            Code::Unimplemented => Failure::new(
                FailureReason::Status,
                "the server does not implement grpc.health.v1 (UNIMPLEMENTED)",
            ),
            Code::DeadlineExceeded => Failure::new(
                FailureReason::Timeout,
                format_args!("DEADLINE_EXCEEDED: {}", status.message()),
            ),
            Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled
                if StdError::source(status).is_some() =>
            {
                transport_failure(status, "call")
            }
            code => Failure::new(
                FailureReason::Status,
                format_args!("{}: {}", code_name(code), status.message()),
            ),
        };
        Called::Failed(failure)
    }

    fn judge(&self, status: i32, latency: Duration) -> Verdict {
        match ServingStatus::try_from(status) {
            Ok(ServingStatus::Serving) => match self.spec.latency_over {
                Some(limit) if latency > limit => Verdict::Degraded(vec![format!(
                    "latency {} over {}",
                    humantime::format_duration(Duration::from_millis(
                        u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)
                    )),
                    humantime::format_duration(limit)
                )]),
                _ => Verdict::Up,
            },
            Ok(ServingStatus::ServiceUnknown) => Verdict::Failed(Failure::new(
                FailureReason::Assertion,
                format_args!(
                    "the server does not know service {:?} (SERVICE_UNKNOWN)",
                    self.spec.service
                ),
            )),
            Ok(other) => Verdict::Failed(Failure::new(FailureReason::Status, other.as_str_name())),
            Err(_) => Verdict::Failed(Failure::new(
                FailureReason::Status,
                format_args!("serving status {status}, which grpc.health.v1 does not define"),
            )),
        }
    }
}

/// How a call went wrong.
enum Called {
    Failed(Failure),
    /// The connection was gone before the call could be made on it.
    Gone,
}

impl From<Failure> for Called {
    fn from(failure: Failure) -> Self {
        Self::Failed(failure)
    }
}

fn timed_out(detail: &'static str) -> Called {
    Called::Failed(Failure::new(FailureReason::Timeout, detail))
}

/// The name sent as SNI and checked: the address's host (or IP address).
fn server_name(spec: &GrpcSpec) -> Result<ServerName<'static>, Called> {
    match &spec.address {
        crate::target::Address::Socket(addr) => Ok(ServerName::IpAddress(addr.ip().into())),
        crate::target::Address::Host { host, .. } => {
            ServerName::try_from(host.clone()).map_err(|_| {
                Called::Failed(Failure::new(
                    FailureReason::Tls,
                    format_args!("{host:?} cannot be checked against a certificate"),
                ))
            })
        }
    }
}

/// Whether an error of type `E` is behind `status`: [`Spent`] when the kept connection was gone
/// (tonic asked for a new connection, and [`Handover`] had none to give), tonic's
/// `TimeoutExpired` when the call's deadline passed.
fn caused_by<E: StdError + 'static>(status: &tonic::Status) -> bool {
    let mut source = StdError::source(status);
    while let Some(e) = source {
        if e.is::<E>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A transport error met while `doing` something, classified by its innermost I/O error (or as
/// a reset when the connection ended without one: an HTTP/2 `GOAWAY` or a closed stream).
fn transport_failure(err: &(dyn StdError + 'static), doing: &str) -> Failure {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    let mut innermost = err;
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Failure::io(doing, io);
        }
        innermost = e;
        source = e.source();
    }
    Failure::new(FailureReason::Reset, format_args!("{doing}: {innermost}"))
}

fn code_name(code: tonic::Code) -> String {
    format!("{code:?}")
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
            sep.into_iter()
                .chain(std::iter::once(c.to_ascii_uppercase()))
        })
        .collect()
}

/// Hands tonic the one connection the check made; asked again (the connection broke and tonic
/// would reconnect), it has none, so that a new connection is always the check's own, made
/// under its deadline.
#[derive(Clone)]
struct Handover(Arc<Mutex<Option<Io>>>);

/// [`Handover`]'s connection was taken already.
#[derive(Debug, thiserror::Error)]
#[error("the connection is gone")]
struct Spent;

impl tower_service::Service<Uri> for Handover {
    type Response = TokioIo<Io>;
    type Error = Spent;
    type Future = Ready<Result<Self::Response, Spent>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Spent>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        std::future::ready(self.0.lock().take().map(TokioIo::new).ok_or(Spent))
    }
}

impl std::fmt::Debug for GrpcProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcProbe")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Probe for GrpcProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let mut remarks = Remarks::default();
        let verdict = self.run(Instant::now() + timeout, &mut remarks).await;
        let tls = match &self.tls {
            Ok(Some((_, noting))) => noting.facts(),
            _ => None,
        };
        CheckResult {
            remarks,
            tls,
            ..CheckResult::of(verdict)
        }
    }
}
