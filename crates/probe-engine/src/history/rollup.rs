//! Each target's current hour, counted in memory from the engine's records, and its day of
//! closed hours, packed by [`codec::encode`], ready to be written.
//!
//! Everything here is driven by the records' own times and the `now` it is given, never by the
//! clock: a simulated week runs in a test as fast as its records can be made.

use std::collections::HashMap;
use std::time::Duration;

use probe::TargetId;
use probe::health::{HealthState, Quality};

use super::codec::{self, Day, Hour, state_index};

/// Milliseconds in an hour and in a day.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a day.
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// A day's blob to write: `(day, target, hours)`.
pub type DayRow = (i64, TargetId, Vec<u8>);

/// Every target's hour and day in progress, by id: looked up once per run, so with a fast
/// hash (ids are the daemon's own config, not an attacker's keys).
#[derive(Default)]
pub struct Rollups {
    targets: HashMap<TargetId, Live, foldhash::fast::RandomState>,
}

/// One target's.
struct Live {
    /// The hour being counted (Unix milliseconds / [`HOUR_MS`]).
    hour: i64,
    runs: u32,
    failures: u32,
    degraded: u32,
    /// Latency codes and how many runs fell in each, by code.
    sketch: Vec<(u8, u32)>,
    time_ms: [u32; 5],
    /// The state it is in, and since when (clipped to the hour).
    state: HealthState,
    since_ms: i64,
    /// The day of closed hours (`day`, packed); a restart finds its first half here.
    day: i64,
    closed: Vec<u8>,
}

impl Live {
    fn new(hour: i64, state: HealthState, since_ms: i64) -> Self {
        Self {
            hour,
            runs: 0,
            failures: 0,
            degraded: 0,
            sketch: Vec::new(),
            time_ms: [0; 5],
            state,
            since_ms,
            day: hour.div_euclid(24),
            closed: codec::encode(&[None; 24]),
        }
    }

    /// The hour so far, its time counted up to `at_ms`.
    fn current(&self, at_ms: i64) -> Hour {
        let mut time_ms = self.time_ms;
        let end = at_ms.min((self.hour + 1) * HOUR_MS);
        add_time(&mut time_ms, self.state, end - self.since_ms);
        Hour {
            runs: self.runs,
            failures: self.failures,
            degraded: self.degraded,
            latency: [0.5, 0.9, 0.99].map(|q| quantile(&self.sketch, self.runs, q)),
            time_ms,
        }
    }

    /// The day with the hour so far in it.
    fn day_with_current(&self, at_ms: i64) -> Day {
        let mut day = codec::decode(&self.closed).unwrap_or([None; 24]);
        let slot = &mut day[self.hour.rem_euclid(24) as usize];
        let current = self.current(at_ms);
        match slot {
            Some(first_half) => first_half.merge(&current),
            None => *slot = Some(current),
        }
        day
    }

    /// Closes its hours up to `at_ms`'s, adding the days finished to `finished`.
    fn close_to(&mut self, id: &TargetId, at_ms: i64, finished: &mut Vec<DayRow>) {
        let hour = at_ms.div_euclid(HOUR_MS);
        while self.hour < hour {
            finished.extend(self.roll(id));
        }
    }

    /// Counts one run in the hour.
    fn count(&mut self, quality: Quality, latency: Duration) {
        self.runs += 1;
        match quality {
            Quality::Good => {}
            Quality::Degraded => self.degraded += 1,
            Quality::Failed => self.failures += 1,
        }
        let code = codec::code(latency);
        match self.sketch.binary_search_by_key(&code, |(c, _)| *c) {
            Ok(i) => self.sketch[i].1 += 1,
            Err(i) => self.sketch.insert(i, (code, 1)),
        }
    }

