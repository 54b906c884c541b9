//! The gRPC tier held side by side with blackbox_exporter's `grpc` prober, against a health
//! server no one here wrote: grpcio's own `grpc_health.v1.health.HealthServicer` (Python, C
//! core), not tonic, so our client is not tested against the library it is built on.

mod support;

use std::time::Duration;

use probe::Address;
use probe::outcome::{FailureReason, Verdict};
use probe::tier::Probe;
use probe::tier::grpc::{GrpcProbe, GrpcSpec};
use probe::tier::resolve::Names;
use probe_testkit::blackbox_or_skip;
use support::peers::Grpcio;

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
