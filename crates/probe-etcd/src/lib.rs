//! `probe-etcd`: targets declared in etcd, kept in sync and published as snapshots.
//!
//! This crate owns the etcd mechanics: it keeps an exact copy of every key under one prefix and
//! publishes it, generic over the raw values (`source`, `snapshot`, `status`); decodes the
//! snapshots into `probe::topology` catalogs (`discovery`, `EtcdDiscovery`), the values read
//! by a decoder the caller gives; and coordinates a cluster of daemons (`membership`,
//! `cluster`). Applying the catalogs to the engine belongs to the caller.
//!
//! # The key layout contract
//! - Each target is one key, `<prefix><id>`, with the default prefix `/probe-engine/targets/`
//!   (so `/probe-engine/targets/orders-db`). The part after the prefix is the entry's name
//!   (the target id); its value is **one JSON target declaration**, the same fields as one
//!   item of the YAML `targets:` list.
//! - Writing the key adds or replaces that target. Deleting it removes the target, and so does
//!   the expiry of a lease the key was written with (etcd deletes the key): a target can be
//!   bound to its owner's liveness.
//! - Keys under the prefix whose name is not UTF-8 are ignored and logged. Nothing outside the
//!   prefix is read.
//!
//! # What is published
//! [`Source::run`] reads the prefix, watches it, and publishes an `Arc<`[`Snapshot`]`>` (every
//! entry with its raw value and `mod_revision`, at one etcd revision) through a
//! `tokio::sync::watch` channel each time the content changes, plus a [`Status`] (synced,
//! syncing, or stale since when and why; revision; counters) through another. An etcd outage
//! never empties the content: the last snapshot stays, the status says it is stale. See
//! [`source`] for the sync algorithm (no gap, no duplicate, compaction, periodic resync).
//!
//! # Modules
//! - [`config`]: [`SourceConfig`], endpoints, prefix, credentials, TLS, timeouts, backoff;
//! - [`source`]: the sync engine, [`Source`];
//! - [`discovery`]: [`EtcdDiscovery`], the snapshots decoded into `probe::topology` catalogs;
//! - [`snapshot`]: [`Snapshot`] and [`Entry`];
//! - [`status`]: [`Status`], [`SyncState`], [`Counters`];
//! - [`error`]: what can fail, [`Error`];
//! - [`membership`]: a cluster's members, each holding a lease-bound key, and the set as each
//!   sees it;
//! - [`cluster`]: a member of a cluster at work: the member set fed to the engine, verdicts
//!   published and adopted, votes exchanged, maintenance shared;
//!
//! Metrics (`probe_etcd_*`, through the `metrics` facade) are described by
//! [`describe_metrics`].
//!
//! # Building
//! etcd-client compiles etcd's `.proto` files at build time and needs `protoc`. The workspace's
//! `.cargo/config.toml` points `PROTOC` at `scripts/protoc`, which runs the binary shipped in
//! the `protoc-bin-vendored` crate, so nothing beyond the Rust toolchain is needed.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod cluster;
pub mod config;
pub mod discovery;
pub mod error;
pub mod membership;
mod metrics;
pub mod snapshot;
pub mod source;
pub mod status;

pub use config::{BackoffConfig, ClientCert, Credentials, DEFAULT_PREFIX, SourceConfig, TlsFiles};
pub use discovery::{Decoder, EtcdDiscovery};
pub use error::{Error, Operation};
pub use metrics::describe_metrics;
pub use snapshot::{Entry, Snapshot};
pub use source::Source;
pub use status::{Counters, Status, SyncState};

/// The etcd client this crate is built on, for callers that write to etcd (tests, tools)
/// without pinning a second copy.
pub use etcd_client;
