//! The network-fault fixture itself (`probe_testkit`): each fault does what its name
//! says, seen from the root namespace as a client sees it, and nothing outlives the fixture.

use std::net::SocketAddr;
use std::time::Duration;

use probe_testkit::netns_or_skip;
use probe_testkit::{AcceptServer, Netns};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough for a connect over the veth (well under a millisecond) on a loaded machine,
/// short against the 1 s before a lost SYN is sent again.
const CONNECT: Duration = Duration::from_millis(300);

#[derive(Debug, PartialEq, Eq)]
enum Connect {
    Ok,
    Refused,
    TimedOut,
    Other(String),
}

async fn connect(addr: SocketAddr) -> Connect {
    match tokio::time::timeout(CONNECT, TcpStream::connect(addr)).await {
        Err(_) => Connect::TimedOut,
        Ok(Ok(_)) => Connect::Ok,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Connect::Refused,
        Ok(Err(e)) => Connect::Other(e.to_string()),
    }
}

/// `n` connects at once; the count of each outcome.
async fn connects(addr: SocketAddr, n: usize) -> (usize, usize, Vec<Connect>) {
    let attempts: Vec<_> = (0..n).map(|_| tokio::spawn(connect(addr))).collect();
    let mut results = Vec::new();
    for attempt in attempts {
        results.push(attempt.await.unwrap());
    }
    let ok = results.iter().filter(|r| **r == Connect::Ok).count();
    let timed_out = results.iter().filter(|r| **r == Connect::TimedOut).count();
    let other = results
        .into_iter()
        .filter(|r| !matches!(r, Connect::Ok | Connect::TimedOut))
        .collect();
    (ok, timed_out, other)
}

fn exists(netns: &str) -> bool {
    std::path::Path::new("/run/netns").join(netns).exists()
}

fn link_exists(name: &str) -> bool {
    std::process::Command::new("ip")
        .args(["link", "show", name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn a_blackholed_port_times_out_where_a_closed_one_is_refused() {
    let netns = netns_or_skip!();
    let server = AcceptServer::start(netns.tcp_listener().unwrap()).unwrap();
    let closed = netns.tcp_listener().unwrap().local_addr().unwrap();
    assert_eq!(connect(server.addr()).await, Connect::Ok);
    assert_eq!(connect(closed).await, Connect::Refused);

    netns.blackhole_port(server.addr().port()).unwrap();
    assert_eq!(connect(server.addr()).await, Connect::TimedOut);
    // Only that port.
    assert_eq!(connect(closed).await, Connect::Refused);

    netns.clear().unwrap();
    assert_eq!(connect(server.addr()).await, Connect::Ok);
    assert!(server.accepted() >= 1);

    // A stopped server is refused at once.
    let addr = server.addr();
    server.stop().await;
    assert_eq!(connect(addr).await, Connect::Refused);
}

#[tokio::test]
async fn syn_loss_drops_that_share_of_connects() {
    let netns = netns_or_skip!();
    let server = AcceptServer::start(netns.tcp_listener().unwrap()).unwrap();

    netns.loss_syn(100).unwrap();
    let (ok, timed_out, other) = connects(server.addr(), 20).await;
    assert_eq!((ok, timed_out, other), (0, 20, vec![]));

    // Each SYN independently: 100 connects at 50% lose 50 +- 5 (binomial); 20..=80 is six
    // standard deviations either side.
    netns.loss_syn(50).unwrap();
    let (ok, timed_out, other) = connects(server.addr(), 100).await;
    assert!(other.is_empty(), "{other:?}");
    assert!((20..=80).contains(&timed_out), "{timed_out} of 100 lost");
    assert_eq!(ok + timed_out, 100);

    netns.loss_syn(0).unwrap();
    let (ok, _, other) = connects(server.addr(), 50).await;
    assert_eq!((ok, other), (50, vec![]));

    assert!(netns.loss_syn(101).is_err());
}

#[tokio::test]
async fn data_loss_lets_the_connect_through_and_drops_the_exchange() {
    let netns = netns_or_skip!();
    let listener = netns.tcp_listener().unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let addr = listener.local_addr().unwrap();
    // Answers every request line with `OK`.
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0; 64];
                if conn.read(&mut buf).await.unwrap_or(0) > 0 {
                    let _ = conn.write_all(b"OK\n").await;
                }
            });
        }
    });
    let exchange = || async move {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET\n").await.unwrap();
        let mut buf = [0; 3];
        tokio::time::timeout(CONNECT, conn.read_exact(&mut buf))
            .await
            .ok()
            .map(|read| read.map(|_| buf))
    };
    assert_eq!(exchange().await.unwrap().unwrap(), *b"OK\n");

    netns.loss_data(100).unwrap();
    // The connect succeeds (set-up segments pass); the request never gets its answer.
    assert!(exchange().await.is_none());

    netns.loss_data(0).unwrap();
    assert_eq!(exchange().await.unwrap().unwrap(), *b"OK\n");
}

