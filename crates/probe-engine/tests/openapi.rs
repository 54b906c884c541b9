//! The OpenAPI description (`GET /v1/openapi.json`) against the server itself: every route the
//! router declares is described and every described path is routed; then every route is
//! called, to answers of every kind (2xx, refusals, errors), and each answer must be described
//! for its status and content type and validate, JSON Schema and formats, against the schema
//! there. The description's objects list every field, so a field added to an answer and not to
//! the description fails here too.

mod support;

use std::collections::BTreeSet;

use probe_testkit::AcceptServer;
use reqwest::Method;
use serde_json::{Value, json};
use support::{Daemon, closed_port, declared_routes};

/// One call: the route it exercises (as described), and the request.
struct Call {
    method: &'static str,
    route: &'static str,
    path: String,
    token: bool,
    body: Option<Value>,
}

fn call(method: &'static str, route: &'static str, path: &str) -> Call {
    Call {
        method,
        route,
        path: path.to_owned(),
        token: false,
        body: None,
    }
}

impl Call {
    fn token(mut self) -> Self {
        self.token = true;
        self
    }

    fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
}

/// `#/a/b` for the path `a`, `b`, escaped as JSON Pointer says, and as a URI fragment (a
/// path template's braces) says.
fn pointer(parts: &[&str]) -> String {
    let escaped: Vec<String> = parts
        .iter()
        .map(|p| {
            p.replace('~', "~0")
                .replace('/', "~1")
                .replace('{', "%7B")
                .replace('}', "%7D")
        })
        .collect();
    format!("#/{}", escaped.join("/"))
}

/// The value `reference` (`#/...`) points at in `doc`.
fn resolve<'a>(doc: &'a Value, reference: &str) -> &'a Value {
    let pointer = reference
        .trim_start_matches('#')
        .replace("%7B", "{")
        .replace("%7D", "}");
    doc.pointer(&pointer).unwrap_or(&Value::Null)
}

