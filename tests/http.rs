//! The HTTP tier against real axum servers on 127.0.0.1, switchable between behaviours: every
//! condition kind passing and failing with the right reason, degraded verdicts, signals, TLS trust
//! settings, redirects, connection reuse, and secret header values that never leak.
//!
//! The HTTP tier has two transports, reqwest's pool (the default) and a one-shot connection per
//! check (`fresh_connection`); every test about what goes over the wire runs on both ([`both`]).

#[path = "../crates/probe/tests/support/dns.rs"]
mod dns;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use probe::outcome::{CheckResult, Failure, FailureReason, Severity, Signal, Verdict};
use probe::tier::http::{
    CaBundle, DegradedIf, HeaderMatch, HttpProbe, HttpSpec, JsonMatch, JsonScalar, Match,
    SignalRule, StatusSet, TlsTrust,
};
use probe::tier::{Probe, ProbeSpec};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

const TIMEOUT: Duration = Duration::from_secs(2);
/// How long the `Slow` server waits before answering.
const SLOW: Duration = Duration::from_millis(150);

/// What the test server does with the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    /// 200, JSON `{"status": "UP", "mode": "normal"}`, `content-type: application/json`.
    Healthy,
    /// As healthy, after [`SLOW`].
    Slow,
    /// 200 with `{"status": "DOWN", ...}`.
    WrongBody,
    /// 503 with `{"status": "DOWN"}`.
    WrongStatus,
    /// Never answers.
    Hang,
    /// Reads the request, then closes the connection with a reset.
    Reset,
    /// 200, healthy but `"mode": "readonly"`.
    Readonly,
    /// 503, `x-reason: inventory_shortage`, `{"error": {"code": "OUT_OF_STOCK"}}`.
    Shortage,
    /// 200, `text/plain` body that is not JSON.
    NotJson,
    /// 200 with a 2 MiB body.
    Big,
}

impl Mode {
    const ALL: [Mode; 10] = [
        Mode::Healthy,
        Mode::Slow,
        Mode::WrongBody,
        Mode::WrongStatus,
        Mode::Hang,
        Mode::Reset,
        Mode::Readonly,
        Mode::Shortage,
        Mode::NotJson,
        Mode::Big,
    ];
}

struct ServerState {
    mode: AtomicU8,
    accepted: AtomicUsize,
    last_authorization: Mutex<Option<String>>,
}

impl ServerState {
    fn mode(&self) -> Mode {
        Mode::ALL[usize::from(self.mode.load(Ordering::SeqCst))]
    }
}

/// A running test server; aborted when dropped.
struct Server {
    addr: SocketAddr,
    state: Arc<ServerState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    fn set(&self, mode: Mode) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn spec(&self, path: &str) -> HttpSpec {
        HttpSpec::get(self.url(path).parse().unwrap())
    }
}

