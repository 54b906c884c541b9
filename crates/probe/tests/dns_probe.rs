//! The DNS tier against real servers on loopback: dnsmasq (see `support/dns.rs`) for answers,
//! NXDOMAIN, TCP and truncation; plain sockets for a server that never answers, a closed port
//! and one that answers with replies that are not the query's.
//!
//! Real time throughout: the peers are other processes and kernel sockets.

#[path = "support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dns::DnsServer;
use hickory_resolver::proto::op::Message;
use hickory_resolver::proto::rr::rdata::A;
use hickory_resolver::proto::rr::{RData, Record};
use probe::outcome::{CheckResult, FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::dns::{AnswerMatch, DnsProbe, DnsSpec, DnsTransport, DnsType, Rcode};
use tokio::net::UdpSocket;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(2);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn spec(server: SocketAddr, name: &str, of: DnsType) -> DnsSpec {
    DnsSpec::new(server, name, of).unwrap()
}

fn answers(values: &[&str]) -> Vec<AnswerMatch> {
    values
        .iter()
        .map(|v| AnswerMatch::parse(v).unwrap())
        .collect()
}

async fn check(spec: &DnsSpec) -> CheckResult {
    DnsProbe::new(spec.clone()).check(TIMEOUT).await
}

/// The failure's reason and detail; panics on a pass.
async fn failure(spec: &DnsSpec) -> (FailureReason, String) {
    let result = check(spec).await;
    let failure = result
        .failure()
        .unwrap_or_else(|| panic!("passed: {result:?}"));
    (failure.reason, failure.detail.clone())
}

async fn assert_up(spec: &DnsSpec) {
    let result = check(spec).await;
    assert_eq!(result.verdict, Verdict::Up, "{spec:?}");
}

#[tokio::test]
async fn the_right_answer_passes_and_a_changed_record_fails_naming_what_came_back() {
    let server = DnsServer::start(&[("orders.test", ip("10.0.0.5"))]);
    let mut want = spec(server.addr, "orders.test", DnsType::A);
    want.expect.answers = answers(&["10.0.0.5"]);
    assert_up(&want).await;

    server.set_names(&[("orders.test", ip("10.0.0.6"))]);
    // dnsmasq re-reads its hosts file on the signal, a moment later.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (reason, detail) = loop {
        if let Some(f) = check(&want).await.failure() {
            break (f.reason, f.detail.clone());
        }
        assert!(Instant::now() < deadline, "the record never changed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reason, FailureReason::Assertion);
    assert_eq!(
        detail,
        r#"expected "10.0.0.5" among the A answers, got NOERROR: 10.0.0.6"#
    );
}

#[tokio::test]
async fn nxdomain_fails_unless_it_is_expected() {
    let server = DnsServer::start(&[("orders.test", ip("10.0.0.5"))]);
    let mut missing = spec(server.addr, "gone.test", DnsType::A);
    assert_eq!(
        failure(&missing).await,
        (
            FailureReason::Assertion,
            "expected rcode NOERROR, got NXDOMAIN with no answers".to_owned()
        )
    );
    missing.expect.rcodes = vec![Rcode::NXDOMAIN];
    assert_up(&missing).await;
    // And a name that exists is then the failure.
    let mut present = spec(server.addr, "orders.test", DnsType::A);
    present.expect.rcodes = vec![Rcode::NXDOMAIN];
    assert_eq!(
        failure(&present).await,
        (
            FailureReason::Assertion,
            "expected rcode NXDOMAIN, got NOERROR: 10.0.0.5".to_owned()
        )
    );
}

#[tokio::test]
async fn every_record_type_is_matched_by_its_text_over_udp_and_tcp() {
    let server = DnsServer::start_with(
        &[("mail.test", ip("10.0.0.7"))],
        &[
            "--host-record=v6.test,fd00::7",
            "--cname=alias.test,mail.test",
            "--mx-host=mx.test,mail.test,10",
            "--srv-host=_orders._tcp.test,mail.test,8080,1,5",
            "--txt-record=txt.test,v=spf1 ,-all",
        ],
    );
    let cases = [
        ("v6.test", DnsType::Aaaa, "fd00:0::7"),
        ("alias.test", DnsType::Cname, "mail.test"),
        ("alias.test", DnsType::Cname, "MAIL.test."),
        ("mx.test", DnsType::Mx, "10 mail.test"),
        ("_orders._tcp.test", DnsType::Srv, "1 5 8080 mail.test."),
        ("txt.test", DnsType::Txt, "v=spf1 -all"),
        ("7.0.0.10.in-addr.arpa", DnsType::Ptr, "mail.test"),
    ];
    for transport in DnsTransport::ALL {
        for (name, of, answer) in cases {
            let mut want = spec(server.addr, name, of);
            want.transport = transport;
            want.expect.answers = answers(&[answer]);
            assert_up(&want).await;
        }
    }
    // The text shown is the one matched: the name without its trailing dot.
    let mut wrong = spec(server.addr, "mx.test", DnsType::Mx);
    wrong.transport = DnsTransport::Tcp;
    wrong.expect.answers = answers(&["20 mail.test"]);
    assert_eq!(
        failure(&wrong).await,
        (
            FailureReason::Assertion,
            r#"expected "20 mail.test" among the MX answers, got NOERROR: 10 mail.test"#.to_owned()
        )
    );
}

#[tokio::test]
async fn a_truncated_udp_reply_is_asked_again_over_tcp() {
    // 60 A records do not fit in 512 bytes: dnsmasq sends 30 with the TC bit over UDP.
    let addrs: Vec<String> = (1..=60).map(|i| format!("10.0.1.{i}")).collect();
    let names: Vec<(&str, IpAddr)> = addrs.iter().map(|a| ("many.test", ip(a))).collect();
    let server = DnsServer::start(&names);
    let mut all = spec(server.addr, "many.test", DnsType::A);
    all.expect.min_answers = Some(60);
    all.expect.answers = answers(&["10.0.1.1", "10.0.1.60"]);
    assert_up(&all).await;
    // What TCP brought back is judged too.
    all.expect.min_answers = Some(61);
    let (reason, detail) = failure(&all).await;
    assert_eq!(reason, FailureReason::Assertion);
    assert!(
        detail.starts_with("expected at least 61 A answers, got NOERROR: 10.0.1.")
            && detail.ends_with(" and 52 more"),
        "{detail}"
    );
}

#[tokio::test]
async fn regex_answers_and_min_answers() {
    let server = DnsServer::start(&[("pair.test", ip("10.0.0.8")), ("pair.test", ip("10.0.0.9"))]);
    let mut pair = spec(server.addr, "pair.test", DnsType::A);
    pair.expect.answers = answers(&[r"re:^10\.0\.0\.\d+$"]);
    pair.expect.min_answers = Some(2);
    assert_up(&pair).await;

    pair.expect.answers = answers(&[r"re:^192\.168\.", "10.0.0.8"]);
    let (reason, detail) = failure(&pair).await;
    assert_eq!(reason, FailureReason::Assertion);
    assert!(
        detail.starts_with(r"expected /^192\.168\./ among the A answers, got NOERROR: 10.0.0."),
        "{detail}"
    );

    pair.expect.answers.clear();
    pair.expect.min_answers = Some(3);
    let (reason, detail) = failure(&pair).await;
    assert_eq!(reason, FailureReason::Assertion);
    assert!(
        detail.starts_with("expected at least 3 A answers, got NOERROR: 10.0.0."),
        "{detail}"
    );

    // A name without records of the asked type: NOERROR, but no answer.
    let empty = spec(server.addr, "pair.test", DnsType::Mx);
    assert_eq!(
        failure(&empty).await,
        (
            FailureReason::Assertion,
            "expected at least 1 MX answer, got NOERROR with no answers".to_owned()
        )
    );
    let mut none_needed = empty.clone();
    none_needed.expect.min_answers = Some(0);
    assert_up(&none_needed).await;
}

#[tokio::test]
async fn a_slow_reply_is_degraded() {
    let server = DnsServer::start(&[("orders.test", ip("10.0.0.5"))]);
    let mut slow = spec(server.addr, "orders.test", DnsType::A);
    slow.degraded_if.latency_over = Some(Duration::from_nanos(1));
    match check(&slow).await.verdict {
        Verdict::Degraded(reasons) => {
            assert_eq!(reasons.len(), 1, "{reasons:?}");
            assert!(reasons[0].ends_with("ms over 1ns"), "{reasons:?}");
        }
        other => panic!("not degraded: {other:?}"),
    }
    slow.degraded_if.latency_over = Some(Duration::from_secs(1));
    assert_up(&slow).await;
}

/// A UDP socket that reads queries and never answers; counts them.
async fn silent() -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        let mut buf = [0; 512];
        while socket.recv_from(&mut buf).await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_after_asking_three_times() {
    let (addr, seen) = silent().await;
    let probe = DnsProbe::new(spec(addr, "orders.test", DnsType::A));
    let started = Instant::now();
    let result = probe.check(Duration::from_millis(300)).await;
    let elapsed = started.elapsed();
    let failure = result.failure().expect("no reply can pass");
    assert_eq!(failure.reason, FailureReason::Timeout);
    assert_eq!(
        failure.detail,
        format!("no reply from {addr} over UDP in time (asked 3 times)")
    );
    assert!(
        (Duration::from_millis(300)..Duration::from_secs(1)).contains(&elapsed),
        "{elapsed:?}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_closed_port_is_refused_over_udp_and_tcp() {
    let closed = {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap()
    };
    for transport in DnsTransport::ALL {
        let mut to_closed = spec(closed, "orders.test", DnsType::A);
        to_closed.transport = transport;
        let (reason, detail) = failure(&to_closed).await;
        assert_eq!(reason, FailureReason::Refused, "{transport}: {detail}");
    }
}

/// A UDP server that answers each query first with `decoys` replies that are not its reply
/// (another id, another question, garbage), then, if `answer`, with the right one.
async fn tricky(answer: bool) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let query = Message::from_vec(&buf[..n]).unwrap();
            let id = query.metadata.id;
            let mut reply = Message::response(id, query.metadata.op_code);
            reply.add_queries(query.queries.clone());
            let name = query.queries[0].name().clone();
            reply.add_answer(Record::from_rdata(
                name,
                60,
                RData::A(A(Ipv4Addr::new(10, 0, 0, 9))),
            ));
            let mut other_id = reply.clone();
            other_id.metadata.id = id.wrapping_add(1);
            let mut other_question = reply.clone();
            other_question.queries[0].set_name("elsewhere.test.".parse().unwrap());
            let mut echoed = query.clone();
            echoed.metadata.id = id;
            for decoy in [other_id, other_question, echoed] {
                socket
                    .send_to(&decoy.to_vec().unwrap(), from)
                    .await
                    .unwrap();
            }
            socket.send_to(b"not dns", from).await.unwrap();
            if answer {
                socket
                    .send_to(&reply.to_vec().unwrap(), from)
                    .await
                    .unwrap();
            }
        }
    });
    addr
}

