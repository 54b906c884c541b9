//! The JSON shapes of the API's answers, built from the engine's types.
//!
//! Their field names are a public contract, so they are declared here once, apart from the
//! handlers, and never derived from the library's types (a field renamed there must not rename
//! one here). Times are RFC 3339 with milliseconds; the engine's monotonic instants are turned
//! into wall-clock times on the way out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;

use probe::TargetId;
use probe::engine::{Listed, MaintenanceInfo, TargetStatus};
use probe::graph::{ChildExplanation, Edge, NodeKind, NodeStatus};
use probe::health::{HealthState, Pending};
use probe::outcome::{Outcome, Signal, TlsFacts};
use probe::passive::breaker::CircuitSnapshot;
use probe::passive::outlier::MemberStatus;
use probe::passive::recovery::RecoveryPhase;
use serde::Serialize;
use tokio::time::Instant;

/// `GET /v1/targets`'s body, `{"targets": [...]}`, put together from each target's serialised
/// view. A view is serialised again only when the engine hands out a new copy of the target's
/// status ([`Engine::listing`](probe::engine::Engine::listing)), so a listing of 10k targets
/// probed every second redoes the few that changed since the last request, not all of them.
#[derive(Default)]
pub(crate) struct ListingCache {
    fragments: Mutex<Fragments>,
    /// The last body's size, so the next one is allocated once.
    size: AtomicUsize,
}

/// Each target's serialised view, with the copy of its status it was made from.
type Fragments = HashMap<TargetId, (Arc<TargetStatus>, Vec<u8>)>;

impl ListingCache {
    /// The body for `listed`, a page of the engine's targets, with `next` the cursor of the page
    /// after it. Updated in place; the fragments of targets that left go once they outnumber
    /// the targets (a page leaves the others' fragments for the next request).
    pub(super) fn render(
        &self,
        listed: &Listed,
        next: Option<&TargetId>,
    ) -> serde_json::Result<Vec<u8>> {
        let mut fragments = self.fragments.lock();
        let mut body = Vec::with_capacity(self.size.load(Ordering::Relaxed));
        body.extend_from_slice(b"{\"targets\":[");
        for (i, status) in listed.targets.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            match fragments.get_mut(&status.id) {
                Some((copy, fragment)) if Arc::ptr_eq(copy, status) => {
                    body.extend_from_slice(fragment);
                }
                slot => {
                    let fragment = serde_json::to_vec(&TargetView::from(&**status))?;
                    body.extend_from_slice(&fragment);
                    match slot {
                        Some(slot) => *slot = (status.clone(), fragment),
                        None => {
                            fragments.insert(status.id.clone(), (status.clone(), fragment));
                        }
                    }
                }
            }
        }
        body.extend_from_slice(b"],\"next\":");
        serde_json::to_writer(&mut body, &next.map(TargetId::as_str))?;
        body.push(b'}');
        if fragments.len() > 2 * listed.of {
            // A copy held only here is no longer the engine's: no listing will hand it out again.
            fragments.retain(|_, (copy, _)| Arc::strong_count(copy) > 1);
        }
        self.size.store(body.len(), Ordering::Relaxed);
        Ok(body)
    }
}

/// One target with its recent results, oldest first.
#[derive(Serialize)]
pub(super) struct TargetDetail {
    #[serde(flatten)]
    target: TargetView,
    history: Vec<OutcomeView>,
}

impl From<&TargetStatus> for TargetDetail {
    fn from(status: &TargetStatus) -> Self {
        Self {
            target: TargetView::from(status),
            history: status.history.iter().map(OutcomeView::from).collect(),
        }
    }
}

