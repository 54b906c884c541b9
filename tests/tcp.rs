//! The TCP tier against real sockets on 127.0.0.1.

use std::net::SocketAddr;
use std::time::Duration;

use probe::Address;
use probe::outcome::{CheckResult, Failure, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::tcp::{CloseMode, TcpExpect, TcpProbe, TcpSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TIMEOUT: Duration = Duration::from_millis(500);

/// `unwrap`/`unwrap_err` on a check's verdict, so the assertions read like `Result`'s.
trait VerdictExt {
    fn unwrap(self);
    fn unwrap_err(self) -> Failure;
}

impl VerdictExt for CheckResult {
    fn unwrap(self) {
        assert_eq!(self.verdict, Verdict::Up);
    }

    fn unwrap_err(self) -> Failure {
        match self.verdict {
            Verdict::Failed(f) => f,
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

fn spec(addr: SocketAddr) -> TcpSpec {
    TcpSpec::connect(Address::Socket(addr))
}

async fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// A port nothing listens on: bind, note the port, close.
async fn closed_port() -> SocketAddr {
    let (l, addr) = listener().await;
    drop(l);
    addr
}

#[tokio::test]
async fn open_port_succeeds() {
    let (_l, addr) = listener().await;
    TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap();
}

#[tokio::test]
async fn ipv6_loopback_succeeds() {
    let Ok(l) = TcpListener::bind("[::1]:0").await else {
        probe_testkit::skipped_without_ipv6();
        return;
    };
    let addr = l.local_addr().unwrap();
    TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap();
}

#[tokio::test]
async fn host_names_resolve() {
    let (_l, addr) = listener().await;
    let spec = TcpSpec::connect(Address::Host {
        host: "localhost".into(),
        port: addr.port(),
    });
    // localhost may resolve to ::1 first, where nothing listens: the probe must try the next
    // address rather than fail on the first.
    TcpProbe::new(spec, probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap();
}

#[tokio::test]
async fn closed_port_is_refused() {
    let addr = closed_port().await;
    let err = TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.reason, FailureReason::Refused, "{err}");
}

#[tokio::test]
async fn full_accept_queue_times_out_within_the_deadline() {
    // A listener with backlog 0 that never accepts: once its queue holds one connection, the
    // kernel drops further SYNs, which is what a blackholed address looks like to a prober.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    let blackholed = loop {
        let attempt = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        match attempt {
            Ok(Ok(s)) => fillers.push(s),
            Ok(Err(e)) => panic!("filler connect failed: {e}"),
            Err(_) => break true,
        }
        assert!(fillers.len() < 16, "accept queue never filled");
    };
    assert!(blackholed);

    let started = tokio::time::Instant::now();
    let err = TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.reason, FailureReason::Timeout, "{err}");
    assert!(took >= TIMEOUT, "gave up early: {took:?}");
    // The probe's own deadline ends the wait, not the kernel's connect timeout (minutes): a
    // bound generous enough for a loaded machine still tells the two apart.
    assert!(took < TIMEOUT + Duration::from_secs(2), "overran: {took:?}");
}

#[tokio::test]
async fn silent_peer_times_out_waiting_for_the_reply() {
    let (_l, addr) = listener().await;
    let s = spec(addr).with_expect(TcpExpect::Contains(b"PONG".to_vec()));
    let err = TcpProbe::new(s, probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.reason, FailureReason::Timeout, "{err}");
}

/// A server answering each connection's first read with `reply`.
async fn echo_server(reply: &'static [u8]) -> SocketAddr {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if let Ok(n) = s.read(&mut buf).await
                    && n > 0
                {
                    let _ = s.write_all(reply).await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn send_expect_matches() {
    let addr = echo_server(b"+PONG\r\n").await;
    let s = spec(addr).with_send(b"PING\r\n");
    TcpProbe::new(
        s.clone().with_expect(TcpExpect::Contains(b"PONG".to_vec())),
        probe::tier::resolve::Names::system(),
    )
    .check(TIMEOUT)
    .await
    .unwrap();

    let regex = regex::bytes::Regex::new(r"^\+PO+NG\r\n$").unwrap();
    TcpProbe::new(
        s.with_expect(TcpExpect::Regex(regex)),
        probe::tier::resolve::Names::system(),
    )
    .check(TIMEOUT)
    .await
    .unwrap();
}

#[tokio::test]
async fn send_expect_mismatch_is_a_body_failure() {
    let addr = echo_server(b"-ERR unknown command\r\n").await;
    let s = spec(addr)
        .with_send(b"PING\r\n")
        .with_expect(TcpExpect::Contains(b"PONG".to_vec()));
    let err = TcpProbe::new(s, probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.reason, FailureReason::Body, "{err}");
    assert!(err.detail.contains("-ERR unknown command"), "{err}");
}

/// Counts sockets in TIME_WAIT whose remote end is `port` (the prober's side of a probe).
/// The sockets in TIME_WAIT towards `port` (their local and remote addresses). Loopback ports
/// are reused, and an earlier test's socket may linger towards the same number: the tests count
/// the sockets that appear, not all there are.
fn time_wait_towards(port: u16) -> std::collections::HashSet<String> {
    let hex_port = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| text.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            (cols.len() > 3 && cols[2].ends_with(&hex_port) && cols[3] == "06")
                .then(|| format!("{} {}", cols[1], cols[2]))
        })
        .collect()
}

/// A server that accepts, waits for the client to close (FIN or RST), closes, and reports.
async fn closing_server() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (l, addr) = listener().await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 16];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                drop(s);
                let _ = tx.send(());
            });
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn reset_close_leaves_no_time_wait_but_graceful_does() {
    const PROBES: usize = 20;
    let (addr, mut closed) = closing_server().await;
    let before = time_wait_towards(addr.port());
    let probe = TcpProbe::new(spec(addr), probe::tier::resolve::Names::system());
    for _ in 0..PROBES {
        probe.check(TIMEOUT).await.unwrap();
        closed.recv().await.unwrap();
    }
    assert_eq!(
        time_wait_towards(addr.port()).difference(&before).count(),
        0,
        "reset close left TIME_WAIT"
    );

    // The control: a graceful close makes the prober the active closer, so TIME_WAIT appears.
    // This proves the check above can see TIME_WAIT at all.
    let (addr, mut closed) = closing_server().await;
    let before = time_wait_towards(addr.port());
    let mut graceful = spec(addr);
    graceful.close = CloseMode::Graceful;
    let probe = TcpProbe::new(graceful, probe::tier::resolve::Names::system());
    for _ in 0..PROBES {
        probe.check(TIMEOUT).await.unwrap();
        closed.recv().await.unwrap();
    }
    // The server's FIN reaches the prober's orphaned socket asynchronously; poll briefly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let appeared = || time_wait_towards(addr.port()).difference(&before).count();
    while appeared() < PROBES && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(appeared(), PROBES);
}

/// A router's "no route to host" (ICMP host unreachable, sent here by nftables inside a network
/// namespace) fails as `unreachable`, not as a timeout or a refusal.
#[tokio::test]
async fn an_unreachable_host_fails_as_unreachable() {
    let netns = probe_testkit::netns_or_skip!();
    let listener = netns.tcp_listener().unwrap();
    let addr = listener.local_addr().unwrap();
    // Reachable first: the fault, not the set-up, makes the difference.
    TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap();
    netns
        .nft(&format!(
            "add rule inet faults blackhole tcp dport {} reject with icmpx type host-unreachable\n",
            addr.port()
        ))
        .unwrap();
    let err = TcpProbe::new(spec(addr), probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(err.reason, FailureReason::Unreachable, "{err}");
}
