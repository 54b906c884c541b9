//! The real daemon under real packet loss: 200 TCP targets in a network namespace whose nftables
//! drop 3% of the SYNs. Ordinary loss must not take readiness away beyond what the binomial
//! model of `fall` failures in a row predicts, must not look like flapping, and must not slow
//! down the detection of real outages (a stopped listener, a blackholed port).
//!
//! About 25 s: 15 s under loss (3000 probes, enough for the readiness count to mean something:
//! many targets rather than a long run, since the model counts probes), and two detections of at
//! most 3.5 s each.

mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use futures_util::StreamExt;
use probe::health::{Schedule, ScheduleSettings};
use probe_testkit::netns_or_skip;
use probe_testkit::{AcceptServer, LossModel, poisson_upper};
use serde_json::Value;
use support::Daemon;
use tokio::sync::mpsc;
use tokio::time::Instant;

const TARGETS: usize = 200;
const LOSS_PERCENT: u8 = 3;
const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_millis(500);
const RISE: u32 = 2;
const FALL: u32 = 3;
const MEASURE: Duration = Duration::from_secs(15);
/// /readyz is asked this often: 120 polls in the window, each a chance to see an outage.
const POLL: Duration = Duration::from_millis(125);
/// The tolerance over the detection bound.
const SLACK: Duration = Duration::from_millis(50);
/// A test fails on a count that chance alone gives less often than this.
const ALPHA: f64 = 0.001;

/// One state change as the SSE stream delivered it, stamped when it arrived.
struct Change {
    at: Instant,
    target: String,
    to: String,
}

/// Reads `/v1/events` into a channel, each transition stamped on arrival: the signal the test
/// waits on for verdicts.
async fn events(daemon: &Daemon) -> mpsc::UnboundedReceiver<Change> {
    let response = daemon.get("/v1/events").await;
    assert_eq!(response.status(), 200);
    let mut stream = Box::pin(response.bytes_stream());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            let at = Instant::now();
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                if !frame.contains("event: transition") {
                    continue;
                }
                let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                let event: Value = serde_json::from_str(data).unwrap();
                let change = Change {
                    at,
                    target: event["target"].as_str().unwrap().to_owned(),
                    to: event["to"].as_str().unwrap().to_owned(),
                };
                if tx.send(change).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Waits for `target` to go DOWN on the event stream; the arrival instant.
async fn next_down(events: &mut mpsc::UnboundedReceiver<Change>, target: &str) -> Instant {
    let deadline = Instant::now() + support::WAIT;
    loop {
        let change = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("{target} never went DOWN"))
            .expect("the event stream ended");
        if change.target == target && change.to == "DOWN" {
            return change.at;
        }
    }
}

