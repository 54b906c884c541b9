//! What an HTTP reply must look like, what makes it degraded, and which business signals it
//! carries.
//!
//! Three kinds of rules are evaluated on every reply, in this order:
//! 1. [`Expect`]: all of its parts must hold, or the check fails. The parts are checked in the
//!    order status, body, headers, JSON, and the first one that does not hold gives the failure's
//!    reason (`status`, `body`, `assertion`), so the reason points at the most basic problem.
//! 2. [`DegradedIf`]: only when the expectations hold. Each condition that holds adds one reason
//!    to [`Verdict::Degraded`](crate::outcome::Verdict::Degraded): "slow" and "read-only" are
//!    independent facts, and an operator wants to see both.
//! 3. [`SignalRule`]s: whatever the verdict, since a failing reply is exactly where a business
//!    event such as `StockReservationFailed` shows up. A rule fires when every part of its
//!    [`Match`] matches.
//!
//! Everything here is parsed and validated up front (status patterns, JSON paths, header names),
//! so evaluating a reply allocates only for the messages of conditions that do not hold.

use std::cell::OnceCell;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;

use super::json_path::JsonPath;
use crate::outcome::{Failure, FailureReason, Severity, Signal};

/// One accepted status: an exact code or a whole class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusPattern {
    /// Exactly this code, 100 to 599.
    Code(u16),
    /// Any code of this class: `2` for `2xx`, 1 to 5.
    Class(u8),
}

/// Why a string is not a valid [`StatusPattern`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid status {0:?}: expected a code from 100 to 599 or a class from \"1xx\" to \"5xx\"")]
pub struct InvalidStatus(pub String);

impl StatusPattern {
    /// Whether `code` is accepted.
    pub fn matches(self, code: u16) -> bool {
        match self {
            Self::Code(c) => c == code,
            Self::Class(class) => code / 100 == u16::from(class),
        }
    }
}

impl FromStr for StatusPattern {
    type Err = InvalidStatus;

    /// `"200"` or `"2xx"` (also `"2XX"`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidStatus(s.to_owned());
        let bytes = s.as_bytes();
        match bytes {
            [class @ b'1'..=b'5', x, y] if x.eq_ignore_ascii_case(&b'x') && y == x => {
                Ok(Self::Class(class - b'0'))
            }
            [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => s.parse().map(Self::Code).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for StatusPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(f, "{code}"),
            Self::Class(class) => write!(f, "{class}xx"),
        }
    }
}

/// A non-empty set of accepted statuses; a status is accepted when any pattern matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSet(Vec<StatusPattern>);

/// A status set needs at least one pattern: an empty one could never match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("status list is empty: give at least one code or class")]
pub struct EmptyStatusSet;

impl StatusSet {
    /// A set of the given patterns.
    ///
    /// # Errors
    /// [`EmptyStatusSet`] when `patterns` is empty.
    pub fn new(patterns: Vec<StatusPattern>) -> Result<Self, EmptyStatusSet> {
        if patterns.is_empty() {
            Err(EmptyStatusSet)
        } else {
            Ok(Self(patterns))
        }
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[StatusPattern] {
        &self.0
    }

    /// Whether `code` is accepted.
    pub fn matches(&self, code: u16) -> bool {
        self.0.iter().any(|p| p.matches(code))
    }
}

impl Default for StatusSet {
    /// `2xx`: what "the request worked" means in HTTP.
    fn default() -> Self {
        Self(vec![StatusPattern::Class(2)])
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The expected value at a JSON path: a scalar, compared by type and value.
///
/// Types are strict (`"5"` does not match `5`), since a health document that changes a field's
/// type has changed its contract. Numbers compare by value (`1` matches `1.0`).
#[derive(Clone, Debug, PartialEq)]
pub enum JsonScalar {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    String(String),
}

impl JsonScalar {
    /// Whether `value` is this scalar.
    pub fn matches(&self, value: &Value) -> bool {
        match (self, value) {
            (Self::Null, Value::Null) => true,
            (Self::Bool(a), Value::Bool(b)) => a == b,
            (Self::String(a), Value::String(b)) => a == b,
            (Self::Number(a), Value::Number(b)) => numbers_equal(a, b),
            _ => false,
        }
    }
}

/// Exact for integers (which `f64` cannot all represent), by value otherwise.
fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
        return a == b;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

impl fmt::Display for JsonScalar {
    /// JSON syntax: strings quoted and escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("null"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{}", Value::String(s.clone())),
        }
    }
}

/// "The value at `path` is `value`".
#[derive(Clone, Debug, PartialEq)]
pub struct JsonMatch {
    /// Where to look.
    pub path: JsonPath,
    /// What must be there.
    pub value: JsonScalar,
}

impl JsonMatch {
    /// `Ok` when it holds; otherwise what was found instead, for the message.
    fn check(&self, reply: &Reply<'_>) -> Result<(), String> {
        let doc = reply
            .json()
            .map_err(|e| format!("body is not JSON ({e})"))?;
        match self.path.find(doc) {
            Some(found) if self.value.matches(found) => Ok(()),
            Some(found) => Err(format!(
                "{} is {}, expected {}",
                self.path,
                shorten(&found.to_string()),
                self.value
            )),
            None => Err(format!("{} is missing, expected {}", self.path, self.value)),
        }
    }
}

/// "The reply has a header `name` whose value is `value`".
///
/// Names are case-insensitive, as in HTTP. Values compare exactly, after trimming surrounding
/// whitespace; with a header sent several times, any of its values may match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMatch {
    /// The header's name.
    pub name: HeaderName,
    /// Its expected value.
    pub value: String,
}