    /// Closes the hour at its end and starts the next; the finished day, when this closed its
    /// last hour.
    fn roll(&mut self, id: &TargetId) -> Option<DayRow> {
        let end = (self.hour + 1) * HOUR_MS;
        let day = self.day_with_current(end);
        self.hour += 1;
        self.runs = 0;
        self.failures = 0;
        self.degraded = 0;
        self.sketch.clear();
        self.time_ms = [0; 5];
        self.since_ms = end;
        if self.hour.div_euclid(24) != self.day {
            let finished = (self.day, id.clone(), codec::encode(&day));
            self.day = self.hour.div_euclid(24);
            self.closed = codec::encode(&[None; 24]);
            Some(finished)
        } else {
            self.closed = codec::encode(&day);
            None
        }
    }
}

fn add_time(time_ms: &mut [u32; 5], state: HealthState, ms: i64) {
    let slot = &mut time_ms[state_index(state)];
    *slot = slot.saturating_add(u32::try_from(ms.max(0)).unwrap_or(u32::MAX));
}

/// The latency code at quantile `q` of `runs` runs; 0 without runs.
fn quantile(sketch: &[(u8, u32)], runs: u32, q: f64) -> u8 {
    if runs == 0 {
        return 0;
    }
    let rank = ((q * f64::from(runs)).ceil() as u32).max(1);
    let mut seen = 0;
    for (code, count) in sketch {
        seen += count;
        if seen >= rank {
            return *code;
        }
    }
    sketch.last().map_or(0, |(code, _)| *code)
}

impl Rollups {
    /// Resumes a target's day from what the store had (a restart within the day): its closed
    /// hours, and the first half of the current one, count on.
    pub fn resume(&mut self, id: TargetId, day: i64, hours: &[u8], now_ms: i64) {
        if codec::decode(hours).is_err() || now_ms.div_euclid(DAY_MS) != day {
            return;
        }
        let hour = now_ms.div_euclid(HOUR_MS);
        let mut live = Live::new(hour, HealthState::Probing, now_ms);
        live.closed = hours.to_vec();
        self.targets.insert(id, live);
    }

    /// Counts a target's runs, `(at_ms, quality, latency)` oldest first: the target is looked
    /// up once for them all.
    pub fn runs(
        &mut self,
        id: &TargetId,
        runs: impl IntoIterator<Item = (i64, Quality, Duration)>,
    ) -> Vec<DayRow> {
        let mut finished = Vec::new();
        let mut runs = runs.into_iter().peekable();
        let Some(&(first_ms, ..)) = runs.peek() else {
            return finished;
        };
        let live = self.live(id, first_ms, &mut finished);
        for (at_ms, quality, latency) in runs {
            live.close_to(id, at_ms, &mut finished);
            live.count(quality, latency);
        }
        finished
    }

    /// Counts a transition: the time in the state left.
    pub fn transition(&mut self, id: &TargetId, at_ms: i64, to: HealthState) -> Vec<DayRow> {
        let mut finished = Vec::new();
        let live = self.live(id, at_ms, &mut finished);
        let at = at_ms.max(live.since_ms);
        add_time(&mut live.time_ms, live.state, at - live.since_ms);
        live.state = to;
        live.since_ms = at;
        finished
    }

    /// The target's live counts at `at_ms`, its hours closed up to there first.
    fn live(&mut self, id: &TargetId, at_ms: i64, finished: &mut Vec<DayRow>) -> &mut Live {
        if !self.targets.contains_key(id) {
            // Every target starts in PROBING.
            let hour = at_ms.div_euclid(HOUR_MS);
            self.targets
                .insert(id.clone(), Live::new(hour, HealthState::Probing, at_ms));
        }
        let Some(live) = self.targets.get_mut(id) else {
            unreachable!("inserted above")
        };
        live.close_to(id, at_ms, finished);
        live
    }

