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
//!         status: [200, "3xx"]               # codes and classes; default "2xx"
//!         body_contains: ok                  # -> reason "body"
//!         header: { content-type: application/json }   # exact values -> "assertion"
//!         json: { "$.status": UP }           # scalar at a JSON path -> "assertion"
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
//! `resolver` section (the DNS servers the engine asks) in the `resolver` submodule.
//! [`parse_entry`] reads one target declaration kept outside the files.
//!
//! JSON paths are the subset documented in [`probe::tier::http::json_path`]: `$`, `.name`,
//! `["name"]` and `[index]`. Header values may reference environment variables as `${VAR}`
//! (`$$` for a literal `$`); they are expanded at load, an unset variable is an error naming it,
//! and the values are never shown in errors, logs or `Debug` output.
//!
//! A key set on a target wins over the same key in `defaults`, which wins over the built-in
//! default (the constants on [`Schedule`] and [`Thresholds::default`]). `backoff.max` and
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

mod graph;
mod http;
mod node;
mod passive;
mod resolver;
mod topology;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use probe::discovery::Declaration;
use probe::engine::{TargetSpec, Topology};
use probe::graph::{GraphConfig, NodeKind};
use probe::passive::PoolPolicy;
use probe::target::{Address, TargetId};
use probe::tier::ProbeSpec;
use probe::tier::tcp::{CloseMode, TcpExpect, TcpSpec};
use probe::verdict::{
    BackoffError, FlapPolicy, MaintenanceWindow, Schedule, ScheduleError, ScheduleSettings,
    Thresholds, WindowError, WindowStart,
};
use serde::Deserialize;
use serde::de::IgnoredAny;

use node::{BoolOr, Kind, Node, Pos, Sp, collect};
use passive::Passive;

/// A loaded, fully validated configuration.
///
/// Everything in it has passed the `probe` constructors and the dependency graph's checks, so the
/// engine can run it as is; a reload compares the new topology with the running one.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The targets of all files (in file order and then in document order), their dependencies,
    /// groups, scoring and readiness policy.
    pub topology: Topology,
    /// The files that were read, in the order they were merged, for logs and reload watches.
    pub files: Vec<PathBuf>,
    /// Where more targets come from: etcd, when the `topology` section says so.
    pub etcd: Option<probe_etcd::SourceConfig>,
    /// The engine's resolver, as the `resolver` section says (the host's configuration
    /// without one).
    pub resolver: probe::resolve::ResolverConfig,
}

/// One configuration problem, located so that an editor or a person can jump to it.
///
/// Displays as `FILE:LINE:COL: message`, the format editors and CI annotations understand. Lines
/// and columns are 1-based; both are 0 for problems with the file as a whole (unreadable, empty
/// directory), which display as `FILE: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or directory) the problem is in.
    pub file: PathBuf,
    /// 1-based line of the offending key or value; 0 when the whole file is concerned.
    pub line: u64,
    /// 1-based column of the offending key or value; 0 when the whole file is concerned.
    pub column: u64,
    /// What is wrong, on one line, naming the field.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found while loading, so that one run shows all of them.
///
/// Displays one [`ConfigError`] per line. Never empty. Errors are ordered by file (in load order),
/// then by position.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_lines(.0))]
pub struct ConfigErrors(pub Vec<ConfigError>);

fn display_lines(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

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

/// Reads one target declaration kept outside the files, such as an etcd value: a JSON (or
/// YAML) mapping with the schema of one `targets` item. No `defaults` apply: a target has a
/// circuit breaker only with a `circuit_breaker` block of its own, and a group is a pool (its
/// [`Declaration::Group`] has a `pool`) only with an `outlier` block of its own.
///
/// `name` is the entry's name (an etcd key's id): the declaration's `id` must be the same, so a
/// key cannot declare someone else's target. `origin` names the entry in its dependencies'
/// origins (`ORIGIN:LINE:COL`); `dir` anchors relative paths (`tls.ca_file`).
///
/// # Errors
/// Every problem found, as `LINE:COL: message` joined by `; ` (positions within the value).
pub fn parse_entry(
    name: &str,
    origin: &str,
    value: &[u8],
    dir: &Path,
) -> Result<Declaration, String> {
    let text = std::str::from_utf8(value).map_err(|e| format!("the value is not UTF-8: {e}"))?;
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) if matches!(root.kind, Kind::Map(_)) => root,
        Ok(_) => return Err("expected a JSON object: one target declaration".to_owned()),
        Err(e) => {
            let (pos, message) = syntax_error(&e);
            return Err(format!("{}:{}: {message}", pos.line, pos.column));
        }
    };
    let source = Source {
        dir,
        env: &process_env,
    };
    let mut diags = Vec::new();
    let parsed = parse_target(&root, text, &source, &Defaults::default(), true, &mut diags);
    if let Some((id, pos)) = &parsed.id
        && id.as_str() != name
    {
        diags.push((
            *pos,
            format!(
                "id {} does not match the entry's name {}",
                quote(id.as_str()),
                quote(name)
            ),
        ));
    }
    if !diags.is_empty() {
        diags.sort_by_key(|(pos, _)| *pos);
        let shown: Vec<String> = diags
            .iter()
            .map(|(pos, message)| format!("{}:{}: {}", pos.line, pos.column, one_line(message)))
            .collect();
        return Err(shown.join("; "));
    }
    let node = parsed
        .node
        .ok_or_else(|| "the declaration could not be read".to_owned())?;
    let depends_on = node
        .depends_on
        .into_iter()
        .map(|d| d.into_dependency(|pos| format!("{origin}:{}:{}", pos.line, pos.column)))
        .collect();
    match parsed.spec {
        Some(spec) => Ok(Declaration::Target {
            spec: Box::new(spec),
            depends_on,
        }),
        None => Ok(Declaration::Group {
            id: node.id,
            depends_on,
            pool: parsed.pool,
        }),
    }
}

