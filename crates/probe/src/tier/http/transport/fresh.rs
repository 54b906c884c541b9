//! The `fresh_connection` transport: one connection per check, closed with a reset.
//!
//! With `fresh_connection`, every check pays for a TCP (and TLS) handshake, so the per-check cost
//! is dominated by connection set-up and tear-down. A pooled client (reqwest, hyper-util's pool)
//! spends much of it on machinery that a one-shot connection does not need: a connector service
//! stack, a spawned connection task and its wake-ups, socket options and address look-ups for
//! pooling, and a `shutdown` followed by the FIN handshake. This module does the minimum, with
//! hyper's connection-level HTTP/1.1 client on a socket of its own:
//!
//! - the connection is driven inside the check's own future (no task, no channel hops);
//! - when the reply is complete, the socket is closed with `SO_LINGER 0`, i.e. a reset, as the
//!   TCP tier does: neither side keeps a `TIME_WAIT` entry, so a high probe rate cannot exhaust
//!   ephemeral ports (the request also says `Connection: close`, so the server expects the end);
//! - TLS uses the same rustls configuration as the pooled client (see `client::spec_tls`).
//!
//! Each redirect (see `exchange`) is a new connection too.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use reqwest::Url;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::client;
use super::dns::ProbeDns;
use super::wire::{
    Chunks, Hop, Limits, Received, Request, body_by, read_body, redirect, timed_out,
};
use crate::outcome::{Failure, FailureReason, HttpPhases};
use crate::tier::http::spec::HttpSpec;

/// Opens a connection per check.
pub(crate) struct Fresh {
    /// `None` when no TLS connection can happen (a plain-HTTP URL and no redirects).
    tls: Option<TlsConnector>,
    dns: Arc<ProbeDns>,
}

impl Fresh {
    /// A transport for `spec` with the rustls configuration `tls` (see `client::spec_tls`),
    /// resolving through `dns`.
    pub(crate) fn new(spec: &HttpSpec, tls: &rustls::ClientConfig, dns: Arc<ProbeDns>) -> Self {
        let tls_needed = spec.url.is_https() || spec.follow_redirects;
        Self {
            tls: tls_needed.then(|| TlsConnector::from(Arc::new(tls.clone()))),
            dns,
        }
    }

    /// One request on one new connection, adding the time of each phase to `phases`.
    pub(crate) async fn hop(
        &self,
        request: Request<'_>,
        limits: Limits,
        phases: &mut HttpPhases,
    ) -> Result<Hop, Failure> {
        let no_reply = || timed_out("no response within", limits.timeout);
        let stream = timeout_at(limits.deadline, self.connect(request.url, phases))
            .await
            .map_err(|_| no_reply())??;
        let ready = Instant::now();
        let remote = stream.peer();
        // No I/O happens here: the handshake only sets up the connection state.
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| client::classify_error(&e, "connect"))?;
        let mut conn = Conn {
            inner: pin!(conn),
            done: false,
        };

