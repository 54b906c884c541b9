//! Passive health in the engine: what real traffic says about targets, next to what probes say.
//!
//! - [`Pools::report`] takes a real call's outcome: it goes to the target's circuit breaker and
//!   to the outlier detection of each pool the target is in, and a failure of a healthy target
//!   re-probes it at once.
//! - [`Pools::pick`] chooses a pool member for one call, by weight (ejection, slow start,
//!   panic), skipping members whose circuit rejects the call; the [`Lease`] it returns reports
//!   the call's outcome when finished.
//! - An ejected member is held DOWN in its state machine (and so in the graph's scores) until its
//!   recovery readmits it; its active results are its recovery's passes and failures.
//! - A target with `skip_active_after` skips active runs while real traffic proves it healthy.
//!
//! Every ejection, recovery step, panic and circuit transition is logged once and counted
//! (`probe_ejections_total{target,reason}`); the gauges (`probe_target_weight`, `probe_ejected`,
//! `probe_circuit_state`) are written by [`Engine::encode_metrics`](super::Engine::encode_metrics).
//!
//! Picks take no lock: they read the pools' routing tables, which the hub republishes on every
//! pool event, and each member's state and circuit word from its seat.

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::effects::{Route, Seat, Seated, announce_circuit};
use super::shared::Inner;
use super::view::EngineError;
use crate::health::state::HealthState;
use crate::passive::breaker::{CircuitState, Permit};
use crate::passive::call::Call;
use crate::passive::outlier::Share;
use crate::passive::select::pick_index;
use crate::target::TargetId;
use crate::tier::spec::ProbeSpec;

/// How often pools make their time-driven changes (ends of ejections and cool-downs, success
/// rates, ramps): the detector's recommended period.
const POOL_TICK: Duration = Duration::from_secs(1);

/// Pools up to this size are drawn from with their weights on the stack.
const STACK_MEMBERS: usize = 64;

/// An operator's command to a target's circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitCommand {
    /// Reject every call until reset (a known-bad upstream, a migration).
    ForceOpen,
    /// Permit every call, still counting (a breaker misjudging a slow but healthy upstream).
    Disable,
    /// Back to closed with an empty window.
    Reset,
}

/// Passive health ([`Engine::pools`](super::Engine::pools)): what real traffic says of the
/// engine's targets, their pools and circuit breakers, and the choice of a member for a call.
#[derive(Clone, Copy)]
pub struct Pools<'a> {
    pub(super) inner: &'a Arc<Inner>,
}

impl Pools<'_> {
    /// Takes in what real traffic saw of a target (passive health):
    /// - its circuit breaker, if it has one, counts the call;
    /// - each pool it is in judges it, which may eject it (DOWN at once, before probes would
    ///   notice) or, while it is out, count towards its return;
    /// - a failure while the target is UP or DEGRADED re-probes it now, so the active verdict
    ///   follows within one probe rather than one interval.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`].
    pub fn report(&self, id: &TargetId, call: &Call) -> Result<(), EngineError> {
        report(self.inner, id, call)
    }

    /// Chooses a member of pool `group` for one call, leaving out `exclude` (the member a retry
    /// moves away from). Takes no lock: it reads the pool's published routing table.
    ///
    /// Members are drawn by weight: ejected members weigh nothing, returning ones ramp up
    /// through slow start, and in panic every member not ejected permanently weighs the same.
    /// Members that active probes hold DOWN are skipped too, unless that leaves none (a sick
    /// member beats failing every call). A member whose circuit rejects the call is skipped and
    /// the draw repeated.
    ///
    /// # Errors
    /// [`PickError::NotAPool`], or [`PickError::Unavailable`] when no member can take the call.
    pub fn pick(&self, group: &TargetId, exclude: &[TargetId]) -> Result<Lease, PickError> {
        pick(self.inner, group, exclude)
    }

    /// Applies an operator's command to a target's circuit breaker; returns the state it left.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`] or [`EngineError::NoCircuitBreaker`].
    pub fn command_circuit(
        &self,
        id: &TargetId,
        command: CircuitCommand,
    ) -> Result<CircuitState, EngineError> {
        command_circuit(self.inner, id, command)
    }

    /// An operator puts an ejected target back in its pools, permanent ejections included: it
    /// returns through slow start with its ejection history forgotten.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`] or [`EngineError::NotEjected`].
    pub fn clear_ejection(&self, id: &TargetId) -> Result<(), EngineError> {
        clear_ejection(self.inner, id)
    }

    /// Reports the outcomes a `gate::GateLayer` (feature `tower`) observes as calls to
    /// target `id`: the service behind the gate judged by its own traffic.
    pub fn reporter(&self, id: TargetId) -> Reporter {
        Reporter {
            inner: self.inner.clone(),
            id,
        }
    }
}

