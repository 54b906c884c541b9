//! [`LossModel`]: what independent probe failures at rate `p` should cost, for the loss tests
//! and the loss benchmark to hold their measurements against.
//!
//! Under random SYN loss each probe fails independently with probability `p` (a lost SYN is
//! sent again only after the kernel's initial RTO of 1 s, past a sub-second probe timeout, so a
//! lost SYN is a failed probe). The engine's verdicts then follow from its thresholds alone:
//!
//! - an UP target becomes DOWN exactly at the `fall`-th failure in a row, so a (false) DOWN
//!   starts at a given probe when the probe before it passed and it and the `fall - 1` after it
//!   fail: probability `(1 - p) * p^fall` per probe;
//! - a DOWN target stays DOWN until `rise` passes in a row; its first re-check comes after the
//!   DOWN backoff's first delay, and the passes after it at the fast interval;
//! - readiness (every target UP, DEGRADED or in maintenance) is lost exactly while some target
//!   is DOWN, and a target flaps when it has more than `transitions` verdict changes (two per
//!   false DOWN: into it and out) within the flap window.
//!
//! The counts are small (a false DOWN at 3% loss and `fall` 3 is one probe in 38 000), so the
//! bounds the tests assert are Poisson quantiles ([`poisson_upper`]) rather than ratios.

use std::time::Duration;

use probe::health::{FlapPolicy, Schedule};

/// Independent probe failures at rate `loss` against targets with this schedule and these
/// thresholds.
#[derive(Clone, Copy, Debug)]
pub struct LossModel {
    /// The probability that one probe fails.
    pub loss: f64,
    /// Consecutive failures to DOWN.
    pub fall: u32,
    /// Consecutive passes back to UP.
    pub rise: u32,
    /// The targets' schedule.
    pub schedule: Schedule,
}

impl LossModel {
    /// The probability that a given probe starts a false DOWN: `(1 - p) * p^fall`.
    pub fn down_per_probe(&self) -> f64 {
        (1.0 - self.loss) * self.loss.powi(i32::try_from(self.fall).unwrap_or(i32::MAX))
    }

    /// The expected number of false DOWNs over `probes` probes (summed over targets).
    pub fn expected_downs(&self, probes: u64) -> f64 {
        probes as f64 * self.down_per_probe()
    }

    /// How long a false DOWN lasts on average: the DOWN backoff's first delay (its jittered
    /// mean, with the `fall` failures among the last 10 results feeding it back) and then
    /// `rise - 1` more passes at the fast interval. (A failure during the recovery, probability
    /// about `rise * p`, would add a backoff step; at the loss rates modelled it is ignored.)
    pub fn mean_outage(&self) -> Duration {
        let backoff = self.schedule.backoff();
        let base = backoff.base(0, self.success_rate_at_down());
        // `delay` takes up to `jitter * (base - min)` off the base, uniformly: half of it on
        // average.
        let mean_cut = base
            .saturating_sub(backoff.min())
            .mul_f64(backoff.jitter() / 2.0);
        base.saturating_sub(mean_cut) + self.recovery_passes()
    }

    /// The longest a false DOWN without a failure during its recovery lasts: the un-jittered
    /// backoff delay and the fast interval, each run up to the start jitter late.
    pub fn longest_plain_outage(&self) -> Duration {
        let backoff = self.schedule.backoff().base(0, self.success_rate_at_down());
        let late = self.schedule.interval().mul_f64(self.schedule.jitter());
        backoff + self.recovery_passes() + late * self.rise
    }

    /// The detection bound for a real outage: `fall * interval + timeout`. The engine
    /// re-checks at the fast interval after the first failure, so this is an upper bound (the
    /// schedule's own worst case is `interval + (fall - 1) * fast + timeout`, plus start jitter).
    pub fn detection_bound(&self) -> Duration {
        self.schedule.interval() * self.fall + self.schedule.timeout()
    }

