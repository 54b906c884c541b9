//! The Alertmanager the alert tests send to: started per test on a free loopback port, it takes
//! alerts through its v2 API and lists them back, as it does for Prometheus.

mod support;

use probe_engine::testing::Alertmanager;
use serde_json::{Value, json};

#[tokio::test]
async fn alertmanager_takes_an_alert_and_lists_it() {
    let am = Alertmanager::start().expect("alertmanager");
    let alert = json!([{
        "labels": { "alertname": "ProbeDown", "target": "orders-db", "severity": "page" },
        "annotations": { "summary": "orders-db is DOWN" },
        "startsAt": "2026-12-01T00:00:00Z",
        "generatorURL": "http://127.0.0.1:9464/v1/targets/orders-db"
    }]);
    let response = support::client()
        .post(format!("{}/api/v2/alerts", am.url()))
        .json(&alert)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", am.log());
    let (status, body) = am.get("/api/v2/alerts").unwrap();
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&body).unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["labels"]["target"], "orders-db");
    assert_eq!(listed[0]["status"]["state"], "active");
}

/// What a webhook was posted: each body, with its `Authorization` header.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(Option<String>, Value)>>>;

/// A webhook receiver on loopback.
struct Hook {
    addr: std::net::SocketAddr,
    seen: Seen,
}

