//! Outlier detection: ejecting the members of a pool whose real traffic fails, Envoy-style.
//!
//! A pool (a group of interchangeable members, e.g. the replicas behind one upstream) is judged
//! from the [`Call`]s the service makes to each member, so a failing member is taken out after a
//! handful of bad calls rather than after an active probe's `interval x fall`.
//!
//! # Ejection rules
//! - **Consecutive 5xx** (default 5): every failed call counts, not only a `500`: a timeout, reset
//!   or refused connection is what a proxy reports as a 503 or 504 (Envoy's default accounting).
//!   A success resets the run.
//! - **Consecutive gateway failures** (default 3): [`CallOutcome::is_gateway_failure`] calls (502,
//!   503, 504 and the connection failures) count; a success *or a plain 5xx* resets the run, since
//!   a member that answers with a 500 is reachable. Checked before the 5xx rule, so a run that
//!   meets both thresholds at once is reported as the more specific reason.
//! - **Success rate** (default under 0.8): evaluated by [`OutlierDetector::tick`] once per
//!   `interval` (default 10 s), over the calls since the last evaluation, for members with at least
//!   `min_requests` calls (default 100, Envoy's default volume). Fewer calls are noise: at 20 calls
//!   a member that really succeeds 90% of the time falls under 80% in about 4% of intervals (an
//!   ejection every four minutes for nothing), at 100 calls in under 0.1%. Low-traffic members are
//!   left to the consecutive rules. When the caps below leave room for only some of the members
//!   under the threshold, the worst are ejected first.
//!
//! An ejection lasts `base_ejection x n` (default 30 s), where `n` counts the member's ejections
//! since it was last stable, capped at `max_ejection` (default 300 s). What follows (cool-down,
//! probation, permanent ejection) is [`recovery`](crate::passive::recovery)'s, and the ramp back to full
//! traffic is [`slow_start`](crate::passive::slow_start)'s.
//!
//! # Never the whole pool
//! - **`max_ejection_percent`** (default 10) caps the members out of the pool at once, counting
//!   every member out for any reason (ejected, cooling down, on probation or permanent): capacity
//!   lost is capacity lost. The cap is `floor(members x percent / 100)`, but at least 1 in a pool
//!   of 2 or more (so small pools can eject at all) and at most `members - 1`: the detector never
//!   ejects the last serving member, nor the only member of a pool of one.
//! - **Panic** (`panic_threshold`, default 0.5): when fewer than that fraction of the members are
//!   serving, the pool is in panic. No member is ejected while it lasts, and
//!   [`OutlierDetector::weights`] spreads traffic over every member not ejected permanently, as if
//!   none were out: a pool that has lost too much capacity does better with its sick members'
//!   partial capacity than by overloading the rest. [`OutlierDetector::tick`] reports entering
//!   and leaving panic, so the state is never silent.
//!
//! An ejection held back by either rule is reported as [`OutlierEvent::EjectionSkipped`], and the
//! member's consecutive counts start over: it is ejected later if its run of failures continues
//! once there is room.
//!
//! # Events, not side effects
//! Like [`state`](crate::health), the detector only decides: every method that can change something
//! returns the [`OutlierEvent`]s it caused, once, and the caller logs and counts them
//! (`probe_ejections_total{reason}` from [`OutlierEvent::Ejected`] with
//! [`EjectionReason::as_str`]). It reads no clock and spawns nothing: `now` is an argument, and
//! time-driven changes happen when the caller calls [`OutlierDetector::tick`] (every second is
//! plenty).
//!
//! ```
//! use std::time::Duration;
//! use probe::passive::outlier::{OutlierConfig, OutlierDetector, OutlierEvent};
//! use probe::passive::Call;
//! use probe::TargetId;
//! use tokio::time::Instant;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let now = Instant::now();
//! let mut pool = OutlierDetector::new(OutlierConfig::default());
//! let ids = ["api-1", "api-2", "api-3", "api-4"].map(TargetId::new);
//! let ids: Vec<TargetId> = ids.into_iter().collect::<Result<_, _>>()?;
//! pool.set_members(ids.clone(), now);
//!
//! let bad_gateway = Call::http(502, Duration::from_millis(3));
//! let mut events = Vec::new();
//! for _ in 0..3 {
//!     events.extend(pool.record(&ids[0], &bad_gateway, now));
//! }
//! let [OutlierEvent::Ejected(ejection)] = &events[..] else { panic!("{events:?}") };
//! assert_eq!(ejection.reason.as_str(), "consecutive_gateway_failures");
//! assert_eq!(ejection.until, Some(now + Duration::from_secs(30)));
//! assert!(pool.is_ejected(&ids[0]));
//! assert_eq!(pool.weight(&ids[0], now), 0.0);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use crate::passive::call::{Call, CallOutcome};
use crate::passive::recovery::{Recovery, RecoveryConfig, RecoveryEvent, RecoveryPhase};
use crate::passive::slow_start::{SlowStart, SlowStartConfig};
use crate::target::TargetId;

/// The raw outlier settings, before validation. [`Default`] gives the documented defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutlierSettings {
    /// Failed calls in a row that eject a member; `None` turns the rule off.
    pub consecutive_5xx: Option<NonZeroU32>,
    /// Gateway failures in a row that eject a member; `None` turns the rule off.
    pub consecutive_gateway_failures: Option<NonZeroU32>,
    /// The success rate, in `(0, 1]`, under which a member is ejected at the end of an interval;
    /// `None` turns the rule off.
    pub min_success_rate: Option<f64>,
    /// How often the success rate is evaluated.
    pub interval: Duration,
    /// The fewest calls in an interval for a member's success rate to count.
    pub min_requests: u32,
    /// The first ejection's length; the `n`-th lasts `n` times as long.
    pub base_ejection: Duration,
    /// The longest ejection.
    pub max_ejection: Duration,
    /// The most members, in percent of the pool, out at once (see the module docs for the floor
    /// of one and the ceiling of all but one).
    pub max_ejection_percent: u32,
    /// The fraction of members, in `[0, 1]`, that must be serving; below it the pool panics.
    /// 0 turns panic off.
    pub panic_threshold: f64,
}

impl Default for OutlierSettings {
    /// - `consecutive_5xx`: 5;
    /// - `consecutive_gateway_failures`: 3;
    /// - `min_success_rate`: 0.8;
    /// - `interval`: 10 s;
    /// - `min_requests`: 100;
    /// - `base_ejection`: 30 s;
    /// - `max_ejection`: 300 s;
    /// - `max_ejection_percent`: 10;
    /// - `panic_threshold`: 0.5.
    fn default() -> Self {
        Self {
            consecutive_5xx: NonZeroU32::new(5),
            consecutive_gateway_failures: NonZeroU32::new(3),
            min_success_rate: Some(0.8),
            interval: Duration::from_secs(10),
            min_requests: 100,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
            max_ejection_percent: 10,
            panic_threshold: 0.5,
        }
    }
}

/// Why an [`OutlierConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OutlierConfigError {
    /// The success-rate interval must move.
    #[error("outlier interval must be greater than zero")]
    ZeroInterval,
    /// A rate is a fraction; 0 would never eject (leave the rule off instead).
    #[error("outlier min_success_rate {0} is outside (0, 1]")]
    SuccessRateOutOfRange(f64),
    /// A rate over no calls means nothing.
    #[error("outlier min_requests must be at least 1")]
    ZeroMinRequests,
    /// An ejection of no time would not take the member out at all.
    #[error("outlier base_ejection must be greater than zero")]
    ZeroBaseEjection,
    /// The cap must be at least the first ejection.
    #[error("outlier max_ejection ({max:?}) is below base_ejection ({base:?})")]
    MaxEjectionBelowBase {
        /// The requested base.
        base: Duration,
        /// The requested cap.
        max: Duration,
    },
    /// A percentage of the pool.
    #[error("outlier max_ejection_percent {0} is outside 1..=100")]
    MaxEjectionPercentOutOfRange(u32),
    /// A fraction of the pool.
    #[error("outlier panic_threshold {0} is outside [0, 1]")]
    PanicThresholdOutOfRange(f64),
}

