//! Uptime over a window, exact, from the transitions and the sessions that recorded them.
//!
//! Each millisecond of the window is one of:
//! - **up**: in UP or DEGRADED (the target did its job);
//! - **down**: in DOWN, or held in PROBING for flapping (it could not be trusted to);
//! - **maintenance**: taken out on purpose, left out of the share and reported apart;
//! - **no verdict**: in PROBING for any other reason (just started, its spec changed, back
//!   from maintenance), before the first verdict of a daemon's session;
//! - **unknown**: no daemon was recording (outside every session).
//!
//! The uptime is `up / (up + down)`: only time with a verdict counts, so a restart costs a
//! target nothing and a week the daemon was off says nothing about it. `None` when there was
//! no verdict at all in the window.

use probe::health::HealthState;
use serde::Serialize;

/// One recorded change, as the computation needs it: when, to what, and whether it was a hold
/// for flapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// Unix milliseconds.
    pub at_ms: i64,
    /// The state entered.
    pub to: HealthState,
    /// Entered for flapping (`cause: flapping`).
    pub flapping: bool,
}

/// Time in a window, by what it counts as, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Uptime {
    /// The window's start, Unix milliseconds.
    pub from_ms: i64,
    /// The window's end, Unix milliseconds.
    pub until_ms: i64,
    /// In UP or DEGRADED.
    pub up_ms: i64,
    /// In DOWN, or held for flapping.
    pub down_ms: i64,
    /// In MAINTENANCE: left out.
    pub maintenance_ms: i64,
    /// In PROBING before a verdict: left out.
    pub no_verdict_ms: i64,
    /// While no daemon recorded: left out.
    pub unknown_ms: i64,
}

impl Uptime {
    /// `up / (up + down)`; `None` without any time with a verdict.
    pub fn ratio(&self) -> Option<f64> {
        let judged = self.up_ms + self.down_ms;
        (judged > 0).then(|| self.up_ms as f64 / judged as f64)
    }

    fn add(&mut self, state: Option<Change>, ms: i64) {
        let slot = match state {
            None => &mut self.no_verdict_ms,
            Some(c) => match c.to {
                HealthState::Up | HealthState::Degraded => &mut self.up_ms,
                HealthState::Down => &mut self.down_ms,
                HealthState::Probing if c.flapping => &mut self.down_ms,
                HealthState::Probing => &mut self.no_verdict_ms,
                HealthState::Maintenance => &mut self.maintenance_ms,
            },
        };
        *slot += ms;
    }
}

/// The uptime over `[from_ms, until_ms)`.
///
/// `changes` are the target's transitions in time order, from at least the last one before
/// `from_ms` (earlier ones are harmless); `sessions` the `(started, seen)` spans of every daemon
/// that recorded, in any order, overlapping or not. A session starts with no verdict: every
/// target starts in PROBING. A change outside every session is ignored.
pub fn compute(changes: &[Change], sessions: &[(i64, i64)], from_ms: i64, until_ms: i64) -> Uptime {
    let mut out = Uptime {
        from_ms,
        until_ms,
        ..Uptime::default()
    };
    if until_ms <= from_ms {
        return out;
    }
    let mut covered = 0;
    for (start, end) in merged(sessions) {
        let (lo, hi) = (start.max(from_ms), end.min(until_ms));
        if lo >= hi {
            continue;
        }
        covered += hi - lo;
        // The state at `lo`: the last change of this session at or before it.
        let first = changes.partition_point(|c| c.at_ms < start);
        let inside = &changes[first..];
        let upto = inside.partition_point(|c| c.at_ms <= lo);
        let mut state = upto.checked_sub(1).map(|i| inside[i]);
        let mut at = lo;
        for change in inside[upto..].iter().take_while(|c| c.at_ms < hi) {
            out.add(state, change.at_ms - at);
            at = change.at_ms;
            state = Some(*change);
        }
        out.add(state, hi - at);
    }
    out.unknown_ms = (until_ms - from_ms) - covered;
    out
}

