use std::num::NonZeroUsize;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::passive::call::{Call, CallOutcome};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ok() -> Call {
    Call::http(200, ms(10))
}

fn failed() -> Call {
    Call::http(503, ms(10))
}

fn slow() -> Call {
    Call::http(200, secs(3))
}

/// A config from the defaults with the given changes; panics on an invalid one (tests only).
fn config(f: impl FnOnce(BreakerConfigBuilder) -> BreakerConfigBuilder) -> BreakerConfig {
    f(BreakerConfig::builder())
        .build()
        .expect("valid test config")
}

/// Small numbers so the scenarios stay readable: judged from 4 calls, 2 trial calls.
fn small() -> BreakerConfig {
    config(|b| b.minimum_calls(4).half_open_calls(2))
}

/// Records `calls` at `now`, each through a permit, and returns the transitions they caused.
fn feed(breaker: &mut CircuitBreaker, calls: &[Call], now: Instant) -> Vec<CircuitTransition> {
    let mut transitions = Vec::new();
    for call in calls {
        let permit = breaker.try_acquire(now).expect("permitted");
        transitions.extend(permit.transition());
        transitions.extend(breaker.record(call, now));
    }
    transitions
}

fn transition(from: CircuitState, to: CircuitState, cause: CircuitCause) -> CircuitTransition {
    CircuitTransition { from, to, cause }
}

/// A breaker of `config` opened at `t0` by failures.
fn opened(config: BreakerConfig, t0: Instant) -> CircuitBreaker {
    let mut b = CircuitBreaker::new(config);
    let n = config.minimum_calls() as usize;
    feed(&mut b, &vec![failed(); n], t0);
    assert_eq!(b.state(), CircuitState::Open);
    b
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = BreakerConfig::default();
    assert_eq!(BreakerConfig::builder().build(), Ok(c));
    assert_eq!(c.window(), Window::Time(secs(60)));
    assert_eq!(c.failure_rate_threshold(), 0.5);
    assert_eq!(c.slow_call_duration(), secs(2));
    assert_eq!(c.slow_call_rate_threshold(), 1.0);
    assert_eq!(c.minimum_calls(), 20);
    assert_eq!(c.open_for(), secs(60));
    assert_eq!(c.max_open_for(), secs(600));
    assert_eq!(c.half_open_calls(), 10);
}

#[test]
fn rejects_invalid_configs() {
    use BreakerConfigError::*;
    let build =
        |f: fn(BreakerConfigBuilder) -> BreakerConfigBuilder| f(BreakerConfig::builder()).build();
    let count = |n: usize| Window::Count(NonZeroUsize::new(n).expect("non-zero"));
    assert_eq!(
        build(|b| b.window(Window::Time(ms(1500)))),
        Err(TimeWindow(ms(1500)))
    );
    assert_eq!(
        build(|b| b.window(Window::Time(Duration::ZERO))),
        Err(TimeWindow(Duration::ZERO))
    );
    assert_eq!(
        build(|b| b.window(Window::Time(secs(3601)))),
        Err(TimeWindow(secs(3601)))
    );
    assert!(build(|b| b.window(Window::Time(secs(3600)))).is_ok());
    assert_eq!(
        build(|b| b.window(Window::Count(
            NonZeroUsize::new(MAX_COUNT_WINDOW + 1).expect("non-zero")
        ))),
        Err(CountWindowTooLarge(MAX_COUNT_WINDOW + 1))
    );
    assert_eq!(
        build(|b| b.window(Window::Count(NonZeroUsize::MIN.saturating_add(9)))),
        Err(MinimumCallsAboveWindow {
            minimum_calls: 20,
            window: 10
        })
    );
    assert!(
        BreakerConfig::builder()
            .window(count(10))
            .minimum_calls(10)
            .build()
            .is_ok()
    );
    for rate in [0.0, -0.1, 1.01, f64::NAN] {
        assert!(matches!(
            BreakerConfig::builder()
                .failure_rate_threshold(rate)
                .build(),
            Err(FailureRateOutOfRange(_))
        ));
        assert!(matches!(
            BreakerConfig::builder()
                .slow_call_rate_threshold(rate)
                .build(),
            Err(SlowCallRateOutOfRange(_))
        ));
    }
    assert_eq!(
        build(|b| b.slow_call_duration(Duration::ZERO)),
        Err(ZeroSlowCallDuration)
    );
    assert_eq!(build(|b| b.minimum_calls(0)), Err(ZeroMinimumCalls));
    assert_eq!(build(|b| b.open_for(Duration::ZERO)), Err(ZeroOpenFor));
    assert_eq!(
        build(|b| b.open_for(secs(700))),
        Err(OpenForAboveMax {
            open_for: secs(700),
            max_open_for: secs(600)
        })
    );
    assert_eq!(build(|b| b.half_open_calls(0)), Err(ZeroHalfOpenCalls));
}

