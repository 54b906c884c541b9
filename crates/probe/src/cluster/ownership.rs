//! Rendezvous hashing over the member set, kept incrementally.
//!
//! The weight of member `m` for target `t` is a 64-bit mix of the two names' hashes; the
//! members of a target, best first, are those of the highest weights. The hash is spelled out
//! here (FNV-1a over the name's bytes, then a finaliser that spreads every bit) rather than
//! taken from `std`, whose hasher may change between Rust releases: members built by
//! different compilers must rank alike.
//!
//! Each target keeps its top `replicas` (weight, member slot) pairs. A member that joins is
//! weighed against every target once (one mix each) and enters the tops it beats; one that
//! leaves is replaced, in the tops it was in, by the best member not yet there, which needs a
//! full ranking of only those targets (`replicas / N` of them). Member slots are stable while
//! the member stays, so tops hold small indices rather than names.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::target::TargetId;

/// A member's name: as a target id, `[a-z0-9._-]+`, at most 128 bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(Arc<str>);

/// Why a string is not a valid [`MemberId`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid member name {name:?}: {why}")]
pub struct InvalidMemberId {
    name: String,
    why: String,
}

impl MemberId {
    /// A member named `name`.
    ///
    /// # Errors
    /// [`InvalidMemberId`] when `name` breaks the rules of a target id.
    pub fn new(name: &str) -> Result<Self, InvalidMemberId> {
        TargetId::new(name)
            .map(|_| Self(name.into()))
            .map_err(|e| InvalidMemberId {
                name: name.to_owned(),
                why: e.to_string(),
            })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// The targets whose members changed in an update, and so must start or stop being probed
/// somewhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Targets whose owner changed.
    pub owner: Vec<TargetId>,
    /// Targets whose replica set changed but kept their owner.
    pub replicas: Vec<TargetId>,
}

impl Moved {
    /// Every target whose members changed.
    pub fn len(&self) -> usize {
        self.owner.len() + self.replicas.len()
    }

    /// Whether nothing moved.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One target's ranking: its top members, best first.
#[derive(Clone, Debug)]
struct Top {
    hash: u64,
    /// (weight, member slot), by weight, highest first; `replicas` long when there are enough
    /// members.
    ranks: Vec<(u64, u32)>,
}

/// Which members probe which targets: see the module docs.
#[derive(Clone, Debug)]
pub struct Ownership {
    replicas: usize,
    /// Member slots; `None` once the member left (reused by the next to join).
    members: Vec<Option<(MemberId, u64)>>,
    by_name: HashMap<MemberId, u32>,
    targets: HashMap<TargetId, Top>,
}

impl Ownership {
    /// No members and no targets yet; each target will be probed by `replicas` members (at
    /// least one).
    pub fn new(replicas: usize) -> Self {
        Self {
            replicas: replicas.max(1),
            members: Vec::new(),
            by_name: HashMap::new(),
            targets: HashMap::new(),
        }
    }

    /// The members each target has (at most; fewer while the cluster is smaller).
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The live members.
    pub fn members(&self) -> impl Iterator<Item = &MemberId> {
        self.members.iter().flatten().map(|(id, _)| id)
    }

    /// The members of `target`, its owner first; empty for an unknown target or no members.
    pub fn ranked(&self, target: &TargetId) -> impl Iterator<Item = &MemberId> {
        self.targets
            .get(target)
            .map(|top| top.ranks.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|(_, slot)| self.member(*slot))
    }

    /// The owner of `target`.
    pub fn owner(&self, target: &TargetId) -> Option<&MemberId> {
        self.ranked(target).next()
    }

    /// How many targets each live member owns, and how many more it probes as a replica: one
    /// pass over the targets.
    pub fn loads(&self) -> HashMap<MemberId, (usize, usize)> {
        let mut counts = vec![(0, 0); self.members.len()];
        for top in self.targets.values() {
            for (rank, (_, slot)) in top.ranks.iter().enumerate() {
                if let Some(count) = counts.get_mut(*slot as usize) {
                    if rank == 0 {
                        count.0 += 1;
                    } else {
                        count.1 += 1;
                    }
                }
            }
        }
        self.members
            .iter()
            .zip(counts)
            .filter_map(|(member, count)| Some((member.as_ref()?.0.clone(), count)))
            .collect()
    }