/// The sum of every series of a counter or histogram count in the Prometheus text.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn probe_counts(daemon: &Daemon) -> (f64, f64) {
    let text = daemon.get("/metrics").await.text().await.unwrap();
    (
        metric_sum(&text, "probe_duration_seconds_count"),
        metric_sum(&text, "probe_failures_total"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syn_loss_keeps_readiness_and_real_outages_are_still_found_in_time() {
    let netns = netns_or_skip!();
    let mut servers: Vec<Option<AcceptServer>> = (0..TARGETS)
        .map(|_| Some(AcceptServer::start(netns.tcp_listener().unwrap()).unwrap()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "defaults:\n  interval: {}ms\n  timeout: {}ms\n  rise: {RISE}\n  fall: {FALL}\ntargets:\n",
        INTERVAL.as_millis(),
        TIMEOUT.as_millis()
    );
    let id = |i: usize| format!("t{i:03}");
    for (i, server) in servers.iter().flatten().enumerate() {
        let _ = write!(
            yaml,
            "  - id: {}\n    tcp:\n      address: {}\n",
            id(i),
            server.addr()
        );
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    netns.loss_syn(LOSS_PERCENT).unwrap();
    let daemon = Daemon::start(dir.path());

    // Every target UP: the stream is opened before the snapshot, so a change after the
    // snapshot is on it (and one before it, if seen again, changes nothing).
    let mut changes = events(&daemon).await;
    let mut states: HashMap<String, String> = daemon
        .targets()
        .await
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_owned(),
                t["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(states.len(), TARGETS);
    let deadline = Instant::now() + support::WAIT;
    while states.values().any(|s| s != "UP") {
        let change = tokio::time::timeout_at(deadline, changes.recv())
            .await
            .unwrap_or_else(|_| panic!("not every target came UP: {states:?}"))
            .unwrap();
        states.insert(change.target, change.to);
    }
    assert_eq!(daemon.get("/readyz").await.status(), 200);

    // 15 s of 3% SYN loss, /readyz every 125 ms.
    let (runs0, failures0) = probe_counts(&daemon).await;
    let began = Instant::now();
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut polls, mut not_ready) = (0u64, Vec::new());
    while began.elapsed() < MEASURE {
        ticks.tick().await;
        let response = daemon.get("/readyz").await;
        polls += 1;
        if response.status() != 200 {
            not_ready.push(format!(
                "{:.1} s: {}",
                began.elapsed().as_secs_f64(),
                response.text().await.unwrap_or_default().trim()
            ));
        }
    }
    let window = began.elapsed();
    let (runs1, failures1) = probe_counts(&daemon).await;
    let (runs, failures) = (runs1 - runs0, failures1 - failures0);
    let mut false_downs = 0u64;
    while let Ok(change) = changes.try_recv() {
        if change.to == "DOWN" {
            false_downs += 1;
        }
    }

    let schedule = Schedule::try_new(ScheduleSettings {
        interval: INTERVAL,
        timeout: TIMEOUT,
        jitter: 0.1,
        ..ScheduleSettings::default()
    })
    .unwrap();
    let model = LossModel {
        loss: f64::from(LOSS_PERCENT) / 100.0,
        fall: FALL,
        rise: RISE,
        schedule,
    };
    let expected_downs = model.expected_downs(runs as u64);
    let polls_per_outage = model.mean_outage().as_secs_f64() / POLL.as_secs_f64();
    let expected_not_ready = expected_downs * polls_per_outage;
    // A count of outages chance exceeds less often than ALPHA, each as long as one without a
    // failure during its recovery can be (the poll grid can catch one more poll).
    let outages = poisson_upper(expected_downs, ALPHA);
    let longest =
        (model.longest_plain_outage().as_secs_f64() / POLL.as_secs_f64()).ceil() as u64 + 1;
    let bound = (2.0 * expected_not_ready).max((outages * longest) as f64);
    println!(
        "{runs} probes in {:.1} s, {failures} failed ({:.2}%, {LOSS_PERCENT}% of SYNs dropped); \
         {false_downs} false DOWN (predicted {expected_downs:.3}); not ready in {} of {polls} \
         polls (predicted {expected_not_ready:.3}; bound {bound:.0}: max(2 x prediction, \
         {outages} outages x {longest} polls)){}",
        window.as_secs_f64(),
        100.0 * failures / runs.max(1.0),
        not_ready.len(),
        if not_ready.is_empty() {
            String::new()
        } else {
            format!(": {not_ready:?}")
        }
    );
    assert!(runs >= (TARGETS as f64) * 12.0, "too few probes: {runs}");
    assert!(
        failures > 0.0,
        "no probe failed: the SYN loss did not reach the probes"
    );
    // False DOWNs: no more than the binomial model's count chance exceeds less often than ALPHA.
    assert!(
        false_downs <= outages,
        "{false_downs} false DOWN, more than the {outages} the model allows (predicted \
         {expected_downs:.3})"
    );
    assert!(
        not_ready.len() as f64 <= bound,
        "not ready in {} polls, more than the bound {bound:.0}",
        not_ready.len()
    );

    // Nobody flaps: only changes of verdict count, and there were at most a few.
    let targets = daemon.targets().await;
    let flapping: Vec<&Value> = targets.iter().filter(|t| t["flapping"] != false).collect();
    assert!(
        flapping.is_empty(),
        "flapping under ordinary loss: {flapping:?}"
    );

    // Two victims that are UP with no failure pending, so that their next DOWN is the outage's.
    let mut victims = targets
        .iter()
        .filter(|t| t["state"] == "UP" && t["pending"].is_null())
        .map(|t| t["id"].as_str().unwrap()[1..].parse::<usize>().unwrap());
    let (stopped, blackholed) = (victims.next().unwrap(), victims.next().unwrap());
    let limit = model.detection_bound() + SLACK;

    // A listener stops (refused, as soon as it is closed): DOWN within fall x interval + timeout.
    servers[stopped].take().unwrap().stop().await;
    let stop = Instant::now();
    let took = next_down(&mut changes, &id(stopped)).await - stop;
    println!(
        "stopped listener: DOWN after {} ms (bound {} ms)",
        took.as_millis(),
        limit.as_millis()
    );
    assert!(
        took <= limit,
        "{} ms to DOWN after a stop",
        took.as_millis()
    );

    // A port blackholed (every SYN dropped, so each probe times out): the same bound.
    let port = servers[blackholed].as_ref().unwrap().addr().port();
    netns.blackhole_port(port).unwrap();
    let hole = Instant::now();
    let took = next_down(&mut changes, &id(blackholed)).await - hole;
    println!(
        "blackholed port: DOWN after {} ms (bound {} ms)",
        took.as_millis(),
        limit.as_millis()
    );
    assert!(
        took <= limit,
        "{} ms to DOWN after a blackhole",
        took.as_millis()
    );
}
