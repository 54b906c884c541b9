//! A group's verdict: its score and its critical dependencies, judged by the group's
//! [`GroupRule`] on the same state machine a target's results drive.
//!
//! A group has no results of its own, so the engine judges every group once every
//! [`JUDGE_EVERY`], and each judgment counts as one result of the group's machine:
//! - a score of at least `up_from` is a good result, of at least `degraded_from` a degraded one,
//!   and under it a failure; so `rise`, `fall`, `degrade`, `recover` and flap detection count
//!   judgments, as a target's count probes, and one bad second never moves a group;
//! - a critical dependency DOWN makes the group DOWN at once: that verdict was confirmed where it
//!   was reached ([`StateMachine::dependency_down`]);
//! - while the score is unknown there is no judgment, and the verdict stays what it was (a new
//!   group stays PROBING).
//!
//! Everyone who shows a group's health reads this verdict: one group is never DEGRADED on one
//! screen and UP on another. It changes no score: a parent reads a group's score, as it reads a
//! target's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::compiled::Compiled;
use super::{Graph, NodeKind};
use crate::health::policy::{FlapPolicy, Thresholds};
use crate::health::state::{HealthState, Quality, StateMachine, Transition};
use crate::target::TargetId;

/// How often the engine judges every group.
pub const JUDGE_EVERY: Duration = Duration::from_secs(1);

/// Why a [`GroupRule`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GroupRuleError {
    /// `up_from` is a score above 0.
    #[error("up_from {0} is outside (0, 1]")]
    UpFrom(f64),
    /// `degraded_from` is a score no higher than `up_from`.
    #[error("degraded_from {degraded_from} is outside [0, up_from {up_from}]")]
    DegradedFrom {
        /// The value given.
        degraded_from: f64,
        /// The rule's `up_from`.
        up_from: f64,
    },
}

/// How a group's score becomes its verdict (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupRule {
    up_from: f64,
    degraded_from: f64,
    thresholds: Thresholds,
    flap: Option<FlapPolicy>,
}

impl GroupRule {
    /// The default lowest score of an UP group.
    pub const DEFAULT_UP_FROM: f64 = 0.8;
    /// The default lowest score of a DEGRADED group; under it the group fails.
    pub const DEFAULT_DEGRADED_FROM: f64 = 0.5;

    /// A rule: UP from `up_from`, DEGRADED from `degraded_from`, DOWN under it, with the
    /// thresholds and flap policy counted in judgments.
    ///
    /// # Errors
    /// `up_from` outside `(0, 1]`, or `degraded_from` outside `[0, up_from]` (NaN included).
    pub fn try_new(
        up_from: f64,
        degraded_from: f64,
        thresholds: Thresholds,
        flap: Option<FlapPolicy>,
    ) -> Result<Self, GroupRuleError> {
        if !(up_from > 0.0 && up_from <= 1.0) {
            return Err(GroupRuleError::UpFrom(up_from));
        }
        if !(0.0..=up_from).contains(&degraded_from) {
            return Err(GroupRuleError::DegradedFrom {
                degraded_from,
                up_from,
            });
        }
        Ok(Self {
            up_from,
            degraded_from,
            thresholds,
            flap,
        })
    }

    /// The lowest score of an UP group.
    pub fn up_from(&self) -> f64 {
        self.up_from
    }

    /// The lowest score of a DEGRADED group.
    pub fn degraded_from(&self) -> f64 {
        self.degraded_from
    }

    /// The judgments in a row that move the verdict.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// When the group counts as flapping; `None` never.
    pub fn flap(&self) -> Option<FlapPolicy> {
        self.flap
    }

    /// What one judgment of a known `score` counts as.
    fn quality(&self, score: f64) -> Quality {
        if score >= self.up_from {
            Quality::Good
        } else if score >= self.degraded_from {
            Quality::Degraded
        } else {
            Quality::Failed
        }
    }

