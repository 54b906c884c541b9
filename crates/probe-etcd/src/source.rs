//! The sync engine: [`Source`] keeps a copy of everything under a prefix in etcd and publishes
//! it as [`Snapshot`]s.
//!
//! # How it stays exact
//! - **Read, then watch from the next revision.** A session reads the whole prefix at one
//!   revision `R` (in pages pinned to `R`), then watches the prefix from `R + 1`. etcd replays
//!   every event after `R`, so nothing falls in between and nothing is applied twice.
//! - **Events are applied by revision.** An event whose revision the content already covers is
//!   skipped, so a periodic re-read (which moves the content ahead of the watch) and the watch
//!   that keeps running after it never fight. The content's revision advances with the events
//!   applied and with progress notifications (requested on every watch): a watch response's
//!   header revision is *not* trusted while etcd is still replaying history, because it may be
//!   ahead of events still to come.
//! - **One publish per change.** A batch of events (one watch response: all events of a
//!   transaction, or a replay batch) or a full read that changed the content gives one snapshot.
//!   Nothing is published when nothing changed.
//! - **Periodic resync.** Every `resync_period` the prefix is read in full again and replaces
//!   the content: whatever went wrong, the content is exact again one period later.
//!
//! # When things go wrong
//! - **Compaction.** etcd keeps history only back to its last compaction. A watch that must
//!   start from a compacted revision is cancelled by etcd with the compaction revision; the
//!   source then reads the prefix in full and watches from the new revision, on the same
//!   connection and without backoff.
//! - **Lost connection, etcd down.** The session ends, the content and the last snapshot are
//!   kept (an outage never publishes an empty snapshot), the status turns *stale* with the time
//!   it happened and the error, and the source reconnects after a jittered exponential backoff
//!   ([`probe::health::ExponentialBackoff`]). A new connection always starts with a full read:
//!   whatever happened meanwhile (even a restore from backup, with older revisions) is picked
//!   up. A dead peer that sends nothing is noticed by HTTP/2 pings.
//! - **Every wait is bounded and cancellable.** Each call has a timeout and every wait selects
//!   on the [`CancellationToken`] passed to [`Source::run`], which returns promptly once it is
//!   cancelled.
//!
//! # Resuming
//! [`Source::resume`] starts from a snapshot obtained earlier (from a previous source, say,
//! before a configuration change): that snapshot is the initial content, and the first session
//! watches from its revision + 1 instead of reading everything. If that history is compacted,
//! or etcd is behind the snapshot (restored from a backup), the source falls back to a full
//! read. A resumed source is *syncing* until its first watch is established.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use etcd_client::{EventType, GetOptions, KvClient, WatchClient, WatchOptions, WatchResponse};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{SourceConfig, Validated};
use crate::error::{Error, Operation};
use crate::metrics as m;
use crate::snapshot::{Entry, Snapshot};
use crate::status::{Status, SyncState};

/// Why the prefix was read in full, the `reason` label of `probe_etcd_resyncs_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResyncReason {
    /// The first read of the source.
    Initial,
    /// The first read after a lost connection.
    Reconnect,
    /// The periodic safety net.
    Periodic,
    /// The watch's start revision was compacted.
    Compacted,
    /// etcd's revision is older than the content's.
    RevisionWentBack,
}

impl ResyncReason {
    fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Reconnect => "reconnect",
            Self::Periodic => "periodic",
            Self::Compacted => "compacted",
            Self::RevisionWentBack => "revision_went_back",
        }
    }
}

/// How many times one session reads in full because its watch could not continue, before it
/// gives up and backs off.
const MAX_REREADS_PER_SESSION: u32 = 3;

