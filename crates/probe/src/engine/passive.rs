//! Passive health in the engine: what real traffic says about targets, next to what probes say.
//!
//! - [`Engine::report`] takes a real call's outcome: it goes to the target's circuit breaker and
//!   to the outlier detection of each pool the target is in, and a failure of a healthy target
//!   re-probes it at once.
//! - [`Engine::pick`] chooses a pool member for one call, by weight (ejection, slow start,
//!   panic), skipping members whose circuit rejects the call; the [`Lease`] it returns reports
//!   the call's outcome when finished.
//! - An ejected member is held DOWN in its state machine (and so in the graph's scores) until its
//!   recovery readmits it; its active results are its recovery's passes and failures.
//! - A target with `skip_active_after` skips active runs while real traffic proves it healthy.
//!
//! Every ejection, recovery step, panic and circuit transition is logged once and counted
//! (`probe_ejections_total{target,reason}`); the gauges (`probe_target_weight`, `probe_ejected`,
//! `probe_circuit_state`) are set by [`Engine::publish_gauges`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{Engine, EngineError, Target};
use crate::passive::breaker::{self, CircuitState, Permit};
use crate::passive::call::Call;
use crate::passive::outlier::OutlierEvent;
use crate::passive::pools::PoolEvent;
use crate::passive::recovery::RecoveryEvent;
use crate::sync::{lock, read};
use crate::target::TargetId;
use crate::verdict::state::HealthState;

/// How often pools make their time-driven changes (ends of ejections and cool-downs, success
/// rates, ramps): the detector's recommended period.
const POOL_TICK: Duration = Duration::from_secs(1);

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

/// Why [`Engine::pick`] found no member to call.
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

/// A member chosen by [`Engine::pick`] for one call.
///
/// Finish it with the call's outcome ([`Lease::finish`]). Dropped unfinished (the call was
/// cancelled before it was sent), it gives back its circuit breaker's trial slot.
pub struct Lease {
    engine: Engine,
    target: Arc<Target>,
    permit: Option<Permit>,
}

impl Lease {
    /// The member.
    pub fn id(&self) -> &TargetId {
        &self.target.id
    }

    /// How the member is probed, where a client finds its address.
    pub fn probe(&self) -> &crate::tier::spec::ProbeSpec {
        &self.target.probe_spec
    }

    /// Reports how the call ended, as [`Engine::report`] does.
    pub fn finish(mut self, call: &Call) {
        // Recorded: the permit is spent, not given back.
        self.permit = None;
        self.engine.take_call(&self.target, call);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let (Some(permit), Some(breaker)) = (self.permit.take(), &self.target.breaker) {
            lock(breaker).release(permit);
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("id", self.id()).finish()
    }
}

impl Engine {
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
        let target = self.target(id)?;
        self.take_call(&target, call);
        Ok(())
    }

    fn take_call(&self, target: &Target, call: &Call) {
        let now = Instant::now();
        let id = &target.id;
        let failed = call.outcome.is_failure();
        if let Some(breaker) = &target.breaker {
            let t = lock(breaker).record(call, now);
            target.announce_circuit(t);
        }
        let healthy = {
            let mut status = target.lock();
            if failed {
                status.passive_failed = true;
            } else {
                status.passive_successes = status.passive_successes.saturating_add(1);
            }
            status.machine.state().is_healthy()
        };
        let events = lock(&self.shared.pools).record(id, call, now);
        // Ejected by this very call: DOWN already, nothing for a re-probe to decide.
        let ejected = events
            .iter()
            .any(|(_, e)| matches!(e, OutlierEvent::Ejected(e) if e.id == *id));
        self.settle(&events);
        if failed && healthy && !ejected {
            tracing::debug!(target_id = %id, outcome = call.outcome.as_str(), "passive failure: re-probing now");
            self.scheduler.expedite(id);
        }
    }

