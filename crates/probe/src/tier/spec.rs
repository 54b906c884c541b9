//! Which tier probes a target: the spec of each tier, or a probe supplied in code.

use std::fmt;
use std::sync::Arc;

use crate::target::{Address, Addresses};
use crate::tier::probe::Probe;
use crate::tier::tcp::spec::TcpSpec;

/// Which tier probes the target. Later tiers add variants.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ProbeSpec {
    /// A TCP connect probe.
    Tcp(TcpSpec),
    /// An HTTP request judged by conditions. Boxed: it is much larger than the other variants,
    /// and a target's spec is cloned on every apply.
    Http(Box<crate::tier::http::HttpSpec>),
    /// A `grpc.health.v1` check.
    Grpc(Box<crate::tier::grpc::GrpcSpec>),
    /// A TLS handshake judged on the server's certificate.
    Tls(Box<crate::tier::tls::TlsSpec>),
    /// A DNS query judged by its reply. Boxed, like `Http`: a parsed name is large.
    Dns(Box<crate::tier::dns::DnsSpec>),
    /// A probe supplied in code by an embedder (or a test).
    Custom(CustomProbe),
    /// ICMP echo requests (ping).
    Icmp(crate::tier::icmp::IcmpSpec),
    /// A UDP datagram and its reply.
    Udp(crate::tier::udp::UdpSpec),
}

impl ProbeSpec {
    /// Every kind's name, as [`ProbeSpec::kind`] gives it.
    pub const KINDS: [&'static str; 8] =
        ["tcp", "http", "grpc", "tls", "dns", "icmp", "udp", "custom"];

    /// The probe's kind, a metric label: one of [`ProbeSpec::KINDS`].
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Tcp(_) => Self::KINDS[0],
            Self::Http(_) => Self::KINDS[1],
            Self::Grpc(_) => Self::KINDS[2],
            Self::Tls(_) => Self::KINDS[3],
            Self::Dns(_) => Self::KINDS[4],
            Self::Icmp(_) => Self::KINDS[5],
            Self::Udp(_) => Self::KINDS[6],
            Self::Custom(_) => Self::KINDS[7],
        }
    }
}

impl ProbeSpec {
    /// Which of its host's addresses the probe checks; `first` for kinds without the choice.
    pub fn addresses(&self) -> Addresses {
        match self {
            Self::Tcp(spec) => spec.addresses,
            Self::Http(spec) => spec.addresses,
            Self::Grpc(spec) => spec.addresses,
            Self::Tls(spec) => spec.addresses,
            Self::Dns(_) | Self::Icmp(_) | Self::Udp(_) | Self::Custom(_) => Addresses::First,
        }
    }

    /// The host name the probe resolves to connect; `None` for an IP address (or a kind that
    /// connects to none).
    pub fn host(&self) -> Option<&str> {
        let address = match self {
            Self::Tcp(spec) => &spec.address,
            Self::Grpc(spec) => &spec.address,
            Self::Tls(spec) => &spec.address,
            Self::Http(spec) => {
                return match spec.url.as_url().host() {
                    Some(url::Host::Domain(host)) => Some(host),
                    _ => None,
                };
            }
            Self::Dns(_) | Self::Icmp(_) | Self::Udp(_) | Self::Custom(_) => return None,
        };
        match address {
            Address::Host { host, .. } => Some(host),
            Address::Socket(_) => None,
        }
    }
}

/// A probe implemented in code rather than declared.
///
/// Two custom specs are equal only if they share the same probe instance, so re-applying the
/// same `Arc` keeps the target's state, while a new instance restarts it.
#[derive(Clone)]
pub struct CustomProbe(Arc<dyn Probe>);

impl CustomProbe {
    /// Wraps a probe.
    pub fn new(probe: Arc<dyn Probe>) -> Self {
        Self(probe)
    }

    /// The wrapped probe.
    pub fn probe(&self) -> &Arc<dyn Probe> {
        &self.0
    }
}

impl PartialEq for CustomProbe {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for CustomProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomProbe")
    }
}
