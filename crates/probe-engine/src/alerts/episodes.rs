//! Episodes: which alerts stand, brought up to date from one look at the engine.
//!
//! A target's alert is called for while it is in one of its rule's `on` states (or flapping),
//! and fires once the state has held for `for`: counted from when the state began, as the
//! target's status says, so the episode is named (fingerprinted) by that time, and every member
//! of a cluster that takes the target over names it the same. It is not called for while:
//! - the target is `dependency_down` and one of its root causes alerts on DOWN (the root's alert
//!   fires instead and lists it as impacted; a root that does not alert leaves its dependents to
//!   alert for themselves);
//! - the target, or one of its critical dependencies (directly or through others), is in
//!   maintenance: the work an operator announced pages no one. A target whose first verdict
//!   after its maintenance is in an `on` state fires at once: the operator's window ended with
//!   it broken;
//! - another member decides it: that member alerts.
//!
//! A group alerts (`GroupUnhealthy`) while its verdict ([`probe::graph::GroupRule`]: its score
//! and critical dependencies, judged) is in one of its rule's `on` states, from when this member
//! first saw it so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use probe::TargetId;
use probe::cluster::Role;
use probe::engine::TargetStatus;
use probe::graph::{Causes, Export, NodeKind, NodeStatus};
use probe::health::HealthState;

use super::rules::Rules;
use super::{Alert, Sender, Status, rfc3339};
use probe_config::AlertRule;

/// How long an episode restored from the outbox waits for a target that is not declared (yet):
/// etcd's targets arrive after start-up.
const RESTORED_GRACE: Duration = Duration::from_secs(120);

/// The longest a DOWN target waits for its critical dependencies' next results before it pages
/// ([`Step::unconfirmed`]).
const CONFIRM_MAX: Duration = Duration::from_secs(30);

/// At most this many ids in the `impacted` annotation; the `impacted` field has them all.
const IMPACTED_SHOWN: usize = 20;

/// The alert names, as Alertmanager's `alertname` label.
const NAMES: [&str; 4] = [
    "ProbeDown",
    "ProbeDegraded",
    "ProbeFlapping",
    "GroupUnhealthy",
];

/// One target's or group's episode.
#[derive(Clone, Debug)]
enum Episode {
    /// Firing for the state that began at `since`; `None` for an episode restored after a
    /// restart, which goes on once the target has a verdict again (and ends if it is not the
    /// same alert).
    Firing {
        alert: Box<Alert>,
        name: &'static str,
        since: Option<SystemTime>,
    },
    /// A group unhealthy since then, not for long enough yet.
    Pending { since: SystemTime },
    /// In maintenance, or out of it without a verdict yet.
    Maintenance,
}

/// What one look at the engine shows.
pub(super) struct World<'a> {
    /// Every target, sorted by id.
    pub statuses: &'a [std::sync::Arc<TargetStatus>],
    /// The graph: groups, scores and edges.
    pub export: &'a Export,
    /// Roots and what they impact.
    pub causes: &'a Causes,
    /// Whether this member sends the groups' alerts (the first member by name, in a cluster).
    pub groups_ours: bool,
    /// A group's score explained, for its alert.
    pub explain: &'a dyn Fn(&TargetId) -> Option<String>,
    pub now: SystemTime,
}

/// Every standing episode.
pub(super) struct Episodes {
    by_id: BTreeMap<TargetId, Episode>,
    started: SystemTime,
    /// Whether the last update held an alert back for its `for`, or saw a group with a score
    /// threshold (scores move with results, which wake no one): the next look is due soon.
    waiting: bool,
}

impl Episodes {
    /// Starts from the alerts that were firing when the daemon stopped.
    pub fn restore(open: Vec<Alert>, started: SystemTime) -> Self {
        let by_id = open
            .into_iter()
            .filter_map(|alert| {
                let name = NAMES
                    .into_iter()
                    .find(|n| alert.labels.get("alertname").map(String::as_str) == Some(*n))?;
                let id = alert.labels.get("target")?.parse::<TargetId>().ok()?;
                Some((
                    id,
                    Episode::Firing {
                        alert: Box::new(alert),
                        name,
                        since: None,
                    },
                ))
            })
            .collect();
        Self {
            by_id,
            started,
            waiting: false,
        }
    }

    /// Whether `status` is in maintenance, or just out of it without a verdict yet (silent
    /// still: its first verdict decides).
    fn in_maintenance(&self, status: &TargetStatus) -> bool {
        status.state == HealthState::Maintenance
            || (status.state == HealthState::Probing
                && !status.flapping
                && matches!(self.by_id.get(&status.id), Some(Episode::Maintenance)))
    }

    /// Whether the next look is due soon: the last one held an alert back for its `for`, or
    /// saw a group with a score threshold (scores move with results, which wake no one).
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// The alerts firing now.
    pub fn firing(&self) -> Vec<Alert> {
        self.by_id
            .values()
            .filter_map(|e| match e {
                Episode::Firing { alert, .. } => Some((**alert).clone()),
                Episode::Pending { .. } | Episode::Maintenance => None,
            })
            .collect()
    }

    /// Brings every episode up to date with `world`; returns what changed (fired, resolved,
    /// its impacts moved), in that order.
    pub fn update(&mut self, world: &World<'_>, rules: &Rules, sender: &Sender) -> Vec<Alert> {
        let silenced = silenced(world, |status| self.in_maintenance(status));
        let ctx = Step {
            world,
            rules,
            sender,
            silenced: &silenced,
            groups: groups_of(world.export),
            critical: critical_of(world.export),
            waiting: std::cell::Cell::new(false),
        };
        let mut changed = Vec::new();
        for status in world.statuses {
            let prev = self.by_id.remove(&status.id);
            if let Some(next) = ctx.target(status, prev, &mut changed) {
                self.by_id.insert(status.id.clone(), next);
            }
        }
        let mut groups = BTreeSet::new();
        for node in world
            .export
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Group)
        {
            groups.insert(&node.id);
            let prev = self.by_id.remove(&node.id);
            if let Some(next) = ctx.group(node, prev, &mut changed) {
                self.by_id.insert(node.id.clone(), next);
            }
        }
        // What is neither a target nor a group any more: its alert resolves (an episode
        // restored for a target not declared yet waits a while first).
        let known = |id: &TargetId| {
            groups.contains(id) || world.statuses.binary_search_by(|s| s.id.cmp(id)).is_ok()
        };
        self.waiting = ctx.waiting.get();
        let grace_over = world.now >= self.started + RESTORED_GRACE;
        self.by_id.retain(|id, episode| {
            if known(id) {
                return true;
            }
            match episode {
                Episode::Firing { since: None, .. } if !grace_over => true,
                Episode::Firing { alert, .. } => {
                    changed.push(resolved((**alert).clone(), world.now));
                    false
                }
                Episode::Pending { .. } | Episode::Maintenance => false,
            }
        });
        changed
    }
}

