//! What an HTTP reply must look like, what makes it degraded, and which business signals it
//! carries.
//!
//! Three kinds of rules are evaluated on every reply, in this order:
//! 1. [`Expect`]: all of its parts must hold, or the check fails. The parts are checked in the
//!    order status, body, headers, JSON, latency, and the first one that does not hold gives the
//!    failure's reason (`status`, `body`, `assertion`), so the reason points at the most basic
//!    problem.
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
    /// Any code from the first to the second, both included: `401-499`.
    Range(u16, u16),
}

/// Why a string is not a valid [`StatusPattern`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid status {0:?}: expected a code from 100 to 599, a class from \"1xx\" to \"5xx\" or a range such as \"401-499\""
)]
pub struct InvalidStatus(pub String);

impl StatusPattern {
    /// Whether `code` is accepted.
    pub fn matches(self, code: u16) -> bool {
        match self {
            Self::Code(c) => c == code,
            Self::Class(class) => code / 100 == u16::from(class),
            Self::Range(low, high) => (low..=high).contains(&code),
        }
    }
}

impl FromStr for StatusPattern {
    type Err = InvalidStatus;

    /// `"200"`, `"2xx"` (also `"2XX"`) or `"401-499"` (the first code not above the second).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidStatus(s.to_owned());
        if let Some((low, high)) = s.split_once('-') {
            return match (low.parse(), high.parse()) {
                (Ok(Self::Code(low)), Ok(Self::Code(high))) if low <= high => {
                    Ok(Self::Range(low, high))
                }
                _ => Err(bad()),
            };
        }
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
            Self::Range(low, high) => write!(f, "{low}-{high}"),
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

/// A regular expression that compares by its source, so that specs holding one can tell a
/// reload that changed it.
#[derive(Clone, Debug)]
pub struct Pattern(pub regex::bytes::Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}/", self.0.as_str())
    }
}

/// How a number or a length is compared with the operand of a [`JsonTest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// Equal (`eq`).
    Eq,
    /// Not equal (`ne`).
    Ne,
    /// Less than (`lt`).
    Lt,
    /// Less than or equal (`le`).
    Le,
    /// Greater than (`gt`).
    Gt,
    /// Greater than or equal (`ge`).
    Ge,
}

impl Comparison {
    /// Every comparison, by its key in the configuration.
    pub const ALL: [(Self, &'static str); 6] = [
        (Self::Eq, "eq"),
        (Self::Ne, "ne"),
        (Self::Lt, "lt"),
        (Self::Le, "le"),
        (Self::Gt, "gt"),
        (Self::Ge, "ge"),
    ];

    /// Whether `left` compares to `right` this way.
    pub fn holds<T: PartialOrd>(self, left: T, right: T) -> bool {
        match self {
            Self::Eq => left == right,
            Self::Ne => left != right,
            Self::Lt => left < right,
            Self::Le => left <= right,
            Self::Gt => left > right,
            Self::Ge => left >= right,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
        }
    }
}

/// One thing the value at a JSON path must be.
///
/// Scalars compare by type and value ([`JsonScalar::matches`]); a pattern reads a string as it
/// is and any other value as its JSON text, so `"$.version"` can be matched whatever its type.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonTest {
    /// The value is this scalar.
    Is(JsonScalar),
    /// The value is not this scalar (a missing value does not hold).
    IsNot(JsonScalar),
    /// The value is one of these.
    OneOf(Vec<JsonScalar>),
    /// The value is none of these (a missing value does not hold).
    NoneOf(Vec<JsonScalar>),
    /// The value's text matches.
    Matches(Pattern),
    /// The value's text does not match (a missing value does not hold).
    NotMatches(Pattern),
    /// The value is a number that compares so with this one.
    Number(Comparison, f64),
    /// The value's length compares so with this one: an array's items, an object's members, a
    /// string's characters, the JSON text's characters of anything else.
    Len(Comparison, u64),
    /// The path leads to a value (`true`) or to none (`false`).
    Exists(bool),
}

impl JsonTest {
    /// `Ok` when `found` (the value at the path, if any) passes; otherwise what was seen.
    fn check(&self, found: Option<&Value>) -> Result<(), Seen> {
        let Some(value) = found else {
            return match self {
                Self::Exists(false) => Ok(()),
                _ => Err(Seen::Missing),
            };
        };
        let holds = match self {
            Self::Is(scalar) => scalar.matches(value),
            Self::IsNot(scalar) => !scalar.matches(value),
            Self::OneOf(scalars) => scalars.iter().any(|s| s.matches(value)),
            Self::NoneOf(scalars) => !scalars.iter().any(|s| s.matches(value)),
            Self::Matches(pattern) => pattern.0.is_match(text_of(value).as_bytes()),
            Self::NotMatches(pattern) => !pattern.0.is_match(text_of(value).as_bytes()),
            Self::Number(op, operand) => value.as_f64().is_some_and(|n| op.holds(n, *operand)),
            Self::Len(op, operand) => {
                let len = length_of(value);
                if op.holds(len, *operand) {
                    return Ok(());
                }
                return Err(Seen::Length(len));
            }
            Self::Exists(exists) => *exists,
        };
        if holds {
            Ok(())
        } else {
            Err(Seen::Value(shorten(&value.to_string())))
        }
    }
}

