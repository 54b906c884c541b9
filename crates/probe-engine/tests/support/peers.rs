//! Servers no one here wrote, run for a test: grpcio's own health server (Python, C core).

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use probe_testkit::skipped_outside_ci;

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
pub struct Grpcio(Child, pub SocketAddr);

impl Grpcio {
    /// Starts it, or says the test was skipped (outside CI) when grpcio is not installed.
    pub fn start() -> Option<Self> {
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
