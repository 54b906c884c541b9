//! `probe-engine ctl` against the real daemon: its tables and the API's JSON, maintenance set
//! and ended through it, the explain tree, following events, colour on a terminal and never
//! with `NO_COLOR`, and the exit codes (1 the API said no, 2 usage, 3 no daemon, 4 the token
//! refused). `ctl cluster` against three members on a real etcd is in the cluster tests.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use probe_testkit::AcceptServer;
use serde_json::Value;
use support::{BIN, Daemon, closed_port};
use tokio::time::Instant;

/// A fleet: `up` (a listener that accepts), `down` (nothing listens) and the group `shop` over
/// both, `down` critical.
fn fleet(dir: &std::path::Path, up: &AcceptServer) {
    std::fs::write(
        dir.join("probes.yaml"),
        format!(
            "defaults: {{interval: 200ms, timeout: 100ms, rise: 1, fall: 1}}\ntargets:\n\
             \x20 - {{id: up, tcp: {{address: \"{}\"}}}}\n\
             \x20 - {{id: down, tcp: {{address: \"{}\"}}}}\n\
             \x20 - {{id: shop, kind: group, depends_on: [{{target: up}}, {{target: down, critical: true}}]}}\n",
            up.addr(),
            closed_port()
        ),
    )
    .unwrap();
}

fn ctl(daemon: &Daemon, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["ctl", "--api", &daemon.url("")])
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("PROBE_ENGINE_API_TOKEN")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The fleet's daemon, started with `extra` flags, once `up` is UP and `down` DOWN.
async fn started_with(extra: &[&str]) -> (tempfile::TempDir, AcceptServer, Daemon) {
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    fleet(dir.path(), &up);
    let daemon = Daemon::start_with(&dir.path().join("probes.yaml"), extra);
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    (dir, up, daemon)
}

