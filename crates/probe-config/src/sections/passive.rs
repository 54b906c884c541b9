//! Passive health: what real calls decide. A target's `circuit_breaker` and
//! `skip_active_after`, and a group's `outlier` ejection, `recovery` and `slow_start`, which make
//! the group a pool of interchangeable members.
//!
//! ```yaml
//! defaults:                     # every block may be set here, for the file's targets or groups
//!   circuit_breaker:            # targets: fail calls fast while the recent ones fail
//!     failure_rate: 0.5         # opens at this failure rate, (0, 1]
//!     slow_call_duration: 2s    # a call that takes longer is slow
//!     slow_call_rate: 1.0       # opens at this slow-call rate, (0, 1]
//!     minimum_calls: 20         # calls the window must hold before it is judged, >= 1
//!     window: 60s               # judge the calls of the last 1s..1h (whole seconds), or
//!   # window_calls: 100         # the last N calls, 1..=100000 (not both); no default
//!     open_for: 60s             # first open time; doubles at each re-open from half-open...
//!     max_open_for: 10m         # ...up to this
//!     half_open_calls: 10       # trial calls in half-open, >= 1
//!     enabled: true             # `false` on a target: no breaker despite the defaults' block
//!   skip_active_after: 20       # targets: skip a probe run while UP after N passive successes
//!                               # and no passive failure since the previous run; >= 1; no
//!                               # default: unset, every run probes
//!   outlier:                    # groups: the group is a pool; its members (the targets it
//!                               # depends on) are ejected on their real calls' failures
//!     consecutive_5xx: 5        # failed calls in a row that eject a member; 0: rule off
//!     consecutive_gateway_failures: 3  # 502/503/504 and connection failures in a row; 0: off
//!     min_success_rate: 0.8     # success rate per interval under which a member is ejected,
//!                               # (0, 1]; 0: rule off
//!     interval: 10s             # how often the success rate is evaluated
//!     min_requests: 100         # calls in an interval for a member's success rate to count
//!     base_ejection: 30s        # the n-th ejection in a row lasts n x base_ejection...
//!     max_ejection: 300s        # ...up to this
//!     max_ejection_percent: 10  # the most members out at once, 1..=100 (at least one, never all)
//!     panic_threshold: 0.5      # under this fraction of members serving, nobody is ejected and
//!                               # traffic goes to all, [0, 1]; 0: never
//!     enabled: true             # `false` on a group: not a pool despite the defaults' block
//!   recovery:                   # pools: how an ejected member comes back
//!     cooldown: 30s             # left alone after its ejection time; doubles on a relapse...
//!     max_cooldown: 5m          # ...up to this
//!     passes: 3                 # consecutive passes on probation to return; 0: at cool-down end
//!     min_stable: 5m            # serving this long makes a returned member stable again
//!     permanent_after: 10       # the n-th ejection without a stable spell is permanent; 0: never
//!     give_up_after: 5m         # permanent when not back this long after its ejection time;
//!                               # 0s: never
//!   slow_start:                 # pools, on by default: a returning member's weight ramps up
//!     window: 60s               # over this...
//!     min_weight: 0.1           # ...from this, (0, 1]...
//!     aggression: 1.0           # ...along (elapsed / window)^(1 / aggression); 1: linear
//!     enabled: true             # `false`: members return at full weight
//! targets:
//!   - id: api-1
//!     http: { url: http://127.0.0.1:8081/health }
//!     circuit_breaker: { minimum_calls: 10 }   # merged key by key with the defaults' block
//!     skip_active_after: 50
//!   - id: api
//!     kind: group
//!     depends_on: [{ target: api-1 }, { target: api-2 }]
//!     outlier: { consecutive_5xx: 3 }          # makes the group a pool
//!     recovery: { passes: 2 }
//!     slow_start: { window: 30s }
//! ```
//!
//! The values shown under `defaults` are the built-in ones (those of [`probe::passive::breaker`],
//! [`probe::passive::outlier`], [`probe::passive::recovery`] and [`probe::passive::slow_start`]). A count of 0 that turns a
//! rule off (`consecutive_5xx`, `consecutive_gateway_failures`, `permanent_after`), like
//! `min_success_rate: 0` and `give_up_after: 0s`, is how to switch off a rule that is on by
//! default.
//!
//! **Which nodes get what.** A probed target has a circuit breaker when it or its file's
//! `defaults` has a `circuit_breaker` block; a group is a pool when it or the defaults has an
//! `outlier` block. Slow start is on for every pool. The nearest block's `enabled` decides: a
//! block on the target or group turns the feature on unless it says `enabled: false`, whatever the
//! defaults' block says, and without one there the defaults' block decides the same way. So
//! `circuit_breaker: { enabled: false }` opts one target out of the defaults' breaker, and
//! defaults with `enabled: false` hold settings that each target opts into with a block of its
//! own (`circuit_breaker: {}` takes them as they are).
//!
//! **Merging.** The other keys merge one by one: a key set on the target or group wins over the
//! same key in `defaults`, which wins over the built-in default. `window` and `window_calls` are
//! one setting: either one on the target replaces either one in the defaults.
//!
//! **Errors.** Each value is checked where it is written, with the library's rule and message;
//! the settings that must agree (`open_for` and `max_open_for`, a count window and
//! `minimum_calls`, `cooldown` and `give_up_after`...) are checked once merged, at the key that
//! was set. A block on the wrong kind of node is an error that says where it belongs, and so are
//! `recovery` and `slow_start` on a group that is not a pool. `defaults` apply to the file's
//! targets and groups only, never to etcd entries.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use probe::passive::PoolPolicy;
use probe::passive::breaker::{
    BreakerConfig, BreakerConfigError, MAX_COUNT_WINDOW, MAX_TIME_WINDOW, Window,
};
use probe::passive::outlier::{OutlierConfig, OutlierConfigError, OutlierSettings};
use probe::passive::recovery::{RecoveryConfig, RecoveryConfigError, RecoverySettings};
use probe::passive::slow_start::{SlowStartConfig, SlowStartConfigError};
use serde::Deserialize;

