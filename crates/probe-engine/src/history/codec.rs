//! A target's day of hourly rollups, packed into one small blob.
//!
//! Hourly rows as plain columns cost about 45 bytes each in SQLite (row header, key, index),
//! over a kilobyte per target per day: 40 GB a year for a 100k-target fleet. Most hours look
//! like the one before (no failures, the whole hour in one state, the same run count, latency
//! quantiles a bucket or two away), so a day is one row whose blob says, for each hour present,
//! how it differs from the previous one, in as few bits as each difference needs. A quiet hour
//! takes about two bytes, most of them the p99's moves; see BENCHMARKS.md, "History", for what
//! a simulated week measures.
//!
//! Format (version 2):
//! - byte 0: the version, 2;
//! - bytes 1..4: which of the day's 24 hours are present (bit `h`, little-endian);
//! - then a stream of bits (least significant bit of each byte first), per present hour:
//!   - `runs` as a signed difference from the previous present hour's;
//!   - `failures`, then `degraded`, as values;
//!   - when the hour has runs: its p50, p90 and p99 latency codes, each a signed difference
//!     from the same code of the last hour that had runs (an hour without runs has none);
//!   - one bit: the time in each state is the previous present hour's (1), or (0) a five-bit
//!     mask of the states with time (bit `i` for [`STATES`]`[i]`), then milliseconds for each;
//! - zero bits up to the end of the last byte.
//!
//! Values are order-0 exponential-Golomb codes (`v + 1` in binary, after as many zeros as it
//! has bits less one: 0 is one bit, 1 and 2 are three); a signed difference `d` is coded as
//! the value `2d` when `d >= 0`, else `-2d - 1`. The first present hour compares with an hour of
//! no runs, no latency and no time. A latency code `c` in `1..=255` stands for `1.08^(c-1)`
//! microseconds (1 µs to about 5 minutes, within 4%), the same buckets the hour's quantiles are
//! counted in.
//!
//! Version 1, which byte-aligned every field (a quiet hour took 4 bytes), is still read: a
//! database keeps the blobs it was given.

use std::time::Duration;

use probe::health::HealthState;

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

const VERSION: u8 = 2;

/// The low bits of a time in milliseconds written as they are ([`Bits::value_low`]): times
/// are mostly large (a whole hour is 22 bits), and a plain exponential-Golomb code would spend
/// almost twice their width on them.
const MS_LOW_BITS: u32 = 12;

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
    let mut out = Bits::default();
    out.bytes.push(VERSION);
    let present: u32 = day
        .iter()
        .enumerate()
        .filter(|(_, h)| h.is_some())
        .fold(0, |mask, (i, _)| mask | 1 << i);
    out.bytes.extend_from_slice(&present.to_le_bytes()[..3]);
    out.used = 8;
    let mut previous = Hour::default();
    let mut latency = [0u8; 3];
    for hour in day.iter().flatten() {
        out.signed(i64::from(hour.runs) - i64::from(previous.runs));
        out.value(u64::from(hour.failures));
        out.value(u64::from(hour.degraded));
        if hour.runs > 0 {
            for (code, last) in hour.latency.iter().zip(&mut latency) {
                out.signed(i64::from(*code) - i64::from(*last));
                *last = *code;
            }
        }
        let same = hour.time_ms == previous.time_ms;
        out.bit(same);
        if !same {
            for ms in hour.time_ms {
                out.bit(ms > 0);
            }
            for ms in hour.time_ms.iter().filter(|ms| **ms > 0) {
                out.value_low(u64::from(*ms), MS_LOW_BITS);
            }
        }
        previous = *hour;
    }
    out.bytes
}

/// Why a blob is not a day (of rollups, or of transitions).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Written by a later version.
    #[error("history blob format version {0} is unknown")]
    Version(u8),
    /// Cut short, or a field out of range.
    #[error("history blob is malformed")]
    Malformed,
}

/// Unpacks a day, of either version.
///
/// # Errors
/// [`CodecError`] for a blob no version wrote.
pub fn decode(bytes: &[u8]) -> Result<Day, CodecError> {
    let (version, present) = match bytes {
        [version, a, b, c, ..] => (*version, u32::from_le_bytes([*a, *b, *c, 0])),
        _ => return Err(CodecError::Malformed),
    };
    match version {
        1 => v1::decode(&bytes[4..], present),
        VERSION => decode_v2(&bytes[4..], present),
        other => Err(CodecError::Version(other)),
    }
}