#[tokio::test]
async fn replies_that_are_not_the_querys_are_ignored() {
    let mut want = spec(tricky(true).await, "orders.test", DnsType::A);
    want.expect.answers = answers(&["10.0.0.9"]);
    assert_up(&want).await;

    let addr = tricky(false).await;
    let probe = DnsProbe::new(spec(addr, "orders.test", DnsType::A));
    let result = probe.check(Duration::from_millis(300)).await;
    let failure = result.failure().expect("only decoys came back");
    assert_eq!(failure.reason, FailureReason::Timeout);
    assert_eq!(
        failure.detail,
        format!(
            "no reply from {addr} over UDP in time (asked 3 times); ignored 12 replies that did \
             not match the query"
        )
    );
}

/// Record rules see every record of a section in presentation format; ANY's answers are the
/// whole answer section; a list of rcodes passes on any of them.
#[tokio::test]
async fn record_rules_rcode_sets_and_any_judge_the_whole_reply() {
    let server = DnsServer::start(&[("a.test", ip("127.0.0.1"))]);
    let re = |s: &str| regex::Regex::new(s).unwrap();

    let mut right = spec(server.addr, "a.test", DnsType::A);
    right.expect.records.answer.all_match =
        vec![re("^a\\.test\\.\t[0-9]+\tIN\tA\t127\\.0\\.0\\.1$")];
    right.expect.records.answer.none_match = vec![re("10\\.0\\.0\\.9")];
    assert_up(&right).await;

    let mut wrong = spec(server.addr, "a.test", DnsType::A);
    wrong.expect.records.answer.some_match = vec![re("\tA\t10\\.0\\.0\\.9$")];
    let (reason, detail) = failure(&wrong).await;
    assert_eq!(reason, FailureReason::Assertion);
    assert_eq!(
        detail,
        "answer section: no record matches /\tA\t10\\.0\\.0\\.9$/"
    );

    let mut nx = spec(server.addr, "missing.test", DnsType::A);
    nx.expect.rcodes = vec![Rcode::NOERROR, Rcode::NXDOMAIN];
    assert_up(&nx).await;
    nx.expect.rcodes = vec![Rcode::NOERROR, Rcode::SERVFAIL];
    let (_, detail) = failure(&nx).await;
    assert!(
        detail.starts_with("expected rcode NOERROR or SERVFAIL, got NXDOMAIN"),
        "{detail}"
    );

    let mut any = spec(server.addr, "a.test", DnsType::Any);
    any.expect.min_answers = Some(0);
    let result = check(&any).await;
    assert!(result.failure().is_none(), "{result:?}");
    any.recursion_desired = false;
    let result = check(&any).await;
    assert!(result.failure().is_none(), "{result:?}");
}
