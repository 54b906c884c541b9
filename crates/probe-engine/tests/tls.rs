//! TLS certificate targets through the real daemon: a certificate that verifies, one about to
//! expire (DEGRADED) and one that expired (DOWN), against TLS servers on 127.0.0.1 with
//! certificates made by the test; what `/v1/targets` and `/metrics` say of them, in
//! blackbox_exporter's names, clean for promtool.

mod support;

#[path = "../../probe/tests/support/pki.rs"]
mod pki;

use std::net::SocketAddr;

use support::Daemon;

/// A TLS server on 127.0.0.1 presenting `leaf`.
async fn serve(leaf: &pki::Leaf) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    pki::serve(listener, leaf.server());
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_show_in_the_api_and_in_blackbox_exporter_series() {
    let ca = pki::Ca::new("probe test CA", 365);
    let good = ca.leaf(&["127.0.0.1"], -1, 90);
    let soon = ca.leaf(&["127.0.0.1"], -60, 5);
    let expired = ca.leaf(&["127.0.0.1"], -60, -2);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), &ca.pem).unwrap();
    let mut yaml = String::from(
        "defaults: {interval: 300ms, timeout: 250ms, rise: 1, fall: 1, degrade_after: 1}\n\
         targets:\n",
    );
    for (id, leaf) in [("good", &good), ("soon", &soon), ("expired", &expired)] {
        let addr = serve(leaf).await;
        yaml.push_str(&format!(
            "  - id: {id}\n    tls: {{address: \"{addr}\", ca_file: ca.pem, expires_within: 14d}}\n"
        ));
    }
    std::fs::write(dir.path().join("certs.yaml"), yaml).unwrap();
    let daemon = Daemon::start(dir.path());
    daemon
        .wait_states(&[("good", "UP"), ("soon", "DEGRADED"), ("expired", "DOWN")])
        .await;

    let list = daemon.list().await;
    let tls = list.get("good").tls.clone().expect("tls facts of good");
    assert_eq!(tls.version.as_deref(), Some("TLS 1.3"));
    assert_eq!(tls.subject.as_deref(), Some("CN=127.0.0.1"));
    assert_eq!(tls.issuer.as_deref(), Some("CN=probe test CA"));
    assert!((88..=90).contains(&tls.days_left.unwrap()), "{tls:?}");
    assert_eq!(tls.chain.len(), 2);
    assert_eq!(tls.chain[1].subject, "CN=probe test CA");
    let soon_view = list.get("soon");
    assert!(
        soon_view.degraded_reasons[0].contains("expires in 4days"),
        "{:?}",
        soon_view.degraded_reasons
    );
    assert_eq!(soon_view.tls.as_ref().unwrap().days_left, Some(4));
    let expired_view = list.get("expired");
    let failure = expired_view.last_failure.as_ref().expect("a failure");
    assert_eq!(failure.reason, "tls");
    assert!(
        failure
            .detail
            .starts_with("certificate expired (CN=127.0.0.1"),
        "{}",
        failure.detail
    );
    // A refused certificate still shows its dates, and no version: none was agreed.
    let expired_tls = expired_view
        .tls
        .as_ref()
        .expect("facts of a refused certificate");
    assert_eq!(expired_tls.version, None);
    assert_eq!(expired_tls.days_left, Some(-2));

    let text = daemon.get("/metrics").await.text().await.unwrap();
    let metrics = support::prom::Metrics::parse(&text);
    for (id, leaf) in [("good", &good), ("soon", &soon), ("expired", &expired)] {
        let expiry = leaf.not_after.unix_timestamp() as f64;
        let of = [("target", id)];
        assert_eq!(
            metrics.value("probe_ssl_earliest_cert_expiry", &of),
            expiry,
            "{id}"
        );
        assert_eq!(
            metrics.value("probe_ssl_last_chain_expiry_timestamp_seconds", &of),
            expiry,
            "{id}"
        );
    }
    assert_eq!(
        metrics.value(
            "probe_tls_version_info",
            &[("target", "good"), ("version", "TLS 1.3")]
        ),
        1.0
    );
    assert_eq!(metrics.types["probe_ssl_earliest_cert_expiry"], "gauge");
    support::promtool_check(&text);
}
