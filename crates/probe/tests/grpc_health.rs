//! `probe::serve::grpc::HealthService` on a real tonic server on 127.0.0.1, asked by tonic-health's own
//! client: `Check` and `Watch` of the instance, of targets and of a group, unknown names, the
//! stop, and a `Watch` whose receiver lagged.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use probe::TargetId;
use probe::engine::{Engine, EngineConfig};
use probe::gate::{Gate, GateConfig};
use probe::graph::{Dependency, GraphConfig, NodeKind, NodeSpec};
use probe::health::{Schedule, ScheduleSettings, Thresholds};
use probe::outcome::{CheckResult, Failure, FailureReason};
use probe::serve::grpc::HealthService;
use probe::tier::{CustomProbe, Probe, ProbeSpec};
use probe::topology::{TargetSpec, Topology};
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The bound on every wait for a status.
const WAIT: Duration = Duration::from_secs(10);

/// A probe that passes or fails as the test says.
struct Switch(AtomicBool);

impl Switch {
    fn new() -> Arc<Self> {
        Arc::new(Self(AtomicBool::new(true)))
    }

    fn set(&self, up: bool) {
        self.0.store(up, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Probe for Switch {
    async fn check(&self, _timeout: Duration) -> CheckResult {
        if self.0.load(Ordering::SeqCst) {
            CheckResult::up()
        } else {
            CheckResult::failed(Failure::new(FailureReason::Refused, "switched off"))
        }
    }
}

fn id(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

/// A target probed every `interval`, one result deciding its state.
fn target(name: &str, probe: Arc<dyn Probe>, interval: Duration) -> TargetSpec {
    TargetSpec::new(id(name), ProbeSpec::Custom(CustomProbe::new(probe)))
        .with_schedule(
            Schedule::try_new(ScheduleSettings {
                interval,
                timeout: interval / 2,
                jitter: 0.0,
                backoff_max: Some(interval),
                backoff_jitter: Some(0.0),
                ..ScheduleSettings::default()
            })
            .unwrap(),
        )
        .with_thresholds(Thresholds::new(NonZeroU32::MIN, NonZeroU32::MIN))
        .with_flap(None)
}

/// `db` and `cache`, and the group `svc` needing `db` (critical) and `cache` (not critical);
/// `extra` targets besides.
fn topology(db: &Arc<Switch>, cache: &Arc<Switch>, extra: &[&str]) -> Topology {
    let every = Duration::from_millis(50);
    let dependency = |name: &str, critical: bool| Dependency {
        critical,
        ..Dependency::new(id(name), "test")
    };
    let mut targets = vec![
        target("db", db.clone(), every),
        target("cache", cache.clone(), every),
    ];
    targets.extend(extra.iter().map(|name| target(name, Switch::new(), every)));
    Topology {
        targets,
        nodes: vec![NodeSpec {
            id: id("svc"),
            kind: NodeKind::Group,
            depends_on: vec![dependency("db", true), dependency("cache", false)],
        }],
        scoring: GraphConfig::default(),
        ..Topology::default()
    }
}

/// Serves `service` on 127.0.0.1 port 0 until `cancel`.
async fn serve(service: HealthService, cancel: CancellationToken) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                cancel.cancelled_owned(),
            ),
    );
    addr
}

fn ask(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

async fn check(client: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    let response = client.check(ask(service)).await.unwrap().into_inner();
    response.status()
}

/// A `Watch` of `service`, and the last status it sent (to assert that none repeats).
struct Watching {
    name: String,
    stream: Streaming<HealthCheckResponse>,
    last: Option<ServingStatus>,
}

impl Watching {
    async fn start(client: &mut HealthClient<Channel>, service: &str) -> Self {
        let stream = client.watch(ask(service)).await.unwrap().into_inner();
        Self {
            name: service.to_owned(),
            stream,
            last: None,
        }
    }

    /// The next message, which must differ from the one before.
    async fn next(&mut self) -> ServingStatus {
        let message = tokio::time::timeout(WAIT, self.stream.message())
            .await
            .unwrap_or_else(|_| panic!("{}: no status within {WAIT:?}", self.name))
            .unwrap()
            .unwrap_or_else(|| panic!("{}: the stream ended", self.name));
        let status = message.status();
        assert_ne!(
            self.last,
            Some(status),
            "{}: sent twice in a row",
            self.name
        );
        self.last = Some(status);
        status
    }

    /// Reads until `want`, allowing the statuses in `between` on the way.
    async fn until(&mut self, want: ServingStatus, between: &[ServingStatus]) {
        loop {
            let status = self.next().await;
            if status == want {
                return;
            }
            assert!(
                between.contains(&status),
                "{}: {status:?} on the way to {want:?}",
                self.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_watch_follow_targets_groups_and_the_gate() {
    use ServingStatus::{NotServing, ServiceUnknown, Serving};
    let cancel = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    let gate = Gate::new(GateConfig::default());
    gate.set_readiness(Arc::new(engine.clone()));
    gate.startup_complete();
    let service = HealthService::new(engine.clone(), cancel.clone()).with_gate(gate.clone());
    let addr = serve(service, cancel.clone()).await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);

    // Before any target: "" is ready (nothing to wait for), "db" unknown.
    assert_eq!(check(&mut client, "").await, Serving);
    assert_eq!(check(&mut client, "liveness").await, Serving);
    let unknown = client.check(ask("db")).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let mut db_watch = Watching::start(&mut client, "db").await;
    assert_eq!(db_watch.next().await, ServiceUnknown);
    let mut ready = Watching::start(&mut client, "").await;
    assert_eq!(ready.next().await, Serving);

    // The targets appear: PROBING (not serving) on the way to UP.
    let (db, cache) = (Switch::new(), Switch::new());
    engine.apply(topology(&db, &cache, &[])).unwrap();
    db_watch.until(Serving, &[NotServing]).await;
    ready.until(Serving, &[NotServing]).await;
    // The group serves once judged UP (rise judgments, a second apart).
    let mut group = Watching::start(&mut client, "svc").await;
    group.until(Serving, &[NotServing]).await;
    let mut cache_watch = Watching::start(&mut client, "cache").await;
    assert_eq!(cache_watch.next().await, Serving);

    // A non-critical dependency DOWN: the group still serves; the instance is not ready.
    cache.set(false);
    assert_eq!(cache_watch.next().await, NotServing);
    assert_eq!(ready.next().await, NotServing);
    assert_eq!(check(&mut client, "svc").await, Serving);
    cache.set(true);
    assert_eq!(cache_watch.next().await, Serving);
    assert_eq!(ready.next().await, Serving);

    // The critical one DOWN: the group too, then both back.
    db.set(false);
    assert_eq!(db_watch.next().await, NotServing);
    assert_eq!(group.next().await, NotServing);
    assert_eq!(check(&mut client, "db").await, NotServing);
    assert_eq!(check(&mut client, "svc").await, NotServing);
    assert_eq!(ready.next().await, NotServing);
    db.set(true);
    assert_eq!(db_watch.next().await, Serving);
    assert_eq!(group.next().await, Serving);
    assert_eq!(ready.next().await, Serving);

    // A name that appears later is reported once it does; one that leaves turns unknown.
    drop(ready);
    let mut late = Watching::start(&mut client, "late").await;
    assert_eq!(late.next().await, ServiceUnknown);
    let mut invalid = Watching::start(&mut client, "no spaces allowed").await;
    assert_eq!(invalid.next().await, ServiceUnknown);
    engine.apply(topology(&db, &cache, &["late"])).unwrap();
    late.until(Serving, &[NotServing]).await;
    engine.apply(topology(&db, &cache, &[])).unwrap();
    assert_eq!(late.next().await, ServiceUnknown);

    // The stop's first step turns every service NOT_SERVING but liveness, which stays what
    // `/livez` says until the process has stopped.
    let mut ready = Watching::start(&mut client, "").await;
    assert_eq!(ready.next().await, Serving);
    let mut live = Watching::start(&mut client, "liveness").await;
    assert_eq!(live.next().await, Serving);
    gate.leave();
    assert_eq!(ready.next().await, NotServing);
    assert_eq!(db_watch.next().await, NotServing);
    assert_eq!(group.next().await, NotServing);
    assert_eq!(check(&mut client, "cache").await, NotServing);
    assert_eq!(check(&mut client, "").await, NotServing);
    assert_eq!(check(&mut client, "liveness").await, Serving);

    // Cancellation ends the streams (so that a graceful server shutdown is not held up).
    cancel.cancel();
    let ended = tokio::time::timeout(WAIT, db_watch.stream.message())
        .await
        .expect("the stream outlived the cancellation");
    assert!(matches!(ended, Ok(None) | Err(_)), "{ended:?}");
    // Nothing else was sent on the invalid name's stream: it can never be known.
    let quiet = tokio::time::timeout(WAIT, invalid.stream.message())
        .await
        .expect("the stream outlived the cancellation");
    assert!(matches!(quiet, Ok(None) | Err(_)), "{quiet:?}");
}

/// A `Watch` that is not read while more transitions happen than the engine's event buffer
/// holds: its receiver lags, and the stream resyncs by reading the status again.
#[tokio::test(start_paused = true)]
async fn a_lagged_watch_resyncs() {
    use futures_util::StreamExt;
    let cancel = CancellationToken::new();
    let engine = Engine::start(EngineConfig::default(), cancel.clone());
    let service = HealthService::new(engine.clone(), cancel.clone());
    let switches: Vec<Arc<Switch>> = (0..1100).map(|_| Switch::new()).collect();
    let every = Duration::from_secs(1);
    let targets = switches
        .iter()
        .enumerate()
        .map(|(i, s)| target(&format!("t{i}"), s.clone(), every))
        .collect::<Vec<_>>();
    let mut watched = service
        .watch(tonic::Request::new(ask("t0")))
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        tokio::time::timeout(WAIT, watched.next())
            .await
            .expect("no status")
            .expect("the stream ended")
            .unwrap()
            .status()
    };
    assert_eq!(next().await, ServingStatus::ServiceUnknown);
    engine.apply(targets).unwrap();
    loop {
        match next().await {
            ServingStatus::Serving => break,
            ServingStatus::NotServing => {}
            other => panic!("{other:?}"),
        }
    }
    // Unread from here: every target DOWN (and those not UP yet first UP), 1100 transitions or
    // more, beyond the buffer's 1024.
    let mut witness = engine.subscribe();
    for switch in &switches {
        switch.set(false);
    }
    tokio::time::sleep(every * 5).await;
    assert!(
        matches!(
            witness.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_))
        ),
        "the events fit the buffer: nothing lagged"
    );
    assert_eq!(next().await, ServingStatus::NotServing);
    cancel.cancel();
    assert!(
        watched.next().await.is_none(),
        "cancellation ends the stream"
    );
}
