//! The TLS tier: a handshake judged on the server's certificate, and the TLS pieces every tier
//! that speaks TLS shares (trust, and what a handshake shows: `facts`).
//!
//! A check resolves the address, connects (through the TCP tier's non-blocking connect), upgrades
//! a plain-text protocol first when the spec asks (`starttls`, or the steps of `before_tls`), and
//! completes a TLS handshake
//! under the spec's trust. The certificate's verification is the verdict: expired, not yet
//! valid, for another name or from an untrusted issuer fail as `tls`, and the detail names
//! which. A spec with a conversation then runs it over the TLS connection, as the TCP tier runs
//! one in the clear. A certificate that verifies is DEGRADED while the earliest expiry in its chain is
//! within `expires_within`, so the warning comes before the outage.
//!
//! Every check makes a full handshake (session resumption is off): a resumed session shows no
//! certificate. The connection is closed with a reset once the handshake is done, like the TCP
//! tier's, so checks leave no `TIME_WAIT` entries.

pub(crate) mod facts;
pub(crate) mod name;
pub(crate) mod refusal;
pub(crate) mod spec;
pub(crate) mod starttls;
pub(crate) mod trust;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::client::Resumption;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;

use crate::outcome::{CheckResult, Failure, FailureReason, Remarks, TlsFacts, Verdict};
use crate::tier::probe::Probe;
use crate::tier::resolve::Names;
use crate::tier::tcp::{CloseMode, connect_any, conversation, resolve};
use facts::Noting;
pub use spec::{InvalidServerName, StartTls, TlsSpec};
pub use trust::{CaBundle, InvalidCa, TlsTrust, client_config};

/// Probes a TLS server's certificate as its [`TlsSpec`] says.
pub struct TlsProbe {
    spec: TlsSpec,
    names: Names,
    /// The connector and its verifier; the set-up error (no usable trust store), reported by
    /// every check, otherwise.
    tls: Result<(TlsConnector, Arc<Noting>), Failure>,
}

impl TlsProbe {
    /// A probe for `spec`, resolving a host name through `names`.
    pub fn new(spec: TlsSpec, names: Names) -> Self {
        let tls = trust::noting_config(&spec.trust).map(|(mut config, noting)| {
            config.resumption = Resumption::disabled();
            (TlsConnector::from(Arc::new(config)), noting)
        });
        Self { spec, names, tls }
    }

    async fn run(&self, deadline: Instant, remarks: &mut Remarks) -> CheckResult {
        let (connector, noting) = match &self.tls {
            Ok(tls) => tls,
            Err(failure) => return CheckResult::failed(failure.clone()),
        };
        noting.forget();
        let handshake = self.handshake(connector, deadline, remarks).await;
        let facts = noting.facts();
        let verdict = match handshake {
            Err(failure) => Verdict::Failed(failure),
            Ok(()) => self.judge(facts.as_deref(), SystemTime::now()),
        };
        CheckResult {
            tls: facts,
            ..CheckResult::of(verdict)
        }
    }

    async fn handshake(
        &self,
        connector: &TlsConnector,
        deadline: Instant,
        remarks: &mut Remarks,
    ) -> Result<(), Failure> {
        let addrs = resolve(&self.spec.address, &self.names, deadline, remarks).await?;
        let nodelay = self.spec.starttls.is_some() || !self.spec.before_tls.is_empty();
        let mut stream = connect_any(&addrs, CloseMode::Reset, nodelay, deadline).await?;
        if let Some(protocol) = self.spec.starttls {
            starttls::upgrade(&mut stream, protocol, deadline).await?;
        }
        conversation(&self.spec.before_tls, &mut stream, deadline).await?;
        let name = self.spec.server_name().clone();
        match timeout_at(deadline, connector.connect(name, stream)).await {
            Err(_) => Err(Failure::new(
                FailureReason::Timeout,
                "TLS handshake timed out",
            )),
            Ok(Err(err)) => Err(handshake_failure(&err)),
            Ok(Ok(mut stream)) => {
                // Closed with a reset when dropped, whatever the conversation ended with.
                conversation(&self.spec.conversation, &mut stream, deadline).await
            }
        }
    }

    /// The verdict on a certificate that verified: DEGRADED while its chain expires soon.
    fn judge(&self, facts: Option<&TlsFacts>, now: SystemTime) -> Verdict {
        let (Some(within), Some(expiry)) = (
            self.spec.expires_within,
            facts.and_then(TlsFacts::earliest_expiry),
        ) else {
            return Verdict::Up;
        };
        let left = expiry.duration_since(now).unwrap_or(Duration::ZERO);
        if left > within {
            return Verdict::Up;
        }
        Verdict::Degraded(vec![format!(
            "a certificate of the chain expires in {} (at {}), within {}",
            humantime::format_duration(Duration::from_secs(left.as_secs())),
            humantime::format_rfc3339_seconds(expiry),
            humantime::format_duration(within)
        )])
    }
}

impl std::fmt::Debug for TlsProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsProbe")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// A failed handshake as a failure: a TLS error (a refused certificate, an alert) as `tls` in
/// words ([`refusal::describe`]), anything else (a reset) classified as I/O.
pub(crate) fn handshake_failure(err: &std::io::Error) -> Failure {
    match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => Failure::new(FailureReason::Tls, refusal::describe(tls)),
        None => Failure::io("TLS handshake", err),
    }
}

#[async_trait::async_trait]
impl Probe for TlsProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let mut remarks = Remarks::default();
        let mut result = self.run(Instant::now() + timeout, &mut remarks).await;
        result.remarks = remarks;
        result
    }
}
