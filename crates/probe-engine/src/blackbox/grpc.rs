//! The `grpc` prober: a `grpc.health.v1` check, as our `grpc` section.

use super::entry::{self, Grpc, Pairs, Probe};
use super::raw::RawGrpc;
use super::{Check, IpProtocol, header, ip_protocol, target, tls_config};
use probe_config::yaml::Sp;

/// A `grpc` module in our terms: the section without its address.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Template {
    section: Grpc,
}

impl Template {
    /// Our section for `target`: `[http[s]://]HOST[:PORT]`, port 443 with TLS and 80 without,
    /// as the exporter reads it.
    pub(super) fn probe(&self, target: &str, ip: IpProtocol) -> Result<Probe, String> {
        let text = target.trim();
        let text = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"))
            .unwrap_or(text);
        let authority = text.split('/').next().unwrap_or_default();
        let default_port = if self.section.tls.is_some() {
            "443"
        } else {
            "80"
        };
        let (host, port) = target::split_host_port(authority)
            .unwrap_or((authority.trim_matches(['[', ']']), default_port));
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{target:?} is not [http[s]://]HOST[:PORT]"));
        }
        target::family(host, ip)?;
        let mut section = self.section.clone();
        section.address = target::join(host, port);
        Ok(Probe::Grpc(section))
    }
}

/// Validates a `grpc` section (absent: a plaintext check of the server as a whole).
pub(super) fn template(raw: Option<Sp<RawGrpc>>, check: &mut Check<'_>) -> (IpProtocol, Template) {
    let Some(raw) = raw else {
        let template = Template {
            section: Grpc::default(),
        };
        return (IpProtocol::default(), template);
    };
    let raw = raw.value;
    let ip = ip_protocol(
        raw.preferred_ip_protocol.as_ref(),
        raw.ip_protocol_fallback.as_ref(),
        check,
    );
    let tls = if raw.tls.is_some_and(|t| t.value) {
        let (trust, server_name) = tls_config(raw.tls_config, check);
        if let Some((_, at)) = server_name {
            check.refuse(
                at,
                "tls_config.server_name",
                "our gRPC probe names the target's host",
            );
        }
        Some(trust)
    } else {
        None
    };
    let mut metadata = Pairs::default();
    for (name, values) in raw.metadata.map(|m| m.value.0).unwrap_or_default() {
        match values.value.0.as_slice() {
            [] => {}
            [value] => {
                if header(&name, value, "metadata", check) {
                    metadata.0.push((name, entry::literal(&value.value)));
                }
            }
            [_, second, ..] => check.refuse(
                second.pos,
                &format!("metadata.{name}"),
                "our gRPC probe sends one value per key",
            ),
        }
    }
    let template = Template {
        section: Grpc {
            address: String::new(),
            service: raw.service.map(|s| s.value).unwrap_or_default(),
            tls,
            metadata,
        },
    };
    (ip, template)
}
