//! The README's stop sequence and API guard, on the real binary: `SIGTERM`, `SIGINT` and
//! `POST /v1/drain` turn `/readyz` 503 at once, keep serving `/v1` for `--drain-delay`, then
//! refuse it with 503 + `Connection: close` while requests and probes in flight finish (bounded
//! by `--shutdown-grace`), and exit 0; a second signal stops at once. With `--api-token` (or
//! `PROBE_ENGINE_API_TOKEN`) every change needs the token, reads do not, and the token is never
//! shown.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use support::{BIN, Daemon, HeldRequest, SilentServer, WAIT, messages, position, write_targets};
use tokio::time::Instant;

/// The operator token of the stop sequence's daemon: a drain needs one.
const STOP_TOKEN: &str = "stop-token-3vXq";

const MAINTENANCE: &str = r#"{"reason": "disk swap", "duration": "30m"}"#;

/// How a stop is asked for.
#[derive(Clone, Copy, Debug)]
enum Stop {
    Signal(&'static str),
    DrainRequest,
}

/// The log line that says the stop was asked for.
fn asked_line(how: Stop) -> &'static str {
    match how {
        Stop::Signal("-TERM") => "SIGTERM: stopping: not ready, draining, then exiting",
        Stop::Signal("-INT") => "SIGINT: stopping: not ready, draining, then exiting",
        Stop::Signal(other) => panic!("no stop by {other}"),
        Stop::DrainRequest => "drain requested through the API",
    }
}

async fn ask_to_stop(daemon: &Daemon, how: Stop) {
    match how {
        Stop::Signal(signal) => daemon.signal(signal),
        Stop::DrainRequest => {
            let (status, body) = daemon
                .send(Method::POST, "/v1/drain", Some(STOP_TOKEN), None)
                .await;
            assert_eq!(status, 202, "{body}");
        }
    }
}

/// A Duration as tracing prints it with `?` (`812.5ms`, `1.2s`, `7µs`).
fn debug_duration(text: &str) -> Duration {
    for (unit, scale) in [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)] {
        if let Some(n) = text.strip_suffix(unit) {
            return Duration::from_secs_f64(n.parse::<f64>().unwrap() * scale);
        }
    }
    panic!("not a duration: {text}")
}

