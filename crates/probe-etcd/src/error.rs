//! What can go wrong: a configuration that cannot work, and the failures of a sync session.
//!
//! Configuration errors come out of [`Source::new`](crate::Source::new) and are final. Session
//! errors never leave [`Source::run`](crate::Source::run): the source retries them with backoff
//! and shows the latest one in its [`Status`](crate::Status), so this type is what a status page
//! prints.

use std::path::PathBuf;
use std::time::Duration;

use probe::health::BackoffError;

/// The etcd call that failed, a low-cardinality label for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Building the client and, with credentials, authenticating.
    Connect,
    /// A page of the full range read of the prefix.
    Range,
    /// Creating the watch or receiving from it.
    Watch,
}

impl Operation {
    /// The label value: `connect`, `range` or `watch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Range => "range",
            Self::Watch => "watch",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a [`Source`](crate::Source) could not be built, or why a sync session ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration names no endpoint.
    #[error("no etcd endpoint configured")]
    NoEndpoints,
    /// An endpoint is blank.
    #[error("etcd endpoint #{index} is empty")]
    EmptyEndpoint {
        /// Its position in the list, from 0.
        index: usize,
    },
    /// TLS is configured but an endpoint asks for plain `http://`.
    #[error(
        "etcd endpoint {endpoint:?} is http:// but TLS is configured (use https:// or no scheme)"
    )]
    PlainEndpointWithTls {
        /// The endpoint as configured.
        endpoint: String,
    },
    /// An empty prefix would select the whole keyspace.
    #[error("the etcd key prefix must not be empty")]
    EmptyPrefix,
    /// A period or timeout is zero.
    #[error("{name} must be greater than zero")]
    ZeroDuration {
        /// The configuration field.
        name: &'static str,
    },
    /// The reconnect backoff is invalid.
    #[error("invalid reconnect backoff: {0}")]
    Backoff(#[from] BackoffError),
    /// A TLS file could not be read.
    #[error("cannot read the TLS {what} {path}: {source}")]
    TlsFile {
        /// Which file: `CA certificate`, `client certificate` or `client key`.
        what: &'static str,
        /// The configured path.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// An etcd call failed.
    #[error("etcd {op} failed: {source}")]
    Etcd {
        /// The call.
        op: Operation,
        /// The client's error.
        source: etcd_client::Error,
    },
    /// An etcd call got no answer in time.
    #[error("etcd {op} timed out after {timeout:?}")]
    Timeout {
        /// The call.
        op: Operation,
        /// The bound it ran into.
        timeout: Duration,
    },
    /// A response lacked its header, so its revision is unknown.
    #[error("etcd {op} response has no header")]
    NoHeader {
        /// The call.
        op: Operation,
    },
    /// The watch start revision has been compacted away: only a full read can catch up.
    #[error("watch from revision {requested} impossible: compacted up to {compacted}")]
    Compacted {
        /// The revision the watch asked to start from.
        requested: i64,
        /// The compaction revision etcd reported.
        compacted: i64,
    },
    /// etcd is at an older revision than the content: its history is not the one the content
    /// came from (restored from a backup, or another cluster), so only a full read is valid.
    #[error("etcd is at revision {current}, older than the content's {known}")]
    RevisionWentBack {
        /// The content's revision.
        known: i64,
        /// etcd's current revision.
        current: i64,
    },
    /// etcd cancelled the watch for another reason (permissions, for one).
    #[error("etcd cancelled the watch: {reason}")]
    WatchCanceled {
        /// etcd's reason, possibly empty.
        reason: String,
    },
    /// The watch stream ended.
    #[error("etcd closed the watch stream")]
    WatchClosed,
}

impl Error {
    /// Whether a full read followed by a new watch repairs this on the same connection
    /// (no backoff, no reconnect).
    pub(crate) fn needs_full_read(&self) -> bool {
        matches!(self, Self::Compacted { .. } | Self::RevisionWentBack { .. })
    }

    /// The `operation` label of `probe_etcd_failures_total`: which call failed.
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            Self::Etcd { op, .. } | Self::Timeout { op, .. } | Self::NoHeader { op } => op.as_str(),
            Self::Compacted { .. }
            | Self::RevisionWentBack { .. }
            | Self::WatchCanceled { .. }
            | Self::WatchClosed => Operation::Watch.as_str(),
            _ => "config",
        }
    }

    /// The `reason` label of `probe_etcd_watch_restarts_total` for an error that ended a watch.
    pub(crate) fn watch_restart_reason(&self) -> &'static str {
        match self {
            Self::Compacted { .. } => "compacted",
            Self::RevisionWentBack { .. } => "revision_went_back",
            Self::WatchCanceled { .. } => "canceled",
            Self::WatchClosed => "closed",
            Self::Timeout { .. } => "timeout",
            _ => "error",
        }
    }
}
