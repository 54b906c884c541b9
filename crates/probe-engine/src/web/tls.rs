//! `tls_server_config`: the certificate, client authentication and protocol limits, as the rustls
//! server configurations of the two listeners.
//!
//! The keys mean what they mean to exporter-toolkit (Go's `crypto/tls`), with rustls under them.
//! Where rustls cannot do what a key asks, the key is refused at its position, with what it can
//! do instead, except for one case: `min_version: TLS10` or `TLS11` is taken as TLS 1.2, the
//! oldest version rustls speaks. A floor raised is stricter than the file asks, never weaker, and
//! refusing it would refuse most exporters' files.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use probe::tier::tls::CaBundle;
use probe_config::yaml::{Diags, Pos, Sp, one_of, quote};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
    SupportedCipherSuite, SupportedProtocolVersion,
};
use x509_parser::extensions::GeneralName;

use super::raw::RawTls;

/// The listeners' server configurations.
#[derive(Debug)]
pub struct Tls {
    /// The API's: HTTP/2 (unless `http2: false`) and HTTP/1.1 by ALPN.
    pub api: Arc<ServerConfig>,
    /// The gRPC health listener's: HTTP/2 only, as gRPC needs.
    pub grpc: Arc<ServerConfig>,
}

/// `client_auth_type`, as Go names its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientAuth {
    /// `NoClientCert`, the default: no certificate asked.
    None,
    /// `RequestClientCert`: asked for, neither required nor verified.
    Request,
    /// `RequireAnyClientCert`: required, not verified.
    RequireAny,
    /// `VerifyClientCertIfGiven`: verified against `client_ca_file` when given.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert`: required and verified.
    RequireAndVerify,
}

const CLIENT_AUTH: [(&str, ClientAuth); 6] = [
    ("NoClientCert", ClientAuth::None),
    ("RequestClientCert", ClientAuth::Request),
    ("RequireAnyClientCert", ClientAuth::RequireAny),
    // exporter-toolkit's older name for RequireAnyClientCert, still read.
    ("RequireClientCert", ClientAuth::RequireAny),
    ("VerifyClientCertIfGiven", ClientAuth::VerifyIfGiven),
    ("RequireAndVerifyClientCert", ClientAuth::RequireAndVerify),
];

/// The versions a file may name, oldest first, with the rustls version each stands for.
const VERSIONS: [(&str, Option<&SupportedProtocolVersion>); 4] = [
    ("TLS10", None),
    ("TLS11", None),
    ("TLS12", Some(&rustls::version::TLS12)),
    ("TLS13", Some(&rustls::version::TLS13)),
];

/// Go's curve names, with the ring provider's group for each it has.
const CURVES: [(&str, Option<rustls::NamedGroup>); 4] = [
    ("CurveP256", Some(rustls::NamedGroup::secp256r1)),
    ("CurveP384", Some(rustls::NamedGroup::secp384r1)),
    ("CurveP521", None),
    ("X25519", Some(rustls::NamedGroup::X25519)),
];

/// The TLS 1.3 suites Go names: Go does not let them be chosen, and takes them in a list without
/// complaint, so they are read and change nothing here either.
const TLS13_SUITES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// What the section says, checked, with the bytes of every file it names read.
pub(super) struct Settings {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// Where a key that does not fit the certificate is reported.
    key_pos: Pos,
    client: ClientAuth,
    roots: Option<RootCertStore>,
    allowed_sans: Vec<String>,
    versions: Vec<&'static SupportedProtocolVersion>,
    provider: CryptoProvider,
    prefer_server: bool,
}

/// What reading the section needs besides it: where relative paths start, and a record of each
/// file read (for the watch, and to tell a changed file from an unchanged one).
pub(super) struct Reader<'a> {
    pub(super) dir: &'a Path,
    pub(super) files: &'a mut Vec<PathBuf>,
    pub(super) content: &'a mut ring::digest::Context,
}