#[test]
fn state_names_and_gauge_codes() {
    use CircuitState::*;
    let all = [Closed, Open, HalfOpen, ForcedOpen, Disabled];
    let names: Vec<_> = all.iter().map(|s| s.as_str()).collect();
    let codes: Vec<_> = all.iter().map(|s| s.code()).collect();
    assert_eq!(
        names,
        ["closed", "open", "half_open", "forced_open", "disabled"]
    );
    assert_eq!(codes, [0, 1, 2, 3, 4]);
    assert_eq!(HalfOpen.to_string(), "half_open");
}

#[test]
fn opens_when_the_failure_rate_reaches_the_threshold() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    assert!(feed(&mut b, &[ok(), ok(), failed()], t0).is_empty());
    // 2 failures out of 4: exactly the 0.5 threshold opens (`>=`, as resilience4j).
    assert_eq!(
        feed(&mut b, &[failed()], t0),
        [transition(
            CircuitState::Closed,
            CircuitState::Open,
            CircuitCause::FailureRate
        )]
    );
    let s = b.snapshot(t0);
    assert_eq!((s.calls, s.failures, s.failure_rate), (4, 2, 0.5));
    assert_eq!(s.open_until, Some(t0 + secs(60)));
}

#[test]
fn stays_closed_under_the_failure_rate() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    let calls = [ok(), failed(), ok(), ok(), failed(), ok(), ok()];
    assert!(feed(&mut b, &calls, t0).is_empty());
    assert_eq!(b.state(), CircuitState::Closed);
    let s = b.snapshot(t0);
    assert_eq!((s.calls, s.failures), (7, 2));
}

#[test]
fn opens_when_the_slow_call_rate_reaches_the_threshold() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(|b| b.minimum_calls(4).slow_call_rate_threshold(0.5)));
    // Exactly 2 s is not slow; only longer calls are.
    let at_limit = Call::http(200, secs(2));
    assert!(feed(&mut b, &[at_limit, slow(), at_limit], t0).is_empty());
    assert_eq!(
        feed(&mut b, &[slow()], t0),
        [transition(
            CircuitState::Closed,
            CircuitState::Open,
            CircuitCause::SlowCallRate
        )]
    );
    assert_eq!(b.snapshot(t0).slow_call_rate, 0.5);
}

#[test]
fn default_slow_threshold_needs_every_call_slow() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    assert!(feed(&mut b, &[slow(), slow(), slow(), ok()], t0).is_empty());
    assert_eq!(b.state(), CircuitState::Closed);
    let mut b = CircuitBreaker::new(small());
    let t = feed(&mut b, &[slow(), slow(), slow(), slow()], t0);
    assert_eq!(t.last().map(|t| t.cause), Some(CircuitCause::SlowCallRate));
}

#[test]
fn a_slow_failure_counts_for_both_rates() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    b.record(&Call::http(504, secs(5)), t0);
    let s = b.snapshot(t0);
    assert_eq!((s.calls, s.failures, s.slow_calls), (1, 1, 1));
}

