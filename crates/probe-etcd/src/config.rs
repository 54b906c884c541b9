//! How to reach etcd and how often to re-read: [`SourceConfig`], checked once by
//! [`Source::new`](crate::Source::new).
//!
//! The struct is plain data with public fields so the daemon can fill it from its own flags or
//! YAML; every rule is checked in one place (when the source is built) and reported as a typed
//! [`Error`]. TLS files are read there too, so a wrong path fails at start-up rather than on the
//! first connection attempt, minutes into a retry loop.

use std::fmt;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use probe::health::ExponentialBackoff;

use crate::error::Error;

/// The prefix [`SourceConfig::new`] watches.
pub const DEFAULT_PREFIX: &str = "/probe-engine/targets/";

/// A user name and password for etcd's authentication.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The etcd user.
    pub username: String,
    /// Its password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    /// Never prints the password: configs end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// TLS towards etcd: PEM files, read once at start-up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed etcd's server certificate (and only it is trusted); `None` trusts the
    /// system's root certificates.
    pub ca_file: Option<PathBuf>,
    /// The client certificate and its key, for etcd's `--client-cert-auth`.
    pub client_cert: Option<ClientCert>,
    /// The name to verify in etcd's certificate when it differs from the endpoint's host
    /// (endpoints given as IP addresses, for one).
    pub domain: Option<String>,
}

/// A client certificate and its private key, both PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate (chain).
    pub cert_file: PathBuf,
    /// Its private key.
    pub key_file: PathBuf,
}

/// The reconnect backoff: delays double from `min` to `max` after each failed session, with
/// `jitter` spreading them (see [`ExponentialBackoff`]). The attempt count resets once a
/// session has synced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// The first delay.
    pub min: Duration,
    /// The cap.
    pub max: Duration,
    /// The spread, `0..=1`.
    pub jitter: f64,
}

impl Default for BackoffConfig {
    /// - `min`: 200 ms (a restarted etcd is back quickly);
    /// - `max`: 30 s (an outage is not worth more than one attempt per resync period);
    /// - `jitter`: 0.5 (daemons that lost etcd together do not return in lock-step).
    fn default() -> Self {
        Self {
            min: Duration::from_millis(200),
            max: Duration::from_secs(30),
            jitter: 0.5,
        }
    }
}

/// Where and how to sync. Build it with [`SourceConfig::new`] and change the fields needed.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceConfig {
    /// etcd client URLs: `http://host:port`, `https://host:port`, or `host:port` (https when
    /// [`tls`](Self::tls) is set, http otherwise).
    pub endpoints: Vec<String>,
    /// The key prefix; each key under it is one entry named by the rest of the key.
    pub prefix: String,
    /// etcd authentication, when enabled on the cluster.
    pub credentials: Option<Credentials>,
    /// TLS, when etcd serves https.
    pub tls: Option<TlsFiles>,
    /// How often the whole prefix is read again and replaces the content, a safety net that
    /// repairs any drift between the watched content and etcd.
    pub resync_period: Duration,
    /// The bound on establishing a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// The bound on each call: a range page, creating a watch, authenticating.
    pub request_timeout: Duration,
    /// The HTTP/2 ping period while the connection is idle. A ping unanswered within
    /// `request_timeout` closes the connection, so a dead etcd (no RST, a partition) is noticed
    /// within `keep_alive + request_timeout` even when nothing changes.
    pub keep_alive: Duration,
    /// Keys per range page, so a large prefix never hits gRPC's message size limit.
    pub page_size: NonZeroU32,
    /// The reconnect backoff.
    pub backoff: BackoffConfig,
}

impl SourceConfig {
    /// A configuration for these endpoints, with:
    /// - `prefix`: [`DEFAULT_PREFIX`] (`/probe-engine/targets/`);
    /// - no credentials, no TLS;
    /// - `resync_period`: 30 s;
    /// - `connect_timeout`: 3 s;
    /// - `request_timeout`: 5 s;
    /// - `keep_alive`: 10 s;
    /// - `page_size`: 1000 keys;
    /// - `backoff`: [`BackoffConfig::default`].
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            credentials: None,
            tls: None,
            resync_period: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(10),
            page_size: NonZeroU32::new(1000).unwrap_or(NonZeroU32::MIN),
            backoff: BackoffConfig::default(),
        }
    }

    /// A client with these endpoints, credentials, TLS and timeouts (the prefix plays no part):
    /// for what else talks to the same etcd, such as a cluster's membership.
    ///
    /// # Errors
    /// An invalid configuration, or no endpoint answering within `connect_timeout`.
    pub async fn connect(&self) -> Result<etcd_client::Client, Error> {
        let validated = self.validate()?;
        let connect =
            etcd_client::Client::connect(&validated.endpoints, Some(validated.connect_options()));
        match tokio::time::timeout(
            validated.connect_timeout + validated.request_timeout,
            connect,
        )
        .await
        {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(source)) => Err(Error::Etcd {
                op: crate::Operation::Connect,
                source,
            }),
            Err(_) => Err(Error::Timeout {
                op: crate::Operation::Connect,
                timeout: validated.connect_timeout + validated.request_timeout,
            }),
        }
    }

    /// Checks every rule (listed on [`Source::new`](crate::Source::new)) and reads the TLS
    /// files.
    pub(crate) fn validate(&self) -> Result<Validated, Error> {
        if self.endpoints.is_empty() {
            return Err(Error::NoEndpoints);
        }
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            if endpoint.trim().is_empty() {
                return Err(Error::EmptyEndpoint { index });
            }
            if self.tls.is_some() && endpoint.starts_with("http://") {
                return Err(Error::PlainEndpointWithTls {
                    endpoint: endpoint.clone(),
                });
            }
        }
        if self.prefix.is_empty() {
            return Err(Error::EmptyPrefix);
        }
        for (name, value) in [
            ("resync_period", self.resync_period),
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("keep_alive", self.keep_alive),
        ] {
            if value.is_zero() {
                return Err(Error::ZeroDuration { name });
            }
        }
        let backoff =
            ExponentialBackoff::try_new(self.backoff.min, self.backoff.max, self.backoff.jitter)?;
        let tls = self.tls.as_ref().map(read_tls).transpose()?;
        Ok(Validated {
            endpoints: self.endpoints.clone(),
            prefix: self.prefix.clone().into_bytes(),
            credentials: self.credentials.clone(),
            tls,
            resync_period: self.resync_period,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            keep_alive: self.keep_alive,
            page_size: i64::from(self.page_size.get()),
            backoff,
        })
    }
}