/// What every step of one update shares.
struct Step<'a> {
    world: &'a World<'a>,
    rules: &'a Rules,
    sender: &'a Sender,
    silenced: &'a BTreeSet<TargetId>,
    /// The groups each node is a member of (a group depends on it), for the `groups` label.
    groups: BTreeMap<&'a TargetId, Vec<&'a str>>,
    /// Each node's critical dependencies.
    critical: BTreeMap<&'a TargetId, Vec<&'a TargetId>>,
    /// Set when this update leaves something for a later look (see [`Episodes::waiting`]).
    waiting: std::cell::Cell<bool>,
}

impl Step<'_> {
    /// Whether `id` is `dependency_down` behind a root whose own alert covers it.
    fn covered(&self, id: &TargetId) -> bool {
        self.world.causes.roots.get(id).is_some_and(|roots| {
            roots.iter().any(|root| {
                self.rules
                    .of(root)
                    .is_some_and(|r| r.on.contains(&HealthState::Down))
            })
        })
    }

    fn target(
        &self,
        status: &TargetStatus,
        prev: Option<Episode>,
        changed: &mut Vec<Alert>,
    ) -> Option<Episode> {
        // Restored, and the target has no verdict yet since the restart: it waits.
        if let Some(Episode::Firing { since: None, .. }) = &prev
            && status.since.is_none()
        {
            return prev;
        }
        let id = &status.id;
        let ours = status.placement.as_ref().is_none_or(|p| p.role.decides());
        let rule = self.rules.of(id);
        let call = rule
            .filter(|_| ours && !self.silenced.contains(id) && !self.covered(id))
            .and_then(|rule| Some((wanted(status, rule)?, rule)));
        let after_maintenance = matches!(prev, Some(Episode::Maintenance));
        match prev {
            Some(Episode::Firing {
                mut alert,
                name,
                since,
            }) => {
                let goes_on = call.is_some_and(|(n, _)| n == name)
                    && (since.is_none() || since == status.since);
                if goes_on {
                    let impacted = self.impacted(id);
                    if alert.impacted != impacted {
                        impacts(&mut alert, &impacted);
                        changed.push((*alert).clone());
                    }
                    return Some(Episode::Firing {
                        alert,
                        name,
                        since: status.since,
                    });
                }
                // Over, or another alert is called for. A member that no longer decides the
                // target leaves its end to the member that does.
                if ours {
                    changed.push(resolved(*alert, self.world.now));
                }
            }
            Some(Episode::Pending { .. } | Episode::Maintenance) | None => {}
        }
        if let (Some((name, rule)), Some(since)) = (call, status.since) {
            let held = self.world.now.duration_since(since).unwrap_or_default() >= rule.hold
                && !(name == "ProbeDown" && self.unconfirmed(id, since));
            self.waiting
                .set(self.waiting.get() || !(held || after_maintenance));
            if held || after_maintenance {
                let alert = self.fire(id, name, rule, since, |a| {
                    target_annotations(a, status, name);
                });
                changed.push(alert.clone());
                return Some(Episode::Firing {
                    alert: Box::new(alert),
                    name,
                    since: Some(since),
                });
            }
        }
        let in_maintenance = status.state == HealthState::Maintenance
            || (after_maintenance && status.state == HealthState::Probing && !status.flapping);
        in_maintenance.then_some(Episode::Maintenance)
    }

    /// Whether one of `id`'s critical dependencies (through groups) may yet turn out to be why
    /// it went DOWN at `since`: it is probed here, not DOWN, and has had no result since then.
    /// A dependent's probe often fails before its dependency's does; waiting for that result
    /// (one interval of the dependency and a second at most, and [`CONFIRM_MAX`]) is what lets
    /// the root page alone.
    fn unconfirmed(&self, id: &TargetId, since: SystemTime) -> bool {
        let waited = self.world.now.duration_since(since).unwrap_or_default();
        if waited >= CONFIRM_MAX {
            return false;
        }
        let mut stack: Vec<&TargetId> = self.critical.get(id).cloned().unwrap_or_default();
        let mut seen = BTreeSet::new();
        while let Some(dep) = stack.pop() {
            if !seen.insert(dep) {
                continue;
            }
            let Ok(at) = self.world.statuses.binary_search_by(|s| s.id.cmp(dep)) else {
                // A group: its own critical dependencies count.
                stack.extend(self.critical.get(dep).into_iter().flatten().copied());
                continue;
            };
            let dep = &self.world.statuses[at];
            let probed_here = dep
                .placement
                .as_ref()
                .is_none_or(|p| p.role != Role::Follow);
            // Its next run and answer, with a second for a busy scheduler's lateness.
            let due = dep.schedule.interval() + dep.schedule.timeout() + Duration::from_secs(1);
            let fresh = dep.last.is_some_and(|last| last.at() >= since);
            if probed_here && dep.state != HealthState::Down && !fresh && waited < due {
                self.waiting.set(true);
                return true;
            }
        }
        false
    }

    fn group(
        &self,
        node: &NodeStatus,
        prev: Option<Episode>,
        changed: &mut Vec<Alert>,
    ) -> Option<Episode> {
        let id = &node.id;
        let state = node.state.unwrap_or(HealthState::Probing);
        // Restored, and the group has no verdict again yet: it waits.
        if let Some(Episode::Firing { since: None, .. }) = &prev
            && state == HealthState::Probing
        {
            return prev;
        }
        let rule = self
            .rules
            .of(id)
            .filter(|_| self.world.groups_ours && !self.silenced.contains(id) && !self.covered(id));
        let unhealthy = rule.filter(|rule| rule.on.contains(&state));
        let Some(rule) = unhealthy else {
            if let Some(Episode::Firing { alert, .. }) = prev {
                changed.push(resolved(*alert, self.world.now));
            }
            return None;
        };
        let since = match prev {
            Some(Episode::Firing {
                mut alert,
                name,
                since,
            }) => {
                let impacted = self.impacted(id);
                if alert.impacted != impacted {
                    impacts(&mut alert, &impacted);
                    changed.push((*alert).clone());
                }
                return Some(Episode::Firing { alert, name, since });
            }
            Some(Episode::Pending { since }) => since,
            Some(Episode::Maintenance) | None => self.world.now,
        };
        if self.world.now.duration_since(since).unwrap_or_default() < rule.hold {
            self.waiting.set(true);
            return Some(Episode::Pending { since });
        }
        let alert = self.fire(id, "GroupUnhealthy", rule, since, |a| {
            let summary = match node.score {
                _ if node.dependency_down => {
                    format!("{id} is {state}: a critical dependency is DOWN")
                }
                Some(score) => format!("{id} is {state}: score {score:.2}"),
                None => format!("{id} is {state}"),
            };
            a.annotations.insert("summary".into(), summary);
            if let Some(explained) = (self.world.explain)(id) {
                a.annotations.insert("explain".into(), explained);
            }
        });
        changed.push(alert.clone());
        Some(Episode::Firing {
            alert: Box::new(alert),
            name: "GroupUnhealthy",
            since: Some(since),
        })
    }

    /// What `id`'s failure takes down, sorted.
    fn impacted(&self, id: &TargetId) -> Vec<String> {
        self.world
            .causes
            .impacts
            .get(id)
            .into_iter()
            .flatten()
            .map(ToString::to_string)
            .collect()
    }

    /// The firing alert `name` of `id` under `rule`, for the episode that began at `since`.
    fn fire(
        &self,
        id: &TargetId,
        name: &'static str,
        rule: &AlertRule,
        since: SystemTime,
        annotate: impl FnOnce(&mut Alert),
    ) -> Alert {
        let mut labels = rule.labels.clone();
        labels.insert("alertname".into(), name.into());
        labels.insert("target".into(), id.to_string());
        labels.insert("severity".into(), rule.severity.clone());
        labels.insert("probe_engine".into(), self.sender.label.clone());
        if let Some(groups) = self.groups.get(id) {
            labels.insert("groups".into(), groups.join(","));
        }
        // For Alertmanager inhibit rules: alerts from elsewhere about what this one impacts.
        labels.insert("root_cause".into(), id.to_string());
        let mut alert = Alert {
            status: Status::Firing,
            fingerprint: fingerprint(id.as_str(), name, since),
            labels,
            annotations: rule.annotations.clone(),
            starts_at: rfc3339(since),
            ends_at: None,
            generator_url: format!("{}/v1/targets/{id}", self.sender.api),
            cause: id.to_string(),
            impacted: Vec::new(),
        };
        alert
            .annotations
            .insert("member".into(), self.sender.member.clone());
        annotate(&mut alert);
        impacts(&mut alert, &self.impacted(id));
        alert
    }
}

