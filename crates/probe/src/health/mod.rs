//! A target's verdict: from results to a state, and when it is probed next.
//!
//! - `state`: the per-target state machine (UP, DEGRADED, PROBING, MAINTENANCE, DOWN), with
//!   hysteresis and flap detection;
//! - `policy`: the schedule, thresholds and flap policy it runs on;
//! - `backoff`: jittered exponential backoff with success-rate feedback;
//! - `maintenance`: declared maintenance windows;
//! - `self_health`: the engine's awareness of its own slowness, which widens timeouts and
//!   defers timeout verdicts while it is starved.
//!
//! Everything here decides and returns; nothing logs, counts or locks. The engine applies what
//! these return.

pub(crate) mod backoff;
pub(crate) mod maintenance;
pub(crate) mod policy;
pub(crate) mod self_health;
pub(crate) mod state;

pub use backoff::{BackoffError, ExponentialBackoff};
pub use maintenance::{MaintenanceWindow, WindowError, WindowStart};
pub use policy::{FlapPolicy, Schedule, ScheduleError, ScheduleSettings, Thresholds};
pub use self_health::SelfHealthConfig;
pub use state::{Cause, HealthState, Pending, Quality, Transition};
