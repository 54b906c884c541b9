//! Self-health awareness: the engine notices when it is itself too slow to judge its targets.
//!
//! A prober starved of CPU (a noisy neighbour, a throttled container, a long GC pause in the same
//! host) sees its probes time out although the targets answered in time: the reply sat in a
//! socket buffer while the prober was not running. Blaming the targets then takes healthy
//! services out, all at once. HashiCorp's Lifeguard answers this with a *local health
//! multiplier*: a node that sees signs of its own slowness scales its timeouts up and trusts its
//! own negative verdicts less, and lowers the multiplier again as it recovers.
//!
//! [`SelfHealth`] keeps that multiplier from a probe of the engine itself: a ticker that asks to
//! wake every `tick` and measures how late it actually woke ([`SelfHealth::watch`]), and from the
//! probes' own timeouts, when one is noticed more than `threshold` after it was due. A wake-up
//! later than `threshold` raises the multiplier by one (up to `max_multiplier`); `recover_after`
//! punctual wake-ups in a row lower it by one. The engine then:
//! - runs each probe with its timeout scaled by `1 + multiplier` (never past the interval), so a
//!   slow prober gives replies the time it is itself losing;
//! - does not count a **timeout** towards DOWN while the multiplier is above zero (at the start or
//!   at the end of the run), or when the timeout itself was noticed late: the run is recorded and
//!   shown, its verdict deferred to the next run.
//!   Definite answers (refused, reset, a wrong status or body) still count: a starved prober does
//!   not make a port refuse connections.
//!
//! The multiplier is `probe_self_health_multiplier`; deferred verdicts are counted in
//! `probe_verdicts_deferred_total{target}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// How the engine judges its own health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfHealthConfig {
    /// How often the engine checks its own punctuality.
    pub tick: Duration,
    /// A wake-up this late means the engine is starved.
    pub threshold: Duration,
    /// The highest multiplier: timeouts grow to at most `1 + max_multiplier` times their value.
    pub max_multiplier: u32,
    /// Punctual wake-ups in a row that lower the multiplier by one.
    pub recover_after: u32,
}

impl Default for SelfHealthConfig {
    /// A 10 ms tick, 50 ms of lateness as the threshold (five ticks: far above the sub-millisecond
    /// lag of a healthy runtime, far below a probe timeout), a multiplier up to 8 (Lifeguard's),
    /// lowered after 1 s of punctual ticks.
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(10),
            threshold: Duration::from_millis(50),
            max_multiplier: 8,
            recover_after: 100,
        }
    }
}

/// The engine's local health multiplier; see the module docs. Shared by the watcher and the
/// probes; reading it is one atomic load.
#[derive(Debug)]
pub struct SelfHealth {
    config: SelfHealthConfig,
    /// The multiplier in the high 16 bits, the punctual streak in the low 16, so one
    /// compare-and-swap updates both.
    state: AtomicU32,
}

const STREAK_BITS: u32 = 16;
const STREAK_MASK: u32 = (1 << STREAK_BITS) - 1;

