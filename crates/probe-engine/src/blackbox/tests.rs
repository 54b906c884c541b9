//! The loader against the exporter's documented defaults and options, and every kind of
//! refusal, located.

use std::path::Path;
use std::time::Duration;

use probe::tier::ProbeSpec;
use probe::tier::dns::{DnsType, Rcode};

use super::*;

const FILE: &str = "/etc/bbe/blackbox.yml";

fn parsed(text: &str) -> Result<Blackbox, ConfigErrors> {
    parse(Path::new(FILE), text)
}

fn module(text: &str, name: &str) -> Module {
    let config = parsed(text).unwrap_or_else(|e| panic!("{e}"));
    match config.module(name).map(|m| &m.module) {
        Some(Ok(module)) => module.clone(),
        Some(Err(e)) => panic!("refused: {e}"),
        None => panic!("no module {name}"),
    }
}

fn spec(module: &Module, target: &str) -> ProbeSpec {
    module
        .spec(target, Schedule::default(), Path::new("/etc/bbe"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The one error of an invalid file, as `LINE:COL: message`.
fn error(text: &str) -> String {
    let errors = parsed(text).expect_err("the file is invalid");
    assert_eq!(errors.0.len(), 1, "{errors}");
    let e = &errors.0[0];
    assert_eq!(e.file, Path::new(FILE));
    format!("{}:{}: {}", e.line, e.column, e.message)
}

/// The refusals of module `name`, each as `LINE:COL: message`.
fn refusals(text: &str, name: &str) -> Vec<String> {
    let config = parsed(text).unwrap_or_else(|e| panic!("{e}"));
    match &config.module(name).expect("the module").module {
        Ok(_) => panic!("module {name} was not refused"),
        Err(errors) => errors
            .0
            .iter()
            .map(|e| format!("{}:{}: {}", e.line, e.column, e.message))
            .collect(),
    }
}

#[test]
fn http_keeps_the_exporters_defaults() {
    let m = module("modules:\n  http_2xx:\n    prober: http\n", "http_2xx");
    assert_eq!(m.prober, Prober::Http);
    assert_eq!(m.timeout, None);
    assert_eq!(
        m.ip,
        IpProtocol {
            ip6: true,
            fallback: true
        }
    );
    let ProbeSpec::Http(http) = spec(&m, "127.0.0.1:8080/health") else {
        panic!("not http");
    };
    assert_eq!(http.url.to_string(), "http://127.0.0.1:8080/health");
    assert!(http.follow_redirects, "the exporter follows redirects");
    assert!(http.expect.status.matches(204) && !http.expect.status.matches(302));
    assert_eq!(http.method, probe::tier::http::Method::GET);
    let entry = m
        .entry("http://127.0.0.1/", "x", Schedule::default())
        .unwrap();
    assert_eq!(entry.interval, "60s");
    assert_eq!(
        entry.timeout, "9500ms",
        "the scrape timeout less the offset"
    );
}

#[test]
fn every_http_option_maps() {
    let m = module(
        r#"
modules:
  full:
    prober: http
    timeout: 3s
    http:
      valid_status_codes: [200, 302]
      valid_http_versions: [HTTP/1.1, HTTP/2.0]
      method: post
      headers: {X-Key: "a$b", Host: vhost.test}
      body: '{"probe": true}'
      follow_redirects: false
      fail_if_not_ssl: true
      fail_if_body_matches_regexp: ["error"]
      fail_if_body_not_matches_regexp: ["^ok"]
      fail_if_header_matches: [{header: X-Mode, regexp: readonly, allow_missing: true}]
      fail_if_header_not_matches: [{header: Content-Type, regexp: json}]
      authorization: {credentials: secret}
      tls_config: {insecure_skip_verify: true}
      preferred_ip_protocol: ip4
      ip_protocol_fallback: false
      enable_http2: false
      compression: identity
"#,
        "full",
    );
    assert_eq!(m.timeout, Some(Duration::from_secs(3)));
    assert_eq!(
        m.ip,
        IpProtocol {
            ip6: false,
            fallback: false
        }
    );
    let ProbeSpec::Http(http) = spec(&m, "http://127.0.0.1:8080/ready") else {
        panic!("not http");
    };
    assert!(!http.follow_redirects);
    assert_eq!(http.method, probe::tier::http::Method::POST);
    assert_eq!(http.body.as_deref(), Some(&b"{\"probe\": true}"[..]));
    assert!(http.expect.status.matches(302) && !http.expect.status.matches(204));
    let headers = http.headers.expose();
    assert_eq!(headers["x-key"], "a$b", "a literal `$`, not a variable");
    assert_eq!(headers["host"], "vhost.test");
    assert_eq!(headers["authorization"], "Bearer secret");
    assert_eq!(http.tls, probe::tier::http::TlsTrust::InsecureSkipVerify);
    let p = &http.patterns;
    assert_eq!(p.body_matches[0].as_str(), "^ok");
    assert_eq!(p.body_not_matches[0].as_str(), "error");
    assert_eq!(p.header_not_matches[0].regex.as_str(), "readonly");
    assert!(p.header_not_matches[0].allow_missing);
    assert_eq!(p.header_matches[0].name.as_str(), "content-type");
    assert_eq!(p.tls, Some(true));
    assert_eq!(
        p.versions
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["HTTP/1.1"],
        "HTTP/2.0 never comes from our HTTP/1.1 probe"
    );
    assert_eq!(
        m.entry("http://127.0.0.1:80/", "x", Schedule::default())
            .unwrap()
            .timeout,
        "3s"
    );
    let err = m
        .entry("http://[::1]/", "x", Schedule::default())
        .unwrap_err();
    assert!(err.contains("IPv4 only"), "{err}");
}

#[test]
fn credentials_become_an_authorization_header() {
    let m = module(
        "modules:\n  a:\n    prober: http\n    http: {basic_auth: {username: u, password: p}}\n",
        "a",
    );
    let ProbeSpec::Http(http) = spec(&m, "http://127.0.0.1/") else {
        panic!("not http");
    };
    assert_eq!(http.headers.expose()["authorization"], "Basic dTpw");
    let plain = module("modules:\n  b:\n    prober: http\n", "b");
    let ProbeSpec::Http(http) = spec(&plain, "http://us%40r:pw@127.0.0.1/x") else {
        panic!("not http");
    };
    assert_eq!(http.url.to_string(), "http://127.0.0.1/x");
    assert_eq!(http.headers.expose()["authorization"], "Basic dXNAcjpwdw==");
}

#[test]
fn tcp_query_response_is_a_conversation() {
    let m = module(
        r#"
modules:
  smtp_banner:
    prober: tcp
    tcp:
      query_response:
        - expect: "^220 "
          send: "EHLO prober"
        - expect: "^250 "
        - send: "QUIT"
        - expect: "^PING :(.+)$"
          send: "PONG ${1}"
"#,
        "smtp_banner",
    );
    let ProbeSpec::Tcp(tcp) = spec(&m, "127.0.0.1:25") else {
        panic!("not tcp");
    };
    use probe::tier::tcp::Step;
    let steps: Vec<String> = tcp
        .conversation()
        .iter()
        .map(|s| match s {
            Step::ExpectLine(re) => format!("expect {}", re.as_str()),
            Step::Send(bytes) => format!("send {:?}", String::from_utf8_lossy(bytes)),
            Step::Reply(bytes) => format!("reply {:?}", String::from_utf8_lossy(bytes)),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "expect ^220 ",
            "send \"EHLO prober\\n\"",
            "expect ^250 ",
            "send \"QUIT\\n\"",
            "expect ^PING :(.+)$",
            "reply \"PONG ${1}\\n\""
        ]
    );
    let plain = module("modules:\n  c:\n    prober: tcp\n", "c");
    let ProbeSpec::Tcp(tcp) = spec(&plain, "[::1]:5432") else {
        panic!("not tcp");
    };
    assert!(tcp.conversation().is_empty() && tcp.send().is_none());
    assert!(plain.entry("127.0.0.1", "x", Schedule::default()).is_err());
}

#[test]
fn starttls_splits_the_conversation_around_the_handshake() {
    let m = module(
        r#"
modules:
  smtp_starttls:
    prober: tcp
    tcp:
      tls_config: {server_name: mail.test}
      query_response:
        - expect: "^220 "
          send: "EHLO prober"
        - expect: "^250 STARTTLS"
          send: "STARTTLS"
        - expect: "^220"
          starttls: true
        - send: "EHLO prober"
        - expect: "^250 "
"#,
        "smtp_starttls",
    );
    let ProbeSpec::Tls(tls) = spec(&m, "127.0.0.1:25") else {
        panic!("not tls");
    };
    assert_eq!(tls.before_tls.len(), 5, "up to the go-ahead, in the clear");
    assert_eq!(tls.conversation.len(), 2, "the rest over TLS");
    assert!(tls.starttls.is_none());
    let own = probe::tier::tls::TlsSpec::new("mail.test:25".parse().unwrap()).unwrap();
    assert_eq!(tls.server_name(), own.server_name());
}

#[test]
fn tcp_with_tls_is_our_tls_probe() {
    let text = "modules:\n  t:\n    prober: tcp\n    tcp: {tls: true, tls_config: {ca_file: ca.pem, server_name: api.test}}\n";
    // A CA file that cannot be read refuses the module at load, naming it, rather than failing
    // every probe of it.
    let missing = parsed(text).unwrap();
    let Some(Err(why)) = missing.module("t").map(|m| &m.module) else {
        panic!("a module whose CA file is missing was accepted");
    };
    assert!(
        why.to_string().contains(
            "cannot run here: our probe refuses it: 1:83: cannot read CA file /etc/bbe/ca.pem"
        ),
        "{why}"
    );
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(
        dir.path().join("ca.pem"),
        ca.self_signed(&key).unwrap().pem(),
    )
    .unwrap();
    let file = dir.path().join("blackbox.yml");
    let loaded = parse(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let Some(Ok(m)) = loaded.module("t").map(|m| &m.module) else {
        panic!("refused with its CA file there");
    };
    let entry = m.entry("127.0.0.1:443", "t", Schedule::default()).unwrap();
    let entry::Probe::Tls(tls) = &entry.probe else {
        panic!("not tls");
    };
    assert_eq!(tls.server_name.as_deref(), Some("api.test"));
    let ca_file = dir.path().join("ca.pem");
    assert_eq!(tls.trust.ca_file.as_deref(), ca_file.to_str());
    let imaps = module(
        r#"
modules:
  t:
    prober: tcp
    tcp: {tls: true, query_response: [{expect: "^\\* OK"}]}
"#,
        "t",
    );
    let ProbeSpec::Tls(tls) = spec(&imaps, "127.0.0.1:993") else {
        panic!("not tls");
    };
    assert_eq!(tls.conversation.len(), 1, "the conversation runs over TLS");
    let own = probe::tier::tls::TlsSpec::new("127.0.0.1:993".parse().unwrap()).unwrap();
    assert_eq!(
        tls.server_name(),
        own.server_name(),
        "an address is its own server name, as for the exporter"
    );
}

#[test]
fn dns_keeps_the_exporters_defaults_and_validators() {
    let m = module(
        "modules:\n  d:\n    prober: dns\n    dns: {query_name: example.test}\n",
        "d",
    );
    let ProbeSpec::Dns(dns) = spec(&m, "127.0.0.1") else {
        panic!("not dns");
    };
    assert_eq!(dns.server.to_string(), "127.0.0.1:53");
    assert_eq!(dns.name(), "example.test");
    assert_eq!(dns.record_type, DnsType::Any);
    assert_eq!(dns.expect.rcodes, [Rcode::NOERROR]);
    assert_eq!(dns.expect.min_answers(), 0);
    assert!(dns.recursion_desired);
    assert!(dns.expect.records.is_empty());

    let full = module(
        r#"
modules:
  d:
    prober: dns
    dns:
      query_name: www.example.test
      query_type: AAAA
      transport_protocol: tcp
      recursion_desired: false
      valid_rcodes: [NOERROR, NXDOMAIN]
      validate_answer_rrs:
        fail_if_matches_regexp: [".*127.0.0.9"]
        fail_if_all_match_regexp: ["IN\tCNAME"]
        fail_if_not_matches_regexp: ["www.example.test.\t300\tIN\tAAAA\t.*"]
        fail_if_none_matches_regexp: ["::1$"]
      validate_authority_rrs: {fail_if_matches_regexp: ["evil"]}
      validate_additional_rrs: {fail_if_none_matches_regexp: ["glue"]}
"#,
        "d",
    );
    let ProbeSpec::Dns(dns) = spec(&full, "[::1]:5353") else {
        panic!("not dns");
    };
    assert_eq!(dns.server.to_string(), "[::1]:5353");
    assert_eq!(dns.record_type, DnsType::Aaaa);
    assert_eq!(dns.transport, probe::tier::dns::DnsTransport::Tcp);
    assert!(!dns.recursion_desired);
    assert_eq!(dns.expect.rcodes, [Rcode::NOERROR, Rcode::NXDOMAIN]);
    let answer = &dns.expect.records.answer;
    assert_eq!(answer.none_match[0].as_str(), ".*127.0.0.9");
    assert_eq!(answer.not_all_match[0].as_str(), "IN\tCNAME");
    assert_eq!(answer.all_match.len(), 1);
    assert_eq!(answer.some_match[0].as_str(), "::1$");
    assert_eq!(dns.expect.records.authority.none_match.len(), 1);
    assert_eq!(dns.expect.records.additional.some_match.len(), 1);
    let err = full
        .entry("ns.example.test", "d", Schedule::default())
        .unwrap_err();
    assert!(err.contains("give the server's IP"), "{err}");
}

#[test]
fn icmp_and_grpc_map() {
    let icmp = module(
        "modules:\n  i:\n    prober: icmp\n    icmp: {payload_size: 100, ttl: 64, dont_fragment: false}\n",
        "i",
    );
    let ProbeSpec::Icmp(ping) = spec(&icmp, "127.0.0.1") else {
        panic!("not icmp");
    };
    assert_eq!(ping.count(), 1);
    assert_eq!(ping.size(), 100);

    let grpc = module(
        "modules:\n  g:\n    prober: grpc\n    grpc: {service: pay.v1, tls: true, metadata: {auth: [\"t$1\"]}}\n",
        "g",
    );
    let ProbeSpec::Grpc(check) = spec(&grpc, "https://127.0.0.1") else {
        panic!("not grpc");
    };
    assert_eq!(check.address.to_string(), "127.0.0.1:443");
    assert_eq!(check.service, "pay.v1");
    assert!(check.tls.is_some());
    assert_eq!(check.metadata.expose()["auth"], "t$1");
    let plain = module("modules:\n  g:\n    prober: grpc\n", "g");
    let ProbeSpec::Grpc(check) = spec(&plain, "127.0.0.1") else {
        panic!("not grpc");
    };
    assert_eq!(check.address.to_string(), "127.0.0.1:80");
    assert!(check.tls.is_none());
}

#[test]
fn the_timeout_is_the_exporters() {
    let m = |t: &str| {
        module(
            &format!("modules:\n  m:\n    prober: tcp\n    timeout: {t}\n"),
            "m",
        )
    };
    let scrape = Duration::from_secs(10);
    assert_eq!(m("2s").timeout_within(scrape), Ok(Duration::from_secs(2)));
    assert_eq!(
        m("1m").timeout_within(scrape),
        Ok(Duration::from_millis(9500))
    );
    assert_eq!(m("0s").timeout, None);
    assert_eq!(
        m("2s").timeout_within(Duration::from_millis(400)),
        Ok(Duration::from_secs(2))
    );
    let short = Schedule {
        interval: Duration::from_secs(1),
        scrape_timeout: Duration::from_secs(10),
    };
    let err = m("5s").entry("127.0.0.1:1", "m", short).unwrap_err();
    assert!(err.contains("scrape interval"), "{err}");
}

#[test]
fn invalid_input_is_located() {
    assert_eq!(
        error("modules:\n  m:\n    prober: htp\n"),
        "3:13: prober \"htp\" is not valid, did you mean \"http\"?"
    );
    assert_eq!(
        error("modules:\n  m:\n    prober: http\n    timeout: 5\n"),
        "4:14: invalid duration \"5\" for \"timeout\": missing unit after \"5\""
    );
    assert_eq!(
        error("modules:\n  m:\n    prober: http\n    timeout: 1d\n"),
        "4:14: invalid duration \"1d\" for \"timeout\": unknown unit \"d\" (ns, us, ms, s, m, h)"
    );
    let bad_regex = error(
        "modules:\n  m:\n    prober: http\n    http:\n      fail_if_body_matches_regexp: [\"(\"]\n",
    );
    assert!(
        bad_regex.starts_with("5:37: invalid regex \"(\" for \"fail_if_body_matches_regexp\": "),
        "{bad_regex}"
    );
    let typo =
        error("modules:\n  m:\n    prober: http\n    http:\n      valid_status_code: [200]\n");
    assert!(
        typo.starts_with("5:7: unknown field \"valid_status_code\"")
            && typo.contains("did you mean \"valid_status_codes\"?"),
        "{typo}"
    );
    assert_eq!(
        error("modules:\n  d:\n    prober: dns\n    dns: {query_type: A}\n"),
        "4:5: query name must be set for DNS module: add \"query_name\""
    );
    let syntax = error("modules: [\n");
    assert!(syntax.contains(": invalid YAML"), "{syntax}");
    assert!(error("module: {}\n").starts_with("1:1: unknown field \"module\""));
    assert_eq!(
        error("modules:\n  m: {prober: http}\n  m: {prober: tcp}\n"),
        "3:3: module \"m\" is defined twice"
    );
}

#[test]
fn options_without_an_equivalent_are_refused_by_name_and_place() {
    let text = r#"
modules:
  good:
    prober: icmp
  unix:
    prober: unix
  ws:
    prober: websocket
  cel:
    prober: http
    http:
      fail_if_body_json_matches_cel: "body.x == 1"
      proxy_url: http://proxy:3128
  tcp:
    prober: tcp
    tcp:
      source_ip_address: 10.0.0.1
      query_response: [{expect: "x", labels: [{name: a, value: b}]}, {starttls: true}]
      tls: true
  dns:
    prober: dns
    dns: {query_name: a.test, query_type: CAA, dns_over_tls: true, valid_rcodes: [BADSIG]}
  icmp:
    prober: icmp
    icmp: {ttl: 3, dont_fragment: true}
"#;
    let config = parsed(text).unwrap();
    assert!(config.module("good").unwrap().module.is_ok());
    assert_eq!(
        refusals(text, "unix"),
        ["6:13: \"prober: unix\" is not supported: our probes have no such kind"]
    );
    assert_eq!(
        refusals(text, "ws"),
        ["8:13: \"prober: websocket\" is not supported: our probes have no such kind"]
    );
    let cel = refusals(text, "cel");
    assert_eq!(cel.len(), 2, "{cel:?}");
    assert!(cel[0].starts_with("12:7: \"fail_if_body_json_matches_cel\" is not supported"));
    assert!(cel[1].starts_with("13:7: \"proxy_url\" is not supported"));
    let tcp = refusals(text, "tcp");
    assert_eq!(tcp.len(), 3, "{tcp:?}");
    assert!(tcp[0].starts_with("17:7: \"source_ip_address\""));
    assert!(tcp[1].contains("\"query_response.labels\""));
    assert!(tcp[2].contains("\"query_response.starttls\" is not supported: with tls: true"));
    let dns = refusals(text, "dns");
    assert_eq!(dns.len(), 3, "{dns:?}");
    assert!(dns.iter().any(|r| r.contains("\"query_type: CAA\"")));
    assert!(dns.iter().any(|r| r.contains("\"dns_over_tls\"")));
    assert!(dns.iter().any(|r| r.contains("\"valid_rcodes: BADSIG\"")));
    let icmp = refusals(text, "icmp");
    assert_eq!(icmp.len(), 2, "{icmp:?}");
}

#[test]
fn a_binary_payload_is_refused_by_its_tag() {
    let text = "modules:\n  pg:\n    prober: tcp\n    tcp:\n      query_response:\n        - send: !!binary AAAACATSFi8=\n";
    let refused = refusals(text, "pg");
    assert_eq!(
        refused,
        [
            "6:11: \"query_response.send\" is not supported: a !!binary payload: our conversation sends text"
        ]
    );
}
