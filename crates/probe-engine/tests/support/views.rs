//! Typed views of the API's answers, field for field as the README lists them.
//!
//! Every struct refuses unknown fields, and every field the README lists is required (a
//! nullable one must be present as `null`), so a field added or dropped without the README
//! changing fails the test that reads it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An RFC 3339 time as the API writes it (UTC, `Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub SystemTime);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if !text.ends_with('Z') {
            return Err(D::Error::custom(format!("{text:?} is not UTC")));
        }
        humantime::parse_rfc3339(&text)
            .map(Time)
            .map_err(|e| D::Error::custom(format!("{text:?}: {e}")))
    }
}

/// Deserializes `value` strictly, with the value in the panic message.
pub fn strict<T: DeserializeOwned>(value: &Value) -> T {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!(
            "{e} in {}: {value:#}",
            std::any::type_name::<T>().rsplit("::").next().unwrap()
        )
    })
}

/// `GET /v1/targets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetList {
    pub targets: Vec<Target>,
    /// The cursor of the next page; `None` on the last.
    #[serde(deserialize_with = "Option::deserialize")]
    pub next: Option<String>,
}

impl TargetList {
    pub fn get(&self, id: &str) -> &Target {
        self.targets
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("no target {id}"))
    }
}

/// One target of `GET /v1/targets`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub id: String,
    pub kind: String,
    pub state: String,
    pub healthy: bool,
    pub flapping: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub pending: Option<Pending>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last: Option<Last>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_failure: Option<LastFailure>,
    pub degraded_reasons: Vec<String>,
    pub signals: Vec<Signal>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub maintenance: Option<Maintenance>,
    pub consecutive_successes: u32,
    pub consecutive_failures: u32,
    pub transitions: u64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub since: Option<Time>,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub score: Option<f64>,
    pub dependency_down: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub weight: Option<f64>,
    pub ejected: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub ejection: Option<Ejection>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub circuit: Option<Circuit>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub tls: Option<Tls>,
    /// In a cluster only: the member that decides it, this member's role, the members that
    /// probe it, and their votes.
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub replicas: Option<Vec<String>>,
    #[serde(default)]
    pub votes: Option<std::collections::BTreeMap<String, String>>,
}

/// `tls`: what the target's latest TLS handshake showed.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    #[serde(deserialize_with = "Option::deserialize")]
    pub version: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub subject: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub issuer: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub not_after: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub earliest_expiry: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub days_left: Option<i64>,
    pub chain: Vec<Certificate>,
}

/// One certificate of `tls.chain`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    pub subject: String,
    pub issuer: String,
    pub not_before: Time,
    pub not_after: Time,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub toward: String,
    pub count: u32,
    pub of: u32,
}

/// `last`: the latest run, and what it worked around.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Last {
    pub ok: bool,
    pub degraded: bool,
    pub latency_ms: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reason: Option<String>,
    pub at: Time,
    #[serde(deserialize_with = "Option::deserialize")]
    pub note: Option<String>,
}

/// One result of `history`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub ok: bool,
    pub degraded: bool,
    pub latency_ms: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reason: Option<String>,
    pub at: Time,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastFailure {
    pub reason: String,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signal {
    pub name: String,
    pub severity: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Maintenance {
    pub reason: String,
    pub source: String,
    pub until: Time,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ejection {
    pub phase: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reason: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub since: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub until: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub times_ejected: Option<u32>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub passes: Option<u32>,
    pub permanent: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Circuit {
    pub state: String,
    pub calls: u64,
    pub failures: u64,
    pub slow_calls: u64,
    pub failure_rate: f64,
    pub slow_call_rate: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub open_until: Option<Time>,
    pub reopens: u32,
}

/// `GET /v1/targets/{id}`: one target plus `history`.
#[derive(Clone, Debug)]
pub struct TargetDetail {
    pub target: Target,
    pub history: Vec<Outcome>,
}

impl TargetDetail {
    /// Splits `history` off (serde cannot refuse unknown fields through `flatten`) and reads
    /// both parts strictly.
    pub fn from_value(value: &Value) -> Self {
        let mut rest = value.clone();
        let history = rest
            .as_object_mut()
            .and_then(|o| o.remove("history"))
            .unwrap_or_else(|| panic!("no history in {value}"));
        Self {
            target: strict(&rest),
            history: strict(&history),
        }
    }
}

/// A node of `/v1/graph` and of explanations.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub id: String,
    pub kind: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub state: Option<String>,
    pub flapping: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub score: Option<f64>,
    pub unknown: bool,
    pub dependency_down: bool,
}

/// `GET /v1/targets/{id}/explain`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Explain {
    pub node: Node,
    #[serde(deserialize_with = "Option::deserialize")]
    pub stability: Option<f64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub sla: Option<f64>,
    pub summary: String,
    pub children: Vec<Child>,
    pub root_causes: Vec<String>,
    pub impacts: Vec<String>,
}

/// A child of an explanation: a node plus its part.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Child {
    pub id: String,
    pub kind: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub state: Option<String>,
    pub flapping: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub score: Option<f64>,
    pub unknown: bool,
    pub dependency_down: bool,
    pub weight: f64,
    pub critical: bool,
    pub caps: bool,
}

/// `GET /v1/graph`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub weight: f64,
    pub critical: bool,
}

