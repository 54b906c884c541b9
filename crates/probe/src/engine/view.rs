//! What the engine shows: copies of a target's health, its events, the readiness verdict, what
//! an apply changed, and why an operator request failed. Plain values, built from snapshots and
//! handed out; holding one holds no lock.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cluster::Placement;
use crate::graph::{NodeCheck, NodeKind};
use crate::health::policy::Schedule;
use crate::health::state::{Cause, HealthState, Pending, Quality};
use crate::outcome::{Failure, Outcome, Signal, TlsFacts};
use crate::passive::breaker::CircuitSnapshot;
use crate::passive::outlier::MemberStatus;
use crate::target::TargetId;

/// What [`Engine::apply`](super::Engine::apply) changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Targets that were not there before.
    pub added: Vec<TargetId>,
    /// Targets that are gone.
    pub removed: Vec<TargetId>,
    /// Targets whose spec changed: restarted in `PROBING`.
    pub changed: Vec<TargetId>,
    /// How many targets were left untouched.
    pub unchanged: usize,
}

impl Diff {
    /// Whether the apply changed nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// A page of the targets' statuses ([`Engine::listing_where`](super::Engine::listing_where)).
#[derive(Debug)]
pub struct Listed {
    /// The statuses kept, sorted by id.
    pub targets: Vec<Arc<TargetStatus>>,
    /// Whether another target after the last one would have been kept: the page is full and
    /// there is a next one.
    pub more: bool,
    /// How many targets the engine has.
    pub of: usize,
}

/// A copy of one target's health, as the API shows it.
#[derive(Clone, Debug)]
pub struct TargetStatus {
    /// The target's id.
    pub id: TargetId,
    /// Its probe's kind: one of [`ProbeSpec::KINDS`](crate::ProbeSpec::KINDS).
    pub kind: &'static str,
    /// The current state.
    pub state: HealthState,
    /// Whether the target is held in PROBING for flapping.
    pub flapping: bool,
    /// A change of verdict being confirmed (toward DOWN after a failure of an UP target, say);
    /// the state is the verdict in force until it completes.
    pub pending: Option<Pending>,
    /// The latest run, if any.
    pub last: Option<Outcome>,
    /// The latest failure with its detail, kept after later successes for diagnosis.
    pub last_failure: Option<Failure>,
    /// Why the latest run was degraded; empty when it was not.
    pub degraded_reasons: Vec<String>,
    /// The business signals of the latest run.
    pub signals: Vec<Signal>,
    /// What the latest run worked around to reach its verdict ([`Remarks::describe`]), e.g. a
    /// stale DNS answer used while the resolver failed.
    ///
    /// [`Remarks::describe`]: crate::outcome::Remarks::describe
    pub note: Option<String>,
    /// What the latest TLS handshake of its probe showed (certificates, version): the TLS tier's
    /// and HTTPS targets'. Kept from the last run that made one, so a server that stopped
    /// answering still shows the certificate it had.
    pub tls: Option<Arc<TlsFacts>>,
    /// The maintenance in force, if any.
    pub maintenance: Option<MaintenanceInfo>,
    /// Passing results in a row.
    pub consecutive_successes: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// State changes since the target was added.
    pub transitions: u64,
    /// When the current state began; `None` before the first verdict. In a cluster, when the
    /// member that decided it says it began.
    pub since: Option<SystemTime>,
    /// The target's schedule.
    pub schedule: Schedule,
    /// Recent results, oldest first; empty in listings.
    pub history: Vec<Outcome>,
    /// The dependency-graph score in `[0, 1]`; `None` while unknown.
    pub score: Option<f64>,
    /// Whether a critical dependency is DOWN. The target's own state is not affected: it keeps
    /// being probed, and alerts on it can be suppressed on this basis.
    pub dependency_down: bool,
    /// The target's standing in its pool ([`Topology::pools`](super::Topology::pools)): ejection, recovery phase and
    /// routing weight; `None` when it is in no pool. In several pools: the one that has it out,
    /// with its smallest weight.
    pub pool: Option<MemberStatus>,
    /// Its circuit breaker's state and figures; `None` without one.
    pub circuit: Option<CircuitSnapshot>,
    /// Its standing in a cluster (role, members, votes); `None` outside one.
    pub placement: Option<Placement>,
}

impl TargetStatus {
    /// Whether the target serves (UP or DEGRADED).
    pub fn healthy(&self) -> bool {
        self.state.is_healthy()
    }
}

/// Where a maintenance comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceSource {
    /// Set through the API (or restored from the daemon's state file).
    Operator,
    /// A window declared with the target.
    Window,
}

