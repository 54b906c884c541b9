//! The README's "Two commands" and "Command line", on the real binary: the default config and
//! address, the flags' effects, and what the logs and `/readyz` promise.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use support::{BIN, Daemon, SilentServer, WAIT, closed_port, write_targets};
use tokio::time::Instant;

/// This is the only test that uses the default port, 127.0.0.1:9464: the default config probes
/// the daemon's own API there. It fails if something else on the machine holds the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_config_gives_two_up_one_down_and_ready() {
    // `cargo run -p probe-engine -- run` from a checkout: no flags, `probes/` under the
    // working directory.
    let checkout = tempfile::tempdir().unwrap();
    let probes = checkout.path().join("probes");
    std::fs::create_dir(&probes).unwrap();
    let repo_probes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../probes");
    for entry in std::fs::read_dir(&repo_probes).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), probes.join(entry.file_name())).unwrap();
    }
    let mut command = Command::new(BIN);
    command.arg("run").current_dir(checkout.path());
    let mut daemon = Daemon::launch(command);
    assert_eq!(daemon.addr, "127.0.0.1:9464".parse::<SocketAddr>().unwrap());
    let loaded: Value = daemon
        .lines_so_far()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["message"] == "config loaded")
        .unwrap();
    assert_eq!(loaded["config"], "probes", "{loaded}");
    assert_eq!(loaded["targets"], 3, "{loaded}");
    // Which ICMP sockets it pings with, said once at start.
    let icmp: Vec<Value> = daemon
        .lines_so_far()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("icmp: "))
        })
        .collect();
    assert_eq!(icmp.len(), 1, "{icmp:?}");
    assert_eq!(
        icmp[0]["message"].as_str(),
        Some(format!("icmp: {}", probe::tier::icmp::sockets()).as_str()),
        "{icmp:?}"
    );

    daemon
        .wait_states(&[
            ("self-api", "UP"),
            ("closed-port", "DOWN"),
            ("loopback-ping", "UP"),
        ])
        .await;
    // Ready although closed-port is DOWN: readiness requires only `self`, whose critical
    // dependency is the API.
    let ready = daemon.wait_log("readiness changed");
    assert_eq!(ready["ready"], true, "{ready}");
    let readyz = daemon.get("/readyz").await;
    assert_eq!(readyz.status(), 200);
    assert_eq!(readyz.text().await.unwrap(), "ready\n");
    let deadline = Instant::now() + WAIT;
    loop {
        let explain: Value = daemon
            .get("/v1/targets/self/explain")
            .await
            .json()
            .await
            .unwrap();
        let summary = explain["summary"].as_str().unwrap();
        // 0.5 is DEGRADED by the default group rule, once judged so.
        if explain["node"]["score"] == 0.5 && explain["node"]["state"] == "DEGRADED" {
            assert_eq!(
                summary,
                "self 0.50 DEGRADED: self-api 1.00 (w 0.50, critical) UP; closed-port 0.00 (w \
                 0.50) DOWN"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "self never scored 0.5 and DEGRADED: {explain}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first run keeps its history, under `data/` by default: the uptime is there.
    assert!(checkout.path().join("data/history.db").is_file());
    let deadline = Instant::now() + WAIT;
    loop {
        let uptime = daemon.get("/v1/targets/closed-port/uptime").await;
        if uptime.status() == 200 {
            let uptime: Value = uptime.json().await.unwrap();
            assert!(uptime["down_ms"].as_u64().is_some(), "{uptime}");
            break;
        }
        // 503 while the history opens.
        assert_eq!(uptime.status(), 503);
        assert!(Instant::now() < deadline, "no uptime from the first run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
}

/// `data/` in the working directory, unless systemd's `$STATE_DIRECTORY` says where, unless
/// `--state-dir` does; `none` keeps nothing; and a state directory has one daemon at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_directory_defaults_to_data_or_systemds_and_has_one_daemon() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("a", closed_port())]);
    let run = |cwd: &Path| {
        let mut command = Command::new(BIN);
        command
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir.path())
            .current_dir(cwd);
        command
    };

    // Two daemons started from one directory: the second is refused, saying why, and the first
    // goes on.
    let cwd = tempfile::tempdir().unwrap();
    let mut first = Daemon::launch(run(cwd.path()));
    assert!(cwd.path().join("data/lock").is_file());
    let second = run(cwd.path()).output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("another probe-engine uses this state directory"),
        "{stderr}"
    );
    assert!(stderr.contains("data/lock"), "{stderr}");
    assert_eq!(first.get("/livez").await.status(), 200);
    // Once the first has gone (however it went), the directory is free again.
    first.child.kill().unwrap();
    first.wait_exit();
    let mut again = Daemon::launch(run(cwd.path()));
    again.signal("-TERM");
    assert!(again.wait_exit().success());

    // systemd's StateDirectory=: the first of its directories.
    let cwd = tempfile::tempdir().unwrap();
    let systemd = tempfile::tempdir().unwrap();
    let mut command = run(cwd.path());
    command.env(
        "STATE_DIRECTORY",
        format!("{}:/nonexistent/second", systemd.path().display()),
    );
    let mut daemon = Daemon::launch(command);
    assert!(systemd.path().join("lock").is_file());
    assert!(!cwd.path().join("data").exists());
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());

    // `--state-dir none`: nothing is written, and there is no history.
    let cwd = tempfile::tempdir().unwrap();
    let mut command = run(cwd.path());
    command.args(["--state-dir", "none"]);
    let mut daemon = Daemon::launch(command);
    let uptime = daemon.get("/v1/targets/a/uptime").await;
    assert_eq!(uptime.status(), 503);
    assert!(
        uptime.text().await.unwrap().contains("--state-dir none"),
        "the refusal says why"
    );
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}

