//! Slow start: a member back in its pool takes a growing share of the traffic, not all of it at
//! once.
//!
//! A member that has just recovered (or just joined) has cold caches, an empty connection pool
//! and, on a JIT runtime, unoptimised code. Given its full share at once it can fail again under
//! the very load that it would carry well a minute later, and be ejected again: the flapping that
//! recovery's cool-down doubling punishes. So its selection weight ramps up over a window instead:
//!
//! ```text
//! weight = max(min_weight, (elapsed / window) ^ (1 / aggression))      while elapsed < window
//! weight = 1                                                           from then on
//! ```
//!
//! This is Envoy's slow-start curve. `aggression = 1` is a straight line; above 1 the curve is
//! concave (the member gets most of its share early), below 1 it is convex (it stays light for
//! most of the window). `min_weight` keeps a warming member from being starved entirely: it must
//! see some traffic to warm up at all.
//!
//! The weights feed the weighted selection of [`select`](crate::passive::select).

use std::time::Duration;

use tokio::time::Instant;

/// Why a [`SlowStartConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SlowStartConfigError {
    /// A zero window would be no ramp at all; leave slow start off instead.
    #[error("slow-start window must be greater than zero")]
    ZeroWindow,
    /// The floor is a fraction of the full weight.
    #[error("slow-start min_weight {0} is outside (0, 1]")]
    MinWeightOutOfRange(f64),
    /// The exponent is `1 / aggression`, so aggression must be positive and finite.
    #[error("slow-start aggression {0} must be a finite number greater than zero")]
    AggressionOutOfRange(f64),
}

/// A validated slow-start policy: how a member's weight ramps from `min_weight` to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowStartConfig {
    window: Duration,
    min_weight: f64,
    aggression: f64,
}

impl SlowStartConfig {
    /// The default ramp: one minute, the low end of the 1-2 minutes the source documents give
    /// for warming up.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
    /// The default floor: a tenth of the full weight, the "10% of traffic" a warming member
    /// starts with.
    pub const DEFAULT_MIN_WEIGHT: f64 = 0.1;
    /// The default curve: linear.
    pub const DEFAULT_AGGRESSION: f64 = 1.0;

    /// Builds a policy.
    ///
    /// [`SlowStartConfig::default`] has:
    /// - `window`: 60 s;
    /// - `min_weight`: 0.1;
    /// - `aggression`: 1.0 (linear).
    ///
    /// # Errors
    /// - [`SlowStartConfigError::ZeroWindow`] when `window` is zero;
    /// - [`SlowStartConfigError::MinWeightOutOfRange`] when `min_weight` is not within `(0, 1]`
    ///   (or is NaN): a zero floor would starve a member at the start of its window, the moment
    ///   it most needs a little traffic to warm up;
    /// - [`SlowStartConfigError::AggressionOutOfRange`] when `aggression` is not a finite number
    ///   above zero.
    pub fn try_new(
        window: Duration,
        min_weight: f64,
        aggression: f64,
    ) -> Result<Self, SlowStartConfigError> {
        if window.is_zero() {
            return Err(SlowStartConfigError::ZeroWindow);
        }
        if !(min_weight > 0.0 && min_weight <= 1.0) {
            return Err(SlowStartConfigError::MinWeightOutOfRange(min_weight));
        }
        if !(aggression.is_finite() && aggression > 0.0) {
            return Err(SlowStartConfigError::AggressionOutOfRange(aggression));
        }
        Ok(Self {
            window,
            min_weight,
            aggression,
        })
    }

    /// How long the ramp lasts.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The weight at the start of the ramp.
    pub fn min_weight(&self) -> f64 {
        self.min_weight
    }

    /// The curve's aggression: 1 is linear.
    pub fn aggression(&self) -> f64 {
        self.aggression
    }

