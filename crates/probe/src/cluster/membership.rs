//! An engine in a cluster: every member holds every target, probes those the ranking gives it
//! ([`crate::cluster::Ownership`]), and shows for the others the verdict their owner published.
//!
//! What a member does with a target is its [`Role`], kept in the target and changed only by the
//! engine's apply lock (a topology applied, the member set changed). The verdict of a target
//! travels as a [`Published`] value: its deciding member hands it out when it changes
//! ([`Cluster::decided`](crate::engine::Cluster::decided)), the daemon writes it to the cluster's store,
//! and every other member adopts it ([`Cluster::adopt`](crate::engine::Cluster::adopt)), so the graph,
//! readiness and the API of every member see cluster-wide verdicts, and a member that takes a
//! target over resumes from the verdict in force instead of PROBING.

use std::num::NonZeroU8;
use std::time::SystemTime;

use super::{MemberId, Ownership, decide};
use crate::health::state::{HealthState, Quality, StateMachine, Transition};
use crate::target::TargetId;
use tokio::time::Instant;

/// What this engine does with a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Probes it and decides its state from its own results: every target of an engine outside
    /// a cluster, and, in one, the owner's targets that one member probes.
    Decide,
    /// Owns a target that several members probe: probes it (its own vote) and decides its state
    /// from the votes of all of them ([`crate::cluster::decide`]).
    Lead,
    /// Probes a target another member owns: its results are a vote; its state is the owner's
    /// decision.
    Vote,
    /// Does not probe it: its state is the verdict its owner published.
    Follow,
}

impl Role {
    /// The lower-case name used in the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decide => "decide",
            Self::Lead => "lead",
            Self::Vote => "vote",
            Self::Follow => "follow",
        }
    }

    /// Whether this engine probes the target.
    pub const fn probes(self) -> bool {
        !matches!(self, Self::Follow)
    }

    /// Whether this engine decides the target's state (and so publishes it, and exports its
    /// series: each target is in one member's scrape).
    pub const fn decides(self) -> bool {
        matches!(self, Self::Decide | Self::Lead)
    }
}

/// How many members of a cluster probe a target, and how many of them must agree on UP or DOWN.
/// Outside a cluster, neither means anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Replication {
    replicas: NonZeroU8,
    quorum: NonZeroU8,
}

/// Why a [`Replication`] is not valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("quorum {quorum} is more than the {replicas} replicas that vote")]
pub struct ReplicationError {
    /// The replicas asked for.
    pub replicas: u8,
    /// The quorum asked for.
    pub quorum: u8,
}

impl Replication {
    /// One member probes and decides: the default.
    pub const ONE: Self = Self {
        replicas: NonZeroU8::MIN,
        quorum: NonZeroU8::MIN,
    };

    /// `replicas` members probe the target and `quorum` of them must agree.
    ///
    /// # Errors
    /// [`ReplicationError`] when `quorum` exceeds `replicas`.
    pub fn new(replicas: NonZeroU8, quorum: NonZeroU8) -> Result<Self, ReplicationError> {
        if quorum > replicas {
            return Err(ReplicationError {
                replicas: replicas.get(),
                quorum: quorum.get(),
            });
        }
        Ok(Self { replicas, quorum })
    }

    /// Members that probe the target.
    pub fn replicas(self) -> usize {
        usize::from(self.replicas.get())
    }

    /// Votes that decide.
    pub fn quorum(self) -> usize {
        usize::from(self.quorum.get())
    }
}

impl Default for Replication {
    fn default() -> Self {
        Self::ONE
    }
}

/// A target's verdict as the member that decides it hands it out, and as the other members
/// adopt it: the state and the counters its state machine needs to go on from there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The state.
    pub state: HealthState,
    /// Passing results in a row behind it.
    pub consecutive_successes: u32,
    /// Failures in a row behind it.
    pub consecutive_failures: u32,
    /// The failure or degradation behind it, in words.
    pub detail: Option<String>,
    /// When the state began (`None` for a target without a verdict yet).
    pub since: Option<SystemTime>,
}

/// Where a target stands in the cluster, as a status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// What this member does with it.
    pub role: Role,
    /// The members that probe it, its owner first; empty while the member set is unknown.
    pub members: Vec<MemberId>,
    /// The votes known, by member (this member's own among them when it probes the target);
    /// only replicated targets have votes.
    pub votes: Vec<(MemberId, HealthState)>,
}

impl Placement {
    /// The member that decides the target.
    pub fn owner(&self) -> Option<&MemberId> {
        self.members.first()
    }
}

/// A target's standing in the cluster, in the target (under its lock).
pub(crate) struct Placed {
    pub role: Role,
    pub members: Vec<MemberId>,
    /// Votes that decide.
    pub quorum: usize,
    /// This member's own verdict of a replicated target it probes: its vote.
    pub vote: Option<StateMachine>,
    /// The other members' votes.
    pub votes: Vec<(MemberId, HealthState)>,
}

impl Placed {
    /// A placement for a target that has `main` as its state machine so far.
    pub fn new(role: Role, members: Vec<MemberId>, quorum: usize, main: &StateMachine) -> Self {
        let mut placed = Self {
            role: Role::Follow,
            members: Vec::new(),
            quorum,
            vote: None,
            votes: Vec::new(),
        };
        placed.set(role, members, quorum, main);
        placed
    }

