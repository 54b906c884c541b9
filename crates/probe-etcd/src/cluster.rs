//! A cluster of engines through etcd: membership fed to the engine, verdicts published and
//! adopted, votes exchanged, maintenance shared.
//!
//! # Keys, under the cluster's prefix
//! - `members/<name>`: each member's record, bound to its lease ([`crate::membership`]).
//! - `state/<id>`: a target's verdict ([`StateRecord`]), written by the member that decides it
//!   when it changes, and only then: etcd writes follow the transition rate, not the probe rate.
//!   Not bound to a lease: it outlives its writer, so the member that takes the target over
//!   resumes from it. Written in a transaction that holds only while the writer's member key
//!   still carries the writer's lease, so a member whose lease is gone (paused, cut off) cannot
//!   write a verdict beside its successor's: probing twice during a partition can happen,
//!   deciding twice cannot.
//! - `votes/<id>/<name>`: a member's own verdict of a replicated target, bound to its lease, so a
//!   member that dies withdraws its votes with its key.
//! - `maintenance/<id>`: an operator's maintenance ([`MaintenanceRecord`]), bound to a lease of
//!   its duration; every member applies it, so maintenance set on any member holds cluster-wide.
//!
//! # Tasks ([`Cluster::run`])
//! - membership: renews the lease; when it is lost (a pause or a partition past the TTL), joins
//!   again under the same name with a new lease;
//! - members: each fresh member view becomes the engine's member set ([`Cluster::set_members`](probe::engine::Cluster::set_members)).
//!   A stale view (etcd out of reach) changes nothing: a member cut off keeps probing what it
//!   owned, and when etcd is down for everyone nobody takes over anything;
//! - follower: reads the prefix, then watches it; verdicts are adopted, votes recorded,
//!   maintenance applied;
//! - publisher: the engine's transitions and votes mark targets dirty; dirty ones are written in
//!   batches, skipping any whose verdict equals what etcd holds;
//! - sweeper: the first member by name deletes the verdicts of targets that no longer exist,
//!   once they have been unknown to it for three TTLs (a target that one source still declares
//!   may reach the members at different times), so etcd holds only live targets' keys.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use parking_lot::Mutex;
use probe::HealthState;
use probe::TargetId;
use probe::cluster::MemberId;
use probe::cluster::Published;
use probe::engine::Engine;
use probe::graph::NodeKind;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::membership::{Lease, MemberRecord, Membership, MembershipError, View, unix_ms_now};

/// How many writes one transaction carries (etcd allows 128 operations by default).
const BATCH: usize = 100;

/// How a member takes part in a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The key prefix, ending in `/` (`/probe-engine/cluster/` by default in the daemon).
    pub prefix: String,
    /// What this member says of itself; its name must be unique in the cluster.
    pub me: MemberRecord,
    /// How long a member that stops renewing stays in the set.
    pub lease_ttl: Duration,
}

/// A target's verdict as etcd holds it (`<prefix>state/<id>`): about 100 bytes of JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateRecord {
    /// `UP`, `DEGRADED`, `DOWN`, `PROBING` or `MAINTENANCE`.
    pub state: String,
    /// Passing results in a row behind it.
    #[serde(default)]
    pub successes: u32,
    /// Failures in a row behind it.
    #[serde(default)]
    pub failures: u32,
    /// The failure or degradation behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The member that decided it.
    pub by: String,
    /// Since when the target has been in this state, in milliseconds since the Unix epoch.
    pub since_ms: u64,
}

impl StateRecord {
    fn published(&self) -> Option<Published> {
        Some(Published {
            state: parse_state(&self.state)?,
            consecutive_successes: self.successes,
            consecutive_failures: self.failures,
            detail: self.detail.clone(),
            since: probe::outcome::from_unix_ms(self.since_ms),
        })
    }

