//! `addresses: any | all` against a name that resolves (through a real dnsmasq) to two loopback
//! addresses, 127.0.0.1 and 127.0.0.2, with servers listening on one or both.

#[path = "support/dns.rs"]
mod dns;
#[path = "support/pki.rs"]
mod pki;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dns::DnsServer;
use probe::outcome::{FailureReason, Verdict};
use probe::tier::http::{HttpSpec, TlsTrust};
use probe::tier::resolve::Names;
use probe::tier::tcp::TcpSpec;
use probe::tier::tls::{CaBundle, TlsSpec};
use probe::tier::{ProbeSpec, build};
use probe::{Address, Addresses};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TIMEOUT: Duration = Duration::from_secs(5);
const ONE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const TWO: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// dnsmasq answering `multi.test` with both addresses.
fn resolver() -> (DnsServer, Names) {
    let server = DnsServer::start(&[("multi.test", ONE), ("multi.test", TWO)]);
    let names = server.names(Duration::from_secs(60));
    (server, names)
}

/// A port free on both addresses.
async fn port() -> u16 {
    loop {
        let one = TcpListener::bind((ONE, 0)).await.unwrap();
        let port = one.local_addr().unwrap().port();
        if TcpListener::bind((TWO, port)).await.is_ok() {
            return port;
        }
    }
}

/// An HTTP server on `ip:port` that answers 200 and records the `Host` header it was sent.
async fn http_server(ip: IpAddr, port: u16, hosts: Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let hosts = hosts.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let Ok(n) = stream.read(&mut request).await else {
                    return;
                };
                let text = String::from_utf8_lossy(&request[..n]).to_string();
                if let Some(host) = text.lines().find_map(|l| {
                    l.strip_prefix("host: ")
                        .or_else(|| l.strip_prefix("Host: "))
                }) {
                    hosts.lock().unwrap().push(host.to_owned());
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
}

fn tcp(port: u16, addresses: Addresses) -> ProbeSpec {
    let mut spec = TcpSpec::connect(Address::Host {
        host: "multi.test".into(),
        port,
    });
    spec.addresses = addresses;
    ProbeSpec::Tcp(spec)
}

#[tokio::test]
async fn all_fails_naming_the_address_that_refuses_and_any_and_first_pass() {
    let (_dns, names) = resolver();
    let port = port().await;
    let listener = TcpListener::bind((ONE, port)).await.unwrap();
    let _accepting = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });

    let all = build(&tcp(port, Addresses::All), &names)
        .check(TIMEOUT)
        .await;
    let failure = all.failure().expect("all fails");
    assert_eq!(failure.reason, FailureReason::Refused);
    assert!(
        failure
            .detail
            .starts_with("1 of 2 addresses of multi.test failed: 127.0.0.2: refused: "),
        "{}",
        failure.detail
    );
    assert!(!failure.detail.contains("127.0.0.1:"), "{}", failure.detail);

    let any = build(&tcp(port, Addresses::Any), &names)
        .check(TIMEOUT)
        .await;
    assert_eq!(any.verdict, Verdict::Up);
    let first = build(&tcp(port, Addresses::First), &names)
        .check(TIMEOUT)
        .await;
    assert_eq!(first.verdict, Verdict::Up);

    // Nothing listens anywhere: `any` fails, and says every address did.
    let closed = self::port().await;
    let none = build(&tcp(closed, Addresses::Any), &names)
        .check(TIMEOUT)
        .await;
    let failure = none.failure().expect("any fails");
    assert_eq!(failure.reason, FailureReason::Refused);
    assert!(
        failure
            .detail
            .starts_with("every address of multi.test failed: 127.0.0.1: refused"),
        "{}",
        failure.detail
    );
    assert!(
        failure.detail.contains("; 127.0.0.2: refused"),
        "{}",
        failure.detail
    );
}

