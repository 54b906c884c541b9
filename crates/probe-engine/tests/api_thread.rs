//! The health API keeps answering while the engine's runtime is busy: it is served from a
//! thread of its own, not from the workers that run the probes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tokio::time::Instant;

use probe_engine::daemon::{Daemon, Options};
use tokio_util::sync::CancellationToken;

/// A plain blocking `GET`, from a thread of the test's own: the status line and how long the
/// whole exchange took.
fn get(addr: SocketAddr, path: &str) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let status = reply.lines().next().unwrap_or_default().to_owned();
    (status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn readyz_answers_while_every_engine_worker_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        format!(
            "targets:\n  - id: up\n    tcp: {{address: \"{}\"}}\n    interval: 100ms\n    timeout: 50ms\n    rise: 1\n",
            up.local_addr().unwrap()
        ),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let daemon = Daemon::start(
        Options {
            config: dir.path().to_owned(),
            ..Options::default()
        },
        cancel.clone(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        daemon
            .serve(listener, None, Duration::from_secs(1))
            .await
            .unwrap();
    });
    let ready = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while get(addr, "/readyz").0 != "HTTP/1.1 200 OK" {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    ready.await.unwrap();

    // The runtime's only worker is taken by a task that does not yield for 3 s, as a burst of
    // CPU-bound work would; the API still answers at once.
    let (hogging_tx, hogging) = std::sync::mpsc::channel();
    let hog = tokio::spawn(async move {
        hogging_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
    });
    let (status, took) = tokio::task::spawn_blocking(move || {
        hogging.recv().unwrap();
        get(addr, "/readyz")
    })
    .await
    .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        took < Duration::from_secs(1),
        "/readyz took {took:?} while the engine's worker was busy"
    );
    hog.await.unwrap();
    cancel.cancel();
    serving.await.unwrap();
}
