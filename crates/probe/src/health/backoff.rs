//! Jittered exponential backoff with feedback from the recent success rate.
//!
//! A target that keeps failing should be probed less often (it is known to be down, and hammering
//! a struggling service does not help it recover), but not so rarely that its recovery goes
//! unnoticed. The delay therefore doubles per failed attempt from `min` up to `max`.
//!
//! Two refinements over a plain doubling:
//! - **Jitter** spreads the delay over `[min, base]` so targets that failed together (a shared
//!   switch went down) do not retry in lock-step.
//! - **Success-rate feedback**: the base grows when recent results are poor, by a factor of
//!   `1 + 2 * (1 - success_rate)` (1x when every recent run passed, 3x when none did). A target
//!   that fails intermittently is thus backed off further than one that just failed once.

use std::time::Duration;

use rand::RngExt;

/// Why an [`ExponentialBackoff`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackoffError {
    /// `min` must not exceed `max`.
    #[error("backoff min ({min:?}) is greater than max ({max:?})")]
    MinAboveMax {
        /// The requested minimum.
        min: Duration,
        /// The requested maximum.
        max: Duration,
    },
    /// `min` must be positive, or doubling it would never move.
    #[error("backoff min must be greater than zero")]
    ZeroMin,
    /// Jitter is a fraction of the delay range.
    #[error("backoff jitter {0} is outside 0..=1")]
    JitterOutOfRange(f64),
}

/// A validated exponential backoff policy.
///
/// The delay for attempt `n` (0-based) is `base = min(max, min * 2^n * feedback)`, then jittered
/// uniformly down into `[min + (base - min) * (1 - jitter), base]`. It is never below `min` nor
/// above `max`. `jitter = 1` is "full jitter" over the range above `min`; `jitter = 0` is
/// deterministic, which is what tests use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialBackoff {
    min: Duration,
    max: Duration,
    jitter: f64,
}

impl ExponentialBackoff {
    /// Builds a policy.
    ///
    /// # Errors
    /// - [`BackoffError::ZeroMin`] when `min` is zero;
    /// - [`BackoffError::MinAboveMax`] when `min > max`;
    /// - [`BackoffError::JitterOutOfRange`] when `jitter` is not within `0..=1` (or is NaN).
    pub fn try_new(min: Duration, max: Duration, jitter: f64) -> Result<Self, BackoffError> {
        if min.is_zero() {
            return Err(BackoffError::ZeroMin);
        }
        if min > max {
            return Err(BackoffError::MinAboveMax { min, max });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(BackoffError::JitterOutOfRange(jitter));
        }
        Ok(Self { min, max, jitter })
    }

    /// The smallest delay this policy returns.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The largest delay this policy returns.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The jitter fraction.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The un-jittered delay for `attempt`, given the recent success rate in `0..=1`.
    pub fn base(&self, attempt: u32, success_rate: f64) -> Duration {
        let feedback = 1.0 + 2.0 * (1.0 - success_rate.clamp(0.0, 1.0));
        // 2^attempt overflows f64 only far beyond any cap; clamp the exponent to stay finite.
        let factor = 2f64.powi(attempt.min(64) as i32) * feedback;
        let scaled = self.min.as_secs_f64() * factor;
        if scaled >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(scaled).max(self.min)
        }
    }

    /// The jittered delay for `attempt`, given the recent success rate in `0..=1`.
    pub fn delay(&self, attempt: u32, success_rate: f64, rng: &mut impl rand::Rng) -> Duration {
        let base = self.base(attempt, success_rate);
        if self.jitter == 0.0 {
            return base;
        }
        let span = (base - self.min).as_secs_f64() * self.jitter;
        let cut: f64 = rng.random_range(0.0..=1.0) * span;
        base - Duration::from_secs_f64(cut)
    }
}

/// The success rate over the last 64 results, kept in one word.
///
/// Feeds [`ExponentialBackoff`]: a bit per result, newest in bit 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuccessWindow {
    bits: u64,
    len: u8,
}

impl SuccessWindow {
    /// How many results the window remembers.
    pub const CAPACITY: u8 = 64;

    /// Records one result.
    pub fn record(&mut self, ok: bool) {
        self.bits = (self.bits << 1) | u64::from(ok);
        self.len = (self.len + 1).min(Self::CAPACITY);
    }

