//! The `udp` section of a target: raw schema and its mapping onto [`UdpSpec`].

use probe::Address;
use probe::tier::udp::UdpSpec;
use serde::Deserialize;

use super::reply::reply_expect;
use crate::yaml::node::{Diags, Sp};

#[derive(Deserialize)]
#[serde(rename = "udp", deny_unknown_fields)]
pub(crate) struct RawUdp {
    address: Sp<String>,
    send: Sp<String>,
    expect: Option<Sp<String>>,
    expect_regex: Option<Sp<String>>,
}

/// Maps a raw `udp` section onto a spec, reporting every invalid value.
pub(crate) fn parse(raw: RawUdp, diags: &mut Diags) -> Option<UdpSpec> {
    let address = raw
        .address
        .value
        .parse::<Address>()
        .map_err(|e| diags.push((raw.address.pos, e.to_string())));
    let expect = reply_expect(raw.expect, raw.expect_regex, diags);
    let pos = raw.send.pos;
    let spec = UdpSpec::new(address.ok()?, raw.send.value.into_bytes())
        .map_err(|e| diags.push((pos, e.to_string())))
        .ok()?;
    Some(match expect.ok()? {
        Some(expect) => spec.with_expect(expect),
        None => spec,
    })
}
