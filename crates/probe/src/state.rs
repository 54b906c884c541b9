//! The per-target health state machine: hysteresis over consecutive results.
//!
//! A target starts in `PROBING` (no verdict yet). `rise` consecutive successes make it `UP`;
//! `fall` consecutive failures make it `DOWN`. Between verdicts a single contrary result does not
//! flip anything, which is what keeps one lost packet from paging anyone.
//!
//! The machine only decides; it reports a [`Transition`] exactly once, when it happens, and the
//! caller logs and counts it. It also answers how soon the target should be probed again
//! ([`Hysteresis::next_delay`]), because that depends on how settled the verdict is.

use std::fmt;
use std::time::Duration;

use rand::RngExt;

use crate::backoff::SuccessWindow;
use crate::target::{Schedule, Thresholds};

/// A target's health verdict. The names (`as_str`) are a public contract of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// No verdict yet: the target is new, or its results are still deciding.
    Probing,
    /// `rise` consecutive successes: the target does its job.
    Up,
    /// `fall` consecutive failures: the target is down.
    Down,
}

impl HealthState {
    /// The upper-case name used in the API, logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Probing => "PROBING",
            Self::Up => "UP",
            Self::Down => "DOWN",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of verdict, reported once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: HealthState,
    /// The state after.
    pub to: HealthState,
}

/// How many recent results feed the backoff's success-rate feedback (seed 002 uses 10).
const FEEDBACK_WINDOW: u8 = 10;

/// Counts consecutive results and flips the verdict at the thresholds.
#[derive(Clone, Debug)]
pub struct Hysteresis {
    thresholds: Thresholds,
    state: HealthState,
    successes: u32,
    failures: u32,
}

impl Hysteresis {
    /// A new machine in `PROBING`.
    pub fn new(thresholds: Thresholds) -> Self {
        Self {
            thresholds,
            state: HealthState::Probing,
            successes: 0,
            failures: 0,
        }
    }

    /// Feeds one result; returns the transition it caused, if any.
    pub fn observe(&mut self, ok: bool) -> Option<Transition> {
        let from = self.state;
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
            if from != HealthState::Up && self.successes >= self.thresholds.rise.get() {
                self.state = HealthState::Up;
            }
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
            if from != HealthState::Down && self.failures >= self.thresholds.fall.get() {
                self.state = HealthState::Down;
            }
        }
        (self.state != from).then_some(Transition {
            from,
            to: self.state,
        })
    }

    /// The current verdict.
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// Successes in a row, 0 after any failure.
    pub fn consecutive_successes(&self) -> u32 {
        self.successes
    }

    /// Failures in a row, 0 after any success.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }

    /// Whether recent results contradict the verdict, so the next result may change it.
    pub fn is_deciding(&self) -> bool {
        match self.state {
            HealthState::Probing => true,
            HealthState::Up => self.failures > 0,
            HealthState::Down => self.successes > 0,
        }
    }

    /// How long after this run the next one should start.
    ///
    /// - settled UP: the interval;
    /// - deciding (PROBING, or a contrary result in UP/DOWN): the fast interval, so a verdict is
    ///   reached in about `fall * fast_interval` rather than `fall * interval`;
    /// - settled DOWN: the backoff, attempt `failures - fall`, with feedback from the success rate
    ///   of the last 10 results.
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
                let attempt = self.failures - self.thresholds.fall.get();
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
    use proptest::prelude::*;
    use std::num::NonZeroU32;

    fn machine(rise: u32, fall: u32) -> Hysteresis {
        Hysteresis::new(Thresholds::new(
            NonZeroU32::new(rise).unwrap(),
            NonZeroU32::new(fall).unwrap(),
        ))
    }

    #[test]
    fn exactly_fall_failures_go_down_and_rise_successes_come_back() {
        let mut m = machine(2, 3);
        assert_eq!(m.observe(true), None);
        assert_eq!(
            m.observe(true),
            Some(Transition {
                from: HealthState::Probing,
                to: HealthState::Up
            })
        );
        assert_eq!(m.observe(false), None);
        assert_eq!(m.observe(false), None);
        assert!(m.is_deciding());
        assert_eq!(
            m.observe(false),
            Some(Transition {
                from: HealthState::Up,
                to: HealthState::Down
            })
        );
        // Further failures are not new transitions.
        assert_eq!(m.observe(false), None);
        assert_eq!(m.observe(true), None);
        assert_eq!(
            m.observe(true),
            Some(Transition {
                from: HealthState::Down,
                to: HealthState::Up
            })
        );
    }

    #[test]
    fn an_interrupted_streak_starts_over() {
        let mut m = machine(2, 3);
        m.observe(true);
        m.observe(true);
        m.observe(false);
        m.observe(false);
        m.observe(true);
        m.observe(false);
        m.observe(false);
        assert_eq!(m.state(), HealthState::Up);
        assert_eq!(m.observe(false).map(|t| t.to), Some(HealthState::Down));
    }

    #[test]
    fn delays_follow_the_verdict() {
        let schedule = Schedule::try_new(
            Duration::from_secs(10),
            Duration::from_secs(1),
            0.0,
            Some(Duration::from_secs(2)),
            Some(Duration::from_secs(80)),
            Some(0.0),
        )
        .unwrap();
        let mut rng = rand::rng();
        let mut window = SuccessWindow::default();
        let mut m = machine(1, 2);
        let mut step = |m: &mut Hysteresis, ok| {
            m.observe(ok);
            window.record(ok);
            m.next_delay(&schedule, &window, &mut rng)
        };
        assert_eq!(step(&mut m, true), Duration::from_secs(10)); // UP, settled
        assert_eq!(step(&mut m, false), Duration::from_secs(2)); // deciding
        // DOWN: backoff from the interval, base raised by the poor success rate (1 of 3 ok:
        // factor 1 + 2 * 2/3).
        let down = step(&mut m, false);
        assert!(down > Duration::from_secs(10), "{down:?}");
        let later = step(&mut m, false);
        assert!(later > down, "{later:?} <= {down:?}");
        assert_eq!(step(&mut m, false), Duration::from_secs(80)); // capped
    }

    proptest! {
        #[test]
        fn verdicts_respect_thresholds(
            rise in 1u32..6,
            fall in 1u32..6,
            results in proptest::collection::vec(any::<bool>(), 0..200),
        ) {
            let mut m = machine(rise, fall);
            let (mut run_ok, mut run_fail) = (0u32, 0u32);
            for ok in results {
                let before = m.state();
                let t = m.observe(ok);
                if ok { run_ok += 1; run_fail = 0; } else { run_fail += 1; run_ok = 0; }
                match t {
                    Some(Transition { to: HealthState::Up, from }) => {
                        prop_assert_ne!(from, HealthState::Up);
                        prop_assert_eq!(run_ok, rise);
                    }
                    Some(Transition { to: HealthState::Down, from }) => {
                        prop_assert_ne!(from, HealthState::Down);
                        prop_assert_eq!(run_fail, fall);
                    }
                    Some(Transition { to: HealthState::Probing, .. }) => {
                        prop_assert!(false, "nothing returns to PROBING");
                    }
                    None => prop_assert_eq!(m.state(), before),
                }
            }
        }
    }
}
