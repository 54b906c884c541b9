//! The daemon's small state file: operator maintenance survives a restart.
//!
//! The file (`<state-dir>/maintenance.json`) is rewritten whole on every change, through a
//! temporary file, `fsync` and `rename`, so a crash leaves either the old or the new content,
//! never a torn one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use probe::engine::MaintenanceInfo;
use probe::target::TargetId;
use serde::{Deserialize, Serialize};

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Reading, writing or renaming failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not what this version writes.
    #[error("{path}: not a valid state file: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// One operator maintenance as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedMaintenance {
    /// The target's id.
    pub target: String,
    /// The operator's reason.
    pub reason: String,
    /// When it ends, RFC 3339.
    pub until: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    maintenance: Vec<SavedMaintenance>,
}

/// Reads and writes the state file in one directory.
#[derive(Clone, Debug)]
pub struct StateStore {
    path: PathBuf,
}

impl StateStore {
    /// A store in `dir`, created if missing.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn open(dir: &Path) -> Result<Self, PersistError> {
        std::fs::create_dir_all(dir).map_err(|source| PersistError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(Self {
            path: dir.join("maintenance.json"),
        })
    }

    /// The saved maintenance; none when the file does not exist yet.
    ///
    /// # Errors
    /// The file cannot be read or parsed.
    pub fn load(&self) -> Result<Vec<SavedMaintenance>, PersistError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(PersistError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let file: StateFile =
            serde_json::from_str(&text).map_err(|source| PersistError::Format {
                path: self.path.clone(),
                source,
            })?;
        Ok(file.maintenance)
    }

    /// Replaces the saved maintenance with `entries`, atomically.
    ///
    /// # Errors
    /// Writing, syncing or renaming fails.
    pub fn save(&self, entries: &[(TargetId, MaintenanceInfo)]) -> Result<(), PersistError> {
        let file = StateFile {
            maintenance: entries
                .iter()
                .map(|(id, info)| SavedMaintenance {
                    target: id.to_string(),
                    reason: info.reason.clone(),
                    until: humantime::format_rfc3339_millis(info.until).to_string(),
                })
                .collect(),
        };
        let tmp = self.path.with_extension("json.tmp");
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PersistError::Io { path, source }
        };
        let body = serde_json::to_vec_pretty(&file).map_err(|source| PersistError::Format {
            path: self.path.clone(),
            source,
        })?;
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&body).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(io(&self.path))?;
        if let Some(dir) = self.path.parent() {
            // Make the rename itself durable.
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir))?;
        }
        Ok(())
    }
}

impl SavedMaintenance {
    /// When it ends, if the timestamp parses.
    pub fn until(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339_weak(&self.until).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe::engine::MaintenanceSource;
    use std::time::Duration;

    #[test]
    fn saves_and_loads_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("state")).unwrap();
        assert_eq!(store.load().unwrap(), []);
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let info = MaintenanceInfo {
            reason: "db upgrade".into(),
            source: MaintenanceSource::Operator,
            until,
        };
        store.save(&[(TargetId::new("db").unwrap(), info)]).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].target, "db");
        assert_eq!(loaded[0].reason, "db upgrade");
        assert_eq!(loaded[0].until(), Some(until));
        assert!(!dir.path().join("state/maintenance.json.tmp").exists());
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("maintenance.json"), "{not json").unwrap();
        assert!(matches!(store.load(), Err(PersistError::Format { .. })));
    }
}
