//! Why a TLS handshake failed, in a sentence an operator can act on.
//!
//! The verifiers below rustls (webpki) answer with enum variants such as `UnknownIssuer` or
//! `CaUsedAsEndEntity`, and rustls's own messages print them with `Debug`. Neither tells an
//! operator which certificate is at fault nor what to do. So every refusal is put in words here,
//! naming the certificate it is about with its subject and dates, from the chain the server sent
//! (parsed only when a handshake fails, so a passing check pays nothing for it).
//!
//! The certificate's refusal is worded by the verifier ([`refuse`]), which sees the chain; what it
//! says travels inside rustls's error as a [`Refused`], and [`describe`] reads it back out of
//! whatever error the TLS stack returns.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, OtherError};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::public_key::PublicKey;

/// The smallest RSA key the verifiers accept, as webpki's `ring` algorithms do: smaller keys are
/// within reach of a well-funded attacker, and no public CA has issued one since 2013.
const MIN_RSA_BITS: usize = 2048;

/// A certificate refusal in words, carried inside a rustls error
/// (`InvalidCertificate(Other(..))`) from the verifier to the probe.
#[derive(Debug)]
pub(crate) struct Refused(pub(crate) String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The rustls error that carries `sentence` to [`describe`].
pub(crate) fn refused(sentence: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Refused(
        sentence,
    )))))
}

/// `error`, a verifier's refusal of the chain `leaf` + `intermediates` for `name` at `now`, in
/// words: which check refused it and which certificate it is about.
pub(crate) fn refuse(
    error: &rustls::Error,
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    name: &ServerName<'_>,
    now: UnixTime,
) -> rustls::Error {
    let chain = Chain::parse(leaf, intermediates);
    let now = UNIX_EPOCH + Duration::from_secs(now.as_secs());
    let sentence = match error {
        rustls::Error::InvalidCertificate(cert) => chain.sentence(cert, &name.to_str(), now),
        other => describe(other),
    };
    refused(sentence)
}

/// `error`, a refused handshake signature made with the key of `leaf`, in words (a key too
/// small for the verifiers is the usual cause).
pub(crate) fn refuse_signature(error: &rustls::Error, leaf: &CertificateDer<'_>) -> rustls::Error {
    let chain = Chain::parse(leaf, &[]);
    match chain.weak_key() {
        Some(sentence) => refused(sentence),
        None => match error {
            rustls::Error::InvalidCertificate(cert) => {
                refused(chain.sentence(cert, "the server's name", SystemTime::now()))
            }
            other => other.clone(),
        },
    }
}

/// What the TLS stack's `error` says, in words: a verifier's sentence as it wrote it, anything
/// else (an alert from the server, no protocol in common, plain text where TLS was expected)
/// explained.
pub(crate) fn describe(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            match inner.downcast_ref::<Refused>() {
                Some(refused) => refused.0.clone(),
                None => format!("certificate refused: {inner}"),
            }
        }
        // Every verifier here words its refusals; a bare one (from a verifier of an embedder's)
        // is worded without the chain.
        rustls::Error::InvalidCertificate(cert) => {
            Chain::default().sentence(cert, "the server's name", SystemTime::now())
        }
        rustls::Error::AlertReceived(alert) => format!(
            "the server ended the handshake with the alert \"{}\"",
            words(&format!("{alert:?}"))
        ),
        rustls::Error::PeerIncompatible(why) => format!(
            "the server and the probe have no TLS version or cipher in common ({}); the probe \
             speaks TLS 1.2 and 1.3",
            words(&format!("{why:?}"))
        ),
        rustls::Error::InvalidMessage(why) => format!(
            "the server did not answer in TLS ({}): is the port plain text?",
            words(&format!("{why:?}"))
        ),
        rustls::Error::PeerMisbehaved(why) => format!(
            "the server broke the TLS protocol ({})",
            words(&format!("{why:?}"))
        ),
        rustls::Error::General(text) => text.clone(),
        other => format!("TLS handshake: {other}"),
    }
}

