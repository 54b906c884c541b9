//! A cluster of engines sharing one fleet: which members probe which targets.
//!
//! Every member computes, from the same member set and the same target ids, the same ranking of
//! members for each target by rendezvous (highest random weight) hashing: the top `replicas`
//! members probe it, the first of them owns it. No member has to agree with another on
//! anything but the member set (which the daemon takes from etcd leases), and a member change
//! moves only the targets whose top ranks it changes: about `1/N` of them when one of `N`
//! members joins or leaves. [`Ownership`] keeps the ranking and updates it incrementally on a
//! change, and says which targets moved.
//!
//! A target probed by several members (`replicas`) is decided by their votes: [`decide`] is the
//! rule the owner applies.
//!
//! The library holds no connection to the cluster's store: the daemon feeds the member set, the
//! other members' verdicts and votes in ([`Cluster::join`](crate::engine::Cluster::join)
//! and what follows it), and publishes what this member decides.

mod membership;
mod ownership;
mod quorum;

pub(crate) use membership::{Membership, Placed};
pub use membership::{Placement, Published, Replication, ReplicationError, Role};
pub use ownership::{InvalidMemberId, MemberId, Moved, Ownership};
pub use quorum::decide;
