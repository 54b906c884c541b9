//! The Alertmanager the alert tests send to: started per test on a free loopback port, it takes
//! alerts through its v2 API and lists them back, as it does for Prometheus.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use probe_testkit::Alertmanager;
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

/// A webhook receiver on loopback. While `down`, it answers 503 to everything and keeps
/// nothing.
struct Hook {
    addr: std::net::SocketAddr,
    seen: Seen,
    down: Arc<AtomicBool>,
}

impl Hook {
    async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    async fn start_on(addr: std::net::SocketAddr) -> Self {
        use axum::routing::post;
        let seen: Seen = Default::default();
        let down = Arc::new(AtomicBool::new(false));
        let (kept, refusing) = (seen.clone(), down.clone());
        let app = axum::Router::new().route(
            "/hook",
            post(
                move |headers: axum::http::HeaderMap, body: axum::Json<Value>| {
                    let (kept, refusing) = (kept.clone(), refusing.clone());
                    async move {
                        if refusing.load(Ordering::SeqCst) {
                            return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                        }
                        let auth = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        kept.lock().unwrap().push((auth, body.0));
                        axum::http::StatusCode::OK
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, seen, down }
    }

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// The notifications posted, without their headers.
    fn bodies(&self) -> Vec<Value> {
        self.seen().into_iter().map(|(_, body)| body).collect()
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

/// Alertmanager's password in every test's config (the fixture takes any).
const AM_PASSWORD: &str = "am-Secret-9";

/// The alerts section to `am` and `hook`, with `more` of its keys.
fn alerts_section(am: &Alertmanager, hook: std::net::SocketAddr, more: &str) -> String {
    format!(
        "alerts:\n  alertmanager: {{urls: [\"{}\"], resend: 1s, basic_auth: {{username: pe, password: \"${{AM_PASSWORD}}\"}}}}\n  webhooks:\n    - {{name: ops, url: \"http://{hook}/hook\", headers: {{Authorization: \"Bearer ${{HOOK_TOKEN}}\"}}}}\n  defaults: {{on: [DOWN], for: 0s, severity: page, labels: {{team: core}}}}\n{more}defaults: {{interval: 300ms, timeout: 200ms, rise: 1, fall: 1, flap: false}}\n",
        am.url(),
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
        format!(
            "{before}{}targets:\n{targets}",
            alerts_section(&am, hook.addr, "")
        ),
    )
    .unwrap();
    let daemon = support::Daemon::start_env(
        dir.path(),
        extra,
        &[("HOOK_TOKEN", token), ("AM_PASSWORD", AM_PASSWORD)],
    );
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
        "  - id: db\n    tcp: {{address: \"{db_addr}\"}}\n  - id: orders\n    tcp: {{address: \"{orders}\"}}\n    depends_on: [{{target: db, critical: true}}]\n  - id: billing\n    tcp: {{address: \"{billing}\"}}\n    depends_on: [{{target: db, critical: true}}]\n    alert: {{labels: {{team: billing}}}}\n  - id: shop\n    kind: group\n    depends_on: [{{target: db, critical: true}}, {{target: orders}}]\n"
    );
    // Every alert fires at once (`for: 0s`), and the dependents' first verdicts may come before
    // the database's: a dependent waits for its critical dependency's next result before it
    // pages, and that result makes it `dependency_down`.
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
    // The groups it is a member of.
    assert_eq!(alerts[0]["labels"]["groups"], "shop");
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
    let mut etcd = probe_testkit::etcd::TestEtcd::start().await.expect("etcd");
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

/// The notifications `hook` got for `target`, as (status, fingerprint), in order.
fn of(hook: &Hook, target: &str) -> Vec<(String, String)> {
    hook.bodies()
        .iter()
        .filter(|n| n["labels"]["target"] == target)
        .map(|n| {
            (
                n["status"].as_str().unwrap().to_owned(),
                n["fingerprint"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The daemon's config in `dir`: the alerts section (with `more` of its keys) to `am` and a
/// webhook at `hook`, and `targets`.
fn write_config(
    dir: &std::path::Path,
    am: &Alertmanager,
    hook: std::net::SocketAddr,
    more: &str,
    targets: &str,
) {
    std::fs::write(
        dir.join("probes.yaml"),
        format!("{}targets:\n{targets}", alerts_section(am, hook, more)),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_ten_seconds_then_gets_everything_in_order() {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let (_am, hook, daemon, _dir) = alerting(
        "",
        &format!(
            "  - id: a\n    tcp: {{address: \"{a_addr}\"}}\n  - id: b\n    tcp: {{address: \"{b_addr}\"}}\n"
        ),
        &[],
        "t",
    )
    .await;
    daemon.wait_states(&[("a", "UP"), ("b", "UP")]).await;
    hook.set_down(true);
    let down_since = tokio::time::Instant::now();
    // Both fail and come back while the receiver is down: four notifications wait.
    drop(a);
    drop(b);
    daemon.wait_states(&[("a", "DOWN"), ("b", "DOWN")]).await;
    daemon
        .wait_metrics("four waiting", |m| {
            m.get("probe_alert_outbox_size", &[]).unwrap_or(0.0) == 2.0
        })
        .await;
    let _a = std::net::TcpListener::bind(a_addr).unwrap();
    let _b = std::net::TcpListener::bind(b_addr).unwrap();
    daemon.wait_states(&[("a", "UP"), ("b", "UP")]).await;
    daemon
        .wait_metrics("four waiting, and refused", |m| {
            m.get("probe_alert_outbox_size", &[]).unwrap_or(0.0) == 4.0
                && m.get(
                    "probe_alert_notifications_total",
                    &[("receiver", "ops"), ("result", "failed")],
                )
                .unwrap_or(0.0)
                    >= 2.0
        })
        .await;
    tokio::time::sleep_until(down_since + Duration::from_secs(10)).await;
    assert!(hook.seen().is_empty());
    hook.set_down(false);
    hook.wait("all four", |seen| seen.len() >= 4).await;
    for target in ["a", "b"] {
        let got = of(&hook, target);
        let statuses: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(statuses, ["firing", "resolved"], "{target}: {got:?}");
        assert_eq!(got[0].1, got[1].1, "one episode");
    }
    daemon
        .wait_metrics("the outbox empty", |m| {
            m.get("probe_alert_outbox_size", &[]).unwrap_or(0.0) == 0.0
        })
        .await;
    assert_eq!(hook.seen().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_notifications_survive_a_restart_and_are_delivered_once() {
    let am = Alertmanager::start().expect("alertmanager");
    // Nothing listens where the webhook is yet: an unreachable receiver at start is no error.
    let hook_addr = support::closed_port();
    let db = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let db_addr = db.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        &am,
        hook_addr,
        "",
        &format!("  - id: db\n    tcp: {{address: \"{db_addr}\"}}\n"),
    );
    let state_dir = state.path().to_str().unwrap().to_owned();
    let args = ["--state-dir", state_dir.as_str()];
    let env = [("HOOK_TOKEN", "t"), ("AM_PASSWORD", AM_PASSWORD)];
    let mut daemon = support::Daemon::start_env(dir.path(), &args, &env);
    daemon.wait_states(&[("db", "UP")]).await;
    drop(db);
    daemon
        .wait_metrics("the firing notification waiting", |m| {
            m.get("probe_alert_outbox_size", &[]).unwrap_or(0.0) == 1.0
                && m.get(
                    "probe_alert_notifications_total",
                    &[("receiver", "ops"), ("result", "failed")],
                )
                .unwrap_or(0.0)
                    >= 1.0
        })
        .await;
    let fired = wait_am(&am, "ProbeDown", |a| a.len() == 1).await;
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    assert!(state.path().join("alerts.jsonl").exists());

    // The receiver is there now; the daemon starts again from the same state.
    let hook = Hook::start_on(hook_addr).await;
    let daemon = support::Daemon::start_env(dir.path(), &args, &env);
    hook.wait("the notification from before the restart", |seen| {
        !seen.is_empty()
    })
    .await;
    daemon.wait_states(&[("db", "DOWN")]).await;
    // Still DOWN after the restart: the same episode goes on, nothing new is sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = of(&hook, "db");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "firing");
    let fingerprint = got[0].1.clone();
    let listed: Value = daemon.get("/v1/alerts").await.json().await.unwrap();
    assert_eq!(listed["alerts"][0]["fingerprint"], fingerprint.as_str());
    assert_eq!(
        listed["alerts"][0]["startsAt"],
        hook.bodies()[0]["startsAt"],
        "started before the restart"
    );
    // Alertmanager still has the one alert, with the start it had.
    let now = wait_am(&am, "ProbeDown", |a| a.len() == 1).await;
    assert_eq!(now[0]["startsAt"], fired[0]["startsAt"]);
    // It recovers: the episode ends, under its name from before the restart.
    let _db = std::net::TcpListener::bind(db_addr).unwrap();
    hook.wait("the episode resolved", |seen| seen.len() >= 2)
        .await;
    assert_eq!(
        of(&hook, "db"),
        [
            ("firing".to_owned(), fingerprint.clone()),
            ("resolved".to_owned(), fingerprint)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_drops_the_oldest_resolved_notifications_first() {
    let am = Alertmanager::start().expect("alertmanager");
    let hook = Hook::start().await;
    hook.set_down(true);
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let dir = tempfile::tempdir().unwrap();
    let targets: String = ["a", "b", "c"]
        .iter()
        .zip(&addrs)
        .map(|(id, addr)| format!("  - id: {id}\n    tcp: {{address: \"{addr}\"}}\n"))
        .collect();
    write_config(dir.path(), &am, hook.addr, "  outbox_limit: 3\n", &targets);
    let daemon = support::Daemon::start_env(
        dir.path(),
        &[],
        &[("HOOK_TOKEN", "t"), ("AM_PASSWORD", AM_PASSWORD)],
    );
    daemon
        .wait_states(&[("a", "UP"), ("b", "UP"), ("c", "UP")])
        .await;
    let mut listeners: Vec<Option<std::net::TcpListener>> =
        listeners.into_iter().map(Some).collect();
    // a and b fail and recover (four notifications for a room of three), then c fails.
    listeners[0] = None;
    listeners[1] = None;
    daemon.wait_states(&[("a", "DOWN"), ("b", "DOWN")]).await;
    let _a = std::net::TcpListener::bind(addrs[0]).unwrap();
    let _b = std::net::TcpListener::bind(addrs[1]).unwrap();
    daemon.wait_states(&[("a", "UP"), ("b", "UP")]).await;
    listeners[2] = None;
    daemon.wait_states(&[("c", "DOWN")]).await;
    let metrics = daemon
        .wait_metrics("two dropped", |m| {
            m.get("probe_alert_outbox_dropped_total", &[])
                .unwrap_or(0.0)
                == 2.0
        })
        .await;
    assert_eq!(metrics.value("probe_alert_outbox_size", &[]), 3.0);
    hook.set_down(false);
    hook.wait("what was kept", |seen| seen.len() >= 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The pages stayed; the two ends went (Alertmanager, which was up, had everything).
    let kept: Vec<(String, String)> = hook
        .bodies()
        .iter()
        .map(|n| {
            (
                n["labels"]["target"].as_str().unwrap().to_owned(),
                n["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let firing = |t: &str| (t.to_owned(), "firing".to_owned());
    // a's and b's pages came in the order their failures were seen; c's last.
    let mut first_two = kept[..2].to_vec();
    first_two.sort();
    assert_eq!(first_two, [firing("a"), firing("b")], "{kept:?}");
    assert_eq!(kept[2..], [firing("c")], "{kept:?}");
    let active = wait_am(&am, "c alone firing", |a| a.len() == 1).await;
    assert_eq!(active[0]["labels"]["target"], "c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_silences_a_target_and_what_depends_on_it_then_fires_at_its_end() {
    let db = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let db_addr = db.local_addr().unwrap();
    let api_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = api_listener.local_addr().unwrap();
    // db waits 30 s before it pages; api depends on it critically.
    let targets = format!(
        "  - id: db\n    tcp: {{address: \"{db_addr}\"}}\n    alert: {{for: 30s}}\n  - id: api\n    tcp: {{address: \"{api}\"}}\n    depends_on: [{{target: db, critical: true}}]\n"
    );
    let (am, hook, daemon, _dir) = alerting("", &targets, &[], "t").await;
    daemon.wait_states(&[("db", "UP"), ("api", "UP")]).await;
    let (status, _) = daemon
        .send(
            reqwest::Method::PUT,
            "/v1/targets/db/maintenance",
            None,
            Some(r#"{"reason": "upgrade", "duration": "10m"}"#),
        )
        .await;
    assert_eq!(status, 200);
    // Under maintenance the database goes down, and api with it (its own probe fails too):
    // nobody is paged.
    drop(db);
    drop(api_listener);
    daemon
        .wait_states(&[("db", "MAINTENANCE"), ("api", "DOWN")])
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(hook.seen().is_empty(), "{:?}", hook.seen());
    assert!(active(&am).is_empty());
    // The maintenance ends with the database still down: it pages at once (not after its 30 s),
    // for api too.
    let ended = tokio::time::Instant::now();
    let (status, _) = daemon
        .send(
            reqwest::Method::DELETE,
            "/v1/targets/db/maintenance",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200);
    hook.wait("db's page", |seen| !seen.is_empty()).await;
    assert!(ended.elapsed() < Duration::from_secs(20));
    let got = hook.bodies();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["cause"], "db");
    assert_eq!(got[0]["impacted"], json!(["api"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_alerts_on_its_verdict_and_a_reload_changes_the_rules_at_once() {
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = up.local_addr().unwrap();
    let (down_a, down_b) = (support::closed_port(), support::closed_port());
    let targets = |web_alert: &str| {
        format!(
            "  - id: web-1\n    tcp: {{address: \"{up_addr}\"}}\n  - id: web-2\n    tcp: {{address: \"{down_a}\"}}\n    alert: false\n  - id: web-3\n    tcp: {{address: \"{down_b}\"}}\n    alert: {web_alert}\n  - id: web\n    kind: group\n    depends_on: [{{target: web-1}}, {{target: web-2}}, {{target: web-3}}]\n    state: {{degraded_from: 0.5}}\n    alert: {{labels: {{team: edge}}}}\n"
        )
    };
    let (am, hook, daemon, dir) = alerting("", &targets("false"), &[], "t").await;
    daemon
        .wait_states(&[("web-1", "UP"), ("web-2", "DOWN"), ("web-3", "DOWN")])
        .await;
    // Two of three replicas down (not critical): the group's score is a third, under its
    // degraded_from: DOWN once judged so `fall` times, and its alert fires.
    hook.wait("GroupUnhealthy", |seen| !seen.is_empty()).await;
    let alert = hook.bodies()[0].clone();
    assert_eq!(alert["labels"]["alertname"], "GroupUnhealthy");
    assert_eq!(alert["labels"]["target"], "web");
    assert_eq!(alert["labels"]["team"], "edge");
    let summary = alert["annotations"]["summary"].as_str().unwrap();
    assert_eq!(summary, "web is DOWN: score 0.33");
    let explain = alert["annotations"]["explain"].as_str().unwrap();
    assert!(
        explain.contains("web-2") && explain.contains("DOWN"),
        "{explain}"
    );
    wait_am(&am, "GroupUnhealthy", |a| {
        a.len() == 1 && a[0]["labels"]["alertname"] == "GroupUnhealthy"
    })
    .await;

    // A reload that lets web-3 alert takes effect at once, its state unchanged.
    std::fs::write(
        dir.path().join("probes.yaml"),
        std::fs::read_to_string(dir.path().join("probes.yaml"))
            .unwrap()
            .replace(&targets("false"), &targets("{severity: ticket}")),
    )
    .unwrap();
    daemon.signal("-HUP");
    hook.wait("web-3's own alert", |seen| {
        seen.iter().any(|(_, n)| n["labels"]["target"] == "web-3")
    })
    .await;
    let web3 = hook
        .bodies()
        .into_iter()
        .find(|n| n["labels"]["target"] == "web-3")
        .unwrap();
    assert_eq!(web3["labels"]["severity"], "ticket");
    assert!(of(&hook, "web-2").is_empty(), "alert: false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_notification_reaches_every_receiver_and_says_which_failed() {
    let (am, hook, daemon, _dir) = alerting("", "", &[], "hook-Secret-7").await;
    let (status, body) = daemon
        .send(reqwest::Method::POST, "/v1/alerts/test", None, None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["receivers"],
        json!([
            {"receiver": "alertmanager", "delivered": true},
            {"receiver": "ops", "delivered": true}
        ])
    );
    let (auth, test) = hook.seen()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer hook-Secret-7"));
    assert_eq!(test["labels"]["alertname"], "ProbeEngineTest");
    // Routed like a real one: the defaults' labels.
    assert_eq!(test["labels"]["team"], "core");
    let listed = wait_am(&am, "the test alert", |a| !a.is_empty()).await;
    assert_eq!(listed[0]["labels"]["alertname"], "ProbeEngineTest");
    // A receiver that refuses: 502, and why, without its secret.
    hook.set_down(true);
    let (status, body) = daemon
        .send(reqwest::Method::POST, "/v1/alerts/test", None, None)
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["receivers"][1]["delivered"], false);
    assert!(
        body["receivers"][1]["error"]
            .as_str()
            .unwrap()
            .contains("503"),
        "{body}"
    );
    for secret in ["hook-Secret-7", AM_PASSWORD] {
        assert!(!body.to_string().contains(secret));
        assert!(daemon.lines_so_far().iter().all(|l| !l.contains(secret)));
        let config: String = daemon.get("/v1/topology").await.text().await.unwrap();
        assert!(!config.contains(secret));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_entries_alert_by_their_own_alert_key() {
    let etcd = probe_testkit::etcd::TestEtcd::start().await.expect("etcd");
    let (am, hook, daemon, _dir) = alerting(
        &format!(
            "topology:\n  etcd:\n    endpoints: [\"{}\"]\n",
            etcd.endpoint()
        ),
        "",
        &[],
        "t",
    )
    .await;
    let mut client = etcd.client().await.unwrap();
    let entry = |id: &str, alert: &str| {
        format!(
            r#"{{"id": "{id}", "tcp": {{"address": "{}"}}, "interval": "300ms", "timeout": "200ms", "rise": 1, "fall": 1, "alert": {alert}}}"#,
            support::closed_port()
        )
    };
    for (id, alert) in [
        ("quiet", "false"),
        ("loud", r#"{"labels": {"team": "etcd"}}"#),
    ] {
        client
            .put(
                format!("{}{id}", probe_etcd::DEFAULT_PREFIX),
                entry(id, alert),
                None,
            )
            .await
            .unwrap();
    }
    daemon
        .wait_states(&[("quiet", "DOWN"), ("loud", "DOWN")])
        .await;
    hook.wait("loud's alert", |seen| !seen.is_empty()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got = hook.bodies();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["labels"]["target"], "loud");
    assert_eq!(got[0]["labels"]["team"], "etcd");
    assert_eq!(active(&am).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_that_takes_a_target_over_goes_on_with_its_episode() {
    let etcd = probe_testkit::etcd::TestEtcd::start().await.expect("etcd");
    let db = support::closed_port();
    let before = format!(
        "cluster: {{etcd: {{endpoints: [\"{}\"]}}, lease_ttl: 2s}}\n",
        etcd.endpoint()
    );
    let (am, hook, a, dir) = alerting(
        &before,
        &format!("  - id: db\n    tcp: {{address: \"{db}\"}}\n"),
        &["--member", "a"],
        "t",
    )
    .await;
    let b = support::Daemon::start_env(
        dir.path(),
        &["--member", "b"],
        &[("HOOK_TOKEN", "t"), ("AM_PASSWORD", AM_PASSWORD)],
    );
    // Both members see each other: they agree on db's owner.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    let owner = loop {
        let (on_a, on_b) = (a.detail("db").await.target, b.detail("db").await.target);
        let members: Value = b.get("/v1/cluster").await.json().await.unwrap();
        if let Some(owner) = &on_a.owner
            && on_a.state == "DOWN"
            && on_a.owner == on_b.owner
            && members["members"].as_array().is_some_and(|m| m.len() == 2)
        {
            break owner.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{on_a:?} {on_b:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // (a member that owned db before the other joined may have paged for it already: the same
    // episode, under the same fingerprint, as checked below.)
    hook.wait("the owner's page", |seen| {
        seen.iter()
            .any(|(_, n)| n["annotations"]["member"] == owner.as_str())
    })
    .await;
    let first = hook
        .bodies()
        .into_iter()
        .find(|n| n["annotations"]["member"] == owner.as_str())
        .unwrap();
    // The owner dies; the other member takes db over and goes on with the same episode.
    let (mut dead, survivor, heir) = if owner == "a" {
        (a, b, "b")
    } else {
        (b, a, "a")
    };
    dead.signal("-KILL");
    dead.wait_exit();
    survivor
        .wait_target("db", "the survivor's", |t| t.owner.as_deref() == Some(heir))
        .await;
    hook.wait("the heir's notification", |seen| {
        seen.iter().any(|(_, n)| n["annotations"]["member"] == heir)
    })
    .await;
    let got = of(&hook, "db");
    assert!(got.iter().all(|(status, _)| status == "firing"), "{got:?}");
    assert!(
        got.iter().all(|(_, f)| *f == first["fingerprint"]),
        "one episode: {got:?}"
    );
    // Alertmanager has one alert: the heir's carries the same labels.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = active(&am);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["startsAt"], first["startsAt"]);
}