fn json_response(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn ready(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        *state.last_authorization.lock().unwrap() = auth.to_str().ok().map(str::to_owned);
    }
    match state.mode() {
        Mode::Healthy | Mode::Reset => {
            json_response(StatusCode::OK, r#"{"status":"UP","mode":"normal"}"#)
        }
        Mode::Slow => {
            tokio::time::sleep(SLOW).await;
            json_response(StatusCode::OK, r#"{"status":"UP","mode":"normal"}"#)
        }
        Mode::WrongBody => json_response(StatusCode::OK, r#"{"status":"DOWN","mode":"normal"}"#),
        Mode::WrongStatus => json_response(StatusCode::SERVICE_UNAVAILABLE, r#"{"status":"DOWN"}"#),
        Mode::Hang => std::future::pending().await,
        Mode::Readonly => json_response(StatusCode::OK, r#"{"status":"UP","mode":"readonly"}"#),
        Mode::Shortage => (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::CONTENT_TYPE, "application/json"),
                (
                    header::HeaderName::from_static("x-reason"),
                    "inventory_shortage",
                ),
            ],
            r#"{"error":{"code":"OUT_OF_STOCK"}}"#,
        )
            .into_response(),
        Mode::NotJson => (StatusCode::OK, "ok, but not JSON").into_response(),
        Mode::Big => (StatusCode::OK, vec![b'x'; 2 * 1024 * 1024]).into_response(),
    }
}

fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/ready", get(ready))
        .route(
            "/redirect",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/ready")]) }),
        )
        .route(
            "/loop",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/loop")]) }),
        )
        .route(
            "/see-other",
            axum::routing::post(|| async {
                (StatusCode::SEE_OTHER, [(header::LOCATION, "method")])
            }),
        )
        // Answers with the method it was called with.
        .route(
            "/method",
            axum::routing::any(|method: axum::http::Method| async move { method.to_string() }),
        )
        // Redirects to /ready on another port of 127.0.0.1.
        .route(
            "/away/{port}",
            get(|UrlPath(port): UrlPath<u16>| async move {
                let location = format!("http://127.0.0.1:{port}/ready");
                (StatusCode::FOUND, [(header::LOCATION, location)])
            }),
        )
        .with_state(state)
}

/// Counts accepted connections and, in `Reset` mode, resets them after reading the request.
struct TestListener {
    inner: TcpListener,
    state: Arc<ServerState>,
}

impl axum::serve::Listener for TestListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Ok((mut stream, addr)) = self.inner.accept().await else {
                continue;
            };
            self.state.accepted.fetch_add(1, Ordering::SeqCst);
            if self.state.mode() != Mode::Reset {
                return (stream, addr);
            }
            tokio::spawn(async move {
                let mut request = [0; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream.set_zero_linger();
            });
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

async fn serve(mode: Mode) -> Server {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let state = Arc::new(ServerState {
        mode: AtomicU8::new(mode as u8),
        accepted: AtomicUsize::new(0),
        last_authorization: Mutex::new(None),
    });
    let listener = TestListener {
        inner,
        state: state.clone(),
    };
    let app = router(state.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { addr, state, task }
}

/// A port nothing listens on.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

async fn check(spec: HttpSpec) -> CheckResult {
    HttpProbe::new(spec, probe::tier::resolve::Names::system())
        .check(TIMEOUT)
        .await
}

/// The spec on the pooled transport, then on the one-shot one (`fresh_connection`).
fn both(spec: HttpSpec) -> [HttpSpec; 2] {
    let mut fresh = spec.clone();
    fresh.fresh_connection = true;
    [spec, fresh]
}

/// Names the transport in assertion messages.
fn mode(spec: &HttpSpec) -> &'static str {
    if spec.fresh_connection {
        "fresh_connection"
    } else {
        "pooled"
    }
}

fn failure(result: &CheckResult) -> &Failure {
    result
        .failure()
        .unwrap_or_else(|| panic!("expected a failure, got {result:?}"))
}

fn json(path: &str, value: JsonScalar) -> JsonMatch {
    JsonMatch::is(path.parse().unwrap(), value)
}

fn text(s: &str) -> JsonScalar {
    JsonScalar::String(s.into())
}

fn statuses(list: &[&str]) -> StatusSet {
    StatusSet::new(list.iter().map(|s| s.parse().unwrap()).collect()).unwrap()
}

fn header_is(name: &'static str, value: &str) -> HeaderMatch {
    HeaderMatch {
        name: header::HeaderName::from_static(name),
        value: value.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Expectations.

#[tokio::test]
async fn a_healthy_endpoint_is_up_with_default_expectations() {
    let server = serve(Mode::Healthy).await;
    for spec in both(server.spec("/ready")) {
        assert_eq!(
            check(spec.clone()).await,
            CheckResult::up(),
            "{}",
            mode(&spec)
        );
    }
}

#[tokio::test]
async fn status_expectations_pass_and_fail_with_reason_status() {
    let server = serve(Mode::WrongStatus).await;
    for spec in both(server.spec("/ready")) {
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Status, "{}", mode(&spec));
        assert_eq!(f.detail, "status 503 Service Unavailable, expected 2xx");
    }

    for accepted in [&["503"][..], &["200", "5xx"]] {
        let mut spec = server.spec("/ready");
        spec.expect.status = statuses(accepted);
        assert_eq!(check(spec).await.verdict, Verdict::Up, "{accepted:?}");
    }
    server.set(Mode::Healthy);
    let mut spec = server.spec("/ready");
    spec.expect.status = statuses(&["204", "3xx"]);
    let result = check(spec).await;
    assert_eq!(failure(&result).detail, "status 200 OK, expected 204, 3xx");
}

#[tokio::test]
async fn body_contains_passes_and_fails_with_reason_body() {
    let server = serve(Mode::Healthy).await;
    let mut spec = server.spec("/ready");
    spec.expect.body_contains = Some(r#""status":"UP""#.into());
    for spec in both(spec) {
        server.set(Mode::Healthy);
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );

        server.set(Mode::WrongBody);
        let result = check(spec).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Body);
        let expected = r#"body does not contain "\"status\":\"UP\"""#;
        assert!(f.detail.starts_with(expected), "{f}");
    }
}

#[tokio::test]
async fn header_expectations_pass_and_fail_with_reason_assertion() {
    let server = serve(Mode::Healthy).await;
    let mut spec = server.spec("/ready");
    spec.expect.headers = vec![header_is("content-type", "application/json")];
    for spec in both(spec) {
        server.set(Mode::Healthy);
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );

        server.set(Mode::NotJson);
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Assertion);
        assert_eq!(
            f.detail,
            r#"header content-type is "text/plain; charset=utf-8", expected "application/json""#
        );

        let mut missing = spec;
        missing.expect.headers = vec![header_is("x-missing", "1")];
        let result = check(missing).await;
        assert_eq!(
            failure(&result).detail,
            r#"header x-missing is missing, expected "1""#
        );
    }
}

#[tokio::test]
async fn json_expectations_pass_and_fail_with_reason_assertion() {
    let server = serve(Mode::Healthy).await;
    let mut spec = server.spec("/ready");
    spec.expect.json = vec![json("$.status", text("UP")), json("$.mode", text("normal"))];
    for spec in both(spec) {
        server.set(Mode::Healthy);
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );

        server.set(Mode::WrongBody);
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Assertion);
        assert_eq!(f.detail, r#"$.status is "DOWN", expected "UP""#);

        server.set(Mode::Healthy);
        let mut deeper = spec.clone();
        deeper.expect.json = vec![json("$.checks[0].ok", JsonScalar::Bool(true))];
        let result = check(deeper).await;
        assert_eq!(
            failure(&result).detail,
            "$.checks[0].ok is missing, expected true"
        );

        // A body that is not JSON at all is a body failure, not a failed assertion.
        server.set(Mode::NotJson);
        let result = check(spec).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Body);
        assert!(f.detail.contains("body is not JSON"), "{f}");
    }
}

