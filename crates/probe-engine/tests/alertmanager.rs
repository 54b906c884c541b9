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
