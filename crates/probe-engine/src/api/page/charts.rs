//! The two small drawings of a row, inline SVG from the history's hourly rollups: the daily
//! uptime bar and the latency sparkline.
//!
//! Both are drawn to stay small, since a page has 100 of each: the bar is one path per colour
//! (a day is `M<x> 0h2v14h-2z`), its title names the worst days, and a day without a record
//! has no column: the track shows through.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use probe::health::HealthState;

use super::super::badges::uptime_look;
use super::super::draw::escape;
use super::model::BAR_DAYS;
use crate::history::codec::{self, Day};
use crate::history::rollup::{DAY_MS, HOUR_MS};

/// Pixels from one day's rect to the next (the stylesheet makes each 2 wide).
const DAY_STEP: i64 = 3;

/// Hours in the sparkline, the current one included.
const SPARK_HOURS: i64 = 48;

/// Pixels from one hour to the next, and the sparkline's height.
const SPARK_STEP: i64 = 2;
const SPARK_HEIGHT: f64 = 20.0;

/// The daily uptime bar of the `BAR_DAYS` up to `today` (days since the epoch): a 2-pixel
/// column a day with a record, one path per colour, and the worst days named in the bar's
/// title. A row's bar stays about a kilobyte whatever its days were, so a page of 100 rows of
/// troubled targets stays far under the page's weight limit.
pub(super) fn days_bar(out: &mut String, days: &[(i64, Day)], today: i64) {
    let first = today - (BAR_DAYS - 1);
    // One path a colour, by the state the colour is.
    let mut paths: [String; 5] = Default::default();
    let mut worst: Vec<(f64, i64)> = Vec::new();
    let mut recorded = 0;
    for (day, hours) in days.iter().filter(|(d, _)| (first..=today).contains(d)) {
        let (up, down) = hours
            .iter()
            .flatten()
            .map(codec::Hour::up_down_ms)
            .fold((0, 0), |(u, d), (hu, hd)| (u + hu, d + hd));
        if up + down == 0 {
            continue;
        }
        recorded += 1;
        let share = up as f64 / (up + down) as f64;
        let (_, tone) = uptime_look(Some(share));
        if tone != HealthState::Up {
            worst.push((share, *day));
        }
        let d = &mut paths[codec::state_index(tone)];
        let _ = write!(d, "M{} 0h2v14h-2z", (day - first) * DAY_STEP);
    }
    worst.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let width = BAR_DAYS * DAY_STEP;
    let mut title = if recorded == 0 {
        format!("uptime by day: no record in the last {BAR_DAYS} days")
    } else {
        format!(
            "uptime by day, {} to {}: {recorded} days recorded, {} under 99.9%",
            date(first),
            date(today),
            worst.len()
        )
    };
    for (n, (share, day)) in worst.iter().take(WORST_DAYS).enumerate() {
        let (words, _) = uptime_look(Some(*share));
        let _ = write!(
            title,
            "{} {}: {words}",
            if n == 0 { ";" } else { "," },
            date(*day)
        );
    }
    let _ = write!(
        out,
        concat!(
            r#"<svg class="days" width="{w}" height="14" viewBox="0 0 {w} 14" role="img" aria-label="{t}">"#,
            r#"<title>{t}</title><rect class="track" width="{w}" height="14"/>"#,
        ),
        w = width,
        t = escape(&title),
    );
    for (tone, d) in codec::STATES
        .iter()
        .zip(&paths)
        .filter(|(_, d)| !d.is_empty())
    {
        let _ = write!(out, r#"<path class="s-{}" d="{d}"/>"#, tone.as_str());
    }
    out.push_str("</svg>");
}

/// How many of the worst days a bar's title names.
const WORST_DAYS: usize = 5;

/// The p50 latency of each of the last `SPARK_HOURS` hours up to `now_ms`, as a line (broken
/// where an hour had no runs), scaled to its own lowest and highest; a dash with fewer than two
/// hours of runs.
pub(super) fn sparkline(out: &mut String, days: &[(i64, Day)], now_ms: i64) {
    let last = now_ms.div_euclid(HOUR_MS);
    let p50: Vec<Option<f64>> = (last - (SPARK_HOURS - 1)..=last)
        .map(|hour| {
            let (day, of_day) = (hour.div_euclid(24), hour.rem_euclid(24));
            let (_, hours) = days.iter().find(|(d, _)| *d == day)?;
            let h = hours[usize::try_from(of_day).ok()?]?;
            codec::latency(h.latency[0]).map(|d| d.as_secs_f64() * 1e3)
        })
        .collect();
    let known: Vec<f64> = p50.iter().flatten().copied().collect();
    let (Some(low), Some(high)) = (
        known.iter().copied().reduce(f64::min),
        known.iter().copied().reduce(f64::max),
    ) else {
        out.push_str(
            r#"<span class="none" title="no runs recorded in the last 48 hours">–</span>"#,
        );
        return;
    };
    if known.len() < 2 {
        let _ = write!(out, "{}", millis(low));
        return;
    }
    let span = high - low;
    let y = |v: f64| {
        if span > 0.0 {
            1.0 + (SPARK_HEIGHT - 2.0) * (high - v) / span
        } else {
            SPARK_HEIGHT / 2.0
        }
    };
    let mut path = String::new();
    let mut drawing = false;
    for (i, value) in p50.iter().enumerate() {
        let x = i64::try_from(i).unwrap_or(0) * SPARK_STEP;
        match value {
            Some(v) => {
                let _ = write!(path, "{}{x} {:.1}", if drawing { 'L' } else { 'M' }, y(*v));
                drawing = true;
            }
            None => drawing = false,
        }
    }
    let latest = known.last().copied().unwrap_or(low);
    let title = format!(
        "p50 latency by hour, last {SPARK_HOURS} h: {} to {}, latest {}",
        millis(low),
        millis(high),
        millis(latest)
    );
    let _ = write!(
        out,
        concat!(
            r#"<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}">"#,
            r#"<title>{t}</title><path d="{d}"/></svg>"#,
        ),
        w = (SPARK_HOURS - 1) * SPARK_STEP,
        h = SPARK_HEIGHT,
        t = escape(&title),
        d = path,
    );
}

/// A latency in milliseconds, to about three figures.
fn millis(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// A day since the epoch, as `YYYY-MM-DD`.
fn date(day: i64) -> String {
    let ms = u64::try_from(day * DAY_MS).unwrap_or(0);
    let text = humantime::format_rfc3339(UNIX_EPOCH + Duration::from_millis(ms)).to_string();
    text.get(..10).unwrap_or(&text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::codec::Hour;

    fn hour(up_ms: u32, down_ms: u32, p50: Duration) -> Option<Hour> {
        Some(Hour {
            runs: 10,
            latency: [codec::code(p50), 0, 0],
            time_ms: [0, up_ms, 0, 0, down_ms],
            ..Hour::default()
        })
    }

    #[test]
    fn days_are_columns_by_colour_and_the_worst_are_named() {
        let today = 20_000;
        let mut good: Day = [None; 24];
        good[0] = hour(3_600_000, 0, Duration::from_millis(2));
        let mut bad = good;
        bad[1] = hour(0, 3_600_000, Duration::from_millis(2));
        let mut out = String::new();
        days_bar(&mut out, &[(today - 1, good), (today, bad)], today);
        let doc = roxmltree::Document::parse(&out).unwrap();
        let paths: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("path"))
            .map(|n| (n.attribute("class").unwrap(), n.attribute("d").unwrap()))
            .collect();
        assert_eq!(
            paths,
            [("s-UP", "M264 0h2v14h-2z"), ("s-DOWN", "M267 0h2v14h-2z")],
            "{out}"
        );
        let title = doc.descendants().find(|n| n.has_tag_name("title")).unwrap();
        assert!(
            title
                .text()
                .unwrap()
                .ends_with("1 under 99.9%; 2024-10-04: 50.00%"),
            "{out}"
        );
    }

    #[test]
    fn a_bar_of_ninety_bad_days_stays_small() {
        let today = 20_000;
        let mut bad: Day = [None; 24];
        bad[0] = hour(3_000_000, 600_000, Duration::from_millis(2));
        let days: Vec<(i64, Day)> = (0..BAR_DAYS).map(|d| (today - d, bad)).collect();
        let mut out = String::new();
        days_bar(&mut out, &days, today);
        assert!(out.len() < 2_000, "{} bytes: {out}", out.len());
    }

    #[test]
    fn the_sparkline_breaks_where_no_runs_were() {
        let now = 20_000 * DAY_MS + 5 * HOUR_MS;
        let mut day: Day = [None; 24];
        day[2] = hour(1, 0, Duration::from_millis(2));
        day[3] = hour(1, 0, Duration::from_millis(4));
        day[5] = hour(1, 0, Duration::from_millis(3));
        let mut out = String::new();
        sparkline(&mut out, &[(20_000, day)], now);
        let doc = roxmltree::Document::parse(&out).unwrap();
        let d = doc
            .descendants()
            .find(|n| n.has_tag_name("path"))
            .and_then(|n| n.attribute("d"))
            .unwrap();
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(d.matches('L').count(), 1, "{d}");
        let mut none = String::new();
        sparkline(&mut none, &[], now);
        assert!(none.contains('–'));
    }
}
