//! How a target's verdict is reached and when it is probed: the schedule (interval, timeout,
//! jitter, fast interval, DOWN backoff), the hysteresis thresholds and the flap policy. Every
//! constructor validates, so a policy that exists is one the state machine and the scheduler
//! can run; front ends attach source locations to the errors.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::health::backoff::ExponentialBackoff;

/// Why a [`Schedule`] or [`Thresholds`] could not be built. Each variant names one field, so a
/// front end can point at the right line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// The interval must be positive.
    #[error("interval must be greater than zero")]
    ZeroInterval,
    /// The timeout must be positive.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// A probe must finish before the next one is due.
    #[error("timeout ({timeout}) must be less than interval ({interval})", timeout = humantime::format_duration(*.timeout), interval = humantime::format_duration(*.interval))]
    TimeoutNotBelowInterval {
        /// The requested timeout.
        timeout: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// Jitter is a fraction of the interval.
    #[error("jitter {0} is outside 0..=1")]
    JitterOutOfRange(f64),
    /// The fast interval is for deciding faster, so it cannot exceed the interval.
    #[error("fast_interval ({fast}) must be between 1ms and interval ({interval})", fast = humantime::format_duration(*.fast), interval = humantime::format_duration(*.interval))]
    FastIntervalOutOfRange {
        /// The requested fast interval.
        fast: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// The DOWN backoff starts from the interval, so its cap cannot be below it.
    #[error("backoff max ({max}) must be at least interval ({interval})", max = humantime::format_duration(*.max), interval = humantime::format_duration(*.interval))]
    BackoffMaxBelowInterval {
        /// The requested cap.
        max: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// The backoff's own validation failed.
    #[error(transparent)]
    Backoff(#[from] crate::health::backoff::BackoffError),
}

/// What a [`Schedule`] is built from. The defaults are the daemon's: a 5 s interval, a 1 s
/// timeout, 10% jitter; unset, the fast interval is half the interval, the DOWN backoff grows to
/// four times the interval with a jitter of 0.5.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduleSettings {
    /// The period while the target's state is settled.
    pub interval: Duration,
    /// The deadline of one run; below `interval`.
    pub timeout: Duration,
    /// The fraction of the interval each run may start late, at random.
    pub jitter: f64,
    /// The period while a verdict is pending; half the interval when unset.
    pub fast_interval: Option<Duration>,
    /// The cap of the DOWN backoff; four times the interval when unset.
    pub backoff_max: Option<Duration>,
    /// The jitter of the DOWN backoff; 0.5 when unset.
    pub backoff_jitter: Option<f64>,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self {
            interval: Schedule::DEFAULT_INTERVAL,
            timeout: Schedule::DEFAULT_TIMEOUT,
            jitter: Schedule::DEFAULT_JITTER,
            fast_interval: None,
            backoff_max: None,
            backoff_jitter: None,
        }
    }
}

/// When a target is probed.
///
/// - `interval`: the period while the target's state is settled.
/// - `timeout`: the deadline of one run; must be below `interval`.
/// - `jitter`: each run starts up to `jitter * interval` late, at random, so targets sharing an
///   interval drift apart rather than staying aligned. Runs stay on the interval grid: jitter
///   never accumulates.
/// - `fast_interval`: the period while a verdict is pending (some failures, but fewer than `fall`;
///   or a first success after DOWN), like HAProxy's `fastinter`.
/// - `backoff`: the period while DOWN, starting at `interval` and growing to the backoff's max
///   (HAProxy's `downinter`, made adaptive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    interval: Duration,
    timeout: Duration,
    jitter: f64,
    fast_interval: Duration,
    backoff: ExponentialBackoff,
}

impl Schedule {
    /// The default interval.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
    /// The default timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default jitter fraction.
    pub const DEFAULT_JITTER: f64 = 0.1;
    /// The default cap of the DOWN backoff, as a multiple of the interval.
    pub const DEFAULT_BACKOFF_FACTOR: u32 = 4;
    /// The default jitter of the DOWN backoff.
    pub const DEFAULT_BACKOFF_JITTER: f64 = 0.5;

    /// Builds a schedule from `settings`, as every policy of the crate is built: a plain settings
    /// struct in, a validated value or the first invalid field out.
    ///
    /// # Errors
    /// One [`ScheduleError`] naming the first invalid field: zero interval or timeout, timeout not
    /// below interval, jitter outside 0..=1, fast interval zero or above the interval, backoff max
    /// below the interval, backoff jitter outside 0..=1.
    pub fn try_new(settings: ScheduleSettings) -> Result<Self, ScheduleError> {
        let ScheduleSettings {
            interval,
            timeout,
            jitter,
            fast_interval,
            backoff_max,
            backoff_jitter,
        } = settings;
        if interval.is_zero() {
            return Err(ScheduleError::ZeroInterval);
        }
        if timeout.is_zero() {
            return Err(ScheduleError::ZeroTimeout);
        }
        if timeout >= interval {
            return Err(ScheduleError::TimeoutNotBelowInterval { timeout, interval });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ScheduleError::JitterOutOfRange(jitter));
        }
        let fast = fast_interval.unwrap_or(interval / 2);
        if fast < Duration::from_millis(1) || fast > interval {
            return Err(ScheduleError::FastIntervalOutOfRange { fast, interval });
        }
        let max = backoff_max.unwrap_or_else(|| {
            interval
                .checked_mul(Self::DEFAULT_BACKOFF_FACTOR)
                .unwrap_or(Duration::MAX)
        });
        if max < interval {
            return Err(ScheduleError::BackoffMaxBelowInterval { max, interval });
        }
        let backoff = ExponentialBackoff::try_new(
            interval,
            max,
            backoff_jitter.unwrap_or(Self::DEFAULT_BACKOFF_JITTER),
        )?;
        Ok(Self {
            interval,
            timeout,
            jitter,
            fast_interval: fast,
            backoff,
        })
    }

    /// The settled-state period.
    pub fn interval(&self) -> Duration {
        self.interval
    }
    /// The deadline of one run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// The per-run start jitter, as a fraction of the interval.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
    /// The period while a verdict is pending.
    pub fn fast_interval(&self) -> Duration {
        self.fast_interval
    }
    /// The backoff used while DOWN.
    pub fn backoff(&self) -> &ExponentialBackoff {
        &self.backoff
    }
}