    /// The words that say why `score` counts as it does.
    fn why(&self, score: f64) -> String {
        match self.quality(score) {
            Quality::Good => format!("score {score:.2}"),
            Quality::Degraded => format!("score {score:.2} under up_from {}", self.up_from),
            Quality::Failed => format!(
                "score {score:.2} under degraded_from {}",
                self.degraded_from
            ),
        }
    }
}

impl Default for GroupRule {
    /// UP from 0.8, DEGRADED from 0.5, a target's default thresholds (`rise: 2`, `fall: 3`)
    /// and flap policy.
    fn default() -> Self {
        Self {
            up_from: Self::DEFAULT_UP_FROM,
            degraded_from: Self::DEFAULT_DEGRADED_FROM,
            thresholds: Thresholds::default(),
            flap: Some(FlapPolicy::default()),
        }
    }
}

/// A group's change of verdict, as [`Graph::judge`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupTransition {
    /// The group.
    pub group: TargetId,
    /// The change.
    pub transition: Transition,
    /// Why, in words: the score against the rule, or the critical dependency DOWN.
    pub detail: String,
}

/// One group's rule and machine.
#[derive(Clone, Debug)]
struct Judge {
    rule: GroupRule,
    machine: StateMachine,
}

impl Judge {
    fn new(rule: GroupRule) -> Self {
        Self {
            rule,
            machine: StateMachine::new(rule.thresholds, rule.flap),
        }
    }
}

/// Every group's rule and machine, by id: kept across topology changes for the groups that stay.
#[derive(Clone, Debug, Default)]
pub(super) struct Judges {
    /// The declared rules; a group without one has the default.
    rules: BTreeMap<TargetId, GroupRule>,
    judges: HashMap<TargetId, Judge>,
}

impl Judges {
    /// A group's judge, made with its rule at its first judgment.
    fn of(&mut self, id: &TargetId) -> &mut Judge {
        let rule = self.rules.get(id).copied().unwrap_or_default();
        self.judges
            .entry(id.clone())
            .or_insert_with(|| Judge::new(rule))
    }

    /// A group's verdict: PROBING until its first.
    pub fn state(&self, id: &TargetId) -> HealthState {
        self.judges
            .get(id)
            .map_or(HealthState::Probing, |j| j.machine.state())
    }

    /// Whether a group is held in PROBING for flapping.
    pub fn is_flapping(&self, id: &TargetId) -> bool {
        self.judges.get(id).is_some_and(|j| j.machine.is_flapping())
    }
}

impl Graph {
    /// Node `i`'s verdict and whether it is held in PROBING for flapping: a probed node's state
    /// as recorded (its flapping is on its target's status), a group's as judged.
    pub(super) fn judged(&self, i: usize) -> (Option<HealthState>, bool) {
        match self.topo.kinds[i] {
            NodeKind::Probed => (self.nodes.states[i], false),
            NodeKind::Group => {
                let id = &self.topo.ids[i];
                (Some(self.judges.state(id)), self.judges.is_flapping(id))
            }
        }
    }

