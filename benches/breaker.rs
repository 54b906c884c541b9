//! Criterion benchmark: the circuit breaker's cost per call.
//!
//! - `breaker/record_time_window`: one [`CircuitBreaker::record`] into the default 60 s time
//!   window of a closed circuit, the clock moving 1 ms per call (a new bucket every 1000 calls);
//!   one call in ten fails, under the threshold, so the circuit stays closed and every call is
//!   judged;
//! - `breaker/record_time_window_sparse`: the same with the clock moving 1 s per call, so every
//!   call empties the bucket it lands in (the most a record does in a closed time window);
//! - `breaker/record_count_window`: the same into a 100-call count window;
//! - `breaker/try_acquire_closed`: one [`CircuitBreaker::try_acquire`] decision on a closed
//!   circuit (permitted);
//! - `breaker/try_acquire_open`: the same on an open circuit (rejected, with its retry-after).
//!
//! ```text
//! cargo bench --bench breaker -- --quick
//! ```

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use probe::passive::Call;
use probe::passive::breaker::{BreakerConfig, CircuitBreaker, CircuitState, Window};
use tokio::time::Instant;

/// Every tenth call fails: a failure rate of 0.1, well under the default 0.5.
fn call(i: u64) -> Call {
    let status = if i.is_multiple_of(10) { 503 } else { 200 };
    Call::http(status, Duration::from_millis(15))
}

/// Records one call per iteration, the clock moving `step` per call.
fn bench_record(c: &mut Criterion, name: &str, config: BreakerConfig, step: Duration) {
    let mut breaker = CircuitBreaker::new(config);
    let mut now = Instant::now();
    let mut i = 0u64;
    c.bench_function(name, |b| {
        b.iter(|| {
            i += 1;
            now += step;
            black_box(breaker.record(black_box(&call(i)), now))
        });
    });
    assert_eq!(breaker.state(), CircuitState::Closed);
}

fn bench(c: &mut Criterion) {
    let time = BreakerConfig::default();
    bench_record(
        c,
        "breaker/record_time_window",
        time,
        Duration::from_millis(1),
    );
    bench_record(
        c,
        "breaker/record_time_window_sparse",
        time,
        Duration::from_secs(1),
    );
    let count = BreakerConfig::builder()
        .window(Window::Count(
            NonZeroUsize::new(100).unwrap_or(NonZeroUsize::MIN),
        ))
        .build()
        .expect("a valid config");
    bench_record(
        c,
        "breaker/record_count_window",
        count,
        Duration::from_millis(1),
    );

    let mut closed = CircuitBreaker::new(time);
    let now = Instant::now();
    c.bench_function("breaker/try_acquire_closed", |b| {
        b.iter(|| black_box(closed.try_acquire(black_box(now))));
    });

    let mut open = CircuitBreaker::new(time);
    for _ in 0..time.minimum_calls() {
        let _ = open.record(&Call::http(503, Duration::from_millis(15)), now);
    }
    assert_eq!(open.state(), CircuitState::Open);
    c.bench_function("breaker/try_acquire_open", |b| {
        b.iter(|| black_box(open.try_acquire(black_box(now))));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
