//! The daemon's small state file: operator maintenance survives a restart.
//!
//! The file (`<state-dir>/maintenance.json`) is rewritten whole on every change, through a
//! temporary file, `fsync` and `rename`, so a crash leaves either the old or the new content,
//! never a torn one. One writer thread does every write: a change asks it to save
//! ([`StateStore::save`]) and is acknowledged only once a write that began after the change is
//! durable, so the last acknowledged change is never lost, and concurrent changes cannot
//! overwrite a newer snapshot with an older one. Requests that arrive during a write are
//! answered by one more write. A file that does not parse is reported, moved aside (for a
//! person to look at) and replaced by the next save.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use probe::TargetId;
use probe::engine::{Engine, EngineError, MaintenanceInfo};
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
    /// Another process holds the directory: two daemons writing one state would each
    /// overwrite the other's maintenance, outbox and history.
    #[error(
        "{path}: another probe-engine uses this state directory (give each its own --state-dir)"
    )]
    InUse {
        /// The directory's lock file.
        path: PathBuf,
    },
    /// The writer thread is gone (it never is while the store lives).
    #[error("the state writer is gone")]
    WriterGone,
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

/// Reads and writes the state file in one directory, and holds saved maintenance whose target
/// is not there yet.
///
/// Targets from etcd arrive after start-up, so saved maintenance waits in the store until its
/// target appears ([`StateStore::restore`]) or it expires; saving keeps the waiting entries, so
/// an API change meanwhile does not lose them.
#[derive(Clone, Debug)]
pub struct StateStore {
    /// The state file.
    path: PathBuf,
    /// Saved maintenance whose target has not appeared yet, shared by the store's clones (the
    /// API saves, the topology loop restores). A blocking mutex: each use swaps or filters the
    /// list at once and never waits for anything while holding it.
    pending: Arc<Mutex<Vec<SavedMaintenance>>>,
    /// Save requests to the writer thread.
    writer: std::sync::mpsc::Sender<SaveRequest>,
    /// The directory's lock (`<dir>/lock`), held while any clone lives: the kernel lets it go
    /// when the process ends, however it ends, so a daemon killed with `SIGKILL` leaves no
    /// stale lock behind.
    _lock: Arc<std::fs::File>,
}

/// A save: the engine to snapshot, and whom to tell once the write is durable.
struct SaveRequest {
    engine: Engine,
    done: tokio::sync::oneshot::Sender<Result<(), Arc<PersistError>>>,
}

impl StateStore {
    /// A store in `dir`, created if missing, and locked for this process.
    ///
    /// # Errors
    /// The directory cannot be created, or another process holds its lock.
    pub fn open(dir: &Path) -> Result<Self, PersistError> {
        std::fs::create_dir_all(dir).map_err(|source| PersistError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let lock_path = dir.join("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| PersistError::Io {
                path: lock_path.clone(),
                source,
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(PersistError::InUse { path: lock_path });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(PersistError::Io {
                    path: lock_path,
                    source,
                });
            }
        }
        let (writer, requests) = std::sync::mpsc::channel::<SaveRequest>();
        let store = Self {
            path: dir.join("maintenance.json"),
            pending: Arc::default(),
            writer,
            _lock: Arc::new(lock),
        };
        let writing = store.clone();
        std::thread::Builder::new()
            .name("probe-state".into())
            .spawn(move || {
                // Ends when every clone of the store (and so every sender) is gone.
                while let Ok(first) = requests.recv() {
                    let mut batch = vec![first];
                    batch.extend(requests.try_iter());
                    // Every change in the batch happened before its request was sent: one
                    // snapshot taken now holds them all.
                    let entries = batch[batch.len() - 1].engine.operator_maintenance();
                    let result = writing.write(&entries).map_err(Arc::new);
                    for request in batch {
                        // A requester that went away needs no answer.
                        let _ = request.done.send(result.clone());
                    }
                }
            })
            .map_err(|source| PersistError::Io {
                path: dir.to_owned(),
                source,
            })?;
        Ok(store)
    }

