//! The harness shared by the daemon's end-to-end tests: the real `probe-engine` binary with its
//! JSON log lines streamed to a channel, and a plain HTTP client for its API.
//!
//! These tests live with the daemon crate because Cargo hands a binary's path
//! (`CARGO_BIN_EXE_probe-engine`) only to its own package's integration tests.

#![allow(dead_code)] // Each test file uses a different part.

pub mod peers;
pub mod pki;
pub mod prom;
pub mod views;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
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
    /// Every line the daemon wrote to stderr, as written, whether or not `logs` was read.
    all_lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
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
        let mut command = Command::new(BIN);
        command
            .args(["run", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(config)
            .args(extra);
        Self::launch(command)
    }

    /// Starts it with these environment variables too (`RUST_LOG` among them overrides `info`).
    pub fn start_env(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(["run", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(config)
            .args(extra)
            .envs(env.iter().copied());
        Self::launch(command)
    }

    /// Starts `command` (the binary with its arguments, working directory and environment) with
    /// JSON logs at `info`, and waits until it listens.
    ///
    /// A daemon given neither `--state-dir` nor a working directory of its own keeps no state
    /// (`--state-dir none`): its default, `data` in the working directory, would be this
    /// crate's, shared by every test at once. A test of the default sets a working directory.
    pub fn launch(mut command: Command) -> Self {
        if !command.get_envs().any(|(key, _)| key == "RUST_LOG") {
            command.env("RUST_LOG", "info");
        }
        if command.get_current_dir().is_none() && !command.get_args().any(|a| a == "--state-dir") {
            command.args(["--state-dir", "none"]);
        }
        let mut child = command
            .arg("--log-format")
            .arg("json")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn probe-engine");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, logs) = mpsc::channel();
        let all_lines = Arc::new(Mutex::new(Vec::new()));
        let kept = all_lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("log line is not JSON: {line}"));
                kept.lock().unwrap().push(line);
                // Nobody reading any more is fine: every line is kept above.
                let _ = tx.send(value);
            }
        });
        let mut daemon = Self {
            child,
            logs,
            addr: "127.0.0.1:1".parse().unwrap(),
            http: client(),
            all_lines,
            reader: Some(reader),
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
                Ok(line) if line["message"] == message => return line,
                Ok(_) => {}
                Err(e) => {
                    let lines = self.lines_so_far();
                    let tail = &lines[lines.len().saturating_sub(20)..];
                    panic!(
                        "no log line {message:?}: {e}; the last lines:\n{}",
                        tail.join("\n")
                    )
                }
            }
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

    /// A target's state, or a group's verdict (from the graph).
    pub async fn state_of(&self, id: &str) -> Option<String> {
        let state = |nodes: &[Value]| {
            nodes
                .iter()
                .find(|n| n["id"] == id)
                .and_then(|n| n["state"].as_str().map(str::to_owned))
        };
        match state(&self.targets().await) {
            Some(found) => Some(found),
            None => {
                let graph: Value = self.get("/v1/graph").await.json().await.unwrap();
                state(graph["nodes"].as_array().map_or(&[], Vec::as_slice))
            }
        }
    }

    /// Polls the API until the targets (or groups) have the given states (the API is the only
    /// signal the daemon offers for a verdict).
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

    /// Whether the process has exited (without waiting).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits until the daemon has logged `message` `nth` times (from 1) since it started, read
    /// through `logs` or not, and returns that line.
    pub fn wait_logged(&self, message: &str, nth: usize) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self
                .lines_so_far()
                .iter()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|v| v["message"] == message)
                .nth(nth - 1);
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line {message:?} #{nth}: {:#?}",
                self.lines_so_far()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every log line written so far, as written, read or not through `logs`.
    pub fn lines_so_far(&self) -> Vec<String> {
        self.all_lines.lock().unwrap().clone()
    }

    /// After the process has exited: every log line it wrote, as written, parsed alongside.
    pub fn all_lines(&mut self) -> Vec<(String, Value)> {
        assert!(self.exited(), "the daemon is still running");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the log reader panicked");
        }
        self.lines_so_far()
            .into_iter()
            .map(|line| {
                let value = serde_json::from_str(&line).unwrap();
                (line, value)
            })
            .collect()
    }

    /// Every log line so far, parsed: those already read through `logs` and those not.
    pub fn all_logs(&self) -> Vec<Value> {
        self.lines_so_far()
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
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
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon started on `config` with `extra` flags, which must refuse to start: what it wrote
/// and how it ended.
pub fn refused_start(config: &Path, extra: &[&str]) -> std::process::Output {
    let out = Command::new(BIN)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            "none",
            "--config",
        ])
        .arg(config)
        .args(extra)
        .output()
        .expect("run probe-engine");
    assert!(!out.status.success(), "it started");
    out
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

