//! Certificates made for a test: a CA, and server certificates it signs with the names and
//! validity a case needs. Shared by test files that use only some of it.
#![allow(dead_code)]

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration, OffsetDateTime};

/// A test CA.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate.
    pub cert: CertificateDer<'static>,
    /// Its certificate, PEM-encoded (a `ca_file`).
    pub pem: String,
    /// Its certificate's end of validity.
    pub not_after: OffsetDateTime,
}

/// A server's certificate and key, and the chain it sends.
pub struct Leaf {
    /// The chain the server sends: the leaf, then its CA (and any extra certificate).
    pub chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// The leaf's end of validity.
    pub not_after: OffsetDateTime,
}

impl Ca {
    /// A CA named `name`, valid from a day ago for `days`.
    pub fn new(name: &str, days: i64) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(days);
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            pem: cert.pem(),
            cert: cert.der().clone(),
            not_after: params.not_after,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses), valid from `from` to `to` days
    /// from now (negative: in the past).
    pub fn leaf(&self, names: &[&str], from: i64, to: i64) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let now = OffsetDateTime::now_utc();
        params.not_before = now + Duration::days(from);
        params.not_after = now + Duration::days(to);
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Leaf {
            chain: vec![cert.der().clone(), self.cert.clone()],
            key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            not_after: params.not_after,
        }
    }
}

impl Leaf {
    /// A rustls server configuration that presents this certificate.
    pub fn server(&self) -> Arc<rustls::ServerConfig> {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(self.chain.clone(), self.key.clone_key())
        .expect("server config");
        Arc::new(config)
    }
}

/// A TLS server on `listener` presenting `config`'s certificate: it completes the handshake of
/// each connection (a client that refuses the certificate resets it: that is the case tested)
/// and closes it.
pub fn serve(listener: tokio::net::TcpListener, config: Arc<rustls::ServerConfig>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(stream).await;
            });
        }
    });
}