/// One target as `/v1/targets` shows it. Field names are a public contract.
#[derive(Serialize)]
struct TargetView {
    id: String,
    /// The probe's kind (`tcp`, `http`, ...), what `?kind=` filters on.
    kind: &'static str,
    state: &'static str,
    healthy: bool,
    flapping: bool,
    /// A change of verdict being confirmed; `null` when the results agree with the state.
    pending: Option<PendingView>,
    last: Option<LastView>,
    last_failure: Option<FailureView>,
    degraded_reasons: Vec<String>,
    signals: Vec<SignalView>,
    maintenance: Option<MaintenanceView>,
    consecutive_successes: u32,
    consecutive_failures: u32,
    transitions: u64,
    /// When the current state began (RFC 3339); `null` before the first verdict.
    since: Option<String>,
    interval_ms: u128,
    timeout_ms: u128,
    /// The dependency-graph score; `null` while unknown.
    score: Option<f64>,
    dependency_down: bool,
    /// Its share of its pool's traffic in `[0, 1]`; `null` when it is in no pool.
    weight: Option<f64>,
    /// Whether a pool has it out.
    ejected: bool,
    /// The ejection and recovery while it is out; `null` otherwise.
    ejection: Option<EjectionView>,
    /// Its circuit breaker; `null` without one.
    circuit: Option<CircuitView>,
    /// What its probe's latest TLS handshake showed; `null` for a probe that makes none.
    tls: Option<TlsView>,
    /// In a cluster: the member that decides it (absent outside one).
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    /// In a cluster: what this member does with it (`decide`, `lead`, `vote`, `follow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// In a cluster: the members that probe it, its owner first.
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<Vec<String>>,
    /// In a cluster, for a target several members probe: each one's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    votes: Option<std::collections::BTreeMap<String, &'static str>>,
}

/// A server's certificates: the leaf's subject, issuer and end of validity, the days left before
/// the first certificate of the chain expires, and each certificate.
#[derive(Serialize)]
struct TlsView {
    /// `null` when the handshake ended before a version was agreed (a refused certificate).
    version: Option<&'static str>,
    subject: Option<String>,
    issuer: Option<String>,
    not_after: Option<String>,
    /// The earliest end of validity in the chain (`probe_ssl_earliest_cert_expiry`).
    earliest_expiry: Option<String>,
    /// Whole days until then (towards zero: 0 within a day either side), negative once past.
    days_left: Option<i64>,
    chain: Vec<CertificateView>,
}

#[derive(Serialize)]
struct CertificateView {
    subject: String,
    issuer: String,
    not_before: String,
    not_after: String,
}

impl TlsView {
    fn new(facts: &TlsFacts, now: SystemTime) -> Self {
        let leaf = facts.leaf();
        let earliest = facts.earliest_expiry();
        Self {
            version: facts.version,
            subject: leaf.map(|c| c.subject.clone()),
            issuer: leaf.map(|c| c.issuer.clone()),
            not_after: leaf.map(|c| rfc3339(c.not_after)),
            earliest_expiry: earliest.map(rfc3339),
            days_left: earliest.map(|at| days_between(now, at)),
            chain: facts
                .chain
                .iter()
                .map(|c| CertificateView {
                    subject: c.subject.clone(),
                    issuer: c.issuer.clone(),
                    not_before: rfc3339(c.not_before),
                    not_after: rfc3339(c.not_after),
                })
                .collect(),
        }
    }
}

/// Whole days from `now` to `at`, towards zero: negative once `at` has passed by a day.
fn days_between(now: SystemTime, at: SystemTime) -> i64 {
    const DAY: i64 = 86_400;
    let seconds = match at.duration_since(now) {
        Ok(ahead) => i64::try_from(ahead.as_secs()).unwrap_or(i64::MAX),
        Err(behind) => -i64::try_from(behind.duration().as_secs()).unwrap_or(i64::MAX),
    };
    seconds / DAY
}

/// A confirmation in progress, as HAProxy shows "UP 1/3".
#[derive(Serialize)]
struct PendingView {
    toward: &'static str,
    count: u32,
    of: u32,
}

impl From<Pending> for PendingView {
    fn from(p: Pending) -> Self {
        Self {
            toward: p.toward.as_str(),
            count: p.count,
            of: p.of,
        }
    }
}

