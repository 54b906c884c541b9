//! The `topology` section: where targets come from besides the files.
//!
//! ```yaml
//! topology:                       # optional, in one file at most
//!   etcd:
//!     endpoints: ["http://127.0.0.1:2379"]   # https:// with tls
//!     prefix: /probe-engine/targets/         # default; each key <prefix><id> is one target
//!     username: probe                        # optional, with password
//!     password: "${ETCD_PASSWORD}"           # ${VAR} from the environment
//!     tls: { ca_file: ca.pem, cert_file: client.pem, key_file: client-key.pem }  # relative
//!                                            # to this file; ca_file unset: system roots
//!     resync: 30s                            # full re-read period
//! ```

use std::path::Path;

use probe::tier::http::expand_env;
use probe_etcd::{ClientCert, Credentials, SourceConfig, TlsFiles};
use serde::Deserialize;

use super::schedule::{Slot, duration};
use crate::yaml::diagnostics::quote;
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Node, Sp, collect};

#[derive(Deserialize)]
#[serde(rename = "topology", deny_unknown_fields)]
struct RawTopology {
    etcd: Option<Sp<RawEtcd>>,
}

#[derive(Deserialize)]
#[serde(rename = "etcd", deny_unknown_fields)]
pub(crate) struct RawEtcd {
    endpoints: Sp<Vec<Sp<String>>>,
    prefix: Option<Sp<String>>,
    username: Option<Sp<String>>,
    password: Option<Sp<String>>,
    tls: Option<Sp<RawEtcdTls>>,
    resync: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "tls", deny_unknown_fields)]
struct RawEtcdTls {
    ca_file: Option<Sp<String>>,
    cert_file: Option<Sp<String>>,
    key_file: Option<Sp<String>>,
}

/// The `topology` section: the etcd source's settings when it has an `etcd` block; `None`
/// inside when invalid (every problem is reported).
pub(crate) fn parse(
    node: &Node,
    src: &str,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<Option<SourceConfig>> {
    let (raw, structural) = collect::<RawTopology>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    let Some(etcd) = raw.etcd else {
        return Some(None);
    };
    etcd_config(etcd, source, diags).map(Some)
}

pub(crate) fn etcd_config(
    raw: Sp<RawEtcd>,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<SourceConfig> {
    let before = diags.len();
    let etcd = raw.value;
    let tls = etcd.tls.as_ref().map(|t| tls_files(&t.value, source.dir));
    if etcd.endpoints.value.is_empty() {
        diags.push((
            etcd.endpoints.pos,
            "endpoints lists no etcd endpoint".to_owned(),
        ));
    }
    for endpoint in &etcd.endpoints.value {
        let text = endpoint.value.trim();
        let scheme_ok = match text.split_once("://") {
            None => true,
            Some(("http", _)) => tls.is_none(),
            Some(("https", _)) => true,
            Some(_) => false,
        };
        if text.is_empty() || !scheme_ok {
            let expected = if tls.is_some() {
                "https://HOST:PORT (tls is set)"
            } else {
                "HOST:PORT, http://HOST:PORT or https://HOST:PORT"
            };
            diags.push((
                endpoint.pos,
                format!("invalid etcd endpoint {}: expected {expected}", quote(text)),
            ));
        }
    }
    let mut config = SourceConfig::new(
        etcd.endpoints
            .value
            .iter()
            .map(|e| e.value.trim().to_owned()),
    );
    if let Some(prefix) = &etcd.prefix {
        if prefix.value.is_empty() {
            diags.push((prefix.pos, "prefix must not be empty".to_owned()));
        }
        config.prefix = prefix.value.clone();
    }
    match (&etcd.username, &etcd.password) {
        (None, None) => {}
        (Some(username), Some(password)) => match expand_env(&password.value, source.env) {
            // The message names the variable, never the value.
            Err(e) => diags.push((password.pos, format!("in password: {e}"))),
            Ok(password) => {
                config.credentials = Some(Credentials {
                    username: username.value.clone(),
                    password,
                });
            }
        },
        (Some(only), None) | (None, Some(only)) => diags.push((
            only.key,
            "username and password go together: set both or neither".to_owned(),
        )),
    }
    config.tls = tls.flatten();
    if let Some(raw_tls) = &etcd.tls
        && config.tls.is_none()
    {
        diags.push((
            raw_tls.key,
            "cert_file and key_file go together: set both or neither".to_owned(),
        ));
    }
    match duration(etcd.resync.as_ref(), "resync", true, diags) {
        Slot::Set { value, .. } => config.resync_period = value,
        Slot::Absent | Slot::Invalid => {}
    }
    (diags.len() == before).then_some(config)
}

/// The TLS files, relative to the config file's directory; `None` when only one of the client
/// certificate and key is set.
fn tls_files(raw: &RawEtcdTls, dir: &Path) -> Option<TlsFiles> {
    let path = |p: &Sp<String>| dir.join(p.value.trim());
    let client_cert = match (&raw.cert_file, &raw.key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(ClientCert {
            cert_file: path(cert),
            key_file: path(key),
        }),
        _ => return None,
    };
    Some(TlsFiles {
        ca_file: raw.ca_file.as_ref().map(path),
        client_cert,
        domain: None,
    })
}
