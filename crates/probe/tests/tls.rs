//! The TLS tier against real TLS servers on 127.0.0.1, with certificates made by the test: what
//! verifies, what is refused and why, DEGRADED before expiry, STARTTLS, and the certificate
//! facts (and blackbox_exporter's series) it reports; and the same facts from HTTPS probes.

#[path = "support/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pki::{Ca, Leaf};
use probe::engine::{Engine, EngineConfig};
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::outcome::{CheckResult, FailureReason, TlsFacts, Verdict};
use probe::scheduler::SchedulerConfig;
use probe::tier::http::{HttpProbe, HttpSpec};
use probe::tier::resolve::Names;
use probe::tier::tls::{CaBundle, StartTls, TlsProbe, TlsSpec, TlsTrust};
use probe::tier::{Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const TIMEOUT: Duration = Duration::from_secs(5);

/// What the fixture speaks before TLS.
#[derive(Clone, Copy)]
enum Before {
    Nothing,
    /// SMTP, answering STARTTLS with this code.
    Smtp(&'static str),
    Postgres,
}

/// A TLS server on 127.0.0.1 presenting `leaf`, after the `before` exchange.
async fn serve(leaf: &Leaf, before: Before) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    if matches!(before, Before::Nothing) {
        pki::serve(listener, leaf.server());
        return addr;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if upgrade(&mut stream, before).await.is_ok() {
                    let _ = acceptor.accept(stream).await;
                }
            });
        }
    });
    addr
}

/// The server's side of the plain-text start; `Err` when the upgrade is refused.
async fn upgrade(stream: &mut TcpStream, before: Before) -> std::io::Result<()> {
    match before {
        Before::Nothing => Ok(()),
        Before::Smtp(code) => {
            let (read, mut write) = stream.split();
            let mut lines = BufReader::new(read).lines();
            write.write_all(b"220 fixture ESMTP\r\n").await?;
            let ehlo = lines.next_line().await?.unwrap_or_default();
            assert!(ehlo.starts_with("EHLO "), "{ehlo}");
            write
                .write_all(b"250-fixture\r\n250-PIPELINING\r\n250 STARTTLS\r\n")
                .await?;
            let starttls = lines.next_line().await?.unwrap_or_default();
            assert_eq!(starttls, "STARTTLS");
            write
                .write_all(format!("{code} over to TLS\r\n").as_bytes())
                .await?;
            if code == "220" {
                Ok(())
            } else {
                Err(std::io::ErrorKind::Other.into())
            }
        }
        Before::Postgres => {
            let mut request = [0u8; 8];
            stream.read_exact(&mut request).await?;
            assert_eq!(request, [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
            stream.write_all(b"S").await
        }
    }
}

fn spec(addr: SocketAddr, ca: &Ca) -> TlsSpec {
    let mut spec = TlsSpec::new(Address::Socket(addr)).unwrap();
    spec.trust = TlsTrust::WithCa(CaBundle::from_pem(ca.pem.as_bytes()).unwrap());
    spec
}

async fn check(spec: TlsSpec) -> CheckResult {
    TlsProbe::new(spec, Names::system()).check(TIMEOUT).await
}

fn unix(at: time::OffsetDateTime) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(at.unix_timestamp()).unwrap())
}

fn failure(result: &CheckResult) -> (FailureReason, String) {
    let failure = result.failure().expect("a failure");
    (failure.reason, failure.detail.clone())
}

#[tokio::test]
async fn a_valid_certificate_passes_and_shows_its_chain() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 90);
    let addr = serve(&leaf, Before::Nothing).await;
    let result = check(spec(addr, &ca)).await;
    assert_eq!(result.verdict, Verdict::Up);
    let facts = result.tls.expect("facts");
    assert_eq!(facts.version, Some("TLS 1.3"));
    assert_eq!(facts.chain.len(), 2);
    let leaf_facts = facts.leaf().unwrap();
    assert_eq!(leaf_facts.subject, "CN=127.0.0.1");
    assert_eq!(leaf_facts.issuer, "CN=probe test CA");
    assert_eq!(leaf_facts.not_after, unix(leaf.not_after));
    assert_eq!(facts.earliest_expiry(), Some(unix(leaf.not_after)));
    assert_eq!(facts.chain_expiry(), Some(unix(leaf.not_after)));
}