fn decode_v2(bytes: &[u8], present: u32) -> Result<Day, CodecError> {
    let mut day: Day = [None; 24];
    let mut input = BitReader { bytes, at: 0 };
    let mut previous = Hour::default();
    let mut latency = [0u8; 3];
    for (h, slot) in day.iter_mut().enumerate() {
        if present & (1 << h) == 0 {
            continue;
        }
        let mut hour = Hour {
            runs: input.signed_from(previous.runs)?,
            failures: input.value_u32()?,
            degraded: input.value_u32()?,
            ..Hour::default()
        };
        if hour.runs > 0 {
            for (code, last) in hour.latency.iter_mut().zip(&mut latency) {
                *code = input.signed_from(*last)?;
                *last = *code;
            }
        }
        hour.time_ms = if input.bit()? {
            previous.time_ms
        } else {
            let mut mask = [false; 5];
            for has in &mut mask {
                *has = input.bit()?;
            }
            let mut time_ms = [0; 5];
            for (ms, has) in time_ms.iter_mut().zip(mask) {
                if has {
                    *ms = u32::try_from(input.value_low(MS_LOW_BITS)?)
                        .map_err(|_| CodecError::Malformed)?;
                }
            }
            time_ms
        };
        *slot = Some(hour);
        previous = hour;
    }
    input.finish()?;
    Ok(day)
}

/// A stream of bits being written, least significant first in each byte.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    /// Bits used of the last byte (8 when it is full, or there is none).
    used: u32,
}

impl Bits {
    fn bit(&mut self, set: bool) {
        if self.used == 8 || self.bytes.is_empty() {
            self.bytes.push(0);
            self.used = 0;
        }
        if set && let Some(last) = self.bytes.last_mut() {
            *last |= 1 << self.used;
        }
        self.used += 1;
    }

    /// An exponential-Golomb code of `v`.
    fn value(&mut self, v: u64) {
        let x = u128::from(v) + 1;
        let width = 128 - x.leading_zeros();
        for _ in 1..width {
            self.bit(false);
        }
        for i in (0..width).rev() {
            self.bit(x >> i & 1 == 1);
        }
    }

    /// `v`'s `low` lowest bits as they are, after an exponential-Golomb code of the rest.
    fn value_low(&mut self, v: u64, low: u32) {
        self.value(v >> low);
        for i in (0..low).rev() {
            self.bit(v >> i & 1 == 1);
        }
    }

    fn signed(&mut self, d: i64) {
        self.value(if d >= 0 {
            d.unsigned_abs() * 2
        } else {
            d.unsigned_abs() * 2 - 1
        });
    }
}

/// A stream of bits being read, as [`Bits`] wrote it.
struct BitReader<'a> {
    bytes: &'a [u8],
    /// Bits read so far.
    at: usize,
}

impl BitReader<'_> {
    fn bit(&mut self) -> Result<bool, CodecError> {
        let byte = self.bytes.get(self.at / 8).ok_or(CodecError::Malformed)?;
        let set = byte >> (self.at % 8) & 1 == 1;
        self.at += 1;
        Ok(set)
    }

    fn value(&mut self) -> Result<u64, CodecError> {
        let mut zeros = 0;
        while !self.bit()? {
            zeros += 1;
            if zeros > 64 {
                return Err(CodecError::Malformed);
            }
        }
        let mut x: u128 = 1;
        for _ in 0..zeros {
            x = x << 1 | u128::from(self.bit()?);
        }
        u64::try_from(x - 1).map_err(|_| CodecError::Malformed)
    }

    fn value_low(&mut self, low: u32) -> Result<u64, CodecError> {
        let high = self.value()?;
        if high.leading_zeros() < low {
            return Err(CodecError::Malformed);
        }
        let mut v = high;
        for _ in 0..low {
            v = v << 1 | u64::from(self.bit()?);
        }
        Ok(v)
    }

    fn value_u32(&mut self) -> Result<u32, CodecError> {
        u32::try_from(self.value()?).map_err(|_| CodecError::Malformed)
    }

    /// `base` moved by a signed difference, which must land within `T`.
    fn signed_from<T: Into<i64> + TryFrom<i64>>(&mut self, base: T) -> Result<T, CodecError> {
        let v = self.value()?;
        let magnitude = i64::try_from(v.div_ceil(2)).map_err(|_| CodecError::Malformed)?;
        let d = if v % 2 == 0 { magnitude } else { -magnitude };
        T::try_from(base.into() + d).map_err(|_| CodecError::Malformed)
    }

    /// The rest of the last byte must be zeros, and no byte may follow it.
    fn finish(mut self) -> Result<(), CodecError> {
        while !self.at.is_multiple_of(8) {
            if self.bit()? {
                return Err(CodecError::Malformed);
            }
        }
        if self.at / 8 == self.bytes.len() {
            Ok(())
        } else {
            Err(CodecError::Malformed)
        }
    }
}

