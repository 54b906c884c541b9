//! The client-side balancer end to end: real HTTP backends on 127.0.0.1, the engine probing them
//! over HTTP, and requests sent through `BalanceLayer` over a reqwest client.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::any;
use probe::TargetId;
use probe::engine::{CircuitCommand, Engine, EngineConfig, PickError};
use probe::graph::{Dependency, NodeKind, NodeSpec};
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::passive::PoolPolicy;
use probe::passive::breaker::BreakerConfig;
use probe::passive::outlier::{OutlierConfig, OutlierSettings};
use probe::passive::recovery::{RecoveryConfig, RecoverySettings};
use probe::passive::slow_start::SlowStartConfig;
use probe::serve::balance::{BalanceLayer, BoxError, RetryBudget};
use probe::tier::ProbeSpec;
use probe::tier::http::HttpSpec;
use probe::topology::{TargetSpec, Topology};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;
use tower_service::Service;

/// A backend that answers 200, or 503 once told to fail, counting the requests it receives
/// besides health checks. Its health check fails only when told so too: a backend whose health
/// endpoint lies is what passive health is for.
#[derive(Default)]
struct Backend {
    failing: AtomicBool,
    health_failing: AtomicBool,
    received: AtomicUsize,
}

async fn answer(State(backend): State<Arc<Backend>>, uri: http::Uri) -> StatusCode {
    let failing = if uri.path() == "/health" {
        &backend.health_failing
    } else {
        backend.received.fetch_add(1, Ordering::SeqCst);
        &backend.failing
    };
    if failing.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn serve(cancel: &CancellationToken) -> (Arc<Backend>, SocketAddr) {
    let backend = Arc::new(Backend::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(any(answer))
        .with_state(backend.clone());
    let cancel = cancel.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await
            .unwrap();
    });
    (backend, addr)
}

/// A reqwest client as the tower service the layer wraps.
#[derive(Clone)]
struct Http(reqwest::Client);

impl Service<http::Request<String>> for Http {
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<String>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)?;
            Ok(client.execute(request).await?.into())
        })
    }
}

fn http_client() -> Http {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Http(
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
    )
}

/// The probe interval of the tests that do not race probes against requests.
const FAST: Duration = Duration::from_millis(500);

/// The usual pool: 1 s ejections.
const EJECTS: Ejects = Ejects::After3For(Duration::from_secs(1));