impl HeaderMatch {
    fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let mut found = None;
        for value in headers.get_all(&self.name) {
            let text = String::from_utf8_lossy(value.as_bytes());
            if text.trim() == self.value {
                return Ok(());
            }
            found.get_or_insert(text);
        }
        Err(match found {
            Some(text) => format!(
                "header {} is {}, expected {:?}",
                self.name,
                shorten(&format!("{:?}", text.trim())),
                self.value
            ),
            None => format!("header {} is missing, expected {:?}", self.name, self.value),
        })
    }
}

/// What a reply must be for the check to pass. All parts must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expect {
    /// Accepted statuses (reason `status`); `2xx` by default.
    pub status: StatusSet,
    /// A substring the body must contain (reason `body`).
    pub body_contains: Option<String>,
    /// Header values (reason `assertion`).
    pub headers: Vec<HeaderMatch>,
    /// Values in the JSON body (reason `assertion`; a body that is not JSON fails as `body`).
    pub json: Vec<JsonMatch>,
}

impl Expect {
    /// Whether the body must be read and kept to evaluate this.
    pub fn needs_body(&self) -> bool {
        self.body_contains.is_some() || !self.json.is_empty()
    }

    /// `Ok` when every part holds; otherwise the failure of the first part that does not.
    pub(crate) fn check(&self, reply: &Reply<'_>) -> Result<(), Failure> {
        if !self.status.matches(reply.status.as_u16()) {
            return Err(Failure::new(
                FailureReason::Status,
                format_args!("status {}, expected {}", reply.status, self.status),
            ));
        }
        if let Some(needle) = &self.body_contains
            && !contains(reply.body, needle.as_bytes())
        {
            return Err(Failure::new(
                FailureReason::Body,
                format_args!(
                    "body does not contain {}; it starts with {}",
                    shorten(&format!("{needle:?}")),
                    shorten(&format!("{:?}", String::from_utf8_lossy(reply.body)))
                ),
            ));
        }
        for header in &self.headers {
            header
                .check(reply.headers)
                .map_err(|detail| Failure::new(FailureReason::Assertion, detail))?;
        }
        for json in &self.json {
            if let Err(detail) = json.check(reply) {
                let reason = if reply.json().is_err() {
                    FailureReason::Body
                } else {
                    FailureReason::Assertion
                };
                return Err(Failure::new(reason, detail));
            }
        }
        Ok(())
    }
}

/// When a reply that meets the expectations is still degraded. Each condition that holds adds a
/// reason; none holding means `Up`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DegradedIf {
    /// The reply (status line, headers and body) took longer than this.
    pub latency_over: Option<Duration>,
    /// Each of these that holds is one reason, e.g. `$.mode` is `"readonly"`.
    pub json: Vec<JsonMatch>,
}

impl DegradedIf {
    /// Whether the body must be read and kept to evaluate this.
    pub fn needs_body(&self) -> bool {
        !self.json.is_empty()
    }

