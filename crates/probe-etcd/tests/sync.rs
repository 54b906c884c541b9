//! The sync against a real etcd, started per test by `probe_testkit::etcd::TestEtcd` on
//! loopback ports. Tests wait on the published channels with bounded timeouts, never on sleeps.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use probe_etcd::etcd_client::{
    self, Client, CompactionOptions, GetOptions, PutOptions, Txn, TxnOp,
};
use probe_etcd::{
    BackoffConfig, DEFAULT_PREFIX, Entry, Snapshot, Source, SourceConfig, Status, SyncState,
};
use probe_testkit::etcd::{TestEtcd, wait_for};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The bound on anything the source should do promptly.
const SOON: Duration = Duration::from_secs(10);

fn key(id: &str) -> String {
    format!("{DEFAULT_PREFIX}{id}")
}

/// A configuration with short timeouts and a quick, deterministic backoff.
fn config(etcd: &TestEtcd) -> SourceConfig {
    let mut config = SourceConfig::new([etcd.endpoint()]);
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(2);
    config.keep_alive = Duration::from_secs(1);
    config.backoff = BackoffConfig {
        min: Duration::from_millis(50),
        max: Duration::from_millis(500),
        jitter: 0.0,
    };
    config
}

/// A source running on its own task.
struct Running {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    status: watch::Receiver<Status>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    fn spawn(source: Source) -> Self {
        let snapshots = source.snapshots();
        let status = source.status();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(source.run(cancel.clone()));
        Self {
            snapshots,
            status,
            cancel,
            task,
        }
    }

    /// Waits for a snapshot whose content is exactly `expected`.
    async fn content(&mut self, expected: &BTreeMap<String, String>) -> Arc<Snapshot> {
        wait_for(&mut self.snapshots, SOON, |s| &values(s) == expected).await
    }

    async fn status_where(&mut self, predicate: impl FnMut(&Status) -> bool) -> Status {
        wait_for(&mut self.status, SOON, predicate).await
    }

    /// Cancels the source and checks that `run` returns promptly.
    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(SOON, self.task)
            .await
            .expect("run returns once cancelled")
            .expect("run does not panic");
    }
}

/// A snapshot's entries as `id -> value text`.
fn values(snapshot: &Snapshot) -> BTreeMap<String, String> {
    snapshot
        .entries
        .iter()
        .map(|(id, e)| (id.clone(), String::from_utf8_lossy(&e.value).into_owned()))
        .collect()
}

fn map<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What etcd holds under the prefix, and its revision.
async fn etcd_content(client: &mut Client) -> (BTreeMap<String, String>, i64) {
    let resp = client
        .get(DEFAULT_PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let content = resp
        .kvs()
        .iter()
        .map(|kv| {
            let id = kv.key_str().unwrap().strip_prefix(DEFAULT_PREFIX).unwrap();
            (id.to_owned(), kv.value_str().unwrap().to_owned())
        })
        .collect();
    (content, resp.header().unwrap().revision())
}

/// etcd's current revision.
async fn etcd_revision(client: &mut Client) -> i64 {
    let resp = client.get("/", None).await.unwrap();
    resp.header().unwrap().revision()
}

async fn put(client: &mut Client, id: &str, value: &str) -> i64 {
    let resp = client.put(key(id), value, None).await.unwrap();
    resp.header().unwrap().revision()
}

#[tokio::test]
async fn reads_the_prefix_then_follows_puts_and_deletes() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    put(&mut client, "b", "2").await;
    // Outside the prefix: never part of the content.
    client.put("/probe-engine/other", "x", None).await.unwrap();
    client
        .put("/probe-engine/targetsX", "x", None)
        .await
        .unwrap();

    let mut run = Running::spawn(Source::new(config(&etcd)).unwrap());
    let first = run.content(&map([("a", "1"), ("b", "2")])).await;
    let (_, revision) = etcd_content(&mut client).await;
    assert_eq!(first.revision, revision);
    let status = run.status_where(|s| s.state == SyncState::Synced).await;
    assert_eq!(status.entries, 2);
    assert_eq!(status.counters.resyncs, 1);

    let rev_c = put(&mut client, "c", "3").await;
    let snapshot = run
        .content(&map([("a", "1"), ("b", "2"), ("c", "3")]))
        .await;
    assert_eq!(snapshot.revision, rev_c);
    assert_eq!(snapshot.get("c").map(|e| e.mod_revision), Some(rev_c));

    client.delete(key("a"), None).await.unwrap();
    run.content(&map([("b", "2"), ("c", "3")])).await;
    put(&mut client, "b", "two").await;
    run.content(&map([("b", "two"), ("c", "3")])).await;

    // A transaction is one watch response, so one publish.
    let before = run.status.borrow().counters.publishes;
    let txn = Txn::new().and_then([
        TxnOp::put(key("d"), "4", None),
        TxnOp::put(key("e"), "5", None),
        TxnOp::delete(key("c"), None),
    ]);
    client.txn(txn).await.unwrap();
    run.content(&map([("b", "two"), ("d", "4"), ("e", "5")]))
        .await;
    assert_eq!(run.status.borrow().counters.publishes, before + 1);

    run.stop().await;
}

