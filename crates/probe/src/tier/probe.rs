//! The one trait every probe tier implements.
//!
//! A probe answers a single question, "does the target do its job right now?", within a deadline.
//! Everything else (timing, hysteresis, backoff, metrics) belongs to the engine, so a new tier or
//! an embedder's custom check only has to implement [`Probe::check`]. The tiers that implement
//! it, and `tiers::build` from a spec, sit above this module.

use std::time::Duration;

use crate::outcome::{CheckResult, Observed};

/// A health check against one target.
///
/// Implementations should honour `timeout` themselves so they can say which phase timed out
/// (resolving, connecting, reading). The engine also enforces it from outside, as a backstop, by
/// dropping the future, so `check` must be cancel-safe: dropping it must release its resources.
#[async_trait::async_trait]
pub trait Probe: Send + Sync + 'static {
    /// Runs one check.
    async fn check(&self, timeout: Duration) -> CheckResult;

    /// Runs one check, and says what it saw on the way ([`Observed`]): for answering
    /// blackbox_exporter's `/probe`. A tier with nothing more to say than its result keeps this
    /// default, which observes nothing.
    async fn observe(&self, timeout: Duration) -> (CheckResult, Observed) {
        (self.check(timeout).await, Observed::default())
    }
}