/// The alert a target's status calls for under `rule`, by name: `ProbeFlapping` while it flaps
/// (one alert stands, instead of one fired and resolved at every change), else its state's when
/// that is one of the rule's `on` states.
fn wanted(status: &TargetStatus, rule: &AlertRule) -> Option<&'static str> {
    if status.flapping {
        return Some("ProbeFlapping");
    }
    if !rule.on.contains(&status.state) {
        return None;
    }
    match status.state {
        HealthState::Down => Some("ProbeDown"),
        HealthState::Degraded => Some("ProbeDegraded"),
        HealthState::Up | HealthState::Probing | HealthState::Maintenance => None,
    }
}

/// A target's summary, and the failure behind it.
fn target_annotations(alert: &mut Alert, status: &TargetStatus, name: &str) {
    let id = &status.id;
    let summary = if name == "ProbeFlapping" {
        format!("{id} is flapping")
    } else {
        format!("{id} is {}", status.state)
    };
    alert.annotations.insert("summary".into(), summary);
    if let Some(failure) = &status.last_failure {
        alert
            .annotations
            .insert("reason".into(), failure.reason.as_str().into());
        alert
            .annotations
            .insert("detail".into(), failure.detail.clone());
    }
    if !status.degraded_reasons.is_empty() && status.state == HealthState::Degraded {
        alert
            .annotations
            .insert("degraded".into(), status.degraded_reasons.join("; "));
    }
}

/// Each node's critical dependencies.
fn critical_of(export: &Export) -> BTreeMap<&TargetId, Vec<&TargetId>> {
    let mut of: BTreeMap<&TargetId, Vec<&TargetId>> = BTreeMap::new();
    for edge in export.edges.iter().filter(|e| e.critical) {
        of.entry(&edge.from).or_default().push(&edge.to);
    }
    of
}

/// The groups each node is a direct member of, sorted.
fn groups_of(export: &Export) -> BTreeMap<&TargetId, Vec<&str>> {
    let groups: BTreeSet<&TargetId> = export
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Group)
        .map(|n| &n.id)
        .collect();
    let mut of: BTreeMap<&TargetId, Vec<&str>> = BTreeMap::new();
    if groups.is_empty() {
        return of;
    }
    for edge in export.edges.iter().filter(|e| groups.contains(&e.from)) {
        of.entry(&edge.to).or_default().push(edge.from.as_str());
    }
    for members in of.values_mut() {
        members.sort_unstable();
        members.dedup();
    }
    of
}

