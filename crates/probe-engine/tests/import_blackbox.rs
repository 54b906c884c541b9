//! `probe-engine import blackbox` against blackbox_exporter itself: one `blackbox.yml` and one
//! `prometheus.yml`, written here, given to a real exporter (its `/probe`) and, imported, to our
//! daemon. For every fixture on 127.0.0.1 (HTTP answering 200, 503, a redirect and a body a
//! regex judges; TCP conversations (IRC's answer to a PING among them), one over TLS with a
//! certificate for the right address and for another, and SMTP's STARTTLS granted and refused;
//! DNS through dnsmasq with a right answer, a wrong one, NXDOMAIN and an SOA; ICMP to the
//! loopback) the exporter's `probe_success` and our scheduled verdict agree, and our `/probe` on
//! the same file answers with the exporter's series.
//! And the command's own contract: the output passes `check`, ids are stable, what cannot be
//! expressed goes to stderr (exit 1 with `--strict`), invalid input exits 2 with its place.

mod support;

#[path = "../../probe/tests/support/dns.rs"]
mod dns;

#[path = "../../probe/tests/support/pki.rs"]
mod pki;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Output};

use probe_testkit::blackbox_or_skip;
use support::prom::assert_same_probe_series;
use support::{BIN, Daemon};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// An HTTP server: `/ok` 200 with "all good", `/fail` 503, `/redirect` 302 to `/ok`, `/broken`
/// 200 with a body that says it is broken. Each reply closes its connection.
async fn http_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, extra, body) = match path.as_str() {
                    "/ok" => ("200 OK", "", "all good"),
                    "/redirect" => ("302 Found", "Location: /ok\r\n", ""),
                    "/broken" => ("200 OK", "", "status: broken"),
                    _ => ("503 Service Unavailable", "", "down"),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// A line protocol: greets with `+OK ready`, answers `PING` with `pong` (`+PONG` when `good`).
async fn tcp_server(good: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                if write.write_all(b"+OK ready\r\n").await.is_err() {
                    return;
                }
                let mut line = String::new();
                let mut reader = BufReader::new(read);
                if reader.read_line(&mut line).await.is_err() {
                    return;
                }
                let answer: &[u8] = match (line.trim_end(), good) {
                    ("PING", true) => b"+PONG\r\n",
                    _ => b"-ERR wrong\r\n",
                };
                let _ = write.write_all(answer).await;
                let _ = write.shutdown().await;
            });
        }
    });
    addr
}

/// A TLS server presenting `leaf` that greets with `* OK ready` once the handshake is done.
async fn tls_server(leaf: &pki::Leaf) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(stream).await {
                    let _ = tls.write_all(b"* OK ready\r\n").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// An IRC server: after NICK and USER it sends a PING, and welcomes whoever answers its PONG.
async fn irc_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                for _ in 0..2 {
                    let _ = lines.next_line().await;
                }
                let _ = write.write_all(b"PING :cookie-42\r\n").await;
                if let Ok(Some(pong)) = lines.next_line().await {
                    let answer: &[u8] = if pong == "PONG cookie-42" {
                        b":irc.test 001 prober :Welcome\r\n"
                    } else {
                        b"ERROR :wrong pong\r\n"
                    };
                    let _ = write.write_all(answer).await;
                }
            });
        }
    });
    addr
}

/// An SMTP server that offers STARTTLS and, when `upgrades`, goes over to TLS (presenting
/// `leaf`) and answers the second EHLO there; otherwise it refuses with 454.
async fn smtp_server(leaf: &pki::Leaf, upgrades: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let mut line = String::new();
                {
                    let (read, mut write) = stream.split();
                    let mut reader = BufReader::new(read);
                    let _ = write.write_all(b"220 fixture ESMTP\r\n").await;
                    let _ = reader.read_line(&mut line).await;
                    let _ = write.write_all(b"250-fixture\r\n250 STARTTLS\r\n").await;
                    line.clear();
                    let _ = reader.read_line(&mut line).await;
                    if !upgrades {
                        let _ = write.write_all(b"454 TLS not available\r\n").await;
                        return;
                    }
                    let _ = write.write_all(b"220 go ahead\r\n").await;
                }
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let (read, mut write) = tokio::io::split(tls);
                let mut reader = BufReader::new(read);
                line.clear();
                if reader.read_line(&mut line).await.is_ok() && line.starts_with("EHLO") {
                    let _ = write.write_all(b"250 fixture over TLS\r\n").await;
                }
            });
        }
    });
    addr
}

