//! Criterion benchmark: passive health through the engine, and the client layer's overhead.
//!
//! A pool of 10 members (custom probes on a 1 h interval, so probing stays out of the figures),
//! each with the default circuit breaker, and the default outlier, recovery and slow-start
//! policy:
//! - `passive/report`: one [`Pools::report`](probe::engine::Pools::report) of a successful call: the target lookup, its
//!   breaker's record and its pool's outlier record (what every real call costs);
//! - `passive/pick`: one [`Pools::pick`](probe::engine::Pools::pick) whose lease is dropped unfinished: the weighted draw
//!   over the pool's routing table and the breaker's decision, without the report;
//! - `passive/pick_finish`: one [`Pools::pick`](probe::engine::Pools::pick) and [`Lease::finish`](probe::engine::Lease):
//!   the weighted draw, the breaker's decision, and the report;
//! - `client/bare` and `client/balanced`: one request through an in-memory service that answers
//!   200 at once, without and with [`BalanceLayer`]; the difference is the layer's overhead per
//!   request (pick, URI rewrite, report, retry bookkeeping).
//!
//! ```text
//! cargo bench --bench client -- --quick
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use probe::TargetId;
use probe::engine::{Engine, EngineConfig};
use probe::graph::{Dependency, NodeKind, NodeSpec};
use probe::health::{Schedule, ScheduleSettings};
use probe::outcome::CheckResult;
use probe::passive::breaker::BreakerConfig;
use probe::passive::slow_start::SlowStartConfig;
use probe::passive::{Call, PoolPolicy};
use probe::serve::balance::BalanceLayer;
use probe::tier::tcp::TcpSpec;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::{TargetSpec, Topology};
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;
use tower_service::Service;

struct Up;

#[async_trait::async_trait]
impl Probe for Up {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        CheckResult::up()
    }
}

const MEMBERS: usize = 10;

fn id(s: &str) -> TargetId {
    TargetId::new(s).expect("valid id")
}

/// The pool; members probe with `probe` (TCP specs give the layer an address to rewrite to).
fn topology(tcp: bool) -> Topology {
    let hour = Duration::from_secs(3600);
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("m{i}")).collect();
    let probe: Arc<dyn Probe> = Arc::new(Up);
    Topology {
        targets: names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let spec = if tcp {
                    let addr = format!("127.0.0.1:{}", 9000 + i).parse().expect("address");
                    ProbeSpec::Tcp(TcpSpec::connect(addr))
                } else {
                    ProbeSpec::Custom(CustomProbe::new(probe.clone()))
                };
                TargetSpec::new(id(name), spec)
                    .with_schedule(
                        Schedule::try_new(ScheduleSettings {
                            interval: hour,
                            timeout: Duration::from_secs(1),
                            jitter: 0.0,
                            ..ScheduleSettings::default()
                        })
                        .expect("schedule"),
                    )
                    .with_circuit_breaker(Some(BreakerConfig::default()))
            })
            .collect(),
        nodes: vec![NodeSpec {
            id: id("pool"),
            kind: NodeKind::Group,
            depends_on: names
                .iter()
                .map(|n| Dependency::new(id(n), "bench"))
                .collect(),
        }],
        pools: BTreeMap::from([(
            id("pool"),
            PoolPolicy {
                slow_start: Some(SlowStartConfig::default()),
                ..PoolPolicy::default()
            },
        )]),
        ..Topology::default()
    }
}

/// Answers 200 at once: the floor a layer's overhead is measured against.
#[derive(Clone)]
struct Instant200;

impl Service<http::Request<()>> for Instant200 {
    type Response = http::Response<()>;
    type Error = Infallible;
    type Future = Ready<Result<http::Response<()>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<()>) -> Self::Future {
        ready(Ok(http::Response::new(())))
    }
}

fn request() -> http::Request<()> {
    http::Request::get("http://pool/orders?id=42")
        .body(())
        .expect("request")
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cancel = CancellationToken::new();
    let _guard = runtime.enter();

    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    engine.apply(topology(false)).expect("topology");
    let ok = Call::http(200, Duration::from_millis(3));
    let member = id("m3");
    c.bench_function("passive/report", |b| {
        b.iter(|| engine.pools().report(black_box(&member), black_box(&ok)));
    });
    let pool = id("pool");
    c.bench_function("passive/pick", |b| {
        b.iter(|| {
            drop(black_box(
                engine
                    .pools()
                    .pick(black_box(&pool), &[])
                    .expect("a member"),
            ))
        });
    });
    c.bench_function("passive/pick_finish", |b| {
        b.iter(|| {
            let lease = engine
                .pools()
                .pick(black_box(&pool), &[])
                .expect("a member");
            lease.finish(black_box(&ok));
        });
    });

    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    engine.apply(topology(true)).expect("topology");
    let mut bare = Instant200;
    c.bench_function("client/bare", |b| {
        b.iter(|| runtime.block_on(bare.call(black_box(request()))));
    });
    let mut balanced = BalanceLayer::new(engine, pool).layer(Instant200);
    c.bench_function("client/balanced", |b| {
        b.iter(|| {
            let response = runtime.block_on(balanced.call(black_box(request())));
            assert!(response.is_ok());
        });
    });
    cancel.cancel();
}

criterion_group!(benches, bench);
criterion_main!(benches);
