//! Fuzzing the daemon's own parsers and its API, in every run of the suite, with the harness of
//! `probe_testkit::fuzz` (the YAML config compiler and the etcd value decoder are fuzzed in
//! `probe-config`'s tests).
//!
//! Targets, and what must hold for every input:
//! - the `blackbox.yml` loader: no panic, no hang, every error and every refusal located as
//!   `FILE:LINE:COL` in the document; and every module it accepts gives, for a target of its
//!   prober, an entry the config compiler accepts or a reason it cannot;
//! - every JSON body the API accepts, sent to the real daemon: never a 5xx, every refusal a 4xx
//!   with a JSON `error`, and the daemon still answers after;
//! - blackbox_exporter's `/probe` query (parameters and the scrape-timeout header), sent to the
//!   real daemon: never a 5xx, every refusal a 4xx with a JSON `error`, every answer with a
//!   `probe_success`;
//! - the HTTP tier's JSON-path and status-pattern parsers: no panic, and what they accept
//!   displays as text they parse back to the same value.
//!
//! A failing input is shrunk and printed; add it under `tests/fuzz/<target>/` and it is run
//! before the generated ones forever after.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use probe::tier::http::{JsonPath, StatusPattern};
use probe_testkit::fuzz::{apply_edits, documents_of, edits, fuzz};
use proptest::prelude::*;
use serde_json::Value;

/// Where the regression cases of each target are kept.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

/// Keys of a `blackbox.yml` (blackbox_exporter's, and a few near misses), and its probers.
#[rustfmt::skip]
const BLACKBOX_KEYS: &[&str] = &[
    "modules", "prober", "timeout", "http", "tcp", "dns", "icmp", "grpc", "unix", "websocket",
    "valid_status_codes", "valid_http_versions", "preferred_ip_protocol", "ip_protocol_fallback",
    "no_follow_redirects", "follow_redirects", "fail_if_ssl", "fail_if_not_ssl", "method",
    "headers", "fail_if_body_matches_regexp", "fail_if_body_not_matches_regexp",
    "fail_if_header_matches", "fail_if_header_not_matches", "header", "regexp", "allow_missing",
    "body", "body_file", "compression", "enable_http3", "enable_http2", "basic_auth", "username",
    "password", "authorization", "type", "credentials", "bearer_token", "oauth2", "tls_config",
    "ca_file", "insecure_skip_verify", "server_name", "cert_file", "min_version", "proxy_url",
    "query_response", "expect", "send", "starttls", "labels", "expect_bytes", "tls",
    "source_ip_address", "query_name", "query_type", "query_class", "transport_protocol",
    "recursion_desired", "valid_rcodes", "validate_answer_rrs", "validate_authority_rrs",
    "validate_additional_rrs", "fail_if_matches_regexp", "fail_if_all_match_regexp",
    "fail_if_not_matches_regexp", "fail_if_none_matches_regexp", "dns_over_tls", "payload_size",
    "dont_fragment", "ttl", "service", "metadata", "http_2xx", "tcp_connect", "modulez", "",
];

/// Valid `blackbox.yml` documents to mutate: a module of every prober, most options set.
fn blackbox_seeds() -> Vec<String> {
    vec![
        "modules:\n\
         \x20 http_2xx: {prober: http, timeout: 5s}\n\
         \x20 http_post:\n\
         \x20   prober: http\n\
         \x20   http: {method: POST, headers: {X-A: b}, body: x, valid_status_codes: [200, 302], \
         valid_http_versions: [HTTP/1.1], fail_if_ssl: true, follow_redirects: false, \
         fail_if_body_matches_regexp: [err], fail_if_header_not_matches: [{header: a, regexp: b}], \
         basic_auth: {username: u, password: p}, tls_config: {insecure_skip_verify: true}}\n\
         \x20 tcp: {prober: tcp, tcp: {query_response: [{expect: \"^OK\"}, {send: PING}], \
         preferred_ip_protocol: ip4}}\n\
         \x20 tls: {prober: tcp, tcp: {tls: true, tls_config: {server_name: a.test}}}\n\
         \x20 dns: {prober: dns, dns: {query_name: a.test, query_type: A, valid_rcodes: [NOERROR], \
         validate_answer_rrs: {fail_if_none_matches_regexp: [\"127.0.0.1\"]}}}\n\
         \x20 icmp: {prober: icmp, icmp: {payload_size: 56, ip_protocol_fallback: false}}\n\
         \x20 grpc: {prober: grpc, grpc: {service: s, tls: true, metadata: {k: [v]}}}\n"
            .to_owned(),
    ]
}

