//! The README's "Health API" section, claim by claim, against the real daemon: every field of
//! every answer is read into a typed view that refuses unknown fields and requires the listed
//! ones (`support::views`), with its values; every metric of the metrics table is read (through
//! `support::prom`) after the event that should move it, with its labels; and header values
//! never show through the API or the logs.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::Value;
use support::prom::Metrics;
use support::views::{self, ApiError, EventStream, Explain, Graph, Health};
use support::{Daemon, WAIT, badge_texts, closed_port, promtool_check};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The detail of a refused TCP connect to `addr`, as the API, `/health` and events show it.
fn refused(addr: SocketAddr) -> String {
    format!("connect to {addr}: Connection refused (os error 111)")
}

/// A TCP listener that accepts (and drops) every connection until the task is aborted.
async fn accepting() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    (addr, task)
}

/// An HTTP service answering `GET /ready` with `reply`.
async fn serve(
    reply: impl Fn(HeaderMap) -> Response + Clone + Send + Sync + 'static,
) -> SocketAddr {
    let app = axum::Router::new().route(
        "/ready",
        axum::routing::get(move |headers: HeaderMap| {
            let reply = reply.clone();
            async move { reply(headers) }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// An HTTP service whose status the test sets.
async fn switchable() -> (SocketAddr, Arc<AtomicU16>) {
    let status = Arc::new(AtomicU16::new(200));
    let shared = status.clone();
    let addr = serve(move |_| {
        let code = StatusCode::from_u16(shared.load(Ordering::SeqCst)).unwrap();
        (code, r#"{"status":"UP"}"#).into_response()
    })
    .await;
    (addr, status)
}

/// Reads one request head; `false` at the end of the stream.
async fn read_head(socket: &mut tokio::net::TcpStream) -> bool {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// An HTTP server that answers the first request of each connection, keeps the connection
/// open, and closes it without a reply when the next request arrives on it: every reuse of a
/// kept-alive connection meets the keep-alive race.
async fn one_reply_per_connection() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                if !read_head(&mut socket).await {
                    return;
                }
                let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if socket.write_all(reply).await.is_err() {
                    return;
                }
                read_head(&mut socket).await;
            });
        }
    });
    addr
}

fn write(dir: &std::path::Path, yaml: &str) {
    std::fs::write(dir.join("targets.yaml"), yaml).unwrap();
}

async fn typed<T: serde::de::DeserializeOwned>(daemon: &Daemon, path: &str) -> T {
    let response = daemon.get(path).await;
    assert_eq!(response.status(), 200, "{path}");
    views::strict(&response.json().await.unwrap())
}

async fn health(daemon: &Daemon) -> (u16, Health) {
    let response = daemon.get("/health").await;
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/health+json"
    );
    (status, views::strict(&response.json().await.unwrap()))
}

/// `method path` with an optional JSON body: the status and the error it must carry.
async fn error(daemon: &Daemon, method: Method, path: &str, body: Option<&str>) -> (u16, String) {
    let (status, body) = daemon.send(method, path, None, body).await;
    let error: ApiError = views::strict(&body);
    (status, error.error)
}