#[tokio::test]
async fn a_certificate_expiring_within_the_warning_degrades() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -30, 5);
    let addr = serve(&leaf, Before::Nothing).await;
    let mut warned = spec(addr, &ca);
    warned.expires_within = Some(Duration::from_secs(14 * 86_400));
    let result = check(warned).await;
    let Verdict::Degraded(reasons) = &result.verdict else {
        panic!("expected DEGRADED, got {:?}", result.verdict);
    };
    assert!(reasons[0].contains("expires in 4days 23h"), "{reasons:?}");
    // Far enough from the warning, the same certificate is fine.
    let mut relaxed = spec(addr, &ca);
    relaxed.expires_within = Some(Duration::from_secs(86_400));
    assert_eq!(check(relaxed).await.verdict, Verdict::Up);
}

#[tokio::test]
async fn an_expiring_ca_counts_for_the_chain_and_an_extra_certificate_only_for_the_earliest() {
    let ca = Ca::new("short-lived CA", 10);
    let mut leaf = ca.leaf(&["127.0.0.1"], -1, 90);
    let stray = Ca::new("unrelated CA", 3);
    leaf.chain.push(stray.cert.clone());
    let addr = serve(&leaf, Before::Nothing).await;
    let facts = check(spec(addr, &ca)).await.tls.expect("facts");
    assert_eq!(facts.chain.len(), 3);
    assert_eq!(facts.chain_expiry(), Some(unix(ca.not_after)));
    assert_eq!(facts.earliest_expiry(), Some(unix(stray.not_after)));
}

#[tokio::test]
async fn refused_certificates_fail_as_tls_and_say_which_check_refused_them() {
    let ca = Ca::new("probe test CA", 365);
    let expired = ca.leaf(&["127.0.0.1"], -30, -1);
    let addr = serve(&expired, Before::Nothing).await;
    let result = check(spec(addr, &ca)).await;
    let (reason, detail) = failure(&result);
    assert_eq!(reason, FailureReason::Tls);
    assert!(
        detail.starts_with("certificate expired (CN=127.0.0.1"),
        "{detail}"
    );
    // The refused certificate's dates are still reported.
    let facts = result.tls.expect("facts of a refused certificate");
    assert_eq!(facts.earliest_expiry(), Some(unix(expired.not_after)));

    let future = ca.leaf(&["127.0.0.1"], 2, 30);
    let addr = serve(&future, Before::Nothing).await;
    let (reason, detail) = failure(&check(spec(addr, &ca)).await);
    assert_eq!(reason, FailureReason::Tls);
    assert!(detail.starts_with("certificate not yet valid"), "{detail}");

    let other_name = ca.leaf(&["other.internal"], -1, 30);
    let addr = serve(&other_name, Before::Nothing).await;
    let (reason, detail) = failure(&check(spec(addr, &ca)).await);
    assert_eq!(reason, FailureReason::Tls);
    assert!(
        detail.starts_with(
            "certificate for other.internal, not 127.0.0.1 (CN=other.internal, valid "
        ),
        "{detail}"
    );

    // The right name, asked for as the server name, passes.
    let named = spec(addr, &ca).with_server_name("other.internal").unwrap();
    assert_eq!(check(named).await.verdict, Verdict::Up);

    let good = ca.leaf(&["127.0.0.1"], -1, 30);
    let addr = serve(&good, Before::Nothing).await;
    let mut untrusting = spec(addr, &ca);
    untrusting.trust =
        TlsTrust::WithCa(CaBundle::from_pem(Ca::new("another CA", 30).pem.as_bytes()).unwrap());
    let (reason, detail) = failure(&check(untrusting).await);
    assert_eq!(reason, FailureReason::Tls);
    assert!(
        detail.starts_with(
            "no certificate of the chain is signed by a trusted one (the server sent 2 \
             certificates: CN=127.0.0.1, valid "
        ),
        "{detail}"
    );
}