    /// The reasons the reply is degraded; empty when it is not.
    pub(crate) fn reasons(&self, reply: &Reply<'_>) -> Vec<String> {
        let mut reasons = Vec::new();
        if let Some(limit) = self.latency_over
            && reply.latency > limit
        {
            reasons.push(format!(
                "latency {}ms over {}",
                reply.latency.as_millis(),
                humantime::format_duration(limit)
            ));
        }
        for json in &self.json {
            if json.check(reply).is_ok() {
                reasons.push(format!("{} is {}", json.path, json.value));
            }
        }
        reasons
    }
}

/// A conjunction of reply properties; used by [`SignalRule`]. Parts left empty are not checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Match {
    /// The status is one of these.
    pub status: Option<StatusSet>,
    /// These headers have these values.
    pub headers: Vec<HeaderMatch>,
    /// These JSON values are there.
    pub json: Vec<JsonMatch>,
}

impl Match {
    /// Whether nothing is checked (such a match would match every reply).
    pub fn is_empty(&self) -> bool {
        self.status.is_none() && self.headers.is_empty() && self.json.is_empty()
    }

    /// Whether the body must be read and kept to evaluate this.
    pub fn needs_body(&self) -> bool {
        !self.json.is_empty()
    }

    /// Whether every given part matches `reply`.
    pub(crate) fn matches(&self, reply: &Reply<'_>) -> bool {
        self.status
            .as_ref()
            .is_none_or(|s| s.matches(reply.status.as_u16()))
            && self.headers.iter().all(|h| h.check(reply.headers).is_ok())
            && self.json.iter().all(|j| j.check(reply).is_ok())
    }
}

/// Why a [`SignalRule`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSignal {
    /// Names appear in the API, logs and alerts: 1 to 128 of `[A-Za-z0-9_.:-]`.
    #[error("signal name {0:?} is invalid: use 1 to 128 of A-Z, a-z, 0-9, '_', '.', ':' and '-'")]
    BadName(String),
    /// A rule without conditions would fire on every reply.
    #[error("signal {0:?} has no condition: give at least one of status, header, json")]
    EmptyWhen(String),
}

/// "When a reply matches `when`, raise the business signal `name` with `severity`."
#[derive(Clone, Debug, PartialEq)]
pub struct SignalRule {
    signal: Signal,
    when: Match,
}

impl SignalRule {
    /// The longest accepted name.
    pub const MAX_NAME_LEN: usize = 128;

    /// Builds a rule.
    ///
    /// # Errors
    /// [`InvalidSignal`] for a name outside `[A-Za-z0-9_.:-]{1,128}` or an empty `when`.
    pub fn try_new(name: &str, severity: Severity, when: Match) -> Result<Self, InvalidSignal> {
        let valid = !name.is_empty()
            && name.len() <= Self::MAX_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
        if !valid {
            return Err(InvalidSignal::BadName(name.to_owned()));
        }
        if when.is_empty() {
            return Err(InvalidSignal::EmptyWhen(name.to_owned()));
        }
        Ok(Self {
            signal: Signal {
                name: Arc::from(name),
                severity,
            },
            when,
        })
    }

    /// The signal raised.
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// When it is raised.
    pub fn when(&self) -> &Match {
        &self.when
    }

    /// The signal, if `reply` matches.
    pub(crate) fn fire(&self, reply: &Reply<'_>) -> Option<Signal> {
        self.when.matches(reply).then(|| self.signal.clone())
    }
}

/// A received reply, as the rules see it.
pub(crate) struct Reply<'a> {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The body, when some rule needs it (empty otherwise).
    pub body: &'a [u8],
    /// From sending the request to the end of the body.
    pub latency: Duration,
    /// The body parsed as JSON, on first use.
    json: OnceCell<Result<Value, String>>,
}

impl<'a> Reply<'a> {
    pub fn new(
        status: StatusCode,
        headers: &'a HeaderMap,
        body: &'a [u8],
        latency: Duration,
    ) -> Self {
        Self {
            status,
            headers,
            body,
            latency,
            json: OnceCell::new(),
        }
    }

    /// The body as JSON, parsed once however many rules look at it.
    fn json(&self) -> Result<&Value, &str> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.body).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(String::as_str)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Bounds a value quoted in a message: replies can be large.
