//! `cluster-load`: real daemons as a cluster through a throw-away etcd: what sharing the targets
//! costs, how fast a killed member's targets are taken over, and what the cluster writes to
//! etcd.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench
//! ./target/release/probe-bench cluster-load [--targets 30000] [--members 3]
//!     [--interval-ms 10000] [--warmup-s 15] [--duration-s 20] [--failover-runs 5]
//!     [--failover-targets 3000] [--failover-interval-ms 1000] [--lease-ttl-s 2]
//!     [--down-every 10] [--listeners 16] [--phases cost,failover] [--daemon PATH]
//!     [--up-timeout-s 90]
//! ```
//!
//! Every target is a TCP connect to one of `--listeners` accept-and-drop listeners of this
//! process on 127.0.0.2 and up (one OS thread each), or, in the failover phase, one in
//! `--down-every` to 127.0.0.1:9, where nothing listens (DOWN). The daemons run with
//! `metrics: {per_target_histograms: false}`, so that the scrapes the harness reads its counts
//! from stay small (the fleet histogram counts every run either way), and `--log-format json`,
//! whose `listening` line gives each one's API address.
//!
//! 1. **Cost** (`cost`): `--members` daemons in a cluster (`etcd`, `lease_ttl`, one replica)
//!    sharing `--targets` targets every `--interval-ms`, then one daemon without the cluster
//!    section probing the same targets alone. Each is started, left to settle (every member's
//!    `/v1/cluster` lists every member, each owning some targets, the owned counts summing to
//!    the targets, and `/readyz` answers 200 on every member: every target UP, cluster-wide),
//!    warmed up for `--warmup-s`, then measured over `--duration-s`: the probes run (the sum
//!    over the daemons of `probe_fleet_duration_seconds_count`, one record per run, from
//!    `/metrics` read at both ends of the window) and the CPU they used (`/proc/PID/stat`). The
//!    scrapes are read before the first CPU reading and after the last, so their own cost
//!    stays out of the window, and each rate is taken over its own readings' times. Figures:
//!    `probes_per_s_*`, `cpu_cores_*`, `cpu_per_probe_us_cluster`, `cpu_per_probe_us_single`,
//!    `cluster_vs_single_cpu` (goal at most 1.1: sharing costs at most 10% per probe),
//!    `rss_mib_*` (every member holds every target), and `steady_etcd_writes_per_s` (the
//!    cluster's state writes over the window: nothing changes, so 0 is expected). Last, one
//!    daemon alone with a member's share of the targets, measured the same way:
//!    `cpu_per_probe_us_single_share` and `cluster_vs_single_share_cpu`. A process's CPU per
//!    probe falls as its probe rate rises (more runs per wake-up), so a member, probing a third
//!    of the rate, pays more per probe than the one daemon for that alone; this baseline tells
//!    that part from what being in a cluster costs.
//! 2. **Failover** (`failover`): `--members` members sharing `--failover-targets` targets every
//!    `--failover-interval-ms` with a lease TTL of `--lease-ttl-s`; DOWN targets keep their
//!    interval (`backoff.max` = interval), so every target is due once an interval. Once
//!    settled (besides the above, every member's `/v1/targets?scope=cluster` agrees on every
//!    target's owner, none is PROBING, each owner has probed its own, and etcd holds a
//!    verdict for every target), each of `--failover-runs` runs subscribes to the other
//!    members' `/v1/events`, kills one member (`kill -9`, each in turn) and measures the
//!    failover: until the survivors' `scope=cluster` listings no longer name it as an owner
//!    (polled every 100 ms) and each of its targets has a result (`last.at`) newer than the kill
//!    on its new owner's `/v1/targets` (the time of the latest of those first results). The
//!    events stream on for two intervals more: every target is steadily UP or steadily DOWN,
//!    so each transition the survivors send is spurious. The member is then started again under
//!    the same name and the cluster left to settle; the survivors' transitions until two
//!    intervals after that are counted apart. Figures: `failover_ms_median`, `failover_ms_max`
//!    (goal at most lease TTL + interval, `failover_limit_ms`), `owners_moved_ms_median`,
//!    `spurious_transitions` (goal 0), `spurious_transitions_rejoin`, `rejoin_settle_ms_median`.
//! 3. **etcd writes** (with `failover`): `probe_cluster_state_writes_total` summed over the
//!    members against `probe_state_transitions_total` summed over each member's owned series
//!    (so each target counts once), over the start-up (every target goes PROBING to UP or DOWN
//!    once; read once the writes stop growing) and over the failover runs (a killed member's
//!    writes read just before the kill). Figures: `startup_state_writes`,
//!    `startup_transitions`, `failover_state_writes`, `failover_transitions`,
//!    `etcd_writes_per_transition` (both together), `etcd_writes_per_transition_startup`,
//!    `transitions_per_s` and `etcd_writes_per_s` (both over the start-up and the failover runs'
//!    time), and `etcd_bytes_per_target`: the mean key plus value length of the `state/` keys.
//!
//! The daemons, the listeners and this process share the machine; CPU per probe reads the
//! daemons' own CPU only.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail, ensure};
use probe_etcd::etcd_client::{Client, GetOptions};
use probe_testkit::etcd::TestEtcd;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::{self, Daemon, Starting, TICKS_PER_SEC, lock, series_sum};

