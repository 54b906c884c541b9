//! The `tcp` prober: a connect and its `query_response` conversation (our `tcp` section's
//! `conversation`); with `tls: true`, or a step that says `starttls`, our `tls` probe, which
//! verifies the certificate as the exporter's Go client does: the steps up to the `starttls` in
//! the clear (its `before_tls`), the rest over TLS (its `conversation`).

use super::entry::{Probe, Step, Tcp, Tls, TlsTrust};
use super::raw::{RawQueryResponse, RawTcp};
use super::{Check, IpProtocol, ip_protocol, target, tls_config};
use probe_config::yaml::Sp;

/// A `tcp` module in our terms.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Template {
    /// `tls: true`: the trust and the `server_name` (default: the target's host, an address
    /// included, as the exporter's).
    tls: Option<(TlsTrust, Option<String>)>,
    /// With TLS, the steps before the handshake (up to a `starttls`).
    before_tls: Vec<Step>,
    conversation: Vec<Step>,
}

impl Template {
    /// Our section for `target`, `HOST:PORT`.
    pub(super) fn probe(&self, target: &str, ip: IpProtocol) -> Result<Probe, String> {
        let (host, port) = target::host_port(target)?;
        target::family(host, ip)?;
        let address = target::join(host, port);
        let Some((trust, server_name)) = &self.tls else {
            return Ok(Probe::Tcp(Tcp {
                address,
                conversation: self.conversation.clone(),
            }));
        };
        Ok(Probe::Tls(Tls {
            address,
            server_name: server_name.clone(),
            trust: trust.clone(),
            before_tls: self.before_tls.clone(),
            conversation: self.conversation.clone(),
        }))
    }
}

/// Validates a `tcp` section (absent: a plain connect) into its template.
pub(super) fn template(raw: Option<Sp<RawTcp>>, check: &mut Check<'_>) -> (IpProtocol, Template) {
    let Some(raw) = raw else {
        let template = Template {
            tls: None,
            before_tls: Vec::new(),
            conversation: Vec::new(),
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
        "our probes connect from the address the route gives",
    );
    let tls_on = raw.tls.as_ref().filter(|t| t.value).map(|t| t.key);
    let (mut steps, mut upgrade) = (Vec::new(), None);
    for step in raw.query_response.iter().flat_map(|q| &q.value) {
        query_response(step, &mut steps, check);
        let Some(starttls) = step.value.starttls.as_ref().filter(|s| s.value) else {
            continue;
        };
        match (tls_on, upgrade) {
            (Some(tls), _) => check.refuse(
                starttls.key,
                "query_response.starttls",
                &format!(
                    "with tls: true (line {}), it would be TLS within TLS",
                    tls.line
                ),
            ),
            (None, Some(_)) => check.refuse(
                starttls.key,
                "query_response.starttls",
                "our tls probe upgrades once",
            ),
            (None, None) => upgrade = Some(steps.len()),
        }
    }
    let (tls, before_tls, conversation) = if tls_on.is_some() || upgrade.is_some() {
        let (trust, server_name) = tls_config(raw.tls_config, check);
        let conversation = steps.split_off(upgrade.unwrap_or(0));
        (
            Some((trust, server_name.map(|(name, _)| name))),
            steps,
            conversation,
        )
    } else {
        (None, Vec::new(), steps)
    };
    let template = Template {
        tls,
        before_tls,
        conversation,
    };
    (ip, template)
}

/// One `query_response` step as ours: its `expect` (a regex over each line, as the exporter
/// reads lines) then its `send` (with the line end the exporter adds); its `starttls` is the
/// caller's.
fn query_response(step: &Sp<RawQueryResponse>, out: &mut Vec<Step>, check: &mut Check<'_>) {
    let raw = &step.value;
    // Both came after the exporter's 0.23, whose series `/probe` writes, so that one file
    // means the same to either.
    check.refuse_set(
        &[(&raw.expect_bytes, "query_response.expect_bytes")],
        "a later exporter's option; our conversation matches lines with expect, as 0.23's does",
    );
    check.refuse_set(
        &[(&raw.labels, "query_response.labels")],
        "a later exporter's option (its probe_expect_info); /probe writes 0.23's series",
    );
    let expect = raw.expect.as_ref().filter(|e| !e.value.is_empty());
    if let Some(expect) = expect
        && probe_config::bytes_regex(expect, "expect", &mut check.invalid).is_ok()
    {
        out.push(Step::ExpectLine(expect.value.clone()));
    }
    if let Some(send) = raw.send.as_ref().filter(|s| check.binary(s.pos)) {
        check.refuse(
            send.key,
            "query_response.send",
            "a !!binary payload: our conversation sends text",
        );
    }
    if let Some(send) = raw.send.as_ref().filter(|s| !s.value.is_empty()) {
        // The exporter expands `${1}` from the match of the step's own `expect` only.
        let text = format!("{}\n", send.value);
        out.push(if expect.is_some() && send.value.contains('$') {
            Step::Reply(text)
        } else {
            Step::Send(text)
        });
    }
}
