//! The validated description of an HTTP probe: the request, how to connect and what to expect.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use bytes::Bytes;
use reqwest::{Method, Url};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::conditions::{DegradedIf, Expect, SignalRule};
use super::headers::RequestHeaders;

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

/// Extra trusted CA certificates, parsed from PEM.
///
/// Compares by the certificates' content, so a reload notices a changed CA file (and restarts the
/// probe with the new roots) but not a moved one.
#[derive(Clone)]
pub struct CaBundle {
    certs: Arc<[CertificateDer<'static>]>,
}

/// Why a CA bundle could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCa {
    /// The file could not be read.
    #[error("cannot read CA file {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        error: String,
    },
    /// The file is too large to be a CA bundle.
    #[error("CA file is larger than {} KiB", CaBundle::MAX_BYTES / 1024)]
    TooLarge,
    /// Broken PEM framing or base64.
    #[error("invalid PEM in CA file: {0}")]
    Pem(String),
    /// No `CERTIFICATE` block.
    #[error("no certificate in CA file")]
    Empty,
    /// A block that is not a usable X.509 CA certificate.
    #[error("certificate {index} of the CA file is invalid: {error}")]
    Certificate {
        /// 1-based position in the file.
        index: usize,
        /// What is wrong.
        error: String,
    },
}

impl CaBundle {
    /// The largest CA file read: system bundles are about 200 KiB.
    pub const MAX_BYTES: usize = 4 * 1024 * 1024;

    /// Parses the `CERTIFICATE` blocks of a PEM document; other blocks are ignored.
    ///
    /// # Errors
    /// [`InvalidCa`] for broken PEM, no certificate, or a certificate that cannot be a trust
    /// anchor.
    pub fn from_pem(pem: &[u8]) -> Result<Self, InvalidCa> {
        if pem.len() > Self::MAX_BYTES {
            return Err(InvalidCa::TooLarge);
        }
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| InvalidCa::Pem(e.to_string()))?;
        if certs.is_empty() {
            return Err(InvalidCa::Empty);
        }
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in certs.iter().enumerate() {
            roots
                .add(cert.clone())
                .map_err(|e| InvalidCa::Certificate {
                    index: i + 1,
                    error: e.to_string(),
                })?;
        }
        Ok(Self {
            certs: certs.into(),
        })
    }

    /// Reads and parses a PEM file.
    ///
    /// # Errors
    /// [`InvalidCa::Read`] when the file cannot be read, else as [`CaBundle::from_pem`].
    pub fn from_file(path: &Path) -> Result<Self, InvalidCa> {
        let read_error = |e: std::io::Error| InvalidCa::Read {
            path: path.display().to_string(),
            error: e.to_string(),
        };
        let len = std::fs::metadata(path).map_err(read_error)?.len();
        if usize::try_from(len).map_or(true, |len| len > Self::MAX_BYTES) {
            return Err(InvalidCa::TooLarge);
        }
        Self::from_pem(&std::fs::read(path).map_err(read_error)?)
    }

    /// The certificates, DER-encoded.
    pub fn certificates(&self) -> &[CertificateDer<'static>] {
        &self.certs
    }
}

impl PartialEq for CaBundle {
    fn eq(&self, other: &Self) -> bool {
        self.certs == other.certs
    }
}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CaBundle({} certificates)", self.certs.len())
    }
}

/// Which servers a TLS connection trusts.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TlsTrust {
    /// Certificates must chain to the system's trust store (`/etc/ssl/certs`, or `SSL_CERT_FILE`
    /// / `SSL_CERT_DIR`) and match the host name. The default.
    #[default]
    System,
    /// As [`TlsTrust::System`], with these CAs trusted as well (a private CA).
    WithCa(CaBundle),
    /// Any certificate, for any name: the connection is encrypted but not authenticated. For
    /// self-signed test setups only; signatures in the handshake are still checked.
    InsecureSkipVerify,
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
    /// What the reply must be.
    pub expect: Expect,
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
            expect: Expect::default(),
            degraded_if: DegradedIf::default(),
            signals: Vec::new(),
        }
    }

    /// Whether some condition looks at the body, which must then be kept (up to
    /// [`MAX_BODY`](super::MAX_BODY)).
    pub fn needs_body(&self) -> bool {
        self.expect.needs_body()
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

    #[test]
    fn ca_bundles_reject_garbage() {
        assert_eq!(CaBundle::from_pem(b"not pem"), Err(InvalidCa::Empty));
        assert!(matches!(
            CaBundle::from_pem(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(InvalidCa::Pem(_))
        ));
        assert!(matches!(
            CaBundle::from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            Err(InvalidCa::Certificate { index: 1, .. })
        ));
        assert!(matches!(
            CaBundle::from_file(Path::new("/nonexistent/ca.pem")),
            Err(InvalidCa::Read { .. })
        ));
    }
}