/// The scenario name of the `RESULT` lines.
const SCENARIO: &str = "cluster-load";
/// Targets per config file: one YAML document stays under the parser's budget of nodes.
const TARGETS_PER_FILE: usize = 20_000;
/// Where nothing listens: the failover phase's DOWN targets (refused at once).
const CLOSED: &str = "127.0.0.1:9";
/// The daemon's cluster prefix (the section sets none), where the verdicts are read back.
const PREFIX: &str = "/probe-engine/cluster/";
/// How often the failover is polled: its figures are this precise.
const FAILOVER_POLL: Duration = Duration::from_millis(100);
/// How often settling is polled.
const SETTLE_POLL: Duration = Duration::from_millis(250);
/// How long a failover may take before the run is called failed.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(30);
/// Intervals the events are watched for after a failover or a rejoin settled.
const QUIET_INTERVALS: u32 = 2;
/// Log lines of a daemon kept for an error message.
/// Spurious transitions printed (all are counted).
const SHOWN: usize = 5;

/// What the harness measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// The cluster's CPU per probe against one daemon's.
    Cost,
    /// Killed members' targets taken over, and the etcd writes.
    Failover,
}

/// Flags of `probe-bench cluster-load`.
#[derive(clap::Args)]
pub struct Args {
    /// TCP targets of the cost phase: shared by the members, then all on one daemon.
    #[arg(long, default_value_t = 30_000)]
    targets: usize,
    /// Cluster members (at least 2).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// The cost phase's interval, in ms.
    #[arg(long = "interval-ms", value_name = "MS", default_value = "10000", value_parser = support::millis)]
    interval: Duration,
    /// How long the cost phase's daemons run once settled before they are measured, in seconds.
    #[arg(long = "warmup-s", value_name = "S", default_value = "15", value_parser = support::secs)]
    warmup: Duration,
    /// The cost phase's measured window, in seconds.
    #[arg(long = "duration-s", value_name = "S", default_value = "20", value_parser = support::secs)]
    duration: Duration,
    /// Members killed in the failover phase, one a run.
    #[arg(long, default_value_t = 5)]
    failover_runs: usize,
    /// Targets of the failover phase.
    #[arg(long, default_value_t = 3_000)]
    failover_targets: usize,
    /// The failover phase's interval, in ms.
    #[arg(long = "failover-interval-ms", value_name = "MS", default_value = "1000", value_parser = support::millis)]
    failover_interval: Duration,
    /// The members' lease TTL, in whole seconds (at least 2: etcd counts leases in seconds).
    #[arg(long = "lease-ttl-s", value_name = "S", default_value_t = 2)]
    lease_ttl: u64,
    /// One failover target in this many is on a closed port, DOWN (0: none).
    #[arg(long, default_value_t = 10)]
    down_every: usize,
    /// Loopback listeners the targets are spread over, on 127.0.0.2 and up (1 to 250).
    #[arg(long, default_value_t = 16)]
    listeners: usize,
    /// The phases to run.
    #[arg(long, value_delimiter = ',', default_value = "cost,failover")]
    phases: Vec<Phase>,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// How long daemons may take to settle, in seconds.
    #[arg(long = "up-timeout-s", value_name = "S", default_value = "90", value_parser = support::secs)]
    up_timeout: Duration,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.members >= 2, "--members must be at least 2");
        ensure!(
            self.targets >= self.members && self.failover_targets >= self.members,
            "--targets and --failover-targets must be at least --members"
        );
        ensure!(
            (1..=250).contains(&self.listeners),
            "--listeners must be within 1..=250"
        );
        ensure!(self.lease_ttl >= 2, "--lease-ttl-s must be at least 2");
        ensure!(
            self.interval >= Duration::from_millis(100)
                && self.failover_interval >= Duration::from_millis(100),
            "--interval-ms and --failover-interval-ms must be at least 100"
        );
        ensure!(!self.duration.is_zero(), "--duration-s must be more than 0");
        ensure!(!self.phases.is_empty(), "--phases must name a phase");
        ensure!(
            !self.phases.contains(&Phase::Failover) || self.failover_runs >= 1,
            "--failover-runs must be at least 1 with the failover phase"
        );
        Ok(())
    }

    fn names(&self) -> Vec<String> {
        (1..=self.members).map(|i| format!("m{i}")).collect()
    }
}

/// Runs `probe-bench cluster-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let daemon = support::daemon_binary(args.daemon.as_deref())?;
    support::block_on(measure(args, daemon))
}

/// What every phase uses.
struct Harness {
    args: Args,
    binary: PathBuf,
    listeners: Vec<SocketAddr>,
    /// Requests with a deadline: every read of the API.
    http: reqwest::Client,
    /// Without one: the event streams last as long as a run.
    streams: reqwest::Client,
    dir: tempfile::TempDir,
}

