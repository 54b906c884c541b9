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
//! A group alerts (`GroupUnhealthy`) while it is `dependency_down`, if its rule is on DOWN, or
//! while its score is under its `score_under`, from when this member first saw it so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use probe::engine::{Role, TargetStatus};
use probe::graph::{Causes, Export, NodeKind, NodeStatus};
use probe::target::TargetId;
use probe::verdict::HealthState;

use super::rules::Rules;
use super::{Alert, Sender, Status, rfc3339};
use crate::config::AlertRule;

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
        // Restored, and the group's score is not known again yet: it waits.
        if let Some(Episode::Firing { since: None, .. }) = &prev
            && node.score.is_none()
        {
            return prev;
        }
        let rule = self
            .rules
            .of(id)
            .filter(|_| self.world.groups_ours && !self.silenced.contains(id) && !self.covered(id));
        if rule.is_some_and(|r| r.score_under.is_some()) {
            self.waiting.set(true);
        }
        let unhealthy = rule.filter(|rule| {
            (node.dependency_down && rule.on.contains(&HealthState::Down))
                || rule
                    .score_under
                    .zip(node.score)
                    .is_some_and(|(under, score)| score < under)
        });
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
            let summary = match node.score.zip(rule.score_under) {
                Some((score, under)) if score < under => {
                    format!("{id} is unhealthy: score {score:.2}, under {under:.2}")
                }
                _ => format!("{id} is unhealthy: a critical dependency is DOWN"),
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
