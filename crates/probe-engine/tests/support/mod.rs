//! The harness shared by the daemon's end-to-end tests: the real `probe-engine` binary with its
//! JSON log lines streamed to a channel, and a plain HTTP client for its API.
//!
//! These tests live with the daemon crate because Cargo hands a binary's path
//! (`CARGO_BIN_EXE_probe-engine`) only to its own package's integration tests.

#![allow(dead_code)] // Each test file uses a different part.

pub mod prom;
pub mod views;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_probe-engine");
pub const WAIT: Duration = Duration::from_secs(15);

/// The daemon under test, with its log lines (JSON) streamed to a channel.
pub struct Daemon {
    pub child: Child,
    pub logs: mpsc::Receiver<Value>,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    /// Every log line [`Daemon::wait_log`] and [`Daemon::all_logs`] have read so far.
    pub seen: Vec<Value>,
}

/// A plain HTTP client for the API.
///
/// The workspace builds reqwest with `rustls-no-provider` (the `probe` crate's HTTP tier hands
/// reqwest its own rustls configuration), so a client built the default way needs a process-wide
/// crypto provider to be installed first.
pub fn client() -> reqwest::Client {
    // An error only says that one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Daemon {
    pub fn start(config: &Path) -> Self {
        Self::start_with(config, &[])
    }

    pub fn start_with(config: &Path, extra: &[&str]) -> Self {
        Self::start_env(config, extra, &[])
    }

    /// Starts it with these environment variables too (`RUST_LOG` among them overrides `info`).
    pub fn start_env(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(BIN)
            .args(["--log-format", "json", "run", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(config)
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
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
            seen: Vec::new(),
        };
        let listening = daemon.wait_log("listening");
        daemon.addr = listening["addr"].as_str().unwrap().parse().unwrap();
        daemon
    }

    /// Waits for a log line with this message and returns it.
    pub fn wait_log(&mut self, message: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line["message"] == message {
                        return line;
                    }
                }
                Err(e) => panic!("no log line {message:?}: {e}"),
            }
        }
    }

    /// Every log line so far: those already read and those waiting in the channel.
    pub fn all_logs(&mut self) -> &[Value] {
        self.seen.extend(self.logs.try_iter());
        &self.seen
    }

    /// `/metrics`, parsed.
    pub async fn metrics(&self) -> prom::Metrics {
        let response = self.get("/metrics").await;
        assert_eq!(response.status(), 200);
        prom::Metrics::parse(&response.text().await.unwrap())
    }

    /// `/v1/targets`, read strictly.
    pub async fn list(&self) -> views::TargetList {
        let response = self.get("/v1/targets").await;
        assert_eq!(response.status(), 200);
        views::strict(&response.json().await.unwrap())
    }

    /// `/v1/targets/{id}`, read strictly.
    pub async fn detail(&self, id: &str) -> views::TargetDetail {
        let response = self.get(&format!("/v1/targets/{id}")).await;
        assert_eq!(response.status(), 200, "{id}");
        views::TargetDetail::from_value(&response.json().await.unwrap())
    }

    /// Polls `/v1/targets/{id}` until `ok` holds for it (the API is the only signal).
    pub async fn wait_target(
        &self,
        id: &str,
        what: &str,
        ok: impl Fn(&views::Target) -> bool,
    ) -> views::TargetDetail {
        let deadline = Instant::now() + WAIT;
        loop {
            let detail = self.detail(id).await;
            if ok(&detail.target) {
                return detail;
            }
            assert!(
                Instant::now() < deadline,
                "{id} never {what}: {:?}",
                detail.target
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls `/metrics` until `ok` holds for it.
    pub async fn wait_metrics(
        &self,
        what: &str,
        ok: impl Fn(&prom::Metrics) -> bool,
    ) -> prom::Metrics {
        let deadline = Instant::now() + WAIT;
        loop {
            let metrics = self.metrics().await;
            if ok(&metrics) {
                return metrics;
            }
            assert!(Instant::now() < deadline, "metrics never {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    pub async fn targets(&self) -> Vec<Value> {
        let body: Value = self.get("/v1/targets").await.json().await.unwrap();
        body["targets"].as_array().unwrap().clone()
    }

    pub async fn state_of(&self, id: &str) -> Option<String> {
        self.targets()
            .await
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["state"].as_str().unwrap().to_owned())
    }

    /// Polls the API until the targets have the given states (the API is the only signal the
    /// daemon offers for a verdict).
    pub async fn wait_states(&self, want: &[(&str, &str)]) {
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

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
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

pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

pub fn write_targets(dir: &Path, targets: &[(&str, SocketAddr)]) {
    let mut yaml = String::from(
        "defaults:\n  interval: 400ms\n  timeout: 200ms\n  rise: 2\n  fall: 2\ntargets:\n",
    );
    for (id, addr) in targets {
        yaml.push_str(&format!("  - id: {id}\n    tcp:\n      address: {addr}\n"));
    }
    std::fs::write(dir.join("targets.yaml"), yaml).unwrap();
}

/// Runs `promtool check metrics` when promtool is installed (the test command installs it).
pub fn promtool_check(metrics: &str) {
    use std::io::Write;
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        probe_engine::testing::skipped_outside_ci(
            "the promtool lint: promtool is not installed (scripts/setup installs it)",
        );
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