impl fmt::Display for JsonTest {
    /// What is expected, as failures say it: `"UP"`, `not "DOWN"`, `< 5`, `length >= 1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, scalars: &[JsonScalar]| {
            for (i, s) in scalars.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{s}")?;
            }
            Ok(())
        };
        match self {
            Self::Is(scalar) => write!(f, "{scalar}"),
            Self::IsNot(scalar) => write!(f, "not {scalar}"),
            Self::OneOf(scalars) => {
                f.write_str("one of ")?;
                list(f, scalars)
            }
            Self::NoneOf(scalars) => {
                f.write_str("none of ")?;
                list(f, scalars)
            }
            Self::Matches(pattern) => write!(f, "matching {pattern}"),
            Self::NotMatches(pattern) => write!(f, "not matching {pattern}"),
            Self::Number(op, operand) => write!(f, "{} {operand}", op.symbol()),
            Self::Len(op, operand) => write!(f, "length {} {operand}", op.symbol()),
            Self::Exists(true) => f.write_str("present"),
            Self::Exists(false) => f.write_str("absent"),
        }
    }
}

/// What a failing [`JsonTest`] saw, for its message.
enum Seen {
    Missing,
    Value(String),
    Length(u64),
}

/// A string as it is, any other value as its JSON text.
fn text_of(value: &Value) -> std::borrow::Cow<'_, str> {
    match value {
        Value::String(s) => s.as_str().into(),
        other => other.to_string().into(),
    }
}

