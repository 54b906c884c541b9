//! A cluster's members through etcd: each daemon holds a lease-bound key
//! `<prefix>members/<name>`, and every member watches the set.
//!
//! Joining writes the key in a transaction that succeeds only if no key of that name exists, so
//! a second daemon started with a name already in use is refused (and told which address holds
//! it) instead of silently sharing it. The key carries the lease: while the member renews it the
//! key stays; a member that dies stops renewing, and etcd deletes the key when the lease runs out
//! (`ttl`), which every other member's watch sees. A member that stops on purpose revokes its
//! lease, so that the others see it leave at once rather than after the TTL.
//!
//! [`Membership::run`] renews the lease (three times a TTL) and follows the member set (a read,
//! then a watch from the revision after it); it publishes a [`View`] on each change: the members,
//! whether the view may be out of date (`stale`: etcd could not be reached), and the lease's
//! standing. A member whose renewals fail keeps its view and says it is stale; once its lease
//! would have run out, it knows it is no longer a member ([`Lease::Lost`]): the others have seen
//! its key go.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use probe::cluster::MemberId;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

/// What a member says of itself in its key.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberRecord {
    /// Its name, unique in the cluster.
    pub name: String,
    /// Where its health API listens.
    pub api: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Its version.
    pub version: String,
}

/// The standing of this member's own lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// Renewed within its TTL: this member is in the set.
    Live,
    /// Not renewed for a whole TTL (or etcd said it is gone): the key is deleted, the others
    /// no longer count this member.
    Lost,
}

/// The member set as this member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The members, by name.
    pub members: BTreeMap<MemberId, MemberRecord>,
    /// Set while etcd cannot be reached: the set is the last one seen.
    pub stale: bool,
    /// This member's own lease.
    pub lease: Lease,
}

/// Why a member could not join or stay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// Another live member holds the name.
    #[error(
        "the member name {name} is taken: a member at {holder} holds it; give this one another --member name"
    )]
    NameTaken {
        /// The name asked for.
        name: MemberId,
        /// The API address the holder gave.
        holder: String,
    },
    /// The TTL is under two seconds: etcd counts leases in whole seconds, and a renewal three
    /// times a TTL needs room.
    #[error("the cluster lease_ttl must be at least 2s, got {0:?}")]
    TtlTooShort(Duration),
    /// The name is not a valid member name.
    #[error(transparent)]
    InvalidName(#[from] probe::cluster::InvalidMemberId),
    /// etcd refused or could not be reached.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
}

/// This daemon's membership: its lease-bound key and its view of the set.
pub struct Membership {
    client: Client,
    prefix: String,
    key: String,
    lease: i64,
    ttl: Duration,
    view: watch::Sender<View>,
}

