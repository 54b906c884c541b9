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
//! The library holds no connection to the cluster's store: the daemon feeds the member set in.

mod ownership;

pub use ownership::{InvalidMemberId, MemberId, Moved, Ownership};
