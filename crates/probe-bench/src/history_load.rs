//! `history-load`: what the daemon's history costs: the CPU of recording 10k probes a second,
//! the bytes a target takes a day once a week has been written, and how long an uptime over
//! 90 days takes to compute.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench
//! ./target/release/probe-bench history-load [--phases cpu,week,query] [--targets 10000]
//!     [--interval-ms 1000] [--listeners 16] [--toggled 100] [--toggle-s 10] [--warmup-s 20]
//!     [--window-s 60] [--windows 5] [--control] [--first both|on|off] [--week-targets 1000]
//!     [--week-targets-1s 100]
//!     [--week-days 7] [--write-every-s 60] [--no-postgres] [--query-targets 100]
//!     [--query-days 90] [--transitions-per-day 20] [--queries 50] [--seed 1] [--daemon PATH]
//! ```
//!
//! 1. **CPU** (`cpu`, scenario `history_cpu`): two release daemons at once, each probing the same
//!    `--targets` TCP targets every `--interval-ms` (timeout half of it, at most 1 s; `rise` and
//!    `fall` 1, no flap detection; `metrics: {per_target_histograms: false}`, the lighter
//!    daemon, so that the history's share is not diluted by series it does not need), both with
//!    `--state-dir` (so that only the history differs): `on` records its history in SQLite (the
//!    default), `off` has `history: false`. `--toggled` of the targets connect to one loopback
//!    listener that the harness closes and opens again every `--toggle-s` once both daemons are
//!    ready, so that transitions are written while measured; the rest to `--listeners`
//!    accept-and-drop listeners on 127.0.0.2 and up (an OS thread each, in this process: both
//!    daemons' connects land on the same listeners). After `--warmup-s`, `--windows` windows of
//!    `--window-s` each: both daemons' `utime + stime` (`/proc/PID/stat`) over the same window,
//!    read in one order at the window's start and end, the order alternating from window to
//!    window; the two run side by side for the whole run, so whatever else the machine does
//!    hits both alike. The writer snapshots every target's day every 5 minutes (the first 5 s
//!    after it opens), so windows that span 5 minutes together hold one whenever they start
//!    (the default: 5 windows of 60 s); one window of 60 s holds one or none, so the figure to
//!    read is the windows together, `share_all_pct`. Figures, per window (the report's median
//!    and spread are over the windows): `cpu_on_s`, `cpu_off_s`, `share_pct` (`(on - off) / off`, the goal: at most
//!    3%), `share_per_probe_pct` (the same per probe, from each daemon's own
//!    `probe_fleet_duration_seconds_count`, read from `/metrics` between the windows so that
//!    rendering it is in none), `probes_per_s_on`, `probes_per_s_off`, `sqlite_threads_cpu_s`
//!    (the `on` daemon's sqlx SQLite worker threads, where the statements run: the rest of the
//!    difference is the counter and the writer on the runtime's workers), `box_cores` (every
//!    busy CPU of the machine, `/proc/stat`) and `others_cores` (that, less the two daemons:
//!    the listeners and whatever else runs). Once, after the windows: `share_all_pct` (over
//!    all windows together), from the `on` daemon's `/metrics` `write_errors`, `dropped`
//!    (`probe_history_dropped_total`, every reason), `feed_dropped`
//!    (`probe_record_feed_dropped_total`: records the engine could not hand over) and
//!    `pending_rows`; from `GET /v1/targets/{id}/history` the transitions recorded for a
//!    toggled target (`toggled_transitions`, against `toggles`, the times its listener closed
//!    or opened) and a steady one (`steady_transitions`: its PROBING to UP); `db_bytes` and
//!    `wal_bytes` (the files under the `on` daemon's state directory). The `off` daemon's
//!    `/v1/topology` must show no history, or the run fails. With `--control` both daemons run
//!    without history (scenario `history_cpu_control`): the share then is what two identical
//!    daemons differ by, the noise floor of the figure. The daemon started first measures
//!    dearer, by about 1% (an A/A run: +0.8%; the same code, started each way: +4.1% and
//!    +2.2%), so by default (`--first both`) the pair runs twice, `on` started first, then
//!    `off`, and each order's figures are reported: `share_all_pct` is then one per order, and
//!    the line `cpu: both orders` gives their mean, the figure to read. `--first on` or
//!    `--first off` runs one order.
//! 2. **A simulated week** (`week`, scenarios `history_week_10s` and `history_week_1s`): no
//!    daemon. [`Rollups`] and [`Store`] driven straight, as the daemon's counter and writer
//!    drive them, on a fixture clock from 2026-01-01T00:00Z: `--week-targets` targets probed
//!    every 10 s (and `--week-targets-1s` every second) for `--week-days` days, their runs
//!    spread over the interval. Each target has a usual latency (1 to 6 ms) that every run
//!    jitters by +-30% (1% of runs 5x slower), 4 isolated failures a day (under `fall`: no
//!    transition), 2 DOWN spells a day (30 s to 5 min; runs fail with the timeout's 500 ms),
//!    and one hour of maintenance in the week (not probed meanwhile; set and ended by
//!    "alice", so two operator actions): about 4.4 transitions a target a day. Hours are
//!    closed as the clock passes them (the daemon's tick), and the queue (transitions, days,
//!    actions) is written through [`Store::write`] every `--write-every-s` simulated seconds
//!    (the daemon writes every second: the rows are the same, only fewer transactions); the
//!    clock stops a millisecond before the last midnight, where the last day is written by a
//!    snapshot, as the daemon's periodic snapshot would have it. Figures:
//!    `sqlite_bytes_per_target_day` ([`Store::size`]: used pages),
//!    `sqlite_file_bytes_per_target_day` (the database file once the store is closed, which
//!    takes the journal back into it; `wal_bytes`, what journal is left; then, printed, each table's and index's share of the file from
//!    SQLite's `dbstat`), `blob_bytes_per_target_day` (the rollup blobs alone),
//!    `transitions_per_target_day`, `gb_per_year_100k` (the file's figure for 100k targets over
//!    365 days), `sim_s` (how long the week took). The same rows go to a throw-away PostgreSQL
//!    (`probe_testkit::Postgres`, the history tests' fixture; `--no-postgres`, or a
//!    machine without it, leaves it out, and says so): `pg_bytes_per_target_day` ([`Store::size`]:
//!    the live rows) and `pg_disk_bytes_per_target_day` (`pg_total_relation_size` of every
//!    table of the schema, indexes included, through `psql`).
//! 3. **Uptime queries** (`query`, scenario `history_query`): a SQLite store seeded on the
//!    fixture clock with `--query-days` days of `--transitions-per-day` transitions a day
//!    (alternately DOWN and UP at random times) for each of `--query-targets` targets, and the
//!    one session that recorded them; then `--queries` times each, what
//!    `History::uptimes` does ([`Store::timeline`] then [`uptime::compute`] per target) over the
//!    whole span for one target (a different one each time) and for all of them at once.
//!    Figures: `one_ms_median`, `one_ms_p99`, `group_ms_median`, `group_ms_p99` (nearest rank:
//!    with 50 queries, the slowest), `group_ms_first` (the first query, on a store just
//!    written), `transitions_per_target` (as read back).
//!
//! Everything runs on the same machine, the daemons' listeners in this process; the CPU figures
//! read the daemons' own.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use probe::TargetId;
use probe::health::{HealthState, Quality};
use probe_engine::history::ActionRow;
use probe_engine::history::rollup::{DAY_MS, HOUR_MS, Rollups};
use probe_engine::history::store::{Backend, Batch, Store, TransitionRow};
use probe_engine::history::uptime;
use probe_testkit::{Postgres, PostgresError};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, Daemon, Starting, TICKS_PER_SEC, series_sum};