fn shorten(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn status(s: &str) -> StatusPattern {
        s.parse().unwrap()
    }

    fn json_match(path: &str, value: JsonScalar) -> JsonMatch {
        JsonMatch {
            path: path.parse().unwrap(),
            value,
        }
    }

    #[test]
    fn status_patterns_parse_and_match() {
        assert_eq!(status("200"), StatusPattern::Code(200));
        assert_eq!(status("2xx"), StatusPattern::Class(2));
        assert_eq!(status("5XX"), StatusPattern::Class(5));
        for bad in [
            "", "20", "2000", "600", "099", "6xx", "2xX", "x2x", "2x", "+20", " 200",
        ] {
            assert!(bad.parse::<StatusPattern>().is_err(), "{bad:?}");
        }
        assert!(status("2xx").matches(204));
        assert!(!status("2xx").matches(301));
        let set = StatusSet::new(vec![status("200"), status("3xx")]).unwrap();
        assert!(set.matches(200) && set.matches(302) && !set.matches(204));
        assert_eq!(set.to_string(), "200, 3xx");
        assert_eq!(StatusSet::new(Vec::new()), Err(EmptyStatusSet));
        assert_eq!(StatusSet::default().to_string(), "2xx");
    }

    #[test]
    fn json_scalars_compare_strictly_by_type() {
        let n = |v: Value| match v {
            Value::Number(n) => JsonScalar::Number(n),
            _ => unreachable!(),
        };
        assert!(n(serde_json::json!(1)).matches(&serde_json::json!(1.0)));
        assert!(n(serde_json::json!(u64::MAX)).matches(&serde_json::json!(u64::MAX)));
        assert!(!n(serde_json::json!(u64::MAX)).matches(&serde_json::json!(u64::MAX - 1)));
        assert!(!n(serde_json::json!(5)).matches(&serde_json::json!("5")));
        assert!(!JsonScalar::String("5".into()).matches(&serde_json::json!(5)));
        assert!(JsonScalar::Null.matches(&Value::Null));
        assert!(!JsonScalar::Null.matches(&serde_json::json!(false)));
        assert_eq!(JsonScalar::String("a\"b".into()).to_string(), r#""a\"b""#);
    }

    #[test]
    fn expectations_fail_with_the_first_reason_in_order() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let body = br#"{"status":"UP","mode":"readonly"}"#;
        let reply = |code: u16| {
            Reply::new(
                StatusCode::from_u16(code).unwrap(),
                &headers,
                body,
                Duration::from_millis(5),
            )
        };
        let expect = Expect {
            status: StatusSet::default(),
            body_contains: Some("UP".into()),
            headers: vec![HeaderMatch {
                name: HeaderName::from_static("content-type"),
                value: "application/json".into(),
            }],
            json: vec![json_match("$.status", JsonScalar::String("UP".into()))],
        };
        assert_eq!(expect.check(&reply(200)), Ok(()));
        let failure = expect.check(&reply(503)).unwrap_err();
        assert_eq!(failure.reason, FailureReason::Status);
        assert_eq!(
            failure.detail,
            "status 503 Service Unavailable, expected 2xx"
        );

        let mut wrong = expect.clone();
        wrong.json[0].value = JsonScalar::String("DOWN".into());
        let failure = wrong.check(&reply(200)).unwrap_err();
        assert_eq!(failure.reason, FailureReason::Assertion);
        assert_eq!(failure.detail, r#"$.status is "UP", expected "DOWN""#);

        let degraded = DegradedIf {
            latency_over: Some(Duration::from_millis(1)),
            json: vec![
                json_match("$.mode", JsonScalar::String("readonly".into())),
                json_match("$.mode", JsonScalar::String("maintenance".into())),
            ],
        };
        assert_eq!(
            degraded.reasons(&reply(200)),
            vec!["latency 5ms over 1ms", r#"$.mode is "readonly""#]
        );
    }

    #[test]
    fn signal_rules_are_validated() {
        let when = Match {
            status: Some(StatusSet::default()),
            ..Match::default()
        };
        assert!(
            SignalRule::try_new("Stock:Reservation-Failed.v2", Severity::High, when.clone())
                .is_ok()
        );
        assert!(matches!(
            SignalRule::try_new("has space", Severity::High, when.clone()),
            Err(InvalidSignal::BadName(_))
        ));
        assert!(matches!(
            SignalRule::try_new("", Severity::High, when),
            Err(InvalidSignal::BadName(_))
        ));
        assert!(matches!(
            SignalRule::try_new("x", Severity::High, Match::default()),
            Err(InvalidSignal::EmptyWhen(_))
        ));
    }
}