/// `CamelCase` variant names (rustls's and webpki's) as lowercase words: `HandshakeFailure` is
/// "handshake failure". Only letters and digits are kept, so a variant's fields do not leak
/// through.
fn words(variant: &str) -> String {
    let name: String = variant
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// What a refusal's sentence needs to know of each certificate sent.
struct Certificate {
    subject: String,
    issuer: String,
    not_before: SystemTime,
    not_after: SystemTime,
    is_ca: bool,
    /// The signature algorithm's OID, dotted (`1.2.840.113549.1.1.5` is SHA-1 with RSA).
    signature: String,
    /// The key's size when it is an RSA key.
    rsa_bits: Option<usize>,
    /// The DNS names and IP addresses of its subjectAltName: the names it is for.
    names: Vec<String>,
}

/// The chain the server sent, the leaf first; certificates that cannot be parsed are left out.
#[derive(Default)]
struct Chain(Vec<Certificate>);

/// The OIDs of SHA-1 signatures (with RSA, with ECDSA): refused by webpki, by Go since 1.18 and by
/// browsers since 2017.
const SHA1_SIGNATURES: [&str; 2] = ["1.2.840.113549.1.1.5", "1.2.840.10045.4.1"];

impl Chain {
    fn parse(leaf: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> Self {
        Self(
            std::iter::once(leaf)
                .chain(intermediates)
                .filter_map(|der| {
                    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
                    Some(Certificate::of(&cert))
                })
                .collect(),
        )
    }

    fn leaf(&self) -> Option<&Certificate> {
        self.0.first()
    }

    /// The sentence for a refusal of this chain for `name` at `now`.
    fn sentence(&self, error: &CertificateError, name: &str, now: SystemTime) -> String {
        let sent = self.0.len();
        let leaf = || self.leaf().map(Certificate::facts);
        let (words, about) = match error {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                return self.first_out_of_date(now, true);
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                return self.first_out_of_date(now, false);
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                match self.leaf() {
                    Some(cert) if !cert.names.is_empty() => (
                        format!("certificate for {}, not {name}", cert.names.join(", ")),
                        leaf(),
                    ),
                    _ => (
                        format!(
                            "certificate names no host, so not {name}: it has no subjectAltName, \
                         and its common name alone is not read (as by Go and browsers)"
                        ),
                        leaf(),
                    ),
                }
            }
            CertificateError::UnknownIssuer => return self.untrusted(),
            CertificateError::BadSignature
            | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                if let Some(weak) = self.weak_key() {
                    return weak;
                }
                (
                    "a certificate of the chain is not signed by the key of its issuer".to_owned(),
                    leaf(),
                )
            }
            #[allow(deprecated)]
            CertificateError::UnsupportedSignatureAlgorithm
            | CertificateError::UnsupportedSignatureAlgorithmContext { .. } => {
                if let Some(sha1) = self.0.iter().find(|c| c.is_sha1()) {
                    (
                        "certificate signed with SHA-1, which is refused as forgeable (as by Go \
                         and browsers)"
                            .to_owned(),
                        Some(sha1.facts()),
                    )
                } else if let Some(weak) = self.weak_key() {
                    return weak;
                } else {
                    (
                        "a certificate of the chain is signed with an algorithm the probe does \
                         not accept"
                            .to_owned(),
                        leaf(),
                    )
                }
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => (
                "certificate not meant for TLS servers: its extended key usage lacks serverAuth"
                    .to_owned(),
                leaf(),
            ),
            CertificateError::Revoked => ("certificate revoked".to_owned(), leaf()),
            CertificateError::BadEncoding => (
                format!("the server sent a certificate that cannot be read ({sent} parsed)"),
                leaf(),
            ),
            CertificateError::Other(OtherError(inner)) => {
                match inner.downcast_ref::<webpki::Error>() {
                    // A self-signed one is not trusted at all: say that first.
                    Some(webpki::Error::CaUsedAsEndEntity)
                        if self.leaf().is_some_and(|l| l.subject == l.issuer) =>
                    {
                        return self.untrusted();
                    }
                    Some(webpki::Error::CaUsedAsEndEntity) => (
                        "the server's certificate is a CA certificate and is not among the \
                         trusted ones"
                            .to_owned(),
                        leaf(),
                    ),
                    Some(webpki::Error::EndEntityUsedAsCa) => (
                        "a certificate that is not a CA's issued another of the chain".to_owned(),
                        leaf(),
                    ),
                    Some(webpki::Error::UnsupportedCertVersion) => (
                        "a certificate of the chain is X.509 version 1 or 2; only version 3 is \
                         accepted"
                            .to_owned(),
                        leaf(),
                    ),
                    Some(other) => (
                        format!("certificate refused: {}", words(&format!("{other:?}"))),
                        leaf(),
                    ),
                    None => (format!("certificate refused: {inner}"), leaf()),
                }
            }
            other => (
                format!("certificate refused: {}", words(&format!("{other:?}"))),
                leaf(),
            ),
        };
        match about {
            Some(facts) => format!("{words} ({facts})"),
            None => words,
        }
    }

    /// The sentence for a chain with a certificate out of its dates: the leaf's own words when it
    /// is the leaf ("certificate expired"), which certificate of the chain otherwise.
    fn first_out_of_date(&self, now: SystemTime, expired: bool) -> String {
        let (what, state) = if expired {
            ("certificate expired", "expired")
        } else {
            ("certificate not yet valid", "not yet valid")
        };
        let out = self.0.iter().position(|c| {
            if expired {
                c.not_after < now
            } else {
                c.not_before > now
            }
        });
        match out {
            Some(0) | None => match self.leaf() {
                Some(leaf) => format!("{what} ({})", leaf.facts()),
                None => what.to_owned(),
            },
            Some(i) => format!(
                "the chain's certificate {} is {state} ({})",
                i + 1,
                self.0[i].facts()
            ),
        }
    }

    /// No trusted issuer: how many certificates came, and the likely cause.
    fn untrusted(&self) -> String {
        let sent = self.0.len();
        let plural = if sent == 1 { "" } else { "s" };
        let hint = match self.leaf() {
            Some(leaf) if leaf.subject == leaf.issuer => {
                format!("{}, self-signed: is it in the ca_file?", leaf.facts())
            }
            Some(leaf) if sent == 1 => format!(
                "{}, issued by {}; is an intermediate missing?",
                leaf.facts(),
                leaf.issuer
            ),
            Some(leaf) => format!("{}, issued by {}", leaf.facts(), leaf.issuer),
            None => "none could be read".to_owned(),
        };
        format!(
            "no certificate of the chain is signed by a trusted one (the server sent {sent} \
             certificate{plural}: {hint})"
        )
    }

    /// An RSA key under [`MIN_RSA_BITS`] in the chain, in words.
    fn weak_key(&self) -> Option<String> {
        let (i, cert, bits) = self
            .0
            .iter()
            .enumerate()
            .find_map(|(i, c)| Some((i, c, c.rsa_bits.filter(|&b| b < MIN_RSA_BITS)?)))?;
        let whose = if i == 0 {
            "the server's".to_owned()
        } else {
            format!("the chain's certificate {}'s", i + 1)
        };
        Some(format!(
            "{whose} RSA key is {bits} bits; keys under {MIN_RSA_BITS} bits are refused ({})",
            cert.facts()
        ))
    }
}

/// An IP address of a subjectAltName (4 or 16 bytes) as text.
fn ip_text(bytes: &[u8]) -> Option<String> {
    let ip = match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(ip.to_string())
}

impl Certificate {
    fn of(cert: &X509Certificate<'_>) -> Self {
        let validity = cert.validity();
        let rsa_bits = match cert.public_key().parsed() {
            Ok(PublicKey::RSA(rsa)) => Some(rsa.key_size()),
            _ => None,
        };
        let names = super::name::alt_names(cert)
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                GeneralName::IPAddress(ip) => ip_text(ip),
                _ => None,
            })
            .collect();
        Self {
            subject: super::name::go_form(cert.subject()),
            issuer: super::name::go_form(cert.issuer()),
            not_before: super::facts::unix(validity.not_before.timestamp()),
            not_after: super::facts::unix(validity.not_after.timestamp()),
            is_ca: cert.is_ca(),
            signature: cert.signature_algorithm.algorithm.to_id_string(),
            rsa_bits,
            names,
        }
    }

    fn is_sha1(&self) -> bool {
        SHA1_SIGNATURES.contains(&self.signature.as_str())
    }

    /// The subject and the dates, as a refusal names its certificate.
    fn facts(&self) -> String {
        format!(
            "{}{}, valid {} to {}",
            self.subject,
            if self.is_ca { ", a CA" } else { "" },
            humantime::format_rfc3339_seconds(self.not_before),
            humantime::format_rfc3339_seconds(self.not_after)
        )
    }
}