/// Validated outlier settings; the default is [`OutlierSettings::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OutlierConfig {
    settings: OutlierSettings,
}

impl OutlierConfig {
    /// Validates `settings` (see [`OutlierSettings::default`] for the defaults).
    ///
    /// # Errors
    /// The first rule broken:
    /// - [`OutlierConfigError::ZeroInterval`] when `interval` is zero;
    /// - [`OutlierConfigError::SuccessRateOutOfRange`] when `min_success_rate` is set and not
    ///   within `(0, 1]` (or is NaN);
    /// - [`OutlierConfigError::ZeroMinRequests`] when `min_requests` is 0;
    /// - [`OutlierConfigError::ZeroBaseEjection`] when `base_ejection` is zero;
    /// - [`OutlierConfigError::MaxEjectionBelowBase`] when `max_ejection < base_ejection`;
    /// - [`OutlierConfigError::MaxEjectionPercentOutOfRange`] when `max_ejection_percent` is not
    ///   within `1..=100`;
    /// - [`OutlierConfigError::PanicThresholdOutOfRange`] when `panic_threshold` is not within
    ///   `[0, 1]` (or is NaN).
    pub fn try_new(settings: OutlierSettings) -> Result<Self, OutlierConfigError> {
        let s = &settings;
        if s.interval.is_zero() {
            return Err(OutlierConfigError::ZeroInterval);
        }
        if let Some(rate) = s.min_success_rate
            && !(rate > 0.0 && rate <= 1.0)
        {
            return Err(OutlierConfigError::SuccessRateOutOfRange(rate));
        }
        if s.min_requests == 0 {
            return Err(OutlierConfigError::ZeroMinRequests);
        }
        if s.base_ejection.is_zero() {
            return Err(OutlierConfigError::ZeroBaseEjection);
        }
        if s.max_ejection < s.base_ejection {
            return Err(OutlierConfigError::MaxEjectionBelowBase {
                base: s.base_ejection,
                max: s.max_ejection,
            });
        }
        if !(1..=100).contains(&s.max_ejection_percent) {
            return Err(OutlierConfigError::MaxEjectionPercentOutOfRange(
                s.max_ejection_percent,
            ));
        }
        if !(0.0..=1.0).contains(&s.panic_threshold) {
            return Err(OutlierConfigError::PanicThresholdOutOfRange(
                s.panic_threshold,
            ));
        }
        Ok(Self { settings })
    }

    /// The validated settings.
    pub fn settings(&self) -> &OutlierSettings {
        &self.settings
    }

    /// The length of a member's `times_ejected`-th ejection: `base x times`, capped.
    pub fn ejection_time(&self, times_ejected: u32) -> Duration {
        let s = &self.settings;
        s.base_ejection
            .saturating_mul(times_ejected.max(1))
            .min(s.max_ejection)
    }

    /// The most members of a pool of `members` that may be out at once: the percentage rounded
    /// down, at least 1 when there are two or more members, never all of them.
    pub fn max_out(&self, members: usize) -> usize {
        if members < 2 {
            return 0;
        }
        let percent = self.settings.max_ejection_percent as usize;
        (members.saturating_mul(percent) / 100).clamp(1, members - 1)
    }
}

/// Which rule ejected a member. The names (`as_str`) are the `reason` label of
/// `probe_ejections_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EjectionReason {
    /// `consecutive_5xx` failed calls in a row.
    Consecutive5xx,
    /// `consecutive_gateway_failures` gateway failures in a row.
    ConsecutiveGatewayFailures,
    /// A success rate under `min_success_rate` over an interval.
    SuccessRate,
}

impl EjectionReason {
    /// The snake-case name used in metric labels, events and the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Consecutive5xx => "consecutive_5xx",
            Self::ConsecutiveGatewayFailures => "consecutive_gateway_failures",
            Self::SuccessRate => "success_rate",
        }
    }
}

impl fmt::Display for EjectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What held back an ejection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EjectionLimit {
    /// `max_ejection_percent` of the pool (or all members but one) is already out.
    MaxEjectionPercent,
    /// The pool is in panic.
    Panic,
}

impl EjectionLimit {
    /// The snake-case name used in metric labels and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MaxEjectionPercent => "max_ejection_percent",
            Self::Panic => "panic",
        }
    }
}

/// An ejection: who, why, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// The member taken out.
    pub id: TargetId,
    /// The rule that took it out.
    pub reason: EjectionReason,
    /// When.
    pub since: Instant,
    /// When the ejection time ends (cool-down and probation follow); `None` when the ejection is
    /// permanent.
    pub until: Option<Instant>,
    /// Ejections since the member was last stable, this one included.
    pub times_ejected: u32,
}

/// A change in a pool, reported once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutlierEvent {
    /// A member was taken out of the pool.
    Ejected(Ejection),
    /// A member met an ejection rule but stayed in the pool.
    EjectionSkipped {
        /// The member.
        id: TargetId,
        /// The rule it met.
        reason: EjectionReason,
        /// What held it back.
        limit: EjectionLimit,
    },
    /// A step of an ejected member's recovery, its return included.
    Recovery {
        /// The member.
        id: TargetId,
        /// The step.
        event: RecoveryEvent,
    },
    /// An operator put a member back.
    Cleared {
        /// The member.
        id: TargetId,
    },
    /// Fewer than `panic_threshold` of the members are serving: traffic goes to all of them.
    PanicStarted {
        /// Members serving.
        serving: usize,
        /// Members in the pool.
        members: usize,
    },
    /// Enough members are serving again.
    PanicEnded {
        /// Members serving.
        serving: usize,
        /// Members in the pool.
        members: usize,
    },
}

impl OutlierEvent {
    /// The member the event is about; `None` for pool-wide events.
    pub fn id(&self) -> Option<&TargetId> {
        match self {
            Self::Ejected(ejection) => Some(&ejection.id),
            Self::EjectionSkipped { id, .. } | Self::Recovery { id, .. } | Self::Cleared { id } => {
                Some(id)
            }
            Self::PanicStarted { .. } | Self::PanicEnded { .. } => None,
        }
    }
}

/// A member's share of its pool's traffic over time: fixed until the detector's next event, or
/// ramping up through slow start. [`Share::at`] is what [`OutlierDetector::weight`] says at that
/// instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Share {
    /// The same weight until the next event.
    Fixed(f64),
    /// A returning member's slow-start ramp.
    Ramp(SlowStart),
}

impl Share {
    /// The weight at `now`, in `[0, 1]`.
    pub fn at(&self, now: Instant) -> f64 {
        match self {
            Self::Fixed(weight) => *weight,
            Self::Ramp(ramp) => ramp.weight(now),
        }
    }
}

/// A pool's routing input: every member with its [`Share`], in id order.
#[derive(Clone, Debug, PartialEq)]
pub struct Shares {
    /// The members and their shares.
    pub members: Vec<(TargetId, Share)>,
    /// Whether the pool is in panic (health ignored).
    pub panic: bool,
}

