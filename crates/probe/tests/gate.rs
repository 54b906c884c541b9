//! The readiness gate in front of a real axum server on 127.0.0.1: drain end to end, drain
//! timeout, request outcomes, and the admit/drain race under threads.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use probe::gate::{Gate, GateConfig, GateLayer, GateState, ObserveRequests, RequestOutcome};
use tokio::sync::Notify;

/// A server whose `/work` waits until `release` is notified, behind the gate; the health
/// endpoints bypass it.
async fn serve(gate: Gate, release: Arc<Notify>, observer: Arc<Outcomes>) -> SocketAddr {
    let work = Router::new()
        .route(
            "/work",
            get(move || {
                let release = release.clone();
                async move {
                    release.notified().await;
                    "done"
                }
            }),
        )
        .route("/fail", get(|| async { StatusCode::BAD_GATEWAY }))
        .layer(
            GateLayer::new(gate.clone())
                .retry_after(Duration::from_secs(5))
                .observe(observer),
        );
    let health = {
        let (live, ready) = (gate.clone(), gate);
        Router::new()
            .route(
                "/livez",
                get(move || async move { live.liveness().into_response::<axum::body::Body>() }),
            )
            .route(
                "/readyz",
                get(move || async move { ready.readiness().into_response::<axum::body::Body>() }),
            )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, work.merge(health)).await.unwrap() });
    addr
}

#[derive(Default)]
struct Outcomes(Mutex<Vec<RequestOutcome>>);

impl ObserveRequests for Outcomes {
    fn observe(&self, outcome: &RequestOutcome) {
        self.0.lock().unwrap().push(*outcome);
    }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Waits until the gate counts `n` requests in flight (the server's only signal of arrival).
async fn until_in_flight(gate: &Gate, n: u64) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while gate.requests() != n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("requests never arrived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_finishes_admitted_requests_and_refuses_new_ones() {
    let gate = Gate::new(GateConfig::default());
    gate.startup_complete();
    let release = Arc::new(Notify::new());
    let outcomes = Arc::new(Outcomes::default());
    let addr = serve(gate.clone(), release.clone(), outcomes.clone()).await;
    let http = client();
    let url = |path: &str| format!("http://{addr}{path}");
    assert_eq!(http.get(url("/readyz")).send().await.unwrap().status(), 200);

    let in_flight = tokio::spawn(http.get(url("/work")).send());
    until_in_flight(&gate, 1).await;
    let draining = tokio::spawn({
        let gate = gate.clone();
        async move { gate.drain(Duration::from_secs(10)).await }
    });
    while gate.state() != GateState::Draining {
        tokio::task::yield_now().await;
    }
    let readyz = http.get(url("/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 503);
    assert_eq!(readyz.text().await.unwrap(), "draining\n");
    assert_eq!(http.get(url("/livez")).send().await.unwrap().status(), 200);
    let refused = http.get(url("/work")).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["connection"], "close");
    assert_eq!(refused.headers()["retry-after"], "5");

    release.notify_one();
    let done = in_flight.await.unwrap().unwrap();
    assert_eq!(done.status(), 200);
    assert_eq!(done.text().await.unwrap(), "done");
    let report = draining.await.unwrap();
    assert!(report.clean, "{report:?}");
    assert_eq!(gate.state(), GateState::Stopped);
    assert_eq!(http.get(url("/livez")).send().await.unwrap().status(), 503);
    let seen = outcomes.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "refusals are not outcomes of the service");
    assert_eq!(seen[0].status, Some(StatusCode::OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_request_times_the_drain_out() {
    let gate = Gate::new(GateConfig::default());
    gate.startup_complete();
    let release = Arc::new(Notify::new());
    let outcomes = Arc::new(Outcomes::default());
    let addr = serve(gate.clone(), release.clone(), outcomes.clone()).await;
    let http = client();
    let stuck = tokio::spawn(http.get(format!("http://{addr}/work")).send());
    until_in_flight(&gate, 1).await;

    let report = gate.drain(Duration::from_millis(200)).await;
    assert!(!report.clean);
    assert_eq!((report.requests, report.tasks), (1, 0));
    assert!(report.took >= Duration::from_millis(200));
    assert_eq!(gate.state(), GateState::Stopped);
    assert_eq!(gate.requests(), 1);
    release.notify_one();
    assert_eq!(stuck.await.unwrap().unwrap().status(), 200);
    until_in_flight(&gate, 0).await;

    // Observed outcomes: a 5xx counts as failed.
    let gate = Gate::new(GateConfig::default());
    gate.startup_complete();
    let addr = serve(gate, release, outcomes.clone()).await;
    let failed = http
        .get(format!("http://{addr}/fail"))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 502);
    let last = *outcomes.0.lock().unwrap().last().unwrap();
    assert_eq!(last.status, Some(StatusCode::BAD_GATEWAY));
    assert!(last.failed());
}

/// Threads admit and release as fast as they can while a drain runs: once the drain has
/// returned, no admission ever succeeds, and the drain is clean since every admitted request
/// finishes.
#[test]
fn no_request_is_admitted_after_a_drain_returns() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    for _ in 0..200 {
        let gate = Gate::new(GateConfig::default());
        gate.startup_complete();
        let admitted = Arc::new(AtomicU64::new(0));
        let attempts = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (gate, admitted, stop) = (gate.clone(), admitted.clone(), stop.clone());
                let attempts = attempts.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        if let Some(admission) = gate.admit() {
                            admitted.fetch_add(1, Ordering::SeqCst);
                            std::hint::black_box(&admission);
                        }
                    }
                })
            })
            .collect();
        while admitted.load(Ordering::SeqCst) < 100 {
            std::thread::yield_now();
        }
        let report = runtime.block_on(gate.drain(Duration::from_secs(10)));
        let at_drain = admitted.load(Ordering::SeqCst);
        // Let the workers try again many times after the drain, then stop them.
        let tried = attempts.load(Ordering::SeqCst);
        while attempts.load(Ordering::SeqCst) < tried + 300 {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.join().unwrap();
        }
        assert!(report.clean, "{report:?}");
        assert_eq!(
            admitted.load(Ordering::SeqCst),
            at_drain,
            "admitted after the drain"
        );
        assert_eq!(gate.requests(), 0);
    }
}

