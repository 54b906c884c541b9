//! Recovery: how an ejected member earns its way back into its pool, and when it stops trying.
//!
//! An ejection (see [`outlier`](crate::passive::outlier)) takes a member out for a while; what happens
//! next is this module's one machine, [`Recovery`], kept per member:
//!
//! ```text
//! serving --eject--> ejected --time--> cooling_down --cool-down--> probation --passes--> serving
//!                                          ^                            |
//!                                          +------- failed check -------+
//! the permanent_after-th ejection, or not back give_up_after after its ejection time: permanent
//! permanent --operator clear--> serving
//! ```
//!
//! - **Cool-down** (default 30 s) follows the ejection time: the member is left alone, with no
//!   checks counted, because a member that just failed rarely recovers in seconds and checking
//!   it at once only invites a flap.
//! - **Probation**: then it needs `passes` consecutive passes (default 3), from active probes or
//!   from its own calls, to return. One failure sends it back to cool down, for twice as long.
//! - **Flapping**: a member ejected again within `min_stable` (default 5 min) of returning was not
//!   really well: its next cool-down doubles too (up to `max_cooldown`) and its ejection count
//!   keeps growing. A member that has served for `min_stable` is *stable*: its count and its
//!   cool-down start over. This is the source documents' "minimum stable running time" that ended
//!   a disk-IO member's eject-return-eject cycle.
//! - **Permanent ejection** after `permanent_after` ejections without a stable spell (default 10)
//!   or when a member is still not back `give_up_after` (default 5 min) after its ejection ended.
//!   It then stays out, whatever its checks say, until an operator clears it: a member that keeps
//!   failing needs a person, and an alert, more than another automatic retry.
//!
//! The machine only decides and reports each step once, as a [`RecoveryEvent`]; it keeps no clock
//! of its own, so every method takes `now`.
//!
//! The settings are a contract for the YAML configuration:
//! `recovery: { cooldown: 30s, passes: 3, min_stable: 5m, permanent_after: 10, max_cooldown: 5m,
//! give_up_after: 5m }`.

use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

/// The raw recovery settings, before validation. [`Default`] gives the documented defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoverySettings {
    /// How long a member is left alone after its ejection time, before probation.
    pub cooldown: Duration,
    /// The cap of the doubling cool-down.
    pub max_cooldown: Duration,
    /// Consecutive passes needed on probation to return; 0 returns the member as soon as its
    /// cool-down ends (for pools with neither active probes nor traffic to out-of-pool members,
    /// where no pass could ever arrive).
    pub passes: u32,
    /// How long a returned member must serve before it counts as stable again; a zero
    /// `min_stable` makes every return stable (no doubling, no count towards `permanent_after`).
    pub min_stable: Duration,
    /// The ejection (counted since the last stable spell) that is permanent; `None`: never.
    pub permanent_after: Option<NonZeroU32>,
    /// How long a member may take to come back once its ejection time ended before it is
    /// ejected permanently; `None`: no limit.
    pub give_up_after: Option<Duration>,
}

impl Default for RecoverySettings {
    /// - `cooldown`: 30 s;
    /// - `max_cooldown`: 5 min (30 s doubled four times is 8 min, so the cap bites at the fifth
    ///   cool-down in a row);
    /// - `passes`: 3;
    /// - `min_stable`: 5 min;
    /// - `permanent_after`: 10 ejections;
    /// - `give_up_after`: 5 min.
    fn default() -> Self {
        Self {
            cooldown: Duration::from_secs(30),
            max_cooldown: Duration::from_secs(300),
            passes: 3,
            min_stable: Duration::from_secs(300),
            permanent_after: NonZeroU32::new(10),
            give_up_after: Some(Duration::from_secs(300)),
        }
    }
}

/// Why a [`RecoveryConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryConfigError {
    /// A zero cool-down would double to zero forever.
    #[error("recovery cooldown must be greater than zero")]
    ZeroCooldown,
    /// The cap must be at least the first cool-down.
    #[error("recovery max_cooldown ({max:?}) is below cooldown ({cooldown:?})")]
    MaxCooldownBelowCooldown {
        /// The requested cool-down.
        cooldown: Duration,
        /// The requested cap.
        max: Duration,
    },
    /// Every member would be given up before its first cool-down even ended.
    #[error("recovery give_up_after ({give_up_after:?}) is not above cooldown ({cooldown:?})")]
    GiveUpNotAboveCooldown {
        /// The requested cool-down.
        cooldown: Duration,
        /// The requested limit.
        give_up_after: Duration,
    },
}