/// A variable of the process environment; one that is not valid UTF-8 counts as unset.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What parsing needs to know about where a document comes from.
struct Source<'a> {
    /// The directory relative paths are resolved against.
    dir: &'a Path,
    /// Looks up `${VAR}` references.
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Source<'a> {
    fn new(file: &'a Path, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            dir: file.parent().unwrap_or(Path::new("")),
            env,
        }
    }
}

/// The largest configuration file read; larger ones are rejected rather than parsed.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The longest accepted duration. It keeps derived durations (`4 * interval`) far from overflow,
/// and no health check needs to wait longer.
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The probe kinds a target can have, exactly one of which it must have.
const PROBE_KINDS: &[&str] = &["tcp", "http"];

/// The longest accepted one-time maintenance window. Daily windows last at most a day.
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// The accepted `close` modes.
const CLOSE_MODES: &[&str] = &["reset", "graceful"];

/// Limit on a compiled `expect_regex`, so a hostile pattern cannot take the daemon's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Raw schema: what the YAML may contain. Values that need validation are kept as located strings
// and numbers, and checked afterwards so that the checks can point at them.

/// The top level of a file. Only used to report unknown or mistyped top-level keys: the sections
/// are then deserialized one by one from the tree.
#[derive(Deserialize)]
#[serde(rename = "document", deny_unknown_fields)]
struct RawDocument {
    #[serde(rename = "defaults")]
    _defaults: Option<IgnoredAny>,
    #[serde(rename = "targets")]
    _targets: Option<Vec<IgnoredAny>>,
    #[serde(rename = "scoring")]
    _scoring: Option<IgnoredAny>,
    #[serde(rename = "readiness")]
    _readiness: Option<IgnoredAny>,
    #[serde(rename = "topology")]
    _topology: Option<IgnoredAny>,
    #[serde(rename = "resolver")]
    _resolver: Option<IgnoredAny>,
}

/// Defines a section struct with the given fields plus the schedule, threshold and passive-health
/// fields shared by `defaults` and targets (and groups, for the passive ones), so that the lists
/// cannot drift apart.
macro_rules! schedule_section {
    ($(#[$attr:meta])* struct $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$attr])*
        struct $name {
            $($field: $ty,)*
            interval: Option<Sp<String>>,
            timeout: Option<Sp<String>>,
            rise: Option<Sp<u32>>,
            fall: Option<Sp<u32>>,
            jitter: Option<Sp<f64>>,
            fast_interval: Option<Sp<String>>,
            backoff: Option<Sp<RawBackoff>>,
            degrade_after: Option<Sp<u32>>,
            recover_after: Option<Sp<u32>>,
            flap: Option<Sp<BoolOr<RawFlap>>>,
            dns_stale_for: Option<Sp<String>>,
            circuit_breaker: Option<Sp<passive::RawBreaker>>,
            skip_active_after: Option<Sp<u32>>,
            outlier: Option<Sp<passive::RawOutlier>>,
            recovery: Option<Sp<passive::RawRecovery>>,
            slow_start: Option<Sp<passive::RawSlowStart>>,
        }

        impl $name {
            fn schedule(&self) -> RawSchedule<'_> {
                RawSchedule {
                    interval: self.interval.as_ref(),
                    timeout: self.timeout.as_ref(),
                    rise: self.rise.as_ref(),
                    fall: self.fall.as_ref(),
                    jitter: self.jitter.as_ref(),
                    fast_interval: self.fast_interval.as_ref(),
                    backoff: self.backoff.as_ref(),
                    degrade_after: self.degrade_after.as_ref(),
                    recover_after: self.recover_after.as_ref(),
                    flap: self.flap.as_ref(),
                    dns_stale_for: self.dns_stale_for.as_ref(),
                }
            }

            fn passive(&self) -> passive::RawPassive<'_> {
                passive::RawPassive {
                    circuit_breaker: self.circuit_breaker.as_ref(),
                    skip_active_after: self.skip_active_after.as_ref(),
                    outlier: self.outlier.as_ref(),
                    recovery: self.recovery.as_ref(),
                    slow_start: self.slow_start.as_ref(),
                }
            }
        }
    };
}

schedule_section! {
    #[derive(Deserialize)]
    #[serde(rename = "defaults", deny_unknown_fields)]
    struct RawDefaults {}
}

schedule_section! {
    #[derive(Deserialize)]
    #[serde(rename = "target", deny_unknown_fields)]
    struct RawTarget {
        id: Option<Sp<String>>,
        kind: Option<Sp<String>>,
        tcp: Option<Sp<RawTcp>>,
        http: Option<Sp<http::RawHttp>>,
        // Only checked to be sequences here: each item is then read on its own, see `each`.
        maintenance: Option<Vec<IgnoredAny>>,
        depends_on: Option<Vec<IgnoredAny>>,
    }
}

#[derive(Deserialize)]
#[serde(rename = "backoff", deny_unknown_fields)]
struct RawBackoff {
    max: Option<Sp<String>>,
    jitter: Option<Sp<f64>>,
}

/// `flap: {...}`; `flap: false` is the other side of the [`BoolOr`].
#[derive(Deserialize)]
#[serde(rename = "flap", deny_unknown_fields)]
struct RawFlap {
    transitions: Option<Sp<u32>>,
    window: Option<Sp<String>>,
    min_stable: Option<Sp<String>>,
}

/// One entry of `maintenance`.
#[derive(Deserialize)]
#[serde(rename = "maintenance window", deny_unknown_fields)]
struct RawWindow {
    start: Option<Sp<String>>,
    daily: Option<Sp<String>>,
    duration: Sp<String>,
}

#[derive(Deserialize)]
#[serde(rename = "tcp", deny_unknown_fields)]
struct RawTcp {
    address: Sp<String>,
    send: Option<Sp<String>>,
    expect: Option<Sp<String>>,
    expect_regex: Option<Sp<String>>,
    close: Option<Sp<String>>,
}

