//! The daemon's YAML configuration: which targets to probe, how and how often.
//!
//! A configuration is one YAML file or a directory of them (every `*.yaml` / `*.yml`, not
//! recursive, in name order), so that teams can own one file each. Each file has this shape; the
//! key names are a public contract:
//!
//! ```yaml
//! defaults:            # optional; applies to the targets of the same file only
//!   interval: 5s       # humantime durations
//!   timeout: 1s
//!   rise: 2
//!   fall: 3
//!   jitter: 0.1        # fraction of the interval, 0..=1
//!   fast_interval: 2s  # default: interval / 2
//!   backoff: { max: 20s, jitter: 0.5 }   # DOWN-state backoff; default max: 4 * interval
//!   degrade_after: 2   # consecutive degraded results to go UP -> DEGRADED; default: rise
//!   recover_after: 2   # consecutive good results to go DEGRADED -> UP; default: rise
//!   flap: { transitions: 6, window: 5m, min_stable: 2m }   # `false`: off; unset: FlapPolicy::default()
//!   dns_stale_for: 5m  # last good DNS answer used on resolver trouble; 0s: off
//!   circuit_breaker: { failure_rate: 0.5, window: 60s }    # passive health (the `passive`
//!   skip_active_after: 20                                  # submodule): these two for targets,
//!   outlier: { consecutive_5xx: 5 }                        # these three for groups, which
//!   recovery: { passes: 3 }                                # `outlier` makes pools
//!   slow_start: { window: 60s }
//! targets:
//!   - id: orders-db    # unique across all files, [a-z0-9._-]+
//!     tcp:
//!       address: 127.0.0.1:5432   # HOST:PORT or [V6]:PORT
//!       send: "PING\r\n"          # optional bytes sent after connect (YAML escapes apply)
//!       expect: "PONG"            # optional substring of the reply...
//!       expect_regex: "^\\+PONG"  # ...or a regex over the reply bytes (not both)
//!       close: reset              # reset (default) | graceful
//!     interval: 2s                # any `defaults` key can be set per target
//!     maintenance:                # per target only; UTC
//!       - { start: "2026-12-01T02:00:00Z", duration: 1h }   # once (RFC 3339, UTC)
//!       - { daily: "02:00", duration: 30m }                # every day at HH:MM
//!   - id: orders-api
//!     http:
//!       url: https://orders.internal/ready   # http or https, no credentials
//!       method: GET                          # default GET
//!       headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }  # ${VAR}: from the environment
//!       body: '{"probe": true}'              # optional request body
//!       tls: { insecure_skip_verify: false, ca_file: ca.pem }  # ca_file: relative to this file
//!       follow_redirects: false              # default false; at most 5 when true
//!       fresh_connection: false              # default false: reuse a kept-alive connection
//!       expect:                              # all must hold
//!         status: [200, "3xx", "401-499"]    # codes, classes and ranges; default "2xx"
//!         body_contains: ok                  # -> reason "body"
//!         body_matches: ["^\\{"]              # each must match -> reason "body"
//!         body_not_matches: ["(?i)error"]    # none may match -> reason "body"
//!         header: { content-type: application/json }   # exact values -> "assertion"
//!         json: { "$.status": UP, "$.queue": { lt: 100 } }  # scalar or tests -> "assertion"
//!         latency_under: 300ms               # a slower reply fails -> "assertion"
//!       degraded_if:                         # each that holds is one degraded reason
//!         latency_over: 300ms
//!         json: { "$.mode": readonly }
//!       signals:                             # business events, on every reply
//!         - name: StockReservationFailed
//!           severity: high                   # info | low | medium | high | critical
//!           when: { status: 503, header: { x-reason: inventory_shortage } }  # all must match
//! ```
//!
//! Dependencies (`depends_on`, `kind: group`) and the top-level `scoring` and `readiness`
//! sections are described in the `graph` submodule; passive health (a target's `circuit_breaker`
//! and `skip_active_after`, a group's `outlier`, `recovery` and `slow_start`) in the `passive`
//! submodule; the `topology` section (targets from etcd) in the `topology` submodule; the
//! `resolver` section (the DNS servers the engine asks) in the `resolver` submodule; the `metrics`
//! section (per-target histograms on or off) in the `metrics` submodule; the `cluster` section
//! (members sharing the fleet through etcd) and the targets' `replicas` and `quorum` in the
//! `cluster` submodule.
//! [`parse_entry`] reads one target declaration kept outside the files.
//!
//! JSON paths are the subset documented in [`probe::tier::http::json_path`]: `$`, `.name`,
//! `["name"]` and `[index]`. Header values may reference environment variables as `${VAR}`
//! (`$$` for a literal `$`); they are expanded at load, an unset variable is an error naming it,
//! and the values are never shown in errors, logs or `Debug` output.
//!
//! A key set on a target wins over the same key in `defaults`, which wins over the built-in
//! default (the constants on [`Schedule`](probe::verdict::Schedule) and
//! [`Thresholds::default`](probe::verdict::Thresholds::default)). `backoff.max` and
//! `backoff.jitter` are merged separately; `flap` is taken whole (a target's `flap: {window: 1m}`
//! replaces the defaults' `flap` entirely, with the built-in values for the fields it leaves out).
//! The passive-health blocks merge key by key too, each block with the defaults' block of the same
//! name; their `enabled` is not merged: the nearest block decides (see the `passive` submodule).
//!
//! # Errors
//!
//! Configuration is written by people and usually fixed in one pass, so loading reports every
//! problem it can find, each as `FILE:LINE:COL: message` pointing at the offending key or value:
//! unknown keys (with a did-you-mean), wrong types, missing keys, invalid values, inconsistent
//! schedules, duplicate ids across files. Only YAML syntax errors (and the parser's safety budget)
//! stop a file at the first error, since nothing after them can be trusted.
//!
//! # Layout
//!
//! A file is read (the `files` submodule) into a located tree (`node`), whose sections are
//! deserialized into the raw schema (`schema`) and validated: targets and groups in `targets`,
//! their schedule merged with the defaults in `schedule`, and the sections with a submodule of
//! their own in it (`http`, `passive`, `graph`, `topology`, `resolver`, `metrics`). `merge` assembles the
//! files into one [`Config`], reporting every problem as `diagnostics` words it.