        let outgoing = request.to_http1(Full::new(request.body.clone().unwrap_or_default()))?;
        let sending = conn.drive(sender.send_request(outgoing), "request");
        let response = timeout_at(limits.deadline, sending)
            .await
            .map_err(|_| no_reply())??;
        let (parts, mut incoming) = response.into_parts();
        let head = Instant::now();
        phases.processing += head - ready;
        if let Some(next) = redirect(
            limits.follow_redirects,
            request.url,
            parts.status,
            &parts.headers,
        )? {
            return Ok(Hop::Redirect(parts.status, next));
        }
        let reading = conn.drive(
            read_body(&mut incoming, limits.keep_body),
            "reading the body",
        );
        let (body, body_length) = body_by(&limits, reading).await;
        phases.transfer += head.elapsed();
        Ok(Hop::Done(Received {
            status: parts.status,
            headers: parts.headers,
            body,
            body_length,
            version: parts.version,
            tls: request.url.scheme() == "https",
            redirects: 0,
            remote,
        }))
    }

    /// Resolves, connects (trying each address in turn) and, for `https`, completes TLS, adding
    /// the time of each to `phases`.
    async fn connect(&self, url: &Url, phases: &mut HttpPhases) -> Result<Stream, Failure> {
        let started = Instant::now();
        let port = url.port_or_known_default().unwrap_or(80);
        let (name, addrs) = match url.host() {
            Some(url::Host::Ipv4(ip)) => (
                ServerName::from(IpAddr::from(ip)),
                vec![SocketAddr::from((ip, port))],
            ),
            Some(url::Host::Ipv6(ip)) => (
                ServerName::from(IpAddr::from(ip)),
                vec![SocketAddr::from((ip, port))],
            ),
            Some(url::Host::Domain(host)) => {
                let addrs =
                    self.dns.resolve(host, port).await.map_err(|e| {
                        Failure::new(FailureReason::Dns, format_args!("connect: {e}"))
                    })?;
                let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                    Failure::new(FailureReason::Tls, format_args!("connect: {host}: {e}"))
                })?;
                (name, addrs)
            }
            None => return Err(Failure::new(FailureReason::Dns, "connect: URL has no host")),
        };
        let resolved = Instant::now();
        phases.resolve += resolved - started;
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            match connect_tcp(addr).await {
                Ok(stream) => {
                    tcp = Some(stream);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(tcp), _) => tcp,
            (None, Some(e)) => {
                return Err(Failure::new(
                    FailureReason::from_io(&e),
                    format_args!("connect: {e}"),
                ));
            }
            (None, None) => {
                return Err(Failure::new(
                    FailureReason::Dns,
                    "connect: no address to connect to",
                ));
            }
        };
        let connected = Instant::now();
        phases.connect += connected - resolved;
        if url.scheme() != "https" {
            return Ok(Stream::Plain(tcp));
        }
        let tls = self.tls.as_ref().ok_or_else(|| {
            Failure::new(
                FailureReason::Tls,
                "connect: TLS is not configured for this probe",
            )
        })?;
        let handshake = tls.connect(name, tcp).await;
        phases.tls += connected.elapsed();
        handshake
            .map(|stream| Stream::Tls(Box::new(stream)))
            .map_err(|e| client::classify_error(&e, "connect"))
    }
}

/// A socket that is reset rather than closed: see the module docs.
async fn connect_tcp(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // The request goes out in one write; the reply should not wait for an acknowledgement.
    socket.set_nodelay(true)?;
    socket.set_zero_linger()?;
    socket.connect(addr).await
}

/// hyper's connection future, polled alongside the request and the body until it ends.
struct Conn<'a> {
    inner: Pin<&'a mut http1::Connection<TokioIo<Stream>, Full<Bytes>>>,
    done: bool,
}

impl Conn<'_> {
    /// Runs `work` while driving the connection. A connection error wins over what `work`
    /// reports about it (a closed channel), since it carries the cause; `doing` names the phase
    /// in the failure's detail.
    async fn drive<T, E>(
        &mut self,
        work: impl Future<Output = Result<T, E>>,
        doing: &str,
    ) -> Result<T, Failure>
    where
        E: Into<WorkError>,
    {
        let mut work = pin!(work);
        poll_fn(|cx| {
            if !self.done {
                match self.inner.as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => self.done = true,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(client::classify_error(&e, doing)));
                    }
                    Poll::Pending => {}
                }
            }
            work.as_mut()
                .poll(cx)
                .map(|r| r.map_err(|e| e.into().into_failure(doing)))
        })
        .await
    }
}

/// An error of the work driven by [`Conn::drive`]: from hyper, or already classified.
enum WorkError {
    Hyper(hyper::Error),
    Failure(Failure),
}

impl WorkError {
    fn into_failure(self, doing: &str) -> Failure {
        match self {
            Self::Hyper(e) => client::classify_error(&e, doing),
            Self::Failure(f) => f,
        }
    }
}

impl From<hyper::Error> for WorkError {
    fn from(e: hyper::Error) -> Self {
        Self::Hyper(e)
    }
}

impl From<Failure> for WorkError {
    fn from(f: Failure) -> Self {
        Self::Failure(f)
    }
}

impl Chunks for Incoming {
    fn content_length(&self) -> Option<u64> {
        hyper::body::Body::size_hint(self).exact()
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        while let Some(frame) = self.frame().await {
            let frame = frame.map_err(|e| client::classify_error(&e, "reading the body"))?;
            if let Ok(data) = frame.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

/// The connection's byte stream. Shutting it down does nothing: the socket is reset when it is
/// dropped (`SO_LINGER 0`), which also ends a TLS session without a `close_notify`.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The server's address.
    fn peer(&self) -> Option<SocketAddr> {
        match self {
            Self::Plain(s) => s.peer_addr().ok(),
            Self::Tls(s) => s.get_ref().0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
