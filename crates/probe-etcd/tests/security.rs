//! The sync through etcd's authentication and over mutual TLS, against a real etcd.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use probe_etcd::etcd_client::{Certificate, Identity, TlsOptions};
use probe_etcd::{
    ClientCert, Credentials, DEFAULT_PREFIX, Snapshot, Source, SourceConfig, Status, SyncState,
    TlsFiles,
};
use probe_testkit::etcd::{ServerTls, TestEtcd, wait_for};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const SOON: Duration = Duration::from_secs(10);

fn quick(mut config: SourceConfig) -> SourceConfig {
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(2);
    config.backoff.min = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(200);
    config
}

/// Runs `source` until `until` holds for its snapshot and it is synced, then stops it.
async fn sync_until(source: Source, until: impl FnMut(&Arc<Snapshot>) -> bool) {
    let mut snapshots = source.snapshots();
    let mut status = source.status();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(source.run(cancel.clone()));
    wait_for(&mut snapshots, SOON, until).await;
    wait_for(&mut status, SOON, |s| s.state == SyncState::Synced).await;
    cancel.cancel();
    task.await.unwrap();
}

async fn failing_status(source: Source) -> Status {
    let mut status: watch::Receiver<Status> = source.status();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(source.run(cancel.clone()));
    let failed = wait_for(&mut status, SOON, |s| s.counters.failures >= 1).await;
    cancel.cancel();
    task.await.unwrap();
    failed
}

#[tokio::test]
async fn syncs_with_credentials_and_reports_bad_ones() {
    let etcd = TestEtcd::start().await.unwrap();
    let mut client = etcd.client().await.unwrap();
    client
        .put(format!("{DEFAULT_PREFIX}web"), "{}", None)
        .await
        .unwrap();
    client.user_add("root", "s3cret", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();

    let mut config = quick(SourceConfig::new([etcd.endpoint()]));
    config.credentials = Some(Credentials {
        username: "root".into(),
        password: "s3cret".into(),
    });
    sync_until(Source::new(config.clone()).unwrap(), |s| {
        s.get("web").is_some()
    })
    .await;

    config.credentials = Some(Credentials {
        username: "root".into(),
        password: "wrong".into(),
    });
    let failed = failing_status(Source::new(config.clone()).unwrap()).await;
    assert!(
        matches!(&failed.state, SyncState::Syncing { last_error: Some(e) } if e.contains("connect")),
        "{failed:?}"
    );

    config.credentials = None;
    let failed = failing_status(Source::new(config).unwrap()).await;
    assert!(
        matches!(
            failed.state,
            SyncState::Syncing {
                last_error: Some(_)
            }
        ),
        "{failed:?}"
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files in `dir`.
fn certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "probe-etcd test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |name: &str, sans: Vec<String>| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.signed_by(&key, &issuer).unwrap();
        fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    };
    leaf("server", vec!["127.0.0.1".into(), "localhost".into()]);
    leaf("client", Vec::new());
    fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
}

#[tokio::test]
async fn syncs_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    certificates(dir.path());
    let harness_tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(fs::read(path("ca.pem")).unwrap()))
        .identity(Identity::from_pem(
            fs::read(path("client.pem")).unwrap(),
            fs::read(path("client-key.pem")).unwrap(),
        ));
    let etcd = TestEtcd::start_tls(ServerTls {
        cert_file: path("server.pem"),
        key_file: path("server-key.pem"),
        client_ca_file: Some(path("ca.pem")),
        client: harness_tls,
    })
    .await
    .unwrap();
    assert!(etcd.endpoint().starts_with("https://"));
    let mut client = etcd.client().await.unwrap();
    client
        .put(format!("{DEFAULT_PREFIX}db"), "{}", None)
        .await
        .unwrap();

    let mut config = quick(SourceConfig::new([etcd.endpoint()]));
    config.tls = Some(TlsFiles {
        ca_file: Some(path("ca.pem")),
        client_cert: Some(ClientCert {
            cert_file: path("client.pem"),
            key_file: path("client-key.pem"),
        }),
        domain: None,
    });
    sync_until(Source::new(config.clone()).unwrap(), |s| {
        s.get("db").is_some()
    })
    .await;

    // Without a client certificate etcd refuses the connection.
    if let Some(tls) = config.tls.as_mut() {
        tls.client_cert = None;
    }
    let failed = failing_status(Source::new(config).unwrap()).await;
    assert!(
        matches!(
            failed.state,
            SyncState::Syncing {
                last_error: Some(_)
            }
        ),
        "{failed:?}"
    );
}
