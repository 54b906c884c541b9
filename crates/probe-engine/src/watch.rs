//! `--watch-config`: reload triggers from file-system events, so that config edits apply without
//! a SIGHUP.
//!
//! This module only says *when* the config may have changed; reading and applying it stays with
//! the daemon's reload, which already turns an unchanged config into an empty diff.
//!
//! # Why the directory and never the file
//! An inotify watch follows an inode, and the usual ways of updating a config replace the inode:
//! - editors (vim, IntelliJ) write a temporary file and rename it over the original;
//! - Kubernetes mounts a ConfigMap as `config.yaml -> ..data/config.yaml` with
//!   `..data -> ..2026_11_30_...`, and updates it by creating a new timestamped directory and
//!   renaming a new `..data` symlink over the old one.
//!
//! A watch on the file would keep following the old inode and never fire again. So the watch is
//! on the directory (the config directory itself, or the parent of a single config file),
//! non-recursive, and events are filtered by name:
//! - for a config directory, every change in it counts (the daemon merges every `*.yaml`, and
//!   ConfigMap swaps happen on names like `..data` that are not YAML files);
//! - for a single file, only the file's name, `..data`, and the names of the symlinks (and their
//!   targets) in the directory through which the file's path resolves.
//!
//! Edits reached only through a symlink that leads out of the watched directory (a target
//! rewritten in place elsewhere) are not seen; SIGHUP still covers them.
//!
//! Opens and reads are not changes: the daemon's own reload reads the config, and counting that
//! would reload forever.
//!
//! # Debounce
//! An editor's save or a ConfigMap swap is a burst of events; the trigger is sent once the
//! directory has been quiet for the debounce delay, so the reload sees the finished state.
//!
//! `notify-debouncer-mini` keeps that time, on a thread of its own. It debounces each path apart
//! and sees neither the kind of an event nor whether it concerns the config, so it watches
//! through a `ConfigWatcher`: the name filter above runs first, on notify's thread, and every
//! event that concerns the config reaches the debouncer as an event of one path, the config's. A
//! burst over several names (a temporary file renamed over the config, a symlink swap) is then
//! one burst, and one trigger. (`notify-debouncer-full` keeps the kinds, but delays each event by
//! the delay instead of waiting for quiet, so a burst longer than the delay would reload twice.)
//!
//! A directory that never goes quiet still triggers at most ten debounce delays after the burst
//! began. The debouncer has no such bound: it only reports, about once a delay, that a burst goes
//! on (`AnyContinuous`), so the count of those reports up to ten (`MAX_DEFER`) is kept here.
//!
//! # Losing the watch
//! When the watched directory is removed, renamed, or replaced (checked every two seconds, for
//! the cases inotify does not report), or when notify reports an error, the watch is rebuilt,
//! retrying with a delay that doubles up to five seconds. The lost watch is kept until the new
//! one is in place, so that a burst it saw before the loss (the files removed with their
//! directory) still triggers. Each new watch sends a trigger, since edits made while nothing was
//! watching would otherwise be missed.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{Event, EventHandler, RecommendedWatcher, RecursiveMode, Watcher, WatcherKind};
use notify_debouncer_mini::{
    DebounceEventHandler, DebounceEventResult, DebouncedEventKind, Debouncer, new_debouncer_opt,
};
use parking_lot::Mutex;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// The longest debounce honoured; longer values are treated as this (an hour of silence before a
/// reload is already more than any editor or ConfigMap update needs).
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(3600);

/// A trigger is sent at most this many debounce delays after the first event of a burst, so a
/// directory that keeps changing is still reloaded.
const MAX_DEFER: u32 = 10;

/// The first delay before rebuilding a lost watch; it doubles on each failure.
const RETRY_MIN: Duration = Duration::from_millis(100);

/// The longest delay between attempts to rebuild a watch.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How often the watched directory is checked to still be the one watched: inotify does not
/// report every way a directory can be replaced (a rename over it, an unmount).
const RECHECK: Duration = Duration::from_secs(2);

