//! Load harness: the etcd topology source at scale, against a throw-away etcd on loopback.
//!
//! ```text
//! probe-bench etcd-load [--targets 10000] [--burst 1000] [--batch 100]
//! ```
//!
//! The harness starts `etcd` (Debian's `etcd-server`; `scripts/setup` installs it) with
//! `probe_testkit::etcd::TestEtcd`, writes `--targets` keys (one TCP target each, against a
//! loopback port nobody listens on, probed every 60 s so that probing stays out of the way), in
//! transactions of `--batch` keys, then starts the daemon's topology layer in this process
//! (`probe_engine::topology::TopologyHandle`, on a config whose only content is the `topology.etcd`
//! section) and prints:
//! - **start-up**: from the start of the topology layer to every target scheduled in the engine
//!   (initial read, decoding, merge, graph check, apply);
//! - **burst**: `--burst` keys rewritten (a new interval each), in transactions of `--batch`,
//!   from the first write to every changed target running its new spec;
//! - **memory**: `VmRSS` before the topology layer starts, once all targets are scheduled, and
//!   after the burst, with the growth per target.

use std::time::Duration;

use anyhow::{Context, bail};
use probe::TargetId;
use probe::engine::{Engine, EngineConfig};
use probe_etcd::DEFAULT_PREFIX;
use probe_etcd::etcd_client::{Client, Txn, TxnOp};
use probe_testkit::etcd::TestEtcd;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support;

/// The longest the harness waits for the engine to catch up.
const PATIENCE: Duration = Duration::from_secs(120);

/// Flags of `probe-bench etcd-load`.
#[derive(clap::Args)]
pub struct Args {
    /// Keys written, one TCP target each.
    #[arg(long, default_value_t = 10_000)]
    targets: usize,
    /// Keys rewritten at once after start-up (at most --targets).
    #[arg(long, default_value_t = 1_000)]
    burst: usize,
    /// Keys per transaction, within etcd's limit of 128.
    #[arg(long, default_value_t = 100)]
    batch: usize,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.burst > self.targets || self.batch == 0 || self.batch > 128 {
            bail!("--burst must be at most --targets, --batch within 1..=128 (etcd's txn limit)");
        }
        Ok(())
    }
}

/// Runs `probe-bench etcd-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(measure(args))
}

fn id(i: usize) -> String {
    format!("etcd-{i:06}")
}

fn value(i: usize, interval_s: u64) -> String {
    format!(
        r#"{{"id": "{}", "tcp": {{"address": "127.0.0.1:9"}}, "interval": "{interval_s}s", "timeout": "1s"}}"#,
        id(i)
    )
}

/// Writes keys `range` with the given interval, `batch` keys per transaction.
async fn write(
    client: &mut Client,
    range: std::ops::Range<usize>,
    interval_s: u64,
    batch: usize,
) -> anyhow::Result<()> {
    let keys: Vec<usize> = range.collect();
    for chunk in keys.chunks(batch) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|&i| {
                TxnOp::put(
                    format!("{DEFAULT_PREFIX}{}", id(i)),
                    value(i, interval_s),
                    None,
                )
            })
            .collect();
        client
            .txn(Txn::new().and_then(ops))
            .await
            .context("writing keys")?;
    }
    Ok(())
}

/// Polls (every millisecond) until `done` holds; returns how long it took.
async fn until(what: &str, mut done: impl FnMut() -> bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > PATIENCE {
            bail!("{what} did not happen within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(started.elapsed())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn measure(args: Args) -> anyhow::Result<()> {
    let etcd = TestEtcd::start().await.context("starting etcd")?;
    let mut client = etcd.client().await.context("connecting to etcd")?;
    let written = Instant::now();
    write(&mut client, 0..args.targets, 60, args.batch).await?;
    println!(
        "wrote {} keys in {:.2?} ({} per transaction)",
        args.targets,
        written.elapsed(),
        args.batch
    );

    let dir = tempfile::tempdir().context("temp dir")?;
    std::fs::write(
        dir.path().join("probes.yaml"),
        format!(
            "topology:\n  etcd:\n    endpoints: [\"{}\"]\n",
            etcd.endpoint()
        ),
    )?;
    let loaded = probe_config::load(dir.path()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cancel = CancellationToken::new();
    let resolver = std::sync::Arc::new(probe::tier::resolve::Resolver::system());
    let engine =
        Engine::start_with_resolver(EngineConfig::default(), resolver.clone(), cancel.clone());
    let rss_before = support::vm_rss()?;
    let started = Instant::now();
    let (rules, _) = probe_engine::alerts::rule_channel(&loaded);
    let (_topology, _) = probe_engine::topology::TopologyHandle::start(
        engine.clone(),
        resolver,
        dir.path().to_path_buf(),
        loaded,
        None,
        rules,
        cancel.clone(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    until("every target scheduled", || {
        engine.readiness().total == args.targets
    })
    .await?;
    let startup = started.elapsed();
    let rss_scheduled = support::vm_rss()?;
    println!(
        "start-up: {} targets from etcd scheduled in {startup:.2?}",
        args.targets
    );

    let burst = Instant::now();
    write(&mut client, 0..args.burst, 61, args.batch).await?;
    let writes = burst.elapsed();
    let changed: Vec<TargetId> = (0..args.burst)
        .map(|i| TargetId::new(&id(i)))
        .collect::<Result<_, _>>()?;
    let mut next = 0;
    until("the burst converged", || {
        // The engine replaces changed targets in one apply per etcd batch; check the ones not
        // seen converged yet, in order.
        while next < changed.len() {
            match engine.status(&changed[next]) {
                Some(s) if s.schedule.interval() == Duration::from_secs(61) => next += 1,
                _ => return false,
            }
        }
        true
    })
    .await?;
    let converged = burst.elapsed();
    let rss_after = support::vm_rss()?;
    println!(
        "burst: {} keys rewritten in {writes:.2?}; all {} changed targets running their new spec \
         {converged:.2?} after the first write",
        args.burst, args.burst
    );
    println!(
        "memory: RSS {:.1} MiB before, {:.1} MiB with {} targets scheduled ({:.0} bytes per target), \
         {:.1} MiB after the burst",
        mib(rss_before),
        mib(rss_scheduled),
        args.targets,
        rss_scheduled.saturating_sub(rss_before) as f64 / args.targets as f64,
        mib(rss_after)
    );
    cancel.cancel();
    engine.stopped().await;
    Ok(())
}
