//! The status page and the uptime badge, against the real daemon: what the page says over HTTP
//! (its rows and their states, the filter, paging, access, escaping, its weight at 10k
//! targets), and what a real headless Chromium shows of it (live updates, the graph's
//! explanations, the page without scripts, the first paint).

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::Locator;
use probe_testkit::{Browser, BrowserError, skipped_outside_ci};
use reqwest::Method;
use reqwest::header::{self, HeaderMap};
use support::{Daemon, WAIT, badge_texts, closed_port};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The heaviest the page may be.
const MAX_PAGE_BYTES: usize = 300 * 1024;

/// A TCP listener that accepts (and drops) every connection until the task is aborted, which
/// closes it.
async fn accepting() -> (SocketAddr, JoinHandle<()>) {
    // A deep accept queue: thousands of targets connect here, and a full queue drops SYNs,
    // which would make healthy targets DOWN.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(4096).unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    (addr, task)
}

/// An HTTP server answering every request with 200 and `body`.
async fn serving(body: &'static str) -> SocketAddr {
    let app = axum::Router::new().fallback(move || async move { body });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn write(dir: &Path, yaml: &str) {
    std::fs::write(dir.join("targets.yaml"), yaml).unwrap();
}

/// `up` on a listener, `down` on a closed port, the group `web` over both (critically over
/// `up`), and whatever else `more` declares.
fn small(dir: &Path, up: SocketAddr, more: &str) {
    let down = closed_port();
    write(
        dir,
        &format!(
            "defaults: {{interval: 200ms, timeout: 150ms, rise: 1, fall: 1}}\ntargets:\n  - id: up\n    tcp: {{address: \"{up}\"}}\n  - id: down\n    tcp: {{address: \"{down}\"}}\n  - id: web\n    kind: group\n    depends_on: [{{target: up, critical: true}}, {{target: down}}]\n{more}"
        ),
    );
}

/// A daemon on [`small`]'s targets, and the directory of its config (removed after the daemon
/// has stopped: fields drop in order).
struct SmallDaemon {
    daemon: Daemon,
    _config: tempfile::TempDir,
}

/// Starts a daemon on [`small`]'s targets alone and waits until `up` is UP, `down` DOWN and
/// `web` DEGRADED.
async fn small_daemon() -> SmallDaemon {
    // Dropping the handle detaches the task: `up` keeps accepting until the test ends.
    let (up, _) = accepting().await;
    let config = tempfile::tempdir().unwrap();
    small(config.path(), up, "");
    let daemon = Daemon::start(config.path());
    // `web` scores 0.5: DEGRADED by the default group rule, once judged so.
    daemon
        .wait_states(&[("up", "UP"), ("down", "DOWN"), ("web", "DEGRADED")])
        .await;
    SmallDaemon {
        daemon,
        _config: config,
    }
}

/// An answer of the page's routes.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(&name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }
}