    /// The fraction of successes among the last `n` results (all remembered ones if fewer);
    /// 1.0 when nothing was recorded, so a new target is not penalised.
    pub fn rate(&self, n: u8) -> f64 {
        let n = n.min(self.len);
        if n == 0 {
            return 1.0;
        }
        let mask = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
        f64::from((self.bits & mask).count_ones()) / f64::from(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rejects_invalid_parameters() {
        assert_eq!(
            ExponentialBackoff::try_new(ms(10), ms(5), 0.0),
            Err(BackoffError::MinAboveMax {
                min: ms(10),
                max: ms(5)
            })
        );
        assert_eq!(
            ExponentialBackoff::try_new(Duration::ZERO, ms(5), 0.0),
            Err(BackoffError::ZeroMin)
        );
        assert!(matches!(
            ExponentialBackoff::try_new(ms(1), ms(5), 1.5),
            Err(BackoffError::JitterOutOfRange(_))
        ));
        assert!(matches!(
            ExponentialBackoff::try_new(ms(1), ms(5), f64::NAN),
            Err(BackoffError::JitterOutOfRange(_))
        ));
    }

    #[test]
    fn a_min_equal_to_max_is_one_constant_delay() {
        let b = ExponentialBackoff::try_new(ms(100), ms(100), 0.5).unwrap();
        assert_eq!((b.min(), b.max(), b.jitter()), (ms(100), ms(100), 0.5));
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        assert!((0..10).all(|n| b.delay(n, 0.0, &mut rng) == ms(100)));
    }

    #[test]
    fn jitter_spreads_delays_down_from_the_base() {
        let b = ExponentialBackoff::try_new(ms(100), ms(1000), 1.0).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // Attempt 3 with every result good: base 800 ms; full jitter spreads over [100, 800].
        let delays: Vec<_> = (0..200).map(|_| b.delay(3, 1.0, &mut rng)).collect();
        assert!(delays.iter().all(|d| (ms(100)..=ms(800)).contains(d)));
        assert!(
            delays.iter().any(|d| *d < ms(450)),
            "never in the lower half"
        );
        assert!(
            delays.iter().any(|d| *d > ms(450)),
            "never in the upper half"
        );
    }

    #[test]
    fn doubles_then_caps_without_jitter() {
        let b = ExponentialBackoff::try_new(ms(100), ms(1000), 0.0).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let delays: Vec<_> = (0..6).map(|n| b.delay(n, 1.0, &mut rng)).collect();
        assert_eq!(
            delays,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
    }

    #[test]
    fn poor_success_rate_raises_the_base() {
        let b = ExponentialBackoff::try_new(ms(100), ms(10_000), 0.0).unwrap();
        assert_eq!(b.base(0, 1.0), ms(100));
        assert_eq!(b.base(0, 0.5), ms(200));
        assert_eq!(b.base(0, 0.0), ms(300));
        assert_eq!(b.base(2, 0.0), ms(1200));
    }

    #[test]
    fn success_window_rates() {
        let mut w = SuccessWindow::default();
        assert_eq!(w.rate(10), 1.0);
        for ok in [true, false, true, false] {
            w.record(ok);
        }
        assert_eq!(w.rate(10), 0.5);
        assert_eq!(w.rate(1), 0.0);
        for _ in 0..100 {
            w.record(true);
        }
        assert_eq!(w.rate(64), 1.0);
    }

    proptest! {
        #[test]
        fn delay_stays_within_min_and_max(
            min_ms in 1u64..10_000,
            extra_ms in 0u64..100_000,
            jitter in 0.0f64..=1.0,
            attempt in 0u32..200,
            rate in 0.0f64..=1.0,
            seed: u64,
        ) {
            let (min, max) = (ms(min_ms), ms(min_ms + extra_ms));
            let b = ExponentialBackoff::try_new(min, max, jitter).unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d = b.delay(attempt, rate, &mut rng);
            prop_assert!(d >= min && d <= max, "{d:?} outside {min:?}..={max:?}");
            prop_assert!(d <= b.base(attempt, rate));
        }

        #[test]
        fn base_never_shrinks_with_more_attempts(min_ms in 1u64..1000, attempt in 0u32..100) {
            let b = ExponentialBackoff::try_new(ms(min_ms), ms(60_000), 0.0).unwrap();
            prop_assert!(b.base(attempt + 1, 1.0) >= b.base(attempt, 1.0));
        }
    }
}
