//! The real `probe-engine` binary, end to end: config in, API out, reload and shutdown by signal.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::views::{self, Topology};
use support::{BIN, Daemon, WAIT, closed_port, promtool_check, write_targets};
use tokio::time::Instant;
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_serves_health_reloads_and_stops() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = listener.local_addr().unwrap();
    let down_addr = closed_port();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("up", up_addr), ("down", down_addr)]);
    let mut daemon = Daemon::start(dir.path());

    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;

    // Liveness and readiness.
    assert_eq!(daemon.get("/livez").await.status(), 200);
    let ready = daemon.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let reason = ready.text().await.unwrap();
    assert!(reason.contains("down (DOWN)"), "{reason}");

    // One target with its history.
    let down: Value = daemon.get("/v1/targets/down").await.json().await.unwrap();
    assert_eq!(down["healthy"], false);
    assert_eq!(down["last"]["ok"], false);
    assert_eq!(down["last"]["reason"], "refused");
    assert_eq!(down["last_failure"]["reason"], "refused");
    assert_eq!(down["interval_ms"], 400);
    assert!(down["consecutive_failures"].as_u64().unwrap() >= 2);
    assert!(!down["history"].as_array().unwrap().is_empty());
    let up: Value = daemon.get("/v1/targets/up").await.json().await.unwrap();
    assert_eq!(up["healthy"], true);
    assert!(up["last"]["latency_ms"].as_f64().unwrap() >= 0.0);
    assert!(up["last"]["at"].as_str().unwrap().ends_with('Z'));

    // Every field of the API, /health and /metrics: tests/api.rs.

    // The first load: generation 1, a good load, no reload yet.
    let topology: Topology = views::strict(&daemon.get("/v1/topology").await.json().await.unwrap());
    assert_eq!(topology.generation, 1);
    assert!(topology.last_change.is_some() && topology.rejected.is_empty());
    assert!(topology.etcd().is_none());
    let files = topology.files();
    assert_eq!(
        (files.state.as_str(), files.last_good_generation),
        ("synced", 1)
    );
    assert_eq!(files.path, dir.path().display().to_string());
    assert_eq!(
        files.files,
        [dir.path().join("targets.yaml").display().to_string()]
    );
    assert!(files.last_error.is_empty() && files.last_reload.is_some());
    let metrics = daemon.metrics().await;
    assert_eq!(metrics.value("probe_topology_generation", &[]), 1.0);
    assert_eq!(
        metrics.value("probe_config_last_reload_successful", &[]),
        1.0
    );
    assert_eq!(metrics.sum("probe_config_reloads_total", &[]), 0.0);

    // SIGHUP with a broken file: rejected, the old targets keep running with their counters.
    let before: Value = daemon.get("/v1/targets/up").await.json().await.unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        "targets:\n  - id: up\n    tcp: {adress: 1}\n",
    )
    .unwrap();
    daemon.signal("-HUP");
    daemon.wait_log("config reload rejected; the running config stays in force");
    let topology: Topology = views::strict(&daemon.get("/v1/topology").await.json().await.unwrap());
    let files = topology.files();
    assert_eq!(files.state, "error", "{topology:?}");
    assert_eq!(files.last_error.len(), 1, "{topology:?}");
    assert!(files.last_error[0].contains("adress"), "{topology:?}");
    assert_eq!(files.last_good_generation, 1);
    assert_eq!(topology.generation, 1);
    assert!(
        topology.rejected.is_empty(),
        "a rejected file is not a rejected entry"
    );
    let metrics = daemon.metrics().await;
    assert_eq!(
        metrics.value("probe_config_last_reload_successful", &[]),
        0.0
    );
    assert_eq!(
        metrics.value("probe_config_reloads_total", &[("result", "failure")]),
        1.0
    );
    assert_eq!(
        metrics.get("probe_config_reloads_total", &[("result", "success")]),
        None
    );
    assert_eq!(metrics.value("probe_topology_generation", &[]), 1.0);
    let after: Value = daemon.get("/v1/targets/up").await.json().await.unwrap();
    assert_eq!(after["state"], "UP");
    assert_eq!(after["transitions"], before["transitions"]);
    assert!(after["consecutive_successes"].as_u64() >= before["consecutive_successes"].as_u64());
    assert!(daemon.state_of("down").await.is_some());

    // SIGHUP with a valid change: applied as a diff; `up` keeps its state and counters.
    let up2 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    write_targets(
        dir.path(),
        &[("up", up_addr), ("up-2", up2.local_addr().unwrap())],
    );
    daemon.signal("-HUP");
    let reloaded = daemon.wait_log("topology applied");
    assert_eq!(reloaded["source"], "files");
    assert_eq!(reloaded["added"], 1);
    assert_eq!(reloaded["removed"], 1);
    assert_eq!(reloaded["unchanged"], 1);
    let topology: Topology = views::strict(&daemon.get("/v1/topology").await.json().await.unwrap());
    let files = topology.files();
    assert_eq!(files.state, "synced", "{topology:?}");
    assert!(files.last_error.is_empty());
    assert_eq!((files.last_good_generation, topology.generation), (2, 2));
    let metrics = daemon.metrics().await;
    assert_eq!(
        metrics.value("probe_config_last_reload_successful", &[]),
        1.0
    );
    for (result, count) in [("success", 1.0), ("failure", 1.0)] {
        assert_eq!(
            metrics.value("probe_config_reloads_total", &[("result", result)]),
            count
        );
    }
    assert_eq!(metrics.value("probe_topology_generation", &[]), 2.0);
    assert!(daemon.state_of("down").await.is_none());
    let kept: Value = daemon.get("/v1/targets/up").await.json().await.unwrap();
    assert_eq!(kept["transitions"], before["transitions"]);
    daemon.wait_states(&[("up", "UP"), ("up-2", "UP")]).await;
    assert_eq!(daemon.get("/readyz").await.status(), 200);

    // SIGTERM: a clean exit.
    daemon.signal("-TERM");
    let status = daemon.wait_exit();
    assert!(status.success(), "exit status {status}");
    drop(listener);
}

