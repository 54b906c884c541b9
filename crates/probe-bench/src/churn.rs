//! Load harness: the real daemon's long-run hygiene under ten minutes of topology churn.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench --bin probe-engine --bin probe-bench
//! ./target/release/probe-bench churn [--duration-s 600] [--warmup-s 120] [--batch 100]
//!     [--static-targets 50] [--file-targets 50] [--file-step 10] [--etcd-every-s 5]
//!     [--files-every-s 15] [--calls-per-s 20] [--daemon PATH] [--up-timeout-s 60]
//! ```
//!
//! A daemon fed by a topology that keeps changing (pods registering through etcd leases, files
//! rewritten by a config manager, operators setting maintenance) must keep nothing of the
//! targets that left: no memory, no descriptor, no `/metrics` series. Short benchmarks cannot
//! show a slow leak; this one churns for ten minutes and samples the daemon once a minute.
//!
//! 1. **Peers**: a throw-away etcd (`probe_testkit::etcd::TestEtcd`, as `etcd-load` starts it)
//!    and [`LISTENERS`] accept-and-drop listeners on 127.0.0.1 (`support::accept_and_drop`).
//! 2. **Daemon**: the real binary (`--daemon`, default `probe-engine` next to this binary, i.e.
//!    `target/release/probe-engine`), as `probe-engine run --config DIR --listen 127.0.0.1:PORT
//!    --state-dir DIR --api-token bench=SECRET` with `RUST_LOG=warn`. `DIR` holds `static.yaml`
//!    (the `topology.etcd` section and `--static-targets` targets that never change) and
//!    `churn.yaml` (a window of `--file-targets` targets with a `circuit_breaker`, so that the
//!    reported calls have a breaker to feed). Every target is a TCP connect every second
//!    (timeout 500 ms) to one of the listeners; one in ten goes to 127.0.0.1:9, where nothing
//!    listens, so that DOWN targets and their failure series churn too.
//! 3. **Churn**, one step a second until the last sample (at the last whole minute of
//!    `--duration-s`), from one task, so that it pauses while a sample is taken:
//!    - **etcd**: every `--etcd-every-s`, a batch of `--batch` targets with new ids is written
//!      in one transaction and the previous batch removed. Rounds alternate plain and leased
//!      keys (self-registration): a plain batch is deleted, a leased one has its lease revoked
//!      (rounds 3 mod 4) or is left to expire (rounds 1 mod 4; a TTL of one round plus a
//!      second, so that etcd deletes the keys shortly after the next round starts).
//!    - **files**: every `--files-every-s`, `churn.yaml` is rewritten with its `--file-step`
//!      oldest targets replaced by as many new ones, and the daemon gets `SIGHUP` (kill(1): the
//!      workspace forbids unsafe code, hence no `libc::kill`).
//!    - **maintenance**: every 2 s, `PUT /v1/targets/{id}/maintenance` (`{"reason": "bench",
//!      "duration": "30s"}`) on a settled target; every other one is ended with `DELETE` 10 s
//!      later if its target is still there, the others run out or leave with their target.
//!    - **passive reports**: `--calls-per-s` `POST /v1/targets/{id}/calls` a second on settled
//!      targets, one in five `{"status": 503}`, the others `{"status": 200}`, 5 ms each.
//!
//!    Every change goes with `Authorization: Bearer SECRET`. A settled target is one the daemon
//!    has had for at least a round (the static ones, the file targets but the newest
//!    `--file-step`, the current etcd batch once 2 s old), so that a request does not race its
//!    target's arrival; any answer but a 2xx counts as an API error.
//! 4. **Samples**, once a minute, the churn paused, before that second's churn step: with
//!    periods that divide a minute (the defaults) every sample finds the fleet in the same phase,
//!    the etcd batch and the newest file targets a whole round old, probed several times and
//!    settled in their states (right after a round, the sample would see targets that have not
//!    run yet, whose series are fewer, and `/metrics` would move with the timing). The harness
//!    waits (15 s at most) until `/v1/targets` lists the expected number of targets (a leased
//!    batch left to expire may still be there; a sample that did not see the count is counted
//!    as unconverged), then reads the daemon's `VmRSS`, its open descriptors (the fewest of 5
//!    counts of `/proc/PID/fd` over 0.4 s: a probe's socket in flight is in one count, a
//!    leaked descriptor in all of them), and `GET /metrics`: its size, and its lines whose
//!    `target="..."` label names a target listed neither just before nor just after the
//!    scrape (stale series; the daemon writes per-target series at scrape time from its live
//!    targets, so 0 is expected).
//!
//! Figures, as `RESULT scenario=churn` lines: per minute N (`mNN`, zero-padded so the report
//! lists them in order) `rss_bytes_mNN`, `open_fds_mNN`, `metrics_bytes_mNN`; then, over the
//! samples from the end of the warm-up (`--warmup-s`, minute 2 by default) on, for each of the
//! three `*_growth_after_warmup_pct`: the max - min spread relative to the warm-up's sample,
//! rather than last vs first, so that a rise that falls back, or a dip at the end, is not
//! hidden; and `*_last_vs_warmup_pct`, last vs that sample, signed, which tells a drift from
//! noise. `stale_series_lines` is the most of any sample, and the churn done is counted
//! (targets added and removed, reloads sent and applied, maintenance changes, calls reported,
//! API errors). Goal: the three spreads within 5 %, 0 stale lines.
//!
//! The fleet's size is the same at every sample (`--static-targets` + `--file-targets` +
//! `--batch`), so `/metrics` is expected flat too: its per-target series are bounded. Those of
//! a long-lived target still grow a little: its counters gain digits, and each new pair of
//! states it goes through (maintenance brings two) adds a `probe_state_transitions_total`
//! series, up to the few pairs there are.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use probe_etcd::DEFAULT_PREFIX;
use probe_etcd::etcd_client::{Client, PutOptions, Txn, TxnOp};
use probe_testkit::etcd::TestEtcd;
use rand::RngExt;
use tokio::time::Instant;