/// Version 1: per present hour a flags byte, then the fields it announces, byte-aligned.
mod v1 {
    use super::{ByteReader, CodecError, Day, Hour};

    const RUNS: u8 = 1;
    const FAILURES: u8 = 1 << 1;
    const DEGRADED: u8 = 1 << 2;
    const LATENCY: u8 = 1 << 3;
    const TIMES: u8 = 1 << 4;

    /// The hours after the header: bit 0 `runs` follows (else the previous present hour's);
    /// bits 1 and 2 `failures` and `degraded` follow (else 0); bit 3 the three latency codes
    /// follow (else none); bit 4 the times follow (else the previous present hour's), as a
    /// mask byte and milliseconds for each state in it. Integers are LEB128 varints.
    pub(super) fn decode(bytes: &[u8], present: u32) -> Result<Day, CodecError> {
        let mut day: Day = [None; 24];
        let mut input = ByteReader::new(bytes);
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
                hour.runs = input.varint_u32()?;
            }
            if flags & FAILURES != 0 {
                hour.failures = input.varint_u32()?;
            }
            if flags & DEGRADED != 0 {
                hour.degraded = input.varint_u32()?;
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
                        input.varint_u32()?
                    } else {
                        0
                    };
                }
            }
            *slot = Some(hour);
            previous = hour;
        }
        input.finish()?;
        Ok(day)
    }
}

/// Bytes being read: the byte-aligned formats' reader (version 1 rollups, [`events`]).
///
/// [`events`]: super::events
pub(super) struct ByteReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> ByteReader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Whether every byte has been read.
    pub(super) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(super) fn byte(&mut self) -> Result<u8, CodecError> {
        let b = *self.bytes.get(self.at).ok_or(CodecError::Malformed)?;
        self.at += 1;
        Ok(b)
    }

    /// A LEB128 varint of at most 64 bits.
    pub(super) fn varint(&mut self) -> Result<u64, CodecError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::Malformed)
    }

    /// A varint that must fit 32 bits.
    pub(super) fn varint_u32(&mut self) -> Result<u32, CodecError> {
        u32::try_from(self.varint()?).map_err(|_| CodecError::Malformed)
    }

    /// Fails unless every byte has been read.
    pub(super) fn finish(self) -> Result<(), CodecError> {
        if self.is_done() {
            Ok(())
        } else {
            Err(CodecError::Malformed)
        }
    }
}

