//! Fuzzing on the stable toolchain, in every run of the suite: structured generation with
//! proptest (documents built from the schema's own words, then mutated byte by byte), for a
//! bounded time per target, over two fixed seeds and one random seed that is printed.
//!
//! Targets, and what must hold for every input:
//! - the YAML config compiler: no panic, no hang, and every rejection located as `FILE:LINE:COL`
//!   in the document;
//! - the `blackbox.yml` loader: the same, for its errors and its refusals alike; and every module
//!   it accepts gives, for a target of its prober, an entry the config compiler accepts or a
//!   reason it cannot;
//! - the etcd value decoder: no panic, no hang, every rejection located within the value (or
//!   saying the value as a whole is not a JSON object / not UTF-8);
//! - every JSON body the API accepts, sent to the real daemon: never a 5xx, every refusal a 4xx
//!   with a JSON `error`, and the daemon still answers after;
//! - blackbox_exporter's `/probe` query (parameters and the scrape-timeout header), sent to the
//!   real daemon: never a 5xx, every refusal a 4xx with a JSON `error`, every answer with a
//!   `probe_success`;
//! - the HTTP tier's JSON-path and status-pattern parsers: no panic, and what they accept
//!   displays as text they parse back to the same value.
//!
//! A failing input is shrunk and printed; add it under `tests/fuzz/<target>/` and it is run
//! before the generated ones forever after. `PROBE_FUZZ_SEED=0x...` replays the random seed of
//! a failed run; `PROBE_FUZZ_SECONDS` changes the time per seed (default 4).

mod support;

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tokio::time::Instant;

use probe::tier::http::{JsonPath, StatusPattern};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::Value;

/// The seeds every run uses, besides a random one.
const FIXED_SEEDS: [u64; 2] = [0x5eed_0001, 0x00c0_ffee];

/// A check: `Err` says what does not hold for the input.
type Check = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Runs `check` on the regression cases of `target`, then on inputs from `strategy` for a
/// bounded time per seed. A panic is a failure; so is an input that takes more than
/// [`HANG`]. The first failure is shrunk and reported with its seed. Fewer than `min_inputs`
/// checked (for the default 4 s a seed; in proportion to `PROBE_FUZZ_SECONDS`) is a failure
/// too: a machine too slow to fuzz must not pass by checking a handful.
/// `strategy` builds the generator on the fuzzing thread (proptest's boxed strategies stay on
/// the thread that made them).
fn fuzz(
    target: &str,
    min_inputs: u64,
    strategy: impl FnOnce() -> BoxedStrategy<Vec<u8>> + Send + 'static,
    check: Check,
) {
    let per_seed = std::env::var("PROBE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(4), Duration::from_secs_f64);
    let random = std::env::var("PROBE_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            use std::hash::{BuildHasher, Hasher};
            // A fresh random state per process: a random seed without a dependency for it.
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
    let seeds: Vec<u64> = FIXED_SEEDS.into_iter().chain([random]).collect();
    println!(
        "fuzz {target}: seeds {:#x}, {:#x} and {random:#x} (replay: PROBE_FUZZ_SEED={random:#x}), \
         {per_seed:?} each",
        FIXED_SEEDS[0], FIXED_SEEDS[1]
    );
    // The input being checked, for the watchdog to show if it never returns.
    let current = Arc::new(Mutex::new(Vec::new()));
    let (done, finished) = mpsc::channel();
    let worker = {
        let current = current.clone();
        let target = target.to_owned();
        std::thread::spawn(move || {
            let result = run_all(&target, &strategy(), &check, &seeds, per_seed, &current);
            let _ = done.send(result);
        })
    };
    let budget = per_seed * 3 + Duration::from_secs(60);
    match finished.recv_timeout(budget) {
        Ok(Ok(cases)) => {
            println!("fuzz {target}: {cases} inputs, no failure");
            let _ = worker.join();
            let min = (min_inputs as f64 * per_seed.as_secs_f64() / 4.0) as u64;
            assert!(
                cases >= min,
                "fuzz {target}: only {cases} inputs checked, under the {min} a run must check"
            );
        }
        Ok(Err(failure)) => panic!("fuzz {target}: {failure}"),
        Err(_) => {
            let input = current.lock().map(|i| shown(&i)).unwrap_or_default();
            panic!("fuzz {target}: no verdict within {budget:?}: a hang, on {input}");
        }
    }
}

/// Longer than this for one input is a hang.
const HANG: Duration = Duration::from_secs(2);

fn run_all(
    target: &str,
    strategy: &BoxedStrategy<Vec<u8>>,
    check: &Check,
    seeds: &[u64],
    per_seed: Duration,
    current: &Mutex<Vec<u8>>,
) -> Result<u64, String> {
    let guarded = |input: &[u8]| -> Result<(), String> {
        if let Ok(mut c) = current.lock() {
            c.clear();
            c.extend_from_slice(input);
        }
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| check(input))).unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                Err(format!("panicked: {message}"))
            });
        match outcome {
            Ok(()) if started.elapsed() > HANG => {
                Err(format!("took {:?}, a hang", started.elapsed()))
            }
            other => other,
        }
    };
    let mut cases = 0;
    for (path, input) in regressions(target) {
        guarded(&input).map_err(|e| format!("regression case {}: {e}", path.display()))?;
        cases += 1;
    }
    for &seed in seeds {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut runner = TestRunner::new_with_rng(
            Config {
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        );
        let deadline = Instant::now() + per_seed;
        while Instant::now() < deadline {
            let mut tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| format!("generating: {e}"))?;
            cases += 1;
            let Err(first) = guarded(&tree.current()) else {
                continue;
            };
            // Shrink: keep simplifying while the simpler input still fails.
            let (mut failing, mut error) = (tree.current(), first);
            for _ in 0..10_000 {
                if !tree.simplify() {
                    break;
                }
                match guarded(&tree.current()) {
                    Err(e) => (failing, error) = (tree.current(), e),
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
            return Err(format!(
                "seed {seed:#x}: {error}\n  on {}\n  add it as a file under {}",
                shown(&failing),
                corpus(target).display()
            ));
        }
    }
    Ok(cases)
}

/// An input as a Rust byte string, so that it can be pasted into a file or a test.
fn shown(input: &[u8]) -> String {
    format!("b\"{}\"", input.escape_ascii())
}

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(target)
}

