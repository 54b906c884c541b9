//! Who a target is and where it lives: its id, and the address its probes connect to.
//!
//! Both are validated on construction, so an id that exists is safe as a metric label, a URL
//! segment and an etcd key, and an address that exists has a port. What runs against a target
//! (its probe, schedule, thresholds) is the [`TargetSpec`](crate::topology::TargetSpec).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

/// A target's unique id: 1 to 128 characters of `[a-z0-9._-]`.
///
/// The alphabet keeps ids safe as metric label values, URL path segments and etcd key suffixes
/// without escaping. Cloning is a reference-count bump, since ids are copied into every event.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId(Arc<str>);

/// Why a string is not a valid [`TargetId`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTargetId {
    /// Empty ids cannot be addressed.
    #[error("target id is empty")]
    Empty,
    /// Longer ids are rejected to keep labels and keys bounded.
    #[error("target id is longer than {max} characters", max = TargetId::MAX_LEN)]
    TooLong,
    /// Only `[a-z0-9._-]` is allowed.
    #[error("target id {id:?} has character {ch:?}; allowed are a-z, 0-9, '.', '_' and '-'")]
    BadChar {
        /// The rejected id.
        id: String,
        /// The first offending character.
        ch: char,
    },
}

impl TargetId {
    /// The longest accepted id.
    pub const MAX_LEN: usize = 128;

    /// Validates and wraps an id.
    ///
    /// # Errors
    /// [`InvalidTargetId`] when the id is empty, longer than [`TargetId::MAX_LEN`] or has a
    /// character outside `[a-z0-9._-]`.
    pub fn new(id: &str) -> Result<Self, InvalidTargetId> {
        if id.is_empty() {
            return Err(InvalidTargetId::Empty);
        }
        if id.len() > Self::MAX_LEN {
            return Err(InvalidTargetId::TooLong);
        }
        if let Some(ch) = id
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
        {
            return Err(InvalidTargetId::BadChar { id: id.into(), ch });
        }
        Ok(Self(id.into()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TargetId {
    type Err = InvalidTargetId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Where to connect: a literal socket address, or a host name resolved at probe time.
///
/// Names are resolved on every probe (with the probe's deadline) rather than once at load, so a
/// DNS change is followed without a reload, and a name that does not resolve is a probe failure
/// (`dns`). Resolver trouble is not: see the `resolve` module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// An IPv4 or IPv6 address with port, e.g. `127.0.0.1:80` or `[::1]:80`.
    Socket(SocketAddr),
    /// A host name and port, e.g. `db.internal:5432`.
    Host {
        /// The name to resolve.
        host: String,
        /// The port to connect to.
        port: u16,
    },
}

/// Which of a name's addresses a check probes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Addresses {
    /// The first that connects, in the resolver's order (the default).
    #[default]
    First,
    /// Every one; the check passes when one of them passes.
    Any,
    /// Every one; the check passes only when each of them passes.
    All,
}

impl Addresses {
    /// Every policy, as [`Addresses::as_str`] names them.
    pub const ALL: [Addresses; 3] = [Self::First, Self::Any, Self::All];

    /// The policy's name in config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Any => "any",
            Self::All => "all",
        }
    }
}

/// Why a string is not a valid [`Address`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAddress {
    /// The port is missing: `host` instead of `host:port`.
    #[error("address {0:?} has no port; expected HOST:PORT or [IPV6]:PORT")]
    MissingPort(String),
    /// The port is not a number in 1..=65535.
    #[error("address {0:?} has an invalid port; expected 1-65535")]
    BadPort(String),
    /// The host part is empty or has characters a host name cannot have.
    #[error("address {0:?} has an invalid host")]
    BadHost(String),
}

impl FromStr for Address {
    type Err = InvalidAddress;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            if addr.port() == 0 {
                return Err(InvalidAddress::BadPort(s.into()));
            }
            return Ok(Self::Socket(addr));
        }
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| InvalidAddress::MissingPort(s.into()))?;
        let port: u16 = match port.parse() {
            Ok(p) if p != 0 => p,
            _ => return Err(InvalidAddress::BadPort(s.into())),
        };
        if !is_host_name(host) {
            return Err(InvalidAddress::BadHost(s.into()));
        }
        Ok(Self::Host {
            host: host.into(),
            port,
        })
    }
}

/// Whether `host` can be a host name: 1 to 253 characters of letters, digits, `-`, `.` and `_`
/// (no port, no spaces). Whether it resolves is for the resolver to say, at probe time.
pub(crate) fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Socket(addr) => write!(f, "{addr}"),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert!(TargetId::new("orders-db.v2_a").is_ok());
        assert_eq!(TargetId::new(""), Err(InvalidTargetId::Empty));
        assert!(matches!(
            TargetId::new("Orders"),
            Err(InvalidTargetId::BadChar { ch: 'O', .. })
        ));
        assert_eq!(
            TargetId::new(&"a".repeat(129)),
            Err(InvalidTargetId::TooLong)
        );
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "127.0.0.1:80".parse::<Address>(),
            Ok(Address::Socket("127.0.0.1:80".parse().unwrap()))
        );
        assert_eq!(
            "[::1]:443".parse::<Address>(),
            Ok(Address::Socket("[::1]:443".parse().unwrap()))
        );
        assert_eq!(
            "db.internal:5432".parse::<Address>(),
            Ok(Address::Host {
                host: "db.internal".into(),
                port: 5432
            })
        );
        assert!(matches!(
            "db.internal".parse::<Address>(),
            Err(InvalidAddress::MissingPort(_))
        ));
        assert!(matches!(
            "db:0".parse::<Address>(),
            Err(InvalidAddress::BadPort(_))
        ));
        assert!(matches!(
            "db:http".parse::<Address>(),
            Err(InvalidAddress::BadPort(_))
        ));
        assert!(matches!(
            "d b:80".parse::<Address>(),
            Err(InvalidAddress::BadHost(_))
        ));
    }
}