/// The targets and groups no alert fires for because of maintenance: those in it, and
/// everything that depends on one of them critically, directly or through others.
fn silenced(
    world: &World<'_>,
    in_maintenance: impl Fn(&TargetStatus) -> bool,
) -> BTreeSet<TargetId> {
    let mut silenced: BTreeSet<TargetId> = world
        .statuses
        .iter()
        .filter(|s| in_maintenance(s))
        .map(|s| s.id.clone())
        .collect();
    if silenced.is_empty() {
        return silenced;
    }
    let mut dependents: BTreeMap<&TargetId, Vec<&TargetId>> = BTreeMap::new();
    for edge in world.export.edges.iter().filter(|e| e.critical) {
        dependents.entry(&edge.to).or_default().push(&edge.from);
    }
    let mut stack: Vec<TargetId> = silenced.iter().cloned().collect();
    while let Some(id) = stack.pop() {
        for &up in dependents.get(&id).into_iter().flatten() {
            if silenced.insert(up.clone()) {
                stack.push(up.clone());
            }
        }
    }
    silenced
}

/// Sets what the alert's cause impacts: all of it in the field, the first few in an annotation.
fn impacts(alert: &mut Alert, impacted: &[String]) {
    impacted.clone_into(&mut alert.impacted);
    if impacted.is_empty() {
        alert.annotations.remove("impacted");
        return;
    }
    let mut shown = impacted[..impacted.len().min(IMPACTED_SHOWN)].join(", ");
    if impacted.len() > IMPACTED_SHOWN {
        shown.push_str(&format!(" and {} more", impacted.len() - IMPACTED_SHOWN));
    }
    alert.annotations.insert("impacted".into(), shown);
}

/// `alert`, resolved at `now`.
fn resolved(mut alert: Alert, now: SystemTime) -> Alert {
    alert.status = Status::Resolved;
    alert.ends_at = Some(rfc3339(now));
    alert
}