    /// Chooses a member of pool `group` for one call, leaving out `exclude` (the member a retry
    /// moves away from).
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
        let now = Instant::now();
        let (mut weights, panic) = lock(&self.shared.pools)
            .weights(group, now)
            .ok_or_else(|| PickError::NotAPool(group.clone()))?;
        let targets: Vec<Option<Arc<Target>>> = {
            let all = read(&self.targets);
            weights.iter().map(|(id, _)| all.get(id).cloned()).collect()
        };
        for ((id, weight), target) in weights.iter_mut().zip(&targets) {
            if target.is_none() || exclude.contains(id) {
                *weight = 0.0;
            }
        }
        if !panic {
            let up: Vec<(TargetId, f64)> = weights
                .iter()
                .zip(&targets)
                .map(|((id, weight), target)| {
                    let down = target
                        .as_ref()
                        .is_some_and(|t| t.lock().machine.state() == HealthState::Down);
                    (id.clone(), if down { 0.0 } else { *weight })
                })
                .collect();
            if up.iter().any(|(_, w)| *w > 0.0) {
                weights = up;
            }
        }
        let mut rejected = 0;
        let mut retry_after: Option<Duration> = None;
        let mut rng = rand::rng();
        while let Some(chosen) = crate::passive::select::pick_with(&weights, &mut rng).cloned() {
            let index = weights.iter().position(|(id, _)| *id == chosen);
            let Some(target) = index.and_then(|i| targets[i].clone()) else {
                break;
            };
            let permit = match &target.breaker {
                None => None,
                Some(breaker) => {
                    let acquired = lock(breaker).try_acquire(now);
                    match acquired {
                        Ok(permit) => {
                            target.announce_circuit(permit.transition());
                            Some(permit)
                        }
                        Err(refusal) => {
                            rejected += 1;
                            retry_after = match (retry_after, refusal.retry_after) {
                                (Some(a), Some(b)) => Some(a.min(b)),
                                (a, b) => a.or(b),
                            };
                            if let Some(i) = index {
                                weights[i].1 = 0.0;
                            }
                            continue;
                        }
                    }
                }
            };
            return Ok(Lease {
                engine: self.clone(),
                target,
                permit,
            });
        }
        Err(PickError::Unavailable {
            group: group.clone(),
            rejected,
            retry_after,
        })
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
        let target = self.target(id)?;
        let breaker = target
            .breaker
            .as_ref()
            .ok_or_else(|| EngineError::NoCircuitBreaker(id.clone()))?;
        let (t, state) = {
            let mut breaker = lock(breaker);
            let t = match command {
                CircuitCommand::ForceOpen => breaker.force_open(),
                CircuitCommand::Disable => breaker.disable(),
                CircuitCommand::Reset => breaker.reset(),
            };
            (t, breaker.state())
        };
        target.announce_circuit(t);
        Ok(state)
    }

    /// An operator puts an ejected target back in its pools, permanent ejections included: it
    /// returns through slow start with its ejection history forgotten.
    ///
    /// # Errors
    /// [`EngineError::UnknownTarget`] or [`EngineError::NotEjected`].
    pub fn clear_ejection(&self, id: &TargetId) -> Result<(), EngineError> {
        self.target(id)?;
        let events = lock(&self.shared.pools).clear(id, Instant::now());
        if events.is_empty() {
            return Err(EngineError::NotEjected(id.clone()));
        }
        self.settle(&events);
        Ok(())
    }

    /// Reports the outcomes a [`GateLayer`](crate::gate::GateLayer) observes as calls to
    /// target `id`: the service behind the gate judged by its own traffic.
    pub fn reporter(&self, id: TargetId) -> Reporter {
        Reporter {
            engine: self.clone(),
            id,
        }
    }

    /// Logs and counts pool events, then brings the state machines of the members they moved in
    /// line with their pools.
    fn settle(&self, events: &[PoolEvent]) {
        let moved = announce(events);
        if moved.is_empty() {
            return;
        }
        let targets: Vec<Arc<Target>> = {
            let all = read(&self.targets);
            moved.iter().filter_map(|id| all.get(id).cloned()).collect()
        };
        for target in targets {
            target.sync_ejection();
        }
    }

    /// Makes the pools' time-driven changes every second until cancelled.
    pub(super) async fn tick_pools(self, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(POOL_TICK);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let events = lock(&self.shared.pools).tick(Instant::now());
            self.settle(&events);
        }
    }
}

/// Reports a service's own request outcomes as calls to one target: the gate's observer (with
/// the `tower` feature), or any server loop that sees its requests end.
#[derive(Clone)]
pub struct Reporter {
    engine: Engine,
    id: TargetId,
}

impl Reporter {
    /// Reports one call; a target removed since has nothing left to judge, so that is ignored.
    pub fn report(&self, call: &Call) {
        let _ = self.engine.report(&self.id, call);
    }
}

#[cfg(feature = "tower")]
/// The engine's verdict as the readiness gate's dependency check.
impl crate::gate::ReadinessCheck for Engine {
    fn check(&self) -> crate::gate::Check {
        match self.readiness().reason {
            None => crate::gate::Check::pass(),
            Some(reason) => crate::gate::Check::fail(reason),
        }
    }
}

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

impl Target {
    /// Holds the target DOWN while a pool has it out, and lets it go once none does.
    pub(super) fn sync_ejection(&self) {
        let out = lock(&self.shared.pools).is_out(&self.id);
        self.set_ejected(out);
    }