    /// Makes `members` the member set; returns the targets whose members changed.
    pub fn set_members(&mut self, members: impl IntoIterator<Item = MemberId>) -> Moved {
        let wanted: std::collections::HashSet<MemberId> = members.into_iter().collect();
        let leaving: Vec<MemberId> = self
            .by_name
            .keys()
            .filter(|m| !wanted.contains(*m))
            .cloned()
            .collect();
        let joining: Vec<MemberId> = wanted
            .into_iter()
            .filter(|m| !self.by_name.contains_key(m))
            .collect();
        // The members, by name, of each target a step touches, as they were before the first:
        // names, since a slot a leaver freed may go to a member that joins.
        let mut was: HashMap<TargetId, Vec<MemberId>> = HashMap::new();
        for member in &leaving {
            self.leave(member, &mut was);
        }
        for member in joining {
            self.join(member, &mut was);
        }
        let mut moved = Moved::default();
        for (id, old) in was {
            let now: Vec<&MemberId> = self.ranked(&id).collect();
            if old.first() != now.first().copied() {
                moved.owner.push(id);
            } else if old.iter().ne(now.iter().copied()) {
                moved.replicas.push(id);
            }
        }
        moved
    }

    /// Notes the members of `id` before a step changes them, unless an earlier step did.
    fn note(
        members: &[Option<(MemberId, u64)>],
        was: &mut HashMap<TargetId, Vec<MemberId>>,
        id: &TargetId,
        top: &Top,
    ) {
        if !was.contains_key(id) {
            let names = top
                .ranks
                .iter()
                .filter_map(|(_, slot)| members.get(*slot as usize)?.as_ref())
                .map(|(name, _)| name.clone())
                .collect();
            was.insert(id.clone(), names);
        }
    }

    /// Makes `targets` the target set: new ones ranked, gone ones forgotten.
    pub fn set_targets<'a>(&mut self, targets: impl IntoIterator<Item = &'a TargetId>) {
        let mut kept = HashMap::with_capacity(self.targets.len());
        for id in targets {
            let top = match self.targets.remove(id) {
                Some(top) => top,
                None => self.rank(hash(id.as_str(), TARGET_SEED), &[]),
            };
            kept.insert(id.clone(), top);
        }
        self.targets = kept;
    }

    fn member(&self, slot: u32) -> Option<&MemberId> {
        self.members
            .get(slot as usize)
            .and_then(Option::as_ref)
            .map(|(id, _)| id)
    }

    fn join(&mut self, member: MemberId, was: &mut HashMap<TargetId, Vec<MemberId>>) {
        let member_hash = hash(member.as_str(), MEMBER_SEED);
        let slot = match self.members.iter().position(Option::is_none) {
            Some(free) => {
                self.members[free] = Some((member.clone(), member_hash));
                free
            }
            None => {
                self.members.push(Some((member.clone(), member_hash)));
                self.members.len() - 1
            }
        };
        let slot = u32::try_from(slot).unwrap_or(u32::MAX);
        self.by_name.insert(member, slot);
        let replicas = self.replicas;
        for (id, top) in &mut self.targets {
            let w = weight(top.hash, member_hash);
            let at = top.ranks.partition_point(|(other, _)| *other > w);
            if at < replicas {
                // The new slot is not in `members` yet as far as the old names go: it was free.
                Self::note(&self.members, was, id, top);
                top.ranks.insert(at, (w, slot));
                top.ranks.truncate(replicas);
            }
        }
    }

    fn leave(&mut self, member: &MemberId, was: &mut HashMap<TargetId, Vec<MemberId>>) {
        let Some(slot) = self.by_name.remove(member) else {
            return;
        };
        let affected: Vec<TargetId> = self
            .targets
            .iter()
            .filter(|(_, top)| top.ranks.iter().any(|(_, s)| *s == slot))
            .map(|(id, top)| {
                Self::note(&self.members, was, id, top);
                id.clone()
            })
            .collect();
        self.members[slot as usize] = None;
        for id in affected {
            if let Some(top) = self.targets.get(&id) {
                let kept: Vec<(u64, u32)> = top
                    .ranks
                    .iter()
                    .copied()
                    .filter(|(_, s)| *s != slot)
                    .collect();
                let ranked = self.rank(top.hash, &kept);
                self.targets.insert(id, ranked);
            }
        }
    }

