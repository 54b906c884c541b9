//! The schedule and thresholds a target runs with, and how its keys merge with the file's
//! `defaults`: `interval`, `timeout`, `rise`, `fall`, `jitter`, `fast_interval`, `backoff`,
//! `degrade_after`, `recover_after`, `flap` and `dns_stale_for`.
//!
//! Each key is validated where it is written into a [`Slot`] that remembers where it was set, so
//! that merging is a field-by-field fallback (target, then defaults, then the built-in value) and
//! a cross-field error (a timeout not below the interval) points at the key that was set, on the
//! target or in `defaults`. The value checks (durations, counts, fractions) are shared by the
//! other sections, which merge the same way.

use std::num::NonZeroU32;
use std::time::Duration;

use probe::health::{
    BackoffError, FlapPolicy, Schedule, ScheduleError, ScheduleSettings, Thresholds,
};
use probe::topology::TargetSpec;
use serde::Deserialize;

use crate::yaml::diagnostics::quote;
use crate::yaml::node::{BoolOr, Diags, Pos, Sp};

/// The longest accepted duration. It keeps derived durations (`4 * interval`) far from overflow,
/// and no health check needs to wait longer.
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// `backoff: {...}`: the period while DOWN.
#[derive(Deserialize)]
#[serde(rename = "backoff", deny_unknown_fields)]
pub(crate) struct RawBackoff {
    max: Option<Sp<String>>,
    jitter: Option<Sp<f64>>,
}

/// `flap: {...}`; `flap: false` is the other side of the [`BoolOr`].
#[derive(Deserialize)]
#[serde(rename = "flap", deny_unknown_fields)]
pub(crate) struct RawFlap {
    transitions: Option<Sp<u32>>,
    window: Option<Sp<String>>,
    min_stable: Option<Sp<String>>,
}

/// The schedule fields of a section, borrowed.
pub(crate) struct RawSchedule<'a> {
    pub(crate) interval: Option<&'a Sp<String>>,
    pub(crate) timeout: Option<&'a Sp<String>>,
    pub(crate) rise: Option<&'a Sp<u32>>,
    pub(crate) fall: Option<&'a Sp<u32>>,
    pub(crate) jitter: Option<&'a Sp<f64>>,
    pub(crate) fast_interval: Option<&'a Sp<String>>,
    pub(crate) backoff: Option<&'a Sp<RawBackoff>>,
    pub(crate) degrade_after: Option<&'a Sp<u32>>,
    pub(crate) recover_after: Option<&'a Sp<u32>>,
    pub(crate) flap: Option<&'a Sp<BoolOr<RawFlap>>>,
    pub(crate) dns_stale_for: Option<&'a Sp<String>>,
}

/// One field after validation: of a schedule, or of another section that merges with `defaults`
/// the same way (passive health) or needs to know what was set (topology).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Slot<T> {
    /// Not set here.
    #[default]
    Absent,
    /// Set but invalid; already reported.
    Invalid,
    /// Set and valid; `key` is where it was set, for errors that involve it.
    Set { value: T, key: Pos },
}

impl<T: Copy> Slot<T> {
    pub(crate) fn or(self, fallback: Self) -> Self {
        match self {
            Slot::Absent => fallback,
            set_or_invalid => set_or_invalid,
        }
    }
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Slot<U> {
        match self {
            Slot::Absent => Slot::Absent,
            Slot::Invalid => Slot::Invalid,
            Slot::Set { value, key } => Slot::Set {
                value: f(value),
                key,
            },
        }
    }
    pub(crate) fn value(self) -> Option<T> {
        match self {
            Slot::Set { value, .. } => Some(value),
            _ => None,
        }
    }
    pub(crate) fn key(self) -> Option<Pos> {
        match self {
            Slot::Set { key, .. } => Some(key),
            _ => None,
        }
    }
    pub(crate) fn is_invalid(self) -> bool {
        matches!(self, Slot::Invalid)
    }
}

/// The schedule and thresholds of a section, validated field by field.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sched {
    interval: Slot<Duration>,
    timeout: Slot<Duration>,
    rise: Slot<NonZeroU32>,
    fall: Slot<NonZeroU32>,
    jitter: Slot<f64>,
    fast_interval: Slot<Duration>,
    backoff_max: Slot<Duration>,
    backoff_jitter: Slot<f64>,
    /// Where the `backoff` key is, for backoff errors whose own field is absent.
    backoff: Option<Pos>,
    degrade: Slot<NonZeroU32>,
    recover: Slot<NonZeroU32>,
    /// `Set { value: None }` for `flap: false`.
    flap: Slot<Option<FlapPolicy>>,
    /// Zero turns stale DNS answers off.
    dns_stale_for: Slot<Duration>,
}