async fn measure(args: Args, binary: PathBuf) -> anyhow::Result<()> {
    let listeners = (0..args.listeners)
        .map(|i| {
            let last = u8::try_from(i + 2).context("too many listeners")?;
            support::accept_and_drop([127, 0, 0, last], format!("cluster-listen-{i}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The workspace builds reqwest with `rustls-no-provider`, so building a client needs a
    // process-wide crypto provider, even for plain HTTP. An error only says that one is
    // installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("building an HTTP client")?;
    let streams = reqwest::Client::builder()
        .build()
        .context("building an HTTP client")?;
    let harness = Harness {
        binary,
        listeners,
        http,
        streams,
        dir: tempfile::tempdir().context("temp dir")?,
        args,
    };
    println!(
        "cluster-load: daemon {}, {} members, listeners on 127.0.0.2-{}",
        harness.binary.display(),
        harness.args.members,
        harness.listeners.len() + 1
    );
    if harness.args.phases.contains(&Phase::Cost) {
        harness.cost().await?;
    }
    if harness.args.phases.contains(&Phase::Failover) {
        harness.failover().await?;
    }
    Ok(())
}

/// The targets of a phase: how many, how often, and which are DOWN.
struct Fleet {
    targets: usize,
    interval: Duration,
    down_every: usize,
}

impl Fleet {
    fn id(i: usize) -> String {
        format!("t{i:06}")
    }

    fn is_down(&self, i: usize) -> bool {
        self.down_every > 0 && i % self.down_every == self.down_every - 1
    }
}

impl Harness {
    /// Writes a config folder `name` of `fleet`, with the cluster section when `etcd` is given.
    fn write_config(
        &self,
        name: &str,
        fleet: &Fleet,
        etcd: Option<&TestEtcd>,
    ) -> anyhow::Result<PathBuf> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut sections = String::from("metrics:\n  per_target_histograms: false\n");
        if let Some(etcd) = etcd {
            write!(
                sections,
                "cluster:\n  etcd: {{endpoints: [\"{}\"]}}\n  lease_ttl: {}s\n",
                etcd.endpoint(),
                self.args.lease_ttl
            )?;
        }
        std::fs::write(dir.join("sections.yaml"), sections)?;
        let interval = fleet.interval.as_millis();
        let timeout = (fleet.interval / 2).min(Duration::from_secs(1)).as_millis();
        // A DOWN target keeps its interval: every target is due once an interval, so a
        // takeover is measured against the interval, not against a backoff.
        let defaults = format!(
            "defaults:\n  interval: {interval}ms\n  timeout: {timeout}ms\n  backoff: {{max: \
             {interval}ms}}\ntargets:\n"
        );
        for (file, first) in (0..fleet.targets).step_by(TARGETS_PER_FILE).enumerate() {
            let mut yaml = defaults.clone();
            for i in first..(first + TARGETS_PER_FILE).min(fleet.targets) {
                let address = if fleet.is_down(i) {
                    CLOSED.to_owned()
                } else {
                    self.listeners[i % self.listeners.len()].to_string()
                };
                writeln!(
                    yaml,
                    "  - id: {}\n    tcp: {{address: \"{address}\"}}",
                    Fleet::id(i)
                )?;
            }
            std::fs::write(dir.join(format!("targets-{file:02}.yaml")), yaml)?;
        }
        Ok(dir)
    }

    /// Starts the daemons `names` (members, each under its name) or one daemon outside a
    /// cluster (`names` empty) on `config`, and waits until each listens.
    async fn start(&self, config: &Path, names: &[String]) -> anyhow::Result<Vec<Daemon>> {
        let starting = if names.is_empty() {
            vec![spawn(&self.binary, config, None)?]
        } else {
            names
                .iter()
                .map(|name| spawn(&self.binary, config, Some(name)))
                .collect::<anyhow::Result<Vec<_>>>()?
        };
        let mut daemons = Vec::with_capacity(starting.len());
        for s in starting {
            daemons.push(s.listening(self.args.up_timeout).await?);
        }
        Ok(daemons)
    }

    /// Phase 1: the cluster's CPU per probe against one daemon's.
    async fn cost(&self) -> anyhow::Result<()> {
        let a = &self.args;
        let fleet = Fleet {
            targets: a.targets,
            interval: a.interval,
            down_every: 0,
        };
        println!(
            "cost: {} TCP targets every {} ms ({:.0} probes/s planned): {} members vs one daemon; \
             warm-up {:.0} s, measured {:.0} s",
            a.targets,
            a.interval.as_millis(),
            a.targets as f64 / a.interval.as_secs_f64(),
            a.members,
            a.warmup.as_secs_f64(),
            a.duration.as_secs_f64()
        );
        let names = a.names();
        let cluster = {
            let etcd = TestEtcd::start().await.context("starting etcd")?;
            let config = self.write_config("cost-cluster", &fleet, Some(&etcd))?;
            let started = Instant::now();
            let mut members = self.start(&config, &names).await?;
            self.settle_members(&mut members, &names, a.targets, false)
                .await?;
            wait_ready(&self.http, &mut members, started + a.up_timeout).await?;
            println!(
                "cluster settled {:.1} s after the start: {}",
                started.elapsed().as_secs_f64(),
                owned_summary(&self.http, &members[0]).await?
            );
            self.measure_cost(&mut members).await?
        };
        let single = self.single("cost-single", &fleet).await?;
        // One daemon with a member's share: what probing at a member's rate costs a process
        // alone, to tell the cost of the cluster from that of a lower rate per process.
        let share = Fleet {
            targets: a.targets.div_ceil(a.members),
            ..fleet
        };
        let alone = self.single("cost-share", &share).await?;
        let ratio = cluster.us_per_probe() / single.us_per_probe();
        let share_ratio = cluster.us_per_probe() / alone.us_per_probe();
        let members: Vec<String> = cluster
            .each
            .iter()
            .zip(&names)
            .map(|((probes, cores), name)| format!("{name} {probes:.0} probes/s {cores:.3} cores"))
            .collect();
        println!(
            "cost: cluster {:.0} probes/s, {:.3} cores ({}), {:.1} µs CPU per probe, RSS {:.1} \
             MiB over {} members, {:.2} etcd writes/s; single {:.0} probes/s, {:.3} cores, {:.1} \
             µs CPU per probe, RSS {:.1} MiB; cluster / single CPU per probe {ratio:.3} (goal <= \
             1.1); one daemon with a member's {} targets: {:.0} probes/s, {:.1} µs CPU per \
             probe, cluster / it {share_ratio:.3}",
            cluster.probes_per_s,
            cluster.cores,
            members.join(", "),
            cluster.us_per_probe(),
            mib(cluster.rss),
            a.members,
            cluster.writes_per_s,
            single.probes_per_s,
            single.cores,
            single.us_per_probe(),
            mib(single.rss),
            share.targets,
            alone.probes_per_s,
            alone.us_per_probe()
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(SCENARIO, metric, value, unit);
        };
        result("probes_per_s_cluster", cluster.probes_per_s, "probes/s");
        result("probes_per_s_single", single.probes_per_s, "probes/s");
        result("cpu_cores_cluster", cluster.cores, "cores");
        result("cpu_cores_single", single.cores, "cores");
        result("cpu_per_probe_us_cluster", cluster.us_per_probe(), "us");
        result("cpu_per_probe_us_single", single.us_per_probe(), "us");
        result("cluster_vs_single_cpu", ratio, "ratio");
        result("cpu_per_probe_us_single_share", alone.us_per_probe(), "us");
        result("cluster_vs_single_share_cpu", share_ratio, "ratio");
        result("rss_mib_cluster", mib(cluster.rss), "MiB");
        result("rss_mib_single", mib(single.rss), "MiB");
        result("steady_etcd_writes_per_s", cluster.writes_per_s, "writes/s");
        Ok(())
    }

    /// One daemon outside a cluster probing `fleet` (config folder `name`), measured.
    async fn single(&self, name: &str, fleet: &Fleet) -> anyhow::Result<Cost> {
        let config = self.write_config(name, fleet, None)?;
        let started = Instant::now();
        let mut daemon = self.start(&config, &[]).await?;
        wait_ready(&self.http, &mut daemon, started + self.args.up_timeout).await?;
        println!(
            "one daemon with {} targets ready {:.1} s after the start",
            fleet.targets,
            started.elapsed().as_secs_f64()
        );
        self.measure_cost(&mut daemon).await
    }

    /// Warms `daemons` up, then measures their probes and CPU over the window.
    async fn measure_cost(&self, daemons: &mut [Daemon]) -> anyhow::Result<Cost> {
        tokio::time::sleep(self.args.warmup).await;
        // Scrapes first, CPU last at the start, the other way round at the end: the scrapes'
        // own CPU stays out of the window.
        let mut before = Vec::with_capacity(daemons.len());
        for d in daemons.iter() {
            before.push(read_counters(&self.http, d).await?);
        }
        let mut cpu_before = Vec::with_capacity(daemons.len());
        for d in daemons.iter() {
            cpu_before.push((support::cpu_ticks(&d.pid)?, Instant::now()));
        }
        tokio::time::sleep(self.args.duration).await;
        let mut cpu_after = Vec::with_capacity(daemons.len());
        for d in daemons.iter_mut() {
            d.check_alive()?;
            cpu_after.push((support::cpu_ticks(&d.pid)?, Instant::now()));
        }
        let mut cost = Cost::default();
        for (i, d) in daemons.iter().enumerate() {
            let after = read_counters(&self.http, d).await?;
            let scraped = (after.at - before[i].at).as_secs_f64();
            let probes = (after.probes - before[i].probes) / scraped;
            cost.probes_per_s += probes;
            cost.writes_per_s += (after.writes - before[i].writes) / scraped;
            let ((t0, at0), (t1, at1)) = (cpu_before[i], cpu_after[i]);
            let cores = t1.saturating_sub(t0) as f64 / TICKS_PER_SEC / (at1 - at0).as_secs_f64();
            cost.cores += cores;
            cost.each.push((probes, cores));
            cost.rss += support::vm_rss_of(&d.pid)?;
        }
        Ok(cost)
    }

    /// Phases 2 and 3: kills, takeovers, and the etcd writes.
    async fn failover(&self) -> anyhow::Result<()> {
        let a = &self.args;
        let fleet = Fleet {
            targets: a.failover_targets,
            interval: a.failover_interval,
            down_every: a.down_every,
        };
        refused(CLOSED)?;
        let limit = Duration::from_secs(a.lease_ttl) + fleet.interval;
        let downs = (0..fleet.targets).filter(|&i| fleet.is_down(i)).count();
        println!(
            "failover: {} targets every {} ms ({downs} DOWN on {CLOSED}), {} members, lease TTL \
             {} s; {} kills (goal: each taken over within lease TTL + interval = {} ms, no \
             transition)",
            fleet.targets,
            fleet.interval.as_millis(),
            a.members,
            a.lease_ttl,
            a.failover_runs,
            limit.as_millis()
        );
        let etcd = TestEtcd::start().await.context("starting etcd")?;
        let mut client = etcd.client().await.context("connecting to etcd")?;
        let config = self.write_config("failover", &fleet, Some(&etcd))?;
        let names = a.names();
        let started = Instant::now();
        let mut members = self.start(&config, &names).await?;
        self.settle_members(&mut members, &names, fleet.targets, true)
            .await?;
        wait_verdicts(&mut client, fleet.targets, started + a.up_timeout).await?;
        // The start-up's writes: read once they stop growing (a member set that changed while
        // the members came up has each compare its verdicts with etcd's again).
        loop {
            let first = totals(&self.http, &members).await?;
            tokio::time::sleep(fleet.interval).await;
            if totals(&self.http, &members).await?.writes == first.writes {
                break;
            }
            ensure!(
                started.elapsed() < a.up_timeout,
                "the start-up's etcd writes did not stop growing within {:?}",
                a.up_timeout
            );
        }
        let startup_time = started.elapsed().as_secs_f64();
        // Writes of members since the phase began: those of a killed one are read before the
        // kill; a member started again counts from 0.
        let mut base_writes: Vec<f64> = Vec::with_capacity(members.len());
        let mut startup = Counters::zero();
        for m in &members {
            let c = read_counters(&self.http, m).await?;
            base_writes.push(c.writes);
            startup.add(&c);
        }
        println!(
            "settled {startup_time:.1} s after the start: {}; start-up: {} state writes for {} \
             transitions",
            owned_summary(&self.http, &members[0]).await?,
            startup.writes,
            startup.transitions
        );
        let base_transitions = startup.transitions;
        let mut writes = 0.0;
        let mut runs = Vec::with_capacity(a.failover_runs);
        let phase_started = Instant::now();
        for run in 0..a.failover_runs {
            let victim = run % members.len();
            // The killed member's writes, read before the kill (the cluster is settled: nothing
            // is written meanwhile); its successor under the same name counts from 0.
            writes +=
                read_counters(&self.http, &members[victim]).await?.writes - base_writes[victim];
            runs.push(self.kill_one(&mut members, victim, &config, &fleet).await?);
            base_writes[victim] = 0.0;
            let last = runs.last().context("a run")?;
            println!(
                "run {}: killed {} ({} targets): owners moved after {:.0} ms, every one probed \
                 by its new owner after {:.0} ms: failover {:.0} ms; {} transitions on the \
                 survivors' streams; restarted, settled after {:.0} ms, {} transitions",
                run + 1,
                members[victim].name,
                last.targets,
                ms(last.failover.owners_moved),
                ms(last.failover.probed),
                ms(last.failover.done),
                last.spurious,
                ms(last.rejoin),
                last.spurious_rejoin
            );
        }
        let end = totals(&self.http, &members).await?;
        for (m, base) in members.iter().zip(&base_writes) {
            writes += read_counters(&self.http, m).await?.writes - base;
        }
        let phase_time = phase_started.elapsed().as_secs_f64();
        let failover_transitions = end.transitions - base_transitions;
        let bytes = state_bytes(&mut client).await?;
        drop(members);
        self.report_failover(&runs, limit);
        let all_writes = startup.writes + writes;
        let all_transitions = startup.transitions + failover_transitions;
        let time = startup_time + phase_time;
        println!(
            "etcd: start-up {} writes for {} transitions in {startup_time:.1} s; failover runs {} \
             writes for {} transitions in {phase_time:.1} s; {:.2} writes per transition, {:.1} \
             writes/s at {:.1} transitions/s; state/ keys {} with {:.0} bytes each (key + value)",
            startup.writes,
            startup.transitions,
            writes,
            failover_transitions,
            all_writes / all_transitions,
            all_writes / time,
            all_transitions / time,
            bytes.keys,
            bytes.mean
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(SCENARIO, metric, value, unit);
        };
        result("startup_state_writes", startup.writes, "writes");
        result("startup_transitions", startup.transitions, "transitions");
        result("failover_state_writes", writes, "writes");
        result("failover_transitions", failover_transitions, "transitions");
        result(
            "etcd_writes_per_transition",
            all_writes / all_transitions,
            "ratio",
        );
        result(
            "etcd_writes_per_transition_startup",
            startup.writes / startup.transitions,
            "ratio",
        );
        result("transitions_per_s", all_transitions / time, "transitions/s");
        result("etcd_writes_per_s", all_writes / time, "writes/s");
        result("etcd_bytes_per_target", bytes.mean, "bytes");
        Ok(())
    }

    /// One failover run: subscribes to the others' events, kills `members[victim]`, waits for
    /// its targets to be taken over, starts it again under its name and waits for the cluster
    /// to settle; the transitions the others sent meanwhile are counted.
    async fn kill_one(
        &self,
        members: &mut [Daemon],
        victim: usize,
        config: &Path,
        fleet: &Fleet,
    ) -> anyhow::Result<Run> {
        let names = self.args.names();
        let name = members[victim].name.clone();
        let targets: HashSet<String> = listing(&self.http, &members[victim], true)
            .await?
            .into_iter()
            .filter(|(_, t)| t.owner == name)
            .map(|(id, _)| id)
            .collect();
        let seen = Events::default();
        let mut streams = Vec::new();
        for (i, m) in members.iter().enumerate() {
            if i != victim {
                streams.push(seen.subscribe(&self.streams, m).await?);
            }
        }
        let killed = kill(&mut members[victim]);
        let failover = self.take_over(members, victim, &targets, &killed).await?;
        // The handover window: until the takeover is over and the quiet intervals after.
        let quiet = fleet.interval * QUIET_INTERVALS;
        let window_end = killed.at + failover.done + quiet;
        tokio::time::sleep_until(window_end).await;
        let spurious = seen.between(killed.at, window_end);

        let restarted = Instant::now();
        members[victim] = spawn(&self.binary, config, Some(&name))?
            .listening(self.args.up_timeout)
            .await?;
        self.settle_members(members, &names, fleet.targets, true)
            .await?;
        let rejoin = restarted.elapsed();
        tokio::time::sleep(quiet).await;
        let spurious_rejoin = seen.between(window_end, Instant::now());
        for stream in streams {
            stream.abort();
        }
        for (member, data) in spurious.iter().chain(&spurious_rejoin).take(SHOWN) {
            println!("  transition on {member}: {data}");
        }
        if seen.lagged() > 0 {
            println!(
                "  the event streams lagged: {} events missed, the counts are low",
                seen.lagged()
            );
        }
        Ok(Run {
            targets: targets.len(),
            failover,
            spurious: spurious.len(),
            spurious_rejoin: spurious_rejoin.len(),
            rejoin,
        })
    }

    /// Polls the survivors of a kill of `members[victim]` until none names it as an owner and
    /// each of its `targets` has a result newer than the kill on its new owner.
    async fn take_over(
        &self,
        members: &mut [Daemon],
        victim: usize,
        targets: &HashSet<String>,
        killed: &Killed,
    ) -> anyhow::Result<Failover> {
        let mut owners_moved = None;
        // Each target's first result after the kill, as its new owner shows it.
        let mut first: HashMap<String, SystemTime> = HashMap::new();
        let mut tick = tokio::time::interval(FAILOVER_POLL);
        loop {
            tick.tick().await;
            if killed.at.elapsed() > FAILOVER_PATIENCE {
                bail!(
                    "{} was not taken over within {FAILOVER_PATIENCE:?}: owners moved {}, {} of \
                     its {} targets probed by their new owner",
                    killed.name,
                    owners_moved.is_some(),
                    first.len(),
                    targets.len()
                );
            }
            let mut named = false;
            for (i, m) in members.iter_mut().enumerate() {
                if i == victim {
                    continue;
                }
                m.check_alive()?;
                // The whole cluster's listing until the owners moved, this member's own after.
                let listed = listing(&self.http, m, owners_moved.is_none()).await?;
                named |= listed.values().any(|t| t.owner == killed.name);
                for (id, t) in &listed {
                    if t.owner == m.name
                        && targets.contains(id)
                        && let Some(at) = t.last_at.filter(|at| *at > killed.wall)
                    {
                        first.entry(id.clone()).or_insert(at);
                    }
                }
            }
            // No survivor's whole-cluster listing of this round named it.
            if owners_moved.is_none() && !named {
                owners_moved = Some(killed.at.elapsed());
            }
            if let Some(moved) = owners_moved
                && first.len() == targets.len()
            {
                let probed = first
                    .values()
                    .map(|at| at.duration_since(killed.wall).unwrap_or_default())
                    .max()
                    .unwrap_or_default();
                return Ok(Failover {
                    owners_moved: moved,
                    probed,
                    done: moved.max(probed),
                });
            }
        }
    }

    /// Waits until every member lists `names` as the members, each owning some of `total`
    /// targets and the counts adding up; with `listings`, also until every member's
    /// whole-cluster listing agrees on the owners, none is PROBING and each owner has probed
    /// its own.
    async fn settle_members(
        &self,
        members: &mut [Daemon],
        names: &[String],
        total: usize,
        listings: bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.args.up_timeout;
        loop {
            let problem = self.unsettled(members, names, total, listings).await?;
            let Some(problem) = problem else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                bail!(
                    "the cluster did not settle within {:?}: {problem}",
                    self.args.up_timeout
                );
            }
            // The members' views have no push channel: poll.
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// What keeps the cluster from being settled, if anything.
    async fn unsettled(
        &self,
        members: &mut [Daemon],
        names: &[String],
        total: usize,
        listings: bool,
    ) -> anyhow::Result<Option<String>> {
        let mut agreed: Option<HashMap<String, String>> = None;
        for m in members.iter_mut() {
            m.check_alive()?;
            let view = get_json(&self.http, m.api, "/v1/cluster").await?;
            let listed = view["members"]
                .as_array()
                .context("no members in /v1/cluster")?;
            let mut seen: Vec<&str> = listed.iter().filter_map(|m| m["name"].as_str()).collect();
            seen.sort_unstable();
            let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
            want.sort_unstable();
            let owned: Vec<u64> = listed.iter().filter_map(|m| m["owned"].as_u64()).collect();
            if seen != want || owned.iter().sum::<u64>() != total as u64 || owned.contains(&0) {
                return Ok(Some(format!(
                    "{} sees members {seen:?} owning {owned:?}",
                    m.name
                )));
            }
            if !listings {
                continue;
            }
            let targets = listing(&self.http, m, true).await?;
            if targets.len() != total {
                return Ok(Some(format!("{} lists {} targets", m.name, targets.len())));
            }
            if let Some((id, t)) = targets.iter().find(|(_, t)| t.state == "PROBING") {
                return Ok(Some(format!("{id} is {} on {}", t.state, m.name)));
            }
            if let Some((id, _)) = targets
                .iter()
                .find(|(_, t)| t.owner == m.name && t.last_at.is_none())
            {
                return Ok(Some(format!("{} owns {id} and has not probed it", m.name)));
            }
            let owners: HashMap<String, String> =
                targets.into_iter().map(|(id, t)| (id, t.owner)).collect();
            if agreed.as_ref().is_some_and(|a| *a != owners) {
                return Ok(Some("the members disagree on owners".to_owned()));
            }
            agreed = Some(owners);
        }
        Ok(None)
    }

    fn report_failover(&self, runs: &[Run], limit: Duration) {
        let sorted = |f: fn(&Run) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let done = sorted(|r| ms(r.failover.done));
        let moved = sorted(|r| ms(r.failover.owners_moved));
        let rejoin = sorted(|r| ms(r.rejoin));
        let spurious: usize = runs.iter().map(|r| r.spurious).sum();
        let spurious_rejoin: usize = runs.iter().map(|r| r.spurious_rejoin).sum();
        let median = |v: &[f64]| support::percentile(v, 0.5);
        let max = |v: &[f64]| v.last().copied().unwrap_or(f64::NAN);
        println!(
            "failover over {} kills: median {:.0} ms, max {:.0} ms (goal <= {} ms); owners moved \
             after {:.0} ms (median); {spurious} spurious transitions at the kills (goal 0), \
             {spurious_rejoin} at the restarts; settled again {:.0} ms (median) after a restart",
            runs.len(),
            median(&done),
            max(&done),
            limit.as_millis(),
            median(&moved),
            median(&rejoin)
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(SCENARIO, metric, value, unit);
        };
        result("failover_ms_median", median(&done), "ms");
        result("failover_ms_max", max(&done), "ms");
        result("failover_limit_ms", ms(limit), "ms");
        result("owners_moved_ms_median", median(&moved), "ms");
        result("spurious_transitions", spurious as f64, "transitions");
        result(
            "spurious_transitions_rejoin",
            spurious_rejoin as f64,
            "transitions",
        );
        result("rejoin_settle_ms_median", median(&rejoin), "ms");
    }
}

/// One cost measurement: the daemons together.
#[derive(Default)]
struct Cost {
    probes_per_s: f64,
    cores: f64,
    /// Each daemon's probes a second and cores.
    each: Vec<(f64, f64)>,
    writes_per_s: f64,
    rss: u64,
}

impl Cost {
    fn us_per_probe(&self) -> f64 {
        self.cores / self.probes_per_s * 1e6
    }
}

/// How one kill was taken over, from the kill.
#[derive(Clone, Copy)]
struct Failover {
    /// Until no survivor named the killed member as an owner.
    owners_moved: Duration,
    /// Until the last of its targets had its first result on its new owner.
    probed: Duration,
    /// The later of the two.
    done: Duration,
}

/// One failover run.
struct Run {
    /// The killed member's targets.
    targets: usize,
    failover: Failover,
    spurious: usize,
    spurious_rejoin: usize,
    rejoin: Duration,
}

/// A member killed: its name and when.
struct Killed {
    name: String,
    at: Instant,
    /// The same moment on the wall clock, which the API's `last.at` is on.
    wall: SystemTime,
}

/// Starts `binary` on `config`, as member `member` when given, with JSON logs at `info` for
/// the daemon and its cluster.
fn spawn(binary: &Path, config: &Path, member: Option<&str>) -> anyhow::Result<Starting> {
    let args: Vec<&std::ffi::OsStr> = member
        .map(|m| vec!["--member".as_ref(), m.as_ref()])
        .unwrap_or_default();
    Starting::spawn(
        binary,
        config,
        &args,
        "warn,probe_engine=info,probe_etcd=info",
        member.unwrap_or("single"),
        false,
    )
}

/// `kill -9`, and when.
fn kill(daemon: &mut Daemon) -> Killed {
    let killed = Killed {
        name: daemon.name.clone(),
        at: Instant::now(),
        wall: SystemTime::now(),
    };
    // SIGKILL: no leaving the cluster, the lease runs out.
    let _ = daemon.child.0.kill();
    let _ = daemon.child.0.wait();
    killed
}

/// Transitions received on the event streams, by when, from which member, with their data.
#[derive(Default)]
struct Events {
    seen: Arc<Mutex<Vec<(Instant, String, String)>>>,
    lagged: Arc<Mutex<u64>>,
}

impl Events {
    /// Subscribes to `daemon`'s `/v1/events`: its subscription exists once the answer's head
    /// is in, so nothing after this returns is missed.
    async fn subscribe(
        &self,
        client: &reqwest::Client,
        daemon: &Daemon,
    ) -> anyhow::Result<JoinHandle<()>> {
        let mut response = client
            .get(format!("http://{}/v1/events", daemon.api))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("subscribing to {}'s events", daemon.name))?;
        let (seen, lagged, member) = (self.seen.clone(), self.lagged.clone(), daemon.name.clone());
        Ok(tokio::spawn(async move {
            let mut buffer = String::new();
            // The stream ends with the daemon or the run.
            while let Ok(Some(chunk)) = response.chunk().await {
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some((event, data, rest)) = next_event(&buffer) {
                    match event.as_str() {
                        "transition" => {
                            lock(&seen).push((Instant::now(), member.clone(), data));
                        }
                        "lagged" => {
                            let missed = serde_json::from_str::<Value>(&data)
                                .ok()
                                .and_then(|v| v["missed"].as_u64())
                                .unwrap_or(1);
                            *lock(&lagged) += missed;
                        }
                        _ => {}
                    }
                    buffer.drain(..rest);
                }
            }
        }))
    }

    /// The transitions received within `[from, to)`: (member, data).
    fn between(&self, from: Instant, to: Instant) -> Vec<(String, String)> {
        lock(&self.seen)
            .iter()
            .filter(|(at, ..)| *at >= from && *at < to)
            .map(|(_, member, data)| (member.clone(), data.clone()))
            .collect()
    }

    fn lagged(&self) -> u64 {
        *lock(&self.lagged)
    }
}

/// The first complete server-sent event in `buffer`: its name (`message` when it has none), its
/// data lines joined, and where the rest of the buffer begins. Comments (keep-alives) are
/// events without data, with an empty name.
fn next_event(buffer: &str) -> Option<(String, String, usize)> {
    let normalized_end = buffer.find("\n\n")?;
    let block = &buffer[..normalized_end];
    let mut name = String::new();
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if name.is_empty() && !data.is_empty() {
        name = "message".to_owned();
    }
    Some((name, data.join("\n"), normalized_end + 2))
}

/// What one scrape of a daemon's `/metrics` says, and when (the middle of the request).
struct Counters {
    /// Probe runs: one `probe_fleet_duration_seconds` record each.
    probes: f64,
    /// Verdicts and votes written to etcd.
    writes: f64,
    /// Transitions of the targets it exports (in a cluster, those it owns).
    transitions: f64,
    at: Instant,
}

async fn read_counters(http: &reqwest::Client, daemon: &Daemon) -> anyhow::Result<Counters> {
    let sent = Instant::now();
    let text = http
        .get(format!("http://{}/metrics", daemon.api))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("scraping {}", daemon.name))?
        .text()
        .await
        .with_context(|| format!("reading {}'s /metrics", daemon.name))?;
    let at = sent + sent.elapsed() / 2;
    Ok(Counters {
        probes: series_sum(&text, "probe_fleet_duration_seconds_count"),
        writes: series_sum(&text, "probe_cluster_state_writes_total"),
        transitions: series_sum(&text, "probe_state_transitions_total"),
        at,
    })
}

impl Counters {
    fn zero() -> Self {
        Self {
            probes: 0.0,
            writes: 0.0,
            transitions: 0.0,
            at: Instant::now(),
        }
    }

    fn add(&mut self, other: &Self) {
        self.probes += other.probes;
        self.writes += other.writes;
        self.transitions += other.transitions;
    }
}

/// The members' counters summed: their writes and the transitions of what each owns.
async fn totals(http: &reqwest::Client, members: &[Daemon]) -> anyhow::Result<Counters> {
    let mut sum = Counters::zero();
    for m in members {
        sum.add(&read_counters(http, m).await?);
    }
    Ok(sum)
}

async fn get_json(http: &reqwest::Client, api: SocketAddr, path: &str) -> anyhow::Result<Value> {
    http.get(format!("http://{api}{path}"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {path} on {api}"))?
        .json()
        .await
        .with_context(|| format!("reading GET {path} on {api}"))
}

/// A target as a listing shows it.
struct Listed {
    owner: String,
    state: String,
    /// Its latest result's time, when it has one here.
    last_at: Option<SystemTime>,
}

/// `daemon`'s `/v1/targets` (`whole`: `?scope=cluster`), by id.
async fn listing(
    http: &reqwest::Client,
    daemon: &Daemon,
    whole: bool,
) -> anyhow::Result<HashMap<String, Listed>> {
    let path = if whole {
        "/v1/targets?scope=cluster"
    } else {
        "/v1/targets"
    };
    let body = get_json(http, daemon.api, path).await?;
    let targets = body["targets"]
        .as_array()
        .with_context(|| format!("no targets in {path} of {}", daemon.name))?;
    Ok(targets
        .iter()
        .filter_map(|t| {
            let id = t["id"].as_str()?.to_owned();
            let last_at = t["last"]["at"]
                .as_str()
                .and_then(|at| humantime::parse_rfc3339(at).ok());
            let listed = Listed {
                owner: t["owner"].as_str().unwrap_or_default().to_owned(),
                state: t["state"].as_str().unwrap_or_default().to_owned(),
                last_at,
            };
            Some((id, listed))
        })
        .collect())
}

/// `name owned (replicated)` for each member, as `daemon` sees them.
async fn owned_summary(http: &reqwest::Client, daemon: &Daemon) -> anyhow::Result<String> {
    let view = get_json(http, daemon.api, "/v1/cluster").await?;
    let members = view["members"].as_array().context("no members")?;
    Ok(members
        .iter()
        .map(|m| format!("{} owns {}", m["name"], m["owned"]))
        .collect::<Vec<_>>()
        .join(", "))
}

/// Waits until `/readyz` answers 200 on every daemon: without a readiness policy every target
/// is UP (in a cluster, as the members' verdicts say).
async fn wait_ready(
    http: &reqwest::Client,
    daemons: &mut [Daemon],
    deadline: Instant,
) -> anyhow::Result<()> {
    for d in daemons.iter_mut() {
        d.wait_ready(http, deadline).await?;
    }
    Ok(())
}

/// Waits until etcd holds a verdict for each of `total` targets.
async fn wait_verdicts(client: &mut Client, total: usize, deadline: Instant) -> anyhow::Result<()> {
    let key = format!("{PREFIX}state/");
    loop {
        let count = client
            .get(
                key.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .context("counting the verdicts in etcd")?
            .count();
        if usize::try_from(count).is_ok_and(|c| c == total) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("etcd holds {count} verdicts, not {total}");
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

/// The `state/` keys: how many, and their mean key plus value length.
struct StateBytes {
    keys: usize,
    mean: f64,
}

async fn state_bytes(client: &mut Client) -> anyhow::Result<StateBytes> {
    let read = client
        .get(
            format!("{PREFIX}state/"),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .context("reading the verdicts in etcd")?;
    let kvs = read.kvs();
    let bytes: usize = kvs.iter().map(|kv| kv.key().len() + kv.value().len()).sum();
    Ok(StateBytes {
        keys: kvs.len(),
        mean: bytes as f64 / kvs.len() as f64,
    })
}

/// Fails unless a connection to `addr` is refused: the DOWN targets must be DOWN.
fn refused(addr: &str) -> anyhow::Result<()> {
    let parsed: SocketAddr = addr.parse()?;
    match std::net::TcpStream::connect_timeout(&parsed, Duration::from_secs(1)) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Ok(_) => bail!("something listens on {addr}, where the DOWN targets point"),
        Err(e) => bail!("connecting to {addr}: {e}, not refused"),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_whole_and_in_order() {
        let stream = "event: transition\ndata: {\"target\":\"t1\"}\n\n:\n\nevent: lagged\ndata: \
                      {\"missed\":2}\n\nevent: trans";
        let (name, data, rest) = next_event(stream).expect("a first event");
        assert_eq!(
            (name.as_str(), data.as_str()),
            ("transition", "{\"target\":\"t1\"}")
        );
        let stream = &stream[rest..];
        let (name, data, rest) = next_event(stream).expect("a keep-alive");
        assert_eq!((name.as_str(), data.as_str()), ("", ""));
        let stream = &stream[rest..];
        let (name, data, rest) = next_event(stream).expect("a lagged event");
        assert_eq!((name.as_str(), data.as_str()), ("lagged", "{\"missed\":2}"));
        assert_eq!(next_event(&stream[rest..]), None);
    }

    #[test]
    fn one_target_in_down_every_is_down() {
        let fleet = Fleet {
            targets: 30,
            interval: Duration::from_secs(1),
            down_every: 10,
        };
        let down: Vec<usize> = (0..30).filter(|&i| fleet.is_down(i)).collect();
        assert_eq!(down, [9, 19, 29]);
        let none = Fleet {
            down_every: 0,
            ..fleet
        };
        assert!((0..30).all(|i| !none.is_down(i)));
    }

    #[test]
    fn the_defaults_and_the_quick_sizes_are_valid() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = |line: &str| {
            Cli::try_parse_from(std::iter::once("cluster-load").chain(line.split_whitespace()))
                .map(|c| c.args)
        };
        assert!(args("").expect("defaults parse").validate().is_ok());
        let quick = args(
            "--targets 3000 --interval-ms 2000 --warmup-s 3 --duration-s 5 --failover-runs 2 \
             --failover-targets 600",
        )
        .expect("quick parses");
        assert!(quick.validate().is_ok());
        assert!(args("--members 1").expect("parses").validate().is_err());
        assert!(args("--lease-ttl-s 1").expect("parses").validate().is_err());
        assert!(
            args("--phases failover --failover-runs 0")
                .expect("parses")
                .validate()
                .is_err()
        );
    }
}
