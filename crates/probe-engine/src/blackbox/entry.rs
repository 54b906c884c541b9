//! One target entry of our probes YAML, as a module and a target make it: the sections written
//! exactly as `config` reads them (skipping what is at our default), and their compilation into
//! the library's spec by the daemon's own config compiler ([`probe_config::parse_entry`]).
//!
//! Serialized, an [`Entry`] is the text `import blackbox` prints; compiled, it is the
//! [`ProbeSpec`] a `GET /probe` would run: one mapping, checked by the one compiler.

use std::path::Path;
use std::time::Duration;

use probe::topology::Declaration;
use probe::topology::TargetSpec;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// Key-value pairs kept in their order (headers, metadata), written as a mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pairs(pub(crate) Vec<(String, String)>);

impl Pairs {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Pairs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A section's `tls` (`http`, `grpc`), or the fields a `tls` probe shares with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct TlsTrust {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) insecure_skip_verify: bool,
}

/// One `header_matches` / `header_not_matches` item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HeaderPattern {
    pub(crate) header: String,
    pub(crate) regex: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) allow_missing: bool,
}

/// An `http` section's `expect`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct HttpExpect {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) status: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) body_matches: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) body_not_matches: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) header_matches: Vec<HeaderPattern>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) header_not_matches: Vec<HeaderPattern>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) http_version: Vec<String>,
}

impl HttpExpect {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// An `http` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Http {
    pub(crate) url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) method: Option<String>,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub(crate) headers: Pairs,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<TlsTrust>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) follow_redirects: bool,
    #[serde(skip_serializing_if = "HttpExpect::is_default")]
    pub(crate) expect: HttpExpect,
}

/// One step of a `tcp` section's `conversation`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Step {
    ExpectLine(String),
    Send(String),
    Reply(String),
}

/// A `tcp` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tcp {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) conversation: Vec<Step>,
}

/// A `tls` section (a TLS probe).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tls {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_name: Option<String>,
    #[serde(flatten)]
    pub(crate) trust: TlsTrust,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) before_tls: Vec<Step>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) conversation: Vec<Step>,
}

/// The rules of one section of a DNS reply (`expect.records.answer` and the others).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DnsSection {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) none_match: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) not_all_match: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) all_match: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) some_match: Vec<String>,
}

impl DnsSection {
    pub(super) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// `expect.records` of a `dns` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DnsRecords {
    #[serde(skip_serializing_if = "DnsSection::is_empty")]
    pub(crate) answer: DnsSection,
    #[serde(skip_serializing_if = "DnsSection::is_empty")]
    pub(crate) authority: DnsSection,
    #[serde(skip_serializing_if = "DnsSection::is_empty")]
    pub(crate) additional: DnsSection,
}

impl DnsRecords {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A `dns` section's `expect`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DnsExpect {
    pub(crate) rcode: Vec<String>,
    pub(crate) min_answers: u32,
    #[serde(skip_serializing_if = "DnsRecords::is_empty")]
    pub(crate) records: DnsRecords,
}

/// A `dns` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Dns {
    pub(crate) server: String,
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) record_type: String,
    pub(crate) transport: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) recursion_desired: Option<bool>,
    pub(crate) expect: DnsExpect,
}

/// An `icmp` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Icmp {
    pub(crate) host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<u64>,
}

/// A `grpc` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Grpc {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) service: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<TlsTrust>,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub(crate) metadata: Pairs,
}

/// The probe of an entry: one section, named by its kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Probe {
    Http(Http),
    Tcp(Tcp),
    Tls(Tls),
    Dns(Dns),
    Icmp(Icmp),
    Grpc(Grpc),
}

/// One item of a probes YAML's `targets`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub(crate) id: String,
    #[serde(flatten)]
    pub(crate) probe: Probe,
    pub(crate) interval: String,
    pub(crate) timeout: String,
}

impl Entry {
    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The entry compiled by the config compiler, as the daemon would run it.
    ///
    /// # Errors
    /// What the compiler refused, located within the entry; the loader's checks make this a
    /// bug rather than an input problem, but it is reported, never assumed away.
    pub fn compile(&self, dir: &Path) -> Result<TargetSpec, String> {
        let json = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        match probe_config::parse_entry(&self.id, "blackbox", &json, dir)? {
            Declaration::Target { spec, .. } => Ok(*spec),
            Declaration::Group { .. } => Err("the entry compiled to a group".to_owned()),
        }
    }
}

/// A duration as our YAML writes it: whole seconds, or milliseconds.
pub(super) fn duration_text(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        humantime::format_duration(duration).to_string()
    }
}

/// A header (or metadata) value as our YAML must write it: `$` doubled, since `${VAR}` there
/// names an environment variable and the exporter's values are literal.
pub(super) fn literal(value: &str) -> String {
    value.replace('$', "$$")
}
