//! The ICMP tier against real hosts: the loopback, and network namespaces (`probe_testkit::
//! Netns`) whose rules drop echoes, some or all, or that have no route to the host.
//!
//! Both kinds of socket are tested: raw ones (root has `CAP_NET_RAW`) and datagram ones, which
//! need `net.ipv4.ping_group_range` to include the test's group. That setting belongs to a
//! network namespace, so datagram runs happen inside a namespace of the test's own, where it is
//! set, and the host's setting is left alone: a probe run on a thread inside the namespace
//! ([`Netns::in_namespace`]) creates its sockets there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use probe::outcome::{CheckResult, Failure, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::icmp::{self, Flavour, IcmpDegradedIf, IcmpHost, IcmpProbe, IcmpSpec};
use probe::tier::resolve::Names;
use probe_testkit::netns_or_skip;
use probe_testkit::{Netns, skipped_outside_ci, skipped_without_ipv6};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_millis(500);
const FLAVOURS: [Flavour; 2] = [Flavour::Raw, Flavour::Datagram];

fn spec(ip: IpAddr) -> IcmpSpec {
    IcmpSpec::echo(IcmpHost::Ip(ip))
}

fn failure(result: CheckResult) -> Failure {
    match result.verdict {
        Verdict::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Runs `spec` with `flavour` sockets on a thread inside `netns`, where its sockets are made.
fn check_in(netns: &Netns, spec: IcmpSpec, flavour: Flavour, timeout: Duration) -> CheckResult {
    netns
        .in_namespace(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(runtime.block_on(async {
                IcmpProbe::new(spec, Names::system())
                    .with_flavour(flavour)
                    .check(timeout)
                    .await
            }))
        })
        .unwrap()
}

/// A namespace where datagram ICMP sockets are allowed to every group.
fn namespace_allowing_datagrams(netns: &Netns) {
    netns
        .in_namespace(|| std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 2147483647"))
        .unwrap();
}

#[tokio::test]
async fn the_process_says_which_sockets_it_pings_with() {
    let said = icmp::sockets().to_string();
    assert!(
        said.starts_with("using datagram sockets (")
            || said == "using raw sockets (CAP_NET_RAW)"
            || said.starts_with("unavailable: "),
        "{said}"
    );
    // Decided once: the same answer, the same instance.
    assert!(std::ptr::eq(icmp::sockets(), icmp::sockets()));
}

#[tokio::test]
async fn the_ipv4_loopback_answers() {
    if icmp::sockets().flavour().is_none() {
        skipped_outside_ci(&format!("icmp {}", icmp::sockets()));
        return;
    }
    let probe = IcmpProbe::new(spec(Ipv4Addr::LOCALHOST.into()), Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
}

#[tokio::test]
async fn the_ipv6_loopback_answers() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        skipped_without_ipv6();
        return;
    }
    if icmp::sockets().flavour().is_none() {
        skipped_outside_ci(&format!("icmp {}", icmp::sockets()));
        return;
    }
    let probe = IcmpProbe::new(spec(Ipv6Addr::LOCALHOST.into()), Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
}

#[tokio::test]
async fn a_host_name_is_resolved_per_run() {
    if icmp::sockets().flavour().is_none() {
        skipped_outside_ci(&format!("icmp {}", icmp::sockets()));
        return;
    }
    // The hosts file's name: 127.0.0.1 or ::1, both the loopback.
    let spec = IcmpSpec::echo("localhost".parse().unwrap());
    let probe = IcmpProbe::new(spec, Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
}

#[test]
fn both_kinds_of_socket_ping_the_loopback_in_both_families_with_every_echo_answered() {
    let netns = netns_or_skip!();
    namespace_allowing_datagrams(&netns);
    let lossy = IcmpDegradedIf {
        loss_over: Some(0.0),
        latency_over: None,
    };
    for flavour in FLAVOURS {
        for ip in [
            IpAddr::from(Ipv4Addr::LOCALHOST),
            Ipv6Addr::LOCALHOST.into(),
        ] {
            let one = check_in(&netns, spec(ip), flavour, TIMEOUT);
            assert_eq!(one.verdict, Verdict::Up, "{flavour:?} {ip}");
            // Five large echoes, none lost: not degraded even by the strictest loss_over.
            let five = spec(ip)
                .with_count(5)
                .and_then(|s| s.with_size(9000))
                .and_then(|s| s.with_degraded_if(lossy.clone()))
                .unwrap();
            let result = check_in(&netns, five, flavour, TIMEOUT);
            assert_eq!(result.verdict, Verdict::Up, "{flavour:?} {ip}");
        }
    }
}

#[test]
fn datagram_sockets_outside_ping_group_range_fail_saying_so() {
    // A new namespace's ping_group_range is "1 0": no group at all.
    let netns = netns_or_skip!();
    let f = failure(check_in(
        &netns,
        spec(Ipv4Addr::LOCALHOST.into()),
        Flavour::Datagram,
        TIMEOUT,
    ));
    assert_eq!(f.reason, FailureReason::Io, "{f}");
    assert!(f.detail.contains("denied"), "{f}");
}

#[test]
fn a_host_with_no_route_to_it_is_unreachable_at_once() {
    let netns = netns_or_skip!();
    namespace_allowing_datagrams(&netns);
    // The namespace has its /30 and its loopback, and no default route: TEST-NET-1 is
    // unroutable from inside, and nothing leaves the machine.
    let nowhere = IpAddr::from(Ipv4Addr::new(192, 0, 2, 1));
    for flavour in FLAVOURS {
        let started = Instant::now();
        let f = failure(check_in(&netns, spec(nowhere), flavour, TIMEOUT));
        assert_eq!(f.reason, FailureReason::Unreachable, "{flavour:?}: {f}");
        assert!(
            started.elapsed() < TIMEOUT,
            "{flavour:?}: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_host_that_drops_echo_requests_times_out() {
    let netns = netns_or_skip!();
    if icmp::sockets().flavour().is_none() {
        skipped_outside_ci(&format!("icmp {}", icmp::sockets()));
        return;
    }
    let host = IpAddr::from(netns.addr());
    let probe = IcmpProbe::new(spec(host), Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);

    netns
        .nft("add rule inet faults blackhole icmp type echo-request drop\n")
        .unwrap();
    let started = Instant::now();
    let f = failure(probe.check(TIMEOUT).await);
    let took = started.elapsed();
    assert_eq!(f.reason, FailureReason::Timeout, "{f}");
    assert!(took >= TIMEOUT, "gave up early: {took:?}");
    assert!(took < TIMEOUT + Duration::from_secs(2), "overran: {took:?}");

    let three = IcmpProbe::new(spec(host).with_count(3).unwrap(), Names::system());
    let f = failure(three.check(TIMEOUT).await);
    assert_eq!(f.reason, FailureReason::Timeout, "{f}");
    assert!(f.detail.contains("none of 3 echoes"), "{f}");
}

#[test]
fn partial_loss_degrades_by_loss_over_and_the_run_still_passes() {
    let netns = netns_or_skip!();
    namespace_allowing_datagrams(&netns);
    // Half the echo requests into the namespace's loopback are dropped, each at random.
    netns
        .nft(
            "add rule inet faults blackhole icmp type echo-request numgen random mod 2 == 0 drop\n",
        )
        .unwrap();
    // 20 echoes at a loss of one in two: at most 2 lost has a chance of 211 in 2^20, all 20
    // lost 1 in 2^20.
    let lossy = spec(Ipv4Addr::LOCALHOST.into())
        .with_count(20)
        .and_then(|s| {
            s.with_degraded_if(IcmpDegradedIf {
                loss_over: Some(0.1),
                latency_over: None,
            })
        })
        .unwrap();
    for flavour in FLAVOURS {
        let result = check_in(&netns, lossy.clone(), flavour, TIMEOUT);
        let Verdict::Degraded(reasons) = &result.verdict else {
            panic!("{flavour:?}: expected degraded, got {:?}", result.verdict);
        };
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        // "lost 9 of 20 echoes (45%), over 10%"
        let reason = &reasons[0];
        assert!(reason.starts_with("lost "), "{reason}");
        assert!(reason.contains(" of 20 echoes ("), "{reason}");
        assert!(reason.ends_with("%), over 10%"), "{reason}");
    }
}
