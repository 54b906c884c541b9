//! [`EtcdDiscovery`]: the etcd content as a [`Discovery`] source of target declarations.
//!
//! The values are decoded by a function the caller gives (the daemon passes its config parser,
//! so an etcd value has exactly the schema of one YAML `targets` item), and a decoded value is
//! kept until its key's `mod_revision` changes: a snapshot that changed one key out of 10k
//! decodes one value.

use std::collections::HashMap;
use std::sync::Arc;

use probe::topology::{Catalog, CatalogEntry, Declaration, Discovery};
use tokio::sync::watch;

use crate::snapshot::Snapshot;

/// Decodes one value: `(name, origin, value)` to a declaration, or the reason it is invalid.
/// `name` is the key's part after the prefix, `origin` names the key for people
/// (`etcd key /probe-engine/targets/db`).
pub type Decoder = dyn Fn(&str, &str, &[u8]) -> Result<Declaration, String> + Send + Sync;

/// The snapshots of a [`Source`](crate::Source), decoded into catalogs.
pub struct EtcdDiscovery {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    prefix: String,
    decode: Box<Decoder>,
    /// Decoded values by name, with the `mod_revision` they were decoded at.
    decoded: HashMap<String, (i64, Result<Arc<Declaration>, String>)>,
}

impl EtcdDiscovery {
    /// Decodes the snapshots of `snapshots` (from [`Source::snapshots`](crate::Source::snapshots)
    /// of a source reading `prefix`) with `decode`.
    pub fn new(
        snapshots: watch::Receiver<Arc<Snapshot>>,
        prefix: impl Into<String>,
        decode: Box<Decoder>,
    ) -> Self {
        Self {
            snapshots,
            prefix: prefix.into(),
            decode,
            decoded: HashMap::new(),
        }
    }

    fn catalog(&mut self, snapshot: &Snapshot) -> Catalog {
        self.decoded
            .retain(|name, _| snapshot.entries.contains_key(name));
        let entries = snapshot
            .entries
            .iter()
            .map(|(name, entry)| {
                let key = format!("etcd key {}{name}", self.prefix);
                let declaration = match self.decoded.get(name) {
                    Some((revision, decoded)) if *revision == entry.mod_revision => decoded.clone(),
                    _ => {
                        let decoded = (self.decode)(name, &key, &entry.value).map(Arc::new);
                        self.decoded
                            .insert(name.clone(), (entry.mod_revision, decoded.clone()));
                        decoded
                    }
                };
                CatalogEntry {
                    name: name.clone(),
                    origin: format!("{key} (revision {})", entry.mod_revision),
                    declaration,
                }
            })
            .collect();
        Catalog {
            entries,
            ..Catalog::default()
        }
    }
}

#[async_trait::async_trait]
impl Discovery for EtcdDiscovery {
    /// Waits for the next snapshot (the first one is the first full read: the empty snapshot
    /// a source starts with is not a content) and returns it decoded.
    async fn next(&mut self) -> Option<Catalog> {
        self.snapshots.changed().await.ok()?;
        let snapshot = self.snapshots.borrow_and_update().clone();
        Some(self.catalog(&snapshot))
    }
}
