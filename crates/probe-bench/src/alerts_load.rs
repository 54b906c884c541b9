//! `alerts-load`: the real daemon's alerting under a storm: 10k targets going DOWN at one
//! instant, behind one root cause and each on its own, to a real Alertmanager and a webhook,
//! through the durable outbox; side by side with Prometheus alerting per target on the
//! daemon's own series, what users do today; and what the daemon costs at rest once a resend
//! is due with nothing firing.
//!
//! ```text
//! cargo build --release -p probe-engine -p probe-bench
//! ./target/release/probe-bench alerts-load [--targets 10000] [--interval-ms 1000]
//!     [--listeners 16] [--phases root,independent,idle] [--settle-s 5] [--storm-s 15]
//!     [--resend-s 60] [--up-timeout-s 90] [--daemon PATH] [--prometheus PATH]
//! ```
//!
//! Every target is a TCP connect to one of `--listeners` accept-and-drop listeners of this
//! process on 127.0.0.2 and up (tokio tasks, so that the harness can close them all at one
//! instant, `t0`: connects are refused from then on). Each phase starts from scratch: a
//! throw-away Alertmanager (Debian's `prometheus-alertmanager`, as the tests' fixture starts
//! it), a webhook receiver in this process (axum on 127.0.0.1, answering 200 and recording each
//! POST's `status`, `labels.target`, `impacted` and arrival time), and the daemon with
//! `--state-dir` (a temporary directory: the outbox's fsync'd journal is on the path of every
//! notification), `--log-format json` (its `listening` line gives the API address; its warnings
//! are echoed), an `alerts` section sending to both (`resend` `--resend-s`, `defaults: {on:
//! [DOWN], for: 0s}`), `metrics: {per_target_histograms: false}`, and every target every
//! `--interval-ms` with timeout half of it (at most 1 s), `rise` 1, `fall` 1, no flap detection
//! (DOWN targets back off as by default, to 4 intervals). The harness waits until `/readyz`
//! answers 200 (every target UP) and Alertmanager holds nothing, lets `--settle-s` pass, and
//! reads the daemon's CPU (`/proc/PID/stat`) over a quiet window of `--storm-s`
//! (`cpu_s_quiet`). It then closes every listener at `t0` and reads the daemon's CPU over the
//! `--storm-s` that follow (`cpu_s`). The daemon's `/metrics` is read before the quiet window,
//! between the windows and after the CPU reading that ends the storm window, so that its
//! rendering is in neither; its `probe_fleet_duration_seconds_count` gives the probe rates of
//! the windows (`probes_per_s_quiet`, `probes_per_s`: DOWN targets back off, so a storm may
//! cost less than the quiet it follows).
//!
//! 1. **One root cause** (`root`, scenario `alerts_root`): target `root` and `--targets`
//!    dependents, each with `depends_on: [{target: root, critical: true}]`: one incident, whose
//!    page is the root's. Figures, over the storm window: `webhook_notifications` (POSTs the
//!    webhook got; goal 1), `webhook_firing`, `webhook_resolved`, `dependents_fired` (distinct
//!    dependents with a firing notification: what paged besides the root), `impacted` (the
//!    longest `impacted` array of the root's notifications: every dependent expected),
//!    `root_down_to_webhook_ms` (the root's first firing notification's arrival minus the
//!    root's `since`); `alertmanager_alerts` (the most alerts Alertmanager held at once: the
//!    length of its `GET /api/v2/alerts`, which lists no resolved alert, read every 200 ms and
//!    once at the end; goal 1),
//!    `alertmanager_alerts_received` (its `alertmanager_alerts_received_total`, firing and
//!    resolved: every alert of every post), `alertmanager_posts` (the daemon's
//!    `probe_alert_notifications_total{receiver="alertmanager",result="delivered"}`);
//!    `t0_to_root_down_ms` (the root's `since`, from `GET /v1/targets` after the window, minus
//!    `t0`), `dependents_down_before_root` (dependents whose own DOWN, by their `since`, came
//!    before the root's: each one a page the daemon had to hold back), and
//!    `root_down_to_alertmanager_ms` (when Alertmanager first listed `ProbeDown` for the root,
//!    polled every 15 ms with a `filter`, the middle of that request, minus the root's `since`;
//!    goal at most 1 s) and `t0_to_alertmanager_ms`; `outbox_size_end`
//!    (`probe_alert_outbox_size` after the window: what the receivers had not taken yet).
//!    **The peer**, in the same run: Prometheus (`--prometheus`, Debian's `prometheus`)
//!    scraping the daemon's `/metrics` every second (timeout 1 s), evaluating every second the
//!    rule `PeerProbeDown: probe_success == 0` with `for: 0s`, and alerting to a second
//!    Alertmanager of its own (notification queue 20000, so that no alert is dropped from a
//!    full queue); the harness waits until it holds every target's `probe_success` as 1 before
//!    the quiet window. Figures: `peer_alertmanager_alerts` and `peer_alertmanager_targets_end`
//!    (its Alertmanager's listing at the end of the window, once: alerts, one per target
//!    expected, and the distinct targets they name; a target with more than one has its label
//!    sets printed), `peer_t0_to_alertmanager_ms` (until its Alertmanager listed the root's
//!    alert, polled as above), `peer_t0_to_alertmanager_all_ms` (until it had been posted as
//!    many firing alerts as there are targets: its `alertmanager_alerts_received_total
//!    {status="firing"}`, read every 200 ms; Alertmanager stores an alert before it answers
//!    the post, and Prometheus sends a firing alert again only after a minute), and
//!    `peer_prometheus_cpu_s` and `peer_prometheus_cpu_s_quiet` (Prometheus's CPU over the two
//!    windows). Without Prometheus the peer is skipped, and says so. Prometheus's scrapes cost
//!    the daemon CPU in both windows alike.
//! 2. **Independent targets** (`independent`, scenario `alerts_independent`): `--targets`
//!    targets without dependencies, so each pages for itself. Alertmanager's count of firing
//!    alerts posted (as above: its `/metrics`, far cheaper than listing 10k alerts; its
//!    `alertmanager_alerts` gauge counts each state at its own instant, so that in a burst an
//!    alert moving between states counts twice) is read every 200 ms and the webhook's records
//!    every 50 ms until both have every target's alert, for `--storm-s` or two minutes
//!    (`DELIVERY_PATIENCE`), whichever is longer. Figures: `t0_to_alertmanager_all_ms`,
//!    `alertmanager_alerts` (its listing's length once all are in), `alertmanager_posts` (the
//!    batched posts, read then), `t0_to_webhook_first_ms`, `t0_to_webhook_all_ms` (until the
//!    webhook had a firing notification of every target), `t0_to_last_down_ms` (the latest
//!    `since` of the DOWN targets, from `GET /v1/targets`, minus `t0`),
//!    `last_down_to_webhook_all_ms` (the last of those notifications' arrival minus that: how
//!    far delivery lags the DOWNs),
//!    `webhook_notifications`, `webhook_per_s` (notifications over the time from the first
//!    arrival to the last: one POST each, in order, each after the fsync'd journal; while
//!    delivery keeps up with the DOWNs, which the probes spread over an interval, it is their
//!    rate, not the outbox's limit), `cpu_s` and `cpu_s_quiet`.
//! 3. **At rest past a resend** (`idle`, scenario `alerts_idle`): `--targets` independent
//!    targets, all UP, nothing firing, Alertmanager's `resend` at 1 s; after `--settle-s` (at
//!    least two resends), the daemon's CPU over a quiet window of `--storm-s` (`cpu_s_quiet`,
//!    to set against the independent phase's, whose window ends before its first resend is
//!    due), its probe rate, and the posts to Alertmanager and the webhook meanwhile (none
//!    expected: there is nothing to send).
//!
//! The daemon, Alertmanager, Prometheus, the listeners and the webhook share the machine; the
//! CPU figures read the daemon's (and Prometheus's) own. The latencies are as precise as their
//! polls (15 ms, 200 ms, 50 ms).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail, ensure};
use probe_testkit::Alertmanager;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{self, Daemon, Starting, TICKS_PER_SEC, lock, series_sum};

