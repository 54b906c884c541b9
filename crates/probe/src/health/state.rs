//! The per-target state machine: UP, DEGRADED, PROBING, MAINTENANCE, DOWN.
//!
//! The state is the target's *verdict*, and verdicts move on consecutive results (hysteresis),
//! so one lost packet pages no one and takes no instance out of service:
//! - a new target is PROBING (no verdict yet); `rise` passing results make it UP (or DEGRADED,
//!   if the latest pass was degraded), `fall` failures make it DOWN;
//! - an UP or DEGRADED target that fails *stays* UP or DEGRADED while the failures are being
//!   confirmed: it is re-checked at the fast interval, shows a [`Pending`] change ("toward DOWN,
//!   1 of 3", as HAProxy shows "UP 1/3"), and becomes DOWN at the `fall`-th failure in a row; a
//!   pass in between cancels the confirmation without any change;
//! - likewise a DOWN target that passes stays DOWN until `rise` passes in a row;
//! - UP and DEGRADED swap after `degrade` degraded / `recover` good results in a row;
//! - MAINTENANCE is entered and left only by an operator or a declared window, and is always
//!   left to PROBING, never straight to a verdict;
//! - a target whose verdict changes more than [`FlapPolicy::transitions`] times within the
//!   policy's window is *flapping*: it is held in PROBING until its results have pointed to the
//!   same verdict for `min_stable`. Only changes of verdict count, so a confirmation that did not
//!   complete (one lost SYN) is never a flap.
//!
//! A confirmation in progress is deliberately not a state of its own: everything that consumes
//! verdicts (readiness, the graph, pools, balancing, health+json) reads the state, and none of
//! them should act on a failure that has not been confirmed. Showing it as PROBING would make
//! every consumer tell "PROBING with a verdict in force" from "PROBING with none"; keeping the
//! verdict as the state makes the right reading the only one.
//!
//! Every change goes through one function that checks it against [`is_legal`], the single list
//! of allowed transitions; the property tests drive random inputs and check both the list and
//! the thresholds. The machine only decides and reports each [`Transition`] once; the engine logs,
//! counts and broadcasts it.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::health::backoff::SuccessWindow;
use crate::health::policy::{FlapPolicy, Schedule, Thresholds};
use crate::outcome::Verdict;

/// A target's health verdict. The names (`as_str`) are a public contract of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// No verdict yet: new, flapping, back from maintenance or readmitted to its pool.
    Probing,
    /// Does its job.
    Up,
    /// Does its job, but not well (slow, read-only, ...).
    Degraded,
    /// Taken out on purpose; results are recorded but do not change the state.
    Maintenance,
    /// Does not do its job.
    Down,
}

impl HealthState {
    /// Every state, in declaration order: what the API's filters accept, and, for a state packed
    /// into a few bits (the hub's applied word, the graph view's cells), its index here,
    /// `state as usize`.
    pub const ALL: [Self; 5] = [
        Self::Probing,
        Self::Up,
        Self::Degraded,
        Self::Maintenance,
        Self::Down,
    ];

    /// The upper-case name used in the API, logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Probing => "PROBING",
            Self::Up => "UP",
            Self::Degraded => "DEGRADED",
            Self::Maintenance => "MAINTENANCE",
            Self::Down => "DOWN",
        }
    }

    /// Whether the target serves (UP or DEGRADED).
    pub const fn is_healthy(self) -> bool {
        matches!(self, Self::Up | Self::Degraded)
    }

    /// Whether the target keeps an engine ready: it serves, or it is out on purpose.
    pub const fn counts_as_ready(self) -> bool {
        matches!(self, Self::Up | Self::Degraded | Self::Maintenance)
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What moved a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Probe results crossed a threshold.
    Results,
    /// Too many changes within the flap window: held in PROBING.
    Flapping,
    /// A flapping target's results have agreed long enough to give a verdict again.
    Settled,
    /// Maintenance began (operator or window).
    MaintenanceStarted,
    /// Maintenance ended (operator, expiry or end of window).
    MaintenanceEnded,
    /// Real traffic got the target ejected from its pool ([`outlier`](crate::passive::outlier)).
    Ejected,
    /// The target came back into its pool; results give the verdict again.
    Readmitted,
    /// Another member of a cluster decided (the target's owner, whose verdict this member
    /// mirrors); the owner's own machine moved along this table.
    Cluster,
    /// The votes of the members probing a replicated target reached a quorum (or lost it).
    Quorum,
    /// A critical dependency of a group went DOWN: the group is DOWN at once, since that
    /// dependency's own verdict was confirmed already ([`crate::graph::GroupRule`]).
    Dependency,
}

impl Cause {
    /// The snake-case name used in events and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Results => "results",
            Self::Flapping => "flapping",
            Self::Settled => "settled",
            Self::MaintenanceStarted => "maintenance_started",
            Self::MaintenanceEnded => "maintenance_ended",
            Self::Ejected => "ejected",
            Self::Readmitted => "readmitted",
            Self::Cluster => "cluster",
            Self::Quorum => "quorum",
            Self::Dependency => "dependency_down",
        }
    }
}

/// A change of state, reported once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: HealthState,
    /// The state after.
    pub to: HealthState,
    /// Why.
    pub cause: Cause,
}

