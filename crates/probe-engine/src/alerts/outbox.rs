//! The outbox: every notification, kept until each receiver it is for has taken it, and with
//! `--state-dir` written to disk before any receiver sees it, so a restart loses none.
//!
//! The file (`<state-dir>/alerts.jsonl`) is a journal, one JSON record per line: a notification
//! (`note`, with the receivers it is for), a receiver's delivery of one (`ack`), one dropped for
//! room (`drop`), and, after a compaction, the alerts firing (`open`), from which the episodes
//! go on after a restart. New notifications are appended and synced (`fsync`) in one write per
//! look at the engine, before they are handed out; deliveries are appended without a sync, so a
//! crash can only make a notification be delivered again, never lost. When the journal has grown
//! to twice what it holds, it is rewritten (temporary file, sync, rename). A torn last line (a
//! crash mid-write) is skipped.
//!
//! The outbox is bounded: past `outbox_limit` notifications, the oldest resolved one goes first
//! (its receivers miss an end, not a page), then the oldest; each is counted
//! (`probe_alert_outbox_dropped_total`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::{Alert, Status};

/// The journal is not compacted below this size.
const COMPACT_FROM: u64 = 1 << 20;

/// One line of the journal.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record {
    /// A notification for the receivers named.
    Note {
        seq: u64,
        to: Vec<String>,
        alert: Alert,
    },
    /// Receiver `by` has notification `seq`.
    Ack { seq: u64, by: String },
    /// Notification `seq` was dropped for room.
    Drop { seq: u64 },
    /// An alert firing when the journal was compacted.
    Open { alert: Alert },
}

/// A notification and the receivers that still need it, one bit each.
struct Note {
    alert: Alert,
    owed: u64,
}

/// What the outbox holds.
struct Book {
    /// Receiver names, by index (their bit).
    receivers: Vec<String>,
    notes: BTreeMap<u64, Note>,
    /// The resolved ones among them, oldest first: the first to drop.
    resolved: BTreeSet<u64>,
    /// Alerts firing now, by fingerprint: what Alertmanager is sent again every `resend`.
    open: BTreeMap<String, Alert>,
    next_seq: u64,
    limit: usize,
    /// Deliveries and drops not written to the journal yet.
    unwritten: Vec<Record>,
}

impl Book {
    fn bit(&self, name: &str) -> Option<u64> {
        self.receivers
            .iter()
            .position(|r| r == name)
            .map(|i| 1 << i)
    }

    fn names(&self, owed: u64) -> Vec<String> {
        self.receivers
            .iter()
            .enumerate()
            .filter(|(i, _)| owed & (1 << i) != 0)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Follows `alert` in the alerts firing.
    fn follow(&mut self, alert: &Alert) {
        match alert.status {
            Status::Firing => {
                self.open.insert(alert.fingerprint.clone(), alert.clone());
            }
            Status::Resolved => {
                self.open.remove(&alert.fingerprint);
            }
        }
    }

    fn insert(&mut self, seq: u64, note: Note) {
        if note.owed == 0 {
            return;
        }
        if note.alert.status == Status::Resolved {
            self.resolved.insert(seq);
        }
        self.notes.insert(seq, note);
    }

    fn remove(&mut self, seq: u64) {
        self.notes.remove(&seq);
        self.resolved.remove(&seq);
    }

    /// Drops notifications past the limit, oldest resolved first.
    fn bound(&mut self) {
        while self.notes.len() > self.limit {
            let Some(seq) = self
                .resolved
                .first()
                .copied()
                .or_else(|| self.notes.keys().next().copied())
            else {
                return;
            };
            self.remove(seq);
            self.unwritten.push(Record::Drop { seq });
            metrics::counter!("probe_alert_outbox_dropped_total").increment(1);
        }
    }

    fn apply(&mut self, record: Record) {
        match record {
            Record::Note { seq, to, alert } => {
                self.next_seq = self.next_seq.max(seq + 1);
                self.follow(&alert);
                let owed = to
                    .iter()
                    .filter_map(|name| self.bit(name))
                    .fold(0, |a, b| a | b);
                self.insert(seq, Note { alert, owed });
            }
            Record::Ack { seq, by } => {
                if let (Some(bit), Some(note)) = (self.bit(&by), self.notes.get_mut(&seq)) {
                    note.owed &= !bit;
                    if note.owed == 0 {
                        self.remove(seq);
                    }
                }
            }
            Record::Drop { seq } => self.remove(seq),
            Record::Open { alert } => self.follow(&alert),
        }
    }

    /// Everything the book holds, as the records of a compacted journal.
    fn snapshot(&self) -> Vec<Record> {
        self.open
            .values()
            .map(|alert| Record::Open {
                alert: alert.clone(),
            })
            .chain(self.notes.iter().map(|(&seq, note)| Record::Note {
                seq,
                to: self.names(note.owed),
                alert: note.alert.clone(),
            }))
            .collect()
    }
}

/// The journal file.
struct Journal {
    path: PathBuf,
    file: File,
    /// Its length now, and just after its last compaction.
    len: u64,
    compacted: u64,
    /// Set when a write failed: it may have left half a line, which the next must not extend.
    torn: bool,
}

impl Journal {
    /// Opens (or creates) the journal in `dir` and reads its records.
    fn open(dir: &Path) -> std::io::Result<(Self, Vec<Record>)> {
        let path = dir.join("alerts.jsonl");
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Record>(line) {
                Ok(record) => records.push(record),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    line = n + 1,
                    error = %e,
                    "alert outbox: a record that does not parse is skipped (a write the daemon did not finish?)"
                ),
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let len = file.metadata()?.len();
        Ok((
            Self {
                path,
                file,
                len,
                compacted: len,
                torn: text.last().is_some_and(|&b| b != b'\n'),
            },
            records,
        ))
    }