    /// The indices of the group nodes.
    fn group_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.topo.len()).filter(|&i| self.topo.kinds[i] == NodeKind::Group)
    }

    /// Sets how each group is judged: `rules` by group id, the default for a group without one.
    /// A group whose rule changed starts again in PROBING; the others keep their verdicts.
    /// Ids that are not groups are ignored (the engine's topology refuses them).
    pub fn set_group_rules(&mut self, rules: BTreeMap<TargetId, GroupRule>) {
        self.judges
            .judges
            .retain(|id, judge| rules.get(id).copied().unwrap_or_default() == judge.rule);
        self.judges.rules = rules;
        self.publish(self.group_indices());
    }

    /// Judges every group once (see the module doc) at `now`; returns the changes of verdict.
    pub fn judge(&mut self, now: Instant) -> Vec<GroupTransition> {
        let mut moved = Vec::new();
        let mut groups = 0;
        for i in 0..self.topo.len() {
            if self.topo.kinds[i] != NodeKind::Group {
                continue;
            }
            groups += 1;
            let id = &self.topo.ids[i];
            let judge = self.judges.of(id);
            let score = self.nodes.scores[i];
            let down = self.nodes.dependency_down[i];
            let transition = if down {
                // Already DOWN: the failure still counts against a recovery.
                let t = judge.machine.dependency_down();
                t.or_else(|| judge.machine.observe(Quality::Failed, now))
            } else if score.is_nan() {
                continue;
            } else {
                judge.machine.observe(judge.rule.quality(score), now)
            };
            if let Some(transition) = transition {
                // Words only for a change: most judgments change nothing.
                let detail = if down {
                    critical_down(&self.topo, &self.nodes.states, i)
                } else {
                    judge.rule.why(score)
                };
                moved.push(GroupTransition {
                    group: id.clone(),
                    transition,
                    detail,
                });
            }
        }
        // Groups gone with a topology change: their machines go too.
        if self.judges.judges.len() > groups {
            let (topo, judges) = (&self.topo, &mut self.judges.judges);
            judges.retain(|id, _| {
                topo.index
                    .get(id)
                    .is_some_and(|&i| topo.kinds[i as usize] == NodeKind::Group)
            });
        }
        // A judgment may move a verdict or the flapping flag: what moved reaches the readers.
        self.publish(self.group_indices());
        moved
    }

    /// Makes the groups that depend on `id`, critically, DOWN now if `id` is DOWN, without
    /// waiting for their next judgment: the engine calls it as a target's verdict changes, so an
    /// outage shorter than [`JUDGE_EVERY`] still takes its groups down. Only `id`'s own
    /// dependents are looked at: a node's `dependency_down` reads its direct dependencies alone.
    pub fn judge_critical(&mut self, id: &TargetId) -> Vec<GroupTransition> {
        let mut moved = Vec::new();
        let Some(&node) = self.topo.index.get(id) else {
            return moved;
        };
        for &parent in self.topo.parents(node as usize) {
            let i = parent as usize;
            if self.topo.kinds[i] != NodeKind::Group || !self.nodes.dependency_down[i] {
                continue;
            }
            let id = &self.topo.ids[i];
            if let Some(transition) = self.judges.of(id).machine.dependency_down() {
                moved.push(GroupTransition {
                    group: id.clone(),
                    transition,
                    detail: critical_down(&self.topo, &self.nodes.states, i),
                });
            }
        }
        if !moved.is_empty() {
            self.publish(self.topo.parents(node as usize).iter().map(|&p| p as usize));
        }
        moved
    }
}