#[test]
fn not_judged_before_minimum_calls() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(BreakerConfig::default());
    assert!(feed(&mut b, &vec![failed(); 19], t0).is_empty());
    assert_eq!(b.state(), CircuitState::Closed);
    assert_eq!(b.snapshot(t0).failure_rate, 1.0);
    assert_eq!(feed(&mut b, &[failed()], t0).len(), 1);
    assert_eq!(b.state(), CircuitState::Open);
}

#[test]
fn open_rejects_until_open_for_then_turns_half_open() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    assert_eq!(
        b.try_acquire(t0 + secs(59)),
        Err(Rejected {
            state: CircuitState::Open,
            retry_after: Some(secs(1))
        })
    );
    // A late outcome of a call permitted before the circuit opened changes nothing.
    assert_eq!(b.record(&failed(), t0 + secs(59)), None);
    let permit = b.try_acquire(t0 + secs(60)).expect("the first trial call");
    assert_eq!(
        permit.transition(),
        Some(transition(
            CircuitState::Open,
            CircuitState::HalfOpen,
            CircuitCause::OpenElapsed
        ))
    );
    assert_eq!(b.state(), CircuitState::HalfOpen);
    let again = b.try_acquire(t0 + secs(60)).expect("the second trial call");
    assert_eq!(again.transition(), None);
}

#[test]
fn advance_turns_half_open_without_a_call() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    assert_eq!(b.advance(t0 + secs(30)), None);
    assert_eq!(
        b.advance(t0 + secs(60)).map(|t| t.to),
        Some(CircuitState::HalfOpen)
    );
    assert_eq!(b.advance(t0 + secs(61)), None);
    assert_eq!(b.snapshot(t0 + secs(61)).calls, 0);
}

#[test]
fn half_open_permits_only_its_trial_calls() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    let t1 = t0 + secs(60);
    let _first = b.try_acquire(t1).expect("trial 1");
    let _second = b.try_acquire(t1).expect("trial 2");
    assert_eq!(
        b.try_acquire(t1),
        Err(Rejected {
            state: CircuitState::HalfOpen,
            retry_after: None
        })
    );
    // An outcome frees no slot: the trial calls are counted in all, not in flight.
    b.record(&ok(), t1);
    assert!(b.try_acquire(t1).is_err());
}

#[test]
fn half_open_closes_when_the_trials_pass() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    let t1 = t0 + secs(60);
    // 1 failure already makes 1 of the 2 trial calls, the 0.5 threshold: that reopens at once.
    let t = feed(&mut b, &[failed()], t1);
    assert_eq!(t.last().map(|t| t.to), Some(CircuitState::Open));
    // Passing trials after the doubled open time close it.
    let t2 = t1 + secs(120);
    let t = feed(&mut b, &[ok(), ok()], t2);
    assert_eq!(
        t,
        [
            transition(
                CircuitState::Open,
                CircuitState::HalfOpen,
                CircuitCause::OpenElapsed
            ),
            transition(
                CircuitState::HalfOpen,
                CircuitState::Closed,
                CircuitCause::TrialsPassed
            ),
        ]
    );
    let s = b.snapshot(t2);
    assert_eq!((s.state, s.calls, s.reopens), (CircuitState::Closed, 0, 0));
}

#[test]
fn half_open_reopens_as_soon_as_failures_decide() {
    let t0 = Instant::now();
    let cfg = config(|b| b.minimum_calls(4).half_open_calls(10));
    let mut b = opened(cfg, t0);
    let t1 = t0 + secs(60);
    let permits: Vec<_> = (0..10).map(|_| b.try_acquire(t1).expect("trial")).collect();
    assert_eq!(permits.len(), 10);
    for _ in 0..4 {
        assert_eq!(b.record(&failed(), t1), None);
    }
    // The fifth failure makes 5 of 10 whatever the other five do.
    assert_eq!(
        b.record(&failed(), t1),
        Some(transition(
            CircuitState::HalfOpen,
            CircuitState::Open,
            CircuitCause::FailureRate
        ))
    );
    let s = b.snapshot(t1);
    assert_eq!((s.calls, s.failures, s.reopens), (5, 5, 1));
}