/// Validated recovery settings; the default is [`RecoverySettings::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryConfig {
    settings: RecoverySettings,
}

impl RecoveryConfig {
    /// Validates `settings` (see [`RecoverySettings::default`] for the defaults).
    ///
    /// # Errors
    /// The first rule broken:
    /// - [`RecoveryConfigError::ZeroCooldown`] when `cooldown` is zero;
    /// - [`RecoveryConfigError::MaxCooldownBelowCooldown`] when `max_cooldown < cooldown`;
    /// - [`RecoveryConfigError::GiveUpNotAboveCooldown`] when `give_up_after` is set and not
    ///   above `cooldown`.
    pub fn try_new(settings: RecoverySettings) -> Result<Self, RecoveryConfigError> {
        let RecoverySettings {
            cooldown,
            max_cooldown,
            give_up_after,
            ..
        } = settings;
        if cooldown.is_zero() {
            return Err(RecoveryConfigError::ZeroCooldown);
        }
        if max_cooldown < cooldown {
            return Err(RecoveryConfigError::MaxCooldownBelowCooldown {
                cooldown,
                max: max_cooldown,
            });
        }
        if let Some(give_up_after) = give_up_after
            && give_up_after <= cooldown
        {
            return Err(RecoveryConfigError::GiveUpNotAboveCooldown {
                cooldown,
                give_up_after,
            });
        }
        Ok(Self { settings })
    }

    /// The validated settings.
    pub fn settings(&self) -> &RecoverySettings {
        &self.settings
    }
}

/// Why a member was ejected permanently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermanentCause {
    /// It was ejected this many times without a stable spell in between.
    Ejections(u32),
    /// It was still not back `give_up_after` after its ejection time ended.
    Unrecovered,
}

impl PermanentCause {
    /// The snake-case name used in events, logs and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ejections(_) => "ejections",
            Self::Unrecovered => "unrecovered",
        }
    }
}

/// Where a member is in its ejection and recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecoveryPhase {
    /// In the pool.
    Serving,
    /// Out for its ejection time, until `until`.
    Ejected {
        /// When the ejection time ends.
        until: Instant,
    },
    /// Out and left alone until `until`.
    CoolingDown {
        /// When the cool-down ends.
        until: Instant,
    },
    /// Out, with `passes` consecutive passes so far.
    Probation {
        /// Consecutive passes counted so far.
        passes: u32,
    },
    /// Out until an operator clears it.
    Permanent(PermanentCause),
}

impl RecoveryPhase {
    /// The snake-case name used in the API and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Serving => "serving",
            Self::Ejected { .. } => "ejected",
            Self::CoolingDown { .. } => "cooling_down",
            Self::Probation { .. } => "probation",
            Self::Permanent(_) => "permanent",
        }
    }

    /// Whether the member is out of its pool (every phase but [`RecoveryPhase::Serving`]).
    pub const fn is_out(self) -> bool {
        !matches!(self, Self::Serving)
    }
}

/// One step of a member's recovery, reported once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryEvent {
    /// The ejection time ended; left alone until `until`.
    CoolingDown {
        /// When the cool-down ends.
        until: Instant,
    },
    /// The cool-down ended; consecutive passes are now counted.
    Probation,
    /// A failure on probation: back to cooling down, for `cooldown` (twice the last one, capped),
    /// until `until`.
    Relapsed {
        /// When the new cool-down ends.
        until: Instant,
        /// Its length.
        cooldown: Duration,
    },
    /// Back in the pool since `at`.
    Returned {
        /// When it returned (the end of its cool-down when no passes are required).
        at: Instant,
    },
    /// Out until an operator clears it.
    Permanent(PermanentCause),
}

impl RecoveryEvent {
    /// The snake-case name used in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CoolingDown { .. } => "cooling_down",
            Self::Probation => "probation",
            Self::Relapsed { .. } => "relapsed",
            Self::Returned { .. } => "returned",
            Self::Permanent(_) => "permanent",
        }
    }
}