fn length_of(value: &Value) -> u64 {
    let len = match value {
        Value::Array(items) => items.len(),
        Value::Object(members) => members.len(),
        Value::String(s) => s.chars().count(),
        other => other.to_string().chars().count(),
    };
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// "The value at `path` passes every one of `tests`".
#[derive(Clone, Debug, PartialEq)]
pub struct JsonMatch {
    /// Where to look.
    pub path: JsonPath,
    /// What must hold there, all of it; never empty.
    pub tests: Vec<JsonTest>,
}

impl JsonMatch {
    /// "The value at `path` is `value`", the common case.
    pub fn is(path: JsonPath, value: JsonScalar) -> Self {
        Self {
            path,
            tests: vec![JsonTest::Is(value)],
        }
    }

    /// `Ok` when it holds; otherwise what was found instead, for the message.
    fn check(&self, reply: &Reply<'_>) -> Result<(), String> {
        let doc = reply
            .json()
            .map_err(|e| format!("body is not JSON ({e})"))?;
        let found = self.path.find(doc);
        for test in &self.tests {
            match test.check(found) {
                Ok(()) => {}
                Err(Seen::Missing) => {
                    return Err(format!("{} is missing, expected {test}", self.path));
                }
                Err(Seen::Value(value)) => {
                    return Err(format!("{} is {value}, expected {test}", self.path));
                }
                Err(Seen::Length(len)) => {
                    return Err(format!("{} has length {len}, expected {test}", self.path));
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for JsonMatch {
    /// As a degraded reason says it: `$.mode is "readonly"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is ", self.path)?;
        for (i, test) in self.tests.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            write!(f, "{test}")?;
        }
        Ok(())
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
    /// The reply (status line, headers and body) must take less than this (reason
    /// `assertion`): for a service whose slow answer is as bad as none, where
    /// [`DegradedIf::latency_over`] would call it degraded.
    pub latency_under: Option<Duration>,
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
        if let Some(limit) = self.latency_under
            && reply.latency >= limit
        {
            return Err(Failure::new(
                FailureReason::Assertion,
                format_args!(
                    "latency {}ms, expected under {}",
                    reply.latency.as_millis(),
                    humantime::format_duration(limit)
                ),
            ));
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
                reasons.push(json.to_string());
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
        JsonMatch::is(path.parse().unwrap(), value)
    }

    fn json_tests(path: &str, tests: Vec<JsonTest>) -> JsonMatch {
        JsonMatch {
            path: path.parse().unwrap(),
            tests,
        }
    }

    fn pattern(re: &str) -> Pattern {
        Pattern(regex::bytes::Regex::new(re).unwrap())
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
            ..Expect::default()
        };
        assert_eq!(expect.check(&reply(200)), Ok(()));
        let failure = expect.check(&reply(503)).unwrap_err();
        assert_eq!(failure.reason, FailureReason::Status);
        assert_eq!(
            failure.detail,
            "status 503 Service Unavailable, expected 2xx"
        );

        let mut wrong = expect.clone();
        wrong.json[0].tests = vec![JsonTest::Is(JsonScalar::String("DOWN".into()))];
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
    fn status_ranges_parse_and_match() {
        assert_eq!(status("401-499"), StatusPattern::Range(401, 499));
        assert_eq!(status("200-200"), StatusPattern::Range(200, 200));
        for bad in ["499-401", "2xx-3xx", "100-600", "-200", "200-", "200-30"] {
            assert!(bad.parse::<StatusPattern>().is_err(), "{bad:?}");
        }
        let range = status("401-499");
        assert!(range.matches(401) && range.matches(499));
        assert!(!range.matches(400) && !range.matches(500));
        assert_eq!(range.to_string(), "401-499");
    }

    #[test]
    fn json_tests_hold_and_say_what_they_saw() {
        let headers = HeaderMap::new();
        let body = br#"{"name":"john.doe","id":2,"ratio":0.5,"data":[1,2,3],"errors":null,"nested":{"a":1}}"#;
        let reply = Reply::new(StatusCode::OK, &headers, body, Duration::ZERO);
        let s = |v: &str| JsonScalar::String(v.into());
        let n = |v: i64| JsonScalar::Number(v.into());
        let holds = [
            json_tests("$.name", vec![JsonTest::IsNot(s("bob"))]),
            json_tests("$.id", vec![JsonTest::OneOf(vec![n(1), n(2)])]),
            json_tests("$.id", vec![JsonTest::NoneOf(vec![n(3), s("2")])]),
            json_tests("$.name", vec![JsonTest::Matches(pattern("^john"))]),
            json_tests("$.id", vec![JsonTest::Matches(pattern("^2$"))]),
            json_tests("$.name", vec![JsonTest::NotMatches(pattern("^bob"))]),
            json_tests(
                "$.ratio",
                vec![
                    JsonTest::Number(Comparison::Gt, 0.25),
                    JsonTest::Number(Comparison::Le, 0.5),
                ],
            ),
            json_tests("$.data", vec![JsonTest::Len(Comparison::Lt, 5)]),
            json_tests("$.name", vec![JsonTest::Len(Comparison::Eq, 8)]),
            json_tests("$.nested", vec![JsonTest::Len(Comparison::Eq, 1)]),
            json_tests("$.id", vec![JsonTest::Len(Comparison::Eq, 1)]),
            json_tests("$.errors", vec![JsonTest::Exists(true)]),
            json_tests("$.users", vec![JsonTest::Exists(false)]),
        ];
        for test in &holds {
            assert_eq!(test.check(&reply), Ok(()), "{test}");
        }
        let fails = [
            (
                json_tests("$.name", vec![JsonTest::IsNot(s("john.doe"))]),
                r#"$.name is "john.doe", expected not "john.doe""#,
            ),
            (
                json_tests("$.id", vec![JsonTest::OneOf(vec![n(3), n(4)])]),
                "$.id is 2, expected one of 3, 4",
            ),
            (
                json_tests("$.name", vec![JsonTest::Matches(pattern("^bob"))]),
                r#"$.name is "john.doe", expected matching /^bob/"#,
            ),
            (
                json_tests("$.name", vec![JsonTest::Number(Comparison::Gt, 1.0)]),
                r#"$.name is "john.doe", expected > 1"#,
            ),
            (
                json_tests("$.data", vec![JsonTest::Len(Comparison::Ge, 5)]),
                "$.data has length 3, expected length >= 5",
            ),
            (
                json_tests("$.errors", vec![JsonTest::Exists(false)]),
                "$.errors is null, expected absent",
            ),
            (
                json_tests("$.users", vec![JsonTest::IsNot(n(1))]),
                "$.users is missing, expected not 1",
            ),
        ];
        for (test, message) in fails {
            assert_eq!(test.check(&reply), Err(message.to_owned()), "{test}");
        }
        assert_eq!(
            json_tests(
                "$.id",
                vec![
                    JsonTest::Number(Comparison::Ge, 1.0),
                    JsonTest::Len(Comparison::Eq, 1)
                ]
            )
            .to_string(),
            "$.id is >= 1 and length == 1"
        );
    }

    #[test]
    fn latency_limits_fail_the_check() {
        let headers = HeaderMap::new();
        let reply = |latency| Reply::new(StatusCode::OK, &headers, b"<h1>Example</h1>", latency);
        let expect = Expect {
            latency_under: Some(Duration::from_millis(300)),
            ..Expect::default()
        };
        assert_eq!(expect.check(&reply(Duration::from_millis(299))), Ok(()));
        let slow = expect
            .check(&reply(Duration::from_millis(300)))
            .unwrap_err();
        assert_eq!(slow.reason, FailureReason::Assertion);
        assert_eq!(slow.detail, "latency 300ms, expected under 300ms");
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
