//! The `dns` prober: its question, its valid rcodes and its record validators as our `dns`
//! section, and a target (the server) filled in.

use std::net::IpAddr;

use probe::tier::dns::{DnsType, Rcode};

use super::entry::{Dns, DnsExpect, DnsSection, Probe};
use super::raw::{RawDns, RawRrValidator};
use super::{Check, IpProtocol, ip_protocol, regexes, target};
use probe_config::yaml::{Sp, quote};

/// The exporter's rcodes beyond the header's four bits (EDNS): never in a reply we can judge.
const EXTENDED_RCODES: &[&str] = &[
    "BADSIG",
    "BADVERS",
    "BADKEY",
    "BADTIME",
    "BADMODE",
    "BADNAME",
    "BADALG",
    "BADTRUNC",
    "BADCOOKIE",
];

/// The classes the exporter knows besides `IN`.
const OTHER_CLASSES: &[&str] = &["CS", "CH", "HS", "NONE", "ANY"];

/// A `dns` module in our terms: the section without its server.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Template {
    section: Dns,
}

impl Template {
    /// Our section for `target`, the server: `HOST[:PORT]`, port 53 without one.
    pub(super) fn probe(&self, target: &str, ip: IpProtocol) -> Result<Probe, String> {
        let text = target.trim();
        let (host, port) = target::split_host_port(text).unwrap_or((text, "53"));
        if port.parse::<u16>().is_err() {
            return Err(format!("{target:?} is not HOST[:PORT]"));
        }
        let address: IpAddr = host.parse().map_err(|_| {
            format!(
                "our DNS probe asks a server given by its address, and {host:?} is a name: give \
                 the server's IP"
            )
        })?;
        target::family(host, ip)?;
        let mut section = self.section.clone();
        section.server = target::join(&address.to_string(), port);
        Ok(Probe::Dns(section))
    }
}

/// Validates a `dns` section into its template.
pub(super) fn template(raw: Sp<RawDns>, check: &mut Check<'_>) -> (IpProtocol, Template) {
    let (key, raw) = (raw.key, raw.value);
    let ip = ip_protocol(
        raw.preferred_ip_protocol.as_ref(),
        raw.ip_protocol_fallback.as_ref(),
        check,
    );
    check.refuse_set(
        &[(&raw.source_ip_address, "source_ip_address")],
        "our probes send from the address the route gives",
    );
    if let Some(dot) = raw.dns_over_tls.as_ref().filter(|d| d.value) {
        check.refuse(
            dot.key,
            "dns_over_tls",
            "our DNS probe asks over UDP or TCP",
        );
    }
    let name = match raw.query_name.filter(|n| !n.value.trim().is_empty()) {
        Some(name) => {
            // The exporter asks about names our probe cannot (a label with a quote, say): such
            // a module is refused here, not left for the compiler to refuse at every target.
            let any_server = std::net::SocketAddr::from(([127, 0, 0, 1], 53));
            if let Err(invalid) = probe::tier::dns::DnsSpec::new(
                any_server,
                &name.value,
                probe::tier::dns::DnsType::A,
            ) {
                check.refused.push((
                    name.pos,
                    format!("\"query_name\": our DNS probe cannot ask about it: {invalid}"),
                ));
            }
            name.value.trim().to_owned()
        }
        None => {
            check.error(
                key,
                "query name must be set for DNS module: add \"query_name\"".to_owned(),
            );
            String::new()
        }
    };
    let record_type = query_type(raw.query_type.as_ref(), check);
    if let Some(class) = &raw.query_class {
        match class.value.as_str() {
            "" | "IN" => {}
            known if OTHER_CLASSES.contains(&known) => {
                check.refuse(class.key, "query_class", "our DNS probe asks in class IN");
            }
            other => check.error(
                class.pos,
                format!("query class {} is not valid", quote(other)),
            ),
        }
    }
    let transport = match raw.transport_protocol.as_ref().map(|t| t.value.as_str()) {
        None | Some("" | "udp") => "udp",
        Some("tcp") => "tcp",
        Some(other) => {
            let at = raw.transport_protocol.as_ref().map_or(key, |t| t.pos);
            check.error(
                at,
                format!(
                    "transport protocol {} is not valid; expected udp or tcp",
                    quote(other)
                ),
            );
            "udp"
        }
    };
    let rcodes = valid_rcodes(raw.valid_rcodes, check);
    let answer = validator(raw.validate_answer_rrs, "validate_answer_rrs", check);
    let authority = validator(raw.validate_authority_rrs, "validate_authority_rrs", check);
    let additional = validator(
        raw.validate_additional_rrs,
        "validate_additional_rrs",
        check,
    );
    let template = Template {
        section: Dns {
            server: String::new(),
            name,
            record_type,
            transport: transport.to_owned(),
            recursion_desired: raw.recursion_desired.filter(|r| !r.value).map(|r| r.value),
            expect: DnsExpect {
                rcode: rcodes,
                // The exporter asks for no answers: the rcode and the validators decide.
                min_answers: 0,
                records: super::entry::DnsRecords {
                    answer,
                    authority,
                    additional,
                },
            },
        },
    };
    (ip, template)
}

