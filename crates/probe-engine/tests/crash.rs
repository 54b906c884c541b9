//! Crash safety of `--state-dir`: the daemon is killed with SIGKILL, over and over, while
//! operator maintenance is being set and ended (one more change in flight at each kill). After
//! every restart the saved state loads, or (when the test damaged the file) is reported corrupt
//! and moved aside; the daemon always starts; and the last acknowledged change of every target
//! is in force.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use support::{Daemon, write_targets};

const TARGETS: [&str; 3] = ["a", "b", "c"];
const ROUNDS: usize = 12;

/// Whether each target is in maintenance, as the API shows it.
async fn in_maintenance(daemon: &Daemon) -> HashMap<String, bool> {
    let mut shown = HashMap::new();
    for id in TARGETS {
        let target: serde_json::Value = daemon
            .get(&format!("/v1/targets/{id}"))
            .await
            .json()
            .await
            .unwrap();
        shown.insert(id.to_owned(), !target["maintenance"].is_null());
    }
    shown
}

fn start(config: &Path, state: &Path) -> Daemon {
    Daemon::start_with(config, &["--state-dir", state.to_str().unwrap()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_never_loses_an_acknowledged_change() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), &TARGETS.map(|id| (id, addr)));
    let state = tempfile::tempdir().unwrap();
    let mut acknowledged: HashMap<String, bool> =
        TARGETS.iter().map(|id| ((*id).to_owned(), false)).collect();
    let mut moved_aside = 0;
    for round in 0..ROUNDS {
        let mut daemon = start(dir.path(), state.path());
        let corrupted = round % 4 == 3;
        if corrupted {
            let line = daemon.wait_logged(
                "the state file is corrupt: moved aside; saved maintenance not restored",
                1,
            );
            assert!(
                line["moved_to"].as_str().unwrap().contains(".corrupt-"),
                "{line}"
            );
            moved_aside += 1;
            // Nothing was restored: the damaged file held the only copy.
            acknowledged.values_mut().for_each(|m| *m = false);
        }
        assert_eq!(
            in_maintenance(&daemon).await,
            acknowledged,
            "round {round}: the state after a SIGKILL"
        );
        // A few changes, each acknowledged before the next.
        for step in 0..3 {
            let id = TARGETS[(round + step) % TARGETS.len()];
            let on = !acknowledged[id];
            let (status, answer) = change(&daemon, id, on).await;
            assert_eq!(status, 200, "round {round}: {answer}");
            acknowledged.insert(id.to_owned(), on);
        }
        // One more change on its way, killed wherever it is: either outcome may stand, so the
        // test learns which from the next start (it was never acknowledged).
        let id = TARGETS[round % TARGETS.len()];
        let in_flight = {
            let http = daemon.http.clone();
            let url = daemon.url(&format!("/v1/targets/{id}/maintenance"));
            let on = !acknowledged[id];
            tokio::spawn(async move {
                let request = if on {
                    http.put(url)
                        .header("content-type", "application/json")
                        .body(r#"{"reason": "crash test", "duration": "1h"}"#)
                } else {
                    http.delete(url)
                };
                let _ = request.send().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(round as u64 % 3)).await;
        daemon.child.kill().unwrap();
        let _ = daemon.child.wait();
        let _ = in_flight.await;
        drop(daemon);
        // What the unacknowledged change left is learnt from a start without more changes.
        let daemon = start(dir.path(), state.path());
        let shown = in_maintenance(&daemon).await;
        for other in TARGETS.iter().filter(|t| **t != id) {
            assert_eq!(
                shown[*other], acknowledged[*other],
                "round {round}: {other}"
            );
        }
        acknowledged.insert(id.to_owned(), shown[id]);
        drop(daemon);
        if round % 4 == 2 {
            // Damaged on disk before the next start: a half-written file left by a tool.
            std::fs::write(
                state.path().join("maintenance.json"),
                "{\"maintenance\": [{\"ta",
            )
            .unwrap();
        }
    }
    assert_eq!(moved_aside, ROUNDS / 4);
    let aside = std::fs::read_dir(state.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
        })
        .count();
    assert!(
        aside >= 1,
        "the damaged files were kept for a person to look at"
    );
}

/// Puts `id` in maintenance (`on`) or ends it; the daemon answers once it is saved.
async fn change(daemon: &Daemon, id: &str, on: bool) -> (u16, serde_json::Value) {
    let path = format!("/v1/targets/{id}/maintenance");
    if on {
        daemon
            .send(
                Method::PUT,
                &path,
                None,
                Some(r#"{"reason": "crash test", "duration": "1h"}"#),
            )
            .await
    } else {
        daemon.send(Method::DELETE, &path, None, None).await
    }
}