/// Why the answer does not match the description, if it does not.
fn mismatch(doc: &Value, call: &Call, status: u16, media: &str, body: &[u8]) -> Option<String> {
    let method = call.method.to_lowercase();
    let operation = &doc["paths"][call.route][&method];
    if operation.is_null() {
        return Some("the operation is not described".into());
    }
    let code = status.to_string();
    let mut at = pointer(&["paths", call.route, &method, "responses", &code]);
    let mut response = resolve(doc, &at);
    if let Some(reference) = response["$ref"].as_str() {
        at = reference.to_owned();
        response = resolve(doc, reference);
    }
    if response.is_null() {
        return Some(format!("status {status} is not described"));
    }
    let Some(content) = response["content"].as_object() else {
        return (!body.is_empty()).then(|| format!("{status} is described without a body"));
    };
    if !content.contains_key(media) {
        return Some(format!(
            "{media} is not described for {status} (only {:?})",
            content.keys().collect::<Vec<_>>()
        ));
    }
    let schema = format!("{at}/content/{}/schema", media.replace('/', "~1"));
    let instance = if media.ends_with("json") {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => v,
            Err(e) => return Some(format!("not JSON: {e}")),
        }
    } else {
        Value::String(String::from_utf8_lossy(body).into_owned())
    };
    // The whole description as the root, so that its `$ref`s resolve; the root's own keys
    // (`openapi`, `paths`, ...) are no keywords, and are passed over.
    let mut root = doc.clone();
    root["$ref"] = json!(schema);
    let validator = match jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&root)
    {
        Ok(v) => v,
        Err(e) => return Some(format!("the schema does not compile: {e}")),
    };
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    (!errors.is_empty()).then(|| format!("{}\n{}", errors.join("\n"), instance))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_described_and_every_answer_validates() {
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("probes.yaml"),
        format!(
            "defaults: {{interval: 200ms, timeout: 100ms, rise: 1, fall: 1}}\n\
             alerts:\n  webhooks: [{{name: ops, url: \"http://{hook}/hook\"}}]\n\
             \x20 defaults: {{on: [DOWN], for: 0s}}\n\
             targets:\n\
             \x20 - {{id: up, tcp: {{address: \"{up}\"}}, circuit_breaker: {{minimum_calls: 4, window_calls: 4, open_for: 30s}}}}\n\
             \x20 - {{id: twin, tcp: {{address: \"{up}\"}}}}\n\
             \x20 - {{id: down, tcp: {{address: \"{hook}\"}}}}\n\
             \x20 - {{id: shop, kind: group, depends_on: [{{target: up}}, {{target: down, critical: true}}]}}\n\
             \x20 - {{id: pool, kind: group, depends_on: [{{target: up}}, {{target: twin}}], outlier: {{consecutive_gateway_failures: 3}}}}\n",
            up = up.addr(),
            hook = closed_port(),
        ),
    )
    .unwrap();
    let blackbox = dir.path().join("blackbox.yml");
    std::fs::write(&blackbox, "modules:\n  tcp_connect:\n    prober: tcp\n").unwrap();
    let state = dir.path().join("state");
    let daemon = Daemon::start_with(
        &dir.path().join("probes.yaml"),
        &[
            "--api-token",
            "op",
            "--state-dir",
            state.to_str().unwrap(),
            "--blackbox-config",
            blackbox.to_str().unwrap(),
        ],
    );
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    let doc = description(&daemon).await;

    // Routes and description, both ways.
    let described: BTreeSet<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "put", "post", "delete", "patch"].contains(&k.as_str()))
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    let declared = declared_routes();
    assert!(declared.len() >= 30, "{declared:?}");
    let undescribed: Vec<_> = declared.difference(&described).collect();
    let unrouted: Vec<_> = described.difference(&declared).collect();
    assert!(
        undescribed.is_empty() && unrouted.is_empty(),
        "routes the description lacks: {undescribed:?}\ndescribed, not routed: {unrouted:?}"
    );

    // The ETag's 304, without a body.
    let unchanged = daemon
        .http
        .get(daemon.url("/v1/graph"))
        .header("if-none-match", "*")
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);
    assert!(!doc["paths"]["/v1/graph"]["get"]["responses"]["304"].is_null());
    let probe = format!("/probe?module=tcp_connect&target={}", up.addr());
    let calls = [
        call("GET", "/livez", "/livez"),
        call("GET", "/livez", "/livez?verbose"),
        call("GET", "/readyz", "/readyz"),
        call("GET", "/readyz", "/readyz?verbose&exclude=down"),
        call("GET", "/readyz", "/readyz?nonsense=1"),
        call("GET", "/startupz", "/startupz"),
        call("GET", "/health", "/health"),
        call("GET", "/metrics", "/metrics"),
        call("GET", "/v1/openapi.json", "/v1/openapi.json"),
        call("GET", "/v1/targets", "/v1/targets"),
        call("GET", "/v1/targets", "/v1/targets?state=DOWN,UP&limit=1"),
        call("GET", "/v1/targets", "/v1/targets?state=SIDEWAYS"),
        call("GET", "/v1/targets/{id}", "/v1/targets/up"),
        call("GET", "/v1/targets/{id}", "/v1/targets/nope"),
        call("GET", "/v1/targets/{id}", "/v1/targets/Bad%20Id"),
        call(
            "GET",
            "/v1/targets/{id}/explain",
            "/v1/targets/shop/explain",
        ),
        call(
            "GET",
            "/v1/targets/{id}/explain",
            "/v1/targets/nope/explain",
        ),
        call("GET", "/v1/targets/{id}/uptime", "/v1/targets/up/uptime"),
        call(
            "GET",
            "/v1/targets/{id}/uptime",
            "/v1/targets/up/uptime?window=forever",
        ),
        call("GET", "/v1/uptime", "/v1/uptime"),
        call("GET", "/v1/uptime", "/v1/uptime?window=7d&target=up,shop"),
        call("GET", "/v1/uptime", "/v1/uptime?target=nope"),
        call("GET", "/v1/uptime", "/v1/uptime?window=forever"),
        call(
            "GET",
            "/v1/targets/{id}/history",
            "/v1/targets/down/history",
        ),
        call(
            "GET",
            "/v1/targets/{id}/history",
            "/v1/targets/up/history?limit=0",
        ),
        call(
            "PUT",
            "/v1/targets/{id}/maintenance",
            "/v1/targets/up/maintenance",
        )
        .body(json!({"reason": "no token", "duration": "10m"})),
        call(
            "PUT",
            "/v1/targets/{id}/maintenance",
            "/v1/targets/up/maintenance",
        )
        .token()
        .body(json!({"reason": "", "duration": "10m"})),
        call(
            "PUT",
            "/v1/targets/{id}/maintenance",
            "/v1/targets/twin/maintenance",
        )
        .token()
        .body(json!({"reason": "described", "duration": "10m"})),
        call(
            "DELETE",
            "/v1/targets/{id}/maintenance",
            "/v1/targets/twin/maintenance",
        )
        .token(),
        call(
            "DELETE",
            "/v1/targets/{id}/maintenance",
            "/v1/targets/nope/maintenance",
        )
        .token(),
        call("POST", "/v1/targets/{id}/calls", "/v1/targets/up/calls")
            .token()
            .body(json!({"status": 503, "latency_ms": 4.5})),
        call("POST", "/v1/targets/{id}/calls", "/v1/targets/up/calls")
            .token()
            .body(json!({"latency_ms": 4.5})),
        call("POST", "/v1/targets/{id}/calls", "/v1/targets/down/calls")
            .token()
            .body(json!({"outcome": "success", "latency_ms": 1})),
        call("POST", "/v1/targets/{id}/circuit", "/v1/targets/up/circuit")
            .token()
            .body(json!({"command": "reset"})),
        call("POST", "/v1/targets/{id}/circuit", "/v1/targets/up/circuit")
            .token()
            .body(json!({"command": "explode"})),
        call(
            "POST",
            "/v1/targets/{id}/circuit",
            "/v1/targets/twin/circuit",
        )
        .token()
        .body(json!({"command": "reset"})),
        call(
            "DELETE",
            "/v1/targets/{id}/ejection",
            "/v1/targets/up/ejection",
        )
        .token(),
        call("GET", "/v1/graph", "/v1/graph"),
        call("GET", "/v1/graph", "/v1/graph?format=dot"),
        call("GET", "/v1/graph", "/v1/graph?format=svg"),
        call("GET", "/v1/graph", "/v1/graph?format=png"),
        call("GET", "/v1/events", "/v1/events"),
        call("GET", "/v1/events", "/v1/events?target=up,shop"),
        call("GET", "/v1/events", "/v1/events?target=nope"),
        call("GET", "/v1/events", "/v1/events?since=1h"),
        call("GET", "/v1/topology", "/v1/topology"),
        call("GET", "/v1/cluster", "/v1/cluster"),
        call("GET", "/v1/alerts", "/v1/alerts"),
        call("POST", "/v1/alerts/test", "/v1/alerts/test").token(),
        call("POST", "/v1/alerts/test", "/v1/alerts/test"),
        call(
            "GET",
            "/v1/badges/{id}/health.svg",
            "/v1/badges/up/health.svg",
        ),
        call(
            "GET",
            "/v1/badges/{id}/health.svg",
            "/v1/badges/nope/health.svg",
        ),
        call(
            "GET",
            "/v1/badges/{id}/uptime.svg",
            "/v1/badges/up/uptime.svg",
        ),
        call(
            "GET",
            "/v1/badges/{id}/uptime.svg",
            "/v1/badges/up/uptime.svg?window=x",
        ),
        call("GET", "/", "/"),
        call("GET", "/status", "/status"),
        call("GET", "/status/explain/{id}", "/status/explain/shop"),
        call("GET", "/status/explain/{id}", "/status/explain/nope"),
        call("GET", "/status/incidents", "/status/incidents"),
        call("GET", "/status/events", "/status/events"),
        call("GET", "/status/assets/page.css", "/status/assets/page.css"),
        call("GET", "/status/assets/page.js", "/status/assets/page.js"),
        call("GET", "/probe", &probe),
        call("GET", "/probe", "/probe?module=tcp_connect"),
        call("GET", "/probe", "/probe?module=nope&target=127.0.0.1:1"),
        call("POST", "/v1/drain", "/v1/drain"),
        // Last: it stops the daemon.
        call("POST", "/v1/drain", "/v1/drain").token(),
    ];
    let (wrong, answered, statuses) = answers(&daemon, &doc, &calls).await;
    assert!(
        wrong.is_empty(),
        "answers the description does not allow:\n{}",
        wrong.join("\n\n")
    );
    let unexercised: Vec<_> = declared.difference(&answered).collect();
    assert!(
        unexercised.is_empty(),
        "routes never called: {unexercised:?}"
    );
    for expected in [200, 202, 400, 401, 404, 502] {
        assert!(
            statuses.contains(&expected),
            "no {expected} among {statuses:?}"
        );
    }
}

