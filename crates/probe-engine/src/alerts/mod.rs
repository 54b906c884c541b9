//! Alerts: the engine's verdicts as notifications, to Alertmanager and to webhooks, one per
//! root cause.
//!
//! A loop reads the engine's snapshots (every 250 ms, and at once after a transition) and keeps
//! an *episode* per target whose rule says to alert: pending from the moment the target is in
//! one of its `on` states, firing once it has been there for `for`, resolved when it leaves.
//! A target that is `dependency_down` because of another ([`Causes`]) does not fire: its root
//! does, and the root's alert lists what it impacts. An episode is named by a fingerprint of its
//! target, alert name and start, so a notification sent again is the same notification.
//!
//! Delivery is per receiver (`deliver`): Alertmanager gets every firing alert again every
//! `resend`, as Prometheus sends them, so a restarted Alertmanager learns them again; a webhook
//! gets each change once, retried with backoff until it answers 2xx. One slow receiver holds
//! back no other.

mod deliver;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use probe::engine::{Engine, TargetStatus};
use probe::graph::Causes;
use probe::target::TargetId;
use probe::verdict::HealthState;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{AlertRule, AlertsConfig};

/// How often the episodes are brought up to date when nothing else wakes the loop.
const TICK: Duration = Duration::from_millis(250);

/// One alert as the receivers get it: Alertmanager's v2 fields, plus the cause and what it
/// impacts for webhooks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Alert {
    /// `firing` or `resolved`.
    pub status: &'static str,
    /// The episode's name: its target, alert name and start.
    pub fingerprint: String,
    /// `alertname`, `target`, `severity`, `probe_engine`, `root_cause` and the rule's own.
    pub labels: BTreeMap<String, String>,
    /// `summary`, `reason`, `detail`, `impacted` and the rule's own.
    pub annotations: BTreeMap<String, String>,
    /// When the episode began (RFC 3339).
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// When it ended, once resolved.
    #[serde(rename = "endsAt", skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    /// The target's page in the API.
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
    /// The root cause: the target itself, for an alert that fires.
    pub cause: String,
    /// What the root cause makes `dependency_down`.
    pub impacted: Vec<String>,
}

/// Where the alerting loop stands, for `GET /v1/alerts`.
#[derive(Clone, Debug, Default)]
pub struct Firing(pub Vec<Alert>);

/// The alerting loop, and what it shows.
#[derive(Clone)]
pub struct Alerter {
    firing: watch::Receiver<Firing>,
}

/// Who sends: the member's name (a label of every alert), where its API is (the alerts'
/// `generatorURL`) and, in a cluster, its membership: a member whose lease is lost sends
/// nothing (its targets are someone else's now, or will be), and goes on from where it was once
/// it is a member again.
#[derive(Clone, Debug)]
pub struct Sender {
    /// `probe_engine` label.
    pub name: String,
    /// `http://HOST:PORT` of the API.
    pub api: String,
    /// The member set as this member sees it, in a cluster.
    pub membership: Option<watch::Receiver<probe_etcd::membership::View>>,
}

/// A target's episode.
#[derive(Clone, Debug)]
enum Episode {
    /// In an `on` state (or flapping) since then, not for long enough yet.
    Pending {
        since: SystemTime,
        name: &'static str,
    },
    /// Firing since then.
    Firing { alert: Alert, name: &'static str },
}

impl Alerter {
    /// Starts the loop and the receivers' deliveries on the current runtime, until `cancel`.
    pub fn start(
        engine: Engine,
        config: AlertsConfig,
        rules: BTreeMap<TargetId, Option<AlertRule>>,
        sender: Sender,
        cancel: CancellationToken,
    ) -> Self {
        let (firing_tx, firing) = watch::channel(Firing::default());
        let outbox = deliver::start(&config, cancel.clone());
        tokio::spawn(evaluate(engine, rules, sender, outbox, firing_tx, cancel));
        Self { firing }
    }

    /// The alerts firing now.
    pub fn firing(&self) -> Vec<Alert> {
        self.firing.borrow().0.clone()
    }
}

async fn evaluate(
    engine: Engine,
    rules: BTreeMap<TargetId, Option<AlertRule>>,
    sender: Sender,
    outbox: deliver::Outbox,
    firing: watch::Sender<Firing>,
    cancel: CancellationToken,
) {
    let mut events = engine.subscribe();
    let mut episodes: BTreeMap<TargetId, Episode> = BTreeMap::new();
    loop {
        let member = sender
            .membership
            .as_ref()
            .is_none_or(|view| view.borrow().lease == probe_etcd::membership::Lease::Live);
        outbox.hold(!member);
        if !member {
            // Nothing decided here counts now: the episodes wait as they are.
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
            }
            continue;
        }
        let statuses = engine.listing();
        let causes = engine.with_graph(|g| Causes::of(&g.export()));
        let now = SystemTime::now();
        let mut changed = Vec::new();
        for status in &statuses {
            let Some(Some(rule)) = rules.get(&status.id) else {
                continue;
            };
            step(
                &mut episodes,
                status,
                rule,
                &causes,
                &sender,
                now,
                &mut changed,
            );
        }
        // The listing is sorted by id: one lookup each, not a scan.
        episodes.retain(|id, _| statuses.binary_search_by(|s| s.id.cmp(id)).is_ok());
        let now_firing: Vec<Alert> = episodes
            .values()
            .filter_map(|e| match e {
                Episode::Firing { alert, .. } => Some(alert.clone()),
                Episode::Pending { .. } => None,
            })
            .collect();
        metrics::gauge!("probe_alerts_firing").set(now_firing.len() as f64);
        firing.send_replace(Firing(now_firing.clone()));
        outbox.update(now_firing, changed);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
            _ = events.recv() => {}
        }
    }
}