/// `n` targets probing `server` with a payload it never answers: each probe hangs for its
/// timeout.
fn silent_targets(dir: &Path, server: SocketAddr, n: usize, timing: &str) {
    let mut yaml = format!("defaults: {timing}\ntargets:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - id: silent-{i}\n    tcp: {{address: \"{server}\", send: \"PING\\r\\n\", expect: \"PONG\"}}\n"
        ));
    }
    std::fs::write(dir.join("silent.yaml"), yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_caps_the_probes_running_at_once() {
    // Twelve targets whose probes hang 1.5 s of every 2 s: about nine want to run at once.
    let silent = SilentServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let timing = "{interval: 2s, timeout: 1500ms, jitter: 0}";
    silent_targets(dir.path(), silent.addr, 12, timing);
    // More workers kept than the cap allows: the cap wins.
    let capped = Daemon::start_with(
        dir.path(),
        &[
            "--max-in-flight",
            "3",
            "--min-workers",
            "8",
            "--self-lag-threshold",
            "0s",
        ],
    );
    // No worker kept when idle: the pool grows from nothing when runs are due.
    let uncapped = Daemon::start_with(
        dir.path(),
        &["--min-workers", "0", "--self-lag-threshold", "0s"],
    );
    let (mut capped_max, mut uncapped_max) = (0.0f64, 0.0f64);
    let started = Instant::now();
    // Sampled over more than one interval, until both have been seen at their busiest.
    while started.elapsed() < Duration::from_secs(3) || capped_max < 3.0 || uncapped_max <= 3.0 {
        assert!(
            started.elapsed() < WAIT,
            "busiest seen: capped {capped_max}, uncapped {uncapped_max}"
        );
        let (a, b) = tokio::join!(capped.metrics(), uncapped.metrics());
        // Shown once a worker has run a probe.
        let a = a.get("probe_in_flight", &[]).unwrap_or(0.0);
        let b = b.get("probe_in_flight", &[]).unwrap_or(0.0);
        assert!(a <= 3.0, "probe_in_flight {a} over --max-in-flight 3");
        capped_max = capped_max.max(a);
        uncapped_max = uncapped_max.max(b);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // A cap of zero is refused, as a usage error.
    let out = Command::new(BIN)
        .args(["run", "--max-in-flight", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-in-flight"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_lag_threshold_of_0s_turns_self_health_off() {
    // A target that times out, and one that refuses.
    let silent = SilentServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.yaml"),
        format!(
            "defaults: {{interval: 500ms, timeout: 100ms, rise: 1, fall: 2}}
targets:
  - id: slow
    tcp: {{address: \"{}\", send: \"PING\\r\\n\", expect: \"PONG\"}}
  - id: refused
    tcp: {{address: \"{}\"}}
",
            silent.addr,
            closed_port()
        ),
    )
    .unwrap();
    let off = Daemon::start_with(dir.path(), &["--self-lag-threshold", "0s"]);
    // Every wake-up is later than a nanosecond: the engine always thinks itself starved.
    let starved = Daemon::start_with(dir.path(), &["--self-lag-threshold", "1ns"]);
    let default = Daemon::start(dir.path());

    // Off: timeouts count, the multiplier is not there (or 0), nothing is deferred.
    off.wait_states(&[("slow", "DOWN"), ("refused", "DOWN")])
        .await;
    let metrics = off.metrics().await;
    let multiplier = metrics.get("probe_self_health_multiplier", &[]);
    assert!(matches!(multiplier, None | Some(0.0)), "{metrics:?}");
    let deferred = metrics.get("probe_verdicts_deferred_total", &[("target", "slow")]);
    assert!(matches!(deferred, None | Some(0.0)), "{metrics:?}");

    // On and starved: the multiplier is up, timeouts are deferred, refusals still count.
    let late = "\"the engine is running late: widening timeouts and deferring timeout verdicts\"";
    assert!(
        starved.lines_so_far().iter().any(|l| l.contains(late)),
        "{:#?}",
        starved.lines_so_far()
    );
    starved.wait_states(&[("refused", "DOWN")]).await;
    let deadline = Instant::now() + WAIT;
    let metrics = loop {
        let metrics = starved.metrics().await;
        if metrics.get("probe_verdicts_deferred_total", &[("target", "slow")]) >= Some(4.0) {
            break metrics;
        }
        assert!(
            Instant::now() < deadline,
            "no deferred verdicts: {metrics:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        metrics.get("probe_self_health_multiplier", &[]) >= Some(1.0),
        "{metrics:?}"
    );
    let slow: Value = starved.get("/v1/targets/slow").await.json().await.unwrap();
    assert_eq!(slow["state"], "PROBING", "{slow}");
    assert_eq!(slow["last"]["reason"], "timeout", "{slow}");

    // The default (50ms) has it on: the multiplier is shown.
    let metrics = default.metrics().await;
    assert!(
        metrics.get("probe_self_health_multiplier", &[]).is_some(),
        "{metrics:?}"
    );
}

#[test]
fn log_format_text_writes_human_readable_lines() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("a", closed_port())]);
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "text",
            "--state-dir",
            "none",
            "--config",
        ])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || {
        lines
            .recv_timeout(WAIT)
            .expect("no more log lines from the daemon")
    };
    let mut seen = Vec::new();
    let listening = loop {
        let line = next();
        seen.push(line.clone());
        if line.contains("listening") {
            break line;
        }
    };
    for line in &seen {
        assert!(
            serde_json::from_str::<Value>(line).is_err(),
            "a JSON line: {line}"
        );
        // `2026-12-01T09:23:29.435536Z  INFO probe_engine::daemon: config loaded targets=1 ...`
        let (stamp, rest) = line.split_once(' ').unwrap();
        assert!(humantime::parse_rfc3339(stamp).is_ok(), "{line}");
        assert!(rest.trim_start().starts_with("INFO "), "{line}");
    }
    assert!(
        seen.iter().any(|l| l.contains("config loaded targets=1")),
        "{seen:#?}"
    );
    assert!(
        listening.contains("probe_engine::daemon: listening addr=127.0.0.1:"),
        "{listening}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + WAIT;
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success());
    reader.join().unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(
        rest.last()
            .is_some_and(|l| l.contains("INFO probe_engine: stopped")),
        "{rest:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_config_coalesces_a_burst_of_writes_into_one_reload() {
    let dir = tempfile::tempdir().unwrap();
    let port = closed_port();
    let ids: Vec<String> = (0..=12).map(|i| format!("t{i}")).collect();
    let targets = |n: usize| -> Vec<(&str, SocketAddr)> {
        ids[..=n].iter().map(|id| (id.as_str(), port)).collect()
    };
    write_targets(dir.path(), &targets(0));
    let daemon = Daemon::start_with(dir.path(), &["--watch-config"]);
    // The watch, once in place, reloads once (for edits made before it was): an empty diff,
    // logged before or after "listening".
    let first = daemon.wait_logged("topology applied", 1);
    for key in ["added", "changed", "removed"] {
        assert_eq!(first[key], 0, "{first}");
    }

    // Twelve saves 25 ms apart, each adding a target: 300 ms of writes, never 200 ms quiet.
    for n in 1..=12 {
        write_targets(dir.path(), &targets(n));
        std::thread::sleep(Duration::from_millis(25));
    }
    // One reload, of the last save.
    let applied = daemon.wait_logged("topology applied", 2);
    assert_eq!(applied["source"], "files");
    assert_eq!(applied["added"], 12, "{applied}");
    assert_eq!(applied["unchanged"], 1, "{applied}");
    // A save after that reload is a reload of its own.
    write_targets(dir.path(), &targets(0));
    let applied = daemon.wait_logged("topology applied", 3);
    assert_eq!(applied["removed"], 12, "{applied}");
    let metrics = daemon.metrics().await;
    assert_eq!(
        metrics.get("probe_config_reloads_total", &[("result", "success")]),
        Some(3.0),
        "{metrics:?}"
    );
    assert_eq!(
        metrics
            .get("probe_config_reloads_total", &[("result", "failure")])
            .unwrap_or(0.0),
        0.0,
        "a half-written file was read: {metrics:?}"
    );
    let applied = daemon
        .lines_so_far()
        .iter()
        .filter(|l| l.contains("\"topology applied\""))
        .count();
    assert_eq!(applied, 3);
}

/// Reads `transition` events from an SSE stream until `n` were about `id`.
async fn transitions_of(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    id: &str,
    n: usize,
) -> Vec<(String, String)> {
    use futures_util::StreamExt;
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            assert!(frame.contains("event: transition"), "{frame}");
            let event: Value = serde_json::from_str(data).unwrap();
            if event["target"] == id {
                seen.push((
                    event["from"].as_str().unwrap().to_owned(),
                    event["to"].as_str().unwrap().to_owned(),
                ));
            }
        }
        if seen.len() >= n {
            return seen;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("saw only {seen:?} of {n} transitions"))
            .unwrap()
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_is_logged_once_counted_and_streamed() {
    // A single file as --config; `svc` arrives by SIGHUP once the event stream is open, so that
    // the stream sees its whole life.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probes.yaml");
    let timing = "defaults: {interval: 300ms, timeout: 200ms, rise: 1, fall: 1}\ntargets:\n";
    let other = closed_port();
    std::fs::write(
        &file,
        format!("{timing}  - id: other\n    tcp: {{address: \"{other}\"}}\n"),
    )
    .unwrap();
    let mut daemon = Daemon::start(&file);
    let response = daemon.get("/v1/events").await;
    let mut stream = Box::pin(response.bytes_stream());
    let mut buffer = String::new();

    let port = closed_port();
    let listener = std::net::TcpListener::bind(port).unwrap();
    std::fs::write(
        &file,
        format!(
            "{timing}  - id: other\n    tcp: {{address: \"{other}\"}}\n  - id: svc\n    tcp: {{address: \"{port}\"}}\n"
        ),
    )
    .unwrap();
    daemon.signal("-HUP");
    daemon.wait_log("topology applied");

    let mut seen = transitions_of(&mut stream, &mut buffer, "svc", 1).await;
    drop(listener);
    seen = [
        seen,
        transitions_of(&mut stream, &mut buffer, "svc", 1).await,
    ]
    .concat();
    let listener = std::net::TcpListener::bind(port).unwrap();
    seen = [
        seen,
        transitions_of(&mut stream, &mut buffer, "svc", 1).await,
    ]
    .concat();
    let path = "/v1/targets/svc/maintenance";
    let body = r#"{"reason": "r", "duration": "5m"}"#;
    let (status, reply) = daemon.send(Method::PUT, path, None, Some(body)).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = daemon.send(Method::DELETE, path, None, None).await;
    assert_eq!(status, 200, "{reply}");
    seen = [
        seen,
        transitions_of(&mut stream, &mut buffer, "svc", 3).await,
    ]
    .concat();
    let want = pairs(&[
        ("PROBING", "UP"),
        ("UP", "DOWN"),
        ("DOWN", "UP"),
        ("UP", "MAINTENANCE"),
        ("MAINTENANCE", "PROBING"),
        ("PROBING", "UP"),
    ]);
    assert_eq!(seen, want);

    // The counter has each once.
    let metrics = daemon.metrics().await;
    let counted: BTreeMap<(String, String), f64> = metrics
        .series("probe_state_transitions_total")
        .filter(|s| s.labels["target"] == "svc")
        .map(|s| ((s.labels["from"].clone(), s.labels["to"].clone()), s.value))
        .collect();
    let mut expected = BTreeMap::new();
    for pair in &want {
        *expected.entry(pair.clone()).or_insert(0.0) += 1.0;
    }
    assert_eq!(counted, expected, "{metrics:?}");

    // And the log has each once, in order.
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    let logged: Vec<(String, String)> = daemon
        .all_lines()
        .iter()
        .filter(|(_, v)| v["message"] == "target state changed" && v["target_id"] == "svc")
        .map(|(_, v)| {
            (
                v["from"].as_str().unwrap().to_owned(),
                v["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(logged, want);
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_with_a_reason_until_the_first_verdicts() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Three passes a second apart before the first verdict.
    std::fs::write(
        dir.path().join("t.yaml"),
        format!(
            "targets:\n  - id: svc\n    tcp: {{address: \"{}\"}}\n    interval: 2s\n    \
             fast_interval: 1s\n    timeout: 500ms\n    rise: 3\n",
            listener.local_addr().unwrap()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    // Started (the config is loaded and the API listens) and alive, but not ready.
    assert_eq!(daemon.get("/startupz").await.status(), 200);
    assert_eq!(daemon.get("/livez").await.status(), 200);
    let readyz = daemon.get("/readyz").await;
    assert_eq!(readyz.status(), 503);
    assert!(
        readyz.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        readyz.headers()
    );
    assert_eq!(
        readyz.text().await.unwrap(),
        "not ready: 1 of 1 targets not healthy: svc (PROBING)\n"
    );
    // That answer came before the verdict: svc is still probing after it.
    assert_eq!(daemon.state_of("svc").await.as_deref(), Some("PROBING"));

    // Then ready with the verdict.
    daemon.wait_states(&[("svc", "UP")]).await;
    let deadline = Instant::now() + WAIT;
    while daemon.get("/readyz").await.status() != 200 {
        assert!(Instant::now() < deadline, "never ready with svc UP");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(listener);
}

#[test]
fn check_merges_every_yaml_file_of_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    // A group in one file depending on targets of both; other files are not read.
    std::fs::write(
        dir.path().join("db.yaml"),
        "targets:\n  - id: db\n    tcp: {address: \"127.0.0.1:5432\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("web.yml"),
        "targets:\n  - id: web\n    tcp: {address: \"127.0.0.1:8080\"}\n  - id: site\n    \
         kind: group\n    depends_on: [{target: db}, {target: web}]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("README.txt"), "not: [yaml\n").unwrap();
    let check = |path: &Path| {
        Command::new(BIN)
            .args(["check", "--config"])
            .arg(path)
            .output()
            .unwrap()
    };
    let out = check(dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "ok: 2 targets (tcp 2) and 1 group (0 pools) in 2 files ({})\n",
            dir.path().display()
        )
    );

    // Errors in two files are all reported, each at its place in its file.
    std::fs::write(
        dir.path().join("db.yaml"),
        "targets:\n  - id: db\n    tcp: {address: \"127.0.0.1:5432\"}\n    timeout: 9s\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("web.yml"),
        "targets:\n  - id: web\n    tcp: {adress: \"127.0.0.1:8080\"}\n",
    )
    .unwrap();
    let out = check(dir.path());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let db = format!("{}:4:", dir.path().join("db.yaml").display());
    let web = format!("{}:3:", dir.path().join("web.yml").display());
    assert!(stderr.lines().any(|l| l.starts_with(&db)), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with(&web)), "{stderr}");
    assert!(
        stderr.contains(&format!("errors in {}", dir.path().display())),
        "{stderr}"
    );
}
