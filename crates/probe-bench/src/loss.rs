//! Ordinary packet loss: what real, random SYN loss costs the engine's verdicts, against the
//! binomial model, and whether it slows down the detection of a real outage.
//!
//! ```text
//! probe-bench loss [--duration-s 600] [--losses 2,5] [--targets 100]
//!     [--interval-ms 1000] [--timeout-ms 500] [--rise 2] [--fall 3] [--poll-ms 500]
//!     [--blackholed 20] [--threads 2]
//! ```
//!
//! Needs root (network namespaces) and `nft`: for each loss rate of `--losses` (percent), a
//! network namespace of its own ([`probe_testkit::Netns`]) holds `--targets` (100)
//! accept-and-close TCP listeners on its veth address, and its nftables drop that share of the
//! SYNs entering it (`numgen random mod 100 < N`: each SYN independently). One [`Engine`] per
//! namespace probes them with real connects from the root namespace: interval `--interval-ms`
//! (1 s), timeout `--timeout-ms` (500 ms), `rise` 2, `fall` 3, start jitter 0.1, the default
//! fast interval (interval / 2), DOWN backoff and flap policy. The loss rates run concurrently,
//! so the default 2% and 5% fit in `--duration-s` (600 s) together. No traffic leaves the
//! machine: the namespaces' addresses (10.213.0.0/16) exist only on their veth pairs.
//!
//! A lost SYN is retransmitted only after the kernel's initial RTO of 1 s, past the timeout, so
//! every lost SYN is a failed probe, independent of the others: the engine should behave
//! exactly as [`LossModel`] predicts, and every figure is printed next to its prediction.
//!
//! Once every target is UP (rise) the window of `--duration-s` opens. Over it:
//! - **false DOWN**: DOWN transitions; predicted `probes * (1 - p) * p^fall` (probes as the
//!   engine counted them: the sum of its targets' `probe_duration_seconds_count`).
//!   Goal: at most twice the prediction (`false_down_over_predicted` <= 2). At 2% the prediction
//!   is under one event in 10 minutes (0.5), so one false DOWN more than predicted already
//!   doubles it there; 5% (about 8 expected) is where the ratio is sharp.
//! - **false not-ready time**: readiness ([`Engine::readiness`]: every target UP, DEGRADED or in
//!   maintenance) polled every `--poll-ms` (500 ms); each poll that found the engine not ready
//!   counts one poll period. Predicted: the predicted false DOWNs times the mean false outage
//!   ([`LossModel::mean_outage`]: the DOWN backoff's first delay, then `rise - 1` passes at the
//!   fast interval; 1.95 s with the defaults). The mean outage measured from the events is
//!   printed beside it. Goal: at most twice the prediction.
//! - **false flapping**: targets flagged flapping (a `flapping` transition in the window, or
//!   flagged at its end). Predicted: [`LossModel::expected_flapping`] (a target needs 4 false
//!   DOWNs within 5 minutes; about 1e-8 targets here). Goal: 0.
//!
//! Then **blackhole detection**: `--blackholed` (20) targets of each engine that are UP with
//! no failure pending get their port dropped by nftables (`drop`, so every SYN vanishes and each
//! probe times out), one after another; time to DOWN = the engine's `Event::at` of the DOWN
//! minus the instant the `nft` call for that port started (so the figure includes the call's
//! few milliseconds). Theory: `fall x interval + timeout` (3.5 s; an upper bound, since after
//! the first failure the engine re-checks at the fast interval: its own worst case is
//! `interval + (fall - 1) * fast + timeout` plus start jitter, 2.7 s). Goal: p99 within +50 ms
//! of the theory (`blackhole_excess_p99` <= 50). Percentiles are nearest-rank (with 20 victims
//! p99 is the maximum).
//!
//! One full run (600 s, on 2 cores shared with other builds): at 2%, 60 563 probes (2.02%
//! failed), 0 false DOWN (0.47 predicted), never not ready (0.93 s predicted); at 5%, 61 321
//! probes (4.82% failed), 9 false DOWN (7.28 predicted), 15.5 s not ready (14.2 s predicted; the
//! 9 outages lasted 1.75 s on average, 1.95 s predicted); no flapping at either rate; blackholed
//! targets DOWN at p99 2.6 s and 2.5 s against the 3.5 s theory.
//!
//! RESULT metrics, per loss rate as `scenario=loss-<N>pct`: `syn_loss` (ratio, configured),
//! `targets`, `probes`, `failure_rate` (ratio, failed probes over probes, as the engine counted
//! them); `false_down`, `expected_false_down` (count), `expected_false_down_observed_p` (count,
//! the prediction from the observed failure rate), `false_down_over_predicted` (ratio);
//! `polls`, `not_ready_polls` (count), `false_not_ready_s`, `expected_not_ready_s` (s),
//! `not_ready_over_predicted` (ratio), `mean_outage_s`, `expected_mean_outage_s` (s);
//! `false_flapping`, `expected_flapping` (count); `blackhole_victims`, `blackhole_detected`
//! (count), `blackhole_p50`, `blackhole_p99`, `blackhole_max`, `theory` (ms),
//! `blackhole_excess_p99` (ms, p99 - theory); `events_lagged` (count); `goal_met` (bool). The
//! exit status is 0 whether or not a goal is met (only a harness error exits 1).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail, ensure};
use probe::engine::Event;
use probe::health::{Cause, FlapPolicy, HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::tier::ProbeSpec;
use probe::tier::tcp::TcpSpec;
use probe::topology::TargetSpec;
use probe::{Address, TargetId};
use probe::{Engine, EngineConfig};
use probe_testkit::{AcceptServer, LossModel, Netns, NetnsError};
use tokio_util::sync::CancellationToken;

use crate::support::{self, Collector, percentile, result};

/// The issue's tolerance over the detection theory.
const DETECTION_SLACK_MS: f64 = 50.0;
/// The issue's bound on false DOWNs and false not-ready time over their predictions.
const MAX_RATIO: f64 = 2.0;

/// Flags of `probe-bench loss`.
#[derive(clap::Args)]
pub struct Args {
    /// The window over which false DOWNs, not-ready time and flapping count, in seconds.
    #[arg(long = "duration-s", value_name = "S", default_value = "600", value_parser = support::secs)]
    duration: Duration,
    /// SYN loss rates in percent (1 to 99), each in a network namespace and engine of its own,
    /// all at once.
    #[arg(long, value_delimiter = ',', default_value = "2,5")]
    losses: Vec<u8>,
    /// TCP targets per loss rate.
    #[arg(long, default_value_t = 100)]
    targets: usize,
    /// Each target's interval, in ms.
    #[arg(long = "interval-ms", value_name = "MS", default_value = "1000", value_parser = support::millis)]
    interval: Duration,
    /// The probe timeout, in ms: under the kernel's 1 s initial RTO, so a lost SYN fails.
    #[arg(long = "timeout-ms", value_name = "MS", default_value = "500", value_parser = support::millis)]
    timeout: Duration,
    /// Consecutive passes to UP.
    #[arg(long, default_value_t = 2)]
    rise: u32,
    /// Consecutive failures to DOWN.
    #[arg(long, default_value_t = 3)]
    fall: u32,
    /// How often readiness is polled, in ms.
    #[arg(long = "poll-ms", value_name = "MS", default_value = "500", value_parser = support::millis)]
    poll: Duration,
    /// Targets per loss rate whose port is blackholed after the window.
    #[arg(long, default_value_t = 20)]
    blackholed: usize,
    /// Worker threads of the tokio runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(!self.losses.is_empty(), "--losses needs at least one rate");
        ensure!(
            self.losses.iter().all(|p| (1..100).contains(p)),
            "--losses are percentages between 1 and 99"
        );
        let distinct: HashSet<_> = self.losses.iter().collect();
        ensure!(
            distinct.len() == self.losses.len(),
            "--losses repeats a rate"
        );
        ensure!(self.targets >= 1, "--targets must be at least 1");
        ensure!(
            self.blackholed <= self.targets,
            "--blackholed must not exceed --targets"
        );
        ensure!(!self.duration.is_zero(), "--duration-s must be above 0");
        ensure!(!self.poll.is_zero(), "--poll-ms must be above 0");
        ensure!(self.threads >= 1, "--threads must be at least 1");
        Ok(())
    }

    fn schedule(&self) -> anyhow::Result<Schedule> {
        Schedule::try_new(ScheduleSettings {
            interval: self.interval,
            timeout: self.timeout,
            jitter: 0.1,
            ..ScheduleSettings::default()
        })
        .context("the schedule")
    }

    fn thresholds(&self) -> anyhow::Result<Thresholds> {
        Ok(Thresholds::new(
            NonZeroU32::new(self.rise).context("--rise must be >= 1")?,
            NonZeroU32::new(self.fall).context("--fall must be >= 1")?,
        ))
    }
}