/// The schedule fields of a section, borrowed.
struct RawSchedule<'a> {
    interval: Option<&'a Sp<String>>,
    timeout: Option<&'a Sp<String>>,
    rise: Option<&'a Sp<u32>>,
    fall: Option<&'a Sp<u32>>,
    jitter: Option<&'a Sp<f64>>,
    fast_interval: Option<&'a Sp<String>>,
    backoff: Option<&'a Sp<RawBackoff>>,
    degrade_after: Option<&'a Sp<u32>>,
    recover_after: Option<&'a Sp<u32>>,
    flap: Option<&'a Sp<BoolOr<RawFlap>>>,
    dns_stale_for: Option<&'a Sp<String>>,
}

// ---------------------------------------------------------------------------------------------
// Validation.

/// Errors of one file: position and message.
type Diags = Vec<(Pos, String)>;

/// One schedule field after validation.
#[derive(Clone, Copy, Debug, Default)]
enum Slot<T> {
    /// Not set here.
    #[default]
    Absent,
    /// Set but invalid; already reported.
    Invalid,
    /// Set and valid; `key` is where it was set, for errors that involve it.
    Set { value: T, key: Pos },
}

impl<T: Copy> Slot<T> {
    fn or(self, fallback: Self) -> Self {
        match self {
            Slot::Absent => fallback,
            set_or_invalid => set_or_invalid,
        }
    }
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Slot<U> {
        match self {
            Slot::Absent => Slot::Absent,
            Slot::Invalid => Slot::Invalid,
            Slot::Set { value, key } => Slot::Set {
                value: f(value),
                key,
            },
        }
    }
    fn value(self) -> Option<T> {
        match self {
            Slot::Set { value, .. } => Some(value),
            _ => None,
        }
    }
    fn key(self) -> Option<Pos> {
        match self {
            Slot::Set { key, .. } => Some(key),
            _ => None,
        }
    }
    fn is_invalid(self) -> bool {
        matches!(self, Slot::Invalid)
    }
}

/// The schedule and thresholds of a section, validated field by field.
#[derive(Clone, Copy, Debug, Default)]
struct Sched {
    interval: Slot<Duration>,
    timeout: Slot<Duration>,
    rise: Slot<NonZeroU32>,
    fall: Slot<NonZeroU32>,
    jitter: Slot<f64>,
    fast_interval: Slot<Duration>,
    backoff_max: Slot<Duration>,
    backoff_jitter: Slot<f64>,
    /// Where the `backoff` key is, for backoff errors whose own field is absent.
    backoff: Option<Pos>,
    degrade: Slot<NonZeroU32>,
    recover: Slot<NonZeroU32>,
    /// `Set { value: None }` for `flap: false`.
    flap: Slot<Option<FlapPolicy>>,
    /// Zero turns stale DNS answers off.
    dns_stale_for: Slot<Duration>,
}

impl Sched {
    fn parse(raw: &RawSchedule<'_>, diags: &mut Diags) -> Self {
        let backoff = raw.backoff.map(|b| &b.value);
        Self {
            interval: duration(raw.interval, "interval", true, diags),
            timeout: duration(raw.timeout, "timeout", true, diags),
            rise: count(raw.rise, "rise", diags),
            fall: count(raw.fall, "fall", diags),
            jitter: fraction(raw.jitter, diags, |j| {
                ScheduleError::JitterOutOfRange(j).to_string()
            }),
            fast_interval: duration(raw.fast_interval, "fast_interval", false, diags),
            backoff_max: duration(
                backoff.and_then(|b| b.max.as_ref()),
                "backoff.max",
                false,
                diags,
            ),
            backoff_jitter: fraction(backoff.and_then(|b| b.jitter.as_ref()), diags, |j| {
                BackoffError::JitterOutOfRange(j).to_string()
            }),
            backoff: raw.backoff.map(|b| b.key),
            degrade: count(raw.degrade_after, "degrade_after", diags),
            recover: count(raw.recover_after, "recover_after", diags),
            flap: flap(raw.flap, diags),
            dns_stale_for: duration(raw.dns_stale_for, "dns_stale_for", false, diags),
        }
    }

    /// This section's values, falling back to `defaults` field by field.
    fn or(self, defaults: &Self) -> Self {
        Self {
            interval: self.interval.or(defaults.interval),
            timeout: self.timeout.or(defaults.timeout),
            rise: self.rise.or(defaults.rise),
            fall: self.fall.or(defaults.fall),
            jitter: self.jitter.or(defaults.jitter),
            fast_interval: self.fast_interval.or(defaults.fast_interval),
            backoff_max: self.backoff_max.or(defaults.backoff_max),
            backoff_jitter: self.backoff_jitter.or(defaults.backoff_jitter),
            backoff: self.backoff.or(defaults.backoff),
            degrade: self.degrade.or(defaults.degrade),
            recover: self.recover.or(defaults.recover),
            flap: self.flap.or(defaults.flap),
            dns_stale_for: self.dns_stale_for.or(defaults.dns_stale_for),
        }
    }

    fn any_invalid(&self) -> bool {
        self.interval.is_invalid()
            || self.timeout.is_invalid()
            || self.rise.is_invalid()
            || self.fall.is_invalid()
            || self.jitter.is_invalid()
            || self.fast_interval.is_invalid()
            || self.backoff_max.is_invalid()
            || self.backoff_jitter.is_invalid()
            || self.degrade.is_invalid()
            || self.recover.is_invalid()
            || self.flap.is_invalid()
            || self.dns_stale_for.is_invalid()
    }