/// The alert a target's status calls for under `rule`, by name: `ProbeFlapping` while it
/// flaps (one alert stands, instead of one fired and resolved at every change), else its state's
/// when that is one of the rule's `on` states; `None` when it is fine.
fn wanted(status: &TargetStatus, rule: &AlertRule) -> Option<&'static str> {
    if status.flapping {
        return Some("ProbeFlapping");
    }
    rule.on
        .contains(&status.state)
        .then_some(match status.state {
            HealthState::Down => "ProbeDown",
            HealthState::Degraded => "ProbeDegraded",
            HealthState::Probing => "ProbeProbing",
            HealthState::Maintenance => "ProbeMaintenance",
            HealthState::Up => "ProbeUp",
        })
}

/// Brings one target's episode up to date; what changed (fired, resolved, its impacts moved)
/// goes to `changed`.
fn step(
    episodes: &mut BTreeMap<TargetId, Episode>,
    status: &TargetStatus,
    rule: &AlertRule,
    causes: &Causes,
    sender: &Sender,
    now: SystemTime,
    changed: &mut Vec<Alert>,
) {
    // In a cluster, a target's alerts are its owner's to send.
    let ours = status.placement.as_ref().is_none_or(|p| p.role.decides());
    let wanted = wanted(status, rule).filter(|_| ours && !causes.is_impacted(&status.id));
    let impacted: Vec<String> = causes
        .impacts
        .get(&status.id)
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    let id = &status.id;
    let since = match episodes.remove(id) {
        None => now,
        Some(Episode::Pending { since, name }) if Some(name) == wanted => since,
        Some(Episode::Pending { .. }) => now,
        Some(Episode::Firing { mut alert, name }) if Some(name) == wanted => {
            if alert.impacted != impacted {
                impacts(&mut alert, &impacted);
                changed.push(alert.clone());
            }
            episodes.insert(id.clone(), Episode::Firing { alert, name });
            return;
        }
        // Fine now, or another alert is called for: this one resolves (a member that no longer
        // owns the target leaves that to the new owner).
        Some(Episode::Firing { mut alert, .. }) => {
            if ours {
                alert.status = "resolved";
                alert.ends_at = Some(rfc3339(now));
                changed.push(alert);
            }
            now
        }
    };
    let Some(name) = wanted else { return };
    let episode = if now.duration_since(since).unwrap_or_default() < rule.hold {
        Episode::Pending { since, name }
    } else {
        let alert = alert(status, name, rule, sender, since, &impacted);
        changed.push(alert.clone());
        Episode::Firing { alert, name }
    };
    episodes.insert(id.clone(), episode);
}

/// The alert `name` of a target that fires.
fn alert(
    status: &TargetStatus,
    name: &'static str,
    rule: &AlertRule,
    sender: &Sender,
    since: SystemTime,
    impacted: &[String],
) -> Alert {
    let id = status.id.as_str();
    let mut labels = rule.labels.clone();
    labels.insert("alertname".into(), name.into());
    labels.insert("target".into(), id.into());
    labels.insert("severity".into(), rule.severity.clone());
    labels.insert("probe_engine".into(), sender.name.clone());
    // For Alertmanager inhibit rules: alerts from elsewhere about what this one impacts.
    labels.insert("root_cause".into(), id.into());
    let mut annotations = rule.annotations.clone();
    let summary = if name == "ProbeFlapping" {
        format!("{id} is flapping")
    } else {
        format!("{id} is {}", status.state)
    };
    annotations.insert("summary".into(), summary);
    if let Some(failure) = &status.last_failure {
        annotations.insert("reason".into(), failure.reason.as_str().into());
        annotations.insert("detail".into(), failure.detail.clone());
    }
    let mut alert = Alert {
        status: "firing",
        fingerprint: fingerprint(id, name, since),
        labels,
        annotations,
        starts_at: rfc3339(since),
        ends_at: None,
        generator_url: format!("{}/v1/targets/{id}", sender.api),
        cause: id.into(),
        impacted: Vec::new(),
    };
    impacts(&mut alert, impacted);
    alert
}

/// Sets what the alert's cause impacts, in the field and in an annotation.
fn impacts(alert: &mut Alert, impacted: &[String]) {
    alert.impacted = impacted.to_vec();
    if impacted.is_empty() {
        alert.annotations.remove("impacted");
    } else {
        alert
            .annotations
            .insert("impacted".into(), impacted.join(", "));
    }
}

/// A stable name for one episode: FNV-1a over its target, alert name and start (ms).
fn fingerprint(target: &str, name: &str, since: SystemTime) -> String {
    let ms = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let text = format!("{target}\u{0}{name}\u{0}{ms}");
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}
