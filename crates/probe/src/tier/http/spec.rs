//! The validated description of an HTTP probe: the request, how to connect and what to expect.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use reqwest::{Method, Url};

use super::conditions::{DegradedIf, Expect, SignalRule};
use super::headers::RequestHeaders;
use super::patterns::ReplyPatterns;
use crate::target::Addresses;
use crate::tier::tls::TlsTrust;

/// An `http://` or `https://` URL with a host and without credentials.
///
/// Credentials in the URL (`https://user:pass@host/`) are rejected because a URL is shown in
/// logs, errors and the API; put them in an `Authorization` header, whose value is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpUrl(Url);

/// Why a string is not a valid [`HttpUrl`]. Never contains the URL, which may hold a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUrl {
    /// Not a URL at all.
    #[error("invalid URL: {0}")]
    Parse(String),
    /// Only HTTP is probed by this tier.
    #[error("URL scheme {0:?} is not supported; expected http or https")]
    Scheme(String),
    /// `http:///path` and the like.
    #[error("URL has no host")]
    NoHost,
    /// User name or password in the URL.
    #[error("URL has credentials; send them in an Authorization header instead")]
    Credentials,
}

impl HttpUrl {
    /// The URL.
    pub fn as_url(&self) -> &Url {
        &self.0
    }

    /// Whether the scheme is `https`.
    pub fn is_https(&self) -> bool {
        self.0.scheme() == "https"
    }
}

impl TryFrom<Url> for HttpUrl {
    type Error = InvalidUrl;

    fn try_from(url: Url) -> Result<Self, Self::Error> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(InvalidUrl::Scheme(url.scheme().into()));
        }
        if url.host().is_none() {
            return Err(InvalidUrl::NoHost);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(InvalidUrl::Credentials);
        }
        Ok(Self(url))
    }
}

impl FromStr for HttpUrl {
    type Err = InvalidUrl;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Url::parse(s)
            .map_err(|e| InvalidUrl::Parse(e.to_string()))?
            .try_into()
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.as_str(), f)
    }
}

/// An HTTP probe: one request, evaluated against conditions.
///
/// Built with [`HttpSpec::get`] and the public fields. Everything in it is already validated
/// (URL, headers, status patterns, JSON paths, CA certificates), so a probe built from it can
/// only fail at run time for run-time reasons.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HttpSpec {
    /// What to request.
    pub url: HttpUrl,
    /// The method; `GET` by default.
    pub method: Method,
    /// Headers sent with every request; values are secret (see [`RequestHeaders`]).
    pub headers: RequestHeaders,
    /// The request body, if any.
    pub body: Option<Bytes>,
    /// Which TLS servers are trusted.
    pub tls: TlsTrust,
    /// Whether to follow redirects, up to [`HttpSpec::MAX_REDIRECTS`]. Off by default: a health
    /// endpoint that redirects (to a login page, say) is usually a misconfiguration, and a
    /// redirect's status is what the expectations then see. When on, the configured headers are
    /// not sent to another origin than the URL's.
    pub follow_redirects: bool,
    /// Whether every check opens a new connection. Off by default, so that checks reuse one
    /// kept-alive connection, which is cheaper for both sides; on, each check also tests
    /// accepting connections and the TCP and TLS handshakes. The request then says
    /// `Connection: close`, and the connection is closed with a reset once the reply is read, so
    /// that neither side keeps a `TIME_WAIT` entry per check.
    pub fresh_connection: bool,
    /// Which of the URL host's addresses are probed.
    pub addresses: Addresses,
    /// What the reply must be.
    pub expect: Expect,
    /// Regexes the reply must (not) match, and what the exchange must have been; checked once
    /// `expect` holds.
    pub patterns: ReplyPatterns,
    /// When a good reply is still degraded.
    pub degraded_if: DegradedIf,
    /// Business signals recognised in replies.
    pub signals: Vec<SignalRule>,
}

impl HttpSpec {
    /// The most redirects followed with `follow_redirects`; more is a failure.
    pub const MAX_REDIRECTS: usize = 5;

    /// A `GET` of `url` expecting a `2xx` status, with every other option at its default.
    pub fn get(url: HttpUrl) -> Self {
        Self {
            url,
            method: Method::GET,
            headers: RequestHeaders::new(),
            body: None,
            tls: TlsTrust::default(),
            follow_redirects: false,
            fresh_connection: false,
            addresses: Addresses::First,
            expect: Expect::default(),
            patterns: ReplyPatterns::default(),
            degraded_if: DegradedIf::default(),
            signals: Vec::new(),
        }
    }

    /// Whether some condition looks at the body, which must then be kept (up to
    /// [`MAX_BODY`](super::MAX_BODY)).
    pub fn needs_body(&self) -> bool {
        self.expect.needs_body()
            || self.patterns.needs_body()
            || self.degraded_if.needs_body()
            || self.signals.iter().any(|s| s.when().needs_body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_validated_without_echoing_them() {
        assert!("http://127.0.0.1:8080/ready".parse::<HttpUrl>().is_ok());
        assert!(
            "https://example.invalid/"
                .parse::<HttpUrl>()
                .unwrap()
                .is_https()
        );
        assert_eq!(
            "ftp://x/".parse::<HttpUrl>(),
            Err(InvalidUrl::Scheme("ftp".into()))
        );
        assert_eq!(
            "http://u:hunter2@x/".parse::<HttpUrl>(),
            Err(InvalidUrl::Credentials)
        );
        assert!(matches!(
            "127.0.0.1:80".parse::<HttpUrl>(),
            Err(InvalidUrl::Scheme(_) | InvalidUrl::Parse(_))
        ));
        assert!(matches!(
            "/ready".parse::<HttpUrl>(),
            Err(InvalidUrl::Parse(_))
        ));
        assert!(
            !"http://u:hunter2@x/"
                .parse::<HttpUrl>()
                .unwrap_err()
                .to_string()
                .contains("hunter2")
        );
    }
}