/// The result of [`Recovery::eject`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EjectionTerm {
    /// Ejections counted since the member was last stable, this one included.
    pub times_ejected: u32,
    /// When the ejection time ends; `None` when this ejection is permanent.
    pub until: Option<Instant>,
}

/// One member's ejection and recovery state, with the memory that spans ejections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    phase: RecoveryPhase,
    /// Ejections since the member was last stable: drives the ejection time and
    /// `permanent_after`.
    times_ejected: u32,
    /// The length of the latest cool-down; zero once the member is stable, so that the next one
    /// starts from the base again.
    cooldown: Duration,
    /// When the latest ejection time ended: the start of the `give_up_after` clock.
    recovering_since: Option<Instant>,
    /// When the member last came back; `None` when it never left or has been stable since.
    returned_at: Option<Instant>,
}

impl Default for Recovery {
    fn default() -> Self {
        Self::new()
    }
}

impl Recovery {
    /// A serving member with no history.
    pub const fn new() -> Self {
        Self {
            phase: RecoveryPhase::Serving,
            times_ejected: 0,
            cooldown: Duration::ZERO,
            recovering_since: None,
            returned_at: None,
        }
    }

    /// The current phase.
    pub fn phase(&self) -> RecoveryPhase {
        self.phase
    }

    /// Whether the member is out of its pool.
    pub fn is_out(&self) -> bool {
        self.phase.is_out()
    }

    /// Ejections since the member was last stable.
    pub fn times_ejected(&self) -> u32 {
        self.times_ejected
    }

    /// The length of the current (or latest) cool-down; zero when there is none since the member
    /// was last stable.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// When the member last came back, while it is not yet stable.
    pub fn returned_at(&self) -> Option<Instant> {
        self.returned_at
    }

    /// Forgets the ejection history of a member that has served for `min_stable` since it came
    /// back. Called before each ejection; callers may also call it periodically so that the
    /// reported count is current.
    pub fn settle(&mut self, config: &RecoveryConfig, now: Instant) {
        if self.phase != RecoveryPhase::Serving {
            return;
        }
        let stable = self.returned_at.is_none_or(|returned| {
            now.saturating_duration_since(returned) >= config.settings.min_stable
        });
        if stable {
            self.times_ejected = 0;
            self.cooldown = Duration::ZERO;
            self.returned_at = None;
        }
    }

    /// Takes a serving member out at `now`.
    ///
    /// `ejection_time` maps the ejection count (from 1) to the time out, e.g. the outlier rule's
    /// `base x n`, capped. The cool-down that will follow is the base after a stable spell, and
    /// twice the last one when the member was ejected again before it became stable. The
    /// `permanent_after`-th ejection is permanent.
    ///
    /// Returns `None`, changing nothing, when the member is not serving.
    pub fn eject(
        &mut self,
        config: &RecoveryConfig,
        now: Instant,
        ejection_time: impl FnOnce(u32) -> Duration,
    ) -> Option<EjectionTerm> {
        if self.phase != RecoveryPhase::Serving {
            return None;
        }
        self.settle(config, now);
        self.times_ejected = self.times_ejected.saturating_add(1);
        self.cooldown = self.next_cooldown(config);
        self.recovering_since = None;
        self.returned_at = None;
        let settings = &config.settings;
        if settings
            .permanent_after
            .is_some_and(|limit| self.times_ejected >= limit.get())
        {
            self.phase = RecoveryPhase::Permanent(PermanentCause::Ejections(self.times_ejected));
            return Some(EjectionTerm {
                times_ejected: self.times_ejected,
                until: None,
            });
        }
        let until = after(now, ejection_time(self.times_ejected));
        self.phase = RecoveryPhase::Ejected { until };
        Some(EjectionTerm {
            times_ejected: self.times_ejected,
            until: Some(until),
        })
    }