/// A member's share: nothing once ejected permanently; in panic, the same as every other member;
/// serving, full or ramping up; out of the pool, nothing.
fn share_of(member: &Member, panic: bool) -> Share {
    match member.recovery.phase() {
        RecoveryPhase::Permanent(_) => Share::Fixed(0.0),
        _ if panic => Share::Fixed(1.0),
        RecoveryPhase::Serving => member.warming.map_or(Share::Fixed(1.0), Share::Ramp),
        _ => Share::Fixed(0.0),
    }
}

/// One member's state, for the API.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberStatus {
    /// The member.
    pub id: TargetId,
    /// Where it is in ejection and recovery.
    pub phase: RecoveryPhase,
    /// Whether it is out of the pool (in any phase but serving). In panic it may still get
    /// traffic: see `weight`.
    pub ejected: bool,
    /// The ejection that took it out, while it is out.
    pub ejection: Option<Ejection>,
    /// Its share of traffic now, as [`OutlierDetector::weight`] gives it.
    pub weight: f64,
}

/// A member's counters and recovery.
#[derive(Clone, Debug)]
struct Member {
    consecutive_5xx: u32,
    consecutive_gateway: u32,
    /// Calls and failures since the last success-rate evaluation.
    interval_calls: u32,
    interval_failures: u32,
    recovery: Recovery,
    /// The ejection that took the member out, kept for the API while it is out.
    ejection: Option<Ejection>,
    /// The ramp of a member that came back (or joined), while it lasts.
    warming: Option<SlowStart>,
}

impl Member {
    fn new(warming: Option<SlowStart>) -> Self {
        Self {
            consecutive_5xx: 0,
            consecutive_gateway: 0,
            interval_calls: 0,
            interval_failures: 0,
            recovery: Recovery::new(),
            ejection: None,
            warming,
        }
    }

    fn reset_counts(&mut self) {
        self.consecutive_5xx = 0;
        self.consecutive_gateway = 0;
        self.interval_calls = 0;
        self.interval_failures = 0;
    }

    /// Counts a call of a serving member; returns the consecutive rule it meets, if any.
    fn count(
        &mut self,
        outcome: CallOutcome,
        settings: &OutlierSettings,
    ) -> Option<EjectionReason> {
        self.interval_calls = self.interval_calls.saturating_add(1);
        if !outcome.is_failure() {
            self.consecutive_5xx = 0;
            self.consecutive_gateway = 0;
            return None;
        }
        self.interval_failures = self.interval_failures.saturating_add(1);
        self.consecutive_5xx = self.consecutive_5xx.saturating_add(1);
        if outcome.is_gateway_failure() {
            self.consecutive_gateway = self.consecutive_gateway.saturating_add(1);
        } else {
            self.consecutive_gateway = 0;
        }
        let met = |run: u32, limit: Option<NonZeroU32>| limit.is_some_and(|l| run >= l.get());
        if met(
            self.consecutive_gateway,
            settings.consecutive_gateway_failures,
        ) {
            Some(EjectionReason::ConsecutiveGatewayFailures)
        } else if met(self.consecutive_5xx, settings.consecutive_5xx) {
            Some(EjectionReason::Consecutive5xx)
        } else {
            None
        }
    }

    /// Takes in a recovery step: a member that comes back starts afresh, warming up.
    fn on_recovery(&mut self, event: RecoveryEvent, slow_start: Option<SlowStartConfig>) {
        if let RecoveryEvent::Returned { at } = event {
            self.come_back(at, slow_start);
        }
    }

    fn come_back(&mut self, at: Instant, slow_start: Option<SlowStartConfig>) {
        self.reset_counts();
        self.ejection = None;
        self.warming = slow_start.map(|config| SlowStart::new(config, at));
    }
}

/// Outlier detection, recovery and slow start over one pool of members.
///
/// Built with [`OutlierDetector::new`], then given its members with
/// [`OutlierDetector::set_members`]; fed with [`record`](OutlierDetector::record) (real calls),
/// [`pass`](OutlierDetector::pass) and [`fail`](OutlierDetector::fail) (active checks of
/// members in recovery) and [`tick`](OutlierDetector::tick) (time); read with
/// [`weights`](OutlierDetector::weights) for routing and [`status`](OutlierDetector::status) for
/// the API. Not thread-safe by itself: an embedder keeps one per pool behind its own lock, or in
/// one task.
#[derive(Clone, Debug)]
pub struct OutlierDetector {
    config: OutlierConfig,
    recovery: RecoveryConfig,
    slow_start: Option<SlowStartConfig>,
    /// A `BTreeMap` so that `tick` walks (and reports) members in a stable order.
    members: BTreeMap<TargetId, Member>,
    /// How many members are out, recounted after every change of phase so that the caps and the
    /// panic check cost nothing on the hot path.
    out: usize,
    /// The start of the current success-rate interval; set by the first call or tick.
    interval_start: Option<Instant>,
    /// Whether panic was last reported as started, so that `tick` reports each change once.
    panic_reported: bool,
}

impl OutlierDetector {
    /// An empty pool with the given outlier rules.
    ///
    /// Defaults, changed with the `with_` methods:
    /// - recovery: [`RecoveryConfig::default`];
    /// - slow start: on, [`SlowStartConfig::default`].
    pub fn new(config: OutlierConfig) -> Self {
        Self {
            config,
            recovery: RecoveryConfig::default(),
            slow_start: Some(SlowStartConfig::default()),
            members: BTreeMap::new(),
            out: 0,
            interval_start: None,
            panic_reported: false,
        }
    }

    /// Sets the recovery rules. They apply from the next step of each member.
    pub fn with_recovery(mut self, recovery: RecoveryConfig) -> Self {
        self.recovery = recovery;
        self
    }

    /// Sets the slow-start ramp; `None` returns members at full weight at once. Ramps already
    /// running keep their configuration.
    pub fn with_slow_start(mut self, slow_start: Option<SlowStartConfig>) -> Self {
        self.slow_start = slow_start;
        self
    }

    /// The outlier rules.
    pub fn config(&self) -> &OutlierConfig {
        &self.config
    }

    /// The recovery rules.
    pub fn recovery_config(&self) -> &RecoveryConfig {
        &self.recovery
    }

    /// Replaces the pool's members at `now`.
    ///
    /// Members that stay keep all their state (counts, ejection, recovery, ramp); members that
    /// leave are forgotten; duplicates count once. A member added to a pool that already had
    /// members warms up through slow start, like one that recovered (the source documents'
    /// "graceful online": a new node takes a small share first); the first members of an empty
    /// pool start at full weight, since there is no one to shift traffic from.
    pub fn set_members(&mut self, ids: impl IntoIterator<Item = TargetId>, now: Instant) {
        let warm_newcomers = !self.members.is_empty();
        let mut previous = std::mem::take(&mut self.members);
        for id in ids {
            if self.members.contains_key(&id) {
                continue;
            }
            let member = previous.remove(&id).unwrap_or_else(|| {
                let warming = self
                    .slow_start
                    .filter(|_| warm_newcomers)
                    .map(|config| SlowStart::new(config, now));
                Member::new(warming)
            });
            self.members.insert(id, member);
        }
        self.recount();
    }

    /// The members, in id order.
    pub fn members(&self) -> impl Iterator<Item = &TargetId> {
        self.members.keys()
    }

