//! The probe tiers behind a spec: [`build`] turns a [`ProbeSpec`] into the [`Probe`] that runs
//! it. Kept apart from the [`Probe`] trait, which the tiers (and the specs' custom checks) build
//! on, so that the trait depends on no tier.

use std::sync::Arc;

use crate::resolve::Names;
use crate::tier::http::HttpSpec;
use crate::tier::probe::Probe;
use crate::tier::spec::ProbeSpec;

/// Builds the probe a spec describes, resolving its names through `names` (the engine's shared
/// resolver, with the target's `dns_stale_for`).
pub fn build(spec: &ProbeSpec, names: &Names) -> Arc<dyn Probe> {
    match spec {
        ProbeSpec::Tcp(tcp) => {
            Arc::new(crate::tier::tcp::TcpProbe::new(tcp.clone(), names.clone()))
        }
        ProbeSpec::Http(http) => Arc::new(crate::tier::http::HttpProbe::new(
            HttpSpec::clone(http),
            names.clone(),
        )),
        ProbeSpec::Custom(custom) => custom.probe().clone(),
        ProbeSpec::Icmp(icmp) => Arc::new(crate::tier::icmp::IcmpProbe::new(
            icmp.clone(),
            names.clone(),
        )),
        ProbeSpec::Udp(udp) => {
            Arc::new(crate::tier::udp::UdpProbe::new(udp.clone(), names.clone()))
        }
    }
}