    /// Makes the one time-driven step due at `now`, if any: the ejection time or the cool-down
    /// ending, or the member being given up. Call it until it returns `None` to catch up after
    /// a gap; each call moves at most one step, in the order the steps were due.
    pub fn advance(&mut self, config: &RecoveryConfig, now: Instant) -> Option<RecoveryEvent> {
        let settings = &config.settings;
        let deadline = self
            .recovering_since
            .zip(settings.give_up_after)
            .map(|(since, limit)| after(since, limit));
        match self.phase {
            RecoveryPhase::Ejected { until } if now >= until => {
                let cooled = after(until, self.cooldown);
                self.recovering_since = Some(until);
                self.phase = RecoveryPhase::CoolingDown { until: cooled };
                Some(RecoveryEvent::CoolingDown { until: cooled })
            }
            RecoveryPhase::CoolingDown { until }
                if now >= until && deadline.is_none_or(|deadline| until < deadline) =>
            {
                if settings.passes == 0 {
                    Some(self.come_back(until))
                } else {
                    self.phase = RecoveryPhase::Probation { passes: 0 };
                    Some(RecoveryEvent::Probation)
                }
            }
            RecoveryPhase::CoolingDown { .. } | RecoveryPhase::Probation { .. }
                if deadline.is_some_and(|deadline| now >= deadline) =>
            {
                self.phase = RecoveryPhase::Permanent(PermanentCause::Unrecovered);
                Some(RecoveryEvent::Permanent(PermanentCause::Unrecovered))
            }
            _ => None,
        }
    }

    /// Counts a passed check (an active probe or a successful call) at `now`.
    ///
    /// Only a member on probation is judged: passes while it is ejected or cooling down are not
    /// evidence yet, and a serving member needs none. Call [`Recovery::advance`] first so that
    /// the phase is current.
    pub fn pass(&mut self, config: &RecoveryConfig, now: Instant) -> Option<RecoveryEvent> {
        let RecoveryPhase::Probation { passes } = self.phase else {
            return None;
        };
        let passes = passes.saturating_add(1);
        if passes >= config.settings.passes {
            return Some(self.come_back(now));
        }
        self.phase = RecoveryPhase::Probation { passes };
        None
    }

    /// Counts a failed check at `now`: a member on probation goes back to cooling down, for
    /// twice its last cool-down (capped at `max_cooldown`).
    ///
    /// Like [`Recovery::pass`], only probation is judged: a serving member's failures are for
    /// the ejection rules to weigh. Call [`Recovery::advance`] first.
    pub fn fail(&mut self, config: &RecoveryConfig, now: Instant) -> Option<RecoveryEvent> {
        let RecoveryPhase::Probation { .. } = self.phase else {
            return None;
        };
        self.cooldown = self.next_cooldown(config);
        let until = after(now, self.cooldown);
        self.phase = RecoveryPhase::CoolingDown { until };
        Some(RecoveryEvent::Relapsed {
            until,
            cooldown: self.cooldown,
        })
    }

    /// An operator puts the member back at `now`, from any phase out of the pool, permanent
    /// included, and its history is forgotten. Returns whether it was out.
    pub fn clear(&mut self, now: Instant) -> bool {
        if !self.is_out() {
            return false;
        }
        *self = Self::new();
        self.returned_at = Some(now);
        true
    }

    fn next_cooldown(&self, config: &RecoveryConfig) -> Duration {
        let settings = &config.settings;
        if self.cooldown.is_zero() {
            settings.cooldown
        } else {
            self.cooldown.saturating_mul(2).min(settings.max_cooldown)
        }
    }

    fn come_back(&mut self, at: Instant) -> RecoveryEvent {
        self.phase = RecoveryPhase::Serving;
        self.recovering_since = None;
        self.returned_at = Some(at);
        RecoveryEvent::Returned { at }
    }
}