    /// The expected number of targets flagged flapping over `duration` among `targets` probed at
    /// `probes_per_second` each: a target flaps when more than `policy.transitions` verdict
    /// changes, two per false DOWN, fall within `policy.window`. False DOWNs of one target are
    /// modelled as a Poisson process; over `duration` there are about `duration / window + 1`
    /// disjoint windows to be unlucky in (a union bound, so an overestimate).
    pub fn expected_flapping(
        &self,
        targets: usize,
        probes_per_second: f64,
        duration: Duration,
        policy: &FlapPolicy,
    ) -> f64 {
        let window = policy.window.as_secs_f64();
        let per_window = probes_per_second * window * self.down_per_probe();
        // The (transitions + 1)-th change completes a flap: that many changes take this many
        // DOWNs (each DOWN and its recovery are two changes).
        let downs = u64::from(policy.transitions / 2 + 1);
        let windows = duration.as_secs_f64() / window + 1.0;
        targets as f64 * (windows * poisson_tail(per_window, downs)).min(1.0)
    }

    /// The success rate over the last 10 results when a target has just gone DOWN: `fall` of
    /// them failed, and (false DOWNs being rare) the rest passed.
    fn success_rate_at_down(&self) -> f64 {
        1.0 - f64::from(self.fall.min(10)) / 10.0
    }

    fn recovery_passes(&self) -> Duration {
        self.schedule.fast_interval() * self.rise.saturating_sub(1)
    }
}

/// `P(X >= k)` for `X ~ Poisson(lambda)`.
pub fn poisson_tail(lambda: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let mut term = (-lambda).exp();
    let mut below = term;
    for i in 1..k {
        term *= lambda / i as f64;
        below += term;
    }
    (1.0 - below).max(0.0)
}

/// The smallest `k` with `P(X > k) < alpha` for `X ~ Poisson(lambda)`: a count above it happens
/// by chance less often than `alpha`, so a test may fail on it.
pub fn poisson_upper(lambda: f64, alpha: f64) -> u64 {
    let mut k = 0;
    while poisson_tail(lambda, k + 1) >= alpha {
        k += 1;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe::health::ScheduleSettings;

    fn model(loss: f64) -> LossModel {
        LossModel {
            loss,
            fall: 3,
            rise: 2,
            schedule: Schedule::try_new(ScheduleSettings {
                interval: Duration::from_secs(1),
                timeout: Duration::from_millis(500),
                jitter: 0.1,
                ..ScheduleSettings::default()
            })
            .unwrap(),
        }
    }

    #[test]
    fn the_formulas_give_the_figures_worked_by_hand() {
        let m = model(0.03);
        assert!((m.down_per_probe() - 0.97 * 2.7e-5).abs() < 1e-12);
        // Backoff: 1 s * (1 + 2 * (1 - 0.7)) = 1.6 s, jitter 0.5 takes 0.15 s off on average;
        // then one pass at the fast interval, 0.5 s.
        assert_eq!(m.mean_outage(), Duration::from_millis(1950));
        assert_eq!(m.longest_plain_outage(), Duration::from_millis(2300));
        assert_eq!(m.detection_bound(), Duration::from_millis(3500));
    }

    #[test]
    fn poisson_bounds() {
        assert!((poisson_tail(1.0, 1) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert_eq!(poisson_tail(3.0, 0), 1.0);
        // lambda 0.08: P(X >= 2) = 0.3%, P(X >= 3) = 0.008%.
        assert_eq!(poisson_upper(0.08, 0.001), 2);
        assert_eq!(poisson_upper(0.0, 0.001), 0);
        assert!(poisson_upper(10.0, 0.001) >= 20);
    }

    #[test]
    fn ordinary_loss_predicts_no_flapping() {
        let m = model(0.05);
        let f = m.expected_flapping(100, 1.0, Duration::from_secs(600), &FlapPolicy::default());
        assert!(f < 1e-3, "{f}");
    }
}
