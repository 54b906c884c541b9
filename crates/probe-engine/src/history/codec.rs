//! A target's day of hourly rollups, packed into one small blob.
//!
//! Hourly rows as plain columns cost about 45 bytes each in SQLite (row header, key, index),
//! over a kilobyte per target per day: 40 GB a year for a 100k-target fleet. Most hours look
//! like the one before (no failures, the whole hour in one state, often the same run count), so
//! a day is one row whose blob says, for each hour present, only what differs from the previous
//! one, plus three one-byte latency quantiles. A quiet hour is 4 to 7 bytes; measured over a
//! simulated week a day's blob averages 142 bytes and its row 180 on disk, 6.6 GB a year at
//! 100k targets.
//!
//! Format (version 1), all integers LEB128 varints unless said:
//! - byte 0: the version, 1;
//! - bytes 1..4: which of the day's 24 hours are present (bit `h`, little-endian);
//! - per present hour, in order: a flags byte, then the fields it announces:
//!   - bit 0: `runs` follows (else the previous present hour's);
//!   - bit 1: `failures` follows (else 0); bit 2: `degraded` follows (else 0);
//!   - bit 3: three latency codes follow, p50, p90, p99 (else no latency);
//!   - bit 4: the time in each state follows (else the previous present hour's): a mask byte
//!     of the states with time (bit `i` for [`STATES`]`[i]`), then milliseconds for each.
//!
//! The first present hour compares with an hour of no runs and no time. A latency code `c` in
//! `1..=255` stands for `1.08^(c-1)` microseconds (1 µs to about 5 minutes, within 4%), the same
//! buckets the hour's quantiles are counted in.

use std::time::Duration;

use probe::verdict::HealthState;

/// The states time is counted in, in the order of the state mask's bits.
pub const STATES: [HealthState; 5] = [
    HealthState::Probing,
    HealthState::Up,
    HealthState::Degraded,
    HealthState::Maintenance,
    HealthState::Down,
];

/// The index of `state` in [`STATES`].
pub fn state_index(state: HealthState) -> usize {
    match state {
        HealthState::Probing => 0,
        HealthState::Up => 1,
        HealthState::Degraded => 2,
        HealthState::Maintenance => 3,
        HealthState::Down => 4,
    }
}

const VERSION: u8 = 1;
const RUNS: u8 = 1;
const FAILURES: u8 = 1 << 1;
const DEGRADED: u8 = 1 << 2;
const LATENCY: u8 = 1 << 3;
const TIMES: u8 = 1 << 4;

/// The ratio between neighbouring latency buckets.
const GROWTH: f64 = 1.08;

/// One target's hour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hour {
    /// Runs that counted as the target's results.
    pub runs: u32,
    /// Of which failed.
    pub failures: u32,
    /// Of which passed degraded.
    pub degraded: u32,
    /// The p50, p90 and p99 latency codes ([`code`]); 0 without runs.
    pub latency: [u8; 3],
    /// Milliseconds spent in each of [`STATES`].
    pub time_ms: [u32; 5],
}

impl Hour {
    /// Milliseconds up (UP, DEGRADED) and down (DOWN), as uptime counts them.
    pub fn up_down_ms(&self) -> (u64, u64) {
        let t = |s| u64::from(self.time_ms[state_index(s)]);
        (
            t(HealthState::Up) + t(HealthState::Degraded),
            t(HealthState::Down),
        )
    }

    /// Adds `other`, taken over the same hour (a restart's two halves): counts and times add;
    /// the quantiles are each half's weighted by its runs, the best a quantile can be merged.
    pub fn merge(&mut self, other: &Hour) {
        let total = self.runs + other.runs;
        if total > 0 {
            for (mine, theirs) in self.latency.iter_mut().zip(other.latency) {
                let weighted = (u64::from(*mine) * u64::from(self.runs)
                    + u64::from(theirs) * u64::from(other.runs))
                    / u64::from(total);
                *mine = u8::try_from(weighted).unwrap_or(u8::MAX);
            }
        }
        self.runs = total;
        self.failures += other.failures;
        self.degraded += other.degraded;
        for (mine, theirs) in self.time_ms.iter_mut().zip(other.time_ms) {
            *mine = mine.saturating_add(theirs);
        }
    }
}