#[test]
fn half_open_reopens_on_slow_trials() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    let t = feed(&mut b, &[slow(), slow()], t0 + secs(60));
    assert_eq!(t.last().map(|t| t.cause), Some(CircuitCause::SlowCallRate));
    assert_eq!(b.state(), CircuitState::Open);
}

#[test]
fn reopens_double_open_for_up_to_the_cap() {
    let t0 = Instant::now();
    let cfg = config(|b| {
        b.minimum_calls(4)
            .half_open_calls(1)
            .open_for(secs(60))
            .max_open_for(secs(300))
    });
    let mut b = opened(cfg, t0);
    let mut now = t0;
    let mut open_times = Vec::new();
    for _ in 0..5 {
        let until = b.snapshot(now).open_until.expect("open");
        open_times.push(until - now);
        now = until;
        feed(&mut b, &[failed()], now);
    }
    assert_eq!(
        open_times,
        [secs(60), secs(120), secs(240), secs(300), secs(300)]
    );
    assert_eq!(cfg.open_duration(u32::MAX), secs(300));
}

#[test]
fn closing_resets_the_open_time() {
    let t0 = Instant::now();
    let mut b = opened(config(|b| b.minimum_calls(4).half_open_calls(1)), t0);
    let t1 = t0 + secs(60);
    feed(&mut b, &[failed()], t1);
    let t2 = t1 + secs(120);
    feed(&mut b, &[ok()], t2);
    assert_eq!(b.state(), CircuitState::Closed);
    feed(&mut b, &[failed(); 4], t2);
    assert_eq!(b.snapshot(t2).open_until, Some(t2 + secs(60)));
}

#[test]
fn release_gives_a_trial_slot_back() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    let t1 = t0 + secs(60);
    let first = b.try_acquire(t1).expect("trial 1");
    let _second = b.try_acquire(t1).expect("trial 2");
    assert!(b.try_acquire(t1).is_err());
    b.release(first);
    let third = b.try_acquire(t1).expect("the released slot");
    drop(third);
    assert!(b.try_acquire(t1).is_err());
}

#[test]
fn release_of_an_older_state_permit_does_nothing() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    let from_closed = b.try_acquire(t0).expect("closed permits");
    feed(&mut b, &[failed(); 4], t0);
    let t1 = t0 + secs(60);
    let _one = b.try_acquire(t1).expect("trial 1");
    let _two = b.try_acquire(t1).expect("trial 2");
    b.release(from_closed);
    assert!(b.try_acquire(t1).is_err());
}

#[test]
fn half_open_ignores_outcomes_beyond_its_permits() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    let t1 = t0 + secs(60);
    let _trial = b.try_acquire(t1).expect("trial 1");
    // One permit given: a second outcome came from a call without a trial permit.
    assert_eq!(b.record(&ok(), t1), None);
    assert_eq!(b.record(&failed(), t1), None);
    let s = b.snapshot(t1);
    assert_eq!(
        (s.state, s.calls, s.failures),
        (CircuitState::HalfOpen, 1, 0)
    );
}

#[test]
fn time_window_forgets_calls_older_than_the_window() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(|b| {
        b.window(Window::Time(secs(10))).minimum_calls(4)
    }));
    feed(&mut b, &[failed(), failed(), failed()], t0);
    assert_eq!(b.snapshot(t0 + ms(9_999)).calls, 3);
    // Second 10 is a new bucket in the place of second 0.
    assert_eq!(b.snapshot(t0 + secs(10)).calls, 0);
    // Three old failures gone: one more failure among 4 fresh calls stays under 0.5.
    assert!(feed(&mut b, &[failed(), ok(), ok(), ok()], t0 + secs(10)).is_empty());
    let s = b.snapshot(t0 + secs(10));
    assert_eq!((s.calls, s.failures), (4, 1));
}

