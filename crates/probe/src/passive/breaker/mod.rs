//! A per-target circuit breaker: stop calling a target that keeps failing the calls it gets.
//!
//! Why a breaker on top of the probes: active probes notice a failing dependency only after
//! `interval x fall`, and meanwhile every caller queues behind its timeouts, which is how one slow
//! dependency takes down the services above it. A breaker judges the real calls
//! ([`Call`]) instead: once too many of the recent ones fail or are slow, it fails the next calls
//! fast, which both frees the callers and gives the target room to recover.
//!
//! The states follow resilience4j:
//! - **Closed**: every call is permitted and its outcome goes into a sliding [`Window`]. Once the
//!   window holds at least `minimum_calls`, the circuit opens when the failure rate or the slow
//!   call rate reaches its threshold (`>=`). A call fails when [`CallOutcome::is_failure`] says
//!   so; it is slow when it took longer than `slow_call_duration`, whatever its outcome.
//! - **Open**: every call is rejected for `open_for`. The first [`CircuitBreaker::try_acquire`]
//!   (or [`CircuitBreaker::advance`]) after that moves to half-open.
//! - **Half-open**: `half_open_calls` trial calls are permitted, no more. When all of them have
//!   an outcome and both rates are under their thresholds the circuit closes, with an empty
//!   window; otherwise it opens again, as soon as the failures (or slow calls) already recorded
//!   reach the threshold over all the trial calls, without waiting for the rest. Each consecutive
//!   re-open doubles `open_for`, up to `max_open_for`, so a target that stays broken is tried
//!   less and less often; closing resets it.
//! - **Forced open** and **disabled** are operator overrides ([`CircuitBreaker::force_open`],
//!   [`CircuitBreaker::disable`]): the first rejects everything, the second permits everything
//!   and still records outcomes, so the rates stay visible. They are left only by
//!   [`CircuitBreaker::reset`] (to closed, with an empty window) or by the other override.
//!
//! The breaker is a pure state machine: no I/O, no task, no clock. The caller passes `now`
//! (a [`tokio::time::Instant`], so tests run on paused or explicit time) and keeps one breaker
//! per target behind whatever lock it likes. Like the [verdict](crate::health) state machine, this one only decides and
//! reports each [`CircuitTransition`] once; the caller logs and counts it.
//!
//! Both windows record in constant time and never allocate after construction:
//! - [`Window::Time`] is a ring of one-second buckets (calls, failures, slow calls) with running
//!   totals. It covers the current second and the `n - 1` before it, so "the last 60 s" spans
//!   between 59 and 60 s, as in resilience4j. Buckets that fall out are subtracted when time
//!   moves on: at most one per elapsed second and never more than the ring, so a gap longer
//!   than the window empties it in one pass.
//! - [`Window::Count`] is a ring of the last `n` outcomes, one byte each.
//!
//! ```
//! use std::time::Duration;
//!
//! use probe::passive::breaker::{BreakerConfig, CircuitBreaker, CircuitState};
//! use probe::passive::Call;
//! use tokio::time::Instant;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = BreakerConfig::builder().minimum_calls(4).build()?;
//! let mut breaker = CircuitBreaker::new(config);
//! let now = Instant::now();
//! for _ in 0..4 {
//!     let _permit = breaker.try_acquire(now)?;
//!     // ... make the call, then say how it went ...
//!     if let Some(t) = breaker.record(&Call::http(503, Duration::from_millis(5)), now) {
//!         println!("circuit {} -> {} ({})", t.from, t.to, t.cause.as_str());
//!     }
//! }
//! assert_eq!(breaker.state(), CircuitState::Open);
//! let rejected = breaker.try_acquire(now).unwrap_err();
//! assert_eq!(rejected.retry_after, Some(Duration::from_secs(60)));
//! # Ok(()) }
//! ```

#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

use tokio::time::Instant;

use crate::passive::call::{Call, CallOutcome};

/// The longest [`Window::Time`]. There is one bucket per second, so this bounds the ring's memory
/// (an hour of buckets is about 84 KiB per target).
pub const MAX_TIME_WINDOW: Duration = Duration::from_secs(3600);

/// The longest [`Window::Count`], one byte per call.
pub const MAX_COUNT_WINDOW: usize = 100_000;

/// Which recent calls a closed circuit judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// The calls of the last whole seconds (1 s to [`MAX_TIME_WINDOW`]). Follows the traffic
    /// rate: a quiet target is judged on few calls, so pair it with `minimum_calls`.
    Time(Duration),
    /// The last `n` calls (at most [`MAX_COUNT_WINDOW`]), however old. Judges a quiet target on
    /// as much evidence as a busy one, but remembers stale failures until new calls push them out.
    Count(NonZeroUsize),
}

impl Default for Window {
    /// The last 60 seconds: long enough to judge a handful of calls a second, short enough to
    /// forget a past incident within a minute.
    fn default() -> Self {
        Self::Time(BreakerConfig::DEFAULT_WINDOW)
    }
}

