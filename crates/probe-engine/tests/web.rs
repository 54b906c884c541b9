//! `--web-config`, the exporter-toolkit file, against clients no one here wrote: curl for TLS,
//! basic auth, the headers and the rate limit; curl with and without client certificates for
//! mutual TLS; a real Prometheus scraping `/metrics` over TLS with a CA file and basic auth;
//! grpcio checking health over TLS; `ctl` with `--cacert` and a token. Rotation: a new
//! certificate serves the next connection while an open one goes on, and a broken one keeps the
//! running config. A broken file is refused at start and by `check`, located.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use probe_testkit::AcceptServer;
use support::pki::{Authority, Issued};
use support::{BIN, Daemon, write_targets};
use tokio::time::Instant;

/// A bcrypt hash as `htpasswd -B` writes it (`$2y$`), at the cheapest cost.
fn hash(password: &str) -> String {
    bcrypt::hash_with_result(password, 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY)
}

/// What curl got: its exit code, the status (0 when none), the headers and the body.
struct Curl {
    code: Option<i32>,
    status: u16,
    head: String,
    body: String,
}

impl Curl {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn curl(args: &[&str]) -> Curl {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-", "-o", "/dev/stdout"])
        .args(args)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Curl {
        code: out.status.code(),
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// curl trusting the CA `ca`.
fn curl_trusting(ca: &str, args: &[&str]) -> Curl {
    let mut all = vec!["--cacert", ca];
    all.extend_from_slice(args);
    curl(&all)
}

/// A target that is UP, a server's certificate for 127.0.0.1 from `ca`, and a web config of
/// `tls_server_config` (with `tls_extra` lines in it) and `rest`.
struct Setup {
    dir: tempfile::TempDir,
    _up: AcceptServer,
    authority: Authority,
    web: PathBuf,
}

impl Setup {
    fn new(tls_extra: &str, rest: &str) -> Self {
        let up = AcceptServer::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_targets(dir.path(), &[("up", up.addr())]);
        let authority = Authority::root(dir.path(), "ca");
        authority.leaf(
            dir.path(),
            "server",
            "probe-engine",
            &["127.0.0.1", "localhost"],
            -1,
            90,
        );
        let web = dir.path().join("web.yml");
        std::fs::write(
            &web,
            format!(
                "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
                 {tls_extra}{rest}"
            ),
        )
        .unwrap();
        Self {
            dir,
            _up: up,
            authority,
            web,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn start(&self, extra: &[&str]) -> Daemon {
        let mut args = vec!["--web-config", self.web.to_str().unwrap()];
        args.extend_from_slice(extra);
        Daemon::start_with(&self.dir.path().join("targets.yaml"), &args)
    }
}

fn https(daemon: &Daemon, path: &str) -> String {
    format!("https://{}{path}", daemon.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_meets_tls_basic_auth_tokens_headers_and_the_rate_limit() {
    let setup = Setup::new(
        "",
        &format!(
            "basic_auth_users:\n  prometheus: {}\n\
             http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n\
             \x20   X-Frame-Options: deny\n",
            hash("s3cret")
        ),
    );
    let daemon = setup.start(&["--api-token", "ops=op-token", "--read-token", "grafana=rd"]);
    let ca = setup.authority.cert.to_str().unwrap();
    let url = |path| https(&daemon, path);

    // The right password reads, over TLS verified against the CA.
    let ok = curl_trusting(ca, &["-u", "prometheus:s3cret", &url("/metrics")]);
    assert_eq!((ok.code, ok.status), (Some(0), 200), "{}", ok.head);
    assert!(ok.body.contains("probe_engine_ready "), "{}", ok.body);
    assert_eq!(
        ok.header("strict-transport-security"),
        Some("max-age=31536000")
    );
    assert_eq!(ok.header("x-frame-options"), Some("deny"));

    // A wrong password, a user that does not exist, and nothing at all: 401 with a challenge.
    for creds in [
        vec!["-u", "prometheus:wrong"],
        vec!["-u", "mallory:s3cret"],
        vec![],
    ] {
        let target = url("/v1/targets");
        let mut args = creds.clone();
        args.push(&target);
        let refused = curl_trusting(ca, &args);
        assert_eq!(refused.status, 401, "{creds:?}: {}", refused.body);
        assert_eq!(
            refused.header("www-authenticate"),
            Some("Basic realm=\"probe-engine\", charset=\"UTF-8\""),
            "{creds:?}"
        );
        // The headers go on refusals too.
        assert_eq!(refused.header("x-frame-options"), Some("deny"));
    }

    // The health checks need no password: an orchestrator's probe carries none.
    let live = curl_trusting(ca, &[&url("/livez")]);
    assert_eq!(live.status, 200, "{}", live.body);

    // Tokens keep working: a read token reads, the operator token changes things.
    let read = curl_trusting(ca, &["-H", "Authorization: Bearer rd", &url("/v1/targets")]);
    assert_eq!(read.status, 200, "{}", read.body);
    let set = curl_trusting(
        ca,
        &[
            "-X",
            "PUT",
            "-H",
            "Authorization: Bearer op-token",
            "-H",
            "Content-Type: application/json",
            "--data",
            r#"{"reason": "over TLS", "duration": "10m"}"#,
            &url("/v1/targets/up/maintenance"),
        ],
    );
    assert_eq!(set.status, 200, "{}", set.body);
    // A basic user reads as a read token does, and cannot change anything.
    let change = curl_trusting(
        ca,
        &[
            "-u",
            "prometheus:s3cret",
            "-X",
            "DELETE",
            &url("/v1/targets/up/maintenance"),
        ],
    );
    assert_eq!(change.status, 401, "{}", change.body);
    let got = curl_trusting(ca, &["-u", "prometheus:s3cret", &url("/v1/targets/up")]);
    assert_eq!(got.status, 200, "{}", got.body);
    assert!(got.body.contains("\"MAINTENANCE\""), "{}", got.body);

    // Plain HTTP to the TLS port gets no answer; nor does TLS to a client that does not trust
    // the certificate.
    let plain = curl(&[&format!("http://{}/livez", daemon.addr)]);
    assert_eq!(plain.status, 0, "{}", plain.head);
    let untrusted = curl(&[&url("/livez")]);
    assert_eq!(untrusted.code, Some(60), "{}", untrusted.head);

    // HTTP/2 is offered by ALPN, as the file's `http2` (true by default) says.
    let h2 = curl_trusting(ca, &["--http2", "-u", "prometheus:s3cret", &url("/readyz")]);
    assert!(h2.head.starts_with("HTTP/2 200"), "{}", h2.head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_refuses_past_the_bucket_and_spares_the_health_checks() {
    let setup = Setup::new("", "rate_limit:\n  interval: 1h\n  burst: 2\n");
    let daemon = setup.start(&[]);
    let ca = setup.authority.cert.to_str().unwrap();
    let statuses: Vec<u16> = (0..3)
        .map(|_| curl_trusting(ca, &[&https(&daemon, "/v1/targets")]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
    let live = curl_trusting(ca, &[&https(&daemon, "/livez")]);
    assert_eq!(live.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_a_client_without_a_good_certificate() {
    let setup = Setup::new(
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients.pem\n\
         \x20 client_allowed_sans: [prometheus.example]\n",
        "",
    );
    let dir = setup.dir.path();
    let clients = Authority::root(dir, "clients");
    let good = clients.leaf(dir, "good", "prometheus", &["prometheus.example"], -1, 90);
    let other = clients.leaf(dir, "other", "grafana", &["grafana.example"], -1, 90);
    // Right names, wrong CA.
    let stranger = Authority::root(dir, "stranger");
    let forged = stranger.leaf(dir, "forged", "prometheus", &["prometheus.example"], -1, 90);
    let daemon = setup.start(&[]);
    let ca = setup.authority.cert.to_str().unwrap();
    let with = |client: &Issued, path: &str| {
        curl_trusting(
            ca,
            &[
                "--cert",
                client.cert.to_str().unwrap(),
                "--key",
                client.key.to_str().unwrap(),
                &https(&daemon, path),
            ],
        )
    };
    let accepted = with(&good, "/livez");
    assert_eq!(accepted.status, 200, "{}", accepted.head);
    let none = curl_trusting(ca, &[&https(&daemon, "/livez")]);
    assert_eq!(none.status, 0, "no certificate: {}", none.head);
    assert_ne!(none.code, Some(0));
    for (what, client) in [("a name not allowed", &other), ("another CA", &forged)] {
        let refused = with(client, "/livez");
        assert_eq!(refused.status, 0, "{what}: {}", refused.head);
        assert_ne!(refused.code, Some(0), "{what}");
    }
    let metrics = with(&good, "/livez");
    assert_eq!(metrics.status, 200);
    let failures = support::prom::Metrics::parse(&with(&good, "/metrics").body)
        .value("probe_engine_tls_handshake_failures_total", &[]);
    assert!(failures >= 3.0, "handshake failures counted: {failures}");
}

/// The certificate a new connection is served, as DER.
async fn served_certificate(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the peer's certificate")
        .to_vec()
}

fn trusting(ca: &Path) -> reqwest::Client {
    support::client();
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap())
        .tls_info(true)
        .build()
        .unwrap()
}

fn der_of(pem: &Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_file_iter(pem)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_serves_the_next_connection_and_open_ones_go_on() {
    let setup = Setup::new("", "");
    let dir = setup.dir.path();
    // The certificate and key are links into a directory elsewhere, as a mounted Secret's are:
    // a file rewritten there is not seen by the watch, so only SIGHUP brings it in.
    let elsewhere = tempfile::tempdir().unwrap();
    for file in ["server.pem", "server.key"] {
        std::fs::rename(dir.join(file), elsewhere.path().join(file)).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(file), dir.join(file)).unwrap();
    }
    let mut daemon = setup.start(&[]);
    let url = https(&daemon, "/livez");
    let served = |client: reqwest::Client| {
        let url = url.clone();
        async move { served_certificate(&client, &url).await }
    };
    let trusted = || trusting(&setup.authority.cert);
    let first = der_of(&dir.join("server.pem"));
    let open = trusted();
    assert_eq!(served_certificate(&open, &url).await, first);

    // Rewritten where the links lead, and SIGHUP.
    setup
        .authority
        .leaf(elsewhere.path(), "server", "second", &["127.0.0.1"], -1, 90);
    daemon.signal("-HUP");
    daemon.wait_log("web config reloaded");
    let second = der_of(&dir.join("server.pem"));
    assert_ne!(first, second);
    assert_eq!(served(trusted()).await, second, "a new connection gets it");
    assert_eq!(
        served_certificate(&open, &url).await,
        first,
        "the connection opened before goes on with its own"
    );

    // A new key and certificate renamed over the links, as certbot does: seen, no signal.
    let staged = tempfile::tempdir_in(dir).unwrap();
    let issued = setup
        .authority
        .leaf(staged.path(), "server", "third", &["127.0.0.1"], -1, 90);
    std::fs::rename(&issued.key, dir.join("server.key")).unwrap();
    std::fs::rename(&issued.cert, dir.join("server.pem")).unwrap();
    daemon.wait_log("web config reloaded");
    let third = der_of(&dir.join("server.pem"));
    assert_eq!(served(trusted()).await, third);

    // A broken certificate keeps the running config, and says why.
    std::fs::write(dir.join("server.pem"), "not a certificate").unwrap();
    let refused = daemon.wait_log("web config not reloaded: the running one stays");
    let why = format!(
        "web.yml:2:14: no CERTIFICATE block in \"{}\"",
        dir.join("server.pem").display()
    );
    assert!(
        refused["error"].as_str().unwrap().ends_with(&why),
        "{refused}"
    );
    assert_eq!(served(trusted()).await, third);
    let metrics = curl_trusting(
        setup.authority.cert.to_str().unwrap(),
        &[&https(&daemon, "/metrics")],
    );
    let metrics = support::prom::Metrics::parse(&metrics.body);
    assert_eq!(
        metrics.value("probe_engine_web_config_last_reload_successful", &[]),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_over_tls_with_a_ca_file_and_basic_auth() {
    let setup = Setup::new(
        "",
        &format!("basic_auth_users:\n  prometheus: {}\n", hash("s3cret")),
    );
    let daemon = setup.start(&[]);
    let config = format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n\
         \x20 - job_name: tls\n    scheme: https\n    tls_config: {{ca_file: {ca}}}\n\
         \x20   basic_auth: {{username: prometheus, password: s3cret}}\n\
         \x20   static_configs: [{{targets: ['{addr}']}}]\n\
         \x20 - job_name: wrong-password\n    scheme: https\n    tls_config: {{ca_file: {ca}}}\n\
         \x20   basic_auth: {{username: prometheus, password: nope}}\n\
         \x20   static_configs: [{{targets: ['{addr}']}}]\n",
        ca = setup.authority.cert.display(),
        addr = daemon.addr
    );
    let Some(prometheus) = probe_testkit::prometheus_or_skip(&config) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = |job: &str| {
            let query = format!("up{{job=\"{job}\"}}");
            let prometheus = &prometheus;
            async move {
                prometheus
                    .query(&query)
                    .await
                    .and_then(|r| r.first().cloned())
                    .and_then(|s| s["value"][1].as_str().map(str::to_owned))
            }
        };
        let ready = prometheus
            .query("probe_engine_ready{job=\"tls\"}")
            .await
            .unwrap_or_default();
        if let (Some(tls), Some(wrong)) = (up("tls").await, up("wrong-password").await)
            && !ready.is_empty()
        {
            assert_eq!((tls.as_str(), wrong.as_str()), ("1", "0"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped: {}",
            prometheus.log(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// grpcio's Check over TLS, trusting `ca`; the status's name, or the error.
const GRPC_CHECK: &str = r#"
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
addr, ca = sys.argv[1], sys.argv[2]
if ca == "-":
    channel = grpc.insecure_channel(addr)
else:
    channel = grpc.secure_channel(addr, grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read()))
try:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=5)
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
except grpc.RpcError as e:
    print(e.code().name)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_checks_health_over_tls() {
    if support::peers::Grpcio::start().is_none() {
        return;
    }
    let setup = Setup::new("", "");
    let daemon = setup.start(&["--grpc-listen", "127.0.0.1:0"]);
    let grpc = daemon
        .all_logs()
        .into_iter()
        .find(|l| l["message"] == "grpc health listening")
        .expect("the gRPC listener's line");
    assert_eq!(grpc["tls"], true);
    let addr = grpc["addr"].as_str().unwrap().to_owned();
    let check = |ca: &str| {
        let out = Command::new("python3")
            .args(["-c", GRPC_CHECK, &addr, ca])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(check(setup.authority.cert.to_str().unwrap()), "SERVING");
    assert_eq!(check("-"), "UNAVAILABLE", "plaintext to a TLS listener");
}

fn ctl(api: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["ctl", "--api", api])
        .args(args)
        .env_remove("PROBE_ENGINE_API_TOKEN")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_speaks_tls_with_a_ca_file_and_a_token() {
    let setup = Setup::new(
        "",
        &format!("basic_auth_users:\n  prometheus: {}\n", hash("s3cret")),
    );
    let daemon = setup.start(&["--api-token", "op"]);
    let api = https(&daemon, "");
    let ca = setup.authority.cert.to_str().unwrap();
    let listed = ctl(
        &api,
        &["--cacert", ca, "--token", "op", "targets", "-o", "json"],
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(json["targets"][0]["id"], "up", "{json}");
    let set = ctl(
        &api,
        &[
            "--cacert",
            ca,
            "--token",
            "op",
            "maintenance",
            "set",
            "up",
            "--for",
            "10m",
            "--reason",
            "via ctl",
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let got = curl_trusting(
        ca,
        &["-u", "prometheus:s3cret", &https(&daemon, "/v1/targets/up")],
    );
    assert!(got.body.contains("via ctl"), "{}", got.body);
    // Without the CA, the certificate is not trusted: the daemon cannot be reached (3).
    let untrusted = ctl(&api, &["--token", "op", "targets"]);
    assert_eq!(untrusted.status.code(), Some(3));
    // Without a token, the door refuses: 4, the token refused.
    let refused = ctl(&api, &["--cacert", ca, "targets"]);
    assert_eq!(
        refused.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_web_config_is_refused_at_start_and_by_check_with_every_error_located() {
    let setup = Setup::new(
        "  client_ca_file: nowhere.pem\n  min_version: TLS14\n",
        "basic_auth_users:\n  prometheus: s3cret\n\
         http_server_config:\n  headers:\n    Content-Type: text/plain\n\
         rate_limit: {interval: 1s}\nbasic_auth_user: {}\n",
    );
    let web = setup.web.display().to_string();
    let check = Command::new(BIN)
        .args([
            "check",
            "--config",
            &setup.path("targets.yaml"),
            "--web-config",
            &web,
        ])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    let stderr = String::from_utf8(check.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    let expected = [
        format!(
            "{web}:4:3: client CAs without a \"client_auth_type\" that verifies with them (VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
        ),
        format!(
            "{web}:4:19: cannot read the client CA file \"{}\": No such file or directory (os error 2)",
            setup.path("nowhere.pem")
        ),
        format!(
            "{web}:5:16: unknown TLS version \"TLS14\" for \"min_version/max_version\", did you mean \"TLS10\"?"
        ),
        format!(
            "{web}:7:15: user \"prometheus\": not a bcrypt hash (Invalid hash: the hash format is malformed; expected 60 ASCII bytes): make one with `htpasswd -nBC 10 USER` and keep what follows the colon"
        ),
        format!(
            "{web}:10:5: header \"Content-Type\" cannot be set here; these can: Strict-Transport-Security, X-Content-Type-Options, X-Frame-Options, X-XSS-Protection, Content-Security-Policy"
        ),
        format!(
            "{web}:11:1: burst must be at least 1 with an interval: a bucket of 0 refuses every request"
        ),
        format!(
            "{web}:12:1: unknown field \"basic_auth_user\" in web config, did you mean \"basic_auth_users\"?"
        ),
    ];
    assert_eq!(
        lines[..lines.len() - 1],
        expected.iter().map(String::as_str).collect::<Vec<_>>(),
        "{stderr}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("{} errors in {web}", expected.len()).as_str())
    );

    let run = support::refused_start(
        &setup.dir.path().join("targets.yaml"),
        &["--web-config", &web],
    );
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains(&expected[0]), "{stderr}");
}
