//! Which tier probes a target: the spec of each tier, or a probe supplied in code.

use std::fmt;
use std::sync::Arc;

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
    /// A probe supplied in code by an embedder (or a test).
    Custom(CustomProbe),
    /// ICMP echo requests (ping).
    Icmp(crate::tier::icmp::IcmpSpec),
    /// A UDP datagram and its reply.
    Udp(crate::tier::udp::UdpSpec),
}

impl ProbeSpec {
    /// Every kind's name, as [`ProbeSpec::kind`] gives it.
    pub const KINDS: [&'static str; 5] = ["tcp", "http", "custom", "icmp", "udp"];

    /// The probe's kind, a metric label: `tcp`, `http`, `custom`, `icmp` or `udp`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Tcp(_) => Self::KINDS[0],
            Self::Http(_) => Self::KINDS[1],
            Self::Custom(_) => Self::KINDS[2],
            Self::Icmp(_) => Self::KINDS[3],
            Self::Udp(_) => Self::KINDS[4],
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