#[tokio::test]
async fn reads_a_large_prefix_in_pages_and_skips_non_utf8_names() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..7 {
        let id = format!("t{i}");
        put(&mut client, &id, &i.to_string()).await;
        expected.insert(id, i.to_string());
    }
    let mut bad = DEFAULT_PREFIX.as_bytes().to_vec();
    bad.extend_from_slice(b"\xff\xfe");
    client.put(bad, "x", None).await.unwrap();

    let mut config = config(&etcd);
    config.page_size = NonZeroU32::new(3).unwrap();
    let ranges = range_calls(&etcd).await;
    let mut run = Running::spawn(Source::new(config).unwrap());
    let snapshot = run.content(&expected).await;
    // Eight keys (one of them not a name) in pages of three: three range calls, as etcd counts.
    assert_eq!(range_calls(&etcd).await - ranges, 3, "pages read");
    assert_eq!(snapshot.revision, etcd_revision(&mut client).await);
    run.stop().await;
}

/// The range calls etcd has answered, from its own metrics (`/metrics` on the client port).
async fn range_calls(etcd: &TestEtcd) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = etcd.endpoint().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.unwrap();
    body.lines()
        .filter(|l| {
            l.starts_with("grpc_server_handled_total{")
                && l.contains(r#"grpc_code="OK""#)
                && l.contains(r#"grpc_method="Range""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_key_whose_lease_expires_disappears() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "stays", "1").await;
    let mut run = Running::spawn(Source::new(config(&etcd)).unwrap());
    run.content(&map([("stays", "1")])).await;

    // etcd rounds TTLs up to its minimum (about 2 s with default timings).
    let lease = client.lease_grant(1, None).await.unwrap();
    let options = PutOptions::new().with_lease(lease.id());
    client.put(key("leased"), "2", Some(options)).await.unwrap();
    run.content(&map([("stays", "1"), ("leased", "2")])).await;
    run.content(&map([("stays", "1")])).await;
    run.stop().await;
}

#[tokio::test]
async fn a_compacted_start_revision_falls_back_to_a_full_read() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    put(&mut client, "b", "2").await;
    let first = Running::spawn(Source::new(config(&etcd)).unwrap());
    let mut first = first;
    let snapshot = first.content(&map([("a", "1"), ("b", "2")])).await;
    first.stop().await;

    // While nobody watches: changes, then a compaction past the snapshot's revision.
    put(&mut client, "c", "3").await;
    client.delete(key("a"), None).await.unwrap();
    let last = put(&mut client, "b", "two").await;
    client
        .compact(last, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();

    let mut run = Running::spawn(Source::resume(config(&etcd), snapshot.clone()).unwrap());
    // The resumed content is served until then.
    assert_eq!(*run.snapshots.borrow(), snapshot);
    let (expected, revision) = etcd_content(&mut client).await;
    let converged = run.content(&expected).await;
    assert_eq!(converged.revision, revision);
    let status = run.status_where(|s| s.state == SyncState::Synced).await;
    assert_eq!(status.counters.resyncs, 1, "{status:?}");
    assert!(status.counters.watch_restarts >= 1, "{status:?}");
    assert_eq!(status.counters.failures, 0, "{status:?}");

    // And it keeps following from the new revision.
    put(&mut client, "d", "4").await;
    let mut expected = expected;
    expected.insert("d".into(), "4".into());
    run.content(&expected).await;
    run.stop().await;
}

#[tokio::test]
async fn a_resumed_source_catches_up_by_watching() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    let mut first = Running::spawn(Source::new(config(&etcd)).unwrap());
    let snapshot = first.content(&map([("a", "1")])).await;
    first.stop().await;

    put(&mut client, "b", "2").await;
    client.delete(key("a"), None).await.unwrap();

    let mut run = Running::spawn(Source::resume(config(&etcd), snapshot).unwrap());
    run.content(&map([("b", "2")])).await;
    let status = run.status_where(|s| s.state == SyncState::Synced).await;
    assert_eq!(status.counters.resyncs, 0, "no full read: {status:?}");
    assert_eq!(status.counters.events, 2, "{status:?}");
    run.stop().await;
}

#[tokio::test]
async fn an_etcd_outage_keeps_the_snapshot_and_converges_after_restart() {
    let mut etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    put(&mut client, "b", "2").await;
    let mut run = Running::spawn(Source::new(config(&etcd)).unwrap());
    let before = run.content(&map([("a", "1"), ("b", "2")])).await;
    run.status_where(|s| s.state == SyncState::Synced).await;

    let killed_at = SystemTime::now();
    etcd.kill();
    let stale = run
        .status_where(|s| matches!(s.state, SyncState::Stale { .. }))
        .await;
    let SyncState::Stale { since, last_error } = stale.state else {
        unreachable!()
    };
    assert!(
        since >= killed_at && since <= SystemTime::now(),
        "{since:?}"
    );
    assert!(!last_error.is_empty());
    // Retries keep failing; the snapshot and the "since" stay.
    let later = run.status_where(|s| s.counters.failures >= 3).await;
    assert!(matches!(later.state, SyncState::Stale { since: s, .. } if s == since));
    assert!(!run.snapshots.has_changed().unwrap());
    assert_eq!(*run.snapshots.borrow(), before);
    assert_eq!(later.entries, 2);

    // Back, with changes made as soon as it answers: the source converges on them.
    etcd.restart().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    client.delete(key("a"), None).await.unwrap();
    put(&mut client, "c", "3").await;
    let (expected, _) = etcd_content(&mut client).await;
    run.content(&expected).await;
    let status = run.status_where(|s| s.state == SyncState::Synced).await;
    assert!(status.counters.resyncs >= 2, "{status:?}");
    run.stop().await;
}

#[tokio::test]
async fn the_periodic_resync_repairs_drifted_content() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    put(&mut client, "b", "2").await;
    let (expected, revision) = etcd_content(&mut client).await;

    // Content that claims to be current but is wrong: a ghost entry, a wrong value, a missing
    // one. Watching cannot notice (nothing changes); the resync must.
    let entry = |v: &'static str| Entry {
        value: Bytes::from_static(v.as_bytes()),
        mod_revision: 1,
    };
    let drifted = Arc::new(Snapshot {
        revision,
        entries: [
            ("a".to_owned(), entry("wrong")),
            ("ghost".to_owned(), entry("0")),
        ]
        .into(),
    });
    let mut config = config(&etcd);
    config.resync_period = Duration::from_millis(300);
    let mut run = Running::spawn(Source::resume(config, drifted).unwrap());
    run.status_where(|s| s.state == SyncState::Synced).await;
    let repaired = run.content(&expected).await;
    assert_eq!(repaired.revision, revision);
    assert!(run.status.borrow().counters.resyncs >= 1);
    run.stop().await;
}