use super::schedule::{Slot, checked, count, duration};
use crate::yaml::node::{Diags, Pos, Sp};

// ---------------------------------------------------------------------------------------------
// Raw schema.

/// `circuit_breaker: {...}`.
#[derive(Deserialize)]
#[serde(rename = "circuit_breaker", deny_unknown_fields)]
pub(crate) struct RawBreaker {
    enabled: Option<Sp<bool>>,
    failure_rate: Option<Sp<f64>>,
    slow_call_duration: Option<Sp<String>>,
    slow_call_rate: Option<Sp<f64>>,
    minimum_calls: Option<Sp<u32>>,
    window: Option<Sp<String>>,
    window_calls: Option<Sp<u32>>,
    open_for: Option<Sp<String>>,
    max_open_for: Option<Sp<String>>,
    half_open_calls: Option<Sp<u32>>,
}

/// `outlier: {...}`.
#[derive(Deserialize)]
#[serde(rename = "outlier", deny_unknown_fields)]
pub(crate) struct RawOutlier {
    enabled: Option<Sp<bool>>,
    consecutive_5xx: Option<Sp<u32>>,
    consecutive_gateway_failures: Option<Sp<u32>>,
    min_success_rate: Option<Sp<f64>>,
    interval: Option<Sp<String>>,
    min_requests: Option<Sp<u32>>,
    base_ejection: Option<Sp<String>>,
    max_ejection: Option<Sp<String>>,
    max_ejection_percent: Option<Sp<u32>>,
    panic_threshold: Option<Sp<f64>>,
}

/// `recovery: {...}`. No `enabled`: a pool always has a recovery policy.
#[derive(Deserialize)]
#[serde(rename = "recovery", deny_unknown_fields)]
pub(crate) struct RawRecovery {
    cooldown: Option<Sp<String>>,
    max_cooldown: Option<Sp<String>>,
    passes: Option<Sp<u32>>,
    min_stable: Option<Sp<String>>,
    permanent_after: Option<Sp<u32>>,
    give_up_after: Option<Sp<String>>,
}

