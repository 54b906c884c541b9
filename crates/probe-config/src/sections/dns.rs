//! The `dns` section of a target: raw schema and its mapping onto [`DnsSpec`].
//!
//! Every value is checked here with the library's own parsers (server address, record type,
//! rcode, `re:` patterns), so that a mistake is reported at load with its position. Without a
//! `server`, the system's resolver (the first nameserver of `/etc/resolv.conf`) is read now: a
//! machine without one fails at load, not with a probe that can never pass.

use std::net::{Ipv4Addr, SocketAddr};

use probe::tier::dns::{
    AnswerMatch, DEFAULT_PORT, DnsDegradedIf, DnsExpect, DnsSpec, DnsTransport, DnsType, Rcode,
    RecordRules, SectionRules, parse_server, system_server,
};
use serde::Deserialize;

use super::schedule::duration;
use crate::yaml::diagnostics::quote;
use crate::yaml::node::{Diags, OneOrMany, Pos, Sp};
use crate::yaml::words::one_of;

#[derive(Deserialize)]
#[serde(rename = "dns", deny_unknown_fields)]
pub(crate) struct RawDns {
    server: Option<Sp<String>>,
    name: Sp<String>,
    #[serde(rename = "type")]
    record_type: Option<Sp<String>>,
    transport: Option<Sp<String>>,
    expect: Option<Sp<RawExpect>>,
    degraded_if: Option<Sp<RawDegradedIf>>,
    recursion_desired: Option<Sp<bool>>,
}

#[derive(Deserialize)]
#[serde(rename = "expect", deny_unknown_fields)]
struct RawExpect {
    rcode: Option<Sp<OneOrMany<Sp<String>>>>,
    answers: Option<Sp<OneOrMany<Sp<String>>>>,
    min_answers: Option<Sp<u32>>,
    records: Option<Sp<RawRecords>>,
}

#[derive(Deserialize)]
#[serde(rename = "records", deny_unknown_fields)]
struct RawRecords {
    answer: Option<Sp<RawSection>>,
    authority: Option<Sp<RawSection>>,
    additional: Option<Sp<RawSection>>,
}

#[derive(Deserialize)]
#[serde(rename = "section", deny_unknown_fields)]
struct RawSection {
    none_match: Option<Sp<OneOrMany<Sp<String>>>>,
    not_all_match: Option<Sp<OneOrMany<Sp<String>>>>,
    all_match: Option<Sp<OneOrMany<Sp<String>>>>,
    some_match: Option<Sp<OneOrMany<Sp<String>>>>,
}

#[derive(Deserialize)]
#[serde(rename = "degraded_if", deny_unknown_fields)]
struct RawDegradedIf {
    latency_over: Option<Sp<String>>,
}

/// Marks a value that failed validation; its error is already in the diagnostics.
type Checked<T> = Result<T, ()>;

/// Maps a raw `dns` section, whose key is at `key`, onto a spec, reporting every invalid value.
pub(crate) fn parse(raw: RawDns, key: Pos, diags: &mut Diags) -> Option<DnsSpec> {
    let server = match &raw.server {
        Some(server) => {
            parse_server(&server.value).map_err(|e| diags.push((server.pos, e.to_string())))
        }
        None => system_server().map_err(|e| {
            diags.push((
                key,
                format!("no \"server\" given, and {e}: add \"server\" (IP:PORT)"),
            ));
        }),
    };
    let record_type = raw.record_type.as_ref().map_or(Ok(DnsType::A), |t| {
        let names = DnsType::ALL.map(DnsType::as_str);
        one_of(t, "record type", "type", names, diags).and_then(|n| n.parse().map_err(|_| ()))
    });
    let transport = raw.transport.as_ref().map_or(Ok(DnsTransport::Udp), |t| {
        let names = DnsTransport::ALL.map(DnsTransport::as_str);
        one_of(t, "transport", "transport", names, diags).map(|name| {
            if name == DnsTransport::Tcp.as_str() {
                DnsTransport::Tcp
            } else {
                DnsTransport::Udp
            }
        })
    });
    let expect = raw
        .expect
        .map_or(Ok(DnsExpect::default()), |e| expect(e.value, diags));
    let degraded_if = raw.degraded_if.map_or(Ok(DnsDegradedIf::default()), |d| {
        degraded_if(&d.value, diags)
    });
    // The name is checked whatever else failed; the placeholder server is replaced below.
    let placeholder = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
    let spec = DnsSpec::new(
        *server.as_ref().unwrap_or(&placeholder),
        &raw.name.value,
        DnsType::A,
    )
    .map_err(|e| diags.push((raw.name.pos, e.to_string())));
    let mut spec = spec.ok()?;
    spec.server = server.ok()?;
    spec.record_type = record_type.ok()?;
    spec.transport = transport.ok()?;
    spec.expect = expect.ok()?;
    spec.degraded_if = degraded_if.ok()?;
    spec.recursion_desired = raw.recursion_desired.is_none_or(|r| r.value);
    Some(spec)
}