    /// How many members the pool has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the pool has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Records a real call to member `id` that ended at `now`.
    ///
    /// A serving member's call counts towards the ejection rules, and may eject it. A member on
    /// probation is judged by it like by an active check: a success is a pass, any failure a
    /// failure (see [`pass`](Self::pass)). Calls to a member that is ejected, cooling down or
    /// out permanently (late answers, or traffic during panic) are ignored, and so are calls to
    /// an unknown id (a member just removed). The call's latency is not judged here.
    pub fn record(&mut self, id: &TargetId, call: &Call, now: Instant) -> Vec<OutlierEvent> {
        let mut events = Vec::new();
        if self.interval_start.is_none() {
            self.interval_start = Some(now);
        }
        let Some(member) = self.members.get_mut(id) else {
            return events;
        };
        if member.recovery.is_out() {
            self.judge(id, !call.outcome.is_failure(), now, &mut events);
        } else if let Some(reason) = member.count(call.outcome, &self.config.settings) {
            self.try_eject(id, reason, now, &mut events);
        }
        events
    }

    /// Counts a passed active check of member `id` at `now`.
    ///
    /// Only a member on probation is judged: `passes` passes in a row bring it back (into slow
    /// start). Checks of a serving member are the engine's health state machine's business, and
    /// checks during the ejection time or cool-down are not counted. Time-driven steps due at
    /// `now` are made first, so a check just after a cool-down ended counts even before the next
    /// [`tick`](Self::tick).
    pub fn pass(&mut self, id: &TargetId, now: Instant) -> Vec<OutlierEvent> {
        let mut events = Vec::new();
        self.judge(id, true, now, &mut events);
        events
    }

    /// Counts a failed active check of member `id` at `now`: a member on probation goes back to
    /// cooling down, for twice as long. The same rules as [`pass`](Self::pass) apply otherwise.
    pub fn fail(&mut self, id: &TargetId, now: Instant) -> Vec<OutlierEvent> {
        let mut events = Vec::new();
        self.judge(id, false, now, &mut events);
        events
    }

    /// Makes the time-driven changes due at `now`:
    /// - ejection times and cool-downs that ended, members that came back with no passes
    ///   required, and members given up (`give_up_after`);
    /// - the success-rate evaluation, when an `interval` has passed since the last one;
    /// - ramps that finished, and ejection histories of members now stable;
    /// - entering or leaving panic.
    ///
    /// Call it regularly: every second is plenty.
    pub fn tick(&mut self, now: Instant) -> Vec<OutlierEvent> {
        let mut events = Vec::new();
        let interval_start = *self.interval_start.get_or_insert(now);
        for (id, member) in &mut self.members {
            advance(
                id,
                member,
                &self.recovery,
                self.slow_start,
                now,
                &mut events,
            );
            member.recovery.settle(&self.recovery, now);
            if member.warming.is_some_and(|ramp| ramp.is_complete(now)) {
                member.warming = None;
            }
        }
        if !events.is_empty() {
            self.recount();
        }
        if now.saturating_duration_since(interval_start) >= self.config.settings.interval {
            self.interval_start = Some(now);
            self.evaluate_success_rates(now, &mut events);
        }
        let panic = self.in_panic();
        if panic != self.panic_reported {
            self.panic_reported = panic;
            let (serving, members) = (self.members.len() - self.out, self.members.len());
            events.push(if panic {
                OutlierEvent::PanicStarted { serving, members }
            } else {
                OutlierEvent::PanicEnded { serving, members }
            });
        }
        events
    }

    /// An operator puts member `id` back in the pool at `now`, from any phase out of it,
    /// permanent included; it warms up through slow start and its history is forgotten.
    /// Returns [`OutlierEvent::Cleared`], or `None` when the member is unknown or serving.
    pub fn operator_clear(&mut self, id: &TargetId, now: Instant) -> Option<OutlierEvent> {
        let member = self.members.get_mut(id)?;
        if !member.recovery.clear(now) {
            return None;
        }
        member.come_back(now, self.slow_start);
        self.recount();
        Some(OutlierEvent::Cleared { id: id.clone() })
    }

    /// Whether member `id` is out of the pool (in any phase but serving). Unknown ids are not.
    ///
    /// This is the member's own state; for routing use [`weight`](Self::weight) or
    /// [`weights`](Self::weights), which also apply panic and slow start.
    pub fn is_ejected(&self, id: &TargetId) -> bool {
        self.members
            .get(id)
            .is_some_and(|member| member.recovery.is_out())
    }

    /// Whether the pool is in panic: fewer than `panic_threshold` of its members are serving.
    pub fn in_panic(&self) -> bool {
        let members = self.members.len();
        let threshold = self.config.settings.panic_threshold;
        members > 0 && ((members - self.out) as f64) < threshold * members as f64
    }

    /// Member `id`'s share of traffic at `now`, in `[0, 1]`, for [`slow_start::pick`]:
    /// - serving: 1, or its slow-start weight while it warms up;
    /// - out of the pool: 0;
    /// - in panic: 1 for every member not ejected permanently (health is ignored, as if no
    ///   member were out);
    /// - unknown: 0.
    ///
    /// [`slow_start::pick`]: crate::passive::select::pick
    pub fn weight(&self, id: &TargetId, now: Instant) -> f64 {
        self.members
            .get(id)
            .map_or(0.0, |member| self.weight_of(member, self.in_panic(), now))
    }

    /// Every member with its [`weight`](Self::weight) at `now`, in id order: the input of
    /// [`slow_start::pick`](crate::passive::select::pick).
    pub fn weights(&self, now: Instant) -> Vec<(TargetId, f64)> {
        let panic = self.in_panic();
        self.members
            .iter()
            .map(|(id, member)| (id.clone(), self.weight_of(member, panic, now)))
            .collect()
    }

    /// Member `id`'s state at `now`, for the API; `None` for an unknown id.
    pub fn status(&self, id: &TargetId, now: Instant) -> Option<MemberStatus> {
        let member = self.members.get(id)?;
        Some(self.status_of(id, member, self.in_panic(), now))
    }

    /// Every member's state at `now`, in id order.
    pub fn statuses(&self, now: Instant) -> Vec<MemberStatus> {
        let panic = self.in_panic();
        self.members
            .iter()
            .map(|(id, member)| self.status_of(id, member, panic, now))
            .collect()
    }

    fn status_of(&self, id: &TargetId, member: &Member, panic: bool, now: Instant) -> MemberStatus {
        let phase = member.recovery.phase();
        MemberStatus {
            id: id.clone(),
            phase,
            ejected: phase.is_out(),
            ejection: member.ejection.clone(),
            weight: self.weight_of(member, panic, now),
        }
    }

    fn weight_of(&self, member: &Member, panic: bool, now: Instant) -> f64 {
        share_of(member, panic).at(now)
    }

    /// Every member with its [`Share`], in id order, and whether the pool is in panic: a routing
    /// table that gives the [`weights`](Self::weights) of any instant until the detector's next
    /// event, read without the detector.
    pub fn shares(&self) -> Shares {
        let panic = self.in_panic();
        let members = self
            .members
            .iter()
            .map(|(id, member)| (id.clone(), share_of(member, panic)))
            .collect();
        Shares { members, panic }
    }

    /// Judges a check (or a call) of a member in recovery.
    fn judge(&mut self, id: &TargetId, passed: bool, now: Instant, events: &mut Vec<OutlierEvent>) {
        let Some(member) = self.members.get_mut(id) else {
            return;
        };
        let before = events.len();
        advance(id, member, &self.recovery, self.slow_start, now, events);
        let step = if passed {
            member.recovery.pass(&self.recovery, now)
        } else {
            member.recovery.fail(&self.recovery, now)
        };
        if let Some(event) = step {
            member.on_recovery(event, self.slow_start);
            events.push(OutlierEvent::Recovery {
                id: id.clone(),
                event,
            });
        }
        if events.len() > before {
            self.recount();
        }
    }

