//! Targets as the exporter's `/probe?target=` takes them: `HOST:PORT` split as Go's
//! `net.SplitHostPort` splits it, and the module's address family held against the host.

use std::net::IpAddr;

use super::IpProtocol;

/// `HOST:PORT` (or `[V6]:PORT`) split in two, the brackets dropped.
pub(super) fn split_host_port(target: &str) -> Option<(&str, &str)> {
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return Some((host, port));
    }
    let (host, port) = target.rsplit_once(':')?;
    // A second colon outside brackets: an IPv6 address without its port.
    (!host.contains(':')).then_some((host, port))
}

/// `HOST:PORT` for our sections, brackets around an IPv6 address.
pub(super) fn join(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `HOST:PORT` with a port, or why not.
pub(super) fn host_port(target: &str) -> Result<(&str, &str), String> {
    let (host, port) =
        split_host_port(target.trim()).ok_or_else(|| format!("{target:?} is not HOST:PORT"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{target:?} is not HOST:PORT"));
    }
    Ok((host, port))
}

/// Whether `host` can be probed as the module's family allows: with the fallback, any host;
/// without, an address of the preferred family (a name could resolve to either, and our probes
/// do not choose).
pub(super) fn family(host: &str, ip: IpProtocol) -> Result<(), String> {
    if ip.fallback {
        return Ok(());
    }
    let family = if ip.ip6 { "IPv6" } else { "IPv4" };
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(addr) if addr.is_ipv6() == ip.ip6 => Ok(()),
        Ok(_) => Err(format!(
            "the module probes over {family} only (ip_protocol_fallback: false), and the target \
             is not an {family} address: the exporter fails it every time"
        )),
        Err(_) => Err(format!(
            "the module probes over {family} only (ip_protocol_fallback: false), and our probes \
             cannot restrict a name to one family: give the target as an {family} address"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_as_go_splits_them() {
        assert_eq!(split_host_port("db:5432"), Some(("db", "5432")));
        assert_eq!(split_host_port("[::1]:53"), Some(("::1", "53")));
        assert_eq!(split_host_port("::1"), None);
        assert_eq!(split_host_port("db"), None);
        assert_eq!(join("::1", "53"), "[::1]:53");
        assert!(host_port("db:http").is_err());
        assert!(host_port(":80").is_err());
    }

    #[test]
    fn a_family_without_fallback_needs_an_address_of_it() {
        let ip6_only = IpProtocol {
            ip6: true,
            fallback: false,
        };
        assert!(family("::1", ip6_only).is_ok());
        assert!(family("127.0.0.1", ip6_only).is_err());
        assert!(family("db.internal", ip6_only).is_err());
        let either = IpProtocol {
            ip6: true,
            fallback: true,
        };
        assert!(family("db.internal", either).is_ok());
    }
}
