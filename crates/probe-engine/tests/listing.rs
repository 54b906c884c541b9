//! `GET /v1/targets` for big fleets, against the real daemon: its filters (`state`, `group`,
//! `kind`, `match`) in every combination on a 1,000-target fleet, held to the test's own model
//! of which target is what; paging by cursor, which walks every target exactly once while
//! targets come and go between pages; the 400s that name a bad parameter; and the entity tags
//! of `/v1/targets` and `/v1/graph`, whose 304 carries no body.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use probe_testkit::AcceptServer;
use reqwest::StatusCode;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use support::views::{self, TargetList};
use support::{Daemon, closed_port};

const FLEET: usize = 1_000;

/// What the test made each target: its kind and the state its server gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Made {
    kind: &'static str,
    state: &'static str,
}

/// Target `i` of the fleet: an HTTP target without a server (DOWN) for every fourth, a TCP
/// one without a listener (DOWN) for the next, the rest TCP to a listener that accepts (UP),
/// of which every hundredth is then put in maintenance.
fn made(i: usize) -> Made {
    match i % 4 {
        0 => Made {
            kind: "http",
            state: "DOWN",
        },
        1 => Made {
            kind: "tcp",
            state: "DOWN",
        },
        _ if i % 100 == 2 => Made {
            kind: "tcp",
            state: "MAINTENANCE",
        },
        _ => Made {
            kind: "tcp",
            state: "UP",
        },
    }
}

fn id(i: usize) -> String {
    format!("t-{i:04}")
}

/// The fleet's YAML: the targets of `ids`, `g-a` over targets 0 to 99, `g-top` over `g-a` and
/// targets 100 to 149 (so its members are 150 targets, half of them through `g-a`).
fn fleet_yaml(ids: impl IntoIterator<Item = usize>, up: SocketAddr, down: SocketAddr) -> String {
    let mut yaml =
        String::from("defaults: {interval: 2s, timeout: 500ms, rise: 1, fall: 1}\ntargets:\n");
    let ids: Vec<usize> = ids.into_iter().collect();
    for &i in &ids {
        let probe = match (made(i).kind, made(i).state) {
            ("http", _) => format!("http: {{url: \"http://{down}/health\"}}"),
            (_, "DOWN") => format!("tcp: {{address: \"{down}\"}}"),
            _ => format!("tcp: {{address: \"{up}\"}}"),
        };
        let _ = writeln!(yaml, "  - {{id: {}, {probe}}}", id(i));
    }
    let deps = |range: std::ops::Range<usize>| -> String {
        range
            .filter(|i| ids.contains(i))
            .map(|i| format!("{{target: {}}}", id(i)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        yaml,
        "  - {{id: g-a, kind: group, depends_on: [{}]}}",
        deps(0..100)
    );
    let _ = writeln!(
        yaml,
        "  - {{id: g-top, kind: group, depends_on: [{{target: g-a}}, {}]}}",
        deps(100..150)
    );
    yaml
}

/// A page of `/v1/targets?{query}`, read strictly.
async fn page(daemon: &Daemon, query: &str) -> TargetList {
    let response = daemon.get(&format!("/v1/targets?{query}")).await;
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    views::strict(&response.json().await.unwrap())
}

/// Every id `query` lists, following its cursors with pages of `limit`; each page's ids come
/// after the last page's.
async fn walk(daemon: &Daemon, query: &str, limit: usize) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = format!("{query}&limit={limit}");
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={c}"));
        }
        let page = page(daemon, &q).await;
        assert!(page.targets.len() <= limit, "{q}");
        for t in &page.targets {
            assert!(
                ids.last().is_none_or(|last| *last < t.id),
                "{q}: {} out of order",
                t.id
            );
            ids.push(t.id.clone());
        }
        match page.next {
            Some(next) => {
                assert_eq!(
                    page.targets.len(),
                    limit,
                    "{q}: a short page before the last"
                );
                assert_eq!(Some(&next), ids.last(), "{q}: next is the page's last id");
                cursor = Some(next);
            }
            None => return ids,
        }
    }
}