/// The scenario of the CPU figures.
const CPU_SCENARIO: &str = "history_cpu";
/// The same with `--control` (both daemons without history): kept apart, so that an A/A run's
/// figures never mix with the real ones in a report.
const CONTROL_SCENARIO: &str = "history_cpu_control";
/// The scenario of the query figures.
const QUERY_SCENARIO: &str = "history_query";
/// Targets per config file: one YAML document stays well under the parser's budget of nodes.
const TARGETS_PER_FILE: usize = 5_000;
/// The fixture clock's start: 2026-01-01T00:00:00Z, a midnight (UTC days are the rollups').
const T0: i64 = 1_767_225_600_000;
/// Isolated failures a simulated target has a day: fewer than `fall` in a row, no transition.
const FAILURES_PER_DAY: f64 = 4.0;
/// DOWN spells a simulated target has a day.
const SPELLS_PER_DAY: usize = 2;
/// What a DOWN spell's runs take: the timeout.
const TIMEOUT_LATENCY: Duration = Duration::from_millis(500);
/// What an operator's maintenance says, as the API records it.
const MAINTENANCE_DETAIL: &str = "disk swap (for 1h)";
/// A DOWN's detail, as the engine writes a failed check's (`reason: detail`).
const DOWN_DETAIL: &str = "timeout: no answer within 500ms";

/// What the harness measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Two real daemons, history on and off: the CPU it costs.
    Cpu,
    /// A simulated week written to SQLite (and PostgreSQL): bytes per target per day.
    Week,
    /// Uptime over 90 days from a seeded store: query time.
    Query,
}

/// Flags of `probe-bench history-load`.
#[derive(clap::Args)]
#[command(
    mut_arg("targets", |a| a.help("Targets each daemon probes (cpu), the toggled ones among them")),
    mut_arg("interval", |a| a.help("Every target's interval (cpu), in ms")),
    mut_arg("listeners", |a| {
        a.help("Loopback listeners the steady targets are spread over, on 127.0.0.2 and up (1 to 250)")
    }),
)]
pub struct Args {
    /// The phases to run.
    #[arg(long, value_delimiter = ',', default_value = "cpu,week,query")]
    phases: Vec<Phase>,
    #[command(flatten)]
    fleet: support::FleetArgs,
    /// Targets on the listener that is closed and opened again every `--toggle-s` (cpu).
    #[arg(long, default_value_t = 100)]
    toggled: usize,
    /// How long the toggled listener stays open, and then closed, in seconds.
    #[arg(long = "toggle-s", value_name = "S", default_value = "10", value_parser = support::secs)]
    toggle: Duration,
    /// How long both daemons run once ready before the first window, in seconds.
    #[arg(long = "warmup-s", value_name = "S", default_value = "20", value_parser = support::secs)]
    warmup: Duration,
    /// Each CPU window, in seconds (see `--windows`).
    #[arg(long = "window-s", value_name = "S", default_value = "60", value_parser = support::secs)]
    window: Duration,
    /// CPU windows: together they should span a multiple of 5 minutes, the writer's
    /// snapshots' period, so that they hold the share of them a day holds.
    #[arg(long, default_value_t = 5)]
    windows: usize,
    /// Both daemons without history: the noise floor of the share (scenario
    /// `history_cpu_control`).
    #[arg(long)]
    control: bool,
    /// Which daemon is started first: `on`, `off`, or `both` (a run in each order; see the
    /// module's docs).
    #[arg(long, value_enum, default_value_t = First::Both)]
    first: First,
    /// How long the daemons may take to be ready, in seconds.
    #[arg(long = "up-timeout-s", value_name = "S", default_value = "90", value_parser = support::secs)]
    up_timeout: Duration,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// Targets of the simulated week probed every 10 s.
    #[arg(long = "week-targets", default_value_t = 1_000)]
    week_targets: usize,
    /// Targets of the second simulated week, probed every second (0: none).
    #[arg(long = "week-targets-1s", default_value_t = 100)]
    week_targets_1s: usize,
    /// Simulated days.
    #[arg(long = "week-days", default_value_t = 7)]
    week_days: i64,
    /// How often the simulated queue is written, in simulated seconds.
    #[arg(long = "write-every-s", value_name = "S", default_value_t = 60)]
    write_every_s: i64,
    /// Leaves PostgreSQL out of the simulated week.
    #[arg(long = "no-postgres")]
    no_postgres: bool,
    /// Targets of the query phase's store.
    #[arg(long = "query-targets", default_value_t = 100)]
    query_targets: usize,
    /// Days of transitions in the query phase's store, and the span queried.
    #[arg(long = "query-days", default_value_t = 90)]
    query_days: i64,
    /// Transitions a target has a day in the query phase's store (even: each day ends UP).
    #[arg(long = "transitions-per-day", default_value_t = 20)]
    transitions_per_day: usize,
    /// Queries timed, of each kind.
    #[arg(long, default_value_t = 50)]
    queries: usize,
    /// Seed of the simulated latencies, failures and spells.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(!self.phases.is_empty(), "--phases must name a phase");
        ensure!(
            self.fleet.targets > self.toggled,
            "--targets must be more than --toggled"
        );
        ensure!(
            (1..=250).contains(&self.fleet.listeners),
            "--listeners must be within 1..=250"
        );
        ensure!(
            self.fleet.interval >= Duration::from_millis(100),
            "--interval-ms must be at least 100"
        );
        ensure!(!self.toggle.is_zero(), "--toggle-s must be more than 0");
        ensure!(!self.window.is_zero(), "--window-s must be more than 0");
        ensure!(self.windows >= 1, "--windows must be at least 1");
        ensure!(self.week_targets >= 1, "--week-targets must be at least 1");
        ensure!(
            (1..=400).contains(&self.week_days),
            "--week-days must be within 1..=400"
        );
        ensure!(
            self.write_every_s >= 1,
            "--write-every-s must be at least 1"
        );
        ensure!(
            self.query_targets >= 1,
            "--query-targets must be at least 1"
        );
        ensure!(
            (1..=400).contains(&self.query_days),
            "--query-days must be within 1..=400"
        );
        ensure!(
            self.transitions_per_day >= 2 && self.transitions_per_day.is_multiple_of(2),
            "--transitions-per-day must be even and at least 2"
        );
        ensure!(self.queries >= 1, "--queries must be at least 1");
        Ok(())
    }
}

/// Runs `probe-bench history-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let daemon = if args.phases.contains(&Phase::Cpu) {
        Some(support::daemon_binary(args.daemon.as_deref())?)
    } else {
        None
    };
    support::block_on(measure(args, daemon))
}

