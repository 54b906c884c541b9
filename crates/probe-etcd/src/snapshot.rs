//! The published content: every key under the prefix, as of one etcd revision.
//!
//! A [`Snapshot`] is immutable and shared (`Arc`), so a consumer holds a consistent view for as
//! long as it needs while the source builds the next one. Values are [`Bytes`]: the source
//! copies each value once out of the gRPC message, and every later snapshot shares it.

use std::collections::BTreeMap;

use bytes::Bytes;

/// The value of one key and the revision that last wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The raw value, as stored in etcd.
    pub value: Bytes,
    /// The etcd revision of the last write to this key. A consumer can compare it with the one
    /// it applied to skip unchanged entries.
    pub mod_revision: i64,
}

/// The content of the prefix at one revision.
///
/// Before the first read the source holds an empty snapshot at revision 0; receivers created by
/// [`Source::snapshots`](crate::Source::snapshots) have already seen it, so their first
/// `changed()` is the first real content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The etcd revision this content was observed at: every write up to it is reflected.
    /// It moves only when the content changes; [`Status::revision`](crate::Status::revision)
    /// follows etcd's revision more closely.
    pub revision: i64,
    /// Entries by key suffix: the part of the key after the prefix. Keys whose suffix is not
    /// UTF-8 are left out (and logged).
    pub entries: BTreeMap<String, Entry>,
}

impl Snapshot {
    /// The entry stored under `<prefix><id>`.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
