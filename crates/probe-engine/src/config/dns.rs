//! The `dns` section of a target: raw schema and its mapping onto [`DnsSpec`].
//!
//! Every value is checked here with the library's own parsers (server address, record type,
//! rcode, `re:` patterns), so that a mistake is reported at load with its position. Without a
//! `server`, the system's resolver (the first nameserver of `/etc/resolv.conf`) is read now: a
//! machine without one fails at load, not with a probe that can never pass.

use std::net::{Ipv4Addr, SocketAddr};

use probe::tier::dns::{
    AnswerMatch, DEFAULT_PORT, DnsDegradedIf, DnsExpect, DnsSpec, DnsTransport, DnsType, Rcode,
    parse_server, system_server,
};
use serde::Deserialize;

use super::diagnostics::quote;
use super::node::{Diags, OneOrMany, Pos, Sp};
use super::schedule::duration;
use super::words::one_of;

#[derive(Deserialize)]
#[serde(rename = "dns", deny_unknown_fields)]
pub(super) struct RawDns {
    server: Option<Sp<String>>,
    name: Sp<String>,
    #[serde(rename = "type")]
    record_type: Option<Sp<String>>,
    transport: Option<Sp<String>>,
    expect: Option<Sp<RawExpect>>,
    degraded_if: Option<Sp<RawDegradedIf>>,
}

#[derive(Deserialize)]
#[serde(rename = "expect", deny_unknown_fields)]
struct RawExpect {
    rcode: Option<Sp<String>>,
    answers: Option<Sp<OneOrMany<Sp<String>>>>,
    min_answers: Option<Sp<u32>>,
}

#[derive(Deserialize)]
#[serde(rename = "degraded_if", deny_unknown_fields)]
struct RawDegradedIf {
    latency_over: Option<Sp<String>>,
}

/// Marks a value that failed validation; its error is already in the diagnostics.
type Checked<T> = Result<T, ()>;

/// Maps a raw `dns` section, whose key is at `key`, onto a spec, reporting every invalid value.
pub(super) fn parse(raw: RawDns, key: Pos, diags: &mut Diags) -> Option<DnsSpec> {
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
    Some(spec)
}

fn expect(raw: RawExpect, diags: &mut Diags) -> Checked<DnsExpect> {
    let rcode = raw.rcode.as_ref().map_or(Ok(Rcode::NOERROR), |r| {
        one_of(r, "rcode", "rcode", Rcode::NAMES, diags)
            .and_then(|name| name.parse().map_err(|_| ()))
    });
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
    let rcode = rcode?;
    ok.then_some(DnsExpect {
        rcode,
        answers,
        min_answers: raw.min_answers.map(|m| m.value),
    })
    .ok_or(())
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