    /// Closes every hour that ended by `now_ms`, forgetting the targets `keep` refuses (gone
    /// from the engine): the days finished, to write.
    pub fn close(&mut self, now_ms: i64, keep: impl Fn(&TargetId) -> bool) -> Vec<DayRow> {
        let hour = now_ms.div_euclid(HOUR_MS);
        let mut finished = Vec::new();
        self.targets.retain(|id, live| {
            if live.hour >= hour {
                return true;
            }
            while live.hour < hour {
                finished.extend(live.roll(id));
            }
            keep(id)
        });
        finished
    }

    /// Every target's day so far, its current hour counted up to `now_ms`: what a crash would
    /// otherwise lose, written every so often. The targets `keep` refuses are forgotten first.
    pub fn snapshot(&mut self, now_ms: i64, keep: impl Fn(&TargetId) -> bool) -> Vec<DayRow> {
        self.targets.retain(|id, _| keep(id));
        self.targets
            .iter()
            .map(|(id, live)| {
                (
                    live.day,
                    id.clone(),
                    codec::encode(&live.day_with_current(now_ms)),
                )
            })
            .collect()
    }

    /// The targets counted.
    pub fn ids(&self) -> Vec<TargetId> {
        self.targets.keys().cloned().collect()
    }

    /// A target's day so far, when it is counted today.
    pub fn today(&self, id: &TargetId, now_ms: i64) -> Option<Day> {
        let live = self.targets.get(id)?;
        (live.day == now_ms.div_euclid(DAY_MS)).then(|| live.day_with_current(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::codec::decode;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn runs_and_time_are_counted_per_hour_and_a_day_is_finished_at_midnight() {
        let mut r = Rollups::default();
        let t = id("db");
        let start = 10 * DAY_MS + 23 * HOUR_MS;
        assert!(r.transition(&t, start, HealthState::Up).is_empty());
        for i in 0..360 {
            let latency = Duration::from_millis(if i % 10 == 9 { 50 } else { 2 });
            let quality = if i == 0 {
                Quality::Failed
            } else {
                Quality::Good
            };
            assert!(
                r.runs(&t, [(start + i * 10_000, quality, latency)])
                    .is_empty()
            );
        }
        let _ = r.transition(&t, start + 30 * 60_000, HealthState::Down);
        let finished = r.close(start + HOUR_MS + 1, |_| true);
        assert_eq!(finished.len(), 1);
        let (day, target, blob) = &finished[0];
        assert_eq!((*day, target), (10, &t));
        let hour = decode(blob).unwrap_or([None; 24])[23].unwrap_or_default();
        assert_eq!((hour.runs, hour.failures, hour.degraded), (360, 1, 0));
        assert_eq!(hour.time_ms, [0, 1_800_000, 0, 0, 1_800_000]);
        // Within the buckets' 4%: p50 the common 2 ms, p99 the slow tenth's 50 ms.
        let near = |code: u8, ms: f64| {
            let got = codec::latency(code).map_or(0.0, |d| d.as_secs_f64() * 1e3);
            (got - ms).abs() / ms < 0.04
        };
        assert!(near(hour.latency[0], 2.0), "{:?}", hour.latency);
        assert!(near(hour.latency[2], 50.0), "{:?}", hour.latency);
        // The next day goes on in DOWN.
        let snapshot = r.snapshot(start + 2 * HOUR_MS, |_| true);
        let next = decode(&snapshot[0].2).unwrap_or([None; 24]);
        assert_eq!(next[0].map(|h| h.time_ms[4]), Some(HOUR_MS as u32));
    }

    #[test]
    fn a_restart_within_the_hour_adds_to_its_first_half() {
        let t = id("api");
        let start = 3 * DAY_MS + 5 * HOUR_MS;
        let mut before = Rollups::default();
        let _ = before.transition(&t, start, HealthState::Up);
        let _ = before.runs(
            &t,
            [(start + 1_000, Quality::Good, Duration::from_millis(1))],
        );
        let saved = before.snapshot(start + 600_000, |_| true);
        let mut after = Rollups::default();
        after.resume(t.clone(), 3, &saved[0].2, start + 900_000);
        let _ = after.runs(
            &t,
            [(start + 901_000, Quality::Degraded, Duration::from_millis(1))],
        );
        let finished = after.close(start + DAY_MS, |_| true);
        let hour = decode(&finished[0].2).unwrap_or([None; 24])[5].unwrap_or_default();
        assert_eq!((hour.runs, hour.degraded), (2, 1));
        // 10 min UP before the restart; the second half starts in PROBING (as every target
        // does) and is told nothing else; the 5 min the daemon was away count for nothing.
        assert_eq!(hour.time_ms[1], 600_000);
        assert_eq!(hour.time_ms[0], 2_700_000);
    }

    #[test]
    fn a_batch_across_an_hour_counts_each_run_in_its_own() {
        let mut r = Rollups::default();
        let t = id("web");
        let start = 2 * DAY_MS + 4 * HOUR_MS - 2_000;
        let ms = Duration::from_millis(1);
        let batch = [
            (start, Quality::Good, ms),
            (start + 1_000, Quality::Failed, ms),
            (start + 3_000, Quality::Degraded, ms),
        ];
        assert!(r.runs(&t, batch).is_empty());
        let day = r.today(&t, start + 4_000).unwrap_or([None; 24]);
        let (before, after) = (day[3].unwrap_or_default(), day[4].unwrap_or_default());
        assert_eq!((before.runs, before.failures, before.degraded), (2, 1, 0));
        assert_eq!((after.runs, after.failures, after.degraded), (1, 0, 1));
    }

    #[test]
    fn gone_targets_are_forgotten_once_their_hour_is_closed() {
        let mut r = Rollups::default();
        let _ = r.runs(&id("a"), [(0, Quality::Good, Duration::from_millis(1))]);
        let _ = r.runs(&id("b"), [(0, Quality::Good, Duration::from_millis(1))]);
        let mut ids = r.ids();
        ids.sort();
        assert_eq!(ids, [id("a"), id("b")]);
        let _ = r.close(HOUR_MS, |t| t.as_str() == "a");
        assert_eq!(r.snapshot(HOUR_MS, |_| true).len(), 1);
        assert_eq!(r.ids(), [id("a")]);
    }

    /// Closing stops at the hour `now` is in: that hour goes on counting.
    #[test]
    fn a_close_leaves_the_current_hour_open() {
        let mut r = Rollups::default();
        let t = id("db");
        let ms = Duration::from_millis(1);
        let _ = r.runs(&t, [(HOUR_MS - 1_000, Quality::Good, ms)]);
        let now = 2 * HOUR_MS + 1_000;
        let _ = r.close(now, |_| true);
        let _ = r.runs(&t, [(now, Quality::Failed, ms)]);
        let day = r.today(&t, now + 1_000).unwrap_or([None; 24]);
        let (closed, current) = (day[1].unwrap_or_default(), day[2].unwrap_or_default());
        assert_eq!((closed.runs, current.runs, current.failures), (0, 1, 1));
        assert!(day[3].is_none(), "{day:?}");
    }

    /// What the store had is resumed only for today and only when it reads: yesterday's day
    /// (a daemon down over midnight) or a damaged blob starts the day afresh.
    #[test]
    fn only_todays_readable_day_is_resumed() {
        let t = id("api");
        let today = 3 * DAY_MS + 5 * HOUR_MS;
        let mut before = Rollups::default();
        let _ = before.runs(
            &t,
            [(today - DAY_MS, Quality::Good, Duration::from_millis(1))],
        );
        let yesterday = before.snapshot(today - DAY_MS + 1_000, |_| true);
        let mut after = Rollups::default();
        after.resume(t.clone(), 2, &yesterday[0].2, today);
        assert!(
            after.today(&t, today).is_none(),
            "yesterday resumed as today"
        );
        after.resume(t.clone(), 3, b"not a day", today);
        assert!(after.today(&t, today).is_none(), "a damaged day resumed");
        assert!(after.ids().is_empty());
    }
}