impl Reader<'_> {
    /// The bytes of `path` (relative to the web config's directory), or an error at `at`.
    fn read(&mut self, path: &Sp<String>, what: &str, diags: &mut Diags) -> Option<Vec<u8>> {
        let file = self.dir.join(path.value.trim());
        self.files.push(file.clone());
        match std::fs::read(&file) {
            Ok(bytes) => {
                self.content.update(&bytes);
                Some(bytes)
            }
            Err(e) => {
                diags.push((
                    path.pos,
                    format!(
                        "cannot read the {what} {}: {e}",
                        quote(&file.display().to_string())
                    ),
                ));
                None
            }
        }
    }

    /// The bytes of a PEM given in a file (`file_key`) or inline (`inline_key`), one of the two,
    /// with where it is and what to call it in an error.
    fn pem(
        &mut self,
        file: Option<&Sp<String>>,
        inline: Option<&Sp<String>>,
        (file_key, inline_key, what): (&str, &str, &str),
        diags: &mut Diags,
    ) -> Option<(Vec<u8>, Pos, String)> {
        match (file, inline) {
            (Some(_), Some(inline)) => {
                diags.push((
                    inline.key,
                    format!("{inline_key:?} and {file_key:?} are one or the other"),
                ));
                None
            }
            (Some(path), None) => self.read(path, what, diags).map(|b| {
                let label = quote(&self.dir.join(path.value.trim()).display().to_string());
                (b, path.pos, label)
            }),
            (None, Some(text)) => {
                self.content.update(text.value.as_bytes());
                Some((
                    text.value.clone().into_bytes(),
                    text.pos,
                    format!("{inline_key:?}"),
                ))
            }
            (None, None) => None,
        }
    }
}

/// Whether the section turns TLS on: exporter-toolkit serves plain HTTP for a section that
/// names no certificate, key or client authentication at all.
pub(super) fn turns_on(raw: &RawTls) -> bool {
    [
        &raw.cert_file,
        &raw.key_file,
        &raw.cert,
        &raw.key,
        &raw.client_ca_file,
        &raw.client_ca,
        &raw.client_auth_type,
    ]
    .iter()
    .any(|key| key.as_ref().is_some_and(|k| !k.value.trim().is_empty()))
}

/// Checks the section and reads its files; every problem goes to `diags`.
pub(super) fn settings(
    raw: &Sp<RawTls>,
    reader: &mut Reader<'_>,
    diags: &mut Diags,
) -> Option<Settings> {
    let section = &raw.value;
    let errors = diags.len();
    let cert = reader.pem(
        section.cert_file.as_ref(),
        section.cert.as_ref(),
        ("cert_file", "cert", "certificate file"),
        diags,
    );
    let key = reader.pem(
        section.key_file.as_ref(),
        section.key.as_ref(),
        ("key_file", "key", "key file"),
        diags,
    );
    if section.cert_file.is_none() && section.cert.is_none() {
        diags.push((raw.key, "TLS needs \"cert_file\" (or \"cert\")".to_owned()));
    }
    if section.key_file.is_none() && section.key.is_none() {
        diags.push((raw.key, "TLS needs \"key_file\" (or \"key\")".to_owned()));
    }
    let chain = cert.and_then(|(pem, pos, label)| {
        match CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>() {
            Ok(chain) if !chain.is_empty() => Some(chain),
            Ok(_) => {
                diags.push((pos, format!("no CERTIFICATE block in {label}")));
                None
            }
            Err(e) => {
                diags.push((pos, format!("{label} is not PEM: {e}")));
                None
            }
        }
    });
    let key = key.and_then(
        |(pem, pos, label)| match PrivateKeyDer::from_pem_slice(&pem) {
            Ok(key) => Some((key, pos)),
            Err(e) => {
                diags.push((pos, format!("no private key in {label}: {e}")));
                None
            }
        },
    );
    let client = match &section.client_auth_type {
        Some(raw) if !raw.value.trim().is_empty() => one_of(
            raw,
            "client_auth_type",
            "client_auth_type",
            CLIENT_AUTH.iter().map(|(name, _)| *name),
            diags,
        )
        .ok()
        .and_then(|name| CLIENT_AUTH.iter().find(|(n, _)| *n == name))
        .map(|(_, auth)| *auth),
        _ => Some(ClientAuth::None),
    };
    let ca = reader.pem(
        section.client_ca_file.as_ref(),
        section.client_ca.as_ref(),
        ("client_ca_file", "client_ca", "client CA file"),
        diags,
    );
    let ca_key = section
        .client_ca_file
        .as_ref()
        .or(section.client_ca.as_ref())
        .map(|k| k.key);
    let roots = ca.and_then(|(pem, pos, label)| match CaBundle::from_pem(&pem) {
        Ok(bundle) => {
            let mut roots = RootCertStore::empty();
            let (_added, _ignored) =
                roots.add_parsable_certificates(bundle.certificates().to_vec());
            Some(roots)
        }
        Err(e) => {
            diags.push((pos, format!("client CAs in {label}: {e}")));
            None
        }
    });
    let verifies = matches!(
        client,
        Some(ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify)
    );
    match (client, ca_key) {
        (Some(ClientAuth::None), Some(at)) => diags.push((
            at,
            "client CAs without a \"client_auth_type\" that verifies with them \
             (VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
                .to_owned(),
        )),
        (Some(_), None) if verifies => diags.push((
            section.client_auth_type.as_ref().map_or(raw.key, |k| k.pos),
            "this client_auth_type verifies client certificates, so it needs \
             \"client_ca_file\" (or \"client_ca\")"
                .to_owned(),
        )),
        _ => {}
    }
    let allowed_sans: Vec<String> = section
        .client_allowed_sans
        .as_ref()
        .map(|list| {
            list.value
                .0
                .iter()
                .map(|s| s.value.trim().to_owned())
                .collect()
        })
        .unwrap_or_default();
    if let Some(list) = &section.client_allowed_sans
        && !allowed_sans.is_empty()
        && !verifies
    {
        diags.push((
            list.key,
            "\"client_allowed_sans\" checks a verified client certificate, so it needs \
             client_auth_type VerifyClientCertIfGiven or RequireAndVerifyClientCert"
                .to_owned(),
        ));
    }
    let versions = versions(section, diags);
    let provider = provider(section, diags);
    if diags.len() > errors {
        return None;
    }
    let (key, key_pos) = key?;
    Some(Settings {
        chain: chain?,
        key,
        key_pos,
        client: client?,
        roots,
        allowed_sans,
        versions: versions?,
        provider: provider?,
        prefer_server: section
            .prefer_server_cipher_suites
            .as_ref()
            .is_none_or(|p| p.value),
    })
}