async fn fetch(daemon: &Daemon, path: &str, headers: &[(header::HeaderName, &str)]) -> Answer {
    let mut request = daemon.http.get(daemon.url(path));
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

/// The page at `path`, which must answer 200.
async fn page(daemon: &Daemon, path: &str) -> String {
    let answer = fetch(daemon, path, &[]).await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    answer.body
}

/// The page's rows: each one's id and `data-state`, in order.
fn rows(body: &str) -> Vec<(String, String)> {
    let row = regex::Regex::new(r#"<tr data-id="([^"]+)" data-state="([A-Z]+)""#).unwrap();
    row.captures_iter(body)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect()
}

fn ids(body: &str) -> Vec<String> {
    rows(body).into_iter().map(|(id, _)| id).collect()
}

/// The words in a row's state cell.
fn state_words(body: &str, id: &str) -> String {
    let cell = regex::Regex::new(&format!(
        r#"<tr data-id="{id}"[^>]*>.*?<td class="state"[^>]*><b>([A-Z]+)</b>"#
    ))
    .unwrap();
    cell.captures(body)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no state cell for {id}"))
}

/// The overview's count of `state`.
fn count(body: &str, state: &str) -> usize {
    let n = regex::Regex::new(&format!(r#"id="count-{state}">(\d+)<"#)).unwrap();
    n.captures(body).unwrap()[1].parse().unwrap()
}

/// Waits until no target is PROBING any more.
async fn settled(daemon: &Daemon, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let targets = daemon.targets().await;
        if targets.iter().all(|t| t["state"] != "PROBING") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "targets never settled: {} still PROBING",
            targets.iter().filter(|t| t["state"] == "PROBING").count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_page_says_each_state_in_words_and_colour() {
    let running = small_daemon().await;
    let daemon = &running.daemon;
    let reference = regex::Regex::new(r#"(?:src|href)="([^"]*)""#).unwrap();
    for path in ["/", "/status"] {
        let answer = fetch(daemon, path, &[]).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(
            answer.header(header::CONTENT_TYPE),
            "text/html; charset=utf-8"
        );
        let policy = answer.header(header::CONTENT_SECURITY_POLICY);
        assert!(policy.contains("default-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        let body = answer.body;
        // The group first, then the worst first.
        assert_eq!(ids(&body), ["web", "down", "up"], "{body}");
        assert_eq!(state_words(&body, "up"), "UP");
        assert_eq!(state_words(&body, "down"), "DOWN");
        // One of its two members is DOWN, not critically: half its score.
        assert_eq!(state_words(&body, "web"), "DEGRADED");
        assert_eq!(
            rows(&body),
            [
                ("web".to_owned(), "DEGRADED".to_owned()),
                ("down".to_owned(), "DOWN".to_owned()),
                ("up".to_owned(), "UP".to_owned())
            ]
        );
        assert_eq!((count(&body, "UP"), count(&body, "DOWN")), (1, 1));
        assert_eq!(count(&body, "PROBING"), 0);
        assert!(body.contains("<b>Not ready</b>"), "{body}");
        assert!(
            body.contains("Connection refused"),
            "the latest reason: {body}"
        );
        // Nothing from elsewhere: every script and stylesheet is the daemon's own.
        for found in reference.captures_iter(&body) {
            assert!(found[1].starts_with('/'), "{}", &found[1]);
        }
    }
    // Its assets are embedded, and the stylesheet's state colours are the drawings'.
    let css = fetch(daemon, "/status/assets/page.css", &[]).await;
    assert_eq!(
        (css.status, css.header(header::CONTENT_TYPE)),
        (200, "text/css; charset=utf-8")
    );
    assert!(css.body.contains("--DOWN:#c62828"), "{}", css.body);
    assert!(css.body.contains("prefers-color-scheme: dark"));
    assert!(!css.body.contains("@import") && !css.body.contains("url("));
    let js = fetch(daemon, "/status/assets/page.js", &[]).await;
    assert_eq!(js.status, 200);
    assert!(js.body.contains("EventSource('/status/events')"));
    assert!(
        js.body.len() < 8 * 1024,
        "{} bytes of script",
        js.body.len()
    );
    // The explanation of a node, for the side panel.
    let explained = fetch(daemon, "/status/explain/web", &[]).await;
    assert_eq!(explained.status, 200);
    assert!(
        explained.body.contains("<th scope=\"row\">up</th>"),
        "{}",
        explained.body
    );
    assert!(explained.body.contains("critical"), "{}", explained.body);
    assert_eq!(fetch(daemon, "/status/explain/nope", &[]).await.status, 404);
}

#[tokio::test]
async fn the_filter_and_the_pages_work_without_scripts() {
    let (up, _server) = accepting().await;
    let down = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from(
        "defaults: {interval: 300ms, timeout: 200ms, rise: 1, fall: 1}\ntargets:\n  - id: web\n    kind: group\n    depends_on: [{target: a-000, critical: true}, {target: b-000}]\n",
    );
    for i in 0..120 {
        yaml.push_str(&format!(
            "  - id: a-{i:03}\n    tcp: {{address: \"{up}\"}}\n"
        ));
    }
    for i in 0..30 {
        yaml.push_str(&format!(
            "  - id: b-{i:03}\n    tcp: {{address: \"{down}\"}}\n"
        ));
    }
    write(dir.path(), &yaml);
    let daemon = Daemon::start(dir.path());
    settled(&daemon, WAIT).await;

    // 151 rows: 100 on the first page, with a link to the next only.
    let first = page(&daemon, "/status").await;
    let on_first = ids(&first);
    assert_eq!(on_first.len(), 100);
    assert_eq!(on_first[0], "web");
    assert!(
        on_first[1..31].iter().all(|id| id.starts_with("b-")),
        "DOWN first"
    );
    assert!(
        first.contains(r#"<a rel="next" href="/status?page=2">"#),
        "{first}"
    );
    assert!(!first.contains(r#"rel="prev""#));
    assert!(first.contains("Rows 1–100 of 151, page 1 of 2"));
    let second = page(&daemon, "/status?page=2").await;
    assert_eq!(ids(&second).len(), 51);
    assert!(second.contains(r#"<a rel="prev" href="/status">"#));
    assert!(!second.contains(r#"rel="next""#));
    // A page past the last is the last.
    assert_eq!(ids(&page(&daemon, "/status?page=9").await).len(), 51);

    // By state, by text, by group; a form's blank fields filter nothing.
    let down_only = rows(&page(&daemon, "/status?state=DOWN").await);
    assert_eq!(down_only.len(), 30);
    assert!(
        down_only
            .iter()
            .all(|(id, s)| id.starts_with("b-") && s == "DOWN")
    );
    let typed = ids(&page(&daemon, "/status?q=B-01&state=&group=").await);
    let want: Vec<String> = (10..20).map(|i| format!("b-{i:03}")).collect();
    assert_eq!(typed, want);
    let by_reason = ids(&page(&daemon, "/status?q=refused").await);
    assert_eq!(by_reason.len(), 30, "the latest reason is searched too");
    let group = ids(&page(&daemon, "/status?group=web").await);
    assert_eq!(group, ["b-000", "a-000"]);
    // Paging keeps the filter.
    let filtered = page(&daemon, "/status?q=a-&page=2").await;
    assert_eq!(ids(&filtered).len(), 20);
    assert!(
        filtered.contains(r#"<a rel="prev" href="/status?q=a-">"#),
        "{filtered}"
    );
    assert!(
        filtered.contains(r#"value="a-""#),
        "the form shows the filter"
    );

    // A bad filter says why.
    for (path, status) in [
        ("/status?state=SIDEWAYS", 400),
        ("/status?page=0", 400),
        ("/status?group=Bad%20Id", 400),
        ("/status?group=nope", 404),
    ] {
        let answer = fetch(&daemon, path, &[]).await;
        assert_eq!(answer.status, status, "{path}");
        let error: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
}

#[tokio::test]
async fn without_the_ui_there_is_no_page() {
    let (up, _server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    small(dir.path(), up, "");
    let daemon = Daemon::start_with(dir.path(), &["--ui", "false"]);
    for path in [
        "/",
        "/status",
        "/status/events",
        "/status/explain/up",
        "/status/assets/page.js",
    ] {
        assert_eq!(fetch(&daemon, path, &[]).await.status, 404, "{path}");
    }
    // The API is there.
    assert_eq!(fetch(&daemon, "/v1/targets", &[]).await.status, 200);
}

#[tokio::test]
async fn a_ui_token_closes_every_page_route() {
    let (up, _server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    small(dir.path(), up, "");
    let token = "s3cret=/+";
    let daemon = Daemon::start_with(dir.path(), &["--ui-token", token]);
    let routes = [
        "/",
        "/status",
        "/status/explain/up",
        "/status/incidents",
        "/status/assets/page.css",
        "/status/assets/page.js",
        "/status/events",
    ];
    let bearer = format!("Bearer {token}");
    for path in routes {
        let refused = fetch(&daemon, path, &[]).await;
        assert_eq!(refused.status, 401, "{path}");
        let error: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("--ui-token"),
            "{path}: {error}"
        );
        let wrong = fetch(&daemon, path, &[(header::AUTHORIZATION, "Bearer s3cret")]).await;
        assert_eq!(wrong.status, 401, "{path}");
        if path != "/status/events" {
            let opened = fetch(&daemon, path, &[(header::AUTHORIZATION, &bearer)]).await;
            assert_eq!(opened.status, 200, "{path}");
        }
    }
    // The token in the address opens the page and sets a cookie for its own requests.
    let encoded = "s3cret%3D%2F%2B";
    let opened = fetch(&daemon, &format!("/status?token={encoded}"), &[]).await;
    assert_eq!(opened.status, 200);
    assert!(!opened.body.contains(token), "the token is not in the page");
    let cookie = opened.header(header::SET_COOKIE).to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let with_cookie = fetch(&daemon, "/status/assets/page.js", &[(header::COOKIE, pair)]).await;
    assert_eq!(with_cookie.status, 200);
    let forged = fetch(
        &daemon,
        "/status",
        &[(header::COOKIE, "probe_ui=736563726574")],
    )
    .await;
    assert_eq!(forged.status, 401);
    let wrong = fetch(&daemon, "/status?token=nope", &[]).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.get(header::SET_COOKIE).is_none());
    // The page's token is its own: the API stays as it was (open, here).
    assert_eq!(fetch(&daemon, "/v1/targets", &[]).await.status, 200);
}

#[tokio::test]
async fn every_value_shows_escaped() {
    const PAYLOAD: &str = "<script>alert(1)</script>";
    let (up, _server) = accepting().await;
    let hostile = serving(PAYLOAD).await;
    let dir = tempfile::tempdir().unwrap();
    small(
        dir.path(),
        up,
        &format!(
            "  - id: hostile\n    http: {{url: \"http://{hostile}/\", expect: {{body_contains: \"OK\"}}}}\n"
        ),
    );
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[("hostile", "DOWN"), ("up", "UP")])
        .await;
    let (status, body) = daemon
        .send(
            Method::PUT,
            "/v1/targets/up/maintenance",
            None,
            Some(r#"{"reason": "<script>alert(1)</script> \"quoted\" & 'single'", "duration": "30m"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let body = page(&daemon, "/status").await;
    assert!(!body.contains(PAYLOAD), "{body}");
    assert_eq!(
        body.matches("<script").count(),
        1,
        "only the page's own script"
    );
    // The failure's detail and the maintenance's reason, escaped.
    assert!(
        body.contains("it starts with &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;"),
        "{body}"
    );
    assert!(
        body.contains(
            "&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot; &amp; &#39;single&#39;"
        ),
        "{body}"
    );
    assert!(body.contains("<b>Maintenance</b> until"));
    // And in an attribute: the search typed.
    let searched = page(
        &daemon,
        "/status?q=%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    )
    .await;
    assert!(!searched.contains(PAYLOAD));
    assert!(searched.contains(r#"value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;""#));
}

/// `GET /status/events` read as a stream: each frame's event name and data, in order.
async fn page_events(daemon: &Daemon) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
    use futures_util::StreamExt as _;
    let response = daemon.get("/status/events").await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream",
        "an event stream"
    );
    let mut stream = Box::pin(response.bytes_stream());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    frame
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                let event = field("event: ");
                // Keep-alive comments carry no event.
                if !event.is_empty() && tx.send((event, field("data: "))).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The page's event stream as a test reads it. Events of other names that a look passed over
/// are kept for a later look, since the stream's events of different names come in no fixed
/// order with each other (a `nodes` event may follow the `incidents` event of the same fall, or
/// precede it); events of the name looked for that did not satisfy it are dropped, so a look for
/// a name never finds one older than the last it found.
struct Events {
    received: tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
    passed: Vec<(String, String)>,
}

/// The next event named `name` whose data satisfies `want`, within [`WAIT`]: first among those
/// passed over before, then as they come.
async fn next_event(events: &mut Events, name: &str, want: impl Fn(&str) -> bool) -> String {
    let found = events
        .passed
        .iter()
        .position(|(event, data)| event == name && want(data));
    if let Some(i) = found {
        let (_, data) = events.passed.remove(i);
        // Those of the name that came before it are older than it.
        let mut at = 0;
        events.passed.retain(|(event, _)| {
            at += 1;
            event != name || at > i
        });
        return data;
    }
    events.passed.retain(|(event, _)| event != name);
    let deadline = Instant::now() + WAIT;
    loop {
        let (event, data) = tokio::time::timeout_at(deadline, events.received.recv())
            .await
            .unwrap_or_else(|_| panic!("no {name} event as wanted within {WAIT:?}"))
            .expect("the stream ended");
        if event == name && want(&data) {
            return data;
        }
        if event != name {
            events.passed.push((event, data));
        }
    }
}

/// The page's live updates without a browser: the stream's `transition`, `nodes` and
/// `incidents` events, and what each carries.
#[tokio::test]
async fn the_live_stream_carries_transitions_nodes_and_incidents() {
    let (up, up_server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    small(dir.path(), up, "");
    let state = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with(dir.path(), &["--state-dir", state.path().to_str().unwrap()]);
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    let mut events = Events {
        received: page_events(&daemon).await,
        passed: Vec::new(),
    };

    // `up`, `web`'s critical dependency, goes DOWN.
    up_server.abort();
    let transition = next_event(&mut events, "transition", |d| {
        d.contains(r#""target":"up""#)
    })
    .await;
    let transition: serde_json::Value = serde_json::from_str(&transition).unwrap();
    assert_eq!(
        (&transition["from"], &transition["to"], &transition["cause"]),
        (&"UP".into(), &"DOWN".into(), &"results".into()),
        "{transition}"
    );
    assert!(
        transition["detail"].as_str().unwrap().contains("refused"),
        "{transition}"
    );

    // And back UP. The stream's first look at the graph only learns what is shown, and may
    // come after the fall: the group recovering (to DEGRADED, since its other dependency stays
    // DOWN) comes as a `nodes` event either way, and after it every change is sent.
    let listener = TcpListener::bind(up).await.unwrap();
    let up_server = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    let web = |d: &str, state: &str| {
        serde_json::from_str::<Vec<serde_json::Value>>(d)
            .unwrap()
            .into_iter()
            .find(|n| n["id"] == "web" && n["state"] == state)
    };
    next_event(&mut events, "nodes", |d| web(d, "DEGRADED").is_some()).await;

    // Down again: a `nodes` event with the group's verdict DOWN in red, and `up`'s node saying
    // DOWN (a target's state comes with its transitions, not here).
    up_server.abort();
    let nodes = next_event(&mut events, "nodes", |d| web(d, "DOWN").is_some()).await;
    let group = web(&nodes, "DOWN").unwrap();
    assert_eq!(group["colour"], "#c62828", "{nodes}");
    // Its critical dependency DOWN: the group's score is 0, and its node says DOWN.
    assert_eq!(
        (&group["score"], &group["label"]),
        (&"0.00".into(), &"DOWN 0.00".into()),
        "{nodes}"
    );
    let all: Vec<serde_json::Value> = serde_json::from_str(&nodes).unwrap();
    let up = all
        .iter()
        .find(|n| n["id"] == "up")
        .expect("up's node moved too");
    assert!(up["state"].is_null(), "{up}");
    assert!(up["label"].as_str().unwrap().starts_with("DOWN "), "{up}");
    assert_eq!(up["colour"], "#c62828", "{up}");

    // Once the history has written the transitions, an `incidents` event says how many it has
    // written so far (at least the four of `up` and `down`'s), and the fragment the page then
    // fetches names the fall.
    let count = next_event(&mut events, "incidents", |c| c.parse::<u64>().unwrap() >= 4).await;
    let fragment = page(&daemon, "/status/incidents").await;
    let text = regex::Regex::new("<[^>]*>")
        .unwrap()
        .replace_all(&fragment, "");
    assert!(text.contains("DOWN up from"), "{count}: {text}");
    assert!(text.contains("impacted web"), "{text}");
}

/// A config of `n` targets over four listeners (one in a hundred on a closed port, DOWN with
/// its reason), and ten groups over the first ones: what the page must stay light and quick
/// with.
async fn fleet(dir: &Path, n: usize) -> Vec<JoinHandle<()>> {
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..4 {
        let (addr, task) = accepting().await;
        addrs.push(addr);
        servers.push(task);
    }
    let down = closed_port();
    let mut yaml =
        String::from("defaults: {interval: 10s, timeout: 1s, rise: 1, fall: 1}\ntargets:\n");
    for i in 0..n {
        let addr = if i % 100 == 99 { down } else { addrs[i % 4] };
        yaml.push_str(&format!(
            "  - id: svc-{i:05}\n    tcp: {{address: \"{addr}\"}}\n"
        ));
    }
    for g in 0..10 {
        let members: Vec<String> = (0..5)
            .map(|m| format!("{{target: svc-{:05}}}", g * 5 + m))
            .collect();
        yaml.push_str(&format!(
            "  - id: group-{g}\n    kind: group\n    depends_on: [{}]\n",
            members.join(", ")
        ));
    }
    write(dir, &yaml);
    servers
}

#[tokio::test]
async fn the_page_stays_light_at_10k_targets() {
    let config = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let _servers = fleet(config.path(), 10_000).await;
    let daemon = Daemon::start_with(
        config.path(),
        &["--state-dir", state.path().to_str().unwrap()],
    );
    settled(&daemon, Duration::from_secs(60)).await;
    // Exactly the hundred on the closed port are DOWN, as the API holds them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let targets = daemon.targets().await;
        let down: Vec<&str> = targets
            .iter()
            .filter(|t| t["state"] == "DOWN")
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        if down.len() == 100 && down.iter().all(|id| id.ends_with("99")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not exactly the 100 on the closed port DOWN: {} DOWN: {:?}",
            down.len(),
            &down[..down.len().min(20)]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let asked = Instant::now();
    let body = page(&daemon, "/status").await;
    let took = asked.elapsed();
    eprintln!(
        "the status page at 10k targets: {} bytes in {took:?}",
        body.len()
    );
    assert!(body.len() <= MAX_PAGE_BYTES, "{} bytes", body.len());
    assert_eq!(ids(&body).len(), 100);
    assert!(body.contains("page 1 of 101"), "10 groups and 10k targets");
    assert_eq!(count(&body, "DOWN"), 100);
    assert_eq!(count(&body, "UP"), 9_900);
    // The graph is not drawn whole; a group's part is.
    assert!(body.contains("too many to draw here"));
    let part = page(&daemon, "/status?group=group-3").await;
    assert!(part.contains(r#"data-id="svc-00019""#) && part.contains("<svg"));
    assert!(!part.contains("too many to draw here"));
    let last = page(&daemon, "/status?page=101").await;
    assert!(last.len() <= MAX_PAGE_BYTES);
}

#[tokio::test]
async fn the_uptime_badge_says_the_share_over_its_window() {
    let (up, _server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    small(dir.path(), up, "");
    let daemon = Daemon::start_with(dir.path(), &["--state-dir", state.path().to_str().unwrap()]);
    daemon.wait_states(&[("up", "UP"), ("down", "DOWN")]).await;
    // The history opens in the background (503 until it has) and writes every second (no
    // data until the first transitions are in).
    let deadline = Instant::now() + WAIT;
    let badge = loop {
        let answer = fetch(&daemon, "/v1/badges/up/uptime.svg", &[]).await;
        if answer.status == 200 && !answer.body.contains("no data") {
            break answer;
        }
        assert!(
            [200, 503].contains(&answer.status),
            "{}: {}",
            answer.status,
            answer.body
        );
        assert!(Instant::now() < deadline, "{}", answer.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        badge.header(header::CONTENT_TYPE),
        "image/svg+xml; charset=utf-8"
    );
    assert_eq!(badge_texts(&badge.body), ["uptime 7d", "100%"]);
    let down = fetch(&daemon, "/v1/badges/down/uptime.svg?window=24h", &[]).await;
    assert_eq!(down.status, 200);
    assert_eq!(badge_texts(&down.body), ["uptime 24h", "0.00%"]);
    for window in ["30d", "90d"] {
        let answer = fetch(
            &daemon,
            &format!("/v1/badges/web/uptime.svg?window={window}"),
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{window}");
        assert_eq!(badge_texts(&answer.body)[0], format!("uptime {window}"));
    }
    for bad in ["1y", "2026-01-01T00:00:00Z..2026-01-02T00:00:00Z", ""] {
        let answer = fetch(
            &daemon,
            &format!("/v1/badges/up/uptime.svg?window={bad}"),
            &[],
        )
        .await;
        assert_eq!(answer.status, 400, "{bad:?}");
        let error: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .contains("24h, 7d, 30d or 90d")
        );
    }
    let unknown = fetch(&daemon, "/v1/badges/nope/uptime.svg", &[]).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(badge_texts(&unknown.body), ["uptime 7d", "not found"]);

    // Without history: 503, with why.
    let bare = tempfile::tempdir().unwrap();
    small(bare.path(), up, "");
    let without = Daemon::start(bare.path());
    let answer = fetch(&without, "/v1/badges/up/uptime.svg", &[]).await;
    assert_eq!(answer.status, 503);
    let error: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("no history"),
        "{error}"
    );
}

// ---- In a real browser. ----

/// Where a test's screenshot goes: `target/test-artifacts/page-<test>.png` (or under
/// `CARGO_TARGET_DIR`).
fn screenshot_path(test: &str) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), |dir| workspace.join(dir));
    target
        .join("test-artifacts")
        .join(format!("page-{test}.png"))
}

/// A browser, or `None` (the test says it is skipped) where there is none.
async fn browser(javascript: bool) -> Option<Browser> {
    match Browser::start(javascript).await {
        Ok(browser) => Some(browser),
        Err(BrowserError::Skip(why)) => {
            skipped_outside_ci(&why);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A browser (scripts on or off) on the status page of a [`small_daemon`], or `None` (the test
/// says it is skipped) where there is no browser.
async fn browser_on_small_page(javascript: bool) -> Option<(Browser, SmallDaemon)> {
    let browser = browser(javascript).await?;
    let running = small_daemon().await;
    browser.goto(&running.daemon.url("/status")).await.unwrap();
    Some((browser, running))
}

/// Takes `target` down (its listener's task aborted) and, once the API says so, waits at most
/// 2 s more for `row`'s state on the page to say DOWN by itself; when the API said it.
async fn shows_down(
    browser: &Browser,
    daemon: &Daemon,
    listener: JoinHandle<()>,
    target: &str,
    row: &str,
) -> Instant {
    listener.abort();
    daemon.wait_states(&[(target, "DOWN")]).await;
    let seen = Instant::now();
    wait_text(
        browser,
        &format!(r#"tr[data-id="{row}"] .state"#),
        seen + Duration::from_secs(2),
        |t| t == "DOWN",
    )
    .await;
    eprintln!(
        "the row of {row} changed {:?} after the API did",
        seen.elapsed()
    );
    seen
}

/// Polls the text of `selector` until `want` holds for it, up to `deadline`.
async fn wait_text(
    browser: &Browser,
    selector: &str,
    deadline: Instant,
    want: impl Fn(&str) -> bool,
) -> String {
    loop {
        let text = browser.text(selector).await.unwrap_or_default();
        if want(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{selector} never as wanted: {text:?}; {}",
            browser.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Fails unless the mark the live test set in the page is still there: a reload wipes it.
async fn assert_not_reloaded(browser: &Browser) {
    let mark = browser
        .client()
        .execute("return window.notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, true, "the page was not reloaded");
}

#[tokio::test]
async fn in_a_browser_a_row_follows_its_target_live() {
    let Some(browser) = browser(true).await else {
        return;
    };
    let (up, up_server) = accepting().await;
    let (flip, flip_server) = accepting().await;
    let dir = tempfile::tempdir().unwrap();
    small(
        dir.path(),
        up,
        &format!("  - id: flip\n    tcp: {{address: \"{flip}\"}}\n"),
    );
    // With a history: the incidents come from it.
    let state = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with(dir.path(), &["--state-dir", state.path().to_str().unwrap()]);
    daemon
        .wait_states(&[("up", "UP"), ("down", "DOWN"), ("flip", "UP")])
        .await;
    browser.goto(&daemon.url("/status")).await.unwrap();
    let incidents = browser.text("#incidents").await.unwrap();
    assert!(!incidents.contains("flip"), "{incidents}");
    assert_eq!(
        browser.text(r#"tr[data-id="up"] .state"#).await.unwrap(),
        "UP"
    );
    assert_eq!(
        browser.text(r#"tr[data-id="down"] .state"#).await.unwrap(),
        "DOWN"
    );
    assert_eq!(browser.text("#count-UP").await.unwrap(), "2");
    let connected = Instant::now() + WAIT;
    wait_text(&browser, "#live", connected, |t| t.contains("live")).await;
    // A mark that a reload would wipe.
    browser
        .client()
        .execute("window.notReloaded = true;", vec![])
        .await
        .unwrap();

    shows_down(&browser, &daemon, flip_server, "flip", "flip").await;
    let row_state = browser
        .client()
        .execute(
            "return document.querySelector('tr[data-id=\"flip\"]').dataset.state;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(row_state, "DOWN");
    assert_eq!(browser.text("#count-DOWN").await.unwrap(), "2");
    assert_eq!(browser.text("#count-UP").await.unwrap(), "1");
    assert_not_reloaded(&browser).await;
    // Once the history has written the transition, the incidents name it too.
    wait_text(&browser, "#incidents", Instant::now() + WAIT, |t| {
        t.contains("DOWN flip from")
    })
    .await;

    // A group's row follows its verdict. `up` is `web`'s critical dependency; once it is DOWN,
    // so is `web` (at its next judgment), and `up`'s score falls.
    assert_ne!(
        browser.text(r#"tr[data-id="web"] .state"#).await.unwrap(),
        "DOWN"
    );
    let up_score = browser.text(r#"tr[data-id="up"] .score"#).await.unwrap();
    let seen = shows_down(&browser, &daemon, up_server, "up", "web").await;
    wait_text(
        &browser,
        r#"tr[data-id="up"] .score"#,
        seen + Duration::from_secs(2),
        |t| t != up_score,
    )
    .await;
    // The drawn graph follows too: the group's node says DOWN, in red (within a judgment and a
    // look of the page's).
    let node = r#"svg g.node[data-id="web"]"#;
    wait_text(
        &browser,
        &format!("{node} text:nth-of-type(2)"),
        seen + Duration::from_secs(3),
        |t| t == "DOWN 0.00",
    )
    .await;
    let fill = browser
        .client()
        .execute(
            "return document.querySelector(arguments[0] + ' rect').getAttribute('fill');",
            vec![serde_json::json!(node)],
        )
        .await
        .unwrap();
    assert_eq!(fill, "#c62828");
    // The overview counts targets: a group's transition, on the stream too, leaves it be.
    assert_eq!(browser.text("#count-DOWN").await.unwrap(), "3");
    assert_eq!(browser.text("#count-UP").await.unwrap(), "0");
    // `up` is the root cause of the group's fall: one incident, the group among what it
    // impacted.
    let incidents = wait_text(&browser, "#incidents", Instant::now() + WAIT, |t| {
        t.contains("DOWN up from") && t.contains("impacted web")
    })
    .await;
    assert!(incidents.contains("DOWN flip from"), "{incidents}");
    assert_not_reloaded(&browser).await;
    browser
        .screenshot(screenshot_path("row_follows_its_target_live"))
        .await
        .unwrap();
}

#[tokio::test]
async fn in_a_browser_a_node_clicked_is_explained() {
    let Some((browser, _running)) = browser_on_small_page(true).await else {
        return;
    };
    browser
        .client()
        .find(Locator::Css(r#"svg g.node[data-id="web"]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let panel = wait_text(&browser, "#explain", Instant::now() + WAIT, |t| {
        t.contains("web 0.50 DEGRADED:")
    })
    .await;
    // The summary, and each dependency's part in its own row.
    assert!(panel.contains("up 1.00 (w 0.50, critical) UP"), "{panel}");
    assert!(panel.contains("down 0.00 (w 0.50) DOWN"), "{panel}");
    let child = browser
        .text(r##"#explain tr[data-state="DOWN"] th"##)
        .await
        .unwrap();
    assert_eq!(child, "down");
    browser
        .screenshot(screenshot_path("node_clicked_is_explained"))
        .await
        .unwrap();
}

#[tokio::test]
async fn in_a_browser_without_scripts_the_page_is_whole() {
    let Some((browser, _running)) = browser_on_small_page(false).await else {
        return;
    };
    assert_eq!(
        browser.text(r#"tr[data-id="up"] .state"#).await.unwrap(),
        "UP"
    );
    assert_eq!(
        browser.text(r#"tr[data-id="down"] .state"#).await.unwrap(),
        "DOWN"
    );
    assert_eq!(
        browser.text(r#"tr[data-id="web"] .state"#).await.unwrap(),
        "DEGRADED"
    );
    assert_eq!(browser.text("#count-DOWN").await.unwrap(), "1");
    assert!(
        browser.text("#live").await.unwrap().is_empty(),
        "no script ran"
    );
    // The filter is a form: it works without scripts.
    browser
        .client()
        .find(Locator::Css(r#"select[name="state"]"#))
        .await
        .unwrap()
        .select_by_label("DOWN")
        .await
        .unwrap();
    browser
        .client()
        .find(Locator::Css(r#"form.filter button[type="submit"]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let url = browser.client().current_url().await.unwrap();
        if url.query() == Some("q=&state=DOWN&group=") {
            break;
        }
        assert!(Instant::now() < deadline, "{url}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(browser.text(r#"tr[data-id="up"]"#).await.is_err());
    assert_eq!(
        browser.text(r#"tr[data-id="down"] .state"#).await.unwrap(),
        "DOWN"
    );
    browser
        .screenshot(screenshot_path("without_scripts_the_page_is_whole"))
        .await
        .unwrap();
}

#[tokio::test]
async fn in_a_browser_the_page_paints_within_a_second_at_10k_targets() {
    let Some(browser) = browser(true).await else {
        return;
    };
    let mut figures = Vec::new();
    for n in [100, 1_000, 10_000] {
        let config = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let _servers = fleet(config.path(), n).await;
        let daemon = Daemon::start_with(
            config.path(),
            &["--state-dir", state.path().to_str().unwrap()],
        );
        settled(&daemon, Duration::from_secs(60)).await;
        browser.goto(&daemon.url("/status")).await.unwrap();
        let paint = browser
            .first_paint_ms()
            .await
            .unwrap()
            .expect("the page painted");
        figures.push((n, paint));
        if n == 10_000 {
            browser
                .screenshot(screenshot_path("paints_within_a_second_at_10k_targets"))
                .await
                .unwrap();
        }
    }
    eprintln!("first paint (ms) by targets: {figures:?}");
    let (_, at_10k) = figures[2];
    assert!(at_10k <= 1_000.0, "first paint at 10k targets: {at_10k} ms");
}
