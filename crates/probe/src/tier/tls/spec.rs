//! The validated description of a TLS certificate probe.

use std::fmt;
use std::time::Duration;

use rustls::pki_types::ServerName;

use super::trust::TlsTrust;
use crate::target::{Address, Addresses};
use crate::tier::tcp::Step;

/// A TLS certificate probe: a handshake with the server at `address`, judged on its certificate.
///
/// The check passes when the certificate verifies (chain, name, dates) under `trust`, and is
/// DEGRADED while the earliest expiry in the chain is within `expires_within`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TlsSpec {
    /// Where the server listens: `HOST:PORT`, the host resolved at each run.
    pub address: Address,
    /// Sent as SNI and checked against the certificate; the address's host by default.
    server_name: ServerName<'static>,
    /// Which certificates are trusted; the system's roots by default.
    pub trust: TlsTrust,
    /// DEGRADED while the earliest expiry in the chain is this close; off by default.
    pub expires_within: Option<Duration>,
    /// A plain-text protocol to upgrade from before the handshake, for servers that only speak
    /// TLS after asking (mail, PostgreSQL).
    pub starttls: Option<StartTls>,
    /// Which of a host name's addresses are probed.
    pub addresses: Addresses,
    /// Steps run in the clear before the handshake, instead of a known `starttls` protocol:
    /// a protocol's own way to ask for TLS (a greeting, a command, its go-ahead).
    pub before_tls: Vec<Step>,
    /// Steps run over the connection once the handshake verified: a text protocol spoken over
    /// TLS (IMAPS, a service's own banner). None by default: the handshake is the check.
    pub conversation: Vec<Step>,
}

/// A server name that cannot be sent as SNI or checked: not a DNS name nor an IP address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid server name {0:?}: expected a DNS name or an IP address")]
pub struct InvalidServerName(pub String);

impl TlsSpec {
    /// A probe of `address`, checked against its own host name (or IP address).
    ///
    /// # Errors
    /// [`InvalidServerName`] when the host is not a DNS name (see [`TlsSpec::with_server_name`]).
    pub fn new(address: Address) -> Result<Self, InvalidServerName> {
        let server_name = match &address {
            Address::Socket(addr) => ServerName::IpAddress(addr.ip().into()),
            Address::Host { host, .. } => {
                ServerName::try_from(host.clone()).map_err(|_| InvalidServerName(host.clone()))?
            }
        };
        Ok(Self {
            address,
            server_name,
            trust: TlsTrust::default(),
            expires_within: None,
            starttls: None,
            addresses: Addresses::First,
            before_tls: Vec::new(),
            conversation: Vec::new(),
        })
    }

    /// The same probe, sending and checking `name` instead of the address's host.
    ///
    /// # Errors
    /// [`InvalidServerName`] when `name` is neither a DNS name nor an IP address.
    pub fn with_server_name(mut self, name: &str) -> Result<Self, InvalidServerName> {
        self.server_name = ServerName::try_from(name.to_owned())
            .map_err(|_| InvalidServerName(name.to_owned()))?;
        Ok(self)
    }

    /// The name sent as SNI and checked against the certificate.
    pub fn server_name(&self) -> &ServerName<'static> {
        &self.server_name
    }
}

/// The plain-text protocols a TLS probe can upgrade from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartTls {
    /// SMTP: `EHLO`, then `STARTTLS` (RFC 3207).
    Smtp,
    /// IMAP: `STARTTLS` (RFC 3501).
    Imap,
    /// POP3: `STLS` (RFC 2595).
    Pop3,
    /// PostgreSQL: the `SSLRequest` message.
    Postgres,
}

impl StartTls {
    /// Every protocol, as [`StartTls::as_str`] names them.
    pub const ALL: [StartTls; 4] = [Self::Smtp, Self::Imap, Self::Pop3, Self::Postgres];

    /// The protocol's name in config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Smtp => "smtp",
            Self::Imap => "imap",
            Self::Pop3 => "pop3",
            Self::Postgres => "postgres",
        }
    }
}

impl fmt::Display for StartTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