#[tokio::test]
async fn a_partition_times_out_until_healed() {
    let netns = netns_or_skip!();
    let server = AcceptServer::start(netns.tcp_listener().unwrap()).unwrap();
    assert_eq!(connect(server.addr()).await, Connect::Ok);

    netns.partition().unwrap();
    assert_eq!(connect(server.addr()).await, Connect::TimedOut);

    netns.heal().unwrap();
    assert_eq!(connect(server.addr()).await, Connect::Ok);
}

#[tokio::test]
async fn a_udp_socket_inside_is_reached_from_outside() {
    let netns = netns_or_skip!();
    let inside = netns.udp_socket().unwrap();
    let target = inside.local_addr().unwrap();
    assert_eq!(target.ip(), netns.addr());
    inside
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let outside = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    outside.send_to(b"ping", target).unwrap();
    let mut buf = [0; 8];
    let (n, from) = inside.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(from.ip(), netns.host_addr());
}

#[tokio::test]
async fn namespaces_get_their_own_names_and_subnets() {
    let a = netns_or_skip!();
    let b = Netns::new().unwrap();
    assert_ne!(a.name(), b.name());
    assert_ne!(a.addr(), b.addr());
    assert!(a.host_interface().len() <= 15, "{}", a.host_interface());
    for netns in [&a, &b] {
        let [x, y, _, last] = netns.addr().octets();
        assert_eq!([x, y], [10, 213]);
        assert_eq!(last % 4, 2, "the namespace end of a /30");
        let [.., host_last] = netns.host_addr().octets();
        assert_eq!(host_last + 1, last);
    }
}

#[tokio::test]
async fn drop_removes_the_namespace_and_the_veth_even_with_a_socket_open() {
    let netns = netns_or_skip!();
    let (name, host) = (netns.name().to_owned(), netns.host_interface().to_owned());
    // A socket bound inside keeps the namespace itself alive after `ip netns del`: the veth
    // must go all the same.
    let listener = netns.tcp_listener().unwrap();
    assert!(exists(&name) && link_exists(&host));
    drop(netns);
    assert!(!exists(&name), "{name} is still there");
    assert!(!link_exists(&host), "{host} is still there");
    drop(listener);
}

#[test]
fn a_panicking_test_still_removes_its_namespace() {
    let names = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let netns = netns_or_skip!();
        *names.lock().unwrap() = Some((netns.name().to_owned(), netns.host_interface().to_owned()));
        panic!("the test fails while its namespace exists");
    });
    let Some((name, host)) = names.lock().unwrap().take() else {
        assert!(result.is_ok(), "the fixture failed before the test's panic");
        return; // skipped
    };
    assert!(result.is_err());
    assert!(!exists(&name), "{name} is still there");
    assert!(!link_exists(&host), "{host} is still there");
}