#[test]
fn check_accepts_the_default_config_and_reports_every_error() {
    let probes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../probes");
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&probes)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("ok: 3 targets (tcp 2, icmp 1) and 1 group (0 pools) in 1 file"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "targets:\n  - id: a\n    tcp: {address: 127.0.0.1:80}\n    timeout: 5s\n  - id: Bad\n    tcp: {address: 127.0.0.1:81}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let located: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{}:", file.display())))
        .collect();
    assert_eq!(located.len(), 2, "{stderr}");
    assert!(located[0].contains(":4:"), "{stderr}");
    assert!(located[1].contains(":5:"), "{stderr}");
}

#[test]
fn run_refuses_an_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.yaml"), "targets: [{id: x}]\n").unwrap();
    let out = support::refused_start(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("t.yaml:1:"));
}

const PUT: reqwest::Method = reqwest::Method::PUT;
const DELETE: reqwest::Method = reqwest::Method::DELETE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_is_set_validated_and_survives_a_restart() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    write_targets(dir.path(), &[("db", listener.local_addr().unwrap())]);
    let state_arg = state.to_str().unwrap();
    let mut daemon = Daemon::start_with(dir.path(), &["--state-dir", state_arg]);
    daemon.wait_states(&[("db", "UP")]).await;

    let path = "/v1/targets/db/maintenance";
    let good = r#"{"reason": "disk swap", "duration": "30m"}"#;
    for (body, want) in [
        ("{not json", "parse the request body as JSON"),
        (r#"{"reason": "x"}"#, "duration"),
        (r#"{"reason": "x", "duration": "soon"}"#, "invalid duration"),
        (r#"{"reason": "", "duration": "1h"}"#, "reason"),
        (
            r#"{"reason": "x", "duration": "1h", "extra": 1}"#,
            "unknown field",
        ),
    ] {
        let (status, body) = daemon.send(PUT, path, None, Some(body)).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(want), "{body}");
    }
    let (status, _) = daemon
        .send(PUT, "/v1/targets/nope/maintenance", None, Some(good))
        .await;
    assert_eq!(status, 404);

    let (status, body) = daemon.send(PUT, path, None, Some(good)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "MAINTENANCE");
    assert_eq!(body["maintenance"]["reason"], "disk swap");
    assert_eq!(body["maintenance"]["source"], "operator");
    assert_eq!(daemon.get("/readyz").await.status(), 200);
    let health: Value = daemon.get("/health").await.json().await.unwrap();
    assert_eq!(health["status"], "warn");

    // Restart with the same state directory: still in maintenance, same reason.
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    let daemon = Daemon::start_with(dir.path(), &["--state-dir", state_arg]);
    let restored: Value = daemon.get("/v1/targets/db").await.json().await.unwrap();
    assert_eq!(restored["state"], "MAINTENANCE");
    assert_eq!(restored["maintenance"]["reason"], "disk swap");

    let (status, body) = daemon.send(DELETE, path, None, None).await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(body["state"], "MAINTENANCE");
    assert!(body["maintenance"].is_null());
    let (status, body) = daemon.send(DELETE, path, None, None).await;
    assert_eq!(status, 409, "{body}");
    daemon.wait_states(&[("db", "UP")]).await;
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_token_guards_every_change() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", listener.local_addr().unwrap())]);
    let daemon = Daemon::start_with(dir.path(), &["--api-token", "s3cret"]);
    let path = "/v1/targets/db/maintenance";
    let body = r#"{"reason": "r", "duration": "5m"}"#;

    let response = daemon
        .http
        .put(daemon.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let (status, _) = daemon.send(PUT, path, Some("wrong"), Some(body)).await;
    assert_eq!(status, 403);
    let (status, _) = daemon.send(DELETE, path, Some("wrong"), None).await;
    assert_eq!(status, 403);
    // Reading needs no token.
    assert_eq!(daemon.get("/v1/targets/db").await.status(), 200);
    let (status, body) = daemon.send(PUT, path, Some("s3cret"), Some(body)).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = daemon.send(DELETE, path, Some("s3cret"), None).await;
    assert_eq!(status, 200);
    // The token never shows up in logs or the API.
    let targets = daemon.get("/v1/targets").await.text().await.unwrap();
    assert!(!targets.contains("s3cret"));
    drop(listener);
}

/// Reads SSE `transition` events for `id` until `want` were seen in order.
async fn expect_transitions(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    id: &str,
    want: &[(&str, &str)],
) {
    use futures_util::StreamExt;
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < want.len() {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if !frame.contains("event: transition") {
                continue;
            }
            let data = frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let event: Value = serde_json::from_str(data).unwrap();
            if event["target"] == id {
                seen.push((
                    event["from"].as_str().unwrap().to_owned(),
                    event["to"].as_str().unwrap().to_owned(),
                ));
            }
        }
        if seen.len() >= want.len() {
            break;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("saw only {seen:?}, want {want:?}"))
            .unwrap()
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
    let want: Vec<_> = want
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(seen, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_each_transition_in_order() {
    let port = closed_port();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("svc", port)]);
    let mut daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("svc", "DOWN")]).await;

    let response = daemon.get("/v1/events").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = Box::pin(response.bytes_stream());
    let mut buffer = String::new();

    let listener = std::net::TcpListener::bind(port).unwrap();
    expect_transitions(&mut stream, &mut buffer, "svc", &[("DOWN", "UP")]).await;
    drop(listener);
    expect_transitions(&mut stream, &mut buffer, "svc", &[("UP", "DOWN")]).await;
    // An open event stream does not hold up a stop.
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
}