// ---------------------------------------------------------------------------------------------
// The targets.

#[test]
fn the_blackbox_loader_locates_every_refusal_and_compiles_what_it_accepts() {
    use probe_engine::blackbox::{self, Prober, Schedule};
    let file: &'static Path = Path::new("/fuzz/blackbox.yml");
    let located = move |e: &probe_config::ConfigError| {
        e.file == file
            && e.line > 0
            && e.column > 0
            && !e.message.trim().is_empty()
            && !e.message.contains('\n')
    };
    // The seed is whole: mutations start from modules that load.
    let seed = blackbox::parse(file, &blackbox_seeds()[0]).expect("the seed loads");
    assert!(
        seed.modules.len() == 7 && seed.modules.iter().all(|m| m.module.is_ok()),
        "{seed:?}"
    );
    fuzz(
        &corpus(),
        "blackbox",
        1_000,
        || documents_of(BLACKBOX_KEYS, blackbox_seeds()),
        Arc::new(move |input| {
            let text = String::from_utf8_lossy(input);
            let config = match blackbox::parse(file, &text) {
                Ok(config) => config,
                Err(errors) => {
                    if errors.0.is_empty() {
                        return Err("rejected without an error".into());
                    }
                    return match errors.0.iter().find(|e| !located(e)) {
                        Some(e) => Err(format!("an error not located in the document: {e:?}")),
                        None => Ok(()),
                    };
                }
            };
            for entry in &config.modules {
                let module = match &entry.module {
                    Ok(module) => module,
                    Err(refusals) => {
                        if refusals.0.is_empty() {
                            return Err(format!(
                                "module {:?} refused without a reason",
                                entry.name
                            ));
                        }
                        if let Some(e) = refusals.0.iter().find(|e| !located(e)) {
                            return Err(format!("a refusal not located in the document: {e:?}"));
                        }
                        continue;
                    }
                };
                let target = match module.prober {
                    Prober::Http => "http://127.0.0.1:8080/health",
                    Prober::Tcp | Prober::Grpc => "127.0.0.1:443",
                    Prober::Dns | Prober::Icmp => "127.0.0.1",
                };
                match module.entry(target, "fuzz", Schedule::default()) {
                    Ok(entry) => {
                        if let Err(why) = entry.compile(Path::new("/fuzz")) {
                            return Err(format!(
                                "module {:?} gave an entry the compiler refuses: {why}: {entry:?}",
                                module.name
                            ));
                        }
                    }
                    Err(why) if why.trim().is_empty() => {
                        return Err(format!(
                            "module {:?}: refused without a reason",
                            module.name
                        ));
                    }
                    Err(_) => {}
                }
            }
            Ok(())
        }),
    );
}

#[test]
fn the_http_tiers_parsers_accept_only_what_they_can_show() {
    let texts = || {
        prop_oneof![
            "[$.\\[\\]\"\\\\a-z0-9_-]{0,16}",
            "[1-6xX0-9]{0,4}",
            any::<String>(),
        ]
        .prop_map(String::into_bytes)
        .boxed()
    };
    let doc: Value = serde_json::json!({"a": [1, {"b": "x"}], "c.d": null, "": {"": 0}});
    fuzz(
        &corpus(),
        "http-parsers",
        20_000,
        texts,
        Arc::new(move |input| {
            let text = String::from_utf8_lossy(input);
            if let Ok(path) = text.parse::<JsonPath>() {
                let _ = path.find(&doc);
                let again: JsonPath = path
                    .to_string()
                    .parse()
                    .map_err(|e| format!("{path} does not parse back: {e}"))?;
                if again != path {
                    return Err(format!("{text:?} shows as {path}, which parses to {again}"));
                }
            }
            if let Ok(status) = text.parse::<StatusPattern>() {
                let again: StatusPattern = status
                    .to_string()
                    .parse()
                    .map_err(|e| format!("{status} does not parse back: {e}"))?;
                if again != status {
                    return Err(format!(
                        "{text:?} shows as {status}, which parses to {again}"
                    ));
                }
            }
            Ok(())
        }),
    );
}

