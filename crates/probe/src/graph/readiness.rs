//! Readiness from the graph: a service is ready when the nodes it cannot serve without are
//! healthy enough, whatever happens to the rest.
//!
//! The rule: readiness depends only on the dependencies without which a service cannot serve
//! correctly, because taking an instance out of rotation for a dependency it can do without
//! turns a partial outage into a full one. A [`ReadinessPolicy`] names those nodes (usually one group standing for the
//! service) and a minimum score. A non-critical dependency going DOWN lowers its parents' scores
//! but fails readiness only if that alone pulls a required node under the minimum; a critical one
//! going DOWN marks its parent `dependency_down`, which fails readiness at once.
//!
//! [`ReadinessLatch`] adds hysteresis: once ready, a score has to fall `hysteresis` below the
//! minimum to turn it not ready, so a score hovering at the threshold does not make a load
//! balancer add and remove the instance at every result. And since an unknown score is neither
//! good nor bad news (a freshly added dependency, scores restarting), it keeps the verdict as it
//! was: an instance does not stop serving because a reload added a dependency, and does not start
//! serving before its required nodes have results.

use std::sync::Arc;

use super::{Graph, NodeKind};
use crate::health::state::HealthState;
use crate::target::TargetId;

/// Scores this close under a threshold meet it: `0.8 - 0.1` is `0.7000000000000001` in `f64`,
/// and 14 good results out of 20 must meet a 0.7 threshold.
const ROUNDING: f64 = 1e-9;

/// What readiness requires.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadinessPolicy {
    require: Vec<TargetId>,
    min_score: f64,
    hysteresis: f64,
}

/// Why a [`ReadinessPolicy`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReadinessPolicyError {
    /// A policy that requires nothing would always be ready: leave the policy out instead.
    #[error("require lists no node")]
    NothingRequired,
    /// The minimum is a score.
    #[error("min_score {0} is outside 0..=1")]
    MinScore(f64),
    /// The margin is a difference of scores.
    #[error("hysteresis {0} is outside 0..=1")]
    Hysteresis(f64),
}

impl ReadinessPolicy {
    /// The default minimum score: a required node may lose a fifth of its health and serve.
    pub const DEFAULT_MIN_SCORE: f64 = 0.8;
    /// The default margin below the minimum that turns a ready instance not ready: one bad
    /// result in a 20-result window.
    pub const DEFAULT_HYSTERESIS: f64 = 0.05;

    /// Builds a policy. Repeated ids count once.
    ///
    /// # Errors
    /// [`ReadinessPolicyError`] for an empty `require`, or a `min_score` or `hysteresis`
    /// outside `0..=1` (or NaN).
    pub fn try_new(
        mut require: Vec<TargetId>,
        min_score: f64,
        hysteresis: f64,
    ) -> Result<Self, ReadinessPolicyError> {
        if require.is_empty() {
            return Err(ReadinessPolicyError::NothingRequired);
        }
        if !(0.0..=1.0).contains(&min_score) {
            return Err(ReadinessPolicyError::MinScore(min_score));
        }
        if !(0.0..=1.0).contains(&hysteresis) {
            return Err(ReadinessPolicyError::Hysteresis(hysteresis));
        }
        let mut seen = std::collections::HashSet::new();
        require.retain(|id| seen.insert(id.clone()));
        Ok(Self {
            require,
            min_score,
            hysteresis,
        })
    }

    /// The required nodes, in declaration order.
    pub fn require(&self) -> &[TargetId] {
        &self.require
    }

    /// The score a required node needs to become ready.
    pub fn min_score(&self) -> f64 {
        self.min_score
    }

    /// How far below `min_score` a ready node's score must fall to turn it not ready.
    pub fn hysteresis(&self) -> f64 {
        self.hysteresis
    }
}