    /// Appends `lines`; synced when `sync`.
    fn append(&mut self, lines: &[u8], sync: bool) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let written = self.write(lines, sync);
        self.torn = written.is_err();
        written
    }

    fn write(&mut self, lines: &[u8], sync: bool) -> std::io::Result<()> {
        // A line left torn by a crash or a failed write must not run into this one.
        if self.torn {
            self.file.write_all(b"\n")?;
            self.len += 1;
        }
        self.file.write_all(lines)?;
        self.len += lines.len() as u64;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn wants_compaction(&self) -> bool {
        self.len > COMPACT_FROM && self.len > 2 * self.compacted
    }

    /// Replaces the journal with `lines`, atomically.
    fn rewrite(&mut self, lines: &[u8]) -> std::io::Result<()> {
        let temp = self.path.with_extension("jsonl.tmp");
        let mut file = File::create(&temp)?;
        file.write_all(lines)?;
        file.sync_all()?;
        std::fs::rename(&temp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.len = lines.len() as u64;
        self.compacted = self.len;
        self.torn = false;
        Ok(())
    }
}

fn lines(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        if serde_json::to_writer(&mut out, record).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

/// The outbox, shared by the alerting loop (which puts) and the receivers (which take).
#[derive(Clone)]
pub(super) struct Outbox {
    shared: Arc<Shared>,
}

struct Shared {
    /// A blocking mutex: every use is a few map operations, never held across an `.await`.
    book: Mutex<Book>,
    /// One per receiver: there is something for it.
    wakes: Vec<Notify>,
    /// Set while nothing may be sent (a member whose lease is lost).
    held: AtomicBool,
    /// Only the alerting loop writes; a mutex so that a put can hand it to a blocking thread.
    journal: Mutex<Option<Journal>>,
}

/// One receiver's place in the outbox.
#[derive(Clone)]
pub(super) struct Receiver {
    outbox: Outbox,
    index: usize,
    bit: u64,
}

impl Outbox {
    /// An outbox for `receivers`, kept in `dir` when there is one, with what it held there.
    pub fn open(receivers: Vec<String>, limit: usize, dir: Option<&Path>) -> Self {
        let mut book = Book {
            receivers,
            notes: BTreeMap::new(),
            resolved: BTreeSet::new(),
            open: BTreeMap::new(),
            next_seq: 1,
            limit,
            unwritten: Vec::new(),
        };
        let journal = dir.and_then(|dir| match Journal::open(dir) {
            Ok((journal, records)) => {
                for record in records {
                    book.apply(record);
                }
                book.bound();
                Some(journal)
            }
            Err(e) => {
                tracing::error!(
                    dir = %dir.display(),
                    error = %e,
                    "alert outbox: the journal cannot be opened; notifications are kept in memory only"
                );
                None
            }
        });
        metrics::gauge!("probe_alert_outbox_size").set(book.notes.len() as f64);
        let wakes = book.receivers.iter().map(|_| Notify::new()).collect();
        Self {
            shared: Arc::new(Shared {
                book: Mutex::new(book),
                wakes,
                held: AtomicBool::new(false),
                journal: Mutex::new(journal),
            }),
        }
    }

    /// The alerts firing when the outbox was opened (or now): where the episodes go on from.
    pub fn open_alerts(&self) -> Vec<Alert> {
        self.shared.book.lock().open.values().cloned().collect()
    }

    /// Receiver `name`'s place.
    pub fn receiver(&self, name: &str) -> Option<Receiver> {
        let book = self.shared.book.lock();
        let index = book.receivers.iter().position(|r| r == name)?;
        Some(Receiver {
            outbox: self.clone(),
            index,
            bit: 1 << index,
        })
    }

    /// Holds every delivery back (`true`), or lets it go on.
    pub fn hold(&self, held: bool) {
        if self.shared.held.swap(held, Ordering::AcqRel) && !held {
            for wake in &self.shared.wakes {
                wake.notify_one();
            }
        }
    }

    /// Writes `changed` to the journal (synced), then hands them to every receiver; also
    /// writes the deliveries since the last put, and compacts the journal when it has grown.
    /// Blocking: called from a blocking thread.
    pub fn put(&self, changed: Vec<Alert>) {
        let (records, all) = {
            let mut book = self.shared.book.lock();
            let all = (1u64 << book.receivers.len()) - 1;
            let mut records = std::mem::take(&mut book.unwritten);
            let to = book.names(all);
            for alert in changed {
                let seq = book.next_seq;
                book.next_seq += 1;
                records.push(Record::Note {
                    seq,
                    to: to.clone(),
                    alert,
                });
            }
            (records, all)
        };
        let fresh = records.iter().any(|r| matches!(r, Record::Note { .. }));
        if let Some(journal) = self.shared.journal.lock().as_mut() {
            // Written, and synced when there is a notification among them, before any
            // receiver sees one.
            if let Err(e) = journal.append(&lines(&records), fresh) {
                tracing::error!(error = %e, "alert outbox: the journal cannot be written; a restart may lose what it could not write");
            }
        }
        if !fresh {
            self.compact();
            return;
        }
        {
            let mut book = self.shared.book.lock();
            for record in records {
                if let Record::Note { seq, alert, .. } = record {
                    book.follow(&alert);
                    book.insert(seq, Note { alert, owed: all });
                }
            }
            book.bound();
            metrics::gauge!("probe_alert_outbox_size").set(book.notes.len() as f64);
        }
        for wake in &self.shared.wakes {
            wake.notify_one();
        }
        self.compact();
    }

    fn compact(&self) {
        let mut journal = self.shared.journal.lock();
        let Some(journal) = journal.as_mut().filter(|j| j.wants_compaction()) else {
            return;
        };
        let snapshot = {
            let mut book = self.shared.book.lock();
            // What the snapshot holds need not be written again.
            book.unwritten.clear();
            book.snapshot()
        };
        if let Err(e) = journal.rewrite(&lines(&snapshot)) {
            tracing::error!(error = %e, "alert outbox: the journal cannot be compacted");
        }
    }
}

impl Receiver {
    /// Whether deliveries are held back.
    pub fn held(&self) -> bool {
        self.outbox.shared.held.load(Ordering::Acquire)
    }

    /// Waits until there may be something for this receiver.
    pub async fn woken(&self) {
        self.outbox.shared.wakes[self.index].notified().await;
    }

    /// The oldest notification this receiver still needs, after `after`.
    pub fn next(&self, after: u64) -> Option<(u64, Alert)> {
        let book = self.outbox.shared.book.lock();
        book.notes
            .range(after + 1..)
            .find(|(_, n)| n.owed & self.bit != 0)
            .map(|(&seq, n)| (seq, n.alert.clone()))
    }

    /// Up to `max` notifications this receiver still needs, oldest first, each episode once
    /// (its latest), with their numbers.
    pub fn batch(&self, max: usize) -> (Vec<u64>, Vec<Alert>) {
        let book = self.outbox.shared.book.lock();
        let mut seqs = Vec::new();
        let mut latest: BTreeMap<&str, (u64, &Alert)> = BTreeMap::new();
        for (&seq, note) in book.notes.iter().filter(|(_, n)| n.owed & self.bit != 0) {
            if seqs.len() == max {
                break;
            }
            seqs.push(seq);
            latest.insert(&note.alert.fingerprint, (seq, &note.alert));
        }
        let mut alerts: Vec<(u64, &Alert)> = latest.into_values().collect();
        alerts.sort_by_key(|(seq, _)| *seq);
        (seqs, alerts.into_iter().map(|(_, a)| a.clone()).collect())
    }

    /// The alerts firing now.
    pub fn open(&self) -> Vec<Alert> {
        self.outbox
            .shared
            .book
            .lock()
            .open
            .values()
            .cloned()
            .collect()
    }

    /// This receiver has notifications `seqs`.
    pub fn delivered(&self, seqs: &[u64]) {
        let mut book = self.outbox.shared.book.lock();
        let by = book.receivers[self.index].clone();
        for &seq in seqs {
            let Some(note) = book.notes.get_mut(&seq) else {
                continue;
            };
            note.owed &= !self.bit;
            if note.owed == 0 {
                book.remove(seq);
            }
            book.unwritten.push(Record::Ack {
                seq,
                by: by.clone(),
            });
        }
        metrics::gauge!("probe_alert_outbox_size").set(book.notes.len() as f64);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn alert(target: &str, status: Status) -> Alert {
        Alert {
            status,
            fingerprint: format!("fp-{target}"),
            labels: BTreeMap::from([("target".to_owned(), target.to_owned())]),
            annotations: BTreeMap::new(),
            starts_at: "2026-12-01T00:00:00.000Z".to_owned(),
            ends_at: None,
            generator_url: String::new(),
            cause: target.to_owned(),
            impacted: Vec::new(),
        }
    }

    fn receivers() -> Vec<String> {
        vec!["alertmanager".to_owned(), "ops".to_owned()]
    }

    /// What `receiver` still needs, as (target, status).
    fn owed(outbox: &Outbox, receiver: &str) -> Vec<(String, Status)> {
        let place = outbox.receiver(receiver).unwrap();
        let mut after = 0;
        let mut out = Vec::new();
        while let Some((seq, alert)) = place.next(after) {
            out.push((alert.cause, alert.status));
            after = seq;
        }
        out
    }

    #[test]
    fn a_reopened_outbox_holds_what_each_receiver_had_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(receivers(), 100, Some(dir.path()));
        outbox.put(vec![
            alert("a", Status::Firing),
            alert("b", Status::Firing),
            alert("a", Status::Resolved),
        ]);
        let am = outbox.receiver("alertmanager").unwrap();
        let (seqs, alerts) = am.batch(10);
        // Each episode once, its latest: a's end, b's start.
        assert_eq!(seqs.len(), 3);
        assert_eq!(
            alerts
                .iter()
                .map(|a| (a.cause.as_str(), a.status))
                .collect::<Vec<_>>(),
            [("b", Status::Firing), ("a", Status::Resolved)]
        );
        am.delivered(&seqs);
        let ops = outbox.receiver("ops").unwrap();
        ops.delivered(&[ops.next(0).unwrap().0]);
        // The deliveries go to disk with the next put.
        outbox.put(Vec::new());
        drop(outbox);

        let reopened = Outbox::open(receivers(), 100, Some(dir.path()));
        assert!(owed(&reopened, "alertmanager").is_empty());
        assert_eq!(
            owed(&reopened, "ops"),
            [
                ("b".to_owned(), Status::Firing),
                ("a".to_owned(), Status::Resolved)
            ]
        );
        let open: Vec<String> = reopened
            .open_alerts()
            .into_iter()
            .map(|a| a.cause)
            .collect();
        assert_eq!(open, ["b"]);
        // A receiver gone from the config is owed nothing; a new one gets only what comes.
        let changed = Outbox::open(vec!["pager".to_owned()], 100, Some(dir.path()));
        assert!(owed(&changed, "pager").is_empty());
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_next_write_does_not_run_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(receivers(), 100, Some(dir.path()));
        outbox.put(vec![alert("a", Status::Firing)]);
        drop(outbox);
        let path = dir.path().join("alerts.jsonl");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"kind":"note","seq":9,"to":["ops"],"al"#)
            .unwrap();
        drop(file);
        let outbox = Outbox::open(receivers(), 100, Some(dir.path()));
        assert_eq!(owed(&outbox, "ops"), [("a".to_owned(), Status::Firing)]);
        outbox.put(vec![alert("b", Status::Firing)]);
        drop(outbox);
        let outbox = Outbox::open(receivers(), 100, Some(dir.path()));
        assert_eq!(
            owed(&outbox, "ops"),
            [
                ("a".to_owned(), Status::Firing),
                ("b".to_owned(), Status::Firing)
            ]
        );
    }

    #[test]
    fn past_its_limit_the_outbox_drops_the_oldest_resolved_then_the_oldest() {
        let outbox = Outbox::open(receivers(), 2, None);
        outbox.put(vec![
            alert("a", Status::Firing),
            alert("a", Status::Resolved),
            alert("b", Status::Firing),
        ]);
        assert_eq!(
            owed(&outbox, "ops"),
            [
                ("a".to_owned(), Status::Firing),
                ("b".to_owned(), Status::Firing)
            ]
        );
        outbox.put(vec![alert("c", Status::Firing)]);
        assert_eq!(
            owed(&outbox, "ops"),
            [
                ("b".to_owned(), Status::Firing),
                ("c".to_owned(), Status::Firing)
            ]
        );
        // What fires is still known, for Alertmanager's resends (a's ended).
        let open: Vec<String> = outbox.open_alerts().into_iter().map(|a| a.cause).collect();
        assert_eq!(open, ["b", "c"]);
    }

    /// A compacted journal names, for each notification, the receivers that still need it and
    /// no other: one that had taken it must not be sent it again after a restart.
    #[test]
    fn a_compaction_keeps_each_notification_for_the_receivers_still_owed_it() {
        let outbox = Outbox::open(
            vec![
                "alertmanager".to_owned(),
                "ops".to_owned(),
                "pager".to_owned(),
            ],
            100,
            None,
        );
        outbox.put(vec![alert("a", Status::Firing), alert("b", Status::Firing)]);
        let am = outbox.receiver("alertmanager").unwrap();
        let pager = outbox.receiver("pager").unwrap();
        let (first, _) = am.batch(1);
        am.delivered(&first);
        pager.delivered(&first);
        // Taken by two of three: the third is still owed it, the two are not.
        let (left, alerts) = am.batch(10);
        assert_eq!(left.len(), 1);
        assert_eq!(alerts[0].cause, "b");
        assert_eq!(outbox.receiver("ops").unwrap().batch(10).0.len(), 2);
        // What fires now, for a receiver's resends, whatever it has taken.
        let firing: Vec<String> = am.open().into_iter().map(|a| a.cause).collect();
        assert_eq!(firing, ["a", "b"]);
        let snapshot = outbox.shared.book.lock().snapshot();
        let notes: Vec<(String, Vec<String>)> = snapshot
            .into_iter()
            .filter_map(|record| match record {
                Record::Note { to, alert, .. } => Some((alert.cause, to)),
                _ => None,
            })
            .collect();
        assert_eq!(
            notes,
            [
                ("a".to_owned(), vec!["ops".to_owned()]),
                (
                    "b".to_owned(),
                    vec![
                        "alertmanager".to_owned(),
                        "ops".to_owned(),
                        "pager".to_owned()
                    ]
                ),
            ]
        );
    }

    /// Below `COMPACT_FROM` the journal is only appended to: a rewrite (a temporary file, two
    /// syncs and a rename) on every look at the engine would cost more than the bytes it saves.
    #[test]
    fn a_small_journal_is_appended_to_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(receivers(), 100, Some(dir.path()));
        outbox.put(vec![alert("a", Status::Firing)]);
        for name in receivers() {
            let place = outbox.receiver(&name).unwrap();
            let (seqs, _) = place.batch(10);
            place.delivered(&seqs);
        }
        outbox.put(Vec::new());
        let text = std::fs::read_to_string(dir.path().join("alerts.jsonl")).unwrap();
        let kinds: Vec<&str> = text
            .lines()
            .map(|line| line.split('"').nth(3).unwrap())
            .collect();
        assert_eq!(kinds, ["note", "ack", "ack"], "{text}");
    }

    /// An outbox that holds a lot (a receiver down for an hour) is not rewritten on every put:
    /// only once the journal has grown to twice what the last compaction left.
    #[test]
    fn a_large_outbox_is_compacted_once_then_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alerts.jsonl");
        let outbox = Outbox::open(receivers(), 100_000, Some(dir.path()));
        let pending: Vec<Alert> = (0..6000)
            .map(|i| alert(&format!("t{i}"), Status::Firing))
            .collect();
        outbox.put(pending);
        for i in 0..10 {
            outbox.put(vec![alert(&format!("more-{i}"), Status::Firing)]);
        }
        // A compaction writes the alerts firing as `open` records, then the notifications; an
        // append writes notifications alone. The first put was compacted (past COMPACT_FROM,
        // and twice the nothing there was before); the later ones only appended.
        let text = std::fs::read_to_string(&path).unwrap();
        let open: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with(r#"{"kind":"open""#))
            .collect();
        assert!(
            !open.iter().any(|line| line.contains("more-")),
            "a later put rewrote the journal"
        );
        assert_eq!(open.len(), 6000, "the first put was not compacted");
        assert!(text.len() as u64 > COMPACT_FROM);
        assert_eq!(text.matches(r#""cause":"more-"#).count(), 10);
    }

    /// A member whose lease is lost holds every receiver back; when it is a member again, every
    /// receiver is woken to send what waited. A hold that changes nothing wakes nobody.
    #[tokio::test(start_paused = true)]
    async fn a_hold_holds_every_receiver_back_and_its_release_wakes_them() {
        let outbox = Outbox::open(receivers(), 100, None);
        let places: Vec<Receiver> = receivers()
            .iter()
            .map(|name| outbox.receiver(name).unwrap())
            .collect();
        let woken = |place: &Receiver| {
            let place = place.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(1), place.woken())
                    .await
                    .is_ok()
            }
        };
        assert!(!places[0].held());
        outbox.hold(true);
        outbox.hold(true);
        for place in &places {
            assert!(place.held());
            assert!(!woken(place).await, "woken while held");
        }
        outbox.hold(false);
        for place in &places {
            assert!(!place.held());
            assert!(woken(place).await, "not woken when released");
        }
        outbox.hold(false);
        for place in &places {
            assert!(!woken(place).await, "woken by a release of nothing");
        }
    }

    #[test]
    fn a_journal_grown_past_twice_its_content_is_compacted_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(receivers(), 100_000, Some(dir.path()));
        let path = dir.path().join("alerts.jsonl");
        let ops = outbox.receiver("ops").unwrap();
        let am = outbox.receiver("alertmanager").unwrap();
        let mut first = 0;
        for round in 0..100 {
            let batch: Vec<Alert> = (0..100)
                .map(|i| alert(&format!("t{round}-{i}"), Status::Resolved))
                .collect();
            outbox.put(batch);
            let (seqs, _) = am.batch(1000);
            am.delivered(&seqs);
            ops.delivered(&seqs);
            if round == 0 {
                first = std::fs::metadata(&path).unwrap().len();
            }
        }
        outbox.put(vec![alert("last", Status::Firing)]);
        outbox.put(Vec::new());
        // A hundred rounds as large as the first pass the threshold twice: the early, delivered
        // ones are gone from the file.
        assert!(100 * first > 2 * COMPACT_FROM, "{first}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("\"t0-0\""), "the first round is still there");
        assert!((text.len() as u64) < 100 * first);
        drop(outbox);
        let outbox = Outbox::open(receivers(), 100_000, Some(dir.path()));
        assert_eq!(owed(&outbox, "ops"), [("last".to_owned(), Status::Firing)]);
        assert_eq!(outbox.open_alerts().len(), 1);
    }
}
