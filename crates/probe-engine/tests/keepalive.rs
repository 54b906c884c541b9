//! The keep-alive race against a real nginx (Debian's `nginx-light`, started here on a free
//! loopback port): a server closes idle kept-alive connections after its `keepalive_timeout` and
//! after `keepalive_requests`, and a probe whose interval is near that timeout sometimes sends on
//! a connection the server is closing at that instant. Those probes are retried on a fresh
//! connection, so a healthy server sees no failed probe.

mod support;

use std::time::Duration;

use probe_testkit::{KeepAlive, Nginx, NginxError};
use support::Daemon;
use tokio::time::Instant;

/// The sum of every series of `name` in a Prometheus text exposition.
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        // An empty sum is -0.
        .fold(0.0, |sum, v| sum + v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_closing_kept_alive_connections_fails_no_probe() {
    // 6 000 probes, each on a connection idle for about the server's keepalive_timeout, in
    // 15 s: many targets rather than a long run, so that each connection keeps the interval
    // the race needs. At 1 s a target, a connection serves about 12 probes in the run, so
    // `keepalive_requests` is lower than that, to close some connections on the count too.
    const TARGETS: usize = 400;
    const RUN: Duration = Duration::from_secs(15);
    let keep_alive = KeepAlive {
        timeout: Duration::from_secs(1),
        requests: 5,
    };
    let nginx = match Nginx::start(keep_alive) {
        Ok(nginx) => nginx,
        Err(NginxError::Missing) => {
            probe_testkit::skipped_outside_ci(
                "the keep-alive test: nginx is not installed (scripts/setup installs nginx-light)",
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from(
        "defaults:\n  interval: 1s\n  timeout: 500ms\n  rise: 2\n  fall: 3\ntargets:\n",
    );
    for i in 0..TARGETS {
        yaml.push_str(&format!(
            "  - id: web-{i}\n    http: {{ url: \"http://{}/health\" }}\n",
            nginx.addr()
        ));
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    let daemon = Daemon::start(dir.path());
    let started = Instant::now();
    let want: Vec<(String, &str)> = (0..TARGETS).map(|i| (format!("web-{i}"), "UP")).collect();
    let want: Vec<(&str, &str)> = want.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    daemon.wait_states(&want).await;
    tokio::time::sleep_until(started + RUN).await;

    let metrics = daemon.get("/metrics").await.text().await.unwrap();
    let probes = total(&metrics, "probe_duration_seconds_count");
    let failed = total(&metrics, "probe_failures_total");
    let retries = total(&metrics, "probe_http_stale_connection_retries_total");
    eprintln!("{probes} probes, {failed} failed, {retries} stale-connection retries");
    assert!(probes >= (TARGETS * 10) as f64, "only {probes} probes ran");
    assert_eq!(failed, 0.0, "failed probes against a healthy nginx");
    assert!(
        retries > 0.0,
        "the race never happened: is keepalive_timeout 1s in force?"
    );
    let targets = daemon.targets().await;
    assert!(
        targets
            .iter()
            .all(|t| t["state"] == "UP" && t["transitions"] == 1),
        "a target left UP: {targets:?}"
    );
    assert!(nginx.error_log().lines().all(|l| !l.contains("[emerg]")));
}
