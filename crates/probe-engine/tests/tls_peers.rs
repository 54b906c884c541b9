//! The TLS trust held side by side with blackbox_exporter, against servers no one here wrote.
//!
//! Every case is a real `openssl s_server` on 127.0.0.1 presenting certificates made for it (by
//! rcgen where dates in the past are needed, by the `openssl` command where only it will make
//! them: `req -x509`, SHA-1 signatures, 1024-bit RSA keys). blackbox_exporter's `tcp` prober
//! with `tls: true` and our TLS tier probe the same server with the same `ca_file` and server
//! name: they must agree on success, and where both pass, on the certificate series. A refusal
//! must be a sentence naming the certificate, never a library's debug text.
//!
//! One case differs on purpose: a 1024-bit RSA server key, which Go accepts and we refuse (the
//! README says why).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use probe::Address;
use probe::outcome::{CheckResult, Verdict};
use probe::tier::Probe;
use probe::tier::http::{HttpProbe, HttpSpec};
use probe::tier::resolve::Names;
use probe::tier::tls::{CaBundle, StartTls, TlsProbe, TlsSpec, TlsTrust};
use probe_testkit::{OpensslServer, blackbox_or_skip, openssl};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use support::pki::{Authority, Issued, dates, write};
use support::prom::assert_same_probe_series;

impl Authority {
    /// A server certificate for localhost made by `openssl x509 -req`, with this key and digest:
    /// what rcgen will not make (SHA-1, RSA 1024).
    fn openssl_leaf(&self, dir: &Path, file: &str, key: &str, digest: &str) -> Issued {
        let cert = dir.join(format!("{file}.pem"));
        let key_path = dir.join(format!("{file}.key"));
        let csr = dir.join(format!("{file}.csr"));
        let ext = dir.join(format!("{file}.ext"));
        std::fs::write(&ext, "subjectAltName=DNS:localhost\n").unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-newkey",
                key,
                "-nodes",
                "-keyout",
                &s(&key_path),
                "-out",
                &s(&csr),
                "-subj",
                "/CN=localhost",
            ],
        )
        .unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &s(&csr),
                "-CA",
                &s(&self.cert),
                "-CAkey",
                &s(&self.key),
                "-set_serial",
                "7",
                "-days",
                "30",
                digest,
                "-extfile",
                &s(&ext),
                "-out",
                &s(&cert),
            ],
        )
        .unwrap();
        Issued {
            cert,
            key: key_path,
        }
    }
}

/// A self-signed server certificate (not a CA's) for `names`, valid from `from` to `to` days from
/// now.
fn self_signed_leaf(dir: &Path, file: &str, names: &[&str], from: i64, to: i64) -> Issued {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    dates(&mut params, from, to);
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = write(dir, file, &cert.pem(), &key);
    Issued {
        cert: cert_path,
        key: key_path,
    }
}

/// An SMTP server that offers STARTTLS and upgrades with Python's `ssl` module (OpenSSL), run as
/// `python3 -c SMTP_STARTTLS CERT KEY`; it prints its port once it listens. `openssl s_server`
/// has no STARTTLS of its own (that is `s_client`'s), and a server of ours would put rustls on
/// both ends.
const SMTP_STARTTLS: &str = r#"
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    try:
        conn.settimeout(5)
        lines = conn.makefile("rb")
        conn.sendall(b"220 compat ESMTP\r\n")
        while True:
            line = lines.readline().strip().upper()
            if not line:
                break
            if line.startswith(b"EHLO") or line.startswith(b"HELO"):
                conn.sendall(b"250-compat\r\n250 STARTTLS\r\n")
            elif line == b"STARTTLS":
                conn.sendall(b"220 go ahead\r\n")
                tls = ctx.wrap_socket(conn, server_side=True)
                try:
                    tls.recv(1)
                except Exception:
                    pass
                break
            else:
                conn.sendall(b"502 unknown\r\n")
    except Exception:
        pass
    finally:
        conn.close()
"#;

/// [`SMTP_STARTTLS`] running, killed when dropped.
struct Smtp(std::process::Child, std::net::SocketAddr);

impl Smtp {
    fn start(leaf: &Issued) -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new("python3")
            .args(["-c", SMTP_STARTTLS])
            .arg(&leaf.cert)
            .arg(&leaf.key)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the SMTP server's port");
        Self(child, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One server, and what both probers must make of it.
struct Case {
    name: &'static str,
    server: OpensslServer,
    ca_file: PathBuf,
    server_name: &'static str,
    /// blackbox_exporter's verdict, which ours must equal unless `we_refuse` is set.
    passes: bool,
    /// The start of our failure's detail, when we refuse it.
    refusal: Option<&'static str>,
    /// A case we refuse on purpose where blackbox_exporter passes.
    we_refuse: bool,
}

fn concat(dir: &Path, file: &str, pems: &[&str]) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, pems.concat()).unwrap();
    path
}