/// A day of hours, by hour of the day (UTC).
pub type Day = [Option<Hour>; 24];

/// Fills the hours `day` lacks with `older`'s: what another writer of the same row (the
/// member that had the target earlier that day) counted. Whether it took any.
pub fn fill(day: &mut Day, older: &Day) -> bool {
    let mut took = false;
    for (hour, old) in day.iter_mut().zip(older) {
        if hour.is_none() && old.is_some() {
            *hour = *old;
            took = true;
        }
    }
    took
}

/// The latency bucket of `d`: `1..=255`.
pub fn code(d: Duration) -> u8 {
    let micros = d.as_secs_f64() * 1e6;
    if micros <= 1.0 {
        return 1;
    }
    let c = (micros.ln() / GROWTH.ln()).round() + 1.0;
    // The cast saturates; the clamp keeps 0 for "none".
    (c as u8).max(1)
}

/// The latency a bucket stands for; `None` for 0 (no runs).
pub fn latency(code: u8) -> Option<Duration> {
    (code > 0).then(|| Duration::from_secs_f64(GROWTH.powi(i32::from(code) - 1) / 1e6))
}

/// Packs a day.
pub fn encode(day: &Day) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(VERSION);
    let present: u32 = day
        .iter()
        .enumerate()
        .filter(|(_, h)| h.is_some())
        .fold(0, |mask, (i, _)| mask | 1 << i);
    out.extend_from_slice(&present.to_le_bytes()[..3]);
    let mut previous = Hour::default();
    for hour in day.iter().flatten() {
        let mut flags = 0;
        if hour.runs != previous.runs {
            flags |= RUNS;
        }
        if hour.failures != 0 {
            flags |= FAILURES;
        }
        if hour.degraded != 0 {
            flags |= DEGRADED;
        }
        if hour.latency != [0; 3] {
            flags |= LATENCY;
        }
        if hour.time_ms != previous.time_ms {
            flags |= TIMES;
        }
        out.push(flags);
        if flags & RUNS != 0 {
            varint(&mut out, hour.runs);
        }
        if flags & FAILURES != 0 {
            varint(&mut out, hour.failures);
        }
        if flags & DEGRADED != 0 {
            varint(&mut out, hour.degraded);
        }
        if flags & LATENCY != 0 {
            out.extend_from_slice(&hour.latency);
        }
        if flags & TIMES != 0 {
            let mask = hour
                .time_ms
                .iter()
                .enumerate()
                .filter(|(_, ms)| **ms > 0)
                .fold(0u8, |mask, (i, _)| mask | 1 << i);
            out.push(mask);
            for ms in hour.time_ms.iter().filter(|ms| **ms > 0) {
                varint(&mut out, *ms);
            }
        }
        previous = *hour;
    }
    out
}

/// Why a blob is not a day.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Written by a later version.
    #[error("rollup format version {0} is unknown")]
    Version(u8),
    /// Cut short, or a field out of range.
    #[error("rollup blob is malformed")]
    Malformed,
}

