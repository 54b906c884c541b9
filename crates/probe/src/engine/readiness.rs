//! The readiness verdict: running totals of the targets that keep the engine ready, turned into
//! the [`Readiness`] the hub publishes on every change, so that `/readyz` is one snapshot load.

use std::collections::BTreeMap;

use crate::graph::GraphReadiness;
use crate::health::state::HealthState;
use crate::target::TargetId;

use super::view::Readiness;

/// How many of the targets that keep the engine from being ready its reason names.
const NAMED: usize = 5;

/// Running totals, so readiness never walks every target.
#[derive(Default)]
pub(super) struct Tally {
    total: usize,
    ready: usize,
    /// The targets that keep the engine from being ready, with their state, so that naming a few
    /// takes a glance rather than a walk over a million healthy ones. Changed on transitions
    /// only.
    unready: BTreeMap<TargetId, HealthState>,
}

impl Tally {
    /// A new target, in PROBING.
    pub fn add(&mut self, id: &TargetId) {
        self.total += 1;
        self.unready.insert(id.clone(), HealthState::Probing);
    }

    /// A target that left, last in `state`.
    pub fn remove(&mut self, id: &TargetId, state: HealthState) {
        self.total -= 1;
        if state.counts_as_ready() {
            self.ready -= 1;
        } else {
            self.unready.remove(id);
        }
    }

    /// A target moved from `from` to `to`.
    pub fn moved(&mut self, id: &TargetId, from: HealthState, to: HealthState) {
        match (from.counts_as_ready(), to.counts_as_ready()) {
            (false, true) => {
                self.ready += 1;
                self.unready.remove(id);
            }
            (true, false) => {
                self.ready -= 1;
                self.unready.insert(id.clone(), to);
            }
            (false, false) => {
                self.unready.insert(id.clone(), to);
            }
            (true, true) => {}
        }
    }

    /// The verdict: the readiness policy's when there is one, else whether every target is UP,
    /// DEGRADED or in MAINTENANCE.
    pub fn readiness(&self, policy: Option<&GraphReadiness>) -> Readiness {
        if let Some(verdict) = policy {
            return Readiness {
                ready: verdict.ready,
                total: verdict.required,
                healthy: verdict.passing,
                reason: verdict.reason.clone(),
                checks: Some(verdict.checks.clone()),
            };
        }
        let (total, healthy) = (self.total, self.ready);
        if healthy >= total {
            return Readiness {
                ready: true,
                total,
                healthy,
                reason: None,
                checks: None,
            };
        }
        let named: Vec<String> = self
            .unready
            .iter()
            .take(NAMED)
            .map(|(id, state)| format!("{id} ({state})"))
            .collect();
        let more = (total - healthy).saturating_sub(named.len());
        let mut reason = format!(
            "{} of {total} targets not healthy: {}",
            total - healthy,
            named.join(", ")
        );
        if more > 0 {
            reason.push_str(&format!(" and {more} more"));
        }
        Readiness {
            ready: false,
            total,
            healthy,
            reason: Some(reason),
            checks: None,
        }
    }
}
