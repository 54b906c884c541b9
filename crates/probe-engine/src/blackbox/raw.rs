//! The raw schema of a `blackbox.yml`: every key blackbox_exporter reads (its `config.go` and
//! the client settings of `prometheus/common` it inlines), and no other, so that a typo is an
//! error with a did-you-mean, as it is for the exporter itself.
//!
//! Keys we can map are typed; keys we refuse whatever their value are `IgnoredAny`, and keys we
//! refuse only away from their default are typed so the check can tell. `validate` and the
//! prober modules decide; this module only says what may be written.

use serde::Deserialize;
use serde::de::IgnoredAny;

use probe_config::yaml::{Entries, OneOrMany, Sp};

/// Anything at all, located: a key that is refused whatever it holds.
pub(super) type Any = Option<Sp<IgnoredAny>>;

/// A list of strings, or one string.
pub(super) type Strings = Option<Sp<OneOrMany<Sp<String>>>>;

/// The top level: `modules`, and nothing else.
#[derive(Deserialize)]
#[serde(rename = "blackbox.yml", deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(rename = "modules")]
    pub(super) _modules: Option<IgnoredAny>,
}

/// One module.
#[derive(Deserialize)]
#[serde(rename = "module", deny_unknown_fields)]
pub(super) struct RawModule {
    pub(super) prober: Option<Sp<String>>,
    pub(super) timeout: Option<Sp<String>>,
    pub(super) http: Option<Sp<RawHttp>>,
    pub(super) tcp: Option<Sp<RawTcp>>,
    pub(super) dns: Option<Sp<RawDns>>,
    pub(super) icmp: Option<Sp<RawIcmp>>,
    pub(super) grpc: Option<Sp<RawGrpc>>,
    // Sections of the other probers: the exporter ignores them, and so do we.
    #[serde(rename = "unix")]
    _unix: Any,
    #[serde(rename = "websocket")]
    _websocket: Any,
}

/// `tls_config` (prometheus/common's `TLSConfig`).
#[derive(Deserialize)]
#[serde(rename = "tls_config", deny_unknown_fields)]
pub(super) struct RawTlsConfig {
    pub(super) ca_file: Option<Sp<String>>,
    pub(super) insecure_skip_verify: Option<Sp<bool>>,
    pub(super) server_name: Option<Sp<String>>,
    pub(super) ca: Any,
    pub(super) ca_ref: Any,
    pub(super) cert: Any,
    pub(super) cert_file: Any,
    pub(super) cert_ref: Any,
    pub(super) key: Any,
    pub(super) key_file: Any,
    pub(super) key_ref: Any,
    pub(super) min_version: Any,
    pub(super) max_version: Any,
}

/// `basic_auth`.
#[derive(Deserialize)]
#[serde(rename = "basic_auth", deny_unknown_fields)]
pub(super) struct RawBasicAuth {
    pub(super) username: Option<Sp<String>>,
    pub(super) password: Option<Sp<String>>,
    pub(super) username_file: Any,
    pub(super) username_ref: Any,
    pub(super) password_file: Any,
    pub(super) password_ref: Any,
}

/// `authorization`.
#[derive(Deserialize)]
#[serde(rename = "authorization", deny_unknown_fields)]
pub(super) struct RawAuthorization {
    #[serde(rename = "type")]
    pub(super) kind: Option<Sp<String>>,
    pub(super) credentials: Option<Sp<String>>,
    pub(super) credentials_file: Any,
    pub(super) credentials_ref: Any,
}

/// One `fail_if_header_matches` / `fail_if_header_not_matches` item.
#[derive(Deserialize)]
#[serde(rename = "http_header_match_spec", deny_unknown_fields)]
pub(super) struct RawHeaderMatch {
    pub(super) header: Option<Sp<String>>,
    pub(super) regexp: Option<Sp<String>>,
    pub(super) allow_missing: Option<Sp<bool>>,
}

