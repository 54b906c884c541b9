//! The keep-alive race against a real nginx: whether kept-alive HTTP probes fail when the server
//! closes idle connections at the very interval the probes come at.
//!
//! ```text
//! probe-bench keepalive [--duration-s 120] [--targets 100]
//!     [--interval-ms 1000] [--keepalive-timeout-ms 1000] [--keepalive-requests 20]
//! ```
//!
//! nginx (Debian's `nginx-light`, started on a free loopback port by
//! [`probe_testkit::Nginx`]) closes an idle kept-alive connection after
//! `--keepalive-timeout-ms` (1 s) and every connection after `--keepalive-requests` (20). An
//! engine probes it with `--targets` (100) HTTP targets on the default pooled connections, every
//! `--interval-ms` (1 s, start jitter 0.1, timeout half the interval, `fall` 3): each probe
//! arrives about one keep-alive timeout after the previous one on its connection, so now and
//! then it is sent just as nginx closes the connection. Without the retry on a fresh connection
//! those probes fail with `reset` although nginx was never unhealthy; with it, none should.
//!
//! Every check goes through a counting wrapper of the real HTTP probe, so the figures are the
//! checks' own: over `--duration-s` (120 s) after every target is UP, `probes`, `failed`
//! (goal: 0), `stale_retries` (checks that met the race and were retried on a fresh connection:
//! how often the race happened), `retry_rate` (retries over probes) and `false_down` (DOWN
//! transitions). The exit status is 0 whether or not the goal is met (only a harness error
//! exits 1). Traffic stays on 127.0.0.1.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use probe::TargetId;
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::outcome::CheckResult;
use probe::tier::http::{HttpProbe, HttpSpec};
use probe::tier::resolve::Names;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::TargetSpec;
use probe::{Engine, EngineConfig};
use probe_testkit::{KeepAlive, Nginx};
use tokio_util::sync::CancellationToken;

use crate::support::{self, Collector};

/// Flags of `probe-bench keepalive`.
#[derive(clap::Args)]
pub struct Args {
    /// How long the probes are counted once every target is UP, in seconds.
    #[arg(long = "duration-s", value_name = "S", default_value = "120", value_parser = support::secs)]
    duration: Duration,
    /// Pooled HTTP targets, all against the one nginx.
    #[arg(long, default_value_t = 100)]
    targets: usize,
    /// Each target's interval, in ms: at nginx's keep-alive timeout, where the race is.
    #[arg(long = "interval-ms", value_name = "MS", default_value = "1000", value_parser = support::millis)]
    interval: Duration,
    /// nginx's `keepalive_timeout`, in ms.
    #[arg(long = "keepalive-timeout-ms", value_name = "MS", default_value = "1000", value_parser = support::millis)]
    keepalive_timeout: Duration,
    /// nginx's `keepalive_requests`: it closes every connection after this many.
    #[arg(long, default_value_t = 20)]
    keepalive_requests: u32,
}

impl Args {
    fn keep_alive(&self) -> KeepAlive {
        KeepAlive {
            timeout: self.keepalive_timeout,
            requests: self.keepalive_requests,
        }
    }
}

/// The real HTTP probe, counting its checks, failures (by reason) and stale-connection retries.
struct Counted {
    inner: HttpProbe,
    tally: Arc<Tally>,
}

#[derive(Default)]
struct Tally {
    probes: AtomicU64,
    retries: AtomicU64,
    failed: Mutex<BTreeMap<&'static str, u64>>,
}

#[async_trait::async_trait]
impl Probe for Counted {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let result = self.inner.check(timeout).await;
        self.tally.probes.fetch_add(1, Ordering::Relaxed);
        if result.remarks.stale_connection_retried {
            self.tally.retries.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(failure) = result.failure() {
            *support::lock(&self.tally.failed)
                .entry(failure.reason.as_str())
                .or_default() += 1;
        }
        result
    }
}

/// Runs `probe-bench keepalive`.
pub fn run(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(measure(args))
}

async fn measure(args: Args) -> anyhow::Result<()> {
    let nginx = Nginx::start(args.keep_alive()).context("starting nginx")?;
    println!(
        "keepalive: nginx on {} (keepalive_timeout {} ms, keepalive_requests {}); {} pooled HTTP \
         targets every {} ms for {:?}",
        nginx.addr(),
        args.keepalive_timeout.as_millis(),
        args.keepalive_requests,
        args.targets,
        args.interval.as_millis(),
        args.duration
    );
    let cancel = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    let tally = Arc::new(Tally::default());
    let schedule = Schedule::try_new(ScheduleSettings {
        interval: args.interval,
        timeout: args.interval / 2,
        jitter: Schedule::DEFAULT_JITTER,
        ..ScheduleSettings::default()
    })?;
    let specs = (0..args.targets)
        .map(|i| {
            let url = format!("http://{}/health", nginx.addr()).parse()?;
            let probe = Counted {
                inner: HttpProbe::new(HttpSpec::get(url), Names::system()),
                tally: tally.clone(),
            };
            Ok(TargetSpec::new(
                TargetId::new(&format!("web-{i:03}"))?,
                ProbeSpec::Custom(CustomProbe::new(Arc::new(probe))),
            )
            .with_schedule(schedule)
            .with_thresholds(Thresholds::default()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut events = Collector::start(&engine);
    let mut changes = events.changes();
    engine.apply(specs)?;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while events.targets_reaching(HealthState::Up) < args.targets {
        if !Collector::next_change(&mut changes, give_up).await {
            bail!(
                "only {} of {} targets UP after 30 s",
                events.targets_reaching(HealthState::Up),
                args.targets
            );
        }
    }
    let (probes0, retries0) = (
        tally.probes.load(Ordering::Relaxed),
        tally.retries.load(Ordering::Relaxed),
    );
    let failed0: u64 = support::lock(&tally.failed).values().sum();
    let downs0 = events.count(|e| e.to == HealthState::Down);
    tokio::time::sleep(args.duration).await;
    let probes = tally.probes.load(Ordering::Relaxed) - probes0;
    let retries = tally.retries.load(Ordering::Relaxed) - retries0;
    let by_reason = support::lock(&tally.failed).clone();
    let failed = by_reason.values().sum::<u64>() - failed0;
    let false_down = events.count(|e| e.to == HealthState::Down) - downs0;
    cancel.cancel();
    engine.stopped().await;
    events.stop().await?;

    println!(
        "keepalive: {probes} probes, {failed} failed {by_reason:?}, {retries} retried on a fresh \
         connection after the server closed a kept-alive one, {false_down} DOWN"
    );
    let errors = nginx
        .error_log()
        .lines()
        .filter(|l| l.contains("[emerg]") || l.contains("[alert]"))
        .count();
    if errors > 0 {
        bail!("nginx logged errors: {}", nginx.error_log());
    }
    support::result("keepalive", "probes", probes as f64, "count");
    support::result("keepalive", "failed", failed as f64, "count");
    support::result("keepalive", "stale_retries", retries as f64, "count");
    support::result(
        "keepalive",
        "retry_rate",
        retries as f64 / probes.max(1) as f64,
        "ratio",
    );
    support::result("keepalive", "false_down", false_down as f64, "count");
    Ok(())
}
