//! `cluster-sim`: the cluster's target ownership ([`probe::cluster::Ownership`]) at scale, in
//! memory: no etcd, no probes, only the ranking every member computes.
//!
//! ```text
//! probe-bench cluster-sim [--members 100] [--targets 1000000] [--replicas 1]
//!     [--transitions-per-s 100]
//! ```
//!
//! Builds the ranking of `--targets` ids over `--members` members, then has one member join
//! and one (another) leave, and reports, as `RESULT scenario=cluster-sim` lines:
//! - `moved_on_join_pct`, `moved_on_leave_pct`: the targets whose owner or replicas changed,
//!   against the goal of at most `1/N + 1%` (N the members after the join, before the leave);
//! - `max_mean_load`: the most targets a member probes over the mean (goal at most 1.1);
//! - `join_ms`, `leave_ms`: the time to update the ranking for the change and list what moved
//!   (goal at most 200 ms each); `build_ms`: ranking every target from scratch, for scale;
//! - `etcd_writes_per_s`: the writes the cluster's state publishing makes at
//!   `--transitions-per-s` verdict changes a second: each replica publishes its own verdict
//!   when it changes and, with more than one replica, the owner the combined one, so
//!   `rate x (replicas + 1)` (`rate` with one replica). A figure of the publishing rule, not a
//!   measurement: states are written on transitions only, never per probe.

use anyhow::Context as _;
use probe::TargetId;
use probe::cluster::{MemberId, Ownership};
use tokio::time::Instant as WallClock;

use crate::support::result;

/// The scenario's flags.
#[derive(clap::Args)]
pub struct Args {
    /// Members before the change.
    #[arg(long, default_value_t = 100)]
    members: usize,
    /// Targets ranked.
    #[arg(long, default_value_t = 1_000_000)]
    targets: usize,
    /// Members that probe each target.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Verdict changes a second across the fleet, for the etcd write rate.
    #[arg(long, default_value_t = 100.0)]
    transitions_per_s: f64,
}

const SCENARIO: &str = "cluster-sim";

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.members >= 2, "--members must be at least 2");
    let member = |i: usize| MemberId::new(&format!("member-{i}")).context("member name");
    let members = (0..args.members)
        .map(member)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let targets = (0..args.targets)
        .map(|i| TargetId::new(&format!("target-{i}")).context("target id"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    println!(
        "cluster-sim: {} targets over {} members, {} replica(s)",
        args.targets, args.members, args.replicas
    );
    // Wall time of in-memory work on this process alone: no I/O, nothing else to wait for.
    let started = WallClock::now();
    let mut ownership = Ownership::new(args.replicas);
    ownership.set_members(members.iter().cloned());
    ownership.set_targets(&targets);
    result(SCENARIO, "build_ms", ms(started), "ms");

    let loads = ownership.loads();
    let probed: Vec<usize> = loads.values().map(|(own, rep)| own + rep).collect();
    let mean = probed.iter().sum::<usize>() as f64 / probed.len() as f64;
    let max = probed.iter().copied().max().unwrap_or(0) as f64;
    result(SCENARIO, "max_mean_load", max / mean, "ratio");

    let mut grown = members.clone();
    grown.push(member(args.members)?);
    let started = WallClock::now();
    let moved = ownership.set_members(grown.iter().cloned());
    result(SCENARIO, "join_ms", ms(started), "ms");
    let joined_n = grown.len() as f64;
    let pct = |n: usize| 100.0 * n as f64 / args.targets as f64;
    result(SCENARIO, "moved_on_join_pct", pct(moved.len()), "percent");
    result(
        SCENARIO,
        "moved_on_join_limit_pct",
        100.0 * args.replicas as f64 / joined_n + 1.0,
        "percent",
    );

    let shrunk: Vec<MemberId> = grown.iter().skip(1).cloned().collect();
    let started = WallClock::now();
    let moved = ownership.set_members(shrunk.iter().cloned());
    result(SCENARIO, "leave_ms", ms(started), "ms");
    result(SCENARIO, "moved_on_leave_pct", pct(moved.len()), "percent");

    let writes = if args.replicas > 1 {
        args.transitions_per_s * (args.replicas as f64 + 1.0)
    } else {
        args.transitions_per_s
    };
    result(SCENARIO, "etcd_writes_per_s", writes, "writes/s");
    Ok(())
}

fn ms(since: WallClock) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