#[tokio::test]
async fn starttls_upgrades_smtp_and_postgres_and_a_refusal_says_what_the_server_answered() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 30);

    let smtp = serve(&leaf, Before::Smtp("220")).await;
    let mut upgraded = spec(smtp, &ca);
    upgraded.starttls = Some(StartTls::Smtp);
    let result = check(upgraded).await;
    assert_eq!(result.verdict, Verdict::Up);
    assert!(result.tls.is_some());

    let postgres = serve(&leaf, Before::Postgres).await;
    let mut upgraded = spec(postgres, &ca);
    upgraded.starttls = Some(StartTls::Postgres);
    assert_eq!(check(upgraded).await.verdict, Verdict::Up);

    let refusing = serve(&leaf, Before::Smtp("454")).await;
    let mut refused = spec(refusing, &ca);
    refused.starttls = Some(StartTls::Smtp);
    let (reason, detail) = failure(&check(refused).await);
    assert_eq!(reason, FailureReason::Tls);
    assert_eq!(
        detail,
        r#"smtp STARTTLS: the server answered "454 over to TLS""#
    );
}

#[tokio::test]
async fn a_closed_port_is_refused_and_a_silent_server_times_out() {
    let ca = Ca::new("probe test CA", 365);
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let (reason, _) = failure(&check(spec(closed, &ca)).await);
    assert_eq!(reason, FailureReason::Refused);

    // Accepts, and never answers the ClientHello.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (stream, _) = silent.accept().await.unwrap();
        std::future::pending::<()>().await;
        drop(stream);
    });
    let result = TlsProbe::new(spec(addr, &ca), Names::system())
        .check(Duration::from_millis(300))
        .await;
    assert_eq!(
        failure(&result),
        (FailureReason::Timeout, "TLS handshake timed out".to_owned())
    );
    held.abort();
}

/// The HTTPS probe's facts, pooled and fresh, through a real HTTPS server.
#[tokio::test]
async fn https_probes_report_the_certificate_too() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 42);
    let server = leaf.server();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                // One request per connection is enough for the facts.
                if tls.read(&mut buf).await.is_ok() {
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    for fresh in [false, true] {
        let mut spec = HttpSpec::get(format!("https://{addr}/").parse().unwrap());
        spec.tls = TlsTrust::WithCa(CaBundle::from_pem(ca.pem.as_bytes()).unwrap());
        spec.fresh_connection = fresh;
        let result = HttpProbe::new(spec, Names::system()).check(TIMEOUT).await;
        assert_eq!(result.verdict, Verdict::Up, "fresh: {fresh}");
        let facts = result.tls.expect("facts");
        assert_eq!(facts.version, Some("TLS 1.3"));
        assert_eq!(facts.earliest_expiry(), Some(unix(leaf.not_after)));
    }
    // A plain-HTTP probe makes no handshake and says nothing of TLS.
    let plain = HttpSpec::get(format!("http://{addr}/").parse().unwrap());
    assert!(
        HttpProbe::new(plain, Names::system())
            .check(TIMEOUT)
            .await
            .tls
            .is_none()
    );
}

