//! Which TLS servers a probe trusts, and the rustls client configuration that says so: shared by
//! every tier that speaks TLS (HTTPS, the TLS certificate probe, gRPC).
//!
//! TLS is rustls with the pure-Rust `ring` provider, configured here and handed to each client,
//! so the library installs no process-wide crypto provider that an embedder might want to choose.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::facts::Noting;
use super::refusal;
use crate::outcome::{Failure, FailureReason};

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

/// The rustls configuration for `trust`, or one that trusts nothing when TLS is never used: for
/// the probes, and for an embedder's own clients that must trust what its probes trust (the
/// daemon's notification senders), built with the same `ring` provider.
///
/// # Errors
/// A [`Failure`] when the system's trust store cannot be read.
pub fn client_config(trust: Option<&TlsTrust>) -> Result<rustls::ClientConfig, Failure> {
    match trust {
        None => Ok(builder()?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth()),
        Some(trust) => with_verifier(verifier(trust)?),
    }
}

/// The rustls configuration for `trust`, with a verifier that notes what each handshake showed
/// of the server (see [`Noting`]).
pub(crate) fn noting_config(
    trust: &TlsTrust,
) -> Result<(rustls::ClientConfig, Arc<Noting>), Failure> {
    let noting = Arc::new(Noting::new(verifier(trust)?));
    Ok((with_verifier(noting.clone())?, noting))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn builder() -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, Failure>
{
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_failure)
}

fn with_verifier(verifier: Arc<dyn ServerCertVerifier>) -> Result<rustls::ClientConfig, Failure> {
    Ok(builder()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The verifier that decides whether a server is trusted: one per distinct trust, shared by
/// every probe that has it while any does.
///
/// A verifier holds its root store: with a private CA, the system's roots copied and the CA
/// added, about 90 KB. Built per probe, 10,000 targets naming the same `ca_file` held 10,000
/// copies (870 MiB); shared, they hold one. The cache keeps weak references, so a trust no
/// probe uses any more (a reload dropped it) is freed with its last probe.
fn verifier(trust: &TlsTrust) -> Result<Arc<dyn ServerCertVerifier>, Failure> {
    static SHARED: Mutex<Vec<(TlsTrust, Weak<dyn ServerCertVerifier>)>> = Mutex::new(Vec::new());
    let mut shared = SHARED.lock();
    if let Some(live) = shared
        .iter()
        .filter(|(known, _)| known == trust)
        .find_map(|(_, verifier)| verifier.upgrade())
    {
        return Ok(live);
    }
    let verifier = build_verifier(trust)?;
    shared.retain(|(_, verifier)| verifier.strong_count() > 0);
    shared.push((trust.clone(), Arc::downgrade(&verifier)));
    Ok(verifier)
}

fn build_verifier(trust: &TlsTrust) -> Result<Arc<dyn ServerCertVerifier>, Failure> {
    let roots = match trust {
        TlsTrust::InsecureSkipVerify => return Ok(Arc::new(SkipVerify(provider()))),
        TlsTrust::System => system_roots()?,
        TlsTrust::WithCa(ca) => {
            // Roots of a store already in use can be shared, not extended: copy them.
            let mut roots = match system_roots() {
                Ok(system) => RootCertStore::clone(&system),
                Err(_) => RootCertStore::empty(),
            };
            for cert in ca.certificates() {
                roots.add(cert.clone()).map_err(tls_failure)?;
            }
            Arc::new(roots)
        }
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(tls_failure)?;
    let own = match trust {
        TlsTrust::WithCa(ca) => ca.certs.clone(),
        _ => Arc::new([]),
    };
    Ok(Arc::new(Verifier { webpki, own }))
}

/// The verifier of [`TlsTrust::System`] and [`TlsTrust::WithCa`]: webpki's, with two changes
/// that make it agree with the verifiers users already trust (Go's `crypto/x509`, which
/// blackbox_exporter and Gatus use, and OpenSSL's, behind curl):
/// - A server certificate that is itself one of the `ca_file` certificates is trusted as its
///   own chain, also when it is marked `CA:TRUE` (`openssl req -x509` marks it so): the
///   commonest internal setup, which webpki refuses as a CA used as an end entity. Its dates,
///   name and key usage are still checked ([`refusal::verify_trusted_leaf`]).
/// - Every refusal is a sentence naming the certificate at fault ([`refusal::refuse`]).
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The `ca_file` certificates, to recognise a server certificate that is one of them.
    own: Arc<[CertificateDer<'static>]>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .own
            .iter()
            .any(|own| own.as_ref() == end_entity.as_ref())
        {
            refusal::verify_trusted_leaf(end_entity, server_name, now)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map_err(|e| refusal::refuse(&e, end_entity, intermediates, server_name, now))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki
            .verify_tls12_signature(message, cert, dss)
            .map_err(|e| refusal::refuse_signature(&e, cert))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki
            .verify_tls13_signature(message, cert, dss)
            .map_err(|e| refusal::refuse_signature(&e, cert))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The system's trust store, read once per process and shared by every probe.
///
/// A store holds about 150 certificates (~200 KiB parsed); 10 000 HTTPS targets each loading
/// their own would take seconds of CPU at every load and gigabytes of memory. The cost of sharing
/// is that a change to the system store is seen after a restart, as with most daemons.
fn system_roots() -> Result<Arc<RootCertStore>, Failure> {
    static ROOTS: OnceLock<Result<Arc<RootCertStore>, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(loaded.certs);
            if roots.is_empty() {
                let why = loaded
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_owned(), ToString::to_string);
                Err(format!(
                    "no CA certificates could be loaded from the system trust store ({why}); \
                     install the CA certificates or set tls.ca_file"
                ))
            } else {
                Ok(Arc::new(roots))
            }
        })
        .clone()
        .map_err(tls_failure)
}

/// Accepts any certificate for any name (`insecure_skip_verify`), but still checks that the
/// handshake is signed by the certificate's key, so the session is at least not trivially
/// tampered with.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_failure(detail: impl fmt::Display) -> Failure {
    Failure::new(FailureReason::Tls, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_of_the_same_trust_share_one_verifier_while_any_holds_it() {
        // A CA of this test's own, so that no other test holds its verifier.
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        let trust = TlsTrust::WithCa(CaBundle::from_pem(pem.as_bytes()).unwrap());
        let one = verifier(&trust).unwrap();
        let two = verifier(&trust).unwrap();
        assert!(Arc::ptr_eq(&one, &two));
        // The same CA read again (another target's ca_file) is the same trust.
        let again = TlsTrust::WithCa(CaBundle::from_pem(pem.as_bytes()).unwrap());
        assert!(Arc::ptr_eq(&one, &verifier(&again).unwrap()));
        let weak = Arc::downgrade(&one);
        drop((one, two));
        assert!(weak.upgrade().is_none(), "freed with its last probe");
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
