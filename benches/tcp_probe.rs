//! Criterion benchmark: the time of one [`TcpProbe::check`] against a loopback listener, versus
//! the bare tokio floor (`TcpStream::connect`, `SO_LINGER 0`, drop).
//!
//! Both run sequentially on one current-thread runtime, so each iteration is one full connect,
//! including the reactor turn that reports the connect done, and one reset close.
//!
//! The listener (127.0.0.1, backlog 4096) **accepts and drops**, on two plain OS threads outside
//! the runtime. A listener that never accepts cannot be used: on Linux a connection that the
//! prober resets while it still sits in the accept queue stays there until accepted, so the
//! queue fills after `backlog` probes and further connects time out. Accepting on other threads
//! keeps the measured thread's work to the prober's side (plus the kernel work loopback does on
//! the sender's behalf, which is the same for both benchmarks).
//!
//! ```text
//! cargo bench --bench tcp_probe -- --quick
//! ```

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use probe::Address;
use probe::tier::Probe;
use probe::tier::tcp::{TcpProbe, TcpSpec};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::time::Instant;

/// Starts an accept-and-drop listener on 127.0.0.1 and returns its address.
fn start_listener() -> SocketAddr {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .expect("creating the listener socket");
    socket
        .set_reuse_address(true)
        .expect("setting SO_REUSEADDR on the listener");
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("binding the listener to 127.0.0.1:0");
    socket.listen(4096).expect("listening");
    let listener: TcpListener = socket.into();
    let addr = listener.local_addr().expect("reading the listener address");
    for i in 0..2 {
        let listener = listener
            .try_clone()
            .expect("cloning the listener for an accept thread");
        std::thread::Builder::new()
            .name(format!("bench-accept-{i}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    drop(conn);
                }
            })
            .expect("spawning an accept thread");
    }
    addr
}

fn tcp_connect(c: &mut Criterion) {
    let addr = start_listener();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the current-thread runtime");
    let probe = TcpProbe::new(
        TcpSpec::connect(Address::Socket(addr)),
        probe::tier::resolve::Names::system(),
    );
    let timeout = Duration::from_secs(1);

    let mut group = c.benchmark_group("tcp_connect_loopback");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tcp_probe_check", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    if let Some(failure) = probe.check(timeout).await.failure() {
                        panic!("probe of the loopback listener failed: {failure}");
                    }
                }
                start.elapsed()
            })
        });
    });
    group.bench_function("tokio_floor", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let stream = tokio::net::TcpStream::connect(addr)
                        .await
                        .expect("connecting to the loopback listener");
                    stream.set_zero_linger().expect("setting SO_LINGER 0");
                    drop(stream);
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = tcp_connect
}
criterion_main!(benches);
