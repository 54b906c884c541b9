//! The top-level `resolver` section: which DNS servers the engine's one resolver asks (see
//! [`probe::tier::resolve`]).
//!
//! ```yaml
//! resolver:                                  # optional, in one file at most
//!   servers: ["127.0.0.1:5353", "10.0.0.2"]  # IP[:PORT] or [IPV6]:PORT; port default 53
//!   timeout: 2s                              # per query and transport (UDP, then TCP);
//!                                            # default: resolv.conf's, else 5s
//!   attempts: 2                              # queries per lookup; default: resolv.conf's, else 2
//! ```
//!
//! Without the section (or without `servers`), the host's `/etc/resolv.conf` is used; the hosts
//! file is read either way. How long a last good answer stands in for a failing resolver is
//! per target: `dns_stale_for` (in `defaults` or on a target, default 5m, `0s` off).
//!
//! Changing the section on a reload points the running resolver at the new servers; the last
//! good answers are kept.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use probe::tier::resolve::ResolverConfig;
use serde::Deserialize;

use super::schedule::duration_at_most;
use crate::yaml::diagnostics::quote;
use crate::yaml::node::{Diags, Node, Sp, collect};

#[derive(Deserialize)]
#[serde(rename = "resolver", deny_unknown_fields)]
struct RawResolver {
    servers: Option<Sp<Vec<Sp<String>>>>,
    timeout: Option<Sp<String>>,
    attempts: Option<Sp<u32>>,
}

/// A query that waits longer than this is no use to a probe, whose own timeout is shorter.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// More attempts than this would only stretch every failing lookup.
const MAX_ATTEMPTS: u32 = 10;

/// The `resolver` section; `None` when invalid (every problem reported).
pub(crate) fn parse(node: &Node, src: &str, diags: &mut Diags) -> Option<ResolverConfig> {
    let (raw, structural) = collect::<RawResolver>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    let before = diags.len();
    let servers = raw.servers.map(|servers| {
        if servers.value.is_empty() {
            diags.push((
                servers.pos,
                "resolver.servers is empty: list at least one server, or leave it out to use \
                 /etc/resolv.conf"
                    .to_owned(),
            ));
        }
        servers
            .value
            .iter()
            .filter_map(|server| {
                server_address(&server.value)
                    .map_err(|message| diags.push((server.pos, message)))
                    .ok()
            })
            .collect::<Vec<_>>()
    });
    let timeout = duration_at_most(
        raw.timeout.as_ref(),
        "resolver.timeout",
        true,
        MAX_TIMEOUT,
        diags,
    )
    .value();
    let attempts = raw.attempts.as_ref().and_then(|a| {
        if (1..=MAX_ATTEMPTS).contains(&a.value) {
            usize::try_from(a.value).ok()
        } else {
            diags.push((
                a.pos,
                format!(
                    "resolver.attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                    a.value
                ),
            ));
            None
        }
    });
    (diags.len() == before).then(|| ResolverConfig {
        servers,
        timeout,
        attempts,
        ..ResolverConfig::default()
    })
}

/// `IP`, `IP:PORT` or `[IPV6]:PORT`; a server is an address, since a name would need a resolver.
fn server_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    match text.parse::<SocketAddr>() {
        Ok(addr) if addr.port() == 0 => Err(format!(
            "resolver server {} has port 0; expected 1-65535",
            quote(text)
        )),
        Ok(addr) => Ok(addr),
        Err(_) => Err(format!(
            "resolver server {} is not an IP address with an optional port (IP, IP:PORT or \
             [IPV6]:PORT)",
            quote(text)
        )),
    }
}
