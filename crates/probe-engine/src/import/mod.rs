//! `probe-engine import`: configs of other monitoring tools turned into this daemon's YAML.
//!
//! Each source (`gatus`, `blackbox`) reads its tool's file with the config's own located parser
//! ([`probe_config::yaml`]: its tree and diagnostics), so bad input is refused as `FILE:LINE:COL:
//! message`, and maps what it can onto the `Document` written here. What a source cannot
//! express is not dropped in silence: it becomes a [`Note`], located at the key it is about, which
//! the command prints on stderr (and `--strict` turns into a failure).
//!
//! Every target is checked with [`probe_config::parse`] before it is kept, so what is written
//! always passes `probe-engine check`: a target the daemon would refuse is left out with a note
//! that says why, rather than breaking the whole file.

pub mod blackbox;
pub mod gatus;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde::ser::SerializeMap;

use probe_config::{ConfigError, ConfigErrors};

/// What `probe-engine import` prints, whatever the source: the YAML on stdout, and what could not
/// be expressed on stderr, a line each.
#[derive(Debug)]
pub struct Printed {
    /// Our probes YAML, ready for `probe-engine check` and `run`.
    pub yaml: String,
    /// One line per thing that could not be expressed, with the reason.
    pub notes: Vec<String>,
}

/// What an import produced: the document, and what it could not express.
#[derive(Debug)]
pub struct Import {
    /// The imported configuration, in the source's order.
    pub(crate) document: Document,
    /// One line each, in the source's order.
    pub notes: Vec<Note>,
}

impl Import {
    /// The document as YAML, headed by a comment naming where it came from.
    ///
    /// # Errors
    /// Only if the serializer fails, which a `Document` gives it no reason to.
    pub fn to_yaml(&self, source: &str) -> Result<String, serde_saphyr::ser::Error> {
        let body = serde_saphyr::to_string(&self.document)?;
        Ok(format!(
            "# Imported by `probe-engine import` from {source}.\n{body}"
        ))
    }
}

impl Import {
    /// What the command prints for this import of `file`.
    ///
    /// # Errors
    /// Only if the serializer fails, which a `Document` gives it no reason to; the error is
    /// placed at the file.
    pub fn printed(&self, file: &Path) -> Result<Printed, ConfigErrors> {
        let yaml = self.to_yaml(&file.display().to_string()).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.to_path_buf(),
                line: 0,
                column: 0,
                message: format!("writing the imported config: {e}"),
            }])
        })?;
        Ok(Printed {
            yaml,
            notes: self.notes.iter().map(ToString::to_string).collect(),
        })
    }
}

/// Something of the source that the output does not say: where it is, what it is about, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Where the key is, in the source file.
    pub at: ConfigError,
}

impl Note {
    /// A note on `key` of `subject` (`endpoint "api"`, `alerting.slack`), at `line:column` of
    /// `file`.
    pub fn new(
        file: &Path,
        (line, column): (u64, u64),
        subject: &str,
        key: &str,
        why: &str,
    ) -> Self {
        Self {
            at: ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                message: format!("{subject}: {key}: cannot be expressed: {why}"),
            },
        }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.at.fmt(f)
    }
}

/// An imported configuration: the keys of the YAML reference that importers use.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Document {
    /// Schedule keys every target shares unless it says otherwise.
    #[serde(skip_serializing_if = "Schedule::is_empty")]
    pub(crate) defaults: Schedule,
    /// Targets, then groups.
    pub(crate) targets: Vec<Target>,
    /// Where alerts go, when some target alerts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) alerts: Option<Alerts>,
}

/// Schedule and threshold keys, of `defaults` or of a target.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Schedule {
    /// A humantime duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interval: Option<String>,
    /// A humantime duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<String>,
    /// Passes to reach a verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rise: Option<u32>,
    /// Failures to become DOWN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fall: Option<u32>,
}

impl Schedule {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One target or group.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Target {
    /// `[a-z0-9._-]+`, unique.
    pub(crate) id: String,
    /// `group` for a group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<&'static str>,
    /// The probe, for a target.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) probe: Option<Probe>,
    /// Its own schedule keys.
    #[serde(flatten)]
    pub(crate) schedule: Schedule,
    /// Declared maintenance windows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) maintenance: Vec<Window>,
    /// What it is made of, for a group.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) depends_on: Vec<Dependency>,
    /// Its alert rule; absent: the defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) alert: Option<Alert>,
}

/// A probe section, by kind.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Probe {
    /// `http: {...}`.
    Http(Http),
    /// `tcp: {...}`.
    Tcp(Stream),
    /// `udp: {...}`.
    Udp(Stream),
    /// `icmp: {...}`.
    Icmp(Icmp),
    /// `tls: {...}`.
    Tls(Tls),
    /// `grpc: {...}`.
    Grpc(Grpc),
    /// `dns: {...}`.
    Dns(Dns),
}

