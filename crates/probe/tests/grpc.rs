//! The gRPC tier against a real grpc.health.v1 server (tonic-health) on 127.0.0.1: serving
//! statuses, unknown services, TLS with a test CA, metadata, a server that hangs, a closed port
//! and a kept connection the server closed.

#[path = "support/pki.rs"]
mod pki;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pki::Ca;
use probe::Address;
use probe::outcome::{CheckResult, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::grpc::{GrpcProbe, GrpcSpec};
use probe::tier::http::RequestHeaders;
use probe::tier::resolve::Names;
use probe::tier::tls::{CaBundle, TlsTrust};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A health server on `listener`, over TLS when `tls` is given; stops when `stop` fires. Records
/// each call's `authorization` metadata in `seen`.
struct Server {
    addr: SocketAddr,
    reporter: HealthReporter,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    /// Connections accepted (plaintext servers).
    accepted: Arc<AtomicUsize>,
}

/// A TLS stream as tonic's server takes it.
struct Tls(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for Tls {
    type ConnectInfo = TcpConnectInfo;
    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for Tls {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tls {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

async fn serve(listener: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> Server {
    let addr = listener.local_addr().unwrap();
    let reporter = HealthReporter::new();
    // As `health_reporter()` does: the server as a whole is SERVING.
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    let service = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let service = tonic_health::pb::health_server::HealthServer::with_interceptor(
        service,
        move |request: tonic::Request<()>| {
            if let Some(value) = request.metadata().get("authorization") {
                recorded
                    .lock()
                    .unwrap()
                    .push(value.to_str().unwrap_or_default().to_owned());
            }
            Ok(request)
        },
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let router = tonic::transport::Server::builder().add_service(service);
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let task = match tls {
        None => {
            let incoming = futures_util::stream::unfold(listener, move |l| {
                let counted = counted.clone();
                async move {
                    let stream = l.accept().await.map(|(s, _)| s);
                    counted.fetch_add(1, Ordering::SeqCst);
                    Some((stream, l))
                }
            });
            tokio::spawn(async move {
                let _ = router
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    })
                    .await;
            })
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let incoming =
                futures_util::stream::unfold((listener, acceptor), |(l, acceptor)| async move {
                    loop {
                        let Ok((stream, _)) = l.accept().await else {
                            continue;
                        };
                        if let Ok(tls) = acceptor.accept(stream).await {
                            return Some((Ok::<_, Infallible>(Tls(tls)), (l, acceptor)));
                        }
                    }
                });
            tokio::spawn(async move {
                let _ = router
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    })
                    .await;
            })
        }
    };
    Server {
        addr,
        reporter,
        seen,
        stop: Some(stop),
        task,
        accepted,
    }
}

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

fn spec(addr: SocketAddr, service: &str) -> GrpcSpec {
    let mut spec = GrpcSpec::new(Address::Socket(addr));
    spec.service = service.to_owned();
    spec
}

async fn check(probe: &GrpcProbe) -> CheckResult {
    probe.check(TIMEOUT).await
}

fn failure(result: &CheckResult) -> (FailureReason, String) {
    let failure = result.failure().expect("a failure");
    (failure.reason, failure.detail.clone())
}

#[tokio::test]
async fn serving_passes_not_serving_fails_as_status_and_an_unknown_service_as_assertion() {
    let server = serve(listener().await, None).await;
    server
        .reporter
        .set_service_status("payments.v1.Payments", ServingStatus::Serving)
        .await;
    let whole = GrpcProbe::new(spec(server.addr, ""), Names::system());
    assert_eq!(check(&whole).await.verdict, Verdict::Up, "\"\" is SERVING");
    let payments = GrpcProbe::new(spec(server.addr, "payments.v1.Payments"), Names::system());
    assert_eq!(check(&payments).await.verdict, Verdict::Up);

    server
        .reporter
        .set_service_status("payments.v1.Payments", ServingStatus::NotServing)
        .await;
    assert_eq!(
        failure(&check(&payments).await),
        (FailureReason::Status, "NOT_SERVING".to_owned())
    );
    server
        .reporter
        .set_service_status("payments.v1.Payments", ServingStatus::Serving)
        .await;
    assert_eq!(check(&payments).await.verdict, Verdict::Up, "and back");

    let unknown = GrpcProbe::new(spec(server.addr, "nobody.v1.Nobody"), Names::system());
    assert_eq!(
        failure(&check(&unknown).await),
        (
            FailureReason::Assertion,
            r#"the server does not know service "nobody.v1.Nobody" (SERVICE_UNKNOWN)"#.to_owned()
        )
    );
}

#[tokio::test]
async fn slow_answers_degrade_with_latency_over() {
    let server = serve(listener().await, None).await;
    let mut slow = spec(server.addr, "");
    slow.latency_over = Some(Duration::from_nanos(1));
    let result = check(&GrpcProbe::new(slow, Names::system())).await;
    let Verdict::Degraded(reasons) = &result.verdict else {
        panic!("expected DEGRADED, got {:?}", result.verdict);
    };
    assert!(reasons[0].starts_with("latency "), "{reasons:?}");
}

#[tokio::test]
async fn tls_with_a_test_ca_passes_reports_the_certificate_and_an_untrusted_one_fails() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 30);
    let mut config = rustls::ServerConfig::clone(&leaf.server());
    config.alpn_protocols = vec![b"h2".to_vec()];
    let server = serve(listener().await, Some(Arc::new(config))).await;

    let mut trusted = spec(server.addr, "");
    trusted.tls = Some(TlsTrust::WithCa(
        CaBundle::from_pem(ca.pem.as_bytes()).unwrap(),
    ));
    let result = check(&GrpcProbe::new(trusted, Names::system())).await;
    assert_eq!(result.verdict, Verdict::Up);
    let facts = result.tls.expect("certificate facts");
    assert_eq!(facts.leaf().unwrap().subject, "CN=127.0.0.1");

    let mut untrusted = spec(server.addr, "");
    untrusted.tls = Some(TlsTrust::WithCa(
        CaBundle::from_pem(Ca::new("another CA", 30).pem.as_bytes()).unwrap(),
    ));
    let (reason, detail) = failure(&check(&GrpcProbe::new(untrusted, Names::system())).await);
    assert_eq!(reason, FailureReason::Tls);
    assert!(
        detail.starts_with("no certificate of the chain is signed by a trusted one"),
        "{detail}"
    );

    // Plaintext against a TLS server fails, and is not taken for a healthy answer.
    let plaintext = GrpcProbe::new(spec(server.addr, ""), Names::system());
    let (reason, detail) = failure(&check(&plaintext).await);
    // A TLS server reads the HTTP/2 preface as a bad ClientHello and closes.
    assert_eq!(
        (reason, detail.as_str()),
        (
            FailureReason::Reset,
            "the server closed the connection before answering"
        )
    );
}

#[tokio::test]
async fn metadata_is_sent_and_never_shown() {
    let server = serve(listener().await, None).await;
    let mut with_token = spec(server.addr, "");
    let mut metadata = RequestHeaders::new();
    metadata
        .append("authorization", "Bearer s3cret-token")
        .unwrap();
    with_token.metadata = metadata;
    assert!(!format!("{with_token:?}").contains("s3cret"));
    let probe = GrpcProbe::new(with_token, Names::system());
    assert!(!format!("{probe:?}").contains("s3cret"));
    assert_eq!(check(&probe).await.verdict, Verdict::Up);
    assert_eq!(*server.seen.lock().unwrap(), ["Bearer s3cret-token"]);
}

#[tokio::test]
async fn a_closed_port_is_refused_and_a_server_that_hangs_times_out() {
    let closed = listener().await.local_addr().unwrap();
    let probe = GrpcProbe::new(spec(closed, ""), Names::system());
    assert_eq!(failure(&check(&probe).await).0, FailureReason::Refused);

    // Accepts and never speaks HTTP/2.
    let silent = listener().await;
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (stream, _) = silent.accept().await.unwrap();
        std::future::pending::<()>().await;
        drop(stream);
    });
    let result = GrpcProbe::new(spec(addr, ""), Names::system())
        .check(Duration::from_millis(300))
        .await;
    assert_eq!(
        failure(&result),
        (FailureReason::Timeout, "no Check answer in time".to_owned())
    );
    held.abort();
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_replaced_within_the_check() {
    let mut server = serve(listener().await, None).await;
    let addr = server.addr;
    let probe = GrpcProbe::new(spec(addr, ""), Names::system());
    let first = check(&probe).await;
    assert_eq!(first.verdict, Verdict::Up);
    assert!(!first.remarks.stale_connection_retried);
    let again = check(&probe).await;
    assert!(
        !again.remarks.stale_connection_retried,
        "the same connection"
    );

    // The server goes away, closing its connections, and comes back on the same port: the
    // next check is made on a new connection (noted when the old one closed as the call went
    // out, not when it was seen closed before).
    let _ = server.stop.take().unwrap().send(());
    server.task.await.unwrap();
    let restarted = serve(TcpListener::bind(addr).await.unwrap(), None).await;
    let result = check(&probe).await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");
    assert_eq!(restarted.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(check(&probe).await.verdict, Verdict::Up);
    assert_eq!(restarted.accepted.load(Ordering::SeqCst), 1, "kept again");
}

/// A TCP relay to `upstream` that can cut its connections silently: after [`Relay::cut`], a
/// connection opened before forwards nothing more, and closes as soon as its client sends
/// again. The client learns that its connection is gone only as its next request goes out:
/// the race of a kept connection an idle timeout (or a restart behind a load balancer) ended.
struct Relay {
    addr: SocketAddr,
    generation: Arc<AtomicUsize>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = listener().await;
        let addr = listener.local_addr().unwrap();
        let generation = Arc::new(AtomicUsize::new(0));
        let current = generation.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = current.load(Ordering::SeqCst);
                let current = current.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let down = tokio::spawn(async move {
                        let mut buf = vec![0; 16 * 1024];
                        while let Ok(n @ 1..) = from_server.read(&mut buf).await {
                            if to_client.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    let mut buf = vec![0; 16 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        if current.load(Ordering::SeqCst) != born {
                            break;
                        }
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    // Both halves of the client's connection go: it sees the close now.
                    down.abort();
                });
            }
        });
        Self { addr, generation }
    }

    /// Cuts the connections open now; new ones are relayed.
    fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_kept_connection_that_dies_as_the_call_goes_out_is_retried_on_a_fresh_one() {
    let server = serve(listener().await, None).await;
    let relay = Relay::start(server.addr).await;
    let probe = GrpcProbe::new(spec(relay.addr, ""), Names::system());
    let first = check(&probe).await;
    assert_eq!(first.verdict, Verdict::Up);
    assert!(!first.remarks.stale_connection_retried);
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);

    relay.cut();
    let result = check(&probe).await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");
    assert!(
        result.remarks.stale_connection_retried,
        "the retry is noted: {result:?}"
    );
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        2,
        "a fresh connection"
    );
    let again = check(&probe).await;
    assert!(!again.remarks.stale_connection_retried, "{again:?}");
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2, "kept again");
}

#[tokio::test]
async fn fresh_connection_opens_a_connection_per_check() {
    let server = serve(listener().await, None).await;
    let mut fresh = spec(server.addr, "");
    fresh.fresh_connection = true;
    let probe = GrpcProbe::new(fresh, Names::system());
    for _ in 0..3 {
        assert_eq!(check(&probe).await.verdict, Verdict::Up);
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
}