/// How many symlinks are followed from a single config file when collecting the names that
/// concern it; a chain longer than this is a loop or a mistake.
const MAX_LINKS: usize = 16;

/// The symlink through which Kubernetes swaps a ConfigMap volume's content.
const CONFIGMAP_DATA: &str = "..data";

/// Why the watcher could not start. Anything that can heal (a missing directory, an inotify
/// limit) is retried instead.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The path is empty, or relative while the current directory is unavailable.
    #[error("{}: cannot watch: {source}", path.display())]
    Path {
        /// The path as given.
        path: PathBuf,
        /// Why it cannot be made absolute.
        source: std::io::Error,
    },
}

/// Sends a reload trigger on `trigger` each time the config at `path` may have changed, until
/// `cancel`.
///
/// `path` is a YAML file or a directory of them, as for [`probe_config::load`]. Events are
/// coalesced: one trigger is sent `debounce` after the last event of a burst (`debounce` is
/// capped at [`MAX_DEBOUNCE`]). One trigger is also sent each time the watch is put in place,
/// including the first: the caller may have loaded the config before the watch existed.
///
/// Triggers are offered with `try_send`, so a slow reload never blocks the watcher: a trigger
/// already waiting in the channel is enough, and a channel of capacity 1 is all a caller needs.
///
/// Runs until `cancel` is cancelled or the receiving side of `trigger` is dropped, and then
/// returns `Ok(())`. A watch that cannot be set up or is lost is logged and retried; dropping the
/// future stops the underlying notify watcher as well.
///
/// # Errors
/// [`WatchError::Path`] when `path` cannot be made absolute (it is empty, or relative and the
/// current directory is unavailable); nothing is watched then.
pub async fn watch_config(
    path: PathBuf,
    debounce: Duration,
    trigger: mpsc::Sender<()>,
    cancel: CancellationToken,
) -> Result<(), WatchError> {
    let path = match std::path::absolute(&path) {
        Ok(absolute) => absolute,
        Err(source) => return Err(WatchError::Path { path, source }),
    };
    let debounce = debounce.min(MAX_DEBOUNCE);
    let mut failures: u32 = 0;
    // The watch lost last, kept until the next one is in place: a burst it saw before the loss
    // still sends its trigger.
    let mut lost: Option<Armed> = None;
    loop {
        let armed = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = trigger.closed() => return Ok(()),
            armed = arm(path.clone(), debounce, trigger.clone()) => armed,
        };
        match armed {
            Ok(mut armed) => {
                // The new watch's own trigger covers whatever the lost one still had pending.
                drop(lost.take());
                tracing::info!(
                    config = %path.display(),
                    dir = %armed.dir.display(),
                    "watching config for changes"
                );
                failures = 0;
                if !offer(&trigger) {
                    return Ok(());
                }
                match watching(&mut armed, &trigger, &cancel).await {
                    Exit::Stop => return Ok(()),
                    Exit::Lost(reason) => {
                        tracing::warn!(
                            config = %path.display(),
                            dir = %armed.dir.display(),
                            reason = %reason,
                            "config watch lost; rebuilding it"
                        );
                        lost = Some(armed);
                    }
                }
            }
            // The first failure in a row is worth a warning; the retries that follow are not.
            Err(e) if failures == 0 => {
                tracing::warn!(config = %path.display(), error = %e, "cannot watch config; retrying");
            }
            Err(e) => {
                tracing::debug!(config = %path.display(), error = %e, "cannot watch config yet");
            }
        }
        failures = failures.saturating_add(1);
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = trigger.closed() => return Ok(()),
            () = tokio::time::sleep(retry_delay(failures)) => {}
        }
    }
}

/// Why a watch ended.
enum Exit {
    /// Cancelled, or nobody listens for triggers any more.
    Stop,
    /// The watch no longer reports on the config; it must be rebuilt.
    Lost(String),
}