    /// Ejects serving member `id` for `reason`, unless the caps or panic hold it back.
    fn try_eject(
        &mut self,
        id: &TargetId,
        reason: EjectionReason,
        now: Instant,
        events: &mut Vec<OutlierEvent>,
    ) {
        let limit = if self.in_panic() {
            Some(EjectionLimit::Panic)
        } else if self.out >= self.config.max_out(self.members.len()) {
            Some(EjectionLimit::MaxEjectionPercent)
        } else {
            None
        };
        let Some(member) = self.members.get_mut(id) else {
            return;
        };
        if let Some(limit) = limit {
            member.consecutive_5xx = 0;
            member.consecutive_gateway = 0;
            events.push(OutlierEvent::EjectionSkipped {
                id: id.clone(),
                reason,
                limit,
            });
            return;
        }
        let config = self.config;
        let Some(term) = member
            .recovery
            .eject(&self.recovery, now, |n| config.ejection_time(n))
        else {
            return;
        };
        member.reset_counts();
        member.warming = None;
        let ejection = Ejection {
            id: id.clone(),
            reason,
            since: now,
            until: term.until,
            times_ejected: term.times_ejected,
        };
        member.ejection = Some(ejection.clone());
        events.push(OutlierEvent::Ejected(ejection));
        if let RecoveryPhase::Permanent(cause) = member.recovery.phase() {
            events.push(OutlierEvent::Recovery {
                id: id.clone(),
                event: RecoveryEvent::Permanent(cause),
            });
        }
        self.recount();
    }

    /// Ejects the serving members whose success rate over the interval that just ended is under
    /// the threshold, worst first, and starts a new interval.
    fn evaluate_success_rates(&mut self, now: Instant, events: &mut Vec<OutlierEvent>) {
        let settings = self.config.settings;
        let mut under: Vec<(f64, TargetId)> = Vec::new();
        for (id, member) in &mut self.members {
            let (calls, failures) = (member.interval_calls, member.interval_failures);
            member.interval_calls = 0;
            member.interval_failures = 0;
            let Some(min_rate) = settings.min_success_rate else {
                continue;
            };
            if member.recovery.is_out() || calls < settings.min_requests {
                continue;
            }
            let rate = f64::from(calls - failures) / f64::from(calls);
            if rate < min_rate {
                under.push((rate, id.clone()));
            }
        }
        under.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        for (_, id) in under {
            self.try_eject(&id, EjectionReason::SuccessRate, now, events);
        }
    }

    fn recount(&mut self) {
        self.out = self
            .members
            .values()
            .filter(|member| member.recovery.is_out())
            .count();
    }
}