#[derive(Serialize)]
struct EjectionView {
    /// `ejected`, `cooling_down`, `probation` or `permanent`.
    phase: &'static str,
    reason: Option<&'static str>,
    since: Option<String>,
    /// When the ejection time ends; `null` when permanent.
    until: Option<String>,
    times_ejected: Option<u32>,
    /// Passes counted so far on probation.
    passes: Option<u32>,
    permanent: bool,
}

#[derive(Serialize)]
struct CircuitView {
    /// `closed`, `open`, `half_open`, `forced_open` or `disabled`.
    state: &'static str,
    calls: u64,
    failures: u64,
    slow_calls: u64,
    failure_rate: f64,
    slow_call_rate: f64,
    open_until: Option<String>,
    reopens: u32,
}

/// The wall-clock time of an engine instant.
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    if at >= now {
        SystemTime::now() + (at - now)
    } else {
        SystemTime::now() - (now - at)
    }
}

impl From<&MemberStatus> for EjectionView {
    fn from(m: &MemberStatus) -> Self {
        let ejection = m.ejection.as_ref();
        Self {
            phase: m.phase.as_str(),
            reason: ejection.map(|e| e.reason.as_str()),
            since: ejection.map(|e| rfc3339(wall(e.since))),
            until: ejection.and_then(|e| e.until).map(|at| rfc3339(wall(at))),
            times_ejected: ejection.map(|e| e.times_ejected),
            passes: match m.phase {
                RecoveryPhase::Probation { passes } => Some(passes),
                _ => None,
            },
            permanent: matches!(m.phase, RecoveryPhase::Permanent(_)),
        }
    }
}

impl From<&CircuitSnapshot> for CircuitView {
    fn from(c: &CircuitSnapshot) -> Self {
        Self {
            state: c.state.as_str(),
            calls: c.calls,
            failures: c.failures,
            slow_calls: c.slow_calls,
            failure_rate: c.failure_rate,
            slow_call_rate: c.slow_call_rate,
            open_until: c.open_until.map(|at| rfc3339(wall(at))),
            reopens: c.reopens,
        }
    }
}

/// A graph node as `/v1/graph` and explanations show it. Field names are a public contract.
#[derive(Serialize)]
pub(super) struct NodeView {
    id: String,
    kind: &'static str,
    /// A target's state, a group's verdict (its rule's judgment of its score).
    state: Option<&'static str>,
    /// A group held in PROBING for flapping (a target's flag is in its listing).
    flapping: bool,
    /// `null` while unknown.
    score: Option<f64>,
    /// Whether the score is unknown: no results yet below the node.
    unknown: bool,
    dependency_down: bool,
}

#[derive(Serialize)]
pub(super) struct EdgeView {
    from: String,
    to: String,
    /// Normalised: a node's edges sum to 1.
    weight: f64,
    critical: bool,
}

#[derive(Serialize)]
pub(super) struct ChildView {
    #[serde(flatten)]
    node: NodeView,
    weight: f64,
    critical: bool,
    /// Critical and DOWN: this dependency caps the parent.
    caps: bool,
}

impl From<&NodeStatus> for NodeView {
    fn from(n: &NodeStatus) -> Self {
        Self {
            id: n.id.to_string(),
            kind: match n.kind {
                NodeKind::Probed => "target",
                NodeKind::Group => "group",
            },
            state: n.state.map(HealthState::as_str),
            flapping: n.flapping,
            score: n.score,
            unknown: n.score.is_none(),
            dependency_down: n.dependency_down,
        }
    }
}

impl From<&Edge> for EdgeView {
    fn from(e: &Edge) -> Self {
        Self {
            from: e.from.to_string(),
            to: e.to.to_string(),
            weight: e.weight,
            critical: e.critical,
        }
    }
}