/// `http`: the exporter's `HTTPProbe` with the client settings it inlines.
#[derive(Deserialize)]
#[serde(rename = "http", deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) valid_status_codes: Option<Sp<OneOrMany<Sp<i64>>>>,
    pub(super) valid_http_versions: Strings,
    pub(super) preferred_ip_protocol: Option<Sp<String>>,
    pub(super) ip_protocol_fallback: Option<Sp<bool>>,
    // Without a proxy (refused), there is no resolve phase to skip.
    #[serde(rename = "skip_resolve_phase_with_proxy")]
    _skip_resolve_phase_with_proxy: Option<Sp<bool>>,
    pub(super) no_follow_redirects: Option<Sp<bool>>,
    pub(super) fail_if_ssl: Option<Sp<bool>>,
    pub(super) fail_if_not_ssl: Option<Sp<bool>>,
    pub(super) method: Option<Sp<String>>,
    pub(super) headers: Option<Sp<Entries<String>>>,
    pub(super) fail_if_body_matches_regexp: Strings,
    pub(super) fail_if_body_not_matches_regexp: Strings,
    pub(super) fail_if_body_json_matches_cel: Any,
    pub(super) fail_if_body_json_not_matches_cel: Any,
    pub(super) fail_if_header_matches: Option<Sp<Vec<Sp<RawHeaderMatch>>>>,
    pub(super) fail_if_header_not_matches: Option<Sp<Vec<Sp<RawHeaderMatch>>>>,
    pub(super) body: Option<Sp<String>>,
    pub(super) body_file: Any,
    pub(super) compression: Option<Sp<String>>,
    pub(super) body_size_limit: Any,
    pub(super) enable_http3: Option<Sp<bool>>,
    // prometheus/common's HTTPClientConfig, inlined.
    pub(super) basic_auth: Option<Sp<RawBasicAuth>>,
    pub(super) authorization: Option<Sp<RawAuthorization>>,
    pub(super) bearer_token: Option<Sp<String>>,
    pub(super) bearer_token_file: Any,
    pub(super) oauth2: Any,
    pub(super) tls_config: Option<Sp<RawTlsConfig>>,
    pub(super) follow_redirects: Option<Sp<bool>>,
    // Our probe speaks HTTP/1.1, which a server offering HTTP/2 speaks too (what
    // `valid_http_versions` sees is checked there).
    #[serde(rename = "enable_http2")]
    _enable_http2: Option<Sp<bool>>,
    pub(super) proxy_url: Any,
    pub(super) no_proxy: Any,
    pub(super) proxy_from_environment: Option<Sp<bool>>,
    pub(super) proxy_connect_header: Any,
    pub(super) http_headers: Any,
}

/// One `query_response` step.
#[derive(Deserialize)]
#[serde(rename = "query_response", deny_unknown_fields)]
pub(super) struct RawQueryResponse {
    pub(super) expect: Option<Sp<String>>,
    pub(super) expect_bytes: Any,
    pub(super) labels: Any,
    pub(super) send: Option<Sp<String>>,
    pub(super) starttls: Option<Sp<bool>>,
}

/// `tcp`.
#[derive(Deserialize)]
#[serde(rename = "tcp", deny_unknown_fields)]
pub(super) struct RawTcp {
    pub(super) preferred_ip_protocol: Option<Sp<String>>,
    pub(super) ip_protocol_fallback: Option<Sp<bool>>,
    pub(super) source_ip_address: Any,
    pub(super) query_response: Option<Sp<Vec<Sp<RawQueryResponse>>>>,
    pub(super) tls: Option<Sp<bool>>,
    pub(super) tls_config: Option<Sp<RawTlsConfig>>,
}

/// `validate_answer_rrs`, `validate_authority_rrs`, `validate_additional_rrs`.
#[derive(Deserialize)]
#[serde(rename = "rr validator", deny_unknown_fields)]
pub(super) struct RawRrValidator {
    pub(super) fail_if_matches_regexp: Strings,
    pub(super) fail_if_all_match_regexp: Strings,
    pub(super) fail_if_not_matches_regexp: Strings,
    pub(super) fail_if_none_matches_regexp: Strings,
}

/// `dns`.
#[derive(Deserialize)]
#[serde(rename = "dns", deny_unknown_fields)]
pub(super) struct RawDns {
    pub(super) preferred_ip_protocol: Option<Sp<String>>,
    pub(super) ip_protocol_fallback: Option<Sp<bool>>,
    pub(super) dns_over_tls: Option<Sp<bool>>,
    // Used only with `dns_over_tls`, which is refused.
    #[serde(rename = "tls_config")]
    _tls_config: Any,
    pub(super) source_ip_address: Any,
    pub(super) transport_protocol: Option<Sp<String>>,
    pub(super) query_class: Option<Sp<String>>,
    pub(super) query_name: Option<Sp<String>>,
    pub(super) query_type: Option<Sp<String>>,
    pub(super) recursion_desired: Option<Sp<bool>>,
    pub(super) valid_rcodes: Strings,
    pub(super) validate_answer_rrs: Option<Sp<RawRrValidator>>,
    pub(super) validate_authority_rrs: Option<Sp<RawRrValidator>>,
    pub(super) validate_additional_rrs: Option<Sp<RawRrValidator>>,
}

/// `icmp`.
#[derive(Deserialize)]
#[serde(rename = "icmp", deny_unknown_fields)]
pub(super) struct RawIcmp {
    pub(super) preferred_ip_protocol: Option<Sp<String>>,
    pub(super) ip_protocol_fallback: Option<Sp<bool>>,
    pub(super) source_ip_address: Any,
    pub(super) payload_size: Option<Sp<i64>>,
    pub(super) dont_fragment: Option<Sp<bool>>,
    pub(super) ttl: Option<Sp<i64>>,
}

/// `grpc`.
#[derive(Deserialize)]
#[serde(rename = "grpc", deny_unknown_fields)]
pub(super) struct RawGrpc {
    pub(super) service: Option<Sp<String>>,
    pub(super) tls: Option<Sp<bool>>,
    pub(super) tls_config: Option<Sp<RawTlsConfig>>,
    pub(super) ip_protocol_fallback: Option<Sp<bool>>,
    pub(super) preferred_ip_protocol: Option<Sp<String>>,
    pub(super) metadata: Option<Sp<Entries<OneOrMany<Sp<String>>>>>,
}
