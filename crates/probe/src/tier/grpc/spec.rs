//! The validated description of a gRPC health probe.

use std::time::Duration;

use crate::target::{Address, Addresses};
use crate::tier::http::RequestHeaders;
use crate::tier::tls::TlsTrust;

/// A gRPC health probe: one `grpc.health.v1.Health/Check` call for `service`.
///
/// `SERVING` passes; `NOT_SERVING` (or `UNKNOWN`) fails as `status`; a service the server does
/// not know fails as `assertion`. Transport failures keep the reasons of the other tiers.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GrpcSpec {
    /// Where the server listens: `HOST:PORT`, the host resolved whenever a connection is made.
    pub address: Address,
    /// The service asked about; `""` (the default) is the server as a whole.
    pub service: String,
    /// TLS and the certificates trusted; plaintext HTTP/2 when `None`.
    pub tls: Option<TlsTrust>,
    /// Metadata sent with every call (`authorization`, ...): values are secrets, never shown.
    pub metadata: RequestHeaders,
    /// Whether every check opens a new connection. Off by default: one connection is kept and
    /// reused, as a gRPC client does; on, each check also tests connection set-up.
    pub fresh_connection: bool,
    /// DEGRADED when the call took longer than this.
    pub latency_over: Option<Duration>,
    /// Which of a host name's addresses are probed.
    pub addresses: Addresses,
}

impl GrpcSpec {
    /// A plaintext probe of the whole server at `address`.
    pub fn new(address: Address) -> Self {
        Self {
            address,
            service: String::new(),
            tls: None,
            metadata: RequestHeaders::new(),
            fresh_connection: false,
            latency_over: None,
            addresses: Addresses::First,
        }
    }
}
