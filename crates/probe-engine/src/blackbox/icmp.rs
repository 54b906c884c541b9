//! The `icmp` prober: one echo request to a host, as our `icmp` section.

use super::entry::{Icmp, Probe};
use super::raw::RawIcmp;
use super::{Check, IpProtocol, ip_protocol, target};
use probe_config::yaml::Sp;

/// The exporter's TTL when a module sets none.
const DEFAULT_TTL: i64 = 64;

/// An `icmp` module in our terms: the section without its host.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Template {
    section: Icmp,
}

impl Template {
    /// Our section for `target`, a host (an address or a name).
    pub(super) fn probe(&self, target: &str, ip: IpProtocol) -> Result<Probe, String> {
        let host = target.trim().trim_matches(['[', ']']);
        if host.is_empty() {
            return Err("the target is empty".to_owned());
        }
        target::family(host, ip)?;
        let mut section = self.section.clone();
        section.host = host.to_owned();
        Ok(Probe::Icmp(section))
    }
}

/// Validates an `icmp` section (absent: one echo, as the exporter sends) into its template.
pub(super) fn template(raw: Option<Sp<RawIcmp>>, check: &mut Check<'_>) -> (IpProtocol, Template) {
    let Some(raw) = raw else {
        let template = Template {
            section: Icmp::default(),
        };
        return (IpProtocol::default(), template);
    };
    let raw = raw.value;
    let ip = ip_protocol(
        raw.preferred_ip_protocol.as_ref(),
        raw.ip_protocol_fallback.as_ref(),
        check,
    );
    check.refuse_set(
        &[(&raw.source_ip_address, "source_ip_address")],
        "our probes send from the address the route gives",
    );
    if let Some(df) = raw.dont_fragment.as_ref().filter(|d| d.value) {
        check.refuse(
            df.key,
            "dont_fragment",
            "our ICMP probe leaves fragmentation to the system",
        );
    }
    if let Some(ttl) = &raw.ttl {
        if !(0..=255).contains(&ttl.value) {
            check.error(ttl.pos, "\"ttl\" must be in the range [0, 255]".to_owned());
        } else if !matches!(ttl.value, 0 | DEFAULT_TTL) {
            check.refuse(ttl.key, "ttl", "our ICMP probe sends with the system's TTL");
        }
    }
    let size = raw
        .payload_size
        .as_ref()
        .and_then(|p| match u64::try_from(p.value) {
            Ok(0) => None,
            Ok(size) if usize::try_from(size).is_ok_and(|s| s <= probe::tier::icmp::MAX_SIZE) => {
                Some(size)
            }
            _ => {
                check.error(
                    p.pos,
                    format!(
                        "\"payload_size\" must be in the range [0, {}]",
                        probe::tier::icmp::MAX_SIZE
                    ),
                );
                None
            }
        });
    let template = Template {
        section: Icmp {
            host: String::new(),
            size,
        },
    };
    (ip, template)
}