/// While a watch is in place: the debouncer sends the triggers on its own thread, so this only
/// waits for the watch to be lost, or for the end.
async fn watching(
    armed: &mut Armed,
    trigger: &mpsc::Sender<()>,
    cancel: &CancellationToken,
) -> Exit {
    let mut recheck = tokio::time::interval_at(Instant::now() + RECHECK, RECHECK);
    recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return Exit::Stop,
            () = trigger.closed() => return Exit::Stop,
            changed = armed.lost.changed() => {
                // The channel changes only when the watch is lost, and closes only when the
                // debouncer's thread ended.
                let reason = match changed {
                    Ok(()) => armed.lost.borrow_and_update().clone(),
                    Err(_) => None,
                };
                return Exit::Lost(reason.unwrap_or_else(|| "the debouncer's thread ended".to_owned()));
            }
            _ = recheck.tick() => {
                let now = tokio::fs::metadata(&armed.dir).await.ok().map(|m| identity(&m));
                if now != Some(armed.identity) {
                    return Exit::Lost("the directory was replaced or removed".to_owned());
                }
            }
        }
    }
}

/// Offers one trigger; `false` when the receiver is gone.
fn offer(trigger: &mpsc::Sender<()>) -> bool {
    match trigger.try_send(()) {
        // A trigger already waiting covers this one.
        Ok(()) | Err(TrySendError::Full(())) => true,
        Err(TrySendError::Closed(())) => false,
    }
}

/// `RETRY_MIN` doubled for each failure after the first, capped at `RETRY_MAX`.
fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_MIN.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// Turns the debouncer's reports into triggers, on the debouncer's thread.
struct Triggers {
    /// Where triggers go; the async side notices when nobody listens any more.
    trigger: mpsc::Sender<()>,
    /// Set once, to the first reason the watch was lost.
    lost: watch::Sender<Option<String>>,
    /// How many times since the last trigger the debouncer reported that the burst goes on:
    /// about once a debounce delay.
    continuing: u32,
}

impl DebounceEventHandler for Triggers {
    fn handle_event(&mut self, result: DebounceEventResult) {
        match result {
            // Every event is of the config's path (see `ConfigWatcher`): `Any` once it has been
            // quiet for the delay, `AnyContinuous` while it is not.
            Ok(events) => {
                let quiet = events.iter().any(|e| e.kind == DebouncedEventKind::Any);
                self.continuing = if quiet { 0 } else { self.continuing + 1 };
                if quiet || self.continuing >= MAX_DEFER {
                    self.continuing = 0;
                    // A closed channel is noticed by the async side, which then stops.
                    offer(&self.trigger);
                }
            }
            Err(error) => {
                self.lost.send_if_modified(|lost| {
                    let first = lost.is_none();
                    lost.get_or_insert_with(|| error.to_string());
                    first
                });
            }
        }
    }
}

/// notify's watcher seen through the config's [`Filter`]: the watcher the debouncer runs.
///
/// Its `watch` takes the config's path, not a directory, and watches the directory [`Filter`]
/// chooses for it. Of the events there, only those that concern the config are passed on, each
/// as an event of the config's path (so that the debouncer, which debounces each path apart,
/// debounces the config as one thing); a lost watch is passed on as an error, which the debouncer
/// reports at once.
struct ConfigWatcher {
    /// notify's watcher; `None` only while being dropped.
    inner: Option<RecommendedWatcher>,
    /// The filter of the config watched, `None` before `watch`. Shared with notify's thread,
    /// which holds the only other reference (so the count tells whether that thread is alive);
    /// behind a mutex because `watch` sets it once that thread runs, which alone locks it after.
    filter: Arc<Mutex<Option<Filter>>>,
}