/// The labels of a per-target series.
fn target(id: &str) -> [(&'static str, &str); 1] {
    [("target", id)]
}

/// Every read-only answer of the API, as text.
async fn read_all(daemon: &Daemon, answers: &mut Vec<String>) {
    for path in [
        "/v1/targets",
        "/v1/targets/secured",
        "/v1/targets/secured/explain",
        "/v1/graph",
        "/v1/graph?format=dot",
        "/v1/topology",
        "/health",
        "/metrics",
    ] {
        answers.push(daemon.get(path).await.text().await.unwrap());
    }
}

fn close_to(a: SystemTime, b: SystemTime, within: Duration) -> bool {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .is_ok_and(|d| d <= within)
}

#[test]
fn the_views_refuse_unknown_and_missing_fields() {
    let good = serde_json::json!({"toward": "DOWN", "count": 1, "of": 3});
    assert!(serde_json::from_value::<views::Pending>(good.clone()).is_ok());
    let mut extra = good.clone();
    extra["since"] = Value::from(1);
    assert!(serde_json::from_value::<views::Pending>(extra).is_err());
    // A nullable field must still be there.
    let event = serde_json::json!({"target": "a", "kind": "target", "from": "UP", "to": "DOWN",
        "cause": "results", "at": "2026-01-01T00:00:00.000Z", "detail": null});
    assert!(serde_json::from_value::<views::Event>(event.clone()).is_ok());
    let mut missing = event;
    missing.as_object_mut().unwrap().remove("detail");
    assert!(serde_json::from_value::<views::Event>(missing).is_err());
}

/// One daemon with a target in each situation the README's target fields describe: UP, DOWN, a
/// failure being confirmed, DEGRADED with a business signal, a retried stale connection,
/// flapping, maintenance, no result yet; and groups over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_field_of_the_readme_is_served() {
    let (up, _up_task) = accepting().await;
    let (confirming, confirming_task) = accepting().await;
    let down = closed_port();
    let shop =
        serve(|_| ([("x-stock", "low")], r#"{"status":"UP","mode":"readonly"}"#).into_response())
            .await;
    let reused = one_reply_per_connection().await;
    let (flappy, flappy_status) = switchable().await;
    let dir = tempfile::tempdir().unwrap();
    // `later` runs every hour: its grid offset (a hash of its id) puts its first run 53 minutes
    // after the start, so it has no result during the test.
    write(
        dir.path(),
        &format!(
            r#"defaults: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1, jitter: 0}}
targets:
  - {{id: up, tcp: {{address: "{up}"}}}}
  - {{id: down, tcp: {{address: "{down}"}}}}
  - {{id: confirming, tcp: {{address: "{confirming}"}}, fall: 1000}}
  - id: shop
    http:
      url: http://{shop}/ready
      expect: {{json: {{"$.status": "UP"}}}}
      degraded_if: {{json: {{"$.mode": "readonly"}}}}
      signals:
        - {{name: LowStock, severity: high, when: {{header: {{x-stock: low}}}}}}
  - {{id: reused, http: {{url: "http://{reused}/"}}}}
  - id: flappy
    http: {{url: "http://{flappy}/ready"}}
    flap: {{transitions: 2, window: 1m, min_stable: 1m}}
  - {{id: maint, tcp: {{address: "{up}"}}}}
  - {{id: later, tcp: {{address: "{up}"}}, interval: 1h, timeout: 1s}}
  - id: checkout
    kind: group
    depends_on: [{{target: up, weight: 3, critical: true}}, {{target: down, weight: 1}}]
  - {{id: front, kind: group, depends_on: [{{target: down, critical: true}}]}}
  - {{id: waiting, kind: group, depends_on: [{{target: later}}]}}
"#
        ),
    );
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[
            ("up", "UP"),
            ("down", "DOWN"),
            ("confirming", "UP"),
            ("shop", "DEGRADED"),
            ("reused", "UP"),
            ("flappy", "UP"),
            ("maint", "UP"),
            ("later", "PROBING"),
        ])
        .await;

    // A failure being confirmed: still UP, pending toward DOWN.
    confirming_task.abort();
    let confirmation = daemon
        .wait_target("confirming", "pending", |t| t.pending.is_some())
        .await;
    // Three changes of verdict within the window (more than `transitions: 2`): flapping.
    for (status, state) in [(503, "DOWN"), (200, "UP")] {
        flappy_status.store(status, Ordering::SeqCst);
        daemon.wait_states(&[("flappy", state)]).await;
    }
    flappy_status.store(503, Ordering::SeqCst);
    daemon
        .wait_target("flappy", "flapping", |t| t.flapping)
        .await;
    // Operator maintenance: the PUT answers with the target.
    let asked = SystemTime::now();
    let (status, body) = daemon
        .send(
            Method::PUT,
            "/v1/targets/maint/maintenance",
            None,
            Some(r#"{"reason": "disk swap", "duration": "30m"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let answered = SystemTime::now();
    let maint = views::TargetDetail::from_value(&body).target;
    let m = maint.maintenance.clone().unwrap();
    assert_eq!(
        (m.reason.as_str(), m.source.as_str()),
        ("disk swap", "operator")
    );
    let thirty = Duration::from_secs(1800);
    assert!(
        m.until.0 >= asked + thirty - Duration::from_millis(1)
            && m.until.0 <= answered + thirty + Duration::from_millis(1),
        "until {:?}",
        m.until
    );
    // `reused` has been probed again on a kept-alive connection (every reuse fails).
    daemon
        .wait_target("reused", "noted", |t| {
            t.last.as_ref().is_some_and(|l| l.note.is_some())
        })
        .await;

    // A run that needed the retry leaves a fresh connection, which the next run may find
    // closed or not, so `reused`'s latest run is not always a noted one: read a listing that
    // holds one.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    let list = loop {
        let list = daemon.list().await;
        if list
            .get("reused")
            .last
            .as_ref()
            .is_some_and(|l| l.note.is_some())
        {
            break list;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no listing showed reused's note"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ids: Vec<&str> = list.targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "confirming",
            "down",
            "flappy",
            "later",
            "maint",
            "reused",
            "shop",
            "up"
        ],
        "targets only (groups are not probed), by id"
    );
    // Fields every plain target shares: no pool, no breaker.
    for t in &list.targets {
        let schedule = if t.id == "later" {
            (3_600_000, 1000)
        } else {
            (200, 150)
        };
        assert_eq!((t.interval_ms, t.timeout_ms), schedule, "{}", t.id);
        assert_eq!(t.weight, None, "{}: weight is null outside pools", t.id);
        assert!(!t.ejected && t.ejection.is_none(), "{}", t.id);
        assert!(t.circuit.is_none(), "{}: no breaker", t.id);
        assert!(!t.dependency_down, "{}", t.id);
    }
    let t = list.get("up");
    assert_eq!(
        (t.state.as_str(), t.healthy, t.flapping),
        ("UP", true, false)
    );
    assert_eq!(t.pending, None);
    let last = t.last.as_ref().unwrap();
    assert!(last.ok && !last.degraded && last.reason.is_none() && last.note.is_none());
    assert!(
        last.latency_ms >= 0.0 && last.latency_ms < 150.0,
        "{last:?}"
    );
    assert_eq!(t.last_failure, None);
    assert!(t.degraded_reasons.is_empty() && t.signals.is_empty());
    assert_eq!((t.consecutive_failures, t.transitions), (0, 1));
    assert!(t.consecutive_successes >= 1);
    assert_eq!(t.score, Some(1.0));

    let t = list.get("down");
    assert_eq!((t.state.as_str(), t.healthy), ("DOWN", false));
    assert_eq!(t.last.as_ref().unwrap().reason.as_deref(), Some("refused"));
    assert_eq!(
        t.last_failure,
        Some(views::LastFailure {
            reason: "refused".into(),
            detail: refused(down)
        })
    );
    assert_eq!((t.consecutive_successes, t.transitions), (0, 1));
    assert!(t.consecutive_failures >= 1);
    assert_eq!(t.score, Some(0.0));
    // DOWN since its one transition, which came before (or with) its latest run.
    let since = t.since.as_ref().unwrap().0;
    assert!(
        since <= t.last.as_ref().unwrap().at.0 + Duration::from_millis(1),
        "{t:?}"
    );

    let t = list.get("confirming");
    assert_eq!((t.state.as_str(), t.healthy), ("UP", true));
    let pending = t.pending.clone().unwrap();
    assert_eq!((pending.toward.as_str(), pending.of), ("DOWN", 1000));
    assert!(pending.count >= confirmation.target.pending.unwrap().count);
    assert_eq!(pending.count, t.consecutive_failures, "{t:?}");
    assert_eq!(t.last_failure.as_ref().unwrap().reason, "refused");

    let t = list.get("shop");
    assert_eq!((t.state.as_str(), t.healthy), ("DEGRADED", true));
    let last = t.last.as_ref().unwrap();
    assert!(last.ok && last.degraded, "{last:?}");
    assert_eq!(t.degraded_reasons.len(), 1, "{t:?}");
    assert!(t.degraded_reasons[0].contains("$.mode"), "{t:?}");
    assert_eq!(
        t.signals,
        [views::Signal {
            name: "LowStock".into(),
            severity: "high".into()
        }]
    );

    let t = list.get("reused");
    assert_eq!(t.state, "UP");
    assert_eq!(
        t.last.as_ref().unwrap().note.as_deref(),
        Some("a reused connection closed before the reply; retried on a fresh one")
    );
    assert_eq!(
        t.last_failure, None,
        "a retried stale connection is no failure"
    );

    let t = list.get("flappy");
    assert_eq!(
        (t.state.as_str(), t.flapping, t.healthy),
        ("PROBING", true, false)
    );
    assert!(t.transitions >= 4, "{t:?}");

    let t = list.get("maint");
    assert_eq!(t.state, "MAINTENANCE");
    assert!(!t.healthy);
    assert_eq!(t.maintenance.as_ref().unwrap().until, m.until);

    let t = list.get("later");
    assert_eq!((t.state.as_str(), t.healthy), ("PROBING", false));
    assert!(t.last.is_none() && t.last_failure.is_none() && t.pending.is_none());
    assert_eq!((t.consecutive_successes, t.transitions), (0, 0));
    assert!(t.since.is_none(), "no state begun before the first verdict");
    assert_eq!(t.score, None, "unknown before the first result");

    // History: the last 16 results, oldest first.
    let detail = daemon
        .wait_target("up", "through 17 runs", |t| t.consecutive_successes >= 17)
        .await;
    assert_eq!(detail.history.len(), 16);
    assert!(
        detail.history.windows(2).all(|w| w[0].at < w[1].at),
        "oldest first: {:?}",
        detail.history
    );
    let last = detail.target.last.as_ref().unwrap();
    assert_eq!(
        detail.history.last().unwrap().at,
        last.at,
        "ends with the latest"
    );
    assert!(detail.history.iter().all(|o| o.ok && o.reason.is_none()));
    let down_detail = daemon.detail("down").await;
    assert!(!down_detail.history.is_empty() && down_detail.history.len() <= 16);
    assert!(
        down_detail
            .history
            .iter()
            .all(|o| !o.ok && o.reason.as_deref() == Some("refused"))
    );

    // Explanations and the graph. The group scores 0.75, under its rule's up_from (0.8): its
    // verdict is DEGRADED, once judged so.
    daemon.wait_states(&[("checkout", "DEGRADED")]).await;
    let checkout: Explain = typed(&daemon, "/v1/targets/checkout/explain").await;
    assert_eq!(
        checkout.summary,
        "checkout 0.75 DEGRADED: up 1.00 (w 0.75, critical) UP; down 0.00 (w 0.25) DOWN"
    );
    let node = &checkout.node;
    assert_eq!(
        (node.id.as_str(), node.kind.as_str()),
        ("checkout", "group")
    );
    assert_eq!(
        (node.state.as_deref(), node.score, node.flapping),
        (Some("DEGRADED"), Some(0.75), false)
    );
    assert!(!node.unknown && !node.dependency_down);
    assert_eq!(checkout.stability, Some(1.0), "1 for a group");
    let children: Vec<_> = checkout
        .children
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.kind.as_str(),
                c.state.as_deref(),
                c.score,
                c.weight,
                c.critical,
                c.caps,
            )
        })
        .collect();
    assert_eq!(
        children,
        [
            ("up", "target", Some("UP"), Some(1.0), 0.75, true, false),
            (
                "down",
                "target",
                Some("DOWN"),
                Some(0.0),
                0.25,
                false,
                false
            ),
        ]
    );
    let front: Explain = typed(&daemon, "/v1/targets/front/explain").await;
    assert!(front.node.dependency_down);
    assert_eq!(front.node.score, Some(0.0), "capped at critical_cap");
    assert!(front.children[0].caps && front.children[0].critical);
    assert_eq!(front.root_causes, [front.children[0].id.clone()]);
    assert!(front.impacts.is_empty() && checkout.root_causes.is_empty());
    let waiting: Explain = typed(&daemon, "/v1/targets/waiting/explain").await;
    assert!(waiting.node.unknown && waiting.node.score.is_none());
    assert!(waiting.children[0].unknown);
    assert_eq!(waiting.children[0].state.as_deref(), Some("PROBING"));
    let up: Explain = typed(&daemon, "/v1/targets/up/explain").await;
    assert_eq!((up.node.kind.as_str(), up.stability), ("target", Some(1.0)));
    assert!(up.children.is_empty());
    let later: Explain = typed(&daemon, "/v1/targets/later/explain").await;
    assert_eq!(later.stability, None, "no result yet");

    let graph: Graph = typed(&daemon, "/v1/graph").await;
    let nodes: Vec<(&str, &str)> = graph
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.kind.as_str()))
        .collect();
    assert_eq!(nodes.len(), 11, "{nodes:?}");
    assert!(nodes.contains(&("front", "group")) && nodes.contains(&("later", "target")));
    let edge = |from: &str, to: &str, weight: f64, critical: bool| views::Edge {
        from: from.into(),
        to: to.into(),
        weight,
        critical,
    };
    let mut edges = graph.edges.clone();
    edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    assert_eq!(
        edges,
        [
            edge("checkout", "down", 0.25, false),
            edge("checkout", "up", 0.75, true),
            edge("front", "down", 1.0, true),
            edge("waiting", "later", 1.0, false),
        ]
    );
    let dot = daemon.get("/v1/graph?format=dot").await;
    assert_eq!(
        dot.headers()["content-type"],
        "text/vnd.graphviz; charset=utf-8"
    );
    let dot = dot.text().await.unwrap();
    assert!(dot.starts_with("digraph dependencies {"), "{dot}");
    for e in &edges {
        assert!(
            dot.contains(&format!("\"{}\" -> \"{}\"", e.from, e.to)),
            "{dot}"
        );
    }

    // Errors: JSON `{"error": ...}` and nothing else.
    for (method, path, body, want) in [
        (Method::GET, "/v1/targets/Not-Valid", None, 400),
        (Method::GET, "/v1/graph?format=png", None, 400),
        (
            Method::POST,
            "/v1/targets/up/calls",
            Some(r#"{"status": 42, "latency_ms": 1}"#),
            400,
        ),
        (Method::GET, "/v1/targets/nope", None, 404),
        (Method::GET, "/v1/targets/nope/explain", None, 404),
        (Method::GET, "/nowhere", None, 404),
        (Method::POST, "/readyz", None, 405),
        (Method::DELETE, "/v1/targets", None, 405),
        (Method::DELETE, "/v1/targets/up/maintenance", None, 409),
        (
            Method::POST,
            "/v1/targets/up/circuit",
            Some(r#"{"command": "reset"}"#),
            409,
        ),
        (Method::DELETE, "/v1/targets/up/ejection", None, 409),
    ] {
        let (status, message) = error(&daemon, method.clone(), path, body).await;
        assert_eq!(status, want, "{method} {path}: {message}");
        assert!(!message.is_empty());
    }
    let (_, message) = error(&daemon, Method::GET, "/v1/targets/nope", None).await;
    assert_eq!(message, "no target \"nope\"");

    // /health: each target's check, each group's, and the worst of them: fail, with a 503.
    daemon.wait_states(&[("front", "DOWN")]).await;
    let (status, report) = health(&daemon).await;
    assert_eq!((status, report.status.as_str()), (503, "fail"));
    assert_eq!(report.service_id, "probe-engine");
    assert!(!report.description.is_empty());
    assert_eq!(report.checks.len(), 12, "{:?}", report.checks.keys());
    // A group's check is its verdict, its score observed.
    for (id, status, output, score) in [
        ("checkout", "warn", "state DEGRADED", Some(0.75)),
        (
            "front",
            "fail",
            "state DOWN; a critical dependency is DOWN",
            Some(0.0),
        ),
        ("waiting", "warn", "state PROBING", None),
    ] {
        let check = report.check(&format!("{id}:score"));
        assert_eq!(
            (
                check.component_type.as_str(),
                check.status.as_str(),
                check.output.as_deref(),
                check.observed_value,
            ),
            ("group", status, Some(output), score),
            "{id}: {check:?}"
        );
    }
    for (id, want) in [
        ("up", "pass"),
        ("confirming", "pass"),
        ("reused", "pass"),
        ("down", "fail"),
        ("shop", "warn"),
        ("flappy", "warn"),
        ("maint", "warn"),
        ("later", "warn"),
    ] {
        let check = report.check(&format!("{id}:responseTime"));
        assert_eq!(check.status, want, "{id}: {check:?}");
        assert_eq!(
            (check.component_id.as_str(), check.component_type.as_str()),
            (id, "component")
        );
        if id == "later" {
            assert!(
                check.observed_value.is_none() && check.time.is_none(),
                "{check:?}"
            );
        } else {
            assert_eq!(check.observed_unit.as_deref(), Some("ms"), "{id}");
            assert!(check.observed_value.unwrap() >= 0.0 && check.time.is_some());
        }
    }
    let output = |id: &str| report.check(&format!("{id}:responseTime")).output.clone();
    assert_eq!(output("down"), Some(format!("refused: {}", refused(down))));
    assert!(
        output("confirming")
            .unwrap()
            .ends_with(" of 1000 results toward DOWN")
    );
    assert!(output("shop").unwrap().starts_with("degraded: "));
    assert_eq!(output("flappy").as_deref(), Some("state PROBING: flapping"));
    assert_eq!(output("later").as_deref(), Some("state PROBING"));
    assert!(output("maint").unwrap().ends_with(": disk swap"));
    assert_eq!(output("up"), None);
    assert_eq!(report.check("up:responseTime").score, Some(1.0));
    let resolver = report.check("resolver:dns");
    assert_eq!(
        (resolver.status.as_str(), resolver.component_type.as_str()),
        ("pass", "system")
    );

    // The metrics these targets moved.
    let text = daemon.get("/metrics").await.text().await.unwrap();
    let list = daemon.list().await;
    let metrics = Metrics::parse(&text);
    assert_eq!(metrics.value("probe_success", &target("up")), 1.0);
    assert_eq!(metrics.value("probe_success", &target("down")), 0.0);
    assert_eq!(metrics.value("probe_target_up", &target("up")), 1.0);
    assert_eq!(metrics.value("probe_target_up", &target("down")), 0.0);
    assert_eq!(metrics.value("probe_target_up", &target("flappy")), 0.0);
    assert_eq!(metrics.label_names("probe_success"), [["target"]]);
    let up_runs = metrics.histogram("probe_duration_seconds", &target("up"));
    assert!(up_runs.count >= 17.0 && up_runs.sum > 0.0, "{up_runs:?}");
    assert_eq!(up_runs.buckets.len(), 15, "14 bounds and +Inf");
    let down_runs = metrics.histogram("probe_duration_seconds", &target("down"));
    let refused = metrics.value(
        "probe_failures_total",
        &[("target", "down"), ("reason", "refused")],
    );
    assert!(
        refused >= 1.0 && refused <= down_runs.count,
        "{refused} {down_runs:?}"
    );
    assert_eq!(
        metrics.label_names("probe_failures_total"),
        [["reason", "target"]]
    );
    // Every transition a target's `transitions` counts is in probe_state_transitions_total.
    for id in ["up", "down", "maint", "flappy", "later"] {
        assert_eq!(
            metrics.sum("probe_state_transitions_total", &target(id)),
            list.get(id).transitions as f64,
            "{id}"
        );
    }
    let transition = |id: &str, from: &str, to: &str| {
        metrics
            .get(
                "probe_state_transitions_total",
                &[("target", id), ("from", from), ("to", to)],
            )
            .unwrap_or(0.0)
    };
    assert_eq!(transition("down", "PROBING", "DOWN"), 1.0);
    assert_eq!(transition("maint", "UP", "MAINTENANCE"), 1.0);
    assert!(transition("flappy", "UP", "DOWN") >= 1.0 && transition("flappy", "DOWN", "UP") >= 1.0);
    let lag = metrics.histogram("probe_scheduler_lag_seconds", &[]);
    assert!(
        lag.count >= up_runs.count,
        "every run is dispatched: {lag:?}"
    );
    assert!(metrics.get("probe_in_flight", &[]).unwrap() >= 0.0);
    let signals = metrics.value(
        "probe_signals_total",
        &[("target", "shop"), ("signal", "LowStock")],
    );
    let shop_runs = metrics
        .histogram("probe_duration_seconds", &target("shop"))
        .count;
    assert!(
        signals >= 1.0 && signals <= shop_runs,
        "{signals} of {shop_runs}"
    );
    assert_eq!(
        metrics.label_names("probe_signals_total"),
        [["signal", "target"]]
    );
    let retries = metrics.value(
        "probe_http_stale_connection_retries_total",
        &target("reused"),
    );
    assert!(retries >= 1.0, "{retries}");
    assert_eq!(
        metrics
            .series("probe_http_stale_connection_retries_total")
            .count(),
        1
    );
    assert_eq!(
        metrics.value("probe_health_score", &target("checkout")),
        0.75
    );
    assert_eq!(metrics.value("probe_health_score", &target("up")), 1.0);
    assert_eq!(metrics.value("probe_health_score", &target("front")), 0.0);
    assert!(
        metrics
            .value("probe_health_score", &target("waiting"))
            .is_nan()
    );
    assert!(
        metrics
            .value("probe_health_score", &target("later"))
            .is_nan()
    );
    assert_eq!(
        metrics.value("probe_dependency_down", &target("front")),
        1.0
    );
    assert_eq!(
        metrics.value("probe_dependency_down", &target("checkout")),
        0.0
    );
    assert_eq!(metrics.value("probe_dependency_down", &target("down")), 0.0);
    let multiplier = metrics.value("probe_self_health_multiplier", &[]);
    assert!((0.0..=8.0).contains(&multiplier), "{multiplier}");
    assert_eq!(metrics.value("probe_resolver_up", &[]), 1.0);
    for name in [
        "probe_success",
        "probe_target_up",
        "probe_in_flight",
        "probe_health_score",
    ] {
        assert_eq!(metrics.types[name], "gauge", "{name}");
    }
    for name in [
        "probe_state_transitions_total",
        "probe_failures_total",
        "probe_signals_total",
        "probe_http_stale_connection_retries_total",
    ] {
        assert_eq!(metrics.types[name], "counter", "{name}");
    }
    promtool_check(&text);
}

/// Pool members and circuit breakers driven through `POST /v1/targets/{id}/calls`, the
/// operator's `POST /v1/targets/{id}/circuit` and `DELETE /v1/targets/{id}/ejection`: the
/// `ejection` and `circuit` fields and their metrics at each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejection_and_circuit_fields_follow_calls_and_operator_commands() {
    let (a, _a) = accepting().await;
    let (b, _b) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &format!(
            r#"defaults: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1, jitter: 0}}
targets:
  - {{id: api-1, tcp: {{address: "{a}"}}}}
  - {{id: api-2, tcp: {{address: "{b}"}}}}
  - id: api
    kind: group
    depends_on: [{{target: api-1}}, {{target: api-2}}]
    outlier: {{consecutive_gateway_failures: 3, consecutive_5xx: 5, base_ejection: 1s, max_ejection_percent: 50}}
    recovery: {{cooldown: 1s, passes: 3, permanent_after: 2}}
  - id: cb
    tcp: {{address: "{a}"}}
    circuit_breaker: {{minimum_calls: 4, window_calls: 4, open_for: 1s}}
    skip_active_after: 2
"#
        ),
    );
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[("api-1", "UP"), ("api-2", "UP"), ("cb", "UP")])
        .await;
    let call = |id: &'static str, body: &'static str| {
        let daemon = &daemon;
        async move {
            let (status, reply) = daemon
                .send(
                    Method::POST,
                    &format!("/v1/targets/{id}/calls"),
                    None,
                    Some(body),
                )
                .await;
            assert_eq!(status, 202, "{reply}");
            reply
        }
    };
    let command = |id: &'static str, command: &'static str| {
        let daemon = &daemon;
        async move {
            let (status, body) = daemon
                .send(
                    Method::POST,
                    &format!("/v1/targets/{id}/circuit"),
                    None,
                    Some(&format!(r#"{{"command": "{command}"}}"#)),
                )
                .await;
            assert_eq!(status, 200, "{command}: {body}");
            views::TargetDetail::from_value(&body).target
        }
    };
    let list = daemon.list().await;
    for id in ["api-1", "api-2"] {
        let t = list.get(id);
        assert_eq!((t.weight, t.ejected), (Some(1.0), false), "{id}");
        assert!(t.ejection.is_none() && t.circuit.is_none(), "{id}");
    }
    let cb = list.get("cb");
    assert_eq!(cb.weight, None, "not in a pool");
    let c = cb.circuit.clone().unwrap();
    assert_eq!((c.state.as_str(), c.calls, c.reopens), ("closed", 0, 0));
    assert_eq!(
        (c.failure_rate, c.slow_call_rate, c.open_until),
        (0.0, 0.0, None)
    );
    let metrics = daemon.metrics().await;
    assert_eq!(
        metrics.value("probe_circuit_state", &[("target", "cb")]),
        0.0
    );
    assert_eq!(
        metrics.get("probe_circuit_state", &[("target", "api-1")]),
        None
    );
    assert_eq!(
        metrics.get("probe_target_weight", &[("target", "cb")]),
        None
    );
    assert_eq!(metrics.sum("probe_active_skipped_total", &[]), 0.0);

    // skip_active_after: 2 passive successes stand in for the next active run.
    for _ in 0..2 {
        let reply = call("cb", r#"{"status": 200, "latency_ms": 3}"#).await;
        assert_eq!(
            reply,
            serde_json::json!({"target": "cb", "outcome": "success"})
        );
    }
    daemon
        .wait_metrics("skipped a run of cb", |m| {
            m.get("probe_active_skipped_total", &[("target", "cb")]) == Some(1.0)
        })
        .await;

    // Three gateway failures eject api-1 at once.
    let before = SystemTime::now();
    for _ in 0..3 {
        call("api-1", r#"{"status": 503, "latency_ms": 5}"#).await;
    }
    let t = daemon.detail("api-1").await.target;
    assert_eq!(
        (t.state.as_str(), t.ejected, t.weight),
        ("DOWN", true, Some(0.0))
    );
    let e = t.ejection.clone().unwrap();
    assert_eq!(
        (
            e.phase.as_str(),
            e.reason.as_deref(),
            e.times_ejected,
            e.passes,
            e.permanent
        ),
        (
            "ejected",
            Some("consecutive_gateway_failures"),
            Some(1),
            None,
            false
        )
    );
    let (since, until) = (e.since.unwrap().0, e.until.unwrap().0);
    assert!(close_to(since, before, Duration::from_secs(2)), "{e:?}");
    assert!(
        close_to(
            until,
            since + Duration::from_secs(1),
            Duration::from_millis(5)
        ),
        "1 x base_ejection: {e:?}"
    );
    let metrics = daemon.metrics().await;
    let ejections = |m: &Metrics, reason: &str| {
        m.get(
            "probe_ejections_total",
            &[("target", "api-1"), ("reason", reason)],
        )
    };
    assert_eq!(
        ejections(&metrics, "consecutive_gateway_failures"),
        Some(1.0)
    );
    assert_eq!(metrics.value("probe_ejected", &[("target", "api-1")]), 1.0);
    assert_eq!(metrics.value("probe_ejected", &[("target", "api-2")]), 0.0);
    assert_eq!(
        metrics.value("probe_target_weight", &[("target", "api-1")]),
        0.0
    );
    assert_eq!(
        metrics.value("probe_target_weight", &[("target", "api-2")]),
        1.0
    );
    assert_eq!(
        metrics.label_names("probe_ejections_total"),
        [["reason", "target"]]
    );

    // After the ejection time and the cool-down: on probation, counting its passes; then back
    // through slow start.
    let probation = daemon
        .wait_target("api-1", "on probation", |t| {
            t.ejection.as_ref().is_some_and(|e| e.phase == "probation")
        })
        .await
        .target;
    let e = probation.ejection.clone().unwrap();
    assert!(e.passes.is_some_and(|p| p < 3), "{e:?}");
    assert!(probation.ejected && !e.permanent && probation.weight == Some(0.0));
    let t = daemon
        .wait_target("api-1", "readmitted", |t| !t.ejected)
        .await
        .target;
    assert!(t.ejection.is_none(), "{t:?}");
    let weight = t.weight.unwrap();
    assert!((0.1..1.0).contains(&weight), "slow start: {weight}");
    let metrics = daemon.metrics().await;
    let gauge = metrics.value("probe_target_weight", &[("target", "api-1")]);
    assert!((weight..1.0).contains(&gauge), "{gauge}");
    assert_eq!(metrics.value("probe_ejected", &[("target", "api-1")]), 0.0);

    // Five 5xx in a row: the second ejection, permanent (permanent_after: 2).
    for _ in 0..5 {
        call("api-1", r#"{"status": 500, "latency_ms": 5}"#).await;
    }
    let t = daemon.detail("api-1").await.target;
    let e = t.ejection.clone().unwrap();
    assert_eq!(
        (
            e.phase.as_str(),
            e.reason.as_deref(),
            e.times_ejected,
            e.permanent,
            e.until
        ),
        ("permanent", Some("consecutive_5xx"), Some(2), true, None),
        "{e:?}"
    );
    assert_eq!(
        ejections(&daemon.metrics().await, "consecutive_5xx"),
        Some(1.0)
    );
    let (status, body) = daemon
        .send(Method::DELETE, "/v1/targets/api-1/ejection", None, None)
        .await;
    assert_eq!(status, 200, "a permanent ejection too: {body}");
    assert!(!views::TargetDetail::from_value(&body).target.ejected);

    // The operator's overrides of cb's breaker, and their gauge.
    let circuit_gauge = || async {
        daemon
            .metrics()
            .await
            .value("probe_circuit_state", &[("target", "cb")])
    };
    let c = command("cb", "force_open").await.circuit.unwrap();
    assert_eq!((c.state.as_str(), c.open_until), ("forced_open", None));
    assert_eq!(c.calls, 2, "the window still holds the two calls");
    assert_eq!(circuit_gauge().await, 3.0);
    let c = command("cb", "disable").await.circuit.unwrap();
    assert_eq!(c.state, "disabled");
    assert_eq!(circuit_gauge().await, 4.0);
    let c = command("cb", "reset").await.circuit.unwrap();
    assert_eq!((c.state.as_str(), c.calls, c.failures), ("closed", 0, 0));
    assert_eq!(circuit_gauge().await, 0.0);

    // Four calls, two failed and one slow: the failure rate reaches 0.5 and opens it.
    let before = SystemTime::now();
    call("cb", r#"{"status": 200, "latency_ms": 3000}"#).await;
    call("cb", r#"{"status": 200, "latency_ms": 3}"#).await;
    call("cb", r#"{"outcome": "timeout", "latency_ms": 1000}"#).await;
    call("cb", r#"{"outcome": "refused", "latency_ms": 1}"#).await;
    let c = daemon.detail("cb").await.target.circuit.unwrap();
    assert_eq!(
        (
            c.state.as_str(),
            c.calls,
            c.failures,
            c.slow_calls,
            c.reopens
        ),
        ("open", 4, 2, 1, 0)
    );
    assert_eq!((c.failure_rate, c.slow_call_rate), (0.5, 0.25));
    let open_until = c.open_until.unwrap().0;
    assert!(
        close_to(
            open_until,
            before + Duration::from_secs(1),
            Duration::from_secs(2)
        ),
        "{c:?}"
    );
    assert_eq!(circuit_gauge().await, 1.0);
    // Once open_for has passed, the API and the gauge say half-open.
    let c = daemon
        .wait_target("cb", "half-open", |t| {
            t.circuit.as_ref().is_some_and(|c| c.state == "half_open")
        })
        .await
        .target
        .circuit
        .unwrap();
    assert_eq!((c.open_until, c.calls), (None, 0));
    assert!(SystemTime::now() >= open_until);
    assert_eq!(circuit_gauge().await, 2.0);

    let (status, message) =
        error(&daemon, Method::DELETE, "/v1/targets/api-2/ejection", None).await;
    assert_eq!(status, 409, "{message}");
    let (status, message) = error(
        &daemon,
        Method::POST,
        "/v1/targets/api-1/circuit",
        Some(r#"{"command": "reset"}"#),
    )
    .await;
    assert_eq!(status, 409, "{message}");
    let text = daemon.get("/metrics").await.text().await.unwrap();
    promtool_check(&text);
}

/// A real DOWN and an operator's maintenance, as `GET /v1/events` and `/health` tell them.
/// `?target=` keeps the stream to the targets named: another target's transition never comes,
/// the named one's does; an unknown id is a 404 and another parameter a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_keeps_to_the_targets_asked_for() {
    let (addr, _listener) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &format!(
            "defaults: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1}}\ntargets:\n\
             \x20 - {{id: kept, tcp: {{address: \"{addr}\"}}}}\n\
             \x20 - {{id: other, tcp: {{address: \"{addr}\"}}}}\n"
        ),
    );
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("kept", "UP"), ("other", "UP")]).await;
    let mut events = EventStream::new(daemon.get("/v1/events?target=kept").await);
    let maintenance = r#"{"reason": "filtered", "duration": "30m"}"#;
    for id in ["other", "kept"] {
        let path = format!("/v1/targets/{id}/maintenance");
        let (status, body) = daemon
            .send(Method::PUT, &path, None, Some(maintenance))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // The first event on the stream is kept's, though other's change came first.
    let first = events.next().await;
    assert_eq!(
        (first.target.as_str(), first.to.as_str()),
        ("kept", "MAINTENANCE")
    );
    let unknown = daemon.get("/v1/events?target=nope").await;
    assert_eq!(unknown.status(), 404);
    let other = daemon.get("/v1/events?since=1h").await;
    assert_eq!(other.status(), 400);
    assert!(other.text().await.unwrap().contains("\\\"since\\\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_health_follow_a_real_down_and_a_maintenance() {
    let (addr, listener) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &format!(
            "targets:\n  - {{id: svc, tcp: {{address: \"{addr}\"}}, interval: 200ms, \
             timeout: 150ms, rise: 1, fall: 1}}\n"
        ),
    );
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("svc", "UP")]).await;
    let (status, report) = health(&daemon).await;
    assert_eq!((status, report.status.as_str()), (200, "pass"));
    assert_eq!(report.check("svc:responseTime").status, "pass");
    let mut events = EventStream::new(daemon.get("/v1/events").await);

    let refused_from = SystemTime::now();
    listener.abort();
    let down = events.next_of("svc").await;
    assert_eq!(
        (down.from.as_str(), down.to.as_str(), down.cause.as_str()),
        ("UP", "DOWN", "results")
    );
    assert_eq!(down.detail, Some(format!("refused: {}", refused(addr))));
    assert!(
        down.at.0 >= refused_from - Duration::from_millis(1),
        "{down:?}"
    );
    assert!(down.at.0 <= SystemTime::now());
    let (status, report) = health(&daemon).await;
    assert_eq!((status, report.status.as_str()), (503, "fail"));
    assert_eq!(
        report.check("svc:responseTime").output,
        Some(format!("refused: {}", refused(addr)))
    );

    let (status, body) = daemon
        .send(
            Method::PUT,
            "/v1/targets/svc/maintenance",
            None,
            Some(r#"{"reason": "disk swap", "duration": "30m"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let until = views::TargetDetail::from_value(&body)
        .target
        .maintenance
        .unwrap()
        .until;
    let started = events.next_of("svc").await;
    assert_eq!(
        (
            started.from.as_str(),
            started.to.as_str(),
            started.cause.as_str()
        ),
        ("DOWN", "MAINTENANCE", "maintenance_started")
    );
    assert_eq!(started.detail.as_deref(), Some("disk swap"));
    assert!(started.at >= down.at);
    let (status, report) = health(&daemon).await;
    assert_eq!((status, report.status.as_str()), (200, "warn"));
    let output = report.check("svc:responseTime").output.clone().unwrap();
    assert!(
        output.starts_with("maintenance until ") && output.ends_with(": disk swap"),
        "{output}"
    );
    let shown = output
        .strip_prefix("maintenance until ")
        .and_then(|o| o.strip_suffix(": disk swap"))
        .unwrap();
    assert_eq!(humantime::parse_rfc3339(shown).unwrap(), until.0);

    let (status, _) = daemon
        .send(Method::DELETE, "/v1/targets/svc/maintenance", None, None)
        .await;
    assert_eq!(status, 200);
    let ended = events.next_of("svc").await;
    assert_eq!(
        (ended.from.as_str(), ended.to.as_str(), ended.cause.as_str()),
        ("MAINTENANCE", "PROBING", "maintenance_ended")
    );
    // Then the results decide again: still refused.
    let again = events.next_of("svc").await;
    assert_eq!(
        (again.from.as_str(), again.to.as_str(), again.cause.as_str()),
        ("PROBING", "DOWN", "results")
    );
    assert_eq!(again.detail, Some(format!("refused: {}", refused(addr))));
    assert!(started.at <= ended.at && ended.at <= again.at);
}

/// An HTTP server that holds each request until the test releases it, and says when one came.
async fn held() -> (
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    tokio::sync::watch::Sender<bool>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let arrived = arrived.clone();
            let mut released = released.clone();
            tokio::spawn(async move {
                while read_head(&mut socket).await {
                    let _ = arrived.send(());
                    if released.wait_for(|r| *r).await.is_err() {
                        return;
                    }
                    let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if socket.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, arrivals, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_in_flight_counts_the_probe_a_server_holds() {
    let (addr, mut arrivals, release) = held().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &format!(
            "targets:\n  - {{id: held, http: {{url: \"http://{addr}/\"}}, interval: 3s, \
             timeout: 2900ms, rise: 1}}\n"
        ),
    );
    let daemon = Daemon::start(dir.path());
    tokio::time::timeout(WAIT, arrivals.recv())
        .await
        .expect("no probe came")
        .unwrap();
    // The server holds the daemon's only probe: one in flight, no result yet.
    let metrics = daemon.metrics().await;
    assert_eq!(metrics.value("probe_in_flight", &[]), 1.0);
    assert_eq!(metrics.types["probe_in_flight"], "gauge");
    assert!(daemon.detail("held").await.target.last.is_none());
    release.send(true).unwrap();
    let t = daemon
        .wait_target("held", "probed", |t| t.last.is_some())
        .await
        .target;
    assert!(t.last.unwrap().ok);
    daemon
        .wait_metrics("no probe in flight", |m| {
            m.get("probe_in_flight", &[]) == Some(0.0)
        })
        .await;
}

/// `headers` with `${VAR}`: the server gets the secret, and no API answer, event or log line
/// of the daemon shows it, at any log level, through failures, recovery and a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_values_are_never_shown_in_the_api_or_the_logs() {
    let secret = format!(
        "tok-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let status = Arc::new(AtomicU16::new(200));
    let authorized = Arc::new(AtomicUsize::new(0));
    let addr = {
        let (status, authorized, bearer) = (
            status.clone(),
            authorized.clone(),
            format!("Bearer {secret}"),
        );
        serve(move |headers: HeaderMap| {
            if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(bearer.as_str()) {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            authorized.fetch_add(1, Ordering::SeqCst);
            let code = StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap();
            (code, r#"{"status":"UP"}"#).into_response()
        })
        .await
    };
    let dir = tempfile::tempdir().unwrap();
    let config = |extra: &str| {
        format!(
            "targets:\n  - id: secured\n    interval: 200ms\n    timeout: 150ms\n    rise: 1\n    \
             fall: 1\n    http:\n      url: http://{addr}/ready\n      headers: {{Authorization: \
             \"Bearer ${{PROBE_TEST_SECRET}}\", X-Api-Key: \"${{PROBE_TEST_SECRET}}\"{extra}}}\n"
        )
    };
    write(dir.path(), &config(""));
    let mut daemon = Daemon::start_env(
        dir.path(),
        &[],
        &[("PROBE_TEST_SECRET", &secret), ("RUST_LOG", "trace")],
    );
    daemon.wait_states(&[("secured", "UP")]).await;
    assert!(
        authorized.load(Ordering::SeqCst) >= 1,
        "the server got the secret"
    );
    let mut events = EventStream::new(daemon.get("/v1/events").await);
    let mut answers = Vec::new();
    read_all(&daemon, &mut answers).await;
    // A failure, its recovery, and a reload that changes the headers.
    status.store(503, Ordering::SeqCst);
    assert_eq!(events.next_of("secured").await.to, "DOWN");
    read_all(&daemon, &mut answers).await;
    status.store(200, Ordering::SeqCst);
    assert_eq!(events.next_of("secured").await.to, "UP");
    write(dir.path(), &config(", X-Other: \"${PROBE_TEST_SECRET}\""));
    daemon.signal("-HUP");
    let applied = daemon.wait_log("topology applied");
    assert_eq!(applied["changed"], 1, "{applied}");
    daemon.wait_states(&[("secured", "UP")]).await;
    read_all(&daemon, &mut answers).await;
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());

    for answer in answers.iter().chain([&events.raw]) {
        assert!(
            !answer.contains(&secret),
            "the secret in an answer: {answer}"
        );
    }
    assert!(answers[0].contains("\"secured\""), "{}", answers[0]);
    let logs = daemon.all_logs();
    assert!(
        logs.iter().any(|l| l["message"] == "target state changed"),
        "the logs were read"
    );
    for line in logs {
        assert!(
            !line.to_string().contains(&secret),
            "the secret in a log line: {line}"
        );
    }
}

/// `/v1/topology` lists every field of the etcd source even when the source cannot start (a
/// TLS file it cannot read): nothing synced, the reason, and `/health` warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_source_that_cannot_start_shows_every_field_of_the_readme() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-ca.pem");
    write(
        dir.path(),
        &format!(
            "topology:\n  etcd:\n    endpoints: [\"https://127.0.0.1:1\"]\n    tls: {{ca_file: \
             \"{}\"}}\ntargets:\n  - {{id: a, tcp: {{address: \"{}\"}}}}\n",
            missing.display(),
            closed_port()
        ),
    );
    let daemon = Daemon::start(dir.path());
    let topology: views::Topology = typed(&daemon, "/v1/topology").await;
    let etcd = topology.etcd().unwrap();
    assert_eq!((etcd.name.as_str(), etcd.state.as_str()), ("etcd", "error"));
    assert_eq!(etcd.endpoints, ["https://127.0.0.1:1"]);
    assert_eq!(etcd.prefix, "/probe-engine/targets/");
    let error = etcd.last_error.unwrap();
    assert!(
        error.contains("cannot read the TLS CA certificate"),
        "{error}"
    );
    assert_eq!((etcd.revision, etcd.entries), (None, None));
    assert!(etcd.stale_since.is_none() && etcd.last_change.is_none() && etcd.last_resync.is_none());
    let files = topology.files();
    assert_eq!(
        (files.state.as_str(), files.last_good_generation),
        ("synced", 1)
    );
    let (_, report) = health(&daemon).await;
    let check = report.check("topology:etcd");
    assert_eq!(
        (check.status.as_str(), check.component_type.as_str()),
        ("warn", "datastore")
    );
}

/// What every reader says of `web` now: its node in explain and in the graph, its badge, its
/// `/health` check and its gRPC-style serving answer are read from one verdict.
async fn group_everywhere(daemon: &Daemon) -> Vec<String> {
    let explain: Explain = views::strict(
        &daemon
            .get("/v1/targets/web/explain")
            .await
            .json()
            .await
            .unwrap(),
    );
    let graph: Graph = views::strict(&daemon.get("/v1/graph").await.json().await.unwrap());
    let node = graph.nodes.iter().find(|n| n.id == "web").unwrap();
    let badge = daemon
        .get("/v1/badges/web/health.svg")
        .await
        .text()
        .await
        .unwrap();
    let (_, report) = health(daemon).await;
    let check = report.check("web:score");
    vec![
        explain.node.state.unwrap(),
        node.state.clone().unwrap(),
        badge_texts(&badge)[1].clone(),
        check.output.clone().unwrap(),
        check.status.clone(),
    ]
}

#[tokio::test]
async fn a_groups_verdict_is_one_everywhere_and_moves_by_its_rule() {
    let (up, up_server) = accepting().await;
    let (degrading, degrading_server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    // `web` over `up` (critical) and `degrading`, equal weights; windows of 20 results, 4 s.
    std::fs::write(
        dir.path().join("targets.yaml"),
        format!(
            "defaults: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1}}\n\
             targets:\n  - id: up\n    tcp: {{address: \"{up}\"}}\n\
             \x20 - id: degrading\n    tcp: {{address: \"{degrading}\"}}\n    fall: 1000\n\
             \x20 - id: web\n    kind: group\n    depends_on: [{{target: up, critical: true}}, {{target: degrading}}]\n\
             \x20   state: {{up_from: 0.9, degraded_from: 0.6, rise: 2, fall: 2, degrade_after: 1, flap: false}}\n"
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    let mut events = EventStream::new(daemon.get("/v1/events").await);
    let first = events.next_of("web").await;
    assert_eq!(
        (
            first.kind.as_str(),
            first.from.as_str(),
            first.to.as_str(),
            first.cause.as_str()
        ),
        ("group", "PROBING", "UP", "results")
    );
    assert_eq!(first.detail.as_deref(), Some("score 1.00"));
    assert_eq!(
        group_everywhere(&daemon).await,
        ["UP", "UP", "UP", "state UP", "pass"]
    );

    // `degrading` fails (its verdict holds: fall 1000), and the group's score falls as its
    // window fills: under up_from, DEGRADED at the next judgment (degrade_after 1); under
    // degraded_from, DOWN after two (fall 2). Every reader says so.
    degrading_server.abort();
    let degraded = events.next_of("web").await;
    assert_eq!(
        (
            degraded.from.as_str(),
            degraded.to.as_str(),
            degraded.cause.as_str()
        ),
        ("UP", "DEGRADED", "results")
    );
    assert!(
        degraded
            .detail
            .as_deref()
            .unwrap()
            .contains("under up_from 0.9"),
        "{degraded:?}"
    );
    let down = events.next_of("web").await;
    assert_eq!((down.from.as_str(), down.to.as_str()), ("DEGRADED", "DOWN"));
    assert!(
        down.detail
            .as_deref()
            .unwrap()
            .ends_with("under degraded_from 0.6"),
        "{down:?}"
    );
    assert_eq!(
        daemon.state_of("degrading").await.as_deref(),
        Some("UP"),
        "still UP: fall 1000"
    );
    assert_eq!(
        group_everywhere(&daemon).await,
        ["DOWN", "DOWN", "DOWN", "state DOWN", "fail"]
    );

    // Back: the group comes UP after `rise` good judgments.
    let degrading_server = TcpListener::bind(degrading).await.unwrap();
    let _degrading_server = tokio::spawn(async move {
        loop {
            let _ = degrading_server.accept().await;
        }
    });
    let mut back = events.next_of("web").await;
    while back.to != "UP" {
        back = events.next_of("web").await;
    }
    // Its critical dependency DOWN: the group is DOWN at its next judgment or sooner, whatever
    // its score, with the dependency named.
    up_server.abort();
    let down = events.next_of("web").await;
    assert_eq!(
        (
            down.to.as_str(),
            down.cause.as_str(),
            down.detail.as_deref()
        ),
        (
            "DOWN",
            "dependency_down",
            Some("critical dependency DOWN: up")
        )
    );
    assert_eq!(
        group_everywhere(&daemon).await,
        [
            "DOWN",
            "DOWN",
            "DOWN",
            "state DOWN; a critical dependency is DOWN",
            "fail"
        ]
    );
}

#[tokio::test]
async fn badges_and_the_graph_are_drawn_as_svg() {
    let (up, _server) = accepting().await;
    let down = support::closed_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        format!(
            "defaults: {{interval: 300ms, timeout: 200ms, rise: 1, fall: 1}}\ntargets:\n  - id: up\n    tcp: {{address: \"{up}\"}}\n  - id: down\n    tcp: {{address: \"{down}\"}}\n  - id: web\n    kind: group\n    depends_on: [{{target: up, critical: true}}, {{target: down}}]\n"
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    let badge = |id: &str| {
        let daemon = &daemon;
        let path = format!("/v1/badges/{id}/health.svg");
        async move {
            let response = daemon.get(&path).await;
            let status = response.status().as_u16();
            let kind = response.headers()[reqwest::header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_owned();
            (status, kind, response.text().await.unwrap())
        }
    };
    let (status, kind, body) = badge("up").await;
    assert_eq!(
        (status, kind.as_str()),
        (200, "image/svg+xml; charset=utf-8")
    );
    assert_eq!(badge_texts(&body), ["up", "UP"]);
    assert!(body.contains("<title>up: UP</title>"), "{body}");
    let (_, _, body) = badge("down").await;
    assert_eq!(badge_texts(&body), ["down", "DOWN"]);
    // The group: its verdict (one of its two members is DOWN: 0.5, DEGRADED by the default
    // rule), in its colour.
    daemon.wait_states(&[("web", "DEGRADED")]).await;
    let (status, _, body) = badge("web").await;
    assert_eq!(status, 200);
    assert_eq!(badge_texts(&body), ["web", "DEGRADED"]);
    // An unknown target still draws (a page that embeds it shows why), with 404.
    let (status, _, body) = badge("nope").await;
    assert_eq!(status, 404);
    assert_eq!(badge_texts(&body), ["nope", "not found"]);
    // An id that cannot be one: 400, with the reason.
    let response = daemon.get("/v1/badges/a%20b/health.svg").await;
    assert_eq!(response.status(), 400);
    let error: serde_json::Value = response.json().await.unwrap();
    assert!(
        error["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{error}"
    );

    // The graph drawn: every node with its state in words, the group above what it depends on,
    // its critical edge marked.
    let response = daemon.get("/v1/graph?format=svg").await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let doc = roxmltree::Document::parse(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let node = |id: &str| {
        doc.descendants()
            .find(|n| n.attribute("data-id") == Some(id))
            .unwrap_or_else(|| panic!("no node {id}: {body}"))
    };
    let texts = |n: roxmltree::Node<'_, '_>| -> Vec<String> {
        n.descendants()
            .filter(|t| t.has_tag_name("text"))
            .filter_map(|t| t.text().map(str::to_owned))
            .collect()
    };
    assert_eq!(texts(node("up"))[0], "up");
    assert!(texts(node("up"))[1].starts_with("UP"), "{body}");
    assert!(texts(node("down"))[1].starts_with("DOWN"), "{body}");
    assert_eq!(texts(node("web"))[1], "DEGRADED 0.50", "{body}");
    let y = |id: &str| -> f64 {
        let rect = node(id)
            .descendants()
            .find(|n| n.has_tag_name("rect"))
            .unwrap();
        rect.attribute("y").unwrap().parse().unwrap()
    };
    assert!(
        y("web") < y("up"),
        "a dependent is drawn above what it depends on"
    );
    let edges: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("line"))
        .map(|n| n.attribute("class").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(edges.len(), 2, "{body}");
    assert_eq!(edges.iter().filter(|c| c.contains("critical")).count(), 1);
}

/// `GET /readyz?verbose` and `/livez?verbose` list their checks as kube-apiserver does; `exclude`
/// takes one out of the verdict. Without a policy every target is a check; with one, each
/// required node; the gate's own check fails once the daemon is shutting down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_health_lists_each_check_and_exclude_leaves_one_out() {
    async fn text(daemon: &Daemon, path: &str) -> (u16, String) {
        let response = daemon.get(path).await;
        (response.status().as_u16(), response.text().await.unwrap())
    }
    let up =
        probe_testkit::AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probes.yaml");
    let targets = format!(
        "defaults: {{interval: 200ms, timeout: 100ms, rise: 1, fall: 1}}\ntargets:\n\
         \x20 - {{id: up, tcp: {{address: \"{}\"}}}}\n\
         \x20 - {{id: down, tcp: {{address: \"{}\"}}}}\n",
        up.addr(),
        closed_port()
    );
    std::fs::write(&file, &targets).unwrap();
    let mut daemon = Daemon::start_with(&file, &["--drain-delay", "10s"]);
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;

    assert_eq!(
        text(&daemon, "/readyz?verbose").await,
        (
            503,
            "[+]gate ok\n[-]down failed: DOWN\n[+]up ok\nreadyz check failed\n".to_owned()
        )
    );
    assert_eq!(
        text(&daemon, "/readyz?verbose&exclude=down").await,
        (
            200,
            "[+]gate ok\n[+]down excluded: ok\n[+]up ok\nreadyz check passed\n".to_owned()
        )
    );
    assert_eq!(
        text(&daemon, "/readyz?exclude=down").await,
        (200, "ready\n".to_owned())
    );
    assert_eq!(
        text(&daemon, "/readyz?verbose&exclude=nope").await,
        (
            503,
            "[+]gate ok\n[-]down failed: DOWN\n[+]up ok\n\
             warn: some health checks cannot be excluded: no matches for nope\n\
             readyz check failed\n"
                .to_owned()
        )
    );
    assert_eq!(
        text(&daemon, "/livez?verbose").await,
        (200, "[+]gate ok\nlivez check passed\n".to_owned())
    );
    let refused = daemon.get("/readyz?verbos").await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let error: ApiError = views::strict(&refused.json().await.unwrap());
    assert_eq!(
        error.error,
        "unknown parameter \"verbos\": expected verbose or exclude"
    );

    // Under a readiness policy, the checks are the required nodes.
    std::fs::write(
        &file,
        format!(
            "{targets}\x20 - {{id: svc, kind: group, depends_on: [{{target: up}}]}}\n\
             readiness: {{require: [svc]}}\n"
        ),
    )
    .unwrap();
    daemon.signal("-HUP");
    let deadline = tokio::time::Instant::now() + WAIT;
    while text(&daemon, "/readyz").await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready under the policy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        text(&daemon, "/readyz?verbose").await,
        (
            200,
            "[+]gate ok\n[+]svc ok\nreadyz check passed\n".to_owned()
        )
    );

    // Shutting down: the gate's check fails, while the API still answers within the delay.
    daemon.signal("-TERM");
    daemon.wait_log("shutdown: not ready; serving until load balancers notice");
    assert_eq!(
        text(&daemon, "/readyz?verbose").await,
        (
            503,
            "[-]gate failed: shutting down\n[+]svc ok\nreadyz check failed\n".to_owned()
        )
    );
}