impl Sched {
    pub(crate) fn parse(raw: &RawSchedule<'_>, diags: &mut Diags) -> Self {
        let backoff = raw.backoff.map(|b| &b.value);
        Self {
            interval: duration(raw.interval, "interval", true, diags),
            timeout: duration(raw.timeout, "timeout", true, diags),
            rise: count(raw.rise, "rise", diags),
            fall: count(raw.fall, "fall", diags),
            jitter: fraction(raw.jitter, diags, |j| {
                ScheduleError::JitterOutOfRange(j).to_string()
            }),
            fast_interval: duration(raw.fast_interval, "fast_interval", false, diags),
            backoff_max: duration(
                backoff.and_then(|b| b.max.as_ref()),
                "backoff.max",
                false,
                diags,
            ),
            backoff_jitter: fraction(backoff.and_then(|b| b.jitter.as_ref()), diags, |j| {
                BackoffError::JitterOutOfRange(j).to_string()
            }),
            backoff: raw.backoff.map(|b| b.key),
            degrade: count(raw.degrade_after, "degrade_after", diags),
            recover: count(raw.recover_after, "recover_after", diags),
            flap: flap(raw.flap, diags),
            dns_stale_for: duration(raw.dns_stale_for, "dns_stale_for", false, diags),
        }
    }

    /// This section's values, falling back to `defaults` field by field.
    pub(crate) fn or(self, defaults: &Self) -> Self {
        Self {
            interval: self.interval.or(defaults.interval),
            timeout: self.timeout.or(defaults.timeout),
            rise: self.rise.or(defaults.rise),
            fall: self.fall.or(defaults.fall),
            jitter: self.jitter.or(defaults.jitter),
            fast_interval: self.fast_interval.or(defaults.fast_interval),
            backoff_max: self.backoff_max.or(defaults.backoff_max),
            backoff_jitter: self.backoff_jitter.or(defaults.backoff_jitter),
            backoff: self.backoff.or(defaults.backoff),
            degrade: self.degrade.or(defaults.degrade),
            recover: self.recover.or(defaults.recover),
            flap: self.flap.or(defaults.flap),
            dns_stale_for: self.dns_stale_for.or(defaults.dns_stale_for),
        }
    }

    fn any_invalid(&self) -> bool {
        self.interval.is_invalid()
            || self.timeout.is_invalid()
            || self.rise.is_invalid()
            || self.fall.is_invalid()
            || self.jitter.is_invalid()
            || self.fast_interval.is_invalid()
            || self.backoff_max.is_invalid()
            || self.backoff_jitter.is_invalid()
            || self.degrade.is_invalid()
            || self.recover.is_invalid()
            || self.flap.is_invalid()
            || self.dns_stale_for.is_invalid()
    }

    /// Builds the schedule, thresholds and flap policy, reporting a cross-field error at the key
    /// that was set (on the target, or in `defaults` when it came from there), or at `fallback`.
    pub(crate) fn build(&self, fallback: Pos, diags: &mut Diags) -> Option<Health> {
        if self.any_invalid() {
            return None;
        }
        let schedule = Schedule::try_new(ScheduleSettings {
            interval: self.interval.value().unwrap_or(Schedule::DEFAULT_INTERVAL),
            timeout: self.timeout.value().unwrap_or(Schedule::DEFAULT_TIMEOUT),
            jitter: self.jitter.value().unwrap_or(Schedule::DEFAULT_JITTER),
            fast_interval: self.fast_interval.value(),
            backoff_max: self.backoff_max.value(),
            backoff_jitter: self.backoff_jitter.value(),
        });
        let schedule = match schedule {
            Ok(schedule) => schedule,
            Err(e) => {
                let interval = self.interval.key();
                let pos = match &e {
                    ScheduleError::ZeroInterval | ScheduleError::Backoff(BackoffError::ZeroMin) => {
                        interval
                    }
                    ScheduleError::ZeroTimeout | ScheduleError::TimeoutNotBelowInterval { .. } => {
                        self.timeout.key().or(interval)
                    }
                    ScheduleError::JitterOutOfRange(_) => self.jitter.key(),
                    ScheduleError::FastIntervalOutOfRange { .. } => {
                        self.fast_interval.key().or(interval)
                    }
                    ScheduleError::BackoffMaxBelowInterval { .. }
                    | ScheduleError::Backoff(BackoffError::MinAboveMax { .. }) => {
                        self.backoff_max.key().or(self.backoff).or(interval)
                    }
                    ScheduleError::Backoff(BackoffError::JitterOutOfRange(_)) => {
                        self.backoff_jitter.key().or(self.backoff)
                    }
                };
                diags.push((pos.unwrap_or(fallback), e.to_string()));
                return None;
            }
        };
        let default = Thresholds::default();
        let rise = self.rise.value().unwrap_or(default.rise);
        let thresholds = Thresholds {
            degrade: self.degrade.value().unwrap_or(rise),
            recover: self.recover.value().unwrap_or(rise),
            ..Thresholds::new(rise, self.fall.value().unwrap_or(default.fall))
        };
        Some(Health {
            schedule,
            thresholds,
            flap: self.flap.value().unwrap_or(Some(FlapPolicy::default())),
            dns_stale_for: self
                .dns_stale_for
                .value()
                .unwrap_or(TargetSpec::DEFAULT_DNS_STALE_FOR),
        })
    }
}