/// The sessions as disjoint spans in time order.
fn merged(sessions: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut spans: Vec<(i64, i64)> = sessions.iter().copied().filter(|(s, e)| e > s).collect();
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The windows an uptime may be asked for by name, longest last.
pub const WINDOWS: [(&str, i64); 4] = [
    ("24h", 24 * 3_600_000),
    ("7d", 7 * 24 * 3_600_000),
    ("30d", 30 * 24 * 3_600_000),
    ("90d", 90 * 24 * 3_600_000),
];

/// The span `spec` names, ending at `now_ms` for a named window: `24h`, `7d`, `30d`, `90d`, or
/// `from..until` in RFC 3339 (`2026-11-01T00:00:00Z..2026-11-08T00:00:00Z`).
///
/// # Errors
/// Why `spec` names no window, for a 400.
pub fn window(spec: &str, now_ms: i64) -> Result<(i64, i64), String> {
    if let Some((_, len)) = WINDOWS.iter().find(|(name, _)| *name == spec) {
        return Ok((now_ms - len, now_ms));
    }
    let Some((from, until)) = spec.split_once("..") else {
        return Err(format!(
            "unknown window {spec:?}: expected 24h, 7d, 30d, 90d or FROM..UNTIL (RFC 3339)"
        ));
    };
    let at = |s: &str| {
        humantime::parse_rfc3339_weak(s)
            .map(super::ms)
            .map_err(|e| format!("window {spec:?}: {s:?} is no RFC 3339 time: {e}"))
    };
    let (from, until) = (at(from)?, at(until)?);
    if until <= from {
        return Err(format!("window {spec:?} ends before it starts"));
    }
    Ok((from, until))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_named_or_spelled_out() {
        assert_eq!(
            window("24h", 100_000_000),
            Ok((100_000_000 - 86_400_000, 100_000_000))
        );
        assert_eq!(
            window("1970-01-01T00:00:01Z..1970-01-01T00:00:03Z", 0),
            Ok((1_000, 3_000))
        );
        assert!(window("1h", 0).is_err());
        assert!(window("1970-01-01T00:00:03Z..1970-01-01T00:00:01Z", 0).is_err());
        assert!(window("x..y", 0).is_err());
    }

    const MIN: i64 = 60_000;

    fn at(at_ms: i64, to: HealthState) -> Change {
        Change {
            at_ms,
            to,
            flapping: false,
        }
    }

    #[test]
    fn a_known_schedule_of_down_periods_gives_the_exact_share() {
        use HealthState::*;
        // One day: UP from the start, DOWN 10 min at 02:00, 5 min at 13:00, maintenance 1 h at
        // 20:00 (left out), everything recorded by one session.
        let day = 24 * 60 * MIN;
        let changes = [
            at(0, Up),
            at(120 * MIN, Down),
            at(130 * MIN, Up),
            at(780 * MIN, Down),
            at(785 * MIN, Up),
            at(1200 * MIN, Maintenance),
            at(1260 * MIN, Up),
        ];
        let u = compute(&changes, &[(0, day)], 0, day);
        assert_eq!(u.down_ms, 15 * MIN);
        assert_eq!(u.maintenance_ms, 60 * MIN);
        assert_eq!(u.up_ms, day - 15 * MIN - 60 * MIN);
        assert_eq!(u.ratio(), Some(1.0 - 15.0 / (23.0 * 60.0)));
        // A window in the middle starts from the state in force at its start.
        let u = compute(&changes, &[(0, day)], 125 * MIN, 135 * MIN);
        assert_eq!((u.down_ms, u.up_ms), (5 * MIN, 5 * MIN));
    }

    #[test]
    fn time_nobody_recorded_and_time_before_a_verdict_are_left_out() {
        use HealthState::*;
        // Session 1 records UP then DOWN; the daemon stops at 30 min; session 2 starts at
        // 60 min, PROBING 1 min, then UP.
        let changes = [at(MIN, Up), at(20 * MIN, Down), at(61 * MIN, Up)];
        let sessions = [(60 * MIN, 90 * MIN), (0, 30 * MIN)];
        let u = compute(&changes, &sessions, 0, 90 * MIN);
        assert_eq!(u.unknown_ms, 30 * MIN);
        assert_eq!(u.no_verdict_ms, 2 * MIN);
        assert_eq!(u.down_ms, 10 * MIN);
        assert_eq!(u.up_ms, 19 * MIN + 29 * MIN);
    }

    #[test]
    fn a_flapping_hold_counts_against() {
        use HealthState::*;
        let changes = [
            at(0, Up),
            Change {
                at_ms: 10 * MIN,
                to: Probing,
                flapping: true,
            },
            at(20 * MIN, Up),
        ];
        let u = compute(&changes, &[(0, 30 * MIN)], 0, 30 * MIN);
        assert_eq!((u.up_ms, u.down_ms), (20 * MIN, 10 * MIN));
    }

    #[test]
    fn overlapping_sessions_of_several_members_count_once() {
        use HealthState::*;
        let u = compute(&[at(0, Up)], &[(0, 20), (10, 30), (30, 40)], 0, 50);
        assert_eq!((u.up_ms, u.unknown_ms), (40, 10));
        assert_eq!(compute(&[], &[], 0, 10).ratio(), None);
        assert_eq!(
            compute(&[], &[(0, 10)], 10, 0),
            Uptime {
                from_ms: 10,
                ..Uptime::default()
            }
        );
    }
}