/// Runs `probe-bench loss`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let started = tokio::time::Instant::now();
    let outcome = runtime.block_on(measure(&args));
    drop(runtime);
    println!("total wall time {:.1} s", started.elapsed().as_secs_f64());
    outcome
}

/// One loss rate: its namespace, listeners, engine and events.
struct Rate {
    percent: u8,
    netns: Netns,
    servers: Vec<AcceptServer>,
    addrs: HashMap<TargetId, SocketAddr>,
    engine: Engine,
    cancel: CancellationToken,
    events: Collector,
}

impl Rate {
    fn scenario(&self) -> String {
        format!("loss-{}pct", self.percent)
    }
}

async fn measure(args: &Args) -> anyhow::Result<()> {
    let schedule = args.schedule()?;
    let thresholds = args.thresholds()?;
    let mut rates = Vec::new();
    for &percent in &args.losses {
        let netns = match Netns::new() {
            Err(NetnsError::Skip(why)) => bail!("this harness cannot run here: {why}"),
            other => other.context("creating a network namespace")?,
        };
        netns.loss_syn(percent)?;
        let servers = (0..args.targets)
            .map(|_| Ok(AcceptServer::start(netns.tcp_listener()?)?))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut addrs = HashMap::new();
        let mut specs = Vec::new();
        for (t, server) in servers.iter().enumerate() {
            let id = TargetId::new(&format!("{}{t:03}", prefix(percent)))?;
            let mut spec = TargetSpec::new(
                id.clone(),
                ProbeSpec::Tcp(TcpSpec::connect(Address::Socket(server.addr()))),
            );
            spec.schedule = schedule;
            spec.thresholds = thresholds;
            spec.flap = Some(FlapPolicy::default());
            addrs.insert(id, server.addr());
            specs.push(spec);
        }
        let cancel = CancellationToken::new();
        let engine = Engine::start(EngineConfig::default(), cancel.clone());
        let events = Collector::start(&engine);
        engine
            .apply(specs)
            .map_err(|e| anyhow::anyhow!("applying the targets: {e}"))?;
        println!(
            "{}% SYN loss: {} targets in namespace {} at {} (from {})",
            percent,
            args.targets,
            netns.name(),
            netns.addr(),
            netns.host_addr()
        );
        rates.push(Rate {
            percent,
            netns,
            servers,
            addrs,
            engine,
            cancel,
            events,
        });
    }

    // Every target UP: readiness is re-read on each batch of state changes, the only moments
    // it can change.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    for rate in &rates {
        let mut changes = rate.events.changes();
        while !rate.engine.readiness().ready {
            ensure!(
                Collector::next_change(&mut changes, give_up).await,
                "{}: not every target came UP within 30 s: {}",
                rate.scenario(),
                rate.engine.readiness().reason.unwrap_or_default()
            );
        }
    }

    // The window: readiness polled on a fixed grid.
    let t0 = SystemTime::now();
    let before: Vec<(u64, u64)> = rates
        .iter()
        .map(|r| support::engine_counts(&r.engine))
        .collect();
    let began = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(args.poll);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polls = 0u64;
    let mut not_ready = vec![0u64; rates.len()];
    let mut next_report = Duration::from_secs(60);
    while began.elapsed() < args.duration {
        ticks.tick().await;
        polls += 1;
        for (i, rate) in rates.iter().enumerate() {
            if !rate.engine.readiness().ready {
                not_ready[i] += 1;
            }
        }
        if began.elapsed() >= next_report {
            next_report += Duration::from_secs(60);
            let downs: Vec<String> = rates
                .iter()
                .zip(&not_ready)
                .map(|(r, n)| {
                    let downs = r.events.count(|e| e.to == HealthState::Down && e.at >= t0);
                    format!("{}: {downs} DOWN, {n} polls not ready", r.scenario())
                })
                .collect();
            println!(
                "  {:.0} s: {}",
                began.elapsed().as_secs_f64(),
                downs.join("; ")
            );
        }
    }
    let t1 = SystemTime::now();
    let window = began.elapsed();
    let after: Vec<(u64, u64)> = rates
        .iter()
        .map(|r| support::engine_counts(&r.engine))
        .collect();

    // Blackholes: every victim of every rate, then every DOWN awaited together.
    let mut holes: Vec<Vec<(TargetId, SystemTime)>> = Vec::new();
    for rate in &rates {
        let victims: Vec<TargetId> = rate
            .engine
            .statuses()
            .into_iter()
            .filter(|s| s.state == HealthState::Up && s.pending.is_none())
            .map(|s| s.id)
            .take(args.blackholed)
            .collect();
        let mut made = Vec::new();
        for id in victims {
            let port = rate.addrs[&id].port();
            let at = SystemTime::now();
            rate.netns.blackhole_port(port)?;
            made.push((id, at));
        }
        holes.push(made);
    }
    let model = |percent: u8| LossModel {
        loss: f64::from(percent) / 100.0,
        fall: args.fall,
        rise: args.rise,
        schedule,
    };
    let theory = model(0).detection_bound();
    let give_up = tokio::time::Instant::now() + theory + Duration::from_secs(5);
    for (rate, made) in rates.iter().zip(&holes) {
        let mut changes = rate.events.changes();
        loop {
            let downs = rate.events.first_down_after(t1);
            if made.iter().all(|(id, _)| downs.contains_key(id)) {
                break;
            }
            if !Collector::next_change(&mut changes, give_up).await {
                break;
            }
        }
    }

    for rate in &mut rates {
        rate.cancel.cancel();
        rate.engine.stopped().await;
        rate.events.stop().await?;
    }

    let mut all_met = true;
    for (i, rate) in rates.iter().enumerate() {
        let s = rate.scenario();
        let s = s.as_str();
        let m = model(rate.percent);
        let probes = after[i].0 - before[i].0;
        let failures = after[i].1 - before[i].1;
        let observed_p = failures as f64 / probes.max(1) as f64;
        let expected_downs = m.expected_downs(probes);
        let expected_downs_observed = LossModel {
            loss: observed_p,
            ..m
        }
        .expected_downs(probes);
        let in_window = |e: &Event| e.at >= t0 && e.at < t1;
        let downs = rate
            .events
            .count(|e| in_window(e) && e.to == HealthState::Down);
        let outages = rate.events.outages(t0, t1);
        let mean_outage = if outages.is_empty() {
            f64::NAN
        } else {
            outages.iter().sum::<f64>() / outages.len() as f64
        };
        let not_ready_s = not_ready[i] as f64 * args.poll.as_secs_f64();
        let expected_not_ready_s = expected_downs * m.mean_outage().as_secs_f64();
        let flapping: HashSet<TargetId> = rate
            .events
            .matching(|e| in_window(e) && e.cause == Cause::Flapping)
            .into_iter()
            .map(|e| e.target)
            .chain(
                rate.engine
                    .statuses()
                    .into_iter()
                    .filter(|s| s.flapping)
                    .map(|s| s.id),
            )
            .collect();
        let per_target_rate = probes as f64 / (args.targets as f64 * window.as_secs_f64());
        let expected_flapping = m.expected_flapping(
            args.targets,
            per_target_rate,
            window,
            &FlapPolicy::default(),
        );

        let first_downs = rate.events.first_down_after(t1);
        let mut latencies: Vec<f64> = holes[i]
            .iter()
            .filter_map(|(id, at)| {
                let down = first_downs.get(id)?;
                Some(down.duration_since(*at).unwrap_or_default().as_secs_f64() * 1e3)
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        let theory_ms = theory.as_secs_f64() * 1e3;
        let p99 = percentile(&latencies, 0.99);
        let lagged = rate.events.lagged();

        let down_ratio = downs as f64 / expected_downs;
        let not_ready_ratio = not_ready_s / expected_not_ready_s;
        println!(
            "== {s}: {probes} probes over {:.1} s ({:.3} per target-second), {failures} failed \
             ({:.2}%)",
            window.as_secs_f64(),
            per_target_rate,
            observed_p * 100.0
        );
        println!(
            "  false DOWN {downs}, predicted {expected_downs:.2} ({expected_downs_observed:.2} \
             from the observed failure rate): ratio {down_ratio:.2} (goal <= {MAX_RATIO})"
        );
        println!(
            "  not ready {} of {polls} polls = {not_ready_s:.1} s, predicted \
             {expected_not_ready_s:.2} s (mean outage {:.2} s predicted, {mean_outage:.2} s \
             measured over {} outages): ratio {not_ready_ratio:.2} (goal <= {MAX_RATIO})",
            not_ready[i],
            m.mean_outage().as_secs_f64(),
            outages.len()
        );
        println!(
            "  flapping {} targets, predicted {expected_flapping:.2e} (goal 0)",
            flapping.len()
        );
        println!(
            "  blackholed {}: {} DOWN, p50 {:.0} ms, p99 {p99:.0} ms, max {:.0} ms; theory \
             {theory_ms:.0} ms (goal p99 <= theory + {DETECTION_SLACK_MS} ms)",
            holes[i].len(),
            latencies.len(),
            percentile(&latencies, 0.5),
            latencies.last().copied().unwrap_or(f64::NAN)
        );
        if lagged > 0 {
            println!("  WARNING: the event collector missed {lagged} events");
        }

        result(s, "syn_loss", f64::from(rate.percent) / 100.0, "ratio");
        result(s, "targets", args.targets as f64, "count");
        result(s, "probes", probes as f64, "count");
        result(s, "failure_rate", observed_p, "ratio");
        result(s, "false_down", downs as f64, "count");
        result(s, "expected_false_down", expected_downs, "count");
        result(
            s,
            "expected_false_down_observed_p",
            expected_downs_observed,
            "count",
        );
        result(s, "false_down_over_predicted", down_ratio, "ratio");
        result(s, "polls", polls as f64, "count");
        result(s, "not_ready_polls", not_ready[i] as f64, "count");
        result(s, "false_not_ready_s", not_ready_s, "s");
        result(s, "expected_not_ready_s", expected_not_ready_s, "s");
        result(s, "not_ready_over_predicted", not_ready_ratio, "ratio");
        result(s, "mean_outage_s", mean_outage, "s");
        result(
            s,
            "expected_mean_outage_s",
            m.mean_outage().as_secs_f64(),
            "s",
        );
        result(s, "false_flapping", flapping.len() as f64, "count");
        result(s, "expected_flapping", expected_flapping, "count");
        result(s, "blackhole_victims", holes[i].len() as f64, "count");
        result(s, "blackhole_detected", latencies.len() as f64, "count");
        result(s, "blackhole_p50", percentile(&latencies, 0.5), "ms");
        result(s, "blackhole_p99", p99, "ms");
        result(
            s,
            "blackhole_max",
            latencies.last().copied().unwrap_or(f64::NAN),
            "ms",
        );
        result(s, "theory", theory_ms, "ms");
        result(s, "blackhole_excess_p99", p99 - theory_ms, "ms");
        result(s, "events_lagged", lagged as f64, "count");
        let goal = flapping.is_empty()
            && down_ratio <= MAX_RATIO
            && not_ready_ratio <= MAX_RATIO
            && latencies.len() == holes[i].len()
            && p99 - theory_ms <= DETECTION_SLACK_MS
            && lagged == 0;
        all_met &= goal;
        result(s, "goal_met", f64::from(u8::from(goal)), "bool");
    }
    println!("goals {}", if all_met { "met" } else { "NOT all met" });
    for rate in rates {
        for server in rate.servers {
            server.stop().await;
        }
    }
    Ok(())
}

/// The target-id prefix of a loss rate's targets, which is how the recorder tells the engines'
/// probes apart.
fn prefix(percent: u8) -> String {
    format!("l{percent}-")
}

// ---------------------------------------------------------------------------------------------
// Events