    /// Builds the schedule, thresholds and flap policy, reporting a cross-field error at the key
    /// that was set (on the target, or in `defaults` when it came from there), or at `fallback`.
    fn build(&self, fallback: Pos, diags: &mut Diags) -> Option<Health> {
        if self.any_invalid() {
            return None;
        }
        let schedule = Schedule::try_new(ScheduleSettings {
            interval: self.interval.value().unwrap_or(Schedule::DEFAULT_INTERVAL),
            timeout: self.timeout.value().unwrap_or(Schedule::DEFAULT_TIMEOUT),
            jitter: self.jitter.value().unwrap_or(Schedule::DEFAULT_JITTER),
            fast_interval: self.fast_interval.value(),
            backoff_max: self.backoff_max.value(),
            backoff_jitter: self.backoff_jitter.value(),
        });
        let schedule = match schedule {
            Ok(schedule) => schedule,
            Err(e) => {
                let interval = self.interval.key();
                let pos = match &e {
                    ScheduleError::ZeroInterval | ScheduleError::Backoff(BackoffError::ZeroMin) => {
                        interval
                    }
                    ScheduleError::ZeroTimeout | ScheduleError::TimeoutNotBelowInterval { .. } => {
                        self.timeout.key().or(interval)
                    }
                    ScheduleError::JitterOutOfRange(_) => self.jitter.key(),
                    ScheduleError::FastIntervalOutOfRange { .. } => {
                        self.fast_interval.key().or(interval)
                    }
                    ScheduleError::BackoffMaxBelowInterval { .. }
                    | ScheduleError::Backoff(BackoffError::MinAboveMax { .. }) => {
                        self.backoff_max.key().or(self.backoff).or(interval)
                    }
                    ScheduleError::Backoff(BackoffError::JitterOutOfRange(_)) => {
                        self.backoff_jitter.key().or(self.backoff)
                    }
                };
                diags.push((pos.unwrap_or(fallback), e.to_string()));
                return None;
            }
        };
        let default = Thresholds::default();
        let rise = self.rise.value().unwrap_or(default.rise);
        let thresholds = Thresholds {
            degrade: self.degrade.value().unwrap_or(rise),
            recover: self.recover.value().unwrap_or(rise),
            ..Thresholds::new(rise, self.fall.value().unwrap_or(default.fall))
        };
        Some(Health {
            schedule,
            thresholds,
            flap: self.flap.value().unwrap_or(Some(FlapPolicy::default())),
            dns_stale_for: self
                .dns_stale_for
                .value()
                .unwrap_or(TargetSpec::DEFAULT_DNS_STALE_FOR),
        })
    }
}

/// A file's `defaults`, validated field by field.
#[derive(Default)]
struct Defaults {
    sched: Sched,
    passive: Passive,
}

/// A target's timing and verdict rules, from its section and the defaults.
struct Health {
    schedule: Schedule,
    thresholds: Thresholds,
    flap: Option<FlapPolicy>,
    dns_stale_for: Duration,
}

/// `flap: false`, `flap: true` (the built-in policy) or `flap: {...}` (built-in values for the
/// fields left out).
fn flap(raw: Option<&Sp<BoolOr<RawFlap>>>, diags: &mut Diags) -> Slot<Option<FlapPolicy>> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    let value = match &raw.value {
        BoolOr::Bool(false) => None,
        BoolOr::Bool(true) => Some(FlapPolicy::default()),
        BoolOr::Value(f) => {
            let default = FlapPolicy::default();
            let transitions = match &f.transitions {
                Some(t) if t.value == 0 => {
                    diags.push((t.pos, "flap.transitions must be at least 1".to_owned()));
                    None
                }
                Some(t) => Some(t.value),
                None => Some(default.transitions),
            };
            let window = duration(f.window.as_ref(), "flap.window", true, diags);
            let min_stable = duration(f.min_stable.as_ref(), "flap.min_stable", true, diags);
            if window.is_invalid() || min_stable.is_invalid() {
                return Slot::Invalid;
            }
            Some(FlapPolicy {
                transitions: match transitions {
                    Some(t) => t,
                    None => return Slot::Invalid,
                },
                window: window.value().unwrap_or(default.window),
                min_stable: min_stable.value().unwrap_or(default.min_stable),
            })
        }
    };
    Slot::Set {
        value,
        key: raw.key,
    }
}

fn duration(
    raw: Option<&Sp<String>>,
    name: &str,
    positive: bool,
    diags: &mut Diags,
) -> Slot<Duration> {
    duration_at_most(raw, name, positive, MAX_DURATION, diags)
}

fn duration_at_most(
    raw: Option<&Sp<String>>,
    name: &str,
    positive: bool,
    max: Duration,
    diags: &mut Diags,
) -> Slot<Duration> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    match humantime::parse_duration(raw.value.trim()) {
        Err(e) => diags.push((
            raw.pos,
            format!("invalid duration {} for {name:?}: {e}", quote(&raw.value)),
        )),
        Ok(d) if d > max => diags.push((
            raw.pos,
            format!(
                "{name} must be at most {}, got {}",
                humantime::format_duration(max),
                quote(&raw.value)
            ),
        )),
        Ok(d) if positive && d.is_zero() => {
            diags.push((raw.pos, format!("{name} must be greater than zero")));
        }
        Ok(value) => {
            return Slot::Set {
                value,
                key: raw.key,
            };
        }
    }
    Slot::Invalid
}

fn count(raw: Option<&Sp<u32>>, name: &str, diags: &mut Diags) -> Slot<NonZeroU32> {
    let Some(raw) = raw else {
        return Slot::Absent;
    };
    match NonZeroU32::new(raw.value) {
        Some(value) => Slot::Set {
            value,
            key: raw.key,
        },
        None => {
            diags.push((raw.pos, format!("{name} must be at least 1")));
            Slot::Invalid
        }
    }
}

fn fraction(raw: Option<&Sp<f64>>, diags: &mut Diags, message: fn(f64) -> String) -> Slot<f64> {
    passive::checked(raw, |v| (0.0..=1.0).contains(&v), message, diags)
}