/// Why group `i` is DOWN: the critical dependencies that are.
fn critical_down(topo: &Compiled, states: &[Option<HealthState>], i: usize) -> String {
    let down: Vec<&str> = topo
        .children(i)
        .iter()
        .filter(|c| c.critical && states[c.index as usize] == Some(HealthState::Down))
        .map(|c| topo.ids[c.index as usize].as_str())
        .collect();
    format!("critical dependency DOWN: {}", down.join(", "))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::graph::{Dependency, GraphConfig, NodeSpec};
    use crate::health::state::Cause;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    /// `shop` over `db` (critical, weight 1) and `cache` (weight 1); windows of 4 results.
    fn shop() -> Graph {
        let mut db = Dependency::new(id("db"), "");
        db.critical = true;
        let specs = vec![
            NodeSpec {
                id: id("db"),
                kind: NodeKind::Probed,
                depends_on: vec![],
            },
            NodeSpec {
                id: id("cache"),
                kind: NodeKind::Probed,
                depends_on: vec![],
            },
            NodeSpec {
                id: id("shop"),
                kind: NodeKind::Group,
                depends_on: vec![db, Dependency::new(id("cache"), "")],
            },
        ];
        Graph::build(GraphConfig::try_new(4, 0.5, 0.0).unwrap(), &specs).unwrap()
    }

    fn rule(rise: u32, fall: u32, flap: Option<FlapPolicy>) -> GroupRule {
        let n = |n| NonZeroU32::new(n).unwrap();
        GroupRule::try_new(0.8, 0.5, Thresholds::new(n(rise), n(fall)), flap).unwrap()
    }

    /// Records `quality` for `node` `times` times, in state `state`.
    fn feed(g: &mut Graph, node: &str, quality: Quality, state: HealthState, times: usize) {
        for _ in 0..times {
            g.record(&id(node), quality, state).unwrap();
        }
    }

    /// Judges `times` times, a second apart from `*at`; the states after each.
    fn judge(g: &mut Graph, at: &mut Instant, times: usize) -> Vec<HealthState> {
        (0..times)
            .map(|_| {
                *at += JUDGE_EVERY;
                g.judge(*at);
                g.view().status(&id("shop")).unwrap().state.unwrap()
            })
            .collect()
    }

    #[test]
    fn a_group_crosses_degraded_from_and_back_with_rise_and_fall() {
        use HealthState::*;
        let mut g = shop();
        g.set_group_rules(BTreeMap::from([(id("shop"), rule(2, 3, None))]));
        let mut at = Instant::now();
        // Unknown score: no judgment, PROBING.
        assert_eq!(judge(&mut g, &mut at, 3), [Probing; 3]);
        feed(&mut g, "db", Quality::Good, Up, 4);
        feed(&mut g, "cache", Quality::Good, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 2), [Probing, Up]);

        // cache half failed: 0.75, under up_from. DEGRADED after `rise` (degrade) judgments.
        feed(&mut g, "cache", Quality::Failed, Up, 2);
        assert_eq!(g.view().status(&id("shop")).unwrap().score, Some(0.75));
        assert_eq!(judge(&mut g, &mut at, 3), [Up, Degraded, Degraded]);

        // Every cache result failed: 0.5 is still DEGRADED; under it, DOWN after `fall`.
        feed(&mut g, "cache", Quality::Failed, Up, 2);
        assert_eq!(judge(&mut g, &mut at, 1), [Degraded]);
        feed(&mut g, "db", Quality::Degraded, Up, 1);
        assert!(g.view().status(&id("shop")).unwrap().score.unwrap() < 0.5);
        assert_eq!(judge(&mut g, &mut at, 3), [Degraded, Degraded, Down]);

        // Back: `rise` passing judgments, UP at once since the last was good.
        feed(&mut g, "db", Quality::Good, Up, 4);
        feed(&mut g, "cache", Quality::Good, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 2), [Down, Up]);
    }

    #[test]
    fn a_critical_dependency_down_makes_the_group_down_at_once() {
        use HealthState::*;
        let mut g = shop();
        let mut at = Instant::now();
        feed(&mut g, "db", Quality::Good, Up, 4);
        feed(&mut g, "cache", Quality::Good, Up, 4);
        judge(&mut g, &mut at, 2);
        g.set_state(&id("db"), Down).unwrap();
        at += JUDGE_EVERY;
        let moved = g.judge(at);
        assert_eq!(moved.len(), 1);
        assert_eq!(
            (moved[0].transition.from, moved[0].transition.to),
            (Up, Down)
        );
        assert_eq!(moved[0].transition.cause, Cause::Dependency);
        assert_eq!(moved[0].detail, "critical dependency DOWN: db");
        // The dependency back: `rise` judgments (the default rule's 2) bring the group back.
        g.set_state(&id("db"), Up).unwrap();
        assert_eq!(judge(&mut g, &mut at, 2), [Down, Up]);
    }

    #[test]
    fn an_outage_between_two_judgments_still_takes_the_group_down() {
        use HealthState::*;
        let mut g = shop();
        let mut at = Instant::now();
        feed(&mut g, "db", Quality::Good, Up, 4);
        feed(&mut g, "cache", Quality::Good, Up, 4);
        judge(&mut g, &mut at, 2);
        assert!(
            g.judge_critical(&id("db")).is_empty(),
            "no critical dependency DOWN"
        );
        g.set_state(&id("cache"), Down).unwrap();
        assert!(g.judge_critical(&id("cache")).is_empty(), "not critical");
        g.set_state(&id("db"), Down).unwrap();
        let moved = g.judge_critical(&id("db"));
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].transition.cause, Cause::Dependency);
        assert!(g.judge_critical(&id("db")).is_empty(), "DOWN already");
        g.set_state(&id("cache"), Up).unwrap();
        // Back before the next judgment: the group stays DOWN until `rise` judgments pass.
        g.set_state(&id("db"), Up).unwrap();
        assert_eq!(judge(&mut g, &mut at, 2), [Down, Up]);
    }

    #[test]
    fn a_flapping_group_is_held_in_probing() {
        use HealthState::*;
        let policy = FlapPolicy {
            transitions: 2,
            window: Duration::from_secs(60),
            min_stable: Duration::from_secs(10),
        };
        let mut g = shop();
        g.set_group_rules(BTreeMap::from([(id("shop"), rule(1, 1, Some(policy)))]));
        let mut at = Instant::now();
        feed(&mut g, "db", Quality::Good, Up, 4);
        feed(&mut g, "cache", Quality::Good, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 1), [Up]);
        let (good, bad) = (Quality::Good, Quality::Failed);
        // Two changes of verdict are allowed; the third makes it flap.
        feed(&mut g, "cache", bad, Up, 4);
        feed(&mut g, "db", Quality::Degraded, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 1), [Down]);
        feed(&mut g, "cache", good, Up, 4);
        feed(&mut g, "db", good, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 1), [Up]);
        feed(&mut g, "cache", bad, Up, 4);
        feed(&mut g, "db", Quality::Degraded, Up, 4);
        assert_eq!(judge(&mut g, &mut at, 1), [Probing]);
        assert!(g.view().status(&id("shop")).unwrap().flapping);
        // Held while the judgments agree for less than min_stable; then the verdict.
        assert_eq!(judge(&mut g, &mut at, 9), [Probing; 9]);
        assert_eq!(judge(&mut g, &mut at, 1), [Down]);
        assert!(!g.view().status(&id("shop")).unwrap().flapping);
    }

    #[test]
    fn rules_are_validated_and_a_changed_rule_starts_the_group_again() {
        let t = Thresholds::default();
        assert_eq!(
            GroupRule::try_new(0.0, 0.0, t, None),
            Err(GroupRuleError::UpFrom(0.0))
        );
        assert!(GroupRule::try_new(f64::NAN, 0.0, t, None).is_err());
        assert!(GroupRule::try_new(0.8, 0.9, t, None).is_err());
        assert!(GroupRule::try_new(0.8, f64::NAN, t, None).is_err());
        assert!(GroupRule::try_new(1.0, 0.0, t, None).is_ok());

        let mut g = shop();
        let mut at = Instant::now();
        feed(&mut g, "db", Quality::Good, HealthState::Up, 4);
        feed(&mut g, "cache", Quality::Good, HealthState::Up, 4);
        judge(&mut g, &mut at, 2);
        // The same rule, declared: the verdict stays.
        g.set_group_rules(BTreeMap::from([(id("shop"), GroupRule::default())]));
        assert_eq!(
            g.view().status(&id("shop")).unwrap().state,
            Some(HealthState::Up)
        );
        // Another rule: PROBING until judged again.
        g.set_group_rules(BTreeMap::from([(id("shop"), rule(1, 1, None))]));
        assert_eq!(
            g.view().status(&id("shop")).unwrap().state,
            Some(HealthState::Probing)
        );
        assert_eq!(judge(&mut g, &mut at, 1), [HealthState::Up]);
    }
}