/// Makes each call and checks its answer against the description: what does not match, the
/// routes called, and the statuses seen.
async fn answers(
    daemon: &Daemon,
    doc: &Value,
    calls: &[Call],
) -> (Vec<String>, BTreeSet<String>, BTreeSet<u16>) {
    let mut wrong = Vec::new();
    let mut answered: BTreeSet<String> = BTreeSet::new();
    let mut statuses: BTreeSet<u16> = BTreeSet::new();
    for call in calls {
        let mut request = daemon.http.request(
            Method::from_bytes(call.method.as_bytes()).unwrap(),
            daemon.url(&call.path),
        );
        if call.token {
            request = request.bearer_auth("op");
        }
        if let Some(body) = &call.body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let media = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or_default().trim().to_owned())
            .unwrap_or_default();
        // Streams are judged by their head: their body never ends.
        let body = if media == "text/event-stream" {
            Vec::new()
        } else {
            response.bytes().await.unwrap().to_vec()
        };
        if let Some(why) = mismatch(doc, call, status, &media, &body) {
            wrong.push(format!(
                "{} {} -> {status} {media}: {why}",
                call.method, call.path
            ));
        }
        answered.insert(format!("{} {}", call.method, call.route));
        statuses.insert(status);
    }
    (wrong, answered, statuses)
}