async fn measure(args: Args, daemon: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("temp dir")?;
    println!(
        "history-load: phases {:?}; load average at the start {}",
        args.phases,
        loadavg()
    );
    if let Some(binary) = &daemon {
        let orders: &[bool] = match args.first {
            First::On => &[false],
            First::Off => &[true],
            First::Both => &[false, true],
        };
        let mut shares = Vec::new();
        for &off_first in orders {
            let order = dir
                .path()
                .join(if off_first { "off-first" } else { "on-first" });
            shares.push(cpu(&args, binary, &order, off_first).await?);
        }
        if let [on_first, off_first] = shares[..] {
            println!(
                "cpu: both orders: on started first {on_first:+.2}%, off started first \
                 {off_first:+.2}%: history {:+.2}% (goal <= 3%)",
                (on_first + off_first) / 2.0
            );
        }
    }
    if args.phases.contains(&Phase::Week) {
        week(&args, dir.path()).await?;
    }
    if args.phases.contains(&Phase::Query) {
        query(&args, dir.path()).await?;
    }
    println!("history-load: load average at the end {}", loadavg());
    Ok(())
}

/// The first three fields of `/proc/loadavg`, for the record of how busy the machine was.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

// --- Phase 1: CPU ---------------------------------------------------------------------------

/// One daemon of the pair and its state directory.
struct Arm {
    daemon: Daemon,
    state: PathBuf,
}

/// What a daemon's `/metrics` says, and when it was read (the middle of the request).
struct Reading {
    probes: f64,
    at: Instant,
}

/// Which daemon of the pair is started first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum First {
    On,
    Off,
    Both,
}

