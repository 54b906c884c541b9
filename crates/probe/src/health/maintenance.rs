//! Maintenance: time during which a target is known to be unavailable on purpose.
//!
//! A target in maintenance keeps being probed (its results stay visible) but its state stays
//! MAINTENANCE and it does not count against readiness. Maintenance comes from two places:
//! - an operator, for a duration (`Engine::start_maintenance`), until it expires or is ended;
//! - windows declared with the target ([`MaintenanceWindow`]): once at a given time, or daily.
//!
//! Windows are wall-clock times (UTC), since that is how people plan them; they take effect at
//! the target's next probe run.

use std::time::{Duration, SystemTime};

/// When a declared window starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowStart {
    /// Once, at this instant.
    Once(SystemTime),
    /// Every day, this long after midnight UTC.
    Daily(Duration),
}

/// A declared maintenance window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaintenanceWindow {
    /// When it starts.
    pub start: WindowStart,
    /// How long it lasts. At most a day for daily windows.
    pub duration: Duration,
}

/// Why a [`MaintenanceWindow`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// A window must last.
    #[error("maintenance duration must be greater than zero")]
    ZeroDuration,
    /// A daily window longer than a day would never end.
    #[error("a daily maintenance window lasts at most 24h")]
    DailyTooLong,
    /// The time of day is past midnight.
    #[error("time of day must be before 24:00")]
    TimeOfDay,
}

const DAY: Duration = Duration::from_secs(86_400);

impl MaintenanceWindow {
    /// Builds a window.
    ///
    /// # Errors
    /// A zero duration, a daily window over 24h or a time of day at or after 24:00.
    pub fn try_new(start: WindowStart, duration: Duration) -> Result<Self, WindowError> {
        if duration.is_zero() {
            return Err(WindowError::ZeroDuration);
        }
        if let WindowStart::Daily(offset) = start {
            if offset >= DAY {
                return Err(WindowError::TimeOfDay);
            }
            if duration > DAY {
                return Err(WindowError::DailyTooLong);
            }
        }
        Ok(Self { start, duration })
    }

    /// If the window covers `now`, when it ends.
    pub fn active_until(&self, now: SystemTime) -> Option<SystemTime> {
        match self.start {
            WindowStart::Once(start) => {
                let end = start + self.duration;
                (start <= now && now < end).then_some(end)
            }
            WindowStart::Daily(offset) => {
                let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH).ok()?;
                let midnight = SystemTime::UNIX_EPOCH
                    + Duration::from_secs(since_epoch.as_secs() / DAY.as_secs() * DAY.as_secs());
                let today = midnight + offset;
                // Today's window, or yesterday's if it runs past midnight.
                [Some(today), today.checked_sub(DAY)]
                    .into_iter()
                    .flatten()
                    .map(|start| (start, start + self.duration))
                    .find(|(start, end)| *start <= now && now < *end)
                    .map(|(_, end)| end)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn once_windows_cover_their_span_only() {
        let w =
            MaintenanceWindow::try_new(WindowStart::Once(at(1_000_000)), Duration::from_secs(3600))
                .unwrap();
        assert_eq!(w.active_until(at(999_999)), None);
        assert_eq!(w.active_until(at(1_000_000)), Some(at(1_003_600)));
        assert_eq!(w.active_until(at(1_003_599)), Some(at(1_003_600)));
        assert_eq!(w.active_until(at(1_003_600)), None);
    }

    #[test]
    fn daily_windows_recur_and_cross_midnight() {
        let day = 86_400;
        // 23:30 for one hour.
        let w = MaintenanceWindow::try_new(
            WindowStart::Daily(Duration::from_secs(23 * 3600 + 1800)),
            Duration::from_secs(3600),
        )
        .unwrap();
        let d = 20_000 * day;
        assert_eq!(w.active_until(at(d + 23 * 3600)), None);
        assert_eq!(
            w.active_until(at(d + 23 * 3600 + 1800)),
            Some(at(d + day + 1800))
        );
        // 00:10 the next day is still inside yesterday's window.
        assert_eq!(w.active_until(at(d + day + 600)), Some(at(d + day + 1800)));
        assert_eq!(w.active_until(at(d + day + 1800)), None);
        // And again the day after.
        assert!(w.active_until(at(d + 2 * day + 23 * 3600 + 1801)).is_some());
    }

    #[test]
    fn invalid_windows_are_rejected() {
        assert_eq!(
            MaintenanceWindow::try_new(WindowStart::Daily(DAY), Duration::from_secs(1)),
            Err(WindowError::TimeOfDay)
        );
        assert_eq!(
            MaintenanceWindow::try_new(WindowStart::Daily(Duration::ZERO), DAY * 2),
            Err(WindowError::DailyTooLong)
        );
        assert_eq!(
            MaintenanceWindow::try_new(WindowStart::Once(at(0)), Duration::ZERO),
            Err(WindowError::ZeroDuration)
        );
    }
}