/// An HTTP service the test switches between healthy (0), read-only (1) and failing (2).
async fn switchable_service() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU8>) {
    use axum::http::StatusCode;
    use std::sync::atomic::{AtomicU8, Ordering};
    let mode = std::sync::Arc::new(AtomicU8::new(0));
    let shared = mode.clone();
    let app = axum::Router::new().route(
        "/ready",
        axum::routing::get(move || {
            let mode = shared.load(Ordering::SeqCst);
            async move {
                match mode {
                    0 => (StatusCode::OK, r#"{"status":"UP","mode":"rw"}"#),
                    1 => (StatusCode::OK, r#"{"status":"UP","mode":"readonly"}"#),
                    _ => (StatusCode::SERVICE_UNAVAILABLE, r#"{"status":"DOWN"}"#),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, mode)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_a_service_through_every_state() {
    use std::sync::atomic::Ordering;
    let (addr, mode) = switchable_service().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("api.yaml"),
        format!(
            r#"targets:
  - id: orders-api
    interval: 300ms
    timeout: 200ms
    rise: 2
    fall: 1
    degrade_after: 2
    http:
      url: http://{addr}/ready
      expect:
        status: [200]
        json: {{ "$.status": "UP" }}
      degraded_if:
        json: {{ "$.mode": "readonly" }}
"#
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("orders-api", "UP")]).await;

    let response = daemon.get("/v1/events").await;
    let mut stream = Box::pin(response.bytes_stream());
    let mut buffer = String::new();
    let id = "orders-api";

    mode.store(1, Ordering::SeqCst);
    expect_transitions(&mut stream, &mut buffer, id, &[("UP", "DEGRADED")]).await;
    let degraded: Value = daemon
        .get("/v1/targets/orders-api")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(degraded["healthy"], true);
    assert!(
        degraded["degraded_reasons"][0]
            .as_str()
            .unwrap()
            .contains("$.mode"),
        "{degraded}"
    );
    let health: Value = daemon.get("/health").await.json().await.unwrap();
    assert_eq!(health["status"], "warn");

    mode.store(2, Ordering::SeqCst);
    expect_transitions(&mut stream, &mut buffer, id, &[("DEGRADED", "DOWN")]).await;
    let down: Value = daemon
        .get("/v1/targets/orders-api")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(down["last"]["reason"], "status");

    mode.store(0, Ordering::SeqCst);
    expect_transitions(&mut stream, &mut buffer, id, &[("DOWN", "UP")]).await;
}

/// Polls `/readyz` (the API is the signal) until it answers ready or not as `ready` says, and
/// returns its body. Log lines would do too, but on a loaded machine an earlier flip's line can
/// still be queued when the test expects the next one.
async fn wait_readyz(daemon: &Daemon, ready: bool) -> String {
    let want = if ready { 200 } else { 503 };
    let deadline = Instant::now() + WAIT;
    loop {
        let response = daemon.get("/readyz").await;
        if response.status() == want {
            return response.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "/readyz never {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn explain(daemon: &Daemon, id: &str) -> Value {
    let response = daemon.get(&format!("/v1/targets/{id}/explain")).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_critical_dependencies_only() {
    use std::sync::atomic::Ordering;
    let (db, db_mode) = switchable_service().await;
    let (cache, cache_mode) = switchable_service().await;
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(500);
    let timeout = Duration::from_millis(400);
    // `fall: 2` and a 400 ms timeout: a slow reply on a loaded machine is not a DOWN database.
    std::fs::write(
        dir.path().join("checkout.yaml"),
        format!(
            r#"scoring: {{window: 4}}
readiness: {{require: [checkout], min_score: 0.5}}
defaults: {{interval: 500ms, timeout: 400ms, rise: 1, fall: 2, jitter: 0}}
targets:
  - id: checkout
    kind: group
    depends_on:
      - {{target: orders-db, weight: 0.6, critical: true}}
      - {{target: cache, weight: 0.4}}
  - id: orders-db
    http: {{url: "http://{db}/ready"}}
  - id: cache
    http: {{url: "http://{cache}/ready"}}
"#
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    wait_readyz(&daemon, true).await;
    let checkout = explain(&daemon, "checkout").await;
    assert_eq!(checkout["node"]["score"], 1.0, "{checkout}");
    assert_eq!(checkout["node"]["kind"], "group");

    // The cache fails for good: checkout's score drops to 0.6, still over 0.5: still ready.
    cache_mode.store(2, Ordering::SeqCst);
    daemon.wait_states(&[("cache", "DOWN")]).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let checkout = explain(&daemon, "checkout").await;
        // 0.6 is DEGRADED by the default group rule, once judged so.
        if checkout["node"]["score"] == 0.6 && checkout["node"]["state"] == "DEGRADED" {
            assert_eq!(
                checkout["summary"],
                "checkout 0.60 DEGRADED: orders-db 1.00 (w 0.60, critical) UP; cache 0.00 (w \
                 0.40) DOWN"
            );
            break;
        }
        assert!(Instant::now() < deadline, "score never settled: {checkout}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(daemon.get("/readyz").await.status(), 200);
    let targets = daemon.targets().await;
    let cache_view = targets.iter().find(|t| t["id"] == "cache").unwrap();
    assert_eq!(cache_view["score"], 0.0);
    assert_eq!(cache_view["dependency_down"], false);

    // The critical database fails: not ready once two failures are in, the second at the fast
    // interval.
    let failed_at = Instant::now();
    db_mode.store(2, Ordering::SeqCst);
    let reason = wait_readyz(&daemon, false).await;
    let took = failed_at.elapsed();
    // On a machine that may be loaded: the bound says the failure caused the flip, not how fast
    // it was (the benchmarks measure that).
    assert!(
        took <= interval + timeout + Duration::from_secs(3),
        "not ready only after {took:?}"
    );
    assert!(
        reason.contains("critical dependency DOWN (orders-db)"),
        "{reason}"
    );
    let logged = daemon.all_logs();
    assert!(
        logged.iter().any(|l| l["message"] == "readiness changed"
            && l["ready"] == false
            && l["reason"] == "checkout has a critical dependency DOWN (orders-db)"),
        "the flip is logged with its reason"
    );
    assert_eq!(
        daemon.get("/livez").await.status(),
        200,
        "a dependency never fails liveness"
    );
    let checkout = explain(&daemon, "checkout").await;
    assert_eq!(checkout["node"]["dependency_down"], true);
    assert_eq!(checkout["node"]["score"], 0.0);
    assert_eq!(checkout["children"][0]["caps"], true, "{checkout}");
    // The root cause is named, and the root says what it impacts.
    assert_eq!(checkout["root_causes"], serde_json::json!(["orders-db"]));
    assert_eq!(checkout["impacts"], serde_json::json!([]));
    let db = explain(&daemon, "orders-db").await;
    assert_eq!(db["root_causes"], serde_json::json!([]));
    assert_eq!(db["impacts"], serde_json::json!(["checkout"]));

    let graph: Value = daemon.get("/v1/graph").await.json().await.unwrap();
    let ids: Vec<&str> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["cache", "checkout", "orders-db"]);
    assert_eq!(
        graph["edges"][0],
        serde_json::json!({"from": "checkout", "to": "orders-db", "weight": 0.6, "critical": true})
    );
    let dot = daemon.get("/v1/graph?format=dot").await;
    assert_eq!(
        dot.headers()["content-type"],
        "text/vnd.graphviz; charset=utf-8"
    );
    let dot = dot.text().await.unwrap();
    assert!(dot.starts_with("digraph dependencies {"), "{dot}");
    assert!(dot.contains("\"checkout\" -> \"orders-db\""), "{dot}");
    let metrics = daemon.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("probe_health_score{target=\"checkout\"} 0\n"),
        "{metrics}"
    );
    assert!(metrics.contains("probe_dependency_down{target=\"checkout\"} 1\n"));
    promtool_check(&metrics);

    // Bad requests get a 4xx with a reason.
    let (status, body) = daemon
        .send(reqwest::Method::GET, "/v1/graph?format=png", None, None)
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("png"), "{body}");
    let (status, _) = daemon
        .send(reqwest::Method::GET, "/v1/graph?colour=red", None, None)
        .await;
    assert_eq!(status, 400);
    let (status, body) = daemon
        .send(reqwest::Method::GET, "/v1/targets/nope/explain", None, None)
        .await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("nope"), "{body}");

    // Both recover: ready again once the database's window is good enough.
    cache_mode.store(0, Ordering::SeqCst);
    db_mode.store(0, Ordering::SeqCst);
    wait_readyz(&daemon, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_config_reloads_on_save() {
    let (a, b) = (closed_port(), closed_port());
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("a", a)]);
    let mut daemon = Daemon::start_with(dir.path(), &["--watch-config"]);
    assert!(daemon.state_of("a").await.is_some());

    // An editor's save: a temporary file renamed over the config.
    let staged = tempfile::tempdir_in(dir.path()).unwrap();
    write_targets(staged.path(), &[("a", a), ("b", b)]);
    std::fs::rename(
        staged.path().join("targets.yaml"),
        dir.path().join("targets.yaml"),
    )
    .unwrap();
    let applied = loop {
        let line = daemon.wait_log("topology applied");
        if line["added"] == 1 {
            break line;
        }
    };
    assert_eq!(applied["source"], "files");
    assert_eq!(applied["unchanged"], 1);
    assert!(daemon.state_of("b").await.is_some());

    // A broken save is rejected; the running config stays.
    std::fs::write(dir.path().join("targets.yaml"), "targets: [").unwrap();
    daemon.wait_log("config reload rejected; the running config stays in force");
    assert!(daemon.state_of("b").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_request_stops_the_daemon_in_order() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("a", closed_port())]);
    let mut daemon = Daemon::start_with(
        dir.path(),
        &["--drain-delay", "1s", "--api-token", "drain-token"],
    );
    assert_eq!(daemon.get("/startupz").await.status(), 200);
    assert_eq!(daemon.get("/livez").await.status(), 200);

    let (status, body) = daemon
        .send(
            reqwest::Method::POST,
            "/v1/drain",
            Some("drain-token"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let asked = Instant::now();
    // Not ready at once, still serving the API during the delay, alive throughout.
    let readyz = daemon.get("/readyz").await;
    assert_eq!(readyz.status(), 503);
    assert_eq!(readyz.text().await.unwrap(), "not ready: shutting down\n");
    assert_eq!(daemon.get("/v1/targets").await.status(), 200);
    assert_eq!(daemon.get("/livez").await.status(), 200);
    // Then the API refuses, and the daemon exits cleanly once drained.
    let deadline = Instant::now() + WAIT;
    loop {
        match daemon.http.get(daemon.url("/v1/targets")).send().await {
            Ok(r) if r.status() == 503 => {
                assert_eq!(r.headers()["connection"], "close");
                break;
            }
            // Refused while the drain delay runs, or the listener is gone: both are fine.
            Ok(r) => assert_eq!(r.status(), 200),
            Err(_) => break,
        }
        assert!(Instant::now() < deadline, "never refused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "refused before the delay"
    );
    assert!(daemon.wait_exit().success());
    daemon.wait_log("shutdown: drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reported_failure_re_probes_at_once() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.yaml"),
        format!(
            "targets:\n  - id: api\n    tcp: {{address: \"{addr}\"}}\n    interval: 4s\n    jitter: 0\n    rise: 1\n"
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("api", "UP")]).await;
    let last = |t: &Value| humantime::parse_rfc3339(t["last"]["at"].as_str().unwrap()).unwrap();
    let result = || async {
        let t: Value = daemon.get("/v1/targets/api").await.json().await.unwrap();
        last(&t)
    };
    // Waits for the next result after `after`.
    let next_after = |after| async move {
        let deadline = Instant::now() + WAIT;
        loop {
            let at = result().await;
            if at > after {
                return at;
            }
            assert!(Instant::now() < deadline, "no result after {after:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    // Right after a regular run, the next one is 4 s away.
    let regular = next_after(result().await).await;
    let (status, body) = daemon
        .send(
            reqwest::Method::POST,
            "/v1/targets/api/calls",
            None,
            Some(r#"{"status": 503, "latency_ms": 12}"#),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["outcome"], "gateway_failure");
    let re_probe = next_after(regular).await;
    let gap = re_probe.duration_since(regular).unwrap();
    assert!(
        gap < Duration::from_secs(2),
        "the next result came {gap:?} later"
    );

    for (path, body, want) in [
        (
            "/v1/targets/api/calls",
            r#"{"outcome": "meh", "latency_ms": 1}"#,
            400,
        ),
        ("/v1/targets/api/calls", r#"{"latency_ms": 1}"#, 400),
        (
            "/v1/targets/nope/calls",
            r#"{"status": 500, "latency_ms": 1}"#,
            404,
        ),
    ] {
        let (status, reply) = daemon
            .send(reqwest::Method::POST, path, None, Some(body))
            .await;
        assert_eq!(status, want, "{path} {body}: {reply}");
        assert!(reply["error"].is_string());
    }
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_failures_eject_a_pool_member_and_operators_override() {
    let one = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let two = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a, b) = (one.local_addr().unwrap(), two.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    support::pool_config(dir.path(), a, b);
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[("api-1", "UP"), ("api-2", "UP")])
        .await;
    let t = daemon.detail("api-1").await.target;
    assert_eq!((t.weight, t.ejected), (Some(1.0), false));
    assert_eq!(t.circuit.unwrap().state, "closed");
    assert!(daemon.detail("api-2").await.target.circuit.is_none());

    // Three 503s: ejected at once, DOWN though its probe passes.
    for _ in 0..3 {
        let (status, body) = daemon
            .send(
                reqwest::Method::POST,
                "/v1/targets/api-1/calls",
                None,
                Some(r#"{"status": 503, "latency_ms": 5}"#),
            )
            .await;
        assert_eq!(status, 202, "{body}");
    }
    let t = daemon.detail("api-1").await.target;
    assert_eq!(
        (t.state.as_str(), t.ejected, t.weight),
        ("DOWN", true, Some(0.0))
    );
    let ejection = t.ejection.unwrap();
    assert_eq!(ejection.phase, "ejected");
    assert_eq!(
        ejection.reason.as_deref(),
        Some("consecutive_gateway_failures")
    );
    assert_eq!(ejection.times_ejected, Some(1));
    // The same calls fed the breaker.
    let circuit = t.circuit.unwrap();
    assert_eq!((circuit.calls, circuit.failures), (3, 3));
    assert_eq!(circuit.state, "closed", "under minimum_calls");
    let text = daemon.get("/metrics").await.text().await.unwrap();
    let metrics = support::prom::Metrics::parse(&text);
    let of = |id| [("target", id)];
    assert_eq!(
        metrics.value(
            "probe_ejections_total",
            &[
                ("target", "api-1"),
                ("reason", "consecutive_gateway_failures")
            ]
        ),
        1.0
    );
    assert_eq!(metrics.value("probe_ejected", &of("api-1")), 1.0);
    assert_eq!(metrics.value("probe_ejected", &of("api-2")), 0.0);
    assert_eq!(metrics.value("probe_target_weight", &of("api-1")), 0.0);
    assert_eq!(metrics.value("probe_target_weight", &of("api-2")), 1.0);
    assert_eq!(metrics.value("probe_circuit_state", &of("api-1")), 0.0);
    promtool_check(&text);

    // Operators: force the circuit open, clear the ejection.
    let (status, body) = daemon
        .send(
            reqwest::Method::POST,
            "/v1/targets/api-1/circuit",
            None,
            Some(r#"{"command": "force_open"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let t = views::TargetDetail::from_value(&body).target;
    assert_eq!(t.circuit.unwrap().state, "forced_open");
    let (status, body) = daemon
        .send(
            reqwest::Method::DELETE,
            "/v1/targets/api-1/ejection",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let t = views::TargetDetail::from_value(&body).target;
    assert!(!t.ejected && t.ejection.is_none(), "{t:?}");
    assert_ne!(t.state, "DOWN");
    for (method, path, body, want) in [
        (
            reqwest::Method::POST,
            "/v1/targets/api-1/circuit",
            Some(r#"{"command": "open"}"#),
            400,
        ),
        (
            reqwest::Method::POST,
            "/v1/targets/api-1/circuit",
            Some(r#"{"cmd": "reset"}"#),
            400,
        ),
        (
            reqwest::Method::POST,
            "/v1/targets/api-2/circuit",
            Some(r#"{"command": "reset"}"#),
            409,
        ),
        (
            reqwest::Method::POST,
            "/v1/targets/nope/circuit",
            Some(r#"{"command": "reset"}"#),
            404,
        ),
        (
            reqwest::Method::DELETE,
            "/v1/targets/api-1/ejection",
            None,
            409,
        ),
    ] {
        let (status, reply) = daemon.send(method, path, None, body).await;
        assert_eq!(status, want, "{path} {body:?}: {reply}");
        assert!(reply["error"].is_string(), "{reply}");
    }
    drop((one, two));
}

/// A failure being confirmed keeps the verdict for every reader of the API: `/readyz` stays 200,
/// `/health` passes, and the target shows how far the confirmation has come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_in_progress_keeps_the_verdict_in_the_api() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // 40 failures at the fast interval (100 ms) take about 4 s to confirm.
    std::fs::write(
        dir.path().join("targets.yaml"),
        format!(
            "targets:\n  - id: svc\n    interval: 200ms\n    timeout: 50ms\n    rise: 1\n    \
             fall: 40\n    tcp: {{ address: \"{addr}\" }}\n"
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("svc", "UP")]).await;
    drop(listener);

    let deadline = Instant::now() + WAIT;
    let target = loop {
        let target: Value = daemon.get("/v1/targets/svc").await.json().await.unwrap();
        if target["consecutive_failures"].as_u64() >= Some(2) {
            break target;
        }
        assert!(Instant::now() < deadline, "no failure seen: {target}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(target["state"], "UP", "{target}");
    assert_eq!(target["healthy"], true);
    assert_eq!(target["pending"]["toward"], "DOWN", "{target}");
    assert_eq!(target["pending"]["of"], 40);
    let count = target["pending"]["count"].as_u64().unwrap();
    assert!((2..40).contains(&count), "{target}");
    assert_eq!(daemon.get("/readyz").await.status(), 200);
    let health: Value = daemon.get("/health").await.json().await.unwrap();
    let check = &health["checks"]["svc:responseTime"][0];
    assert_eq!(check["status"], "pass", "{health}");
    assert!(
        check["output"]
            .as_str()
            .unwrap()
            .contains("of 40 results toward DOWN"),
        "{health}"
    );

    // The fortieth failure is the verdict.
    loop {
        let line = daemon.wait_log("target state changed");
        if line["target_id"] == "svc" && line["from"] == "UP" {
            assert_eq!(line["to"], "DOWN", "{line}");
            break;
        }
    }
    let target: Value = daemon.get("/v1/targets/svc").await.json().await.unwrap();
    assert_eq!(target["state"], "DOWN");
    assert_eq!(target["pending"], Value::Null);
    assert_eq!(daemon.get("/readyz").await.status(), 503);
}

/// `metrics: {per_target_histograms: false}` on a reload: the targets' histograms leave
/// `/metrics` at once, their other series and the fleet-wide histogram stay, and the exposition
/// stays clean; a reload that removes a target takes its series with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_turn_per_target_histograms_off_and_take_removed_targets_series() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("a", up), ("b", up)]);
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("a", "UP"), ("b", "UP")]).await;
    let a = [("target", "a")];
    daemon
        .wait_metrics("a's histogram", |m| {
            m.get("probe_duration_seconds_count", &a).is_some()
                && m.get("probe_duration_seconds_count", &[("target", "b")])
                    .is_some()
        })
        .await;

    write_targets(dir.path(), &[("a", up)]);
    let yaml = std::fs::read_to_string(dir.path().join("targets.yaml")).unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        format!("metrics: {{per_target_histograms: false}}\n{yaml}"),
    )
    .unwrap();
    daemon.signal("-HUP");
    let metrics = daemon
        .wait_metrics("without per-target histograms and b", |m| {
            m.series("probe_duration_seconds_count").next().is_none()
                && m.get("probe_target_up", &[("target", "b")]).is_none()
        })
        .await;
    assert_eq!(metrics.value("probe_success", &a), 1.0);
    assert_eq!(metrics.value("probe_target_up", &a), 1.0);
    assert!(metrics.value("probe_fleet_duration_seconds_count", &[("kind", "tcp")]) >= 4.0);
    assert!(
        metrics
            .samples
            .iter()
            .all(|s| s.labels.get("target").map(String::as_str) != Some("b")),
        "b's series stayed"
    );
    promtool_check(&daemon.get("/metrics").await.text().await.unwrap());
}