/// The verdict of a [`ReadinessLatch`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphReadiness {
    /// Whether every required node passes.
    pub ready: bool,
    /// How many required nodes there are.
    pub required: usize,
    /// How many of them pass.
    pub passing: usize,
    /// Why the failing ones fail, `; `-separated; `None` when ready.
    pub reason: Option<String>,
    /// Each required node's check, in the policy's order: what a verbose readiness answer
    /// lists (`[+]node ok`, `[-]node failed: why`). Empty before the first verdict.
    pub checks: Arc<[NodeCheck]>,
}

/// One required node's part of a readiness verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCheck {
    /// The required node.
    pub node: TargetId,
    /// Why it fails; `None` when it passes.
    pub failure: Option<String>,
}

/// A [`ReadinessPolicy`] applied over time: the verdict with its hysteresis.
#[derive(Clone, Debug)]
pub struct ReadinessLatch {
    policy: ReadinessPolicy,
    verdict: GraphReadiness,
}

impl ReadinessLatch {
    /// A latch that starts not ready: an instance serves once its required nodes have proved
    /// healthy, not before.
    pub fn new(policy: ReadinessPolicy) -> Self {
        let required = policy.require.len();
        Self {
            policy,
            verdict: GraphReadiness {
                ready: false,
                required,
                passing: 0,
                reason: Some("no verdict yet".into()),
                checks: Arc::from([]),
            },
        }
    }

    /// The policy.
    pub fn policy(&self) -> &ReadinessPolicy {
        &self.policy
    }

    /// Replaces the policy, keeping the verdict until the next [`ReadinessLatch::update`].
    pub fn set_policy(&mut self, policy: ReadinessPolicy) {
        self.policy = policy;
    }

    /// The latest verdict.
    pub fn verdict(&self) -> &GraphReadiness {
        &self.verdict
    }

    /// Re-evaluates against `graph`. Returns whether readiness flipped.
    ///
    /// A required node passes when it is not DOWN, no critical dependency of its is DOWN, and its
    /// score is at least `min_score`, or `min_score - hysteresis` while ready. A node with an
    /// unknown score passes while ready and fails otherwise. A required node missing from the
    /// graph fails.
    pub fn update(&mut self, graph: &Graph) -> bool {
        let was_ready = self.verdict.ready;
        let threshold = if was_ready {
            self.policy.min_score - self.policy.hysteresis
        } else {
            self.policy.min_score
        };
        let mut reason = String::new();
        let mut passing = 0;
        let mut checks = Vec::with_capacity(self.policy.require.len());
        for id in &self.policy.require {
            let failure = match graph.view().status(id) {
                None => Some(format!("{id} is not in the dependency graph")),
                // A group's verdict is its own rule's; readiness keeps to its `min_score`.
                Some(node)
                    if node.kind == NodeKind::Probed && node.state == Some(HealthState::Down) =>
                {
                    Some(format!("{id} is DOWN"))
                }
                Some(node) if node.dependency_down => {
                    let down: Vec<String> = graph
                        .view()
                        .explain(id)
                        .map(|e| e.children)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| c.caps)
                        .map(|c| c.node.id.to_string())
                        .collect();
                    Some(format!(
                        "{id} has a critical dependency DOWN ({})",
                        down.join(", ")
                    ))
                }
                Some(node) => match node.score {
                    None if was_ready => None,
                    None => Some(format!("{id} has no score yet")),
                    Some(score) if score >= threshold - ROUNDING => None,
                    Some(score) => Some(format!("{id} scores {score:.2} < {threshold:.2}")),
                },
            };
            match &failure {
                None => passing += 1,
                Some(failure) => {
                    if !reason.is_empty() {
                        reason.push_str("; ");
                    }
                    reason.push_str(failure);
                }
            }
            checks.push(NodeCheck {
                node: id.clone(),
                failure,
            });
        }
        let ready = reason.is_empty();
        self.verdict = GraphReadiness {
            ready,
            required: self.policy.require.len(),
            passing,
            reason: (!ready).then_some(reason),
            checks: checks.into(),
        };
        ready != was_ready
    }
}
