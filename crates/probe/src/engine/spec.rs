//! Everything needed to run one target: the library's input contract.
//!
//! Every part is validated on construction, so a `TargetSpec` that exists is one the engine can
//! run: configuration front ends (the daemon's YAML loader, etcd) map their raw input onto
//! these constructors and attach source locations to the errors they return.
//!
//! Specs compare by value (`PartialEq`), which is how a reload tells an unchanged target (keeps
//! its state and counters) from a changed one (restarted).

use std::num::NonZeroU32;
use std::time::Duration;

use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;
use crate::verdict::policy::{FlapPolicy, Schedule, Thresholds};

/// Everything needed to run one target.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSpec {
    /// The unique id.
    pub id: TargetId,
    /// How to probe it.
    pub probe: ProbeSpec,
    /// When to probe it.
    pub schedule: Schedule,
    /// How many results change its verdict.
    pub thresholds: Thresholds,
    /// When it counts as flapping; `None` turns flap detection off.
    pub flap: Option<FlapPolicy>,
    /// Declared maintenance windows.
    pub maintenance: Vec<crate::verdict::maintenance::MaintenanceWindow>,
    /// The circuit breaker that real calls to the target go through ([`Engine::pick`] and the
    /// client layer fail fast while it is open); `None` for none.
    ///
    /// [`Engine::pick`]: crate::Engine::pick
    pub circuit_breaker: Option<crate::passive::breaker::BreakerConfig>,
    /// Lets real traffic stand in for active probes: a run is skipped while the target is UP and
    /// at least this many passive successes, and no passive failure, were reported since the
    /// previous run. `None` always probes.
    ///
    /// Envoy's no-traffic interval inverted: a target that real calls prove healthy every second
    /// gains nothing from a synthetic request, while one without traffic is still probed.
    pub skip_active_after: Option<NonZeroU32>,
    /// How long the last good answer for the target's host name may stand in when the resolver
    /// has trouble (a timeout, SERVFAIL; never a name that does not exist); zero turns stale
    /// answers off. See the `resolve` module.
    pub dns_stale_for: Duration,
}

impl TargetSpec {
    /// The default `dns_stale_for` ([`crate::resolve::DEFAULT_STALE_FOR`]).
    pub const DEFAULT_DNS_STALE_FOR: Duration = crate::resolve::DEFAULT_STALE_FOR;

    /// A target with the default schedule, thresholds and flap policy and no maintenance
    /// windows; set the public fields to change them.
    pub fn new(id: TargetId, probe: ProbeSpec) -> Self {
        Self {
            id,
            probe,
            schedule: Schedule::default(),
            thresholds: Thresholds::default(),
            flap: Some(FlapPolicy::default()),
            maintenance: Vec::new(),
            circuit_breaker: None,
            skip_active_after: None,
            dns_stale_for: Self::DEFAULT_DNS_STALE_FOR,
        }
    }
}
