//! `probe-engine import gatus` end to end, through the real binary: a team's Gatus config (the
//! fixture) comes out in order and passes `check`, with one exact line on stderr for each thing
//! it could not express (`--strict` then exits 1), and bad input exits 2 with a located error.
//! Then a Gatus config of conditions that hold and conditions that do not, against real servers
//! on 127.0.0.1 (HTTP, TCP, UDP, TLS, dnsmasq), imported and run by the daemon: each target
//! reaches the verdict Gatus's documentation gives its condition.

mod support;

#[path = "../../probe/tests/support/dns.rs"]
mod dns;
#[path = "../../probe/tests/support/pki.rs"]
mod pki;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use support::{BIN, Daemon, closed_port};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/gatus/config.yaml"
);

/// Runs `probe-engine import gatus ARGS FILE` in `dir`.
fn import(dir: &Path, args: &[&str], file: &str) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(["import", "gatus"])
        .args(args)
        .arg(file)
        .output()
        .expect("run probe-engine import")
}

/// Runs `probe-engine check` on `file`, with the variable the fixture's headers name.
fn check(file: &Path) -> Output {
    Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(file)
        .env("ORDERS_TOKEN", "t0ken")
        .output()
        .expect("run probe-engine check")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The fixture, copied to `dir` as `config.yaml` so that messages name it so.
fn fixture(dir: &Path) {
    std::fs::copy(FIXTURE, dir.join("config.yaml")).unwrap();
}

#[test]
fn a_gatus_config_imports_in_order_and_passes_check_with_a_line_for_each_loss() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = import(dir.path(), &[], "config.yaml");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    let imported = dir.path().join("imported.yaml");
    std::fs::write(&imported, &yaml).unwrap();
    let checked = check(&imported);
    assert!(
        checked.status.success(),
        "{}\n{yaml}",
        text(&checked.stdout) + &text(&checked.stderr)
    );
    assert!(
        text(&checked.stdout).starts_with(
            "ok: 10 targets (tcp 1, http 3, grpc 1, tls 2, dns 1, icmp 1, udp 1) and 2 groups"
        ),
        "{}",
        text(&checked.stdout)
    );
    let ids: Vec<&str> = yaml
        .lines()
        .filter_map(|line| line.strip_prefix("- id: "))
        .collect();
    assert_eq!(
        ids,
        [
            "core.frontend",
            "core.orders-api",
            "core-legacy.orders-api",
            "redis",
            "syslog",
            "gateway",
            "ldaps",
            "mail",
            "payments",
            "resolver",
            "core",
            "core-legacy",
        ]
    );
    for expected in [
        "      body_contains: <h1>Shop</h1>\n      latency_under: 501ms\n",
        "  interval: 30s\n  rise: 3\n  fall: 5\n",
        "        $.data.status: UP\n        $.data.mode:\n          ne: readonly\n",
        "        $.data.replicas:\n          len:\n            ge: 2\n",
        "        $.errors:\n          exists: false\n",
        "          matches: (?s)^2\\..*$\n",
        "          any:\n          - eu-west-1\n          - eu-central-1\n",
        "        $.data.queue:\n          lt: 100\n",
        "      status:\n      - 200-203\n      - 205-299\n      - 3xx\n      - 4xx\n      - 5xx\n",
        "    expires_within: 14days\n",
        "    starttls: smtp\n",
        "    expect:\n      rcode: NOERROR\n      answers:\n      - \"10.0.0.8\"\n",
        "  webhooks:\n  - name: custom\n    url: http://127.0.0.1:8099/hook\n",
    ] {
        assert!(yaml.contains(expected), "{expected:?} not in\n{yaml}");
    }
    let notes = text(&out.stderr);
    let expected = [
        r#"config.yaml:8:3: alerting: custom: cannot be expressed: it is the webhook "custom", which posts the alert as JSON (labels, annotations, status): the method, the body and its placeholders are not kept"#,
        r#"config.yaml:15:3: alerting: slack: cannot be expressed: alerts go to Alertmanager and webhooks: add an alerts.alertmanager section whose route has this receiver"#,
        r#"config.yaml:43:7: endpoint "Orders API" (group "core"): client.dns-resolver: cannot be expressed: names are resolved by the daemon's one resolver (the resolver section)"#,
        r#"config.yaml:54:9: endpoint "Orders API" (group "core"): condition "[IP] == 10.0.0.8": cannot be expressed: no condition on the address a name resolved to"#,
        r#"config.yaml:60:9: endpoint "Orders API" (group "core"): alerts[0].send-on-resolved: cannot be expressed: a resolved alert is always sent"#,
        r#"config.yaml:61:9: endpoint "Orders API" (group "core"): alerts[1]: cannot be expressed: a target has one pair of thresholds (fall, rise): the first alert's are used"#,
        r#"config.yaml:70:9: endpoint "Orders API" (group "core-legacy"): condition "[CERTIFICATE_EXPIRATION] > 48h": cannot be expressed: an http target has no certificate condition: add a tls target for its host"#,
        r#"config.yaml:72:7: endpoint "Orders API" (group "core-legacy"): ui.hide-url: cannot be expressed: a display option of Gatus's dashboard"#,
        r#"config.yaml:80:9: endpoint "redis": condition "[RESPONSE_TIME] < 50": cannot be expressed: a TCP or UDP target has no latency condition"#,
        r#"config.yaml:88:5: endpoint "gateway": client.timeout: cannot be expressed: a check must end before the next is due: timeout 10s is not below interval 10s, so it is 5s"#,
        r#"config.yaml:93:9: endpoint "gateway": condition "[RESPONSE_TIME] < 50": cannot be expressed: an ICMP target only degrades on latency: a slower reply is DEGRADED, not DOWN"#,
        r#"config.yaml:110:19: endpoint "mail": maintenance-windows.timezone: cannot be expressed: windows are in UTC, and "Europe/Berlin" may change its offset with daylight saving time: the window was left out"#,
        r#"config.yaml:135:10: endpoint "shell": url: cannot be expressed: probe-engine has no ssh probe"#,
        r#"config.yaml:143:5: external endpoint "nightly-backup": external-endpoints: cannot be expressed: its results are pushed to Gatus; targets here are probed"#,
    ];
    assert_eq!(notes.lines().collect::<Vec<_>>(), expected, "{notes}");

    // The same, strictly: the same output, and exit 1 because something was lost.
    let strict = import(dir.path(), &["--strict"], "config.yaml");
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(text(&strict.stdout), yaml);
    assert_eq!(text(&strict.stderr), notes);
}