mod addresses;
mod alerts;
mod cluster;
pub(crate) mod diagnostics;
mod dns;
pub(crate) mod files;
mod graph;
mod grpc;
mod history;
mod http;
mod icmp;
mod merge;
mod metrics;
pub(crate) mod node;
mod passive;
mod reply;
mod resolver;
mod schedule;
mod schema;
mod targets;
mod tls;
mod topology;
mod udp;
mod words;

use std::path::Path;

pub use diagnostics::{ConfigError, ConfigErrors};
pub(crate) use diagnostics::{did_you_mean, file_error, located, one_line, quote};
pub(crate) use node::{
    Entries, Kind, Node, OneOrMany, Pos, Sp, collect, syntax_error, value_of, yaml_options,
};
pub(crate) use reply::{bytes_regex, regex};
pub use targets::{Declared, parse_declared, parse_entry};

pub use alerts::{
    ALERTMANAGER, AlertRule, AlertmanagerConfig, AlertsConfig, BasicAuth, PartialRule, TargetAlert,
    WebhookConfig,
};
pub use cluster::{ClusterConfig, DEFAULT_PREFIX as DEFAULT_CLUSTER_PREFIX};
pub(crate) use files::read_file;
use files::{Source, list_files, process_env};
pub use history::{HistorySection, HistoryStore};
pub use merge::Config;
use merge::{FileOutcome, finish, parse_text};
pub use metrics::MetricsConfig;

/// Loads a configuration file, or every `*.yaml` / `*.yml` file of a directory.
///
/// A directory is read non-recursively and its files are merged in name order, so the result does
/// not depend on the file system's listing order. Each file's `defaults` apply to that file only;
/// target ids must be unique across all files.
///
/// # Errors
/// All problems found in all files: an unreadable path, a directory without YAML files, YAML
/// syntax errors, schema and value errors, duplicate ids.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let files = list_files(path)?;
    let outcomes = files
        .iter()
        .map(|file| match read_file(file) {
            Ok(text) => parse_text(&text, &Source::new(file, &process_env)),
            Err(message) => FileOutcome::failed(Pos::NONE, message),
        })
        .collect();
    finish(files, outcomes)
}

/// Parses one YAML document held in memory.
///
/// `file` names the source in errors and in [`Config::files`], and its directory anchors relative
/// paths in the document (`tls.ca_file`); the document itself is not read from disk. This is what
/// tests, `--check` style tools and non-file sources use. `${VAR}` references are looked up in the
/// process environment.
///
/// # Errors
/// All problems found in the document.
pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigErrors> {
    parse_with_env(file, text, &process_env)
}

/// [`parse`], with `${VAR}` references looked up through `env` instead of the process
/// environment: for sources that keep secrets elsewhere, and for tests.
///
/// # Errors
/// All problems found in the document.
pub fn parse_with_env(
    file: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    finish(
        vec![file.to_path_buf()],
        vec![parse_text(text, &Source::new(file, env))],
    )
}