/// The scenario names of the `RESULT` lines.
const ROOT_SCENARIO: &str = "alerts_root";
const INDEPENDENT_SCENARIO: &str = "alerts_independent";
const IDLE_SCENARIO: &str = "alerts_idle";
/// Alertmanager's `resend` in the idle phase: due well before its quiet window.
const IDLE_RESEND: Duration = Duration::from_secs(1);
/// The root cause's id.
const ROOT: &str = "root";
/// Targets per config file: one YAML document stays well under the parser's budget of nodes.
const TARGETS_PER_FILE: usize = 5_000;
/// How often Alertmanager is asked for the root's alert: the latencies are this precise.
const ROOT_POLL: Duration = Duration::from_millis(15);
/// How often Alertmanager's count of alerts is read.
const COUNT_POLL: Duration = Duration::from_millis(200);
/// How often the webhook's records are looked at.
const HOOK_POLL: Duration = Duration::from_millis(50);
/// How often settling is polled.
const SETTLE_POLL: Duration = Duration::from_millis(250);
/// How long the independent phase waits for every alert at each receiver.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(120);
/// What the harness measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// A root and its dependents going DOWN at once, with the Prometheus peer.
    Root,
    /// Independent targets going DOWN at once.
    Independent,
    /// Nothing firing once `resend` has passed: what the daemon costs at rest.
    Idle,
}

/// Flags of `probe-bench alerts-load`.
#[derive(clap::Args)]
#[command(mut_arg("targets", |a| {
    a.help("Targets going DOWN at once: the root's dependents, or the independent ones")
}))]
pub struct Args {
    #[command(flatten)]
    fleet: support::FleetArgs,
    /// The phases to run.
    #[arg(long, value_delimiter = ',', default_value = "root,independent,idle")]
    phases: Vec<Phase>,
    /// How long everything runs once settled before the quiet window, in seconds.
    #[arg(long = "settle-s", value_name = "S", default_value = "5", value_parser = support::secs)]
    settle: Duration,
    /// The quiet and the storm windows, in seconds.
    #[arg(long = "storm-s", value_name = "S", default_value = "15", value_parser = support::secs)]
    storm: Duration,
    /// The daemon's `alertmanager.resend`, in whole seconds.
    #[arg(long = "resend-s", value_name = "S", default_value_t = 60)]
    resend: u64,
    /// How long the daemon (and Prometheus) may take to settle, in seconds.
    #[arg(long = "up-timeout-s", value_name = "S", default_value = "90", value_parser = support::secs)]
    up_timeout: Duration,
    /// The daemon binary (default: `probe-engine` next to this binary).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// The peer's Prometheus binary (a name is looked up in PATH; missing: no peer).
    #[arg(long, value_name = "PATH", default_value = "prometheus")]
    prometheus: String,
}

impl Args {
    /// The bounds clap's types do not say.
    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.fleet.targets >= 1, "--targets must be at least 1");
        ensure!(
            (1..=250).contains(&self.fleet.listeners),
            "--listeners must be within 1..=250"
        );
        ensure!(
            self.fleet.interval >= Duration::from_millis(100),
            "--interval-ms must be at least 100"
        );
        ensure!(!self.storm.is_zero(), "--storm-s must be more than 0");
        ensure!(self.resend >= 1, "--resend-s must be at least 1");
        ensure!(!self.phases.is_empty(), "--phases must name a phase");
        Ok(())
    }
}

/// Runs `probe-bench alerts-load`.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.validate()?;
    let daemon = support::daemon_binary(args.daemon.as_deref())?;
    support::block_on(measure(args, daemon))
}