#[tokio::test]
async fn the_first_failing_expectation_gives_the_reason() {
    let server = serve(Mode::WrongStatus).await;
    let mut spec = server.spec("/ready");
    spec.expect.body_contains = Some("UP".into());
    spec.expect.json = vec![json("$.status", text("UP"))];
    assert_eq!(
        failure(&check(spec.clone()).await).reason,
        FailureReason::Status
    );
    spec.expect.status = statuses(&["503"]);
    assert_eq!(failure(&check(spec).await).reason, FailureReason::Body);
}

#[tokio::test]
async fn oversized_bodies_fail_only_when_a_condition_reads_them() {
    let server = serve(Mode::Big).await;
    for spec in both(server.spec("/ready")) {
        // Nothing looks at the body: it is read up to the limit, then the connection is dropped.
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );

        let mut reading = spec;
        reading.expect.body_contains = Some("x".into());
        let result = check(reading).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Body);
        assert!(f.detail.contains("over the 1024 KiB limit"), "{f}");
    }
}

// ---------------------------------------------------------------------------------------------
// Transport failures.

#[tokio::test]
async fn a_hanging_server_times_out() {
    let server = serve(Mode::Hang).await;
    for spec in both(server.spec("/ready")) {
        let result = HttpProbe::new(spec.clone(), probe::tier::resolve::Names::system())
            .check(Duration::from_millis(200))
            .await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Timeout, "{}", mode(&spec));
        assert_eq!(f.detail, "no response within 200ms");
    }
}

#[tokio::test]
async fn a_reset_connection_fails_as_reset() {
    let server = serve(Mode::Reset).await;
    for spec in both(server.spec("/ready")) {
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Reset, "{}: {f}", mode(&spec));
    }
}