fn id(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

/// How the pool ejects: after 3 gateway failures, for `base_ejection` (the default 1 s; longer
/// for a test that must not see a member come back), or never.
#[derive(Clone, Copy)]
enum Ejects {
    After3For(Duration),
    Never,
}

/// Members probed every `interval`, DOWN after `fall` 3 failures; the pool ejects as `ejects`
/// says, then 1 s of cool-down and 2 passes, and ramps over 2 s.
fn topology(addrs: &[SocketAddr], interval: Duration, ejects: Ejects) -> Topology {
    let names: Vec<String> = (0..addrs.len()).map(|i| format!("m{i}")).collect();
    Topology {
        targets: names
            .iter()
            .zip(addrs)
            .map(|(name, addr)| {
                let url = format!("http://{addr}/health").parse().unwrap();
                TargetSpec::new(id(name), ProbeSpec::Http(Box::new(HttpSpec::get(url))))
                    .with_schedule(
                        Schedule::try_new(ScheduleSettings {
                            interval,
                            timeout: interval / 2,
                            jitter: 0.0,
                            backoff_jitter: Some(0.0),
                            ..ScheduleSettings::default()
                        })
                        .unwrap(),
                    )
                    .with_thresholds(Thresholds::new(
                        NonZeroU32::new(1).unwrap(),
                        NonZeroU32::new(3).unwrap(),
                    ))
                    .with_flap(None)
            })
            .collect(),
        nodes: vec![NodeSpec {
            id: id("upstream"),
            kind: NodeKind::Group,
            depends_on: names
                .iter()
                .map(|n| Dependency::new(id(n), "test"))
                .collect(),
        }],
        pools: BTreeMap::from([(
            id("upstream"),
            PoolPolicy {
                outlier: OutlierConfig::try_new(match ejects {
                    Ejects::After3For(base_ejection) => OutlierSettings {
                        base_ejection,
                        max_ejection: base_ejection.max(OutlierSettings::default().max_ejection),
                        max_ejection_percent: 50,
                        ..OutlierSettings::default()
                    },
                    Ejects::Never => OutlierSettings {
                        consecutive_5xx: None,
                        consecutive_gateway_failures: None,
                        min_success_rate: None,
                        ..OutlierSettings::default()
                    },
                })
                .unwrap(),
                recovery: RecoveryConfig::try_new(RecoverySettings {
                    cooldown: Duration::from_secs(1),
                    passes: 2,
                    ..RecoverySettings::default()
                })
                .unwrap(),
                slow_start: Some(
                    SlowStartConfig::try_new(Duration::from_secs(2), 0.1, 1.0).unwrap(),
                ),
            },
        )]),
        ..Topology::default()
    }
}

/// Starts `n` backends and an engine probing them every `interval`, and waits until every member
/// is UP.
async fn setup(
    n: usize,
    interval: Duration,
    ejects: Ejects,
    cancel: &CancellationToken,
) -> (Engine, Vec<Arc<Backend>>, Vec<SocketAddr>) {
    setup_with(n, cancel, |addrs| topology(addrs, interval, ejects)).await
}

/// [`setup`] with the topology `topology` makes of the backends' addresses.
async fn setup_with(
    n: usize,
    cancel: &CancellationToken,
    topology: impl FnOnce(&[SocketAddr]) -> Topology,
) -> (Engine, Vec<Arc<Backend>>, Vec<SocketAddr>) {
    let mut backends = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..n {
        let (backend, addr) = serve(cancel).await;
        backends.push(backend);
        addrs.push(addr);
    }
    let engine = Engine::start(EngineConfig::default(), cancel.child_token());
    let mut events = engine.subscribe();
    engine.apply(topology(&addrs)).unwrap();
    let mut up = 0;
    while up < n {
        if events.recv().await.unwrap().to == HealthState::Up {
            up += 1;
        }
    }
    (engine, backends, addrs)
}

fn get() -> http::Request<String> {
    http::Request::get("http://upstream/orders")
        .body(String::new())
        .unwrap()
}

async fn status<S>(service: &mut S, request: http::Request<String>) -> Result<u16, BoxError>
where
    S: Service<http::Request<String>, Response = http::Response<reqwest::Body>, Error = BoxError>,
{
    std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    Ok(service.call(request).await?.status().as_u16())
}

#[tokio::test]
async fn a_backend_returning_503_is_ejected_before_probes_notice_and_ramps_back() {
    let cancel = CancellationToken::new();
    // Probes every 2 s: `fall` takes 2 s or more once the backend fails, an age next to the
    // handful of requests that eject it, even on a loaded machine.
    let (engine, backends, _) = setup(3, Duration::from_secs(2), EJECTS, &cancel).await;
    let mut client =
        BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), None).layer(http_client());

    backends[0].failing.store(true, Ordering::SeqCst);
    backends[0].health_failing.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let mut failures = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !engine.status(&id("m0")).unwrap().pool.unwrap().ejected {
        if status(&mut client, get()).await.unwrap() == 503 {
            failures += 1;
        }
        assert!(
            Instant::now() < deadline,
            "not ejected after {failures} failures"
        );
    }
    let took = started.elapsed();
    let m0 = engine.status(&id("m0")).unwrap();
    assert_eq!(failures, 3, "ejected on the third gateway failure");
    assert_eq!(m0.state, HealthState::Down);
    assert!(
        m0.consecutive_failures < 3,
        "ejected before the active probe's fall: {} probe failures after {took:?}",
        m0.consecutive_failures
    );
    assert_eq!(
        m0.pool.unwrap().ejection.unwrap().reason.as_str(),
        "consecutive_gateway_failures"
    );

    // Healthy again, it comes back after its ejection time, cool-down and two passes, and its
    // weight climbs from 0.1 to 1 over the 2 s ramp.
    backends[0].failing.store(false, Ordering::SeqCst);
    backends[0].health_failing.store(false, Ordering::SeqCst);
    let mut weights = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let member = engine.status(&id("m0")).unwrap().pool.unwrap();
        if !member.ejected {
            weights.push(member.weight);
            if member.weight == 1.0 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no full return: {weights:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(weights[0] < 0.3, "starts low: {weights:?}");
    assert!(
        weights.windows(2).all(|w| w[0] <= w[1]),
        "never decreases: {weights:?}"
    );
    assert!(
        weights.iter().any(|w| *w > 0.4 && *w < 0.9),
        "ramps through the middle: {weights:?}"
    );
    cancel.cancel();
}

#[tokio::test]
async fn the_layer_spares_its_client_most_failures() {
    let cancel = CancellationToken::new();
    // The failing member stays out for the whole test once ejected, however slowly the 300
    // requests go: what is counted is the ejection, not the race with its return.
    let (engine, backends, addrs) = setup(
        3,
        FAST,
        Ejects::After3For(Duration::from_secs(600)),
        &cancel,
    )
    .await;
    backends[1].failing.store(true, Ordering::SeqCst);
    const REQUESTS: usize = 300;

    // Without the layer: the members in turn, as a plain client with a static list would.
    let mut plain = BoxErrors(http_client());
    let mut without = 0;
    for i in 0..REQUESTS {
        let url = format!("http://{}/orders", addrs[i % addrs.len()]);
        let request = http::Request::get(url).body(String::new()).unwrap();
        if status(&mut plain, request).await.unwrap() >= 500 {
            without += 1;
        }
    }

    // With it (and no retries, to measure ejection alone).
    let mut balanced =
        BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), None).layer(http_client());
    let mut with = 0;
    for _ in 0..REQUESTS {
        if status(&mut balanced, get()).await.unwrap() >= 500 {
            with += 1;
        }
    }
    println!("failed requests out of {REQUESTS}: {without} without the layer, {with} with it");
    assert_eq!(without, REQUESTS / 3, "one member in three fails");
    assert!(
        with <= 3,
        "the failing member is out after 3 failures: {with}"
    );
    cancel.cancel();
}