/// The versions between `min_version` (TLS 1.2 by default) and `max_version` (TLS 1.3).
fn versions(raw: &RawTls, diags: &mut Diags) -> Option<Vec<&'static SupportedProtocolVersion>> {
    let index = |key: &Option<Sp<String>>, default: usize, diags: &mut Diags| match key {
        Some(v) if !v.value.trim().is_empty() => one_of(
            v,
            "TLS version",
            "min_version/max_version",
            VERSIONS.iter().map(|(name, _)| *name),
            diags,
        )
        .ok()
        .and_then(|name| VERSIONS.iter().position(|(n, _)| *n == name)),
        _ => Some(default),
    };
    let min = index(&raw.min_version, 2, diags)?;
    let max = index(&raw.max_version, 3, diags)?;
    let pos = |key: &Option<Sp<String>>| key.as_ref().map_or(Pos::NONE, |k| k.pos);
    if max < 2 {
        diags.push((
            pos(&raw.max_version),
            "TLS 1.0 and 1.1 are not spoken here (they are deprecated): max_version must be \
             TLS12 or TLS13"
                .to_owned(),
        ));
        return None;
    }
    if min > max {
        diags.push((
            pos(&raw.min_version),
            "min_version is above max_version".to_owned(),
        ));
        return None;
    }
    if min < 2 {
        tracing::warn!(
            "web config: min_version {} is taken as TLS12: TLS 1.0 and 1.1 are not spoken here",
            VERSIONS[min].0
        );
    }
    Some(
        VERSIONS[min.max(2)..=max]
            .iter()
            .filter_map(|(_, version)| *version)
            .collect(),
    )
}