/// Appends `v` as a LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
    fn a_day_round_trips_and_a_quiet_hour_takes_seven_bits() {
        let mut day: Day = [None; 24];
        for slot in &mut day {
            *slot = Some(quiet(360));
        }
        let bytes = encode(&day);
        assert_eq!(decode(&bytes), Ok(day));
        // The first hour: runs +360 (19 bits), no failures and no degraded (1 + 1), codes
        // 100, 40 and 60 from 0 (15 + 13 + 13), new times (1 + 5 + 19 + 12 for 3.6M ms). Then 23
        // quiet hours: nothing moved, one bit for each of the seven fields.
        let first = 19 + 2 + 15 + 13 + 13 + 1 + 5 + (19 + 12);
        assert_eq!(bytes.len(), 4 + (first + 23 * 7usize).div_ceil(8));
    }

    #[test]
    fn a_version_1_blob_is_still_read() {
        // Written by version 1's encoder: hours 2, 3 and 4.
        let v1 = [
            1, 28, 0, 0, 25, 232, 2, 90, 100, 120, 2, 128, 221, 219, 1, 30, 2, 1, 91, 99, 140, 18,
            224, 207, 213, 1, 160, 141, 6, 17, 0, 0,
        ];
        let mut day: Day = [None; 24];
        day[2] = Some(Hour {
            runs: 360,
            latency: [90, 100, 120],
            time_ms: [0, 3_600_000, 0, 0, 0],
            ..Hour::default()
        });
        day[3] = Some(Hour {
            runs: 360,
            failures: 2,
            degraded: 1,
            latency: [91, 99, 140],
            time_ms: [0, 3_500_000, 0, 0, 100_000],
        });
        day[4] = Some(Hour::default());
        assert_eq!(decode(&v1), Ok(day));
        // Written again, it is version 2 and shorter.
        let v2 = encode(&day);
        assert_eq!(v2[0], 2);
        assert!(v2.len() < v1.len(), "{v2:?}");
        assert_eq!(decode(&v2), Ok(day));
    }

    #[test]
    fn a_version_1_hour_without_times_keeps_the_previous_hours() {
        // Hour 0: runs 10 and times (state 1 only, 1000 ms); hour 1: runs 20 alone, so its
        // times are hour 0's, and no mask or milliseconds follow.
        let v1 = [1, 3, 0, 0, 17, 10, 2, 232, 7, 1, 20];
        let mut day: Day = [None; 24];
        let time_ms = [0, 1_000, 0, 0, 0];
        day[0] = Some(Hour {
            runs: 10,
            time_ms,
            ..Hour::default()
        });
        day[1] = Some(Hour {
            runs: 20,
            time_ms,
            ..Hour::default()
        });
        assert_eq!(decode(&v1), Ok(day));
    }

    fn hour() -> impl Strategy<Value = Hour> {
        (
            0u32..5_000,
            any::<u32>(),
            any::<u32>(),
            any::<[u8; 3]>(),
            any::<[u32; 5]>(),
            any::<[bool; 5]>(),
        )
            .prop_map(|(runs, failures, degraded, latency, times, zero)| Hour {
                runs,
                failures: failures % (runs + 1),
                degraded: degraded % (runs + 1),
                // An hour without runs has no latency.
                latency: if runs == 0 { [0; 3] } else { latency },
                time_ms: std::array::from_fn(|i| if zero[i] { 0 } else { times[i] }),
            })
    }

    proptest! {
        #[test]
        fn any_day_round_trips(hours in proptest::collection::vec(proptest::option::of(hour()), 24)) {
            let mut day: Day = [None; 24];
            for (slot, h) in day.iter_mut().zip(hours) {
                *slot = h;
            }
            prop_assert_eq!(decode(&encode(&day)), Ok(day));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
            let mut v2 = bytes;
            if let Some(first) = v2.first_mut() {
                *first = 2;
            }
            if let Ok(day) = decode(&v2) {
                prop_assert_eq!(decode(&encode(&day)), Ok(day));
            }
        }
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
        // A byte past the end, or a bit set in the last byte's padding.
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(CodecError::Malformed));
        let mut padded = bytes;
        if let Some(last) = padded.last_mut() {
            *last |= 0x80;
        }
        assert_eq!(decode(&padded), Err(CodecError::Malformed));
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

    #[test]
    fn hours_without_runs_merge_to_their_times() {
        let mut a = Hour {
            time_ms: [1_000, 0, 0, 0, 0],
            ..Hour::default()
        };
        a.merge(&Hour {
            time_ms: [500, 0, 0, 2_000, 0],
            ..Hour::default()
        });
        assert_eq!(a.latency, [0, 0, 0]);
        assert_eq!(a.time_ms, [1_500, 0, 0, 2_000, 0]);
    }

    #[test]
    fn up_counts_degraded_time_and_down_only_down() {
        let hour = Hour {
            // PROBING, UP, DEGRADED, MAINTENANCE, DOWN.
            time_ms: [1, 20, 300, 4_000, 50_000],
            ..Hour::default()
        };
        assert_eq!(hour.up_down_ms(), (320, 50_000));
    }

    #[test]
    fn fill_takes_only_the_hours_a_day_lacks() {
        let mut day: Day = [None; 24];
        day[3] = Some(quiet(10));
        let mut older: Day = [None; 24];
        assert!(!fill(&mut day, &older), "nothing to take");
        older[3] = Some(quiet(99));
        assert!(!fill(&mut day, &older), "hour 3 is the day's own");
        older[5] = Some(quiet(7));
        assert!(fill(&mut day, &older));
        assert_eq!(day[3], Some(quiet(10)));
        assert_eq!(day[5], Some(quiet(7)));
        assert_eq!(day.iter().flatten().count(), 2);
    }

    #[test]
    fn the_widest_values_round_trip_and_wider_ones_are_refused() {
        let mut bits = Bits::default();
        bits.value(u64::MAX);
        bits.value_low(u64::MAX, MS_LOW_BITS);
        bits.value(0);
        let mut input = BitReader {
            bytes: &bits.bytes,
            at: 0,
        };
        assert_eq!(input.value(), Ok(u64::MAX));
        assert_eq!(input.value_low(MS_LOW_BITS), Ok(u64::MAX));
        assert_eq!(input.value(), Ok(0));

        // A high part one bit too wide for the low bits after it.
        let mut bits = Bits::default();
        bits.value(1 << (64 - MS_LOW_BITS));
        bits.value(0);
        let mut input = BitReader {
            bytes: &bits.bytes,
            at: 0,
        };
        assert_eq!(input.value_low(MS_LOW_BITS), Err(CodecError::Malformed));
    }
}