#[test]
fn a_config_that_loses_nothing_passes_strictly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("plain.yaml"),
        "endpoints:\n  - name: web\n    url: http://127.0.0.1:8080/\n    conditions: [\"[STATUS] == 200\"]\n",
    )
    .unwrap();
    let out = import(dir.path(), &["--strict"], "plain.yaml");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn bad_input_exits_2_with_a_located_error() {
    let dir = tempfile::tempdir().unwrap();
    for (name, yaml, error) in [
        (
            "syntax.yaml",
            "endpoints:\n  - name: [web\n",
            "syntax.yaml:2:11: invalid YAML: unclosed bracket",
        ),
        (
            "typo.yaml",
            "endpoints:\n  - name: web\n    url: http://127.0.0.1/\n    conditons: [\"[STATUS] == 200\"]\n",
            "typo.yaml:4:5: unknown field \"conditons\" in endpoint, did you mean \"conditions\"?",
        ),
        (
            "condition.yaml",
            "endpoints:\n  - name: web\n    url: http://127.0.0.1/\n    conditions:\n      - \"[STATUSS] == 200\"\n",
            "condition.yaml:5:9: invalid condition \"[STATUSS] == 200\": unknown placeholder [STATUSS], did you mean [STATUS]?",
        ),
        (
            "interval.yaml",
            "endpoints:\n  - name: web\n    url: http://127.0.0.1/\n    interval: 5 minutes\n",
            "interval.yaml:4:15: invalid duration \"5 minutes\"",
        ),
        (
            "scheme.yaml",
            "endpoints:\n  - name: web\n    url: gopher://127.0.0.1/\n",
            "scheme.yaml:3:10: unknown scheme \"gopher\" in url",
        ),
    ] {
        std::fs::write(dir.path().join(name), yaml).unwrap();
        let out = import(dir.path(), &[], name);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "", "{name}");
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with(error), "{name}: {stderr}");
    }
    let out = import(dir.path(), &[], "missing.yaml");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("missing.yaml: cannot read:"),
        "{}",
        text(&out.stderr)
    );
}