    fn same_verdict(&self, p: &Published) -> bool {
        self.state == p.state.as_str()
            && self.successes == p.consecutive_successes
            && self.failures == p.consecutive_failures
            && self.detail == p.detail
    }
}

/// An operator's maintenance as etcd holds it (`<prefix>maintenance/<id>`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MaintenanceRecord {
    /// Why, as the operator said.
    pub reason: String,
    /// When it ends, in milliseconds since the Unix epoch.
    pub until_ms: u64,
    /// The member it was set through.
    pub by: String,
}

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Joining failed (a taken name, an unusable TTL, etcd).
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// etcd refused or could not be reached.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
}

/// A member of the cluster: see the module docs. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Engine,
    config: ClusterConfig,
    name: MemberId,
    client: Client,
    membership: Mutex<Arc<Membership>>,
    /// The member view across rejoins.
    view: watch::Sender<View>,
    /// What etcd holds under `state/`, as last read or written.
    states: Mutex<HashMap<TargetId, StateRecord>>,
    /// Targets whose verdict or vote may have to be written.
    dirty: Mutex<Dirty>,
    wake: Notify,
    /// Set once this member left: nothing more is written.
    left: CancellationToken,
    /// The revision [`Cluster::join`] read the keys at.
    read_at: i64,
}

#[derive(Default)]
struct Dirty {
    states: BTreeSet<TargetId>,
    votes: BTreeSet<TargetId>,
}

impl Cluster {
    /// Joins the cluster: the member key is written (refused when the name is taken), then the
    /// verdicts, votes and maintenance already in etcd are read into the engine, so that the
    /// targets this member is given resume from them. The engine must have joined already
    /// ([`Cluster::join`](probe::engine::Cluster::join)), so that it probes nothing before [`Cluster::run`] gives it the
    /// member set.
    ///
    /// # Errors
    /// [`ClusterError`]: a taken name, a TTL under two seconds, or etcd.
    pub async fn join(
        engine: Engine,
        client: Client,
        config: ClusterConfig,
    ) -> Result<Self, ClusterError> {
        let name = MemberId::new(&config.me.name).map_err(MembershipError::from)?;
        let membership = Membership::join(
            client.clone(),
            &config.prefix,
            config.me.clone(),
            config.lease_ttl,
        )
        .await?;
        let view = watch::Sender::new(membership.view().borrow().clone());
        let mut shared = Shared {
            engine,
            name,
            client,
            membership: Mutex::new(Arc::new(membership)),
            view,
            states: Mutex::default(),
            dirty: Mutex::default(),
            wake: Notify::new(),
            left: CancellationToken::new(),
            read_at: 0,
            config,
        };
        shared.read_at = shared.read_keys().await?;
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// This member's name.
    pub fn name(&self) -> &MemberId {
        &self.shared.name
    }

    /// The member set as this member sees it, as it changes.
    pub fn view(&self) -> watch::Receiver<View> {
        self.shared.view.subscribe()
    }

    /// The verdict etcd holds for target `id`, with who decided it and since when.
    pub fn state(&self, id: &TargetId) -> Option<StateRecord> {
        self.shared.states.lock().get(id).cloned()
    }

    /// Every verdict etcd holds, by target.
    pub fn states(&self) -> HashMap<TargetId, StateRecord> {
        self.shared.states.lock().clone()
    }

    /// Runs the member's tasks (see the module docs) until `cancel`.
    pub async fn run(&self, cancel: CancellationToken) {
        let shared = &self.shared;
        tokio::select! {
            () = cancel.cancelled() => {}
            () = shared.stay() => {}
            () = shared.follow_members() => {}
            () = shared.follow_keys() => {}
            () = shared.mark() => {}
            () = shared.publish() => {}
            () = shared.sweep() => {}
        }
    }

    /// Leaves the cluster at once: nothing more is written and the lease is revoked, so the
    /// others take this member's targets over now rather than after the TTL.
    ///
    /// # Errors
    /// What etcd said; the key then goes when the lease runs out.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        self.shared.left.cancel();
        let membership = self.shared.membership.lock().clone();
        membership.leave().await?;
        Ok(())
    }

