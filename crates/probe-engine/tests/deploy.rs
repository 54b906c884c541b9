//! What `deploy/` ships, held to the daemon it deploys: the systemd unit passes
//! `systemd-analyze verify` and starts the daemon with flags it has, and the daemon speaks the
//! unit's `Type=notify` protocol (READY, WATCHDOG, STOPPING) to a socket the test listens on, as
//! systemd would.

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{BIN, Daemon, closed_port, write_targets};

fn unit() -> (PathBuf, String) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd/probe-engine.service");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn the_unit_passes_systemd_analyze_verify_with_flags_the_daemon_has() {
    let (_, text) = unit();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/probe-engine"));
    assert_eq!(words.next(), Some("run"));
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let flags: Vec<&str> = words.filter(|w| w.starts_with("--")).collect();
    assert!(flags.len() >= 4, "{exec}");
    for flag in flags {
        assert!(
            help.contains(&format!("{flag} ")),
            "{flag} of ExecStart is not a flag of `probe-engine run`"
        );
    }

    // Verified with ExecStart on the binary under test: verify checks that it is executable.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("probe-engine.service");
    std::fs::write(&copy, text.replace("/usr/local/bin/probe-engine", BIN)).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze (scripts/setup installs the systemd package)");
    let said = String::from_utf8_lossy(&verify.stderr);
    // verify warns of unknown keys and bad values but still exits 0: both must be clean.
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");

    // The check itself catches a misspelt key.
    std::fs::write(
        &copy,
        text.replace("WatchdogSec=", "WatchdogSecs=")
            .replace("/usr/local/bin/probe-engine", BIN),
    )
    .unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&verify.stderr).contains("Unknown key 'WatchdogSecs'"),
        "a misspelt key went unnoticed"
    );
}

/// What the daemon sent to the notify socket, one datagram at a time.
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 1024];
    let n = socket
        .recv(&mut buf)
        .expect("nothing sent to the notify socket");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_daemon_says_ready_pings_the_watchdog_and_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&sock).unwrap();
    socket.set_read_timeout(Some(support::WAIT)).unwrap();
    write_targets(dir.path(), &[("db", closed_port())]);
    // systemd names the process the watchdog is for (WATCHDOG_PID): a shell that sets it to
    // its own pid and then becomes the daemon, keeping that pid.
    let mut command = Command::new("sh");
    command
        .args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", BIN])
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--drain-delay",
            "1s",
            "--config",
        ])
        .arg(dir.path())
        .env("NOTIFY_SOCKET", &sock)
        .env("WATCHDOG_USEC", "200000");
    let mut daemon = Daemon::launch(command);
    let ready = next(&socket);
    assert_eq!(
        ready,
        format!("READY=1\nSTATUS=serving on {}\n", daemon.addr),
        "the first notification"
    );
    // Pings at half the period: several within a second.
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(next(&socket), "WATCHDOG=1\n");
    }
    socket.set_read_timeout(Some(support::WAIT)).unwrap();
    daemon.signal("-TERM");
    loop {
        let said = next(&socket);
        if said != "WATCHDOG=1\n" {
            assert_eq!(said, "STOPPING=1\nSTATUS=draining\n");
            break;
        }
    }
    assert!(daemon.wait_exit().success());
}

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path)
}

/// The dashboard's queries, with Grafana's `$job` as its "All" value.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/probe-engine.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().replace("$job", ".+"))
        .collect();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"].as_str()
            && query.starts_with("label_values(")
        {
            queries.push(query.to_owned());
        }
    }
    queries
}

/// The metric names a PromQL text (or a series selector) uses: `probe_` words, with a
/// histogram's `_bucket`, `_sum` and `_count` taken back to its family.
fn metric_names(promql: &str, families: &std::collections::BTreeSet<String>) -> Vec<String> {
    let word = regex::Regex::new(r"\bprobe_[a-z_]+\b").unwrap();
    word.find_iter(promql)
        .map(|m| {
            let name = m.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| families.contains(*base))
                })
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