/// What both phases use.
struct Harness {
    args: Args,
    binary: PathBuf,
    prometheus: Option<PathBuf>,
    /// Requests with a deadline: every read of the API, Alertmanager and Prometheus.
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

async fn measure(args: Args, binary: PathBuf) -> anyhow::Result<()> {
    // The workspace builds reqwest with `rustls-no-provider`, so building a client needs a
    // process-wide crypto provider, even for plain HTTP. An error only says that one is
    // installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .context("building an HTTP client")?;
    let prometheus = support::which(&args.prometheus);
    let harness = Harness {
        binary,
        prometheus,
        http,
        dir: tempfile::tempdir().context("temp dir")?,
        args,
    };
    println!(
        "alerts-load: daemon {}, {} targets every {} ms over {} listeners on 127.0.0.2-{}, \
         windows of {:.0} s; peer: {}",
        harness.binary.display(),
        harness.args.fleet.targets,
        harness.args.fleet.interval.as_millis(),
        harness.args.fleet.listeners,
        harness.args.fleet.listeners + 1,
        harness.args.storm.as_secs_f64(),
        harness.prometheus.as_ref().map_or_else(
            || format!(
                "none ({} not found: the peer figures are skipped)",
                harness.args.prometheus
            ),
            |p| p.display().to_string()
        )
    );
    if harness.args.phases.contains(&Phase::Root) {
        harness.root().await?;
    }
    if harness.args.phases.contains(&Phase::Independent) {
        harness.independent().await?;
    }
    if harness.args.phases.contains(&Phase::Idle) {
        harness.idle().await?;
    }
    Ok(())
}

/// Everything one phase runs: the listeners, the receivers and the daemon (killed when dropped,
/// in this order: the daemon first).
struct Stage {
    daemon: Daemon,
    hook: Hook,
    am: Alertmanager,
    listeners: Listeners,
}

impl Harness {
    /// Starts a phase's listeners, Alertmanager, webhook and daemon (the root and its dependents
    /// with `root`), and waits until every target is UP and Alertmanager holds nothing.
    async fn stage(&self, name: &str, root: bool, resend: Duration) -> anyhow::Result<Stage> {
        let a = &self.args;
        let listeners = Listeners::open(a.fleet.listeners, name).await?;
        let am = start_alertmanager().await?;
        let hook = Hook::start().await?;
        let dir = self.dir.path().join(name);
        let config = dir.join("config");
        let state = dir.join("state");
        std::fs::create_dir_all(&config)
            .with_context(|| format!("creating {}", config.display()))?;
        std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
        write_config(
            &config,
            a,
            root,
            resend,
            &listeners.addrs,
            &am.url(),
            hook.addr,
        )?;
        let started = Instant::now();
        // JSON logs at `info` for the daemon, its warnings echoed (a receiver that failed, say);
        // the library's per-transition lines left out.
        let mut daemon = Starting::spawn(
            &self.binary,
            &config,
            &["--state-dir".as_ref(), state.as_os_str()],
            "warn,probe_engine=info",
            "daemon",
            true,
        )?
        .listening(a.up_timeout)
        .await?;
        daemon
            .wait_ready(&self.http, started + a.up_timeout)
            .await?;
        println!(
            "{name}: {} targets UP {:.1} s after the start",
            a.fleet.targets + usize::from(root),
            started.elapsed().as_secs_f64()
        );
        let held = am_held(&self.http, &am.url()).await?;
        ensure!(
            held == 0,
            "Alertmanager holds {held} alerts before the storm"
        );
        Ok(Stage {
            daemon,
            hook,
            am,
            listeners,
        })
    }

