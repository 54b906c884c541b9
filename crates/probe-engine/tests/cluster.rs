//! A cluster of real daemons through a real etcd (started per test on loopback ports): targets
//! are shared out by ownership, every member shows every target, a killed member's targets are
//! taken over without a transition, a joining member takes about its share and moves nothing
//! else, a stopping member hands its targets over at once, and a name in use is refused.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use probe_testkit::etcd::TestEtcd;
use probe_testkit::netns_or_skip;
use probe_testkit::{AcceptServer, Netns};
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
    write_config_at(dir, &etcd.endpoint(), ttl, "", listeners, count);
}

/// [`write_config`] with etcd at `endpoint` and `extra` lines in the cluster section.
fn write_config_at(
    dir: &Path,
    endpoint: &str,
    ttl: Duration,
    extra: &str,
    listeners: &[SocketAddr],
    count: usize,
) {
    let mut text = format!(
        "cluster:\n  etcd: {{endpoints: [\"{endpoint}\"]}}\n  lease_ttl: {}s\n{extra}defaults:\n  interval: {}ms\n  timeout: 300ms\n  rise: 1\n  fall: 1\n  flap: false\ntargets:\n",
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

/// `n` listeners that accept and drop, each noting when it accepted.
async fn accepting(n: usize) -> (Vec<SocketAddr>, Vec<Arc<Mutex<Vec<Instant>>>>) {
    let mut addrs = Vec::new();
    let mut accepts = Vec::new();
    for _ in 0..n {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let at = Arc::new(Mutex::new(Vec::new()));
        accepts.push(at.clone());
        tokio::spawn(async move {
            while let Ok(_stream) = listener.accept().await {
                at.lock().unwrap().push(Instant::now());
            }
        });
    }
    (addrs, accepts)
}

/// The verdicts `writes` (an etcd watch) has seen so far, until it is quiet for 200 ms.
async fn written(writes: &mut probe_etcd::etcd_client::WatchStream) -> Vec<Value> {
    let mut puts = Vec::new();
    while let Ok(Some(reply)) = tokio::time::timeout(Duration::from_millis(200), writes.message())
        .await
        .unwrap_or(Ok(None))
    {
        for event in reply.events() {
            if let Some(kv) = event.kv() {
                puts.push(serde_json::from_slice::<Value>(kv.value()).unwrap());
            }
        }
    }
    puts
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
    // A three-member etcd, as in production; the daemons are given every endpoint.
    let etcd = TestEtcd::start_cluster(3).await.expect("etcd");
    let endpoints: Vec<String> = etcd.iter().map(TestEtcd::endpoint).collect();
    // A listener per target, so that who probes a target, and when, shows in its accepts.
    let (listeners, accepts) = accepting(299).await;
    let dir = tempfile::tempdir().unwrap();
    write_config_at(
        dir.path(),
        &endpoints.join("\", \""),
        TTL,
        "",
        &listeners,
        299,
    );
    let total = 300;
    let a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let c = member(dir.path(), "c");
    let owners = settled(&[&a, &b, &c], &["a", "b", "c"], total).await;

    // `owner=` lists exactly what each member owns, as any member sees it.
    for name in ["a", "b", "c"] {
        let body: Value = b
            .get(&format!("/v1/targets?scope=cluster&owner={name}"))
            .await
            .json()
            .await
            .unwrap();
        let listed: BTreeSet<&str> = body["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        let owned: BTreeSet<&str> = owners
            .iter()
            .filter(|(_, o)| *o == name)
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(listed, owned, "owner={name}");
    }
    // `ctl cluster`: the members, as a table and as the API's JSON.
    let ctl = |args: &[&str]| {
        let output = std::process::Command::new(support::BIN)
            .args(["ctl", "--api", &a.url("")])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let table = ctl(&["cluster"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "member a (lease live)", "{table}");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "MEMBER",
            "ADDRESS",
            "LEASE",
            "OWNED",
            "REPLICATED",
            "SINCE",
            "VERSION"
        ]
    );
    let members: Vec<&str> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(members, ["a", "b", "c"], "{table}");
    let json: Value = serde_json::from_str(&ctl(&["-o", "json", "cluster"])).unwrap();
    assert_eq!(json, cluster_view(&a).await);
    // The settled member list is a 304 to a poller that holds its tag.
    let first = a.get("/v1/cluster").await;
    let tag = first.headers()["etag"].clone();
    let again = support::client()
        .get(a.url("/v1/cluster"))
        .header("if-none-match", tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

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
            daemon.wait_target(id, state, |t| t.state == state).await;
        }
    }

    // Readiness is cluster-wide: without a policy, every target must serve, and `down` (probed
    // by one member) keeps every member not ready.
    for daemon in [&a, &b, &c] {
        assert_eq!(daemon.get("/readyz").await.status(), 503);
    }
    // Each member exports the series of what it owns only, so sums count each target once.
    let mut owned_sum = 0.0;
    for (name, daemon) in [("a", &a), ("b", &b), ("c", &c)] {
        let owned_here = owners.values().filter(|o| *o == name).count();
        // Once each has run: a target handed over runs first within its interval.
        let metrics = daemon
            .wait_metrics("a result for every owned target", |m| {
                m.series("probe_success").count() == owned_here
            })
            .await;
        let exported: BTreeSet<String> = metrics
            .series("probe_success")
            .map(|s| s.labels["target"].clone())
            .collect();
        let owned: BTreeSet<String> = owners
            .iter()
            .filter(|(_, o)| *o == name)
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(exported, owned, "{name}");
        assert_eq!(metrics.value("probe_cluster_members", &[]), 3.0);
        owned_sum += metrics.value("probe_cluster_owned_targets", &[]);
        support::promtool_check(&daemon.get("/metrics").await.text().await.unwrap());
    }
    assert_eq!(owned_sum as usize, total);

    // Maintenance set through one member holds on every member, and ends through another.
    let holder = owners["t001"].clone();
    let (setter, ender) = match holder.as_str() {
        "a" => (&b, &c),
        "b" => (&c, &a),
        _ => (&a, &b),
    };
    let (status, _) = setter
        .send(
            reqwest::Method::PUT,
            "/v1/targets/t001/maintenance",
            None,
            Some(r#"{"reason": "disk swap", "duration": "10m"}"#),
        )
        .await;
    assert_eq!(status, 200);
    for daemon in [&a, &b, &c] {
        let t = daemon
            .wait_target("t001", "in maintenance", |t| t.state == "MAINTENANCE")
            .await;
        assert_eq!(t.target.maintenance.unwrap().reason, "disk swap");
    }
    let (status, _) = ender
        .send(
            reqwest::Method::DELETE,
            "/v1/targets/t001/maintenance",
            None,
            None,
        )
        .await;
    assert_eq!(status, 200);
    for daemon in [&a, &b, &c] {
        daemon
            .wait_target("t001", "back UP", |t| {
                t.state == "UP" && t.maintenance.is_none()
            })
            .await;
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
    let killed_at = Instant::now();
    killed.child.kill().unwrap();
    let _ = killed.child.wait();
    let after_kill = settled(&survivors, &names, total).await;
    // Each moved target's first probe by its new owner (the first accept on its listener after
    // the kill: the killed member probes nothing more) within the TTL and one interval.
    let bound = TTL + INTERVAL + Duration::from_millis(250);
    let moved: Vec<usize> = owners
        .iter()
        .filter(|(id, o)| **o == victim && id.starts_with('t'))
        .map(|(id, _)| id[1..].parse().unwrap())
        .collect();
    assert!(!moved.is_empty());
    let deadline = killed_at + 2 * bound;
    let (mut late, mut slowest) = (Vec::new(), Duration::ZERO);
    for &i in &moved {
        let first = loop {
            let first = accepts[i]
                .lock()
                .unwrap()
                .iter()
                .find(|at| **at > killed_at)
                .copied();
            if let Some(first) = first {
                break Some(first);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if let Some(at) = first {
            slowest = slowest.max(at - killed_at);
        }
        match first {
            Some(at) if at - killed_at <= bound => {}
            other => late.push((i, other.map(|at| at - killed_at))),
        }
    }
    eprintln!(
        "{} moved targets, the last first probed by its new owner {slowest:?} after the kill \
         (bound {bound:?})",
        moved.len()
    );
    assert!(
        late.is_empty(),
        "{} of {} moved targets first probed later than {bound:?} after the kill: {late:?}",
        late.len(),
        moved.len()
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
            "--state-dir",
            "none",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_down_for_everyone_nobody_takes_anything_over() {
    let mut etcd = TestEtcd::start().await.expect("etcd");
    let servers = servers_on(std::net::Ipv4Addr::LOCALHOST, 20);
    let listeners: Vec<SocketAddr> = servers.iter().map(AcceptServer::addr).collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd, TTL, &listeners, 20);
    let a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let before = settled(&[&a, &b], &["a", "b"], 21).await;
    let local: Vec<BTreeSet<String>> = vec![local_ids(&a).await, local_ids(&b).await];
    etcd.kill();
    for daemon in [&a, &b] {
        wait_cluster(daemon, "stale", |v| v["stale"] == true).await;
        wait_cluster(daemon, "lost its lease", |v| v["lease"] == "lost").await;
        let health: Value = daemon.get("/health").await.json().await.unwrap();
        let check = &health["checks"]["cluster:membership"][0];
        assert_eq!(check["status"], "warn", "{health}");
        assert!(
            check["output"]
                .as_str()
                .unwrap()
                .starts_with("not a member")
        );
    }
    // Well past the TTL: each keeps what it had, reported stale, and keeps probing it.
    tokio::time::sleep(2 * TTL).await;
    for (daemon, local) in [&a, &b].into_iter().zip(&local) {
        assert_eq!(owners(daemon).await, before);
        assert_eq!(local_ids(daemon).await, *local);
        let id = local.iter().find(|id| id.starts_with('t')).unwrap();
        daemon
            .wait_target(id, "still probed", |t| {
                t.last
                    .as_ref()
                    .is_some_and(|l| l.at.0 > std::time::SystemTime::now() - 2 * INTERVAL)
            })
            .await;
    }
    // etcd back: both join again under new leases, with the same shares.
    etcd.restart().await.unwrap();
    for daemon in [&a, &b] {
        wait_cluster(daemon, "live again", |v| {
            v["lease"] == "live" && v["stale"] == false
        })
        .await;
        let health: Value = daemon.get("/health").await.json().await.unwrap();
        assert_eq!(health["checks"]["cluster:membership"][0]["status"], "pass");
    }
    assert_eq!(settled(&[&a, &b], &["a", "b"], 21).await, before);
}

/// A member inside `netns`, listening on its address there.
fn member_in(netns: &Netns, dir: &Path, name: &str) -> Daemon {
    let mut command = netns.command(support::BIN);
    command
        .args(["run", "--listen", &format!("{}:0", netns.addr())])
        .arg("--config")
        .arg(dir.join("probes.yaml"))
        .args(["--member", name]);
    Daemon::launch(command)
}

/// Accept servers on `addr`, one per target.
fn servers_on(addr: std::net::Ipv4Addr, count: usize) -> Vec<AcceptServer> {
    (0..count)
        .map(|_| AcceptServer::start(std::net::TcpListener::bind((addr, 0)).unwrap()).unwrap())
        .collect()
}

/// Polls `/v1/cluster` until `ok` holds for it.
async fn wait_cluster(daemon: &Daemon, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let view = cluster_view(daemon).await;
        if ok(&view) {
            return view;
        }
        assert!(Instant::now() < deadline, "never {what}: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_etcd_keeps_probing_and_decides_nothing() {
    let netns = netns_or_skip!();
    let host = netns.host_addr();
    let etcd = TestEtcd::start_reachable_from(&[host.into()])
        .await
        .expect("etcd");
    // The targets, on the root namespace's end of the veth: reached by every member.
    let mut servers: Vec<Option<AcceptServer>> =
        servers_on(host, 30).into_iter().map(Some).collect();
    let listeners: Vec<SocketAddr> = servers.iter().flatten().map(AcceptServer::addr).collect();
    let root = tempfile::tempdir().unwrap();
    let inside = tempfile::tempdir().unwrap();
    write_config_at(root.path(), &etcd.endpoint(), TTL, "", &listeners, 30);
    write_config_at(
        inside.path(),
        &etcd.endpoint_on(host.into()),
        TTL,
        "",
        &listeners,
        30,
    );
    let a = member(root.path(), "a");
    let b = member(root.path(), "b");
    let c = member_in(&netns, inside.path(), "c");
    let total = 31;
    let owners = settled(&[&a, &b, &c], &["a", "b", "c"], total).await;
    let of_c: Vec<String> = owners
        .iter()
        .filter(|(id, o)| *o == "c" && id.starts_with('t'))
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!of_c.is_empty());
    let victim = of_c[0].clone();
    let index: usize = victim[1..].parse().unwrap();

    // c loses etcd: everything from etcd's port is dropped inside its namespace.
    netns
        .nft(&format!(
            "add rule inet faults blackhole tcp sport {} drop\n",
            etcd.client_port()
        ))
        .unwrap();
    wait_cluster(&c, "stale", |v| v["stale"] == true).await;
    // The others take its targets over once its lease is gone.
    let after = settled(&[&a, &b], &["a", "b"], total).await;
    let new_owner = if after[&victim] == "a" { &a } else { &b };
    wait_cluster(&c, "lost its lease", |v| v["lease"] == "lost").await;
    // c keeps probing what it owned, all along: a probe after it knew its lease lost.
    let lost = std::time::SystemTime::now();
    c.wait_target(&victim, "probed after its lease was lost", |t| {
        t.last.as_ref().is_some_and(|l| l.at.0 > lost)
    })
    .await;
    assert!(local_ids(&c).await.contains(&victim));

    // The target fails during the partition: both see it, one decides.
    let mut client = etcd.client().await.unwrap();
    let key = format!("/probe-engine/cluster/state/{victim}");
    let mut writes = client.watch(key.clone(), None).await.unwrap();
    servers[index].take().unwrap().stop().await;
    new_owner
        .wait_target(&victim, "DOWN", |t| t.state == "DOWN")
        .await;
    c.wait_target(&victim, "DOWN", |t| t.state == "DOWN").await;
    tokio::time::sleep(3 * INTERVAL).await;
    let puts = written(&mut writes).await;
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(puts[0]["state"], "DOWN");
    assert_eq!(puts[0]["by"], after[&victim].as_str());

    // Healed, c joins again with a new lease and gets its share back.
    netns.clear().unwrap();
    settled(&[&a, &b, &c], &["a", "b", "c"], total).await;
    wait_cluster(&c, "live again", |v| {
        v["lease"] == "live" && v["stale"] == false
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_target_needs_two_vantage_points_to_go_down() {
    let first = netns_or_skip!();
    let spaces = [first, Netns::new().unwrap(), Netns::new().unwrap()];
    // The target sits on the first namespace's host end; the others route to it.
    let host = spaces[0].host_addr();
    for netns in &spaces[1..] {
        netns.route_to(host).unwrap();
    }
    let hosts: Vec<std::net::IpAddr> = spaces.iter().map(|n| n.host_addr().into()).collect();
    let etcd = TestEtcd::start_reachable_from(&hosts).await.expect("etcd");
    let servers = servers_on(host, 1);
    let target = servers[0].addr();
    let names = ["a", "b", "c"];
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for (dir, netns) in dirs.iter().zip(&spaces) {
        write_config_at(
            dir.path(),
            &etcd.endpoint_on(netns.host_addr().into()),
            TTL,
            "  replicas: 3\n  quorum: 2\n",
            &[target],
            1,
        );
    }
    let members: Vec<Daemon> = spaces
        .iter()
        .zip(&dirs)
        .zip(names)
        .map(|((netns, dir), name)| member_in(netns, dir.path(), name))
        .collect();
    let all: Vec<&Daemon> = members.iter().collect();
    settled(&all, &names, 2).await;
    for m in &members {
        m.wait_target("t000", "UP with three votes", |t| {
            t.state == "UP" && t.votes.as_ref().is_some_and(|v| v.len() == 3)
        })
        .await;
    }
    let cut = |netns: &Netns| {
        netns
            .nft(&format!(
                "add rule inet faults blackhole ip saddr {host} tcp sport {} drop\n",
                target.port()
            ))
            .unwrap();
    };
    // One member cannot reach the target: it votes DOWN, and over 10 intervals no member's
    // transition log shows the target leaving UP.
    let logged: Vec<usize> = members
        .iter()
        .map(|m| transitions_of(m, "t000").len())
        .collect();
    cut(&spaces[0]);
    members[0]
        .wait_target("t000", "voted DOWN by a", |t| {
            t.votes
                .as_ref()
                .is_some_and(|v| v.get("a").map(String::as_str) == Some("DOWN"))
        })
        .await;
    // Ten intervals of probing under the cut: the time is what is tested here.
    tokio::time::sleep(10 * INTERVAL).await;
    for (m, before) in members.iter().zip(&logged) {
        let since: Vec<Value> = transitions_of(m, "t000").split_off(*before);
        assert!(
            since.iter().all(|t| t["from"] != "UP"),
            "the target left UP on one vantage point's word: {since:?}"
        );
        let t = m.detail("t000").await.target;
        assert_eq!(t.state, "UP", "{:?}", t.votes);
    }
    // A second cannot either: now it is DOWN, everywhere.
    cut(&spaces[1]);
    for m in &members {
        m.wait_target("t000", "DOWN by quorum", |t| t.state == "DOWN")
            .await;
    }

    // Healed, then c is cut from etcd, and so from its peers: it decides nothing (no verdict
    // written under its name) while the two others, still a quorum, decide the recovery.
    for netns in &spaces[..2] {
        netns.clear().unwrap();
    }
    for m in &members {
        m.wait_target("t000", "UP again", |t| t.state == "UP").await;
    }
    let mut client = etcd.client().await.unwrap();
    let mut writes = client
        .watch("/probe-engine/cluster/state/t000", None)
        .await
        .unwrap();
    spaces[2]
        .nft(&format!(
            "add rule inet faults blackhole tcp sport {} drop\n",
            etcd.client_port()
        ))
        .unwrap();
    wait_cluster(&members[2], "stale", |v| v["stale"] == true).await;
    cut(&spaces[0]);
    cut(&spaces[1]);
    for m in &members[..2] {
        m.wait_target("t000", "DOWN by a and b", |t| t.state == "DOWN")
            .await;
    }
    tokio::time::sleep(3 * INTERVAL).await;
    let puts = written(&mut writes).await;
    assert!(!puts.is_empty(), "a and b decided");
    assert!(puts.iter().all(|p| p["by"] != "c"), "{puts:?}");
    // With c's vote gone, the decider may count one of a's and b's new DOWN votes beside the
    // other's UP from before its cut: no quorum either way, so PROBING, as the rule says, until
    // the second DOWN reaches it. What it ends on is DOWN, and nothing in between says UP.
    assert!(puts.iter().all(|p| p["state"] != "UP"), "{puts:?}");
    assert_eq!(puts.last().unwrap()["state"], "DOWN", "{puts:?}");
    for m in &members[..2] {
        assert_eq!(m.detail("t000").await.target.state, "DOWN");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_paused_past_its_lease_does_not_keep_probing_beside_its_successor() {
    let servers = servers_on(std::net::Ipv4Addr::LOCALHOST, 30);
    let listeners: Vec<SocketAddr> = servers.iter().map(AcceptServer::addr).collect();
    let etcd = TestEtcd::start().await.expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd, TTL, &listeners, 30);
    let a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let owners = settled(&[&a, &b], &["a", "b"], 31).await;
    let of_a: Vec<usize> = owners
        .iter()
        .filter(|(id, o)| *o == "a" && id.starts_with('t'))
        .map(|(id, _)| id[1..].parse().unwrap())
        .collect();
    assert!(!of_a.is_empty());
    a.signal("-STOP");
    // b takes everything over once a's lease is gone.
    settled(&[&b], &["b"], 31).await;
    tokio::time::sleep(INTERVAL).await;
    a.signal("-CONT");
    // One interval to notice, then count: each of a's former targets is connected to once an
    // interval (twice, were both probing it), over three intervals.
    tokio::time::sleep(INTERVAL).await;
    let before: Vec<u64> = of_a.iter().map(|i| servers[*i].accepted()).collect();
    tokio::time::sleep(3 * INTERVAL).await;
    for (i, before) in of_a.iter().zip(before) {
        let runs = servers[*i].accepted() - before;
        assert!(
            (2..=4).contains(&runs),
            "t{i:03}: {runs} connects in 3 intervals"
        );
    }
    settled(&[&a, &b], &["a", "b"], 31).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_of_removed_targets_leave_etcd() {
    let etcd = TestEtcd::start().await.expect("etcd");
    let servers = servers_on(std::net::Ipv4Addr::LOCALHOST, 10);
    let listeners: Vec<SocketAddr> = servers.iter().map(AcceptServer::addr).collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd, TTL, &listeners, 10);
    let a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    settled(&[&a, &b], &["a", "b"], 11).await;
    let mut client = etcd.client().await.unwrap();
    let prefix = "/probe-engine/cluster/state/";
    let held = |client: &mut probe_etcd::etcd_client::Client| {
        let mut client = client.clone();
        async move {
            let read = client
                .get(
                    prefix,
                    Some(probe_etcd::etcd_client::GetOptions::new().with_prefix()),
                )
                .await
                .unwrap();
            read.kvs()
                .iter()
                .map(|kv| kv.key_str().unwrap().trim_start_matches(prefix).to_owned())
                .collect::<BTreeSet<String>>()
        }
    };
    let deadline = Instant::now() + WAIT;
    while held(&mut client).await.len() < 11 {
        assert!(Instant::now() < deadline, "not every verdict was published");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Five targets go from the config, on both members.
    write_config(dir.path(), &etcd, TTL, &listeners, 5);
    a.signal("-HUP");
    b.signal("-HUP");
    settled(&[&a, &b], &["a", "b"], 6).await;
    let kept: BTreeSet<String> = (0..5)
        .map(|i| format!("t{i:03}"))
        .chain(["down".to_owned()])
        .collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let now = held(&mut client).await;
        if now == kept {
            break;
        }
        assert!(Instant::now() < deadline, "etcd still holds {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Logged once the delete has returned: maybe a moment after etcd shows it.
    let deadline = Instant::now() + WAIT;
    while !a
        .all_logs()
        .into_iter()
        .chain(b.all_logs())
        .any(|l| l["message"] == "cluster: verdicts of removed targets deleted")
    {
        assert!(Instant::now() < deadline, "the deletion was not logged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_is_written_once_whatever_the_members_do() {
    let etcd = TestEtcd::start().await.expect("etcd");
    let mut client = etcd.client().await.unwrap();
    let prefix = "/probe-engine/cluster/state/";
    let mut puts = client
        .watch(
            prefix,
            Some(probe_etcd::etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let servers = servers_on(std::net::Ipv4Addr::LOCALHOST, 30);
    let listeners: Vec<SocketAddr> = servers.iter().map(AcceptServer::addr).collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &etcd, TTL, &listeners, 30);
    let a = member(dir.path(), "a");
    let b = member(dir.path(), "b");
    let mut c = member(dir.path(), "c");
    settled(&[&a, &b, &c], &["a", "b", "c"], 31).await;
    // Every target has its first verdict, and a member dies and comes back.
    for daemon in [&a, &b, &c] {
        for id in local_ids(daemon).await {
            let state = if id == "down" { "DOWN" } else { "UP" };
            daemon.wait_target(&id, state, |t| t.state == state).await;
        }
    }
    c.child.kill().unwrap();
    let _ = c.child.wait();
    settled(&[&a, &b], &["a", "b"], 31).await;
    tokio::time::sleep(2 * INTERVAL).await;
    let c = member(dir.path(), "c");
    settled(&[&a, &b, &c], &["a", "b", "c"], 31).await;
    tokio::time::sleep(2 * INTERVAL).await;
    let mut written: BTreeMap<String, Vec<String>> = BTreeMap::new();
    while let Ok(Ok(Some(reply))) =
        tokio::time::timeout(Duration::from_millis(300), puts.message()).await
    {
        for event in reply.events() {
            if let Some(kv) = event.kv() {
                let key = kv.key_str().unwrap().trim_start_matches(prefix).to_owned();
                written
                    .entry(key)
                    .or_default()
                    .push(kv.value_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(written.len(), 31);
    let again: Vec<_> = written.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(again.is_empty(), "written more than once: {again:#?}");
}