impl Hook {
    async fn start() -> Self {
        use axum::routing::post;
        let seen: Seen = Default::default();
        let kept = seen.clone();
        let app = axum::Router::new().route(
            "/hook",
            post(
                move |headers: axum::http::HeaderMap, body: axum::Json<Value>| {
                    let kept = kept.clone();
                    async move {
                        let auth = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        kept.lock().unwrap().push((auth, body.0));
                        "ok"
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, seen }
    }

    fn seen(&self) -> Vec<(Option<String>, Value)> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `ok` holds for what it was posted.
    async fn wait(&self, what: &str, ok: impl Fn(&[(Option<String>, Value)]) -> bool) {
        let deadline = tokio::time::Instant::now() + support::WAIT;
        while !ok(&self.seen()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the webhook never got {what}: {:?}",
                self.seen()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// Alertmanager's active alerts.
fn active(am: &Alertmanager) -> Vec<Value> {
    let (_, body) = am
        .get("/api/v2/alerts?active=true&silenced=false&inhibited=false")
        .unwrap();
    serde_json::from_str::<Value>(&body)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"]["state"] == "active")
        .cloned()
        .collect()
}

async fn wait_am(am: &Alertmanager, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        let alerts = active(am);
        if ok(&alerts) {
            return alerts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Alertmanager never had {what}: {alerts:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn alerts_section(am: &Alertmanager, hook: &Hook) -> String {
    format!(
        "alerts:\n  alertmanager: {{urls: [\"{}\"], resend: 1s}}\n  webhooks:\n    - {{name: ops, url: \"http://{}/hook\", headers: {{Authorization: \"Bearer ${{HOOK_TOKEN}}\"}}}}\n  defaults: {{on: [DOWN], for: 0s, severity: page, labels: {{team: core}}}}\ndefaults: {{interval: 300ms, timeout: 200ms, rise: 1, fall: 1, flap: false}}\n",
        am.url(),
        hook.addr
    )
}

/// An Alertmanager, a webhook receiver and the daemon on a config of the alerts section,
/// `before` it and the `targets` after it, with `HOOK_TOKEN` set to `token`.
async fn alerting(
    before: &str,
    targets: &str,
    extra: &[&str],
    token: &str,
) -> (Alertmanager, Hook, support::Daemon, tempfile::TempDir) {
    let am = Alertmanager::start().expect("alertmanager");
    let hook = Hook::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("probes.yaml"),
        format!("{before}{}targets:\n{targets}", alerts_section(&am, &hook)),
    )
    .unwrap();
    let daemon = support::Daemon::start_env(dir.path(), extra, &[("HOOK_TOKEN", token)]);
    (am, hook, daemon, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_target_fires_to_alertmanager_and_the_webhook_and_resolves() {
    let db = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = db.local_addr().unwrap();
    let (am, hook, daemon, _dir) = alerting(
        "",
        &format!("  - id: db\n    tcp: {{address: \"{addr}\"}}\n"),
        &[],
        "hook-Secret-1",
    )
    .await;
    daemon.wait_states(&[("db", "UP")]).await;
    assert!(active(&am).is_empty());

    drop(db);
    let alerts = wait_am(&am, "ProbeDown for db", |a| a.len() == 1).await;
    let labels = &alerts[0]["labels"];
    assert_eq!(labels["alertname"], "ProbeDown");
    assert_eq!(labels["target"], "db");
    assert_eq!(labels["severity"], "page");
    assert_eq!(labels["team"], "core");
    assert_eq!(labels["root_cause"], "db");
    assert_eq!(alerts[0]["annotations"]["reason"], "refused");
    assert!(
        alerts[0]["generatorURL"]
            .as_str()
            .unwrap()
            .ends_with("/v1/targets/db")
    );
    hook.wait("a firing notification", |seen| !seen.is_empty())
        .await;
    let (auth, firing) = hook.seen()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer hook-Secret-1"));
    assert_eq!(firing["status"], "firing");
    assert_eq!(firing["cause"], "db");
    let listed: Value = daemon.get("/v1/alerts").await.json().await.unwrap();
    assert_eq!(listed["alerts"][0]["fingerprint"], firing["fingerprint"]);

    // It comes back: resolved, to both.
    let _db = std::net::TcpListener::bind(addr).unwrap();
    hook.wait("a resolved notification", |seen| seen.len() >= 2)
        .await;
    let (_, resolved) = hook.seen()[1].clone();
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["fingerprint"], firing["fingerprint"]);
    assert!(resolved["endsAt"].is_string());
    wait_am(&am, "the alert resolved", |a| a.is_empty()).await;
    let listed: Value = daemon.get("/v1/alerts").await.json().await.unwrap();
    assert_eq!(listed["alerts"], serde_json::json!([]));
    // The header's secret is in no log line.
    assert!(
        daemon
            .lines_so_far()
            .iter()
            .all(|l| !l.contains("hook-Secret-1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_database_pages_once_for_what_it_takes_down() {
    let db = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let db_addr = db.local_addr().unwrap();
    drop(db);
    let orders = support::closed_port();
    let billing = support::closed_port();
    let targets = format!(
        "  - id: db\n    tcp: {{address: \"{db_addr}\"}}\n  - id: orders\n    tcp: {{address: \"{orders}\"}}\n    depends_on: [{{target: db, critical: true}}]\n    alert: {{for: 1s}}\n  - id: billing\n    tcp: {{address: \"{billing}\"}}\n    depends_on: [{{target: db, critical: true}}]\n    alert: {{for: 1s, labels: {{team: billing}}}}\n  - id: shop\n    kind: group\n    depends_on: [{{target: db, critical: true}}, {{target: orders}}]\n"
    );
    // The dependents wait a second before they page: the database's first verdict, which
    // makes them `dependency_down`, comes within an interval of theirs.
    let (am, hook, daemon, _dir) = alerting("", &targets, &[], "t").await;
    daemon
        .wait_states(&[("db", "DOWN"), ("orders", "DOWN"), ("billing", "DOWN")])
        .await;
    let alerts = wait_am(&am, "an alert", |a| !a.is_empty()).await;
    hook.wait("a notification", |seen| !seen.is_empty()).await;
    // Settled: still one alert, for the root, listing what it takes down.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let alerts_now = active(&am);
    assert_eq!(alerts_now.len(), 1, "{alerts_now:?}");
    assert_eq!(alerts[0]["labels"]["target"], "db");
    let seen = hook.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].1["impacted"],
        serde_json::json!(["billing", "orders", "shop"])
    );
    assert_eq!(
        alerts_now[0]["annotations"]["impacted"],
        "billing, orders, shop"
    );

    // The database recovers while orders is still DOWN: db resolves, orders fires then.
    let _db = std::net::TcpListener::bind(db_addr).unwrap();
    hook.wait("db resolved and orders and billing firing", |seen| {
        let resolved = seen
            .iter()
            .any(|(_, n)| n["status"] == "resolved" && n["cause"] == "db");
        let fired: Vec<&str> = seen
            .iter()
            .filter(|(_, n)| n["status"] == "firing")
            .filter_map(|(_, n)| n["cause"].as_str())
            .collect();
        resolved && fired.contains(&"orders") && fired.contains(&"billing")
    })
    .await;
    let billing = wait_am(&am, "billing's own alert", |a| {
        a.iter().any(|x| x["labels"]["target"] == "billing")
    })
    .await;
    let billing = billing
        .iter()
        .find(|x| x["labels"]["target"] == "billing")
        .unwrap();
    // Its own rule over the defaults: its label wins, the defaults' severity stays.
    assert_eq!(billing["labels"]["team"], "billing");
    assert_eq!(billing["labels"]["severity"], "page");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_target_raises_one_alert_not_a_series() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (am, hook, daemon, _dir) = alerting(
        "",
        &format!(
            "  - id: web\n    tcp: {{address: \"{addr}\"}}\n    flap: {{transitions: 2, window: 1m, min_stable: 1m}}\n"
        ),
        &[],
        "t",
    )
    .await;
    daemon.wait_states(&[("web", "UP")]).await;
    // Down and up until the engine holds it as flapping.
    let mut up = Some(listener);
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        let detail = daemon.detail("web").await;
        if detail.target.flapping {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never flapping");
        let want = if up.is_some() { "DOWN" } else { "UP" };
        up = match up.take() {
            Some(listener) => {
                drop(listener);
                None
            }
            None => Some(std::net::TcpListener::bind(addr).unwrap()),
        };
        daemon
            .wait_target("web", want, |t| t.state == want || t.flapping)
            .await;
    }
    hook.wait("ProbeFlapping", |seen| {
        seen.iter()
            .any(|(_, n)| n["labels"]["alertname"] == "ProbeFlapping")
    })
    .await;
    let before = hook.seen().len();
    // It goes on changing while flapping: nothing more is sent.
    for _ in 0..3 {
        up = match up.take() {
            Some(listener) => {
                drop(listener);
                None
            }
            None => Some(std::net::TcpListener::bind(addr).unwrap()),
        };
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    }
    assert!(daemon.detail("web").await.target.flapping);
    let seen = hook.seen();
    assert_eq!(seen.len(), before, "{seen:?}");
    let flapping: Vec<_> = seen
        .iter()
        .filter(|(_, n)| n["labels"]["alertname"] == "ProbeFlapping")
        .collect();
    assert_eq!(flapping.len(), 1);
    assert_eq!(flapping[0].1["status"], "firing");
    let active = active(&am);
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["labels"]["alertname"], "ProbeFlapping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_lease_is_lost_sends_nothing_until_it_is_back() {
    let mut etcd = probe_etcd::testing::TestEtcd::start().await.expect("etcd");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (am, hook, mut daemon, _dir) = alerting(
        &format!(
            "cluster: {{etcd: {{endpoints: [\"{}\"]}}, lease_ttl: 2s}}\n",
            etcd.endpoint()
        ),
        &format!("  - id: db\n    tcp: {{address: \"{addr}\"}}\n"),
        &["--member", "a"],
        "t",
    )
    .await;
    daemon
        .wait_target("db", "UP here", |t| {
            t.state == "UP" && t.owner.as_deref() == Some("a")
        })
        .await;
    // etcd goes: once the lease is lost, the target fails, and nobody is told.
    etcd.kill();
    daemon.wait_log("cluster lease lost: this member is out of the set");
    drop(listener);
    daemon
        .wait_target("db", "DOWN", |t| t.state == "DOWN")
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(hook.seen().is_empty(), "{:?}", hook.seen());
    assert!(active(&am).is_empty());
    // A member again: the alert goes out.
    etcd.restart().await.unwrap();
    hook.wait("the alert, once a member again", |seen| {
        seen.iter()
            .any(|(_, n)| n["status"] == "firing" && n["cause"] == "db")
    })
    .await;
    wait_am(&am, "ProbeDown", |a| a.len() == 1).await;
}
