//! `GET /probe` on the real binary, held side by side with blackbox_exporter's on the same
//! `blackbox.yml` and the same servers: the same success for every fixture, the same certificate
//! series; and the endpoint's guards: unknown modules and missing targets (400), the allow list
//! (403), the ad-hoc bound (429), the read token, and a reload.

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use probe_testkit::{OpensslServer, blackbox_or_skip, openssl};
use support::Daemon;
use support::prom::{Metrics, assert_same_probe_series};

/// An HTTP server on 127.0.0.1: `/ok` 200 with a version in its body, `/fail` 503, `/redirect`
/// a 302 to `/ok`, `/plain` 200 without the version, `/static` 200 with a `Last-Modified`.
async fn http_server() -> SocketAddr {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/ok", get(|| async { "version: 1.2.3\n" }))
        .route(
            "/fail",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "down\n") }),
        )
        .route(
            "/redirect",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/ok")]).into_response() }),
        )
        .route("/plain", get(|| async { "nothing to see\n" }))
        .route(
            "/static",
            get(|| async {
                (
                    [(header::LAST_MODIFIED, "Sun, 06 Dec 2026 08:00:00 GMT")],
                    "a file\n",
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A line server: greets with `220 ready`, answers `PING` with `PONG`, anything else with `ERR`.
fn line_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let _ = writer.write_all(b"220 ready\r\n");
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let answer: &[u8] = if line.trim() == "PING" {
                        b"PONG\r\n"
                    } else {
                        b"ERR\r\n"
                    };
                    if writer.write_all(answer).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A server that accepts and never answers; each accepted connection is announced on `accepted`.
fn silent_server(accepted: std::sync::mpsc::Sender<()>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
            let _ = accepted.send(());
        }
    });
    addr
}

const BLACKBOX_YML: &str = r#"modules:
  http_2xx:
    prober: http
    timeout: 5s
    http:
      preferred_ip_protocol: ip4
  http_version:
    prober: http
    timeout: 5s
    http:
      preferred_ip_protocol: ip4
      fail_if_body_not_matches_regexp: ["version: \\d+\\.\\d+"]
  tcp_pong:
    prober: tcp
    timeout: 5s
    tcp:
      preferred_ip_protocol: ip4
      query_response:
        - expect: "^220"
        - send: "PING"
        - expect: "^PONG"
  tcp_wrong:
    prober: tcp
    timeout: 2s
    tcp:
      preferred_ip_protocol: ip4
      query_response:
        - expect: "^220"
        - send: "HELLO"
        - expect: "^PONG"
  tls_self:
    prober: tcp
    timeout: 5s
    tcp:
      preferred_ip_protocol: ip4
      tls: true
      tls_config:
        ca_file: self.pem
        server_name: localhost
  icmp:
    prober: icmp
    timeout: 5s
    icmp:
      preferred_ip_protocol: ip4
  grpc_payments:
    prober: grpc
    timeout: 5s
    grpc:
      service: payments
      preferred_ip_protocol: ip4
  grpc_ledger:
    prober: grpc
    timeout: 5s
    grpc:
      service: ledger
      preferred_ip_protocol: ip4
  grpc_unknown:
    prober: grpc
    timeout: 5s
    grpc:
      service: billing
      preferred_ip_protocol: ip4
"#;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_answers_as_blackbox_exporter_does_on_the_same_servers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if openssl(d, &["version"]).is_err() {
        probe_testkit::skipped_outside_ci("openssl is not installed");
        return;
    }
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
            "-days",
            "30",
            "-subj",
            "/C=US/O=Acme/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
    )
    .unwrap();
    // `openssl x509 -fingerprint -sha256`'s, written as the exporter writes it.
    let fingerprint = std::process::Command::new("openssl")
        .args([
            "x509",
            "-in",
            "self.pem",
            "-noout",
            "-fingerprint",
            "-sha256",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    let fingerprint = String::from_utf8_lossy(&fingerprint.stdout)
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_ascii_lowercase();
    let tls = OpensslServer::start(&d.join("self.pem"), &d.join("self.key"), None, &[]).unwrap();
    let http = http_server().await;
    let line = line_server();
    let Some(grpc) = support::peers::Grpcio::start() else {
        return;
    };
    write(d, "blackbox.yml", BLACKBOX_YML);
    let Some(blackbox) = blackbox_or_skip(&BLACKBOX_YML.replace(
        "ca_file: self.pem",
        &format!("ca_file: {}/self.pem", d.display()),
    )) else {
        return;
    };
    write(d, "probes.yaml", "targets: []\n");
    let config = d.join("blackbox.yml");
    let daemon = Daemon::start_with(
        &d.join("probes.yaml"),
        &["--blackbox-config", config.to_str().unwrap()],
    );

    let cases = [
        ("http_2xx", format!("http://{http}/ok"), true),
        ("http_2xx", format!("http://{http}/fail"), false),
        ("http_2xx", format!("http://{http}/redirect"), true),
        ("http_2xx", format!("http://{http}/static"), true),
        ("http_version", format!("http://{http}/ok"), true),
        ("http_version", format!("http://{http}/plain"), false),
        ("tcp_pong", line.to_string(), true),
        ("tcp_wrong", line.to_string(), false),
        ("tls_self", tls.addr().to_string(), true),
        ("icmp", "127.0.0.1".to_owned(), true),
        ("grpc_payments", grpc.1.to_string(), true),
        ("grpc_ledger", grpc.1.to_string(), false),
        ("grpc_unknown", grpc.1.to_string(), false),
    ];
    for (module, target, success) in &cases {
        let theirs = blackbox.probe(module, target).await.unwrap();
        assert_eq!(
            theirs.success(),
            Some(*success),
            "{module} {target}: {}",
            theirs.body
        );
        let ours = daemon
            .get(&format!("/probe?module={module}&target={target}"))
            .await;
        assert_eq!(ours.status(), 200);
        let text = ours.text().await.unwrap();
        let ours = Metrics::parse(&text);
        assert_eq!(
            ours.value("probe_success", &[]),
            if *success { 1.0 } else { 0.0 },
            "{module} {target}: {text}"
        );
        assert_eq!(ours.types["probe_success"], "gauge");
        assert!(ours.value("probe_duration_seconds", &[]) > 0.0);
        // The same families, label sets and values (timings aside) as the exporter's.
        assert_same_probe_series(&format!("{module} {target}"), &text, &theirs.body, &[]);
        if *module == "tls_self" {
            // The subject as Go writes it: attributes reversed, comma-separated.
            let info: Vec<_> = ours.series("probe_ssl_last_chain_info").collect();
            assert_eq!(info.len(), 1, "{text}");
            assert_eq!(
                info[0].labels["subject"], "CN=localhost,O=Acme,C=US",
                "{text}"
            );
            assert_eq!(info[0].labels["subjectalternative"], "localhost", "{text}");
            assert_eq!(info[0].labels["fingerprint_sha256"], fingerprint, "{text}");
            assert_eq!(
                ours.value("probe_tls_version_info", &[("version", "TLS 1.3")]),
                1.0
            );
        }
    }

    // Bad queries are refused with a reason, as the exporter refuses them.
    for (query, status, reason) in [
        (
            "/probe?module=nope&target=x",
            400,
            "Unknown module \"nope\"",
        ),
        ("/probe?module=http_2xx", 400, "Target parameter is missing"),
        (
            "/probe?module=http_2xx&target=x&color=red",
            400,
            "unknown parameter \"color\"",
        ),
    ] {
        let answer = daemon.get(query).await;
        assert_eq!(answer.status(), status, "{query}");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().starts_with(reason),
            "{query}: {body}"
        );
    }
    assert_eq!(blackbox.probe("nope", "x").await.unwrap().status, 400);

    let metrics = Metrics::parse(&daemon.get("/metrics").await.text().await.unwrap());
    assert_eq!(
        metrics.value(
            "probe_adhoc_probes_total",
            &[("module", "http_2xx"), ("result", "success")]
        ),
        3.0
    );
    assert_eq!(
        metrics.value(
            "probe_adhoc_probes_total",
            &[("module", "unknown"), ("result", "invalid")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_guarded_by_the_allow_list_the_bound_and_the_read_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "blackbox.yml",
        "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 5s\n  slow_http:\n    prober: http\n    \
         timeout: 5s\n",
    );
    write(d, "probes.yaml", "targets: []\n");
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    let silent = silent_server(accepted_tx);
    let daemon = Daemon::start_with(
        &d.join("probes.yaml"),
        &[
            "--blackbox-config",
            d.join("blackbox.yml").to_str().unwrap(),
            "--blackbox-allow",
            "127.0.0.0/8,*.allowed.test",
            "--blackbox-max-in-flight",
            "1",
            "--read-token",
            "reader",
        ],
    );
    let get = |path: String| {
        daemon
            .http
            .get(daemon.url(&path))
            .bearer_auth("reader")
            .send()
    };
    // Without the token, nothing.
    assert_eq!(
        daemon
            .get("/probe?module=tcp_connect&target=127.0.0.1:1")
            .await
            .status(),
        401
    );
    // Outside the allow list: 403, naming the host.
    let answer = get("/probe?module=tcp_connect&target=10.1.2.3:80".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("\"10.1.2.3\""),
        "{body}"
    );
    let answer = get("/probe?module=tcp_connect&target=db.elsewhere.test:5432".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    // Inside it: it runs (and fails: nothing listens on port 1).
    let answer = get("/probe?module=tcp_connect&target=127.0.0.1:1".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.text().await.unwrap().contains("probe_success 0"));

    // One probe held by a server that never answers takes the one slot: the next is a 429.
    let held = tokio::spawn(get(format!(
        "/probe?module=slow_http&target=http://{silent}/"
    )));
    tokio::task::spawn_blocking(move || accepted.recv().unwrap())
        .await
        .unwrap();
    let answer = get("/probe?module=tcp_connect&target=127.0.0.1:1".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("--blackbox-max-in-flight"),
        "{body}"
    );
    held.abort();

    // A reload re-reads the file; an invalid one keeps the modules in force.
    write(
        d,
        "blackbox.yml",
        "modules:\n  tcp_connect:\n    prober: smtp\n",
    );
    daemon.signal("-HUP");
    daemon.wait_logged(
        "the blackbox config is invalid; the modules in force stay",
        1,
    );
    let answer = get("/probe?module=slow_http&target=http://127.0.0.1:1/".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    write(d, "blackbox.yml", "modules:\n  renamed:\n    prober: tcp\n");
    daemon.signal("-HUP");
    daemon.wait_logged("blackbox modules reloaded", 1);
    let answer = get("/probe?module=renamed&target=127.0.0.1:1".to_owned())
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        get("/probe?module=tcp_connect&target=127.0.0.1:1".to_owned())
            .await
            .unwrap()
            .status(),
        400
    );
}

#[test]
fn a_blackbox_config_the_daemon_cannot_run_refuses_the_start_located() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "blackbox.yml",
        "modules:\n  ok:\n    prober: tcp\n  sock:\n    prober: unix\n",
    );
    write(d, "probes.yaml", "targets: []\n");
    let blackbox = d.join("blackbox.yml");
    let output = support::refused_start(
        &d.join("probes.yaml"),
        &["--blackbox-config", blackbox.to_str().unwrap()],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:5:", d.join("blackbox.yml").display())),
        "{stderr}"
    );
    assert!(stderr.contains("unix"), "{stderr}");
}

/// The scrape job for `/probe` in `docs/api.md`, as Prometheus users write it for blackbox_exporter:
/// `TARGETS` and `DAEMON` are filled in by the test.
const SCRAPE_JOB: &str = r#"  - job_name: blackbox
    metrics_path: /probe
    params:
      module: [tcp_connect]
    static_configs:
      - targets: [TARGETS]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: DAEMON
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_probe_through_the_documented_relabelling() {
    let api = include_str!("../../../docs/api.md");
    assert!(
        api.contains(
            &SCRAPE_JOB
                .replace("TARGETS", "db.internal:5432, cache.internal:6379")
                .replace("DAEMON", "127.0.0.1:9464   # the daemon's API")
        ),
        "docs/api.md's scrape job differs from this test's"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "blackbox.yml",
        "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 1s\n    tcp:\n      \
         preferred_ip_protocol: ip4\n",
    );
    write(d, "probes.yaml", "targets: []\n");
    let daemon = Daemon::start_with(
        &d.join("probes.yaml"),
        &[
            "--blackbox-config",
            d.join("blackbox.yml").to_str().unwrap(),
        ],
    );
    let open = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let open_addr = open.local_addr().unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n{}",
        SCRAPE_JOB
            .replace("TARGETS", &format!("\"{open_addr}\", \"{closed}\""))
            .replace("DAEMON", &daemon.addr.to_string())
    );
    let Some(prometheus) = probe_testkit::prometheus_or_skip(&config) else {
        return;
    };
    // Prometheus scrapes on its own clock: its query API is the only signal there is.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let samples = loop {
        if let Some(samples) = prometheus.query("probe_success{job=\"blackbox\"}").await
            && samples.len() == 2
        {
            break samples;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus has no probe_success for both targets; its log:\n{}",
            prometheus.log(20)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let mut seen: Vec<(String, String)> = samples
        .iter()
        .map(|s| {
            (
                s["metric"]["instance"].as_str().unwrap().to_owned(),
                s["value"][1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let mut want = vec![
        (open_addr.to_string(), "1".to_owned()),
        (closed.to_string(), "0".to_owned()),
    ];
    want.sort();
    assert_eq!(seen, want);
    drop(open);
}
