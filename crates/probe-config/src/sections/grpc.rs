//! The `grpc` section of a target, a `grpc.health.v1` check: raw schema and its mapping onto
//! [`GrpcSpec`]. Its `tls` and `metadata` are read as the `http` section's `tls` and `headers`
//! are, with the same checks (metadata values are secrets, expanded from the environment).

use probe::Address;
use probe::tier::grpc::GrpcSpec;
use probe::tier::http::RequestHeaders;
use serde::Deserialize;

use super::addresses;
use super::http::{RawTls, headers, trust};
use super::schedule::duration;
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Entries, Sp};

#[derive(Deserialize)]
#[serde(rename = "grpc", deny_unknown_fields)]
pub(crate) struct RawGrpc {
    address: Sp<String>,
    service: Option<Sp<String>>,
    tls: Option<Sp<RawTls>>,
    metadata: Option<Sp<Entries<String>>>,
    fresh_connection: Option<Sp<bool>>,
    addresses: Option<Sp<String>>,
    degraded_if: Option<Sp<RawGrpcDegradedIf>>,
}

#[derive(Deserialize)]
#[serde(rename = "degraded_if", deny_unknown_fields)]
struct RawGrpcDegradedIf {
    latency_over: Option<Sp<String>>,
}

/// Maps a raw `grpc` section onto a spec, reporting every invalid value.
pub(crate) fn parse(raw: RawGrpc, source: &Source<'_>, diags: &mut Diags) -> Option<GrpcSpec> {
    let address = raw
        .address
        .value
        .trim()
        .parse::<Address>()
        .map_err(|e| diags.push((raw.address.pos, e.to_string())));
    let tls = raw.tls.map(|t| {
        trust(
            t.value.ca_file,
            t.value.insecure_skip_verify,
            source.dir,
            diags,
        )
    });
    let metadata = raw.metadata.map_or(Ok(RequestHeaders::new()), |m| {
        headers(m.value, source, diags)
    });
    let latency = raw
        .degraded_if
        .map(|d| duration(d.value.latency_over.as_ref(), "latency_over", true, diags));
    let policy = addresses::parse(raw.addresses.as_ref(), diags);
    let mut spec = GrpcSpec::new(address.ok()?);
    spec.addresses = policy.ok()?;
    spec.service = raw.service.map(|s| s.value).unwrap_or_default();
    spec.tls = tls.transpose().ok()?;
    spec.metadata = metadata.ok()?;
    spec.fresh_connection = raw.fresh_connection.is_some_and(|f| f.value);
    if latency.is_some_and(|l| l.is_invalid()) {
        return None;
    }
    spec.latency_over = latency.and_then(|l| l.value());
    Some(spec)
}