/// The routes that take a body or an id, with the words their bodies use.
const ROUTES: &[(&str, &str)] = &[
    ("PUT", "/v1/targets/{id}/maintenance"),
    ("DELETE", "/v1/targets/{id}/maintenance"),
    ("POST", "/v1/targets/{id}/calls"),
    ("POST", "/v1/targets/{id}/circuit"),
    ("DELETE", "/v1/targets/{id}/ejection"),
    ("GET", "/v1/targets/{id}"),
    ("GET", "/v1/targets/{id}/explain"),
    ("GET", "/v1/graph?format={id}"),
    ("POST", "/v1/drain"),
];
#[rustfmt::skip]
const BODY_KEYS: &[&str] = &[
    "reason", "duration", "status", "latency_ms", "outcome", "command", "until", "",
];
#[rustfmt::skip]
const BODY_VALUES: &[&str] = &[
    "\"disk swap\"", "\"30m\"", "\"0s\"", "\"-1s\"", "\"31d\"", "\"1y\"", "503", "200", "99",
    "600", "-1", "1e9", "18446744073709551616", "12.5", "\"timeout\"", "\"reset\"", "\"success\"",
    "\"bogus\"", "\"force_open\"", "\"disable\"", "\"reset\"", "null", "true", "[]", "{}",
    "\"\\u0000\"", "\"é\"",
];
#[rustfmt::skip]
const IDS: &[&str] = &[
    "api-1", "api-2", "api", "nope", "A", "..", "a%20b", "%00", "dot", "json",
];

/// A request as text: `METHOD PATH`, a newline, then the body.
fn requests() -> BoxedStrategy<Vec<u8>> {
    let body = prop_oneof![
        3 => proptest::collection::vec(
            (proptest::sample::select(BODY_KEYS), proptest::sample::select(BODY_VALUES)),
            0..4
        )
        .prop_map(|pairs| {
            let fields: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
            format!("{{{}}}", fields.join(", ")).into_bytes()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..32),
    ];
    (
        proptest::sample::select(ROUTES),
        proptest::sample::select(IDS),
        body,
        edits(),
    )
        .prop_map(|((method, path), id, body, edits)| {
            let mut request = format!("{method} {}\n", path.replace("{id}", id)).into_bytes();
            request.extend(apply_edits(body, &edits));
            request
        })
        .boxed()
}

/// The status and body of `request`'s answer.
async fn answer(request: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, String), String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("{e}"))?;
    Ok((status, text))
}

/// `Ok` when a refusal of `what` says why: a JSON body with a non-empty `error`.
fn with_reason(what: &str, status: reqwest::StatusCode, text: &str) -> Result<(), String> {
    let error: Value = serde_json::from_str(text)
        .map_err(|_| format!("{what}: {status} without a JSON body: {text}"))?;
    if error["error"].as_str().is_none_or(str::is_empty) {
        return Err(format!("{what}: {status} without a reason: {text}"));
    }
    Ok(())
}

#[test]
fn every_api_body_gets_an_answer_and_never_a_server_error() {
    let one = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let two = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    support::pool_config(
        dir.path(),
        one.local_addr().unwrap(),
        two.local_addr().unwrap(),
    );
    let daemon = support::Daemon::start(dir.path());
    let base = daemon.url("");
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    let http = support::client();
    fuzz(
        &corpus(),
        "api-bodies",
        2_000,
        requests,
        Arc::new(move |input| {
            let (head, body) = input
                .iter()
                .position(|b| *b == b'\n')
                .map_or((input, &[][..]), |i| (&input[..i], &input[i + 1..]));
            let head = String::from_utf8_lossy(head);
            let (method, path) = head.split_once(' ').unwrap_or(("GET", "/"));
            let method: reqwest::Method = method.parse().map_err(|e| format!("{e}"))?;
            let request = http
                .request(method.clone(), format!("{base}{path}"))
                .header("content-type", "application/json")
                .body(body.to_vec())
                .timeout(Duration::from_secs(5));
            let (status, text) = runtime.block_on(answer(request))?;
            if status.is_server_error() {
                return Err(format!("{method} {path}: {status}: {text}"));
            }
            if status.is_client_error() {
                return with_reason(&format!("{method} {path}"), status, &text);
            }
            Ok(())
        }),
    );
    // Still serving after all of it.
    let alive = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { daemon.get("/livez").await.status() });
    assert_eq!(alive, 200);
    drop((one, two));
}

