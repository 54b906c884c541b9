//! Retries for a client that balances over several members: which requests may be retried, and
//! a budget that keeps retries from multiplying load when everything is failing.
//!
//! Why a budget and not a retry count: with "retry once" every failing request becomes two, so
//! an overloaded dependency sees twice the load exactly when it can least take it, and a chain of
//! services multiplies that at each hop (a retry storm). A budget allows retries only
//! as a fraction of recent requests (10% by default, plus a small floor so a quiet client can
//! still retry), so the extra load is bounded whatever fails.
//!
//! Which requests: a retry sends the request again, to another member, so it must be safe to
//! repeat. GET, HEAD and OPTIONS are by definition; PUT and DELETE are idempotent by HTTP's
//! definition too but often are not in practice, so they (and POST, PATCH) are retried only when
//! the caller marks them with an idempotency key header.

use std::time::Duration;

use tokio::time::Instant;

/// The header that marks a request as safe to repeat.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Whether a request may be sent again: a safe method, or any method with an
/// `Idempotency-Key` header.
pub fn is_retryable<B>(request: &http::Request<B>) -> bool {
    matches!(
        *request.method(),
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    ) || request.headers().contains_key(IDEMPOTENCY_KEY)
}

/// Why a [`RetryBudget`] could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RetryBudgetError {
    /// The window is where requests are counted; it needs a length.
    #[error("window must be longer than zero")]
    Window,
    /// The ratio is a fraction of requests.
    #[error("ratio {0} is outside 0..=1")]
    Ratio(f64),
}

/// Retries allowed as a fraction of the requests of a sliding window, plus a floor per second.
///
/// The window is split into ten slots, so requests leave it a tenth of the window at a time:
/// cheap (no per-request timestamps) and smooth enough for a budget.
///
/// Why not tower's `TpsBudget`, which works the same way: it turns the ratio into a whole
/// number of requests per retry (one retry per `1 / ratio` requests, truncated), so a ratio of
/// 0.3 allows a third of the requests to be retried and 0.4 half, which is the retry storm a
/// budget is there to bound; and it takes its window in whole seconds from 1 to 60, panicking
/// outside. This budget keeps the ratio exact (300 retries per 1000 requests at 0.3, pinned by
/// a test) and turns a bad setting into an error for the configuration to report.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: u32,
    slot: Duration,
    /// Requests and retries per slot, oldest first; `start` is when the newest slot began.
    requests: [u64; SLOTS],
    retries: [u64; SLOTS],
    newest: usize,
    start: Instant,
}

const SLOTS: usize = 10;

impl RetryBudget {
    /// The usual window: 10 s.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
    /// The usual ratio: one retry per ten requests.
    pub const DEFAULT_RATIO: f64 = 0.1;
    /// The usual floor: one retry per second.
    pub const DEFAULT_MIN_PER_SECOND: u32 = 1;

    /// A budget allowing `ratio` retries per request over `window`, and at least
    /// `min_per_second` retries per second of the window whatever the traffic (the `DEFAULT_*`
    /// constants are the usual values).
    ///
    /// # Errors
    /// A zero `window`, or a `ratio` outside `0..=1` (or NaN).
    pub fn try_new(
        window: Duration,
        ratio: f64,
        min_per_second: u32,
        now: Instant,
    ) -> Result<Self, RetryBudgetError> {
        if window.is_zero() {
            return Err(RetryBudgetError::Window);
        }
        if !(0.0..=1.0).contains(&ratio) {
            return Err(RetryBudgetError::Ratio(ratio));
        }
        Ok(Self {
            ratio,
            min_per_second,
            slot: (window / SLOTS as u32).max(Duration::from_millis(1)),
            requests: [0; SLOTS],
            retries: [0; SLOTS],
            newest: 0,
            start: now,
        })
    }

    /// Counts a request (a first attempt).
    pub fn deposit(&mut self, now: Instant) {
        self.advance(now);
        self.requests[self.newest] += 1;
    }