fn serve(leaf: &Issued, chain: Option<&Path>, extra: &[&str]) -> OpensslServer {
    OpensslServer::start(&leaf.cert, &leaf.key, chain, extra).unwrap()
}

async fn ours(case: &Case) -> CheckResult {
    let spec = TlsSpec::new(Address::Socket(case.server.addr()))
        .unwrap()
        .with_server_name(case.server_name)
        .unwrap();
    let mut spec = spec;
    spec.trust = TlsTrust::WithCa(CaBundle::from_file(&case.ca_file).unwrap());
    TlsProbe::new(spec, Names::system())
        .check(Duration::from_secs(5))
        .await
}

fn seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_tier_agrees_with_blackbox_exporter_on_openssl_servers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if probe_testkit::openssl(d, &["version"]).is_err() {
        probe_testkit::skipped_outside_ci("openssl is not installed");
        return;
    }
    let root = Authority::root(d, "compat root");
    let inter = root.intermediate(d, "compat intermediate", -1, 365);
    let inter2 = inter.intermediate(d, "compat intermediate 2", -1, 365);
    let expired_inter = root.intermediate(d, "expired intermediate", -60, -1);
    let stranger = Authority::root(d, "unrelated root");
    let root_ca = root.cert.clone();
    let weak_seclevel = ["-cipher", "DEFAULT:@SECLEVEL=0"];

    // The commonest internal setup: a self-signed certificate from `openssl req -x509` (which
    // marks it CA:TRUE), given as its own ca_file.
    let self_signed = {
        let s = |p: PathBuf| p.to_str().unwrap().to_owned();
        let (cert, key) = (d.join("self.pem"), d.join("self.key"));
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &s(key.clone()),
                "-out",
                &s(cert.clone()),
                "-days",
                "30",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ],
        )
        .unwrap();
        Issued { cert, key }
    };
    let under_inter = inter.leaf(d, "under-inter", "localhost", &["localhost"], -1, 90);
    let under_inter2 = inter2.leaf(d, "under-inter2", "localhost", &["localhost"], -1, 90);
    let under_root = root.leaf(d, "under-root", "localhost", &["localhost"], -1, 90);
    let chain_inter = concat(d, "chain-inter.pem", &[&inter.pem]);

    let mut cases = vec![
        Case {
            name: "self_signed_ca_true",
            server: serve(&self_signed, None, &[]),
            ca_file: self_signed.cert.clone(),
            server_name: "localhost",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "tls12_only",
            server: serve(&under_root, None, &["-tls1_2"]),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "with_intermediate",
            server: serve(&under_inter, Some(&chain_inter), &[]),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "out_of_order",
            // The leaf's issuer sent last, after its own issuer.
            server: serve(
                &under_inter2,
                Some(&concat(d, "chain-reversed.pem", &[&inter.pem, &inter2.pem])),
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "extra_certificate",
            server: serve(
                &under_inter,
                Some(&concat(d, "chain-extra.pem", &[&inter.pem, &stranger.pem])),
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "ip_san",
            server: serve(
                &root.leaf(d, "ip", "127.0.0.1", &["127.0.0.1"], -1, 90),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "127.0.0.1",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "wildcard",
            server: serve(
                &root.leaf(d, "wild", "*.example.test", &["*.example.test"], -1, 90),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "api.example.test",
            passes: true,
            refusal: None,
            we_refuse: false,
        },
        Case {
            name: "missing_intermediate",
            server: serve(&under_inter, None, &[]),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "no certificate of the chain is signed by a trusted one (the server sent 1 \
                 certificate: CN=localhost, valid ",
            ),
            we_refuse: false,
        },
        Case {
            name: "expired_intermediate",
            server: serve(
                &expired_inter.leaf(d, "under-expired", "localhost", &["localhost"], -1, 90),
                Some(&concat(d, "chain-expired.pem", &[&expired_inter.pem])),
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "the chain's certificate 2 is expired (CN=expired intermediate, a CA, valid ",
            ),
            we_refuse: false,
        },
        Case {
            name: "expired_leaf",
            server: serve(
                &root.leaf(d, "expired", "localhost", &["localhost"], -30, -1),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some("certificate expired (CN=localhost, valid "),
            we_refuse: false,
        },
        Case {
            name: "wrong_name",
            server: serve(
                &root.leaf(
                    d,
                    "elsewhere",
                    "elsewhere.test",
                    &["elsewhere.test"],
                    -1,
                    90,
                ),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some("certificate for elsewhere.test, not localhost (CN=elsewhere.test, "),
            we_refuse: false,
        },
        Case {
            name: "common_name_only",
            server: serve(
                &root.leaf(d, "cn-only", "localhost", &[], -1, 90),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "certificate names no host, so not localhost: it has no subjectAltName, and its \
                 common name alone is not read (as by Go and browsers) (CN=localhost, valid ",
            ),
            we_refuse: false,
        },
        Case {
            name: "sha1_signature",
            server: serve(
                &root.openssl_leaf(d, "sha1", "rsa:2048", "-sha1"),
                None,
                &weak_seclevel,
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "certificate signed with SHA-1, which is refused as forgeable (as by Go and \
                 browsers) (CN=localhost, valid ",
            ),
            we_refuse: false,
        },
        Case {
            name: "rsa_1024",
            server: serve(
                &root.openssl_leaf(d, "rsa1024", "rsa:1024", "-sha256"),
                None,
                &weak_seclevel,
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: Some(
                "the server's RSA key is 1024 bits; keys under 2048 bits are refused \
                 (CN=localhost, valid ",
            ),
            we_refuse: true,
        },
        Case {
            name: "ca_as_server_certificate",
            // A CA's certificate, issued by the trusted root, serving as the server's own.
            server: serve(
                &root.leaf_with(d, "ca-leaf", |p| {
                    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                }),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: true,
            refusal: Some(
                "the server's certificate is a CA certificate and is not among the trusted ones \
                 (CN=localhost, a CA, valid ",
            ),
            we_refuse: true,
        },
        Case {
            name: "client_certificate",
            server: serve(
                &root.leaf_with(d, "client-leaf", |p| {
                    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
                }),
                None,
                &[],
            ),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "certificate not meant for TLS servers: its extended key usage lacks serverAuth \
                 (CN=localhost, valid ",
            ),
            we_refuse: false,
        },
        Case {
            name: "self_signed_untrusted",
            server: serve(&self_signed, None, &[]),
            ca_file: root_ca.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(
                "no certificate of the chain is signed by a trusted one (the server sent 1 \
                 certificate: CN=localhost, a CA, valid ",
            ),
            we_refuse: false,
        },
    ];
    // A trusted self-signed certificate is still checked for its dates and its name.
    let expired_self = self_signed_leaf(d, "expired-self", &["localhost"], -30, -1);
    let elsewhere_self = self_signed_leaf(d, "elsewhere-self", &["elsewhere.test"], -1, 30);
    for (name, issued, refusal) in [
        (
            "trusted_self_signed_expired",
            &expired_self,
            "certificate expired (CN=localhost, valid ",
        ),
        (
            "trusted_self_signed_wrong_name",
            &elsewhere_self,
            "certificate for elsewhere.test, not localhost (CN=elsewhere.test, valid ",
        ),
    ] {
        cases.push(Case {
            name,
            server: serve(issued, None, &[]),
            ca_file: issued.cert.clone(),
            server_name: "localhost",
            passes: false,
            refusal: Some(refusal),
            we_refuse: false,
        });
    }

    let mut config = String::from(
        "modules:\n  https_self_signed:\n    prober: http\n    timeout: 5s\n    http:\n      \
         preferred_ip_protocol: ip4\n      tls_config:\n        ca_file: ",
    );
    config.push_str(&format!("{}\n", self_signed.cert.display()));
    config.push_str(&format!(
        "  smtp_starttls:\n    prober: tcp\n    timeout: 5s\n    tcp:\n      \
         preferred_ip_protocol: ip4\n      query_response:\n        - expect: \"^220\"\n        \
         - send: \"EHLO prober\\r\"\n        - expect: \"^250 STARTTLS\"\n        \
         - send: \"STARTTLS\\r\"\n        - expect: \"^220\"\n        - starttls: true\n      \
         tls_config:\n        ca_file: {}\n        server_name: localhost\n",
        root_ca.display()
    ));
    for case in &cases {
        config.push_str(&format!(
            "  {}:\n    prober: tcp\n    timeout: 5s\n    tcp:\n      preferred_ip_protocol: ip4\n      \
             ip_protocol_fallback: false\n      tls: true\n      tls_config:\n        ca_file: {}\n        \
             server_name: {}\n",
            case.name,
            case.ca_file.display(),
            case.server_name
        ));
    }
    let Some(blackbox) = blackbox_or_skip(&config) else {
        return;
    };
    // Our `/probe` on the same file, which must answer as the exporter does.
    std::fs::write(d.join("blackbox.yml"), &config).unwrap();
    std::fs::write(d.join("probes.yaml"), "targets: []\n").unwrap();
    let daemon = support::Daemon::start_with(
        &d.join("probes.yaml"),
        &[
            "--blackbox-config",
            d.join("blackbox.yml").to_str().unwrap(),
        ],
    );
    let same_series = async |module: &str, target: &str, theirs: &str, varying: &[&str]| {
        let ours = daemon
            .get(&format!("/probe?module={module}&target={target}"))
            .await
            .text()
            .await
            .unwrap();
        assert_same_probe_series(module, &ours, theirs, varying);
    };

    let mut disagreements = Vec::new();
    for case in &cases {
        let theirs = blackbox
            .probe(case.name, &case.server.addr().to_string())
            .await
            .unwrap();
        assert_eq!(theirs.status, 200, "{}: {}", case.name, theirs.body);
        let their_success = theirs.success().expect("probe_success");
        if !case.we_refuse {
            same_series(
                case.name,
                &case.server.addr().to_string(),
                &theirs.body,
                &[],
            )
            .await;
        }
        let result = ours(case).await;
        let our_success = !matches!(result.verdict, Verdict::Failed(_));
        if their_success != case.passes {
            disagreements.push(format!(
                "{}: blackbox_exporter says {their_success}, the case expects {}",
                case.name, case.passes
            ));
        }
        if our_success != (case.passes && !case.we_refuse) {
            disagreements.push(format!("{}: ours {:?}", case.name, result.verdict));
        }
        match (&result.verdict, case.refusal) {
            (Verdict::Failed(failure), Some(start)) => {
                assert!(
                    failure.detail.starts_with(start),
                    "{}: {:?} does not start with {start:?}",
                    case.name,
                    failure.detail
                );
                for debug in ["Other(", "OtherError", "Context {", "\")"] {
                    assert!(
                        !failure.detail.contains(debug),
                        "{}: {}",
                        case.name,
                        failure.detail
                    );
                }
            }
            (Verdict::Failed(_), None) | (_, Some(_)) => {}
            (_, None) => {
                // Both passed: the certificate series agree.
                let facts = result.tls.as_ref().expect("facts");
                assert_eq!(
                    theirs.value("probe_ssl_earliest_cert_expiry"),
                    facts.earliest_expiry().map(seconds),
                    "{}",
                    case.name
                );
                assert_eq!(
                    theirs.value("probe_ssl_last_chain_expiry_timestamp_seconds"),
                    facts.chain_expiry().map(seconds),
                    "{}",
                    case.name
                );
                let version = facts.version.expect("a version");
                assert!(
                    theirs.body.contains(&format!(
                        "probe_tls_version_info{{version=\"{version}\"}} 1"
                    )),
                    "{}: {version}: {}",
                    case.name,
                    theirs.body
                );
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");

    // HTTPS trusts the same way: the self-signed server of the first case, through its IP SAN.
    let url = format!("https://{}/", cases[0].server.addr());
    let theirs = blackbox.probe("https_self_signed", &url).await.unwrap();
    assert_eq!(theirs.success(), Some(true), "{}", theirs.body);
    // `s_server -www`'s page lists the client's own cipher suites: its length is the client's.
    same_series(
        "https_self_signed",
        &url,
        &theirs.body,
        &["probe_http_uncompressed_body_length"],
    )
    .await;
    let mut https = HttpSpec::get(url.parse().unwrap());
    https.tls = TlsTrust::WithCa(CaBundle::from_file(&self_signed.cert).unwrap());
    let result = HttpProbe::new(https, Names::system())
        .check(Duration::from_secs(5))
        .await;
    assert_eq!(result.verdict, Verdict::Up);

    // STARTTLS: SMTP, upgraded by OpenSSL (through Python's ssl module).
    let smtp = Smtp::start(&under_root);
    let theirs = blackbox
        .probe("smtp_starttls", &smtp.1.to_string())
        .await
        .unwrap();
    assert_eq!(theirs.success(), Some(true), "{}", theirs.body);
    same_series("smtp_starttls", &smtp.1.to_string(), &theirs.body, &[]).await;
    let mut spec = TlsSpec::new(Address::Socket(smtp.1))
        .unwrap()
        .with_server_name("localhost")
        .unwrap();
    spec.trust = TlsTrust::WithCa(CaBundle::from_file(&root_ca).unwrap());
    spec.starttls = Some(StartTls::Smtp);
    let result = TlsProbe::new(spec, Names::system())
        .check(Duration::from_secs(5))
        .await;
    assert_eq!(result.verdict, Verdict::Up);
    let facts = result.tls.expect("facts");
    assert_eq!(
        theirs.value("probe_ssl_earliest_cert_expiry"),
        facts.earliest_expiry().map(seconds)
    );

    // A plain-text port (the exporter's own HTTP listener) answering a ClientHello.
    let spec = TlsSpec::new(Address::Socket(blackbox.addr()))
        .unwrap()
        .with_server_name("localhost")
        .unwrap();
    let result = TlsProbe::new(spec, Names::system())
        .check(Duration::from_secs(5))
        .await;
    let Verdict::Failed(failure) = result.verdict else {
        panic!("TLS to a plain-text port passed");
    };
    assert_eq!(
        failure.detail,
        "the server did not answer in TLS (invalid content type): is the port plain text?"
    );
}
