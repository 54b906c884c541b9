//! Criterion benchmark: the readiness gate's fast path and the tower layer's overhead.
//!
//! - `gate/admit_release`: one [`Gate::admit`] and the drop of its guard, uncontended;
//! - `gate/admit_release_contended`: the same while a second thread admits and releases in a
//!   tight loop on the same gate (both cores on one cache line);
//! - `gate/layer_call` and `gate/no_layer_call`: one request through a trivial `http` service
//!   with and without [`GateLayer`], call and poll (the inner future is ready at once, so this is
//!   the layer's own cost per request).
//!
//! ```text
//! cargo bench --bench gate -- --quick
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use probe::gate::{Gate, GateConfig, GateLayer};
use tower_layer::Layer;
use tower_service::Service;

fn serving() -> Gate {
    let gate = Gate::new(GateConfig::default());
    gate.startup_complete();
    gate
}

/// A service that answers at once.
#[derive(Clone)]
struct Ok200;

impl Service<Request<()>> for Ok200 {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(())))
    }
}

/// Calls `service` once and polls the response to completion (it is ready at once).
fn request<S>(service: &mut S) -> Response<()>
where
    S: Service<Request<()>, Response = Response<()>, Error = Infallible>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let future = pin!(service.call(Request::new(())));
    match future.poll(&mut cx) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => unreachable!("the inner service answers at once"),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    let gate = serving();
    group.bench_function("admit_release", |b| {
        b.iter(|| drop(black_box(gate.admit())));
    });

    let stop = Arc::new(AtomicBool::new(false));
    let rival = {
        let (gate, stop) = (gate.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(black_box(gate.admit()));
            }
        })
    };
    group.bench_function("admit_release_contended", |b| {
        b.iter(|| drop(black_box(gate.admit())));
    });
    stop.store(true, Ordering::Relaxed);
    let _ = rival.join();

    let mut layered = GateLayer::new(serving()).layer(Ok200);
    group.bench_function("layer_call", |b| {
        b.iter(|| black_box(request(&mut layered)));
    });
    let mut bare = Ok200;
    group.bench_function("no_layer_call", |b| {
        b.iter(|| black_box(request(&mut bare)));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