fn parse_tcp(raw: RawTcp, diags: &mut Diags) -> Option<TcpSpec> {
    let address = raw
        .address
        .value
        .parse::<Address>()
        .map_err(|e| diags.push((raw.address.pos, e.to_string())));
    let send = raw.send.map(|s| s.value.into_bytes());
    let expect = match (raw.expect, raw.expect_regex) {
        (Some(_), Some(regex)) => {
            diags.push((
                regex.key,
                r#""expect" and "expect_regex" are mutually exclusive: keep only one"#.to_owned(),
            ));
            Err(())
        }
        (Some(text), None) => Ok(Some(TcpExpect::Contains(text.value.into_bytes()))),
        (None, Some(regex)) => regex::bytes::RegexBuilder::new(&regex.value)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(|re| Some(TcpExpect::Regex(re)))
            .map_err(|e| {
                diags.push((
                    regex.pos,
                    format!(
                        "invalid regex {} for \"expect_regex\": {}",
                        quote(&regex.value),
                        regex_message(&e)
                    ),
                ));
            }),
        (None, None) => Ok(None),
    };
    let close = match raw.close {
        None => Ok(CloseMode::default()),
        Some(close) => match close.value.as_str() {
            "reset" => Ok(CloseMode::Reset),
            "graceful" => Ok(CloseMode::Graceful),
            other => {
                let hint = match did_you_mean(other, CLOSE_MODES.iter().copied()) {
                    Some(best) => format!(", did you mean {best:?}?"),
                    None => r#"; expected "reset" or "graceful""#.to_owned(),
                };
                diags.push((
                    close.pos,
                    format!("unknown close mode {} for \"close\"{hint}", quote(other)),
                ));
                Err(())
            }
        },
    };
    let (address, expect, close) = (address.ok()?, expect.ok()?, close.ok()?);
    let mut spec = TcpSpec::connect(address);
    spec.close = close;
    if let Some(send) = send {
        spec = spec.with_send(send);
    }
    if let Some(expect) = expect {
        spec = spec.with_expect(expect);
    }
    Some(spec)
}

/// One `maintenance` entry: `{start: RFC 3339 UTC time, duration}` or `{daily: "HH:MM", duration}`.
fn parse_window(window: RawWindow, pos: Pos, diags: &mut Diags) -> Option<MaintenanceWindow> {
    let duration = duration_at_most(Some(&window.duration), "duration", true, MAX_WINDOW, diags);
    let start = match (window.start, window.daily) {
        (Some(_), Some(daily)) => {
            diags.push((
                daily.key,
                r#""start" and "daily" are mutually exclusive: keep only one"#.to_owned(),
            ));
            None
        }
        (None, None) => {
            diags.push((
                pos,
                r#"maintenance window needs "start" (a UTC time such as 2026-12-01T02:00:00Z) or "daily" (a UTC time of day such as "02:00")"#.to_owned(),
            ));
            None
        }
        (Some(start), None) => match humantime::parse_rfc3339(start.value.trim()) {
            Ok(at) => Some((WindowStart::Once(at), start.pos)),
            Err(e) => {
                diags.push((
                    start.pos,
                    format!(
                        "invalid time {} for \"start\": {e}; expected an RFC 3339 UTC time such as 2026-12-01T02:00:00Z",
                        quote(&start.value)
                    ),
                ));
                None
            }
        },
        (None, Some(daily)) => match time_of_day(daily.value.trim()) {
            Some(offset) => Some((WindowStart::Daily(offset), daily.pos)),
            None => {
                diags.push((
                    daily.pos,
                    format!(
                        "invalid time of day {} for \"daily\"; expected HH:MM or HH:MM:SS (UTC), from 00:00 to 23:59:59",
                        quote(&daily.value)
                    ),
                ));
                None
            }
        },
    };
    let (start, start_pos) = start?;
    let duration = duration.value()?;
    MaintenanceWindow::try_new(start, duration)
        .map_err(|e| {
            let pos = match e {
                WindowError::TimeOfDay => start_pos,
                WindowError::ZeroDuration | WindowError::DailyTooLong => window.duration.pos,
            };
            diags.push((pos, e.to_string()));
        })
        .ok()
}

/// `HH:MM` or `HH:MM:SS`, as the offset from midnight.
fn time_of_day(text: &str) -> Option<Duration> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let mut seconds = 0;
    for (part, (max, unit)) in parts.iter().zip([(23, 3600), (59, 60), (59, 1)]) {
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let value: u64 = part.parse().ok()?;
        if value > max {
            return None;
        }
        seconds += value * unit;
    }
    Some(Duration::from_secs(seconds))
}

/// The one line of a regex syntax error that says what is wrong (the others draw a caret).
fn regex_message(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map_or_else(
            || text.split_whitespace().collect::<Vec<_>>().join(" "),
            str::to_owned,
        )
}

/// A target or group after validation: its id (for duplicate detection, even when the rest is
/// invalid), its spec when it is a valid target, and its graph node when its id, kind and
/// dependencies are valid.
struct ParsedTarget {
    id: Option<(TargetId, Pos)>,
    spec: Option<TargetSpec>,
    node: Option<graph::DeclaredNode>,
    /// A group has no spec, and that is no error.
    group: bool,
    /// A valid group's pool policy, when it is a pool.
    pool: Option<PoolPolicy>,
}

