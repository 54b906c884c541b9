//! The daemon's YAML configuration: which targets to probe, how and how often.
//!
//! A configuration is one YAML file or a directory of them (every `*.yaml` / `*.yml`, not
//! recursive, in name order), so that teams can own one file each. Every key, its default and
//! what it does are in the configuration reference, `docs/config.md` (the only one: a test holds
//! each of its examples to `probe-engine check`).
//!
//! JSON paths are the subset documented in [`probe::tier::http::json_path`]: `$`, `.name`,
//! `["name"]` and `[index]`. Header values may reference environment variables as `${VAR}`
//! (`$$` for a literal `$`); they are expanded at load, an unset variable is an error naming it,
//! and the values are never shown in errors, logs or `Debug` output.
//!
//! A key set on a target wins over the same key in `defaults`, which wins over the built-in
//! default (the constants on [`Schedule`](probe::health::Schedule) and
//! [`Thresholds::default`](probe::health::Thresholds::default)). `backoff.max` and
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
//! The stages, each using only those before it:
//! - [`yaml`]: a file is read (`files`) into a located tree (`node`); `diagnostics` words every
//!   problem at its position, `words` reads values that are one of a few words. The importers of
//!   `blackbox.yml` and Gatus files read their YAML with the same tree and words.
//! - `sections`: one module per section of the document (`http`, `dns`, `passive`, `graph`,
//!   `alerts`, `history`, `cluster`, `topology`, ...), each turning its raw part into library or
//!   daemon types, and the parts several share (`schedule`, `reply`, `addresses`).
//! - `schema`: the raw document, assembled from the sections' raw parts.
//! - `targets`: a target or group entry compiled, from a file or from an etcd value.
//! - `merge`: the files put together into one [`Config`], every problem reported.

mod merge;
mod schema;
mod sections;
mod targets;
pub mod yaml;

use std::path::Path;

pub use merge::Config;
pub use sections::alerts::{
    ALERTMANAGER, AlertRule, AlertmanagerConfig, AlertsConfig, BasicAuth, PartialRule, TargetAlert,
    WebhookConfig,
};
pub use sections::cluster::{ClusterConfig, DEFAULT_PREFIX as DEFAULT_CLUSTER_PREFIX};
pub use sections::history::{HistorySection, HistoryStore};
pub use sections::metrics::MetricsConfig;
pub use sections::reply::{bytes_regex, regex};
pub use targets::{Declared, parse_declared, parse_entry};
pub use yaml::{ConfigError, ConfigErrors};

use merge::{FileOutcome, finish, parse_text};
use yaml::files::{Source, list_files, process_env};
use yaml::{Pos, read_file};

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