    /// Phase 1: a root and its dependents, with the Prometheus peer.
    async fn root(&self) -> anyhow::Result<()> {
        let a = &self.args;
        println!(
            "root: `{ROOT}` and {} dependents (critical) going DOWN at once; goal: 1 notification \
             to each receiver, Alertmanager within 1 s of the root's DOWN",
            a.fleet.targets
        );
        let mut stage = self
            .stage("root", true, Duration::from_secs(a.resend))
            .await?;
        let peer = match &self.prometheus {
            Some(binary) => Some(self.peer(binary, &stage).await?),
            None => {
                println!(
                    "root: no Prometheus ({} not found): the peer figures are skipped",
                    a.prometheus
                );
                None
            }
        };
        tokio::time::sleep(a.settle).await;
        ensure!(
            stage.hook.posts().is_empty(),
            "the webhook was posted before the storm: {:?}",
            stage.hook.posts().first()
        );
        let before = read_daemon(&self.http, stage.daemon.api).await?;
        let received_before = am_received(&self.http, &stage.am.url()).await?;
        let quiet = self
            .quiet(&mut stage.daemon, peer.as_ref().map(|p| &p.prometheus))
            .await?;
        let at_t0 = read_daemon(&self.http, stage.daemon.api).await?;

        let peer_received = match &peer {
            Some(p) => Some(am_firing_received(&self.http, &p.am.url()).await?),
            None => None,
        };
        let cpu_t0 = support::cpu_ticks(&stage.daemon.pid)?;
        let peer_cpu_t0 = peer
            .as_ref()
            .map(|p| support::cpu_ticks(&p.prometheus.server.pid().to_string()))
            .transpose()?;
        let t0 = stage.listeners.close().await;
        println!("root: t0 {}", humantime::format_rfc3339_millis(t0.wall));
        let deadline = t0.at + a.storm;
        let am_url = stage.am.url();
        let peer_url = peer.as_ref().map(|p| p.am.url());
        let peer_all = a.fleet.targets as f64 + 1.0;
        let (root_seen, peer_seen, counts, cpu) = tokio::join!(
            first_listed(&self.http, &am_url, "ProbeDown", deadline),
            async {
                match &peer_url {
                    Some(url) => first_listed(&self.http, url, "PeerProbeDown", deadline).await,
                    None => Ok(None),
                }
            },
            count_alerts(
                &self.http,
                &am_url,
                peer_url.as_deref().zip(peer_received),
                peer_all,
                t0.at,
                deadline
            ),
            async {
                tokio::time::sleep_until(deadline).await;
                let daemon = support::cpu_ticks(&stage.daemon.pid);
                let peer = peer
                    .as_ref()
                    .map(|p| support::cpu_ticks(&p.prometheus.server.pid().to_string()))
                    .transpose();
                // Read after the CPU: its rendering stays out of the window.
                let end = read_daemon(&self.http, stage.daemon.api).await;
                (daemon, peer, end)
            }
        );
        let (cpu_end, peer_cpu_end, at_end) = (cpu.0?, cpu.1?, cpu.2?);
        let (root_seen, peer_seen, counts) = (root_seen?, peer_seen?, counts?);
        stage.daemon.check_alive()?;
        let peer_listed = match &peer_url {
            Some(url) => Some(am_alerts(&self.http, url).await?),
            None => None,
        };
        let posts: Vec<Post> = stage
            .hook
            .posts()
            .into_iter()
            .filter(|p| p.at <= deadline)
            .collect();
        let after = read_daemon(&self.http, stage.daemon.api).await?;
        let received = am_received(&self.http, &am_url).await? - received_before;
        let listed = listing(&self.http, stage.daemon.api).await?;
        let since = listed
            .iter()
            .find(|t| t.id == ROOT)
            .filter(|t| t.state == "DOWN")
            .and_then(|t| t.since)
            .context("the root is not DOWN after the storm")?;
        // Dependents whose own DOWN came first: each could have paged before the root did.
        let down_first = listed
            .iter()
            .filter(|t| t.id != ROOT && t.state == "DOWN" && t.since.is_some_and(|s| s < since))
            .count();

        let cpu_s = cpu_end.saturating_sub(cpu_t0) as f64 / TICKS_PER_SEC;
        let firing: Vec<&Post> = posts.iter().filter(|p| p.status == "firing").collect();
        let resolved = posts.iter().filter(|p| p.status == "resolved").count();
        let dependents_fired = firing
            .iter()
            .filter(|p| p.target != ROOT)
            .map(|p| p.target.as_str())
            .collect::<HashSet<_>>()
            .len();
        let root_posts: Vec<&&Post> = firing.iter().filter(|p| p.target == ROOT).collect();
        let impacted = root_posts
            .iter()
            .map(|p| p.impacted as f64)
            .fold(f64::NAN, f64::max);
        let root_to_hook = root_posts.first().map(|p| t0.wall_of(p.at));
        let since_ms = |at: SystemTime| signed_ms(at, since);
        let t0_to_root_down = signed_ms(since, t0.wall);
        let root_to_am = root_seen.map_or(f64::NAN, |seen| since_ms(t0.wall_of(seen)));
        let t0_to_am = root_seen.map_or(f64::NAN, |seen| ms(seen - t0.at));
        let root_to_hook = root_to_hook.map_or(f64::NAN, since_ms);
        let am_posts = after.am_delivered - before.am_delivered;
        let (rate_quiet, rate_storm) = (before.probes_per_s(&at_t0), at_t0.probes_per_s(&at_end));
        println!(
            "root: the root DOWN {t0_to_root_down:.0} ms after t0, {down_first} dependents DOWN \
             before it; within {:.0} s the webhook got \
             {} notifications ({} firing, {resolved} resolved; {dependents_fired} dependents \
             fired; the root's first after {root_to_hook:.0} ms, impacted {impacted}); \
             Alertmanager held at most {} alerts (goal 1), got {received} in {am_posts} posts \
             ({} failed), listed the root {root_to_am:.0} ms after its DOWN (goal <= 1000 ms), \
             {t0_to_am:.0} ms after t0; outbox {} at the end; daemon CPU {cpu_s:.2} s at \
             {rate_storm:.0} probes/s (quiet {:.2} s at {rate_quiet:.0} probes/s)",
            a.storm.as_secs_f64(),
            posts.len(),
            firing.len(),
            counts.peak,
            after.am_failed - before.am_failed,
            after.outbox,
            quiet.daemon
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(ROOT_SCENARIO, metric, value, unit);
        };
        result("webhook_notifications", posts.len() as f64, "notifications");
        result("webhook_firing", firing.len() as f64, "notifications");
        result("webhook_resolved", resolved as f64, "notifications");
        result("dependents_fired", dependents_fired as f64, "targets");
        result("impacted", impacted, "targets");
        result("root_down_to_webhook_ms", root_to_hook, "ms");
        result("alertmanager_alerts", counts.peak as f64, "alerts");
        result("alertmanager_alerts_received", received, "alerts");
        result("alertmanager_posts", am_posts, "posts");
        result("t0_to_root_down_ms", t0_to_root_down, "ms");
        result("dependents_down_before_root", down_first as f64, "targets");
        result("root_down_to_alertmanager_ms", root_to_am, "ms");
        result("t0_to_alertmanager_ms", t0_to_am, "ms");
        result("outbox_size_end", after.outbox, "notifications");
        result("cpu_s", cpu_s, "s");
        result("cpu_s_quiet", quiet.daemon, "s");
        result("probes_per_s", rate_storm, "probes/s");
        result("probes_per_s_quiet", rate_quiet, "probes/s");
        if let (Some(peer_cpu_t0), Some(peer_cpu_end)) = (peer_cpu_t0, peer_cpu_end) {
            let peer_cpu = peer_cpu_end.saturating_sub(peer_cpu_t0) as f64 / TICKS_PER_SEC;
            let peer_t0_to_am = peer_seen.map_or(f64::NAN, |seen| ms(seen - t0.at));
            let peer_all_ms = counts.peer_all.map_or(f64::NAN, ms);
            let listed = peer_listed.unwrap_or_default();
            let mut by_target: std::collections::BTreeMap<&str, Vec<&serde_json::Map<_, _>>> =
                std::collections::BTreeMap::new();
            for labels in &listed {
                let target = labels.get("target").and_then(Value::as_str);
                by_target
                    .entry(target.unwrap_or(""))
                    .or_default()
                    .push(labels);
            }
            println!(
                "root peer: at the end its Alertmanager lists {} alerts for {} targets",
                listed.len(),
                by_target.len()
            );
            // A target with more than one alert: their label sets say why.
            if let Some((target, sets)) = by_target.iter().find(|(_, sets)| sets.len() > 1) {
                println!("root peer: {} alerts for {target}:", sets.len());
                for labels in sets.iter().take(3) {
                    println!("  {}", Value::Object((*labels).clone()));
                }
            }
            println!(
                "root peer: Prometheus's Alertmanager held {} alerts at the end (one per target: \
                 {peer_all}), the root's {peer_t0_to_am:.0} ms after t0, had been posted as many \
                 firing alerts as targets after {peer_all_ms:.0} ms; Prometheus CPU \
                 {peer_cpu:.2} s (quiet {:.2} s)",
                listed.len(),
                quiet.peer.unwrap_or(f64::NAN)
            );
            result("peer_alertmanager_alerts", listed.len() as f64, "alerts");
            result(
                "peer_alertmanager_targets_end",
                by_target.len() as f64,
                "targets",
            );
            result("peer_t0_to_alertmanager_ms", peer_t0_to_am, "ms");
            result("peer_t0_to_alertmanager_all_ms", peer_all_ms, "ms");
            result("peer_prometheus_cpu_s", peer_cpu, "s");
            result(
                "peer_prometheus_cpu_s_quiet",
                quiet.peer.unwrap_or(f64::NAN),
                "s",
            );
        }
        // The daemon first: nothing posts to the receivers while they stop.
        drop(stage);
        drop(peer);
        Ok(())
    }