/// The ring provider with the TLS 1.2 suites of `cipher_suites` (in its order) and the groups of
/// `curve_preferences`, when they are given.
fn provider(raw: &RawTls, diags: &mut Diags) -> Option<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    let errors = diags.len();
    if let Some(list) = raw.cipher_suites.as_ref().filter(|l| !l.value.0.is_empty()) {
        let offered: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.tls13().is_none())
            .collect();
        let name = |s: &SupportedCipherSuite| s.suite().as_str().unwrap_or("?");
        let mut chosen: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.tls13().is_some())
            .collect();
        for suite in &list.value.0 {
            let wanted = suite.value.trim();
            // Go's older names of the ChaCha20 suites lack the hash.
            let found = offered.iter().find(|s| {
                let n = name(s);
                n == wanted || n.strip_suffix("_SHA256") == Some(wanted)
            });
            match found {
                Some(s) => chosen.push(*s),
                None if TLS13_SUITES.contains(&wanted) => {}
                None => diags.push((
                    suite.pos,
                    format!(
                        "cipher suite {} is not offered here (only AEAD suites with forward \
                         secrecy are); choose from {}",
                        quote(wanted),
                        offered.iter().map(name).collect::<Vec<_>>().join(", ")
                    ),
                )),
            }
        }
        provider.cipher_suites = chosen;
    }
    if let Some(list) = raw
        .curve_preferences
        .as_ref()
        .filter(|l| !l.value.0.is_empty())
    {
        let all = provider.kx_groups.clone();
        provider.kx_groups.clear();
        for curve in &list.value.0 {
            let Ok(name) = one_of(
                curve,
                "curve",
                "curve_preferences",
                CURVES.iter().map(|(n, _)| *n),
                diags,
            ) else {
                continue;
            };
            let group = CURVES
                .iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, g)| *g)
                .and_then(|g| all.iter().find(|k| k.name() == g));
            match group {
                Some(group) => provider.kx_groups.push(*group),
                None => diags.push((
                    curve.pos,
                    format!("{name} is not offered here; choose from CurveP256, CurveP384, X25519"),
                )),
            }
        }
    }
    (diags.len() == errors).then_some(provider)
}

impl Settings {
    /// Both listeners' configurations: the API's offers HTTP/2 by ALPN when `http2` says so,
    /// and HTTP/1.1; the gRPC listener's HTTP/2 alone.
    ///
    /// # Errors
    /// What rustls refuses (a key that does not match the certificate), located at the key.
    pub(super) fn build(&self, http2: bool) -> Result<Tls, (Pos, String)> {
        let api: &[&[u8]] = if http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        Ok(Tls {
            api: Arc::new(self.server_config(api)?),
            grpc: Arc::new(self.server_config(&[b"h2"])?),
        })
    }

    /// The server configuration with these ALPN protocols.
    fn server_config(&self, alpn: &[&[u8]]) -> Result<ServerConfig, (Pos, String)> {
        let at_key = |e: rustls::Error| (self.key_pos, format!("the certificate and key: {e}"));
        let provider = Arc::new(self.provider.clone());
        let algorithms = provider.signature_verification_algorithms;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.versions)
            .map_err(at_key)?;
        let verifier: Arc<dyn ClientCertVerifier> = match (self.client, &self.roots) {
            (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
            (ClientAuth::Request | ClientAuth::RequireAny, _) => Arc::new(AnyClientCert {
                mandatory: self.client == ClientAuth::RequireAny,
                algorithms,
            }),
            (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, Some(roots)) => {
                let builder =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots.clone()), provider);
                let builder = if self.client == ClientAuth::VerifyIfGiven {
                    builder.allow_unauthenticated()
                } else {
                    builder
                };
                let verifier = builder
                    .build()
                    .map_err(|e| (self.key_pos, format!("client CAs: {e}")))?;
                if self.allowed_sans.is_empty() {
                    verifier
                } else {
                    Arc::new(AllowedSans {
                        inner: verifier,
                        allowed: self.allowed_sans.clone(),
                    })
                }
            }
            // `settings` refuses a verifying type without CAs.
            (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, None) => {
                return Err((self.key_pos, "client CAs are missing".to_owned()));
            }
        };
        let mut config = builder
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(at_key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config.ignore_client_order = self.prefer_server;
        Ok(config)
    }
}

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked for (and, for the
/// second, required), and the client must prove it holds its key, but nothing vouches for it.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: a verified client certificate is accepted only when one of its subject
/// alternative names (DNS, e-mail, IP or URI) is in the list, as exporter-toolkit compares them:
/// exactly, no wildcards.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let refused = || rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        let (_, cert) = x509_parser::parse_x509_certificate(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let names = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .ok_or_else(refused)?;
        let allowed = names.value.general_names.iter().any(|name| {
            let text = match name {
                GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                    Some((*s).to_owned())
                }
                // 4 bytes for IPv4, 16 for IPv6.
                GeneralName::IPAddress(bytes) => <[u8; 4]>::try_from(*bytes)
                    .map(IpAddr::from)
                    .or_else(|_| <[u8; 16]>::try_from(*bytes).map(IpAddr::from))
                    .ok()
                    .map(|ip| ip.to_string()),
                _ => None,
            };
            text.is_some_and(|text| self.allowed.contains(&text))
        });
        if allowed {
            Ok(verified)
        } else {
            Err(refused())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