/// Why a [`BreakerConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BreakerConfigError {
    /// A time window has one bucket per second, so it must be whole seconds, and bounded.
    #[error(
        "breaker time window {0:?} is not a whole number of seconds from 1s to {max:?}",
        max = MAX_TIME_WINDOW
    )]
    TimeWindow(Duration),
    /// A count window keeps one byte per call, so it is bounded.
    #[error("breaker count window {0} is larger than {MAX_COUNT_WINDOW} calls")]
    CountWindowTooLarge(usize),
    /// A count window of `n` calls never holds more than `n`, so a larger minimum would never
    /// let the circuit open.
    #[error("breaker minimum_calls ({minimum_calls}) is larger than its count window ({window})")]
    MinimumCallsAboveWindow {
        /// The requested minimum.
        minimum_calls: u32,
        /// The window's size.
        window: usize,
    },
    /// A rate threshold of 0 would open on the first judged window whatever happened; above 1 it
    /// could never be reached.
    #[error("breaker failure_rate threshold {0} is outside (0, 1]")]
    FailureRateOutOfRange(f64),
    /// As for the failure rate.
    #[error("breaker slow_call_rate threshold {0} is outside (0, 1]")]
    SlowCallRateOutOfRange(f64),
    /// Every call would be slow.
    #[error("breaker slow_call_duration must be greater than zero")]
    ZeroSlowCallDuration,
    /// The circuit would open on no evidence.
    #[error("breaker minimum_calls must be at least 1")]
    ZeroMinimumCalls,
    /// An open circuit would close again at once.
    #[error("breaker open_for must be greater than zero")]
    ZeroOpenFor,
    /// The cap on the growing open time must not be below where it starts.
    #[error("breaker open_for ({open_for:?}) is greater than max_open_for ({max_open_for:?})")]
    OpenForAboveMax {
        /// The requested first open time.
        open_for: Duration,
        /// The requested cap.
        max_open_for: Duration,
    },
    /// A half-open circuit with no trial call could never close.
    #[error("breaker half_open_calls must be at least 1")]
    ZeroHalfOpenCalls,
}

/// A validated breaker policy. Build one with [`BreakerConfig::builder`]; `Default` is the
/// builder's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    window: Window,
    failure_rate_threshold: f64,
    slow_call_duration: Duration,
    slow_call_rate_threshold: f64,
    minimum_calls: u32,
    open_for: Duration,
    max_open_for: Duration,
    half_open_calls: u32,
}

impl BreakerConfig {
    /// Default window: the last 60 s (see [`Window::default`]).
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
    /// Default failure rate threshold: half the calls failing (resilience4j's default).
    pub const DEFAULT_FAILURE_RATE_THRESHOLD: f64 = 0.5;
    /// Default slow call duration: the usual upstream timeout of 1-2 s; resilience4j's 60 s
    /// would never fire before the callers' own timeouts.
    pub const DEFAULT_SLOW_CALL_DURATION: Duration = Duration::from_secs(2);
    /// Default slow call rate threshold (resilience4j): only a window of nothing but slow calls
    /// opens the circuit, so slowness alone rarely does unless the threshold is lowered.
    pub const DEFAULT_SLOW_CALL_RATE_THRESHOLD: f64 = 1.0;
    /// Default minimum number of calls before the window is judged (resilience4j's default):
    /// fewer are too few for a rate to mean anything.
    pub const DEFAULT_MINIMUM_CALLS: u32 = 20;
    /// Default time a circuit stays open the first time: a minute gives a failing target room to
    /// recover without keeping a recovered one out for long.
    pub const DEFAULT_OPEN_FOR: Duration = Duration::from_secs(60);
    /// Default cap on the doubled open time.
    pub const DEFAULT_MAX_OPEN_FOR: Duration = Duration::from_secs(600);
    /// Default number of trial calls in half-open (resilience4j).
    pub const DEFAULT_HALF_OPEN_CALLS: u32 = 10;

    /// A builder starting from the defaults:
    /// - `window`: [`Window::Time`] of 60 s;
    /// - `failure_rate_threshold`: 0.5;
    /// - `slow_call_duration`: 2 s;
    /// - `slow_call_rate_threshold`: 1.0 (only an all-slow window opens the circuit);
    /// - `minimum_calls`: 20;
    /// - `open_for`: 60 s, doubled on each consecutive re-open from half-open;
    /// - `max_open_for`: 10 min;
    /// - `half_open_calls`: 10.
    pub fn builder() -> BreakerConfigBuilder {
        BreakerConfigBuilder::default()
    }

    /// Which recent calls a closed circuit judges.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The failure rate, in `(0, 1]`, at or above which the circuit opens.
    pub fn failure_rate_threshold(&self) -> f64 {
        self.failure_rate_threshold
    }