/// What the HTTP fixture answers: a JSON health document, a 503, a slow reply, a page, and
/// the alerts' webhook.
async fn http_server() -> SocketAddr {
    use axum::routing::{get, post};
    let app = axum::Router::new()
        .route(
            "/ok",
            get(|| async {
                axum::Json(serde_json::json!({
                    "data": {"status": "UP", "items": [1, 2, 3]},
                    "name": "john.doe",
                    "id": 2,
                }))
            }),
        )
        .route(
            "/down",
            get(|| async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(350)).await;
                "slow"
            }),
        )
        .route(
            "/html",
            get(|| async { "<html><h1>Example Domain</h1></html>\n" }),
        )
        .route("/hook", post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A TCP server that answers whatever it is sent with `reply`.
fn tcp_server(reply: &'static [u8]) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut buf = [0; 64];
            if stream.read(&mut buf).is_ok() {
                let _ = stream.write_all(reply);
            }
        }
    });
    addr
}

/// A UDP echo server.
fn udp_echo() -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], peer);
        }
    });
    addr
}

/// A TLS server on 127.0.0.1 presenting `leaf`.
async fn tls_server(leaf: &pki::Leaf) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    pki::serve(listener, leaf.server());
    addr
}

/// One Gatus endpoint, checked twice a second, alerting through the `custom` provider (whose
/// default alert sets both thresholds to 1, so that one result decides).
fn endpoint(name: &str, url: &str, extra: &str, conditions: &[&str]) -> String {
    let conditions: Vec<String> = conditions.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "  - name: {name}\n    url: \"{url}\"\n    interval: 500ms\n    client: {{ timeout: 400ms, insecure: true }}\n{extra}    conditions: [{}]\n    alerts: [{{ type: custom }}]\n",
        conditions.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_conditions_reach_the_verdicts_gatus_gives_them() {
    let http = http_server().await;
    let pong = tcp_server(b"+PONG\r\n");
    let nope = tcp_server(b"-ERR\r\n");
    let closed = closed_port();
    let echo = udp_echo();
    let ca = pki::Ca::new("gatus import test CA", 365);
    let good = tls_server(&ca.leaf(&["127.0.0.1"], -1, 90)).await;
    let soon = tls_server(&ca.leaf(&["127.0.0.1"], -60, 5)).await;
    let dns = dns::DnsServer::start(&[("orders.test", "10.0.0.5".parse().unwrap())]);
    let web = |path: &str| format!("http://{http}{path}");
    let ping = "    body: \"PING\\r\\n\"\n";
    let udp_body = "    body: ping\n";
    let query = |name: &str| format!("    dns: {{ query-name: {name}, query-type: A }}\n");
    let mut gatus = format!(
        "alerting:\n  custom:\n    url: \"{}\"\n    default-alert: {{ failure-threshold: 1, success-threshold: 1 }}\nendpoints:\n",
        web("/hook")
    );
    // Each condition that holds, then the same placeholder or function where it does not.
    let endpoints = [
        endpoint("status", &web("/ok"), "", &["[STATUS] == 200"]),
        endpoint("status-not", &web("/down"), "", &["[STATUS] < 300"]),
        endpoint("fast", &web("/ok"), "", &["[RESPONSE_TIME] < 300"]),
        endpoint("slow", &web("/slow"), "", &["[RESPONSE_TIME] < 300"]),
        endpoint("json", &web("/ok"), "", &["[BODY].data.status == UP"]),
        endpoint("json-not", &web("/ok"), "", &["[BODY].data.status == DOWN"]),
        endpoint("len", &web("/ok"), "", &["len([BODY].data.items) < 5"]),
        endpoint("len-not", &web("/ok"), "", &["len([BODY].data.items) > 5"]),
        endpoint("has", &web("/ok"), "", &["has([BODY].errors) == false"]),
        endpoint("has-not", &web("/ok"), "", &["has([BODY].data) == false"]),
        endpoint("pat", &web("/ok"), "", &["[BODY].name == pat(john*)"]),
        endpoint("pat-not", &web("/ok"), "", &["[BODY].name == pat(bob*)"]),
        endpoint("any", &web("/ok"), "", &["[BODY].id == any(1, 2)"]),
        endpoint("any-not", &web("/ok"), "", &["[BODY].id == any(3, 4)"]),
        endpoint(
            "body",
            &web("/html"),
            "",
            &["[BODY] == pat(*<h1>Example Domain</h1>*)"],
        ),
        endpoint(
            "body-not",
            &web("/ok"),
            "",
            &["[BODY] == pat(*<h1>Example Domain</h1>*)"],
        ),
        endpoint(
            "tcp",
            &format!("tcp://{pong}"),
            ping,
            &["[CONNECTED] == true", "[BODY] == pat(*PONG*)"],
        ),
        endpoint(
            "tcp-not",
            &format!("tcp://{nope}"),
            ping,
            &["[CONNECTED] == true", "[BODY] == pat(*PONG*)"],
        ),
        endpoint(
            "tcp-closed",
            &format!("tcp://{closed}"),
            "",
            &["[CONNECTED] == true"],
        ),
        endpoint(
            "udp",
            &format!("udp://{echo}"),
            udp_body,
            &["[BODY] == ping"],
        ),
        endpoint(
            "udp-not",
            &format!("udp://{echo}"),
            udp_body,
            &["[BODY] == pong"],
        ),
        endpoint(
            "tls",
            &format!("tls://{good}"),
            "",
            &["[CONNECTED] == true", "[CERTIFICATE_EXPIRATION] > 240h"],
        ),
        endpoint(
            "tls-soon",
            &format!("tls://{soon}"),
            "",
            &["[CERTIFICATE_EXPIRATION] > 240h"],
        ),
        endpoint(
            "tls-closed",
            &format!("tls://{closed}"),
            "",
            &["[CONNECTED] == true"],
        ),
        endpoint(
            "dns",
            &dns.addr.to_string(),
            &query("orders.test"),
            &["[DNS_RCODE] == NOERROR", "[BODY] == 10.0.0.5"],
        ),
        endpoint(
            "dns-not",
            &dns.addr.to_string(),
            &query("orders.test"),
            &["[BODY] == 10.0.0.6"],
        ),
        endpoint(
            "dns-nx",
            &dns.addr.to_string(),
            &query("missing.test"),
            &["[DNS_RCODE] == NXDOMAIN"],
        ),
        endpoint(
            "dns-nx-not",
            &dns.addr.to_string(),
            &query("orders.test"),
            &["[DNS_RCODE] == NXDOMAIN"],
        ),
    ];
    for endpoint in &endpoints {
        gatus.push_str(endpoint);
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gatus.yaml"), &gatus).unwrap();
    let out = import(dir.path(), &[], "gatus.yaml");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let probes = dir.path().join("probes.yaml");
    std::fs::write(&probes, &out.stdout).unwrap();
    // The certificate condition degrades, so its alert rule takes DEGRADED in.
    let yaml = text(&out.stdout);
    let soon_rule = yaml.split("- id: tls-soon\n").nth(1).unwrap_or_default();
    assert!(
        soon_rule.contains("  alert:\n    \"on\":\n    - DOWN\n    - DEGRADED\n"),
        "{yaml}"
    );

    let daemon = Daemon::start(&probes);
    daemon
        .wait_states(&[
            ("status", "UP"),
            ("status-not", "DOWN"),
            ("fast", "UP"),
            ("slow", "DOWN"),
            ("json", "UP"),
            ("json-not", "DOWN"),
            ("len", "UP"),
            ("len-not", "DOWN"),
            ("has", "UP"),
            ("has-not", "DOWN"),
            ("pat", "UP"),
            ("pat-not", "DOWN"),
            ("any", "UP"),
            ("any-not", "DOWN"),
            ("body", "UP"),
            ("body-not", "DOWN"),
            ("tcp", "UP"),
            ("tcp-not", "DOWN"),
            ("tcp-closed", "DOWN"),
            ("udp", "UP"),
            ("udp-not", "DOWN"),
            ("tls", "UP"),
            // A certificate close to its end is DEGRADED here, and alerts as Gatus's failure.
            ("tls-soon", "DEGRADED"),
            ("tls-closed", "DOWN"),
            ("dns", "UP"),
            ("dns-not", "DOWN"),
            ("dns-nx", "UP"),
            ("dns-nx-not", "DOWN"),
        ])
        .await;
    let list = daemon.list().await;
    let slow = list.get("slow").last_failure.clone().expect("slow failed");
    assert_eq!(slow.reason, "assertion");
    assert!(slow.detail.starts_with("latency "), "{}", slow.detail);
    assert!(
        slow.detail.ends_with("ms, expected under 300ms"),
        "{}",
        slow.detail
    );
    let len = list
        .get("len-not")
        .last_failure
        .clone()
        .expect("len-not failed");
    assert_eq!(len.detail, "$.data.items has length 3, expected length > 5");
}