impl SelfHealth {
    /// A healthy engine (multiplier 0).
    pub fn new(config: SelfHealthConfig) -> Self {
        Self {
            config,
            state: AtomicU32::new(0),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SelfHealthConfig {
        &self.config
    }

    /// The current multiplier: 0 when the engine keeps time, up to `max_multiplier`.
    pub fn multiplier(&self) -> u32 {
        self.state.load(Ordering::Acquire) >> STREAK_BITS
    }

    /// Takes in how late one wake-up was; returns the multiplier after it.
    pub fn observe(&self, lateness: Duration) -> u32 {
        let late = lateness > self.config.threshold;
        let max = self.config.max_multiplier.min(u32::MAX >> STREAK_BITS);
        let recover_after = self.config.recover_after.clamp(1, STREAK_MASK);
        let step = |state: u32| {
            let (multiplier, streak) = (state >> STREAK_BITS, state & STREAK_MASK);
            let (multiplier, streak) = if late {
                ((multiplier + 1).min(max), 0)
            } else if multiplier == 0 {
                (0, 0)
            } else if streak + 1 >= recover_after {
                (multiplier - 1, 0)
            } else {
                (multiplier, streak + 1)
            };
            Some((multiplier << STREAK_BITS) | streak)
        };
        // `step` always returns Some, so this is the new state either way.
        let previous = match self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, step)
        {
            Ok(previous) | Err(previous) => previous,
        };
        step(previous).map_or(0, |state| state >> STREAK_BITS)
    }

    /// `timeout` scaled by the multiplier `multiplier` (`1 + multiplier` times), but never
    /// longer than `interval` (or `timeout` itself, when that is longer).
    pub fn scale(timeout: Duration, multiplier: u32, interval: Duration) -> Duration {
        if multiplier == 0 {
            return timeout;
        }
        timeout
            .saturating_mul(multiplier.saturating_add(1))
            .min(interval.max(timeout))
    }

    /// Checks the engine's punctuality every `tick` until cancelled, updating the multiplier and
    /// `probe_self_health_multiplier`; changes are logged.
    pub async fn watch(self: Arc<Self>, cancel: CancellationToken) {
        let gauge = metrics::gauge!("probe_self_health_multiplier");
        gauge.set(0.0);
        let mut ticks = tokio::time::interval(self.config.tick);
        // A starved engine should not catch up on missed ticks: one late wake-up is one sign.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut shown = 0;
        loop {
            let planned = tokio::select! {
                () = cancel.cancelled() => return,
                planned = ticks.tick() => planned,
            };
            let multiplier = self.observe(Instant::now().saturating_duration_since(planned));
            if multiplier != shown {
                gauge.set(f64::from(multiplier));
                if multiplier > shown && shown == 0 {
                    tracing::warn!(
                        multiplier,
                        "the engine is running late: widening timeouts and deferring timeout verdicts"
                    );
                } else if multiplier == 0 {
                    tracing::info!("the engine keeps time again");
                }
                shown = multiplier;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> SelfHealth {
        SelfHealth::new(SelfHealthConfig {
            recover_after: 3,
            max_multiplier: 4,
            ..SelfHealthConfig::default()
        })
    }

    const LATE: Duration = Duration::from_millis(80);
    const ON_TIME: Duration = Duration::from_millis(1);

    #[test]
    fn late_wake_ups_raise_the_multiplier_up_to_the_cap() {
        let h = health();
        let seen: Vec<u32> = (0..6).map(|_| h.observe(LATE)).collect();
        assert_eq!(seen, [1, 2, 3, 4, 4, 4]);
        assert_eq!(h.multiplier(), 4);
        // The threshold itself is not late.
        let h = health();
        assert_eq!(h.observe(Duration::from_millis(50)), 0);
    }

    #[test]
    fn punctual_streaks_lower_it_one_step_each() {
        let h = health();
        h.observe(LATE);
        h.observe(LATE);
        let seen: Vec<u32> = (0..7).map(|_| h.observe(ON_TIME)).collect();
        assert_eq!(seen, [2, 2, 1, 1, 1, 0, 0]);
        // A late wake-up in a streak starts it over.
        h.observe(LATE);
        h.observe(ON_TIME);
        h.observe(ON_TIME);
        assert_eq!(h.observe(LATE), 2);
        assert_eq!(h.observe(ON_TIME), 2);
    }

    #[test]
    fn timeouts_scale_up_to_the_interval() {
        let ms = Duration::from_millis;
        assert_eq!(SelfHealth::scale(ms(100), 0, ms(1000)), ms(100));
        assert_eq!(SelfHealth::scale(ms(100), 3, ms(1000)), ms(400));
        assert_eq!(SelfHealth::scale(ms(300), 8, ms(1000)), ms(1000));
        assert_eq!(SelfHealth::scale(ms(300), 8, ms(200)), ms(300));
    }

    #[tokio::test(start_paused = true)]
    async fn the_watcher_sees_a_blocked_runtime() {
        let h = Arc::new(health());
        let cancel = CancellationToken::new();
        let watcher = tokio::spawn(h.clone().watch(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(h.multiplier(), 0, "paused time is always punctual");
        // Jumping the clock 200 ms without letting the watcher run is what a starved runtime
        // looks like to it: its next tick comes 190 ms late.
        tokio::time::advance(Duration::from_millis(200)).await;
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(h.multiplier(), 1);
        cancel.cancel();
        watcher.await.unwrap();
    }
}