impl Watcher for ConfigWatcher {
    fn new<F: EventHandler>(mut handler: F, config: notify::Config) -> notify::Result<Self> {
        let filter: Arc<Mutex<Option<Filter>>> = Arc::default();
        let shared = Arc::clone(&filter);
        let forward = move |event: notify::Result<Event>| {
            let mut guard = shared.lock();
            let Some(filter) = guard.as_mut() else {
                return;
            };
            match filter.classify(event) {
                None => {}
                Some(Seen::Changed) => {
                    let config = Event::new(EventKind::Any).add_path(filter.path.clone());
                    handler.handle_event(Ok(config));
                }
                Some(Seen::Lost(reason)) => {
                    handler.handle_event(Err(notify::Error::generic(&reason)))
                }
            }
        };
        let inner = RecommendedWatcher::new(forward, config)?;
        Ok(Self {
            inner: Some(inner),
            filter,
        })
    }

    fn watch(&mut self, path: &Path, _: RecursiveMode) -> notify::Result<()> {
        let filter = Filter::new(path.to_path_buf());
        let dir = filter.dir.clone();
        // In place before the watch, so that none of its events is missed.
        *self.filter.lock() = Some(filter);
        match &mut self.inner {
            Some(inner) => inner.watch(&dir, RecursiveMode::NonRecursive),
            None => Err(notify::Error::generic("the watcher is being dropped")),
        }
    }

    /// Ends the watch of the config, whatever the path: there is only one.
    fn unwatch(&mut self, _: &Path) -> notify::Result<()> {
        let filter = self
            .filter
            .lock()
            .take()
            .ok_or_else(notify::Error::watch_not_found)?;
        match &mut self.inner {
            Some(inner) => inner.unwatch(&filter.dir),
            None => Err(notify::Error::watch_not_found()),
        }
    }

    fn kind() -> WatcherKind {
        RecommendedWatcher::kind()
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if Arc::strong_count(&self.filter) == 1 {
            // notify's thread is gone (it dropped our handler), which only happens if it
            // panicked; the watcher's own drop would then panic on its closed channel. There is
            // nothing left to stop, so the handle is leaked instead.
            std::mem::forget(inner);
        } else {
            // Tells notify's thread to remove the watch, close inotify and exit.
            drop(inner);
        }
    }
}

/// A watch in place.
struct Armed {
    /// Held for its drop, which stops the debouncer's thread and notify's.
    _debouncer: Debouncer<ConfigWatcher>,
    /// Holds the reason once the watch is lost, and changes only then. A `watch` channel: the
    /// async side only needs "lost since I last looked", so nothing queues and the debouncer's
    /// thread never blocks on it.
    lost: watch::Receiver<Option<String>>,
    /// The directory watched.
    dir: PathBuf,
    /// `dir` once watched, to notice it being replaced.
    identity: Identity,
}

/// Why a watch could not be put in place.
#[derive(Debug, thiserror::Error)]
enum ArmError {
    #[error("{}: {source}", dir.display())]
    Notify { dir: PathBuf, source: notify::Error },
    #[error("{}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("setting up the watch failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Puts a watch in place for the config at `path` (absolute), whose debouncer sends triggers on
/// `trigger`. Runs on the blocking pool: notify sets the watch up on its own thread and waits for
/// it, and the filter reads symlinks.
async fn arm(
    path: PathBuf,
    debounce: Duration,
    trigger: mpsc::Sender<()>,
) -> Result<Armed, ArmError> {
    tokio::task::spawn_blocking(move || arm_blocking(&path, debounce, trigger)).await?
}

fn arm_blocking(
    path: &Path,
    debounce: Duration,
    trigger: mpsc::Sender<()>,
) -> Result<Armed, ArmError> {
    // The directory `ConfigWatcher::watch` chooses for `path`, for errors and the recheck.
    let dir = watched_dir(path);
    let notify_error = |source| ArmError::Notify {
        dir: dir.clone(),
        source,
    };
    let (lost_tx, lost) = watch::channel(None);
    let triggers = Triggers {
        trigger,
        lost: lost_tx,
        continuing: 0,
    };
    let config = notify_debouncer_mini::Config::default().with_timeout(debounce);
    let mut debouncer =
        new_debouncer_opt::<_, ConfigWatcher>(config, triggers).map_err(notify_error)?;
    debouncer
        .watcher()
        .watch(path, RecursiveMode::NonRecursive)
        .map_err(notify_error)?;
    // After the watch: if the directory is replaced in between, the identity is the new one and
    // the next recheck rebuilds the watch.
    let metadata = std::fs::metadata(&dir).map_err(|source| ArmError::Io {
        dir: dir.clone(),
        source,
    })?;
    Ok(Armed {
        _debouncer: debouncer,
        lost,
        identity: identity(&metadata),
        dir,
    })
}

/// Device, inode and (where the file system records it) birth time of a directory. The birth
/// time tells a directory from a new one that got the freed inode number back.
type Identity = (u64, u64, Option<SystemTime>);

fn identity(metadata: &std::fs::Metadata) -> Identity {
    (metadata.dev(), metadata.ino(), metadata.created().ok())
}

/// What an event means for the config.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The config may have changed.
    Changed,
    /// The watch must be rebuilt, for this reason.
    Lost(String),
}