impl MaintenanceSource {
    /// The lowercase name used in the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Window => "window",
        }
    }
}

/// A maintenance in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceInfo {
    /// Why, as the operator said (or "scheduled window").
    pub reason: String,
    /// Who set it.
    pub source: MaintenanceSource,
    /// When it ends by itself (wall clock).
    pub until: SystemTime,
}

/// One state change, as broadcast to subscribers ([`Engine::subscribe`](super::Engine::subscribe)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The target or group that moved.
    pub target: TargetId,
    /// A target's verdict ([`NodeKind::Probed`]: its results moved it) or a group's (judged
    /// from its score, [`crate::graph::GroupRule`]).
    pub kind: NodeKind,
    /// The state before.
    pub from: HealthState,
    /// The state after.
    pub to: HealthState,
    /// Why it moved.
    pub cause: Cause,
    /// When (wall clock).
    pub at: SystemTime,
    /// The failure or maintenance reason behind it, when there is one.
    pub detail: Option<String>,
}

/// What the engine hands an embedder that keeps history ([`Engine::record_feed`]): every
/// transition, and every run that counts as the target's result.
///
/// [`Engine::record_feed`]: super::Engine::record_feed
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A state change, as [`Engine::subscribe`](super::Engine::subscribe) broadcasts it.
    Transition(Event),
    /// A target's runs, in the order they ended.
    Runs(Runs),
}

/// A target's runs, handed over together: a record per run was most of what keeping history
/// cost at 10k probes a second (the id's reference count moving between cores, a lookup per
/// run in the embedder's counts). A target hands its runs over once it holds 32 or its first is
/// 10 s old (tuning of the engine's own, not a promise), with a run that changed its state
/// (before the transition: an embedder's counts agree with it), when it leaves the engine, and
/// when the embedder asks ([`Engine::flush_runs`](super::Engine::flush_runs): before it closes
/// an hour, say). Each target's batches come in order; two targets' are not ordered.
///
/// The runs are kept packed, 12 bytes each where a [`Run`] takes 40: a target writes each run
/// into memory that ten thousand other targets' runs have pushed out of the cache since its
/// last, so a smaller run is fewer misses on the probing path. [`Runs::iter`] gives them back
/// as [`Run`]s, each end to the millisecond and each latency to the microsecond.
#[derive(Clone, Debug, PartialEq)]
pub struct Runs {
    /// The target probed.
    pub target: TargetId,
    /// Never empty: as the target held them.
    pub(crate) runs: HeldRuns,
}

impl Runs {
    /// The runs, oldest first; never none.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Run> + '_ {
        let &HeldRuns { first_ms, ref runs } = &self.runs;
        runs.iter().map(move |r| Run {
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(first_ms + u64::from(r.after_ms)),
            quality: r.quality,
            latency: Duration::from_micros(u64::from(r.latency_us)),
        })
    }
}

/// A run as a batch keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PackedRun {
    /// Milliseconds from the batch's first run's end to this one's (at most 49 days, more
    /// than a batch spans: it is handed over at the first run [`RUNS_HELD_FOR`] after its
    /// first).
    after_ms: u32,
    /// The latency in microseconds, up to 71 minutes (longer than any timeout).
    latency_us: u32,
    quality: Quality,
}

/// The runs a target holds for the record feed, packed, and then the [`Runs`] it hands over.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HeldRuns {
    /// When the first run ended, in whole milliseconds since the Unix epoch.
    first_ms: u64,
    /// Oldest first.
    runs: Vec<PackedRun>,
}

impl HeldRuns {
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// Makes room for `runs` more, when a batch starts.
    pub(crate) fn reserve_exact(&mut self, runs: usize) {
        self.runs.reserve_exact(runs);
    }

    /// Adds `run`, which ended no earlier than those held (a clock set back counts it as
    /// ending with the first).
    pub(crate) fn push(&mut self, run: &Run) {
        let at_ms = crate::outcome::unix_ms(run.at);
        if self.runs.is_empty() {
            self.first_ms = at_ms;
        }
        let saturate = |n: u128| u32::try_from(n).unwrap_or(u32::MAX);
        self.runs.push(PackedRun {
            after_ms: saturate(u128::from(at_ms.saturating_sub(self.first_ms))),
            latency_us: saturate(run.latency.as_micros()),
            quality: run.quality,
        });
    }
}

