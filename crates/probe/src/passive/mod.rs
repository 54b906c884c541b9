//! Passive health: what real traffic says about targets, next to what probes say.
//!
//! - [`Call`] (in `call`): one real call's outcome, as a client or a gate reports it;
//! - [`breaker`]: the per-target circuit breaker over those outcomes (closed, open, half-open);
//! - [`outlier`]: Envoy-style outlier ejection over a pool of members, capped, with panic mode;
//! - [`recovery`]: an ejected member's way back: cool-down, probation, permanent ejection;
//! - [`slow_start`]: the weight ramp of a member back in its pool;
//! - [`select`]: weighted selection of one member;
//! - `pools`: the engine's pools, one outlier detector per group declared as a pool.
//!
//! Like the verdict, these only decide: each returns what changed, and the engine logs, counts
//! and applies it.

pub mod breaker;
pub(crate) mod call;
pub mod outlier;
pub(crate) mod pools;
pub mod recovery;
pub mod select;
pub mod slow_start;

pub use call::{Call, CallOutcome};
pub use pools::PoolPolicy;