/// A target's timing and verdict rules, from its section and the defaults.
pub(crate) struct Health {
    pub(crate) schedule: Schedule,
    pub(crate) thresholds: Thresholds,
    pub(crate) flap: Option<FlapPolicy>,
    pub(crate) dns_stale_for: Duration,
}

/// `flap: false`, `flap: true` (the built-in policy) or `flap: {...}` (built-in values for the
/// fields left out).
pub(crate) fn flap(
    raw: Option<&Sp<BoolOr<RawFlap>>>,
    diags: &mut Diags,
) -> Slot<Option<FlapPolicy>> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    let value = match &raw.value {
        BoolOr::Bool(false) => None,
        BoolOr::Bool(true) => Some(FlapPolicy::default()),
        BoolOr::Value(f) => {
            let default = FlapPolicy::default();
            let transitions = match &f.transitions {
                Some(t) if t.value == 0 => {
                    diags.push((t.pos, "flap.transitions must be at least 1".to_owned()));
                    None
                }
                Some(t) => Some(t.value),
                None => Some(default.transitions),
            };
            let window = duration(f.window.as_ref(), "flap.window", true, diags);
            let min_stable = duration(f.min_stable.as_ref(), "flap.min_stable", true, diags);
            if window.is_invalid() || min_stable.is_invalid() {
                return Slot::Invalid;
            }
            Some(FlapPolicy {
                transitions: match transitions {
                    Some(t) => t,
                    None => return Slot::Invalid,
                },
                window: window.value().unwrap_or(default.window),
                min_stable: min_stable.value().unwrap_or(default.min_stable),
            })
        }
    };
    Slot::Set {
        value,
        key: raw.key,
    }
}

pub(crate) fn duration(
    raw: Option<&Sp<String>>,
    name: &str,
    positive: bool,
    diags: &mut Diags,
) -> Slot<Duration> {
    duration_at_most(raw, name, positive, MAX_DURATION, diags)
}

pub(crate) fn duration_at_most(
    raw: Option<&Sp<String>>,
    name: &str,
    positive: bool,
    max: Duration,
    diags: &mut Diags,
) -> Slot<Duration> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    match humantime::parse_duration(raw.value.trim()) {
        Err(e) => diags.push((
            raw.pos,
            format!("invalid duration {} for {name:?}: {e}", quote(&raw.value)),
        )),
        Ok(d) if d > max => diags.push((
            raw.pos,
            format!(
                "{name} must be at most {}, got {}",
                humantime::format_duration(max),
                quote(&raw.value)
            ),
        )),
        Ok(d) if positive && d.is_zero() => {
            diags.push((raw.pos, format!("{name} must be greater than zero")));
        }
        Ok(value) => {
            return Slot::Set {
                value,
                key: raw.key,
            };
        }
    }
    Slot::Invalid
}

pub(crate) fn count(raw: Option<&Sp<u32>>, name: &str, diags: &mut Diags) -> Slot<NonZeroU32> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    match NonZeroU32::new(raw.value) {
        Some(value) => Slot::Set {
            value,
            key: raw.key,
        },
        None => {
            diags.push((raw.pos, format!("{name} must be at least 1")));
            Slot::Invalid
        }
    }
}

pub(crate) fn fraction(
    raw: Option<&Sp<f64>>,
    diags: &mut Diags,
    message: fn(f64) -> String,
) -> Slot<f64> {
    checked(raw, |v| (0.0..=1.0).contains(&v), message, diags)
}

/// A located number accepted by `ok`; otherwise `message` is reported at the value.
pub(crate) fn checked<T: Copy>(
    raw: Option<&Sp<T>>,
    ok: impl Fn(T) -> bool,
    message: impl Fn(T) -> String,
    diags: &mut Diags,
) -> Slot<T> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    if ok(raw.value) {
        Slot::Set {
            value: raw.value,
            key: raw.key,
        }
    } else {
        diags.push((raw.pos, message(raw.value)));
        Slot::Invalid
    }
}