/// Gives a service the layer's error type, so both clients are driven alike.
struct BoxErrors<S>(S);

impl<S> Service<http::Request<String>> for BoxErrors<S>
where
    S: Service<http::Request<String>, Response = http::Response<reqwest::Body>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<reqwest::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<String>) -> Self::Future {
        let future = self.0.call(request);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

fn budget() -> Option<RetryBudget> {
    Some(RetryBudget::try_new(Duration::from_secs(10), 0.1, 1, Instant::now()).unwrap())
}

#[tokio::test]
async fn a_get_to_a_dying_member_succeeds_through_another() {
    let cancel = CancellationToken::new();
    let (engine, backends, _) = setup(2, FAST, EJECTS, &cancel).await;
    backends[0].failing.store(true, Ordering::SeqCst);
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), budget())
        .layer(http_client());
    for _ in 0..20 {
        assert_eq!(status(&mut client, get()).await.unwrap(), 200);
    }
    let dying = backends[0].received.load(Ordering::SeqCst);
    let healthy = backends[1].received.load(Ordering::SeqCst);
    assert!(dying >= 1, "the dying member was tried");
    assert_eq!(healthy, 20, "every GET was answered by the other member");
    cancel.cancel();
}

#[tokio::test]
async fn a_post_without_idempotency_key_is_never_retried() {
    let cancel = CancellationToken::new();
    let (engine, backends, _) = setup(2, FAST, EJECTS, &cancel).await;
    backends[0].failing.store(true, Ordering::SeqCst);
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), budget())
        .layer(http_client());
    let mut failed = 0;
    for _ in 0..20 {
        let post = http::Request::post("http://upstream/orders")
            .body("{}".to_owned())
            .unwrap();
        if status(&mut client, post).await.unwrap() == 503 {
            failed += 1;
        }
    }
    let dying = backends[0].received.load(Ordering::SeqCst);
    let healthy = backends[1].received.load(Ordering::SeqCst);
    assert!(failed >= 1, "the dying member got some POSTs");
    assert_eq!(
        failed, dying,
        "each POST it failed reached the client as is"
    );
    assert_eq!(dying + healthy, 20, "no POST was sent twice");

    // With a key, the same request is retried.
    engine.pools().clear_ejection(&id("m0")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let keyed = || {
        http::Request::post("http://upstream/orders")
            .header("idempotency-key", "order-42")
            .body("{}".to_owned())
            .unwrap()
    };
    while backends[0].received.load(Ordering::SeqCst) == dying {
        assert_eq!(status(&mut client, keyed()).await.unwrap(), 200);
        assert!(Instant::now() < deadline, "the dying member never drawn");
    }
    cancel.cancel();
}