    /// A call that takes longer than this is slow.
    pub fn slow_call_duration(&self) -> Duration {
        self.slow_call_duration
    }

    /// The slow call rate, in `(0, 1]`, at or above which the circuit opens.
    pub fn slow_call_rate_threshold(&self) -> f64 {
        self.slow_call_rate_threshold
    }

    /// How many calls the window must hold before it is judged.
    pub fn minimum_calls(&self) -> u32 {
        self.minimum_calls
    }

    /// How long the circuit first stays open.
    pub fn open_for(&self) -> Duration {
        self.open_for
    }

    /// The cap on the doubled open time.
    pub fn max_open_for(&self) -> Duration {
        self.max_open_for
    }

    /// How many trial calls half-open permits.
    pub fn half_open_calls(&self) -> u32 {
        self.half_open_calls
    }

    /// How long the circuit stays open after `reopens` consecutive re-opens from half-open:
    /// `open_for * 2^reopens`, capped at `max_open_for`.
    pub fn open_duration(&self, reopens: u32) -> Duration {
        let factor = 1u32.checked_shl(reopens).unwrap_or(u32::MAX);
        self.open_for
            .checked_mul(factor)
            .map_or(self.max_open_for, |d| d.min(self.max_open_for))
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        let b = BreakerConfigBuilder::default();
        Self {
            window: b.window,
            failure_rate_threshold: b.failure_rate_threshold,
            slow_call_duration: b.slow_call_duration,
            slow_call_rate_threshold: b.slow_call_rate_threshold,
            minimum_calls: b.minimum_calls,
            open_for: b.open_for,
            max_open_for: b.max_open_for,
            half_open_calls: b.half_open_calls,
        }
    }
}

/// Builds a [`BreakerConfig`]; every field starts at its default (see
/// [`BreakerConfig::builder`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct BreakerConfigBuilder {
    window: Window,
    failure_rate_threshold: f64,
    slow_call_duration: Duration,
    slow_call_rate_threshold: f64,
    minimum_calls: u32,
    open_for: Duration,
    max_open_for: Duration,
    half_open_calls: u32,
}

impl Default for BreakerConfigBuilder {
    fn default() -> Self {
        Self {
            window: Window::default(),
            failure_rate_threshold: BreakerConfig::DEFAULT_FAILURE_RATE_THRESHOLD,
            slow_call_duration: BreakerConfig::DEFAULT_SLOW_CALL_DURATION,
            slow_call_rate_threshold: BreakerConfig::DEFAULT_SLOW_CALL_RATE_THRESHOLD,
            minimum_calls: BreakerConfig::DEFAULT_MINIMUM_CALLS,
            open_for: BreakerConfig::DEFAULT_OPEN_FOR,
            max_open_for: BreakerConfig::DEFAULT_MAX_OPEN_FOR,
            half_open_calls: BreakerConfig::DEFAULT_HALF_OPEN_CALLS,
        }
    }
}

impl BreakerConfigBuilder {
    /// Sets which recent calls a closed circuit judges.
    pub fn window(mut self, window: Window) -> Self {
        self.window = window;
        self
    }

    /// Sets the failure rate threshold, in `(0, 1]`.
    pub fn failure_rate_threshold(mut self, rate: f64) -> Self {
        self.failure_rate_threshold = rate;
        self
    }

    /// Sets the duration above which a call is slow.
    pub fn slow_call_duration(mut self, duration: Duration) -> Self {
        self.slow_call_duration = duration;
        self
    }

    /// Sets the slow call rate threshold, in `(0, 1]`.
    pub fn slow_call_rate_threshold(mut self, rate: f64) -> Self {
        self.slow_call_rate_threshold = rate;
        self
    }

