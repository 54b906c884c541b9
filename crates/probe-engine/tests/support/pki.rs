//! Certificates for the TLS tests, made by rcgen: a CA (root or intermediate) written as PEM
//! files, and the certificates it signs, with the validity each case needs.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use time::OffsetDateTime;

/// A CA made by rcgen, written where `openssl` can sign with it.
pub struct Authority {
    /// What signs the certificates it issues.
    pub issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
    /// Its certificate, as a file.
    pub cert: PathBuf,
    /// Its key, as a file.
    pub key: PathBuf,
}

/// A server's certificate and key as files.
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Valid from `from_days` to `to_days` days from now.
pub fn dates(params: &mut CertificateParams, from_days: i64, to_days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now + time::Duration::days(from_days);
    params.not_after = now + time::Duration::days(to_days);
}

/// Writes a certificate and its key as `{name}.pem` and `{name}.key` in `dir`.
pub fn write(dir: &Path, name: &str, pem: &str, key: &KeyPair) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert, pem).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert, key_path)
}

impl Authority {
    /// A root CA valid for ten years, so that no case's verdict or expiry comes from it.
    pub fn root(dir: &Path, name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        dates(&mut params, -1, 3650);
        let cert = params.self_signed(&key).unwrap();
        let (cert_path, key_path) = write(dir, name, &cert.pem(), &key);
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            cert: cert_path,
            key: key_path,
        }
    }

    /// An intermediate CA it signs, valid from `from` to `to` days from now.
    pub fn intermediate(&self, dir: &Path, name: &str, from: i64, to: i64) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        dates(&mut params, from, to);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = write(dir, name, &cert.pem(), &key);
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            cert: cert_path,
            key: key_path,
        }
    }

    /// A server certificate for `names` (none: only the common name), valid from `from` to `to`
    /// days from now.
    pub fn leaf(
        &self,
        dir: &Path,
        file: &str,
        cn: &str,
        names: &[&str],
        from: i64,
        to: i64,
    ) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        dates(&mut params, from, to);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = write(dir, file, &cert.pem(), &key);
        Issued {
            cert: cert_path,
            key: key_path,
        }
    }

    /// A server certificate for localhost as `leaf` makes it, changed by `change` first.
    pub fn leaf_with(
        &self,
        dir: &Path,
        file: &str,
        change: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        dates(&mut params, -1, 90);
        change(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = write(dir, file, &cert.pem(), &key);
        Issued {
            cert: cert_path,
            key: key_path,
        }
    }
}
