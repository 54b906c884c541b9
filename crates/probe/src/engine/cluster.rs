//! Changing an engine's place in a cluster: joining it, following the member set, and how the
//! targets spread over the members. The one place [`Membership`] is changed, under the apply
//! lock, and the roles of the targets with it.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::broadcast;

use super::EngineError;
use super::shared::Inner;
use super::view::Vote;
use crate::cluster::{MemberId, Ownership};
use crate::cluster::{Membership, Published, Replication};
use crate::health::state::HealthState;
use crate::target::TargetId;

/// An engine's side of a cluster ([`Engine::cluster`](super::Engine::cluster)): the protocol a
/// front end (the etcd source) speaks for it, apart from what an embedder calls.
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    pub(super) inner: &'a Arc<Inner>,
}

impl Cluster<'_> {
    /// Makes this engine the member `me` of a cluster, in which targets without a
    /// [`Replication`] of their own have `default`: from now on
    /// it probes only what the member set ([`Cluster::set_members`]) gives it, and shows for the
    /// other targets the verdicts their owners published ([`Cluster::adopt`]). It probes nothing
    /// until the first member set. Once: `false` (and nothing changes) when already in one.
    ///
    /// Join before the first [`Engine::apply`](super::Engine::apply) so that no target is probed before the cluster
    /// says whose it is.
    pub fn join(&self, me: crate::cluster::MemberId, default: Replication) -> bool {
        join(self.inner, me, default)
    }

    /// Makes `members` the cluster's live members. Targets whose members changed start or stop
    /// being probed here; a started one runs first at its place on its interval's grid (so a
    /// member change never probes in a burst) and goes on from the verdict it showed, the one
    /// its previous owner published: a DOWN target stays DOWN, an UP one UP, until this
    /// member's own results say otherwise. Nothing outside a cluster.
    pub fn set_members(
        &self,
        members: impl IntoIterator<Item = crate::cluster::MemberId>,
    ) -> Reassigned {
        set_members(self.inner, members.into_iter().collect())
    }

    /// Takes the verdict the member that decides target `id` published; `false` when this
    /// member decides it (its own verdict stands). An operator's maintenance held here stands
    /// over it. The verdict of a target this engine does not have yet is kept, and the target
    /// starts from it when an apply brings it, whatever its role (until
    /// [`Cluster::withdraw`]).
    pub fn adopt(&self, id: &TargetId, published: &Published) -> bool {
        if let Ok(target) = self.inner.target(id) {
            return target.adopt(published);
        }
        self.inner
            .published
            .lock()
            .insert(id.clone(), published.clone());
        // An apply may have brought the target meanwhile, after looking for a kept verdict.
        match self.inner.target(id) {
            Ok(target) => {
                let kept = self.inner.published.lock().remove(id);
                kept.is_some_and(|p| target.adopt(&p))
            }
            Err(_) => false,
        }
    }

    /// Forgets the verdict kept for a target this engine does not have (its key was deleted).
    pub fn withdraw(&self, id: &TargetId) {
        self.inner.published.lock().remove(id);
    }

    /// Records `member`'s vote on replicated target `id` (`None`: withdrawn, as when the member
    /// left); the owner decides again. This member's own vote is its own results', so it is
    /// not taken from outside.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`].
    pub fn set_vote(
        &self,
        id: &TargetId,
        member: &crate::cluster::MemberId,
        vote: Option<HealthState>,
    ) -> Result<(), EngineError> {
        let target = self.inner.target(id)?;
        if self.inner.ctx.member.get() != Some(member) {
            target.set_vote(member, vote);
        }
        Ok(())
    }

    /// The verdict of target `id` to publish, when this member decides it (every target,
    /// outside a cluster).
    pub fn decided(&self, id: &TargetId) -> Option<Published> {
        self.inner.target(id).ok()?.decided()
    }

    /// Every verdict this member decides, by target, for a publisher that lost track of the
    /// changes (see [`Engine::subscribe`](super::Engine::subscribe)) and must compare them all with what it published.
    pub fn decisions(&self) -> Vec<(TargetId, Published)> {
        let targets = self.inner.targets.load();
        targets
            .values()
            .filter_map(|t| Some((t.id().clone(), t.decided()?)))
            .collect()
    }

    /// This member's vote on replicated target `id`, when it probes it.
    pub fn own_vote(&self, id: &TargetId) -> Option<HealthState> {
        self.inner.target(id).ok()?.own_vote()
    }

    /// This member's votes on the replicated targets it probes.
    pub fn own_votes(&self) -> Vec<(TargetId, HealthState)> {
        let targets = self.inner.targets.load();
        targets
            .values()
            .filter_map(|t| Some((t.id().clone(), t.own_vote()?)))
            .collect()
    }

    /// A stream of this member's votes on replicated targets from now on; a subscriber that
    /// falls more than 1024 behind misses some (`Lagged`) and should read
    /// [`Cluster::own_votes`].
    pub fn subscribe_votes(&self) -> broadcast::Receiver<Vote> {
        self.inner.hub().subscribe_votes()
    }

    /// This member's name and, for every member, how many targets it owns and how many more it
    /// probes as a replica; `None` outside a cluster. One pass over the targets, under the
    /// lock applies take: for an API, not for a hot path.
    pub fn loads(&self) -> Option<Loads> {
        loads(self.inner)
    }
}

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
/// [`Cluster::set_members`](super::Cluster::set_members)).
pub(super) fn set_members(inner: &Inner, members: Vec<MemberId>) -> Reassigned {
    let mut membership = inner.membership.lock();
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

/// Joins `inner` to a cluster as `me` (see [`Cluster::join`](super::Cluster::join)).
pub(super) fn join(inner: &Inner, me: MemberId, default: Replication) -> bool {
    let mut membership = inner.membership.lock();
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
    let membership = inner.membership.lock();
    let membership = membership.as_ref()?;
    Some(Loads {
        me: membership.me.clone(),
        members: membership.ownership.loads(),
    })
}