/// Phase 1: the pair of daemons, side by side, `off` started first if `off_first`; the share
/// over all windows.
async fn cpu(a: &Args, binary: &Path, dir: &Path, off_first: bool) -> anyhow::Result<f64> {
    let scenario = if a.control {
        CONTROL_SCENARIO
    } else {
        CPU_SCENARIO
    };
    // The workspace builds reqwest with `rustls-no-provider`: a client needs a process-wide
    // provider even for plain HTTP (an error only says one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .context("building an HTTP client")?;
    let steady = (0..a.fleet.listeners)
        .map(|i| {
            let last = u8::try_from(i + 2).context("too many listeners")?;
            support::accept_and_drop([127, 0, 0, last], format!("listen-{i}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let toggle = Toggle::start(a.toggle)?;
    println!(
        "cpu: two daemons ({}), each {} TCP targets every {} ms ({} of them on a listener \
         closed and opened every {:.0} s) over {} listeners; {} windows of {:.0} s after {:.0} s; \
         `{}` started first",
        if a.control {
            "control: both with history: false"
        } else {
            "history on (SQLite under --state-dir) and history: false"
        },
        a.fleet.targets,
        a.fleet.interval.as_millis(),
        a.toggled,
        a.toggle.as_secs_f64(),
        a.fleet.listeners,
        a.windows,
        a.window.as_secs_f64(),
        a.warmup.as_secs_f64(),
        if off_first { "off" } else { "on" }
    );
    let mut order = [("on", !a.control), ("off", false)];
    if off_first {
        order.reverse();
    }
    let mut starting = Vec::new();
    for (name, history) in order {
        let config = dir.join(name).join("config");
        let state = dir.join(name).join("state");
        for d in [&config, &state] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        write_config(&config, a, history, &steady, toggle.addr)?;
        // The library's per-transition lines left out: thousands of them would cost the
        // daemons what they would not spend otherwise. Warnings are echoed, but for sqlx's
        // slow-statement ones: they quote each statement whole (500 rows of parameters), and
        // their time includes the wait for the SQLite worker on a busy machine.
        let daemon = Starting::spawn(
            binary,
            &config,
            &["--state-dir".as_ref(), state.as_os_str()],
            "warn,probe_engine=info,sqlx=error",
            name,
            true,
        )?;
        starting.push((daemon, state));
    }
    // `on` at 0 whichever started first.
    if off_first {
        starting.reverse();
    }
    let started = Instant::now();
    let mut arms = Vec::new();
    for (daemon, state) in starting {
        let mut daemon = daemon.listening(a.up_timeout).await?;
        daemon.wait_ready(&http, started + a.up_timeout).await?;
        arms.push(Arm { daemon, state });
    }
    println!(
        "cpu: both daemons ready {:.1} s after the start",
        started.elapsed().as_secs_f64()
    );
    toggle.go.cancel();
    tokio::time::sleep(a.warmup).await;

    let mut before = [
        read_probes(&http, arms[0].daemon.api).await?,
        read_probes(&http, arms[1].daemon.api).await?,
    ];
    let pids = [arms[0].daemon.pid.clone(), arms[1].daemon.pid.clone()];
    let (mut all_on, mut all_off, mut all_probes_on, mut all_probes_off) = (0.0, 0.0, 0.0, 0.0);
    let result = |metric: &str, value: f64, unit: &str| {
        support::result(scenario, metric, value, unit);
    };
    for w in 0..a.windows {
        // The same order at both ends of a window (so both windows are as long), the other
        // order in the next window.
        let order: [usize; 2] = if w % 2 == 0 { [0, 1] } else { [1, 0] };
        let wall = std::time::SystemTime::now();
        let box0 = support::box_ticks()?;
        let mut c0 = [0u64; 2];
        for i in order {
            c0[i] = support::cpu_ticks(&pids[i])?;
        }
        let sql0 = sqlite_ticks(&pids[0]);
        tokio::time::sleep(a.window).await;
        let mut c1 = [0u64; 2];
        for i in order {
            c1[i] = support::cpu_ticks(&pids[i])?;
        }
        let sql1 = sqlite_ticks(&pids[0]);
        let box1 = support::box_ticks()?;
        let after = [
            read_probes(&http, arms[0].daemon.api).await?,
            read_probes(&http, arms[1].daemon.api).await?,
        ];
        for arm in &mut arms {
            arm.daemon.check_alive()?;
        }
        let cpu = |i: usize| c1[i].saturating_sub(c0[i]) as f64 / TICKS_PER_SEC;
        let (on, off) = (cpu(0), cpu(1));
        let probes = |i: usize| after[i].probes - before[i].probes;
        let rate = |i: usize| probes(i) / (after[i].at - before[i].at).as_secs_f64();
        let secs = a.window.as_secs_f64();
        let box_cores = box1.saturating_sub(box0) as f64 / TICKS_PER_SEC / secs;
        let others = box_cores - (on + off) / secs;
        let share = (on - off) / off * 100.0;
        let per_probe = |cpu: f64, probes: f64| cpu / probes;
        let share_per_probe = (per_probe(on, probes(0)) - per_probe(off, probes(1)))
            / per_probe(off, probes(1))
            * 100.0;
        let sqlite = sql1.saturating_sub(sql0) as f64 / TICKS_PER_SEC;
        println!(
            "cpu window {}/{} (from {}): on {on:.2} s ({:.0} probes/s, {:.1} us/probe; SQLite \
             threads {sqlite:.2} s), off {off:.2} s ({:.0} probes/s, {:.1} us/probe): history \
             {share:+.2}% ({share_per_probe:+.2}% per probe); machine {box_cores:.2} cores busy, \
             {others:.2} besides the daemons{}",
            w + 1,
            a.windows,
            humantime::format_rfc3339_seconds(wall),
            rate(0),
            on / probes(0) * 1e6,
            rate(1),
            off / probes(1) * 1e6,
            crosses_hour(wall, a.window)
        );
        result("cpu_on_s", on, "s");
        result("cpu_off_s", off, "s");
        result("share_pct", share, "percent");
        result("share_per_probe_pct", share_per_probe, "percent");
        result("probes_per_s_on", rate(0), "probes/s");
        result("probes_per_s_off", rate(1), "probes/s");
        result("sqlite_threads_cpu_s", sqlite, "s");
        result("box_cores", box_cores, "cores");
        result("others_cores", others, "cores");
        all_on += on;
        all_off += off;
        all_probes_on += probes(0);
        all_probes_off += probes(1);
        before = after;
    }
    let share_all = (all_on - all_off) / all_off * 100.0;
    let per_probe_all =
        (all_on / all_probes_on - all_off / all_probes_off) / (all_off / all_probes_off) * 100.0;
    println!(
        "cpu: over all {} windows: on {all_on:.2} s, off {all_off:.2} s: history {share_all:+.2}% \
         ({per_probe_all:+.2}% per probe; goal <= 3%)",
        a.windows
    );
    result("share_all_pct", share_all, "percent");
    result("share_per_probe_all_pct", per_probe_all, "percent");

    // What the `on` daemon says of its history, outside every window.
    let (on, off) = (&arms[0], &arms[1]);
    let text = get_text(&http, &format!("http://{}/metrics", on.daemon.api)).await?;
    let write_errors = series_sum(&text, "probe_history_write_errors_total");
    let dropped = series_sum(&text, "probe_history_dropped_total");
    let feed_dropped = series_sum(&text, "probe_record_feed_dropped_total");
    let pending = series_sum(&text, "probe_history_pending_rows");
    let topology = |arm: &Arm| {
        let url = format!("http://{}/v1/topology", arm.daemon.api);
        let http = http.clone();
        async move { get_json(&http, &url).await.map(|t| t["history"].clone()) }
    };
    let (on_status, off_status) = (topology(on).await?, topology(off).await?);
    ensure!(
        off_status.is_null(),
        "the daemon with history: false reports a history: {off_status}"
    );
    let toggles = toggle.flips.load(Ordering::Relaxed) as f64;
    let db = on.state.join("history.db");
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len()) as f64;
    let (db_bytes, wal_bytes) = (size(&db), size(&on.state.join("history.db-wal")));
    if a.control {
        ensure!(
            on_status.is_null(),
            "a control daemon reports a history: {on_status}"
        );
        println!("cpu: control run: neither daemon keeps a history");
    } else {
        let transitions = |id: &str| {
            let url = format!(
                "http://{}/v1/targets/{id}/history?limit=10000",
                on.daemon.api
            );
            let http = http.clone();
            async move {
                let body = get_json(&http, &url).await?;
                anyhow::Ok(body["transitions"].as_array().map_or(0, Vec::len) as f64)
            }
        };
        let toggled = transitions(&toggled_id(0)).await?;
        let steady_one = transitions(&steady_id(0)).await?;
        println!(
            "cpu: the on daemon's history is {} ({}): write errors {write_errors}, dropped \
             {dropped}, engine feed dropped {feed_dropped}, pending {pending}; {} recorded {toggled} \
             transitions ({toggles} toggles of its listener), {} {steady_one}; {} is {:.1} MB \
             ({:.0} bytes a target) and its WAL {:.1} MB",
            on_status["state"].as_str().unwrap_or("?"),
            on_status["location"].as_str().unwrap_or("?"),
            toggled_id(0),
            steady_id(0),
            db.display(),
            db_bytes / 1e6,
            db_bytes / a.fleet.targets as f64,
            wal_bytes / 1e6
        );
        ensure!(
            on_status["state"] == "ok",
            "the on daemon's history is not ok: {on_status}"
        );
        ensure!(
            toggled >= 2.0,
            "a toggled target has {toggled} transitions recorded"
        );
        result("write_errors", write_errors, "writes");
        result("dropped", dropped, "rows");
        result("feed_dropped", feed_dropped, "records");
        result("pending_rows", pending, "rows");
        result("toggled_transitions", toggled, "transitions");
        result("toggles", toggles, "toggles");
        result("steady_transitions", steady_one, "transitions");
        result("db_bytes", db_bytes, "bytes");
        result("wal_bytes", wal_bytes, "bytes");
    }
    drop(arms);
    toggle.stop.cancel();
    Ok(share_all)
}

/// `" (crosses an hour: ...)"` when a window from `wall` of `len` crosses a UTC hour, where the
/// counter closes every target's hour (and at midnight finishes every day): a cost an hour
/// bears once, which a short window would overstate.
fn crosses_hour(wall: std::time::SystemTime, len: Duration) -> &'static str {
    let start = probe_engine::history::ms(wall);
    let end = start + i64::try_from(len.as_millis()).unwrap_or(i64::MAX / 2);
    if start.div_euclid(DAY_MS) != end.div_euclid(DAY_MS) {
        " (crosses midnight UTC: every day finished in it)"
    } else if start.div_euclid(HOUR_MS) != end.div_euclid(HOUR_MS) {
        " (crosses an hour: every hour closed in it)"
    } else {
        ""
    }
}

/// CPU ticks of process `pid`'s sqlx SQLite worker threads (named `sqlx-sqlite-worker-N`,
/// which the kernel cuts to 15 bytes), where every statement runs: 0 when it has none, or
/// when `/proc` cannot be read (a thread that ended is not counted).
fn sqlite_ticks(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| {
            stat.split_once('(')
                .is_some_and(|(_, rest)| rest.starts_with("sqlx-sqlite"))
        })
        .filter_map(|stat| support::stat_ticks(&stat).ok())
        .sum()
}

/// The id of the `i`th toggled target.
fn toggled_id(i: usize) -> String {
    format!("tog-{i:05}")
}

/// The id of the `i`th steady target.
fn steady_id(i: usize) -> String {
    format!("t-{i:05}")
}

/// Writes a daemon's config folder: its sections (`history: false` without `history`), then
/// the toggled targets and the steady ones, at most [`TARGETS_PER_FILE`] to a file.
fn write_config(
    dir: &Path,
    a: &Args,
    history: bool,
    steady: &[SocketAddr],
    toggle: SocketAddr,
) -> anyhow::Result<()> {
    let mut sections = String::from("metrics: {per_target_histograms: false}\n");
    if !history {
        sections.push_str("history: false\n");
    }
    std::fs::write(dir.join("sections.yaml"), sections)?;
    let interval = a.fleet.interval.as_millis();
    let timeout = (a.fleet.interval / 2)
        .min(Duration::from_secs(1))
        .as_millis();
    let defaults = format!(
        "defaults: {{interval: {interval}ms, timeout: {timeout}ms, rise: 1, fall: 1, flap: \
         false}}\ntargets:\n"
    );
    let targets: Vec<(String, SocketAddr)> = (0..a.toggled)
        .map(|i| (toggled_id(i), toggle))
        .chain((0..a.fleet.targets - a.toggled).map(|i| (steady_id(i), steady[i % steady.len()])))
        .collect();
    for (file, chunk) in targets.chunks(TARGETS_PER_FILE).enumerate() {
        let mut yaml = defaults.clone();
        for (id, address) in chunk {
            writeln!(yaml, "  - id: {id}\n    tcp: {{address: \"{address}\"}}")?;
        }
        std::fs::write(dir.join(format!("targets-{file:02}.yaml")), yaml)?;
    }
    Ok(())
}

/// A loopback listener that accepts and drops until `go`, then is closed and opened again on
/// the same port every period: connects are refused while it is closed, so its targets go
/// DOWN and UP again and the history has transitions to write while it is measured.
struct Toggle {
    addr: SocketAddr,
    /// Starts the toggling.
    go: CancellationToken,
    stop: CancellationToken,
    /// Times it was closed or opened again.
    flips: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Toggle {
    fn start(period: Duration) -> anyhow::Result<Self> {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let addr = listener.local_addr()?;
        let (go, stop) = (CancellationToken::new(), CancellationToken::new());
        let flips = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (go, stop, flips) = (go.clone(), stop.clone(), flips.clone());
            async move {
                let mut open = Some(listener);
                let mut until = tokio::time::Instant::now();
                loop {
                    match open.take() {
                        Some(listener) => {
                            let deadline = async {
                                go.cancelled().await;
                                tokio::time::sleep_until(until.max(Instant::now())).await;
                            };
                            tokio::pin!(deadline);
                            loop {
                                tokio::select! {
                                    biased;
                                    () = stop.cancelled() => return,
                                    () = &mut deadline => break,
                                    accepted = listener.accept() => drop(accepted),
                                }
                            }
                            // Dropped here: connects are refused from now on.
                        }
                        None => {
                            tokio::select! {
                                () = stop.cancelled() => return,
                                () = tokio::time::sleep_until(until) => {}
                            }
                            match listen(addr) {
                                Ok(listener) => open = Some(listener),
                                Err(e) => {
                                    // Still closed: tried again a period later.
                                    eprintln!("history-load: reopening {addr}: {e:#}");
                                    until = Instant::now() + period;
                                    continue;
                                }
                            }
                        }
                    }
                    flips.fetch_add(1, Ordering::Relaxed);
                    until = Instant::now() + period;
                }
            }
        });
        Ok(Self {
            addr,
            go,
            stop,
            flips,
            task,
        })
    }
}