    /// Sets an operator's maintenance of target `id` cluster-wide: written under a lease of its
    /// duration, and applied by every member (this one included) from the key.
    ///
    /// # Errors
    /// What etcd said; nothing was written then.
    pub async fn start_maintenance(
        &self,
        id: &TargetId,
        reason: &str,
        duration: Duration,
    ) -> Result<(), ClusterError> {
        let until_ms =
            unix_ms_now().saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        let record = MaintenanceRecord {
            reason: reason.to_owned(),
            until_ms,
            by: self.shared.name.to_string(),
        };
        let mut client = self.shared.client.clone();
        // Whole seconds, rounded up; the key may outlive the maintenance by under a second,
        // and members go by `until_ms`.
        let ttl = i64::try_from(duration.as_secs().saturating_add(1)).unwrap_or(i64::MAX);
        let lease = client.lease_grant(ttl, None).await?.id();
        client
            .put(
                self.shared.key("maintenance/", id),
                serde_json::to_vec(&record).unwrap_or_default(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await?;
        Ok(())
    }

    /// Ends an operator's maintenance of target `id` cluster-wide.
    ///
    /// # Errors
    /// What etcd said.
    pub async fn end_maintenance(&self, id: &TargetId) -> Result<(), ClusterError> {
        self.shared
            .client
            .clone()
            .delete(self.shared.key("maintenance/", id), None)
            .await?;
        Ok(())
    }
}

impl Shared {
    fn key(&self, section: &str, id: &TargetId) -> String {
        format!("{}{section}{id}", self.config.prefix)
    }

    /// Keeps this member in the set: renews its lease, and when the lease is lost joins again
    /// under the same name, with a fresh lease, once etcd lets it.
    async fn stay(&self) {
        loop {
            let membership = self.membership.lock().clone();
            let mut view = membership.view();
            let forward = async {
                loop {
                    let fresh = view.borrow_and_update().clone();
                    self.view.send_replace(fresh);
                    if view.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            };
            tokio::select! {
                () = membership.run(self.left.clone()) => {}
                () = forward => {}
            }
            let lost = membership.view().borrow().clone();
            self.view.send_replace(lost);
            if self.left.is_cancelled() {
                std::future::pending::<()>().await;
            }
            // Lost: join again, as often as it takes.
            loop {
                sleep(self.config.lease_ttl / 3).await;
                match Membership::join(
                    self.client.clone(),
                    &self.config.prefix,
                    self.config.me.clone(),
                    self.config.lease_ttl,
                )
                .await
                {
                    Ok(joined) => {
                        tracing::info!(member = %self.name, "rejoined the cluster with a new lease");
                        *self.membership.lock() = Arc::new(joined);
                        break;
                    }
                    Err(e) => tracing::warn!(error = %e, "cluster: could not join again"),
                }
            }
        }
    }

    /// Gives the engine every fresh member set. A stale one (etcd out of reach) or one while
    /// this member's lease is lost changes nothing: the ownership in force stands.
    async fn follow_members(&self) {
        let mut view = self.view.subscribe();
        let mut applied: Option<Vec<MemberId>> = None;
        let mut live = true;
        loop {
            let current = view.borrow_and_update().clone();
            if current.lease == Lease::Live && !live {
                // Back with a new lease: everything this member holds is compared again.
                self.mark_all();
            }
            live = current.lease == Lease::Live;
            metrics::gauge!(crate::metrics::CLUSTER_MEMBERS).set(current.members.len() as f64);
            let names: Vec<MemberId> = current.members.keys().cloned().collect();
            if !current.stale && current.lease == Lease::Live && applied.as_ref() != Some(&names) {
                let reassigned = self.engine.cluster().set_members(names.clone());
                if reassigned.moved > 0 {
                    tracing::info!(
                        members = names.len(),
                        moved = reassigned.moved,
                        taken = reassigned.taken,
                        given = reassigned.given,
                        "cluster members changed"
                    );
                }
                metrics::counter!(crate::metrics::CLUSTER_HANDOFFS)
                    .increment(reassigned.taken as u64);
                if let Some(loads) = self.engine.cluster().loads() {
                    let owned = loads.members.get(&loads.me).map_or(0, |l| l.0);
                    metrics::gauge!(crate::metrics::CLUSTER_OWNED).set(owned as f64);
                }
                applied = Some(names);
                // What this member now decides or votes on may differ from what etcd holds.
                self.mark_all();
            }
            if view.changed().await.is_err() {
                return;
            }
        }
    }

    /// Marks every verdict and vote of this member to be compared with etcd's.
    fn mark_all(&self) {
        let states = self.engine.cluster().decisions();
        let votes = self.engine.cluster().own_votes();
        let mut dirty = self.dirty.lock();
        dirty.states.extend(states.into_iter().map(|(id, _)| id));
        dirty.votes.extend(votes.into_iter().map(|(id, _)| id));
        drop(dirty);
        self.wake.notify_one();
    }

    /// Marks the targets whose verdict or vote this member's engine changed.
    async fn mark(&self) {
        let mut events = self.engine.subscribe();
        let mut votes = self.engine.cluster().subscribe_votes();
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    // A group's verdict is every member's own judgment: nothing to publish.
                    Ok(event) if event.kind == NodeKind::Group => {}
                    Ok(event) => {
                        self.dirty.lock().states.insert(event.target);
                        self.wake.notify_one();
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.mark_all(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                vote = votes.recv() => match vote {
                    Ok(vote) => {
                        self.dirty.lock().votes.insert(vote.target);
                        self.wake.notify_one();
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.mark_all(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }

    /// Writes what is dirty, in batches, while this member's lease is live; what cannot be
    /// written now stays dirty.
    async fn publish(&self) {
        loop {
            self.wake.notified().await;
            loop {
                if self.left.is_cancelled() {
                    return;
                }
                let view = self.view.borrow().clone();
                if view.lease != Lease::Live {
                    // Not a member now: no verdict of this one counts. Rejoining marks all.
                    break;
                }
                let (states, votes) = {
                    let mut dirty = self.dirty.lock();
                    (take(&mut dirty.states), take(&mut dirty.votes))
                };
                if states.is_empty() && votes.is_empty() {
                    break;
                }
                if let Err(e) = self.write(&states, &votes).await {
                    tracing::debug!(error = %e, "cluster: verdicts not written yet");
                    {
                        let mut dirty = self.dirty.lock();
                        dirty.states.extend(states);
                        dirty.votes.extend(votes);
                    }
                    sleep(self.config.lease_ttl / 6).await;
                }
            }
        }
    }

    /// Writes the verdicts of `states` that differ from etcd's and the votes of `votes`, in one
    /// transaction held to this member's lease.
    async fn write(&self, states: &[TargetId], votes: &[TargetId]) -> Result<(), ClusterError> {
        let membership = self.membership.lock().clone();
        let lease = membership.lease();
        let now = unix_ms_now();
        let mut ops = Vec::new();
        let mut written = Vec::new();
        {
            let known = self.states.lock();
            for id in states {
                let Some(published) = self.engine.cluster().decided(id) else {
                    continue;
                };
                let held = known.get(id);
                // No record says PROBING already: a target without a verdict has none to hand
                // over.
                let unchanged = match held {
                    Some(held) => held.same_verdict(&published),
                    None => published.state == HealthState::Probing,
                };
                if unchanged {
                    continue;
                }
                // When the engine says the state began: what a successor names its episode by.
                let since_ms = published.since.map_or(now, probe::outcome::unix_ms);
                let record = StateRecord {
                    state: published.state.as_str().to_owned(),
                    successes: published.consecutive_successes,
                    failures: published.consecutive_failures,
                    detail: published.detail,
                    by: self.name.to_string(),
                    since_ms,
                };
                ops.push(TxnOp::put(
                    self.key("state/", id),
                    serde_json::to_vec(&record).unwrap_or_default(),
                    None,
                ));
                written.push((id.clone(), record));
            }
        }
        for id in votes {
            let Some(vote) = self.engine.cluster().own_vote(id) else {
                continue;
            };
            ops.push(TxnOp::put(
                format!("{}votes/{id}/{}", self.config.prefix, self.name),
                vote.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        let mut client = self.client.clone();
        for chunk in ops.chunks(BATCH) {
            let txn = Txn::new()
                .when([Compare::lease(membership.key(), CompareOp::Equal, lease)])
                .and_then(chunk.to_vec());
            let answer = client.txn(txn).await?;
            if !answer.succeeded() {
                // The member key no longer carries this lease: not a member, nothing counts.
                tracing::warn!(
                    member = %self.name,
                    "cluster: verdicts not written, this member's lease is gone"
                );
                return Ok(());
            }
            metrics::counter!(crate::metrics::CLUSTER_WRITES).increment(chunk.len() as u64);
        }
        let mut known = self.states.lock();
        for (id, record) in written {
            known.insert(id, record);
        }
        Ok(())
    }

    /// Deletes the verdicts of targets gone from the topology (see the module docs).
    async fn sweep(&self) {
        let mut unknown: HashMap<TargetId, Instant> = HashMap::new();
        loop {
            sleep(self.config.lease_ttl).await;
            let view = self.view.borrow().clone();
            let first = view.members.keys().next() == Some(&self.name);
            if !first || view.stale || view.lease != Lease::Live || self.left.is_cancelled() {
                unknown.clear();
                continue;
            }
            let now = Instant::now();
            let held: Vec<TargetId> = self.states.lock().keys().cloned().collect();
            unknown.retain(|id, _| held.contains(id));
            for id in held {
                if self.engine.contains(&id) {
                    unknown.remove(&id);
                } else {
                    unknown.entry(id).or_insert(now);
                }
            }
            let gone: Vec<TargetId> = unknown
                .iter()
                .filter(|(_, since)| now.duration_since(**since) >= 3 * self.config.lease_ttl)
                .map(|(id, _)| id.clone())
                .collect();
            if gone.is_empty() {
                continue;
            }
            match self.delete_states(&gone).await {
                Ok(()) => {
                    tracing::info!(
                        targets = gone.len(),
                        "cluster: verdicts of removed targets deleted"
                    );
                    for id in &gone {
                        unknown.remove(id);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cluster: verdicts of removed targets kept for now")
                }
            }
        }
    }

    /// Deletes `state/<id>` of `ids`, in transactions held to this member's lease.
    async fn delete_states(&self, ids: &[TargetId]) -> Result<(), ClusterError> {
        let membership = self.membership.lock().clone();
        let mut client = self.client.clone();
        for chunk in ids.chunks(BATCH) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|id| TxnOp::delete(self.key("state/", id), None))
                .collect();
            let txn = Txn::new()
                .when([Compare::lease(
                    membership.key(),
                    CompareOp::Equal,
                    membership.lease(),
                )])
                .and_then(ops);
            client.txn(txn).await?;
        }
        Ok(())
    }

    /// Follows `state/`, `votes/` and `maintenance/`: a watch from the revision [`Cluster::join`]
    /// read at, then a read and a watch again after any error.
    async fn follow_keys(&self) {
        let mut revision = self.read_at;
        loop {
            if let Err(e) = self.watch_keys(revision + 1).await {
                tracing::debug!(error = %e, "cluster: key watch interrupted");
            }
            loop {
                sleep(self.config.lease_ttl / 3).await;
                match self.read_keys().await {
                    Ok(read) => {
                        revision = read;
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "cluster: keys not read"),
                }
            }
        }
    }

    /// Reads every key under the prefix into the engine; returns the revision read at.
    async fn read_keys(&self) -> Result<i64, etcd_client::Error> {
        let mut client = self.client.clone();
        let read = client
            .get(
                self.config.prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let revision = read.header().map_or(0, |h| h.revision());
        for kv in read.kvs() {
            self.put(kv.key(), kv.value());
        }
        Ok(revision)
    }

    /// Watches the prefix from `revision` on.
    async fn watch_keys(&self, revision: i64) -> Result<(), etcd_client::Error> {
        let mut client = self.client.clone();
        let mut stream = client
            .watch(
                self.config.prefix.clone(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision),
                ),
            )
            .await?;
        while let Some(reply) = stream.message().await? {
            for event in reply.events() {
                let Some(kv) = event.kv() else { continue };
                match event.event_type() {
                    EventType::Put => self.put(kv.key(), kv.value()),
                    EventType::Delete => self.delete(kv.key()),
                }
            }
        }
        Ok(())
    }

    fn parse(&self, key: &[u8]) -> Option<Key> {
        let rest = std::str::from_utf8(key)
            .ok()?
            .strip_prefix(&self.config.prefix)?;
        let target = |s: &str| TargetId::new(s).ok();
        if let Some(id) = rest.strip_prefix("state/") {
            return Some(Key::State(target(id)?));
        }
        if let Some(id) = rest.strip_prefix("maintenance/") {
            return Some(Key::Maintenance(target(id)?));
        }
        let (id, member) = rest.strip_prefix("votes/")?.split_once('/')?;
        Some(Key::Vote(target(id)?, MemberId::new(member).ok()?))
    }

    fn put(&self, key: &[u8], value: &[u8]) {
        match self.parse(key) {
            Some(Key::State(id)) => {
                let Ok(record) = serde_json::from_slice::<StateRecord>(value) else {
                    tracing::debug!(target_id = %id, "cluster: unreadable verdict ignored");
                    return;
                };
                if let Some(published) = record.published() {
                    // Kept by the engine for a target it does not have yet.
                    self.engine.cluster().adopt(&id, &published);
                }
                self.states.lock().insert(id, record);
            }
            Some(Key::Vote(id, member)) => {
                let vote = std::str::from_utf8(value).ok().and_then(parse_state);
                let _ = self.engine.cluster().set_vote(&id, &member, vote);
            }
            Some(Key::Maintenance(id)) => {
                let Ok(record) = serde_json::from_slice::<MaintenanceRecord>(value) else {
                    return;
                };
                let left = record.until_ms.saturating_sub(unix_ms_now());
                if left > 0 {
                    let _ = self.engine.start_maintenance(
                        &id,
                        record.reason,
                        Duration::from_millis(left),
                    );
                }
            }
            None => {}
        }
    }

    fn delete(&self, key: &[u8]) {
        match self.parse(key) {
            Some(Key::State(id)) => {
                self.states.lock().remove(&id);
                self.engine.cluster().withdraw(&id);
            }
            Some(Key::Vote(id, member)) => {
                let _ = self.engine.cluster().set_vote(&id, &member, None);
            }
            Some(Key::Maintenance(id)) => {
                let _ = self.engine.end_maintenance(&id);
            }
            None => {}
        }
    }
}

/// A key under the cluster's prefix, besides the members'.
enum Key {
    State(TargetId),
    Vote(TargetId, MemberId),
    Maintenance(TargetId),
}

fn take(set: &mut BTreeSet<TargetId>) -> Vec<TargetId> {
    std::mem::take(set).into_iter().collect()
}

fn parse_state(name: &str) -> Option<HealthState> {
    [
        HealthState::Probing,
        HealthState::Up,
        HealthState::Degraded,
        HealthState::Maintenance,
        HealthState::Down,
    ]
    .into_iter()
    .find(|s| s.as_str() == name)
}