async fn started() -> (tempfile::TempDir, AcceptServer, Daemon) {
    started_with(&[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_print_as_a_table_and_as_the_apis_json() {
    let (_dir, _up, daemon) = started().await;
    let table = stdout(&ctl(&daemon, &["targets"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "STATE", "SINCE", "SCORE", "REASON", "LATENCY"]
    );
    let down: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&down[..2], ["down", "DOWN"]);
    assert_eq!(down[3], "0.00");
    assert!(
        lines[1].contains("Connection refused (os error 111)"),
        "{table}"
    );
    let up: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&up[..2], ["up", "UP"]);
    assert_eq!((up[3], up[4]), ("1.00", "-"));
    assert!(up[5].ends_with("ms"), "{table}");
    assert!(!table.contains('\x1b'), "colour on a pipe: {table}");

    // -o json is the API's own listing.
    let json: Value =
        serde_json::from_str(&stdout(&ctl(&daemon, &["-o", "json", "targets"]))).unwrap();
    let api: Value = daemon.get("/v1/targets").await.json().await.unwrap();
    let ids = |v: &Value| -> Vec<(String, String)> {
        v["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_owned(),
                    t["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(ids(&json), ids(&api));
    // Filters reach the API; YAML says the same.
    let only_down = stdout(&ctl(
        &daemon,
        &["targets", "--state", "DOWN", "--match", "o"],
    ));
    assert_eq!(only_down.lines().count(), 2, "{only_down}");
    assert!(only_down.lines().nth(1).unwrap().starts_with("down "));
    let yaml = stdout(&ctl(&daemon, &["-o", "yaml", "targets", "--group", "shop"]));
    assert!(
        yaml.contains("id: down") && yaml.contains("id: up"),
        "{yaml}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_get_and_explain_go_through_the_api() {
    let (_dir, _up, daemon) = started().await;
    let set = stdout(&ctl(
        &daemon,
        &[
            "maintenance",
            "set",
            "--group",
            "shop",
            "--for",
            "30m",
            "--reason",
            "disk swap",
        ],
    ));
    assert_eq!(set, "down MAINTENANCE\nup MAINTENANCE\n");
    for t in daemon.list().await.targets {
        assert_eq!(t.state, "MAINTENANCE", "{}", t.id);
    }
    let got = stdout(&ctl(&daemon, &["get", "up"]));
    assert!(got.starts_with("up (tcp)  MAINTENANCE  since "), "{got}");
    assert!(got.contains("maintenance  disk swap (until "), "{got}");
    assert!(got.contains("AT") && got.contains("LATENCY"), "{got}");
    let ended = stdout(&ctl(&daemon, &["maintenance", "end", "up"]));
    assert_eq!(ended, "up PROBING\n");
    daemon.wait_states(&[("up", "UP")]).await;
    stdout(&ctl(&daemon, &["maintenance", "end", "down"]));
    daemon.wait_states(&[("down", "DOWN")]).await;

    // The score tree: the group, then each dependency with its weight; the critical DOWN one
    // caps it and is the root cause.
    let deadline = Instant::now() + support::WAIT;
    let tree = loop {
        let tree = stdout(&ctl(&daemon, &["explain", "shop"]));
        if tree.contains("caps the score") || Instant::now() > deadline {
            break tree;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lines: Vec<&str> = tree.lines().collect();
    assert!(
        lines[0].starts_with("shop (group) DOWN score ")
            && lines[0].ends_with(", a critical dependency DOWN"),
        "{tree}"
    );
    assert_eq!(lines[1], "├─ up UP score 1.00  weight 0.50", "{tree}");
    assert_eq!(
        lines[2], "└─ down DOWN score 0.00  weight 0.50, critical, caps the score",
        "{tree}"
    );
    assert_eq!(lines[3], "root causes: down", "{tree}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_print_a_transition_within_a_second() {
    let (_dir, _up, daemon) = started().await;
    let mut child = std::process::Command::new(BIN)
        .args(["ctl", "--api", &daemon.url(""), "events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // It says on stderr once the stream is open: a transition from then on is followed.
    let mut said = BufReader::new(child.stderr.take().unwrap()).lines();
    let following = tokio::task::spawn_blocking(move || said.next().unwrap().unwrap())
        .await
        .unwrap();
    assert_eq!(
        following,
        format!("following {}/v1/events (Ctrl-C to stop)", daemon.url(""))
    );
    let (status, _) = daemon
        .send(
            reqwest::Method::PUT,
            "/v1/targets/up/maintenance",
            None,
            Some(r#"{"reason": "events test", "duration": "5m"}"#),
        )
        .await;
    assert_eq!(status, 200);
    let changed = Instant::now();
    let line = tokio::task::spawn_blocking(move || lines.next().unwrap().unwrap())
        .await
        .unwrap();
    assert!(
        changed.elapsed() < Duration::from_secs(1),
        "{:?}",
        changed.elapsed()
    );
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&words[1..5], ["up", "UP", "->", "MAINTENANCE"], "{line}");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colour_only_on_a_terminal_and_never_with_no_color() {
    let (_dir, _up, daemon) = started().await;
    // `script` gives the command a terminal of its own.
    let on_a_terminal = |no_color: Option<&str>| {
        let command = format!("{BIN} ctl --api {} targets", daemon.url(""));
        let mut script = Command::new("script");
        script
            .args(["-qec", &command, "/dev/null"])
            .env_remove("NO_COLOR");
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        String::from_utf8(script.output().unwrap().stdout).unwrap()
    };
    assert!(on_a_terminal(None).contains("\x1b[31mDOWN\x1b[0m"));
    let plain = on_a_terminal(Some("1"));
    assert!(
        plain.contains("DOWN") && !plain.contains('\x1b'),
        "{plain:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_refusals_usage_and_an_absent_daemon_apart() {
    let (dir, _up, daemon) = started_with(&["--api-token", "s3cret"]).await;
    let code = |output: &Output| output.status.code().unwrap();
    let stderr = |output: &Output| String::from_utf8_lossy(&output.stderr).into_owned();

    let unknown = ctl(&daemon, &["get", "nope"]);
    assert_eq!(code(&unknown), 1);
    assert_eq!(
        stderr(&unknown),
        "error: 404 Not Found: no target \"nope\"\n"
    );

    let usage = ctl(&daemon, &["targets", "--colour", "red"]);
    assert_eq!(code(&usage), 2, "{}", stderr(&usage));

    let absent = Command::new(BIN)
        .args([
            "ctl",
            "--api",
            &format!("http://{}", closed_port()),
            "targets",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&absent), 3);
    assert!(
        stderr(&absent).contains("Connection refused"),
        "{}",
        stderr(&absent)
    );

    let refused = ctl(
        &daemon,
        &["maintenance", "set", "up", "--for", "1m", "--reason", "x"],
    );
    assert_eq!(code(&refused), 4, "{}", stderr(&refused));
    let wrong = ctl(
        &daemon,
        &[
            "--token",
            "nope",
            "maintenance",
            "set",
            "up",
            "--for",
            "1m",
            "--reason",
            "x",
        ],
    );
    assert_eq!(code(&wrong), 4, "{}", stderr(&wrong));
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let allowed = ctl(
        &daemon,
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "maintenance",
            "set",
            "up",
            "--for",
            "1m",
            "--reason",
            "x",
        ],
    );
    assert_eq!(stdout(&allowed), "up MAINTENANCE\n");
}

#[test]
fn completions_and_the_manual_come_from_the_command_line_itself() {
    let run = |args: &[&str]| {
        let output = Command::new(BIN).args(args).output().unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    let bash = run(&["completions", "bash"]);
    assert!(
        bash.contains("_probe__engine()") && bash.contains("maintenance"),
        "bash"
    );
    assert!(run(&["completions", "zsh"]).contains("#compdef probe-engine"));
    assert!(run(&["completions", "fish"]).contains("complete -c probe-engine"));
    let man = run(&["man"]);
    assert!(
        man.contains(".TH probe-engine") && man.contains("ctl"),
        "man"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uptime_and_history_read_the_daemons_history() {
    let state = tempfile::tempdir().unwrap();
    let (_dir, _up, daemon) = started_with(&["--state-dir", state.path().to_str().unwrap()]).await;
    // The history is written once a second: the transition to DOWN is there once the API says.
    let deadline = Instant::now() + support::WAIT;
    let history = loop {
        let history = stdout(&ctl(&daemon, &["history", "down"]));
        if history.lines().count() >= 2 || Instant::now() > deadline {
            break history;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["AT", "FROM", "TO", "CAUSE", "DETAIL"],
        "{history}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[1..4], ["PROBING", "DOWN", "results"], "{history}");

    let uptime = stdout(&ctl(&daemon, &["uptime", "up", "--window", "7d"]));
    let lines: Vec<&str> = uptime.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "WINDOW", "UPTIME", "DOWN", "MAINTENANCE"]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..2], ["up", "7d"], "{uptime}");
    let json: Value =
        serde_json::from_str(&stdout(&ctl(&daemon, &["-o", "json", "uptime", "up"]))).unwrap();
    assert_eq!(json["target"], "up");
    assert_eq!(json["window"], "24h");
    let bad = ctl(&daemon, &["uptime", "up", "--window", "forever"]);
    assert_eq!(bad.status.code(), Some(1));

    // Many targets' uptime in one call, in the order asked; an unknown id is a 404.
    let batch: Value = daemon
        .get("/v1/uptime?window=7d&target=up,down,up")
        .await
        .json()
        .await
        .unwrap();
    let listed: Vec<(&str, &str)> = batch["uptimes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["target"].as_str().unwrap(), u["window"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("up", "7d"), ("down", "7d")], "{batch}");
    // Each entry is what the one target's route answers.
    let one: Value = daemon
        .get("/v1/targets/up/uptime?window=7d")
        .await
        .json()
        .await
        .unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&batch["uptimes"][0]), keys(&one));
    assert_eq!(daemon.get("/v1/uptime?target=nope").await.status(), 404);
    assert_eq!(daemon.get("/v1/uptime?since=1h").await.status(), 400);

    // `-o wide` shows each row's uptime over 24 h, read in that one call.
    let wide = stdout(&ctl(&daemon, &["-o", "wide", "targets"]));
    let uptime_of = |id: &str| {
        wide.lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .and_then(|l| l.split_whitespace().find(|w| w.ends_with('%')))
            .map(str::to_owned)
    };
    assert_eq!(uptime_of("up").as_deref(), Some("100.000%"), "{wide}");
    assert_eq!(uptime_of("down").as_deref(), Some("0.000%"), "{wide}");
}

/// A reader that goes away early (`| head`) ends the output quietly: no panic, exit 0.
#[test]
fn a_reader_that_leaves_early_is_no_failure() {
    use std::io::Read as _;
    // More than a pipe holds (64 KiB), so the writer meets the closed pipe.
    let mut child = Command::new(BIN)
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