impl Drop for Toggle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener on `addr` (backlog 4096), `SO_REUSEADDR` so that its port can be bound again
/// while the connections it accepted linger.
fn listen(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .context("creating a listener socket")?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    socket.listen(4096).context("listen")?;
    tokio::net::TcpListener::from_std(socket.into()).context("a tokio listener")
}

/// The probe runs a daemon counted so far (one `probe_fleet_duration_seconds` record each).
async fn read_probes(http: &reqwest::Client, api: SocketAddr) -> anyhow::Result<Reading> {
    let sent = Instant::now();
    let text = get_text(http, &format!("http://{api}/metrics")).await?;
    Ok(Reading {
        probes: series_sum(&text, "probe_fleet_duration_seconds_count"),
        at: sent + sent.elapsed() / 2,
    })
}

async fn get_text(http: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    http.get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {url}"))?
        .text()
        .await
        .with_context(|| format!("reading GET {url}"))
}

async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let text = get_text(http, url).await?;
    serde_json::from_str(&text).with_context(|| format!("GET {url}: not JSON"))
}

// --- Phase 2: a simulated week --------------------------------------------------------------

/// A change planned for a simulated target, applied at its first run at or after `at_ms` (the
/// engine moves at a run's end); an operator's action with it, when it is one.
#[derive(Clone, Copy)]
struct Planned {
    at_ms: i64,
    to: HealthState,
    cause: &'static str,
    reason: Option<&'static str>,
    detail: Option<&'static str>,
    action: Option<&'static str>,
}

/// One simulated target.
struct Simulated {
    id: TargetId,
    /// Its usual latency, in microseconds.
    base_us: f64,
    /// When in each interval it runs.
    phase_ms: i64,
    state: HealthState,
    plan: Vec<Planned>,
    next: usize,
}

/// One case of the week: its targets every `interval_ms`.
struct Week {
    scenario: String,
    targets: usize,
    interval_ms: i64,
}

/// A store of the week and how to read its size on disk.
struct Sink {
    what: &'static str,
    store: Store,
    /// The SQLite file, or the PostgreSQL fixture.
    file: Option<PathBuf>,
    pg: Option<Postgres>,
}

/// Phase 2: each case's week, written to SQLite and, when it can be started, to PostgreSQL.
async fn week(a: &Args, dir: &Path) -> anyhow::Result<()> {
    let mut cases = vec![Week {
        scenario: "history_week_10s".into(),
        targets: a.week_targets,
        interval_ms: 10_000,
    }];
    if a.week_targets_1s > 0 {
        cases.push(Week {
            scenario: "history_week_1s".into(),
            targets: a.week_targets_1s,
            interval_ms: 1_000,
        });
    }
    for case in &cases {
        let mut sinks = vec![Sink {
            what: "sqlite",
            store: open(
                Backend::Sqlite(dir.join(format!("{}.db", case.scenario))),
                T0,
            )
            .await?,
            file: Some(dir.join(format!("{}.db", case.scenario))),
            pg: None,
        }];
        if a.no_postgres {
            println!("week: PostgreSQL left out (--no-postgres)");
        } else {
            match tokio::task::spawn_blocking(Postgres::start)
                .await
                .context("starting PostgreSQL")?
            {
                Ok(pg) => sinks.push(Sink {
                    what: "postgres",
                    store: open(Backend::Postgres(pg.url()), T0).await?,
                    file: None,
                    pg: Some(pg),
                }),
                Err(PostgresError::Skip(why)) => {
                    println!("week: PostgreSQL skipped: {why}");
                }
                Err(e) => println!("week: PostgreSQL skipped: it did not start: {e}"),
            }
        }
        simulate(a, case, &mut sinks).await?;
    }
    Ok(())
}

async fn open(backend: Backend, now_ms: i64) -> anyhow::Result<Store> {
    let what = backend.describe();
    Ok(Store::open(backend, "history-load", now_ms)
        .await
        .with_context(|| format!("opening {what}"))?
        .store)
}

/// What waits to be written, as the daemon's writer keeps it: the newest blob of each day.
#[derive(Default)]
struct Queue {
    transitions: Vec<TransitionRow>,
    days: HashMap<(i64, TargetId), Vec<u8>>,
    actions: Vec<ActionRow>,
}

impl Queue {
    fn days(&mut self, days: Vec<(i64, TargetId, Vec<u8>)>) {
        for (day, id, hours) in days {
            self.days.insert((day, id), hours);
        }
    }
}

/// Counts of what a week wrote.
#[derive(Default)]
struct Written {
    transitions: u64,
    actions: u64,
    /// Day rows and their blobs' bytes: each (day, target) is written once (closed days, and
    /// the last day by its snapshot).
    days: u64,
    blob_bytes: u64,
    writes: u64,
}