/// How busy an engine is ([`Engine::workload`](super::Engine::workload)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Worker tasks running probes now: the pool grows with the probes due and shrinks when
    /// they idle.
    pub workers: usize,
    /// Probes running now.
    pub in_flight: usize,
    /// The most probes that may run at once: `max_in_flight`, cut while the engine runs out of
    /// descriptors or ports and grown back after.
    pub in_flight_cap: usize,
    /// The local health multiplier: 0 while the engine keeps time, higher (up to its
    /// `max_multiplier`) as it wakes late, its timeouts stretched to `1 + lateness` times;
    /// `None` without self-health awareness.
    pub lateness: Option<u32>,
}

/// The most runs a target holds before it hands them over.
pub(crate) const RUNS_PER_BATCH: usize = 32;

/// The longest a target holds a run before it hands it over (at its next run past that age,
/// or at the embedder's [`Engine::flush_runs`](super::Engine::flush_runs)).
pub(crate) const RUNS_HELD_FOR: Duration = Duration::from_secs(10);

/// One run that counts as the target's result: not one the engine deferred as its own fault
/// (a timeout while it ran late, resolver trouble while the resolver is out), nor one that
/// found it out of a resource, since neither says anything of the target.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// When the run ended (wall clock).
    pub at: SystemTime,
    /// Whether it passed, cleanly or degraded, or failed.
    pub quality: Quality,
    /// How long it took.
    pub latency: Duration,
}

/// A change of this member's vote on a replicated target, for the cluster
/// ([`Cluster::subscribe_votes`](super::Cluster::subscribe_votes)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    /// The target.
    pub target: TargetId,
    /// What this member's own results say of it now.
    pub state: HealthState,
}

/// Why an operator request on a target could not be done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No target has this id.
    #[error("no target {:?}", .0.as_str())]
    UnknownTarget(TargetId),
    /// Ending maintenance of a target that is not in maintenance.
    #[error("target {:?} is not in maintenance", .0.as_str())]
    NotInMaintenance(TargetId),
    /// Commanding the circuit breaker of a target that has none.
    #[error("target {:?} has no circuit breaker", .0.as_str())]
    NoCircuitBreaker(TargetId),
    /// Clearing the ejection of a target that no pool has out.
    #[error("target {:?} is not ejected", .0.as_str())]
    NotEjected(TargetId),
}

/// The engine's readiness verdict.
///
/// Without a readiness policy: ready when every target is UP, DEGRADED or in MAINTENANCE, and
/// the counts are of targets. With one: ready when every required node passes (see
/// [`ReadinessLatch`](crate::graph::ReadinessLatch)), and the counts are of required nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// Whether the instance should receive traffic.
    pub ready: bool,
    /// Targets in the engine, or required nodes.
    pub total: usize,
    /// Targets that keep the engine ready (UP, DEGRADED or MAINTENANCE), or passing required
    /// nodes.
    pub healthy: usize,
    /// A short reason when not ready: up to five of the other targets, or why each failing
    /// required node fails.
    pub reason: Option<String>,
    /// Under a readiness policy, each required node's check; `None` without one, when every
    /// target is a check of its own (its state, in [`Engine::listing`](super::Engine::listing)).
    pub checks: Option<Arc<[NodeCheck]>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_runs_come_back_to_the_millisecond_and_the_microsecond() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_767_225_600_123_456_789);
        let mut held = HeldRuns::default();
        let mut push = |at, quality, latency| {
            held.push(&Run {
                at,
                quality,
                latency,
            });
        };
        push(t0, Quality::Good, Duration::from_nanos(1_234_567));
        push(
            t0 + Duration::from_millis(1_000),
            Quality::Degraded,
            Duration::from_secs(5),
        );
        // A clock set back: counted as ending with the first.
        push(
            t0 - Duration::from_secs(3),
            Quality::Failed,
            Duration::from_secs(3 * 3600),
        );
        assert_eq!(held.len(), 3);
        let runs = Runs {
            target: TargetId::new("db").unwrap(),
            runs: held,
        };
        let ms = |n: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(n);
        let got: Vec<Run> = runs.iter().collect();
        assert_eq!(
            got,
            [
                Run {
                    at: ms(1_767_225_600_123),
                    quality: Quality::Good,
                    latency: Duration::from_micros(1_234),
                },
                Run {
                    at: ms(1_767_225_601_123),
                    quality: Quality::Degraded,
                    latency: Duration::from_secs(5),
                },
                Run {
                    at: ms(1_767_225_600_123),
                    quality: Quality::Failed,
                    // Past what a latency can be: held at the most a run keeps.
                    latency: Duration::from_micros(u64::from(u32::MAX)),
                },
            ]
        );
    }
}
