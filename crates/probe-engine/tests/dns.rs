//! The daemon's resolver end to end: the `resolver` section pointed at a real dnsmasq on a
//! loopback port, which then stops answering. Stale answers show in `last.note` and the
//! metrics; the outage in the log, `/health` and the metrics; no target goes DOWN. And `dns`
//! targets, probing the same dnsmasq: their verdicts and answers in the API.

mod support;

#[path = "../../probe/tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde_json::Value;
use support::{Daemon, WAIT};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_resolver_is_the_engines_fault_not_the_targets() {
    let names = ["a.test", "b.test", "c.test"];
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let server = dns::DnsServer::start(&names.map(|n| (n, loopback)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "resolver:\n  servers: [\"{}\"]\n  timeout: 100ms\n  attempts: 1\n\
         defaults:\n  interval: 300ms\n  timeout: 200ms\n  rise: 1\n  fall: 2\n  \
         dns_stale_for: 1s\ntargets:\n",
        server.addr
    );
    for name in names {
        let id = name.replace(".test", "");
        yaml.push_str(&format!(
            "  - {{id: {id}, tcp: {{address: \"{name}:{port}\"}}}}\n"
        ));
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    let mut daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[("a", "UP"), ("b", "UP"), ("c", "UP")])
        .await;

    server.pause();
    // First the last good answers stand in, and the API says so.
    let deadline = Instant::now() + WAIT;
    let note = loop {
        let a: Value = daemon.get("/v1/targets/a").await.json().await.unwrap();
        if let Some(note) = a["last"]["note"].as_str() {
            assert_eq!(a["state"], "UP", "{a}");
            break note.to_owned();
        }
        assert!(Instant::now() < deadline, "no note: {a}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    };
    assert!(
        note.starts_with("resolving a.test failed (") && note.contains("last good answer"),
        "{note}"
    );
    // Every name fails: an outage, logged once.
    let started = daemon.wait_log(
        "the resolver is failing for most names: DNS failures are not counted against targets",
    );
    assert_eq!(started["names"], 3, "{started}");
    // Past dns_stale_for (1s), checks fail as `dns`, but no target goes DOWN.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for t in daemon.targets().await {
        assert_eq!(t["state"], "UP", "{t}");
        assert_eq!(t["last"]["reason"], "dns", "{t}");
    }
    let health: Value = daemon.get("/health").await.json().await.unwrap();
    let check = &health["checks"]["resolver:dns"][0];
    assert_eq!(check["status"], "warn", "{health}");
    assert!(
        check["output"]
            .as_str()
            .unwrap()
            .contains("3 of 3 recent names failed"),
        "{check}"
    );
    let text = daemon.get("/metrics").await.text().await.unwrap();
    let metrics = support::prom::Metrics::parse(&text);
    assert_eq!(metrics.value("probe_resolver_up", &[]), 0.0);
    assert_eq!(metrics.value("probe_resolver_outages_total", &[]), 1.0);
    for name in ["a", "b", "c"] {
        let of = [("target", name)];
        assert!(
            metrics.value("probe_dns_stale_answers_total", &of) >= 1.0,
            "{name}"
        );
        assert!(
            metrics.value("probe_verdicts_deferred_total", &of) >= 1.0,
            "{name}"
        );
        let dns = [("target", name), ("reason", "dns")];
        assert!(metrics.value("probe_failures_total", &dns) >= 1.0, "{name}");
    }
    assert_eq!(metrics.types["probe_resolver_up"], "gauge");
    assert_eq!(metrics.types["probe_resolver_outages_total"], "counter");
    support::promtool_check(&text);

    server.resume();
    daemon.wait_log("the resolver answers again");
    let metrics = daemon.metrics().await;
    assert_eq!(metrics.value("probe_resolver_up", &[]), 1.0);
    assert_eq!(
        metrics.value("probe_resolver_outages_total", &[]),
        1.0,
        "one outage"
    );
    let health: Value = daemon.get("/health").await.json().await.unwrap();
    assert_eq!(health["checks"]["resolver:dns"][0]["status"], "pass");
    assert_eq!(health["status"], "pass", "{health}");
}

/// DNS probes as the daemon runs them: one whose answer is right is UP, one whose record
/// changed is DOWN with the answer that came back, a slow-flagged one is DEGRADED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_targets_show_their_answers_in_the_api() {
    let server = dns::DnsServer::start(&[("orders.test", "10.0.0.5".parse().unwrap())]);
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "defaults:\n  interval: 300ms\n  timeout: 200ms\n  rise: 1\n  fall: 1\n\
         targets:\n\
         \x20 - id: orders-dns\n    dns:\n      server: \"{addr}\"\n      name: orders.test\n      \
         expect: {{answers: [\"10.0.0.5\"]}}\n\
         \x20 - id: moved-dns\n    dns:\n      server: \"{addr}\"\n      name: orders.test\n      \
         transport: tcp\n      expect: {{answers: [\"10.0.0.6\"]}}\n\
         \x20 - id: slow-dns\n    dns:\n      server: \"{addr}\"\n      name: orders.test\n      \
         degraded_if: {{latency_over: 1ns}}\n",
        addr = server.addr
    );
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[
            ("orders-dns", "UP"),
            ("moved-dns", "DOWN"),
            ("slow-dns", "DEGRADED"),
        ])
        .await;
    let moved: Value = daemon
        .get("/v1/targets/moved-dns")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(moved["last_failure"]["reason"], "assertion", "{moved}");
    assert_eq!(
        moved["last_failure"]["detail"],
        r#"expected "10.0.0.6" among the A answers, got NOERROR: 10.0.0.5"#,
        "{moved}"
    );
    let slow: Value = daemon
        .get("/v1/targets/slow-dns")
        .await
        .json()
        .await
        .unwrap();
    let reasons = slow["degraded_reasons"].as_array().unwrap();
    assert!(
        reasons[0].as_str().unwrap().ends_with("ms over 1ns"),
        "{slow}"
    );
    let metrics = daemon.metrics().await;
    assert!(
        metrics.value(
            "probe_failures_total",
            &[("target", "moved-dns"), ("reason", "assertion")]
        ) >= 1.0
    );
}