/// The regression cases of `target`, in name order.
fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(dir) = std::fs::read_dir(corpus(target)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| Some((path.clone(), std::fs::read(&path).ok()?)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generation: documents from the schema's words, then byte mutations.

/// Keys of the config schema (and a few near misses), for generated mappings.
#[rustfmt::skip]
const KEYS: &[&str] = &[
    "targets", "defaults", "id", "tcp", "http", "address", "url", "interval", "timeout", "rise",
    "fall", "jitter", "fast_interval", "backoff", "max", "degrade_after", "recover_after", "flap",
    "window", "changes", "dns_stale_for", "send", "expect", "close", "method", "status", "headers",
    "body_contains", "json", "path", "equals", "degraded", "signals", "name", "severity", "when",
    "header", "tls", "ca_file", "insecure_skip_verify", "server_name", "depends_on", "target",
    "weight", "critical", "kind", "group", "scoring", "readiness", "require", "min_score",
    "resolver", "servers", "attempts", "metrics", "per_target_histograms", "topology", "etcd",
    "endpoints", "prefix", "circuit_breaker", "failure_rate", "slow_call", "outlier",
    "consecutive_5xx", "recovery", "slow_start", "skip_active_after", "maintenance", "reason",
    "duration", "cron", "enabled", "expires_within", "starttls", "grpc", "service", "metadata",
    "fresh_connection", "latency_over", "degraded_if", "addresses", "history", "sqlite",
    "postgres", "retention", "transitions", "rollups", "max_size", "sla_window", "targetz", "",
];

/// Scalars: valid values of many keys, edge cases and junk.
#[rustfmt::skip]
const SCALARS: &[&str] = &[
    "1s", "0s", "-1s", "500ms", "99999999h", "1.5", "-3", "0", "1", "18446744073709551616",
    "1e308", "NaN", ".inf", "true", "false", "null", "~", "\"\"", "''", "a", "db", "a.b-c_d",
    "UPPER", "127.0.0.1:80", "[::1]:80", "localhost:0", "http://127.0.0.1:1/health",
    "https://[::1]:8443/x?y=z", "ftp://x", "2xx", "5XX", "600", "$.status", "$[\"a\"][0]", "$..x",
    "\"${HOME}\"", "\"${UNSET_VAR_FOR_FUZZ}\"", "\"$$\"", "GET", "POST", "reset", "graceful",
    "group", "high", "0.5", "1.0000001", "\"\\u0000\"", "\"é💥\"", "&a x", "*a", "!!binary aGk=",
    "!tag x", "|", ">", "- ", "{", "}", "[", "]", "#", ": ", "? ", "14d", "smtp", "postgres", "all", "any",
    "5GiB", "1MB", "400d", "\"postgres://pe@127.0.0.1:1/h\"",
];

/// A YAML value tree, rendered in block or flow style.
#[derive(Clone, Debug)]
enum Yaml {
    Scalar(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    fn render(&self, out: &mut String, indent: usize, flow: bool) {
        match self {
            Self::Scalar(s) => out.push_str(s),
            Self::Seq(items) if flow || items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.render(out, indent, true);
                }
                out.push(']');
            }
            Self::Map(entries) if flow || entries.is_empty() => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "{k}: ");
                    v.render(out, indent, true);
                }
                out.push('}');
            }
            Self::Seq(items) => {
                for item in items {
                    let _ = write!(out, "\n{:indent$}- ", "");
                    item.render(out, indent + 2, false);
                }
            }
            Self::Map(entries) => {
                for (k, v) in entries {
                    let _ = write!(out, "\n{:indent$}{k}: ", "");
                    v.render(out, indent + 2, false);
                }
            }
        }
    }
}