/// A pool whose first member has a circuit breaker, so that every change the API offers can
/// succeed: maintenance on and off, calls that eject, a circuit command, an ejection cleared.
pub fn pool_config(dir: &Path, a: SocketAddr, b: SocketAddr) {
    std::fs::write(
        dir.join("pool.yaml"),
        format!(
            "defaults: {{interval: 1s, timeout: 500ms, rise: 1}}
targets:
  - id: api-1
    tcp: {{address: \"{a}\"}}
    circuit_breaker: {{minimum_calls: 4, window_calls: 4, open_for: 30s}}
  - id: api-2
    tcp: {{address: \"{b}\"}}
  - id: api
    kind: group
    depends_on: [{{target: api-1}}, {{target: api-2}}]
    outlier: {{consecutive_gateway_failures: 3, max_ejection_percent: 50}}
    recovery: {{cooldown: 30s}}
"
        ),
    )
    .unwrap();
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
        probe_testkit::skipped_outside_ci(
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

/// A TCP server that accepts every connection, reads whatever comes and never answers: a probe
/// with `send`/`expect` at it hangs until its timeout.
pub struct SilentServer {
    pub addr: SocketAddr,
    /// One message per connection, once its first bytes arrived (a probe in flight).
    pub payloads: tokio::sync::mpsc::UnboundedReceiver<Instant>,
}

impl SilentServer {
    pub async fn start() -> Self {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, payloads) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 256];
                    let mut told = false;
                    // Until the peer goes; nothing is ever written back.
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        if !told {
                            told = true;
                            let _ = tx.send(Instant::now());
                        }
                    }
                });
            }
        });
        Self { addr, payloads }
    }

    /// Waits until a probe has connected and sent its payload.
    pub async fn probe_in_flight(&mut self) -> Instant {
        tokio::time::timeout(WAIT, self.payloads.recv())
            .await
            .expect("no probe reached the silent server")
            .unwrap()
    }
}

/// A reply read off a raw connection.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A request whose headers and the start of whose body have been sent, admitted by the daemon's
/// gate, and which stays in flight on the server until [`HeldRequest::finish`] sends the rest of
/// it.
pub struct HeldRequest {
    stream: tokio::net::TcpStream,
    rest: Vec<u8>,
}

impl HeldRequest {
    /// Starts the request, with `token` as its bearer token when there is one, and returns once
    /// the daemon's gate has admitted it (`probe_engine_requests_in_flight`): a stop asked for
    /// after this finds it in flight. The head on the wire is not enough: the server may not
    /// have read it yet.
    pub async fn start(
        daemon: &Daemon,
        method: &str,
        path: &str,
        body: &str,
        token: Option<&str>,
    ) -> Self {
        use tokio::io::AsyncWriteExt;
        let addr = daemon.addr;
        let in_flight =
            |m: &prom::Metrics| m.get("probe_engine_requests_in_flight", &[]).unwrap_or(0.0);
        let before = in_flight(&daemon.metrics().await);
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = token.map_or_else(String::new, |t| format!("authorization: Bearer {t}\r\n"));
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             {auth}content-length: {}\r\n\r\n",
            body.len()
        );
        let (first, rest) = body.as_bytes().split_at(body.len() / 2);
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(first).await.unwrap();
        stream.flush().await.unwrap();
        daemon
            .wait_metrics("admitted the held request", |m| in_flight(m) > before)
            .await;
        Self {
            stream,
            rest: rest.to_vec(),
        }
    }

    /// Sends the rest of the body and reads the reply.
    pub async fn finish(mut self) -> RawResponse {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(&self.rest).await.unwrap();
        self.stream.flush().await.unwrap();
        tokio::time::timeout(WAIT, read_response(&mut self.stream))
            .await
            .expect("no reply to the held request")
            .expect("the held request was cut")
    }

    /// Waits until the server closes the connection, and returns what it wrote before (nothing,
    /// for a request cut off).
    pub async fn wait_closed(mut self) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        tokio::time::timeout(WAIT, async {
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .expect("the server kept the held request's connection open");
        got
    }
}

/// Reads one HTTP/1.1 response with a `content-length` body; `None` when the connection ends
/// before it is complete.
async fn read_response(stream: &mut tokio::net::TcpStream) -> Option<RawResponse> {
    use tokio::io::AsyncReadExt;
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(RawResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The messages of `lines`, in order.
pub fn messages(lines: &[(String, Value)]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|(_, v)| v["message"].as_str().map(str::to_owned))
        .collect()
}

/// Where `message` first is in `messages`; panics when it is not there.
pub fn position(messages: &[String], message: &str) -> usize {
    messages
        .iter()
        .position(|m| m == message)
        .unwrap_or_else(|| panic!("no log line {message:?} in {messages:#?}"))
}

/// The texts of an SVG badge, after checking that it is one (well-formed, an `svg` root).
pub fn badge_texts(body: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect()
}

/// The routes `router()` and the page's `routes()` declare, read from their source: each
/// `.route("PATH", …)` with the methods its handler chain names.
pub fn declared_routes() -> BTreeSet<String> {
    let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
    let mut routes = BTreeSet::new();
    for file in ["src/api/mod.rs", "src/api/page/mod.rs"] {
        let source =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        for call in source.split(".route(").skip(1) {
            // The call's text: up to the parenthesis that closes `.route(`.
            let mut depth = 1;
            let end = call
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map(|(i, _)| i)
                .expect("a closed .route(");
            let call = &call[..end];
            let path = call.split('"').nth(1).expect("a path literal");
            for m in method.captures_iter(call) {
                routes.insert(format!("{} {path}", m[1].to_uppercase()));
            }
        }
    }
    routes
}
