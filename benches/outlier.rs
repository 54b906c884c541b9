//! Criterion benchmark: the per-call cost of outlier detection and of weighted selection.
//!
//! - `outlier/record_success`: one successful call recorded for one member of a 100-member pool
//!   (the hot path: a lookup and two counter updates);
//! - `outlier/record_mixed`: the same for a repeating run of four 500s and a success, so the
//!   failure counters move but no ejection fires;
//! - `outlier/tick`: a tick of the 100-member pool with nothing due;
//! - `outlier/weights`: the 100 routing weights, as a `Vec` (an id clone per member);
//! - `slow_start/pick`: one weighted pick over 100 members (some out, some warming up).
//!
//! ```text
//! cargo bench --bench outlier
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use probe::TargetId;
use probe::passive::Call;
use probe::passive::outlier::{OutlierConfig, OutlierDetector};
use probe::passive::select::pick;
use tokio::time::Instant;

const MEMBERS: usize = 100;

fn ids() -> Vec<TargetId> {
    (0..MEMBERS)
        .map(|i| TargetId::new(&format!("upstream-{i:03}")).expect("valid id"))
        .collect()
}

fn pool(now: Instant) -> (OutlierDetector, Vec<TargetId>) {
    let ids = ids();
    let mut detector = OutlierDetector::new(OutlierConfig::default());
    detector.set_members(ids.clone(), now);
    (detector, ids)
}

/// A low-discrepancy sequence in [0, 1): deterministic, and spread like uniform draws.
fn randoms(n: usize) -> Vec<f64> {
    const GOLDEN: f64 = 0.618_033_988_749_894_9;
    (0..n).map(|i| (i as f64 * GOLDEN).fract()).collect()
}

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    let mut group = c.benchmark_group("outlier");

    let (mut detector, ids) = pool(now);
    let member = ids[MEMBERS / 2].clone();
    let ok = Call::http(200, Duration::from_millis(3));
    group.bench_function("record_success", |b| {
        b.iter(|| black_box(detector.record(black_box(&member), &ok, now)));
    });

    let (mut detector, _) = pool(now);
    let run = [500, 500, 500, 500, 200].map(|status| Call::http(status, Duration::from_millis(3)));
    let mut next = 0;
    group.bench_function("record_mixed", |b| {
        b.iter(|| {
            next = (next + 1) % run.len();
            let events = detector.record(black_box(&member), &run[next], now);
            debug_assert!(events.is_empty());
            black_box(events)
        });
    });

    let (mut detector, _) = pool(now);
    group.bench_function("tick", |b| {
        b.iter(|| black_box(detector.tick(black_box(now))));
    });
    group.bench_function("weights", |b| {
        b.iter(|| black_box(detector.weights(black_box(now))));
    });
    group.finish();

    // Weights as a pool mid-incident has them: a few out, a few warming up, the rest full.
    let weighted: Vec<(TargetId, f64)> = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let weight = match i % 10 {
                0 => 0.0,
                1 => 0.1 + i as f64 / 200.0,
                _ => 1.0,
            };
            (id, weight)
        })
        .collect();
    let draws = randoms(1024);
    let mut next = 0;
    c.bench_function("slow_start/pick", |b| {
        b.iter(|| {
            next = (next + 1) % draws.len();
            black_box(pick(black_box(&weighted), draws[next]))
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
