//! The one trait every probe tier implements.
//!
//! A probe answers a single question, "does the target do its job right now?", within a deadline.
//! Everything else (timing, hysteresis, backoff, metrics) belongs to the engine, so a new tier or
//! an embedder's custom check only has to implement [`Probe::check`].

use std::sync::Arc;
use std::time::Duration;

use crate::http::HttpSpec;
use crate::outcome::CheckResult;
use crate::resolve::Names;
use crate::target::ProbeSpec;

/// A health check against one target.
///
/// Implementations should honour `timeout` themselves so they can say which phase timed out
/// (resolving, connecting, reading). The engine also enforces it from outside, as a backstop, by
/// dropping the future, so `check` must be cancel-safe: dropping it must release its resources.
#[async_trait::async_trait]
pub trait Probe: Send + Sync + 'static {
    /// Runs one check.
    async fn check(&self, timeout: Duration) -> CheckResult;
}

/// Builds the probe a spec describes, resolving its names through `names` (the engine's shared
/// resolver, with the target's `dns_stale_for`).
pub fn build(spec: &ProbeSpec, names: &Names) -> Arc<dyn Probe> {
    match spec {
        ProbeSpec::Tcp(tcp) => Arc::new(crate::tcp::TcpProbe::new(tcp.clone(), names.clone())),
        ProbeSpec::Http(http) => Arc::new(crate::http::HttpProbe::new(
            HttpSpec::clone(http),
            names.clone(),
        )),
        ProbeSpec::Custom(custom) => custom.probe().clone(),
    }
}