fn expect(raw: RawExpect, diags: &mut Diags) -> Checked<DnsExpect> {
    let rcodes = raw.rcode.map_or(Ok(vec![Rcode::NOERROR]), |list| {
        if list.value.0.is_empty() {
            diags.push((
                list.pos,
                "rcode list is empty: give at least one".to_owned(),
            ));
            return Err(());
        }
        let parsed: Vec<Checked<Rcode>> = list
            .value
            .0
            .iter()
            .map(|r| {
                one_of(r, "rcode", "rcode", Rcode::NAMES, diags)
                    .and_then(|name| name.parse().map_err(|_| ()))
            })
            .collect();
        parsed.into_iter().collect()
    });
    let records = raw
        .records
        .map_or(Ok(RecordRules::default()), |r| records(r.value, diags));
    let mut answers = Vec::new();
    let mut ok = true;
    for item in raw.answers.map(|a| a.value.0).unwrap_or_default() {
        match AnswerMatch::parse(&item.value) {
            Ok(answer) => answers.push(answer),
            Err(e) => {
                diags.push((
                    item.pos,
                    format!(
                        "invalid regex {} in \"answers\": {}",
                        quote(&item.value),
                        super::reply::regex_message(&e)
                    ),
                ));
                ok = false;
            }
        }
    }
    let (rcodes, records) = (rcodes?, records?);
    ok.then_some(DnsExpect {
        rcodes,
        answers,
        min_answers: raw.min_answers.map(|m| m.value),
        records,
    })
    .ok_or(())
}

fn records(raw: RawRecords, diags: &mut Diags) -> Checked<RecordRules> {
    let mut section = |raw: Option<Sp<RawSection>>, name: &str| {
        let Some(raw) = raw else {
            return Ok(SectionRules::default());
        };
        let mut list = |items: Option<Sp<OneOrMany<Sp<String>>>>, key: &str| {
            let field = format!("records.{name}.{key}");
            let parsed: Vec<Checked<regex::Regex>> = items
                .map(|i| i.value.0)
                .unwrap_or_default()
                .iter()
                .map(|item| super::reply::regex(item, &field, diags))
                .collect();
            parsed.into_iter().collect::<Checked<Vec<_>>>()
        };
        let none_match = list(raw.value.none_match, "none_match");
        let not_all_match = list(raw.value.not_all_match, "not_all_match");
        let all_match = list(raw.value.all_match, "all_match");
        let some_match = list(raw.value.some_match, "some_match");
        Ok(SectionRules {
            none_match: none_match?,
            not_all_match: not_all_match?,
            all_match: all_match?,
            some_match: some_match?,
        })
    };
    let answer = section(raw.answer, "answer");
    let authority = section(raw.authority, "authority");
    let additional = section(raw.additional, "additional");
    Ok(RecordRules {
        answer: answer?,
        authority: authority?,
        additional: additional?,
    })
}

fn degraded_if(raw: &RawDegradedIf, diags: &mut Diags) -> Checked<DnsDegradedIf> {
    let latency = duration(raw.latency_over.as_ref(), "latency_over", true, diags);
    if latency.is_invalid() {
        return Err(());
    }
    Ok(DnsDegradedIf {
        latency_over: latency.value(),
    })
}
