//! Regular expressions over a reply's body and headers, and what the exchange itself must have
//! been (over TLS or not, an HTTP version): the conditions of probes written for a regex-minded
//! exporter, such as blackbox_exporter's `fail_if_body_matches_regexp` or `valid_http_versions`.
//!
//! Kept apart from [`Expect`](super::Expect), the declarative conditions (a status, a substring,
//! a header's value, a JSON value), because these are compiled patterns and facts of the
//! connection rather than of the content; [`HttpSpec::patterns`](super::HttpSpec::patterns) holds
//! them, and they are checked after `Expect` holds, in the order of the fields: the body
//! (`body`), then headers, TLS and version (`assertion`).

use std::fmt;
use std::str::FromStr;

use regex::bytes::Regex;
use reqwest::Version;
use reqwest::header::HeaderName;

use super::conditions::Reply;
use crate::outcome::{Failure, FailureReason};

/// A regex over one header's values.
#[derive(Clone, Debug)]
pub struct HeaderPattern {
    /// The header (case-insensitive, as in HTTP).
    pub name: HeaderName,
    /// Matched against each of its values.
    pub regex: regex::Regex,
    /// Whether a reply without the header passes this condition; otherwise it fails.
    pub allow_missing: bool,
}

impl PartialEq for HeaderPattern {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.regex.as_str() == other.regex.as_str()
            && self.allow_missing == other.allow_missing
    }
}

/// An HTTP version a reply may come in, written as HTTP names it (`HTTP/1.0`, `HTTP/1.1`). The
/// probe speaks HTTP/1.1, so a server answers in one of these two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpVersion(Version);

/// A version name that is not one of [`HttpVersion::NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown HTTP version {0:?}: expected HTTP/1.0 or HTTP/1.1 (the probe speaks HTTP/1.1)")]
pub struct UnknownVersion(pub String);

impl HttpVersion {
    /// The versions a probe can speak, by name.
    pub const NAMES: [&'static str; 2] = ["HTTP/1.0", "HTTP/1.1"];

    /// The version's name, one of [`HttpVersion::NAMES`].
    pub fn as_str(self) -> &'static str {
        if self.0 == Version::HTTP_10 {
            Self::NAMES[0]
        } else {
            Self::NAMES[1]
        }
    }
}

impl FromStr for HttpVersion {
    type Err = UnknownVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "HTTP/1.0" => Ok(Self(Version::HTTP_10)),
            "HTTP/1.1" => Ok(Self(Version::HTTP_11)),
            _ => Err(UnknownVersion(s.to_owned())),
        }
    }
}

impl fmt::Display for HttpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pattern conditions of an HTTP probe; all must hold. Empty by default: nothing checked.
#[derive(Clone, Debug, Default)]
pub struct ReplyPatterns {
    /// Each must match the body (reason `body`).
    pub body_matches: Vec<Regex>,
    /// None may match the body (reason `body`).
    pub body_not_matches: Vec<Regex>,
    /// Some value of each header must match (reason `assertion`).
    pub header_matches: Vec<HeaderPattern>,
    /// No value of each header may match (reason `assertion`).
    pub header_not_matches: Vec<HeaderPattern>,
    /// `Some(true)`: the final reply must have come over TLS; `Some(false)`: it must not
    /// (reason `assertion`). After redirects, the last request's scheme decides.
    pub tls: Option<bool>,
    /// The reply's HTTP version must be one of these; empty: any (reason `assertion`).
    pub versions: Vec<HttpVersion>,
}

impl PartialEq for ReplyPatterns {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &[Regex], b: &[Regex]| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.as_str() == b.as_str())
        };
        same(&self.body_matches, &other.body_matches)
            && same(&self.body_not_matches, &other.body_not_matches)
            && self.header_matches == other.header_matches
            && self.header_not_matches == other.header_not_matches
            && self.tls == other.tls
            && self.versions == other.versions
    }
}

/// What the exchange was, besides the reply: what [`ReplyPatterns::tls`] and
/// [`ReplyPatterns::versions`] look at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Exchanged {
    pub version: Version,
    pub tls: bool,
}

impl ReplyPatterns {
    /// Whether the body must be read and kept to evaluate these.
    pub fn needs_body(&self) -> bool {
        !self.body_matches.is_empty() || !self.body_not_matches.is_empty()
    }

    /// The body and header regexes: `Ok` when each holds.
    pub(crate) fn check_regexes(&self, reply: &Reply<'_>) -> Result<(), Failure> {
        if let Some(re) = self.body_matches.iter().find(|re| !re.is_match(reply.body)) {
            return Err(Failure::new(
                FailureReason::Body,
                format_args!("body does not match /{}/", re.as_str()),
            ));
        }
        if let Some(re) = self
            .body_not_matches
            .iter()
            .find(|re| re.is_match(reply.body))
        {
            return Err(Failure::new(
                FailureReason::Body,
                format_args!("body matches /{}/", re.as_str()),
            ));
        }
        for (patterns, wanted) in [
            (&self.header_matches, true),
            (&self.header_not_matches, false),
        ] {
            for pattern in patterns {
                header_check(pattern, reply, wanted)?;
            }
        }
        Ok(())
    }

