//! The gRPC tier: `grpc.health.v1.Health/Check`, the protocol Kubernetes, Envoy and load
//! balancers ask gRPC servers about their health.
//!
//! The tier makes its own connections, through the TCP tier's connect and this crate's TLS (so
//! a check has one deadline, names resolve through the engine's resolver, certificate facts are
//! noted, and the engine's own resource faults are told apart), sets up HTTP/2 on each with
//! hyper, and makes the call with tonic's generated client over it. tonic's `Channel` is not
//! used: its reconnecting, buffered service costs a task, a channel and their wake-ups per
//! connection, which a probe that opens one per check (`fresh_connection`) pays at every check,
//! and its reconnects would happen outside the check's deadline. By default the connection is
//! kept for the next check; one the server has closed meanwhile is replaced, and a call that
//! finds it closing as it goes out is made again on a new one within the same deadline (and
//! says so in its remarks), as the HTTP tier does for a kept-alive connection.
//!
//! The verdict: `SERVING` passes (DEGRADED over `latency_over`); `NOT_SERVING` or `UNKNOWN`
//! fails as `status`; `NOT_FOUND` (the service is unknown) fails as `assertion`; a server
//! without the health service (`UNIMPLEMENTED`) fails as `status`; `DEADLINE_EXCEEDED` or no
//! answer in time fails as `timeout`.

pub(crate) mod spec;

use std::error::Error as StdError;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http::uri::{Authority, Scheme};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::outcome::{
    CheckResult, Failure, FailureReason, GrpcObserved, Observed, Remarks, Verdict,
};
use crate::tier::probe::Probe;
use crate::tier::resolve::Names;
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
    kept: Mutex<Option<Conn>>,
    /// The `:scheme` and `:authority` of every call.
    scheme: Scheme,
    authority: Authority,
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
        let scheme = if spec.tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        // An address's display (`host:port`, `[v6]:port`) is a valid authority; the fallback
        // only keeps an impossible case from panicking.
        let authority = Authority::try_from(spec.address.to_string())
            .unwrap_or_else(|_| Authority::from_static("localhost"));
        Self {
            spec,
            names,
            tls,
            kept: Mutex::new(None),
            scheme,
            authority,
        }
    }

    async fn run(
        &self,
        deadline: Instant,
        remarks: &mut Remarks,
        observed: &mut Observed,
    ) -> Verdict {
        let started = Instant::now();
        let kept = if self.spec.fresh_connection {
            None
        } else {
            // One the server has closed since (an idle timeout, a GOAWAY) is of no use.
            self.kept
                .lock()
                .take()
                .filter(|conn| !conn.sender.is_closed())
        };
        let answer = match kept {
            Some(conn) => match self.call(&conn, deadline).await {
                // The connection closed as the call went out: again on a new one.
                Err(Called::Gone) => {
                    remarks.stale_connection_retried = true;
                    self.call_fresh(deadline, remarks).await
                }
                answer => answer.map(|status| (status, conn)),
            },
            None => self.call_fresh(deadline, remarks).await,
        };
        let latency = started.elapsed();
        match answer {
            Ok((status, conn)) => {
                observed.addr = conn.peer.map(|a| a.ip());
                if !self.spec.fresh_connection {
                    *self.kept.lock() = Some(conn);
                }
                observed.grpc = Some(GrpcObserved {
                    status_code: 0,
                    serving_status: ServingStatus::try_from(status)
                        .ok()
                        .map(|s| s.as_str_name()),
                });
                self.judge(status, latency)
            }
            Err(Called::Answered(failure, code)) => {
                observed.grpc = Some(GrpcObserved {
                    status_code: code as i32,
                    serving_status: None,
                });
                Verdict::Failed(failure)
            }
            Err(Called::Failed(failure)) => {
                // As a gRPC client reports a call that never reached the service.
                let code = if failure.reason == FailureReason::Timeout {
                    tonic::Code::DeadlineExceeded
                } else {
                    tonic::Code::Unavailable
                };
                observed.grpc = Some(GrpcObserved {
                    status_code: code as i32,
                    serving_status: None,
                });
                Verdict::Failed(failure)
            }
            Err(Called::Gone) => Verdict::Failed(Failure::new(
                FailureReason::Reset,
                "the server closed the connection before answering",
            )),
        }
    }

    /// Connects anew and calls on that connection.
    async fn call_fresh(
        &self,
        deadline: Instant,
        remarks: &mut Remarks,
    ) -> Result<(i32, Conn), Called> {
        let conn = self.connect(deadline, remarks).await?;
        let status = self.call(&conn, deadline).await?;
        Ok((status, conn))
    }

    /// A new connection, HTTP/2 set up, driven by a task of its own until the probe drops it.
    async fn connect(&self, deadline: Instant, remarks: &mut Remarks) -> Result<Conn, Called> {
        let tls = self.tls.as_ref().map_err(|f| Called::Failed(f.clone()))?;
        let addrs = resolve(&self.spec.address, &self.names, deadline, remarks).await?;
        let stream = connect_any(&addrs, CloseMode::Reset, true, deadline).await?;
        let peer = stream.peer_addr().ok();
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
        let handshake = http2::handshake(TokioExecutor::new(), TokioIo::new(io));
        let (sender, connection) = match timeout_at(deadline, handshake).await {
            Err(_) => return Err(timed_out("HTTP/2 set-up timed out")),
            Ok(Err(err)) => return Err(Called::Failed(transport_failure(&err, "HTTP/2 set-up"))),
            Ok(Ok(parts)) => parts,
        };
        let task = tokio::spawn(async move {
            // Its end (the server closed it, or the probe dropped the sender) is seen by the
            // sender: nothing to report here.
            let _ = connection.await;
        });
        Ok(Conn { sender, task, peer })
    }

    /// One `Check` call; the serving status answered.
    async fn call(&self, conn: &Conn, deadline: Instant) -> Result<i32, Called> {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: self.spec.service.clone(),
        });
        *request.metadata_mut() =
            tonic::metadata::MetadataMap::from_headers(self.spec.metadata.expose().clone());
        // The server is told the deadline, so that it can give up when the probe does.
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let mut client = HealthClient::new(Origin {
            sender: conn.sender.clone(),
            scheme: self.scheme.clone(),
            authority: self.authority.clone(),
        });
        match timeout_at(deadline, client.check(request)).await {
            Err(_) => Err(timed_out("no Check answer in time")),
            Ok(Ok(response)) => Ok(response.into_inner().status),
            Ok(Err(status)) if conn.sender.is_closed() && StdError::source(&status).is_some() => {
                Err(Called::Gone)
            }
            Ok(Err(status)) => Err(self.refused(&status)),
        }
    }

    /// What an error status from the server (or the transport) means.
    fn refused(&self, status: &tonic::Status) -> Called {
        use tonic::Code;
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
                return Called::Failed(transport_failure(status, "call"));
            }
            code => Failure::new(
                FailureReason::Status,
                format_args!("{}: {}", code_name(code), status.message()),
            ),
        };
        Called::Answered(failure, status.code())
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
    /// The server answered the call with an error status.
    Answered(Failure, tonic::Code),
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