/// Unpacks a day.
///
/// # Errors
/// [`CodecError`] for a blob this version did not write.
pub fn decode(bytes: &[u8]) -> Result<Day, CodecError> {
    let mut day: Day = [None; 24];
    let mut input = Reader { bytes, at: 0 };
    match input.byte()? {
        VERSION => {}
        other => return Err(CodecError::Version(other)),
    }
    let mut present = [0u8; 4];
    for b in present.iter_mut().take(3) {
        *b = input.byte()?;
    }
    let present = u32::from_le_bytes(present);
    let mut previous = Hour::default();
    for (h, slot) in day.iter_mut().enumerate() {
        if present & (1 << h) == 0 {
            continue;
        }
        let flags = input.byte()?;
        let mut hour = Hour {
            runs: previous.runs,
            time_ms: previous.time_ms,
            ..Hour::default()
        };
        if flags & RUNS != 0 {
            hour.runs = input.varint()?;
        }
        if flags & FAILURES != 0 {
            hour.failures = input.varint()?;
        }
        if flags & DEGRADED != 0 {
            hour.degraded = input.varint()?;
        }
        if flags & LATENCY != 0 {
            for q in &mut hour.latency {
                *q = input.byte()?;
            }
        }
        if flags & TIMES != 0 {
            let mask = input.byte()?;
            for (i, ms) in hour.time_ms.iter_mut().enumerate() {
                *ms = if mask & (1 << i) != 0 {
                    input.varint()?
                } else {
                    0
                };
            }
        }
        *slot = Some(hour);
        previous = hour;
    }
    if input.at != bytes.len() {
        return Err(CodecError::Malformed);
    }
    Ok(day)
}

fn varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, CodecError> {
        let b = *self.bytes.get(self.at).ok_or(CodecError::Malformed)?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u32, CodecError> {
        let mut v: u64 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return u32::try_from(v).map_err(|_| CodecError::Malformed);
            }
        }
        Err(CodecError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet(runs: u32) -> Hour {
        Hour {
            runs,
            latency: [code(Duration::from_millis(2)), 40, 60],
            time_ms: [0, 3_600_000, 0, 0, 0],
            ..Hour::default()
        }
    }

    #[test]
    fn a_day_round_trips_and_quiet_hours_take_four_bytes() {
        let mut day: Day = [None; 24];
        for slot in &mut day {
            *slot = Some(quiet(360));
        }
        let bytes = encode(&day);
        assert_eq!(decode(&bytes), Ok(day));
        // Header 4, the first hour says its runs and times (1 + 2 + 3 + 1 + 4), 23 quiet ones.
        assert_eq!(bytes.len(), 4 + 11 + 23 * 4);
    }

    #[test]
    fn hours_that_differ_say_how() {
        let mut day: Day = [None; 24];
        day[3] = Some(quiet(12));
        day[4] = Some(Hour {
            runs: 300,
            failures: 7,
            degraded: 1,
            latency: [0; 3],
            time_ms: [5_000, 1_000_000, 0, 600_000, 1_994_000],
        });
        day[23] = Some(Hour::default());
        assert_eq!(decode(&encode(&day)), Ok(day));
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        assert_eq!(decode(&[]), Err(CodecError::Malformed));
        assert_eq!(decode(&[9, 0, 0, 0]), Err(CodecError::Version(9)));
        assert_eq!(decode(&[1, 1, 0, 0]), Err(CodecError::Malformed));
        assert_eq!(decode(&[1, 0, 0, 0, 7]), Err(CodecError::Malformed));
        let mut day: Day = [None; 24];
        day[0] = Some(quiet(1));
        let bytes = encode(&day);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn latency_codes_are_within_four_percent() {
        for micros in [1u64, 7, 150, 2_000, 45_000, 1_000_000, 60_000_000] {
            let d = Duration::from_micros(micros);
            let back = latency(code(d)).unwrap_or_default();
            let error = (back.as_secs_f64() - d.as_secs_f64()).abs() / d.as_secs_f64();
            assert!(error < 0.04, "{micros} µs came back as {back:?}");
        }
        assert_eq!(latency(0), None);
    }

    #[test]
    fn merged_halves_add_up() {
        let mut a = quiet(100);
        let b = Hour {
            runs: 300,
            failures: 3,
            latency: [80, 80, 80],
            time_ms: [0, 1_000, 0, 0, 2_000],
            ..Hour::default()
        };
        let a_p50 = a.latency[0];
        a.merge(&b);
        assert_eq!((a.runs, a.failures), (400, 3));
        assert_eq!(a.time_ms, [0, 3_601_000, 0, 0, 2_000]);
        assert_eq!(
            u32::from(a.latency[0]),
            (u32::from(a_p50) * 100 + 80 * 300) / 400
        );
    }
}