/// Runs one case's week and prints its figures.
async fn simulate(a: &Args, case: &Week, sinks: &mut [Sink]) -> anyhow::Result<()> {
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let days = a.week_days;
    let interval = case.interval_ms;
    let runs_per_day = (DAY_MS / interval) as f64;
    let mut targets: Vec<Simulated> = (0..case.targets)
        .map(|i| plan(i, case.targets, interval, days, &mut rng))
        .collect::<anyhow::Result<_>>()?;
    let mut rollups = Rollups::default();
    let mut queue = Queue::default();
    let mut written = Written::default();
    let failure_p = FAILURES_PER_DAY / runs_per_day;
    let write_every = a.write_every_s * 1000;
    let end = T0 + days * DAY_MS - 1;
    let mut next_write = T0 + write_every;
    let mut hour = T0.div_euclid(HOUR_MS);
    let cycles = (end - T0) / interval + 1;
    for k in 0..cycles {
        let base = T0 + k * interval;
        // The counter's tick: the hours that ended are closed, days finished at midnight.
        if base.div_euclid(HOUR_MS) > hour {
            hour = base.div_euclid(HOUR_MS);
            queue.days(rollups.close(base, |_| true));
        }
        if base >= next_write {
            flush(sinks, &mut queue, &mut written, base).await?;
            next_write += write_every;
        }
        for t in &mut targets {
            let at = base + t.phase_ms;
            if at > end {
                continue;
            }
            step(t, at, failure_p, &mut rollups, &mut queue, &mut rng);
        }
    }
    // The clock stops just before the last midnight: the last day goes in as a snapshot.
    queue.days(rollups.close(end, |_| true));
    queue.days(rollups.snapshot(end, |_| true));
    flush(sinks, &mut queue, &mut written, end).await?;
    let sim_s = began.elapsed().as_secs_f64();

    let target_days = (case.targets as i64 * days) as f64;
    let result = |scenario: &str, metric: &str, value: f64, unit: &str| {
        support::result(scenario, metric, value, unit);
    };
    let per_day = written.transitions as f64 / target_days;
    let blob = written.blob_bytes as f64 / written.days.max(1) as f64;
    println!(
        "week {}: {} targets every {} s for {days} days in {sim_s:.1} s: {} transitions ({per_day:.2} \
         a target a day), {} actions, {} day rows of {blob:.0} bytes on average (expected {}), \
         {} writes",
        case.scenario,
        case.targets,
        interval / 1000,
        written.transitions,
        written.actions,
        written.days,
        target_days,
        written.writes
    );
    result(&case.scenario, "sim_s", sim_s, "s");
    result(
        &case.scenario,
        "transitions_per_target_day",
        per_day,
        "transitions",
    );
    result(&case.scenario, "blob_bytes_per_target_day", blob, "bytes");
    for sink in sinks.iter_mut() {
        let size = sink
            .store
            .size()
            .await
            .with_context(|| format!("the {} store's size", sink.what))? as f64;
        sink.store.close().await;
        let per = size / target_days;
        match (&sink.file, &sink.pg) {
            (Some(file), _) => {
                let wal = PathBuf::from(format!("{}-wal", file.display()));
                let db = std::fs::metadata(file).map_or(0, |m| m.len()) as f64;
                let journal = std::fs::metadata(&wal).map_or(0, |m| m.len()) as f64;
                let on_disk = db / target_days;
                let year = on_disk * 100_000.0 * 365.0 / 1e9;
                println!(
                    "week {} sqlite: {per:.0} bytes a target a day in used pages, {on_disk:.0} in \
                     the file ({:.2} MB; its journal {:.2} MB besides): {year:.2} GB a year for \
                     100k targets",
                    case.scenario,
                    db / 1e6,
                    journal / 1e6
                );
                match sqlite_breakdown(file) {
                    Ok(lines) => {
                        for line in lines.lines() {
                            let mut f = line.split('|');
                            let (Some(name), Some(bytes), Some(unused)) = (
                                f.next(),
                                f.next().and_then(|b| b.parse::<f64>().ok()),
                                f.next().and_then(|b| b.parse::<f64>().ok()),
                            ) else {
                                continue;
                            };
                            println!(
                                "week {}: {name} {:.1} bytes a target a day ({:.0}% of its pages \
                                 unused)",
                                case.scenario,
                                bytes / target_days,
                                100.0 * unused / bytes.max(1.0)
                            );
                        }
                    }
                    Err(e) => println!("week {}: no breakdown per table: {e:#}", case.scenario),
                }
                result(&case.scenario, "wal_bytes", journal, "bytes");
                result(&case.scenario, "sqlite_bytes_per_target_day", per, "bytes");
                result(
                    &case.scenario,
                    "sqlite_file_bytes_per_target_day",
                    on_disk,
                    "bytes",
                );
                result(&case.scenario, "gb_per_year_100k", year, "GB");
            }
            (None, Some(pg)) => {
                let scenario = format!("{}_pg", case.scenario);
                let disk = pg_disk_bytes(pg).map(|b| b as f64 / target_days);
                match &disk {
                    Ok(d) => println!(
                        "week {scenario}: {per:.0} bytes a target a day in live rows, {d:.0} on \
                         disk with indexes: {:.2} GB a year for 100k targets",
                        d * 100_000.0 * 365.0 / 1e9
                    ),
                    Err(e) => println!(
                        "week {scenario}: {per:.0} bytes a target a day in live rows; on disk \
                         unknown: {e:#}"
                    ),
                }
                result(&scenario, "pg_bytes_per_target_day", per, "bytes");
                if let Ok(d) = disk {
                    result(&scenario, "pg_disk_bytes_per_target_day", d, "bytes");
                    result(
                        &scenario,
                        "gb_per_year_100k",
                        d * 100_000.0 * 365.0 / 1e9,
                        "GB",
                    );
                }
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// Where a SQLite file's bytes are, per table and index (SQLite's `dbstat`): each one's pages
/// and the part of them left unused, largest first, as `name pages unused` lines.
fn sqlite_breakdown(file: &Path) -> anyhow::Result<String> {
    sqlite3(
        file,
        "SELECT name, SUM(pgsize), SUM(unused) FROM dbstat GROUP BY name ORDER BY 2 DESC;",
    )
}

/// What the `sqlite3` shell prints for `sql` on `file`, waiting up to 5 s for a lock (the
/// store's last connection may still be closing on its worker thread).
fn sqlite3(file: &Path, sql: &str) -> anyhow::Result<String> {
    let shell = support::which("sqlite3").context("no sqlite3 shell")?;
    let out = std::process::Command::new(shell)
        .args(["-cmd", ".timeout 5000"])
        .arg(file)
        .arg(sql)
        .output()
        .context("running sqlite3")?;
    ensure!(
        out.status.success(),
        "sqlite3: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bytes the history's tables take in PostgreSQL (every table of the `public` schema, its
/// indexes and TOAST included: `pg_total_relation_size`), through `psql`: the store reads live
/// rows only, which leaves out the pages, tuple headers and indexes a disk holds.
fn pg_disk_bytes(pg: &Postgres) -> anyhow::Result<u64> {
    let psql = support::which("psql").context("no psql")?;
    let out = std::process::Command::new(psql)
        .arg(pg.url())
        .args([
            "-Atc",
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n \
             ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'",
        ])
        .output()
        .context("running psql")?;
    ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .with_context(|| format!("psql printed {text:?}"))
}

/// Target `i` of `n`: its latency, its place in the interval, and its week of DOWN spells and
/// maintenance.
fn plan(
    i: usize,
    n: usize,
    interval: i64,
    days: i64,
    rng: &mut StdRng,
) -> anyhow::Result<Simulated> {
    let id = TargetId::new(&format!("sim-{i:06}")).context("a simulated target's id")?;
    let mut plan = Vec::new();
    // The maintenance: one hour, on a day and at an hour that vary with the target.
    let day = (i as i64) % days;
    let maint = T0 + day * DAY_MS + (9 + (i as i64) % 8) * HOUR_MS + ((i as i64) % 60) * 60_000;
    plan.push(Planned {
        at_ms: maint,
        to: HealthState::Maintenance,
        cause: "maintenance_started",
        reason: None,
        detail: Some(MAINTENANCE_DETAIL),
        action: Some("maintenance_set"),
    });
    plan.push(Planned {
        at_ms: maint + HOUR_MS,
        to: HealthState::Probing,
        cause: "maintenance_ended",
        reason: None,
        detail: None,
        action: Some("maintenance_ended"),
    });
    let quiet = |start: i64, end: i64, plan: &[Planned]| {
        // Ten minutes clear of the maintenance and of any other spell.
        let margin = 10 * 60_000;
        plan.chunks(2).all(|pair| {
            let (s, e) = (
                pair[0].at_ms,
                pair.get(1).map_or(pair[0].at_ms, |p| p.at_ms),
            );
            end + margin < s || start > e + margin
        })
    };
    for d in 0..days {
        for _ in 0..SPELLS_PER_DAY {
            let start = T0 + d * DAY_MS + rng.random_range(interval..DAY_MS - 10 * 60_000);
            let end = start + rng.random_range(30_000..300_000);
            if !quiet(start, end, &plan) {
                continue;
            }
            plan.push(Planned {
                at_ms: start,
                to: HealthState::Down,
                cause: "results",
                reason: Some("timeout"),
                detail: Some(DOWN_DETAIL),
                action: None,
            });
            plan.push(Planned {
                at_ms: end,
                to: HealthState::Up,
                cause: "results",
                reason: None,
                detail: None,
                action: None,
            });
        }
    }
    plan.sort_by_key(|p| p.at_ms);
    Ok(Simulated {
        id,
        base_us: rng.random_range(1_000.0..6_000.0),
        phase_ms: (i as i64 * interval) / n as i64,
        state: HealthState::Probing,
        plan,
        next: 0,
    })
}

/// Target `t`'s run at `at`: its planned changes due first, then the run, as the engine's feed
/// hands them to the counter.
fn step(
    t: &mut Simulated,
    at: i64,
    failure_p: f64,
    rollups: &mut Rollups,
    queue: &mut Queue,
    rng: &mut StdRng,
) {
    while let Some(p) = t.plan.get(t.next).copied()
        && p.at_ms <= at
    {
        t.next += 1;
        move_to(t, at, p, rollups, queue);
    }
    let (quality, latency) = match t.state {
        // Not probed while in maintenance.
        HealthState::Maintenance => return,
        HealthState::Down => (Quality::Failed, TIMEOUT_LATENCY),
        _ => {
            let mut us = t.base_us * rng.random_range(0.7..1.3);
            if rng.random_bool(0.01) {
                us *= 5.0;
            }
            let failed = t.state == HealthState::Up && rng.random_bool(failure_p);
            let quality = if failed {
                Quality::Failed
            } else {
                Quality::Good
            };
            (quality, Duration::from_secs_f64(us / 1e6))
        }
    };
    queue.days(rollups.runs(&t.id, [(at, quality, latency)]));
    // A first verdict (at the start, or back from maintenance): this run settles it.
    if t.state == HealthState::Probing {
        let settled = Planned {
            at_ms: at,
            to: HealthState::Up,
            cause: "results",
            reason: None,
            detail: None,
            action: None,
        };
        move_to(t, at, settled, rollups, queue);
    }
}

/// Records target `t`'s move at `at`: the counter's time in the state left, the transition
/// row, and the operator's action behind it.
fn move_to(t: &mut Simulated, at: i64, p: Planned, rollups: &mut Rollups, queue: &mut Queue) {
    queue.days(rollups.transition(&t.id, at, p.to));
    queue.transitions.push(TransitionRow {
        target: t.id.to_string(),
        at_ms: at,
        from: t.state.as_str().to_owned(),
        to: p.to.as_str().to_owned(),
        cause: p.cause.to_owned(),
        reason: p.reason.map(str::to_owned),
        detail: p.detail.map(str::to_owned),
    });
    if let Some(action) = p.action {
        queue.actions.push(ActionRow {
            target: t.id.to_string(),
            at_ms: at,
            action: action.to_owned(),
            who: "alice".to_owned(),
            detail: (action == "maintenance_set").then(|| MAINTENANCE_DETAIL.to_owned()),
        });
    }
    t.state = p.to;
}

/// Writes the queue to every sink, in one transaction each, as the daemon's writer does.
async fn flush(
    sinks: &[Sink],
    queue: &mut Queue,
    written: &mut Written,
    now_ms: i64,
) -> anyhow::Result<()> {
    let batch = Batch {
        transitions: std::mem::take(&mut queue.transitions),
        days: queue.days.drain().map(|((d, t), h)| (d, t, h)).collect(),
        actions: std::mem::take(&mut queue.actions),
    };
    written.transitions += batch.transitions.len() as u64;
    written.actions += batch.actions.len() as u64;
    written.days += batch.days.len() as u64;
    written.blob_bytes += batch
        .days
        .iter()
        .map(|(_, _, h)| h.len() as u64)
        .sum::<u64>();
    written.writes += 1;
    for sink in sinks {
        sink.store
            .write(&batch, now_ms)
            .await
            .with_context(|| format!("writing to {}", sink.what))?;
    }
    Ok(())
}

// --- Phase 3: uptime queries ----------------------------------------------------------------

/// Phase 3: a store of `--query-days` of transitions, and uptimes read from it.
async fn query(a: &Args, dir: &Path) -> anyhow::Result<()> {
    let span = a.query_days * DAY_MS;
    let (from, until) = (T0 - span, T0);
    let path = dir.join("query.db");
    let store = open(Backend::Sqlite(path.clone()), from).await?;
    let names: Vec<String> = (0..a.query_targets).map(|i| format!("q-{i:04}")).collect();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let began = Instant::now();
    let mut seeded = 0;
    for d in 0..a.query_days {
        let day = from + d * DAY_MS;
        let mut batch = Batch::default();
        for name in &names {
            let mut times: Vec<i64> = (0..a.transitions_per_day)
                .map(|_| day + rng.random_range(1..DAY_MS))
                .collect();
            times.sort_unstable();
            times.dedup();
            if d == 0 {
                batch
                    .transitions
                    .push(row(name, from, HealthState::Probing, HealthState::Up));
            }
            for (k, at) in times.into_iter().enumerate() {
                let (from_state, to) = if k % 2 == 0 {
                    (HealthState::Up, HealthState::Down)
                } else {
                    (HealthState::Down, HealthState::Up)
                };
                batch.transitions.push(row(name, at, from_state, to));
            }
        }
        seeded += batch.transitions.len();
        // The session's `seen_ms` moves with each write: at the end it spans every day.
        store
            .write(&batch, day + DAY_MS)
            .await
            .context("seeding the query store")?;
    }
    let size = store.size().await.context("the query store's size")?;
    println!(
        "query: {seeded} transitions of {} targets over {} days seeded in {:.1} s ({:.1} MB)",
        a.query_targets,
        a.query_days,
        began.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (first, first_read, first_ratio) = uptimes(&store, &all, from, until).await?;
    let mut one = Vec::with_capacity(a.queries);
    let mut group = Vec::with_capacity(a.queries);
    let mut one_read = 0;
    for q in 0..a.queries {
        let (ms, read, _) = uptimes(&store, &all[q % all.len()..][..1], from, until).await?;
        one.push(ms);
        one_read = read;
    }
    for _ in 0..a.queries {
        group.push(uptimes(&store, &all, from, until).await?.0);
    }
    one.sort_by(f64::total_cmp);
    group.sort_by(f64::total_cmp);
    let median = |v: &[f64]| support::percentile(v, 0.5);
    let p99 = |v: &[f64]| support::percentile(v, 0.99);
    println!(
        "query: uptime over {} days, {} queries each: 1 target ({one_read} changes) median \
         {:.2} ms, p99 {:.2} ms; {} targets at once ({first_read} changes, mean uptime \
         {first_ratio:.4}) median {:.1} ms, p99 {:.1} ms (the first, on the store just written: \
         {first:.1} ms)",
        a.query_days,
        a.queries,
        median(&one),
        p99(&one),
        a.query_targets,
        median(&group),
        p99(&group)
    );
    let result = |metric: &str, value: f64, unit: &str| {
        support::result(QUERY_SCENARIO, metric, value, unit);
    };
    result("one_ms_median", median(&one), "ms");
    result("one_ms_p99", p99(&one), "ms");
    result("group_ms_median", median(&group), "ms");
    result("group_ms_p99", p99(&group), "ms");
    result("group_ms_first", first, "ms");
    result(
        "transitions_per_target",
        first_read as f64 / a.query_targets as f64,
        "transitions",
    );
    store.close().await;
    Ok(())
}

/// What `History::uptimes` does for `targets` over `[from, until)`: [`Store::timeline`], then
/// [`uptime::compute`] for each; how long it took (ms), the changes read and the mean uptime.
async fn uptimes(
    store: &Store,
    targets: &[&str],
    from: i64,
    until: i64,
) -> anyhow::Result<(f64, usize, f64)> {
    let at = Instant::now();
    let (changes, sessions) = store
        .timeline(targets, from, until)
        .await
        .context("reading the timeline")?;
    let mut read = 0;
    let mut ratio = 0.0;
    for t in targets {
        let changes = changes.get(*t).map_or(&[][..], Vec::as_slice);
        read += changes.len();
        ratio += uptime::compute(changes, &sessions, from, until)
            .ratio()
            .unwrap_or(f64::NAN);
    }
    Ok((
        at.elapsed().as_secs_f64() * 1e3,
        read,
        ratio / targets.len() as f64,
    ))
}

fn row(target: &str, at_ms: i64, from: HealthState, to: HealthState) -> TransitionRow {
    let down = to == HealthState::Down;
    TransitionRow {
        target: target.to_owned(),
        at_ms,
        from: from.as_str().to_owned(),
        to: to.as_str().to_owned(),
        cause: "results".to_owned(),
        reason: down.then(|| "timeout".to_owned()),
        detail: down.then(|| DOWN_DETAIL.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, clap::Error> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        Cli::try_parse_from(std::iter::once("history-load").chain(line.split_whitespace()))
            .map(|c| c.args)
    }

    #[test]
    fn the_defaults_and_the_quick_sizes_are_valid() {
        assert!(args("").expect("defaults parse").validate().is_ok());
        let quick = "--targets 2000 --warmup-s 3 --window-s 5 --windows 2 --week-targets 100 \
                     --week-targets-1s 10 --week-days 2 --queries 10";
        assert!(args(quick).expect("parses").validate().is_ok());
        assert!(args("--toggled 10000").expect("parses").validate().is_err());
        assert!(
            args("--transitions-per-day 3")
                .expect("parses")
                .validate()
                .is_err()
        );
        assert!(args("--phases bogus").is_err());
    }

    #[test]
    fn the_configs_differ_only_in_the_history() {
        let a = args("--targets 6000 --toggled 10").expect("parses");
        let steady: Vec<SocketAddr> = vec![
            "127.0.0.2:1000".parse().expect("an address"),
            "127.0.0.3:1000".parse().expect("an address"),
        ];
        let toggle = "127.0.0.1:9".parse().expect("an address");
        let (on, off) = (
            tempfile::tempdir().expect("temp dir"),
            tempfile::tempdir().expect("temp dir"),
        );
        write_config(on.path(), &a, true, &steady, toggle).expect("written");
        write_config(off.path(), &a, false, &steady, toggle).expect("written");
        let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).expect("read");
        assert!(!read(on.path(), "sections.yaml").contains("history"));
        assert!(read(off.path(), "sections.yaml").contains("history: false\n"));
        for file in ["targets-00.yaml", "targets-01.yaml"] {
            assert_eq!(read(on.path(), file), read(off.path(), file));
        }
        let first = read(on.path(), "targets-00.yaml");
        assert!(first.contains("  - id: tog-00000\n    tcp: {address: \"127.0.0.1:9\"}\n"));
        assert!(first.contains("  - id: t-00000\n    tcp: {address: \"127.0.0.2:1000\"}\n"));
        assert_eq!(first.matches("  - id: ").count(), TARGETS_PER_FILE);
        assert_eq!(
            read(on.path(), "targets-01.yaml")
                .matches("  - id: t-")
                .count(),
            6000 - TARGETS_PER_FILE
        );
    }

    #[test]
    fn a_simulated_target_has_its_spells_and_one_maintenance() {
        let mut rng = StdRng::seed_from_u64(7);
        let t = plan(3, 10, 10_000, 7, &mut rng).expect("planned");
        let count = |to: HealthState| t.plan.iter().filter(|p| p.to == to).count();
        assert_eq!(count(HealthState::Maintenance), 1);
        assert!(
            count(HealthState::Down) >= 10,
            "{}",
            count(HealthState::Down)
        );
        assert_eq!(count(HealthState::Down), count(HealthState::Up));
        assert!(t.plan.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        // Spells never overlap: DOWN and UP alternate once the maintenance is left out.
        let moves: Vec<HealthState> = t
            .plan
            .iter()
            .map(|p| p.to)
            .filter(|s| matches!(s, HealthState::Down | HealthState::Up))
            .collect();
        assert!(
            moves
                .chunks(2)
                .all(|p| p == [HealthState::Down, HealthState::Up])
        );
    }

    #[test]
    fn a_day_of_runs_writes_its_transitions_and_actions() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut t = plan(0, 1, 60_000, 1, &mut rng).expect("planned");
        let mut rollups = Rollups::default();
        let mut queue = Queue::default();
        for k in 0..DAY_MS / 60_000 {
            step(
                &mut t,
                T0 + k * 60_000,
                0.0,
                &mut rollups,
                &mut queue,
                &mut rng,
            );
        }
        queue.days(rollups.close(T0 + DAY_MS, |_| true));
        let to: Vec<&str> = queue.transitions.iter().map(|r| r.to.as_str()).collect();
        assert_eq!(to[0], "UP", "{to:?}");
        assert!(
            to.contains(&"MAINTENANCE") && to.contains(&"PROBING"),
            "{to:?}"
        );
        assert_eq!(queue.actions.len(), 2);
        assert_eq!(queue.days.len(), 1);
    }

    #[test]
    fn only_sqlite_worker_threads_are_counted() {
        assert_eq!(sqlite_ticks("self"), 0);
        assert_eq!(sqlite_ticks("no-such-process"), 0);
    }
}