/// A probe that always passes: the target stands for the gated service itself.
struct AlwaysUp;

#[async_trait::async_trait]
impl probe::tier::Probe for AlwaysUp {
    async fn check(&self, _timeout: Duration) -> probe::outcome::CheckResult {
        probe::outcome::CheckResult::up()
    }
}

#[tokio::test]
async fn the_gate_reports_its_own_outcomes_to_the_engine() {
    use probe::TargetId;
    use probe::passive::breaker::{BreakerConfig, CircuitState, Window};
    use probe::tier::{CustomProbe, ProbeSpec};
    use probe::topology::TargetSpec;

    let cancel = tokio_util::sync::CancellationToken::new();
    let engine = probe::Engine::start(probe::EngineConfig::default(), cancel.clone());
    let me = TargetId::new("self-api").unwrap();
    let breaker = BreakerConfig::builder()
        .window(Window::Count(std::num::NonZeroUsize::new(4).unwrap()))
        .minimum_calls(4)
        .build()
        .unwrap();
    engine
        .apply(vec![
            TargetSpec::new(
                me.clone(),
                ProbeSpec::Custom(CustomProbe::new(Arc::new(AlwaysUp))),
            )
            .with_circuit_breaker(Some(breaker)),
        ])
        .unwrap();
    let gate = Gate::new(GateConfig::default());
    gate.startup_complete();
    let app = Router::new()
        .route("/fail", get(|| async { StatusCode::BAD_GATEWAY }))
        .layer(GateLayer::new(gate).observe(Arc::new(engine.pools().reporter(me.clone()))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = client();
    for _ in 0..4 {
        let response = client
            .get(format!("http://{addr}/fail"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    }
    // The observer runs when the response is ready, before the client has it.
    let circuit = engine.status(&me).unwrap().circuit.unwrap();
    assert_eq!(circuit.calls, 4);
    assert_eq!(circuit.failures, 4);
    assert_eq!(circuit.state, CircuitState::Open);
    cancel.cancel();
}