/// `query_type`: ANY by default; one of ours as written (the exporter's names are upper case).
fn query_type(raw: Option<&Sp<String>>, check: &mut Check<'_>) -> String {
    let Some(raw) = raw.filter(|t| !t.value.is_empty()) else {
        return DnsType::Any.as_str().to_owned();
    };
    let text = raw.value.as_str();
    if let Some(ours) = DnsType::ALL.iter().find(|t| t.as_str() == text) {
        return ours.as_str().to_owned();
    }
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        let ours: Vec<&str> = DnsType::ALL.iter().map(|t| t.as_str()).collect();
        check.refuse(
            raw.key,
            &format!("query_type: {text}"),
            &format!("our DNS probe asks for {}", ours.join(", ")),
        );
    } else {
        check.error(raw.pos, format!("query type {} is not valid", quote(text)));
    }
    DnsType::Any.as_str().to_owned()
}

/// `valid_rcodes`: `NOERROR` by default.
fn valid_rcodes(raw: super::raw::Strings, check: &mut Check<'_>) -> Vec<String> {
    let Some(list) = raw else {
        return vec!["NOERROR".to_owned()];
    };
    if list.value.0.is_empty() {
        check.error(
            list.pos,
            "valid_rcodes is empty: no reply could pass".to_owned(),
        );
    }
    let mut out = Vec::new();
    for rcode in &list.value.0 {
        let text = rcode.value.as_str();
        if Rcode::NAMES.contains(&text) {
            out.push(text.to_owned());
        } else if EXTENDED_RCODES.contains(&text) {
            check.refuse(
                rcode.pos,
                &format!("valid_rcodes: {text}"),
                "our DNS probe sends no EDNS, so extended rcodes never come",
            );
        } else {
            check.error(
                rcode.pos,
                format!("unknown rcode {} in \"valid_rcodes\"", quote(text)),
            );
        }
    }
    out
}

/// One `validate_*_rrs` section as our rules over the same section.
fn validator(raw: Option<Sp<RawRrValidator>>, field: &str, check: &mut Check<'_>) -> DnsSection {
    let Some(raw) = raw else {
        return DnsSection::default();
    };
    let raw = raw.value;
    let mut list = |items, name: &str| regexes(items, &format!("{field}.{name}"), check);
    // The exporter's names say what fails; ours say what must hold.
    DnsSection {
        none_match: list(raw.fail_if_matches_regexp, "fail_if_matches_regexp"),
        not_all_match: list(raw.fail_if_all_match_regexp, "fail_if_all_match_regexp"),
        all_match: list(raw.fail_if_not_matches_regexp, "fail_if_not_matches_regexp"),
        some_match: list(
            raw.fail_if_none_matches_regexp,
            "fail_if_none_matches_regexp",
        ),
    }
}
