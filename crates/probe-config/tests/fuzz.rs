//! Fuzzing the YAML compiler, in every run of the suite, with the harness of
//! `probe_testkit::fuzz`: documents built from the schema's own words and from valid seeds, then
//! mutated byte by byte.
//!
//! Targets, and what must hold for every input:
//! - the config compiler: no panic, no hang, and every rejection located as `FILE:LINE:COL` in
//!   the document;
//! - the etcd value decoder: no panic, no hang, every rejection located within the value (or
//!   saying the value as a whole is not a JSON object / not UTF-8).
//!
//! A failing input is shrunk and printed; add it under `tests/fuzz/<target>/` and it is run
//! before the generated ones forever after.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use probe_testkit::fuzz::{documents_of, fuzz};
use proptest::prelude::*;

/// Where the regression cases of each target are kept.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

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

/// Documents: a generated tree (block or flow) or one of `seeds`, then a few byte edits.
fn documents(seeds: Vec<String>) -> BoxedStrategy<Vec<u8>> {
    documents_of(KEYS, seeds)
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

// ---------------------------------------------------------------------------------------------
// The targets.

#[test]
fn the_config_compiler_locates_every_rejection() {
    let file = Path::new("fuzz.yaml");
    fuzz(
        &corpus(),
        "config",
        3_000,
        || documents(config_seeds()),
        Arc::new(move |input| {
            let text = String::from_utf8_lossy(input);
            let Err(errors) = probe_config::parse_with_env(file, &text, &|_| None) else {
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
        &corpus(),
        "etcd-value",
        10_000,
        values,
        Arc::new(move |input| {
            let Err(message) = probe_config::parse_entry("a", "etcd:a", input, &dir) else {
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