/// `slow_start: {...}`.
#[derive(Deserialize)]
#[serde(rename = "slow_start", deny_unknown_fields)]
pub(crate) struct RawSlowStart {
    enabled: Option<Sp<bool>>,
    window: Option<Sp<String>>,
    min_weight: Option<Sp<f64>>,
    aggression: Option<Sp<f64>>,
}

/// The passive-health keys of a section (`defaults`, a target or a group), borrowed.
#[derive(Clone, Copy, Default)]
pub(crate) struct RawPassive<'a> {
    pub circuit_breaker: Option<&'a Sp<RawBreaker>>,
    pub skip_active_after: Option<&'a Sp<u32>>,
    pub outlier: Option<&'a Sp<RawOutlier>>,
    pub recovery: Option<&'a Sp<RawRecovery>>,
    pub slow_start: Option<&'a Sp<RawSlowStart>>,
}

impl<'a> RawPassive<'a> {
    /// The keys a probed target may have.
    pub fn target_keys(self) -> Self {
        Self {
            circuit_breaker: self.circuit_breaker,
            skip_active_after: self.skip_active_after,
            ..Self::default()
        }
    }

    /// The keys a group may have.
    pub fn group_keys(self) -> Self {
        Self {
            outlier: self.outlier,
            recovery: self.recovery,
            slow_start: self.slow_start,
            ..Self::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation, field by field.

/// Defines a struct of validated [`Slot`]s with their key-by-key merge.
macro_rules! slots {
    ($(#[$attr:meta])* struct $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default)]
        struct $name {
            $($field: Slot<$ty>,)*
        }

        impl $name {
            /// These values, falling back to `defaults` key by key.
            fn or(self, defaults: &Self) -> Self {
                Self {
                    $($field: self.$field.or(defaults.$field),)*
                }
            }

            fn any_invalid(&self) -> bool {
                false $(|| self.$field.is_invalid())*
            }
        }
    };
}

slots! {
    /// `circuit_breaker`; `window` stands for `window` and `window_calls`.
    struct BreakerSlots {
        window: Window,
        failure_rate: f64,
        slow_call_duration: Duration,
        slow_call_rate: f64,
        minimum_calls: u32,
        open_for: Duration,
        max_open_for: Duration,
        half_open_calls: u32,
    }
}

slots! {
    /// `outlier`; `None` values turn a rule off.
    struct OutlierSlots {
        consecutive_5xx: Option<NonZeroU32>,
        consecutive_gateway_failures: Option<NonZeroU32>,
        min_success_rate: Option<f64>,
        interval: Duration,
        min_requests: u32,
        base_ejection: Duration,
        max_ejection: Duration,
        max_ejection_percent: u32,
        panic_threshold: f64,
    }
}

slots! {
    /// `recovery`; `None` values turn a limit off.
    struct RecoverySlots {
        cooldown: Duration,
        max_cooldown: Duration,
        passes: u32,
        min_stable: Duration,
        permanent_after: Option<NonZeroU32>,
        give_up_after: Option<Duration>,
    }
}

slots! {
    /// `slow_start`.
    struct SlowStartSlots {
        window: Duration,
        min_weight: f64,
        aggression: f64,
    }
}

/// One block of a section, validated field by field.
#[derive(Clone, Copy, Debug, Default)]
struct Block<T> {
    /// Where the block's key is; `None` when the section has no such block.
    key: Option<Pos>,
    /// Its `enabled`, when set.
    enabled: Option<bool>,
    fields: T,
}

impl<T> Block<T> {
    /// Whether the feature is on for a node with this block and the `defaults`' one: the nearest
    /// block decides, on unless it says `enabled: false`; `otherwise` when neither exists.
    fn on(&self, defaults: &Self, otherwise: bool) -> bool {
        match (self.key, defaults.key) {
            (Some(_), _) => self.enabled.unwrap_or(true),
            (None, Some(_)) => defaults.enabled.unwrap_or(true),
            (None, None) => otherwise,
        }
    }

    /// Where an error about the merged block points when no key of it is to blame.
    fn place(&self, defaults: &Self, fallback: Pos) -> Pos {
        self.key.or(defaults.key).unwrap_or(fallback)
    }
}

fn block<R, T>(
    raw: Option<&Sp<R>>,
    enabled: impl Fn(&R) -> Option<&Sp<bool>>,
    fields: impl FnOnce(&R, &mut Diags) -> T,
    diags: &mut Diags,
) -> Block<T>
where
    T: Default,
{
    match raw {
        None => Block::default(),
        Some(raw) => Block {
            key: Some(raw.key),
            enabled: enabled(&raw.value).map(|e| e.value),
            fields: fields(&raw.value, diags),
        },
    }
}

/// The passive-health settings of one section, each value checked on its own.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Passive {
    breaker: Block<BreakerSlots>,
    skip_active_after: Slot<NonZeroU32>,
    outlier: Block<OutlierSlots>,
    recovery: Block<RecoverySlots>,
    slow_start: Block<SlowStartSlots>,
}

/// A probed target's passive settings.
pub(crate) struct TargetPassive {
    pub circuit_breaker: Option<BreakerConfig>,
    pub skip_active_after: Option<NonZeroU32>,
}

impl Passive {
    /// Checks every value of `raw`, reporting each invalid one at its value.
    pub fn parse(raw: &RawPassive<'_>, diags: &mut Diags) -> Self {
        Self {
            breaker: block(raw.circuit_breaker, |r| r.enabled.as_ref(), breaker, diags),
            skip_active_after: count(raw.skip_active_after, "skip_active_after", diags),
            outlier: block(raw.outlier, |r| r.enabled.as_ref(), outlier, diags),
            recovery: block(raw.recovery, |_| None, recovery, diags),
            slow_start: block(raw.slow_start, |r| r.enabled.as_ref(), slow_start, diags),
        }
    }

    /// A probed target's breaker and `skip_active_after`, from its own settings (`self`) and its
    /// file's `defaults`. `None` when invalid (reported, at the key to blame or at `fallback`).
    pub fn target(
        &self,
        defaults: &Self,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<TargetPassive> {
        let skip_active_after = match self.skip_active_after.or(defaults.skip_active_after) {
            Slot::Invalid => None,
            slot => Some(slot.value()),
        };
        let circuit_breaker = self.breaker(defaults, fallback, diags);
        Some(TargetPassive {
            circuit_breaker: circuit_breaker?,
            skip_active_after: skip_active_after?,
        })
    }

    fn breaker(
        &self,
        defaults: &Self,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<Option<BreakerConfig>> {
        if !self.breaker.on(&defaults.breaker, false) {
            return Some(None);
        }
        let s = self.breaker.fields.or(&defaults.breaker.fields);
        if s.any_invalid() {
            return None;
        }
        let mut builder = BreakerConfig::builder();
        if let Some(window) = s.window.value() {
            builder = builder.window(window);
        }
        if let Some(rate) = s.failure_rate.value() {
            builder = builder.failure_rate_threshold(rate);
        }
        if let Some(slow) = s.slow_call_duration.value() {
            builder = builder.slow_call_duration(slow);
        }
        if let Some(rate) = s.slow_call_rate.value() {
            builder = builder.slow_call_rate_threshold(rate);
        }
        if let Some(calls) = s.minimum_calls.value() {
            builder = builder.minimum_calls(calls);
        }
        if let Some(open) = s.open_for.value() {
            builder = builder.open_for(open);
        }
        if let Some(max) = s.max_open_for.value() {
            builder = builder.max_open_for(max);
        }
        if let Some(calls) = s.half_open_calls.value() {
            builder = builder.half_open_calls(calls);
        }
        builder
            .build()
            .map_err(|e| {
                let key = match &e {
                    BreakerConfigError::TimeWindow(_)
                    | BreakerConfigError::CountWindowTooLarge(_) => s.window.key(),
                    BreakerConfigError::MinimumCallsAboveWindow { .. } => {
                        s.minimum_calls.key().or(s.window.key())
                    }
                    BreakerConfigError::FailureRateOutOfRange(_) => s.failure_rate.key(),
                    BreakerConfigError::SlowCallRateOutOfRange(_) => s.slow_call_rate.key(),
                    BreakerConfigError::ZeroSlowCallDuration => s.slow_call_duration.key(),
                    BreakerConfigError::ZeroMinimumCalls => s.minimum_calls.key(),
                    BreakerConfigError::ZeroOpenFor => s.open_for.key(),
                    BreakerConfigError::OpenForAboveMax { .. } => {
                        s.max_open_for.key().or(s.open_for.key())
                    }
                    BreakerConfigError::ZeroHalfOpenCalls => s.half_open_calls.key(),
                };
                let pos = key.unwrap_or(self.breaker.place(&defaults.breaker, fallback));
                diags.push((pos, e.to_string()));
            })
            .ok()
            .map(Some)
    }

    /// A group's pool policy, from its own settings (`self`) and its file's `defaults`: `Some(None)`
    /// when the group is not a pool, `None` when invalid (reported, at the key to blame or at
    /// `fallback`). `group` names the group in messages.
    pub fn pool(
        &self,
        defaults: &Self,
        group: &str,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<Option<PoolPolicy>> {
        if !self.outlier.on(&defaults.outlier, false) {
            let why = if self.outlier.key.is_some() {
                "its outlier block says enabled: false"
            } else if defaults.outlier.key.is_some() {
                "the defaults' outlier block says enabled: false"
            } else {
                "neither it nor the defaults have an outlier block"
            };
            let before = diags.len();
            for (name, key) in [
                ("recovery", self.recovery.key),
                ("slow_start", self.slow_start.key),
            ] {
                if let Some(key) = key {
                    diags.push((
                        key,
                        format!(
                            "{name} applies to pools only, and {group} is not one ({why}): a group \
                             is a pool when it or the defaults have an outlier block"
                        ),
                    ));
                }
            }
            return (diags.len() == before).then_some(None);
        }
        let o = self.outlier.fields.or(&defaults.outlier.fields);
        let r = self.recovery.fields.or(&defaults.recovery.fields);
        let s = self.slow_start.fields.or(&defaults.slow_start.fields);
        let slow_start_on = self.slow_start.on(&defaults.slow_start, true);
        if o.any_invalid() || r.any_invalid() || (slow_start_on && s.any_invalid()) {
            return None;
        }
        // Each is built, and reports its errors, before any failure counts.
        let outlier = self.outlier_config(&o, defaults, fallback, diags);
        let recovery = self.recovery_config(&r, defaults, fallback, diags);
        let slow_start = if slow_start_on {
            self.slow_start_config(&s, defaults, fallback, diags)
                .map(Some)
        } else {
            Some(None)
        };
        Some(Some(PoolPolicy {
            outlier: outlier?,
            recovery: recovery?,
            slow_start: slow_start?,
        }))
    }

    fn outlier_config(
        &self,
        o: &OutlierSlots,
        defaults: &Self,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<OutlierConfig> {
        let d = OutlierSettings::default();
        let settings = OutlierSettings {
            consecutive_5xx: o.consecutive_5xx.value().unwrap_or(d.consecutive_5xx),
            consecutive_gateway_failures: o
                .consecutive_gateway_failures
                .value()
                .unwrap_or(d.consecutive_gateway_failures),
            min_success_rate: o.min_success_rate.value().unwrap_or(d.min_success_rate),
            interval: o.interval.value().unwrap_or(d.interval),
            min_requests: o.min_requests.value().unwrap_or(d.min_requests),
            base_ejection: o.base_ejection.value().unwrap_or(d.base_ejection),
            max_ejection: o.max_ejection.value().unwrap_or(d.max_ejection),
            max_ejection_percent: o
                .max_ejection_percent
                .value()
                .unwrap_or(d.max_ejection_percent),
            panic_threshold: o.panic_threshold.value().unwrap_or(d.panic_threshold),
        };
        OutlierConfig::try_new(settings)
            .map_err(|e| {
                let key = match &e {
                    OutlierConfigError::ZeroInterval => o.interval.key(),
                    OutlierConfigError::SuccessRateOutOfRange(_) => o.min_success_rate.key(),
                    OutlierConfigError::ZeroMinRequests => o.min_requests.key(),
                    OutlierConfigError::ZeroBaseEjection => o.base_ejection.key(),
                    OutlierConfigError::MaxEjectionBelowBase { .. } => {
                        o.max_ejection.key().or(o.base_ejection.key())
                    }
                    OutlierConfigError::MaxEjectionPercentOutOfRange(_) => {
                        o.max_ejection_percent.key()
                    }
                    OutlierConfigError::PanicThresholdOutOfRange(_) => o.panic_threshold.key(),
                };
                let pos = key.unwrap_or(self.outlier.place(&defaults.outlier, fallback));
                diags.push((pos, e.to_string()));
            })
            .ok()
    }

    fn recovery_config(
        &self,
        r: &RecoverySlots,
        defaults: &Self,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<RecoveryConfig> {
        let d = RecoverySettings::default();
        let settings = RecoverySettings {
            cooldown: r.cooldown.value().unwrap_or(d.cooldown),
            max_cooldown: r.max_cooldown.value().unwrap_or(d.max_cooldown),
            passes: r.passes.value().unwrap_or(d.passes),
            min_stable: r.min_stable.value().unwrap_or(d.min_stable),
            permanent_after: r.permanent_after.value().unwrap_or(d.permanent_after),
            give_up_after: r.give_up_after.value().unwrap_or(d.give_up_after),
        };
        RecoveryConfig::try_new(settings)
            .map_err(|e| {
                let key = match &e {
                    RecoveryConfigError::ZeroCooldown => r.cooldown.key(),
                    RecoveryConfigError::MaxCooldownBelowCooldown { .. } => {
                        r.max_cooldown.key().or(r.cooldown.key())
                    }
                    RecoveryConfigError::GiveUpNotAboveCooldown { .. } => {
                        r.give_up_after.key().or(r.cooldown.key())
                    }
                };
                // Without a recovery block, the keys to blame are the outlier block's concern.
                let pos = key.unwrap_or(
                    self.recovery
                        .key
                        .or(defaults.recovery.key)
                        .unwrap_or(self.outlier.place(&defaults.outlier, fallback)),
                );
                diags.push((pos, e.to_string()));
            })
            .ok()
    }

    fn slow_start_config(
        &self,
        s: &SlowStartSlots,
        defaults: &Self,
        fallback: Pos,
        diags: &mut Diags,
    ) -> Option<SlowStartConfig> {
        let config = SlowStartConfig::try_new(
            s.window.value().unwrap_or(SlowStartConfig::DEFAULT_WINDOW),
            s.min_weight
                .value()
                .unwrap_or(SlowStartConfig::DEFAULT_MIN_WEIGHT),
            s.aggression
                .value()
                .unwrap_or(SlowStartConfig::DEFAULT_AGGRESSION),
        );
        config
            .map_err(|e| {
                let key = match &e {
                    SlowStartConfigError::ZeroWindow => s.window.key(),
                    SlowStartConfigError::MinWeightOutOfRange(_) => s.min_weight.key(),
                    SlowStartConfigError::AggressionOutOfRange(_) => s.aggression.key(),
                };
                let pos = key.unwrap_or(
                    self.slow_start
                        .key
                        .or(defaults.slow_start.key)
                        .unwrap_or(self.outlier.place(&defaults.outlier, fallback)),
                );
                diags.push((pos, e.to_string()));
            })
            .ok()
    }
}

/// Reports the group-only blocks set on a probed target (`label`: `target "id"`).
pub(crate) fn check_target_keys(raw: &RawPassive<'_>, label: &str, diags: &mut Diags) {
    let misplaced = [
        (
            raw.outlier.map(|b| b.key),
            "outlier judges a group's members against each other",
        ),
        (
            raw.recovery.map(|b| b.key),
            "recovery says how a pool's ejected members come back",
        ),
        (
            raw.slow_start.map(|b| b.key),
            "slow_start ramps a pool's returning members back up",
        ),
    ];
    for (key, what) in misplaced {
        if let Some(key) = key {
            diags.push((
                key,
                format!("{what}: set it on the group (kind: group), not on {label}"),
            ));
        }
    }
}

/// Why a target-only key `name` does not apply to a group, `None` for other keys.
pub(crate) fn target_only(name: &str) -> Option<&'static str> {
    match name {
        "circuit_breaker" => Some(
            "circuit_breaker judges the real calls to one target; set it on the targets the \
             group depends on (or in defaults), not on the group",
        ),
        "skip_active_after" => Some(
            "skip_active_after skips a target's probe runs, and a group has no probe; set it on \
             the targets the group depends on (or in defaults)",
        ),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// One value at a time, with the library's rules and messages.

/// A humantime duration (at most a day) accepted by `ok`; otherwise `message` is reported at the
/// value.
fn time(
    raw: Option<&Sp<String>>,
    name: &str,
    ok: impl Fn(Duration) -> bool,
    message: impl Fn(Duration) -> String,
    diags: &mut Diags,
) -> Slot<Duration> {
    match (duration(raw, name, false, diags), raw) {
        (Slot::Set { value, .. }, Some(raw)) if !ok(value) => {
            diags.push((raw.pos, message(value)));
            Slot::Invalid
        }
        (slot, _) => slot,
    }
}

/// A duration with no rule of its own.
fn any_time(raw: Option<&Sp<String>>, name: &str, diags: &mut Diags) -> Slot<Duration> {
    duration(raw, name, false, diags)
}

/// A count where 0 turns the rule off.
fn zero_is_off(raw: Option<&Sp<u32>>) -> Slot<Option<NonZeroU32>> {
    raw.map_or(Slot::Absent, |raw| Slot::Set {
        value: NonZeroU32::new(raw.value),
        key: raw.key,
    })
}

/// A number with no rule of its own.
fn any<T: Copy>(raw: Option<&Sp<T>>) -> Slot<T> {
    raw.map_or(Slot::Absent, |raw| Slot::Set {
        value: raw.value,
        key: raw.key,
    })
}

/// A rate in `(0, 1]`; NaN is not one.
fn unit_rate(rate: f64) -> bool {
    rate > 0.0 && rate <= 1.0
}

fn breaker(raw: &RawBreaker, diags: &mut Diags) -> BreakerSlots {
    let time_window = time(
        raw.window.as_ref(),
        "circuit_breaker.window",
        |d| d.subsec_nanos() == 0 && !d.is_zero() && d <= MAX_TIME_WINDOW,
        |d| BreakerConfigError::TimeWindow(d).to_string(),
        diags,
    );
    let count_window = raw.window_calls.as_ref().map_or(Slot::Absent, |calls| {
        let n = usize::try_from(calls.value).unwrap_or(usize::MAX);
        match NonZeroUsize::new(n) {
            None => {
                diags.push((
                    calls.pos,
                    "circuit_breaker.window_calls must be at least 1".to_owned(),
                ));
                Slot::Invalid
            }
            Some(_) if n > MAX_COUNT_WINDOW => {
                diags.push((
                    calls.pos,
                    BreakerConfigError::CountWindowTooLarge(n).to_string(),
                ));
                Slot::Invalid
            }
            Some(n) => Slot::Set {
                value: Window::Count(n),
                key: calls.key,
            },
        }
    });
    let window = match (&raw.window, &raw.window_calls) {
        (Some(time), Some(calls)) => {
            diags.push((
                time.key.max(calls.key),
                r#""window" and "window_calls" are mutually exclusive: keep only one"#.to_owned(),
            ));
            Slot::Invalid
        }
        (Some(_), None) => time_window.map(Window::Time),
        _ => count_window,
    };
    BreakerSlots {
        window,
        failure_rate: checked(
            raw.failure_rate.as_ref(),
            unit_rate,
            |r| BreakerConfigError::FailureRateOutOfRange(r).to_string(),
            diags,
        ),
        slow_call_duration: time(
            raw.slow_call_duration.as_ref(),
            "circuit_breaker.slow_call_duration",
            |d| !d.is_zero(),
            |_| BreakerConfigError::ZeroSlowCallDuration.to_string(),
            diags,
        ),
        slow_call_rate: checked(
            raw.slow_call_rate.as_ref(),
            unit_rate,
            |r| BreakerConfigError::SlowCallRateOutOfRange(r).to_string(),
            diags,
        ),
        minimum_calls: checked(
            raw.minimum_calls.as_ref(),
            |n| n > 0,
            |_| BreakerConfigError::ZeroMinimumCalls.to_string(),
            diags,
        ),
        open_for: time(
            raw.open_for.as_ref(),
            "circuit_breaker.open_for",
            |d| !d.is_zero(),
            |_| BreakerConfigError::ZeroOpenFor.to_string(),
            diags,
        ),
        max_open_for: any_time(
            raw.max_open_for.as_ref(),
            "circuit_breaker.max_open_for",
            diags,
        ),
        half_open_calls: checked(
            raw.half_open_calls.as_ref(),
            |n| n > 0,
            |_| BreakerConfigError::ZeroHalfOpenCalls.to_string(),
            diags,
        ),
    }
}

fn outlier(raw: &RawOutlier, diags: &mut Diags) -> OutlierSlots {
    let min_success_rate = checked(
        raw.min_success_rate.as_ref(),
        |r| r == 0.0 || unit_rate(r),
        |r| OutlierConfigError::SuccessRateOutOfRange(r).to_string(),
        diags,
    );
    OutlierSlots {
        consecutive_5xx: zero_is_off(raw.consecutive_5xx.as_ref()),
        consecutive_gateway_failures: zero_is_off(raw.consecutive_gateway_failures.as_ref()),
        min_success_rate: min_success_rate.map(|rate| (rate != 0.0).then_some(rate)),
        interval: time(
            raw.interval.as_ref(),
            "outlier.interval",
            |d| !d.is_zero(),
            |_| OutlierConfigError::ZeroInterval.to_string(),
            diags,
        ),
        min_requests: checked(
            raw.min_requests.as_ref(),
            |n| n > 0,
            |_| OutlierConfigError::ZeroMinRequests.to_string(),
            diags,
        ),
        base_ejection: time(
            raw.base_ejection.as_ref(),
            "outlier.base_ejection",
            |d| !d.is_zero(),
            |_| OutlierConfigError::ZeroBaseEjection.to_string(),
            diags,
        ),
        max_ejection: any_time(raw.max_ejection.as_ref(), "outlier.max_ejection", diags),
        max_ejection_percent: checked(
            raw.max_ejection_percent.as_ref(),
            |p| (1..=100).contains(&p),
            |p| OutlierConfigError::MaxEjectionPercentOutOfRange(p).to_string(),
            diags,
        ),
        panic_threshold: checked(
            raw.panic_threshold.as_ref(),
            |t| (0.0..=1.0).contains(&t),
            |t| OutlierConfigError::PanicThresholdOutOfRange(t).to_string(),
            diags,
        ),
    }
}

fn recovery(raw: &RawRecovery, diags: &mut Diags) -> RecoverySlots {
    let give_up_after = any_time(raw.give_up_after.as_ref(), "recovery.give_up_after", diags);
    RecoverySlots {
        cooldown: time(
            raw.cooldown.as_ref(),
            "recovery.cooldown",
            |d| !d.is_zero(),
            |_| RecoveryConfigError::ZeroCooldown.to_string(),
            diags,
        ),
        max_cooldown: any_time(raw.max_cooldown.as_ref(), "recovery.max_cooldown", diags),
        passes: any(raw.passes.as_ref()),
        min_stable: any_time(raw.min_stable.as_ref(), "recovery.min_stable", diags),
        permanent_after: zero_is_off(raw.permanent_after.as_ref()),
        give_up_after: give_up_after.map(|after| (!after.is_zero()).then_some(after)),
    }
}

fn slow_start(raw: &RawSlowStart, diags: &mut Diags) -> SlowStartSlots {
    SlowStartSlots {
        window: time(
            raw.window.as_ref(),
            "slow_start.window",
            |d| !d.is_zero(),
            |_| SlowStartConfigError::ZeroWindow.to_string(),
            diags,
        ),
        min_weight: checked(
            raw.min_weight.as_ref(),
            unit_rate,
            |w| SlowStartConfigError::MinWeightOutOfRange(w).to_string(),
            diags,
        ),
        aggression: checked(
            raw.aggression.as_ref(),
            |a| a.is_finite() && a > 0.0,
            |a| SlowStartConfigError::AggressionOutOfRange(a).to_string(),
            diags,
        ),
    }
}