impl Default for Schedule {
    fn default() -> Self {
        let interval = Self::DEFAULT_INTERVAL;
        Self {
            interval,
            timeout: Self::DEFAULT_TIMEOUT,
            jitter: Self::DEFAULT_JITTER,
            fast_interval: interval / 2,
            backoff: ExponentialBackoff::try_new(
                interval,
                interval * Self::DEFAULT_BACKOFF_FACTOR,
                Self::DEFAULT_BACKOFF_JITTER,
            )
            .unwrap_or_else(|_| unreachable!("default backoff is valid")),
        }
    }
}

/// Hysteresis thresholds: consecutive results needed to change a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Consecutive passing results to reach a verdict (UP or DEGRADED) from PROBING.
    pub rise: NonZeroU32,
    /// Consecutive failures to become DOWN.
    pub fall: NonZeroU32,
    /// Consecutive degraded results to go from UP to DEGRADED.
    pub degrade: NonZeroU32,
    /// Consecutive good results to go from DEGRADED back to UP.
    pub recover: NonZeroU32,
}

impl Thresholds {
    /// Thresholds with `degrade` and `recover` equal to `rise`.
    pub fn new(rise: NonZeroU32, fall: NonZeroU32) -> Self {
        Self {
            rise,
            fall,
            degrade: rise,
            recover: rise,
        }
    }
}

impl Default for Thresholds {
    /// `rise: 2`, `fall: 3` (and `degrade`, `recover` 2): a single lost packet never flips a
    /// verdict.
    fn default() -> Self {
        let two = NonZeroU32::MIN.saturating_add(1);
        Self::new(two, two.saturating_add(1))
    }
}

/// When a target counts as flapping: more than `transitions` verdict changes within `window`.
///
/// A flapping target is held in PROBING (and reported as flapping) until its results have
/// pointed to the same verdict for `min_stable`, so an unstable target raises one signal instead
/// of a page per flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlapPolicy {
    /// The most verdict changes allowed within `window`.
    pub transitions: u32,
    /// The window the changes are counted in.
    pub window: Duration,
    /// How long the results must agree before a flapping target gets a verdict again.
    pub min_stable: Duration,
}

impl Default for FlapPolicy {
    /// More than 6 changes of verdict in 5 minutes is flapping (three confirmed outages, each
    /// UP → DOWN → UP); 2 stable minutes end it.
    fn default() -> Self {
        Self {
            transitions: 6,
            window: Duration::from_secs(300),
            min_stable: Duration::from_secs(120),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_validated() {
        let s = |i, t| {
            Schedule::try_new(ScheduleSettings {
                interval: i,
                timeout: t,
                jitter: 0.1,
                ..ScheduleSettings::default()
            })
        };
        let sec = Duration::from_secs;
        assert!(s(sec(5), sec(1)).is_ok());
        assert_eq!(
            s(sec(1), sec(1)),
            Err(ScheduleError::TimeoutNotBelowInterval {
                timeout: sec(1),
                interval: sec(1)
            })
        );
        assert_eq!(
            s(sec(1), sec(1)).unwrap_err().to_string(),
            "timeout (1s) must be less than interval (1s)"
        );
        assert_eq!(
            Schedule::try_new(ScheduleSettings {
                interval: sec(5),
                timeout: sec(1),
                jitter: 2.0,
                ..ScheduleSettings::default()
            }),
            Err(ScheduleError::JitterOutOfRange(2.0))
        );
        assert!(matches!(
            Schedule::try_new(ScheduleSettings {
                interval: sec(5),
                timeout: sec(1),
                jitter: 0.1,
                fast_interval: Some(sec(6)),
                ..ScheduleSettings::default()
            }),
            Err(ScheduleError::FastIntervalOutOfRange { .. })
        ));
        assert!(matches!(
            Schedule::try_new(ScheduleSettings {
                interval: sec(5),
                timeout: sec(1),
                jitter: 0.1,
                backoff_max: Some(sec(4)),
                ..ScheduleSettings::default()
            }),
            Err(ScheduleError::BackoffMaxBelowInterval { .. })
        ));
        assert_eq!(Schedule::default(), s(sec(5), sec(1)).unwrap());
    }
}
