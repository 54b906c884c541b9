//! Alerts: the engine's verdicts as notifications, to Alertmanager and to webhooks, one per
//! root cause.
//!
//! A loop looks at the engine (at once after its transitions, every 250 ms while a `for` is
//! pending, every 2 s otherwise) and brings the episodes up to date (`episodes`): what fired,
//! resolved or changed goes to the outbox (`outbox`), on disk before any receiver sees it, and
//! from there to each receiver by its own task (`deliver`). An episode is named by a
//! fingerprint of its target, alert name and the time its state began, so a notification sent
//! again, after a restart or by the member that took the target over, is the same notification.

mod deliver;
mod episodes;
mod outbox;
mod rules;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use probe::engine::Engine;
use probe::graph::Causes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use rules::{DeclaredAlerts, FileRules, RuleFeed, RuleSink, channel as rule_channel};

use deliver::Target;
use episodes::{Episodes, World};
use outbox::Outbox;
use probe_config::AlertsConfig;

/// How often the episodes are brought up to date while an alert waits for its `for` (or a
/// group's score is watched): the resolution of `for`.
const TICK: Duration = Duration::from_millis(250);

/// How often otherwise, when no transition, reload or membership change wakes the loop: a look
/// at a large fleet is not free.
const IDLE: Duration = Duration::from_secs(2);

/// After a first transition wakes the loop, how long it lets more come: the changes of one
/// incident are looked at together, not once each.
const SETTLE: Duration = Duration::from_millis(20);

/// Whether an alert stands or has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It stands.
    Firing,
    /// It has ended.
    Resolved,
}

/// One alert as the receivers get it: Alertmanager's v2 fields, plus the cause and what it
/// impacts for webhooks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// `firing` or `resolved`.
    pub status: Status,
    /// The episode's name: its target, alert name and start.
    pub fingerprint: String,
    /// `alertname`, `target`, `severity`, `probe_engine`, `root_cause` and the rule's own.
    pub labels: BTreeMap<String, String>,
    /// `summary`, `reason`, `detail`, `impacted`, `member` and the rule's own.
    pub annotations: BTreeMap<String, String>,
    /// When the episode began (RFC 3339).
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// When it ended, once resolved.
    #[serde(rename = "endsAt", default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    /// The target's page in the API.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// The root cause: the target itself, for an alert that fires.
    pub cause: String,
    /// What the root cause makes `dependency_down`.
    pub impacted: Vec<String>,
}

/// Who sends.
#[derive(Clone, Debug)]
pub struct Sender {
    /// The `probe_engine` label: the same on every member of a cluster (its prefix), since
    /// Alertmanager knows an alert by its labels, and the member that takes a target over must
    /// go on with the same alert, not raise a second one.
    pub label: String,
    /// This member's name, in the `member` annotation.
    pub member: String,
    /// `http://HOST:PORT` of the API (the alerts' `generatorURL`).
    pub api: String,
    /// The member set as this member sees it, in a cluster: a member whose lease is lost sends
    /// nothing (its targets are someone else's now, or will be) and goes on from where it was
    /// once it is a member again.
    pub membership: Option<watch::Receiver<probe_etcd::membership::View>>,
}

impl Sender {
    /// Whether this member may send now.
    fn member(&self) -> bool {
        self.membership
            .as_ref()
            .is_none_or(|view| view.borrow().lease == probe_etcd::membership::Lease::Live)
    }

    /// Whether this member sends the groups' alerts: groups have no owner, so the first member
    /// by name does (alone, outside a cluster).
    fn groups_ours(&self) -> bool {
        self.membership
            .as_ref()
            .is_none_or(|view| first_member(&view.borrow(), &self.member))
    }
}

/// Whether `member` is the first of the set by name (or the set is empty): groups have no
/// owner, so the first member speaks for them.
pub fn first_member(view: &probe_etcd::membership::View, member: &str) -> bool {
    view.members
        .keys()
        .next()
        .is_none_or(|first| first.as_str() == member)
}

/// One receiver's answer to a test notification.
#[derive(Clone, Debug, Serialize)]
pub struct TestResult {
    /// The receiver's name (`alertmanager`, or the webhook's).
    pub receiver: String,
    /// Whether it took the notification.
    pub delivered: bool,
    /// Why not, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The alerting loop, and what it shows.
#[derive(Clone)]
pub struct Alerter {
    firing: watch::Receiver<Vec<Alert>>,
    targets: Vec<Target>,
    sender: Sender,
    defaults: watch::Receiver<Arc<FileRules>>,
}

impl Alerter {
    /// Opens the outbox (in `state_dir`, when there is one) and starts the loop and the
    /// receivers' deliveries on the current runtime, until `cancel`.
    pub fn start(
        engine: Engine,
        config: &AlertsConfig,
        rules: RuleFeed,
        sender: Sender,
        state_dir: Option<PathBuf>,
        cancel: CancellationToken,
    ) -> Self {
        let (firing_tx, firing) = watch::channel(Vec::new());
        let targets = Target::all(config);
        let defaults = rules.files.clone();
        let looped = Loop {
            engine,
            rules: rules::Rules::new(rules.files, rules.declared),
            sender: sender.clone(),
            firing: firing_tx,
        };
        let receivers = config.receivers();
        let limit = config.outbox_limit;
        let delivery = targets.clone();
        tokio::spawn(async move {
            // Reading the journal blocks: off the async workers.
            let opened = tokio::task::spawn_blocking(move || {
                Outbox::open(receivers, limit, state_dir.as_deref())
            })
            .await;
            let Ok(outbox) = opened else {
                tracing::error!("alerts: the outbox could not be opened; no alert will be sent");
                return;
            };
            deliver::start(delivery, &outbox, &cancel);
            looped.run(outbox, cancel).await;
        });
        Self {
            firing,
            targets,
            sender,
            defaults,
        }
    }

