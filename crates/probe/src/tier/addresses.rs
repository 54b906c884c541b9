//! Every address a name resolves to: `addresses: any | all`.
//!
//! A name with several addresses (A and AAAA records, a DNS load-balanced service) is, by
//! default, probed at the first address that connects, as a client would connect: one bad
//! record stays invisible until a client is sent to it. With `any` or `all`, each run resolves
//! the name and probes every address in parallel, under the run's one deadline, with a probe of
//! its own per address (so a kept-alive connection is kept per address): `any` passes when one
//! address passes, `all` only when every one does, and its failure names each failing address.
//!
//! A per-address probe is the target's own probe built with a resolver pinned to that address
//! ([`Names::pinned`]): it connects there and keeps the name for everything else (SNI and the
//! certificate check, the `Host` header, the gRPC authority).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::outcome::{CheckResult, Failure, FailureReason, Remarks, Verdict};
use crate::target::Addresses;
use crate::tier::lookup;
use crate::tier::probe::Probe;
use crate::tier::resolve::Names;

/// Builds the probe of one address, given a resolver pinned to it.
pub(crate) type PerAddress = Box<dyn Fn(&Names) -> Arc<dyn Probe> + Send + Sync>;

/// The most addresses of one name probed by a check: a bound on the sockets one target holds.
pub const MAX_ADDRESSES: usize = 16;

/// Probes each address of `host` with a probe `make` builds for it.
pub(crate) struct EachAddress {
    make: PerAddress,
    host: String,
    names: Names,
    all: bool,
    /// The per-address probes of the latest run, kept while their address resolves.
    probes: Mutex<Vec<(IpAddr, Arc<dyn Probe>)>>,
}

impl EachAddress {
    /// `policy` is `Any` or `All`.
    pub(crate) fn new(make: PerAddress, host: String, names: Names, policy: Addresses) -> Self {
        Self {
            make,
            host,
            names,
            all: policy == Addresses::All,
            probes: Mutex::new(Vec::new()),
        }
    }

    /// The probes for `addrs`: those of the last run for addresses still there, new ones for
    /// the others.
    fn probes_for(&self, addrs: &[IpAddr]) -> Vec<(IpAddr, Arc<dyn Probe>)> {
        let mut kept = self.probes.lock();
        let probes: Vec<_> = addrs
            .iter()
            .map(|ip| {
                let probe = kept.iter().find(|(known, _)| known == ip).map_or_else(
                    || (self.make)(&self.names.pinned(*ip)),
                    |(_, probe)| probe.clone(),
                );
                (*ip, probe)
            })
            .collect();
        kept.clone_from(&probes);
        probes
    }

    fn combine(&self, results: Vec<(IpAddr, CheckResult)>, remarks: Remarks) -> CheckResult {
        let mut combined = CheckResult::up();
        combined.remarks = remarks;
        let mut failed: Vec<(IpAddr, Failure)> = Vec::new();
        let mut degraded: Vec<String> = Vec::new();
        let (mut passed, mut degraded_addresses) = (0, 0);
        for (ip, result) in results {
            combined.remarks.stale_connection_retried |= result.remarks.stale_connection_retried;
            for signal in result.signals {
                if !combined.signals.contains(&signal) {
                    combined.signals.push(signal);
                }
            }
            // The facts of the certificate that expires first: the one to be warned about.
            let earlier = |facts: &crate::outcome::TlsFacts| {
                combined
                    .tls
                    .as_ref()
                    .is_none_or(|seen| facts.earliest_expiry() < seen.earliest_expiry())
            };
            if let Some(facts) = result.tls.filter(|f| earlier(f)) {
                combined.tls = Some(facts);
            }
            match result.verdict {
                Verdict::Up => passed += 1,
                Verdict::Degraded(reasons) => {
                    passed += 1;
                    degraded_addresses += 1;
                    degraded.extend(reasons.into_iter().map(|r| format!("{ip}: {r}")));
                }
                Verdict::Failed(failure) => failed.push((ip, failure)),
            }
        }
        // The engine's own resource fault is the run's, whatever the other addresses said.
        if let Some((_, exhausted)) = failed
            .iter()
            .find(|(_, f)| matches!(f.reason, FailureReason::Exhausted(_)))
        {
            combined.verdict = Verdict::Failed(exhausted.clone());
            return combined;
        }
        let total = passed + failed.len();
        // In address order, not the resolver's (which may rotate): the same failure reads the
        // same from one run to the next.
        failed.sort_by_key(|(ip, _)| *ip);
        combined.verdict = match (self.all, passed, failed.first()) {
            // `any` with a passing address, or `all` with none failing.
            (false, 1.., _) | (true, _, None) => {
                // `any` is as good as its best address, `all` as its worst.
                if degraded_addresses == 0 || (!self.all && passed > degraded_addresses) {
                    Verdict::Up
                } else {
                    Verdict::Degraded(degraded)
                }
            }
            (_, _, Some((_, first))) => {
                let each: Vec<String> = failed
                    .iter()
                    .map(|(ip, f)| format!("{ip}: {}: {}", f.reason, f.detail))
                    .collect();
                let what = if failed.len() == total {
                    format!("every address of {} failed", self.host)
                } else {
                    format!(
                        "{} of {total} addresses of {} failed",
                        failed.len(),
                        self.host
                    )
                };
                Verdict::Failed(Failure::new(
                    first.reason,
                    format_args!("{what}: {}", each.join("; ")),
                ))
            }
            (false, 0, None) => Verdict::Failed(Failure::new(
                FailureReason::Dns,
                format_args!("{} resolved to no address", self.host),
            )),
        };
        combined
    }
}

#[async_trait::async_trait]
impl Probe for EachAddress {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let deadline = Instant::now() + timeout;
        let mut remarks = Remarks::default();
        let resolved =
            match lookup::addresses(&self.names, &self.host, deadline, &mut remarks).await {
                Ok(addrs) => addrs,
                Err(failure) => {
                    return CheckResult {
                        remarks,
                        ..CheckResult::failed(failure)
                    };
                }
            };
        let addrs = &resolved[..resolved.len().min(MAX_ADDRESSES)];
        let probes = self.probes_for(addrs);
        let left = deadline.saturating_duration_since(Instant::now());
        let results = futures_util::future::join_all(
            probes
                .iter()
                .map(|(ip, probe)| async move { (*ip, probe.check(left).await) }),
        )
        .await;
        self.combine(results, remarks)
    }
}

impl std::fmt::Debug for EachAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EachAddress")
            .field("host", &self.host)
            .field("all", &self.all)
            .finish_non_exhaustive()
    }
}