/// A checked configuration, with the TLS material loaded.
#[derive(Clone, Debug)]
pub(crate) struct Validated {
    pub endpoints: Vec<String>,
    pub prefix: Vec<u8>,
    pub credentials: Option<Credentials>,
    pub tls: Option<etcd_client::TlsOptions>,
    pub resync_period: Duration,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub keep_alive: Duration,
    pub page_size: i64,
    pub backoff: ExponentialBackoff,
}

impl Validated {
    /// The options every connection of the session uses. Per-call bounds are applied by the
    /// caller (see `Session::call`), not by tonic: its request timeout would also cut the
    /// long-lived watch stream.
    pub fn connect_options(&self) -> etcd_client::ConnectOptions {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(self.keep_alive, self.request_timeout)
            .with_keep_alive_while_idle(true)
            // A member cut off from its cluster's leader would keep a watch open and silent;
            // with this, etcd cancels the watch and the source reconnects (to another endpoint
            // when there is one).
            .with_require_leader(true);
        if let Some(c) = &self.credentials {
            // etcd's auth tokens expire (5 minutes by default); refresh them transparently.
            options = options
                .with_user(c.username.clone(), c.password.clone())
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        options
    }
}

fn read_tls(files: &TlsFiles) -> Result<etcd_client::TlsOptions, Error> {
    let read = |what: &'static str, path: &PathBuf| {
        std::fs::read(path).map_err(|source| Error::TlsFile {
            what,
            path: path.clone(),
            source,
        })
    };
    let mut tls = etcd_client::TlsOptions::new();
    tls = match &files.ca_file {
        Some(ca) => tls.ca_certificate(etcd_client::Certificate::from_pem(read(
            "CA certificate",
            ca,
        )?)),
        None => tls.with_native_roots(),
    };
    if let Some(client) = &files.client_cert {
        let cert = read("client certificate", &client.cert_file)?;
        let key = read("client key", &client.key_file)?;
        tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
    }
    if let Some(domain) = &files.domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = SourceConfig::new(["127.0.0.1:2379"]);
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        assert_eq!(config.resync_period, Duration::from_secs(30));
        let valid = config.validate().unwrap();
        assert_eq!(valid.prefix, b"/probe-engine/targets/");
    }

    #[test]
    fn rejects_each_invalid_field() {
        let base = SourceConfig::new(["127.0.0.1:2379"]);
        let check = |f: &dyn Fn(&mut SourceConfig)| {
            let mut c = base.clone();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(matches!(
            check(&|c| c.endpoints.clear()),
            Error::NoEndpoints
        ));
        assert!(matches!(
            check(&|c| c.endpoints.push(" ".into())),
            Error::EmptyEndpoint { index: 1 }
        ));
        assert!(matches!(check(&|c| c.prefix.clear()), Error::EmptyPrefix));
        assert!(matches!(
            check(&|c| c.resync_period = Duration::ZERO),
            Error::ZeroDuration {
                name: "resync_period"
            }
        ));
        assert!(matches!(
            check(&|c| c.backoff.min = Duration::from_secs(60)),
            Error::Backoff(_)
        ));
        assert!(matches!(
            check(&|c| {
                c.endpoints = vec!["http://127.0.0.1:2379".into()];
                c.tls = Some(TlsFiles::default());
            }),
            Error::PlainEndpointWithTls { .. }
        ));
        let err = check(&|c| {
            c.tls = Some(TlsFiles {
                ca_file: Some("/nonexistent/ca.pem".into()),
                ..TlsFiles::default()
            });
        });
        assert!(
            matches!(
                err,
                Error::TlsFile {
                    what: "CA certificate",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let c = Credentials {
            username: "probe".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("probe") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