fn parse_target(
    node: &Node,
    src: &str,
    source: &Source<'_>,
    defaults: &Defaults,
    defaults_clean: bool,
    diags: &mut Diags,
) -> ParsedTarget {
    let (raw, structural) = collect::<RawTarget>(node, src);
    // Checks about what is missing or how fields combine are skipped when some field could not be
    // read: it would silently fall back to its default and produce a misleading error.
    let clean = structural.is_empty();
    diags.extend(structural);
    let Some(raw) = raw else {
        return ParsedTarget {
            id: None,
            spec: None,
            node: None,
            group: false,
            pool: None,
        };
    };

    let label = raw.id.as_ref().map_or_else(
        || "target".to_owned(),
        |id| format!("target {}", quote(&id.value)),
    );
    let id = match &raw.id {
        None => {
            diags.push((node.pos, r#"missing field "id" in target"#.to_owned()));
            None
        }
        Some(id) => TargetId::new(&id.value)
            .map(|valid| (valid, id.pos))
            .map_err(|e| diags.push((id.pos, e.to_string())))
            .ok(),
    };

    let kind = graph::kind(raw.kind.as_ref(), diags);
    let (depends_on, complete) = graph::depends_on(node, src, raw.depends_on.is_some(), diags);
    // With an invalid kind, the node still stands for its id, so that its dependents do not
    // report it unknown.
    let declared = id.as_ref().map(|(id, _)| graph::DeclaredNode {
        id: id.clone(),
        kind: kind.unwrap_or(NodeKind::Probed),
        depends_on,
        partial: kind.is_none() || !complete,
    });
    // An invalid kind was reported; what a target of that kind would need is unknown.
    if kind != Some(NodeKind::Probed) {
        let mut pool = None;
        if kind == Some(NodeKind::Group) {
            graph::check_group_keys(node, src, &label, diags);
            let passive = Passive::parse(&raw.passive().group_keys(), diags);
            // While a block could not be read, whether the group is a pool is unknown.
            if clean && defaults_clean {
                let group = raw.id.as_ref().map_or_else(
                    || "this group".to_owned(),
                    |id| format!("group {}", quote(&id.value)),
                );
                pool = passive
                    .pool(&defaults.passive, &group, node.pos, diags)
                    .flatten();
            }
        }
        return ParsedTarget {
            id,
            spec: None,
            node: declared,
            group: kind == Some(NodeKind::Group),
            pool,
        };
    }

    passive::check_target_keys(&raw.passive(), &label, diags);
    let passive = Passive::parse(&raw.passive().target_keys(), diags);
    let sched = Sched::parse(&raw.schedule(), diags).or(&defaults.sched);
    let (health, passive) = if clean && defaults_clean {
        (
            sched.build(node.pos, diags),
            passive.target(&defaults.passive, node.pos, diags),
        )
    } else {
        (None, None)
    };
    let maintenance = if raw.maintenance.is_some() {
        let windows = each::<RawWindow>(value_of(node, src, "maintenance"), src, diags);
        // Every window is checked (and reports its errors) before any failure counts.
        let parsed: Vec<_> = windows
            .into_iter()
            .map(|w| w.and_then(|(window, pos)| parse_window(window, pos, diags)))
            .collect();
        parsed.into_iter().collect::<Option<Vec<_>>>()
    } else {
        Some(Vec::new())
    };

    // Exactly one probe kind. A new kind is one more line here and one more field on RawTarget.
    let mut probes: Vec<(Pos, Option<ProbeSpec>)> = Vec::new();
    if let Some(tcp) = raw.tcp {
        probes.push((tcp.key, parse_tcp(tcp.value, diags).map(ProbeSpec::Tcp)));
    }
    if let Some(section) = raw.http {
        let node = value_of(node, src, "http");
        let spec = http::parse(section.value, node, src, source, diags);
        probes.push((section.key, spec.map(|h| ProbeSpec::Http(Box::new(h)))));
    }
    // The second in document order is the one to remove.
    probes.sort_by_key(|(pos, _)| *pos);
    let probe = match probes.as_mut_slice() {
        [] => {
            if clean {
                let kinds: Vec<String> = PROBE_KINDS.iter().map(|k| format!("{k:?}")).collect();
                let hint = match kinds.as_slice() {
                    [one] => format!("add a {one} section"),
                    many => format!("add one of {}", many.join(", ")),
                };
                diags.push((node.pos, format!("{label} has no probe: {hint}")));
            }
            None
        }
        [(_, probe)] => probe.take(),
        [_, (second, _), ..] => {
            diags.push((
                *second,
                format!("{label} has more than one probe: keep only one"),
            ));
            None
        }
    };

    let spec = match (&id, probe, health, maintenance, passive) {
        (Some((id, _)), Some(probe), Some(health), Some(maintenance), Some(passive)) => Some(
            TargetSpec::new(id.clone(), probe)
                .with_schedule(health.schedule)
                .with_thresholds(health.thresholds)
                .with_flap(health.flap)
                .with_maintenance(maintenance)
                .with_circuit_breaker(passive.circuit_breaker)
                .with_skip_active_after(passive.skip_active_after)
                .with_dns_stale_for(health.dns_stale_for),
        ),
        _ => None,
    };
    ParsedTarget {
        id,
        spec,
        node: declared,
        group: false,
        pool: None,
    }
}

/// The value of `key` in the mapping `node`, unless absent or null.
fn value_of<'a>(node: &'a Node, src: &str, key: &str) -> Option<&'a Node> {
    node.entries()
        .iter()
        .find(|(k, _)| k.text(src) == Some(key))
        .map(|(_, value)| value)
        .filter(|value| !matches!(value.kind, Kind::Null))
}

/// Deserializes every item of the sequence `node` on its own, so that each item reports its own
/// structural errors (deserialized as part of the list, the first error would drop the whole
/// list). An item with structural errors is `None`: checking its values would report the
/// consequences of what was dropped from it. Each item comes with its position.
fn each<T: serde::de::DeserializeOwned>(
    node: Option<&Node>,
    src: &str,
    diags: &mut Diags,
) -> Vec<Option<(T, Pos)>> {
    let Some(Node {
        kind: Kind::Seq(items),
        ..
    }) = node
    else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| {
            let (value, errors) = collect::<T>(item, src);
            let clean = errors.is_empty();
            diags.extend(errors);
            value.filter(|_| clean).map(|value| (value, item.pos))
        })
        .collect()
}