/// Why a session stopped.
enum Halt {
    /// The token was cancelled: [`Source::run`] returns.
    Cancelled,
    /// The session failed: back off, reconnect, read again.
    Failed(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Self {
        Self::Failed(e)
    }
}

/// Syncs one etcd prefix into published [`Snapshot`]s.
///
/// Build it, take the receivers it hands out, then spawn [`run`](Self::run):
///
/// ```no_run
/// use probe_etcd::{Source, SourceConfig};
/// use tokio_util::sync::CancellationToken;
///
/// # async fn demo() -> Result<(), probe_etcd::Error> {
/// let source = Source::new(SourceConfig::new(["http://127.0.0.1:2379"]))?;
/// let mut snapshots = source.snapshots();
/// let status = source.status();
/// let cancel = CancellationToken::new();
/// let task = tokio::spawn(source.run(cancel.clone()));
/// while snapshots.changed().await.is_ok() {
///     let snapshot = snapshots.borrow_and_update().clone();
///     println!("{} entries at revision {}", snapshot.len(), snapshot.revision);
///     println!("sync is {}", status.borrow().state.as_str());
/// #   break;
/// }
/// cancel.cancel();
/// let _ = task.await;
/// # Ok(()) }
/// ```
pub struct Source {
    config: Validated,
    /// A watch channel: consumers only ever want the latest content, and a slow one must not
    /// hold the source back nor see intermediate states it would discard anyway.
    snapshot: watch::Sender<Arc<Snapshot>>,
    /// Same reasoning: a status page reads the latest status whenever it is asked.
    status: watch::Sender<Status>,
    /// Whether the first session watches from the initial snapshot's revision.
    resume: bool,
}

impl Source {
    /// A source that starts empty (revision 0) and reads the prefix first.
    ///
    /// # Errors
    /// - [`Error::NoEndpoints`], [`Error::EmptyEndpoint`];
    /// - [`Error::PlainEndpointWithTls`] when TLS is set and an endpoint is `http://`;
    /// - [`Error::EmptyPrefix`];
    /// - [`Error::ZeroDuration`] for a zero period or timeout;
    /// - [`Error::Backoff`] for an invalid backoff;
    /// - [`Error::TlsFile`] when a TLS file cannot be read.
    pub fn new(config: SourceConfig) -> Result<Self, Error> {
        Self::build(config, Arc::new(Snapshot::default()), false)
    }

    /// A source that starts from `snapshot` and catches up from its revision by watching (see
    /// the module docs). A snapshot at revision 0 is the same as [`new`](Self::new).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn resume(config: SourceConfig, snapshot: Arc<Snapshot>) -> Result<Self, Error> {
        let resume = snapshot.revision > 0;
        Self::build(config, snapshot, resume)
    }

    fn build(config: SourceConfig, initial: Arc<Snapshot>, resume: bool) -> Result<Self, Error> {
        let config = config.validate()?;
        let status = Status {
            revision: initial.revision,
            entries: initial.len(),
            ..Status::default()
        };
        Ok(Self {
            config,
            snapshot: watch::Sender::new(initial),
            status: watch::Sender::new(status),
            resume,
        })
    }

    /// A receiver of the content. It has seen the current snapshot, so `changed()` resolves at
    /// the next publish.
    pub fn snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshot.subscribe()
    }

    /// A receiver of the status; `borrow()` is the cheap accessor.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// Syncs until `cancel` is cancelled, then returns. Failures never end it: they are shown
    /// in the status and retried.
    pub async fn run(self, cancel: CancellationToken) {
        let mut runner = Runner::new(self);
        tracing::info!(
            prefix = %String::from_utf8_lossy(&runner.config.prefix),
            endpoints = ?runner.config.endpoints,
            "etcd sync starting"
        );
        loop {
            let error = match runner.session(&cancel).await {
                Halt::Cancelled => break,
                Halt::Failed(error) => error,
            };
            runner.failed(&error);
            let delay = runner
                .config
                .backoff
                .delay(runner.attempt, 1.0, &mut rand::rng());
            runner.attempt = runner.attempt.saturating_add(1);
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        metrics::gauge!(m::UP).set(0.0);
        tracing::info!("etcd sync stopped");
    }
}

/// The running state of a [`Source`].
struct Runner {
    config: Validated,
    snapshot: watch::Sender<Arc<Snapshot>>,
    status: watch::Sender<Status>,
    /// The end of the prefix's key range (exclusive), computed once.
    range_end: Vec<u8>,
    /// The current content, by key suffix. Published copies are taken from it.
    content: BTreeMap<String, Entry>,
    /// The revision `content` is known to be current at.
    revision: i64,
    /// The next session watches from `revision + 1` without reading first (a resumed source
    /// that has not confirmed its snapshot yet).
    resume: bool,
    /// The content has been confirmed against etcd at least once: a failure then makes the
    /// status *stale* rather than *syncing*.
    confirmed: bool,
    /// When the next periodic full read is due.
    next_resync: Instant,
    /// Failed sessions since the last sync, for the backoff.
    attempt: u32,
}