/// A change of verdict being confirmed: the results point `toward` another verdict, `count` of
/// the `of` consecutive results it takes have come in, and the verdict in force has not changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The verdict the results point to.
    pub toward: HealthState,
    /// Consecutive results so far that point there.
    pub count: u32,
    /// How many it takes (`fall`, `rise`, `degrade_after` or `recover_after`).
    pub of: u32,
}

/// The transition table: whether a target may move `from` → `to` for `cause`.
///
/// Results move a target between verdicts directly (UP/DEGRADED → DOWN at the `fall`-th failure,
/// DOWN → UP/DEGRADED at the `rise`-th pass); only flapping, maintenance and a readmission to a
/// pool take away a verdict (→ PROBING).
// One arm per group of legal moves reads as the table it is; `matches!` would hide the rows.
#[allow(clippy::match_like_matches_macro)]
pub fn is_legal(from: HealthState, to: HealthState, cause: Cause) -> bool {
    use Cause::*;
    use HealthState::*;
    match (from, to, cause) {
        _ if from == to => false,
        (Maintenance, Probing, MaintenanceEnded) => true,
        (Probing | Up | Degraded | Down, Maintenance, MaintenanceStarted) => true,
        (Probing, Up | Degraded | Down, Results | Settled) => true,
        (Up, Degraded, Results) | (Degraded, Up, Results) => true,
        (Up | Degraded | Down, Probing, Flapping) => true,
        (Up | Degraded, Down, Results) => true,
        (Down, Up | Degraded, Results) => true,
        (Probing | Up | Degraded, Down, Ejected) => true,
        (Down, Probing, Readmitted) => true,
        // A mirror of a machine elsewhere, which kept to this table.
        (_, _, Cluster) => true,
        (Probing | Up | Degraded | Down, Probing | Up | Degraded | Down, Quorum) => true,
        (Probing | Up | Degraded, Down, Dependency) => true,
        _ => false,
    }
}

/// The kind of one result, as the machine counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quality {
    /// Passed cleanly.
    Good,
    /// Passed, degraded.
    Degraded,
    /// Failed.
    Failed,
}

impl From<&Verdict> for Quality {
    fn from(v: &Verdict) -> Self {
        match v {
            Verdict::Up => Self::Good,
            Verdict::Degraded(_) => Self::Degraded,
            Verdict::Failed(_) => Self::Failed,
        }
    }
}

/// How many recent results feed the backoff's success-rate feedback (a short memory: the feedback follows the recent trend, not the target's history).
const FEEDBACK_WINDOW: u8 = 10;

/// [`FlapPolicy`] as a machine keeps it: durations in milliseconds, so that it sits inline in
/// every target's machine (16 bytes with its `Option`) rather than behind a pointer (8 bytes
/// inline plus a 40-byte allocation). Sub-millisecond parts of a window are dropped.
#[derive(Clone, Copy, Debug)]
struct Flap {
    transitions: u32,
    window_ms: u32,
    min_stable_ms: u32,
}

impl From<FlapPolicy> for Flap {
    fn from(policy: FlapPolicy) -> Self {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        Self {
            transitions: policy.transitions,
            window_ms: ms(policy.window),
            min_stable_ms: ms(policy.min_stable),
        }
    }
}

impl Flap {
    fn window(self) -> Duration {
        Duration::from_millis(self.window_ms.into())
    }

    fn min_stable(self) -> Duration {
        Duration::from_millis(self.min_stable_ms.into())
    }
}

/// What flap detection remembers of a machine.
#[derive(Clone, Debug, Default)]
struct Flips {
    /// When recent result-driven transitions happened.
    recent: VecDeque<Instant>,
    /// While flapping: the verdict the results point to, and since when.
    flapping: Option<(Option<HealthState>, Instant)>,
}

/// One target's state machine.
#[derive(Clone, Debug)]
pub struct StateMachine {
    thresholds: Thresholds,
    flap: Option<Flap>,
    state: HealthState,
    /// Passing results in a row (good or degraded).
    passes: u32,
    /// Good results in a row.
    goods: u32,
    /// Degraded results in a row.
    degradeds: u32,
    /// Failures in a row.
    failures: u32,
    /// The quality of the latest result, which picks UP or DEGRADED when passes reach `rise`.
    last: Option<Quality>,
    /// Flap detection's memory, allocated at the first change of verdict: most targets never
    /// change after their first verdict, and 48 bytes in each of a million machines add up.
    flips: Option<Box<Flips>>,
    /// Whether the results reached a verdict since the start (or since a maintenance ended).
    /// The first verdict is not a change of verdict, so flap detection does not count it.
    judged: bool,
    /// Whether the target is out of its pool: held DOWN whatever the results say.
    ejected: bool,
}

impl StateMachine {
    /// A new machine in PROBING.
    pub fn new(thresholds: Thresholds, flap: Option<FlapPolicy>) -> Self {
        Self {
            thresholds,
            flap: flap.map(Flap::from),
            state: HealthState::Probing,
            passes: 0,
            goods: 0,
            degradeds: 0,
            failures: 0,
            last: None,
            flips: None,
            judged: false,
            ejected: false,
        }
    }

    /// The current state.
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// Whether the target is held in PROBING for flapping.
    pub fn is_flapping(&self) -> bool {
        self.flips.as_ref().is_some_and(|f| f.flapping.is_some())
    }

    /// Passing results in a row.
    pub fn consecutive_successes(&self) -> u32 {
        self.passes
    }