use crate::support::{self, ChildGuard};

/// The scenario name of the `RESULT` lines.
const SCENARIO: &str = "churn";
/// The operator token the daemon is started with, as `--api-token bench=SECRET`.
const TOKEN: &str = "SECRET";
/// The loopback listeners the targets are spread over.
const LISTENERS: usize = 4;
/// Where nothing listens: one target in ten is DOWN.
const CLOSED: &str = "127.0.0.1:9";
/// How often the daemon is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// The churn's step.
const TICK: Duration = Duration::from_secs(1);
/// How often maintenance starts on a target.
const MAINTENANCE_EVERY: u64 = 2;
/// How long after its start maintenance is ended, for the ones that are.
const MAINTENANCE_ENDED_AFTER: Duration = Duration::from_secs(10);
/// How long a sample waits for the daemon to list the expected targets.
const CONVERGE_WITHIN: Duration = Duration::from_secs(15);
/// How many API errors are printed (all are counted).
const ERRORS_SHOWN: usize = 5;

/// Flags of `probe-bench churn`.
#[derive(clap::Args)]
pub struct Args {
    /// How long the churn runs, in whole seconds: a sample at the end of each whole minute of
    /// it, the run ends with the last.
    #[arg(long = "duration-s", value_name = "S", default_value_t = 600)]
    duration: u64,
    /// The warm-up, in whole seconds: growth is measured from the first sample at or after it.
    #[arg(long = "warmup-s", value_name = "S", default_value_t = 120)]
    warmup: u64,
    /// Targets per etcd round, written in one transaction (1 to 128, etcd's txn limit).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// File targets that never change (with the `topology` section, in `static.yaml`).
    #[arg(long, default_value_t = 50)]
    static_targets: usize,
    /// File targets in the rewritten file, `churn.yaml`.
    #[arg(long, default_value_t = 50)]
    file_targets: usize,
    /// File targets replaced at each rewrite (at most --file-targets).
    #[arg(long, default_value_t = 10)]
    file_step: usize,
    /// Seconds between etcd rounds (at least 2).
    #[arg(long = "etcd-every-s", value_name = "S", default_value_t = 5)]
    etcd_every: u64,
    /// Seconds between rewrites of `churn.yaml`, each followed by SIGHUP.
    #[arg(long = "files-every-s", value_name = "S", default_value_t = 15)]
    files_every: u64,
    /// Calls reported through the API each second.
    #[arg(long, default_value_t = 20)]
    calls_per_s: usize,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// How long the daemon may take to list its first targets, in seconds.
    #[arg(long = "up-timeout-s", value_name = "S", default_value = "60", value_parser = support::secs)]
    up_timeout: Duration,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        if self.batch == 0 || self.batch > 128 {
            bail!("--batch must be within 1..=128 (etcd's txn limit)");
        }
        if self.file_step == 0 || self.file_step > self.file_targets {
            bail!("--file-step must be within 1..=--file-targets");
        }
        if self.etcd_every < 2 || self.files_every == 0 {
            bail!("--etcd-every-s must be at least 2, --files-every-s at least 1");
        }
        if self.minutes() < self.baseline_minute() + 1 {
            bail!(
                "--duration-s must leave a minute's sample after the warm-up's: at least {} s with \
                 --warmup-s {}",
                (self.baseline_minute() + 1) * SAMPLE_EVERY.as_secs(),
                self.warmup
            );
        }
        Ok(())
    }

    /// How many samples the run takes, one at the end of each whole minute.
    fn minutes(&self) -> u64 {
        self.duration / SAMPLE_EVERY.as_secs()
    }

    /// The minute whose sample growth is measured from: the first at or after the warm-up.
    fn baseline_minute(&self) -> u64 {
        self.warmup.div_ceil(SAMPLE_EVERY.as_secs()).max(1)
    }
}