/// A top-level section that may be set in one file only: where its key is, and its value when
/// valid.
struct Section<T> {
    key: Pos,
    value: Option<T>,
}

/// What parsing one file produced.
#[derive(Default)]
struct FileOutcome {
    diags: Diags,
    targets: Vec<ParsedTarget>,
    scoring: Option<Section<GraphConfig>>,
    readiness: Option<Section<graph::ParsedReadiness>>,
    /// The `topology` section: `Some(None)` when it has no source.
    topology: Option<Section<Option<probe_etcd::SourceConfig>>>,
    resolver: Option<Section<probe::resolve::ResolverConfig>>,
}

impl FileOutcome {
    fn failed(pos: Pos, message: String) -> Self {
        Self {
            diags: vec![(pos, message)],
            ..Self::default()
        }
    }
}

/// Parser options that keep hostile input cheap: bounded nesting, aliases and sizes, no
/// includes. Duplicate keys are passed through so that they are reported per section (with the
/// rest of the section's errors) instead of failing the whole file.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 32,
            max_aliases: 10_000,
            max_anchors: 10_000,
            max_nodes: 250_000,
            max_total_scalar_bytes: 16 * 1024 * 1024,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    }
}

fn parse_text(text: &str, source: &Source<'_>) -> FileOutcome {
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) => root,
        Ok(None) => return FileOutcome::default(),
        Err(e) => {
            let (pos, message) = syntax_error(&e);
            return FileOutcome::failed(pos, message);
        }
    };
    if matches!(root.kind, Kind::Null) {
        return FileOutcome::default();
    }

    let (_, mut diags) = collect::<RawDocument>(&root, text);
    let section = |name: &str| value_of(&root, text, name);

    let (defaults, defaults_clean) = match section("defaults") {
        None => (Defaults::default(), true),
        Some(node) => {
            let (raw, structural) = collect::<RawDefaults>(node, text);
            let clean = structural.is_empty();
            diags.extend(structural);
            match raw {
                Some(raw) => (
                    Defaults {
                        sched: Sched::parse(&raw.schedule(), &mut diags),
                        passive: Passive::parse(&raw.passive(), &mut diags),
                    },
                    clean,
                ),
                None => (Defaults::default(), false),
            }
        }
    };

    let mut targets = Vec::new();
    if let Some(Node {
        kind: Kind::Seq(items),
        ..
    }) = section("targets")
    {
        for item in items {
            targets.push(parse_target(
                item,
                text,
                source,
                &defaults,
                defaults_clean,
                &mut diags,
            ));
        }
    }
    // The key's position, found again: `section` gives the value.
    let key = |name: &str| {
        root.entries()
            .iter()
            .find(|(k, _)| k.text(text) == Some(name))
            .map_or(Pos::NONE, |(k, _)| k.pos)
    };
    let scoring = section("scoring").map(|node| Section {
        key: key("scoring"),
        value: graph::scoring(node, text, &mut diags),
    });
    let readiness = section("readiness").map(|node| Section {
        key: key("readiness"),
        value: graph::readiness(node, text, &mut diags),
    });
    let topology = section("topology").map(|node| Section {
        key: key("topology"),
        value: topology::parse(node, text, source, &mut diags),
    });
    let resolver = section("resolver").map(|node| Section {
        key: key("resolver"),
        value: resolver::parse(node, text, &mut diags),
    });
    FileOutcome {
        diags,
        targets,
        scoring,
        readiness,
        topology,
        resolver,
    }
}

/// Where a syntax error is and what it says.
fn syntax_error(e: &serde_saphyr::Error) -> (Pos, String) {
    let pos = e.location().map_or(Pos::NONE, |l| Pos {
        line: l.line(),
        column: l.column(),
    });
    let message = serde_saphyr::MessageFormatter::format_message(
        &serde_saphyr::UserMessageFormatter,
        e.without_snippet(),
    );
    (pos, format!("invalid YAML: {message}"))
}

