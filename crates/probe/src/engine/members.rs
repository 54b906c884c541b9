//! Changing an engine's place in a cluster: joining it, following the member set, and how the
//! targets spread over the members. The one place [`Membership`] is changed, under the apply
//! lock, and the roles of the targets with it.

use std::collections::HashMap;

use super::cluster::{Membership, Replication};
use super::shared::Inner;
use crate::cluster::{MemberId, Ownership};

/// What a change of the member set did to this member's targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reassigned {
    /// Targets whose members changed.
    pub moved: usize,
    /// Targets this member now decides that another member decided before: handed over to it
    /// (not those given out by the first member set).
    pub taken: usize,
    /// Targets this member decided and now does not.
    pub given: usize,
}

/// Makes `members` the member set of `inner`'s cluster (see
/// [`Engine::set_members`](super::Engine::set_members)).
pub(super) fn set_members(inner: &Inner, members: Vec<MemberId>) -> Reassigned {
    let mut membership = inner.applying.lock();
    let Some(membership) = membership.as_mut() else {
        return Reassigned::default();
    };
    let moved = membership.ownership.set_members(members);
    let targets = inner.targets.load();
    let mut reassigned = Reassigned {
        moved: moved.len(),
        ..Reassigned::default()
    };
    for id in moved.owner.iter().chain(&moved.replicas) {
        let Some(target) = targets.get(id) else {
            continue;
        };
        let (role, members, quorum) = membership.place(id, target.policy.replication);
        let (was, moved) = target.place(role, members, quorum);
        match (was.probes(), role.probes()) {
            // Taken over from a member that left: probed soon, within a quarter of its
            // interval (spread by id), so that a failover takes the lease's TTL and a fraction
            // of the interval, not a whole one; then on its grid.
            (false, true) if moved => inner
                .scheduler
                .insert_within(target.clone(), target.policy.schedule.interval() / 4),
            (false, true) => inner.scheduler.insert(target.clone()),
            (true, false) => inner.scheduler.remove(id),
            _ => {}
        }
        match (was.decides(), role.decides()) {
            (false, true) if moved => reassigned.taken += 1,
            (true, false) => reassigned.given += 1,
            _ => {}
        }
    }
    reassigned
}

/// Joins `inner` to a cluster as `me` (see [`Engine::join_cluster`](super::Engine::join_cluster)).
pub(super) fn join(inner: &Inner, me: MemberId, default: Replication) -> bool {
    let mut membership = inner.applying.lock();
    if membership.is_some() || inner.ctx.member.set(me.clone()).is_err() {
        return false;
    }
    let targets = inner.targets.load();
    let joined = membership.insert(Membership {
        me,
        default,
        ownership: Ownership::new(default.replicas()),
    });
    joined.fit(
        targets.values().map(|t| t.policy.replication),
        targets.keys(),
    );
    for (id, target) in targets.iter() {
        let (role, members, quorum) = joined.place(id, target.policy.replication);
        if target.place(role, members, quorum).0.probes() && !role.probes() {
            inner.scheduler.remove(id);
        }
    }
    true
}

/// How the targets spread over a cluster's members, as one member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loads {
    /// This member.
    pub me: MemberId,
    /// For every member, the targets it owns and how many more it probes as a replica.
    pub members: HashMap<MemberId, (usize, usize)>,
}

/// [`Loads`]; `None` outside a cluster.
pub(super) fn loads(inner: &Inner) -> Option<Loads> {
    let membership = inner.applying.lock();
    let membership = membership.as_ref()?;
    Some(Loads {
        me: membership.me.clone(),
        members: membership.ownership.loads(),
    })
}
