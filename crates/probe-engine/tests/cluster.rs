//! A cluster of real daemons through a real etcd (started per test on loopback ports): targets
//! are shared out by ownership, every member shows every target, a killed member's targets are
//! taken over without a transition, a joining member takes about its share and moves nothing
//! else, a stopping member hands its targets over at once, and a name in use is refused.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use probe_engine::testing::AcceptServer;
use probe_etcd::testing::TestEtcd;
use serde_json::Value;
use support::{Daemon, WAIT};
use tokio::time::Instant;

/// The targets' interval.
const INTERVAL: Duration = Duration::from_secs(1);
/// The members' lease TTL.
const TTL: Duration = Duration::from_secs(2);

/// Writes a config with the cluster section and `count` TCP targets, `t000`... on the
/// listeners (round robin), plus `down`, on a closed port.
fn write_config(
    dir: &Path,
    etcd: &TestEtcd,
    ttl: Duration,
    listeners: &[SocketAddr],
    count: usize,
) {
    let mut text = format!(
        "cluster:\n  etcd: {{endpoints: [\"{}\"]}}\n  lease_ttl: {}s\ndefaults:\n  interval: {}ms\n  timeout: 300ms\n  rise: 1\n  fall: 1\n  flap: false\ntargets:\n",
        etcd.endpoint(),
        ttl.as_secs(),
        INTERVAL.as_millis(),
    );
    for i in 0..count {
        let addr = listeners[i % listeners.len()];
        text.push_str(&format!(
            "  - id: t{i:03}\n    tcp: {{address: \"{addr}\"}}\n"
        ));
    }
    text.push_str(&format!(
        "  - id: down\n    tcp: {{address: \"{}\"}}\n",
        support::closed_port()
    ));
    std::fs::write(dir.join("probes.yaml"), text).unwrap();
}

fn member(dir: &Path, name: &str) -> Daemon {
    Daemon::start_with(&dir.join("probes.yaml"), &["--member", name])
}

async fn cluster_view(daemon: &Daemon) -> Value {
    daemon.get("/v1/cluster").await.json().await.unwrap()
}