    /// The weight, in `[min_weight, 1]`, of a member `elapsed` into its ramp.
    pub fn weight(&self, elapsed: Duration) -> f64 {
        if elapsed >= self.window {
            return 1.0;
        }
        let progress = elapsed.as_secs_f64() / self.window.as_secs_f64();
        let curve = if self.aggression == 1.0 {
            progress
        } else {
            progress.powf(self.aggression.recip())
        };
        curve.clamp(self.min_weight, 1.0)
    }
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        Self {
            window: Self::DEFAULT_WINDOW,
            min_weight: Self::DEFAULT_MIN_WEIGHT,
            aggression: Self::DEFAULT_AGGRESSION,
        }
    }
}

/// One member's ramp, started at a given instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowStart {
    config: SlowStartConfig,
    started: Instant,
}

impl SlowStart {
    /// A ramp that starts at `started` (when the member came back).
    pub fn new(config: SlowStartConfig, started: Instant) -> Self {
        Self { config, started }
    }

    /// When the ramp started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The member's weight at `now`: `min_weight` at the start (and for an instant before it),
    /// 1 from the end of the window on.
    pub fn weight(&self, now: Instant) -> f64 {
        self.config
            .weight(now.saturating_duration_since(self.started))
    }

    /// Whether the ramp is over at `now` (the weight is 1 from then on).
    pub fn is_complete(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.started) >= self.config.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn rejects_invalid_parameters() {
        let ok = SlowStartConfig::try_new(secs(60.0), 0.1, 1.0);
        assert_eq!(ok, Ok(SlowStartConfig::default()));
        assert_eq!(
            SlowStartConfig::try_new(Duration::ZERO, 0.1, 1.0),
            Err(SlowStartConfigError::ZeroWindow)
        );
        for bad in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                SlowStartConfig::try_new(secs(60.0), bad, 1.0),
                Err(SlowStartConfigError::MinWeightOutOfRange(_))
            ));
        }
        for bad in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            assert!(matches!(
                SlowStartConfig::try_new(secs(60.0), 0.1, bad),
                Err(SlowStartConfigError::AggressionOutOfRange(_))
            ));
        }
    }

    #[test]
    fn linear_ramp_over_the_window() {
        let t0 = Instant::now();
        let ramp = SlowStart::new(SlowStartConfig::default(), t0);
        let at = |s: f64| ramp.weight(t0 + secs(s));
        assert!(close(at(0.0), 0.1), "floor at the start");
        assert!(
            close(at(3.0), 0.1),
            "5% of the window is still under the floor"
        );
        assert!(close(at(15.0), 0.25));
        assert!(close(at(30.0), 0.5));
        assert!(close(at(45.0), 0.75));
        assert!(close(at(60.0), 1.0));
        assert!(close(at(600.0), 1.0), "full weight beyond the window");
        assert!(!ramp.is_complete(t0 + secs(59.9)));
        assert!(ramp.is_complete(t0 + secs(60.0)));
        // An instant before the start (a caller's clock read earlier) is the floor, not a panic.
        let late = SlowStart::new(SlowStartConfig::default(), t0 + secs(5.0));
        assert!(close(late.weight(t0), 0.1));
    }

    #[test]
    fn aggressive_ramp_is_concave() {
        let t0 = Instant::now();
        let config = SlowStartConfig::try_new(secs(60.0), 0.1, 2.0).unwrap();
        let ramp = SlowStart::new(config, t0);
        let at = |s: f64| ramp.weight(t0 + secs(s));
        assert!(close(at(0.0), 0.1));
        assert!(close(at(15.0), 0.5), "sqrt(0.25)");
        assert!(close(at(30.0), 0.5f64.sqrt()));
        assert!(close(at(60.0), 1.0));
        assert!(close(at(90.0), 1.0));
    }

    #[test]
    fn gentle_ramp_is_convex_and_floored() {
        let t0 = Instant::now();
        let config = SlowStartConfig::try_new(secs(60.0), 0.1, 0.5).unwrap();
        let ramp = SlowStart::new(config, t0);
        let at = |s: f64| ramp.weight(t0 + secs(s));
        assert!(close(at(0.0), 0.1));
        assert!(close(at(15.0), 0.1), "0.25^2 = 0.0625, under the floor");
        assert!(close(at(30.0), 0.25));
        assert!(close(at(45.0), 0.5625));
        assert!(close(at(60.0), 1.0));
        assert!(close(at(61.0), 1.0));
    }
}