#[tokio::test]
async fn a_closed_port_is_refused() {
    let addr = closed_port().await;
    for spec in both(HttpSpec::get(
        format!("http://{addr}/ready").parse().unwrap(),
    )) {
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Refused, "{}: {f}", mode(&spec));
        assert!(f.detail.starts_with("connect: "), "{f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresolvable_name_fails_as_dns() {
    // Through the harness's own DNS server: no query leaves the machine.
    let server = dns::DnsServer::start(&[]);
    let names = server.names(Duration::from_secs(60));
    // A 64-character label is longer than DNS allows: rejected without a query. A name the
    // zone does not have: NXDOMAIN, an answer, so no stale answer could stand in.
    for name in [format!("{}.invalid", "a".repeat(64)), "missing.test".into()] {
        for spec in both(HttpSpec::get(format!("http://{name}:80/").parse().unwrap())) {
            let result = HttpProbe::new(spec.clone(), names.clone())
                .check(TIMEOUT)
                .await;
            let f = failure(&result);
            assert_eq!(f.reason, FailureReason::Dns, "{}: {f}", mode(&spec));
            assert!(f.detail.contains(&name), "{f}");
            assert_eq!(result.remarks.dns_trouble, None, "an answer, not trouble");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Degraded verdicts.

#[tokio::test]
async fn slow_but_correct_is_degraded() {
    let server = serve(Mode::Slow).await;
    let mut spec = server.spec("/ready");
    spec.degraded_if.latency_over = Some(Duration::from_millis(50));
    let result = check(spec.clone()).await;
    let Verdict::Degraded(reasons) = &result.verdict else {
        panic!("expected degraded, got {result:?}");
    };
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("latency ") && reasons[0].ends_with("ms over 50ms"),
        "{reasons:?}"
    );

    // Under the threshold: up. (A threshold far above a healthy reply's latency, so that a
    // loaded machine cannot make the healthy reply look slow.)
    server.set(Mode::Healthy);
    let mut quick = spec.clone();
    quick.degraded_if.latency_over = Some(TIMEOUT / 2);
    assert_eq!(check(quick).await.verdict, Verdict::Up);

    // Degraded only applies when the expectations hold.
    server.set(Mode::Slow);
    spec.expect.status = statuses(&["204"]);
    assert_eq!(failure(&check(spec).await).reason, FailureReason::Status);
}

#[tokio::test]
async fn a_json_value_can_make_a_reply_degraded() {
    let server = serve(Mode::Readonly).await;
    let mut spec = server.spec("/ready");
    spec.degraded_if = DegradedIf {
        latency_over: Some(Duration::from_secs(10)),
        json: vec![json("$.mode", text("readonly"))],
    };
    assert_eq!(
        check(spec.clone()).await.verdict,
        Verdict::Degraded(vec![r#"$.mode is "readonly""#.into()])
    );
    server.set(Mode::Healthy);
    assert_eq!(check(spec.clone()).await.verdict, Verdict::Up);

    // Slow and read-only: both reasons.
    server.set(Mode::Readonly);
    spec.degraded_if.latency_over = Some(Duration::from_nanos(1));
    let result = check(spec).await;
    let Verdict::Degraded(reasons) = result.verdict else {
        panic!("expected degraded");
    };
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[1], r#"$.mode is "readonly""#);
}

// ---------------------------------------------------------------------------------------------
// Signals.

fn shortage_rule() -> SignalRule {
    SignalRule::try_new(
        "StockReservationFailed",
        Severity::High,
        Match {
            status: Some(statuses(&["503"])),
            headers: vec![header_is("x-reason", "inventory_shortage")],
            json: vec![json("$.error.code", text("OUT_OF_STOCK"))],
        },
    )
    .unwrap()
}

#[tokio::test]
async fn signals_fire_when_every_part_matches_whatever_the_verdict() {
    let server = serve(Mode::Shortage).await;
    let mut spec = server.spec("/ready");
    spec.signals = vec![
        shortage_rule(),
        SignalRule::try_new(
            "Unavailable",
            Severity::Medium,
            Match {
                status: Some(statuses(&["5xx"])),
                ..Match::default()
            },
        )
        .unwrap(),
    ];
    let result = check(spec.clone()).await;
    assert_eq!(failure(&result).reason, FailureReason::Status);
    let signal = |name: &str, severity| Signal {
        name: name.into(),
        severity,
    };
    assert_eq!(
        result.signals,
        vec![
            signal("StockReservationFailed", Severity::High),
            signal("Unavailable", Severity::Medium)
        ]
    );

    // A 503 without the header and body: only the status rule fires.
    server.set(Mode::WrongStatus);
    let result = check(spec.clone()).await;
    assert_eq!(
        result.signals,
        vec![signal("Unavailable", Severity::Medium)]
    );

    // Healthy: nothing fires.
    server.set(Mode::Healthy);
    assert_eq!(check(spec.clone()).await, CheckResult::up());

    // Signals also come with a passing verdict.
    server.set(Mode::Shortage);
    spec.expect.status = statuses(&["2xx", "503"]);
    let result = check(spec).await;
    assert_eq!(result.verdict, Verdict::Up);
    assert_eq!(result.signals.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Redirects and connections.

#[tokio::test]
async fn redirects_are_not_followed_unless_asked() {
    let server = serve(Mode::Healthy).await;
    for spec in both(server.spec("/redirect")) {
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Status, "{}", mode(&spec));
        assert_eq!(f.detail, "status 302 Found, expected 2xx");

        let mut follow = spec;
        follow.follow_redirects = true;
        follow.expect.json = vec![json("$.status", text("UP"))];
        assert_eq!(check(follow).await.verdict, Verdict::Up);
    }
}

#[tokio::test]
async fn followed_redirects_are_bounded_and_change_method_as_http_says() {
    let server = serve(Mode::Healthy).await;
    let mut endless = server.spec("/loop");
    endless.follow_redirects = true;
    let mut see_other = server.spec("/see-other");
    see_other.follow_redirects = true;
    see_other.method = probe::tier::http::Method::POST;
    see_other.body = Some("x".into());
    see_other.expect.body_contains = Some("GET".into());
    for (endless, see_other) in both(endless).into_iter().zip(both(see_other)) {
        let result = check(endless.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Status, "{}", mode(&endless));
        assert_eq!(f.detail, "more than 5 redirects");
        // A 303 after a POST continues as a GET.
        assert_eq!(check(see_other).await.verdict, Verdict::Up);
    }
}

#[tokio::test]
async fn configured_headers_do_not_follow_a_redirect_to_another_origin() {
    let origin = serve(Mode::Healthy).await;
    let elsewhere = serve(Mode::Healthy).await;
    let mut spec = origin.spec(&format!("/away/{}", elsewhere.addr.port()));
    spec.follow_redirects = true;
    spec.headers
        .append("Authorization", "Bearer t0k3n")
        .unwrap();
    for spec in both(spec) {
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );
        assert_eq!(*elsewhere.state.last_authorization.lock().unwrap(), None);
    }
    assert!(elsewhere.accepted() >= 2, "the redirects were followed");
    // On the same origin they are sent.
    let mut same = origin.spec("/redirect");
    same.follow_redirects = true;
    same.headers
        .append("Authorization", "Bearer t0k3n")
        .unwrap();
    for spec in both(same) {
        *origin.state.last_authorization.lock().unwrap() = None;
        assert_eq!(check(spec).await.verdict, Verdict::Up);
        assert_eq!(
            origin.state.last_authorization.lock().unwrap().as_deref(),
            Some("Bearer t0k3n")
        );
    }
}

#[tokio::test]
async fn connections_are_reused_unless_fresh_connection_is_set() {
    const CHECKS: usize = 5;
    let server = serve(Mode::Healthy).await;
    let probe = HttpProbe::new(server.spec("/ready"), probe::tier::resolve::Names::system());
    for _ in 0..CHECKS {
        assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    }
    assert_eq!(server.accepted(), 1, "one kept-alive connection");

    let server = serve(Mode::Healthy).await;
    let mut spec = server.spec("/ready");
    spec.fresh_connection = true;
    let probe = HttpProbe::new(spec, probe::tier::resolve::Names::system());
    for _ in 0..CHECKS {
        assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    }
    assert_eq!(server.accepted(), CHECKS, "one connection per check");
}

/// What the echo server saw: the `x-api-key` header, the user agent and the body.
type Seen = Arc<Mutex<Option<(String, String, String)>>>;

#[tokio::test]
async fn request_method_headers_and_body_are_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route(
            "/echo",
            axum::routing::post(
                |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    let key = headers
                        .get("x-api-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let agent = headers
                        .get(header::USER_AGENT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    *seen.lock().unwrap() = Some((key, agent, body));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(seen.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut spec = HttpSpec::get(format!("http://{addr}/echo?probe=1").parse().unwrap());
    spec.method = probe::tier::http::Method::POST;
    spec.headers.append("X-Api-Key", "k-123").unwrap();
    spec.body = Some(r#"{"probe": true}"#.into());
    for spec in both(spec) {
        *seen.lock().unwrap() = None;
        assert_eq!(
            check(spec.clone()).await.verdict,
            Verdict::Up,
            "{}",
            mode(&spec)
        );
        let (key, agent, body) = seen.lock().unwrap().clone().unwrap();
        assert_eq!(key, "k-123");
        assert!(agent.starts_with("probe-engine/"), "{agent}");
        assert_eq!(body, r#"{"probe": true}"#);
    }
    server.abort();
}

// ---------------------------------------------------------------------------------------------
// TLS.

/// A CA and a certificate for 127.0.0.1 signed by it, generated for the test.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn generate_pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "probe test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
    .unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server: Arc::new(server),
    }
}

/// Accepts TCP, completes the TLS handshake (dropping connections whose handshake fails), and
/// hands the TLS stream to axum.
struct TlsListener {
    inner: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(stream);
            if let Ok(Ok(tls)) = tokio::time::timeout(TIMEOUT, handshake).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

async fn serve_tls(pki: &Pki) -> Server {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let state = Arc::new(ServerState {
        mode: AtomicU8::new(Mode::Healthy as u8),
        accepted: AtomicUsize::new(0),
        last_authorization: Mutex::new(None),
    });
    let listener = TlsListener {
        inner,
        acceptor: tokio_rustls::TlsAcceptor::from(pki.server.clone()),
    };
    let app = router(state.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { addr, state, task }
}

#[tokio::test]
async fn tls_verifies_by_default_and_accepts_a_configured_ca() {
    let pki = generate_pki();
    let server = serve_tls(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let other = generate_pki();

    for spec in both(HttpSpec::get(
        format!("https://{}/ready", server.addr).parse().unwrap(),
    )) {
        // The generated CA is in no trust store.
        let result = check(spec.clone()).await;
        let f = failure(&result);
        assert_eq!(f.reason, FailureReason::Tls, "{}: {f}", mode(&spec));
        assert!(f.detail.contains("certificate"), "{f}");

        let mut insecure = spec.clone();
        insecure.tls = TlsTrust::InsecureSkipVerify;
        assert_eq!(check(insecure).await.verdict, Verdict::Up);

        let mut with_ca = spec.clone();
        with_ca.tls = TlsTrust::WithCa(CaBundle::from_file(&ca_file).unwrap());
        with_ca.expect.json = vec![json("$.status", text("UP"))];
        assert_eq!(check(with_ca).await.verdict, Verdict::Up);

        // A CA that did not sign the server's certificate does not help.
        let mut wrong_ca = spec;
        wrong_ca.tls = TlsTrust::WithCa(CaBundle::from_pem(other.ca_pem.as_bytes()).unwrap());
        assert_eq!(failure(&check(wrong_ca).await).reason, FailureReason::Tls);
    }
}

#[tokio::test]
async fn tls_to_a_plain_http_server_fails_as_tls() {
    let server = serve(Mode::Healthy).await;
    let mut spec = HttpSpec::get(format!("https://{}/ready", server.addr).parse().unwrap());
    spec.tls = TlsTrust::InsecureSkipVerify;
    for spec in both(spec) {
        let result = check(spec.clone()).await;
        assert_eq!(
            failure(&result).reason,
            FailureReason::Tls,
            "{}",
            mode(&spec)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// From YAML to verdict.

#[tokio::test]
async fn the_documented_yaml_example_runs_end_to_end() {
    let server = serve(Mode::Healthy).await;
    let yaml = format!(
        r#"
targets:
  - id: orders-api
    http:
      url: {url}
      method: GET
      headers: {{ Authorization: "Bearer ${{ORDERS_TOKEN}}" }}
      body: '{{"probe": true}}'
      expect:
        status: [200, 204]
        body_contains: "UP"
        json: {{ "$.status": "UP" }}
        header: {{ Content-Type: "application/json" }}
      degraded_if:
        latency_over: 300ms
        json: {{ "$.mode": "readonly" }}
      signals:
        - name: StockReservationFailed
          severity: high
          when: {{ status: [503], header: {{ x-reason: inventory_shortage }}, json: {{ "$.error.code": "OUT_OF_STOCK" }} }}
"#,
        url = server.url("/ready")
    );
    let env = |name: &str| (name == "ORDERS_TOKEN").then(|| "t0k3n".to_owned());
    let config = probe_config::parse_with_env(Path::new("t.yaml"), &yaml, &env)
        .unwrap_or_else(|e| panic!("{e}"));
    let probe = probe::tier::build(
        &config.topology.targets[0].probe,
        &probe::tier::resolve::Names::system(),
    );
    assert!(matches!(
        config.topology.targets[0].probe,
        ProbeSpec::Http(_)
    ));

    assert_eq!(probe.check(TIMEOUT).await, CheckResult::up());
    assert_eq!(
        server.state.last_authorization.lock().unwrap().as_deref(),
        Some("Bearer t0k3n")
    );
    server.set(Mode::Readonly);
    assert_eq!(
        probe.check(TIMEOUT).await.verdict,
        Verdict::Degraded(vec![r#"$.mode is "readonly""#.into()])
    );
    server.set(Mode::Shortage);
    let result = probe.check(TIMEOUT).await;
    assert_eq!(failure(&result).reason, FailureReason::Status);
    assert_eq!(&*result.signals[0].name, "StockReservationFailed");
}

// ---------------------------------------------------------------------------------------------
// Secrets.

/// Set in the child process that runs the secret checks with a real environment.
const CHILD: &str = "PROBE_HTTP_TEST_CHILD";
const TOKEN_VAR: &str = "PROBE_HTTP_TEST_TOKEN";
const BAD_VAR: &str = "PROBE_HTTP_TEST_BAD_TOKEN";
const SECRET: &str = "s3cr3t-t0k3n-7f2a";

/// The secret comes from a real environment variable. Setting one in this (multi-threaded) test
/// process would race with other threads reading the environment, so the test re-runs itself in a
/// child process whose environment has it from the start.
#[test]
fn secret_header_values_never_leak() {
    if std::env::var_os(CHILD).is_some() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(secret_checks());
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "secret_header_values_never_leak",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env(TOKEN_VAR, SECRET)
        // Not a valid header value (a newline), so loading must fail, without showing it.
        .env(BAD_VAR, format!("{SECRET}\nX-Injected: 1"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child run failed:\n{stdout}\n{stderr}"
    );
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
}

async fn secret_checks() {
    let server = serve(Mode::Healthy).await;
    let target = |url: &str, header: &str| {
        format!(
            "targets:\n  - id: t\n    http:\n      url: {url}\n      headers:\n        \
             Authorization: \"Bearer ${{{TOKEN_VAR}}}\"\n        X-Api-Key: \"{header}\"\n"
        )
    };
    let load = |yaml: &str| probe_config::parse(Path::new("t.yaml"), yaml);
    let mut shown = Vec::new();

    let config = load(&target(&server.url("/ready"), &format!("${{{TOKEN_VAR}}}")))
        .unwrap_or_else(|e| panic!("{e}"));
    shown.push(format!("{config:?}"));
    shown.push(format!("{config:#?}"));
    let ProbeSpec::Http(spec) = &config.topology.targets[0].probe else {
        panic!("not http");
    };
    let spec = HttpSpec::clone(spec);
    let probe = HttpProbe::new(spec.clone(), probe::tier::resolve::Names::system());
    shown.push(format!("{probe:?}"));
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    // It was really sent.
    assert_eq!(
        server.state.last_authorization.lock().unwrap().clone(),
        Some(format!("Bearer {SECRET}"))
    );

    // Failures of every kind, with the secret headers set.
    let closed = closed_port().await;
    for spec in both(spec.clone()) {
        for mode in [Mode::WrongStatus, Mode::WrongBody, Mode::Reset] {
            server.set(mode);
            let mut spec = spec.clone();
            spec.expect.json = vec![json("$.status", text("UP"))];
            let result = HttpProbe::new(spec, probe::tier::resolve::Names::system())
                .check(TIMEOUT)
                .await;
            shown.push(format!("{result:?}"));
            shown.push(failure(&result).to_string());
        }
        server.set(Mode::Hang);
        let result = HttpProbe::new(spec.clone(), probe::tier::resolve::Names::system())
            .check(Duration::from_millis(100))
            .await;
        shown.push(format!("{result:?}"));
        let mut refused = spec.clone();
        refused.url = format!("http://{closed}/").parse().unwrap();
        let result = HttpProbe::new(refused, probe::tier::resolve::Names::system())
            .check(TIMEOUT)
            .await;
        shown.push(format!("{result:?}"));
        let mut tls = spec.clone();
        tls.url = format!("https://{}/", server.addr).parse().unwrap();
        let result = HttpProbe::new(tls, probe::tier::resolve::Names::system())
            .check(TIMEOUT)
            .await;
        shown.push(format!("{result:?}"));
    }

    // Configuration errors about the header: an invalid value, and a missing variable.
    let errors = load(&target(&server.url("/ready"), &format!("${{{BAD_VAR}}}")))
        .expect_err("a newline is not allowed in a header value");
    let message = errors.to_string();
    assert!(
        message.contains("invalid value for header \"x-api-key\""),
        "{message}"
    );
    shown.push(message);
    let errors = load(&target(
        &server.url("/ready"),
        "${PROBE_HTTP_TEST_UNSET_VAR}",
    ))
    .expect_err("unset variable");
    let message = errors.to_string();
    assert!(
        message.contains("environment variable PROBE_HTTP_TEST_UNSET_VAR is not set"),
        "{message}"
    );
    shown.push(message);

    for text in &shown {
        assert!(!text.contains(SECRET), "secret shown in: {text}");
    }
    // The redaction is visible where the values would be.
    assert!(
        shown[0].contains("\"authorization\": <redacted>"),
        "{}",
        shown[0]
    );
}

/// What the keep-alive server does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum KeepAlive {
    /// Answers the first request of a connection, then closes the connection (FIN) on reading
    /// the next one without answering: the keep-alive race, made certain.
    CloseAfterFirst,
    /// The same, closing with a reset.
    ResetAfterFirst,
    /// Resets every request, on any connection.
    ResetAll,
}

/// A hand-written HTTP/1.1 server that keeps connections alive, to drive the pooled
/// transport's reuse exactly; counts the connections it accepts.
struct KeepAliveServer {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KeepAliveServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KeepAliveServer {
    async fn start(mode: KeepAlive) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(mode as u8));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (shared_mode, counter) = (mode.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(Self::serve(stream, shared_mode.clone()));
            }
        });
        Self {
            addr,
            mode,
            accepted,
            task,
        }
    }

    async fn serve(mut stream: TcpStream, mode: Arc<AtomicU8>) {
        use tokio::io::AsyncWriteExt;
        for n in 0.. {
            if !Self::read_request(&mut stream).await {
                return;
            }
            let mode = mode.load(Ordering::SeqCst);
            if n == 0 && mode != KeepAlive::ResetAll as u8 {
                let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(reply).await.is_err() {
                    return;
                }
                continue;
            }
            if mode != KeepAlive::CloseAfterFirst as u8 {
                let _ = stream.set_zero_linger();
            }
            return;
        }
    }

    /// Reads one request (head and `content-length` body); false when the peer went away.
    async fn read_request(stream: &mut TcpStream) -> bool {
        let mut seen = Vec::new();
        let mut buf = [0; 4096];
        loop {
            let head_end = seen.windows(4).position(|w| w == b"\r\n\r\n");
            if let Some(end) = head_end {
                let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    return true;
                }
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    fn set(&self, mode: KeepAlive) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn spec(&self) -> HttpSpec {
        HttpSpec::get(format!("http://{}/ready", self.addr).parse().unwrap())
    }
}

#[tokio::test]
async fn a_kept_alive_connection_closed_by_the_server_is_retried_on_a_fresh_one() {
    for mode in [KeepAlive::CloseAfterFirst, KeepAlive::ResetAfterFirst] {
        let server = KeepAliveServer::start(mode).await;
        let probe = HttpProbe::new(server.spec(), probe::tier::resolve::Names::system());
        let first = probe.check(TIMEOUT).await;
        assert_eq!(first.verdict, Verdict::Up, "{mode:?}");
        assert!(first.remarks.is_empty(), "{mode:?}: {:?}", first.remarks);
        // The second check reuses the connection, which the server closes on reading it.
        let second = probe.check(TIMEOUT).await;
        assert_eq!(second.verdict, Verdict::Up, "{mode:?}");
        assert!(second.remarks.stale_connection_retried, "{mode:?}");
        assert!(second.remarks.describe().unwrap().contains("fresh"));
        assert_eq!(
            server.accepted(),
            2,
            "{mode:?}: one retry on a new connection"
        );
    }
}

#[tokio::test]
async fn a_server_that_fails_every_request_still_fails() {
    // Fresh connections are not retried: a failure there is the server's.
    let server = KeepAliveServer::start(KeepAlive::ResetAll).await;
    let result = check(server.spec()).await;
    assert_eq!(failure(&result).reason, FailureReason::Reset);
    assert!(!result.remarks.stale_connection_retried);
    assert_eq!(server.accepted(), 1);

    // A reused connection is retried once; the fresh attempt's failure is the verdict.
    let server = KeepAliveServer::start(KeepAlive::CloseAfterFirst).await;
    let probe = HttpProbe::new(server.spec(), probe::tier::resolve::Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    server.set(KeepAlive::ResetAll);
    let result = probe.check(TIMEOUT).await;
    assert_eq!(failure(&result).reason, FailureReason::Reset);
    assert!(result.remarks.stale_connection_retried);
    assert_eq!(server.accepted(), 2, "exactly one retry");
}

#[tokio::test]
async fn a_request_that_is_not_idempotent_is_never_sent_twice() {
    let server = KeepAliveServer::start(KeepAlive::CloseAfterFirst).await;
    let mut spec = server.spec();
    spec.method = probe::tier::http::Method::POST;
    spec.body = Some("{}".into());
    let probe = HttpProbe::new(spec, probe::tier::resolve::Names::system());
    assert_eq!(probe.check(TIMEOUT).await.verdict, Verdict::Up);
    let result = probe.check(TIMEOUT).await;
    assert_eq!(failure(&result).reason, FailureReason::Reset);
    assert!(!result.remarks.stale_connection_retried);
    assert_eq!(server.accepted(), 1, "no second connection for a POST");
}

/// A reply that is not HTTP at all is neither a reset nor a timeout: it fails as `io`, on both
/// transports.
#[tokio::test]
async fn a_reply_that_is_not_http_fails_as_io() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut request = [0; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await;
            });
        }
    });
    let spec = HttpSpec::get(format!("http://{addr}/ready").parse().unwrap());
    for spec in both(spec) {
        let result = check(spec.clone()).await;
        assert_eq!(
            failure(&result).reason,
            FailureReason::Io,
            "{}: {result:?}",
            mode(&spec)
        );
    }
    server.abort();
}