/// `t + d`, with `d` capped at 30 years (what tokio itself uses for "never"), so that an absurd
/// configured duration cannot overflow the clock and panic.
fn after(t: Instant, d: Duration) -> Instant {
    const NEVER: Duration = Duration::from_secs(86_400 * 365 * 30);
    t.checked_add(d.min(NEVER)).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn config(settings: RecoverySettings) -> RecoveryConfig {
        RecoveryConfig::try_new(settings).unwrap()
    }

    /// Advances until nothing more is due, collecting the steps.
    fn catch_up(r: &mut Recovery, c: &RecoveryConfig, now: Instant) -> Vec<RecoveryEvent> {
        std::iter::from_fn(|| r.advance(c, now)).collect()
    }

    const THIRTY: fn(u32) -> Duration = |_| Duration::from_secs(30);

    #[test]
    fn defaults_and_validation() {
        let d = RecoveryConfig::default();
        assert_eq!(RecoveryConfig::try_new(RecoverySettings::default()), Ok(d));
        assert_eq!(d.settings().cooldown, secs(30));
        assert_eq!(d.settings().passes, 3);
        assert_eq!(d.settings().min_stable, secs(300));
        assert_eq!(d.settings().permanent_after, NonZeroU32::new(10));
        let base = RecoverySettings::default();
        assert_eq!(
            RecoveryConfig::try_new(RecoverySettings {
                cooldown: Duration::ZERO,
                ..base
            }),
            Err(RecoveryConfigError::ZeroCooldown)
        );
        assert_eq!(
            RecoveryConfig::try_new(RecoverySettings {
                max_cooldown: secs(10),
                ..base
            }),
            Err(RecoveryConfigError::MaxCooldownBelowCooldown {
                cooldown: secs(30),
                max: secs(10)
            })
        );
        assert_eq!(
            RecoveryConfig::try_new(RecoverySettings {
                give_up_after: Some(secs(30)),
                ..base
            }),
            Err(RecoveryConfigError::GiveUpNotAboveCooldown {
                cooldown: secs(30),
                give_up_after: secs(30)
            })
        );
        assert!(
            RecoveryConfig::try_new(RecoverySettings {
                give_up_after: None,
                permanent_after: None,
                passes: 0,
                min_stable: Duration::ZERO,
                ..base
            })
            .is_ok()
        );
    }

    #[test]
    fn cools_down_then_needs_consecutive_passes() {
        let c = RecoveryConfig::default();
        let t0 = Instant::now();
        let mut r = Recovery::new();
        let term = r.eject(&c, t0, THIRTY).unwrap();
        assert_eq!(term.until, Some(t0 + secs(30)));
        assert_eq!(r.eject(&c, t0, THIRTY), None, "already out");

        assert!(catch_up(&mut r, &c, t0 + secs(29)).is_empty());
        assert_eq!(
            catch_up(&mut r, &c, t0 + secs(30)),
            [RecoveryEvent::CoolingDown {
                until: t0 + secs(60)
            }]
        );
        assert_eq!(r.pass(&c, t0 + secs(40)), None, "passes while cooling down");
        assert_eq!(
            r.fail(&c, t0 + secs(40)),
            None,
            "failures while cooling down"
        );
        assert_eq!(
            catch_up(&mut r, &c, t0 + secs(60)),
            [RecoveryEvent::Probation]
        );
        assert_eq!(r.pass(&c, t0 + secs(61)), None);
        assert_eq!(r.pass(&c, t0 + secs(62)), None);
        assert_eq!(r.phase(), RecoveryPhase::Probation { passes: 2 });
        assert_eq!(
            r.pass(&c, t0 + secs(63)),
            Some(RecoveryEvent::Returned { at: t0 + secs(63) })
        );
        assert_eq!(r.phase(), RecoveryPhase::Serving);
    }

    #[test]
    fn a_failure_on_probation_doubles_the_cooldown_up_to_the_cap() {
        let c = config(RecoverySettings {
            max_cooldown: secs(100),
            give_up_after: None,
            ..RecoverySettings::default()
        });
        let t0 = Instant::now();
        let mut r = Recovery::new();
        r.eject(&c, t0, THIRTY);
        let mut now = t0 + secs(60);
        catch_up(&mut r, &c, now);
        let mut cooldowns = Vec::new();
        for _ in 0..4 {
            r.pass(&c, now);
            let Some(RecoveryEvent::Relapsed { until, cooldown }) = r.fail(&c, now) else {
                panic!("a failure on probation relapses");
            };
            assert_eq!(until, now + cooldown);
            cooldowns.push(cooldown.as_secs());
            now = until;
            assert_eq!(catch_up(&mut r, &c, now), [RecoveryEvent::Probation]);
            assert_eq!(r.phase(), RecoveryPhase::Probation { passes: 0 });
        }
        assert_eq!(cooldowns, [60, 100, 100, 100]);
    }

    #[test]
    fn no_passes_needed_returns_at_the_end_of_the_cooldown() {
        let c = config(RecoverySettings {
            passes: 0,
            ..RecoverySettings::default()
        });
        let t0 = Instant::now();
        let mut r = Recovery::new();
        r.eject(&c, t0, THIRTY);
        // A late caller catches up both steps, and the return is dated when it was due.
        assert_eq!(
            catch_up(&mut r, &c, t0 + secs(100)),
            [
                RecoveryEvent::CoolingDown {
                    until: t0 + secs(60)
                },
                RecoveryEvent::Returned { at: t0 + secs(60) },
            ]
        );
        assert_eq!(r.returned_at(), Some(t0 + secs(60)));
    }

    #[test]
    fn flapping_doubles_and_stability_resets() {
        let c = config(RecoverySettings {
            passes: 0,
            ..RecoverySettings::default()
        });
        let t0 = Instant::now();
        let mut r = Recovery::new();
        r.eject(&c, t0, THIRTY);
        catch_up(&mut r, &c, t0 + secs(60));
        assert_eq!(r.cooldown(), secs(30));
        // Ejected again a minute after returning: within min_stable.
        let term = r.eject(&c, t0 + secs(120), THIRTY).unwrap();
        assert_eq!(term.times_ejected, 2);
        assert_eq!(r.cooldown(), secs(60));
        catch_up(&mut r, &c, t0 + secs(300));
        assert_eq!(r.returned_at(), Some(t0 + secs(210)));
        // Served five minutes: stable, so the next ejection starts over.
        let later = t0 + secs(210 + 300);
        r.settle(&c, later);
        assert_eq!((r.times_ejected(), r.cooldown()), (0, Duration::ZERO));
        let term = r.eject(&c, later, THIRTY).unwrap();
        assert_eq!(term.times_ejected, 1);
        assert_eq!(r.cooldown(), secs(30));
    }

    #[test]
    fn given_up_when_not_back_in_time() {
        let c = RecoveryConfig::default();
        let t0 = Instant::now();
        let mut r = Recovery::new();
        r.eject(&c, t0, THIRTY);
        // Recovery starts when the ejection ends (t0 + 30 s): five minutes from then.
        catch_up(&mut r, &c, t0 + secs(60));
        let mut now = t0 + secs(60);
        while let Some(RecoveryEvent::Relapsed { until, .. }) = r.fail(&c, now) {
            now = until;
            let steps = catch_up(&mut r, &c, now);
            if steps == [RecoveryEvent::Permanent(PermanentCause::Unrecovered)] {
                break;
            }
            assert_eq!(steps, [RecoveryEvent::Probation]);
        }
        assert_eq!(
            r.phase(),
            RecoveryPhase::Permanent(PermanentCause::Unrecovered)
        );
        // Cool-downs 60, 120 from t0+60: probation at 240, then 240 s more would end at 480,
        // past the deadline at 330.
        assert_eq!(now, t0 + secs(480));
        assert_eq!(r.pass(&c, now), None, "permanent members ignore checks");
        assert!(r.clear(now));
        assert_eq!(r.phase(), RecoveryPhase::Serving);
        assert_eq!(r.times_ejected(), 0);
        assert!(!r.clear(now), "nothing to clear");
    }

    #[test]
    fn the_permanent_after_th_ejection_is_permanent() {
        let c = config(RecoverySettings {
            passes: 0,
            permanent_after: NonZeroU32::new(3),
            give_up_after: None,
            ..RecoverySettings::default()
        });
        let t0 = Instant::now();
        let mut r = Recovery::new();
        let mut now = t0;
        for n in 1..=2 {
            let term = r.eject(&c, now, THIRTY).unwrap();
            assert_eq!(term.times_ejected, n);
            now += secs(3600);
            catch_up(&mut r, &c, now);
            // Back, but ejected again before it is stable.
            assert_eq!(r.phase(), RecoveryPhase::Serving);
            now = r.returned_at().unwrap() + secs(10);
        }
        let term = r.eject(&c, now, THIRTY).unwrap();
        assert_eq!(
            term,
            EjectionTerm {
                times_ejected: 3,
                until: None
            }
        );
        assert_eq!(
            r.phase(),
            RecoveryPhase::Permanent(PermanentCause::Ejections(3))
        );
        assert!(catch_up(&mut r, &c, now + secs(86_400)).is_empty());
    }
}