impl Membership {
    /// Joins the cluster under `prefix` as `me`, with a lease of `ttl`.
    ///
    /// # Errors
    /// [`MembershipError::NameTaken`] when a live member holds the name; otherwise what etcd
    /// said.
    pub async fn join(
        mut client: Client,
        prefix: &str,
        me: MemberRecord,
        ttl: Duration,
    ) -> Result<Self, MembershipError> {
        if ttl < Duration::from_secs(2) {
            return Err(MembershipError::TtlTooShort(ttl));
        }
        let name = MemberId::new(&me.name)
            .map_err(|e| MembershipError::Etcd(etcd_client::Error::InvalidArgs(e.to_string())))?;
        let members = format!("{prefix}members/");
        let key = format!("{members}{name}");
        let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let lease = client.lease_grant(seconds, None).await?.id();
        let value = serde_json::to_vec(&me).unwrap_or_default();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let answer = client.txn(txn).await?;
        if !answer.succeeded() {
            let _ = client.lease_revoke(lease).await;
            let holder = answer
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| {
                        serde_json::from_slice::<MemberRecord>(kv.value())
                            .map_or_else(|_| "an unreadable record".to_owned(), |r| r.api)
                    }),
                    _ => None,
                })
                .unwrap_or_else(|| "an unknown address".to_owned());
            return Err(MembershipError::NameTaken { name, holder });
        }
        // Stale until the first read of the set: a member must not act on a set of itself alone.
        let (view, _) = watch::channel(View {
            members: BTreeMap::from([(name, me)]),
            stale: true,
            lease: Lease::Live,
        });
        Ok(Self {
            client,
            prefix: members,
            key,
            lease,
            ttl,
            view,
        })
    }

    /// The lease this member's key is bound to: what keys that must go with the member are
    /// written with, and what a write that only a member may make is compared against.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// This member's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The member set, as it changes.
    pub fn view(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    /// Renews the lease and follows the member set until `cancel`, or until the lease is lost.
    pub async fn run(&self, cancel: CancellationToken) {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = self.renew() => {}
            () = self.follow() => {}
        }
    }

    /// Leaves at once: the lease is revoked, so the key goes now rather than after the TTL.
    ///
    /// # Errors
    /// What etcd said; the key then goes when the lease runs out.
    pub async fn leave(&self) -> Result<(), MembershipError> {
        self.client.clone().lease_revoke(self.lease).await?;
        Ok(())
    }

    /// Renews the lease three times a TTL, on one keep-alive stream (opened again after a
    /// failure); returns once the lease is lost.
    async fn renew(&self) {
        let period = self.ttl / 3;
        let mut renewed = Instant::now();
        let mut session = None;
        loop {
            let answer = timeout(period, async {
                let (keeper, stream) = match &mut session {
                    Some(open) => open,
                    None => session.insert(self.client.clone().lease_keep_alive(self.lease).await?),
                };
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await;
            if !matches!(answer, Ok(Ok(Some(_)))) {
                session = None;
            }
            match answer {
                Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                    renewed = Instant::now();
                    self.view.send_if_modified(|view| {
                        let changed = view.stale;
                        view.stale = false;
                        changed
                    });
                }
                // etcd says the lease is gone: the key is too.
                Ok(Ok(Some(_))) => {
                    self.lost();
                    return;
                }
                _ => {
                    metrics::counter!(crate::metrics::LEASE_RENEWAL_FAILURES).increment(1);
                    self.view.send_if_modified(|view| {
                        let changed = !view.stale;
                        view.stale = true;
                        changed
                    });
                    if renewed.elapsed() >= self.ttl {
                        self.lost();
                        return;
                    }
                }
            }
            sleep(period).await;
        }
    }

    fn lost(&self) {
        tracing::warn!(key = %self.key, "cluster lease lost: this member is out of the set");
        self.view.send_modify(|view| {
            view.lease = Lease::Lost;
            view.stale = true;
        });
    }

    /// Follows the member set: a read, then a watch from the revision after it; again after
    /// any error, with the view marked stale meanwhile.
    async fn follow(&self) {
        loop {
            if let Err(e) = self.follow_once().await {
                tracing::debug!(error = %e, "cluster member watch interrupted");
            }
            self.view.send_if_modified(|view| {
                let changed = !view.stale;
                view.stale = true;
                changed
            });
            sleep(self.ttl / 3).await;
        }
    }

    async fn follow_once(&self) -> Result<(), etcd_client::Error> {
        let mut client = self.client.clone();
        let read = client
            .get(self.prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        let revision = read.header().map_or(0, |h| h.revision());
        let mut members = BTreeMap::new();
        for kv in read.kvs() {
            if let Some((name, record)) = self.decode(kv.key(), kv.value()) {
                members.insert(name, record);
            }
        }
        let mut stream = client
            .watch(
                self.prefix.clone(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            )
            .await?;
        self.publish(&members);
        while let Some(reply) = stream.message().await? {
            for event in reply.events() {
                let Some(kv) = event.kv() else { continue };
                match event.event_type() {
                    EventType::Put => {
                        if let Some((name, record)) = self.decode(kv.key(), kv.value()) {
                            members.insert(name, record);
                        }
                    }
                    EventType::Delete => {
                        if let Some(name) = self.name_of(kv.key()) {
                            members.remove(&name);
                        }
                    }
                }
            }
            self.publish(&members);
        }
        Ok(())
    }

    fn publish(&self, members: &BTreeMap<MemberId, MemberRecord>) {
        let lease = self.view.borrow().lease;
        self.view.send_if_modified(|view| {
            let fresh = View {
                members: members.clone(),
                stale: lease == Lease::Lost,
                lease,
            };
            let changed = *view != fresh;
            *view = fresh;
            changed
        });
    }

    fn name_of(&self, key: &[u8]) -> Option<MemberId> {
        let name = std::str::from_utf8(key).ok()?.strip_prefix(&self.prefix)?;
        MemberId::new(name).ok()
    }

    /// A member's key and value; `None` (ignored) for a key that is not a member's name or a
    /// value that is not a record of that name.
    fn decode(&self, key: &[u8], value: &[u8]) -> Option<(MemberId, MemberRecord)> {
        let name = self.name_of(key)?;
        let record: MemberRecord = serde_json::from_slice(value).ok()?;
        (record.name == name.as_str()).then_some((name, record))
    }
}

/// Milliseconds since the Unix epoch now, for [`MemberRecord::started_unix_ms`].
pub fn unix_ms_now() -> u64 {
    probe::outcome::unix_ms(SystemTime::now())
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("key", &self.key)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}