/// Decides, on notify's thread, which events concern the config.
#[derive(Debug)]
struct Filter {
    /// The config path, absolute.
    path: PathBuf,
    /// The directory watched: `path` itself, or its parent.
    dir: PathBuf,
    /// For a single file, the names in `dir` that concern it; `None` for a config directory,
    /// where every name does.
    names: Option<HashSet<OsString>>,
}

impl Filter {
    /// A filter for the config at `path` (absolute) as it is now, watched in [`watched_dir`].
    fn new(path: PathBuf) -> Self {
        let dir = watched_dir(&path);
        let names = (dir != path).then(|| related_names(&path, &dir));
        Self { path, dir, names }
    }

    /// What `event` means for the config, if anything.
    fn classify(&mut self, event: notify::Result<Event>) -> Option<Seen> {
        let event = match event {
            Ok(event) => event,
            Err(e) => return Some(Seen::Lost(format!("notify error: {e}"))),
        };
        if event.need_rescan() {
            // Events were dropped (queue overflow): anything may have changed.
            return Some(Seen::Changed);
        }
        if let EventKind::Access(kind) = event.kind
            && kind != AccessKind::Close(AccessMode::Write)
        {
            // Opens and reads, the daemon's own included. A finished write is kept: it marks
            // the end of a slow writer's burst.
            return None;
        }
        if event.paths.iter().any(|p| p == &self.dir) {
            return Some(match event.kind {
                EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)) => {
                    Seen::Lost("the directory was removed or renamed".to_owned())
                }
                // Permissions and the like: they can decide whether the config is readable.
                _ => Seen::Changed,
            });
        }
        let Some(names) = &mut self.names else {
            return Some(Seen::Changed);
        };
        let concerns = event
            .paths
            .iter()
            .any(|p| p.file_name().is_some_and(|name| names.contains(name)));
        if !concerns {
            return None;
        }
        if self.path.is_dir() {
            return Some(Seen::Lost("the config path is now a directory".to_owned()));
        }
        // A symlink in the chain may now point elsewhere.
        *names = related_names(&self.path, &self.dir);
        Some(Seen::Changed)
    }
}

/// Where the config at `path` (absolute) is watched, as it is now: a directory itself, anything
/// else (a file, or nothing yet) through its parent. A path without a file name (`/`, `a/..`)
/// can only be a directory.
fn watched_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if path.file_name().is_some() && !path.is_dir() => parent.to_path_buf(),
        _ => path.to_path_buf(),
    }
}