    /// Failures in a row.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Feeds one result observed at `now`; returns the transition it caused, if any.
    pub fn observe(&mut self, quality: Quality, now: Instant) -> Option<Transition> {
        self.count(quality);
        match self.state {
            HealthState::Maintenance => None,
            // Held DOWN while out of the pool; back from a maintenance, it goes DOWN again.
            _ if self.ejected => self.go(HealthState::Down, Cause::Ejected),
            _ if self.is_flapping() => self.observe_flapping(now),
            _ => {
                let to = self.next_state(quality)?;
                self.verdict(to, now)
            }
        }
    }

    /// Enters maintenance; `None` if already in it.
    pub fn start_maintenance(&mut self) -> Option<Transition> {
        self.go(HealthState::Maintenance, Cause::MaintenanceStarted)
    }

    /// Leaves maintenance for PROBING, with fresh counters; `None` if not in maintenance.
    pub fn end_maintenance(&mut self) -> Option<Transition> {
        if self.state != HealthState::Maintenance {
            return None;
        }
        self.passes = 0;
        self.goods = 0;
        self.degradeds = 0;
        self.failures = 0;
        self.flips = None;
        self.judged = false;
        self.go(HealthState::Probing, Cause::MaintenanceEnded)
    }

    /// Takes the target out of its pool: DOWN at once (unless in maintenance, which it ends in
    /// DOWN), and held there until [`readmit`](Self::readmit). Results keep being counted, so
    /// the verdict after readmission is the results'. `None` if already DOWN or in maintenance.
    pub fn eject(&mut self) -> Option<Transition> {
        self.ejected = true;
        if self.state == HealthState::Maintenance {
            return None;
        }
        if let Some(flips) = &mut self.flips {
            flips.flapping = None;
        }
        self.go(HealthState::Down, Cause::Ejected)
    }

    /// Puts an ejected target back: PROBING, where the next result decides as its counters
    /// say (a target readmitted after its recovery's passes has `rise` passes already, and goes
    /// UP on the next one). `None` if it was not held DOWN by an ejection.
    pub fn readmit(&mut self) -> Option<Transition> {
        if !std::mem::take(&mut self.ejected) || self.state != HealthState::Down {
            return None;
        }
        self.go(HealthState::Probing, Cause::Readmitted)
    }

    /// Whether the target is held DOWN by an ejection.
    pub fn is_ejected(&self) -> bool {
        self.ejected
    }

    /// DOWN at once, for a group whose critical dependency went DOWN: that verdict was confirmed
    /// where it was reached, so confirming it again here would only delay it. The counters say
    /// `fall` failures, so the group comes back after `rise` passing judgments. A flapping hold
    /// ends. `None` if already DOWN or in maintenance.
    pub fn dependency_down(&mut self) -> Option<Transition> {
        if matches!(self.state, HealthState::Down | HealthState::Maintenance) {
            return None;
        }
        self.passes = 0;
        self.goods = 0;
        self.degradeds = 0;
        self.failures = self.failures.max(self.thresholds.fall.get());
        self.last = Some(Quality::Failed);
        self.judged = true;
        if let Some(flips) = &mut self.flips {
            flips.flapping = None;
        }
        self.go(HealthState::Down, Cause::Dependency)
    }

    /// Takes the verdict another member published for the target, with the counters behind it,
    /// so that this machine goes on from there when it becomes the one that decides: a DOWN
    /// target stays DOWN until `rise` passes here, an UP one UP until `fall` failures.
    pub fn adopt(
        &mut self,
        state: HealthState,
        successes: u32,
        failures: u32,
    ) -> Option<Transition> {
        self.passes = successes;
        self.failures = failures;
        (self.goods, self.degradeds) = match state {
            HealthState::Up => (successes, 0),
            HealthState::Degraded => (0, successes),
            _ => (0, 0),
        };
        self.last = match state {
            HealthState::Up => Some(Quality::Good),
            HealthState::Degraded => Some(Quality::Degraded),
            HealthState::Down => Some(Quality::Failed),
            HealthState::Probing | HealthState::Maintenance => self.last,
        };
        self.judged = matches!(
            state,
            HealthState::Up | HealthState::Degraded | HealthState::Down
        );
        self.go(state, Cause::Cluster)
    }

    /// Takes the verdict the votes of a replicated target's members reached
    /// ([`crate::cluster::decide`]); outside maintenance only, which the owner keeps itself.
    pub fn decide(&mut self, state: HealthState) -> Option<Transition> {
        if self.state == HealthState::Maintenance || state == HealthState::Maintenance {
            return None;
        }
        self.judged = state != HealthState::Probing;
        self.go(state, Cause::Quorum)
    }

    fn count(&mut self, quality: Quality) {
        match quality {
            Quality::Good => {
                self.passes = self.passes.saturating_add(1);
                self.goods = self.goods.saturating_add(1);
                self.degradeds = 0;
                self.failures = 0;
            }
            Quality::Degraded => {
                self.passes = self.passes.saturating_add(1);
                self.degradeds = self.degradeds.saturating_add(1);
                self.goods = 0;
                self.failures = 0;
            }
            Quality::Failed => {
                self.failures = self.failures.saturating_add(1);
                self.passes = 0;
                self.goods = 0;
                self.degradeds = 0;
            }
        }
        self.last = Some(quality);
    }

    /// The verdict the counters support on their own, if any.
    fn settled(&self) -> Option<HealthState> {
        if self.failures >= self.thresholds.fall.get() {
            Some(HealthState::Down)
        } else if self.passes >= self.thresholds.rise.get() {
            Some(self.pass_state())
        } else {
            None
        }
    }