    /// The top of a target of hash `hash` that already has `kept` (still members, in order),
    /// filled up with the best of the other members.
    fn rank(&self, hash: u64, kept: &[(u64, u32)]) -> Top {
        let mut ranks = kept.to_vec();
        if ranks.len() < self.replicas {
            let mut others: Vec<(u64, u32)> = self
                .members
                .iter()
                .enumerate()
                .filter_map(|(slot, m)| {
                    let slot = u32::try_from(slot).ok()?;
                    let (_, member_hash) = m.as_ref()?;
                    (!kept.iter().any(|(_, s)| *s == slot))
                        .then(|| (weight(hash, *member_hash), slot))
                })
                .collect();
            others.sort_unstable_by(|a, b| b.cmp(a));
            ranks.extend(others.into_iter().take(self.replicas - ranks.len()));
            ranks.sort_unstable_by(|a, b| b.cmp(a));
        }
        Top { hash, ranks }
    }
}

const TARGET_SEED: u64 = 0x7461_7267_6574_0001;
const MEMBER_SEED: u64 = 0x6d65_6d62_6572_0001;

/// FNV-1a over `name`, from `seed`, finalised: the same on every member and every build.
fn hash(name: &str, seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for byte in name.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// The weight of a member for a target.
fn weight(target: u64, member: u64) -> u64 {
    mix(target ^ member.rotate_left(29))
}

/// A 64-bit finaliser (MurmurHash3's): every input bit reaches every output bit.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> MemberId {
        MemberId::new(name).unwrap()
    }

    fn targets(n: usize) -> Vec<TargetId> {
        (0..n)
            .map(|i| TargetId::new(&format!("t-{i}")).unwrap())
            .collect()
    }

    fn owners(o: &Ownership, ids: &[TargetId]) -> Vec<Vec<MemberId>> {
        ids.iter()
            .map(|id| o.ranked(id).cloned().collect())
            .collect()
    }

    fn cluster(replicas: usize, members: &[&str], ids: &[TargetId]) -> Ownership {
        let mut o = Ownership::new(replicas);
        o.set_targets(ids);
        o.set_members(members.iter().map(|m| member(m)));
        o
    }

    #[test]
    fn an_ownership_reports_its_replicas_members_and_what_moved() {
        assert_eq!(Ownership::new(0).replicas(), 1, "at least one");
        let ids = targets(200);
        let mut o = cluster(2, &["m-1", "m-2"], &ids);
        assert_eq!(o.replicas(), 2);
        let moved = o.set_members(["m-1", "m-2", "m-3"].map(member));
        assert!(!moved.owner.is_empty() && !moved.replicas.is_empty());
        assert_eq!(moved.len(), moved.owner.len() + moved.replicas.len());
        assert!(!moved.is_empty());
        let mut live: Vec<&str> = o.members().map(MemberId::as_str).collect();
        live.sort_unstable();
        assert_eq!(live, ["m-1", "m-2", "m-3"]);

        let same = o.set_members(["m-1", "m-2", "m-3"].map(member));
        assert_eq!((same.len(), same.is_empty()), (0, true));
        o.set_members(["m-3"].map(member));
        assert_eq!(
            o.members().map(MemberId::as_str).collect::<Vec<_>>(),
            ["m-3"]
        );
    }

    #[test]
    fn a_member_id_shows_as_its_name() {
        let m = member("eu-1");
        assert_eq!(format!("{m}"), "eu-1");
        assert_eq!(format!("{m:?}"), "\"eu-1\"");
    }

    #[test]
    fn the_hash_is_fixed_across_builds() {
        // Pinned (and computed again by an independent implementation of the same three
        // steps): a change here would split a cluster of mixed versions. FNV-1a of "a" is
        // 0xaf63dc4c8601ec8c, finalised below.
        assert_eq!(hash("a", 0), 0x82a2_a958_a9be_ce5b);
        assert_eq!(
            weight(hash("t-1", TARGET_SEED), hash("m-1", MEMBER_SEED)) % 1000,
            348
        );
    }