/// Through the engine: the target's status and blackbox_exporter's series.
#[tokio::test]
async fn the_engine_exports_the_certificate_under_blackbox_exporter_names() {
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 60);
    let addr = serve(&leaf, Before::Nothing).await;
    let cancel = CancellationToken::new();
    let engine = Engine::start(
        EngineConfig {
            scheduler: SchedulerConfig {
                max_in_flight: NonZeroUsize::new(4).unwrap(),
                min_workers: 1,
                worker_idle: Duration::from_secs(30),
            },
            ..EngineConfig::default()
        },
        cancel.clone(),
    );
    let mut events = engine.subscribe();
    let id = TargetId::new("api-cert").unwrap();
    engine
        .apply(vec![
            TargetSpec::new(id.clone(), ProbeSpec::Tls(Box::new(spec(addr, &ca))))
                .with_schedule(
                    Schedule::try_new(ScheduleSettings {
                        // The first run starts within an interval of the apply.
                        interval: Duration::from_secs(1),
                        timeout: Duration::from_millis(900),
                        ..ScheduleSettings::default()
                    })
                    .unwrap(),
                )
                .with_thresholds(Thresholds::new(NonZeroU32::MIN, NonZeroU32::MIN)),
        ])
        .unwrap();
    let event = tokio::time::timeout(TIMEOUT, events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((event.target, event.to), (id.clone(), HealthState::Up));
    let status = engine.status(&id).unwrap();
    let facts: Arc<TlsFacts> = status.tls.expect("facts in the status");
    assert_eq!(facts.leaf().unwrap().subject, "CN=127.0.0.1");

    let mut text = String::new();
    engine.encode_metrics(&mut text);
    let expiry = u64::try_from(leaf.not_after.unix_timestamp()).unwrap();
    for line in [
        format!("probe_ssl_earliest_cert_expiry{{target=\"api-cert\"}} {expiry}"),
        format!("probe_ssl_last_chain_expiry_timestamp_seconds{{target=\"api-cert\"}} {expiry}"),
        "probe_tls_version_info{target=\"api-cert\",version=\"TLS 1.3\"} 1".to_owned(),
        "# TYPE probe_ssl_earliest_cert_expiry gauge".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    cancel.cancel();
    engine.stopped().await;
}

/// A conversation runs over the connection once the certificate verified: the greeting a
/// server sends only over TLS, a command and its answer.
#[tokio::test]
async fn a_conversation_runs_over_tls_after_the_handshake() {
    use probe::tier::tcp::Step;
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 90);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let (read, mut write) = tokio::io::split(tls);
                let _ = write.write_all(b"* OK IMAP ready\r\n").await;
                let mut lines = BufReader::new(read).lines();
                if let Ok(Some(line)) = lines.next_line().await {
                    let _ = write.write_all(format!("{line} done\r\n").as_bytes()).await;
                }
            });
        }
    });
    let re = |s: &str| regex::bytes::Regex::new(s).unwrap();
    let conversing = |last: &str| {
        let mut spec = spec(addr, &ca);
        spec.conversation = vec![
            Step::ExpectLine(re("^\\* OK")),
            Step::Send(b"a1 NOOP\r\n".to_vec()),
            Step::ExpectLine(re(last)),
        ];
        spec
    };
    let result = check(conversing("^a1 NOOP done$")).await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");
    assert!(result.tls.is_some(), "the certificate is reported");
    let result = TlsProbe::new(conversing("^a1 OK"), Names::system())
        .check(Duration::from_millis(500))
        .await;
    let (reason, detail) = failure(&result);
    assert_eq!(reason, FailureReason::Body);
    assert_eq!(
        detail,
        "expected /^a1 OK/ in a line at step 3 before the peer closed, got \"a1 NOOP done\""
    );
}

/// Steps in the clear before the handshake: a protocol's own STARTTLS, spelled out.
#[tokio::test]
async fn before_tls_steps_upgrade_as_the_protocol_asks() {
    use probe::tier::tcp::Step;
    let ca = Ca::new("probe test CA", 365);
    let leaf = ca.leaf(&["127.0.0.1"], -1, 90);
    let re = |s: &str| regex::bytes::Regex::new(s).unwrap();
    let smtp = |addr| {
        let mut spec = spec(addr, &ca);
        spec.before_tls = vec![
            Step::ExpectLine(re("^220 ")),
            Step::Send(b"EHLO prober\r\n".to_vec()),
            Step::ExpectLine(re("^250 STARTTLS")),
            Step::Send(b"STARTTLS\r\n".to_vec()),
            Step::ExpectLine(re("^220 ")),
        ];
        spec
    };
    let granted = serve(&leaf, Before::Smtp("220")).await;
    let result = check(smtp(granted)).await;
    assert_eq!(result.verdict, Verdict::Up, "{result:?}");
    assert!(result.tls.is_some());
    let refused = serve(&leaf, Before::Smtp("454")).await;
    let (reason, detail) = failure(&check(smtp(refused)).await);
    assert_eq!(reason, FailureReason::Body);
    assert_eq!(
        detail,
        "expected /^220 / in a line at step 5 before the peer closed, got \"454 over to TLS\""
    );
}