    /// Sets how many calls the window must hold before it is judged.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls;
        self
    }

    /// Sets how long the circuit first stays open.
    pub fn open_for(mut self, duration: Duration) -> Self {
        self.open_for = duration;
        self
    }

    /// Sets the cap on the doubled open time.
    pub fn max_open_for(mut self, duration: Duration) -> Self {
        self.max_open_for = duration;
        self
    }

    /// Sets how many trial calls half-open permits.
    pub fn half_open_calls(mut self, calls: u32) -> Self {
        self.half_open_calls = calls;
        self
    }

    /// Validates the settings.
    ///
    /// # Errors
    /// - [`BreakerConfigError::TimeWindow`] when a [`Window::Time`] is not a whole number of
    ///   seconds from 1 s to [`MAX_TIME_WINDOW`];
    /// - [`BreakerConfigError::CountWindowTooLarge`] when a [`Window::Count`] exceeds
    ///   [`MAX_COUNT_WINDOW`];
    /// - [`BreakerConfigError::MinimumCallsAboveWindow`] when `minimum_calls` exceeds a count
    ///   window's size;
    /// - [`BreakerConfigError::FailureRateOutOfRange`] and
    ///   [`BreakerConfigError::SlowCallRateOutOfRange`] when a threshold is not within `(0, 1]`
    ///   (or is NaN);
    /// - [`BreakerConfigError::ZeroSlowCallDuration`] when `slow_call_duration` is zero;
    /// - [`BreakerConfigError::ZeroMinimumCalls`] when `minimum_calls` is zero;
    /// - [`BreakerConfigError::ZeroOpenFor`] when `open_for` is zero;
    /// - [`BreakerConfigError::OpenForAboveMax`] when `open_for > max_open_for`;
    /// - [`BreakerConfigError::ZeroHalfOpenCalls`] when `half_open_calls` is zero.
    pub fn build(self) -> Result<BreakerConfig, BreakerConfigError> {
        match self.window {
            Window::Time(span) => {
                let whole = span.subsec_nanos() == 0;
                if !whole || span.is_zero() || span > MAX_TIME_WINDOW {
                    return Err(BreakerConfigError::TimeWindow(span));
                }
            }
            Window::Count(n) => {
                if n.get() > MAX_COUNT_WINDOW {
                    return Err(BreakerConfigError::CountWindowTooLarge(n.get()));
                }
                if usize::try_from(self.minimum_calls).unwrap_or(usize::MAX) > n.get() {
                    return Err(BreakerConfigError::MinimumCallsAboveWindow {
                        minimum_calls: self.minimum_calls,
                        window: n.get(),
                    });
                }
            }
        }
        let in_range = |rate: f64| rate > 0.0 && rate <= 1.0;
        if !in_range(self.failure_rate_threshold) {
            return Err(BreakerConfigError::FailureRateOutOfRange(
                self.failure_rate_threshold,
            ));
        }
        if !in_range(self.slow_call_rate_threshold) {
            return Err(BreakerConfigError::SlowCallRateOutOfRange(
                self.slow_call_rate_threshold,
            ));
        }
        if self.slow_call_duration.is_zero() {
            return Err(BreakerConfigError::ZeroSlowCallDuration);
        }
        if self.minimum_calls == 0 {
            return Err(BreakerConfigError::ZeroMinimumCalls);
        }
        if self.open_for.is_zero() {
            return Err(BreakerConfigError::ZeroOpenFor);
        }
        if self.open_for > self.max_open_for {
            return Err(BreakerConfigError::OpenForAboveMax {
                open_for: self.open_for,
                max_open_for: self.max_open_for,
            });
        }
        if self.half_open_calls == 0 {
            return Err(BreakerConfigError::ZeroHalfOpenCalls);
        }
        Ok(BreakerConfig {
            window: self.window,
            failure_rate_threshold: self.failure_rate_threshold,
            slow_call_duration: self.slow_call_duration,
            slow_call_rate_threshold: self.slow_call_rate_threshold,
            minimum_calls: self.minimum_calls,
            open_for: self.open_for,
            max_open_for: self.max_open_for,
            half_open_calls: self.half_open_calls,
        })
    }
}

/// Where a circuit is. The names (`as_str`) and codes (`code`) are a public contract of the API
/// and the `probe_circuit_state` gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CircuitState {
    /// Calls pass and are judged.
    Closed,
    /// Calls are rejected until the open time has elapsed.
    Open,
    /// A limited number of trial calls decide between closing and opening again.
    HalfOpen,
    /// An operator opened it; calls are rejected until a reset.
    ForcedOpen,
    /// An operator disabled it; calls pass and are recorded, and nothing opens it.
    Disabled,
}

impl CircuitState {
    /// The snake-case name used in the API, logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::ForcedOpen => "forced_open",
            Self::Disabled => "disabled",
        }
    }

    /// The value of the `probe_circuit_state` gauge: 0 closed, 1 open, 2 half_open,
    /// 3 forced_open, 4 disabled. A gauge holds one number per target, so the states need a
    /// fixed numbering; new states will only ever be appended.
    pub const fn code(self) -> u8 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
            Self::ForcedOpen => 3,
            Self::Disabled => 4,
        }
    }

    /// Whether calls are permitted in this state (half-open: some of them).
    pub const fn permits_calls(self) -> bool {
        !matches!(self, Self::Open | Self::ForcedOpen)
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What moved a circuit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CircuitCause {
    /// The failure rate reached its threshold (closed window or half-open trials).
    FailureRate,
    /// The slow call rate reached its threshold (closed window or half-open trials).
    SlowCallRate,
    /// The open time elapsed.
    OpenElapsed,
    /// Every half-open trial call had an outcome and both rates stayed under their thresholds.
    TrialsPassed,
    /// An operator forced the circuit open.
    ForcedOpen,
    /// An operator disabled the circuit.
    Disabled,
    /// An operator reset the circuit.
    Reset,
}

impl CircuitCause {
    /// The snake-case name used in events and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FailureRate => "failure_rate",
            Self::SlowCallRate => "slow_call_rate",
            Self::OpenElapsed => "open_elapsed",
            Self::TrialsPassed => "trials_passed",
            Self::ForcedOpen => "forced_open",
            Self::Disabled => "disabled",
            Self::Reset => "reset",
        }
    }
}