#[tokio::test]
async fn http_probes_each_address_with_the_name_as_host() {
    let (_dns, names) = resolver();
    let port = port().await;
    let hosts = Arc::new(Mutex::new(Vec::new()));
    http_server(ONE, port, hosts.clone()).await;

    let mut spec = HttpSpec::get(format!("http://multi.test:{port}/").parse().unwrap());
    spec.addresses = Addresses::All;
    let probe = build(&ProbeSpec::Http(Box::new(spec)), &names);
    let failure = probe
        .check(TIMEOUT)
        .await
        .failure()
        .cloned()
        .expect("one refuses");
    assert!(
        failure.detail.contains("127.0.0.2: refused"),
        "{}",
        failure.detail
    );

    http_server(TWO, port, hosts.clone()).await;
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    let seen = hosts.lock().unwrap().clone();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(
        seen.iter().all(|h| *h == format!("multi.test:{port}")),
        "{seen:?}"
    );
}

/// Serves on `port` of each address a certificate from `ca` for its name, and checks
/// `multi.test:port` over TLS, trusting `ca`, with each policy of `policies`.
async fn tls_checks(
    names: &Names,
    serving: [(IpAddr, &str); 2],
    policies: [Addresses; 2],
) -> [probe::outcome::CheckResult; 2] {
    let ca = pki::Ca::new("probe test CA", 365);
    let port = port().await;
    for (ip, name) in serving {
        let listener = TcpListener::bind(SocketAddr::new(ip, port)).await.unwrap();
        pki::serve(listener, ca.leaf(&[name], -1, 30).server());
    }
    let mut spec = TlsSpec::new(Address::Host {
        host: "multi.test".into(),
        port,
    })
    .unwrap();
    spec.trust = TlsTrust::WithCa(CaBundle::from_pem(ca.pem.as_bytes()).unwrap());
    let mut results = Vec::new();
    for policy in policies {
        spec.addresses = policy;
        let probe = build(&ProbeSpec::Tls(Box::new(spec.clone())), names);
        results.push(probe.check(TIMEOUT).await);
    }
    results.try_into().unwrap()
}

#[tokio::test]
async fn tls_checks_every_address_against_the_name() {
    let (_dns, names) = resolver();
    // The second address serves a certificate for another name.
    let [all, any] = tls_checks(
        &names,
        [(ONE, "multi.test"), (TWO, "other.test")],
        [Addresses::All, Addresses::Any],
    )
    .await;
    let failure = all
        .failure()
        .expect("the second address's certificate is wrong");
    assert_eq!(failure.reason, FailureReason::Tls);
    assert!(
        failure
            .detail
            .contains("127.0.0.2: tls: certificate for other.test, not multi.test"),
        "{}",
        failure.detail
    );
    assert_eq!(any.verdict, Verdict::Up);
}

#[tokio::test]
async fn first_judges_the_first_address_that_connects_where_any_passes_on_another() {
    // Answers kept for a minute, so that every probe here sees the order looked up first
    // (dnsmasq may order each answer differently).
    let dns = DnsServer::start_with(
        &[("multi.test", ONE), ("multi.test", TWO)],
        &["--local-ttl=60"],
    );
    let names = dns.names(Duration::from_secs(60));
    let order = names
        .lookup("multi.test", tokio::time::Instant::now() + TIMEOUT)
        .await
        .unwrap()
        .addrs;
    assert_eq!(order.len(), 2, "{order:?}");
    // Both connect; the first in the resolver's order serves a certificate for another name.
    let [first, any] = tls_checks(
        &names,
        [(order[0], "other.test"), (order[1], "multi.test")],
        [Addresses::First, Addresses::Any],
    )
    .await;
    let failure = first.failure().expect("the first address is judged");
    assert_eq!(failure.reason, FailureReason::Tls);
    assert!(
        failure
            .detail
            .starts_with("certificate for other.test, not multi.test"),
        "{}",
        failure.detail
    );
    assert_eq!(any.verdict, Verdict::Up);
}
