//! The real `probe-engine` binary, end to end: config in, API out, reload and shutdown by signal.
//!
//! These tests live with the daemon crate because Cargo hands a binary's path
//! (`CARGO_BIN_EXE_probe-engine`) only to its own package's integration tests.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_probe-engine");
const WAIT: Duration = Duration::from_secs(15);

/// The daemon under test, with its log lines (JSON) streamed to a channel.
struct Daemon {
    child: Child,
    logs: mpsc::Receiver<Value>,
    addr: SocketAddr,
    http: reqwest::Client,
}

/// A plain HTTP client for the API.
///
/// The workspace builds reqwest with `rustls-no-provider` (the `probe` crate's HTTP tier hands
/// reqwest its own rustls configuration), so a client built the default way needs a process-wide
/// crypto provider to be installed first.
fn client() -> reqwest::Client {
    // An error only says that one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Daemon {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(BIN)
            .args(["--log-format", "json", "run", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn probe-engine");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("log line is not JSON: {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut daemon = Self {
            child,
            logs,
            addr: "127.0.0.1:1".parse().unwrap(),
            http: client(),
        };
        let listening = daemon.wait_log("listening");
        daemon.addr = listening["addr"].as_str().unwrap().parse().unwrap();
        daemon
    }

    /// Waits for a log line with this message and returns it.
    fn wait_log(&mut self, message: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) if line["message"] == message => return line,
                Ok(_) => {}
                Err(e) => panic!("no log line {message:?}: {e}"),
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    async fn targets(&self) -> Vec<Value> {
        let body: Value = self.get("/v1/targets").await.json().await.unwrap();
        body["targets"].as_array().unwrap().clone()
    }

    async fn state_of(&self, id: &str) -> Option<String> {
        self.targets()
            .await
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["state"].as_str().unwrap().to_owned())
    }

    /// Polls the API until the targets have the given states (the API is the only signal the
    /// daemon offers for a verdict).
    async fn wait_states(&self, want: &[(&str, &str)]) {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut all = true;
            for (id, state) in want {
                all &= self.state_of(id).await.as_deref() == Some(*state);
            }
            if all {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "targets never reached {want:?}: {:?}",
                self.targets().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "daemon did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn write_targets(dir: &Path, targets: &[(&str, SocketAddr)]) {
    let mut yaml = String::from(
        "defaults:\n  interval: 400ms\n  timeout: 200ms\n  rise: 2\n  fall: 2\ntargets:\n",
    );
    for (id, addr) in targets {
        yaml.push_str(&format!("  - id: {id}\n    tcp:\n      address: {addr}\n"));
    }
    std::fs::write(dir.join("targets.yaml"), yaml).unwrap();
}

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

    // Errors are JSON with the right status.
    let bad = daemon.get("/v1/targets/Not-Valid").await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("'N'"), "{body}");
    let missing = daemon.get("/v1/targets/nope").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["error"],
        "no target \"nope\""
    );
    assert_eq!(daemon.get("/nowhere").await.status(), 404);
    let post = daemon
        .http
        .post(daemon.url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
    assert!(post.json::<Value>().await.unwrap()["error"].is_string());

    // IETF health+json.
    let health = daemon.get("/health").await;
    assert_eq!(health.status(), 503);
    assert_eq!(health.headers()["content-type"], "application/health+json");
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["status"], "fail");
    let check = &health["checks"]["down:responseTime"][0];
    assert_eq!(check["componentId"], "down");
    assert_eq!(check["status"], "fail");
    assert_eq!(check["observedUnit"], "ms");
    assert!(check["output"].as_str().unwrap().starts_with("refused"));
    assert_eq!(health["checks"]["up:responseTime"][0]["status"], "pass");

    // Prometheus metrics.
    let metrics = daemon.get("/metrics").await.text().await.unwrap();
    for needle in [
        "probe_success{target=\"up\"} 1",
        "probe_success{target=\"down\"} 0",
        "probe_target_up{target=\"up\"} 1",
        "probe_failures_total{target=\"down\",reason=\"refused\"}",
        "probe_state_transitions_total{target=\"down\",from=\"PROBING\",to=\"DOWN\"} 1",
        "probe_duration_seconds_bucket{target=\"up\",le=\"0.005\"}",
        "probe_scheduler_lag_seconds_bucket{le=\"0.001\"}",
        "probe_in_flight",
        "# HELP probe_success",
    ] {
        assert!(
            metrics.contains(needle),
            "missing {needle:?} in:\n{metrics}"
        );
    }
    promtool_check(&metrics);

    // SIGHUP with a broken file: rejected, the old targets keep running with their counters.
    let before: Value = daemon.get("/v1/targets/up").await.json().await.unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        "targets:\n  - id: up\n    tcp: {adress: 1}\n",
    )
    .unwrap();
    daemon.signal("-HUP");
    daemon.wait_log("config reload rejected; the running config stays in force");
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
    let reloaded = daemon.wait_log("config reloaded");
    assert_eq!(reloaded["added"], 1);
    assert_eq!(reloaded["removed"], 1);
    assert_eq!(reloaded["unchanged"], 1);
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

/// Runs `promtool check metrics` when promtool is installed (the test command installs it).
fn promtool_check(metrics: &str) {
    use std::io::Write;
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing; scripts/test installs it"
        );
        eprintln!("promtool not installed; skipping the lint (scripts/test installs it)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert!(stdout.starts_with("ok: 2 targets in 1 files"), "{stdout}");

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
    let out = Command::new(BIN)
        .args(["run", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("t.yaml:1:"));
}
