//! The raw schema: what a file may contain at its top level, in `defaults` and in a target.
//!
//! Values that need validation are kept as located strings and numbers (`Sp`), and checked
//! afterwards so that the checks can point at them; every struct denies unknown keys, which
//! [`collect`](crate::yaml::node::collect) turns into did-you-mean errors. A section that has a module
//! of its own declares its keys there, next to their checks (`schedule`, `passive`, `http`, `tls`,
//! `graph`, `topology`, `resolver`, `metrics`); this module ties them into the document.

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::sections::dns::RawDns;
use crate::sections::grpc::RawGrpc;
use crate::sections::http::RawHttp;
use crate::sections::icmp::RawIcmp;
use crate::sections::passive;
use crate::sections::reply::RawStep;
use crate::sections::schedule::{RawBackoff, RawFlap, RawSchedule};
use crate::sections::tls::RawTlsProbe;
use crate::sections::udp::RawUdp;
use crate::yaml::node::{BoolOr, Sp};

/// The top level of a file. Only used to report unknown or mistyped top-level keys: the sections
/// are then deserialized one by one from the tree.
#[derive(Deserialize)]
#[serde(rename = "document", deny_unknown_fields)]
pub(crate) struct RawDocument {
    #[serde(rename = "defaults")]
    _defaults: Option<IgnoredAny>,
    #[serde(rename = "targets")]
    _targets: Option<Vec<IgnoredAny>>,
    #[serde(rename = "scoring")]
    _scoring: Option<IgnoredAny>,
    #[serde(rename = "readiness")]
    _readiness: Option<IgnoredAny>,
    #[serde(rename = "topology")]
    _topology: Option<IgnoredAny>,
    #[serde(rename = "resolver")]
    _resolver: Option<IgnoredAny>,
    #[serde(rename = "metrics")]
    _metrics: Option<IgnoredAny>,
    #[serde(rename = "cluster")]
    _cluster: Option<IgnoredAny>,
    #[serde(rename = "alerts")]
    _alerts: Option<IgnoredAny>,
    #[serde(rename = "history")]
    _history: Option<IgnoredAny>,
}

/// Defines a section struct with the given fields plus the schedule, threshold and passive-health
/// fields shared by `defaults` and targets (and groups, for the passive ones), so that the lists
/// cannot drift apart.
macro_rules! schedule_section {
    ($(#[$attr:meta])* struct $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$attr])*
        pub(crate) struct $name {
            $(pub(crate) $field: $ty,)*
            interval: Option<Sp<String>>,
            timeout: Option<Sp<String>>,
            rise: Option<Sp<u32>>,
            fall: Option<Sp<u32>>,
            jitter: Option<Sp<f64>>,
            fast_interval: Option<Sp<String>>,
            backoff: Option<Sp<RawBackoff>>,
            degrade_after: Option<Sp<u32>>,
            recover_after: Option<Sp<u32>>,
            flap: Option<Sp<BoolOr<RawFlap>>>,
            dns_stale_for: Option<Sp<String>>,
            circuit_breaker: Option<Sp<passive::RawBreaker>>,
            skip_active_after: Option<Sp<u32>>,
            outlier: Option<Sp<passive::RawOutlier>>,
            recovery: Option<Sp<passive::RawRecovery>>,
            slow_start: Option<Sp<passive::RawSlowStart>>,
            replicas: Option<Sp<u8>>,
            quorum: Option<Sp<u8>>,
        }

        impl $name {
            pub(crate) fn schedule(&self) -> RawSchedule<'_> {
                RawSchedule {
                    interval: self.interval.as_ref(),
                    timeout: self.timeout.as_ref(),
                    rise: self.rise.as_ref(),
                    fall: self.fall.as_ref(),
                    jitter: self.jitter.as_ref(),
                    fast_interval: self.fast_interval.as_ref(),
                    backoff: self.backoff.as_ref(),
                    degrade_after: self.degrade_after.as_ref(),
                    recover_after: self.recover_after.as_ref(),
                    flap: self.flap.as_ref(),
                    dns_stale_for: self.dns_stale_for.as_ref(),
                }
            }

            pub(crate) fn votes(&self, diags: &mut crate::yaml::node::Diags) -> crate::sections::cluster::Votes {
                crate::sections::cluster::Votes::parse(self.replicas.as_ref(), self.quorum.as_ref(), diags)
            }

            pub(crate) fn passive(&self) -> passive::RawPassive<'_> {
                passive::RawPassive {
                    circuit_breaker: self.circuit_breaker.as_ref(),
                    skip_active_after: self.skip_active_after.as_ref(),
                    outlier: self.outlier.as_ref(),
                    recovery: self.recovery.as_ref(),
                    slow_start: self.slow_start.as_ref(),
                }
            }
        }
    };
}

schedule_section! {
    #[derive(Deserialize)]
    #[serde(rename = "defaults", deny_unknown_fields)]
    struct RawDefaults {}
}

schedule_section! {
    #[derive(Deserialize)]
    #[serde(rename = "target", deny_unknown_fields)]
    struct RawTarget {
        id: Option<Sp<String>>,
        kind: Option<Sp<String>>,
        tcp: Option<Sp<RawTcp>>,
        http: Option<Sp<RawHttp>>,
        grpc: Option<Sp<RawGrpc>>,
        tls: Option<Sp<RawTlsProbe>>,
        dns: Option<Sp<RawDns>>,
        icmp: Option<Sp<RawIcmp>>,
        udp: Option<Sp<RawUdp>>,
        alert: Option<Sp<BoolOr<crate::sections::alerts::RawRule>>>,
        state: Option<Sp<crate::sections::graph::RawGroupState>>,
        // Only checked to be sequences here: each item is then read on its own, see `each`.
        maintenance: Option<Vec<IgnoredAny>>,
        depends_on: Option<Vec<IgnoredAny>>,
    }
}

/// One entry of `maintenance`.
#[derive(Deserialize)]
#[serde(rename = "maintenance window", deny_unknown_fields)]
pub(crate) struct RawWindow {
    pub(crate) start: Option<Sp<String>>,
    pub(crate) daily: Option<Sp<String>>,
    pub(crate) duration: Sp<String>,
}

/// `tcp: {...}`: a TCP tier probe.
#[derive(Deserialize)]
#[serde(rename = "tcp", deny_unknown_fields)]
pub(crate) struct RawTcp {
    pub(crate) address: Sp<String>,
    pub(crate) send: Option<Sp<String>>,
    pub(crate) expect: Option<Sp<String>>,
    pub(crate) expect_regex: Option<Sp<String>>,
    pub(crate) close: Option<Sp<String>>,
    pub(crate) addresses: Option<Sp<String>>,
    pub(crate) conversation: Option<Sp<Vec<Sp<RawStep>>>>,
}