    /// Moves to `role` among `members`. A member that starts voting starts from the verdict in
    /// force (its vote is the decision's counters until its own results say otherwise), so a
    /// replica that joins does not pull a decided target back to PROBING.
    pub fn set(&mut self, role: Role, members: Vec<MemberId>, quorum: usize, main: &StateMachine) {
        self.quorum = quorum;
        let votes = matches!(role, Role::Lead | Role::Vote);
        if !votes {
            self.vote = None;
        } else if self.vote.is_none() {
            self.vote = Some(main.clone());
        }
        self.role = role;
        self.votes.retain(|(m, _)| members.contains(m));
        self.members = members;
    }

    /// Feeds a result to this member's vote; returns the vote when it changed.
    pub fn observe(&mut self, quality: Quality, now: Instant) -> Option<HealthState> {
        let vote = self.vote.as_mut()?;
        vote.observe(quality, now).map(|t| t.to)
    }

    /// Records `member`'s vote (`None`: it has none any more); only members that probe the
    /// target count.
    pub fn set_vote(&mut self, member: &MemberId, vote: Option<HealthState>) {
        self.votes.retain(|(m, _)| m != member);
        if let Some(vote) = vote
            && self.members.contains(member)
        {
            self.votes.push((member.clone(), vote));
        }
    }

    /// The owner's decision from every vote, its own first.
    pub fn decision(&self) -> HealthState {
        let own = self.vote.as_ref().map(StateMachine::state);
        decide(
            own.into_iter().chain(self.votes.iter().map(|(_, v)| *v)),
            self.quorum,
        )
    }

    /// Brings the owner's `main` machine to its decision.
    pub fn lead(&self, main: &mut StateMachine) -> Option<Transition> {
        if self.role != Role::Lead {
            return None;
        }
        main.decide(self.decision())
    }

    /// The placement as a status shows it; `me` is this member.
    pub fn view(&self, me: Option<&MemberId>) -> Placement {
        let own = me
            .zip(self.vote.as_ref())
            .map(|(m, v)| (m.clone(), v.state()));
        Placement {
            role: self.role,
            members: self.members.clone(),
            votes: own.into_iter().chain(self.votes.iter().cloned()).collect(),
        }
    }
}

/// This engine's place in a cluster: its name, the replication of targets that set none, and
/// the ranking of every target over the members.
pub(crate) struct Membership {
    pub me: MemberId,
    pub default: Replication,
    pub ownership: Ownership,
}

/// Where a target goes: this member's role, its members (owner first) and its quorum.
pub(crate) type Place = (Role, Vec<MemberId>, usize);

impl Membership {
    /// The role of target `id` here, its members (owner first) and its quorum, for its own
    /// `replication` (the cluster's when `None`).
    pub fn place(&self, id: &TargetId, replication: Option<Replication>) -> Place {
        let replication = replication.unwrap_or(self.default);
        let members: Vec<MemberId> = self
            .ownership
            .ranked(id)
            .take(replication.replicas())
            .cloned()
            .collect();
        let role = match members.iter().position(|m| *m == self.me) {
            Some(0) if replication.replicas() == 1 => Role::Decide,
            Some(0) => Role::Lead,
            Some(_) => Role::Vote,
            None => Role::Follow,
        };
        (role, members, replication.quorum())
    }

    /// Ranks over enough members for every target of `specs`: the ranking is rebuilt (every
    /// target weighed against every member again) when a target asks for more replicas than it
    /// keeps, which only a topology that raises the most replicas asked for does.
    pub fn fit<'a>(
        &mut self,
        most: impl Iterator<Item = Option<Replication>>,
        ids: impl Iterator<Item = &'a TargetId>,
    ) {
        let wanted = most
            .map(|r| r.unwrap_or(self.default).replicas())
            .max()
            .unwrap_or(1)
            .max(self.default.replicas());
        if wanted > self.ownership.replicas() {
            let members: Vec<MemberId> = self.ownership.members().cloned().collect();
            let mut ranked = Ownership::new(wanted);
            ranked.set_members(members);
            self.ownership = ranked;
        }
        self.ownership.set_targets(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::policy::Thresholds;

    fn nz(n: u8) -> NonZeroU8 {
        NonZeroU8::new(n).unwrap()
    }

    #[test]
    fn a_quorum_beyond_the_replicas_is_refused() {
        assert!(Replication::new(nz(3), nz(2)).is_ok());
        assert_eq!(
            Replication::new(nz(2), nz(3)),
            Err(ReplicationError {
                replicas: 2,
                quorum: 3
            })
        );
    }

    #[test]
    fn a_new_voter_starts_from_the_decision_and_the_owner_needs_a_quorum() {
        let member = |n: &str| MemberId::new(n).unwrap();
        let mut main = StateMachine::new(Thresholds::default(), None);
        main.adopt(HealthState::Up, 2, 0);
        let mut placed = Placed::new(
            Role::Lead,
            vec![member("a"), member("b"), member("c")],
            2,
            &main,
        );
        assert_eq!(
            placed.vote.as_ref().map(StateMachine::state),
            Some(HealthState::Up)
        );
        // One vantage point failing is not enough.
        let now = Instant::now();
        for _ in 0..5 {
            placed.observe(Quality::Failed, now);
        }
        placed.set_vote(&member("b"), Some(HealthState::Up));
        placed.set_vote(&member("c"), Some(HealthState::Up));
        assert_eq!(placed.lead(&mut main), None);
        assert_eq!(main.state(), HealthState::Up);
        // A second one is.
        placed.set_vote(&member("b"), Some(HealthState::Down));
        let t = placed.lead(&mut main).unwrap();
        assert_eq!((t.to, main.state()), (HealthState::Down, HealthState::Down));
        // Votes of members that do not probe the target do not count.
        placed.set_vote(&member("z"), Some(HealthState::Up));
        assert_eq!(placed.votes.len(), 2);
    }
}
