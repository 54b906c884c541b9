//! What the daemon shows about the sync: [`Status`], published next to the snapshots.

use std::time::SystemTime;

/// Where the sync stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Not following etcd yet: the first watch is not established. The first read's content may
    /// already be published (it is, right before the watch starts). `last_error` says what went
    /// wrong, after a failed attempt.
    Syncing {
        /// The latest failure, if an attempt failed.
        last_error: Option<String>,
    },
    /// The content was read and is being watched: it follows etcd.
    Synced,
    /// The connection to etcd was lost: the last content is kept (never emptied because of an
    /// outage) but may be out of date.
    Stale {
        /// When the sync was lost; unchanged by the failed retries that follow.
        since: SystemTime,
        /// The latest failure.
        last_error: String,
    },
}

impl SyncState {
    /// `syncing`, `synced` or `stale`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Syncing { .. } => "syncing",
            Self::Synced => "synced",
            Self::Stale { .. } => "stale",
        }
    }
}

/// Counts since the source started. The same events feed the `probe_etcd_*` metrics; these are
/// per source, for a status page and for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Full reads of the prefix (first read, reconnects, compactions, periodic resyncs).
    pub resyncs: u64,
    /// Watches that ended and were started again (compaction, errors, closed streams).
    pub watch_restarts: u64,
    /// Sessions that failed (etcd unreachable, timeouts, errors); each is followed by a backoff.
    pub failures: u64,
    /// Watch events applied.
    pub events: u64,
    /// Snapshots published.
    pub publishes: u64,
}

/// The sync's status, published on every change of state, revision or content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The state.
    pub state: SyncState,
    /// The latest etcd revision the content is known to be current at (from reads, events and
    /// progress notifications); 0 before the first read.
    pub revision: i64,
    /// The number of entries in the content.
    pub entries: usize,
    /// When the content last changed (and was published).
    pub last_change: Option<SystemTime>,
    /// When the prefix was last read in full.
    pub last_resync: Option<SystemTime>,
    /// Counters.
    pub counters: Counters,
}

impl Default for Status {
    fn default() -> Self {
        Self {
            state: SyncState::Syncing { last_error: None },
            revision: 0,
            entries: 0,
            last_change: None,
            last_resync: None,
            counters: Counters::default(),
        }
    }
}
