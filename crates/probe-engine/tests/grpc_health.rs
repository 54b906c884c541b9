//! `--grpc-listen` on the real binary, asked by tonic-health's client as a kubelet `grpc:`
//! probe or grpc-health-probe would: a real TCP target closed and reopened on its port through
//! UP -> DOWN -> UP, a group over it, unknown names, and SIGTERM turning every service
//! NOT_SERVING while the daemon still runs.

mod support;

use std::net::SocketAddr;

use support::{Daemon, WAIT};
use tonic::Streaming;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus::{
    self, NotServing, ServiceUnknown, Serving,
};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Long enough to watch the stop from the outside: the daemon keeps serving this long after
/// `/readyz` turns 503.
const DRAIN_DELAY: &str = "2s";

fn ask(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

async fn check(client: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    client
        .check(ask(service))
        .await
        .unwrap_or_else(|e| panic!("Check {service:?}: {e}"))
        .into_inner()
        .status()
}

/// A `Watch` and the last status it sent.
struct Watching {
    name: &'static str,
    stream: Streaming<HealthCheckResponse>,
    last: Option<ServingStatus>,
}

impl Watching {
    async fn start(client: &mut HealthClient<Channel>, name: &'static str) -> Self {
        let stream = client.watch(ask(name)).await.unwrap().into_inner();
        Self {
            name,
            stream,
            last: None,
        }
    }

    /// The next status, which must differ from the one before (only changes are sent).
    async fn next(&mut self) -> ServingStatus {
        let message = tokio::time::timeout(WAIT, self.stream.message())
            .await
            .unwrap_or_else(|_| panic!("Watch {:?}: nothing within {WAIT:?}", self.name))
            .unwrap()
            .unwrap_or_else(|| panic!("Watch {:?}: the stream ended", self.name));
        let status = message.status();
        assert_ne!(
            self.last,
            Some(status),
            "{:?}: sent twice in a row",
            self.name
        );
        self.last = Some(status);
        status
    }

    /// Reads until `want`; NOT_SERVING may come first (a target still PROBING).
    async fn until(&mut self, want: ServingStatus) {
        loop {
            match self.next().await {
                status if status == want => return,
                NotServing => {}
                status => panic!("Watch {:?}: {status:?} on the way to {want:?}", self.name),
            }
        }
    }
}

fn write_config(dir: &std::path::Path, api: SocketAddr) {
    std::fs::write(
        dir.join("targets.yaml"),
        format!(
            "defaults: {{interval: 300ms, timeout: 200ms, rise: 1, fall: 2}}
targets:
  - id: api
    tcp: {{address: \"{api}\"}}
  - id: checkout
    kind: group
    depends_on: [{{target: api, critical: true}}]
"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_the_daemon_through_a_target_outage_and_the_stop() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), api);
    let mut daemon = Daemon::start_with(
        dir.path(),
        &[
            "--grpc-listen",
            "127.0.0.1:0",
            "--drain-delay",
            DRAIN_DELAY,
            "--shutdown-grace",
            "5s",
        ],
    );
    let grpc = daemon.wait_logged("grpc health listening", 1)["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    let channel = Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);

    let mut target = Watching::start(&mut client, "api").await;
    target.until(Serving).await;
    let mut ready = Watching::start(&mut client, "").await;
    ready.until(Serving).await;
    assert_eq!(daemon.get("/readyz").await.status(), 200);
    let mut live = Watching::start(&mut client, "liveness").await;
    assert_eq!(live.next().await, Serving);
    assert_eq!(check(&mut client, "").await, Serving);
    assert_eq!(check(&mut client, "liveness").await, Serving);
    // A group serves by its verdict, which it has once judged (rise judgments after its
    // dependencies' verdicts).
    let mut group = Watching::start(&mut client, "checkout").await;
    group.until(Serving).await;
    assert_eq!(check(&mut client, "checkout").await, Serving);

    // Unknown names: NOT_FOUND for Check, SERVICE_UNKNOWN (and an open stream) for Watch.
    let unknown = client.check(ask("nope")).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let mut nope = Watching::start(&mut client, "nope").await;
    assert_eq!(nope.next().await, ServiceUnknown);

    // The target's port closes: DOWN, and with it readiness and the group (critical).
    drop(listener);
    assert_eq!(target.next().await, NotServing);
    assert_eq!(ready.next().await, NotServing);
    assert_eq!(group.next().await, NotServing);
    assert_eq!(daemon.get("/readyz").await.status(), 503);
    assert_eq!(check(&mut client, "").await, NotServing);
    assert_eq!(check(&mut client, "api").await, NotServing);
    assert_eq!(check(&mut client, "liveness").await, Serving);

    // It opens again on the same port: UP.
    let listener = tokio::net::TcpListener::bind(api).await.unwrap();
    assert_eq!(target.next().await, Serving);
    assert_eq!(ready.next().await, Serving);
    assert_eq!(group.next().await, Serving);
    assert_eq!(check(&mut client, "api").await, Serving);

    // SIGTERM: every service but liveness NOT_SERVING at once, while the daemon still serves
    // (the drain delay), then the process exits and the streams end.
    daemon.signal("-TERM");
    assert_eq!(ready.next().await, NotServing);
    assert_eq!(target.next().await, NotServing);
    assert_eq!(group.next().await, NotServing);
    assert!(!daemon.exited(), "NOT_SERVING only as the daemon exited");
    assert_eq!(daemon.get("/readyz").await.status(), 503);
    assert_eq!(check(&mut client, "").await, NotServing);
    assert_eq!(
        check(&mut client, "liveness").await,
        Serving,
        "as /livez, through the drain"
    );
    assert_eq!(daemon.get("/livez").await.status(), 200);
    let status = daemon.wait_exit();
    assert!(status.success(), "{status}");
    let ended = tokio::time::timeout(WAIT, ready.stream.message())
        .await
        .expect("the stream outlived the daemon");
    assert!(matches!(ended, Ok(None) | Err(_)), "{ended:?}");
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_is_off_by_default() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), support::closed_port());
    let mut daemon = Daemon::start(dir.path());
    assert_eq!(daemon.get("/livez").await.status(), 200);
    daemon.signal("-TERM");
    assert!(daemon.wait_exit().success());
    assert!(
        !daemon
            .all_logs()
            .iter()
            .any(|l| l["message"] == "grpc health listening"),
        "served gRPC health without --grpc-listen"
    );
}
