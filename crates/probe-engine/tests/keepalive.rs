//! The keep-alive race against a real nginx (Debian's `nginx-light`, started here on a free
//! loopback port): a server closes idle kept-alive connections after its `keepalive_timeout` and
//! after `keepalive_requests`, and a probe whose interval is near that timeout sometimes sends on
//! a connection the server is closing at that instant. Those probes are retried on a fresh
//! connection, so a healthy server sees no failed probe.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{Daemon, WAIT};
use tokio::time::Instant;

/// nginx on 127.0.0.1 with its whole prefix in a temporary directory.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with `keepalive_timeout 1s` and `keepalive_requests 20`; `None` (with the
    /// reason printed) when nginx is not installed outside CI.
    async fn start() -> Option<Self> {
        let Ok(binary) = which("nginx") else {
            probe_engine::testing::skipped_outside_ci(
                "the keep-alive test: nginx is not installed (scripts/setup installs nginx-light)",
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let addr = support::closed_port();
        let prefix = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n\
             error_log {prefix}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  \
             proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  \
             uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n  \
             keepalive_timeout 1s;\n  keepalive_requests 20;\n  \
             server {{ listen {addr}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nginx");
        let mut nginx = Self { child, addr, dir };
        nginx.wait_listening().await;
        Some(nginx)
    }

    /// Waits until nginx accepts connections (or fails with its error log).
    async fn wait_listening(&mut self) {
        let deadline = Instant::now() + WAIT;
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("nginx exited with {status}: {}", self.error_log());
            }
            assert!(Instant::now() < deadline, "nginx never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn which(name: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or(())
}

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
    const TARGETS: usize = 100;
    const RUN: Duration = Duration::from_secs(60);
    let Some(nginx) = Nginx::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from(
        "defaults:\n  interval: 1s\n  timeout: 500ms\n  rise: 2\n  fall: 3\ntargets:\n",
    );
    for i in 0..TARGETS {
        yaml.push_str(&format!(
            "  - id: web-{i}\n    http: {{ url: \"http://{}/health\" }}\n",
            nginx.addr
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
    assert!(probes >= (TARGETS * 50) as f64, "only {probes} probes ran");
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