/// A kept HTTP/2 connection: the handle requests go out through, and the task driving it
/// (stopped with the connection, when the probe drops it).
struct Conn {
    sender: http2::SendRequest<Full<Bytes>>,
    task: tokio::task::JoinHandle<()>,
    /// The server's address.
    peer: Option<std::net::SocketAddr>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The connection as the tonic client's service: each request gets the URI's scheme and
/// authority (tonic writes the path only) and the probe's `User-Agent`, and its body, one small
/// message ready at once, goes out whole: hyper sends a body it is handed whole with the
/// headers, where a streamed one would cost a task to pipe it.
#[derive(Clone)]
struct Origin {
    sender: http2::SendRequest<Full<Bytes>>,
    scheme: Scheme,
    authority: Authority,
}

type BoxError = Box<dyn StdError + Send + Sync>;

impl tower_service::Service<http::Request<tonic::body::Body>> for Origin {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.sender.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.scheme = Some(self.scheme.clone());
        uri.authority = Some(self.authority.clone());
        if let Ok(full) = Uri::from_parts(uri) {
            parts.uri = full;
        }
        parts.headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(crate::tier::http::transport::client::USER_AGENT),
        );
        let mut sender = self.sender.clone();
        Box::pin(async move {
            let body = body.collect().await?.to_bytes();
            let request = http::Request::from_parts(parts, Full::new(body));
            Ok(sender.send_request(request).await?)
        })
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
        self.observe(timeout).await.0
    }

    async fn observe(&self, timeout: Duration) -> (CheckResult, Observed) {
        let mut remarks = Remarks::default();
        let mut observed = Observed::default();
        let verdict = self
            .run(Instant::now() + timeout, &mut remarks, &mut observed)
            .await;
        let tls = match &self.tls {
            Ok(Some((_, noting))) => noting.facts(),
            _ => None,
        };
        let result = CheckResult {
            remarks,
            tls,
            ..CheckResult::of(verdict)
        };
        (result, observed)
    }
}