    fn pass_state(&self) -> HealthState {
        if self.last == Some(Quality::Degraded) {
            HealthState::Degraded
        } else {
            HealthState::Up
        }
    }

    /// Where a result takes the target, by state (outside maintenance and flapping).
    fn next_state(&self, quality: Quality) -> Option<HealthState> {
        use HealthState::*;
        let t = &self.thresholds;
        match (self.state, quality) {
            (Probing, _) => self.settled(),
            (Up, Quality::Degraded) if self.degradeds >= t.degrade.get() => Some(Degraded),
            (Degraded, Quality::Good) if self.goods >= t.recover.get() => Some(Up),
            // A verdict stands until the contrary results are confirmed.
            (Up | Degraded, Quality::Failed) | (Down, Quality::Good | Quality::Degraded) => {
                self.settled()
            }
            _ => None,
        }
    }

    /// Applies a result-driven change, unless it makes the target flap.
    fn verdict(&mut self, to: HealthState, now: Instant) -> Option<Transition> {
        let first = !std::mem::replace(&mut self.judged, true);
        if let Some(policy) = self.flap.filter(|_| !first) {
            let settled = self.settled();
            let flips = self.flips.get_or_insert_default();
            let window = policy.window();
            while flips
                .recent
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) > window)
            {
                flips.recent.pop_front();
            }
            if flips.recent.len() >= policy.transitions as usize {
                flips.flapping = Some((settled, now));
                return self.go(HealthState::Probing, Cause::Flapping);
            }
            flips.recent.push_back(now);
        }
        self.go(to, Cause::Results)
    }

    fn observe_flapping(&mut self, now: Instant) -> Option<Transition> {
        let settled = self.settled();
        let min_stable = self.flap.map_or(Duration::ZERO, |p| p.min_stable());
        let flips = self.flips.as_mut()?;
        let (leaning, since) = flips.flapping?;
        if settled != leaning {
            flips.flapping = Some((settled, now));
            return None;
        }
        let to = settled?;
        if now.saturating_duration_since(since) < min_stable {
            return None;
        }
        // Settled: the changes that made it flap are forgotten.
        self.flips = None;
        self.go(to, Cause::Settled)
    }

    /// The one place the state changes: only along the table.
    fn go(&mut self, to: HealthState, cause: Cause) -> Option<Transition> {
        if to == self.state {
            return None;
        }
        let legal = is_legal(self.state, to, cause);
        debug_assert!(
            legal,
            "illegal transition {} -> {to} ({cause:?})",
            self.state
        );
        if !legal {
            return None;
        }
        let t = Transition {
            from: self.state,
            to,
            cause,
        };
        self.state = to;
        Some(t)
    }

    /// The change of verdict the latest results point to, while it is being confirmed: `None`
    /// when they agree with the state, and in maintenance, while flapping or while ejected, where
    /// results do not move the state.
    pub fn pending(&self) -> Option<Pending> {
        use HealthState::*;
        if self.ejected || self.is_flapping() {
            return None;
        }
        let t = &self.thresholds;
        let toward = |toward, count, of: std::num::NonZeroU32| {
            (count > 0).then_some(Pending {
                toward,
                count,
                of: of.get(),
            })
        };
        match self.state {
            Up | Degraded | Probing if self.failures > 0 => toward(Down, self.failures, t.fall),
            Up => toward(Degraded, self.degradeds, t.degrade),
            Degraded => toward(Up, self.goods, t.recover),
            Down | Probing => toward(self.pass_state(), self.passes, t.rise),
            Maintenance => None,
        }
    }

    /// Whether recent results contradict the state, so the next result may change it.
    pub fn is_deciding(&self) -> bool {
        match self.state {
            HealthState::Probing => true,
            HealthState::Up => self.failures > 0 || self.degradeds > 0,
            HealthState::Degraded => self.failures > 0 || self.goods > 0,
            HealthState::Down => self.passes > 0,
            HealthState::Maintenance => false,
        }
    }

    /// How long after this run the next one should start.
    ///
    /// - settled UP or DEGRADED, or MAINTENANCE: the interval;
    /// - deciding (PROBING, or a contrary result): the fast interval, so a verdict is reached in
    ///   about `fall * fast_interval` rather than `fall * interval`;
    /// - settled DOWN: the backoff, attempt `failures - fall`, with feedback from the success
    ///   rate of the last 10 results.
    pub fn next_delay(
        &self,
        schedule: &Schedule,
        window: &SuccessWindow,
        rng: &mut impl rand::Rng,
    ) -> Duration {
        if self.is_deciding() {
            return schedule.fast_interval();
        }
        match self.state {
            HealthState::Down => {
                let attempt = self.failures.saturating_sub(self.thresholds.fall.get());
                schedule
                    .backoff()
                    .delay(attempt, window.rate(FEEDBACK_WINDOW), rng)
            }
            _ => schedule.interval(),
        }
    }
}