impl Runner {
    fn new(source: Source) -> Self {
        let initial = source.snapshot.borrow().clone();
        let next_resync = Instant::now() + source.config.resync_period;
        Self {
            range_end: prefix_end(&source.config.prefix),
            content: initial.entries.clone(),
            revision: initial.revision,
            resume: source.resume,
            confirmed: false,
            next_resync,
            attempt: 0,
            config: source.config,
            snapshot: source.snapshot,
            status: source.status,
        }
    }

    /// One connection: read (unless resuming), then watch until something fails.
    async fn session(&mut self, cancel: &CancellationToken) -> Halt {
        let bound = self.config.connect_timeout + self.config.request_timeout;
        let connect = etcd_client::Client::connect(
            &self.config.endpoints,
            Some(self.config.connect_options()),
        );
        let client = match call(cancel, Operation::Connect, bound, connect).await {
            Ok(client) => client,
            Err(halt) => return halt,
        };
        let mut kv = client.kv_client();
        let mut watcher = client.watch_client();
        let mut read = if self.resume {
            None
        } else if self.confirmed {
            Some(ResyncReason::Reconnect)
        } else {
            Some(ResyncReason::Initial)
        };
        // Re-reads without backoff on this connection, capped: a compaction that keeps racing
        // the watch (an aggressive auto-compaction) must not turn into a hot loop.
        let mut rereads = 0;
        loop {
            if let Some(reason) = read.take()
                && let Err(halt) = self.full_read(&mut kv, reason, cancel).await
            {
                return halt;
            }
            let error = match self.watch(&mut watcher, &mut kv, cancel).await {
                Halt::Failed(error) => error,
                Halt::Cancelled => return Halt::Cancelled,
            };
            self.watch_ended(&error);
            read = match error {
                Error::Compacted { .. } => Some(ResyncReason::Compacted),
                Error::RevisionWentBack { .. } => Some(ResyncReason::RevisionWentBack),
                _ => return Halt::Failed(error),
            };
            rereads += 1;
            if rereads > MAX_REREADS_PER_SESSION {
                return Halt::Failed(error);
            }
            // The state stays as it is during the re-read, which is bounded like every call.
            self.resume = false;
        }
    }

    /// Reads the whole prefix at one revision, page by page, and replaces the content.
    async fn full_read(
        &mut self,
        kv: &mut KvClient,
        reason: ResyncReason,
        cancel: &CancellationToken,
    ) -> Result<(), Halt> {
        let timeout = self.config.request_timeout;
        let mut entries = BTreeMap::new();
        // Pinned by the first page, so all pages show the same revision.
        let mut revision = 0;
        let mut from = self.config.prefix.clone();
        loop {
            let mut options = GetOptions::new()
                .with_range(self.range_end.clone())
                .with_limit(self.config.page_size);
            if revision != 0 {
                options = options.with_revision(revision);
            }
            let mut page = call(
                cancel,
                Operation::Range,
                timeout,
                kv.get(from.clone(), Some(options)),
            )
            .await?;
            if revision == 0 {
                revision = page.header().map(|h| h.revision()).ok_or(Error::NoHeader {
                    op: Operation::Range,
                })?;
            }
            let more = page.more();
            let mut last = None;
            for kv in page.take_kvs() {
                let mod_revision = kv.mod_revision();
                let (key, value) = kv.into_key_value();
                if let Some(id) = self.suffix(&key) {
                    let value = Bytes::from(value);
                    entries.insert(
                        id,
                        Entry {
                            value,
                            mod_revision,
                        },
                    );
                }
                last = Some(key);
            }
            match last {
                // The next page starts right after the last key: the smallest key above it.
                Some(mut key) if more => {
                    key.push(0);
                    from = key;
                }
                _ => break,
            }
        }
        self.replaced(entries, revision, reason);
        Ok(())
    }

