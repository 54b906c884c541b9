//! What a handshake shows of the server: a certificate verifier that notes the chain it was
//! shown and the protocol version, around the verifier that decides.
//!
//! The chain is noted before it is judged, so a refused certificate (expired, for the wrong name,
//! from an unknown issuer) still reports its dates: the moment a certificate has expired is when
//! `probe_ssl_earliest_cert_expiry` matters most. The version is told by which signature check
//! the handshake asks for (TLS 1.2 and 1.3 each have their own), so the verifier learns it with
//! no access to the connection, which is what lets a pooled HTTPS client report it too.
//!
//! Only full handshakes call a verifier. The TLS tier turns session resumption off, so that every
//! check sees the certificate; a pooled HTTPS client keeps what its last full handshake showed.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use x509_parser::extensions::GeneralName;

use super::name::{alt_names, go_form};
use crate::outcome::{CertificateFacts, TlsFacts};

/// A verifier that notes what each handshake showed, then lets `inner` decide.
#[derive(Debug)]
pub(crate) struct Noting {
    inner: Arc<dyn ServerCertVerifier>,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The chain of the latest handshake, the leaf first.
    chain: Vec<CertificateDer<'static>>,
    version: Option<&'static str>,
    /// The facts last read from `chain` and `version`, shared until either changes: a pooled
    /// client reports the same facts run after run, and parsing certificates is not free.
    read: Option<Arc<TlsFacts>>,
}

impl Noting {
    pub(crate) fn new(inner: Arc<dyn ServerCertVerifier>) -> Self {
        Self {
            inner,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// What the latest full handshake showed; `None` before any.
    pub(crate) fn facts(&self) -> Option<Arc<TlsFacts>> {
        let mut seen = self.seen.lock();
        if seen.chain.is_empty() {
            return None;
        }
        if seen.read.is_none() {
            seen.read = Some(Arc::new(read(&seen.chain, seen.version)));
        }
        seen.read.clone()
    }

    /// Forgets the latest handshake, so that facts afterwards are those of a new one.
    pub(crate) fn forget(&self) {
        *self.seen.lock() = Seen::default();
    }

    fn version(&self, version: &'static str) {
        let mut seen = self.seen.lock();
        if seen.version != Some(version) {
            seen.version = Some(version);
            seen.read = None;
        }
    }
}

impl ServerCertVerifier for Noting {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        {
            let mut seen = self.seen.lock();
            let same = seen.chain.len() == intermediates.len() + 1
                && seen
                    .chain
                    .iter()
                    .zip(std::iter::once(end_entity).chain(intermediates))
                    .all(|(a, b)| a.as_ref() == b.as_ref());
            if !same {
                seen.chain = std::iter::once(end_entity)
                    .chain(intermediates)
                    .map(|c| c.clone().into_owned())
                    .collect();
                // Known once a signature is checked, after this.
                seen.version = None;
                seen.read = None;
            }
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.version("TLS 1.2");
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.version("TLS 1.3");
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// The facts of a chain; a certificate that cannot be parsed is left out (a verifier refuses it
/// anyway, and says so).
fn read(chain: &[CertificateDer<'_>], version: Option<&'static str>) -> TlsFacts {
    let mut facts = TlsFacts {
        version,
        ..TlsFacts::default()
    };
    for der in chain {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
            continue;
        };
        // The certificate `TlsFacts::leaf` names: the first one read.
        if facts.chain.is_empty() {
            let mut sha256 = [0; 32];
            sha256.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, der).as_ref());
            facts.leaf_sha256 = Some(sha256);
            facts.leaf_dns_names = alt_names(&cert)
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .collect();
        }
        let validity = cert.validity();
        facts.chain.push(CertificateFacts {
            subject: go_form(cert.subject()),
            issuer: go_form(cert.issuer()),
            not_before: unix(validity.not_before.timestamp()),
            not_after: unix(validity.not_after.timestamp()),
        });
    }
    facts
}

pub(crate) fn unix(seconds: i64) -> SystemTime {
    let magnitude = std::time::Duration::from_secs(seconds.unsigned_abs());
    if seconds >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}