/// `GET /v1/topology`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub generation: u64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_change: Option<Time>,
    /// Read with [`Topology::files`] and [`Topology::etcd`]: each source has its own fields.
    pub sources: Vec<Value>,
    pub rejected: Vec<Rejected>,
    /// `null` without history; read with [`Topology::history`].
    #[serde(deserialize_with = "Option::deserialize")]
    pub history: Option<Value>,
}

/// The history's status in `/v1/topology`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryStatus {
    pub backend: String,
    pub location: String,
    pub state: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub error: Option<String>,
    pub write_errors: u64,
    pub dropped: u64,
    pub expired: u64,
    pub capped: u64,
    pub pending: u64,
    pub bytes: u64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub moved_aside: Option<String>,
}

impl Topology {
    pub fn history(&self) -> Option<HistoryStatus> {
        self.history.as_ref().map(strict)
    }

    pub fn files(&self) -> FilesSource {
        assert_eq!(self.sources[0]["name"], "files", "{:?}", self.sources);
        strict(&self.sources[0])
    }

    pub fn etcd(&self) -> Option<EtcdSource> {
        assert!(self.sources.len() <= 2, "{:?}", self.sources);
        self.sources.get(1).map(|s| {
            assert_eq!(s["name"], "etcd", "{s}");
            strict(s)
        })
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSource {
    pub name: String,
    pub state: String,
    pub path: String,
    pub files: Vec<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_reload: Option<Time>,
    pub last_error: Vec<String>,
    pub last_good_generation: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSource {
    pub name: String,
    pub state: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub stale_since: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_error: Option<String>,
    pub endpoints: Vec<String>,
    pub prefix: String,
    /// `null` while the source could not be started.
    #[serde(deserialize_with = "Option::deserialize")]
    pub revision: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub entries: Option<u64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_change: Option<Time>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_resync: Option<Time>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rejected {
    pub source: String,
    pub name: String,
    pub origin: String,
    pub reason: String,
    pub kept_previous: bool,
}

/// `GET /health` (`application/health+json`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Health {
    pub status: String,
    pub service_id: String,
    pub description: String,
    pub checks: BTreeMap<String, Vec<Check>>,
}

impl Health {
    /// The one entry of a check.
    pub fn check(&self, key: &str) -> &Check {
        match self.checks.get(key).map(Vec::as_slice) {
            Some([check]) => check,
            other => panic!("check {key}: {other:?}"),
        }
    }
}

/// One `checks` entry; the draft's optional members are absent rather than `null`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Check {
    pub component_id: String,
    pub component_type: String,
    pub status: String,
    #[serde(default)]
    pub observed_value: Option<f64>,
    #[serde(default)]
    pub observed_unit: Option<String>,
    #[serde(default)]
    pub time: Option<Time>,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub score: Option<f64>,
}

/// The data of an SSE `transition` event.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub target: String,
    /// `target` or `group`.
    pub kind: String,
    pub from: String,
    pub to: String,
    pub cause: String,
    pub at: Time,
    #[serde(deserialize_with = "Option::deserialize")]
    pub detail: Option<String>,
}

/// An error answer.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    pub error: String,
}

/// A `GET /v1/events` stream, read frame by frame; every byte read is kept in `raw`.
pub struct EventStream {
    stream:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
    pub raw: String,
}

impl EventStream {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            raw: String::new(),
        }
    }

    /// The next `transition` event (other frames, keep-alive comments, are skipped).
    pub async fn next(&mut self) -> Event {
        use futures_util::StreamExt;
        let deadline = tokio::time::Instant::now() + super::WAIT;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut lines = frame.lines();
                if lines.clone().any(|l| l == "event: transition") {
                    let data = lines
                        .find_map(|l| l.strip_prefix("data: "))
                        .unwrap_or_else(|| panic!("no data in {frame:?}"));
                    return strict(&serde_json::from_str(data).unwrap());
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .expect("no transition event in time")
                .expect("the event stream ended")
                .unwrap();
            let text = String::from_utf8_lossy(&chunk);
            self.raw.push_str(&text);
            self.buffer.push_str(&text);
        }
    }

    /// The next transition event of `target`.
    pub async fn next_of(&mut self, target: &str) -> Event {
        loop {
            let event = self.next().await;
            if event.target == target {
                return event;
            }
        }
    }
}