/// The `blackbox.yml` of the comparison; `ca` is the CA file the TLS modules trust.
fn blackbox_yml(ca: &Path) -> String {
    format!(
        r#"
modules:
  tls_banner:
    prober: tcp
    timeout: 2s
    tcp:
      tls: true
      tls_config: {{ca_file: "{ca}"}}
      query_response:
        - expect: "^\\* OK"
  smtp_starttls:
    prober: tcp
    timeout: 2s
    tcp:
      tls_config: {{ca_file: "{ca}"}}
      query_response:
        - expect: "^220 "
          send: "EHLO prober"
        - expect: "^250 STARTTLS"
          send: "STARTTLS"
        - expect: "^220 "
          starttls: true
        - send: "EHLO prober"
        - expect: "^250 fixture over TLS"
{BLACKBOX_MODULES}"#,
        ca = ca.display()
    )
}

const BLACKBOX_MODULES: &str = r#"
  http_2xx:
    prober: http
    timeout: 2s
  http_no_redirect:
    prober: http
    timeout: 2s
    http:
      follow_redirects: false
  http_body:
    prober: http
    timeout: 2s
    http:
      fail_if_body_not_matches_regexp: ["good$"]
      fail_if_body_matches_regexp: ["broken"]
  tcp_ping:
    prober: tcp
    timeout: 2s
    tcp:
      query_response:
        - expect: "^\\+OK"
        - send: "PING"
        - expect: "^\\+PONG$"
  irc_banner:
    prober: tcp
    timeout: 2s
    tcp:
      query_response:
        - send: "NICK prober"
        - send: "USER prober prober prober :prober"
        - expect: "PING :([^ ]+)"
          send: "PONG ${1}"
        - expect: "^:[^ ]+ 001"
  dns_right:
    prober: dns
    timeout: 2s
    dns:
      query_name: a.test
      query_type: A
      validate_answer_rrs:
        fail_if_not_matches_regexp: ["^a\\.test\\.\t[0-9]+\tIN\tA\t127\\.0\\.0\\.1$"]
  dns_wrong:
    prober: dns
    timeout: 2s
    dns:
      query_name: a.test
      query_type: A
      validate_answer_rrs:
        fail_if_none_matches_regexp: ["\tA\t10\\.0\\.0\\.9$"]
  dns_nxdomain:
    prober: dns
    timeout: 2s
    dns:
      query_name: missing.test
      query_type: A
  dns_soa:
    prober: dns
    timeout: 2s
    dns:
      query_name: test
      query_type: SOA
  icmp:
    prober: icmp
    timeout: 2s
"#;

