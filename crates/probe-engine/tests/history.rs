//! The history: transitions, hourly rollups and operator actions written by the real daemon and
//! read back through its API; uptime that matches the transitions to the millisecond; a restart;
//! a database file that is garbage or cut short; retention and the size cap. The store's suite
//! runs against SQLite files and against a real PostgreSQL the harness starts.

mod support;

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use probe::TargetId;
use probe::health::HealthState;
use probe_engine::history::codec::{self, Day, Hour};
use probe_engine::history::rollup::DAY_MS;
use probe_engine::history::store::{Backend, Batch, Store, TransitionRow};
use probe_engine::history::uptime;
use probe_testkit::postgres_or_skip;
use serde_json::Value;
use support::{Daemon, closed_port};

const WAIT: Duration = Duration::from_secs(20);

/// 2026-01-01T00:00:00Z: the fixture clock's start.
const T0: i64 = 1_767_225_600_000;

fn transition(target: &str, at_ms: i64, from: HealthState, to: HealthState) -> TransitionRow {
    TransitionRow {
        target: target.to_owned(),
        at_ms,
        from: from.as_str().to_owned(),
        to: to.as_str().to_owned(),
        cause: "results".to_owned(),
        reason: None,
        detail: None,
    }
}

fn quiet_day() -> Day {
    let mut day: Day = [None; 24];
    for (h, slot) in day.iter_mut().enumerate() {
        *slot = Some(Hour {
            runs: 360 + h as u32,
            failures: u32::from(h % 5 == 0),
            latency: [20, 40, 60],
            time_ms: [0, 3_600_000, 0, 0, 0],
            ..Hour::default()
        });
    }
    day
}