    #[test]
    fn every_target_has_distinct_members_and_exactly_one_owner() {
        let ids = targets(3000);
        let o = cluster(2, &["a", "b", "c"], &ids);
        let mut owned = 0;
        for id in &ids {
            let ranked: Vec<_> = o.ranked(id).collect();
            assert_eq!(ranked.len(), 2);
            assert_ne!(ranked[0], ranked[1]);
        }
        let loads = o.loads();
        for m in ["a", "b", "c"] {
            let (own, replicated) = loads[&member(m)];
            assert!(
                (1800..2200).contains(&(own + replicated)),
                "{m} probes {own} + {replicated}"
            );
            assert!((800..1200).contains(&own), "{m} owns {own}");
            owned += own;
        }
        assert_eq!(owned, 3000);
    }

    #[test]
    fn members_agree_whatever_the_order_they_learned_of_each_other() {
        let ids = targets(500);
        let one = cluster(2, &["a", "b", "c", "d"], &ids);
        let mut other = Ownership::new(2);
        other.set_members([member("d"), member("b")]);
        other.set_targets(&ids);
        other.set_members([member("c"), member("d"), member("b"), member("x")]);
        other.set_members([member("a"), member("b"), member("c"), member("d")]);
        assert_eq!(owners(&one, &ids), owners(&other, &ids));
    }

    #[test]
    fn a_join_moves_about_one_nth_and_only_to_the_newcomer() {
        let ids = targets(10_000);
        let mut o = cluster(1, &["a", "b", "c"], &ids);
        let before = owners(&o, &ids);
        let moved = o.set_members(["a", "b", "c", "d"].map(member));
        assert!(
            (2000..3000).contains(&moved.owner.len()),
            "{}",
            moved.owner.len()
        );
        assert!(moved.replicas.is_empty());
        for (id, was) in ids.iter().zip(before) {
            let now = o.owner(id).unwrap();
            assert!(
                now == &was[0] || now.as_str() == "d",
                "{id} moved between old members"
            );
            assert_eq!(moved.owner.contains(id), now != &was[0]);
        }
    }

    #[test]
    fn a_leave_moves_only_the_leavers_targets() {
        let ids = targets(10_000);
        let mut o = cluster(2, &["a", "b", "c", "d"], &ids);
        let before = owners(&o, &ids);
        let moved = o.set_members(["a", "b", "d"].map(member));
        for (id, was) in ids.iter().zip(&before) {
            let had_c = was.iter().any(|m| m.as_str() == "c");
            let changed = moved.owner.contains(id) || moved.replicas.contains(id);
            assert_eq!(changed, had_c, "{id}");
            if !had_c {
                assert_eq!(&o.ranked(id).cloned().collect::<Vec<_>>(), was);
            }
        }
        // The same as ranking from scratch over the members left.
        let fresh = cluster(2, &["a", "b", "d"], &ids);
        assert_eq!(owners(&o, &ids), owners(&fresh, &ids));
    }

    #[test]
    fn fewer_members_than_replicas_probe_everything_and_none_leaves_nothing_owned() {
        let ids = targets(10);
        let mut o = cluster(3, &["a", "b"], &ids);
        assert!(ids.iter().all(|id| o.ranked(id).count() == 2));
        let moved = o.set_members([]);
        assert_eq!(moved.owner.len(), 10);
        assert!(ids.iter().all(|id| o.owner(id).is_none()));
        o.set_members([member("z")]);
        assert!(ids.iter().all(|id| o.owner(id) == Some(&member("z"))));
    }

    #[test]
    fn targets_come_and_go_without_moving_the_others() {
        let ids = targets(100);
        let mut o = cluster(1, &["a", "b", "c"], &ids);
        let before = owners(&o, &ids[..50]);
        o.set_targets(&ids[..50]);
        assert_eq!(owners(&o, &ids[..50]), before);
        assert_eq!(o.owner(&ids[60]), None);
        assert!(MemberId::new("Bad Name").is_err());
    }
}
