//! Resolver trouble is not target trouble: names through a real DNS server (dnsmasq on a
//! loopback port, see `support/dns.rs`) that answers, then stops answering.
//!
//! Real time throughout: hickory's query timeouts and dnsmasq run on the wall clock. Timeouts are
//! short (100 ms per query, one attempt) so that each test takes a few seconds.

#[path = "support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use dns::DnsServer;
use probe::engine::TargetStatus;
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::outcome::FailureReason;
use probe::tier::ProbeSpec;
use probe::tier::resolve::{LookupError, Resolver};
use probe::tier::tcp::TcpSpec;
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A port that accepts connections for as long as the test runs.
async fn listener() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    port
}

/// A TCP target named through DNS: probed every 300 ms with a 200 ms timeout, UP after one
/// pass, DOWN after two failures.
fn target(host: &str, port: u16, stale_for: Duration) -> TargetSpec {
    let id = TargetId::new(host).unwrap();
    let address = Address::Host {
        host: host.into(),
        port,
    };
    TargetSpec::new(id, ProbeSpec::Tcp(TcpSpec::connect(address)))
        .with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval: Duration::from_millis(300),
                timeout: Duration::from_millis(200),
                jitter: 0.0,
                ..ScheduleSettings::default()
            })
            .unwrap(),
        )
        .with_thresholds(Thresholds::new(
            1.try_into().unwrap(),
            2.try_into().unwrap(),
        ))
        .with_flap(None)
        .with_dns_stale_for(stale_for)
}

fn start(resolver: Arc<Resolver>) -> (Engine, CancellationToken) {
    let cancel = CancellationToken::new();
    let engine = Engine::start_with_resolver(EngineConfig::default(), resolver, cancel.clone());
    (engine, cancel)
}

fn status(engine: &Engine, id: &str) -> TargetStatus {
    engine.status(&TargetId::new(id).unwrap()).unwrap()
}