    /// Saves the engine's operator maintenance; resolves once a write that began after this
    /// call is durable.
    ///
    /// # Errors
    /// Writing, syncing or renaming failed.
    pub async fn save(&self, engine: &Engine) -> Result<(), Arc<PersistError>> {
        let (done, answer) = tokio::sync::oneshot::channel();
        let request = SaveRequest {
            engine: engine.clone(),
            done,
        };
        if self.writer.send(request).is_err() {
            return Err(Arc::new(PersistError::WriterGone));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Arc::new(PersistError::WriterGone)))
    }

    /// Loads the saved maintenance as pending, to be restored as targets appear. A damaged file
    /// is reported and moved aside (to `maintenance.json.corrupt-<unix seconds>`): losing a
    /// maintenance flag must not keep the daemon down, and the evidence is kept.
    pub fn load_pending(&self) {
        match self.load() {
            Ok(saved) => *self.pending.lock() = saved,
            Err(e @ PersistError::Format { .. }) => {
                let secs = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let aside = self.path.with_extension(format!("json.corrupt-{secs}"));
                match std::fs::rename(&self.path, &aside) {
                    Ok(()) => tracing::error!(
                        error = %e,
                        moved_to = %aside.display(),
                        "the state file is corrupt: moved aside; saved maintenance not restored"
                    ),
                    Err(rename) => tracing::error!(
                        error = %e,
                        rename_error = %rename,
                        "the state file is corrupt and cannot be moved aside; saved maintenance \
                         not restored"
                    ),
                }
            }
            Err(e) => tracing::error!(error = %e, "saved maintenance not restored"),
        }
    }

    /// Puts the pending maintenance of every target `engine` has now back in force, and drops
    /// the expired and invalid entries. The others keep waiting.
    pub fn restore(&self, engine: &Engine) {
        let now = SystemTime::now();
        self.pending.lock().retain(|entry| {
            let left = entry
                .until()
                .and_then(|until| until.duration_since(now).ok());
            let (Ok(id), Some(left)) = (TargetId::new(&entry.target), left) else {
                tracing::info!(target_id = %entry.target, "saved maintenance expired or invalid; dropped");
                return false;
            };
            match engine.start_maintenance(&id, entry.reason.clone(), left) {
                Ok(info) => {
                    tracing::info!(
                        target_id = %id,
                        until = %humantime::format_rfc3339_seconds(info.until),
                        "maintenance restored"
                    );
                    false
                }
                Err(EngineError::UnknownTarget(_)) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "saved maintenance not restored");
                    false
                }
            }
        });
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

    /// Replaces the saved maintenance with `entries` plus the pending entries of other
    /// targets, atomically. Only the writer thread (and tests) call it.
    fn write(&self, entries: &[(TargetId, MaintenanceInfo)]) -> Result<(), PersistError> {
        let mut maintenance: Vec<SavedMaintenance> = entries
            .iter()
            .map(|(id, info)| SavedMaintenance {
                target: id.to_string(),
                reason: info.reason.clone(),
                until: humantime::format_rfc3339_millis(info.until).to_string(),
            })
            .collect();
        maintenance.extend(
            self.pending
                .lock()
                .iter()
                .filter(|p| !entries.iter().any(|(id, _)| id.as_str() == p.target))
                .cloned(),
        );
        let file = StateFile { maintenance };
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
        store
            .write(&[(TargetId::new("db").unwrap(), info)])
            .unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].target, "db");
        assert_eq!(loaded[0].reason, "db upgrade");
        assert_eq!(loaded[0].until(), Some(until));
        assert!(!dir.path().join("state/maintenance.json.tmp").exists());
    }

    /// A reader never sees a half-written file: while saves of a short and a long file
    /// alternate, every load parses and is one of the two. (Written in place, a save would be
    /// seen truncated or half-written.) A temporary file left by a save that died half-way
    /// changes nothing either.
    #[test]
    fn a_reader_never_sees_a_half_written_save() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(StateStore::open(dir.path()).unwrap());
        std::fs::write(dir.path().join("maintenance.json.tmp"), "{half a wri").unwrap();
        let entries = |n: usize| -> Vec<(TargetId, MaintenanceInfo)> {
            (0..n)
                .map(|i| {
                    let info = MaintenanceInfo {
                        reason: "x".repeat(500),
                        source: MaintenanceSource::Operator,
                        until: SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000),
                    };
                    (TargetId::new(&format!("t{i}")).unwrap(), info)
                })
                .collect()
        };
        let (short, long) = (entries(1), entries(40));
        store.write(&short).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                let mut loads = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let loaded = store.load().expect("a load saw a half-written file");
                    assert!(matches!(loaded.len(), 1 | 40), "{} entries", loaded.len());
                    loads += 1;
                }
                loads
            })
        };
        for i in 0..200 {
            store
                .write(if i % 2 == 0 { &long } else { &short })
                .unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let loads = reader.join().unwrap();
        assert!(loads > 0);
        assert_eq!(store.load().unwrap().len(), 1);
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        std::fs::write(dir.path().join("maintenance.json"), "{not json").unwrap();
        assert!(matches!(store.load(), Err(PersistError::Format { .. })));
        store.load_pending();
        assert!(!dir.path().join("maintenance.json").exists(), "moved aside");
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("maintenance.json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(&aside[0])).unwrap(),
            "{not json"
        );
    }
}