impl From<&ChildExplanation> for ChildView {
    fn from(c: &ChildExplanation) -> Self {
        Self {
            node: NodeView::from(&c.node),
            weight: c.weight,
            critical: c.critical,
            caps: c.caps,
        }
    }
}

/// One recent result, as a target's detail and its history list them.
#[derive(Serialize)]
pub(super) struct OutcomeView {
    ok: bool,
    degraded: bool,
    latency_ms: f64,
    reason: Option<&'static str>,
    at: String,
}

/// The latest run: its outcome, and what the check worked around to reach it.
#[derive(Serialize)]
struct LastView {
    #[serde(flatten)]
    outcome: OutcomeView,
    note: Option<String>,
}

#[derive(Serialize)]
struct FailureView {
    reason: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct SignalView {
    name: String,
    severity: &'static str,
}

#[derive(Serialize)]
struct MaintenanceView {
    reason: String,
    source: &'static str,
    until: String,
}

impl From<&Outcome> for OutcomeView {
    fn from(o: &Outcome) -> Self {
        Self {
            ok: o.ok(),
            degraded: o.degraded(),
            latency_ms: o.latency().as_secs_f64() * 1000.0,
            reason: o.reason().map(|r| r.as_str()),
            at: rfc3339(o.at()),
        }
    }
}

impl From<&Signal> for SignalView {
    fn from(s: &Signal) -> Self {
        Self {
            name: s.name.to_string(),
            severity: s.severity.as_str(),
        }
    }
}

impl From<&MaintenanceInfo> for MaintenanceView {
    fn from(m: &MaintenanceInfo) -> Self {
        Self {
            reason: m.reason.clone(),
            source: m.source.as_str(),
            until: rfc3339(m.until),
        }
    }
}

impl From<&TargetStatus> for TargetView {
    fn from(s: &TargetStatus) -> Self {
        Self {
            id: s.id.to_string(),
            kind: s.kind,
            state: s.state.as_str(),
            healthy: s.healthy(),
            flapping: s.flapping,
            pending: s.pending.map(PendingView::from),
            last: s.last.as_ref().map(|o| LastView {
                outcome: OutcomeView::from(o),
                note: s.note.clone(),
            }),
            last_failure: s.last_failure.as_ref().map(|f| FailureView {
                reason: f.reason.as_str(),
                detail: f.detail.clone(),
            }),
            degraded_reasons: s.degraded_reasons.clone(),
            signals: s.signals.iter().map(SignalView::from).collect(),
            maintenance: s.maintenance.as_ref().map(MaintenanceView::from),
            consecutive_successes: s.consecutive_successes,
            consecutive_failures: s.consecutive_failures,
            transitions: s.transitions,
            since: s.since.map(rfc3339),
            interval_ms: s.schedule.interval().as_millis(),
            timeout_ms: s.schedule.timeout().as_millis(),
            score: s.score,
            dependency_down: s.dependency_down,
            weight: s.pool.as_ref().map(|m| m.weight),
            ejected: s.pool.as_ref().is_some_and(|m| m.ejected),
            ejection: s
                .pool
                .as_ref()
                .filter(|m| m.ejected)
                .map(EjectionView::from),
            circuit: s.circuit.as_ref().map(CircuitView::from),
            tls: s
                .tls
                .as_deref()
                .map(|facts| TlsView::new(facts, SystemTime::now())),
            owner: s
                .placement
                .as_ref()
                .and_then(|p| Some(p.owner()?.to_string())),
            role: s.placement.as_ref().map(|p| p.role.as_str()),
            replicas: s
                .placement
                .as_ref()
                .map(|p| p.members.iter().map(ToString::to_string).collect()),
            votes: s
                .placement
                .as_ref()
                .filter(|p| p.members.len() > 1)
                .map(|p| {
                    p.votes
                        .iter()
                        .map(|(m, v)| (m.to_string(), v.as_str()))
                        .collect()
                }),
        }
    }
}

/// A wall-clock time as the API shows it: RFC 3339, UTC, milliseconds.
pub(super) fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}