/// Runs the binary with `args`.
fn probe_engine(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_modules_agree_with_blackbox_exporter() {
    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("import test CA", 365);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let config = blackbox_yml(&ca_file);
    let Some(exporter) = blackbox_or_skip(&config) else {
        return;
    };
    // Installs the crypto provider the exporter's client, like every reqwest client here, needs.
    let _ = support::client();
    let http = http_server().await;
    let good_tcp = tcp_server(true).await;
    let bad_tcp = tcp_server(false).await;
    let irc = irc_server().await;
    // Authoritative for `test` too, so that an SOA query has an answer with a serial.
    let dnsmasq = dns::DnsServer::start_with(
        &[("a.test", IpAddr::V4(Ipv4Addr::LOCALHOST))],
        &[
            "--auth-zone=test",
            "--auth-server=ns.test,127.0.0.1",
            "--auth-soa=2026120601",
        ],
    );
    let good_tls = tls_server(&ca.leaf(&["127.0.0.1"], -1, 90)).await;
    let other_name = tls_server(&ca.leaf(&["127.0.0.2"], -1, 90)).await;
    let smtp = smtp_server(&ca.leaf(&["127.0.0.1"], -1, 90), true).await;
    let no_starttls = smtp_server(&ca.leaf(&["127.0.0.1"], -1, 90), false).await;
    let dns = dnsmasq.addr.to_string();

    // (module, target, the id `import` derives, whether the probe succeeds)
    let fixtures: Vec<(&str, String, String, bool)> = vec![
        (
            "tls_banner",
            good_tls.to_string(),
            format!("tls_banner-127.0.0.1-{}", good_tls.port()),
            true,
        ),
        (
            "tls_banner",
            other_name.to_string(),
            format!("tls_banner-127.0.0.1-{}", other_name.port()),
            false,
        ),
        (
            "smtp_starttls",
            smtp.to_string(),
            format!("smtp_starttls-127.0.0.1-{}", smtp.port()),
            true,
        ),
        (
            "smtp_starttls",
            no_starttls.to_string(),
            format!("smtp_starttls-127.0.0.1-{}", no_starttls.port()),
            false,
        ),
        (
            "http_2xx",
            format!("http://{http}/ok"),
            format!("http_2xx-127.0.0.1-{}-ok", http.port()),
            true,
        ),
        (
            "http_2xx",
            format!("http://{http}/fail"),
            format!("http_2xx-127.0.0.1-{}-fail", http.port()),
            false,
        ),
        (
            "http_2xx",
            format!("http://{http}/redirect"),
            format!("http_2xx-127.0.0.1-{}-redirect", http.port()),
            true,
        ),
        (
            "http_no_redirect",
            format!("http://{http}/redirect"),
            format!("http_no_redirect-127.0.0.1-{}-redirect", http.port()),
            false,
        ),
        (
            "http_body",
            format!("http://{http}/ok"),
            format!("http_body-127.0.0.1-{}-ok", http.port()),
            true,
        ),
        (
            "http_body",
            format!("http://{http}/broken"),
            format!("http_body-127.0.0.1-{}-broken", http.port()),
            false,
        ),
        (
            "tcp_ping",
            good_tcp.to_string(),
            format!("tcp_ping-127.0.0.1-{}", good_tcp.port()),
            true,
        ),
        (
            "tcp_ping",
            bad_tcp.to_string(),
            format!("tcp_ping-127.0.0.1-{}", bad_tcp.port()),
            false,
        ),
        (
            "irc_banner",
            irc.to_string(),
            format!("irc_banner-127.0.0.1-{}", irc.port()),
            true,
        ),
        (
            "dns_right",
            dns.clone(),
            format!("dns_right-127.0.0.1-{}", dnsmasq.addr.port()),
            true,
        ),
        (
            "dns_wrong",
            dns.clone(),
            format!("dns_wrong-127.0.0.1-{}", dnsmasq.addr.port()),
            false,
        ),
        (
            "dns_nxdomain",
            dns.clone(),
            format!("dns_nxdomain-127.0.0.1-{}", dnsmasq.addr.port()),
            false,
        ),
        (
            "dns_soa",
            dns.clone(),
            format!("dns_soa-127.0.0.1-{}", dnsmasq.addr.port()),
            true,
        ),
        (
            "icmp",
            "127.0.0.1".to_owned(),
            "icmp-127.0.0.1".to_owned(),
            true,
        ),
    ];

    // The exporter's verdicts: each exactly as the fixture is meant.
    for (module, target, _, success) in &fixtures {
        let answer = exporter.probe(module, target).await.unwrap();
        assert_eq!(answer.status, 200, "{module} {target}: {}", answer.body);
        assert_eq!(
            answer.success(),
            Some(*success),
            "blackbox_exporter on {module} {target}: {}",
            answer.body
        );
    }

    // The same file and targets, imported.
    let blackbox = dir.path().join("blackbox.yml");
    std::fs::write(&blackbox, &config).unwrap();
    let mut prometheus =
        String::from("global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n");
    let mut modules: Vec<&str> = fixtures.iter().map(|f| f.0).collect();
    modules.dedup();
    for module in &modules {
        let targets: Vec<String> = fixtures
            .iter()
            .filter(|f| f.0 == *module)
            .map(|f| format!("{:?}", f.1))
            .collect();
        prometheus.push_str(&format!(
            "  - job_name: {module}\n    metrics_path: /probe\n    params: {{module: [{module}]}}\n    \
             static_configs: [{{targets: [{}]}}]\n",
            targets.join(", ")
        ));
    }
    let prometheus_yml = dir.path().join("prometheus.yml");
    std::fs::write(&prometheus_yml, &prometheus).unwrap();
    let args = [
        "import",
        "blackbox",
        blackbox.to_str().unwrap(),
        "--targets",
        prometheus_yml.to_str().unwrap(),
        "--strict",
    ];
    let imported = probe_engine(&args);
    assert!(
        imported.status.success(),
        "{}\n{}",
        text(&imported.stdout),
        text(&imported.stderr)
    );
    assert_eq!(text(&imported.stderr), "", "everything is expressed");
    let again = probe_engine(&args);
    assert_eq!(
        again.stdout, imported.stdout,
        "the same input, the same output"
    );
    let probes = dir.path().join("probes");
    std::fs::create_dir(&probes).unwrap();
    std::fs::write(probes.join("imported.yaml"), &imported.stdout).unwrap();
    let check = probe_engine(&["check", "--config", probes.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(
        text(&check.stdout).starts_with(&format!("ok: {} targets", fixtures.len())),
        "{}",
        text(&check.stdout)
    );
    // In the input's order.
    let output = text(&imported.stdout);
    let positions: Vec<usize> = fixtures
        .iter()
        .map(|f| {
            output
                .find(&format!("- id: {}\n", f.2))
                .unwrap_or_else(|| panic!("{} in\n{output}", f.2))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{output}");

    // Our daemon's scheduled verdicts: UP where the exporter succeeds, DOWN where it fails.
    let daemon = Daemon::start_with(&probes, &["--blackbox-config", blackbox.to_str().unwrap()]);
    // And its `/probe` on the same file: the exporter's answer, series for series.
    for (module, target, _, _) in &fixtures {
        let theirs = exporter.probe(module, target).await.unwrap();
        let ours = daemon
            .get(&format!("/probe?module={module}&target={target}"))
            .await;
        assert_eq!(ours.status(), 200, "{module} {target}");
        let ours = ours.text().await.unwrap();
        assert_same_probe_series(&format!("{module} {target}"), &ours, &theirs.body, &[]);
    }
    let want: Vec<(&str, &str)> = fixtures
        .iter()
        .map(|(_, _, id, success)| (id.as_str(), if *success { "UP" } else { "DOWN" }))
        .collect();
    daemon.wait_states(&want).await;
    drop(exporter);
}

#[test]
fn what_cannot_be_expressed_goes_to_stderr_and_strict_fails() {
    let dir = tempfile::tempdir().unwrap();
    let blackbox = dir.path().join("blackbox.yml");
    std::fs::write(
        &blackbox,
        "modules:\n  http_2xx:\n    prober: http\n  sock:\n    prober: unix\n  dns:\n    prober: dns\n    dns: {query_name: a.test}\n",
    )
    .unwrap();
    let sd = dir.path().join("targets.json");
    std::fs::write(
        &sd,
        r#"[{"targets": ["127.0.0.1:8080/health", "https://127.0.0.1:8443/"]},
            {"targets": ["/run/x.sock"], "labels": {"__param_module": "sock"}},
            {"targets": ["ns.example.test"], "labels": {"module": "dns"}},
            {"targets": ["127.0.0.1:1"], "labels": {"module": "missing"}}]"#,
    )
    .unwrap();
    let file = blackbox.to_str().unwrap();
    let targets = sd.to_str().unwrap();
    let lenient = probe_engine(&["import", "blackbox", file, "--targets", targets]);
    assert_eq!(lenient.status.code(), Some(0), "{}", text(&lenient.stderr));
    let stderr = text(&lenient.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert!(lines[0].starts_with(&format!(
        "module \"sock\": {file}:5:13: \"prober: unix\" is not supported"
    )));
    assert!(lines[1].contains("\"/run/x.sock\" (module \"sock\"): the module is refused"));
    assert!(
        lines[2].contains("(module \"dns\"): our DNS probe asks a server given by its address")
    );
    assert!(lines[3].contains("(module \"missing\"): blackbox.yml has no such module"));
    let output = text(&lenient.stdout);
    assert!(
        output.contains("- id: http_2xx-127.0.0.1-8080-health\n"),
        "{output}"
    );
    assert!(
        output.contains("- id: http_2xx-127.0.0.1-8443\n"),
        "{output}"
    );
    let probes = dir.path().join("probes.yaml");
    std::fs::write(&probes, &lenient.stdout).unwrap();
    let check = probe_engine(&["check", "--config", probes.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));

    let strict = probe_engine(&["import", "blackbox", file, "--targets", targets, "--strict"]);
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(
        strict.stdout, lenient.stdout,
        "strict prints the same, and fails"
    );

    // Without --targets: the modules, checked, and a file that loads.
    let bare = probe_engine(&["import", "blackbox", file]);
    assert_eq!(bare.status.code(), Some(0));
    assert!(text(&bare.stdout).contains("# module \"http_2xx\" (http): importable\n"));
    std::fs::write(&probes, &bare.stdout).unwrap();
    let check = probe_engine(&["check", "--config", probes.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));
}

#[test]
fn invalid_input_exits_2_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let blackbox = dir.path().join("blackbox.yml");
    std::fs::write(
        &blackbox,
        "modules:\n  m:\n    prober: http\n    timeout: 5\n    http:\n      fail_if_body_matches_regexp: [\"(\"]\n",
    )
    .unwrap();
    let file = blackbox.to_str().unwrap();
    let out = probe_engine(&["import", "blackbox", file]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert_eq!(lines[2], format!("2 errors in {file}"));
    assert!(
        lines[0].starts_with(&format!("{file}:4:14: invalid duration \"5\"")),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(&format!("{file}:6:37: invalid regex \"(\"")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    std::fs::write(&blackbox, "modules:\n  m: {prober: http}\n").unwrap();
    let targets = dir.path().join("targets.yml");
    std::fs::write(&targets, "- targets: [a]\n  lables: {}\n").unwrap();
    let out = probe_engine(&[
        "import",
        "blackbox",
        file,
        "--targets",
        targets.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with(&format!(
            "{}:2:3: unknown field \"lables\"",
            targets.display()
        )),
        "{}",
        text(&out.stderr)
    );
    let missing: &Path = &dir.path().join("nope.yml");
    let out = probe_engine(&["import", "blackbox", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}
