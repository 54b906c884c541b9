//! The UDP tier against real sockets on 127.0.0.1: an echo peer, a silent one, a closed port.

use std::net::SocketAddr;
use std::time::Duration;

use probe::Address;
use probe::outcome::{Failure, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::reply::ReplyExpect;
use probe::tier::resolve::Names;
use probe::tier::udp::{UdpProbe, UdpSpec};
use tokio::net::UdpSocket;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_millis(500);

/// A peer answering every datagram with `reply`, or with the datagram itself when `None`.
async fn echo_peer(reply: Option<&'static [u8]>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0; 65_536];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let answer = reply.unwrap_or(&buf[..n]);
            let _ = socket.send_to(answer, from).await;
        }
    });
    addr
}

fn probe(addr: SocketAddr, send: &[u8], expect: Option<ReplyExpect>) -> UdpProbe {
    let mut spec = UdpSpec::new(Address::Socket(addr), send).unwrap();
    if let Some(expect) = expect {
        spec = spec.with_expect(expect);
    }
    UdpProbe::new(spec, Names::system())
}

async fn failure(probe: &UdpProbe) -> Failure {
    match probe.check(TIMEOUT).await.verdict {
        Verdict::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_matching_reply_passes() {
    let addr = echo_peer(Some(b"pong\n")).await;
    let contains = probe(
        addr,
        b"ping\n",
        Some(ReplyExpect::Contains(b"pong".to_vec())),
    );
    assert_eq!(contains.check(TIMEOUT).await.verdict, Verdict::Up);
    let regex = regex::bytes::Regex::new(r"^po+ng\n$").unwrap();
    let matches = probe(addr, b"ping\n", Some(ReplyExpect::Regex(regex)));
    assert_eq!(matches.check(TIMEOUT).await.verdict, Verdict::Up);
    // Without an expectation, any reply passes.
    let any = probe(addr, b"ping\n", None);
    assert_eq!(any.check(TIMEOUT).await.verdict, Verdict::Up);
}

#[tokio::test]
async fn a_reply_that_does_not_match_fails_as_body_and_shows_what_came() {
    let addr = echo_peer(Some(b"-ERR unknown\n")).await;
    let f = failure(&probe(
        addr,
        b"ping\n",
        Some(ReplyExpect::Contains(b"pong".to_vec())),
    ))
    .await;
    assert_eq!(f.reason, FailureReason::Body, "{f}");
    assert!(f.detail.contains("-ERR unknown"), "{f}");
}

#[tokio::test]
async fn a_silent_port_times_out_at_the_deadline() {
    // Bound, so no port-unreachable comes back; never read, so nothing answers.
    let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let f = failure(&probe(silent.local_addr().unwrap(), b"ping\n", None)).await;
    let took = started.elapsed();
    assert_eq!(f.reason, FailureReason::Timeout, "{f}");
    assert!(took >= TIMEOUT, "gave up early: {took:?}");
    assert!(took < TIMEOUT + Duration::from_secs(2), "overran: {took:?}");
}

#[tokio::test]
async fn a_closed_port_is_refused_at_once() {
    let closed = {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.local_addr().unwrap()
    };
    let started = Instant::now();
    let f = failure(&probe(closed, b"ping\n", None)).await;
    assert_eq!(f.reason, FailureReason::Refused, "{f}");
    // The port-unreachable ends the wait, not the timeout.
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_host_name_is_resolved_per_run() {
    // Dual-stack, so `localhost` reaches it whether it resolves to 127.0.0.1 or ::1 first.
    let Ok(socket) = UdpSocket::bind("[::]:0").await else {
        probe_testkit::skipped_without_ipv6();
        return;
    };
    let port = socket.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut buf = [0; 64];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..n], from).await;
        }
    });
    let spec = UdpSpec::new(
        Address::Host {
            host: "localhost".into(),
            port,
        },
        &b"ping"[..],
    )
    .unwrap()
    .with_expect(ReplyExpect::Contains(b"ping".to_vec()));
    let result = UdpProbe::new(spec, Names::system()).check(TIMEOUT).await;
    assert_eq!(result.verdict, Verdict::Up);
}