/// Samples the per-run start jitter: uniform in `[0, fraction * step)`.
pub(crate) fn jitter(step: Duration, fraction: f64, rng: &mut impl rand::Rng) -> Duration {
    if fraction <= 0.0 {
        return Duration::ZERO;
    }
    step.mul_f64(fraction * rng.random_range(0.0..1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::policy::ScheduleSettings;
    use HealthState::*;
    use Quality::{Degraded as D, Failed as F, Good as G};
    use proptest::prelude::*;
    use std::num::NonZeroU32;

    const STATES: [HealthState; 5] = [Probing, Up, Degraded, Maintenance, Down];
    const CAUSES: [Cause; 10] = [
        Cause::Results,
        Cause::Flapping,
        Cause::Settled,
        Cause::MaintenanceStarted,
        Cause::MaintenanceEnded,
        Cause::Ejected,
        Cause::Readmitted,
        Cause::Cluster,
        Cause::Quorum,
        Cause::Dependency,
    ];

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn machine(rise: u32, fall: u32, flap: Option<FlapPolicy>) -> StateMachine {
        StateMachine::new(Thresholds::new(nz(rise), nz(fall)), flap)
    }

    /// Feeds results one second apart; returns the state after each.
    fn run(m: &mut StateMachine, results: &[Quality]) -> Vec<HealthState> {
        let t0 = Instant::now();
        results
            .iter()
            .enumerate()
            .map(|(i, q)| {
                m.observe(*q, t0 + Duration::from_secs(i as u64));
                m.state()
            })
            .collect()
    }

    #[test]
    fn a_verdict_stands_while_the_contrary_is_confirmed() {
        let mut m = machine(2, 3, None);
        assert_eq!(
            run(&mut m, &[G, G, F, F, F, F, G, G]),
            [Probing, Up, Up, Up, Down, Down, Down, Up]
        );
        // Two failures and a pass: no change at all.
        assert_eq!(run(&mut m, &[F, F, G, F, F, G]), [Up; 6]);
    }

    #[test]
    fn pending_counts_toward_the_next_verdict() {
        let pending = |toward, count, of| Some(Pending { toward, count, of });
        let mut m = machine(2, 3, None);
        assert_eq!(m.pending(), None, "no result yet");
        run(&mut m, &[G]);
        assert_eq!(m.pending(), pending(Up, 1, 2), "a new target on its way up");
        run(&mut m, &[G]);
        assert_eq!(m.pending(), None, "UP and agreeing");
        run(&mut m, &[F]);
        assert_eq!((m.state(), m.pending()), (Up, pending(Down, 1, 3)));
        run(&mut m, &[F]);
        assert_eq!((m.state(), m.pending()), (Up, pending(Down, 2, 3)));
        run(&mut m, &[F]);
        assert_eq!((m.state(), m.pending()), (Down, None));
        run(&mut m, &[D]);
        assert_eq!((m.state(), m.pending()), (Down, pending(Degraded, 1, 2)));
        run(&mut m, &[G]);
        assert_eq!((m.state(), m.pending()), (Up, None));
        run(&mut m, &[D]);
        assert_eq!((m.state(), m.pending()), (Up, pending(Degraded, 1, 2)));
        run(&mut m, &[D, G]);
        assert_eq!((m.state(), m.pending()), (Degraded, pending(Up, 1, 2)));
        m.start_maintenance();
        run(&mut m, &[F]);
        assert_eq!(
            m.pending(),
            None,
            "results do not move a target in maintenance"
        );
    }

    #[test]
    fn names_and_readiness_of_every_state_and_cause() {
        let states = STATES;
        let names: Vec<_> = states.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ["PROBING", "UP", "DEGRADED", "MAINTENANCE", "DOWN"]);
        let healthy: Vec<_> = states.iter().map(|s| s.is_healthy()).collect();
        assert_eq!(healthy, [false, true, true, false, false]);
        let ready: Vec<_> = states.iter().map(|s| s.counts_as_ready()).collect();
        assert_eq!(ready, [false, true, true, true, false]);
        let causes = CAUSES;
        let names: Vec<_> = causes.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "results",
                "flapping",
                "settled",
                "maintenance_started",
                "maintenance_ended",
                "ejected",
                "readmitted",
                "cluster",
                "quorum",
                "dependency_down"
            ]
        );
    }

    #[test]
    fn deciding_and_the_next_delay_follow_the_verdict_and_what_is_pending() {
        let ms = Duration::from_millis;
        // Interval 1 s, fast 250 ms, backoff from 1 s up to 8 s without jitter.
        let schedule = Schedule::try_new(ScheduleSettings {
            interval: ms(1000),
            timeout: ms(500),
            jitter: 0.0,
            fast_interval: Some(ms(250)),
            backoff_max: Some(ms(8000)),
            backoff_jitter: Some(0.0),
        })
        .unwrap();
        let mut window = SuccessWindow::default();
        let mut rng = rand::rng();
        let mut m = machine(2, 3, None);
        let mut step = |m: &mut StateMachine, q: Quality| {
            m.observe(q, Instant::now());
            window.record(q != F);
            (m.is_deciding(), m.next_delay(&schedule, &window, &mut rng))
        };
        assert_eq!(step(&mut m, G), (true, ms(250)), "PROBING: fast");
        assert_eq!(step(&mut m, G), (false, ms(1000)), "UP: the interval");
        assert_eq!(step(&mut m, D), (true, ms(250)), "UP, degraded pending");
        assert_eq!(step(&mut m, G), (false, ms(1000)));
        assert_eq!(step(&mut m, F), (true, ms(250)), "UP, DOWN pending");
        assert_eq!(step(&mut m, F), (true, ms(250)));
        // DOWN with 4 of the last 7 results good: 1 s x (1 + 2 x 3/7); then 2 s x (1 + 2 x 4/8)
        // = 4 s; then 4 s x (1 + 2 x 5/9), over the cap.
        let down = step(&mut m, F);
        let first = Duration::from_secs_f64(1.0 + 2.0 * 3.0 / 7.0);
        assert_eq!((m.state(), down), (Down, (false, first)));
        assert_eq!(step(&mut m, F), (false, ms(4000)));
        assert_eq!(step(&mut m, F), (false, ms(8000)), "capped at backoff.max");
        assert_eq!(step(&mut m, G), (true, ms(250)), "DOWN, UP pending");
        assert_eq!(step(&mut m, G), (false, ms(1000)), "UP again");
        // DEGRADED: a good result is pending toward UP, a failure toward DOWN.
        let mut m = machine(1, 3, None);
        assert!(!step(&mut m, D).0);
        assert_eq!(m.state(), Degraded);
        assert!(!step(&mut m, G).0, "recover_after 1: UP at once");
        let mut m = StateMachine::new(
            Thresholds {
                recover: nz(2),
                ..Thresholds::new(nz(1), nz(3))
            },
            None,
        );
        step(&mut m, D);
        assert!(step(&mut m, G).0, "DEGRADED, UP pending");
        assert!(!step(&mut m, D).0);
        assert!(step(&mut m, F).0, "DEGRADED, DOWN pending");
        m.start_maintenance();
        assert!(!m.is_deciding(), "maintenance decides nothing");
    }

    #[test]
    fn start_jitter_is_late_within_its_fraction() {
        let mut rng = rand::rng();
        let step = Duration::from_secs(1);
        assert_eq!(jitter(step, 0.0, &mut rng), Duration::ZERO);
        let drawn: Vec<_> = (0..200).map(|_| jitter(step, 0.3, &mut rng)).collect();
        assert!(drawn.iter().all(|j| *j < Duration::from_millis(300)));
        assert!(drawn.iter().any(|j| *j > Duration::from_millis(150)));
    }

    #[test]
    fn nothing_is_pending_while_ejected() {
        let mut m = machine(2, 3, None);
        run(&mut m, &[G, G]);
        m.eject();
        run(&mut m, &[G]);
        assert_eq!((m.state(), m.pending()), (Down, None));
    }

    #[test]
    fn degraded_results_reach_degraded_and_recover_to_up() {
        let mut m = machine(2, 3, None);
        assert_eq!(run(&mut m, &[D, D]), [Probing, Degraded]);
        assert_eq!(
            run(&mut m, &[G, D, G, G]),
            [Degraded, Degraded, Degraded, Up]
        );
        assert_eq!(run(&mut m, &[D, G, D, D]), [Up, Up, Up, Degraded]);
        // A degraded target's failures are confirmed too before it is DOWN.
        assert_eq!(run(&mut m, &[F, F, F]), [Degraded, Degraded, Down]);
    }

    #[test]
    fn single_result_thresholds_go_straight_between_verdicts() {
        let mut m = machine(1, 1, None);
        assert_eq!(run(&mut m, &[G, F, G, D]), [Up, Down, Up, Degraded]);
    }

    #[test]
    fn maintenance_holds_the_state_and_ends_in_probing() {
        let mut m = machine(2, 2, None);
        run(&mut m, &[G, G]);
        let t = m.start_maintenance().unwrap();
        assert_eq!(
            (t.from, t.to, t.cause),
            (Up, Maintenance, Cause::MaintenanceStarted)
        );
        assert_eq!(m.start_maintenance(), None, "already in maintenance");
        assert_eq!(run(&mut m, &[F, F, F, G, G]), [Maintenance; 5]);
        let t = m.end_maintenance().unwrap();
        assert_eq!(
            (t.from, t.to, t.cause),
            (Maintenance, Probing, Cause::MaintenanceEnded)
        );
        // Fresh counters: `rise` new passes are needed, never straight to UP.
        assert_eq!(run(&mut m, &[G, G]), [Probing, Up]);
        assert_eq!(m.end_maintenance(), None);
    }

    #[test]
    fn an_ejection_holds_down_until_readmitted() {
        let mut m = machine(2, 3, None);
        run(&mut m, &[G, G]);
        let t = m.eject().unwrap();
        assert_eq!((t.from, t.to, t.cause), (Up, Down, Cause::Ejected));
        assert!(m.is_ejected());
        // Passing results do not bring it back while it is out.
        assert_eq!(run(&mut m, &[G, G, G]), [Down; 3]);
        let t = m.readmit().unwrap();
        assert_eq!((t.from, t.to, t.cause), (Down, Probing, Cause::Readmitted));
        // Its passes while out count: the next pass is a verdict.
        assert_eq!(run(&mut m, &[G]), [Up]);
        assert_eq!(m.readmit(), None, "not ejected");
    }

    #[test]
    fn an_ejection_outlasts_a_maintenance() {
        let mut m = machine(1, 1, None);
        run(&mut m, &[G]);
        m.start_maintenance();
        assert_eq!(m.eject(), None, "maintenance keeps the state");
        m.end_maintenance();
        assert_eq!(run(&mut m, &[G]), [Down], "still out once maintenance ends");
        assert_eq!(m.readmit().map(|t| t.to), Some(Probing));
    }

    #[test]
    fn flapping_holds_probing_until_stable() {
        let policy = FlapPolicy {
            transitions: 4,
            window: Duration::from_secs(60),
            min_stable: Duration::from_secs(30),
        };
        let mut m = machine(1, 1, Some(policy));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // The first verdict and four flips in a minute are allowed...
        for (i, q) in [G, F, G, F, G].into_iter().enumerate() {
            assert_eq!(m.observe(q, at(i as u64)).unwrap().cause, Cause::Results);
        }
        // ...the fifth flip makes it flapping.
        let t = m.observe(F, at(5)).unwrap();
        assert_eq!((t.from, t.to, t.cause), (Up, Probing, Cause::Flapping));
        assert!(m.is_flapping());
        // Still flipping: held in PROBING.
        for s in 6..20 {
            let q = if s % 2 == 0 { G } else { F };
            assert_eq!(m.observe(q, at(s)), None);
        }
        // Stable from 20 s on: a verdict again only after 30 s of agreement.
        for s in 20..50 {
            assert_eq!(m.observe(G, at(s)), None, "released early at {s}s");
        }
        let t = m.observe(G, at(50)).unwrap();
        assert_eq!((t.from, t.to, t.cause), (Probing, Up, Cause::Settled));
        assert!(!m.is_flapping());
    }

    #[test]
    fn a_change_exactly_one_window_ago_is_still_in_it() {
        let policy = FlapPolicy {
            transitions: 1,
            window: Duration::from_secs(10),
            min_stable: Duration::from_secs(5),
        };
        let mut m = machine(1, 1, Some(policy));
        let t0 = Instant::now();
        // The first verdict is not a change; the change at 1 s is the one allowed.
        m.observe(G, t0);
        assert_eq!(
            m.observe(F, t0 + Duration::from_secs(1)).unwrap().cause,
            Cause::Results
        );
        // 10 s later, to the nanosecond: still within the window, so this one is flapping.
        let t = m.observe(G, t0 + Duration::from_secs(11)).unwrap();
        assert_eq!(t.cause, Cause::Flapping);
    }

    #[test]
    fn old_transitions_leave_the_flap_window() {
        let policy = FlapPolicy {
            transitions: 2,
            window: Duration::from_secs(10),
            min_stable: Duration::from_secs(5),
        };
        let mut m = machine(1, 1, Some(policy));
        let t0 = Instant::now();
        for (s, q) in [(0, G), (1, F), (20, G), (21, F)] {
            let t = m.observe(q, t0 + Duration::from_secs(s)).unwrap();
            assert_eq!(t.cause, Cause::Results, "at {s}s");
        }
    }

    #[test]
    fn a_dependency_down_is_down_at_once_and_rise_passes_bring_it_back() {
        let mut m = machine(2, 3, None);
        run(&mut m, &[G, G]);
        let t = m.dependency_down().unwrap();
        assert_eq!((t.from, t.to, t.cause), (Up, Down, Cause::Dependency));
        assert_eq!(m.dependency_down(), None, "already DOWN");
        // Failures keep it DOWN; one pass is not enough, `rise` passes are.
        assert_eq!(run(&mut m, &[F, G, G]), [Down, Down, Up]);
        // From PROBING too; a machine in maintenance stays there.
        let mut m = machine(2, 3, None);
        assert_eq!(m.dependency_down().map(|t| t.from), Some(Probing));
        let mut m = machine(2, 3, None);
        m.start_maintenance();
        assert_eq!(m.dependency_down(), None);
    }

    #[test]
    fn the_table_allows_no_self_loops_and_guards_maintenance() {
        let states = STATES;
        let causes = CAUSES;
        for from in states {
            for to in states {
                for cause in causes {
                    if !is_legal(from, to, cause) {
                        continue;
                    }
                    assert_ne!(from, to);
                    if cause == Cause::Cluster {
                        // A mirror: the machine it mirrors kept the rules below.
                        continue;
                    }
                    assert_eq!(to == Maintenance, cause == Cause::MaintenanceStarted);
                    assert_eq!(from == Maintenance, cause == Cause::MaintenanceEnded);
                    if from == Maintenance {
                        assert_eq!(to, Probing, "maintenance never ends straight in a verdict");
                    }
                    if cause == Cause::Results {
                        assert_ne!(to, Probing, "results never take a verdict away");
                    }
                    if cause == Cause::Ejected || cause == Cause::Dependency {
                        assert_eq!(to, Down, "an ejection, a dependency DOWN: DOWN");
                    }
                    if cause == Cause::Readmitted {
                        assert_eq!((from, to), (Down, Probing), "readmitted is DOWN -> PROBING");
                    }
                    if to == Probing && from != Maintenance {
                        assert!(
                            matches!(cause, Cause::Flapping | Cause::Readmitted | Cause::Quorum),
                            "only flapping or a readmission takes a verdict away: {from} ({cause:?})"
                        );
                    }
                }
            }
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Result(Quality),
        StartMaintenance,
        EndMaintenance,
        Eject,
        Readmit,
    }

    fn op() -> impl Strategy<Value = (Op, u64)> {
        let op = prop_oneof![
            10 => Just(Op::Result(G)),
            5 => Just(Op::Result(D)),
            10 => Just(Op::Result(F)),
            1 => Just(Op::StartMaintenance),
            1 => Just(Op::EndMaintenance),
            1 => Just(Op::Eject),
            1 => Just(Op::Readmit),
        ];
        (op, 0u64..40)
    }

    proptest! {
        #[test]
        fn every_transition_is_legal_and_respects_thresholds(
            rise in 1u32..5,
            fall in 1u32..5,
            degrade in 1u32..5,
            recover in 1u32..5,
            flap_n in 1u32..6,
            flap_on: bool,
            ops in proptest::collection::vec(op(), 0..300),
        ) {
            let window = Duration::from_secs(120);
            let policy = FlapPolicy { transitions: flap_n, window, min_stable: Duration::from_secs(30) };
            let thresholds = Thresholds { rise: nz(rise), fall: nz(fall), degrade: nz(degrade), recover: nz(recover) };
            let mut m = StateMachine::new(thresholds, flap_on.then_some(policy));
            let mut now = Instant::now();
            let mut result_changes: Vec<Instant> = Vec::new();
            // The first verdict (since the start or a maintenance) is not a change.
            let mut judged = false;
            for (op, gap) in ops {
                now += Duration::from_secs(gap);
                let before = m.state();
                let t = match op {
                    Op::Result(q) => m.observe(q, now),
                    Op::StartMaintenance => m.start_maintenance(),
                    Op::EndMaintenance => m.end_maintenance(),
                    Op::Eject => m.eject(),
                    Op::Readmit => m.readmit(),
                };
                if matches!(op, Op::Result(_)) && m.is_ejected() {
                    prop_assert!(
                        matches!(m.state(), Down | Maintenance),
                        "an ejected target left DOWN on a result: {:?}", m.state()
                    );
                }
                let Some(t) = t else {
                    prop_assert_eq!(m.state(), before);
                    continue;
                };
                prop_assert_eq!(t.from, before);
                prop_assert_eq!(t.to, m.state());
                prop_assert!(is_legal(t.from, t.to, t.cause), "illegal {:?}", t);
                match (op, t.cause) {
                    (Op::StartMaintenance, c) => prop_assert_eq!(c, Cause::MaintenanceStarted),
                    (Op::EndMaintenance, c) => prop_assert_eq!(c, Cause::MaintenanceEnded),
                    (Op::Eject, c) => prop_assert_eq!((c, t.to), (Cause::Ejected, Down)),
                    (Op::Readmit, c) => prop_assert_eq!((c, t.from, t.to), (Cause::Readmitted, Down, Probing)),
                    (Op::Result(_), c) => {
                        prop_assert_ne!(before, Maintenance, "results moved a target in maintenance");
                        prop_assert!(matches!(c, Cause::Results | Cause::Flapping | Cause::Settled | Cause::Ejected));
                    }
                }
                if matches!(t.cause, Cause::Results | Cause::Settled) {
                    match t.to {
                        Down => prop_assert!(m.consecutive_failures() >= fall),
                        Up | Degraded if t.from == Probing || t.from == Down => {
                            prop_assert!(m.consecutive_successes() >= rise)
                        }
                        Degraded => prop_assert!(m.degradeds >= degrade),
                        Up => prop_assert!(m.goods >= recover),
                        Probing => prop_assert!(false, "results took a verdict away: {:?}", t),
                        Maintenance => prop_assert!(false),
                    }
                }
                if t.cause == Cause::Results && std::mem::replace(&mut judged, true) {
                    result_changes.push(now);
                    if flap_on {
                        let in_window = result_changes
                            .iter()
                            .filter(|at| now.saturating_duration_since(**at) <= window)
                            .count();
                        prop_assert!(in_window <= flap_n as usize, "{in_window} changes within the flap window");
                    }
                }
                if t.cause == Cause::MaintenanceEnded || t.cause == Cause::Settled {
                    result_changes.clear();
                }
                if t.cause == Cause::MaintenanceEnded {
                    judged = false;
                }
            }
        }
    }

    proptest! {
        // Long runs: fewer cases.
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Independent failures at an ordinary loss rate never look like flapping: only confirmed
        /// changes of verdict count, and with `fall` >= 3 a confirmed DOWN takes `fall` losses
        /// in a row.
        #[test]
        fn ordinary_loss_is_never_flapping(
            loss in 0.0f64..=0.05,
            rise in 1u32..=3,
            fall in 3u32..=5,
            seed: u64,
        ) {
            use rand::{RngExt, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut m = StateMachine::new(
                Thresholds::new(nz(rise), nz(fall)),
                Some(FlapPolicy::default()),
            );
            let schedule = Schedule::default();
            let window = SuccessWindow::default();
            let mut now = Instant::now();
            for i in 0..10_000 {
                let q = if rng.random_bool(loss) { F } else { G };
                let t = m.observe(q, now);
                prop_assert!(
                    !m.is_flapping(),
                    "flagged flapping at result {} after {:?} (loss {})", i, t, loss
                );
                now += m.next_delay(&schedule, &window, &mut rng);
            }
        }

        /// A target whose verdict really alternates is held, whatever its thresholds.
        #[test]
        fn a_really_alternating_target_is_flagged(rise in 1u32..=3, fall in 1u32..=5) {
            let mut m = StateMachine::new(
                Thresholds::new(nz(rise), nz(fall)),
                Some(FlapPolicy::default()),
            );
            let mut now = Instant::now();
            let mut flagged = false;
            'cycles: for _ in 0..10 {
                for (q, n) in [(F, fall), (G, rise)] {
                    for _ in 0..n {
                        if m.observe(q, now).is_some_and(|t| t.cause == Cause::Flapping) {
                            flagged = true;
                            break 'cycles;
                        }
                        now += Duration::from_secs(1);
                    }
                }
            }
            prop_assert!(flagged);
            prop_assert_eq!(m.state(), Probing);
        }
    }
}
