//! The gRPC tier held side by side with blackbox_exporter's `grpc` prober, against a health
//! server no one here wrote: grpcio's own `grpc_health.v1.health.HealthServicer` (Python, C
//! core), not tonic, so our client is not tested against the library it is built on.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use probe::outcome::{FailureReason, Verdict};
use probe::resolve::Names;
use probe::target::Address;
use probe::tier::Probe;
use probe::tier::grpc::{GrpcProbe, GrpcSpec};
use probe_engine::testing::{blackbox_or_skip, skipped_outside_ci};

/// A grpcio health server: "" and `payments` SERVING, `ledger` NOT_SERVING; it prints its port
/// once it listens.
const HEALTH_SERVER: &str = r#"
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
servicer = health.HealthServicer()
servicer.set("", health_pb2.HealthCheckResponse.SERVING)
servicer.set("payments", health_pb2.HealthCheckResponse.SERVING)
servicer.set("ledger", health_pb2.HealthCheckResponse.NOT_SERVING)
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
server.wait_for_termination()
"#;

/// The grpcio server, killed when dropped.
struct Grpcio(Child, SocketAddr);

impl Grpcio {
    /// Starts it, or says the test was skipped (outside CI) when grpcio is not installed.
    fn start() -> Option<Self> {
        let installed = Command::new("python3")
            .args(["-c", "import grpc, grpc_health.v1.health"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            skipped_outside_ci("grpcio is not installed (scripts/setup installs it with pip)");
            return None;
        }
        let mut child = Command::new("python3")
            .args(["-c", HEALTH_SERVER])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the grpcio server's port");
        Some(Self(child, SocketAddr::from(([127, 0, 0, 1], port))))
    }
}

impl Drop for Grpcio {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Our verdict on a case: UP, or a failure with this reason and detail.
type Expected = Result<(), (FailureReason, String)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_tier_agrees_with_blackbox_exporter_on_a_grpcio_server() {
    let Some(server) = Grpcio::start() else {
        return;
    };
    // (module, service, blackbox_exporter's success, its status code, our verdict)
    let cases: [(&str, &str, bool, f64, Expected); 4] = [
        ("whole_server", "", true, 0.0, Ok(())),
        ("payments", "payments", true, 0.0, Ok(())),
        (
            "ledger",
            "ledger",
            false,
            0.0,
            Err((FailureReason::Status, "NOT_SERVING".to_owned())),
        ),
        (
            "unknown",
            "billing",
            false,
            5.0,
            Err((
                FailureReason::Assertion,
                "the server does not know service \"billing\" (SERVICE_UNKNOWN)".to_owned(),
            )),
        ),
    ];
    let mut config = String::from("modules:\n");
    for (module, service, ..) in &cases {
        config.push_str(&format!(
            "  {module}:\n    prober: grpc\n    timeout: 5s\n    grpc:\n      service: \"{service}\"\n      \
             preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n"
        ));
    }
    let Some(blackbox) = blackbox_or_skip(&config) else {
        return;
    };
    for (module, service, success, code, verdict) in cases {
        let theirs = blackbox.probe(module, &server.1.to_string()).await.unwrap();
        assert_eq!(theirs.success(), Some(success), "{module}: {}", theirs.body);
        assert_eq!(
            theirs.value("probe_grpc_status_code"),
            Some(code),
            "{module}: {}",
            theirs.body
        );
        let mut spec = GrpcSpec::new(Address::Socket(server.1));
        spec.service = service.to_owned();
        let result = GrpcProbe::new(spec, Names::system())
            .check(Duration::from_secs(5))
            .await;
        match (&result.verdict, verdict) {
            (Verdict::Up, Ok(())) => {}
            (Verdict::Failed(failure), Err((reason, detail))) => {
                assert_eq!(
                    (failure.reason, failure.detail.as_str()),
                    (reason, &*detail)
                );
            }
            (ours, expected) => panic!("{module}: ours {ours:?}, expected {expected:?}"),
        }
    }
}
