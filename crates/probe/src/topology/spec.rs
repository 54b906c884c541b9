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

use crate::cluster::Replication;
use crate::health::maintenance::MaintenanceWindow;
use crate::health::policy::{FlapPolicy, Schedule, Thresholds};
use crate::passive::breaker::BreakerConfig;
use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;

/// Everything needed to run one target.
///
/// Built with [`TargetSpec::new`] and the `with_*` methods; the fields stay readable (and
/// assignable), and the struct is `#[non_exhaustive]`, so a new setting is not a breaking
/// change for embedders.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    pub maintenance: Vec<MaintenanceWindow>,
    /// The circuit breaker that real calls to the target go through ([`Pools::pick`] and the
    /// client layer fail fast while it is open); `None` for none.
    ///
    /// [`Pools::pick`]: crate::engine::Pools::pick
    pub circuit_breaker: Option<BreakerConfig>,
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
    /// In a cluster, how many members probe it and how many must agree; `None` for the
    /// cluster's own setting ([`Cluster::join`](crate::engine::Cluster::join)).
    pub replication: Option<Replication>,
}

impl TargetSpec {
    /// The default `dns_stale_for` ([`crate::tier::resolve::DEFAULT_STALE_FOR`]).
    pub const DEFAULT_DNS_STALE_FOR: Duration = crate::tier::resolve::DEFAULT_STALE_FOR;

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
            replication: None,
        }
    }

    /// When to probe it.
    #[must_use]
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// How many results change its verdict.
    #[must_use]
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> Self {
        self.thresholds = thresholds;
        self
    }

    /// When it counts as flapping; `None` turns flap detection off.
    #[must_use]
    pub fn with_flap(mut self, flap: Option<FlapPolicy>) -> Self {
        self.flap = flap;
        self
    }

    /// Its declared maintenance windows.
    #[must_use]
    pub fn with_maintenance(mut self, maintenance: Vec<MaintenanceWindow>) -> Self {
        self.maintenance = maintenance;
        self
    }

    /// The circuit breaker real calls to it go through; `None` for none.
    #[must_use]
    pub fn with_circuit_breaker(mut self, circuit_breaker: Option<BreakerConfig>) -> Self {
        self.circuit_breaker = circuit_breaker;
        self
    }

    /// Real traffic stands in for active probes after this many passive successes.
    #[must_use]
    pub fn with_skip_active_after(mut self, skip_active_after: Option<NonZeroU32>) -> Self {
        self.skip_active_after = skip_active_after;
        self
    }

    /// How long the last good DNS answer may stand in when the resolver has trouble.
    #[must_use]
    pub fn with_dns_stale_for(mut self, dns_stale_for: Duration) -> Self {
        self.dns_stale_for = dns_stale_for;
        self
    }

    /// In a cluster, how many members probe it and how many must agree.
    #[must_use]
    pub fn with_replication(mut self, replication: Option<Replication>) -> Self {
        self.replication = replication;
        self
    }
}