    /// Watches from `revision + 1` until the watch fails or `cancel` fires, running the
    /// periodic full read on the way.
    async fn watch(
        &mut self,
        watcher: &mut WatchClient,
        kv: &mut KvClient,
        cancel: &CancellationToken,
    ) -> Halt {
        let timeout = self.config.request_timeout;
        let options = WatchOptions::new()
            .with_range(self.range_end.clone())
            .with_start_revision(self.revision + 1)
            .with_progress_notify();
        let watch = watcher.watch(self.config.prefix.clone(), Some(options));
        let mut stream = match call(cancel, Operation::Watch, timeout, watch).await {
            Ok(stream) => stream,
            Err(halt) => return halt,
        };
        // etcd answers a create request with a `created` response carrying its current
        // revision; a watch that could not be created at all is `canceled` here too.
        let created = match call(cancel, Operation::Watch, timeout, stream.message()).await {
            Ok(Some(response)) => response,
            Ok(None) => return Halt::Failed(Error::WatchClosed),
            Err(halt) => return halt,
        };
        let current = match created.header() {
            Some(header) => header.revision(),
            None => {
                return Halt::Failed(Error::NoHeader {
                    op: Operation::Watch,
                });
            }
        };
        if current < self.revision {
            return Halt::Failed(Error::RevisionWentBack {
                known: self.revision,
                current,
            });
        }
        if let Err(e) = self.on_response(created) {
            return Halt::Failed(e);
        }
        self.live();
        loop {
            let resync_at = self.next_resync;
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Halt::Cancelled,
                () = tokio::time::sleep_until(resync_at) => {
                    // The watch keeps running meanwhile (etcd buffers its events); the ones the
                    // read already covers are skipped by revision.
                    if let Err(halt) = self.full_read(kv, ResyncReason::Periodic, cancel).await {
                        return halt;
                    }
                }
                message = stream.message() => match message {
                    Ok(Some(response)) => {
                        if let Err(e) = self.on_response(response) {
                            return Halt::Failed(e);
                        }
                    }
                    Ok(None) => return Halt::Failed(Error::WatchClosed),
                    Err(source) => {
                        return Halt::Failed(Error::Etcd { op: Operation::Watch, source });
                    }
                },
            }
        }
    }

    /// Applies one watch response: a batch of events, a progress notification, or the end of
    /// the watch.
    fn on_response(&mut self, response: WatchResponse) -> Result<(), Error> {
        if response.compact_revision() != 0 {
            return Err(Error::Compacted {
                requested: self.revision + 1,
                compacted: response.compact_revision(),
            });
        }
        if response.canceled() {
            return Err(Error::WatchCanceled {
                reason: response.cancel_reason().to_owned(),
            });
        }
        let events = response.events();
        if events.is_empty() {
            // A progress notification says every event up to its header revision was sent. The
            // `created` response is not one: its revision is etcd's, not the watch's position.
            if !response.created()
                && let Some(header) = response.header()
                && header.revision() > self.revision
            {
                self.revision = header.revision();
                let revision = self.revision;
                self.status.send_modify(|s| s.revision = revision);
                metrics::gauge!(m::REVISION).set(revision as f64);
            }
            return Ok(());
        }
        // Skip what the content already covers; all events of one transaction share a
        // revision, so the bar stays where it was for the whole batch.
        let covered = self.revision;
        let mut applied = 0u64;
        let mut changed = false;
        for event in events {
            let Some(kv) = event.kv() else { continue };
            let revision = kv.mod_revision();
            if revision <= covered {
                continue;
            }
            self.revision = self.revision.max(revision);
            applied += 1;
            let Some(id) = self.suffix(kv.key()) else {
                continue;
            };
            match event.event_type() {
                EventType::Put => {
                    let entry = Entry {
                        value: Bytes::copy_from_slice(kv.value()),
                        mod_revision: revision,
                    };
                    self.content.insert(id, entry);
                    changed = true;
                }
                EventType::Delete => changed |= self.content.remove(&id).is_some(),
            }
        }
        metrics::counter!(m::EVENTS).increment(applied);
        metrics::gauge!(m::REVISION).set(self.revision as f64);
        let revision = self.revision;
        self.status.send_modify(|s| {
            s.revision = revision;
            s.counters.events += applied;
        });
        if changed {
            self.publish();
        }
        Ok(())
    }

    /// Installs the result of a full read.
    fn replaced(&mut self, entries: BTreeMap<String, Entry>, revision: i64, reason: ResyncReason) {
        let changed = entries != self.content;
        if changed && reason == ResyncReason::Periodic {
            // Usually writes the read saw before the watch delivered them; a real drift would
            // show up here too.
            tracing::debug!(revision, "periodic resync changed the content");
        }
        self.content = entries;
        self.revision = revision;
        self.next_resync = Instant::now() + self.config.resync_period;
        metrics::counter!(m::RESYNCS, "reason" => reason.as_str()).increment(1);
        metrics::gauge!(m::REVISION).set(revision as f64);
        let now = SystemTime::now();
        self.status.send_modify(|s| {
            s.revision = revision;
            s.last_resync = Some(now);
            s.counters.resyncs += 1;
        });
        if changed {
            self.publish();
        }
    }

    /// Publishes the content as a new snapshot.
    fn publish(&mut self) {
        let snapshot = Arc::new(Snapshot {
            revision: self.revision,
            entries: self.content.clone(),
        });
        let entries = snapshot.len();
        // `send_replace` stores the value even when nobody listens yet.
        self.snapshot.send_replace(snapshot);
        metrics::counter!(m::SNAPSHOTS).increment(1);
        metrics::gauge!(m::ENTRIES).set(entries as f64);
        let now = SystemTime::now();
        self.status.send_modify(|s| {
            s.entries = entries;
            s.last_change = Some(now);
            s.counters.publishes += 1;
        });
        tracing::debug!(revision = self.revision, entries, "etcd snapshot published");
    }

    /// The watch is established: the content follows etcd from now on.
    fn live(&mut self) {
        self.confirmed = true;
        self.resume = false;
        self.attempt = 0;
        metrics::gauge!(m::UP).set(1.0);
        let recovered = self.status.send_if_modified(|s| {
            let was = std::mem::replace(&mut s.state, SyncState::Synced);
            was != SyncState::Synced
        });
        if recovered {
            tracing::info!(
                revision = self.revision,
                entries = self.content.len(),
                "etcd sync established"
            );
        }
    }

    /// Counts and logs a watch that ended with `error`.
    fn watch_ended(&mut self, error: &Error) {
        let reason = error.watch_restart_reason();
        metrics::counter!(m::WATCH_RESTARTS, "reason" => reason).increment(1);
        self.status.send_modify(|s| s.counters.watch_restarts += 1);
        if error.needs_full_read() {
            tracing::info!(%error, "etcd watch cannot continue from its revision; reading in full");
        }
    }

    /// Records a failed session: the status turns stale (or stays syncing), nothing else
    /// changes, the content included.
    fn failed(&mut self, error: &Error) {
        metrics::gauge!(m::UP).set(0.0);
        metrics::counter!(m::FAILURES, "operation" => error.operation()).increment(1);
        let message = error.to_string();
        let confirmed = self.confirmed;
        self.status.send_modify(|s| {
            s.counters.failures += 1;
            s.state = match (&s.state, confirmed) {
                (SyncState::Stale { since, .. }, _) => SyncState::Stale {
                    since: *since,
                    last_error: message.clone(),
                },
                (_, true) => SyncState::Stale {
                    since: SystemTime::now(),
                    last_error: message.clone(),
                },
                (_, false) => SyncState::Syncing {
                    last_error: Some(message.clone()),
                },
            };
        });
        tracing::warn!(%error, attempt = self.attempt, "etcd sync failed; keeping the last content");
    }

    /// The entry name of `key`: the UTF-8 text after the prefix.
    fn suffix(&self, key: &[u8]) -> Option<String> {
        let rest = key.strip_prefix(self.config.prefix.as_slice())?;
        match std::str::from_utf8(rest) {
            Ok(id) => Some(id.to_owned()),
            Err(_) => {
                tracing::warn!(key = %String::from_utf8_lossy(key), "etcd key is not UTF-8; ignored");
                None
            }
        }
    }
}

/// Runs one etcd call, bounded by `timeout` and by `cancel`.
async fn call<T>(
    cancel: &CancellationToken,
    op: Operation,
    timeout: std::time::Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, Halt> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Halt::Cancelled),
        result = tokio::time::timeout(timeout, call) => match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(Halt::Failed(Error::Etcd { op, source })),
            Err(_) => Err(Halt::Failed(Error::Timeout { op, timeout })),
        },
    }
}

/// The exclusive end of the key range holding every key that starts with `prefix`: the prefix
/// with its last byte below 0xff incremented (and what follows dropped); `[0]`, which etcd
/// reads as "no end", when every byte is 0xff.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_covers_exactly_the_prefix() {
        assert_eq!(
            prefix_end(b"/probe-engine/targets/"),
            b"/probe-engine/targets0"
        );
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
