//! `probe`: an embeddable health probe engine.
//!
//! The library runs health probes against targets and keeps a precomputed view of their health
//! that a server can read without probing on request. It owns no signals, no global state and no
//! HTTP server: callers pass a [`CancellationToken`](tokio_util::sync::CancellationToken) and
//! read [`Engine`] snapshots.
//!
//! One module per concept:
//! - [`target`]: what a target is (id, address, schedule, thresholds), validated on construction;
//! - [`outcome`]: one probe result and the closed set of failure reasons;
//! - [`probe`]: the small trait every probe tier implements;
//! - [`tiers`]: the probe a spec describes ([`tiers::build`]);
//! - [`tcp`]: the TCP connect tier;
//! - [`http`]: the HTTP tier: one request per check, judged by status, body, header and JSON
//!   conditions, with degraded verdicts and business signals;
//! - [`state`]: the per-target state machine (UP, DEGRADED, PROBING, MAINTENANCE, DOWN);
//! - [`maintenance`]: declared maintenance windows;
//! - [`backoff`]: jittered exponential backoff with success-rate feedback;
//! - [`resolve`]: the engine's one DNS resolver, shared by every probe: last good answers on
//!   resolver trouble (`dns_stale_for`), and resolver outages taken as the engine's own fault;
//! - [`scheduler`]: the bounded, elastic worker pool that runs due probes;
//! - [`self_health`]: the engine's awareness of its own slowness (Lifeguard's local health
//!   multiplier), which widens timeouts and defers timeout verdicts while it is starved;
//! - [`engine`]: targets plus scheduler plus the health snapshot, updated by diffs;
//! - [`graph`]: the dependency tier: weighted health scores over a validated DAG of targets;
//! - [`discovery`]: sources of target declarations (files, etcd, ...) merged into one topology;
//! - [`gate`]: the readiness gate a service puts in front of its work, and graceful drain;
//! - [`passive`]: real-traffic outcomes, for the passive detectors;
//! - [`breaker`]: the per-target circuit breaker over those outcomes (closed, open, half-open);
//! - [`outlier`]: Envoy-style outlier ejection over a pool of members, capped, with panic mode;
//! - [`recovery`]: an ejected member's way back: cool-down, probation, permanent ejection;
//! - [`slow_start`]: the weight ramp of a member back in its pool, and weighted selection;
//! - [`retry`]: which requests a client may retry on another member, within a retry budget;
//! - `client` (feature `tower`): a client-side balancer layer over a pool: weighted picks,
//!   fail-fast on open circuits, outcomes reported, budgeted retries on another member.
//!
//! ```no_run
//! use probe::{Engine, EngineConfig, target::*};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cancel = CancellationToken::new();
//! let engine = Engine::start(EngineConfig::default(), cancel.clone());
//! engine.apply(vec![TargetSpec {
//!     id: TargetId::new("orders-db")?,
//!     probe: ProbeSpec::Tcp(TcpSpec::connect("127.0.0.1:5432".parse()?)),
//!     schedule: Schedule::default(),
//!     thresholds: Thresholds::default(),
//!     flap: Some(FlapPolicy::default()),
//!     maintenance: Vec::new(),
//!     circuit_breaker: None,
//!     skip_active_after: None,
//!     dns_stale_for: TargetSpec::DEFAULT_DNS_STALE_FOR,
//! }])?;
//! let healthy = engine.readiness().ready;
//! cancel.cancel();
//! engine.stopped().await;
//! # let _ = healthy; Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod backoff;
pub mod breaker;
#[cfg(feature = "tower")]
pub mod client;
pub mod discovery;
pub mod engine;
pub mod gate;
pub mod graph;
pub mod http;
pub mod maintenance;
pub mod outcome;
pub mod outlier;
pub mod passive;
pub mod probe;
pub mod recovery;
pub mod resolve;
pub mod retry;
pub mod scheduler;
pub mod self_health;
pub mod slow_start;
pub mod state;
mod sync;
pub mod target;
pub mod tcp;
pub mod tiers;

pub use engine::{Engine, EngineConfig};

/// The README's Rust examples, compiled and run as this crate's doctests, so the README cannot
/// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