    /// Takes a retry from the budget if there is one left.
    pub fn withdraw(&mut self, now: Instant) -> bool {
        self.advance(now);
        let requests: u64 = self.requests.iter().sum();
        let retries: u64 = self.retries.iter().sum();
        let window_secs = (self.slot * SLOTS as u32).as_secs_f64();
        let allowed =
            (requests as f64 * self.ratio).max(f64::from(self.min_per_second) * window_secs);
        if (retries as f64) < allowed.floor() {
            self.retries[self.newest] += 1;
            true
        } else {
            false
        }
    }

    /// Moves the window to `now`, emptying the slots that left it.
    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        let slots = (elapsed.as_nanos() / self.slot.as_nanos()).min(SLOTS as u128) as usize;
        for _ in 0..slots {
            self.newest = (self.newest + 1) % SLOTS;
            self.requests[self.newest] = 0;
            self.retries[self.newest] = 0;
        }
        if slots == SLOTS {
            self.start = now;
        } else {
            self.start += self.slot * slots as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: http::Method, key: bool) -> http::Request<()> {
        let mut builder = http::Request::builder().method(method).uri("/orders");
        if key {
            builder = builder.header("Idempotency-Key", "k-1");
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn only_safe_or_keyed_requests_are_retried() {
        assert!(is_retryable(&request(http::Method::GET, false)));
        assert!(is_retryable(&request(http::Method::HEAD, false)));
        assert!(is_retryable(&request(http::Method::OPTIONS, false)));
        assert!(!is_retryable(&request(http::Method::POST, false)));
        assert!(!is_retryable(&request(http::Method::PUT, false)));
        assert!(is_retryable(&request(http::Method::POST, true)));
    }

    #[test]
    fn budgets_are_validated() {
        let now = Instant::now();
        assert_eq!(
            RetryBudget::try_new(Duration::ZERO, 0.1, 1, now).unwrap_err(),
            RetryBudgetError::Window
        );
        assert!(matches!(
            RetryBudget::try_new(Duration::from_secs(10), f64::NAN, 1, now),
            Err(RetryBudgetError::Ratio(_))
        ));
    }

    #[test]
    fn retries_are_a_fraction_of_requests_with_a_floor() {
        let start = Instant::now();
        let mut budget = RetryBudget::try_new(Duration::from_secs(10), 0.1, 0, start).unwrap();
        assert!(!budget.withdraw(start), "no requests, no floor: nothing");
        for _ in 0..100 {
            budget.deposit(start);
        }
        let granted = (0..50).filter(|_| budget.withdraw(start)).count();
        assert_eq!(granted, 10, "10% of 100 requests");

        // A floor of 1 per second gives a quiet client 10 retries per 10 s window.
        let mut quiet = RetryBudget::try_new(
            RetryBudget::DEFAULT_WINDOW,
            RetryBudget::DEFAULT_RATIO,
            RetryBudget::DEFAULT_MIN_PER_SECOND,
            start,
        )
        .unwrap();
        assert_eq!((0..50).filter(|_| quiet.withdraw(start)).count(), 10);
    }

    #[test]
    fn a_ratio_is_kept_exactly() {
        let now = Instant::now();
        let mut budget = RetryBudget::try_new(RetryBudget::DEFAULT_WINDOW, 0.3, 0, now).unwrap();
        for _ in 0..1000 {
            budget.deposit(now);
        }
        let retries = (0..1000).filter(|_| budget.withdraw(now)).count();
        assert_eq!(retries, 300);
    }

    #[test]
    fn requests_and_retries_leave_the_window() {
        let start = Instant::now();
        let mut budget = RetryBudget::try_new(Duration::from_secs(10), 0.1, 0, start).unwrap();
        for _ in 0..100 {
            budget.deposit(start);
        }
        assert_eq!((0..20).filter(|_| budget.withdraw(start)).count(), 10);
        // 5 s later the requests still count and the budget is spent.
        let later = start + Duration::from_secs(5);
        assert!(!budget.withdraw(later));
        // After the window the old requests and retries are gone: new ones count afresh.
        let after = start + Duration::from_secs(11);
        assert!(!budget.withdraw(after));
        for _ in 0..20 {
            budget.deposit(after);
        }
        assert_eq!((0..5).filter(|_| budget.withdraw(after)).count(), 2);
    }
}