/// The `http` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Http {
    pub(crate) url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) method: Option<String>,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub(crate) headers: Pairs<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<Trust>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) follow_redirects: Option<bool>,
    pub(crate) expect: HttpExpect,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) degraded_if: Option<LatencyOver>,
}

/// `insecure_skip_verify: true`.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Trust {
    pub(crate) insecure_skip_verify: bool,
}

/// An HTTP `expect`.
#[derive(Debug, Default, Serialize)]
pub(crate) struct HttpExpect {
    pub(crate) status: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) body_contains: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) body_matches: Vec<String>,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub(crate) json: Pairs<JsonCondition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) latency_under: Option<String>,
}

/// What a JSON path must hold: a scalar, or tests.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum JsonCondition {
    /// The value is this.
    Is(serde_json::Value),
    /// Each key a test.
    Tests(Box<JsonTests>),
}

/// The mapping form of a JSON condition.
#[derive(Debug, Default, Serialize)]
pub(crate) struct JsonTests {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) eq: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ne: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) any: Option<Vec<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) none: Option<Vec<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) matches: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) not_matches: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lt: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) le: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) gt: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ge: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) len: BTreeMap<&'static str, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exists: Option<bool>,
}

/// `degraded_if: { latency_over: ... }`.
#[derive(Debug, Serialize)]
pub(crate) struct LatencyOver {
    pub(crate) latency_over: String,
}

/// A `tcp` or `udp` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Stream {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) send: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expect: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expect_regex: Option<String>,
}

/// The `icmp` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Icmp {
    pub(crate) host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) degraded_if: Option<LatencyOver>,
}

/// The `tls` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Tls {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) insecure_skip_verify: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expires_within: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) starttls: Option<&'static str>,
}

/// The `grpc` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Grpc {
    pub(crate) address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<Trust>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) degraded_if: Option<LatencyOver>,
}

/// The `dns` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Dns {
    pub(crate) server: String,
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) record_type: String,
    #[serde(skip_serializing_if = "DnsExpect::is_empty")]
    pub(crate) expect: DnsExpect,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) degraded_if: Option<LatencyOver>,
}

/// A DNS `expect`.
#[derive(Debug, Default, Serialize)]
pub(crate) struct DnsExpect {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rcode: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) answers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) min_answers: Option<u32>,
}

impl DnsExpect {
    fn is_empty(&self) -> bool {
        self.rcode.is_none() && self.answers.is_empty() && self.min_answers.is_none()
    }
}

/// A maintenance window: `{ daily: "HH:MM", duration }`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Window {
    pub(crate) daily: String,
    pub(crate) duration: String,
}

/// One entry of a group's `depends_on`.
#[derive(Debug, Serialize)]
pub(crate) struct Dependency {
    pub(crate) target: String,
}

/// A target's `alert`: off, or its keys.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Alert {
    /// `alert: false`.
    Off(bool),
    /// `alert: {...}`.
    Rule(AlertRule),
}

/// The keys of an `alert` block that importers set.
#[derive(Debug, Default, Serialize)]
pub(crate) struct AlertRule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) on: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) annotations: BTreeMap<String, String>,
}

/// The `alerts` section.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Alerts {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) webhooks: Vec<Webhook>,
}

/// One webhook receiver.
#[derive(Debug, Serialize)]
pub(crate) struct Webhook {
    pub(crate) name: String,
    pub(crate) url: String,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub(crate) headers: Pairs<String>,
}

/// A mapping written in the order its entries were added (header names, JSON paths).
#[derive(Debug)]
pub(crate) struct Pairs<V>(pub Vec<(String, V)>);

impl<V> Default for Pairs<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> Pairs<V> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for Pairs<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Checks a probed `target` as `probe-engine check` would, alone in a document (with an empty
/// `alerts` section when it alerts): the message of its first error if the daemon would refuse
/// it. Groups need no check: they name targets that passed one.
pub(crate) fn refusal(target: &Target, defaults: &Schedule) -> Option<String> {
    #[derive(Serialize)]
    struct Alone<'a> {
        #[serde(skip_serializing_if = "Schedule::is_empty")]
        defaults: &'a Schedule,
        targets: [&'a Target; 1],
        #[serde(skip_serializing_if = "Option::is_none")]
        alerts: Option<Alerts>,
    }
    let alone = Alone {
        defaults,
        targets: [target],
        alerts: target.alert.as_ref().map(|_| Alerts::default()),
    };
    let text = match serde_saphyr::to_string(&alone) {
        Ok(text) => text,
        Err(e) => return Some(e.to_string()),
    };
    // Headers may name environment variables, which are set where the daemon runs.
    let env = |_: &str| Some(String::new());
    probe_config::parse_with_env(Path::new("imported.yaml"), &text, &env)
        .err()
        .map(|ConfigErrors(errors)| {
            errors
                .into_iter()
                .next()
                .map_or_else(String::new, |e| e.message)
        })
}