/// The store's suite, on one backend: what is written reads back, uptime is exact with a known
/// schedule of DOWN periods and maintenance left out, a reopened store has it all, retention
/// and the size cap drop the oldest first.
async fn suite(backend: Backend) {
    use HealthState::*;
    let min = 60_000;
    let opened = Store::open(backend.clone(), "a", T0).await.unwrap();
    assert!(opened.moved_aside.is_none());
    let store = opened.store;
    // A day: UP, DOWN 10 min at 02:00 and 5 min at 13:00, maintenance 1 h at 20:00.
    let schedule = [
        (0, Probing, Up),
        (120 * min, Up, Down),
        (130 * min, Down, Up),
        (780 * min, Up, Down),
        (785 * min, Down, Up),
        (1200 * min, Up, Maintenance),
        (1260 * min, Maintenance, Up),
    ];
    let mut batch = Batch::default();
    for (at, from, to) in schedule {
        batch.transitions.push(transition("db", T0 + at, from, to));
    }
    batch.days.push((
        T0 / DAY_MS,
        TargetId::new("db").unwrap(),
        codec::encode(&quiet_day()),
    ));
    batch.actions.push(probe_engine::history::ActionRow {
        target: "db".to_owned(),
        at_ms: T0 + 1200 * min,
        action: "maintenance_set".to_owned(),
        who: "alice".to_owned(),
        detail: Some("disk swap (for 1h)".to_owned()),
    });
    store.write(&batch, T0 + DAY_MS).await.unwrap();

    let back = store
        .transitions(Some("db"), T0, T0 + DAY_MS, 100)
        .await
        .unwrap();
    assert_eq!(back.len(), schedule.len());
    assert_eq!(back[0].to, "UP", "newest first: {back:?}");
    assert_eq!(back[0].at_ms, T0 + 1260 * min);
    assert_eq!(
        store
            .transitions(Some("db"), T0, T0 + DAY_MS, 2)
            .await
            .unwrap()
            .len(),
        2
    );
    let actions = store.actions("db", T0, T0 + DAY_MS, 10).await.unwrap();
    assert_eq!(
        (actions[0].who.as_str(), actions[0].action.as_str()),
        ("alice", "maintenance_set")
    );
    let days = store
        .days(&["db"], T0 / DAY_MS - 1, T0 / DAY_MS + 1)
        .await
        .unwrap();
    assert_eq!(days.len(), 1);
    assert_eq!(codec::decode(&days[0].2).unwrap(), quiet_day());

    let (changes, sessions) = store.timeline(&["db"], T0, T0 + DAY_MS).await.unwrap();
    assert_eq!(sessions, vec![(T0, T0 + DAY_MS)]);
    let u = uptime::compute(&changes["db"], &sessions, T0, T0 + DAY_MS);
    assert_eq!(u.down_ms, 15 * min);
    assert_eq!(u.maintenance_ms, 60 * min);
    assert_eq!(u.up_ms, DAY_MS - 75 * min);
    assert_eq!(u.ratio(), Some(1.0 - 15.0 / (23.0 * 60.0)));
    // A window that starts inside the first DOWN period starts DOWN.
    let (changes, sessions) = store
        .timeline(&["db"], T0 + 125 * min, T0 + 135 * min)
        .await
        .unwrap();
    let u = uptime::compute(&changes["db"], &sessions, T0 + 125 * min, T0 + 135 * min);
    assert_eq!((u.down_ms, u.up_ms), (5 * min, 5 * min));
    store.close().await;

    // Reopened (a restart): everything is there, and today's rollups come back for resuming.
    let store = Store::open(backend.clone(), "a", T0 + DAY_MS + 1)
        .await
        .unwrap()
        .store;
    assert_eq!(
        store
            .transitions(Some("db"), T0, T0 + DAY_MS, 100)
            .await
            .unwrap()
            .len(),
        7
    );
    let today = store.today(T0 + 12 * 3_600_000).await.unwrap();
    assert_eq!(today.len(), 1);

    // Forty days of 200 targets' rollups, and a transition a day each for the first ten.
    let mut batch = Batch::default();
    let first = T0 / DAY_MS - 40;
    for day in first..T0 / DAY_MS {
        for t in 0..200 {
            let id = TargetId::new(&format!("t{t}")).unwrap();
            batch.days.push((day, id, codec::encode(&quiet_day())));
            if t < 10 {
                batch
                    .transitions
                    .push(transition(&format!("t{t}"), day * DAY_MS + 1000, Up, Down));
            }
        }
    }
    store.write(&batch, T0 + DAY_MS + 2).await.unwrap();
    let size = store.size().await.unwrap();
    assert!(size > 500_000, "{size} bytes");

    // Retention: 30 days of transitions and rollups, measured from the fixture clock.
    let now = T0 + DAY_MS;
    let kept = Duration::from_secs(30 * 86_400);
    let dropped = store.prune(now, kept, kept, u64::MAX).await.unwrap();
    assert_eq!(dropped.capped, 0);
    // 10 days of 200 rollups and 10 transitions are past 30 days.
    let expired_days = (now - 30 * DAY_MS).div_euclid(DAY_MS) - first;
    assert_eq!(dropped.expired, expired_days as u64 * 210, "{dropped:?}");

    // The size cap: half the size drops the oldest days, and only them.
    let size = store.size().await.unwrap();
    let dropped = store.prune(now, kept, kept, size / 2).await.unwrap();
    assert!(dropped.capped > 0);
    let after = store.size().await.unwrap();
    assert!(
        after <= size / 2,
        "{after} bytes left of {size}, cap {}",
        size / 2
    );
    let names: Vec<String> = (0..200).map(|t| format!("t{t}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let left = store.days(&names, first, T0 / DAY_MS).await.unwrap();
    let oldest = left.iter().map(|(_, d, _)| *d).min().unwrap();
    let newest = left.iter().map(|(_, d, _)| *d).max().unwrap();
    assert_eq!(newest, T0 / DAY_MS - 1, "the newest day is kept");
    assert!(
        oldest > (now - 30 * DAY_MS).div_euclid(DAY_MS),
        "the oldest went: {oldest}"
    );
    // Whole days went, from the front: every day left has all its targets.
    assert_eq!(
        left.len() as i64,
        (newest - oldest + 1) * 200,
        "{oldest}..{newest}"
    );
    store.close().await;
}

#[tokio::test]
async fn the_store_keeps_and_drops_history_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    suite(Backend::Sqlite(dir.path().join("history.db"))).await;
}

#[tokio::test]
async fn the_store_keeps_and_drops_history_in_postgres() {
    let Some(pg) = postgres_or_skip() else { return };
    suite(Backend::Postgres(pg.url())).await;
}

/// A target with a listener that can be closed and opened again on its port.
struct Switch {
    addr: std::net::SocketAddr,
    listener: Option<std::net::TcpListener>,
}

impl Switch {
    fn new() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Self {
            addr: listener.local_addr().unwrap(),
            listener: Some(listener),
        }
    }

    fn close(&mut self) {
        self.listener = None;
    }

    fn open(&mut self) {
        // std sets SO_REUSEADDR: the port comes back though accepted sockets linger.
        self.listener = Some(std::net::TcpListener::bind(self.addr).unwrap());
    }
}