/// The requests the backends received, besides health checks.
fn received(backends: &[Arc<Backend>]) -> usize {
    backends
        .iter()
        .map(|b| b.received.load(Ordering::SeqCst))
        .sum()
}

#[tokio::test]
async fn with_every_circuit_open_the_layer_fails_fast_without_a_request() {
    let cancel = CancellationToken::new();
    // Members with circuit breakers, which the test opens.
    let (engine, backends, _) = setup_with(2, &cancel, |addrs| {
        let mut topology = topology(addrs, FAST, EJECTS);
        for target in &mut topology.targets {
            target.circuit_breaker = Some(BreakerConfig::default());
        }
        topology
    })
    .await;
    for member in ["m0", "m1"] {
        engine
            .pools()
            .command_circuit(&id(member), CircuitCommand::ForceOpen)
            .unwrap();
    }
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), budget())
        .layer(http_client());
    let error = status(&mut client, get()).await.unwrap_err();
    let Some(PickError::Unavailable { rejected, .. }) = error.downcast_ref::<PickError>() else {
        panic!("not a fail-fast: {error}");
    };
    assert_eq!(*rejected, 2, "{error}");
    assert_eq!(received(&backends), 0, "no request reached a member");
    cancel.cancel();
}

#[tokio::test]
async fn a_failed_get_is_retried_exactly_once() {
    let cancel = CancellationToken::new();
    let (engine, backends, _) = setup(2, FAST, Ejects::Never, &cancel).await;
    for backend in &backends {
        backend.failing.store(true, Ordering::SeqCst);
    }
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), budget())
        .layer(http_client());
    assert_eq!(status(&mut client, get()).await.unwrap(), 503);
    let each: Vec<_> = backends
        .iter()
        .map(|b| b.received.load(Ordering::SeqCst))
        .collect();
    assert_eq!(
        each,
        [1, 1],
        "the first try and one retry on the other member"
    );
    cancel.cancel();
}

#[tokio::test]
async fn head_and_options_are_retried_like_get() {
    let cancel = CancellationToken::new();
    // Never ejected: the failing member keeps being drawn, and each of its failures retried.
    let (engine, backends, _) = setup(2, FAST, Ejects::Never, &cancel).await;
    backends[0].failing.store(true, Ordering::SeqCst);
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), budget())
        .layer(http_client());
    for method in [http::Method::HEAD, http::Method::OPTIONS] {
        let before = backends[0].received.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Until the failing member has been drawn (and retried) at least twice.
        while backends[0].received.load(Ordering::SeqCst) < before + 2 {
            let request = http::Request::builder()
                .method(method.clone())
                .uri("http://upstream/orders")
                .body(String::new())
                .unwrap();
            assert_eq!(status(&mut client, request).await.unwrap(), 200, "{method}");
            assert!(
                Instant::now() < deadline,
                "{method}: the failing member never drawn"
            );
        }
    }
    cancel.cancel();
}

#[tokio::test]
async fn retries_stop_when_the_budget_runs_out() {
    const REQUESTS: usize = 50;
    let cancel = CancellationToken::new();
    let (engine, backends, _) = setup(2, FAST, Ejects::Never, &cancel).await;
    for backend in &backends {
        backend.failing.store(true, Ordering::SeqCst);
    }
    // One retry per ten requests and no floor, over a window longer than the test.
    let budget = RetryBudget::try_new(Duration::from_secs(600), 0.1, 0, Instant::now()).unwrap();
    let mut client = BalanceLayer::with_retry_budget(engine.clone(), id("upstream"), Some(budget))
        .layer(http_client());
    for _ in 0..REQUESTS {
        assert_eq!(status(&mut client, get()).await.unwrap(), 503);
    }
    // Every request failed and asked for a retry; the budget granted one per ten requests.
    assert_eq!(received(&backends), REQUESTS + REQUESTS / 10);
    cancel.cancel();
}