#[test]
fn time_window_slides_a_bucket_per_second() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(config(|b| b.window(Window::Time(secs(3)))));
    for s in 0..3 {
        b.record(&ok(), t0 + secs(s));
    }
    assert_eq!(b.snapshot(t0 + ms(2_500)).calls, 3);
    assert_eq!(b.snapshot(t0 + secs(3)).calls, 2);
    assert_eq!(b.snapshot(t0 + secs(4)).calls, 1);
    b.record(&failed(), t0 + secs(4));
    let s = b.snapshot(t0 + secs(4));
    assert_eq!((s.calls, s.failures), (2, 1));
    // A gap longer than the window empties it.
    b.record(&ok(), t0 + secs(100));
    assert_eq!(b.snapshot(t0 + secs(100)).calls, 1);
    // A `now` before the latest one counts in the latest second.
    b.record(&ok(), t0 + secs(50));
    assert_eq!(b.snapshot(t0 + secs(100)).calls, 2);
}

#[test]
fn count_window_keeps_the_last_n_calls() {
    let t0 = Instant::now();
    let window = Window::Count(NonZeroUsize::MIN.saturating_add(3));
    let mut b = CircuitBreaker::new(config(|b| b.window(window).minimum_calls(4)));
    feed(&mut b, &[failed(), ok(), ok(), ok()], t0);
    // Ages do not matter, only the last 4 calls.
    feed(&mut b, &[ok(), ok()], t0 + secs(3600));
    let s = b.snapshot(t0 + secs(7200));
    assert_eq!((s.calls, s.failures), (4, 0));
    let t = feed(&mut b, &[failed(), failed()], t0 + secs(7200));
    assert_eq!(t.last().map(|t| t.cause), Some(CircuitCause::FailureRate));
}

#[test]
fn forced_open_rejects_until_reset() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    assert_eq!(
        b.force_open(),
        Some(transition(
            CircuitState::Closed,
            CircuitState::ForcedOpen,
            CircuitCause::ForcedOpen
        ))
    );
    assert_eq!(b.force_open(), None);
    let rejected = b.try_acquire(t0 + secs(3600)).expect_err("forced open");
    assert_eq!(rejected.state, CircuitState::ForcedOpen);
    // Late outcomes are still recorded, but open nothing.
    assert_eq!(b.record(&failed(), t0), None);
    assert_eq!(b.snapshot(t0).calls, 1);
    assert_eq!(
        b.reset(),
        Some(transition(
            CircuitState::ForcedOpen,
            CircuitState::Closed,
            CircuitCause::Reset
        ))
    );
    assert!(b.try_acquire(t0).is_ok());
}

#[test]
fn disabled_permits_and_records_but_never_opens() {
    let t0 = Instant::now();
    let mut b = opened(small(), t0);
    assert_eq!(
        b.disable(),
        Some(transition(
            CircuitState::Open,
            CircuitState::Disabled,
            CircuitCause::Disabled
        ))
    );
    assert!(feed(&mut b, &vec![failed(); 50], t0).is_empty());
    let s = b.snapshot(t0);
    assert_eq!(
        (s.state, s.calls, s.failure_rate),
        (CircuitState::Disabled, 50, 1.0)
    );
    assert_eq!(b.state().code(), 4);
}

