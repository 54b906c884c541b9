//! A listener under TLS: connections accepted, their handshakes run side by side (a slow or
//! silent client holds up no one), each with the server configuration in force when it starts.
//! A rotated certificate thus serves the next connection, while those open go on with theirs.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// The most handshakes under way at once; past it, accepting waits.
const MAX_HANDSHAKES: usize = 256;

/// How long a client has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long to wait after a failed accept (out of descriptors) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(500);

/// Connections whose TLS handshake is done, in the order they finished.
pub struct TlsListener {
    addr: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `listener` until `cancel`, asking `config` for the configuration of each
    /// handshake (a connection that finds none is closed). Call it on the runtime that serves
    /// the connections.
    ///
    /// # Errors
    /// When the listener's address cannot be read.
    pub fn start(
        listener: TcpListener,
        config: impl Fn() -> Option<Arc<ServerConfig>> + Send + 'static,
        cancel: CancellationToken,
    ) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (done, accepted) = mpsc::channel(64);
        tokio::spawn(accept(listener, config, done, cancel));
        Ok(Self { addr, accepted })
    }

    /// The next connection, once its handshake is done; `None` once accepting has stopped.
    pub async fn next(&mut self) -> Option<(TlsStream<TcpStream>, SocketAddr)> {
        self.accepted.recv().await
    }

    /// The connections as a stream, as tonic takes them.
    pub fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = io::Result<TlsStream<TcpStream>>> + Send {
        futures_util::stream::unfold(self, |mut listener| async move {
            let (stream, _) = listener.next().await?;
            Some((Ok(stream), listener))
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.next().await {
            Some(accepted) => accepted,
            // Accepting stopped with the server's cancellation: the server stops too.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

async fn accept(
    listener: TcpListener,
    config: impl Fn() -> Option<Arc<ServerConfig>>,
    done: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    cancel: CancellationToken,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let permit = tokio::select! {
            () = cancel.cancelled() => return,
            permit = handshakes.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "the API could not accept a connection");
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    }
                }
            },
        };
        // TLS sends small records: coalescing them would only add delay.
        let _ = tcp.set_nodelay(true);
        let Some(config) = config() else {
            continue;
        };
        let acceptor = TlsAcceptor::from(config);
        let (done, cancel) = (done.clone(), cancel.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let shaken = tokio::select! {
                () = cancel.cancelled() => return,
                shaken = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)) => shaken,
            };
            match shaken {
                Ok(Ok(stream)) => {
                    // The server may be gone already: the connection goes with it.
                    let _ = done.send((stream, peer)).await;
                }
                Ok(Err(e)) => {
                    metrics::counter!("probe_engine_tls_handshake_failures_total").increment(1);
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    metrics::counter!("probe_engine_tls_handshake_failures_total").increment(1);
                    tracing::debug!(%peer, "TLS handshake timed out");
                }
            }
        });
    }
}
