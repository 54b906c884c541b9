//! The engine's pools: one [`OutlierDetector`] per group declared with a [`PoolPolicy`], kept in
//! step with the topology, fed with real calls and active results, and read for routing.
//!
//! Lock order: a target's status lock, then the graph, and this one only with neither held by
//! the same thread; nothing takes a status lock while holding it. The engine turns the events
//! returned here into logs, metrics and state changes once the lock is released.

use std::collections::{BTreeMap, HashMap};

use tokio::time::Instant;

use crate::graph::NodeSpec;
use crate::passive::call::Call;
use crate::passive::outlier::{MemberStatus, OutlierConfig, OutlierDetector, OutlierEvent, Shares};
use crate::passive::recovery::RecoveryConfig;
use crate::passive::slow_start::SlowStartConfig;
use crate::target::TargetId;

/// How a group's members are judged against each other: the group is a pool of interchangeable
/// members (replicas behind one upstream).
///
/// The members are the group's dependencies that are targets; a dependency that is itself a
/// group is scored as usual but never ejected.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolPolicy {
    /// When members are ejected.
    pub outlier: OutlierConfig,
    /// How ejected members come back.
    pub recovery: RecoveryConfig,
    /// How returning members ramp up; `None` returns them at full weight.
    pub slow_start: Option<SlowStartConfig>,
}

/// An event of the pool named first.
pub(crate) type PoolEvent = (TargetId, OutlierEvent);

struct Pool {
    policy: PoolPolicy,
    detector: OutlierDetector,
}

impl Pool {
    fn new(policy: PoolPolicy) -> Self {
        Self {
            detector: OutlierDetector::new(policy.outlier)
                .with_recovery(policy.recovery)
                .with_slow_start(policy.slow_start),
            policy,
        }
    }
}

#[derive(Default)]
pub(crate) struct Pools {
    pools: BTreeMap<TargetId, Pool>,
    /// Each member's pools, so a call is judged in all of them.
    member_of: HashMap<TargetId, Vec<TargetId>>,
}

impl Pools {
    /// Installs the topology's pools at `now`: a pool whose policy did not change keeps its
    /// members' state, and so does a member that stays; `is_target` tells the members (a
    /// group's dependencies that are targets) from nested groups.
    pub fn apply(
        &mut self,
        policies: &BTreeMap<TargetId, PoolPolicy>,
        nodes: &[NodeSpec],
        is_target: impl Fn(&TargetId) -> bool,
        now: Instant,
    ) {
        let mut previous = std::mem::take(&mut self.pools);
        self.member_of.clear();
        for node in nodes {
            let Some(policy) = policies.get(&node.id) else {
                continue;
            };
            let mut pool = match previous.remove(&node.id) {
                Some(pool) if pool.policy == *policy => pool,
                _ => Pool::new(*policy),
            };
            let members: Vec<TargetId> = node
                .depends_on
                .iter()
                .map(|d| d.target.clone())
                .filter(|id| is_target(id))
                .collect();
            for member in &members {
                self.member_of
                    .entry(member.clone())
                    .or_default()
                    .push(node.id.clone());
            }
            pool.detector.set_members(members, now);
            self.pools.insert(node.id.clone(), pool);
        }
    }

    /// Whether there is no pool.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// Judges a real call to `id` in each of its pools.
    pub fn record(&mut self, id: &TargetId, call: &Call, now: Instant) -> Vec<PoolEvent> {
        self.each_pool_of(id, |detector| detector.record(id, call, now))
    }

    /// Counts an active result of `id`, for members in recovery.
    pub fn active(&mut self, id: &TargetId, passed: bool, now: Instant) -> Vec<PoolEvent> {
        self.each_pool_of(id, |detector| {
            if passed {
                detector.pass(id, now)
            } else {
                detector.fail(id, now)
            }
        })
    }

    /// An operator puts `id` back in each pool that has it out.
    pub fn clear(&mut self, id: &TargetId, now: Instant) -> Vec<PoolEvent> {
        self.each_pool_of(id, |detector| {
            detector.operator_clear(id, now).into_iter().collect()
        })
    }

    /// The time-driven changes of every pool.
    pub fn tick(&mut self, now: Instant) -> Vec<PoolEvent> {
        let mut events = Vec::new();
        for (pool, p) in &mut self.pools {
            events.extend(p.detector.tick(now).into_iter().map(|e| (pool.clone(), e)));
        }
        events
    }

    fn each_pool_of(
        &mut self,
        id: &TargetId,
        mut f: impl FnMut(&mut OutlierDetector) -> Vec<OutlierEvent>,
    ) -> Vec<PoolEvent> {
        let mut events = Vec::new();
        for pool in self.member_of.get(id).into_iter().flatten() {
            if let Some(p) = self.pools.get_mut(pool) {
                events.extend(f(&mut p.detector).into_iter().map(|e| (pool.clone(), e)));
            }
        }
        events
    }

    /// Whether `id` is out of any of its pools.
    pub fn is_out(&self, id: &TargetId) -> bool {
        self.detectors_of(id).any(|d| d.is_ejected(id))
    }

    /// `id`'s standing for the API: the pool that has it out if one does, else its first pool,
    /// with its smallest weight over all its pools; `None` when it is in no pool.
    pub fn member(&self, id: &TargetId, now: Instant) -> Option<MemberStatus> {
        let statuses: Vec<MemberStatus> = self
            .detectors_of(id)
            .filter_map(|d| d.status(id, now))
            .collect();
        let weight = statuses.iter().map(|s| s.weight).fold(f64::NAN, f64::min);
        let mut shown = statuses
            .iter()
            .find(|s| s.ejected)
            .or_else(|| statuses.first())
            .cloned()?;
        shown.weight = weight;
        Some(shown)
    }

    /// Every member of any pool, once, as [`member`](Self::member) shows it.
    pub fn members(&self, now: Instant) -> Vec<MemberStatus> {
        self.member_of
            .keys()
            .filter_map(|id| self.member(id, now))
            .collect()
    }

    /// Every pool with its members' shares of traffic and whether it is in panic: the input of
    /// a routing table read without the pools.
    pub fn shares(&self) -> impl Iterator<Item = (&TargetId, Shares)> {
        self.pools.iter().map(|(id, p)| (id, p.detector.shares()))
    }

    fn detectors_of<'a>(&'a self, id: &TargetId) -> impl Iterator<Item = &'a OutlierDetector> {
        self.member_of
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|pool| self.pools.get(pool).map(|p| &p.detector))
    }
}
