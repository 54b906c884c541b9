//! The probe tiers behind a spec: [`build`] turns a [`ProbeSpec`] into the [`Probe`] that runs
//! it. Kept apart from the [`Probe`] trait, which the tiers (and the specs' custom checks) build
//! on, so that the trait depends on no tier.

use std::sync::Arc;

use crate::target::Addresses;
use crate::tier::addresses::EachAddress;
use crate::tier::http::HttpSpec;
use crate::tier::probe::Probe;
use crate::tier::resolve::Names;
use crate::tier::spec::ProbeSpec;
use crate::tier::tls::TlsSpec;

/// Builds the probe a spec describes, resolving its names through `names` (the engine's shared
/// resolver, with the target's `dns_stale_for`): with `addresses: any | all` and a host name, a
/// probe of each of its addresses (see `tier::addresses`).
pub fn build(spec: &ProbeSpec, names: &Names) -> Arc<dyn Probe> {
    match (spec.addresses(), spec.host()) {
        (policy @ (Addresses::Any | Addresses::All), Some(host)) => {
            let one = spec.clone();
            Arc::new(EachAddress::new(
                Box::new(move |pinned| build_one(&one, pinned)),
                host.to_owned(),
                names.clone(),
                policy,
            ))
        }
        _ => build_one(spec, names),
    }
}

/// The probe of one spec, connecting where `names` says.
fn build_one(spec: &ProbeSpec, names: &Names) -> Arc<dyn Probe> {
    match spec {
        ProbeSpec::Tcp(tcp) => {
            Arc::new(crate::tier::tcp::TcpProbe::new(tcp.clone(), names.clone()))
        }
        ProbeSpec::Http(http) => Arc::new(crate::tier::http::HttpProbe::new(
            HttpSpec::clone(http),
            names.clone(),
        )),
        ProbeSpec::Grpc(grpc) => Arc::new(crate::tier::grpc::GrpcProbe::new(
            crate::tier::grpc::GrpcSpec::clone(grpc),
            names.clone(),
        )),
        ProbeSpec::Tls(tls) => Arc::new(crate::tier::tls::TlsProbe::new(
            TlsSpec::clone(tls),
            names.clone(),
        )),
        ProbeSpec::Custom(custom) => custom.probe().clone(),
        ProbeSpec::Dns(dns) => Arc::new(crate::tier::dns::DnsProbe::new(
            crate::tier::dns::DnsSpec::clone(dns),
        )),
        ProbeSpec::Icmp(icmp) => Arc::new(crate::tier::icmp::IcmpProbe::new(
            icmp.clone(),
            names.clone(),
        )),
        ProbeSpec::Udp(udp) => {
            Arc::new(crate::tier::udp::UdpProbe::new(udp.clone(), names.clone()))
        }
    }
}