/// Checks a server certificate that is itself one of the trusted ones, as Go's `crypto/x509`
/// does (and so blackbox_exporter, Gatus and curl with `--cacert`): the certificate is its own
/// chain, also when it is marked `CA:TRUE` as `openssl req -x509` marks it. Its dates, its name
/// and its extended key usage are still checked.
pub(crate) fn verify_trusted_leaf(
    leaf: &CertificateDer<'_>,
    name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let parsed_leaf = rustls::server::ParsedCertificate::try_from(leaf)?;
    let refuse_with = |error: CertificateError| {
        Err(refuse(
            &rustls::Error::InvalidCertificate(error),
            leaf,
            &[],
            name,
            now,
        ))
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return refuse_with(CertificateError::BadEncoding);
    };
    let validity = cert.validity();
    let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if seconds > validity.not_after.timestamp() {
        return refuse_with(CertificateError::Expired);
    }
    if seconds < validity.not_before.timestamp() {
        return refuse_with(CertificateError::NotValidYet);
    }
    if let Err(rustls::Error::InvalidCertificate(error)) =
        rustls::client::verify_server_name(&parsed_leaf, name)
    {
        return refuse_with(error);
    }
    if let Ok(Some(usage)) = cert.extended_key_usage()
        && !usage.value.any
        && !usage.value.server_auth
    {
        return refuse_with(CertificateError::InvalidPurpose);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_become_words() {
        assert_eq!(words("HandshakeFailure"), "handshake failure");
        assert_eq!(words("InvalidContentType { x: 1 }"), "invalid content type");
        assert_eq!(words("CaUsedAsEndEntity"), "ca used as end entity");
    }

    #[test]
    fn a_sentence_travels_inside_the_rustls_error() {
        let error = refused("certificate for a, not b".to_owned());
        assert_eq!(describe(&error), "certificate for a, not b");
        assert_eq!(
            describe(&rustls::Error::AlertReceived(
                rustls::AlertDescription::HandshakeFailure
            )),
            "the server ended the handshake with the alert \"handshake failure\""
        );
    }
}