/// Runs `probe-bench churn`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let daemon = support::daemon_binary(args.daemon.as_deref())?;
    support::block_on(measure(args, daemon))
}

/// How a batch of etcd targets leaves at the next round.
#[derive(Clone, Copy)]
enum Removal {
    /// Its keys are deleted.
    Delete,
    /// Its keys were written under this lease, which is revoked.
    Revoke(i64),
    /// Its keys were written under a lease that is left to expire.
    Expire,
}

/// The etcd targets written last.
struct Batch {
    round: usize,
    removal: Removal,
    written: Instant,
}

/// The churn done so far.
#[derive(Default)]
struct Counts {
    added: u64,
    removed: u64,
    revoked: u64,
    expired: u64,
    reloads: u64,
    maintenance_started: u64,
    maintenance_ended: u64,
    calls: u64,
    calls_503: u64,
    api_errors: u64,
    unconverged: u64,
}

/// One minute's sample.
struct Sample {
    rss: u64,
    fds: u64,
    metrics_bytes: u64,
    stale_lines: u64,
    listed: usize,
}

/// The harness's state: the peers, its model of the daemon's targets, and what it counted.
struct Churn {
    args: Args,
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT`, the daemon's API.
    api: String,
    etcd: Client,
    child: ChildGuard,
    pid: String,
    log_path: PathBuf,
    config_dir: PathBuf,
    listeners: Vec<SocketAddr>,
    /// The next etcd round.
    round: usize,
    batch: Option<Batch>,
    /// The first of the file window's ids: `churn.yaml` holds `first..first + --file-targets`.
    file_first: usize,
    /// Targets put in maintenance, oldest first, with when, and whether to end it.
    maintenance: VecDeque<(String, Instant, bool)>,
    counts: Counts,
}

async fn measure(args: Args, daemon: PathBuf) -> anyhow::Result<()> {
    let etcd_server = TestEtcd::start().await.context("starting etcd")?;
    let etcd = etcd_server.client().await.context("connecting to etcd")?;
    let listeners = (0..LISTENERS)
        .map(|i| support::accept_and_drop([127, 0, 0, 1], format!("churn-listen-{i}")))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let dir = tempfile::tempdir().context("temp dir")?;
    let config_dir = dir.path().join("config");
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&config_dir)?;
    std::fs::create_dir(&state_dir)?;
    std::fs::write(
        config_dir.join("static.yaml"),
        static_yaml(&etcd_server.endpoint(), args.static_targets, &listeners)?,
    )?;
    std::fs::write(
        config_dir.join("churn.yaml"),
        churn_yaml(0..args.file_targets, &listeners)?,
    )?;

    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let api = SocketAddr::from(([127, 0, 0, 1], port));
    let log_path = dir.path().join("daemon.log");
    let child = ChildGuard(
        Command::new(&daemon)
            .arg("run")
            .arg("--config")
            .arg(&config_dir)
            .arg("--listen")
            .arg(api.to_string())
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--api-token")
            .arg(format!("bench={TOKEN}"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()
            .with_context(|| format!("starting {}", daemon.display()))?,
    );
    let pid = child.pid().to_string();
    // The workspace builds reqwest with `rustls-no-provider`, so building a client needs a
    // process-wide crypto provider, even for plain HTTP. An error only says that one is
    // installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse()?,
    );
    // One kept-alive connection at most: the changes of a churn step go out together, and
    // every extra connection the pool kept would sit in the daemon's descriptor count as an
    // accepted socket, moving the figure with the harness's own timing, not the daemon's.
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .context("building an HTTP client")?;
    println!(
        "churn: daemon {} (pid {pid}) on {api}, etcd {}; {} static + {} file targets (+{} \
         replaced every {} s, SIGHUP), {} etcd targets every {} s, maintenance started every \
         {MAINTENANCE_EVERY} s, {} calls/s; {} s, sampled every minute, warm-up {} s",
        daemon.display(),
        etcd_server.endpoint(),
        args.static_targets,
        args.file_targets,
        args.file_step,
        args.files_every,
        args.batch,
        args.etcd_every,
        args.calls_per_s,
        args.duration,
        args.warmup
    );
    let mut churn = Churn {
        args,
        http,
        api: format!("http://{api}"),
        etcd,
        child,
        pid,
        log_path,
        config_dir,
        listeners,
        round: 0,
        batch: None,
        file_first: 0,
        maintenance: VecDeque::new(),
        counts: Counts::default(),
    };
    churn.wait_up().await?;
    let samples = churn.run().await?;
    churn.report(&samples).await
}

impl Churn {
    /// Waits until the daemon lists its file targets.
    async fn wait_up(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let expected = self.args.static_targets + self.args.file_targets;
        loop {
            self.check_alive()?;
            if let Ok(listed) = self.listed().await
                && listed.len() == expected
            {
                println!(
                    "daemon up: {expected} targets listed {:.1} s after the start",
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if started.elapsed() > self.args.up_timeout {
                bail!(
                    "the daemon did not list its {expected} targets within {:?}; its log: {}",
                    self.args.up_timeout,
                    self.log_tail()
                );
            }
            // No push channel to wait on: poll, often enough to waste little.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The churn loop: one step a second, a sample at the end of each whole minute; the samples.
    /// It ends with the last sample: the minute's remainder of `--duration-s` would measure
    /// nothing.
    async fn run(&mut self) -> anyhow::Result<Vec<Sample>> {
        let start = Instant::now();
        let etcd_every = Duration::from_secs(self.args.etcd_every);
        let files_every = Duration::from_secs(self.args.files_every);
        let (mut next_etcd, mut next_files, mut next_sample) =
            (start, start + files_every, start + SAMPLE_EVERY);
        let mut ticks = tokio::time::interval(TICK);
        // A slow step (a sample) delays the next one rather than bunching the missed ones.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut samples = Vec::new();
        for step in 0u64.. {
            ticks.tick().await;
            let now = Instant::now();
            self.check_alive()?;
            // Before this second's churn: the etcd batch and the file window are then a whole
            // round old, as at every other sample.
            if now >= next_sample {
                let sample = self.sample().await?;
                self.print_minute(samples.len() + 1, &sample);
                samples.push(sample);
                next_sample += SAMPLE_EVERY;
                if samples.len() as u64 == self.args.minutes() {
                    break;
                }
            }
            if now >= next_etcd {
                self.etcd_round().await?;
                next_etcd += etcd_every;
            }
            if now >= next_files {
                self.files_round()?;
                next_files += files_every;
            }
            if step.is_multiple_of(MAINTENANCE_EVERY) {
                self.start_maintenance().await;
            }
            self.end_maintenance().await;
            self.report_calls().await;
        }
        Ok(samples)
    }

    /// Writes the next etcd batch, then removes the previous one.
    async fn etcd_round(&mut self) -> anyhow::Result<()> {
        let round = self.round;
        self.round += 1;
        let (removal, lease) = if round % 2 == 1 {
            // One round plus a second: the keys outlive the next round's write.
            let ttl = i64::try_from(self.args.etcd_every + 1)?;
            let lease = self
                .etcd
                .lease_grant(ttl, None)
                .await
                .context("granting a lease")?
                .id();
            let removal = if round % 4 == 1 {
                Removal::Expire
            } else {
                Removal::Revoke(lease)
            };
            (removal, Some(lease))
        } else {
            (Removal::Delete, None)
        };
        let ops: Vec<TxnOp> = (0..self.args.batch)
            .map(|i| {
                let options = lease.map(|l| PutOptions::new().with_lease(l));
                TxnOp::put(
                    etcd_key(round, i),
                    etcd_value(round, i, address(i, &self.listeners)),
                    options,
                )
            })
            .collect();
        self.etcd
            .txn(Txn::new().and_then(ops))
            .await
            .context("writing an etcd batch")?;
        self.counts.added += self.args.batch as u64;
        let written = Instant::now();
        if let Some(previous) = self.batch.replace(Batch {
            round,
            removal,
            written,
        }) {
            match previous.removal {
                Removal::Delete => {
                    let ops: Vec<TxnOp> = (0..self.args.batch)
                        .map(|i| TxnOp::delete(etcd_key(previous.round, i), None))
                        .collect();
                    self.etcd
                        .txn(Txn::new().and_then(ops))
                        .await
                        .context("deleting an etcd batch")?;
                }
                Removal::Revoke(lease) => {
                    self.etcd
                        .lease_revoke(lease)
                        .await
                        .context("revoking a lease")?;
                    self.counts.revoked += self.args.batch as u64;
                }
                Removal::Expire => self.counts.expired += self.args.batch as u64,
            }
            self.counts.removed += self.args.batch as u64;
        }
        Ok(())
    }

    /// Replaces the oldest file targets by new ones and sends SIGHUP.
    fn files_round(&mut self) -> anyhow::Result<()> {
        self.file_first += self.args.file_step;
        let window = self.file_first..self.file_first + self.args.file_targets;
        std::fs::write(
            self.config_dir.join("churn.yaml"),
            churn_yaml(window, &self.listeners)?,
        )
        .context("rewriting churn.yaml")?;
        let status = Command::new("kill")
            .args(["-s", "HUP", &self.pid])
            .status()
            .context("running kill(1)")?;
        ensure!(status.success(), "kill -s HUP {}: {status}", self.pid);
        self.counts.added += self.args.file_step as u64;
        self.counts.removed += self.args.file_step as u64;
        self.counts.reloads += 1;
        Ok(())
    }

    /// Starts maintenance on a settled target not in maintenance yet.
    async fn start_maintenance(&mut self) {
        let settled = self.settled();
        let taken: HashSet<&str> = self
            .maintenance
            .iter()
            .map(|(id, ..)| id.as_str())
            .collect();
        let free: Vec<&String> = settled
            .iter()
            .filter(|id| !taken.contains(id.as_str()))
            .collect();
        if free.is_empty() {
            return;
        }
        let id = free[rand::rng().random_range(0..free.len())].clone();
        let url = format!("{}/v1/targets/{id}/maintenance", self.api);
        let request = self
            .http
            .put(&url)
            .json(&serde_json::json!({"reason": "bench", "duration": "30s"}));
        if self.send("PUT", &url, request).await {
            self.counts.maintenance_started += 1;
            // Every other one is ended, the others run out or leave with their target.
            let end = self.counts.maintenance_started.is_multiple_of(2);
            self.maintenance.push_back((id, Instant::now(), end));
        }
    }

    /// Ends the maintenance due to end, on targets that are still there.
    async fn end_maintenance(&mut self) {
        while let Some((_, at, _)) = self.maintenance.front() {
            if at.elapsed() < MAINTENANCE_ENDED_AFTER {
                break;
            }
            let Some((id, _, end)) = self.maintenance.pop_front() else {
                break;
            };
            if !end || !self.is_live(&id) {
                continue;
            }
            let url = format!("{}/v1/targets/{id}/maintenance", self.api);
            let request = self.http.delete(&url);
            if self.send("DELETE", &url, request).await {
                self.counts.maintenance_ended += 1;
            }
        }
    }

    /// Reports `--calls-per-s` calls on settled targets, one in five a 503.
    async fn report_calls(&mut self) {
        let settled = self.settled();
        if settled.is_empty() {
            return;
        }
        for _ in 0..self.args.calls_per_s {
            let id = &settled[rand::rng().random_range(0..settled.len())];
            let status = if self.counts.calls % 5 == 4 { 503 } else { 200 };
            let url = format!("{}/v1/targets/{id}/calls", self.api);
            let request = self
                .http
                .post(&url)
                .json(&serde_json::json!({"status": status, "latency_ms": 5}));
            if self.send("POST", &url, request).await {
                self.counts.calls += 1;
                if status == 503 {
                    self.counts.calls_503 += 1;
                }
            }
        }
    }

    /// Sends an API change; false (counted, the first few printed) unless it answered 2xx.
    async fn send(&mut self, method: &str, url: &str, request: reqwest::RequestBuilder) -> bool {
        let problem = match request.send().await {
            Ok(response) if response.status().is_success() => return true,
            Ok(response) => {
                let status = response.status();
                format!("{status}: {}", response.text().await.unwrap_or_default())
            }
            Err(e) => format!("{e}"),
        };
        self.counts.api_errors += 1;
        if self.counts.api_errors as usize <= ERRORS_SHOWN {
            println!("api error: {method} {url}: {problem}");
        }
        false
    }

    /// The targets the daemon has had for at least a round: requests on them do not race
    /// their arrival.
    fn settled(&self) -> Vec<String> {
        let mut ids: Vec<String> = (0..self.args.static_targets).map(static_id).collect();
        let newest = self.file_first + self.args.file_targets - self.args.file_step;
        ids.extend((self.file_first..newest).map(file_id));
        if let Some(batch) = &self.batch
            && batch.written.elapsed() >= Duration::from_secs(2)
        {
            ids.extend((0..self.args.batch).map(|i| etcd_id(batch.round, i)));
        }
        ids
    }

    /// Whether `id` is in the config now (etcd's current batch, the file window, the static
    /// targets).
    fn is_live(&self, id: &str) -> bool {
        let window = self.file_first..self.file_first + self.args.file_targets;
        (0..self.args.static_targets).any(|i| static_id(i) == id)
            || window.into_iter().any(|i| file_id(i) == id)
            || self
                .batch
                .as_ref()
                .is_some_and(|b| (0..self.args.batch).any(|i| etcd_id(b.round, i) == id))
    }

    /// The ids `/v1/targets` lists.
    async fn listed(&self) -> anyhow::Result<HashSet<String>> {
        let body: serde_json::Value = self
            .http
            .get(format!("{}/v1/targets", self.api))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let targets = body["targets"]
            .as_array()
            .context("no targets array in /v1/targets")?;
        Ok(targets
            .iter()
            .filter_map(|t| Some(t["id"].as_str()?.to_owned()))
            .collect())
    }

    /// One minute's sample, once the daemon lists the expected targets (or 15 s have passed).
    async fn sample(&mut self) -> anyhow::Result<Sample> {
        let expected = self.args.static_targets + self.args.file_targets + self.args.batch;
        let since = Instant::now();
        let before = loop {
            let listed = self.listed().await.context("reading /v1/targets")?;
            if listed.len() == expected {
                break listed;
            }
            if since.elapsed() > CONVERGE_WITHIN {
                println!(
                    "sample: {} targets listed, not the {expected} expected, after {:?}",
                    listed.len(),
                    CONVERGE_WITHIN
                );
                self.counts.unconverged += 1;
                break listed;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let rss = support::vm_rss_of(&self.pid)?;
        let mut fds = u64::MAX;
        for i in 0..5 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            fds = fds.min(open_fds(&self.pid)?);
        }
        let metrics = self
            .http
            .get(format!("{}/metrics", self.api))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
            .context("reading /metrics")?;
        let after = self.listed().await.context("reading /v1/targets")?;
        let stale_lines = metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(target_label)
            .filter(|t| !before.contains(*t) && !after.contains(*t))
            .count() as u64;
        Ok(Sample {
            rss,
            fds,
            metrics_bytes: metrics.len() as u64,
            stale_lines,
            listed: before.len(),
        })
    }

    fn print_minute(&self, minute: usize, s: &Sample) {
        let c = &self.counts;
        println!(
            "minute {minute}: RSS {:.1} MiB, {} open fds, /metrics {} bytes, {} targets listed, \
             {} stale series lines; churn so far: {} targets added, {} removed, {} reloads, {} \
             maintenance changes, {} calls reported, {} API errors",
            s.rss as f64 / (1024.0 * 1024.0),
            s.fds,
            s.metrics_bytes,
            s.listed,
            s.stale_lines,
            c.added,
            c.removed,
            c.reloads,
            c.maintenance_started + c.maintenance_ended,
            c.calls,
            c.api_errors
        );
        let result = |metric: &str, value: u64, unit: &str| {
            support::result(
                SCENARIO,
                &format!("{metric}_m{minute:02}"),
                value as f64,
                unit,
            );
        };
        result("rss_bytes", s.rss, "bytes");
        result("open_fds", s.fds, "descriptors");
        result("metrics_bytes", s.metrics_bytes, "bytes");
    }

    /// The summary figures, from the samples and the daemon's own counters.
    async fn report(&self, samples: &[Sample]) -> anyhow::Result<()> {
        let metrics = self
            .http
            .get(format!("{}/metrics", self.api))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
            .context("reading /metrics")?;
        let counter = |name: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                // From +0: an empty f64 sum is -0, which prints as `-0`.
                .fold(0.0, |sum, v| sum + v)
        };
        let applied = counter("probe_config_reloads_total{result=\"success\"}");
        let failed = counter("probe_config_reloads_total{result=\"failure\"}");
        let rejected = counter("probe_topology_errors_total");

        // Minute N is samples[N - 1]; validate() left at least one sample after the baseline.
        let baseline = usize::try_from(self.args.baseline_minute())? - 1;
        let after = samples
            .get(baseline..)
            .context("no sample after the warm-up")?;
        let series = [
            ("rss", after.iter().map(|s| s.rss).collect::<Vec<_>>()),
            ("fds", after.iter().map(|s| s.fds).collect()),
            (
                "metrics_bytes",
                after.iter().map(|s| s.metrics_bytes).collect(),
            ),
        ];
        let mut summary = String::new();
        for (name, values) in series {
            let (spread, drift) = growth(&values);
            write!(
                summary,
                "{name} {spread:.2}% ({drift:+.2}% last vs first); "
            )?;
            support::result(
                SCENARIO,
                &format!("{name}_growth_after_warmup_pct"),
                spread,
                "percent",
            );
            support::result(
                SCENARIO,
                &format!("{name}_last_vs_warmup_pct"),
                drift,
                "percent",
            );
        }
        let stale = samples.iter().map(|s| s.stale_lines).max().unwrap_or(0);
        println!(
            "after the warm-up (minutes {} to {}), max - min spread relative to minute {}: {}{stale} \
             stale series lines at most",
            baseline + 1,
            samples.len(),
            baseline + 1,
            summary
        );
        let c = &self.counts;
        println!(
            "churn: {} targets added, {} removed ({} by lease revocation, {} by lease expiry), \
             {} reloads sent ({applied} applied, {failed} failed, {rejected} topology entries \
             rejected), {} maintenance changes ({} started, {} ended), {} calls reported ({} of \
             them 503), {} API errors, {} samples that did not see the expected target count",
            c.added,
            c.removed,
            c.revoked,
            c.expired,
            c.reloads,
            c.maintenance_started + c.maintenance_ended,
            c.maintenance_started,
            c.maintenance_ended,
            c.calls,
            c.calls_503,
            c.api_errors,
            c.unconverged
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(SCENARIO, metric, value, unit);
        };
        result("stale_series_lines", stale as f64, "lines");
        result("targets_added", c.added as f64, "targets");
        result("targets_removed", c.removed as f64, "targets");
        result("leased_targets_revoked", c.revoked as f64, "targets");
        result("leased_targets_expired", c.expired as f64, "targets");
        result("reloads", c.reloads as f64, "reloads");
        result("reloads_applied", applied, "reloads");
        result("reloads_failed", failed, "reloads");
        result("topology_entries_rejected", rejected, "entries");
        result(
            "maintenance_changes",
            (c.maintenance_started + c.maintenance_ended) as f64,
            "changes",
        );
        result("calls_reported", c.calls as f64, "calls");
        result("api_errors", c.api_errors as f64, "errors");
        result("unconverged_samples", c.unconverged as f64, "samples");
        Ok(())
    }

    /// Fails, with the end of its log, when the daemon has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.0.try_wait()? {
            bail!("the daemon exited ({status}); its log: {}", self.log_tail());
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let mut tail: Vec<&str> = log.lines().rev().take(10).collect();
        tail.reverse();
        tail.join("\n")
    }
}

fn static_id(i: usize) -> String {
    format!("static-{i:03}")
}

fn file_id(i: usize) -> String {
    format!("file-{i:06}")
}

/// Fixed width, so that `/metrics` does not grow with the round number.
fn etcd_id(round: usize, i: usize) -> String {
    format!("etcd-{round:05}-{i:03}")
}

fn etcd_key(round: usize, i: usize) -> String {
    format!("{DEFAULT_PREFIX}{}", etcd_id(round, i))
}

fn etcd_value(round: usize, i: usize, address: String) -> String {
    serde_json::json!({
        "id": etcd_id(round, i),
        "tcp": {"address": address},
        "interval": "1s",
        "timeout": "500ms",
    })
    .to_string()
}

/// The address of target `i` of a batch or file: one of `listeners`, or nothing for one in ten.
fn address(i: usize, listeners: &[SocketAddr]) -> String {
    if i % 10 == 9 {
        CLOSED.to_owned()
    } else {
        listeners[i % listeners.len()].to_string()
    }
}

/// `static.yaml`: the etcd topology and the targets that never change.
fn static_yaml(endpoint: &str, count: usize, listeners: &[SocketAddr]) -> anyhow::Result<String> {
    let mut yaml = format!(
        "topology:\n  etcd:\n    endpoints: [\"{endpoint}\"]\ndefaults:\n  interval: 1s\n  \
         timeout: 500ms\ntargets:\n"
    );
    for i in 0..count {
        writeln!(
            yaml,
            "  - id: {}\n    tcp:\n      address: \"{}\"",
            static_id(i),
            address(i, listeners)
        )?;
    }
    Ok(yaml)
}

/// `churn.yaml`: the file targets `window`, with a circuit breaker for the reported calls.
fn churn_yaml(window: std::ops::Range<usize>, listeners: &[SocketAddr]) -> anyhow::Result<String> {
    let mut yaml = String::from(
        "defaults:\n  interval: 1s\n  timeout: 500ms\n  circuit_breaker:\n    minimum_calls: 10\n    \
         window: 30s\ntargets:\n",
    );
    for i in window {
        writeln!(
            yaml,
            "  - id: {}\n    tcp:\n      address: \"{}\"",
            file_id(i),
            address(i, listeners)
        )?;
    }
    Ok(yaml)
}

/// (max - min, last - first) of `values`, in percent of the first: how far a figure moved
/// after the warm-up, and whether it drifted. NaN without values.
fn growth(values: &[u64]) -> (f64, f64) {
    let (Some(&first), Some(&last)) = (values.first(), values.last()) else {
        return (f64::NAN, f64::NAN);
    };
    let (min, max) = values
        .iter()
        .fold((first, first), |(min, max), &v| (min.min(v), max.max(v)));
    let pct = |delta: f64| 100.0 * delta / first as f64;
    (pct((max - min) as f64), pct(last as f64 - first as f64))
}

/// The descriptors process `pid` holds.
fn open_fds(pid: &str) -> anyhow::Result<u64> {
    let path = Path::new("/proc").join(pid).join("fd");
    let entries =
        std::fs::read_dir(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(entries.count() as u64)
}

/// The value of a `/metrics` line's `target` label, if it has one.
fn target_label(line: &str) -> Option<&str> {
    // The label itself, not one whose name ends in `target`.
    let start = ["{target=\"", ",target=\""]
        .iter()
        .filter_map(|label| Some(line.find(label)? + label.len()))
        .min()?;
    line[start..].split_once('"').map(|(value, _)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_labels_are_read_from_series_lines() {
        assert_eq!(
            target_label("probe_target_up{target=\"etcd-00001-002\"} 1"),
            Some("etcd-00001-002")
        );
        assert_eq!(
            target_label("probe_failures_total{target=\"a\",reason=\"refused\"} 3"),
            Some("a")
        );
        assert_eq!(
            target_label("x_bucket{kind=\"tcp\",target=\"b\",le=\"0.1\"} 3"),
            Some("b")
        );
        assert_eq!(target_label("probe_in_flight 0"), None);
        assert_eq!(target_label("x{pool_target=\"c\"} 1"), None);
        assert_eq!(
            target_label("x{pool_target=\"c\",target=\"d\"} 1"),
            Some("d")
        );
    }

    #[test]
    fn growth_is_the_spread_and_the_drift_from_the_first_value() {
        assert_eq!(growth(&[100, 104, 98, 101]), (6.0, 1.0));
        assert_eq!(growth(&[100, 90]), (10.0, -10.0));
        assert!(growth(&[]).0.is_nan());
    }

    #[test]
    fn the_baseline_is_the_first_sample_after_the_warm_up() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = |line: &str| {
            Cli::try_parse_from(std::iter::once("churn").chain(line.split_whitespace()))
                .map(|c| c.args)
        };
        let full = args("").expect("defaults parse");
        assert_eq!((full.minutes(), full.baseline_minute()), (10, 2));
        assert!(full.validate().is_ok());
        let quick = args("--duration-s 150 --warmup-s 60").expect("quick parses");
        assert_eq!((quick.minutes(), quick.baseline_minute()), (2, 1));
        assert!(quick.validate().is_ok());
        let short = args("--duration-s 120 --warmup-s 120").expect("parses");
        assert!(short.validate().is_err());
    }
}
