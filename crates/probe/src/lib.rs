//! `probe`: an embeddable health probe engine.
//!
//! The library runs health probes against targets and keeps a precomputed view of their health
//! that a server can read without probing on request. It owns no signals, no global state and no
//! HTTP server: callers pass a [`CancellationToken`](tokio_util::sync::CancellationToken) and
//! read [`Engine`] snapshots.
//!
//! The types most embedders need are re-exported here; the modules hold the rest, one folder per
//! concept (see ARCHITECTURE.md at the repository root for the map):
//! - `target` (its types are here at the root): who a target is ([`TargetId`]), where it lives
//!   ([`Address`]) and which of a name's addresses are probed ([`Addresses`]);
//! - [`outcome`]: one probe result and the closed set of failure reasons;
//! - [`tier`]: the [`Probe`] trait and the tiers that implement it ([`tier::tcp`],
//!   [`tier::http`], [`tier::grpc`], [`tier::tls`], [`tier::dns`], [`tier::icmp`],
//!   [`tier::udp`]), the [`ProbeSpec`] that chooses one, every address of a name probed
//!   ([`tier::addresses`]), and the engine's one DNS resolver ([`tier::resolve`]: last good
//!   answers on resolver trouble, resolver outages taken as the engine's own fault);
//! - [`health`]: the per-target state machine (UP, DEGRADED, PROBING, MAINTENANCE, DOWN), its
//!   schedule and thresholds, backoff, maintenance windows and the engine's self-health;
//! - [`scheduler`]: the bounded, elastic worker pool that runs due probes;
//! - [`graph`]: the dependency tier: weighted health scores over a validated DAG of targets;
//! - [`passive`]: what real traffic says: calls, circuit breakers, outlier ejection, recovery,
//!   slow start and weighted selection;
//! - [`cluster`]: which members of a cluster probe which targets (rendezvous hashing), the
//!   quorum rule, and what a member publishes and adopts;
//! - [`topology`]: what the engine runs ([`Topology`], [`TargetSpec`]), and the sources of
//!   declarations (files, etcd, ...) merged into one ([`topology::Merger`]);
//! - [`engine`]: targets, scheduler, graph and pools together, with the snapshots servers read;
//! - [`gate`]: the readiness gate a service puts in front of its work, and graceful drain;
//! - `serve` (features `grpc` and `tower`): the engine in front of a service's own traffic:
//!   `serve::grpc`, `grpc.health.v1` (`Check`, `Watch`) from the engine and the gate, for
//!   Kubernetes `grpc:` probes; `serve::balance`, a client-side balancer layer over a pool
//!   (weighted picks, fail-fast on open circuits, outcomes reported, budgeted retries on another
//!   member).
//!
//! ```no_run
//! use probe::{Engine, EngineConfig, ProbeSpec, TargetId, TargetSpec, TcpSpec};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cancel = CancellationToken::new();
//! let engine = Engine::start(EngineConfig::default(), cancel.clone());
//! engine.apply(vec![TargetSpec::new(
//!     TargetId::new("orders-db")?,
//!     ProbeSpec::Tcp(TcpSpec::connect("127.0.0.1:5432".parse()?)),
//! )])?;
//! let healthy = engine.readiness().ready;
//! cancel.cancel();
//! engine.stopped().await;
//! # let _ = healthy; Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod cluster;
pub mod engine;
pub mod gate;
pub mod graph;
pub mod health;
pub mod outcome;
pub mod passive;
pub mod scheduler;
#[cfg(any(feature = "grpc", feature = "tower"))]
pub mod serve;
mod target;
pub mod tier;
pub mod topology;

pub use engine::{
    Diff, Engine, EngineConfig, EngineError, Event, MaintenanceInfo, MaintenanceSource, Readiness,
    TargetStatus, describe_metrics,
};
pub use health::{FlapPolicy, HealthState, Schedule, ScheduleSettings, Thresholds};
pub use outcome::{CheckResult, Failure, FailureReason, Outcome, Verdict};
pub use passive::{Call, CallOutcome, PoolPolicy};
pub use target::{Address, Addresses, InvalidAddress, InvalidTargetId, TargetId};
pub use tier::dns::DnsSpec;
pub use tier::grpc::GrpcSpec;
pub use tier::http::HttpSpec;
pub use tier::icmp::IcmpSpec;
pub use tier::tcp::TcpSpec;
pub use tier::tls::TlsSpec;
pub use tier::udp::UdpSpec;
pub use tier::{CustomProbe, Probe, ProbeSpec};
pub use topology::{TargetSpec, Topology, TopologyError};

/// The Rust examples of the README and of every page of `docs/`, compiled and run as this
/// crate's doctests, so the documentation cannot drift from the API. The daemon's docs test
/// checks that every page is listed here.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../../docs/alerts.md")]
    pub struct Alerts;
    #[doc = include_str!("../../../docs/api.md")]
    pub struct Api;
    #[doc = include_str!("../../../docs/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../../../docs/cluster.md")]
    pub struct Cluster;
    #[doc = include_str!("../../../docs/config.md")]
    pub struct Config;
    #[doc = include_str!("../../../docs/ctl.md")]
    pub struct Ctl;
    #[doc = include_str!("../../../docs/history.md")]
    pub struct History;
    #[doc = include_str!("../../../docs/import.md")]
    pub struct Import;
    #[doc = include_str!("../../../docs/library.md")]
    pub struct Library;
    #[doc = include_str!("../../../docs/operations.md")]
    pub struct Operations;
    #[doc = include_str!("../../../docs/page.md")]
    pub struct Page;
    #[doc = include_str!("../../../docs/passive.md")]
    pub struct Passive;
    #[doc = include_str!("../../../docs/testing.md")]
    pub struct Testing;
}