    /// `tls` and `http_version`: `Ok` when the exchange was as they ask.
    pub(crate) fn check_exchange(&self, exchanged: Exchanged) -> Result<(), Failure> {
        let assertion = |detail: String| Err(Failure::new(FailureReason::Assertion, detail));
        match self.tls {
            Some(true) if !exchanged.tls => {
                return assertion("the reply did not come over TLS".into());
            }
            Some(false) if exchanged.tls => return assertion("the reply came over TLS".into()),
            _ => {}
        }
        if !self.versions.is_empty() && !self.versions.iter().any(|v| v.0 == exchanged.version) {
            let wanted: Vec<&str> = self.versions.iter().map(|v| v.as_str()).collect();
            return assertion(format!(
                "the reply came in {:?}, expected {}",
                exchanged.version,
                wanted.join(" or ")
            ));
        }
        Ok(())
    }
}

/// `wanted`: some value must match; otherwise none may.
fn header_check(pattern: &HeaderPattern, reply: &Reply<'_>, wanted: bool) -> Result<(), Failure> {
    let failed = |detail: String| Err(Failure::new(FailureReason::Assertion, detail));
    let mut values = reply.headers.get_all(&pattern.name).iter().peekable();
    if values.peek().is_none() {
        if pattern.allow_missing {
            return Ok(());
        }
        return failed(format!("header {} is missing", pattern.name));
    }
    let matched = values.any(|v| {
        pattern
            .regex
            .is_match(&String::from_utf8_lossy(v.as_bytes()))
    });
    match (wanted, matched) {
        (true, false) => failed(format!(
            "header {} does not match /{}/",
            pattern.name,
            pattern.regex.as_str()
        )),
        (false, true) => failed(format!(
            "header {} matches /{}/",
            pattern.name,
            pattern.regex.as_str()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::StatusCode;
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    fn exchanged(version: Version, tls: bool) -> Exchanged {
        Exchanged { version, tls }
    }

    #[test]
    fn body_and_header_patterns_fail_with_their_reasons() {
        let mut headers = HeaderMap::new();
        headers.append("x-mode", HeaderValue::from_static("primary"));
        headers.append("x-mode", HeaderValue::from_static("readonly"));
        let reply = Reply::new(StatusCode::OK, &headers, b"status: ok", Duration::ZERO);
        let re = |s: &str| Regex::new(s).unwrap();
        let header = |name: &'static str, re: &str, allow_missing| HeaderPattern {
            name: HeaderName::from_static(name),
            regex: regex::Regex::new(re).unwrap(),
            allow_missing,
        };

        let mut patterns = ReplyPatterns {
            body_matches: vec![re("ok$")],
            body_not_matches: vec![re("error")],
            header_matches: vec![header("x-mode", "^read", false)],
            header_not_matches: vec![header("x-missing", ".", true)],
            ..ReplyPatterns::default()
        };
        assert_eq!(patterns.check_regexes(&reply), Ok(()));

        patterns.body_not_matches.push(re("status"));
        let failure = patterns.check_regexes(&reply).unwrap_err();
        assert_eq!(failure.reason, FailureReason::Body);
        assert_eq!(failure.detail, "body matches /status/");
        patterns.body_not_matches.pop();

        patterns
            .header_not_matches
            .push(header("x-mode", "only", false));
        let failure = patterns.check_regexes(&reply).unwrap_err();
        assert_eq!(failure.reason, FailureReason::Assertion);
        assert_eq!(failure.detail, "header x-mode matches /only/");
        patterns.header_not_matches.pop();

        patterns.header_matches.push(header("x-gone", ".", false));
        let failure = patterns.check_regexes(&reply).unwrap_err();
        assert_eq!(failure.detail, "header x-gone is missing");
    }

    #[test]
    fn tls_and_versions_are_facts_of_the_exchange() {
        let must_tls = ReplyPatterns {
            tls: Some(true),
            ..ReplyPatterns::default()
        };
        assert!(
            must_tls
                .check_exchange(exchanged(Version::HTTP_11, true))
                .is_ok()
        );
        assert!(
            must_tls
                .check_exchange(exchanged(Version::HTTP_11, false))
                .is_err()
        );
        let no_tls = ReplyPatterns {
            tls: Some(false),
            ..ReplyPatterns::default()
        };
        assert!(
            no_tls
                .check_exchange(exchanged(Version::HTTP_11, true))
                .is_err()
        );

        let v10: HttpVersion = "HTTP/1.0".parse().unwrap();
        assert_eq!(v10.to_string(), "HTTP/1.0");
        assert!("HTTP/2.0".parse::<HttpVersion>().is_err());
        let only_v10 = ReplyPatterns {
            versions: vec![v10],
            ..ReplyPatterns::default()
        };
        assert!(
            only_v10
                .check_exchange(exchanged(Version::HTTP_10, true))
                .is_ok()
        );
        let failure = only_v10
            .check_exchange(exchanged(Version::HTTP_11, false))
            .unwrap_err();
        assert_eq!(
            failure.detail,
            "the reply came in HTTP/1.1, expected HTTP/1.0"
        );
    }
}