#[test]
fn reset_closes_with_an_empty_window() {
    let t0 = Instant::now();
    let mut b = CircuitBreaker::new(small());
    feed(&mut b, &[failed(), failed(), ok()], t0);
    assert_eq!(b.reset(), None);
    assert_eq!(b.snapshot(t0).calls, 0);
    // The earlier failures are gone: three more calls do not reach the minimum.
    assert!(feed(&mut b, &[failed(), failed(), failed()], t0).is_empty());
    let mut b = opened(config(|b| b.minimum_calls(4).half_open_calls(1)), t0);
    feed(&mut b, &[failed()], t0 + secs(60));
    assert_eq!(b.snapshot(t0 + secs(60)).reopens, 1);
    assert_eq!(b.reset().map(|t| t.from), Some(CircuitState::Open));
    let s = b.snapshot(t0 + secs(60));
    assert_eq!((s.state, s.calls, s.reopens), (CircuitState::Closed, 0, 0));
}

#[test]
fn the_table_has_no_self_loops() {
    use CircuitState::*;
    let states = [Closed, Open, HalfOpen, ForcedOpen, Disabled];
    let causes = [
        CircuitCause::FailureRate,
        CircuitCause::SlowCallRate,
        CircuitCause::OpenElapsed,
        CircuitCause::TrialsPassed,
        CircuitCause::ForcedOpen,
        CircuitCause::Disabled,
        CircuitCause::Reset,
    ];
    for s in states {
        for c in causes {
            assert!(!is_legal(s, s, c), "{s} -> {s} ({c:?})");
        }
    }
}

/// One step of a random scenario.
#[derive(Clone, Debug)]
enum Op {
    /// Time passes.
    Wait(Duration),
    /// A call is asked for and, if permitted, made: recorded, or released without an outcome.
    Call {
        outcome: CallOutcome,
        latency: Duration,
        abandon: bool,
    },
    /// An outcome without a permit (a straggler).
    Record {
        outcome: CallOutcome,
        latency: Duration,
    },
    ForceOpen,
    Disable,
    Reset,
}