/// A stable name for one episode: FNV-1a over its target, alert name and start (ms).
fn fingerprint(target: &str, name: &str, since: SystemTime) -> String {
    let ms = probe::outcome::unix_ms(since);
    let text = format!("{target}\u{0}{name}\u{0}{ms}");
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    use probe::cluster::Placement;
    use probe::graph::Edge;
    use probe::health::{Schedule, ScheduleSettings};
    use probe::outcome::{Failure, FailureReason, Outcome, Verdict};
    use tokio::sync::watch;

    use super::*;
    use crate::alerts::rules::{DeclaredAlerts, FileRules};

    /// Second `s` of the test's clock.
    fn t(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn id(s: &str) -> TargetId {
        TargetId::new(s).expect("a valid id")
    }

    /// A hand-made look at the engine: targets, groups and edges, and the rules.
    struct Fleet {
        targets: BTreeMap<TargetId, TargetStatus>,
        groups: BTreeMap<TargetId, (Option<f64>, HealthState)>,
        edges: Vec<Edge>,
        rules: FileRules,
        groups_ours: bool,
    }

    impl Fleet {
        fn new() -> Self {
            Self {
                targets: BTreeMap::new(),
                groups: BTreeMap::new(),
                edges: Vec::new(),
                rules: FileRules::default(),
                groups_ours: true,
            }
        }

        /// Declares (or replaces) target `name`, in `state` since second `since`.
        fn target(&mut self, name: &str, state: HealthState, since: u64) -> &mut TargetStatus {
            let status = TargetStatus {
                id: id(name),
                kind: "tcp",
                state,
                flapping: false,
                pending: None,
                last: None,
                last_failure: None,
                degraded_reasons: Vec::new(),
                signals: Vec::new(),
                note: None,
                tls: None,
                maintenance: None,
                consecutive_successes: 0,
                consecutive_failures: 0,
                transitions: 0,
                since: Some(t(since)),
                schedule: Schedule::default(),
                history: Vec::new(),
                score: None,
                dependency_down: false,
                pool: None,
                circuit: None,
                placement: None,
            };
            self.targets.insert(id(name), status);
            self.targets.get_mut(&id(name)).expect("just inserted")
        }

        /// A group with `score`, and the verdict the default rule settles on for it (UP from
        /// 0.8, DEGRADED from 0.5, DOWN under; PROBING while unknown); DOWN with a critical
        /// dependency DOWN, as the graph judges it.
        fn group(&mut self, name: &str, score: Option<f64>) {
            let state = match score {
                None => HealthState::Probing,
                Some(s) if s >= 0.8 => HealthState::Up,
                Some(s) if s >= 0.5 => HealthState::Degraded,
                Some(_) => HealthState::Down,
            };
            self.groups.insert(id(name), (score, state));
        }

        fn depends(&mut self, from: &str, to: &str, critical: bool) {
            self.edges.push(Edge {
                from: id(from),
                to: id(to),
                weight: 1.0,
                critical,
            });
        }

        fn rule(&mut self, name: &str, rule: Option<AlertRule>) {
            self.rules.by_id.insert(id(name), rule);
        }

        /// Whether `node` has a critical dependency that is DOWN (a group never is), as the
        /// graph says.
        fn dependency_down(&self, node: &TargetId) -> bool {
            self.edges
                .iter()
                .filter(|e| e.critical && &e.from == node)
                .any(|e| {
                    self.targets
                        .get(&e.to)
                        .is_some_and(|s| s.state == HealthState::Down)
                })
        }

        /// One update of `episodes` at second `now`.
        fn look(&self, episodes: &mut Episodes, now: u64) -> Vec<Alert> {
            let statuses: Vec<Arc<TargetStatus>> =
                self.targets.values().cloned().map(Arc::new).collect();
            let probed = self.targets.values().map(|s| NodeStatus {
                id: s.id.clone(),
                kind: NodeKind::Probed,
                score: None,
                dependency_down: self.dependency_down(&s.id),
                state: Some(s.state),
                flapping: s.flapping,
            });
            let groups = self.groups.iter().map(|(id, (score, state))| {
                let dependency_down = self.dependency_down(id);
                NodeStatus {
                    id: id.clone(),
                    kind: NodeKind::Group,
                    score: *score,
                    dependency_down,
                    state: Some(if dependency_down {
                        HealthState::Down
                    } else {
                        *state
                    }),
                    flapping: false,
                }
            });
            let export = Export {
                nodes: probed.chain(groups).collect(),
                edges: self.edges.clone(),
            };
            let causes = Causes::of(&export);
            let (_files, feed) = watch::channel(Arc::new(self.rules.clone()));
            let rules = Rules::new(feed, Arc::new(DeclaredAlerts::default()));
            let sender = Sender {
                label: "shop".into(),
                member: "m1".into(),
                api: "http://127.0.0.1:9464".into(),
                membership: None,
            };
            let explain = |id: &TargetId| Some(format!("{id} explained"));
            let world = World {
                statuses: &statuses,
                export: &export,
                causes: &causes,
                groups_ours: self.groups_ours,
                explain: &explain,
                now: t(now),
            };
            episodes.update(&world, &rules, &sender)
        }
    }

    fn fresh() -> Episodes {
        Episodes::restore(Vec::new(), t(0))
    }

    /// `(alertname, target, status)` of each alert, in order.
    fn summary(alerts: &[Alert]) -> Vec<(String, String, Status)> {
        alerts
            .iter()
            .map(|a| (a.labels["alertname"].clone(), a.cause.clone(), a.status))
            .collect()
    }

    fn firing(name: &str, target: &str) -> (String, String, Status) {
        (name.into(), target.into(), Status::Firing)
    }

    fn resolved_(name: &str, target: &str) -> (String, String, Status) {
        (name.into(), target.into(), Status::Resolved)
    }

    fn held(hold: u64) -> AlertRule {
        AlertRule {
            hold: Duration::from_secs(hold),
            ..AlertRule::default()
        }
    }

    #[test]
    fn a_down_target_fires_once_with_its_labels_and_resolves_when_it_is_up() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Down, 100).last_failure =
            Some(Failure::new(FailureReason::Refused, "connection refused"));
        fleet.group("backend", Some(1.0));
        fleet.group("shop", Some(1.0));
        fleet.depends("shop", "db", false);
        fleet.depends("backend", "db", false);
        let mut episodes = fresh();

        let fired = fleet.look(&mut episodes, 100);
        assert_eq!(summary(&fired), [firing("ProbeDown", "db")]);
        let alert = &fired[0];
        let labels: Vec<(&str, &str)> = alert
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("alertname", "ProbeDown"),
                ("groups", "backend,shop"),
                ("probe_engine", "shop"),
                ("root_cause", "db"),
                ("severity", "page"),
                ("target", "db"),
            ]
        );
        let annotations: Vec<(&str, &str)> = alert
            .annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            annotations,
            [
                ("detail", "connection refused"),
                ("member", "m1"),
                ("reason", "refused"),
                ("summary", "db is DOWN"),
            ]
        );
        assert_eq!(alert.starts_at, rfc3339(t(100)));
        assert_eq!(alert.ends_at, None);
        assert_eq!(alert.generator_url, "http://127.0.0.1:9464/v1/targets/db");
        assert_eq!(alert.fingerprint, fingerprint("db", "ProbeDown", t(100)));
        assert!(alert.impacted.is_empty());
        assert!(!episodes.waiting());

        assert!(fleet.look(&mut episodes, 105).is_empty(), "fired once");
        assert_eq!(summary(&episodes.firing()), [firing("ProbeDown", "db")]);

        fleet.target("db", HealthState::Up, 110);
        let ended = fleet.look(&mut episodes, 111);
        assert_eq!(summary(&ended), [resolved_("ProbeDown", "db")]);
        assert_eq!(ended[0].fingerprint, alert.fingerprint);
        assert_eq!(ended[0].starts_at, alert.starts_at);
        assert_eq!(ended[0].ends_at, Some(rfc3339(t(111))));
        assert!(episodes.firing().is_empty());
        assert!(fleet.look(&mut episodes, 112).is_empty());
    }

    #[test]
    fn an_alert_fires_once_its_state_has_held_for_its_for() {
        let mut fleet = Fleet::new();
        fleet.rule("db", Some(held(60)));
        fleet.target("db", HealthState::Down, 100);
        let mut episodes = fresh();

        assert!(fleet.look(&mut episodes, 130).is_empty());
        assert!(episodes.waiting(), "a look is due when the hold ends");
        assert!(fleet.look(&mut episodes, 159).is_empty());
        let fired = fleet.look(&mut episodes, 160);
        assert_eq!(summary(&fired), [firing("ProbeDown", "db")]);
        assert_eq!(
            fired[0].starts_at,
            rfc3339(t(100)),
            "counted from the state"
        );
        assert!(!episodes.waiting());
    }

    #[test]
    fn a_state_that_began_again_between_looks_is_a_new_episode() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Down, 100);
        let mut episodes = fresh();
        let first = fleet.look(&mut episodes, 100);

        fleet.target("db", HealthState::Down, 200);
        let next = fleet.look(&mut episodes, 200);
        assert_eq!(
            summary(&next),
            [resolved_("ProbeDown", "db"), firing("ProbeDown", "db")]
        );
        assert_eq!(next[0].fingerprint, first[0].fingerprint);
        assert_eq!(next[1].fingerprint, fingerprint("db", "ProbeDown", t(200)));
        assert_ne!(next[1].fingerprint, first[0].fingerprint);
    }

    #[test]
    fn flapping_and_degraded_targets_raise_their_own_alerts() {
        let mut fleet = Fleet::new();
        fleet.rule(
            "cache",
            Some(AlertRule {
                on: vec![HealthState::Degraded],
                ..AlertRule::default()
            }),
        );
        fleet
            .target("cache", HealthState::Degraded, 100)
            .degraded_reasons = vec!["slow".into(), "read-only".into()];
        fleet.target("api", HealthState::Probing, 100).flapping = true;
        // DEGRADED under the default rule (DOWN only): nothing.
        fleet.target("web", HealthState::Degraded, 100);
        let mut episodes = fresh();

        let fired = fleet.look(&mut episodes, 100);
        assert_eq!(
            summary(&fired),
            [
                firing("ProbeFlapping", "api"),
                firing("ProbeDegraded", "cache")
            ]
        );
        assert_eq!(fired[0].annotations["summary"], "api is flapping");
        assert_eq!(fired[1].annotations["summary"], "cache is DEGRADED");
        assert_eq!(fired[1].annotations["degraded"], "slow; read-only");

        // Degraded again, but the cache is DOWN now: its reasons are not the failure's.
        fleet.rule(
            "cache",
            Some(AlertRule {
                on: vec![HealthState::Degraded, HealthState::Down],
                ..AlertRule::default()
            }),
        );
        fleet
            .target("cache", HealthState::Down, 120)
            .degraded_reasons = vec!["slow".into()];
        let moved = fleet.look(&mut episodes, 120);
        assert_eq!(
            summary(&moved),
            [
                resolved_("ProbeDegraded", "cache"),
                firing("ProbeDown", "cache")
            ]
        );
        assert!(!moved[1].annotations.contains_key("degraded"));
    }

    #[test]
    fn a_root_that_alerts_on_down_covers_what_it_takes_down() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Down, 100);
        fleet.target("api", HealthState::Down, 100);
        fleet.target("web", HealthState::Down, 100);
        fleet.depends("api", "db", true);
        fleet.depends("web", "api", true);
        let mut episodes = fresh();

        let fired = fleet.look(&mut episodes, 100);
        assert_eq!(summary(&fired), [firing("ProbeDown", "db")]);
        assert_eq!(fired[0].impacted, ["api", "web"]);
        assert_eq!(fired[0].annotations["impacted"], "api, web");

        // web's own dependency comes back: db's alert says so.
        fleet.edges.retain(|e| e.from != id("web"));
        fleet.target("web", HealthState::Up, 110);
        let moved = fleet.look(&mut episodes, 110);
        assert_eq!(summary(&moved), [firing("ProbeDown", "db")]);
        assert_eq!(moved[0].impacted, ["api"]);
        assert_eq!(moved[0].annotations["impacted"], "api");
        assert_eq!(moved[0].fingerprint, fired[0].fingerprint);

        // And once it takes nothing down, the annotation goes.
        fleet.edges.clear();
        let alone = fleet.look(&mut episodes, 120);
        assert_eq!(
            summary(&alone),
            [firing("ProbeDown", "api"), firing("ProbeDown", "db")]
        );
        assert!(alone[1].impacted.is_empty());
        assert!(!alone[1].annotations.contains_key("impacted"));
    }

    #[test]
    fn the_impacted_annotation_names_twenty_and_counts_the_rest() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Down, 100);
        for n in 0..25 {
            let name = format!("app{n:02}");
            fleet.target(&name, HealthState::Down, 100);
            fleet.depends(&name, "db", true);
        }
        let fired = fleet.look(&mut fresh(), 100);
        assert_eq!(summary(&fired), [firing("ProbeDown", "db")]);
        assert_eq!(fired[0].impacted.len(), 25);
        let shown: Vec<String> = (0..20).map(|n| format!("app{n:02}")).collect();
        assert_eq!(
            fired[0].annotations["impacted"],
            format!("{} and 5 more", shown.join(", "))
        );
        // Twenty exactly are all named, with nothing counted.
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Down, 100);
        for name in &shown {
            fleet.target(name, HealthState::Down, 100);
            fleet.depends(name, "db", true);
        }
        let fired = fleet.look(&mut fresh(), 100);
        assert_eq!(fired[0].annotations["impacted"], shown.join(", "));
    }

    #[test]
    fn a_root_that_does_not_alert_on_down_leaves_its_dependents_to_alert() {
        for rule in [
            None,
            Some(AlertRule {
                on: vec![HealthState::Degraded],
                ..AlertRule::default()
            }),
        ] {
            let mut fleet = Fleet::new();
            fleet.rule("db", rule);
            fleet.target("db", HealthState::Down, 100);
            fleet.target("api", HealthState::Down, 100);
            fleet.depends("api", "db", true);
            let fired = fleet.look(&mut fresh(), 100);
            assert_eq!(summary(&fired), [firing("ProbeDown", "api")]);
            assert_eq!(fired[0].labels["root_cause"], "api");
        }
    }

    #[test]
    fn maintenance_silences_a_target_and_what_depends_on_it_until_its_first_verdict() {
        let mut fleet = Fleet::new();
        fleet.rule("db", Some(held(60)));
        fleet.target("db", HealthState::Maintenance, 100);
        fleet.target("api", HealthState::Down, 100);
        fleet.group("backend", None);
        fleet.rule("backend", Some(held(0)));
        fleet.depends("api", "backend", true);
        fleet.depends("backend", "db", true);
        let mut episodes = fresh();

        assert!(fleet.look(&mut episodes, 100).is_empty());
        assert!(fleet.look(&mut episodes, 200).is_empty());

        // Out of maintenance, no verdict yet: still silent.
        fleet.target("db", HealthState::Probing, 300);
        assert!(fleet.look(&mut episodes, 300).is_empty());

        // Its first verdict is DOWN: it pages at once, for all its `for`. api is no longer
        // silenced, and alerts for itself: a group is never DOWN, so api is not
        // `dependency_down` and db's alert does not cover it.
        fleet.target("db", HealthState::Down, 310);
        let fired = fleet.look(&mut episodes, 310);
        assert_eq!(
            summary(&fired),
            [firing("ProbeDown", "api"), firing("ProbeDown", "db")]
        );
        assert_eq!(fired[1].impacted, ["backend"]);

        // Another episode later waits its `for` again.
        fleet.target("db", HealthState::Up, 320);
        assert_eq!(
            summary(&fleet.look(&mut episodes, 320)),
            [resolved_("ProbeDown", "db")]
        );
        fleet.target("api", HealthState::Up, 320);
        fleet.target("db", HealthState::Down, 400);
        assert_eq!(
            summary(&fleet.look(&mut episodes, 400)),
            [resolved_("ProbeDown", "api")]
        );
        assert!(episodes.waiting());
        assert_eq!(
            summary(&fleet.look(&mut episodes, 460)),
            [firing("ProbeDown", "db")]
        );
    }

    /// A dependency still looking for its first verdict, never in maintenance, silences
    /// nothing: only one coming out of maintenance does.
    #[test]
    fn a_dependency_in_its_first_probing_silences_nothing() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Probing, 100);
        fleet.target("api", HealthState::Down, 100);
        fleet.group("backend", None);
        fleet.depends("api", "backend", true);
        fleet.depends("backend", "db", true);
        let mut episodes = fresh();
        // Past the wait for a critical dependency's next result.
        assert_eq!(
            summary(&fleet.look(&mut episodes, 200)),
            [firing("ProbeDown", "api")]
        );
        // And at the next look too: db's PROBING is no maintenance to silence api with.
        assert!(fleet.look(&mut episodes, 210).is_empty());
    }

    #[test]
    fn a_flapping_target_out_of_maintenance_is_not_silenced() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Maintenance, 100);
        let mut episodes = fresh();
        assert!(fleet.look(&mut episodes, 100).is_empty());
        fleet.target("db", HealthState::Probing, 200).flapping = true;
        assert_eq!(
            summary(&fleet.look(&mut episodes, 200)),
            [firing("ProbeFlapping", "db")]
        );
    }

    #[test]
    fn only_the_member_that_decides_a_target_alerts_and_ends_its_alert() {
        let placed = |role| {
            Some(Placement {
                role,
                members: Vec::new(),
                votes: Vec::new(),
            })
        };
        let mut fleet = Fleet::new();
        for (name, role) in [
            ("a-decide", Role::Decide),
            ("b-lead", Role::Lead),
            ("c-vote", Role::Vote),
            ("d-follow", Role::Follow),
        ] {
            fleet.target(name, HealthState::Down, 100).placement = placed(role);
        }
        let mut episodes = fresh();
        assert_eq!(
            summary(&fleet.look(&mut episodes, 100)),
            [
                firing("ProbeDown", "a-decide"),
                firing("ProbeDown", "b-lead")
            ]
        );

        // b is another member's now, and that member ends the alert.
        fleet.target("b-lead", HealthState::Up, 110).placement = placed(Role::Follow);
        assert!(fleet.look(&mut episodes, 110).is_empty());
        assert_eq!(
            summary(&episodes.firing()),
            [firing("ProbeDown", "a-decide")]
        );
    }

    #[test]
    fn a_down_target_waits_for_its_critical_dependencies_next_result() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Up, 0).last =
            Some(Outcome::new(t(90), Duration::from_millis(1), &Verdict::Up));
        fleet.target("api", HealthState::Down, 100);
        fleet.group("backend", None);
        fleet.depends("api", "backend", true);
        fleet.depends("backend", "db", true);
        let mut episodes = fresh();

        // db's next run and answer are due within interval + timeout + 1 s = 7 s.
        assert!(fleet.look(&mut episodes, 103).is_empty());
        assert!(episodes.waiting());
        assert!(fleet.look(&mut episodes, 106).is_empty());
        assert_eq!(
            summary(&fleet.look(&mut episodes, 107)),
            [firing("ProbeDown", "api")]
        );

        // db answered since api went DOWN (and is UP): api pages at once.
        fleet.target("api", HealthState::Down, 200);
        fleet.target("db", HealthState::Up, 0).last =
            Some(Outcome::new(t(201), Duration::from_millis(1), &Verdict::Up));
        assert_eq!(
            summary(&fleet.look(&mut episodes, 201)),
            [resolved_("ProbeDown", "api"), firing("ProbeDown", "api")]
        );
    }

    #[test]
    fn a_down_target_does_not_wait_for_a_dependency_probed_elsewhere_or_past_the_cap() {
        let mut fleet = Fleet::new();
        fleet.target("db", HealthState::Up, 0).placement = Some(Placement {
            role: Role::Follow,
            members: Vec::new(),
            votes: Vec::new(),
        });
        fleet.target("api", HealthState::Down, 100);
        fleet.depends("api", "db", true);
        assert_eq!(
            summary(&fleet.look(&mut fresh(), 100)),
            [firing("ProbeDown", "api")]
        );

        // A dependency probed here every minute: the wait is capped at 30 s.
        let slow = Schedule::try_new(ScheduleSettings {
            interval: Duration::from_secs(60),
            ..ScheduleSettings::default()
        })
        .expect("a valid schedule");
        let db = fleet.target("db", HealthState::Up, 0);
        db.schedule = slow;
        let mut episodes = fresh();
        assert!(fleet.look(&mut episodes, 129).is_empty());
        assert_eq!(
            summary(&fleet.look(&mut episodes, 130)),
            [firing("ProbeDown", "api")]
        );

        // A DOWN dependency is no reason to wait (it is the root, or alerts by itself).
        let mut fleet = Fleet::new();
        fleet.rule("db", None);
        fleet.target("db", HealthState::Down, 0);
        fleet.target("api", HealthState::Down, 100);
        fleet.depends("api", "db", true);
        assert_eq!(
            summary(&fleet.look(&mut fresh(), 100)),
            [firing("ProbeDown", "api")]
        );
    }

    #[test]
    fn a_group_in_an_on_state_fires_after_its_for_and_resolves_out_of_it() {
        let mut fleet = Fleet::new();
        fleet.rule(
            "shop",
            Some(AlertRule {
                hold: Duration::from_secs(30),
                ..AlertRule::default()
            }),
        );
        fleet.group("shop", Some(0.6));
        let mut episodes = fresh();
        assert!(
            fleet.look(&mut episodes, 90).is_empty(),
            "DEGRADED is not in `on: [DOWN]`"
        );
        assert!(!episodes.waiting(), "a group's verdict moves by an event");

        fleet.group("shop", Some(0.4));
        assert!(fleet.look(&mut episodes, 100).is_empty());
        assert!(fleet.look(&mut episodes, 129).is_empty());
        let fired = fleet.look(&mut episodes, 130);
        assert_eq!(summary(&fired), [firing("GroupUnhealthy", "shop")]);
        assert_eq!(fired[0].annotations["summary"], "shop is DOWN: score 0.40");
        assert_eq!(fired[0].annotations["explain"], "shop explained");
        assert_eq!(fired[0].starts_at, rfc3339(t(100)), "from when it was seen");
        assert!(fleet.look(&mut episodes, 140).is_empty());

        fleet.group("shop", Some(0.9));
        let ended = fleet.look(&mut episodes, 150);
        assert_eq!(summary(&ended), [resolved_("GroupUnhealthy", "shop")]);
        assert_eq!(ended[0].fingerprint, fired[0].fingerprint);

        // Back in DOWN, the `for` starts over.
        fleet.group("shop", Some(0.1));
        assert!(fleet.look(&mut episodes, 160).is_empty());
        fleet.group("shop", Some(0.9));
        assert!(fleet.look(&mut episodes, 170).is_empty());
        fleet.group("shop", Some(0.1));
        assert!(fleet.look(&mut episodes, 180).is_empty());
        assert!(fleet.look(&mut episodes, 209).is_empty());
        assert_eq!(fleet.look(&mut episodes, 210)[0].starts_at, rfc3339(t(180)));

        // A rule on DEGRADED too fires on it.
        let mut fleet = Fleet::new();
        fleet.rule(
            "shop",
            Some(AlertRule {
                on: vec![HealthState::Down, HealthState::Degraded],
                ..AlertRule::default()
            }),
        );
        fleet.group("shop", Some(0.6));
        let fired = fleet.look(&mut fresh(), 100);
        assert_eq!(
            fired[0].annotations["summary"],
            "shop is DEGRADED: score 0.60"
        );
    }

    #[test]
    fn a_group_behind_a_down_dependency_fires_unless_the_root_alerts() {
        let mut fleet = Fleet::new();
        fleet.rule("db", None);
        fleet.target("db", HealthState::Down, 100);
        fleet.group("shop", Some(0.9));
        fleet.depends("shop", "db", true);
        let mut episodes = fresh();
        let fired = fleet.look(&mut episodes, 100);
        assert_eq!(summary(&fired), [firing("GroupUnhealthy", "shop")]);
        assert_eq!(
            fired[0].annotations["summary"],
            "shop is DOWN: a critical dependency is DOWN"
        );

        // db alerts now: the group is in db's alert, not in its own.
        fleet.rule("db", Some(AlertRule::default()));
        let moved = fleet.look(&mut episodes, 110);
        assert_eq!(
            summary(&moved),
            [
                firing("ProbeDown", "db"),
                resolved_("GroupUnhealthy", "shop")
            ]
        );
        assert_eq!(moved[0].impacted, ["shop"]);

        // Groups are another member's to send.
        let mut fleet = Fleet::new();
        fleet.groups_ours = false;
        fleet.rule("shop", Some(AlertRule::default()));
        fleet.group("shop", Some(0.1));
        let mut episodes = fresh();
        assert!(fleet.look(&mut episodes, 100).is_empty());
        assert!(!episodes.waiting());
    }

    #[test]
    fn restored_alerts_wait_for_a_verdict_and_for_late_targets() {
        let mut before = Fleet::new();
        before.target("db", HealthState::Down, 50);
        before.target("late", HealthState::Down, 50);
        before.target("cache", HealthState::Down, 50);
        let mut first = fresh();
        before.look(&mut first, 50);
        let mut open = first.firing();
        let mut other = open[0].clone();
        other
            .labels
            .insert("alertname".into(), "SomethingElse".into());
        open.push(other);

        let mut episodes = Episodes::restore(open, t(1000));
        assert_eq!(
            summary(&episodes.firing()),
            [
                firing("ProbeDown", "cache"),
                firing("ProbeDown", "db"),
                firing("ProbeDown", "late")
            ]
        );

        // No verdict yet since the restart: the alerts stand, unsent.
        let mut after = Fleet::new();
        after.target("db", HealthState::Probing, 0).since = None;
        after.target("cache", HealthState::Probing, 0).since = None;
        assert!(after.look(&mut episodes, 1000).is_empty());

        // db is DOWN still: the same alert goes on. The cache is UP: its alert ends.
        after.target("db", HealthState::Down, 50);
        after.target("cache", HealthState::Up, 1001);
        assert_eq!(
            summary(&after.look(&mut episodes, 1001)),
            [resolved_("ProbeDown", "cache")]
        );
        assert!(
            after.look(&mut episodes, 1119).is_empty(),
            "late may come yet"
        );
        assert_eq!(
            summary(&after.look(&mut episodes, 1120)),
            [resolved_("ProbeDown", "late")]
        );
        assert_eq!(summary(&episodes.firing()), [firing("ProbeDown", "db")]);

        // A target removed from the config ends its alert at once.
        after.targets.clear();
        assert_eq!(
            summary(&after.look(&mut episodes, 1130)),
            [resolved_("ProbeDown", "db")]
        );
    }

    #[test]
    fn a_restored_group_alert_waits_for_its_verdict() {
        let mut before = Fleet::new();
        before.rule("shop", Some(AlertRule::default()));
        before.group("shop", Some(0.1));
        let mut first = fresh();
        before.look(&mut first, 50);
        let mut episodes = Episodes::restore(first.firing(), t(1000));

        before.group("shop", None);
        assert!(before.look(&mut episodes, 1000).is_empty());
        before.group("shop", Some(0.2));
        assert!(before.look(&mut episodes, 1001).is_empty(), "goes on");
        before.group("shop", Some(0.9));
        assert_eq!(
            summary(&before.look(&mut episodes, 1002)),
            [resolved_("GroupUnhealthy", "shop")]
        );
    }

    #[test]
    fn a_fingerprint_is_fnv1a_of_target_name_and_start() {
        // Members of a cluster, and the daemon across versions, must name an episode alike:
        // FNV-1a 64 of "db\0ProbeDown\01800000000000", computed elsewhere.
        assert_eq!(fingerprint("db", "ProbeDown", t(0)), "ce9131f780c798aa");
    }
}