/// A change of state, reported once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitTransition {
    /// The state before.
    pub from: CircuitState,
    /// The state after.
    pub to: CircuitState,
    /// Why.
    pub cause: CircuitCause,
}

/// The transition table: whether a circuit may move `from` -> `to` for `cause`.
// One arm per group of legal moves reads as the table it is; `matches!` would hide the rows.
#[allow(clippy::match_like_matches_macro)]
fn is_legal(from: CircuitState, to: CircuitState, cause: CircuitCause) -> bool {
    use CircuitState::*;
    match (from, to, cause) {
        (Closed | HalfOpen, Open, CircuitCause::FailureRate | CircuitCause::SlowCallRate) => true,
        (Open, HalfOpen, CircuitCause::OpenElapsed) => true,
        (HalfOpen, Closed, CircuitCause::TrialsPassed) => true,
        (Closed | Open | HalfOpen | Disabled, ForcedOpen, CircuitCause::ForcedOpen) => true,
        (Closed | Open | HalfOpen | ForcedOpen, Disabled, CircuitCause::Disabled) => true,
        (Open | HalfOpen | ForcedOpen | Disabled, Closed, CircuitCause::Reset) => true,
        _ => false,
    }
}

/// Leave to make one call, from [`CircuitBreaker::try_acquire`].
///
/// Hold it for the call, then [`CircuitBreaker::record`] the outcome and drop it. If the call
/// ends without an outcome (cancelled before it was sent), hand it to
/// [`CircuitBreaker::release`] instead: in half-open that gives the trial slot back, which would
/// otherwise wait for an outcome forever.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "hold the permit for the call; release it if the call ends without an outcome"]
pub struct Permit {
    /// The breaker's generation when the permit was given, so that a permit from an earlier
    /// state cannot give back a slot of the current one.
    generation: u64,
    transition: Option<CircuitTransition>,
    /// Given while every call is permitted (closed or disabled): it holds no trial slot, so
    /// giving it back changes nothing.
    free: bool,
}

impl Permit {
    /// Whether [`CircuitBreaker::release`] would change nothing for this permit: it holds no
    /// half-open trial slot. A caller can then skip taking the breaker to give it back.
    pub fn holds_nothing(&self) -> bool {
        self.free
    }

    /// The permit [`CircuitBreaker::try_acquire`] would give, from a published
    /// [`permit_word`](CircuitBreaker::permit_word); `None` when the word says the breaker must
    /// be asked (open, half-open or forced open). A breaker that changed since the word was
    /// published gives such a permit nothing back on release, as for any permit of an earlier
    /// generation.
    pub fn without_lock(word: u64) -> Option<Self> {
        (word & 1 == 1).then_some(Self {
            generation: word >> 1,
            transition: None,
            free: true,
        })
    }

    /// The open -> half-open move this acquisition made, if any, to log and count like the
    /// transitions [`CircuitBreaker::record`] returns.
    pub fn transition(&self) -> Option<CircuitTransition> {
        self.transition
    }
}

/// Why a call was not permitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("circuit {state} rejects the call")]
pub struct Rejected {
    /// The circuit's state: open, forced open, or half-open with every trial slot taken.
    pub state: CircuitState,
    /// How long until the circuit turns half-open, when known (open only), for a
    /// `Retry-After`.
    pub retry_after: Option<Duration>,
}

/// A circuit's state and the figures it was judged on, for the API and metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircuitSnapshot {
    /// The state.
    pub state: CircuitState,
    /// Calls counted: in the window (closed, forced open, disabled), in the window that opened
    /// the circuit (open), or trial calls with an outcome so far (half-open).
    pub calls: u64,
    /// How many of `calls` failed.
    pub failures: u64,
    /// How many of `calls` were slow.
    pub slow_calls: u64,
    /// `failures / calls`, in `[0, 1]`; 0 with no calls.
    pub failure_rate: f64,
    /// `slow_calls / calls`, in `[0, 1]`; 0 with no calls.
    pub slow_call_rate: f64,
    /// When an open circuit turns half-open; `None` in other states.
    pub open_until: Option<Instant>,
    /// Consecutive re-opens from half-open, which double the open time; 0 once the circuit has
    /// closed.
    pub reopens: u32,
}

/// One target's circuit breaker.
#[derive(Clone, Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    phase: Phase,
    /// The closed circuit's sliding window; emptied when the circuit opens or is reset.
    window: SlidingWindow,
    /// Consecutive re-opens from half-open since the circuit last closed.
    reopens: u32,
    /// Bumped on every change of state; see [`Permit`].
    generation: u64,
}