#[tokio::test]
async fn progress_notifications_advance_the_revision_without_publishing() {
    let etcd = TestEtcd::start_with_args(["--experimental-watch-progress-notify-interval=100ms"])
        .await
        .unwrap();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "a", "1").await;
    let mut run = Running::spawn(Source::new(config(&etcd)).unwrap());
    let snapshot = run.content(&map([("a", "1")])).await;
    run.status_where(|s| s.state == SyncState::Synced).await;

    let outside = client
        .put("/elsewhere", "x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    run.status_where(|s| s.revision >= outside).await;
    assert!(!run.snapshots.has_changed().unwrap());
    assert_eq!(run.snapshots.borrow().revision, snapshot.revision);
    run.stop().await;
}

#[tokio::test]
async fn an_unreachable_etcd_leaves_the_source_syncing_with_the_error() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = SourceConfig::new([format!("http://127.0.0.1:{port}")]);
    config.connect_timeout = Duration::from_millis(500);
    config.request_timeout = Duration::from_millis(500);
    config.backoff.min = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(100);
    let mut run = Running::spawn(Source::new(config).unwrap());
    let status = run.status_where(|s| s.counters.failures >= 2).await;
    assert!(
        matches!(&status.state, SyncState::Syncing { last_error: Some(e) } if !e.is_empty()),
        "{status:?}"
    );
    assert!(!run.snapshots.has_changed().unwrap());
    assert!(run.snapshots.borrow().is_empty());
    run.stop().await;
}

#[tokio::test]
async fn the_harness_restarts_on_the_same_data() {
    let mut etcd = TestEtcd::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let mut client = etcd.client().await.unwrap();
    put(&mut client, "kept", "1").await;
    etcd.kill();
    assert!(!etcd.is_running());
    etcd.restart().await.unwrap();
    assert_eq!(etcd.endpoint(), endpoint);
    let mut client: etcd_client::Client = etcd.client().await.unwrap();
    let (content, _) = etcd_content(&mut client).await;
    assert_eq!(content, map([("kept", "1")]));
}