    /// The alerts firing now.
    pub fn firing(&self) -> Vec<Alert> {
        self.firing.borrow().clone()
    }

    /// Sends every receiver a test notification, straight (not through the outbox: its answer
    /// is the point), shaped by the defaults so that it is routed like a real one; it ends by
    /// itself after five minutes.
    pub async fn test(&self) -> Vec<TestResult> {
        let defaults = self.defaults.borrow().defaults.clone();
        let now = SystemTime::now();
        let mut labels = defaults.labels.clone();
        labels.insert("alertname".into(), "ProbeEngineTest".into());
        labels.insert("severity".into(), defaults.severity.clone());
        labels.insert("probe_engine".into(), self.sender.label.clone());
        let ms = probe::outcome::unix_ms(now);
        let alert = Alert {
            status: Status::Firing,
            fingerprint: format!("test-{ms}"),
            labels,
            annotations: BTreeMap::from([
                (
                    "summary".to_owned(),
                    "a test notification from probe-engine".to_owned(),
                ),
                ("member".to_owned(), self.sender.member.clone()),
            ]),
            starts_at: rfc3339(now),
            ends_at: Some(rfc3339(now + Duration::from_secs(300))),
            generator_url: format!("{}/v1/alerts", self.sender.api),
            cause: String::new(),
            impacted: Vec::new(),
        };
        let mut results = Vec::new();
        for target in &self.targets {
            let outcome = target.post(std::slice::from_ref(&alert)).await;
            results.push(TestResult {
                receiver: target.name().to_owned(),
                delivered: outcome.is_ok(),
                error: outcome.err(),
            });
        }
        results
    }
}

/// The alerting loop's own state.
struct Loop {
    engine: Engine,
    rules: rules::Rules,
    sender: Sender,
    firing: watch::Sender<Vec<Alert>>,
}

impl Loop {
    async fn run(self, outbox: Outbox, cancel: CancellationToken) {
        let episodes = Episodes::restore(outbox.open_alerts(), SystemTime::now());
        let mut events = self.engine.subscribe();
        let mut reloads = self.rules.reloads();
        let sender = self.sender.clone();
        let mut membership = sender.membership.clone();
        let mut state = (self, episodes);
        let mut first = true;
        loop {
            let member = sender.member();
            outbox.hold(!member);
            // While not a member, nothing decided here counts: the episodes wait as they are.
            if member {
                let out = outbox.clone();
                // A look walks every target, and the outbox syncs to disk before any receiver
                // has what it wrote: off the async workers, which serve the API and probes.
                let (mut looped, mut episodes) = state;
                match tokio::task::spawn_blocking(move || {
                    looped.step(&mut episodes, &out, first);
                    (looped, episodes)
                })
                .await
                {
                    Ok(done) => state = done,
                    Err(e) => {
                        tracing::error!(error = %e, "alerts: the alerting loop failed; no more alerts are sent");
                        return;
                    }
                }
                first = false;
            }
            let next = if state.1.waiting() { TICK } else { IDLE };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(next) => {}
                () = changed(Some(&mut reloads)) => {}
                () = changed(membership.as_mut()) => {}
                _ = events.recv() => {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(SETTLE) => {}
                    }
                    // Everything that came meanwhile is in the next look.
                    while !matches!(
                        events.try_recv(),
                        Err(tokio::sync::broadcast::error::TryRecvError::Empty
                            | tokio::sync::broadcast::error::TryRecvError::Closed)
                    ) {}
                }
            }
        }
    }

    /// One look, and what it changed handed on: to the API's list (only when something did)
    /// and to the outbox.
    fn step(&mut self, episodes: &mut Episodes, outbox: &Outbox, first: bool) {
        self.rules.refresh();
        let changed = self.look(episodes);
        if first || !changed.is_empty() {
            let firing = episodes.firing();
            metrics::gauge!("probe_alerts_firing").set(firing.len() as f64);
            self.firing.send_replace(firing);
        }
        outbox.put(changed);
    }

    /// One look at the engine: the episodes brought up to date, and what changed.
    fn look(&self, episodes: &mut Episodes) -> Vec<Alert> {
        let statuses = self.engine.listing();
        let graph = self.engine.graph();
        let export = graph.export();
        let causes = Causes::of(&export);
        let explain = |id: &probe::TargetId| graph.explain(id).map(|e| e.to_string());
        let world = World {
            statuses: &statuses,
            export: &export,
            causes: &causes,
            groups_ours: self.sender.groups_ours(),
            explain: &explain,
            now: SystemTime::now(),
        };
        episodes.update(&world, &self.rules, &self.sender)
    }
}

/// Waits for the next change `watch` sees; forever without one, or once its sender is gone.
async fn changed<T>(watch: Option<&mut watch::Receiver<T>>) {
    if let Some(watch) = watch
        && watch.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}