/// The state with what only that state needs.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Closed,
    Open {
        /// Since and for how long: kept apart rather than as an end instant, so that no sum of
        /// an instant and a configured duration can overflow.
        since: Instant,
        open_for: Duration,
        /// The figures that opened it, for snapshots.
        tripped: Counts,
    },
    HalfOpen {
        /// Trial permits given (minus released ones).
        issued: u32,
        /// Outcomes of trial calls so far.
        trial: Counts,
    },
    ForcedOpen,
    Disabled,
}

impl Phase {
    fn state(&self) -> CircuitState {
        match self {
            Self::Closed => CircuitState::Closed,
            Self::Open { .. } => CircuitState::Open,
            Self::HalfOpen { .. } => CircuitState::HalfOpen,
            Self::ForcedOpen => CircuitState::ForcedOpen,
            Self::Disabled => CircuitState::Disabled,
        }
    }
}

impl CircuitBreaker {
    /// A closed breaker with an empty window.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            phase: Phase::Closed,
            window: SlidingWindow::new(config.window),
            reopens: 0,
            generation: 0,
        }
    }

    /// The policy.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state. An open circuit whose time has elapsed still says open until the next
    /// [`try_acquire`](Self::try_acquire) or [`advance`](Self::advance).
    pub fn state(&self) -> CircuitState {
        self.phase.state()
    }

    /// The word a caller can publish for [`Permit::without_lock`]: the generation shifted left
    /// by one, with the low bit set while every call is permitted (closed or disabled), so a
    /// caller that keeps the breaker behind a lock answers most calls without taking it.
    pub fn permit_word(&self) -> u64 {
        let free = matches!(self.phase, Phase::Closed | Phase::Disabled);
        (self.generation << 1) | u64::from(free)
    }

    /// Asks to make one call at `now`.
    ///
    /// Closed and disabled always permit. Open rejects until its time has elapsed, then moves to
    /// half-open (reported on the [`Permit`]) and permits. Half-open permits `half_open_calls`
    /// calls in all, until they decide. Forced open always rejects.
    ///
    /// # Errors
    /// [`Rejected`] when the call must not be made.
    pub fn try_acquire(&mut self, now: Instant) -> Result<Permit, Rejected> {
        let transition = self.advance(now);
        let limit = self.config.half_open_calls;
        let free = matches!(self.phase, Phase::Closed | Phase::Disabled);
        match &mut self.phase {
            Phase::Closed | Phase::Disabled => {}
            Phase::HalfOpen { issued, .. } if *issued < limit => *issued += 1,
            Phase::HalfOpen { .. } => {
                return Err(Rejected {
                    state: CircuitState::HalfOpen,
                    retry_after: None,
                });
            }
            Phase::Open {
                since, open_for, ..
            } => {
                let elapsed = now.saturating_duration_since(*since);
                return Err(Rejected {
                    state: CircuitState::Open,
                    retry_after: Some(open_for.saturating_sub(elapsed)),
                });
            }
            Phase::ForcedOpen => {
                return Err(Rejected {
                    state: CircuitState::ForcedOpen,
                    retry_after: None,
                });
            }
        }
        Ok(Permit {
            generation: self.generation,
            transition,
            free,
        })
    }

    /// Gives back a permit whose call ended without an outcome. In half-open this frees its
    /// trial slot for another call; otherwise, or when the state has changed since the permit
    /// was given, it does nothing. Release only permits whose outcome was not recorded.
    pub fn release(&mut self, permit: Permit) {
        if permit.generation != self.generation {
            return;
        }
        if let Phase::HalfOpen { issued, trial } = &mut self.phase
            && u64::from(*issued) > trial.calls
        {
            *issued -= 1;
        }
    }

    /// Moves an open circuit to half-open once its time has elapsed at `now`. Optional:
    /// [`try_acquire`](Self::try_acquire) does it too; this is for callers that want the state to
    /// follow the clock without making a call (a status page, a gauge).
    pub fn advance(&mut self, now: Instant) -> Option<CircuitTransition> {
        match self.phase {
            Phase::Open {
                since, open_for, ..
            } if now.saturating_duration_since(since) >= open_for => self.go(
                Phase::HalfOpen {
                    issued: 0,
                    trial: Counts::default(),
                },
                CircuitCause::OpenElapsed,
            ),
            _ => None,
        }
    }

    /// Records how one call ended at `now`; returns the transition it caused, if any.
    ///
    /// Closed: into the window, then judged. Disabled and forced open: into the window only.
    /// Open: ignored (a call permitted before the circuit opened, finishing late). Half-open:
    /// counted as a trial call while fewer outcomes than permits given have been recorded (later
    /// ones came from calls that had no trial permit), then judged.
    ///
    /// A time window counts the call in the second of `now`; a `now` earlier than the latest one
    /// recorded counts in the latest second.
    pub fn record(&mut self, call: &Call, now: Instant) -> Option<CircuitTransition> {
        let mark = Mark::of(call.outcome, call.latency > self.config.slow_call_duration);
        match &mut self.phase {
            Phase::Closed => {
                let counts = self.window.record(mark, now);
                if counts.calls < u64::from(self.config.minimum_calls) {
                    return None;
                }
                let cause = self.breach(counts, counts.calls)?;
                self.open(now, counts, cause)
            }
            Phase::Disabled | Phase::ForcedOpen => {
                self.window.record(mark, now);
                None
            }
            Phase::Open { .. } => None,
            Phase::HalfOpen { issued, trial } => {
                if trial.calls >= u64::from(*issued) {
                    return None;
                }
                trial.add(mark);
                let trial = *trial;
                let all = u64::from(self.config.half_open_calls);
                // The rates over all the trial calls can only grow from here, so reaching a
                // threshold now already decides.
                if let Some(cause) = self.breach(trial, all) {
                    self.reopens = self.reopens.saturating_add(1);
                    return self.open(now, trial, cause);
                }
                if trial.calls < all {
                    return None;
                }
                self.reopens = 0;
                self.window.clear();
                self.go(Phase::Closed, CircuitCause::TrialsPassed)
            }
        }
    }

    /// Operator override: rejects every call until [`reset`](Self::reset) or
    /// [`disable`](Self::disable). `None` if already forced open.
    pub fn force_open(&mut self) -> Option<CircuitTransition> {
        self.go(Phase::ForcedOpen, CircuitCause::ForcedOpen)
    }

    /// Operator override: permits every call and keeps recording outcomes, but never opens,
    /// until [`reset`](Self::reset) or [`force_open`](Self::force_open). `None` if already
    /// disabled.
    pub fn disable(&mut self) -> Option<CircuitTransition> {
        self.go(Phase::Disabled, CircuitCause::Disabled)
    }

    /// Operator override: back to closed with an empty window and the first open time. `None`
    /// if it was already closed (the window is emptied all the same).
    pub fn reset(&mut self) -> Option<CircuitTransition> {
        self.window.clear();
        self.reopens = 0;
        self.go(Phase::Closed, CircuitCause::Reset)
    }

    /// The state and the figures behind it at `now`.
    pub fn snapshot(&self, now: Instant) -> CircuitSnapshot {
        let (counts, open_until) = match self.phase {
            Phase::Closed | Phase::ForcedOpen | Phase::Disabled => {
                (self.window.counts_at(now), None)
            }
            Phase::Open {
                since,
                open_for,
                tripped,
            } => (tripped, since.checked_add(open_for)),
            Phase::HalfOpen { trial, .. } => (trial, None),
        };
        CircuitSnapshot {
            state: self.state(),
            calls: counts.calls,
            failures: counts.failures,
            slow_calls: counts.slow,
            failure_rate: ratio(counts.failures, counts.calls),
            slow_call_rate: ratio(counts.slow, counts.calls),
            open_until,
            reopens: self.reopens,
        }
    }

    /// Which threshold `counts` reach, with rates taken over `over` calls.
    fn breach(&self, counts: Counts, over: u64) -> Option<CircuitCause> {
        if ratio(counts.failures, over) >= self.config.failure_rate_threshold {
            Some(CircuitCause::FailureRate)
        } else if ratio(counts.slow, over) >= self.config.slow_call_rate_threshold {
            Some(CircuitCause::SlowCallRate)
        } else {
            None
        }
    }

    /// Opens the circuit at `now` for the open time `reopens` calls for.
    fn open(
        &mut self,
        now: Instant,
        tripped: Counts,
        cause: CircuitCause,
    ) -> Option<CircuitTransition> {
        self.window.clear();
        let open_for = self.config.open_duration(self.reopens);
        self.go(
            Phase::Open {
                since: now,
                open_for,
                tripped,
            },
            cause,
        )
    }

    /// The one place the state changes: only along the table.
    fn go(&mut self, to: Phase, cause: CircuitCause) -> Option<CircuitTransition> {
        let (from, to_state) = (self.state(), to.state());
        if from == to_state {
            return None;
        }
        let legal = is_legal(from, to_state, cause);
        debug_assert!(legal, "illegal transition {from} -> {to_state} ({cause:?})");
        if !legal {
            return None;
        }
        self.phase = to;
        self.generation = self.generation.wrapping_add(1);
        Some(CircuitTransition {
            from,
            to: to_state,
            cause,
        })
    }
}

