//! The daemon short of its own resources never blames its targets: started with a descriptor
//! limit of 128 while slow probes hold descriptors, and inside a network namespace whose
//! ephemeral port range leaves a handful of local ports. Healthy targets stay UP, and the
//! daemon says what it ran short of, in its log and its metrics.

mod support;

use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use probe_testkit::AcceptServer;
use probe_testkit::netns_or_skip;
use serde_json::Value;
use support::{BIN, Daemon, SilentServer, WAIT};
use tokio::time::Instant;

/// Every healthy target is UP, with one transition (PROBING to UP) and no failure, now.
async fn healthy_stayed_up(daemon: &Daemon, prefix: &str, count: usize) {
    let targets = daemon.targets().await;
    let healthy: Vec<&Value> = targets
        .iter()
        .filter(|t| t["id"].as_str().unwrap().starts_with(prefix))
        .collect();
    assert_eq!(healthy.len(), count);
    for target in healthy {
        assert_eq!(target["state"], "UP", "{target}");
        assert_eq!(target["transitions"], 1, "never left UP: {target}");
        assert_eq!(target["last_failure"], Value::Null, "{target}");
    }
}

/// Polls until every target whose id starts with `prefix` is UP.
async fn wait_all_up(daemon: &Daemon, prefix: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let targets = daemon.targets().await;
        let mut ours = targets
            .iter()
            .filter(|t| t["id"].as_str().unwrap().starts_with(prefix))
            .peekable();
        if ours.peek().is_some() && ours.all(|t| t["state"] == "UP") {
            return;
        }
        assert!(Instant::now() < deadline, "never all {prefix}* UP");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_starved_daemon_keeps_healthy_targets_up() {
    const HEALTHY: usize = 200;
    const HANGING: usize = 400;
    let healthy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let healthy_addr = healthy.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok(conn) = healthy.accept().await {
            drop(conn);
        }
    });
    let hanging = SilentServer::start().await;
    let web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web_addr = web.local_addr().unwrap();
    tokio::spawn(async move {
        let app = axum::Router::new().route("/health", axum::routing::get(|| async { "ok" }));
        let _ = axum::serve(web, app).await;
    });
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("targets:\n");
    // The HTTP tier too, pooled and on fresh connections.
    for i in 0..20 {
        let _ = writeln!(
            yaml,
            "  - {{id: ok-web-{i:02}, http: {{url: \"http://{web_addr}/health\", \
             fresh_connection: {}}}, interval: 1s, timeout: 500ms, rise: 1, fall: 1}}",
            i % 2 == 0
        );
    }
    for i in 0..HEALTHY {
        let _ = writeln!(
            yaml,
            "  - {{id: ok-{i:03}, tcp: {{address: \"{healthy_addr}\"}}, interval: 1s, \
             timeout: 500ms, rise: 1, fall: 1}}"
        );
    }
    for i in 0..HANGING {
        let _ = writeln!(
            yaml,
            "  - {{id: slow-{i:03}, tcp: {{address: \"{}\", send: \"PING\\r\\n\", expect: PONG}}, \
             interval: 2s, timeout: 1500ms}}",
            hanging.addr
        );
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    // The soft and hard limits both at 128 before exec, as a box whose descriptors are spoken
    // for would leave them (the daemon raises the soft limit to the hard one).
    let mut command = Command::new("bash");
    command
        .args([
            "-c",
            "ulimit -Sn 128 && ulimit -Hn 128 && exec \"$0\" \"$@\"",
            BIN,
            "run",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(dir.path());
    let daemon = Daemon::launch(command);
    let limit = daemon.wait_logged("descriptor limit", 1);
    assert_eq!(limit["limit"], 128, "{limit}");
    let lowered = daemon.wait_logged(
        "max_in_flight lowered: the descriptor limit leaves no room for more probes in flight",
        1,
    );
    assert_eq!(lowered["asked"], 4096, "{lowered}");
    assert_eq!(lowered["max_in_flight"], 64, "{lowered}");

    wait_all_up(&daemon, "ok-").await;
    // 15 s of slow probes holding descriptors: no healthy target ever leaves UP.
    tokio::time::sleep(Duration::from_secs(15)).await;
    healthy_stayed_up(&daemon, "ok-", HEALTHY + 20).await;
    let metrics = daemon.metrics().await;
    assert_eq!(metrics.value("probe_engine_fd_limit", &[]), 128.0);
    let open = metrics.value("probe_engine_open_fds", &[]);
    assert!(open > 64.0 && open <= 128.0, "{open} descriptors open");
    assert!(
        daemon
            .lines_so_far()
            .iter()
            .all(|l| !l.contains("Too many open files") || l.contains("ran out of a resource")),
        "a probe's failure named the descriptor limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_local_ports_is_not_blamed_on_targets() {
    const TARGETS: usize = 5;
    let netns = netns_or_skip!();
    // Eight local ports, no reuse of TIME_WAIT ones: a prober closing gracefully (its side keeps
    // TIME_WAIT for a minute) runs out within a few probes of each target.
    for setting in [
        "net.ipv4.ip_local_port_range=40000 40007",
        "net.ipv4.tcp_tw_reuse=0",
    ] {
        let status = netns
            .command("sysctl")
            .args(["-q", "-w", setting])
            .status()
            .unwrap();
        assert!(status.success(), "sysctl {setting}");
    }
    let servers: Vec<AcceptServer> = (0..TARGETS)
        .map(|_| AcceptServer::start(netns.tcp_listener().unwrap()).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("targets:\n");
    for (i, server) in servers.iter().enumerate() {
        let _ = writeln!(
            yaml,
            "  - {{id: port-{i}, tcp: {{address: \"{}\", close: graceful}}, interval: 300ms, \
             timeout: 200ms, rise: 1, fall: 2}}",
            server.addr()
        );
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    // The daemon runs inside the namespace, its API on the namespace's address (reached from
    // here over the veth).
    let mut command = netns.command(BIN);
    command
        .args([
            "run",
            "--listen",
            &format!("{}:0", netns.addr()),
            "--config",
        ])
        .arg(dir.path());
    let daemon = Daemon::launch(command);
    wait_all_up(&daemon, "port-").await;
    let ran_out = daemon.wait_logged(
        "the engine ran out of a resource: the probes it failed are retried, not blamed on \
         their targets",
        1,
    );
    assert_eq!(ran_out["kind"], "ports", "{ran_out}");
    // Probing on for a few seconds, out of ports most of the time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    healthy_stayed_up(&daemon, "port-", TARGETS).await;
    let metrics = daemon.metrics().await;
    let faults = metrics.value("probe_engine_resource_errors_total", &[("kind", "ports")]);
    assert!(faults >= 10.0, "{faults} runs out of ports");
    // One burst, logged once: not once a probe.
    let said = daemon
        .lines_so_far()
        .iter()
        .filter(|l| l.contains("the engine ran out of a resource"))
        .count();
    assert_eq!(said, 1, "{faults} faults logged {said} times");
    drop(servers);
}