/// The description, as the daemon serves it.
async fn description(daemon: &Daemon) -> Value {
    let doc: Value = daemon
        .get("/v1/openapi.json")
        .await
        .json()
        .await
        .expect("the description is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_members_answers_validate_too() {
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let etcd = probe_testkit::etcd::TestEtcd::start().await.expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("probes.yaml"),
        format!(
            "cluster:\n  etcd: {{endpoints: [\"{}\"]}}\n  lease_ttl: 5s\n\
             defaults: {{interval: 200ms, timeout: 100ms, rise: 1, fall: 1}}\n\
             targets:\n  - {{id: up, tcp: {{address: \"{}\"}}}}\n",
            etcd.endpoint(),
            up.addr()
        ),
    )
    .unwrap();
    let daemon = Daemon::start_with(&dir.path().join("probes.yaml"), &["--member", "a"]);
    daemon.wait_states(&[("up", "UP")]).await;
    let doc = description(&daemon).await;
    let calls = [
        call("GET", "/v1/cluster", "/v1/cluster"),
        call("GET", "/v1/targets", "/v1/targets?owner=a"),
        call("GET", "/v1/targets/{id}", "/v1/targets/up"),
        call("GET", "/health", "/health"),
    ];
    let (wrong, _, statuses) = answers(&daemon, &doc, &calls).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert_eq!(statuses, BTreeSet::from([200]));
    let target = daemon
        .get("/v1/targets/up")
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        target["owner"], "a",
        "the cluster's fields were there to validate"
    );
}