/// Polls until `ready` holds, for at most `within`.
async fn wait_for(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_state(engine: &Engine, id: &str, state: HealthState) {
    wait_for(&format!("{id} {state}"), Duration::from_secs(5), || {
        status(engine, id).state == state
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolver_tells_answers_from_trouble() {
    let server = DnsServer::start(&[("alpha.test", LOOPBACK)]);
    let resolver = server.resolver();
    let soon = || Instant::now() + Duration::from_secs(1);
    let stale_for = Duration::from_secs(60);

    let found = resolver
        .lookup("alpha.test", soon(), stale_for)
        .await
        .unwrap();
    assert_eq!(&*found.addrs, &[LOOPBACK]);
    assert_eq!(found.stale, None);
    match resolver.lookup("missing.test", soon(), stale_for).await {
        Err(LookupError::NotFound { detail, .. }) => assert!(detail.contains("NXDOMAIN")),
        other => panic!("expected NXDOMAIN, got {other:?}"),
    }
    // One zone whose server never answers: trouble, and only for that name.
    match resolver.lookup("x.broken.test", soon(), stale_for).await {
        Err(LookupError::Trouble(t)) => assert_eq!(t.stale_answer_age, None),
        other => panic!("expected trouble, got {other:?}"),
    }
    // `localhost` needs no server.
    server.pause();
    let local = resolver
        .lookup("localhost", soon(), stale_for)
        .await
        .unwrap();
    assert!(local.addrs.iter().all(IpAddr::is_loopback), "{local:?}");
    // The server is gone: the last good answer stands in, and says so.
    let stale = resolver
        .lookup("alpha.test", soon(), stale_for)
        .await
        .unwrap();
    assert_eq!(&*stale.addrs, &[LOOPBACK]);
    let trouble = stale.stale.expect("a stale answer");
    assert_eq!(&*trouble.name, "alpha.test");
    assert!(trouble.stale_answer_age.unwrap() < Duration::from_secs(5));
    // ...unless stale answers are off.
    assert!(matches!(
        resolver.lookup("alpha.test", soon(), Duration::ZERO).await,
        Err(LookupError::Trouble(_))
    ));
    // Two names of the three looked up fail (an NXDOMAIN is an answer; localhost is not
    // counted): more than half, the rule's outage.
    let health = resolver.health();
    assert_eq!(
        (health.up, health.names, health.troubled),
        (false, 3, 2),
        "{health:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_answer_keeps_the_target_up_for_dns_stale_for_then_it_fails_as_dns() {
    let server = DnsServer::start(&[("alpha.test", LOOPBACK)]);
    let port = listener().await;
    let resolver = server.resolver();
    let (engine, cancel) = start(resolver.clone());
    let stale_for = Duration::from_millis(1500);
    engine
        .apply(vec![target("alpha.test", port, stale_for)])
        .unwrap();
    wait_state(&engine, "alpha.test", HealthState::Up).await;

    server.pause();
    let paused = Instant::now();
    wait_for("a stale answer", Duration::from_secs(2), || {
        status(&engine, "alpha.test")
            .note
            .is_some_and(|n| n.contains("used its last good answer"))
    })
    .await;
    let s = status(&engine, "alpha.test");
    assert_eq!(s.state, HealthState::Up, "{s:?}");
    assert!(s.last.unwrap().ok(), "{s:?}");
    let note = s.note.unwrap();
    assert!(note.starts_with("resolving alpha.test failed ("), "{note}");

    // Past `dns_stale_for`, resolver trouble is a `dns` failure (one name: no outage).
    wait_state(&engine, "alpha.test", HealthState::Down).await;
    assert!(paused.elapsed() >= stale_for, "down too early");
    let s = status(&engine, "alpha.test");
    assert_eq!(s.last_failure.unwrap().reason, FailureReason::Dns);
    assert!(
        s.note
            .as_deref()
            .is_some_and(|n| n.contains("no recent answer to fall back on")),
        "{:?}",
        s.note
    );
    assert!(resolver.health().up);
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nxdomain_fails_at_once_without_a_stale_answer() {
    let server = DnsServer::start(&[("gamma.test", LOOPBACK)]);
    let port = listener().await;
    let resolver = server.resolver();
    let (engine, cancel) = start(resolver.clone());
    engine
        .apply(vec![target("gamma.test", port, Duration::from_secs(60))])
        .unwrap();
    wait_state(&engine, "gamma.test", HealthState::Up).await;

    // The name is removed from the zone: an answer, not trouble.
    server.set_names(&[]);
    wait_for("a failure", Duration::from_secs(2), || {
        status(&engine, "gamma.test").last_failure.is_some()
    })
    .await;
    let s = status(&engine, "gamma.test");
    let failure = s.last_failure.unwrap();
    assert_eq!(failure.reason, FailureReason::Dns);
    assert!(failure.detail.contains("NXDOMAIN"), "{failure}");
    assert_eq!(s.note, None, "no stale answer for a name that is gone");
    wait_state(&engine, "gamma.test", HealthState::Down).await;
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolver_outage_takes_no_target_down() {
    let names = ["a.test", "b.test", "c.test", "d.test"];
    let hosts: Vec<_> = names.iter().map(|n| (*n, LOOPBACK)).collect();
    let server = DnsServer::start(&hosts);
    let port = listener().await;
    let resolver = server.resolver();
    let (engine, cancel) = start(resolver.clone());
    // Stale answers off: every lookup during the outage fails the check.
    engine
        .apply(
            names
                .iter()
                .map(|n| target(n, port, Duration::ZERO))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    for name in names {
        wait_state(&engine, name, HealthState::Up).await;
    }
    assert!(resolver.health().up);

    server.pause();
    wait_for("an outage", Duration::from_secs(2), || {
        !resolver.health().up
    })
    .await;
    let health = resolver.health();
    assert_eq!(health.outages, 1);
    assert!(health.troubled * 2 > health.names, "{health:?}");
    assert!(health.since.is_some());
    // Many runs later (fall is 2), every target is still UP, its failures shown.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for name in names {
        let s = status(&engine, name);
        assert_eq!(s.state, HealthState::Up, "{s:?}");
        assert_eq!(s.last_failure.unwrap().reason, FailureReason::Dns);
        assert!(!s.last.unwrap().ok());
    }

    server.resume();
    wait_for("the outage's end", Duration::from_secs(2), || {
        resolver.health().up
    })
    .await;
    assert_eq!(resolver.health().outages, 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    for name in names {
        assert_eq!(status(&engine, name).state, HealthState::Up);
    }
    cancel.cancel();
    engine.stopped().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broken_zone_is_not_an_outage() {
    let healthy = ["a.test", "b.test", "c.test"];
    let hosts: Vec<_> = healthy.iter().map(|n| (*n, LOOPBACK)).collect();
    let server = DnsServer::start(&hosts);
    let port = listener().await;
    let resolver = server.resolver();
    let (engine, cancel) = start(resolver.clone());
    let mut specs: Vec<_> = healthy
        .iter()
        .map(|n| target(n, port, Duration::ZERO))
        .collect();
    specs.push(target("x.broken.test", port, Duration::ZERO));
    engine.apply(specs).unwrap();

    wait_state(&engine, "x.broken.test", HealthState::Down).await;
    let s = status(&engine, "x.broken.test");
    assert_eq!(s.last_failure.unwrap().reason, FailureReason::Dns);
    for name in healthy {
        wait_state(&engine, name, HealthState::Up).await;
    }
    let health = resolver.health();
    assert!(health.up, "{health:?}");
    assert_eq!((health.names, health.troubled), (4, 1));
    assert_eq!(health.outages, 0);
    cancel.cancel();
    engine.stopped().await;
}

/// The HTTP tier's transports resolve through the same resolver: a stale answer on trouble,
/// with the remark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_http_transports_use_stale_answers() {
    use probe::tier::Probe;
    use probe::tier::http::{HttpProbe, HttpSpec};

    let server = DnsServer::start(&[("web.test", LOOPBACK)]);
    let app = axum::Router::new().route("/ready", axum::routing::get(|| async { "ok" }));
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = http.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(http, app).await });
    let names = server.names(Duration::from_secs(60));
    let url = format!("http://web.test:{port}/ready");
    for fresh in [false, true] {
        let mut spec = HttpSpec::get(url.parse().unwrap());
        spec.fresh_connection = fresh;
        // A probe of its own per phase: the pooled one would reuse its connection.
        let first = HttpProbe::new(spec.clone(), names.clone());
        let result = first.check(Duration::from_secs(1)).await;
        assert!(result.failure().is_none(), "{result:?}");
        assert_eq!(result.remarks.dns_trouble, None);
        server.pause();
        let second = HttpProbe::new(spec, names.clone());
        let result = second.check(Duration::from_secs(1)).await;
        server.resume();
        assert!(result.failure().is_none(), "fresh {fresh}: {result:?}");
        let trouble = result.remarks.dns_trouble.clone().expect("a stale answer");
        assert!(trouble.used_stale_answer(), "{trouble:?}");
        assert!(result.remarks.describe().unwrap().contains("web.test"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfigure_points_the_resolver_at_other_servers() {
    let server = DnsServer::start(&[("alpha.test", LOOPBACK)]);
    let other = DnsServer::start(&[("alpha.test", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))]);
    let resolver = server.resolver();
    let soon = || Instant::now() + Duration::from_secs(1);
    let found = resolver.lookup("alpha.test", soon(), Duration::ZERO).await;
    assert_eq!(&*found.unwrap().addrs, &[LOOPBACK]);
    resolver.reconfigure(&other.config()).unwrap();
    let found = resolver.lookup("alpha.test", soon(), Duration::ZERO).await;
    assert_eq!(
        &*found.unwrap().addrs,
        &[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]
    );
    // A configuration that cannot work leaves the running one alone.
    let empty = probe::tier::resolve::ResolverConfig {
        servers: Some(Vec::new()),
        ..other.config()
    };
    assert!(resolver.reconfigure(&empty).is_err());
    assert!(
        resolver
            .lookup("alpha.test", soon(), Duration::ZERO)
            .await
            .is_ok()
    );
}
