//! The `tls` section of a target, a TLS certificate probe: raw schema and its mapping onto
//! [`TlsSpec`].

use std::time::Duration;

use probe::Address;
use probe::tier::tls::{StartTls, TlsSpec};
use serde::Deserialize;

use super::addresses;
use super::http::{Checked, trust};
use super::reply::RawStep;
use super::schedule::duration_at_most;
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Sp};
use crate::yaml::words::one_of;

/// The longest `expires_within`, a year (of 365.25 days, so that it reads "1year"): public
/// certificates are issued for at most 13 months, and a warning longer than that never clears.
const MAX_EXPIRES_WITHIN: Duration = Duration::from_secs(31_557_600);

#[derive(Deserialize)]
#[serde(rename = "tls", deny_unknown_fields)]
pub(crate) struct RawTlsProbe {
    address: Sp<String>,
    server_name: Option<Sp<String>>,
    ca_file: Option<Sp<String>>,
    insecure_skip_verify: Option<Sp<bool>>,
    expires_within: Option<Sp<String>>,
    starttls: Option<Sp<String>>,
    addresses: Option<Sp<String>>,
    before_tls: Option<Sp<Vec<Sp<RawStep>>>>,
    conversation: Option<Sp<Vec<Sp<RawStep>>>>,
}

/// Maps a raw `tls` section onto a spec, reporting every invalid value.
pub(crate) fn parse(raw: RawTlsProbe, source: &Source<'_>, diags: &mut Diags) -> Option<TlsSpec> {
    let spec = raw
        .address
        .value
        .trim()
        .parse::<Address>()
        .map_err(|e| diags.push((raw.address.pos, e.to_string())))
        .and_then(|address| {
            TlsSpec::new(address).map_err(|e| {
                diags.push((
                    raw.address.pos,
                    format!("{e}; set \"server_name\" to the name the certificate holds"),
                ));
            })
        });
    let spec = match (spec, raw.server_name) {
        (Ok(spec), Some(name)) => spec
            .with_server_name(name.value.trim())
            .map_err(|e| diags.push((name.pos, e.to_string()))),
        (spec, _) => spec,
    };
    let trust = trust(raw.ca_file, raw.insecure_skip_verify, source.dir, diags);
    let within = duration_at_most(
        raw.expires_within.as_ref(),
        "expires_within",
        true,
        MAX_EXPIRES_WITHIN,
        diags,
    );
    let has_starttls = raw.starttls.is_some();
    let starttls = raw
        .starttls
        .map_or(Ok(None), |s| starttls(&s, diags).map(Some));
    let policy = addresses::parse(raw.addresses.as_ref(), diags);
    let conversation = raw.conversation.map_or(Ok(Vec::new()), |steps| {
        super::reply::conversation(steps, false, diags)
    });
    let before_tls = match (raw.before_tls, has_starttls) {
        (None, _) => Ok(Vec::new()),
        (Some(steps), true) => {
            diags.push((
                steps.key,
                r#""before_tls" and "starttls" are mutually exclusive: keep only one"#.to_owned(),
            ));
            Err(())
        }
        (Some(steps), false) => super::reply::conversation(steps, false, diags),
    };
    let mut spec = spec.ok()?;
    spec.trust = trust.ok()?;
    spec.addresses = policy.ok()?;
    if within.is_invalid() {
        return None;
    }
    spec.expires_within = within.value();
    spec.starttls = starttls.ok()?;
    spec.before_tls = before_tls.ok()?;
    spec.conversation = conversation.ok()?;
    Some(spec)
}

fn starttls(raw: &Sp<String>, diags: &mut Diags) -> Checked<StartTls> {
    let name = one_of(
        raw,
        "protocol",
        "starttls",
        StartTls::ALL.map(StartTls::as_str),
        diags,
    )?;
    StartTls::ALL
        .into_iter()
        .find(|p| p.as_str() == name)
        .ok_or(())
}