/// `part / whole` in `[0, 1]` for `part <= whole`; 0 when `whole` is 0.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        // u64 -> f64 rounds only above 2^53 calls, far beyond any window.
        part as f64 / whole as f64
    }
}

/// One call as the windows keep it: a failure bit and a slow bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark(u8);

impl Mark {
    const FAILED: u8 = 1;
    const SLOW: u8 = 2;

    fn of(outcome: CallOutcome, slow: bool) -> Self {
        let mut bits = 0;
        if outcome.is_failure() {
            bits |= Self::FAILED;
        }
        if slow {
            bits |= Self::SLOW;
        }
        Self(bits)
    }
}

/// Calls, failures and slow calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    calls: u64,
    failures: u64,
    slow: u64,
}

impl Counts {
    fn add(&mut self, mark: Mark) {
        self.calls += 1;
        self.failures += u64::from(mark.0 & Mark::FAILED != 0);
        self.slow += u64::from(mark.0 & Mark::SLOW != 0);
    }

    /// Removes counts that were added before (so never goes below zero).
    fn remove(&mut self, other: Counts) {
        self.calls -= other.calls;
        self.failures -= other.failures;
        self.slow -= other.slow;
    }
}

/// The closed circuit's memory of recent calls.
#[derive(Clone, Debug)]
enum SlidingWindow {
    Time(TimeWindow),
    Count(CountWindow),
}