fn outcome() -> impl Strategy<Value = CallOutcome> {
    prop_oneof![
        3 => Just(CallOutcome::Success),
        1 => Just(CallOutcome::ServerError),
        1 => Just(CallOutcome::GatewayFailure),
        1 => Just(CallOutcome::Timeout),
        1 => Just(CallOutcome::Refused),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let latency = (0u64..4_000).prop_map(ms);
    prop_oneof![
        4 => (0u64..20_000).prop_map(|n| Op::Wait(ms(n))),
        12 => (outcome(), latency.clone(), proptest::bool::weighted(0.1))
            .prop_map(|(outcome, latency, abandon)| Op::Call { outcome, latency, abandon }),
        2 => (outcome(), latency).prop_map(|(outcome, latency)| Op::Record { outcome, latency }),
        1 => Just(Op::ForceOpen),
        1 => Just(Op::Disable),
        1 => Just(Op::Reset),
    ]
}

fn window() -> impl Strategy<Value = Window> {
    prop_oneof![
        (1u64..30).prop_map(|s| Window::Time(secs(s))),
        (1usize..50).prop_map(|n| Window::Count(NonZeroUsize::MIN.saturating_add(n - 1))),
    ]
}

proptest! {
    #[test]
    fn rates_stay_in_range_and_windows_never_overcount(
        window in window(),
        minimum in 1u32..10,
        threshold in 0.05f64..=1.0,
        half_open in 1u32..5,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let minimum = match window {
            Window::Count(n) => minimum.min(u32::try_from(n.get()).unwrap_or(u32::MAX)),
            Window::Time(_) => minimum,
        };
        let cfg = BreakerConfig::builder()
            .window(window)
            .minimum_calls(minimum)
            .failure_rate_threshold(threshold)
            .slow_call_rate_threshold(threshold)
            .half_open_calls(half_open)
            .open_for(secs(5))
            .max_open_for(secs(40))
            .build()
            .expect("valid");
        let mut b = CircuitBreaker::new(cfg);
        let mut now = Instant::now();
        // Outcomes recorded since the window was last emptied (any transition may empty it).
        let mut recorded = 0u64;
        let mut state = b.state();
        for op in ops {
            let mut transitions = Vec::new();
            match op {
                Op::Wait(d) => now += d,
                Op::Call { outcome, latency, abandon } => {
                    if let Ok(permit) = b.try_acquire(now) {
                        transitions.extend(permit.transition());
                        if abandon {
                            b.release(permit);
                        } else {
                            transitions.extend(b.record(&Call { outcome, latency }, now));
                            recorded += 1;
                        }
                    }
                }
                Op::Record { outcome, latency } => {
                    transitions.extend(b.record(&Call { outcome, latency }, now));
                    recorded += 1;
                }
                Op::ForceOpen => transitions.extend(b.force_open()),
                Op::Disable => transitions.extend(b.disable()),
                Op::Reset => transitions.extend(b.reset()),
            }
            for t in &transitions {
                prop_assert_eq!(t.from, state, "transitions chain");
                prop_assert!(is_legal(t.from, t.to, t.cause), "{:?}", t);
                state = t.to;
                // Opening and closing empty the window; the overrides keep it.
                if matches!(t.to, CircuitState::Open | CircuitState::Closed) {
                    recorded = 0;
                }
            }
            prop_assert_eq!(b.state(), state);
            let s = b.snapshot(now);
            prop_assert!((0.0..=1.0).contains(&s.failure_rate), "{:?}", s);
            prop_assert!((0.0..=1.0).contains(&s.slow_call_rate), "{:?}", s);
            prop_assert!(s.failures <= s.calls && s.slow_calls <= s.calls);
            match s.state {
                CircuitState::HalfOpen => prop_assert!(s.calls <= u64::from(half_open)),
                CircuitState::Open => prop_assert!(s.open_until.is_some()),
                _ => prop_assert!(s.calls <= recorded, "{} > {}", s.calls, recorded),
            }
            // Half-open, and open after it, show trial calls; the other states show the window.
            let trials = matches!(s.state, CircuitState::HalfOpen | CircuitState::Open);
            if let (Window::Count(n), false) = (window, trials) {
                prop_assert!(s.calls <= n.get() as u64);
            }
            prop_assert!(s.open_until.is_none_or(|u| u.saturating_duration_since(now) <= secs(40)));
        }
    }

    #[test]
    fn time_window_matches_a_naive_count(
        span in 1u64..20,
        steps in proptest::collection::vec((0u64..5_000, 0u8..4), 1..200),
    ) {
        let mut w = TimeWindow::new(secs(span));
        let mut now = Instant::now();
        // Seconds count from the first call.
        let t0 = now + ms(steps[0].0);
        let mut log: Vec<(u64, Mark)> = Vec::new();
        for (gap_ms, bits) in steps {
            now += ms(gap_ms);
            let mark = Mark(bits);
            let got = w.record(mark, now);
            let second = now.duration_since(t0).as_secs();
            log.push((second, mark));
            // The naive window: every call of the last `span` seconds, counted from scratch.
            let mut want = Counts::default();
            for &(_, m) in log.iter().filter(|(s, _)| s + span > second) {
                want.add(m);
            }
            prop_assert_eq!(got, want);
            let later = now + ms(gap_ms);
            let later_second = later.duration_since(t0).as_secs();
            let mut want_later = Counts::default();
            for &(_, m) in log.iter().filter(|(s, _)| s + span > later_second) {
                want_later.add(m);
            }
            prop_assert_eq!(w.counts_at(later), want_later);
        }
    }

    #[test]
    fn count_window_matches_a_naive_count(
        n in 1usize..30,
        marks in proptest::collection::vec(0u8..4, 1..200),
    ) {
        let mut w = CountWindow::new(NonZeroUsize::MIN.saturating_add(n - 1));
        let mut log = Vec::new();
        for bits in marks {
            let got = w.record(Mark(bits));
            log.push(Mark(bits));
            let mut want = Counts::default();
            for &m in log.iter().rev().take(n) {
                want.add(m);
            }
            prop_assert_eq!(got, want);
        }
    }
}
