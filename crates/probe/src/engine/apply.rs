//! Applying a topology: the whole desired state, applied as a diff.
//!
//! Targets whose spec did not change keep their state, counters, schedule and score; removed
//! targets stop (and their metric series go with them); added and changed targets start fresh
//! in `PROBING` (a changed one keeps an operator's maintenance and its metric series). The graph is installed first, since it is the step that can fail;
//! then the hub counts the targets out and in before any new one runs, the new set is published
//! whole, and the pools follow.

use std::sync::Arc;

use tokio::time::Instant;

use super::effects::Seated;
use super::runtime::{Policy, Target};
use super::shared::{Inner, Targets};
use super::view::Diff;
use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;
use crate::topology::{TargetSpec, Topology, TopologyError, by_id, graph_nodes};

/// See the module doc.
pub(super) fn apply(inner: &Inner, topology: Topology) -> Result<Diff, TopologyError> {
    let Topology {
        targets: specs,
        nodes,
        scoring,
        readiness,
        pools,
        groups,
    } = topology;
    let desired = by_id(specs);
    let ids: Vec<&TargetId> = desired.iter().map(|s| &s.id).collect();
    let nodes = graph_nodes(&ids, nodes, &pools, &groups)?;
    let is_desired = |id: &TargetId| ids.binary_search(&id).is_ok();
    let mut membership = inner.membership.lock();
    inner
        .hub()
        .apply_graph(&nodes, scoring, groups, readiness)?;
    let current = inner.targets.load_full();
    let mut diff = Diff::default();
    let mut retired: Vec<Arc<Target>> = current
        .iter()
        .filter(|(id, _)| !is_desired(id))
        .map(|(id, target)| {
            diff.removed.push(id.clone());
            target.clone()
        })
        .collect();
    if let Some(membership) = membership.as_mut() {
        membership.fit(desired.iter().map(|s| s.replication), ids.iter().copied());
    }
    drop(ids);
    // Built by insertion (the ids come sorted), not collected: a collect goes through a vector
    // of every entry first, which at a million targets is memory the allocator keeps.
    let mut next = Targets::new();
    let mut launch = Vec::new();
    let mut policies = Policies::default();
    for spec in desired {
        let (id, probe, policy) = split(spec);
        match current.get(&id) {
            Some(target) if target.seat().probe == probe && *target.policy == policy => {
                diff.unchanged += 1;
                next.insert(id, target.clone());
            }
            Some(target) => {
                diff.changed.push(id.clone());
                let maintenance = target.operator_maintenance();
                retired.push(target.clone());
                launch.push((
                    id,
                    probe,
                    policies.intern(policy),
                    maintenance,
                    Some(target.clone()),
                ));
            }
            None => {
                diff.added.push(id.clone());
                launch.push((id, probe, policies.intern(policy), None, None));
            }
        }
    }
    for target in &retired {
        target.retire();
        inner.scheduler.remove(target.id());
    }
    let seats: Vec<_> = retired.iter().map(|t| t.seat()).collect();
    inner
        .hub()
        .admit(&seats, &diff.changed, launch.iter().map(|(id, ..)| id));
    inner.scheduler.reserve(launch.len());
    for (id, probe, policy, maintenance, predecessor) in launch {
        let target = Arc::new(Target::new(id.clone(), probe, policy, inner.ctx.clone()));
        if let Some(predecessor) = predecessor {
            target.seat().meters.take_over(&predecessor.seat().meters);
        }
        if let Some(maintenance) = maintenance {
            target.enter_maintenance(maintenance);
        }
        if let Some(published) = inner.published.lock().remove(&id) {
            target.resume(&published);
        }
        // In a cluster, only what the ranking gives this member is probed here.
        let probes = membership.as_ref().is_none_or(|m| {
            let (role, members, quorum) = m.place(&id, target.policy.replication);
            target.place(role, members, quorum);
            role.probes()
        });
        if probes {
            inner.scheduler.insert(target.clone());
        }
        next.insert(id, target);
    }
    let pooled = inner.hub().apply_pools(
        &pools,
        &nodes,
        |id| next.get(id).map(|t| t.clone() as Arc<dyn Seated>),
        Instant::now(),
    );
    inner.targets.store(Arc::new(next));
    // Members that left a pool come back, restarted members stay out. Without pools before or
    // after, no target can be out: nothing to look at.
    if pooled {
        for target in inner.targets.load().values() {
            target.set_ejected(inner.hub().is_out(target.id()));
        }
    }
    Ok(diff)
}

/// A spec as the engine keeps it: id, probe and policy.
fn split(spec: TargetSpec) -> (TargetId, ProbeSpec, Policy) {
    let TargetSpec {
        id,
        probe,
        schedule,
        thresholds,
        flap,
        maintenance,
        circuit_breaker,
        skip_active_after,
        dns_stale_for,
        replication,
    } = spec;
    let policy = Policy {
        schedule,
        thresholds,
        flap,
        maintenance,
        circuit_breaker,
        skip_active_after,
        dns_stale_for,
        replication,
    };
    (id, probe, policy)
}

/// The policies met lately in one apply, so that targets declared alike share one. A few are
/// kept, not all: targets come sorted by id, so kinds declared in turn (HTTP and TCP targets
/// in one file) alternate, while a search through every distinct policy would cost an apply of
/// a million targets, each with its own, a quadratic time.
#[derive(Default)]
struct Policies(Vec<Arc<Policy>>);

impl Policies {
    const KEPT: usize = 8;

    fn intern(&mut self, policy: Policy) -> Arc<Policy> {
        if let Some(known) = self.0.iter().find(|known| ***known == policy) {
            return known.clone();
        }
        let policy = Arc::new(policy);
        self.0.insert(0, policy.clone());
        self.0.truncate(Self::KEPT);
        policy
    }
}