#[rustfmt::skip]
const PROBE_PARAMETERS: &[&str] = &["module", "target", "hostname", "debug", "modul", "", "a%00"];
#[rustfmt::skip]
const PROBE_VALUES: &[&str] = &[
    "tcp_connect", "http_2xx", "nope", "", "127.0.0.1:1", "LISTENER", "http://LISTENER/",
    "https://LISTENER/x?y=1", "[::1]:1", "::1", "10.0.0.1:80", "db.internal:5432", "localhost:1",
    "http://user@127.0.0.1:1/", "true", "false", "yes", "%00", "%ZZ", "é", "a:b:c",
    "127.0.0.1:99999", "http://[::1", "grpcs://", "example.com",
];
#[rustfmt::skip]
const SCRAPE_TIMEOUTS: &[&str] = &["", "1", "0.5", "0", "-1", "NaN", "inf", "1e308", "x", "10"];

/// A `/probe` query as text, a newline, then an `X-Prometheus-Scrape-Timeout-Seconds` value
/// (none when empty).
fn probe_queries() -> BoxedStrategy<Vec<u8>> {
    (
        proptest::collection::vec(
            (
                proptest::sample::select(PROBE_PARAMETERS),
                proptest::sample::select(PROBE_VALUES),
            ),
            0..5,
        ),
        proptest::sample::select(SCRAPE_TIMEOUTS),
        edits(),
    )
        .prop_map(|(pairs, timeout, edits)| {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut input = apply_edits(query.join("&").into_bytes(), &edits);
            input.push(b'\n');
            input.extend_from_slice(timeout.as_bytes());
            input
        })
        .boxed()
}

#[test]
fn every_probe_query_gets_an_answer_and_never_a_server_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("probes.yaml"), "targets: []\n").unwrap();
    std::fs::write(
        dir.path().join("blackbox.yml"),
        "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 300ms\n  http_2xx:\n    prober: \
         http\n    timeout: 300ms\n",
    )
    .unwrap();
    // Loopback only, so that no fuzzed target is ever reached beyond this machine.
    let daemon = support::Daemon::start_with(
        &dir.path().join("probes.yaml"),
        &[
            "--blackbox-config",
            dir.path().join("blackbox.yml").to_str().unwrap(),
            "--blackbox-allow",
            "127.0.0.0/8,::1",
        ],
    );
    let base = daemon.url("/probe?");
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    let http = support::client();
    fuzz(
        &corpus(),
        "probe-queries",
        1_500,
        probe_queries,
        Arc::new(move |input| {
            let (query, timeout) = input
                .iter()
                .position(|b| *b == b'\n')
                .map_or((input, &[][..]), |i| (&input[..i], &input[i + 1..]));
            let query = String::from_utf8_lossy(query).replace("LISTENER", &target);
            // A query the URL parser itself refuses is no request at all.
            let Ok(url) = reqwest::Url::parse(&format!("{base}{query}")) else {
                return Ok(());
            };
            let mut request = http.get(url).timeout(Duration::from_secs(5));
            if !timeout.is_empty() {
                // Nor is a header value no client can send.
                let Ok(value) = reqwest::header::HeaderValue::from_bytes(timeout) else {
                    return Ok(());
                };
                request = request.header("X-Prometheus-Scrape-Timeout-Seconds", value);
            }
            let (status, text) = runtime.block_on(answer(request))?;
            match status.as_u16() {
                200 if text.contains("probe_success ") => Ok(()),
                400 | 403 | 429 => with_reason(&query, status, &text),
                _ => Err(format!("{query}: {status}: {text}")),
            }
        }),
    );
    let alive = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { daemon.get("/livez").await.status() });
    assert_eq!(alive, 200);
    drop(listener);
}