/// Polls `/readyz` until it says 503; every answer before must be 200.
async fn readyz_turns_503(daemon: &Daemon) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = daemon.get("/readyz").await;
        if r.status() == 503 {
            return r.text().await.unwrap();
        }
        assert_eq!(r.status(), 200);
        assert!(Instant::now() < deadline, "/readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `GET /v1/targets` (a fresh connection each time) until it is refused, and returns the
/// refusal; every answer before must be 200.
async fn v1_refused(daemon: &Daemon) -> reqwest::Response {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = support::client()
            .get(daemon.url("/v1/targets"))
            .send()
            .await
            .unwrap();
        if r.status() == 503 {
            return r;
        }
        assert_eq!(r.status(), 200);
        assert!(Instant::now() < deadline, "/v1 was never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The whole stop sequence, observed from outside, with a request in flight across the drain.
async fn the_stop_sequence(how: Stop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", listener.local_addr().unwrap())]);
    let delay = Duration::from_secs(3);
    let mut daemon = Daemon::start_with(
        dir.path(),
        &[
            "--drain-delay",
            "3s",
            "--shutdown-grace",
            "30s",
            "--api-token",
            STOP_TOKEN,
        ],
    );
    daemon.wait_states(&[("db", "UP")]).await;
    assert_eq!(daemon.get("/readyz").await.status(), 200);

    // A change whose body is still arriving: admitted, in flight until the test sends the rest.
    let held = HeldRequest::start(
        &daemon,
        "PUT",
        "/v1/targets/db/maintenance",
        MAINTENANCE,
        Some(STOP_TOKEN),
    )
    .await;
    let asked = Instant::now();
    ask_to_stop(&daemon, how).await;

    // Not ready at once: while /v1 is still answered, so within the delay.
    assert_eq!(
        readyz_turns_503(&daemon).await,
        "not ready: shutting down\n"
    );
    let during = daemon.get("/v1/targets").await;
    assert_eq!(during.status(), 200, "/v1 refused within the drain delay");
    assert!(
        asked.elapsed() < delay,
        "/readyz took the whole delay to turn"
    );
    assert_eq!(daemon.get("/livez").await.status(), 200);

    // After the delay: /v1 refused with 503 + Connection: close; health routes still answer.
    daemon.wait_log("shutdown: draining");
    let refused = v1_refused(&daemon).await;
    assert!(
        asked.elapsed() >= delay,
        "refused {:?} after the stop, before the {delay:?} delay",
        asked.elapsed()
    );
    assert_eq!(refused.headers()["connection"], "close");
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(daemon.get("/livez").await.status(), 200);
    assert_eq!(daemon.get("/readyz").await.status(), 503);

    // The request in flight holds the stop: the daemon is still there, not drained, a while later.
    let holding = Duration::from_millis(500);
    tokio::time::sleep(holding).await;
    assert!(!daemon.exited(), "exited with a request in flight");
    assert!(
        !daemon
            .lines_so_far()
            .iter()
            .any(|l| l.contains("\"shutdown: drained\"")),
        "drained with a request in flight"
    );
    let reply = held.finish().await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let body: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(body["state"], "MAINTENANCE", "{body}");

    // Then, and only then, drained, and a clean exit.
    let status = daemon.wait_exit();
    assert!(status.success(), "exit status {status}");
    let lines = daemon.all_lines();
    let said = messages(&lines);
    let order = [
        asked_line(how),
        "shutdown: not ready; serving until load balancers notice",
        "shutdown: draining",
        "shutdown: drained",
        "stopped",
    ]
    .map(|m| position(&said, m));
    assert!(order.is_sorted(), "{said:#?}");
    let drained = &lines[order[3]].1;
    let took = debug_duration(drained["took"].as_str().unwrap());
    assert!(took >= holding, "drained after {took:?}: {drained}");
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_runs_the_stop_sequence_and_finishes_a_request_in_flight() {
    the_stop_sequence(Stop::Signal("-TERM")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_does_what_sigterm_does() {
    the_stop_sequence(Stop::Signal("-INT")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_request_runs_the_same_stop_sequence() {
    the_stop_sequence(Stop::DrainRequest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_grace_bounds_the_wait_for_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", support::closed_port())]);
    let grace = Duration::from_secs(1);
    let mut daemon = Daemon::start_with(dir.path(), &["--shutdown-grace", "1s"]);
    // Never finished by the client.
    let held = HeldRequest::start(
        &daemon,
        "PUT",
        "/v1/targets/db/maintenance",
        MAINTENANCE,
        None,
    )
    .await;
    let asked = Instant::now();
    daemon.signal("-TERM");
    // Given the grace, then cut: the connection closes without an answer, and the daemon exits 0.
    let written = held.wait_closed().await;
    assert!(asked.elapsed() >= grace, "cut before the grace");
    assert!(written.is_empty(), "{}", String::from_utf8_lossy(&written));
    let status = daemon.wait_exit();
    assert!(status.success(), "exit status {status}");
    let lines = daemon.all_lines();
    let said = messages(&lines);
    let late = position(&said, "shutdown: work still in flight at the deadline");
    assert_eq!(lines[late].1["requests"], 1, "{}", lines[late].0);
    assert!(position(&said, "shutdown: draining") < late);
    assert!(late < position(&said, "stopped"));
}

/// Targets that all probe `server` with a payload and wait `timeout` for a reply that never
/// comes. Ten of them, so that their grid offsets put a first run within a second of the start.
fn hanging_targets(dir: &Path, server: SocketAddr, timeout: &str) {
    let mut yaml =
        format!("defaults: {{interval: 10s, timeout: {timeout}, jitter: 0}}\ntargets:\n");
    for i in 0..10 {
        yaml.push_str(&format!(
            "  - id: hang-{i}\n    tcp: {{address: \"{server}\", send: \"PING\\r\\n\", expect: \"PONG\"}}\n"
        ));
    }
    std::fs::write(dir.join("hang.yaml"), yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_grace_bounds_the_wait_for_probes_in_flight() {
    // Probes that hang 9 s, stopped with a grace of 500 ms: the daemon exits at the grace.
    let mut hanging = SilentServer::start().await;
    let hang_dir = tempfile::tempdir().unwrap();
    hanging_targets(hang_dir.path(), hanging.addr, "9s");
    let hang_args = ["--shutdown-grace", "500ms", "--self-lag-threshold", "0s"];
    let mut cut = Daemon::start_with(hang_dir.path(), &hang_args);
    // Probes that hang 1 s, stopped with a grace of 30 s: the daemon waits for them.
    let mut slow = SilentServer::start().await;
    let slow_dir = tempfile::tempdir().unwrap();
    hanging_targets(slow_dir.path(), slow.addr, "1s");
    let slow_args = ["--shutdown-grace", "30s", "--self-lag-threshold", "0s"];
    let mut waited = Daemon::start_with(slow_dir.path(), &slow_args);

    hanging.probe_in_flight().await;
    let in_flight = cut.metrics().await.get("probe_in_flight", &[]).unwrap();
    assert!(in_flight >= 1.0, "probe_in_flight {in_flight}");
    let cut_at = Instant::now();
    cut.signal("-TERM");
    let probe_started = slow.probe_in_flight().await;
    waited.signal("-TERM");

    assert!(cut.wait_exit().success());
    let took = cut_at.elapsed();
    assert!(took >= Duration::from_millis(500), "exited after {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "waited {took:?} for probes that hang 9 s"
    );
    let said = messages(&cut.all_lines());
    let late = position(&said, "probes still in flight at the deadline");
    assert!(position(&said, "shutdown: cleanup step timed out") < late);
    assert!(late < position(&said, "stopped"));

    assert!(waited.wait_exit().success());
    let took = probe_started.elapsed();
    // The probe started before the server saw its payload, and ends at its 1 s timeout.
    assert!(
        took >= Duration::from_millis(900),
        "exited {took:?} after a probe with a 1 s timeout began"
    );
    let said = messages(&waited.all_lines());
    assert!(
        !said
            .iter()
            .any(|m| m == "probes still in flight at the deadline"),
        "{said:#?}"
    );
    assert!(position(&said, "shutdown: drained") < position(&said, "stopped"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", support::closed_port())]);
    let mut daemon = Daemon::start_with(dir.path(), &["--drain-delay", "60s"]);
    daemon.signal("-TERM");
    daemon.wait_log("shutdown: not ready; serving until load balancers notice");
    assert_eq!(
        readyz_turns_503(&daemon).await,
        "not ready: shutting down\n"
    );
    assert_eq!(
        daemon.get("/v1/targets").await.status(),
        200,
        "in the delay"
    );
    daemon.signal("-TERM");
    // Within the harness's wait (15 s), far inside the 60 s delay.
    let status = daemon.wait_exit();
    assert!(status.success(), "exit status {status}");
    let said = messages(&daemon.all_lines());
    assert!(position(&said, "SIGTERM while stopping: stopping now") < position(&said, "stopped"));
    assert!(!said.iter().any(|m| m == "shutdown: draining"), "{said:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_with_a_request_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", support::closed_port())]);
    let mut daemon = Daemon::start_with(dir.path(), &["--shutdown-grace", "60s"]);
    let held = HeldRequest::start(
        &daemon,
        "PUT",
        "/v1/targets/db/maintenance",
        MAINTENANCE,
        None,
    )
    .await;
    daemon.signal("-INT");
    daemon.wait_log("shutdown: draining");
    let refused = v1_refused(&daemon).await;
    assert_eq!(refused.headers()["connection"], "close");
    // The drain would wait up to 60 s for the held request; a second signal ends it now.
    daemon.signal("-TERM");
    let status = daemon.wait_exit();
    assert!(status.success(), "exit status {status}");
    assert!(
        held.wait_closed().await.is_empty(),
        "the held request was answered"
    );
    let said = messages(&daemon.all_lines());
    // (The drain may still see the held request go, with its connection, and say it drained.)
    assert!(position(&said, "SIGTERM while stopping: stopping now") < position(&said, "stopped"));
}

/// Every mutating route with a body that makes it succeed, in an order in which each one can.
const CHANGES: &[(&str, &str, Option<&str>, u16)] = &[
    (
        "PUT",
        "/v1/targets/api-2/maintenance",
        Some(MAINTENANCE),
        200,
    ),
    ("DELETE", "/v1/targets/api-2/maintenance", None, 200),
    (
        "POST",
        "/v1/targets/api-1/calls",
        Some(r#"{"status": 503, "latency_ms": 5}"#),
        202,
    ),
    (
        "POST",
        "/v1/targets/api-1/calls",
        Some(r#"{"status": 503, "latency_ms": 5}"#),
        202,
    ),
    (
        "POST",
        "/v1/targets/api-1/calls",
        Some(r#"{"status": 503, "latency_ms": 5}"#),
        202,
    ),
    (
        "POST",
        "/v1/targets/api-1/circuit",
        Some(r#"{"command": "force_open"}"#),
        200,
    ),
    ("DELETE", "/v1/targets/api-1/ejection", None, 200),
    ("POST", "/v1/drain", None, 202),
];

/// Every read route: none needs a token.
const READS: &[&str] = &[
    "/v1/targets",
    "/v1/targets/api-1",
    "/v1/targets/api/explain",
    "/v1/graph",
    "/v1/graph?format=dot",
    "/v1/topology",
    "/health",
    "/metrics",
    "/livez",
    "/readyz",
    "/startupz",
];

/// Everything a response shows: status line, headers and body.
async fn shown(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let mut text = format!("{status}\n");
    for (name, value) in response.headers() {
        text.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("")));
    }
    text.push_str(&response.text().await.unwrap());
    (status, text)
}

/// Refused without the token (401 with `WWW-Authenticate`), with another scheme (401), with a
/// wrong one (403); nothing changed by the refusals; reads need no token; then every change
/// succeeds with it. The token shows in no answer and no log line.
async fn every_change_needs_the_token(mut daemon: Daemon, token: &str) {
    daemon
        .wait_states(&[("api-1", "UP"), ("api-2", "UP")])
        .await;
    let wrong = format!("{token}-but-not-quite");
    let mut answers = Vec::new();
    for path in READS {
        let (status, text) = shown(daemon.get(path).await).await;
        assert_eq!(status, 200, "GET {path} without a token: {text}");
        answers.push(text);
    }
    let events = daemon.get("/v1/events").await;
    assert_eq!(events.status(), 200, "the event stream needs no token");
    drop(events);

    for (method, path, body, _) in CHANGES {
        let method: Method = method.parse().unwrap();
        let request = |auth: Option<String>| {
            let mut request = daemon.http.request(method.clone(), daemon.url(path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(body.to_string());
            }
            request
        };
        for (auth, want) in [
            (None, 401),
            (Some(format!("Basic {token}")), 401),
            (Some(format!("Bearer {wrong}")), 403),
            (Some(token.to_owned()), 401),
        ] {
            let response = request(auth.clone()).send().await.unwrap();
            assert_eq!(response.status(), want, "{method} {path} with {auth:?}");
            if want == 401 {
                assert_eq!(response.headers()["www-authenticate"], "Bearer");
            }
            let (_, text) = shown(response).await;
            let body: Value = serde_json::from_str(text.rsplit('\n').next().unwrap()).unwrap();
            assert!(body["error"].is_string(), "{text}");
            answers.push(text);
        }
    }
    // Nothing was changed by the refusals.
    let api_1: Value = daemon.get("/v1/targets/api-1").await.json().await.unwrap();
    assert_eq!(api_1["ejected"], false, "{api_1}");
    assert_eq!(api_1["circuit"]["calls"], 0, "{api_1}");
    assert_eq!(api_1["circuit"]["state"], "closed", "{api_1}");
    assert_eq!(daemon.state_of("api-2").await.as_deref(), Some("UP"));
    assert_eq!(daemon.get("/readyz").await.status(), 200, "not stopping");

    for (method, path, body, want) in CHANGES {
        let method: Method = method.parse().unwrap();
        let (status, reply) = daemon.send(method.clone(), path, Some(token), *body).await;
        assert_eq!(status, *want, "{method} {path} with the token: {reply}");
        answers.push(reply.to_string());
        if path.ends_with("/ejection") {
            for path in READS.iter().filter(|p| p.starts_with("/v1")) {
                answers.push(shown(daemon.get(path).await).await.1);
            }
        }
    }
    assert!(daemon.wait_exit().success(), "the drain stops it");

    for answer in &answers {
        assert!(
            !answer.contains(token),
            "the token shows in an answer: {answer}"
        );
    }
    let lines = daemon.all_lines();
    assert!(
        messages(&lines)
            .iter()
            .any(|m| m == "drain requested through the API"),
        "the log was read"
    );
    for (line, _) in &lines {
        assert!(
            !line.contains(token),
            "the token shows in a log line: {line}"
        );
    }
}

/// Two members' listeners and a pool config over them (`support::pool_config`), in a
/// temporary directory: every change the API offers can succeed on it.
async fn pool() -> (
    tokio::net::TcpListener,
    tokio::net::TcpListener,
    tempfile::TempDir,
) {
    let one = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let two = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    support::pool_config(
        dir.path(),
        one.local_addr().unwrap(),
        two.local_addr().unwrap(),
    );
    (one, two, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_every_change_needs_it_and_reads_do_not() {
    let (one, two, dir) = pool().await;
    let token = "flag-token-7Qx2w9";
    let daemon = Daemon::start_with(dir.path(), &["--api-token", token]);
    every_change_needs_the_token(daemon, token).await;
    drop((one, two));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_token_can_come_from_the_environment() {
    let (one, two, dir) = pool().await;
    let token = "env-token-Hk4mP1";
    let mut command = Command::new(BIN);
    command
        .args(["run", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.path())
        .env("PROBE_ENGINE_API_TOKEN", token);
    every_change_needs_the_token(Daemon::launch(command), token).await;

    // Nor does `--help` show the variable's value.
    let help = Command::new(BIN)
        .args(["run", "--help"])
        .env("PROBE_ENGINE_API_TOKEN", token)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("PROBE_ENGINE_API_TOKEN"), "{help}");
    assert!(!help.contains(token), "{help}");
    drop((one, two));
}

/// Listening beyond loopback without a token, the daemon refuses every change, even from a
/// loopback peer (behind a proxy or a sidecar every request comes from loopback), says how to
/// set a token, and warns at start; reads still answer. On loopback alone a local peer may
/// change things, and each change is logged with who made it. (The test talks to the wildcard
/// listener through 127.0.0.1 only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_without_a_token_no_change_is_accepted_and_changes_are_audited() {
    let (one, two, dir) = pool().await;
    let mut command = Command::new(BIN);
    command
        .args(["run", "--listen", "0.0.0.0:0", "--config"])
        .arg(dir.path());
    let mut wide = Daemon::launch(command);
    wide.addr = SocketAddr::from(([127, 0, 0, 1], wide.addr.port()));
    assert!(
        wide.lines_so_far()
            .iter()
            .any(|l| l.contains("WARN") && l.contains("listens beyond loopback")),
        "no warning at start"
    );
    for (method, path, body, _) in CHANGES {
        let (status, answer) = wide.send(method.parse().unwrap(), path, None, *body).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        let reason = answer["error"].as_str().unwrap();
        assert!(reason.contains("--api-token"), "{method} {path}: {reason}");
    }
    assert_eq!(wide.get("/v1/targets").await.status(), 200);
    drop(wide);

    let mut local = Daemon::start(dir.path());
    let (method, path, body, want) = CHANGES[0];
    let (status, answer) = local.send(method.parse().unwrap(), path, None, body).await;
    assert_eq!(status, want, "{answer}");
    let audit = local.wait_log("api change");
    assert_eq!(audit["credential"], "loopback", "{audit}");
    assert_eq!(audit["method"], method, "{audit}");
    assert_eq!(audit["path"], path, "{audit}");
    let actor: SocketAddr = audit["actor"].as_str().unwrap().parse().unwrap();
    assert!(actor.ip().is_loopback(), "{audit}");
    // Drain stops the daemon: never on the strength of a loopback peer.
    let (status, answer) = local.send(Method::POST, "/v1/drain", None, None).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("SIGTERM"),
        "{answer}"
    );
    let readyz = local.get("/readyz").await.text().await.unwrap();
    assert!(!readyz.contains("shutting down"), "{readyz}");
    drop((one, two));
}

/// Operator tokens from a file (a mounted Secret) with names, a read token on the command line:
/// reads need a token and the probes' routes do not; a read token cannot change; the audit line
/// names the token; SIGHUP rotates the file's tokens, and an unreadable file keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_files_rotate_on_sighup_and_roles_hold() {
    let db = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", db.local_addr().unwrap())]);
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("api-token");
    std::fs::write(&file, "# the deploy pipeline's\ndeploy=old-Secret-1\n").unwrap();
    let mut daemon = Daemon::start_with(
        dir.path(),
        &[
            "--api-token-file",
            file.to_str().unwrap(),
            "--read-token",
            "grafana=read-Secret-2",
        ],
    );
    daemon.wait_logged("target state changed", 1);
    let get = |token: Option<&'static str>| {
        let mut request = daemon.http.get(daemon.url("/v1/targets"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(None).await, 401, "reads need a token");
    assert_eq!(get(Some("read-Secret-2")).await, 200);
    assert_eq!(
        get(Some("old-Secret-1")).await,
        200,
        "an operator reads too"
    );
    for open in ["/livez", "/readyz", "/startupz"] {
        assert_eq!(daemon.get(open).await.status(), 200, "{open}");
    }
    assert_eq!(daemon.get("/metrics").await.status(), 401);

    let path = "/v1/targets/db/maintenance";
    let (status, answer) = daemon
        .send(Method::PUT, path, Some("read-Secret-2"), Some(MAINTENANCE))
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("may read, not change")
    );
    let (status, answer) = daemon
        .send(Method::POST, "/v1/drain", Some("read-Secret-2"), None)
        .await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = daemon
        .send(Method::PUT, path, Some("old-Secret-1"), Some(MAINTENANCE))
        .await;
    assert_eq!(status, 200, "{answer}");
    let audit = daemon.wait_log("api change");
    assert_eq!(audit["actor"], "deploy", "{audit}");
    assert_eq!(audit["credential"], "token", "{audit}");
    assert_eq!(audit["path"], path, "{audit}");

    // Rotated: the new token works at once after SIGHUP, the old one no longer does.
    std::fs::write(&file, "deploy=new-Secret-3\n").unwrap();
    daemon.signal("-HUP");
    daemon.wait_log("api tokens reloaded");
    let (status, _) = daemon
        .send(Method::DELETE, path, Some("old-Secret-1"), None)
        .await;
    assert_eq!(status, 403);
    let (status, answer) = daemon
        .send(Method::DELETE, path, Some("new-Secret-3"), None)
        .await;
    assert_eq!(status, 200, "{answer}");

    // A file that cannot be read keeps the tokens in force.
    std::fs::remove_file(&file).unwrap();
    daemon.signal("-HUP");
    daemon.wait_log("the api tokens cannot be read again; the tokens in force stay");
    let (status, answer) = daemon
        .send(Method::PUT, path, Some("new-Secret-3"), Some(MAINTENANCE))
        .await;
    assert_eq!(status, 200, "{answer}");
    for line in &daemon.lines_so_far() {
        for secret in ["old-Secret-1", "read-Secret-2", "new-Secret-3"] {
            assert!(
                !line.contains(secret),
                "a token shows in a log line: {line}"
            );
        }
    }
    drop(db);
}