    /// Phase 2: independent targets.
    async fn independent(&self) -> anyhow::Result<()> {
        let a = &self.args;
        println!(
            "independent: {} targets without dependencies going DOWN at once: one alert each",
            a.fleet.targets
        );
        let mut stage = self
            .stage("independent", false, Duration::from_secs(a.resend))
            .await?;
        tokio::time::sleep(a.settle).await;
        let before = read_daemon(&self.http, stage.daemon.api).await?;
        let quiet = self.quiet(&mut stage.daemon, None).await?;
        let at_t0 = read_daemon(&self.http, stage.daemon.api).await?;

        let am_url = stage.am.url();
        let received = am_firing_received(&self.http, &am_url).await?;
        let cpu_t0 = support::cpu_ticks(&stage.daemon.pid)?;
        let t0 = stage.listeners.close().await;
        println!(
            "independent: t0 {}",
            humantime::format_rfc3339_millis(t0.wall)
        );
        let window = t0.at + a.storm;
        let patience = t0.at + a.storm.max(DELIVERY_PATIENCE);
        let all = a.fleet.targets as f64;
        let (am_all, hook_all, cpu_end) = tokio::join!(
            async {
                let mut tick = tokio::time::interval(COUNT_POLL);
                loop {
                    tick.tick().await;
                    let sent = Instant::now();
                    let got = am_firing_received(&self.http, &am_url).await? - received;
                    if got >= all {
                        return anyhow::Ok(Some(sent + sent.elapsed() / 2));
                    }
                    if Instant::now() >= patience {
                        println!("independent: Alertmanager was posted {got} of {all} alerts");
                        return Ok(None);
                    }
                }
            },
            async {
                let mut tick = tokio::time::interval(HOOK_POLL);
                loop {
                    tick.tick().await;
                    let firing = firing_targets(&stage.hook.posts());
                    if firing.len() >= a.fleet.targets || Instant::now() >= patience {
                        return firing;
                    }
                }
            },
            async {
                tokio::time::sleep_until(window).await;
                let cpu = support::cpu_ticks(&stage.daemon.pid);
                // Read after the CPU: its rendering stays out of the window.
                (cpu, read_daemon(&self.http, stage.daemon.api).await)
            }
        );
        let (am_all, cpu_end, at_end) = (am_all?, cpu_end.0?, cpu_end.1?);
        stage.daemon.check_alive()?;
        let after = read_daemon(&self.http, stage.daemon.api).await?;
        let held = am_held(&self.http, &am_url).await? as f64;
        let posts = stage.hook.posts();
        // The last DOWN: the notifications cannot all be out before it.
        let last_down = listing(&self.http, stage.daemon.api)
            .await?
            .iter()
            .filter(|t| t.state == "DOWN")
            .filter_map(|t| t.since)
            .max();
        let to_last_down = last_down.map_or(f64::NAN, |at| signed_ms(at, t0.wall));
        let last_down_to_hook = match (last_down, hook_all.last()) {
            (Some(down), Some(&at)) if hook_all.len() >= a.fleet.targets => {
                signed_ms(t0.wall_of(at), down)
            }
            _ => f64::NAN,
        };
        let (first, last) = (posts.first().map(|p| p.at), hook_all.last().copied());
        let complete = hook_all.len() >= a.fleet.targets;
        let cpu_s = cpu_end.saturating_sub(cpu_t0) as f64 / TICKS_PER_SEC;
        let to_am = am_all.map_or(f64::NAN, |at| ms(at - t0.at));
        let to_first = first.map_or(f64::NAN, |at| ms(at - t0.at));
        let to_hook = last
            .filter(|_| complete)
            .map_or(f64::NAN, |at| ms(at - t0.at));
        let per_s = match (first, last) {
            (Some(first), Some(last)) if complete && last > first => {
                hook_all.len() as f64 / (last - first).as_secs_f64()
            }
            _ => f64::NAN,
        };
        let am_posts = after.am_delivered - before.am_delivered;
        let (rate_quiet, rate_storm) = (before.probes_per_s(&at_t0), at_t0.probes_per_s(&at_end));
        println!(
            "independent: Alertmanager held all {all} alerts {to_am:.0} ms after t0 ({held} at \
             the end) through {am_posts} posts ({} failed); the webhook had its first \
             notification after {to_first:.0} ms and a firing one for {} of {} targets after \
             {to_hook:.0} ms ({last_down_to_hook:.0} ms after the last DOWN, {to_last_down:.0} ms \
             after t0): {per_s:.0} notifications/s; {} posts in all; outbox {} at the end; \
             daemon CPU {cpu_s:.2} s over {:.0} s at {rate_storm:.0} probes/s (quiet {:.2} s at \
             {rate_quiet:.0} probes/s)",
            after.am_failed - before.am_failed,
            hook_all.len(),
            a.fleet.targets,
            posts.len(),
            after.outbox,
            a.storm.as_secs_f64(),
            quiet.daemon
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(INDEPENDENT_SCENARIO, metric, value, unit);
        };
        result("t0_to_alertmanager_all_ms", to_am, "ms");
        result("alertmanager_alerts", held, "alerts");
        result("alertmanager_posts", am_posts, "posts");
        result("t0_to_webhook_first_ms", to_first, "ms");
        result("t0_to_webhook_all_ms", to_hook, "ms");
        result("t0_to_last_down_ms", to_last_down, "ms");
        result("last_down_to_webhook_all_ms", last_down_to_hook, "ms");
        result("webhook_notifications", posts.len() as f64, "notifications");
        result("webhook_per_s", per_s, "notifications/s");
        result("cpu_s", cpu_s, "s");
        result("cpu_s_quiet", quiet.daemon, "s");
        result("probes_per_s", rate_storm, "probes/s");
        result("probes_per_s_quiet", rate_quiet, "probes/s");
        drop(stage);
        Ok(())
    }

    /// Phase 3: every target UP and nothing firing, past `resend`, with Alertmanager's
    /// `resend` at [`IDLE_RESEND`]: what the daemon costs at rest once a resend is due with
    /// nothing to resend (the same window as the independent phase's quiet one, which ends
    /// before its `resend` is due).
    async fn idle(&self) -> anyhow::Result<()> {
        let a = &self.args;
        println!(
            "idle: {} targets UP, nothing firing, resend {} s: the quiet window starts after it \
             is due",
            a.fleet.targets,
            IDLE_RESEND.as_secs()
        );
        let mut stage = self.stage("idle", false, IDLE_RESEND).await?;
        // The daemon listened before the stage returned: the first resend is due by now.
        tokio::time::sleep(a.settle.max(2 * IDLE_RESEND)).await;
        let before = read_daemon(&self.http, stage.daemon.api).await?;
        let quiet = self.quiet(&mut stage.daemon, None).await?;
        let after = read_daemon(&self.http, stage.daemon.api).await?;
        let am_posts = after.am_delivered - before.am_delivered;
        let posts = stage.hook.posts().len();
        let rate = before.probes_per_s(&after);
        println!(
            "idle: daemon CPU {:.2} s over {:.0} s at {rate:.0} probes/s; {am_posts} posts to \
             Alertmanager, {posts} to the webhook",
            quiet.daemon,
            a.storm.as_secs_f64()
        );
        let result = |metric: &str, value: f64, unit: &str| {
            support::result(IDLE_SCENARIO, metric, value, unit);
        };
        result("cpu_s_quiet", quiet.daemon, "s");
        result("probes_per_s_quiet", rate, "probes/s");
        result("alertmanager_posts", am_posts, "posts");
        result("webhook_notifications", posts as f64, "notifications");
        drop(stage);
        Ok(())
    }