async fn start_fleet(dir: &Path) -> (Daemon, AcceptServer) {
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    std::fs::write(
        dir.join("fleet.yaml"),
        fleet_yaml(0..FLEET, up.addr(), closed_port()),
    )
    .unwrap();
    let daemon = Daemon::start(dir);
    (daemon, up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_filter_combination_lists_exactly_the_targets_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _up) = start_fleet(dir.path()).await;
    for i in (0..FLEET).filter(|&i| made(i).state == "MAINTENANCE") {
        let (status, body) = daemon
            .send(
                reqwest::Method::PUT,
                &format!("/v1/targets/{}/maintenance", id(i)),
                None,
                Some(r#"{"reason": "listing test", "duration": "1h"}"#),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // Every target at the state the test made it.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        let all = page(&daemon, "").await;
        assert_eq!(all.targets.len(), FLEET);
        assert!(all.next.is_none());
        let wrong: Vec<_> = all
            .targets
            .iter()
            .filter(|t| {
                let i: usize = t.id[2..].parse().unwrap();
                t.state != made(i).state || t.kind != made(i).kind
            })
            .map(|t| (t.id.clone(), t.kind.clone(), t.state.clone()))
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "targets not as made: {:?}",
            &wrong[..wrong.len().min(5)]
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let groups: HashMap<&str, Vec<usize>> =
        HashMap::from([("g-a", (0..100).collect()), ("g-top", (0..150).collect())]);
    let mut checked = 0;
    for state in [
        None,
        Some("UP"),
        Some("down"),
        Some("MAINTENANCE"),
        Some("UP,DOWN"),
        Some("PROBING"),
    ] {
        for group in [None, Some("g-a"), Some("g-top")] {
            for kind in [None, Some("tcp"), Some("http"), Some("dns")] {
                for matching in [None, Some("-01"), Some("9")] {
                    let mut query = String::new();
                    let mut want: Vec<String> = Vec::new();
                    for (name, value) in [
                        ("state", state),
                        ("group", group),
                        ("kind", kind),
                        ("match", matching),
                    ] {
                        if let Some(value) = value {
                            let _ = write!(query, "{name}={value}&");
                        }
                    }
                    for i in 0..FLEET {
                        let m = made(i);
                        let keep = state
                            .is_none_or(|s| s.split(',').any(|s| s.eq_ignore_ascii_case(m.state)))
                            && group.is_none_or(|g| groups[g].contains(&i))
                            && kind.is_none_or(|k| k == m.kind)
                            && matching.is_none_or(|text| id(i).contains(text));
                        if keep {
                            want.push(id(i));
                        }
                    }
                    let whole = page(&daemon, &query).await;
                    let got: Vec<String> = whole.targets.iter().map(|t| t.id.clone()).collect();
                    assert_eq!(got, want, "{query}");
                    assert!(whole.next.is_none(), "{query}");
                    assert_eq!(walk(&daemon, &query, 37).await, want, "{query} by pages");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 6 * 3 * 4 * 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_walks_every_target_once_while_targets_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let down = closed_port();
    let file = dir.path().join("fleet.yaml");
    // Even ids at the start; between pages odd ids come (ahead of the cursor and behind it)
    // and some even ones go.
    let mut present: BTreeSet<usize> = (0..400).step_by(2).collect();
    std::fs::write(&file, fleet_yaml(present.iter().copied(), up.addr(), down)).unwrap();
    let mut daemon = Daemon::start(dir.path());
    let stays: BTreeSet<String> = present
        .iter()
        .filter(|&&i| i % 3 != 0)
        .map(|&i| id(i))
        .collect();

    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut round = 0;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=25&cursor={c}"),
            None => "limit=25".to_owned(),
        };
        let page = page(&daemon, &query).await;
        seen.extend(page.targets.iter().map(|t| t.id.clone()));
        let Some(next) = page.next else { break };
        cursor = Some(next);
        // Between pages: ten odd ids arrive, spread over the whole range, and three even ids
        // that are multiples of three (so not among those that stay) go.
        round += 1;
        for k in 0..10 {
            present.insert((round * 2 + k * 40 + 1) % 400);
        }
        let gone: Vec<usize> = present
            .iter()
            .copied()
            .filter(|i| i % 2 == 0 && i % 3 == 0)
            .skip(round)
            .step_by(7)
            .take(3)
            .collect();
        for i in gone {
            present.remove(&i);
        }
        std::fs::write(&file, fleet_yaml(present.iter().copied(), up.addr(), down)).unwrap();
        daemon.signal("-HUP");
        // The start's own line says generation 1; the reload's is the one after the last.
        while daemon.wait_log("topology applied")["generation"].as_u64() < Some(round as u64 + 1) {}
    }
    assert!(round >= 7, "only {round} pages");
    assert!(
        seen.iter()
            .any(|id| id[2..].parse::<usize>().unwrap() % 2 == 1),
        "no target that came during the walk was listed"
    );
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a target listed twice: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "the walk went back: {seen:?}"
    );
    let missed: Vec<&String> = stays.iter().filter(|id| !unique.contains(id)).collect();
    assert!(
        missed.is_empty(),
        "targets present throughout never listed: {missed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_query_is_a_400_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        fleet_yaml(0..10, up.addr(), closed_port()),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    for (query, said) in [
        (
            "colour=red",
            "unknown parameter \"colour\": expected one of scope, state, group, kind, match, owner, limit, cursor",
        ),
        (
            "state=UP&state=DOWN",
            "state is given twice: give it once, with values separated by commas",
        ),
        (
            "state=UP,SIDEWAYS",
            "unknown state \"SIDEWAYS\" in state: expected PROBING, UP, DEGRADED, MAINTENANCE, DOWN",
        ),
        (
            "kind=ftp",
            "unknown kind \"ftp\": expected tcp, http, grpc, tls, dns, icmp, udp, custom",
        ),
        ("limit=0", "limit \"0\" is not a whole number of at least 1"),
        (
            "owner=m1",
            "owner needs a cluster: this daemon's config has no cluster section",
        ),
        ("group=t-0001", "t-0001 is a target, not a group"),
        ("group=nowhere", "no group nowhere"),
        ("cursor=a%20b", "cursor \"a b\" is not a next value: "),
    ] {
        let response = daemon.get(&format!("/v1/targets?{query}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let error: views::ApiError = views::strict(&response.json().await.unwrap());
        assert!(error.error.starts_with(said), "{query}: {}", error.error);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_answer_is_a_304_without_a_body() {
    let dir = tempfile::tempdir().unwrap();
    let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        // Probed once an hour, each at its place in the hour: the answers rarely move by themselves.
        fleet_yaml(2..4, up.addr(), closed_port()).replace("interval: 2s", "interval: 1h"),
    )
    .unwrap();
    let daemon = Daemon::start(dir.path());
    let http = support::client();
    for path in [
        "/v1/targets",
        "/v1/targets?kind=tcp&limit=1",
        "/v1/graph",
        "/v1/graph?format=dot",
    ] {
        // A probe may land between two requests (each target runs once within the hour): then
        // the answer changed and must not be a 304, and the pair is asked again.
        let mut tries = 0;
        loop {
            tries += 1;
            assert!(tries <= 5, "{path}: the answer never held still");
            let first = daemon.get(path).await;
            assert_eq!(first.status(), StatusCode::OK, "{path}");
            let tag = first.headers()[ETAG].to_str().unwrap().to_owned();
            let body = first.bytes().await.unwrap();
            assert!(tag.starts_with('"') && tag.ends_with('"'), "{path}: {tag}");

            let again = http
                .get(daemon.url(path))
                .header(IF_NONE_MATCH, &tag)
                .send()
                .await
                .unwrap();
            if again.status() == StatusCode::OK {
                assert_ne!(again.headers()[ETAG].to_str().unwrap(), tag, "{path}");
                assert_ne!(
                    again.bytes().await.unwrap(),
                    body,
                    "{path}: 200 for the same body"
                );
                continue;
            }
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
            assert_eq!(again.headers()[ETAG].to_str().unwrap(), tag, "{path}");
            assert!(
                again.bytes().await.unwrap().is_empty(),
                "{path}: a 304 with a body"
            );

            let stale = http
                .get(daemon.url(path))
                .header(IF_NONE_MATCH, "\"0000000000000000\", W/\"1\"")
                .send()
                .await
                .unwrap();
            assert_eq!(stale.status(), StatusCode::OK, "{path}");
            assert!(stale.headers().contains_key(ETAG), "{path}");
            break;
        }
    }

    // A change moves the tag: maintenance on t-0002.
    let before = daemon.get("/v1/targets").await.headers()[ETAG].clone();
    let (status, _) = daemon
        .send(
            reqwest::Method::PUT,
            "/v1/targets/t-0002/maintenance",
            None,
            Some(r#"{"reason": "etag test", "duration": "1h"}"#),
        )
        .await;
    assert_eq!(status, 200);
    let after = http
        .get(daemon.url("/v1/targets"))
        .header(IF_NONE_MATCH, before.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::OK);
    assert_ne!(after.headers()[ETAG], before);
    // A refusal carries no tag.
    let refused = daemon.get("/v1/targets?colour=red").await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(refused.headers().get(ETAG).is_none());
}
