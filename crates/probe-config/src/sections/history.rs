//! The top-level `history` section: where transitions, hourly rollups and operator actions are
//! kept, and for how long.
//!
//! ```yaml
//! history:                                  # optional, in one file at most
//!   sqlite: { path: history.db }            # the default: <--state-dir>/history.db
//!   # or, for the members of a cluster sharing one history:
//!   # postgres: { url: "${PG_URL}" }
//!   retention: { transitions: 400d, rollups: 400d }   # the defaults
//!   max_size: 5GiB                          # the oldest days go first past it (default 5GiB)
//! # or history: false
//! ```
//!
//! A relative `sqlite.path` is under `--state-dir`. Without the section, history is kept in
//! SQLite under `--state-dir`, and not at all without one. The URL is expanded from the
//! environment and never shown whole: its password is replaced in status and logs.

use std::path::PathBuf;
use std::time::Duration;

use probe::tier::http::expand_env;
use serde::Deserialize;

use super::schedule::{Slot, duration_at_most};
use crate::yaml::files::Source;
use crate::yaml::node::{BoolOr, Diags, Node, Sp, collect};

/// How long transitions and rollups are kept by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(400 * 86_400);

/// The longest retention: ten years.
const MAX_RETENTION: Duration = Duration::from_secs(10 * 366 * 86_400);

/// The default size cap: 5 GiB, about 100k targets for a year.
pub const DEFAULT_MAX_BYTES: u64 = 5 << 30;

#[derive(Deserialize)]
#[serde(rename = "history", deny_unknown_fields)]
struct RawHistory {
    sqlite: Option<Sp<RawSqlite>>,
    postgres: Option<Sp<RawPostgres>>,
    retention: Option<Sp<RawRetention>>,
    max_size: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "sqlite", deny_unknown_fields)]
struct RawSqlite {
    path: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "postgres", deny_unknown_fields)]
struct RawPostgres {
    url: Sp<String>,
}

#[derive(Deserialize)]
#[serde(rename = "retention", deny_unknown_fields)]
struct RawRetention {
    transitions: Option<Sp<String>>,
    rollups: Option<Sp<String>>,
}

/// Where the history goes, before `--state-dir` is known.
#[derive(Clone, PartialEq, Eq)]
pub enum HistoryStore {
    /// A SQLite file: relative paths are under `--state-dir`.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, expanded (a secret: `Debug` hides it).
    Postgres(String),
}

impl std::fmt::Debug for HistoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "Sqlite({})", path.display()),
            Self::Postgres(_) => f.write_str("Postgres(<redacted>)"),
        }
    }
}

/// What the `history` section says.
#[derive(Clone, Debug, PartialEq)]
pub struct HistorySection {
    /// Where; `None`: `history: false`.
    pub store: Option<HistoryStore>,
    /// How long transitions and operator actions are kept.
    pub transitions: Duration,
    /// How long hourly rollups are kept.
    pub rollups: Duration,
    /// The size cap, in bytes.
    pub max_bytes: u64,
}

impl Default for HistorySection {
    fn default() -> Self {
        Self {
            store: Some(HistoryStore::Sqlite(PathBuf::from("history.db"))),
            transitions: DEFAULT_RETENTION,
            rollups: DEFAULT_RETENTION,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// The `history` section; `None` when invalid (every problem reported).
pub(crate) fn parse(
    node: &Node,
    src: &str,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<HistorySection> {
    let (raw, structural) = collect::<BoolOr<RawHistory>>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = match raw.filter(|_| clean)? {
        BoolOr::Bool(false) => {
            return Some(HistorySection {
                store: None,
                ..HistorySection::default()
            });
        }
        BoolOr::Bool(true) => return Some(HistorySection::default()),
        BoolOr::Value(raw) => raw,
    };
    let before = diags.len();
    let mut section = HistorySection::default();
    match (raw.sqlite, raw.postgres) {
        (Some(_), Some(pg)) => diags.push((
            pg.pos,
            "history takes sqlite or postgres, not both".to_owned(),
        )),
        (Some(sqlite), None) => {
            if let Some(path) = sqlite.value.path {
                if path.value.trim().is_empty() {
                    diags.push((path.pos, "path must name a file".to_owned()));
                }
                section.store = Some(HistoryStore::Sqlite(PathBuf::from(path.value)));
            }
        }
        (None, Some(pg)) => {
            let url = &pg.value.url;
            match expand_env(&url.value, source.env) {
                Ok(expanded)
                    if expanded.starts_with("postgres://")
                        || expanded.starts_with("postgresql://") =>
                {
                    section.store = Some(HistoryStore::Postgres(expanded));
                }
                Ok(_) => diags.push((
                    url.pos,
                    "url must be a postgres:// or postgresql:// URL".to_owned(),
                )),
                Err(e) => diags.push((url.pos, format!("in url: {e}"))),
            }
        }
        (None, None) => {}
    }
    if let Some(retention) = raw.retention {
        for (value, name, slot) in [
            (
                &retention.value.transitions,
                "transitions",
                &mut section.transitions,
            ),
            (&retention.value.rollups, "rollups", &mut section.rollups),
        ] {
            match duration_at_most(value.as_ref(), name, true, MAX_RETENTION, diags) {
                Slot::Set { value, key } if value < Duration::from_secs(86_400) => {
                    diags.push((key, format!("{name} must be kept at least 1d")));
                }
                Slot::Set { value, .. } => *slot = value,
                Slot::Absent | Slot::Invalid => {}
            }
        }
    }
    if let Some(size) = raw.max_size {
        match parse_size(&size.value) {
            Some(bytes) if bytes >= 1 << 20 => section.max_bytes = bytes,
            Some(_) => diags.push((size.pos, "max_size must be at least 1MiB".to_owned())),
            None => diags.push((
                size.pos,
                format!(
                    "max_size {:?} is no size: expected bytes or a number with KiB, MiB, GiB, \
                     TiB (or KB, MB, GB, TB)",
                    size.value
                ),
            )),
        }
    }
    (diags.len() == before).then_some(section)
}

/// `5GiB`, `500MB`, `1048576`.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * scale;
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("5GiB"), Some(5 << 30));
        assert_eq!(parse_size("500MB"), Some(500_000_000));
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("1.5 KiB"), Some(1536));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("5 parsecs"), None);
    }
}