fn yaml_tree(keys: &'static [&'static str]) -> impl Strategy<Value = Yaml> {
    let leaf = prop_oneof![
        4 => proptest::sample::select(SCALARS).prop_map(|s| Yaml::Scalar(s.to_owned())),
        1 => "[ -~]{0,12}".prop_map(Yaml::Scalar),
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Yaml::Seq),
            proptest::collection::vec(
                (
                    proptest::sample::select(keys).prop_map(str::to_owned),
                    inner
                ),
                0..6
            )
            .prop_map(Yaml::Map),
        ]
    })
}

/// A byte edit of a document.
#[derive(Clone, Debug)]
enum Edit {
    Insert(usize, u8),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn apply_edits(mut doc: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = doc.len();
        match *edit {
            Edit::Insert(at, byte) => doc.insert(at % (len + 1), byte),
            Edit::Delete(at, n) if len > 0 => {
                let at = at % len;
                doc.drain(at..(at + n).min(len));
            }
            Edit::Duplicate(at, n) if len > 0 => {
                let at = at % len;
                let piece = doc[at..(at + n).min(len)].to_vec();
                doc.splice(at..at, piece);
            }
            Edit::Delete(..) | Edit::Duplicate(..) => {}
        }
    }
    doc
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let byte = prop_oneof![
        proptest::sample::select(b":-[]{}#&*!|>'\"\n\t ,.$\\0".to_vec()),
        any::<u8>(),
    ];
    proptest::collection::vec(
        prop_oneof![
            (any::<usize>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
            (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
            (any::<usize>(), 1usize..40).prop_map(|(at, n)| Edit::Duplicate(at, n)),
        ],
        0..6,
    )
}

/// Documents: a generated tree (block or flow) or one of `seeds`, then a few byte edits.
fn documents(seeds: Vec<String>) -> BoxedStrategy<Vec<u8>> {
    documents_of(KEYS, seeds)
}

/// [`documents`], its mappings' keys from `keys`.
fn documents_of(keys: &'static [&'static str], seeds: Vec<String>) -> BoxedStrategy<Vec<u8>> {
    let generated = (yaml_tree(keys), any::<bool>()).prop_map(|(tree, flow)| {
        let mut out = String::new();
        tree.render(&mut out, 0, flow);
        out.into_bytes()
    });
    let seeded = proptest::sample::select(seeds).prop_map(String::into_bytes);
    (prop_oneof![3 => generated, 2 => seeded], edits())
        .prop_map(|(doc, edits)| apply_edits(doc, &edits))
        .boxed()
}

/// Valid documents to mutate: the shipped config, and one of every kind of section.
fn config_seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut seeds: Vec<String> = ["probes/example.yaml", "examples/order_service.yaml"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(root.join(p)).ok())
        .collect();
    seeds.push(
        "defaults: {interval: 2s, timeout: 1s, circuit_breaker: {failure_rate: 0.5}}\n\
         resolver: {servers: [\"127.0.0.1:53\"], timeout: 1s}\n\
         metrics: {per_target_histograms: false}\n\
         readiness: {require: [api]}\n\
         targets:\n\
         \x20 - {id: db, tcp: {address: \"127.0.0.1:5432\", send: \"PING\", expect: PONG}}\n\
         \x20 - id: web\n\
         \x20   http: {url: \"http://127.0.0.1:8080/health\", expect: {status: [2xx], json: [{path: $.status, equals: UP}]}}\n\
         \x20 - {id: api, kind: group, depends_on: [{target: db, weight: 2, critical: true}, {target: web}], outlier: {consecutive_5xx: 3}}\n"
            .to_owned(),
    );
    seeds
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
fn the_config_compiler_locates_every_rejection() {
    let file = Path::new("fuzz.yaml");
    fuzz(
        "config",
        3_000,
        || documents(config_seeds()),
        Arc::new(move |input| {
            let text = String::from_utf8_lossy(input);
            let Err(errors) = probe_engine::config::parse_with_env(file, &text, &|_| None) else {
                return Ok(());
            };
            if errors.0.is_empty() {
                return Err("rejected without an error".into());
            }
            for e in &errors.0 {
                if e.file != file || e.line == 0 || e.column == 0 || e.message.trim().is_empty() {
                    return Err(format!("an error not located in the document: {e:?}"));
                }
                if e.message.contains('\n') {
                    return Err(format!("an error on more than one line: {e:?}"));
                }
            }
            Ok(())
        }),
    );
}

#[test]
fn the_blackbox_loader_locates_every_refusal_and_compiles_what_it_accepts() {
    use probe_engine::blackbox::{self, Prober, Schedule};
    let file: &'static Path = Path::new("/fuzz/blackbox.yml");
    let located = move |e: &probe_engine::config::ConfigError| {
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
fn the_etcd_value_decoder_locates_every_rejection() {
    let values = || {
        prop_oneof![
        documents(vec![
            r#"{"id": "a", "tcp": {"address": "127.0.0.1:80"}, "interval": "1s"}"#.to_owned(),
            r#"{"id": "a", "http": {"url": "http://127.0.0.1:8080/h", "expect": {"status": ["2xx"]}}, "depends_on": [{"target": "b"}]}"#.to_owned(),
            r#"{"id": "a", "kind": "group", "depends_on": [{"target": "b", "weight": 1}]}"#.to_owned(),
        ]),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
        .boxed()
    };
    let dir = std::env::temp_dir();
    fuzz(
        "etcd-value",
        10_000,
        values,
        Arc::new(move |input| {
            let Err(message) = probe_engine::config::parse_entry("a", "etcd:a", input, &dir) else {
                return Ok(());
            };
            let whole = ["the value is not UTF-8", "expected a JSON object"];
            if whole.iter().any(|w| message.starts_with(w)) {
                return Ok(());
            }
            // Errors are joined by "; " (which a message may contain too): the first is located,
            // and so is each one after a "; " that starts with a position.
            let located = |part: &str| {
                let (line, rest) = part.split_once(':')?;
                let (col, text) = rest.split_once(": ")?;
                (line.parse::<u64>().ok()? > 0 && col.parse::<u64>().ok()? > 0 && !text.is_empty())
                    .then_some(())
            };
            if located(&message).is_none() {
                return Err(format!("a rejection not located in the value: {message:?}"));
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
