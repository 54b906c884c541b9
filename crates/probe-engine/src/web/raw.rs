//! The raw schema of a web config: every key exporter-toolkit's `web-config.yml` has, and no
//! other, so that a typo is an error with a did-you-mean, as in the probes YAML. What the keys
//! may hold is `load`'s to decide.

use serde::Deserialize;

use probe_config::yaml::{Entries, OneOrMany, Sp};

/// A list of strings, or one string.
pub(super) type Strings = Option<Sp<OneOrMany<Sp<String>>>>;

/// The top level.
#[derive(Deserialize)]
#[serde(rename = "web config", deny_unknown_fields)]
pub(super) struct RawWeb {
    pub(super) tls_server_config: Option<Sp<RawTls>>,
    pub(super) http_server_config: Option<Sp<RawHttp>>,
    pub(super) basic_auth_users: Option<Sp<Entries<String>>>,
    pub(super) rate_limit: Option<Sp<RawRate>>,
}

/// `tls_server_config`.
#[derive(Deserialize)]
#[serde(rename = "tls_server_config", deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert_file: Option<Sp<String>>,
    pub(super) key_file: Option<Sp<String>>,
    /// The certificate chain inline, as PEM.
    pub(super) cert: Option<Sp<String>>,
    /// The key inline, as PEM.
    pub(super) key: Option<Sp<String>>,
    pub(super) client_auth_type: Option<Sp<String>>,
    pub(super) client_ca_file: Option<Sp<String>>,
    /// The client CAs inline, as PEM.
    pub(super) client_ca: Option<Sp<String>>,
    pub(super) client_allowed_sans: Strings,
    pub(super) min_version: Option<Sp<String>>,
    pub(super) max_version: Option<Sp<String>>,
    pub(super) cipher_suites: Strings,
    pub(super) curve_preferences: Strings,
    pub(super) prefer_server_cipher_suites: Option<Sp<bool>>,
}

/// `http_server_config`.
#[derive(Deserialize)]
#[serde(rename = "http_server_config", deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) http2: Option<Sp<bool>>,
    pub(super) headers: Option<Sp<Entries<String>>>,
}

/// `rate_limit`.
#[derive(Deserialize)]
#[serde(rename = "rate_limit", deny_unknown_fields)]
pub(super) struct RawRate {
    pub(super) interval: Option<Sp<String>>,
    pub(super) burst: Option<Sp<u32>>,
}