fn config(dir: &Path, up: std::net::SocketAddr, extra: &str) {
    std::fs::write(
        dir.join("targets.yaml"),
        format!(
            "defaults:\n  interval: 200ms\n  timeout: 100ms\n  rise: 1\n  fall: 1\n\
             targets:\n\
             \x20 - id: api\n    tcp: {{ address: {up} }}\n\
             \x20 - id: gone\n    tcp: {{ address: {down} }}\n\
             \x20 - id: shop\n    kind: group\n    depends_on: [{{ target: api, critical: true }}]\n\
             {extra}",
            down = closed_port(),
        ),
    )
    .unwrap();
}

async fn json(daemon: &Daemon, path: &str) -> Value {
    let response = daemon.get(path).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Polls `path` until `ok` holds for its JSON (a 503 while the history opens is a wait too).
async fn wait_json(daemon: &Daemon, path: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let response = daemon.get(path).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        let opening = status == 503
            && body["error"]
                .as_str()
                .is_some_and(|e| e.contains("opening"));
        assert!(status == 200 || opening, "{path}: {status} {body}");
        if status == 200 && ok(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} never {what}: {body:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ms(rfc3339: &Value) -> i64 {
    let at = humantime::parse_rfc3339(rfc3339.as_str().unwrap()).unwrap();
    at.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The wall clock in milliseconds since the epoch, as the daemon stamps transitions.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn rfc3339(ms: i64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
        .to_string()
}

/// The daemon's transitions of `id`, oldest first: `(at_ms, to)`.
fn moves(history: &Value) -> Vec<(i64, String)> {
    let mut moves: Vec<(i64, String)> = history["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (ms(&t["at"]), t["to"].as_str().unwrap().to_owned()))
        .collect();
    moves.reverse();
    moves
}

/// The history API end to end on one backend: transitions with their reasons, hourly rollups,
/// operator actions with who did them, group transitions, and an uptime that matches the
/// transitions to the millisecond with maintenance left out.
async fn written_and_read_back(dir: &Path, extra_config: &str) {
    let mut api = Switch::new();
    config(dir, api.addr, extra_config);
    let state = dir.join("state");
    let daemon = Daemon::start_with(
        &dir.join("targets.yaml"),
        &["--state-dir", state.to_str().unwrap()],
    );
    daemon.wait_states(&[("api", "UP"), ("gone", "DOWN")]).await;
    let history = wait_json(&daemon, "/v1/targets/gone/history", "recorded DOWN", |h| {
        h["transitions"].as_array().is_some_and(|t| !t.is_empty())
    })
    .await;
    let down = &history["transitions"][0];
    assert_eq!(
        (down["from"].as_str(), down["to"].as_str()),
        (Some("PROBING"), Some("DOWN"))
    );
    assert_eq!(down["cause"], "results");
    assert_eq!(down["reason"], "refused");
    assert!(
        down["detail"].as_str().unwrap().contains("refused"),
        "{down}"
    );
    assert!(
        !history["results"].as_array().unwrap().is_empty(),
        "recent results stay"
    );

    // The group over api has its verdict (rise judgments, a second apart) before api's outages.
    daemon.wait_states(&[("shop", "UP")]).await;

    // DOWN 2 periods, then maintenance, then UP again. The test keeps its own clock: each
    // outage began after it closed the port and before it saw DOWN, and ended after it opened
    // the port and before it saw UP.
    let mut outages = Vec::new();
    for _ in 0..2 {
        let closed = wall_ms();
        api.close();
        daemon.wait_states(&[("api", "DOWN")]).await;
        let seen_down = wall_ms();
        api.open();
        let opened = wall_ms();
        daemon.wait_states(&[("api", "UP")]).await;
        outages.push(((closed, seen_down), (opened, wall_ms())));
    }
    let (status, body) = daemon
        .send(
            reqwest::Method::PUT,
            "/v1/targets/api/maintenance",
            None,
            Some(r#"{"reason": "swap <disk>", "duration": "1h"}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    daemon.wait_states(&[("api", "MAINTENANCE")]).await;
    let (status, body) = daemon
        .send(
            reqwest::Method::DELETE,
            "/v1/targets/api/maintenance",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let history = wait_json(
        &daemon,
        "/v1/targets/api/history",
        "recorded its moves",
        |h| {
            let moves = moves(h);
            moves.len() >= 7
                && moves[6].1 == "PROBING"
                && h["actions"].as_array().unwrap().len() == 2
        },
    )
    .await;
    let api_moves = moves(&history);
    let states: Vec<&str> = api_moves.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        &states[..7],
        ["UP", "DOWN", "UP", "DOWN", "UP", "MAINTENANCE", "PROBING"],
        "{history:#}"
    );
    let actions = history["actions"].as_array().unwrap();
    assert_eq!(actions[0]["action"], "maintenance_ended");
    assert_eq!(actions[1]["action"], "maintenance_set");
    assert_eq!(actions[1]["detail"], "swap <disk> (for 1h)");
    // A loopback peer without a token: the audit names the peer.
    assert!(
        actions[1]["who"].as_str().unwrap().contains("127.0.0.1"),
        "{actions:?}"
    );
    let hours = history["hours"].as_array().unwrap();
    let runs: u64 = hours.iter().map(|h| h["runs"].as_u64().unwrap()).sum();
    let failures: u64 = hours.iter().map(|h| h["failures"].as_u64().unwrap()).sum();
    assert!(runs >= 5 && failures >= 2, "{hours:?}");
    assert!(hours[0]["latency_ms"]["p50"].as_f64().is_some());

    // Exact: from the first UP to the end of maintenance, up and down as the transitions say.
    let (from, until) = (api_moves[0].0, api_moves[6].0);
    let expected_down = (api_moves[2].0 - api_moves[1].0) + (api_moves[4].0 - api_moves[3].0);
    let expected_up = (api_moves[1].0 - api_moves[0].0)
        + (api_moves[3].0 - api_moves[2].0)
        + (api_moves[5].0 - api_moves[4].0);
    let window = format!("{}..{}", rfc3339(from), rfc3339(until));
    let u = json(&daemon, &format!("/v1/targets/api/uptime?window={window}")).await;
    // Against the test's own clock: each outage no shorter than from seeing DOWN to opening
    // the port, no longer than from closing it to seeing UP.
    let shortest: i64 = outages
        .iter()
        .map(|((_, down), (open, _))| open - down)
        .sum();
    let longest: i64 = outages.iter().map(|((close, _), (_, up))| up - close).sum();
    let down_ms = u["down_ms"].as_i64().unwrap();
    assert!(
        (shortest..=longest).contains(&down_ms),
        "down {down_ms} ms, outside the {shortest}..={longest} ms the test timed: {u}"
    );
    assert_eq!(u["down_ms"].as_i64(), Some(expected_down), "{u}");
    assert_eq!(u["up_ms"].as_i64(), Some(expected_up), "{u}");
    assert_eq!(
        u["maintenance_ms"].as_i64(),
        Some(api_moves[6].0 - api_moves[5].0),
        "{u}"
    );
    assert_eq!(u["unknown_ms"].as_i64(), Some(0));
    // The shares of milliseconds above are exact; the ratio is theirs (JSON's float text may
    // come back a last bit off).
    let ratio = expected_up as f64 / (expected_up + expected_down) as f64;
    assert!((u["uptime"].as_f64().unwrap() - ratio).abs() < 1e-12, "{u}");

    // The group's verdict follows its critical dependency (DOWN as it went DOWN, however short
    // the outage), and has an uptime of its own. (Its score stays low a while after its
    // dependency's first outage, so it may pass through DEGRADED on its way back, and the second
    // outage may fall within the same DOWN spell.)
    let shop = wait_json(&daemon, "/v1/targets/shop/history", "recorded", |h| {
        let states: Vec<String> = moves(h).into_iter().map(|(_, s)| s).collect();
        states.starts_with(&["UP".to_owned(), "DOWN".to_owned()])
            && states[2..].contains(&"UP".to_owned())
    })
    .await;
    assert_eq!(
        shop["transitions"].as_array().unwrap().last().unwrap()["cause"],
        "results"
    );
    let causes: Vec<&str> = shop["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["cause"].as_str().unwrap())
        .collect();
    assert!(causes.contains(&"dependency_down"), "{causes:?}");
    let u = json(&daemon, "/v1/targets/shop/uptime?window=24h").await;
    assert!(
        u["down_ms"].as_i64().unwrap() > 0 && u["up_ms"].as_i64().unwrap() > 0,
        "{u}"
    );

    // Bad requests get a reason.
    for (path, status) in [
        ("/v1/targets/api/uptime?window=1y", 400),
        ("/v1/targets/api/history?limit=0", 400),
        ("/v1/targets/api/history?since=yesterday", 400),
        ("/v1/targets/nobody/uptime", 404),
    ] {
        let response = daemon.get(path).await;
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{path}: {body}"
        );
    }
    // Every field of the status, as the README lists them.
    let topology: support::views::Topology =
        support::views::strict(&json(&daemon, "/v1/topology").await);
    let status = topology.history().unwrap();
    assert_eq!(status.state, "ok", "{status:?}");
    assert!(status.backend == "sqlite" || status.backend == "postgres");
    assert!(
        status.error.is_none() && status.moved_aside.is_none(),
        "{status:?}"
    );
    assert_eq!(
        (status.write_errors, status.dropped, status.capped),
        (0, 0, 0)
    );
    assert!(!status.location.contains("***") || status.backend == "postgres");
}

#[tokio::test]
async fn history_is_written_and_read_back_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    written_and_read_back(dir.path(), "").await;
    // A real SQLite file, which sqlite3 opens.
    assert!(dir.path().join("state/history.db").is_file());
}

#[tokio::test]
async fn history_is_written_to_a_shared_postgres() {
    let Some(pg) = postgres_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    written_and_read_back(
        dir.path(),
        &format!("history:\n  postgres: {{ url: \"{}\" }}\n", pg.url()),
    )
    .await;
    assert!(
        !dir.path().join("state/history.db").exists(),
        "postgres, not sqlite"
    );
}

#[tokio::test]
async fn history_survives_a_restart_and_the_time_between_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let api = Switch::new();
    config(dir.path(), api.addr, "");
    let state = dir.path().join("state");
    let args = ["--state-dir", state.to_str().unwrap()];
    let mut first = Daemon::start_with(&dir.path().join("targets.yaml"), &args);
    first.wait_states(&[("api", "UP")]).await;
    wait_json(&first, "/v1/targets/api/history", "recorded UP", |h| {
        !moves(h).is_empty()
    })
    .await;
    first.signal("-TERM");
    assert!(first.wait_exit().success());
    let stopped = history_now();

    let second = Daemon::start_with(&dir.path().join("targets.yaml"), &args);
    second.wait_states(&[("api", "UP")]).await;
    // Both daemons' runs come into the hour's rollup: the first's at its stop, the second's as
    // its target hands them over (32 runs at a time at this interval).
    let runs = |h: &Value| -> u64 {
        h["hours"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["runs"].as_u64().unwrap())
            .sum()
    };
    let results = |h: &Value| h["results"].as_array().unwrap().len() as u64;
    // Waited for: the history may still be opening (503).
    let opened = wait_json(
        &second,
        "/v1/targets/api/history",
        "the history open",
        |_| true,
    )
    .await;
    let stopped_runs = runs(&opened);
    let history = wait_json(&second, "/v1/targets/api/history", "recorded both", |h| {
        moves(h).len() >= 2 && runs(h) > stopped_runs.max(results(h))
    })
    .await;
    let moves = moves(&history);
    assert!(moves[0].0 < stopped && moves[1].0 > stopped, "{moves:?}");
    assert!(
        stopped_runs > 0,
        "the first daemon's runs were written at its stop"
    );
    let u = json(&second, "/v1/targets/api/uptime?window=24h").await;
    assert!(u["unknown_ms"].as_i64().unwrap() > 0, "{u}");
    assert_eq!(
        u["down_ms"].as_i64(),
        Some(0),
        "a restart is no downtime: {u}"
    );
    assert_eq!(u["uptime"].as_f64(), Some(1.0));
}

/// SIGKILL just after the API showed a transition: after a restart, every transition older
/// than the history's write interval (a second) is there, on the backend `extra` configures.
async fn survives_a_sigkill(dir: &Path, extra: &str) {
    let mut api = Switch::new();
    config(dir, api.addr, extra);
    let state = dir.join("state");
    let args = ["--state-dir", state.to_str().unwrap()];
    let mut first = Daemon::start_with(&dir.join("targets.yaml"), &args);
    first.wait_states(&[("api", "UP")]).await;
    api.close();
    first.wait_states(&[("api", "DOWN")]).await;
    api.open();
    first.wait_states(&[("api", "UP")]).await;
    // Older than the write interval from here on.
    let written_by = wall_ms();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    api.close();
    first.wait_states(&[("api", "DOWN")]).await;
    // The API has just shown it: killed at once, nothing flushed at a stop.
    first.child.kill().unwrap();
    let _ = first.child.wait();
    api.open();

    let second = Daemon::start_with(&dir.join("targets.yaml"), &args);
    let history = wait_json(&second, "/v1/targets/api/history", "read back", |h| {
        !moves(h).is_empty()
    })
    .await;
    let kept: Vec<(i64, String)> = moves(&history)
        .into_iter()
        .filter(|(at, _)| *at <= written_by)
        .collect();
    let states: Vec<&str> = kept.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        states,
        ["UP", "DOWN", "UP"],
        "the transitions older than a second before the kill: {history:#}"
    );
}

#[tokio::test]
async fn history_survives_a_sigkill_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    survives_a_sigkill(dir.path(), "").await;
}

#[tokio::test]
async fn history_survives_a_sigkill_in_postgres() {
    let Some(pg) = postgres_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    survives_a_sigkill(
        dir.path(),
        &format!("history:\n  postgres: {{ url: \"{}\" }}\n", pg.url()),
    )
    .await;
}

fn history_now() -> i64 {
    probe_engine::history::now_ms()
}

#[tokio::test]
async fn a_garbage_or_truncated_database_is_moved_aside_and_the_daemon_runs() {
    let dir = tempfile::tempdir().unwrap();
    let api = Switch::new();
    config(dir.path(), api.addr, "");
    let state = dir.path().join("state");
    let args = ["--state-dir", state.to_str().unwrap()];
    let db = state.join("history.db");

    // A sound database first, to cut short.
    let mut daemon = Daemon::start_with(&dir.path().join("targets.yaml"), &args);
    daemon.wait_states(&[("api", "UP")]).await;
    wait_json(&daemon, "/v1/targets/api/history", "recorded UP", |h| {
        !moves(h).is_empty()
    })
    .await;
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    let bytes = std::fs::read(&db).unwrap();
    let truncated = &bytes[..bytes.len() / 3];

    for (what, content) in [
        ("garbage", &b"this is not a database, not at all"[..]),
        ("truncated", truncated),
    ] {
        for aside in std::fs::read_dir(&state).unwrap() {
            let aside = aside.unwrap().path();
            if aside.to_string_lossy().contains(".corrupt-") {
                std::fs::remove_file(aside).unwrap();
            }
        }
        for journal in ["history.db-wal", "history.db-shm"] {
            let _ = std::fs::remove_file(state.join(journal));
        }
        std::fs::write(&db, content).unwrap();
        let mut daemon = Daemon::start_with(&dir.path().join("targets.yaml"), &args);
        let line = daemon.wait_log("history database unusable: moved aside, starting a new one");
        let moved = line["moved_to"].as_str().unwrap().to_owned();
        assert!(Path::new(&moved).is_file(), "{what}: {line}");
        assert_eq!(
            std::fs::read(&moved).unwrap(),
            content,
            "{what}: kept as it was"
        );
        daemon.wait_states(&[("api", "UP")]).await;
        let topology = json(&daemon, "/v1/topology").await;
        assert_eq!(
            topology["history"]["moved_aside"].as_str(),
            Some(moved.as_str())
        );
        // The new database records.
        wait_json(&daemon, "/v1/targets/api/history", "recorded UP", |h| {
            !moves(h).is_empty()
        })
        .await;
    }
}

#[tokio::test]
async fn an_unusable_history_is_reported_and_probing_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let api = Switch::new();
    // Nothing listens there: the database cannot be reached.
    config(
        dir.path(),
        api.addr,
        &format!(
            "history:\n  postgres: {{ url: \"postgres://pe:pw@{}/history\" }}\n",
            closed_port()
        ),
    );
    let daemon = Daemon::start_with(&dir.path().join("targets.yaml"), &[]);
    daemon.wait_states(&[("api", "UP"), ("gone", "DOWN")]).await;
    let health = wait_json(&daemon, "/v1/topology", "said so", |t| {
        t["history"]["state"] == "off"
    })
    .await;
    let error = health["history"]["error"].as_str().unwrap();
    assert!(!error.is_empty());
    assert!(
        !health.to_string().contains(":pw@"),
        "no password shown: {health}"
    );
    let response = daemon.get("/health").await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["checks"]["history:database"][0]["status"], "warn",
        "{body}"
    );
    let response = daemon.get("/v1/targets/api/uptime").await;
    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn a_targets_uptime_becomes_its_sla_in_the_graph_when_scoring_asks() {
    let dir = tempfile::tempdir().unwrap();
    let mut api = Switch::new();
    config(
        dir.path(),
        api.addr,
        "scoring:\n  window: 5\n  sla_window: 1h\n",
    );
    let state = dir.path().join("state");
    let daemon = Daemon::start_with(
        &dir.path().join("targets.yaml"),
        &["--state-dir", state.to_str().unwrap()],
    );
    daemon.wait_states(&[("api", "UP")]).await;
    api.close();
    daemon.wait_states(&[("api", "DOWN")]).await;
    api.open();
    daemon.wait_states(&[("api", "UP")]).await;
    // Once its window is all good again, its score is its SLA: its uptime over the hour.
    let explained = wait_json(
        &daemon,
        "/v1/targets/api/explain",
        "scored by its SLA",
        |e| {
            e["stability"].as_f64().is_some_and(|s| s < 1.0)
                && e["sla"].as_f64() == e["stability"].as_f64()
        },
    )
    .await;
    let sla = explained["sla"].as_f64().unwrap();
    assert!(sla > 0.0 && sla < 1.0, "{explained}");
    assert!(
        explained["summary"].as_str().unwrap().contains("sla"),
        "{explained}"
    );
    assert_eq!(explained["node"]["score"].as_f64(), Some(sla));
    let u = json(&daemon, "/v1/targets/api/uptime?window=24h").await;
    assert!(u["down_ms"].as_i64().unwrap() > 0, "{u}");
    // The group above it feels it through its score.
    let shop = json(&daemon, "/v1/targets/shop/explain").await;
    assert!(shop["node"]["score"].as_f64().unwrap() < 1.0, "{shop}");
}

#[tokio::test]
async fn a_failing_database_is_counted_and_shown_and_probing_goes_on() {
    let Some(pg) = postgres_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut api = Switch::new();
    config(
        dir.path(),
        api.addr,
        &format!("history:\n  postgres: {{ url: \"{}\" }}\n", pg.url()),
    );
    let daemon = Daemon::start_with(&dir.path().join("targets.yaml"), &[]);
    daemon.wait_states(&[("api", "UP")]).await;
    wait_json(&daemon, "/v1/targets/api/history", "recorded UP", |h| {
        !moves(h).is_empty()
    })
    .await;
    // The database goes away: writes fail from now on.
    drop(pg);
    let topology = wait_json(&daemon, "/v1/topology", "saw writes fail", |t| {
        t["history"]["state"] == "failing"
    })
    .await;
    assert!(
        topology["history"]["write_errors"].as_u64().unwrap() >= 1,
        "{topology}"
    );
    assert!(
        topology["history"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
    );
    // Probing is not held up: the target still moves, and its transitions wait.
    api.close();
    daemon.wait_states(&[("api", "DOWN")]).await;
    api.open();
    daemon.wait_states(&[("api", "UP")]).await;
    let topology = wait_json(&daemon, "/v1/topology", "kept the rows", |t| {
        t["history"]["pending"].as_u64().is_some_and(|p| p >= 2)
    })
    .await;
    assert_eq!(topology["history"]["dropped"], 0, "{topology}");
    let body: Value = daemon.get("/health").await.json().await.unwrap();
    let check = &body["checks"]["history:database"][0];
    assert_eq!(check["status"], "warn", "{body}");
    assert!(
        check["output"].as_str().unwrap().contains("writes fail"),
        "{check}"
    );
    let metrics = daemon.metrics().await;
    assert!(
        metrics
            .get("probe_history_write_errors_total", &[])
            .unwrap_or(0.0)
            >= 1.0
    );
}

/// `scope=cluster`: every target's owner, by id, once every target has one.
async fn owners(daemon: &Daemon, total: usize) -> std::collections::BTreeMap<String, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = json(daemon, "/v1/targets?scope=cluster").await;
        let owners: std::collections::BTreeMap<String, String> = body["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                Some((
                    t["id"].as_str()?.to_owned(),
                    t["owner"].as_str()?.to_owned(),
                ))
            })
            .collect();
        let names: std::collections::BTreeSet<&String> = owners.values().collect();
        if owners.len() == total && names.len() == 2 {
            return owners;
        }
        assert!(Instant::now() < deadline, "never shared out: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_cluster_sharing_postgres_shows_every_targets_history_from_any_member() {
    let Some(pg) = postgres_or_skip() else { return };
    let etcd = probe_testkit::etcd::TestEtcd::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Accepting, so that the many connects never fill the backlog.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let mut yaml = format!(
        "cluster:\n  etcd: {{ endpoints: [\"{}\"] }}\n  lease_ttl: 2s\n\
         history:\n  postgres: {{ url: \"{}\" }}\n\
         defaults:\n  interval: 300ms\n  timeout: 200ms\n  rise: 1\n  fall: 1\ntargets:\n",
        etcd.endpoint(),
        pg.url()
    );
    for i in 0..12 {
        yaml.push_str(&format!(
            "  - id: t{i:02}\n    tcp: {{ address: \"{addr}\" }}\n"
        ));
    }
    let config = dir.path().join("probes.yaml");
    std::fs::write(&config, yaml).unwrap();
    let a = Daemon::start_with(&config, &["--member", "a"]);
    let b = Daemon::start_with(&config, &["--member", "b"]);
    let owners = owners(&a, 12).await;
    let theirs = owners
        .iter()
        .find(|(_, o)| *o == "b")
        .map(|(t, _)| t.clone())
        .unwrap();
    let ours = owners
        .iter()
        .find(|(_, o)| *o == "a")
        .map(|(t, _)| t.clone())
        .unwrap();
    // Member a answers for b's target from the shared history: b's runs and b's transition,
    // written once (a's adopted copy is not written again).
    for member in [&a, &b] {
        for id in [&theirs, &ours] {
            let history = wait_json(member, &format!("/v1/targets/{id}/history"), "shown", |h| {
                !moves(h).is_empty()
                    && h["hours"].as_array().is_some_and(|hours| {
                        hours.iter().any(|h| h["runs"].as_u64().unwrap_or(0) > 0)
                    })
            })
            .await;
            let ups: Vec<&Value> = history["transitions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["to"] == "UP")
                .collect();
            assert_eq!(ups.len(), 1, "{id} through {}: {history:#}", member.addr);
            assert_eq!(
                ups[0]["cause"], "results",
                "the owner's, not an adopted copy"
            );
        }
    }
    let u = json(&a, &format!("/v1/targets/{theirs}/uptime?window=24h")).await;
    assert_eq!(u["uptime"].as_f64(), Some(1.0), "{u}");
}

#[tokio::test]
async fn a_reload_that_changes_the_history_section_says_it_waits_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let api = Switch::new();
    config(dir.path(), api.addr, "");
    let state = dir.path().join("state");
    let mut daemon = Daemon::start_with(
        &dir.path().join("targets.yaml"),
        &["--state-dir", state.to_str().unwrap()],
    );
    daemon.wait_states(&[("api", "UP")]).await;
    let running = |t: &Value| t["history"]["state"] == "ok";
    wait_json(&daemon, "/v1/topology", "shows the history open", running).await;
    config(dir.path(), api.addr, "history:\n  max_size: 1GiB\n");
    daemon.signal("-HUP");
    daemon.wait_log(
        "the history section or scoring.sla_window changed: they take effect at the next start",
    );
    // The running history goes on.
    let topology = json(&daemon, "/v1/topology").await;
    assert_eq!(topology["history"]["state"], "ok", "{topology}");
}
