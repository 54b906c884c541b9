//! The readiness gate: whether an instance takes traffic, and a drain that stops it cleanly.
//!
//! An instance that is alive is not necessarily one that should take traffic, and a stop must go
//! in the right order: stop being ready, let the load balancers notice, then stop admitting and
//! finish what was admitted. A [`Gate`] is what a service puts in front of its work:
//! - it moves Starting -> Serving -> Draining -> Stopped, and only forward;
//! - [`Gate::admit`] lets a request in while Serving and hands back an [`Admission`] guard;
//!   dropping the guard (on completion, cancellation or panic) releases it;
//! - [`Gate::track`] and [`Gate::spawn`] count background work (spawned jobs, consumers,
//!   transactions) as in flight too, and still accept it while Draining: it is part of finishing
//!   the requests already admitted;
//! - [`Gate::drain`] stops admitting, waits for every request and background task or a
//!   deadline, and ends in Stopped, saying whether it drained cleanly.
//!
//! Why the counts and the state share one atomic word: an admission checks the state and takes a
//! slot in a single compare-and-swap, so a request can never be admitted after a drain has seen
//! the count, and the fast path is lock-free (no mutex, one CAS to admit, one subtraction to
//! release).
//!
//! The gate also answers the three orchestrator questions, kept apart because an
//! orchestrator acts differently on each (it restarts on liveness, routes on readiness)
//! ([`Gate::liveness`], [`Gate::readiness`], [`Gate::startup`]): liveness fails only when
//! Stopped or when a registered [`Heartbeat`] is stuck, never because of a dependency; readiness
//! needs Serving, startup complete and the attached [`ReadinessCheck`] source (the engine's verdict);
//! startup masks liveness until it completes or its deadline passes. [`shutdown`] runs the whole
//! stop sequence. With the `tower` feature, `GateLayer` admits each request of an `http` service
//! through the gate.

mod admission;
#[cfg(feature = "tower")]
mod layer;

pub use admission::{
    Admission, Check, DrainReport, Gate, GateConfig, GateState, Heartbeat, Hook, ReadinessCheck,
    ShutdownPlan, ShutdownReport, Work, shutdown,
};
#[cfg(feature = "tower")]
pub use layer::{GateLayer, GateService, ObserveRequests, RequestOutcome, ResponseFuture};