impl SlidingWindow {
    fn new(window: Window) -> Self {
        match window {
            Window::Time(span) => Self::Time(TimeWindow::new(span)),
            Window::Count(n) => Self::Count(CountWindow::new(n)),
        }
    }

    /// Adds one call at `now`; returns the totals after it.
    fn record(&mut self, mark: Mark, now: Instant) -> Counts {
        match self {
            Self::Time(w) => w.record(mark, now),
            Self::Count(w) => w.record(mark),
        }
    }

    /// The totals as of `now`.
    fn counts_at(&self, now: Instant) -> Counts {
        match self {
            Self::Time(w) => w.counts_at(now),
            Self::Count(w) => w.total,
        }
    }

    fn clear(&mut self) {
        match self {
            Self::Time(w) => w.clear(),
            Self::Count(w) => w.clear(),
        }
    }
}

/// A ring of one-second buckets with running totals.
///
/// Seconds are counted from `origin`, the first call's instant. Bucket `s % len` holds second
/// `s`, and the ring holds seconds `head - len + 1 ..= head`; moving `head` forward empties the
/// buckets it passes over (at most `len` of them), subtracting them from the totals.
#[derive(Clone, Debug)]
struct TimeWindow {
    buckets: Box<[Counts]>,
    origin: Option<Instant>,
    head: u64,
    total: Counts,
}

impl TimeWindow {
    fn new(span: Duration) -> Self {
        // Validated to 1..=3600 whole seconds; the max keeps a bad value from allocating much.
        let len = span.as_secs().clamp(1, MAX_TIME_WINDOW.as_secs()) as usize;
        Self {
            buckets: vec![Counts::default(); len].into_boxed_slice(),
            origin: None,
            head: 0,
            total: Counts::default(),
        }
    }

    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    fn index(&self, second: u64) -> usize {
        (second % self.len()) as usize
    }

    fn record(&mut self, mark: Mark, now: Instant) -> Counts {
        let origin = *self.origin.get_or_insert(now);
        let second = now
            .saturating_duration_since(origin)
            .as_secs()
            .max(self.head);
        let expired = (second - self.head).min(self.len());
        for s in (second + 1 - expired)..=second {
            let i = self.index(s);
            self.total.remove(self.buckets[i]);
            self.buckets[i] = Counts::default();
        }
        self.head = second;
        let i = self.index(second);
        self.buckets[i].add(mark);
        self.total.add(mark);
        self.total
    }

    fn counts_at(&self, now: Instant) -> Counts {
        let Some(origin) = self.origin else {
            return Counts::default();
        };
        let ahead = now
            .saturating_duration_since(origin)
            .as_secs()
            .saturating_sub(self.head);
        if ahead >= self.len() {
            return Counts::default();
        }
        // The buckets that `ahead` more seconds would empty are those of the next seconds.
        let mut counts = self.total;
        for s in (self.head + 1)..=(self.head + ahead) {
            counts.remove(self.buckets[self.index(s)]);
        }
        counts
    }

    fn clear(&mut self) {
        self.buckets.fill(Counts::default());
        self.origin = None;
        self.head = 0;
        self.total = Counts::default();
    }
}

/// A ring of the last `n` calls' marks with running totals.
#[derive(Clone, Debug)]
struct CountWindow {
    marks: Box<[Mark]>,
    /// Where the next mark goes (the oldest one once full).
    next: usize,
    len: usize,
    total: Counts,
}

impl CountWindow {
    fn new(n: NonZeroUsize) -> Self {
        let n = n.get().min(MAX_COUNT_WINDOW);
        Self {
            marks: vec![Mark(0); n].into_boxed_slice(),
            next: 0,
            len: 0,
            total: Counts::default(),
        }
    }

    fn record(&mut self, mark: Mark) -> Counts {
        if self.len == self.marks.len() {
            let mut old = Counts::default();
            old.add(self.marks[self.next]);
            self.total.remove(old);
        } else {
            self.len += 1;
        }
        self.marks[self.next] = mark;
        self.total.add(mark);
        self.next = (self.next + 1) % self.marks.len();
        self.total
    }

    fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
        self.total = Counts::default();
    }
}