#[test]
fn the_rules_pass_promtool_and_every_name_they_and_the_dashboard_use_is_exported() {
    let rules = deploy("prometheus");
    for args in [
        ["check", "rules", "rules.yml"],
        ["test", "rules", "rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&rules)
            .output()
            .expect("promtool (scripts/setup installs the prometheus package)");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let families = support::prom::exportable_families();
    let mut used: Vec<(String, String)> = Vec::new();
    for file in ["prometheus/rules.yml", "prometheus/rules.test.yml"] {
        let text = std::fs::read_to_string(deploy(file)).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            used.extend(
                metric_names(line, &families)
                    .into_iter()
                    .map(|n| (file.to_owned(), n)),
            );
        }
    }
    for query in dashboard_queries() {
        used.extend(
            metric_names(&query, &families)
                .into_iter()
                .map(|n| ("grafana/probe-engine.json".to_owned(), n)),
        );
    }
    assert!(used.len() >= 30, "{used:?}");
    let unknown: Vec<&(String, String)> =
        used.iter().filter(|(_, n)| !families.contains(n)).collect();
    assert!(
        unknown.is_empty(),
        "names the daemon does not export: {unknown:?}"
    );
}

/// Every query of the dashboard, asked of a real Prometheus that scrapes the real daemon:
/// each one is valid PromQL over what is there, and the fleet's counts are the daemon's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_answers_every_dashboard_query_from_the_daemon() {
    let up =
        probe_testkit::AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("web", up.addr()), ("db", closed_port())]);
    let daemon = Daemon::start(dir.path());
    daemon.wait_states(&[("web", "UP"), ("db", "DOWN")]).await;
    let config = format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n\
         scrape_configs:\n  - job_name: probe-engine\n    static_configs: [{{targets: [\"{}\"]}}]\n",
        daemon.addr
    );
    let Some(prometheus) = probe_testkit::prometheus_or_skip(&config) else {
        return;
    };
    let http = support::client();
    // Prometheus scrapes on its own clock: its query API is the only signal there is. Rates
    // need two scrapes of the same series.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        let body = prometheus
            .answer("sum(rate(probe_fleet_duration_seconds_count[5m])) > 0")
            .await;
        if body.is_some_and(|b| {
            b["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus never had two scrapes; its log:\n{}",
            prometheus.log(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let queries = dashboard_queries();
    assert!(queries.len() >= 18);
    for query in &queries {
        if query.starts_with("label_values(") {
            // A Grafana function, not PromQL: it lists the label's values of the series.
            let url = format!("http://{}/api/v1/label/job/values", prometheus.addr());
            let body: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
            assert_eq!(body["data"], serde_json::json!(["probe-engine"]), "{query}");
            continue;
        }
        let body = prometheus
            .answer(query)
            .await
            .expect("Prometheus answers once it has answered");
        assert_eq!(body["status"], "success", "{query}: {body}");
    }
    // The fleet's counts, as the stat panels ask for them.
    let prometheus = &prometheus;
    let count = |state: u8| {
        let query = queries
            .iter()
            .find(|q| q.starts_with("count(") && q.contains(&format!("== {state})")))
            .unwrap()
            .clone();
        async move {
            let body = prometheus.answer(&query).await.expect("Prometheus answers");
            body["data"]["result"][0]["value"][1]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    assert_eq!(count(1).await, "1", "UP");
    assert_eq!(count(4).await, "1", "DOWN");
    assert_eq!(count(3).await, "0", "MAINTENANCE");
}

/// Every object of every manifest under `deploy/kubernetes/`, by file.
fn manifests() -> Vec<(String, serde_json::Value)> {
    let mut objects = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in docs {
            for key in ["apiVersion", "kind", "metadata"] {
                assert!(!doc[key].is_null(), "{name}: an object without {key}");
            }
            objects.push((name.clone(), doc));
        }
    }
    objects
}

/// The Kubernetes manifests parse; the workloads run the daemon with flags it has, probe the
/// paths it serves on the port it listens on, and mount a ConfigMap whose files
/// `probe-engine check` accepts; the Services, the budget and the scrape annotations point at
/// the workloads' pods and port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_run_the_daemon_as_it_is() {
    let objects = manifests();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|(_, o)| o["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "Deployment",
        "StatefulSet",
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let config_maps: std::collections::HashMap<&str, &serde_json::Value> = objects
        .iter()
        .filter(|(_, o)| o["kind"] == "ConfigMap")
        .map(|(_, o)| (o["metadata"]["name"].as_str().unwrap(), &o["data"]))
        .collect();
    let mut workloads = 0;
    for (file, object) in objects
        .iter()
        .filter(|(_, o)| o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
    {
        workloads += 1;
        let pod = &object["spec"]["template"];
        assert_eq!(
            pod["metadata"]["labels"], object["spec"]["selector"]["matchLabels"],
            "{file}: the selector is not the pod's labels"
        );
        let container = &pod["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[0], "run", "{file}");
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            assert!(
                help.contains(&format!("{flag} ")),
                "{file}: {flag} is not a flag of run"
            );
        }
        let value = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
        let port: u16 = value("--listen")
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let ports = container["ports"].as_array().unwrap();
        let named = |name: &serde_json::Value| {
            ports
                .iter()
                .find(|p| p["name"] == *name)
                .map_or(name.as_u64(), |p| p["containerPort"].as_u64())
        };
        for (probe, path) in [
            ("startupProbe", "/startupz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/livez"),
        ] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"], path, "{file}: {probe}");
            assert_eq!(
                named(&get["port"]),
                Some(u64::from(port)),
                "{file}: {probe}'s port"
            );
        }
        if args.contains(&"--member") {
            // The member's name is the pod's: stable across restarts.
            assert_eq!(value("--member"), "$(POD_NAME)", "{file}");
            assert_eq!(
                container["env"][0],
                serde_json::json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
                "{file}"
            );
        }
        // The mounted ConfigMap's files, where --config reads them, pass `check`.
        let mount = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == value("--config"))
            .unwrap_or_else(|| panic!("{file}: nothing mounted at --config"));
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let data = config_maps[volume["configMap"]["name"].as_str().unwrap()];
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in data.as_object().unwrap() {
            std::fs::write(dir.path().join(name), text.as_str().unwrap()).unwrap();
        }
        let check = Command::new(BIN)
            .args(["check", "--config"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&check.stderr)
        );

        // Its Services and budget select its pods, on its port.
        let labels = &pod["metadata"]["labels"];
        let services: Vec<&serde_json::Value> = objects
            .iter()
            .map(|(_, o)| o)
            .filter(|o| o["kind"] == "Service" && o["spec"]["selector"] == *labels)
            .collect();
        assert!(!services.is_empty(), "{file}: no Service selects its pods");
        for service in services {
            assert_eq!(service["spec"]["ports"][0]["port"], port, "{file}");
            assert_eq!(
                named(&service["spec"]["ports"][0]["targetPort"]),
                Some(u64::from(port))
            );
            let annotations = &service["metadata"]["annotations"];
            assert_eq!(
                annotations["prometheus.io/port"],
                port.to_string(),
                "{file}"
            );
            assert_eq!(annotations["prometheus.io/path"], "/metrics", "{file}");
        }
    }
    assert_eq!(workloads, 2);
    let budget = objects
        .iter()
        .find(|(_, o)| o["kind"] == "PodDisruptionBudget")
        .unwrap();
    let deployment = objects
        .iter()
        .find(|(_, o)| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(
        budget.1["spec"]["selector"]["matchLabels"],
        deployment.1["spec"]["selector"]["matchLabels"]
    );

    // The paths the probes ask answer as the probes expect, from the daemon the Deployment's
    // flags start (on a loopback port, with probes of the test's own).
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &[("db", closed_port())]);
    let daemon = Daemon::start_with(
        dir.path(),
        &["--drain-delay", "5s", "--shutdown-grace", "10s"],
    );
    for (path, status) in [("/startupz", 200), ("/livez", 200), ("/metrics", 200)] {
        assert_eq!(daemon.get(path).await.status().as_u16(), status, "{path}");
    }
    // DOWN target, no readiness policy: not ready, and says so.
    daemon.wait_states(&[("db", "DOWN")]).await;
    assert_eq!(daemon.get("/readyz").await.status().as_u16(), 503);
}