/// The names in `dir` whose changes can change what `path` (a file in `dir`) reads: its own
/// name, the first component of each symlink target on the way that stays in `dir`, followed in
/// turn, and `..data` (which a ConfigMap volume may create later).
///
/// Targets are resolved lexically; a target leaving `dir` ends the chain, as changes there are
/// not watched.
fn related_names(path: &Path, dir: &Path) -> HashSet<OsString> {
    let mut names = HashSet::new();
    let mut next = path.file_name().map(ToOwned::to_owned);
    if let Some(name) = &next {
        names.insert(name.clone());
    }
    for _ in 0..MAX_LINKS {
        let Some(name) = next.take() else { break };
        let Ok(target) = std::fs::read_link(dir.join(&name)) else {
            break;
        };
        // Joining an absolute target replaces `dir`.
        let target = dir.join(target);
        if let Ok(rest) = target.strip_prefix(dir)
            && let Some(Component::Normal(first)) = rest.components().next()
            && names.insert(first.to_owned())
        {
            next = Some(first.to_owned());
        }
    }
    names.insert(OsString::from(CONFIGMAP_DATA));
    names
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use notify_debouncer_mini::DebouncedEvent;

    use super::*;

    fn names(list: &[&str]) -> HashSet<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_plain_file_concerns_its_name_and_configmap_data() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.yaml"), "").unwrap();
        let got = related_names(&dir.path().join("x.yaml"), dir.path());
        assert_eq!(got, names(&["x.yaml", "..data"]));
    }

    #[test]
    fn a_configmap_file_concerns_every_link_of_its_chain() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("..2026_a")).unwrap();
        std::fs::write(dir.path().join("..2026_a/config.yaml"), "").unwrap();
        symlink("..2026_a", dir.path().join("..data")).unwrap();
        symlink("..data/config.yaml", dir.path().join("config.yaml")).unwrap();
        let got = related_names(&dir.path().join("config.yaml"), dir.path());
        assert_eq!(got, names(&["config.yaml", "..data", "..2026_a"]));
    }

    #[test]
    fn absolute_links_inside_the_directory_are_followed_and_loops_end() {
        let dir = tempfile::tempdir().unwrap();
        symlink(dir.path().join("b"), dir.path().join("a")).unwrap();
        symlink("a", dir.path().join("b")).unwrap();
        symlink("/elsewhere/c.yaml", dir.path().join("c.yaml")).unwrap();
        let got = related_names(&dir.path().join("a"), dir.path());
        assert_eq!(got, names(&["a", "b", "..data"]));
        let got = related_names(&dir.path().join("c.yaml"), dir.path());
        assert_eq!(got, names(&["c.yaml", "..data"]));
    }

    fn event(kind: EventKind, path: PathBuf) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(path))
    }

    fn created(path: PathBuf) -> notify::Result<Event> {
        event(EventKind::Create(notify::event::CreateKind::File), path)
    }

    /// The directory is watched, never the file's inode: renames over the file and symlink
    /// swaps replace that inode. (The integration tests also pass against an inode watch,
    /// because the rebuild on loss and the identity recheck heal it within seconds; this is
    /// what keeps the prompt path.)
    #[test]
    fn a_single_file_is_watched_through_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.yaml"), "").unwrap();
        let file = Filter::new(dir.path().join("x.yaml"));
        assert_eq!(file.dir, dir.path());
        assert_eq!(file.names, Some(names(&["x.yaml", "..data"])));
        let missing = Filter::new(dir.path().join("missing/x.yaml"));
        assert_eq!(missing.dir, dir.path().join("missing"));
        let directory = Filter::new(dir.path().to_path_buf());
        assert_eq!(directory.dir, dir.path());
        assert_eq!(directory.names, None);
    }

    #[test]
    fn a_single_file_counts_only_the_names_that_concern_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("x.yaml"), "").unwrap();
        let mut filter = Filter::new(root.join("x.yaml"));
        for other in ["other.yaml", "x.yaml.tmp", ".x.yaml.swp", "x.yml"] {
            assert_eq!(filter.classify(created(root.join(other))), None, "{other}");
        }
        assert_eq!(
            filter.classify(created(root.join("x.yaml"))),
            Some(Seen::Changed)
        );
        assert_eq!(
            filter.classify(created(root.join("..data"))),
            Some(Seen::Changed)
        );
        let renamed = Event::new(EventKind::Modify(ModifyKind::Name(
            notify::event::RenameMode::Both,
        )))
        .add_path(root.join("x.yaml.tmp"))
        .add_path(root.join("x.yaml"));
        assert_eq!(filter.classify(Ok(renamed)), Some(Seen::Changed));
        let attrib = EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any));
        assert_eq!(
            filter.classify(event(attrib, root.clone())),
            Some(Seen::Changed)
        );
    }

    #[test]
    fn losing_the_directory_or_a_notify_error_loses_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        for path in [root.clone(), root.join("x.yaml")] {
            let mut filter = Filter::new(path);
            let removed = EventKind::Remove(notify::event::RemoveKind::Folder);
            let moved = EventKind::Modify(ModifyKind::Name(notify::event::RenameMode::From));
            for kind in [removed, moved] {
                let seen = filter.classify(event(kind, root.clone()));
                assert!(matches!(seen, Some(Seen::Lost(_))), "{kind:?}: {seen:?}");
            }
            let error = filter.classify(Err(notify::Error::generic("boom")));
            assert!(matches!(error, Some(Seen::Lost(_))), "{error:?}");
        }
    }

    #[test]
    fn a_single_file_replaced_by_a_directory_loses_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut filter = Filter::new(root.join("conf"));
        std::fs::create_dir(root.join("conf")).unwrap();
        let created = event(
            EventKind::Create(notify::event::CreateKind::Folder),
            root.join("conf"),
        );
        assert!(matches!(filter.classify(created), Some(Seen::Lost(_))));
    }

    #[test]
    fn opens_and_reads_are_not_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut filter = Filter::new(dir.path().to_path_buf());
        let open = Event::new(EventKind::Access(AccessKind::Open(AccessMode::Any)))
            .add_path(dir.path().to_path_buf());
        let read = Event::new(EventKind::Access(AccessKind::Close(AccessMode::Read)))
            .add_path(dir.path().join("a.yaml"));
        let written = Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write)))
            .add_path(dir.path().join("a.yaml"));
        assert_eq!(filter.classify(Ok(open)), None);
        assert_eq!(filter.classify(Ok(read)), None);
        assert_eq!(filter.classify(Ok(written)), Some(Seen::Changed));
    }

    /// The debouncer reports a burst that goes on about once a delay; the tenth such report
    /// triggers, and so does the end of the burst.
    #[test]
    fn a_burst_that_goes_on_triggers_every_ten_delays_and_at_its_end() {
        let (trigger, mut triggers) = mpsc::channel(8);
        let (lost, _) = watch::channel(None);
        let mut handler = Triggers {
            trigger,
            lost,
            continuing: 0,
        };
        let mut report = |kind| {
            let event = DebouncedEvent::new(PathBuf::from("/etc/probes/x.yaml"), kind);
            handler.handle_event(Ok(vec![event]));
            triggers.try_recv().is_ok()
        };
        for round in 0..2 {
            for n in 1..MAX_DEFER {
                assert!(
                    !report(DebouncedEventKind::AnyContinuous),
                    "round {round}: {n}"
                );
            }
            assert!(report(DebouncedEventKind::AnyContinuous), "round {round}");
        }
        assert!(!report(DebouncedEventKind::AnyContinuous));
        assert!(report(DebouncedEventKind::Any));
        assert!(!report(DebouncedEventKind::AnyContinuous));
    }

    #[test]
    fn retry_delay_doubles_up_to_its_cap() {
        assert_eq!(retry_delay(1), RETRY_MIN);
        assert_eq!(retry_delay(2), RETRY_MIN * 2);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    /// The debouncer's thread owns the handler, and with it the sending side of `lost`: the
    /// channel closing shows that dropping the watch ended that thread (the drop stops notify's
    /// own thread on the way, see `ConfigWatcher`).
    #[tokio::test]
    async fn dropping_the_watch_ends_the_notify_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (trigger, _triggers) = mpsc::channel(1);
        let armed = arm(dir.path().to_path_buf(), Duration::from_millis(10), trigger)
            .await
            .unwrap();
        let mut seen = armed.lost.clone();
        drop(armed);
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            while seen.changed().await.is_ok() {}
        })
        .await;
        assert!(closed.is_ok(), "notify's thread still holds the handler");
    }
}