/// Why [`Pools::pick`] found no member to call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    /// The id is not a group declared as a pool.
    #[error("{:?} is not a pool", .0.as_str())]
    NotAPool(TargetId),
    /// Every member is ejected, excluded or behind a circuit that rejects the call: fail fast.
    #[error("no member of pool {:?} can take the call ({rejected} rejected by their circuit)", .group.as_str())]
    Unavailable {
        /// The pool.
        group: TargetId,
        /// Members whose circuit breaker rejected the call.
        rejected: usize,
        /// The soonest an open circuit turns half-open, when one is open.
        retry_after: Option<Duration>,
    },
}

/// A member chosen by [`Pools::pick`] for one call.
///
/// Finish it with the call's outcome ([`Lease::finish`]). Dropped unfinished (the call was
/// cancelled before it was sent), it gives back its circuit breaker's trial slot.
pub struct Lease {
    inner: Arc<Inner>,
    member: Arc<dyn Seated>,
    permit: Option<Permit>,
}

impl Lease {
    /// The member.
    pub fn id(&self) -> &TargetId {
        &self.member.seat().id
    }

    /// How the member is probed, where a client finds its address.
    pub fn probe(&self) -> &ProbeSpec {
        &self.member.seat().probe
    }

    /// Reports how the call ended, as [`Pools::report`] does.
    pub fn finish(mut self, call: &Call) {
        // Recorded: the permit is spent, not given back.
        self.permit = None;
        take_call(&self.inner, self.member.seat(), call);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let (Some(permit), Some(breaker)) = (self.permit.take(), &self.member.seat().breaker) {
            breaker.with(|b| b.release(permit));
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("id", self.id()).finish()
    }
}

/// See [`Pools::report`].
pub(super) fn report(inner: &Inner, id: &TargetId, call: &Call) -> Result<(), EngineError> {
    let target = inner.target(id)?;
    take_call(inner, target.seat(), call);
    Ok(())
}

fn take_call(inner: &Inner, seat: &Seat, call: &Call) {
    let id = &seat.id;
    let failed = call.outcome.is_failure();
    let now = Instant::now();
    if let Some(breaker) = &seat.breaker {
        let t = breaker.with(|b| b.record(call, now));
        announce_circuit(id, t);
    }
    seat.passive_call(failed);
    let healthy = seat.state().is_healthy();
    let moved = inner.hub().record_call(id, call, now);
    // Ejected by this very call: DOWN already, nothing for a re-probe to decide.
    let ejected = moved.iter().any(|(m, out)| m == id && *out);
    inner.sync_ejections(&moved);
    if failed && healthy && !ejected {
        tracing::debug!(target_id = %id, outcome = call.outcome.as_str(), "passive failure: re-probing now");
        inner.scheduler.expedite(id);
    }
}

/// See [`Pools::pick`].
pub(super) fn pick(
    inner: &Arc<Inner>,
    group: &TargetId,
    exclude: &[TargetId],
) -> Result<Lease, PickError> {
    let routes = inner.hub().routes();
    let route = routes
        .get(group)
        .ok_or_else(|| PickError::NotAPool(group.clone()))?;
    let n = route.members.len();
    let mut stack = [0.0; STACK_MEMBERS];
    let mut heap = Vec::new();
    let weights = if n <= STACK_MEMBERS {
        &mut stack[..n]
    } else {
        heap.resize(n, 0.0);
        &mut heap[..]
    };
    draw(inner, route, group, exclude, weights)
}

/// Draws a member of `route` by weight, skipping members whose circuit rejects the call.
fn draw(
    inner: &Arc<Inner>,
    route: &Route,
    group: &TargetId,
    exclude: &[TargetId],
    weights: &mut [f64],
) -> Result<Lease, PickError> {
    // Read the clock only if something needs it (a ramping member, a circuit to ask): it is a
    // good part of a pick's cost.
    let mut clock = None;
    let mut now = || *clock.get_or_insert_with(Instant::now);
    for (weight, (member, share)) in weights.iter_mut().zip(&route.members) {
        let seat = member.seat();
        *weight = if exclude.contains(&seat.id) {
            0.0
        } else {
            match share {
                Share::Fixed(weight) => *weight,
                Share::Ramp(_) => share.at(now()),
            }
        };
    }
    // Members that probes hold DOWN are skipped too, unless that leaves none (a sick member
    // beats failing every call); in panic health is ignored.
    if !route.panic {
        let down = |member: &Arc<dyn Seated>| member.seat().state() == HealthState::Down;
        let up_left = weights
            .iter()
            .zip(&route.members)
            .any(|(w, (member, _))| *w > 0.0 && !down(member));
        if up_left {
            for (weight, (member, _)) in weights.iter_mut().zip(&route.members) {
                if down(member) {
                    *weight = 0.0;
                }
            }
        }
    }
    let mut rejected = 0;
    let mut retry_after: Option<Duration> = None;
    let mut rng = rand::rng();
    while let Some(i) = pick_index(weights.iter().copied(), rng.random::<f64>()) {
        let member = &route.members[i].0;
        let permit = match &member.seat().breaker {
            None => None,
            Some(breaker) => match breaker.try_acquire(&mut now) {
                Ok(permit) => {
                    announce_circuit(&member.seat().id, permit.transition());
                    Some(permit)
                }
                Err(refusal) => {
                    rejected += 1;
                    retry_after = match (retry_after, refusal.retry_after) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    weights[i] = 0.0;
                    continue;
                }
            },
        };
        return Ok(Lease {
            inner: inner.clone(),
            member: member.clone(),
            permit,
        });
    }
    Err(PickError::Unavailable {
        group: group.clone(),
        rejected,
        retry_after,
    })
}

/// See [`Pools::command_circuit`].
pub(super) fn command_circuit(
    inner: &Inner,
    id: &TargetId,
    command: CircuitCommand,
) -> Result<CircuitState, EngineError> {
    let target = inner.target(id)?;
    let breaker = target
        .seat()
        .breaker
        .as_ref()
        .ok_or_else(|| EngineError::NoCircuitBreaker(id.clone()))?;
    let (t, state) = breaker.with(|breaker| {
        let t = match command {
            CircuitCommand::ForceOpen => breaker.force_open(),
            CircuitCommand::Disable => breaker.disable(),
            CircuitCommand::Reset => breaker.reset(),
        };
        (t, breaker.state())
    });
    announce_circuit(id, t);
    Ok(state)
}

/// See [`Pools::clear_ejection`].
pub(super) fn clear_ejection(inner: &Inner, id: &TargetId) -> Result<(), EngineError> {
    inner.target(id)?;
    let moved = inner
        .hub()
        .clear(id)
        .ok_or_else(|| EngineError::NotEjected(id.clone()))?;
    inner.sync_ejections(&moved);
    Ok(())
}

/// Makes the pools' time-driven changes every second until cancelled.
pub(super) async fn tick_pools(inner: Arc<Inner>, cancel: CancellationToken) {
    let mut ticks = tokio::time::interval(POOL_TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let moved = inner.hub().tick();
        inner.sync_ejections(&moved);
    }
}

/// Reports a service's own request outcomes as calls to one target: the gate's observer (with
/// the `tower` feature), or any server loop that sees its requests end.
#[derive(Clone)]
pub struct Reporter {
    pub(super) inner: Arc<Inner>,
    pub(super) id: TargetId,
}

impl Reporter {
    /// Reports one call; a target removed since has nothing left to judge, so that is ignored.
    pub fn report(&self, call: &Call) {
        let _ = report(&self.inner, &self.id, call);
    }
}

#[cfg(feature = "tower")]
impl crate::gate::ObserveRequests for Reporter {
    fn observe(&self, outcome: &crate::gate::RequestOutcome) {
        self.report(&match outcome.status {
            Some(status) => Call::http(status.as_u16(), outcome.latency),
            None => Call {
                outcome: crate::passive::call::CallOutcome::Reset,
                latency: outcome.latency,
            },
        });
    }
}