/// `scope=cluster`: every target's owner, by id.
async fn owners(daemon: &Daemon) -> BTreeMap<String, String> {
    let body: Value = daemon
        .get("/v1/targets?scope=cluster")
        .await
        .json()
        .await
        .unwrap();
    body["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_owned(),
                t["owner"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The default scope: the targets this member probes.
async fn local_ids(daemon: &Daemon) -> BTreeSet<String> {
    daemon
        .targets()
        .await
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until every daemon sees exactly `names` as members and agrees on every target's
/// owner, each one of `names`; returns the owners.
async fn settled(daemons: &[&Daemon], names: &[&str], total: usize) -> BTreeMap<String, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut agreed: Option<BTreeMap<String, String>> = None;
        let mut ok = true;
        for daemon in daemons {
            let view = cluster_view(daemon).await;
            let seen: Vec<&str> = view["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].as_str().unwrap())
                .collect();
            let owners = owners(daemon).await;
            ok &= seen == names
                && owners.len() == total
                && owners.values().all(|o| names.contains(&o.as_str()))
                && agreed.as_ref().is_none_or(|a| *a == owners);
            agreed = Some(owners);
        }
        if ok {
            return agreed.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the members never agreed on {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `target state changed` lines a daemon logged for `id` so far.
fn transitions_of(daemon: &Daemon, id: &str) -> Vec<Value> {
    daemon
        .all_logs()
        .into_iter()
        .filter(|l| l["message"] == "target state changed" && l["target_id"] == id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_the_targets_and_survive_a_kill_and_a_join() {
    let etcd = TestEtcd::start().await.expect("etcd");
    let servers: Vec<AcceptServer> = (0..10)
        .map(|_| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            AcceptServer::start(listener).unwrap()
        })
        .collect();
    let listeners: Vec<SocketAddr> = servers.iter().map(AcceptServer::addr).collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd, TTL, &listeners, 299);
    let total = 300;
    let mut a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let c = member(dir.path(), "c");
    let owners = settled(&[&a, &b, &c], &["a", "b", "c"], total).await;

    // Every target is probed by exactly one member: the local listings are disjoint and add up.
    let mut seen = BTreeSet::new();
    let mut counted = 0;
    for (name, daemon) in [("a", &a), ("b", &b), ("c", &c)] {
        let local = local_ids(daemon).await;
        let owned = owners.values().filter(|o| *o == name).count();
        assert_eq!(local.len(), owned, "{name}");
        counted += local.len();
        seen.extend(local);
        let view = cluster_view(daemon).await;
        let sum: u64 = view["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["owned"].as_u64().unwrap())
            .sum();
        assert_eq!(sum as usize, total);
        assert_eq!(view["member"], name);
    }
    assert_eq!((counted, seen.len()), (total, total));
    for name in ["a", "b", "c"] {
        let owned = owners.values().filter(|o| *o == name).count();
        assert!((50..=150).contains(&owned), "{name} owns {owned}");
    }
    // Every member shows the DOWN target DOWN, whoever probes it.
    for daemon in [&a, &b, &c] {
        for (id, state) in [("down", "DOWN"), ("t000", "UP")] {
            daemon
                .wait_target(id, state, |t| t.state == state)
                .await;
        }
    }

    // The DOWN target's owner is killed: the survivors take its targets over, and the DOWN
    // target moves to a new owner without a transition.
    let victim = owners["down"].clone();
    let mut daemons = BTreeMap::from([
        ("a".to_owned(), a),
        ("b".to_owned(), b),
        ("c".to_owned(), c),
    ]);
    let mut killed = daemons.remove(&victim).unwrap();
    let survivors: Vec<&Daemon> = daemons.values().collect();
    let names: Vec<&str> = daemons.keys().map(String::as_str).collect();
    let before: Vec<usize> = survivors
        .iter()
        .map(|d| transitions_of(d, "down").len())
        .collect();
    killed.child.kill().unwrap();
    let _ = killed.child.wait();
    let killed_at = Instant::now();
    let after_kill = settled(&survivors, &names, total).await;
    let failover = killed_at.elapsed();
    // Within the TTL plus an interval, with room for a busy machine (the benchmark measures it).
    assert!(
        failover < 2 * (TTL + INTERVAL),
        "failover took {failover:?}"
    );
    for (id, owner) in &owners {
        if *owner != victim {
            assert_eq!(after_kill[id], *owner, "{id} moved though its owner lived");
        }
    }
    let new_owner = daemons.get(&after_kill["down"]).unwrap();
    // The new owner probes it: its latest result is newer than the kill.
    new_owner
        .wait_target("down", "probed by its new owner", |t| {
            t.last
                .as_ref()
                .is_some_and(|l| l.at.0 > std::time::SystemTime::now() - INTERVAL * 2)
        })
        .await;
    tokio::time::sleep(3 * INTERVAL).await;
    for (daemon, before) in survivors.iter().zip(&before) {
        assert_eq!(daemon.detail("down").await.target.state, "DOWN");
        assert_eq!(
            transitions_of(daemon, "down").len(),
            *before,
            "a transition at the handover"
        );
    }
    drop(killed);

    // A member joins: it takes about its share, and only from others.
    let d = member(dir.path(), &victim);
    let mut all: Vec<&Daemon> = daemons.values().collect();
    all.push(&d);
    let mut joined_names: Vec<&str> = daemons.keys().map(String::as_str).collect();
    joined_names.push(&victim);
    joined_names.sort_unstable();
    let after_join = settled(&all, &joined_names, total).await;
    let taken = after_join.values().filter(|o| **o == victim).count();
    assert!((40..=170).contains(&taken), "{victim} took {taken}");
    for (id, owner) in &after_join {
        if *owner != victim {
            assert_eq!(after_kill[id], *owner, "{id} moved to another survivor");
        }
    }
    // A second daemon under a name in use is refused, naming who holds it.
    let mut twin = std::process::Command::new(support::BIN)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--member",
            &victim,
            "--config",
        ])
        .arg(dir.path().join("probes.yaml"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = twin.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut twin.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains(&format!("the member name {victim} is taken"))
            && err.contains(&d.addr.to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_hands_its_targets_over_at_once() {
    let etcd = TestEtcd::start().await.expect("etcd");
    let server = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A TTL far longer than the handover may take.
    write_config(
        dir.path(),
        &etcd,
        Duration::from_secs(30),
        &[server.addr()],
        59,
    );
    let mut a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let owners = settled(&[&a, &b], &["a", "b"], 60).await;
    assert!(owners.values().any(|o| o == "a"));
    let stopped = Instant::now();
    a.signal("-TERM");
    let after = settled(&[&b], &["b"], 60).await;
    let took = stopped.elapsed();
    assert!(after.values().all(|o| o == "b"));
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}, the TTL is 30s"
    );
    assert!(a.wait_exit().success());
    let left = a.all_logs();
    assert!(left.iter().any(|l| l["message"] == "left the cluster"));
}