    /// The daemon's (and Prometheus's) CPU over a quiet window of `--storm-s`, in seconds.
    async fn quiet(
        &self,
        daemon: &mut Daemon,
        prometheus: Option<&Prometheus>,
    ) -> anyhow::Result<Quiet> {
        let peer_pid = prometheus.map(|p| p.server.pid().to_string());
        let start = support::cpu_ticks(&daemon.pid)?;
        let peer_start = peer_pid.as_deref().map(support::cpu_ticks).transpose()?;
        tokio::time::sleep(self.args.storm).await;
        let end = support::cpu_ticks(&daemon.pid)?;
        let peer_end = peer_pid.as_deref().map(support::cpu_ticks).transpose()?;
        daemon.check_alive()?;
        Ok(Quiet {
            daemon: end.saturating_sub(start) as f64 / TICKS_PER_SEC,
            peer: peer_start
                .zip(peer_end)
                .map(|(s, e)| e.saturating_sub(s) as f64 / TICKS_PER_SEC),
        })
    }

    /// Starts the peer: a second Alertmanager and Prometheus scraping the daemon and alerting
    /// to it, and waits until Prometheus holds every target's `probe_success`.
    async fn peer(&self, binary: &Path, stage: &Stage) -> anyhow::Result<Peer> {
        let am = start_alertmanager().await?;
        let started = Instant::now();
        let mut prometheus = Prometheus::start(binary, stage.daemon.api, am.addr())?;
        let want = self.args.fleet.targets as f64 + 1.0;
        let deadline = started + self.args.up_timeout;
        loop {
            if let Some(status) = prometheus.server.exited()? {
                bail!(
                    "Prometheus exited ({status}); its log:\n{}",
                    prometheus.log()
                );
            }
            let series = prometheus
                .query(&self.http, "count(probe_success == 1)")
                .await
                .unwrap_or(f64::NAN);
            if series == want {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "Prometheus did not hold {want} probe_success series of 1 within {:?} (it \
                     has {series}); its log:\n{}",
                    self.args.up_timeout,
                    prometheus.log()
                );
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
        println!(
            "root peer: {} scraping the daemon's {want} series of probe_success {:.1} s after its \
             start",
            prometheus.server.version,
            started.elapsed().as_secs_f64()
        );
        let held = am_held(&self.http, &am.url()).await?;
        ensure!(
            held == 0,
            "the peer's Alertmanager holds {held} alerts before the storm"
        );
        Ok(Peer { prometheus, am })
    }
}

/// The CPU of the quiet window.
struct Quiet {
    daemon: f64,
    peer: Option<f64>,
}

/// Prometheus and its own Alertmanager.
struct Peer {
    prometheus: Prometheus,
    am: Alertmanager,
}

/// Writes the daemon's config folder: the sections (Alertmanager's `resend` `resend`, in whole
/// seconds), then the targets, at most
/// [`TARGETS_PER_FILE`] to a file (`root`: the root first, then its dependents).
fn write_config(
    dir: &Path,
    a: &Args,
    root: bool,
    resend: Duration,
    listeners: &[SocketAddr],
    am: &str,
    hook: SocketAddr,
) -> anyhow::Result<()> {
    let sections = format!(
        "alerts:\n  alertmanager: {{urls: [\"{am}\"], resend: {}s}}\n  webhooks:\n    - {{name: \
         ops, url: \"http://{hook}/hook\"}}\n  defaults: {{on: [DOWN], for: 0s}}\nmetrics: \
         {{per_target_histograms: false}}\n",
        resend.as_secs()
    );
    std::fs::write(dir.join("sections.yaml"), sections)?;
    let interval = a.fleet.interval.as_millis();
    let timeout = (a.fleet.interval / 2)
        .min(Duration::from_secs(1))
        .as_millis();
    let defaults = format!(
        "defaults: {{interval: {interval}ms, timeout: {timeout}ms, rise: 1, fall: 1, flap: \
         false}}\ntargets:\n"
    );
    let mut ids: Vec<String> = Vec::with_capacity(a.fleet.targets + 1);
    if root {
        ids.push(ROOT.to_owned());
        ids.extend((0..a.fleet.targets).map(|i| format!("dep-{i:05}")));
    } else {
        ids.extend((0..a.fleet.targets).map(|i| format!("t-{i:05}")));
    }
    for (file, chunk) in ids.chunks(TARGETS_PER_FILE).enumerate() {
        let mut yaml = defaults.clone();
        for (j, id) in chunk.iter().enumerate() {
            let i = file * TARGETS_PER_FILE + j;
            let address = listeners[i % listeners.len()];
            writeln!(yaml, "  - id: {id}\n    tcp: {{address: \"{address}\"}}")?;
            if root && id != ROOT {
                writeln!(yaml, "    depends_on: [{{target: {ROOT}, critical: true}}]")?;
            }
        }
        std::fs::write(dir.join(format!("targets-{file:02}.yaml")), yaml)?;
    }
    Ok(())
}

/// Accept-and-drop listeners on 127.0.0.2 and up that can be closed all at once.
struct Listeners {
    addrs: Vec<SocketAddr>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// The instant the listeners were closed, on both clocks.
#[derive(Clone, Copy)]
struct T0 {
    at: Instant,
    wall: SystemTime,
}

impl T0 {
    /// The wall-clock time of `at`, a monotonic instant after `t0`.
    fn wall_of(&self, at: Instant) -> SystemTime {
        self.wall + at.saturating_duration_since(self.at)
    }
}

impl Listeners {
    /// `n` listeners (backlog 4096), each served by a task of its own.
    async fn open(n: usize, phase: &str) -> anyhow::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        let stop = CancellationToken::new();
        let mut addrs = Vec::with_capacity(n);
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let last = u8::try_from(i + 2).context("too many listeners")?;
            let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                .context("creating a listener socket")?;
            socket.set_reuse_address(true)?;
            socket.set_nonblocking(true)?;
            socket
                .bind(&SocketAddr::from(([127, 0, 0, last], 0)).into())
                .with_context(|| format!("binding 127.0.0.{last}:0 ({phase})"))?;
            socket.listen(4096).context("listen")?;
            let listener =
                tokio::net::TcpListener::from_std(socket.into()).context("a tokio listener")?;
            addrs.push(listener.local_addr()?);
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => break,
                        // Accept and drop: a plain close, as a server that is up would.
                        accepted = listener.accept() => drop(accepted),
                    }
                }
                // The listener drops here: connects are refused from now on.
            }));
        }
        Ok(Self { addrs, stop, tasks })
    }

    /// Closes every listener, and returns when the last is closed.
    async fn close(&mut self) -> T0 {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        T0 {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One POST the webhook got.
#[derive(Clone, Debug)]
struct Post {
    at: Instant,
    status: String,
    target: String,
    /// The length of its `impacted` array.
    impacted: usize,
}

/// The webhook receiver: answers 200 to every POST to `/hook` and records it.
struct Hook {
    addr: SocketAddr,
    posts: Arc<Mutex<Vec<Post>>>,
    task: JoinHandle<()>,
}

impl Hook {
    async fn start() -> anyhow::Result<Self> {
        let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
        let kept = posts.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let at = Instant::now();
                    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
                        return axum::http::StatusCode::BAD_REQUEST;
                    };
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    lock(&kept).push(Post {
                        at,
                        status: text(&value["status"]),
                        target: text(&value["labels"]["target"]),
                        impacted: value["impacted"].as_array().map_or(0, Vec::len),
                    });
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the webhook")?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("alerts-load: the webhook stopped: {e}");
            }
        });
        Ok(Self { addr, posts, task })
    }

    fn posts(&self) -> Vec<Post> {
        lock(&self.posts).clone()
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The arrival of each target's first firing notification, in order.
fn firing_targets(posts: &[Post]) -> Vec<Instant> {
    let mut seen = HashSet::new();
    posts
        .iter()
        .filter(|p| p.status == "firing" && seen.insert(p.target.as_str()))
        .map(|p| p.at)
        .collect()
}

/// A throw-away Alertmanager (the tests' fixture), started off the async workers: it waits for
/// readiness with blocking sleeps.
async fn start_alertmanager() -> anyhow::Result<Alertmanager> {
    tokio::task::spawn_blocking(Alertmanager::start)
        .await
        .context("starting Alertmanager")?
        .context("starting Alertmanager")
}

/// How many alerts Alertmanager holds: the length of its listing (which has no resolved
/// alert). Its `alertmanager_alerts` gauge would be cheaper, but it counts each state
/// (`unprocessed`, `active`, `suppressed`) at its own instant, so that in a burst an alert going
/// from one to the next counts twice, and `active` alone waits for the dispatcher (a group
/// interval): for large counts the harness reads [`am_firing_received`] instead.
async fn am_held(http: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    Ok(am_alerts(http, url).await?.len())
}

/// Firing alerts Alertmanager was posted so far (its
/// `alertmanager_alerts_received_total{status="firing"}`): it stores a posted alert before it
/// answers, so once this has grown by the alerts sent, it holds them.
async fn am_firing_received(http: &reqwest::Client, url: &str) -> anyhow::Result<f64> {
    let text = get_text(http, &format!("{url}/metrics")).await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("alertmanager_alerts_received_total{") && l.contains("status=\"firing\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v))
}

/// The alerts Alertmanager lists (active ones), as label sets.
async fn am_alerts(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<Vec<serde_json::Map<String, Value>>> {
    let listed: Value = http
        .get(format!("{url}/api/v2/alerts"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("listing Alertmanager's alerts")?
        .json()
        .await
        .context("reading Alertmanager's alerts")?;
    Ok(listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["labels"].as_object().cloned())
        .collect())
}

/// Every alert Alertmanager was posted so far, firing or resolved.
async fn am_received(http: &reqwest::Client, url: &str) -> anyhow::Result<f64> {
    let text = get_text(http, &format!("{url}/metrics")).await?;
    Ok(series_sum(&text, "alertmanager_alerts_received_total"))
}

/// Alertmanager's counts over the root phase's storm window.
struct Counts {
    /// The most alerts the daemon's Alertmanager held at once.
    peak: usize,
    /// When the peer's had been posted `peer_all` firing alerts (from `t0`).
    peer_all: Option<Duration>,
}

/// Reads the daemon's Alertmanager's listing, and the firing alerts the peer's (`url` and its
/// count at `t0`) was posted, every [`COUNT_POLL`] until `deadline`, and once at it.
async fn count_alerts(
    http: &reqwest::Client,
    url: &str,
    peer: Option<(&str, f64)>,
    peer_all: f64,
    t0: Instant,
    deadline: Instant,
) -> anyhow::Result<Counts> {
    let mut counts = Counts {
        peak: 0,
        peer_all: None,
    };
    let mut tick = tokio::time::interval(COUNT_POLL);
    loop {
        tick.tick().await;
        let last = Instant::now() >= deadline;
        counts.peak = counts.peak.max(am_held(http, url).await?);
        if let Some((peer, base)) = peer
            && counts.peer_all.is_none()
        {
            let sent = Instant::now();
            if am_firing_received(http, peer).await? - base >= peer_all {
                counts.peer_all = Some((sent + sent.elapsed() / 2) - t0);
            }
        }
        if last {
            return Ok(counts);
        }
    }
}

/// When Alertmanager at `url` first listed alert `name` for the root, polled every
/// [`ROOT_POLL`] until `deadline`: the middle of the request that saw it.
async fn first_listed(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    deadline: Instant,
) -> anyhow::Result<Option<Instant>> {
    let listing = format!(
        "{url}/api/v2/alerts?filter={}&filter={}",
        encode(&format!("alertname=\"{name}\"")),
        encode(&format!("target=\"{ROOT}\""))
    );
    let mut tick = tokio::time::interval(ROOT_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Instant::now() >= deadline {
            return Ok(None);
        }
        let sent = Instant::now();
        let listed: Value = http
            .get(&listing)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .context("listing Alertmanager's alerts")?
            .json()
            .await
            .context("reading Alertmanager's alerts")?;
        if listed.as_array().is_some_and(|a| !a.is_empty()) {
            return Ok(Some(sent + sent.elapsed() / 2));
        }
    }
}

/// What the daemon's `/metrics` says of its alerting and probing, and when (the middle of the
/// request).
struct DaemonCounters {
    am_delivered: f64,
    am_failed: f64,
    outbox: f64,
    /// Probe runs: one `probe_fleet_duration_seconds` record each.
    probes: f64,
    at: Instant,
}

impl DaemonCounters {
    /// Probe runs a second from this reading to `later`.
    fn probes_per_s(&self, later: &Self) -> f64 {
        (later.probes - self.probes) / (later.at - self.at).as_secs_f64()
    }
}

async fn read_daemon(http: &reqwest::Client, api: SocketAddr) -> anyhow::Result<DaemonCounters> {
    let sent = Instant::now();
    let text = get_text(http, &format!("http://{api}/metrics")).await?;
    let at = sent + sent.elapsed() / 2;
    let notifications = |result: &str| {
        text.lines()
            .filter(|l| {
                l.starts_with("probe_alert_notifications_total{")
                    && l.contains("receiver=\"alertmanager\"")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .fold(0.0, |sum, v| sum + v)
    };
    Ok(DaemonCounters {
        am_delivered: notifications("delivered"),
        am_failed: notifications("failed"),
        outbox: series_sum(&text, "probe_alert_outbox_size"),
        probes: series_sum(&text, "probe_fleet_duration_seconds_count"),
        at,
    })
}

/// A target as `GET /v1/targets` lists it.
struct Listed {
    id: String,
    state: String,
    /// When its state began.
    since: Option<SystemTime>,
}

/// Every target, as `GET /v1/targets` lists them.
async fn listing(http: &reqwest::Client, api: SocketAddr) -> anyhow::Result<Vec<Listed>> {
    let body: Value = http
        .get(format!("http://{api}/v1/targets"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("GET /v1/targets")?
        .json()
        .await
        .context("reading GET /v1/targets")?;
    let targets = body["targets"]
        .as_array()
        .context("no targets in GET /v1/targets")?;
    Ok(targets
        .iter()
        .map(|t| Listed {
            id: t["id"].as_str().unwrap_or_default().to_owned(),
            state: t["state"].as_str().unwrap_or_default().to_owned(),
            since: t["since"]
                .as_str()
                .and_then(|at| humantime::parse_rfc3339(at).ok()),
        })
        .collect())
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

/// Prometheus on a free loopback port, scraping the daemon and alerting to an Alertmanager:
/// the suite's fixture with a rule file of its own; killed when dropped.
struct Prometheus {
    server: probe_testkit::Prometheus,
    _rules: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, daemon: SocketAddr, am: SocketAddr) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("Prometheus's rules dir")?;
        let rules = dir.path().join("rules.yml");
        std::fs::write(
            &rules,
            "groups:\n  - name: peer\n    interval: 1s\n    rules:\n      - alert: \
             PeerProbeDown\n        expr: probe_success == 0\n        for: 0s\n",
        )?;
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: \
             1s}}\nrule_files: [\"{}\"]\nalerting:\n  alertmanagers:\n    - api_version: \
             v2\n      static_configs: [{{targets: [\"{am}\"]}}]\nscrape_configs:\n  - \
             job_name: probe-engine\n    static_configs: [{{targets: [\"{daemon}\"]}}]\n",
            rules.display()
        );
        let server = probe_testkit::Prometheus::start_binary(
            binary,
            &config,
            &["--alertmanager.notification-queue-capacity=20000"],
        )
        .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            server,
            _rules: dir,
        })
    }

    /// The first sample of an instant query, NaN without one.
    async fn query(&self, http: &reqwest::Client, query: &str) -> anyhow::Result<f64> {
        let body: Value = http
            .get(format!(
                "http://{}/api/v1/query?query={}",
                self.server.addr(),
                encode(query)
            ))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .context("querying Prometheus")?
            .json()
            .await
            .context("reading Prometheus's answer")?;
        Ok(body["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN))
    }

    fn log(&self) -> String {
        self.server.log(support::LOG_TAIL)
    }
}

/// `text` percent-encoded for a query string: everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `a - b` in ms, negative when `a` is earlier.
fn signed_ms(a: SystemTime, b: SystemTime) -> f64 {
    match a.duration_since(b) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_targets_first_firing_counts_once() {
        let at = Instant::now();
        let post = |target: &str, status: &str| Post {
            at,
            status: status.to_owned(),
            target: target.to_owned(),
            impacted: 0,
        };
        let posts = [
            post("a", "firing"),
            post("a", "resolved"),
            post("a", "firing"),
            post("b", "firing"),
        ];
        assert_eq!(firing_targets(&posts).len(), 2);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("target=\"root\""), "target%3D%22root%22");
        assert_eq!(encode("count(x == 1)"), "count%28x%20%3D%3D%201%29");
    }

    #[test]
    fn signed_ms_is_negative_before() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        assert_eq!(signed_ms(t + Duration::from_millis(5), t), 5.0);
        assert_eq!(signed_ms(t, t + Duration::from_millis(5)), -5.0);
    }

    #[test]
    fn the_config_has_the_root_and_its_dependents() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = Cli::try_parse_from(["alerts-load", "--targets", "7000"])
            .expect("parses")
            .args;
        let dir = tempfile::tempdir().expect("temp dir");
        let listeners: Vec<SocketAddr> = vec![
            "127.0.0.2:1000".parse().expect("an address"),
            "127.0.0.3:1000".parse().expect("an address"),
        ];
        let hook = "127.0.0.1:80".parse().expect("an address");
        write_config(
            dir.path(),
            &args,
            true,
            Duration::from_secs(args.resend),
            &listeners,
            "http://127.0.0.1:9",
            hook,
        )
        .expect("written");
        let first = std::fs::read_to_string(dir.path().join("targets-00.yaml")).expect("read");
        let second = std::fs::read_to_string(dir.path().join("targets-01.yaml")).expect("read");
        assert!(
            first.contains(
                "  - id: root\n    tcp: {address: \"127.0.0.2:1000\"}\n  - id: dep-00000\n"
            )
        );
        assert_eq!(first.matches("  - id: ").count(), TARGETS_PER_FILE);
        assert_eq!(
            second.matches("  - id: dep-").count(),
            7001 - TARGETS_PER_FILE
        );
        assert_eq!(
            (first + &second)
                .matches("depends_on: [{target: root, critical: true}]")
                .count(),
            7000
        );
        let sections = std::fs::read_to_string(dir.path().join("sections.yaml")).expect("read");
        assert!(sections.contains("resend: 60s"));
        assert!(sections.contains("url: \"http://127.0.0.1:80/hook\""));
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
            Cli::try_parse_from(std::iter::once("alerts-load").chain(line.split_whitespace()))
                .map(|c| c.args)
        };
        assert!(args("").expect("defaults parse").validate().is_ok());
        assert!(
            args("--targets 1000 --storm-s 5")
                .expect("quick parses")
                .validate()
                .is_ok()
        );
        assert!(args("--listeners 0").expect("parses").validate().is_err());
        assert!(args("--storm-s 0").expect("parses").validate().is_err());
        assert!(args("--phases bogus").is_err());
    }
}