    pub(super) fn set_ejected(&self, out: bool) {
        let transition = {
            let mut status = self.lock();
            if status.machine.is_ejected() == out {
                return;
            }
            let t = if out {
                status.machine.eject()
            } else {
                status.machine.readmit()
            };
            self.change(&mut status, t)
        };
        let detail = if out {
            "ejected from its pool by real traffic"
        } else {
            "back in its pool"
        };
        self.announce(transition, Some(detail));
    }

    /// Whether this run can be skipped because real traffic already proves the target healthy;
    /// starts counting afresh either way.
    pub(super) fn skip_for_traffic(&self) -> bool {
        let mut status = self.lock();
        let successes = std::mem::take(&mut status.passive_successes);
        let failed = std::mem::take(&mut status.passive_failed);
        let skip = self.policy.skip_active_after.is_some_and(|n| {
            successes >= n.get() && !failed && status.machine.state() == HealthState::Up
        });
        drop(status);
        if skip {
            metrics::counter!("probe_active_skipped_total", "target" => self.id.as_str().to_owned())
                .increment(1);
        }
        skip
    }

    /// Its circuit breaker's state at `now`, once an open circuit whose time has passed has moved
    /// to half-open (announced): readers of the status and the gauge see the state the next call
    /// would meet, not the one the last call left.
    pub(super) fn circuit(&self, now: Instant) -> Option<breaker::CircuitSnapshot> {
        let breaker = self.breaker.as_ref()?;
        let (moved, snapshot) = {
            let mut breaker = lock(breaker);
            let moved = breaker.advance(now);
            (moved, breaker.snapshot(now))
        };
        self.announce_circuit(moved);
        Some(snapshot)
    }

    /// Logs a circuit transition and sets its gauge.
    pub(super) fn announce_circuit(&self, t: Option<breaker::CircuitTransition>) {
        let Some(t) = t else { return };
        metrics::gauge!("probe_circuit_state", "target" => self.id.as_str().to_owned())
            .set(f64::from(t.to.code()));
        tracing::info!(
            target_id = self.id.as_str(),
            from = t.from.as_str(),
            to = t.to.as_str(),
            cause = t.cause.as_str(),
            "circuit changed"
        );
    }
}

/// Logs and counts pool events; returns the members whose standing they changed.
pub(super) fn announce(events: &[PoolEvent]) -> BTreeSet<TargetId> {
    let mut moved = BTreeSet::new();
    for (pool, event) in events {
        let pool = pool.as_str();
        match event {
            OutlierEvent::Ejected(e) => {
                metrics::counter!(
                    "probe_ejections_total",
                    "target" => e.id.as_str().to_owned(),
                    "reason" => e.reason.as_str()
                )
                .increment(1);
                tracing::warn!(
                    target_id = e.id.as_str(),
                    pool,
                    reason = e.reason.as_str(),
                    times_ejected = e.times_ejected,
                    permanent = e.until.is_none(),
                    "target ejected"
                );
                moved.insert(e.id.clone());
            }
            OutlierEvent::EjectionSkipped { id, reason, limit } => tracing::warn!(
                target_id = id.as_str(),
                pool,
                reason = reason.as_str(),
                limit = limit.as_str(),
                "ejection held back"
            ),
            OutlierEvent::Recovery { id, event } => {
                if matches!(event, RecoveryEvent::Permanent(_)) {
                    tracing::warn!(
                        target_id = id.as_str(),
                        pool,
                        "target ejected permanently: an operator must clear it"
                    );
                } else {
                    tracing::info!(
                        target_id = id.as_str(),
                        pool,
                        step = event.as_str(),
                        "ejected target recovering"
                    );
                }
                moved.insert(id.clone());
            }
            OutlierEvent::Cleared { id } => {
                tracing::info!(
                    target_id = id.as_str(),
                    pool,
                    "ejection cleared by operator"
                );
                moved.insert(id.clone());
            }
            OutlierEvent::PanicStarted { serving, members } => tracing::warn!(
                pool,
                serving,
                members,
                "pool in panic: too few members serving, routing to all of them"
            ),
            OutlierEvent::PanicEnded { serving, members } => {
                tracing::info!(pool, serving, members, "pool out of panic");
            }
        }
    }
    moved
}

/// Describes the passive-health metrics.
pub(super) fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "probe_ejections_total",
        "Ejections of the target from its pool by real traffic, by rule (reason)."
    );
    describe_gauge!(
        "probe_ejected",
        "Whether the target is out of its pool (1) or serving (0)."
    );
    describe_gauge!(
        "probe_target_weight",
        "The target's share of its pool's traffic in [0, 1]: 0 while ejected, ramping up after."
    );
    describe_gauge!(
        "probe_circuit_state",
        "The target's circuit: 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled."
    );
    describe_counter!(
        "probe_active_skipped_total",
        "Active probe runs skipped because real traffic proved the target healthy."
    );
}