/// Makes every time-driven recovery step of one member due at `now`, reporting each.
fn advance(
    id: &TargetId,
    member: &mut Member,
    config: &RecoveryConfig,
    slow_start: Option<SlowStartConfig>,
    now: Instant,
    events: &mut Vec<OutlierEvent>,
) {
    while let Some(event) = member.recovery.advance(config, now) {
        member.on_recovery(event, slow_start);
        events.push(OutlierEvent::Recovery {
            id: id.clone(),
            event,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passive::recovery::{PermanentCause, RecoverySettings};

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    fn call(status: u16) -> Call {
        Call::http(status, Duration::from_millis(2))
    }

    fn failed(outcome: CallOutcome) -> Call {
        Call {
            outcome,
            latency: Duration::from_millis(2),
        }
    }

    /// A pool of `n` members `m00`, `m01`, ... with the given rules, populated at the returned
    /// instant.
    fn pool(n: usize, settings: OutlierSettings) -> (OutlierDetector, Vec<TargetId>, Instant) {
        let t0 = Instant::now();
        let mut detector = OutlierDetector::new(OutlierConfig::try_new(settings).unwrap());
        let ids: Vec<TargetId> = (0..n).map(|i| id(&format!("m{i:02}"))).collect();
        detector.set_members(ids.clone(), t0);
        (detector, ids, t0)
    }

    fn recovery(settings: RecoverySettings) -> RecoveryConfig {
        RecoveryConfig::try_new(settings).unwrap()
    }

    /// Records `calls` in order, collecting the events.
    fn feed(
        d: &mut OutlierDetector,
        who: &TargetId,
        calls: &[Call],
        now: Instant,
    ) -> Vec<OutlierEvent> {
        calls.iter().flat_map(|c| d.record(who, c, now)).collect()
    }

    fn ejection_of(events: &[OutlierEvent]) -> &Ejection {
        match events {
            [OutlierEvent::Ejected(ejection)] => ejection,
            other => panic!("expected one ejection, got {other:?}"),
        }
    }

    fn recovery_events(events: &[OutlierEvent]) -> Vec<(&str, RecoveryEvent)> {
        events
            .iter()
            .filter_map(|e| match e {
                OutlierEvent::Recovery { id, event } => Some((id.as_str(), *event)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn defaults_and_validation() {
        let d = OutlierSettings::default();
        assert_eq!(d.consecutive_5xx, NonZeroU32::new(5));
        assert_eq!(d.consecutive_gateway_failures, NonZeroU32::new(3));
        assert_eq!(d.min_success_rate, Some(0.8));
        assert_eq!((d.interval, d.min_requests), (secs(10), 100));
        assert_eq!((d.base_ejection, d.max_ejection), (secs(30), secs(300)));
        assert_eq!((d.max_ejection_percent, d.panic_threshold), (10, 0.5));
        assert_eq!(OutlierConfig::try_new(d), Ok(OutlierConfig::default()));

        let bad = |s: OutlierSettings| OutlierConfig::try_new(s).unwrap_err();
        use OutlierConfigError as E;
        assert_eq!(
            bad(OutlierSettings {
                interval: Duration::ZERO,
                ..d
            }),
            E::ZeroInterval
        );
        for rate in [0.0, 1.1, f64::NAN] {
            let s = OutlierSettings {
                min_success_rate: Some(rate),
                ..d
            };
            assert!(matches!(bad(s), E::SuccessRateOutOfRange(_)));
        }
        assert_eq!(
            bad(OutlierSettings {
                min_requests: 0,
                ..d
            }),
            E::ZeroMinRequests
        );
        assert_eq!(
            bad(OutlierSettings {
                base_ejection: Duration::ZERO,
                ..d
            }),
            E::ZeroBaseEjection
        );
        assert_eq!(
            bad(OutlierSettings {
                max_ejection: secs(10),
                ..d
            }),
            E::MaxEjectionBelowBase {
                base: secs(30),
                max: secs(10)
            }
        );
        for percent in [0, 101] {
            let s = OutlierSettings {
                max_ejection_percent: percent,
                ..d
            };
            assert_eq!(bad(s), E::MaxEjectionPercentOutOfRange(percent));
        }
        for threshold in [-0.1, 1.5, f64::NAN] {
            let s = OutlierSettings {
                panic_threshold: threshold,
                ..d
            };
            assert!(matches!(bad(s), E::PanicThresholdOutOfRange(_)));
        }
        let off = OutlierSettings {
            consecutive_5xx: None,
            consecutive_gateway_failures: None,
            min_success_rate: None,
            panic_threshold: 0.0,
            max_ejection_percent: 100,
            ..d
        };
        assert!(OutlierConfig::try_new(off).is_ok());
    }

    #[test]
    fn five_failed_calls_in_a_row_eject_and_a_success_resets_the_run() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        let m = &ids[3];
        let four = [call(500); 4];
        assert!(feed(&mut d, m, &four, t0).is_empty());
        assert!(d.record(m, &call(200), t0).is_empty(), "a success resets");
        assert!(feed(&mut d, m, &four, t0).is_empty());
        let events = d.record(m, &call(500), t0 + secs(1));
        let ejection = ejection_of(&events);
        assert_eq!(
            *ejection,
            Ejection {
                id: m.clone(),
                reason: EjectionReason::Consecutive5xx,
                since: t0 + secs(1),
                until: Some(t0 + secs(31)),
                times_ejected: 1,
            }
        );
        assert_eq!(ejection.reason.as_str(), "consecutive_5xx");
        assert!(d.is_ejected(m));
        assert_eq!(d.weight(m, t0 + secs(1)), 0.0);
        let status = d.status(m, t0 + secs(1)).unwrap();
        assert!(status.ejected);
        assert_eq!(
            status.phase,
            RecoveryPhase::Ejected {
                until: t0 + secs(31)
            }
        );
        assert_eq!(status.ejection.as_ref(), Some(ejection));
        // Late answers of an ejected member change nothing.
        assert!(feed(&mut d, m, &[call(500); 10], t0 + secs(2)).is_empty());
    }

    #[test]
    fn connection_failures_and_gateway_statuses_count_as_5xx_too() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        // 502 502 500 502 502: the 500 breaks the gateway run, but all five are failures.
        let calls = [call(502), call(502), call(500), call(502), call(502)];
        let events = feed(&mut d, &ids[0], &calls, t0);
        assert_eq!(ejection_of(&events).reason, EjectionReason::Consecutive5xx);
    }

    #[test]
    fn three_gateway_failures_in_a_row_eject() {
        let settings = OutlierSettings {
            max_ejection_percent: 50,
            ..OutlierSettings::default()
        };
        let (mut d, ids, t0) = pool(10, settings);
        let two = [call(502), call(504)];
        assert!(feed(&mut d, &ids[0], &two, t0).is_empty());
        assert!(
            d.record(&ids[0], &call(200), t0).is_empty(),
            "a success resets"
        );
        assert!(feed(&mut d, &ids[0], &two, t0).is_empty());
        let events = d.record(&ids[0], &call(503), t0);
        let ejection = ejection_of(&events);
        assert_eq!(ejection.reason, EjectionReason::ConsecutiveGatewayFailures);
        assert_eq!(ejection.reason.as_str(), "consecutive_gateway_failures");

        // Timeouts, resets and refusals are gateway failures.
        let calls = [
            failed(CallOutcome::Timeout),
            failed(CallOutcome::Reset),
            failed(CallOutcome::Refused),
        ];
        let events = feed(&mut d, &ids[1], &calls, t0);
        assert_eq!(
            ejection_of(&events).reason,
            EjectionReason::ConsecutiveGatewayFailures
        );
    }

    /// `calls` calls to `who`, `failures` of them failed and spread out so that no consecutive
    /// rule is met.
    fn spread(d: &mut OutlierDetector, who: &TargetId, calls: u32, failures: u32, now: Instant) {
        for i in 0..calls {
            // Bresenham: failure i is due when the running share crosses the next whole one.
            let fail = (i + 1) * failures / calls > i * failures / calls;
            let events = d.record(who, &call(if fail { 500 } else { 200 }), now);
            assert!(events.is_empty(), "{events:?}");
        }
    }

    #[test]
    fn success_rate_ejects_at_the_end_of_an_interval_with_enough_calls() {
        let settings = OutlierSettings {
            max_ejection_percent: 50,
            ..OutlierSettings::default()
        };
        let (mut d, ids, t0) = pool(10, settings);
        assert!(d.tick(t0).is_empty(), "the first tick starts the interval");
        spread(&mut d, &ids[0], 100, 25, t0 + secs(1)); // 0.75: ejected
        spread(&mut d, &ids[1], 99, 49, t0 + secs(1)); // 0.51, but under the volume
        spread(&mut d, &ids[2], 100, 20, t0 + secs(1)); // 0.80: not under the threshold
        spread(&mut d, &ids[3], 500, 10, t0 + secs(1)); // 0.98
        assert!(d.tick(t0 + secs(9)).is_empty(), "the interval is not over");
        let events = d.tick(t0 + secs(10));
        let ejection = ejection_of(&events);
        assert_eq!(
            (ejection.id.as_str(), ejection.reason),
            ("m00", EjectionReason::SuccessRate)
        );
        assert_eq!(ejection.reason.as_str(), "success_rate");
        assert_eq!(ejection.until, Some(t0 + secs(40)));

        // A new interval starts from zero: one more bad call is not a bad rate.
        d.record(&ids[1], &call(500), t0 + secs(11));
        assert!(d.tick(t0 + secs(20)).is_empty());
    }

    #[test]
    fn success_rate_ejects_the_worst_first_when_the_cap_leaves_room_for_one() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        d.tick(t0);
        spread(&mut d, &ids[1], 100, 30, t0);
        spread(&mut d, &ids[2], 100, 45, t0);
        let events = d.tick(t0 + secs(10));
        assert_eq!(
            events,
            [
                OutlierEvent::Ejected(Ejection {
                    id: ids[2].clone(),
                    reason: EjectionReason::SuccessRate,
                    since: t0 + secs(10),
                    until: Some(t0 + secs(40)),
                    times_ejected: 1,
                }),
                OutlierEvent::EjectionSkipped {
                    id: ids[1].clone(),
                    reason: EjectionReason::SuccessRate,
                    limit: EjectionLimit::MaxEjectionPercent,
                },
            ]
        );
    }

    #[test]
    fn ejection_time_is_base_times_n_capped() {
        let settings = OutlierSettings {
            base_ejection: secs(30),
            max_ejection: secs(100),
            ..OutlierSettings::default()
        };
        let config = OutlierConfig::try_new(settings).unwrap();
        let times: Vec<u64> = (1..=5).map(|n| config.ejection_time(n).as_secs()).collect();
        assert_eq!(times, [30, 60, 90, 100, 100]);

        // Through the detector: a member that returns and fails again at once.
        let (d, ids, t0) = pool(10, settings);
        let mut d = d.with_recovery(recovery(RecoverySettings {
            passes: 0,
            cooldown: secs(10),
            permanent_after: None,
            give_up_after: None,
            ..RecoverySettings::default()
        }));
        let mut now = t0;
        let mut lengths = Vec::new();
        for n in 1..=5 {
            let events = feed(&mut d, &ids[0], &[call(500); 5], now);
            let ejection = ejection_of(&events);
            assert_eq!(ejection.times_ejected, n);
            let until = ejection.until.unwrap();
            lengths.push((until - now).as_secs());
            let cooldown = d.tick(until).into_iter().find_map(|e| match e {
                OutlierEvent::Recovery {
                    event: RecoveryEvent::CoolingDown { until },
                    ..
                } => Some(until),
                _ => None,
            });
            now = cooldown.unwrap();
            let back = d.tick(now);
            assert_eq!(
                recovery_events(&back),
                [("m00", RecoveryEvent::Returned { at: now })]
            );
        }
        assert_eq!(lengths, [30, 60, 90, 100, 100]);
    }

    #[test]
    fn at_most_max_ejection_percent_is_out_but_one_member_may_go_in_a_small_pool() {
        let config = OutlierConfig::default();
        let caps: Vec<usize> = [0, 1, 2, 3, 10, 19, 25, 100]
            .map(|n| config.max_out(n))
            .to_vec();
        assert_eq!(caps, [0, 0, 1, 1, 1, 1, 2, 10]);
        let all = OutlierConfig::try_new(OutlierSettings {
            max_ejection_percent: 100,
            ..OutlierSettings::default()
        })
        .unwrap();
        assert_eq!(all.max_out(4), 3, "never the last member");

        // A pool of one never ejects its member.
        let (mut d, ids, t0) = pool(1, OutlierSettings::default());
        let events = feed(&mut d, &ids[0], &[call(500); 5], t0);
        assert_eq!(
            events,
            [OutlierEvent::EjectionSkipped {
                id: ids[0].clone(),
                reason: EjectionReason::Consecutive5xx,
                limit: EjectionLimit::MaxEjectionPercent,
            }]
        );
        assert!(!d.is_ejected(&ids[0]));

        // A pool of ten ejects one; the second waits, and its run starts over.
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        ejection_of(&feed(&mut d, &ids[0], &[call(500); 5], t0));
        let events = feed(&mut d, &ids[1], &[call(500); 5], t0);
        assert!(matches!(
            &events[..],
            [OutlierEvent::EjectionSkipped {
                limit: EjectionLimit::MaxEjectionPercent,
                ..
            }]
        ));
        assert!(feed(&mut d, &ids[1], &[call(500); 4], t0).is_empty());
        assert!(!d.is_ejected(&ids[1]));
        assert_eq!(d.weights(t0).iter().filter(|(_, w)| *w == 1.0).count(), 9);
    }

    #[test]
    fn panic_stops_ejections_and_spreads_traffic_over_every_member() {
        let settings = OutlierSettings {
            max_ejection_percent: 100,
            ..OutlierSettings::default()
        };
        let (d, ids, t0) = pool(4, settings);
        let mut d = d.with_recovery(recovery(RecoverySettings {
            passes: 0,
            ..RecoverySettings::default()
        }));
        let fives = [call(500); 5];
        ejection_of(&feed(&mut d, &ids[0], &fives, t0));
        ejection_of(&feed(&mut d, &ids[1], &fives, t0));
        assert!(!d.in_panic(), "two of four serving is not under half");
        assert!(d.tick(t0 + secs(1)).is_empty());
        let weights: Vec<f64> = d.weights(t0).into_iter().map(|(_, w)| w).collect();
        assert_eq!(weights, [0.0, 0.0, 1.0, 1.0]);

        // The third ejection is allowed, and tips the pool into panic.
        ejection_of(&feed(&mut d, &ids[2], &fives, t0 + secs(10)));
        assert!(d.in_panic());
        assert_eq!(
            d.tick(t0 + secs(11)),
            [OutlierEvent::PanicStarted {
                serving: 1,
                members: 4
            }]
        );
        assert!(d.tick(t0 + secs(12)).is_empty(), "reported once");
        let weights: Vec<f64> = d
            .weights(t0 + secs(12))
            .into_iter()
            .map(|(_, w)| w)
            .collect();
        assert_eq!(weights, [1.0; 4], "every member is used");
        assert!(d.is_ejected(&ids[2]), "while still out in its own right");
        let events = feed(&mut d, &ids[3], &fives, t0 + secs(12));
        assert!(matches!(
            &events[..],
            [OutlierEvent::EjectionSkipped {
                limit: EjectionLimit::Panic,
                ..
            }]
        ));
        assert!(!d.is_ejected(&ids[3]), "the last member is never ejected");

        // The first two come back (ejection 30 s + cool-down 30 s): panic ends.
        let events = d.tick(t0 + secs(60));
        assert_eq!(
            events.last(),
            Some(&OutlierEvent::PanicEnded {
                serving: 3,
                members: 4
            })
        );
        assert_eq!(
            d.weight(&ids[2], t0 + secs(60)),
            0.0,
            "out again once panic is over"
        );
        assert_eq!(d.weight(&ids[0], t0 + secs(60)), 0.1, "back, warming up");
    }

    #[test]
    fn recovery_cools_down_then_needs_consecutive_passes_then_ramps_up() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        let m = &ids[0];
        ejection_of(&feed(&mut d, m, &[call(500); 5], t0));
        assert!(
            d.pass(m, t0 + secs(10)).is_empty(),
            "passes during the ejection do not count"
        );
        assert_eq!(
            recovery_events(&d.tick(t0 + secs(30))),
            [(
                "m00",
                RecoveryEvent::CoolingDown {
                    until: t0 + secs(60)
                }
            )]
        );
        assert!(
            d.pass(m, t0 + secs(45)).is_empty(),
            "nor during the cool-down"
        );
        assert!(d.fail(m, t0 + secs(45)).is_empty());
        assert_eq!(
            recovery_events(&d.tick(t0 + secs(60))),
            [("m00", RecoveryEvent::Probation)]
        );
        assert!(d.pass(m, t0 + secs(61)).is_empty());
        assert!(d.pass(m, t0 + secs(62)).is_empty());
        assert_eq!(
            d.status(m, t0 + secs(62)).unwrap().phase,
            RecoveryPhase::Probation { passes: 2 }
        );
        assert_eq!(
            recovery_events(&d.pass(m, t0 + secs(63))),
            [("m00", RecoveryEvent::Returned { at: t0 + secs(63) })]
        );
        let status = d.status(m, t0 + secs(63)).unwrap();
        assert!(!status.ejected);
        assert_eq!(status.ejection, None);
        assert!(!d.is_ejected(m));
        let weight = |s: u64| d.weight(m, t0 + secs(63 + s));
        assert_eq!(weight(0), 0.1);
        assert_eq!(weight(30), 0.5);
        assert_eq!(weight(60), 1.0);
        // Once the ramp is over, the member is like any other.
        d.tick(t0 + secs(200));
        assert_eq!(d.weight(m, t0 + secs(1000)), 1.0);
    }

    #[test]
    fn a_failed_check_on_probation_doubles_the_cooldown() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        let m = &ids[0];
        ejection_of(&feed(&mut d, m, &[call(500); 5], t0));
        d.tick(t0 + secs(60));
        d.pass(m, t0 + secs(61));
        assert_eq!(
            recovery_events(&d.fail(m, t0 + secs(62))),
            [(
                "m00",
                RecoveryEvent::Relapsed {
                    until: t0 + secs(122),
                    cooldown: secs(60)
                }
            )]
        );
        // No tick in between: the pass itself notices that the cool-down is over.
        let events = d.pass(m, t0 + secs(122));
        assert_eq!(
            recovery_events(&events),
            [("m00", RecoveryEvent::Probation)]
        );
        assert_eq!(
            d.status(m, t0 + secs(122)).unwrap().phase,
            RecoveryPhase::Probation { passes: 1 }
        );
    }

    #[test]
    fn real_calls_judge_a_member_on_probation() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        let m = &ids[0];
        ejection_of(&feed(&mut d, m, &[call(500); 5], t0));
        d.tick(t0 + secs(60));
        let events = d.record(m, &call(503), t0 + secs(61));
        assert!(matches!(
            recovery_events(&events)[..],
            [(_, RecoveryEvent::Relapsed { .. })]
        ));
        d.tick(t0 + secs(121));
        let events = feed(&mut d, m, &[call(200); 3], t0 + secs(122));
        assert_eq!(
            recovery_events(&events),
            [("m00", RecoveryEvent::Returned { at: t0 + secs(122) })]
        );
    }

    #[test]
    fn a_quick_relapse_doubles_the_next_cooldown_until_the_member_is_stable() {
        let (d, ids, t0) = pool(10, OutlierSettings::default());
        let mut d = d.with_recovery(recovery(RecoverySettings {
            passes: 0,
            max_cooldown: secs(100),
            give_up_after: None,
            permanent_after: None,
            ..RecoverySettings::default()
        }));
        let m = &ids[0];
        let cooldown_after = |d: &mut OutlierDetector, until: Instant| -> u64 {
            match recovery_events(&d.tick(until))[..] {
                [(_, RecoveryEvent::CoolingDown { until: end })] => (end - until).as_secs(),
                ref other => panic!("{other:?}"),
            }
        };
        let mut now = t0;
        let mut cooldowns = Vec::new();
        for _ in 0..4 {
            let until = ejection_of(&feed(&mut d, m, &[call(500); 5], now))
                .until
                .unwrap();
            let cooldown = cooldown_after(&mut d, until);
            cooldowns.push(cooldown);
            now = until + secs(cooldown);
            assert!(matches!(
                recovery_events(&d.tick(now))[..],
                [(_, RecoveryEvent::Returned { .. })]
            ));
            now += secs(60); // fails again a minute after returning
        }
        assert_eq!(cooldowns, [30, 60, 100, 100]);

        // Five stable minutes: the count and the cool-down start over.
        now += secs(300);
        d.tick(now);
        let ejection = ejection_of(&feed(&mut d, m, &[call(500); 5], now)).clone();
        assert_eq!(ejection.times_ejected, 1);
        assert_eq!(ejection.until, Some(now + secs(30)));
        assert_eq!(cooldown_after(&mut d, now + secs(30)), 30);
    }

    #[test]
    fn permanent_after_n_ejections_until_an_operator_clears_it() {
        let (d, ids, t0) = pool(10, OutlierSettings::default());
        let mut d = d.with_recovery(recovery(RecoverySettings {
            passes: 0,
            permanent_after: NonZeroU32::new(3),
            ..RecoverySettings::default()
        }));
        let m = &ids[0];
        let mut now = t0;
        for _ in 0..2 {
            ejection_of(&feed(&mut d, m, &[call(500); 5], now));
            now += secs(200);
            d.tick(now);
            assert!(!d.is_ejected(m));
        }
        let events = feed(&mut d, m, &[call(500); 5], now);
        assert_eq!(
            events,
            [
                OutlierEvent::Ejected(Ejection {
                    id: m.clone(),
                    reason: EjectionReason::Consecutive5xx,
                    since: now,
                    until: None,
                    times_ejected: 3,
                }),
                OutlierEvent::Recovery {
                    id: m.clone(),
                    event: RecoveryEvent::Permanent(PermanentCause::Ejections(3)),
                },
            ]
        );
        // Nothing brings it back on its own.
        let day = now + secs(86_400);
        assert!(d.tick(day).is_empty());
        assert!(d.pass(m, day).is_empty());
        assert!(d.record(m, &call(200), day).is_empty());
        assert!(d.is_ejected(m));
        let status = d.status(m, day).unwrap();
        assert_eq!(
            status.phase,
            RecoveryPhase::Permanent(PermanentCause::Ejections(3))
        );
        assert_eq!(status.phase.as_str(), "permanent");
        assert_eq!(status.ejection.unwrap().until, None);

        assert_eq!(
            d.operator_clear(m, day),
            Some(OutlierEvent::Cleared { id: m.clone() })
        );
        assert!(!d.is_ejected(m));
        assert_eq!(d.weight(m, day), 0.1, "warms up");
        assert_eq!(d.operator_clear(m, day), None, "already serving");
        assert_eq!(d.operator_clear(&id("nobody"), day), None);
        // Its history is gone: the next ejection is a first one.
        let events = feed(&mut d, m, &[call(500); 5], day + secs(600));
        assert_eq!(ejection_of(&events).times_ejected, 1);
    }

    #[test]
    fn a_member_not_back_within_give_up_after_is_permanent() {
        let (mut d, ids, t0) = pool(10, OutlierSettings::default());
        let m = &ids[0];
        ejection_of(&feed(&mut d, m, &[call(500); 5], t0));
        // No checks arrive: it sits on probation until five minutes after its ejection ended.
        assert_eq!(
            recovery_events(&d.tick(t0 + secs(329)))
                .into_iter()
                .map(|(_, e)| e.as_str())
                .collect::<Vec<_>>(),
            ["cooling_down", "probation"]
        );
        assert_eq!(
            recovery_events(&d.tick(t0 + secs(330))),
            [("m00", RecoveryEvent::Permanent(PermanentCause::Unrecovered))]
        );
        assert!(d.pass(m, t0 + secs(331)).is_empty());
        assert!(d.is_ejected(m));
    }

    #[test]
    fn set_members_keeps_survivors_forgets_leavers_and_warms_newcomers() {
        let (mut d, ids, t0) = pool(3, OutlierSettings::default());
        assert_eq!(
            d.weight(&ids[1], t0),
            1.0,
            "the first members start at full weight"
        );
        let ejection = ejection_of(&feed(&mut d, &ids[0], &[call(500); 5], t0)).clone();
        d.record(&ids[2], &call(500), t0);

        let t1 = t0 + secs(5);
        let newcomer = id("m99");
        d.set_members(
            [
                ids[0].clone(),
                ids[2].clone(),
                newcomer.clone(),
                ids[2].clone(),
            ],
            t1,
        );
        assert_eq!(d.len(), 3, "duplicates count once");
        assert_eq!(
            d.members().map(TargetId::as_str).collect::<Vec<_>>(),
            ["m00", "m02", "m99"]
        );
        assert_eq!(d.status(&ids[0], t1).unwrap().ejection, Some(ejection));
        assert_eq!(d.status(&ids[1], t1), None);
        assert!(
            d.record(&ids[1], &call(500), t1).is_empty(),
            "a leaver's calls are ignored"
        );
        assert_eq!(d.weight(&newcomer, t1), 0.1);
        assert_eq!(d.weight(&newcomer, t1 + secs(60)), 1.0);
        // The survivor kept its run: four more failures make five.
        assert!(feed(&mut d, &ids[2], &[call(500); 3], t1).is_empty());
        let events = d.record(&ids[2], &call(500), t1);
        // m00 is out already and the cap of a pool of three is one.
        assert!(matches!(
            &events[..],
            [OutlierEvent::EjectionSkipped {
                limit: EjectionLimit::MaxEjectionPercent,
                ..
            }]
        ));
        assert_eq!(
            OutlierEvent::Cleared {
                id: newcomer.clone()
            }
            .id(),
            Some(&newcomer)
        );
        assert_eq!(
            OutlierEvent::PanicEnded {
                serving: 1,
                members: 1
            }
            .id(),
            None
        );
    }

    #[test]
    fn statuses_and_weights_cover_every_member_in_id_order() {
        let (mut d, ids, t0) = pool(3, OutlierSettings::default());
        ejection_of(&feed(&mut d, &ids[1], &[call(502); 3], t0));
        let statuses = d.statuses(t0);
        let rows: Vec<(&str, &str, bool, f64)> = statuses
            .iter()
            .map(|s| (s.id.as_str(), s.phase.as_str(), s.ejected, s.weight))
            .collect();
        assert_eq!(
            rows,
            [
                ("m00", "serving", false, 1.0),
                ("m01", "ejected", true, 0.0),
                ("m02", "serving", false, 1.0),
            ]
        );
        let weights = d.weights(t0);
        assert_eq!(
            crate::passive::select::pick(&weights, 0.49).map(TargetId::as_str),
            Some("m00")
        );
        assert_eq!(
            crate::passive::select::pick(&weights, 0.51).map(TargetId::as_str),
            Some("m02")
        );
    }
}