/// Checks what spans files (duplicate ids, sections set twice, the dependency graph, the
/// required nodes), orders the errors and assembles the result.
fn finish(files: Vec<PathBuf>, mut outcomes: Vec<FileOutcome>) -> Result<Config, ConfigErrors> {
    let mut positions: HashMap<TargetId, (usize, Pos)> = HashMap::new();
    let mut late: Vec<graph::Located> = Vec::new();
    for (index, outcome) in outcomes.iter().enumerate() {
        for (id, pos) in outcome.targets.iter().filter_map(|t| t.id.as_ref()) {
            match positions.get(id) {
                Some(&(first_index, first_pos)) => late.push((
                    index,
                    *pos,
                    format!(
                        "duplicate target id {} (first defined at {})",
                        quote(id.as_str()),
                        at(&files, first_index, first_pos)
                    ),
                )),
                None => {
                    positions.insert(id.clone(), (index, *pos));
                }
            }
        }
    }
    let scoring = once(
        &files,
        &mut outcomes,
        "scoring",
        |o| o.scoring.take(),
        &mut late,
    );
    let readiness = once(
        &files,
        &mut outcomes,
        "readiness",
        |o| o.readiness.take(),
        &mut late,
    );
    let scoring = scoring.and_then(|(_, config)| config).unwrap_or_default();
    let etcd = once(
        &files,
        &mut outcomes,
        "topology",
        |o| o.topology.take(),
        &mut late,
    )
    .and_then(|(_, etcd)| etcd.flatten());
    let resolver = once(
        &files,
        &mut outcomes,
        "resolver",
        |o| o.resolver.take(),
        &mut late,
    )
    .and_then(|(_, resolver)| resolver)
    .unwrap_or_default();

    let declared: Vec<(usize, graph::DeclaredNode)> = outcomes
        .iter_mut()
        .enumerate()
        .flat_map(|(index, o)| {
            o.targets
                .iter_mut()
                .filter_map(move |t| Some((index, t.node.take()?)))
        })
        .collect();
    let nodes = graph::check(&files, declared, &positions, scoring, etcd.is_some()).unwrap_or_else(
        |errors| {
            late.extend(errors);
            Vec::new()
        },
    );
    let readiness = readiness.and_then(|(index, section)| {
        let parsed = section?;
        // With etcd, a required node may be declared there: it is then checked at run time.
        if etcd.is_none() {
            late.extend(graph::check_required(&parsed.required, index, &positions));
        }
        Some(parsed.policy)
    });
    for (index, pos, message) in late {
        if let Some(outcome) = outcomes.get_mut(index) {
            outcome.diags.push((pos, message));
        }
    }

    let mut errors = Vec::new();
    for (file, outcome) in files.iter().zip(&mut outcomes) {
        // A target is only left unbuilt because of a reported error; guard against a silent drop.
        if outcome.diags.is_empty() && outcome.targets.iter().any(|t| t.spec.is_none() && !t.group)
        {
            outcome
                .diags
                .push((Pos::NONE, "a target could not be built".to_owned()));
        }
        // Stable: errors at the same position keep the order they were found in.
        outcome.diags.sort_by_key(|(pos, _)| *pos);
        // The same defaults error can be reached through several targets.
        outcome.diags.dedup();
        errors.extend(outcome.diags.drain(..).map(|(pos, message)| ConfigError {
            file: file.clone(),
            line: pos.line,
            column: pos.column,
            message: one_line(&message),
        }));
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let mut targets = Vec::new();
    let mut pools = BTreeMap::new();
    for parsed in outcomes.into_iter().flat_map(|o| o.targets) {
        if let (Some((id, _)), Some(pool)) = (parsed.id, parsed.pool) {
            pools.insert(id, pool);
        }
        targets.extend(parsed.spec);
    }
    Ok(Config {
        topology: Topology {
            targets,
            nodes,
            scoring,
            readiness,
            pools,
        },
        files,
        etcd,
        resolver,
    })
}

/// `FILE:LINE:COL` of a position in file `index`.
fn at(files: &[PathBuf], index: usize, pos: Pos) -> String {
    let file = files.get(index).map_or(Path::new("?"), |f| f);
    format!("{}:{}:{}", file.display(), pos.line, pos.column)
}

/// The one file's `name` section, if any: its file's index and its value when valid. A second
/// one is an error: sections do not merge, and which file wins would depend on file names.
fn once<T>(
    files: &[PathBuf],
    outcomes: &mut [FileOutcome],
    name: &str,
    take: impl Fn(&mut FileOutcome) -> Option<Section<T>>,
    late: &mut Vec<graph::Located>,
) -> Option<(usize, Option<T>)> {
    let mut found: Option<(usize, Pos, Option<T>)> = None;
    for (index, outcome) in outcomes.iter_mut().enumerate() {
        let Some(section) = take(outcome) else {
            continue;
        };
        match &found {
            Some((first, key, _)) => late.push((
                index,
                section.key,
                format!(
                    "{name} is already set at {}; set it in one file only",
                    at(files, *first, *key)
                ),
            )),
            None => found = Some((index, section.key, section.value)),
        }
    }
    found.map(|(index, _, value)| (index, value))
}

/// One error about a file (or directory) as a whole.
pub(crate) fn file_error(file: &Path, message: String) -> ConfigErrors {
    ConfigErrors(vec![ConfigError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: one_line(&message),
    }])
}

/// The files to load: `path` itself, or the YAML files of the directory `path`, by name.
fn list_files(path: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let metadata = fs::metadata(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        fs::read_dir(path).map_err(|e| file_error(path, format!("cannot read directory: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| file_error(path, format!("cannot read directory: {e}")))?;
        let file = entry.path();
        let yaml = file
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        // Symlinks are followed; a dangling one is kept so that reading it reports the problem.
        if yaml && !file.is_dir() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(file_error(
            path,
            "no *.yaml or *.yml files in this directory".to_owned(),
        ));
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

fn read_file(file: &Path) -> Result<String, String> {
    let handle = fs::File::open(file).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    handle
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(format!(
            "file is larger than {} MiB",
            MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "file is not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Message helpers.

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.chars().count() > 64 {
        return None;
    }
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.chars().count() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters
/// (the usual typos), case-insensitively: the optimal string alignment distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // d[i][j]: distance between the first i chars of a and the first j chars of b.
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A user-supplied string for a message: quoted, escaped and shortened.
fn quote(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// Keeps a message on one line (the output is one error per line) and bounded in length.
fn one_line(message: &str) -> String {
    const MAX: usize = 1000;
    let mut out = String::with_capacity(message.len().min(MAX));
    for c in message.chars() {
        if out.len() >= MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_common_typos_only() {
        let keys = ["interval", "timeout", "send", "id", "tcp"];
        assert_eq!(did_you_mean("intervall", keys), Some("interval"));
        assert_eq!(did_you_mean("Timeout", keys), Some("timeout"));
        assert_eq!(did_you_mean("sned", keys), Some("send"));
        assert_eq!(did_you_mean("ip", keys), Some("id"));
        assert_eq!(did_you_mean("http", keys), None);
        assert_eq!(did_you_mean("colour", keys), None);
        assert_eq!(did_you_mean(&"x".repeat(10_000), keys), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("ab", "ba"), 1);
    }

    #[test]
    fn messages_are_single_bounded_lines() {
        assert_eq!(one_line("a\nb\tc"), "a\\nb\\tc");
        assert!(one_line(&"é".repeat(5_000)).len() < 1_100);
        assert_eq!(quote("a\"b"), r#""a\"b""#);
        assert!(quote(&"ü".repeat(500)).ends_with("\"..."));
    }
}
