//! `--watch-config` on real directories: the ways configs are really updated (in place, by an
//! editor's rename, by a ConfigMap's symlink swap) each trigger a reload, once per burst, and
//! what does not concern the config does not.
//!
//! Every wait for a trigger is bounded. Fixed waits appear only to show that something does *not*
//! happen.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use probe_engine::watch::{WatchError, watch_config};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

/// The debounce of most tests: long enough that a test's burst of writes fits in it even on a
/// busy machine.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The bound on waiting for a trigger that must come.
const WAIT: Duration = Duration::from_secs(10);

/// How long a test waits to show that no trigger comes: five debounce periods, so that a
/// trigger the watcher wrongly sends is still seen when a loaded machine delays it.
const QUIET: Duration = Duration::from_millis(1000);

/// A running watcher, cancelled when dropped.
struct Watching {
    triggers: mpsc::Receiver<()>,
    cancel: CancellationToken,
    task: Option<JoinHandle<Result<(), WatchError>>>,
}

impl Watching {
    /// Starts watching `path` and waits for the trigger that says the watch is in place, so the
    /// test's changes happen while it is.
    async fn start(path: &Path, debounce: Duration) -> Self {
        let mut watching = Self::spawn(path, debounce);
        watching
            .expect_trigger("the watch being put in place")
            .await;
        watching
    }

    fn spawn(path: &Path, debounce: Duration) -> Self {
        // Capacity 8, more than the watcher needs, so that an extra trigger would show up.
        let (tx, triggers) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(watch_config(
            path.to_path_buf(),
            debounce,
            tx,
            cancel.clone(),
        ));
        Self {
            triggers,
            cancel,
            task: Some(task),
        }
    }

    async fn expect_trigger(&mut self, after: &str) {
        match timeout(WAIT, self.triggers.recv()).await {
            Ok(Some(())) => {}
            Ok(None) => panic!("the watcher stopped; expected a trigger after {after}"),
            Err(_) => panic!("no trigger within {WAIT:?} after {after}"),
        }
    }

    async fn expect_quiet(&mut self, window: Duration, after: &str) {
        if let Ok(got) = timeout(window, self.triggers.recv()).await {
            panic!("unexpected {got:?} within {window:?} after {after}");
        }
    }

    /// Takes the triggers of a change whose number is not the point, until none comes for
    /// `window`.
    async fn settle(&mut self, window: Duration) {
        let deadline = Instant::now() + WAIT;
        while timeout(window, self.triggers.recv()).await.is_ok() {
            assert!(Instant::now() < deadline, "triggers never stopped");
        }
    }

    /// Cancels and checks that the watcher returns promptly, and cleanly.
    async fn stop(mut self) {
        self.cancel.cancel();
        let task = self.task.take().expect("a running task");
        let result = timeout(Duration::from_secs(5), task)
            .await
            .expect("the watcher returns soon after its cancellation")
            .expect("the watcher task does not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A Kubernetes ConfigMap volume's layout: `..2026_a/config.yaml`, `..data -> ..2026_a` and
/// `config.yaml -> ..data/config.yaml`. Returns the config path.
fn configmap(dir: &Path) -> PathBuf {
    fs::create_dir(dir.join("..2026_a")).unwrap();
    write(&dir.join("..2026_a/config.yaml"), "version: a\n");
    symlink("..2026_a", dir.join("..data")).unwrap();
    symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
    dir.join("config.yaml")
}

/// Publishes a new ConfigMap version the way the kubelet does: a new timestamped directory,
/// then a new `..data` symlink renamed over the old one. (The kubelet then removes the old
/// version's directory; tests do that themselves, after the swap's trigger.)
fn configmap_swap(dir: &Path, to: &str) {
    fs::create_dir(dir.join(to)).unwrap();
    write(
        &dir.join(to).join("config.yaml"),
        &format!("version: {to}\n"),
    );
    symlink(to, dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
}

#[tokio::test]
async fn directory_config_create_modify_and_delete_each_trigger() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.yaml"), "a: 1\n");
    let mut watching = Watching::start(dir.path(), DEBOUNCE).await;

    write(&dir.path().join("b.yaml"), "b: 1\n");
    watching.expect_trigger("creating b.yaml").await;
    write(&dir.path().join("a.yaml"), "a: 2\n");
    watching.expect_trigger("modifying a.yaml").await;
    fs::remove_file(dir.path().join("b.yaml")).unwrap();
    watching.expect_trigger("deleting b.yaml").await;
    watching.stop().await;
}

#[tokio::test]
async fn single_file_rename_on_save_triggers() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("x.yaml");
    write(&config, "x: 1\n");
    // Something still holds the original open (a pager, a log shipper), so its inode outlives
    // the save: a watch on that inode would go stale rather than report it gone.
    let _reader = fs::File::open(&config).unwrap();
    let mut watching = Watching::start(&config, DEBOUNCE).await;

    // An editor's save: the new content goes to a temporary file, renamed over the original.
    write(&dir.path().join("x.yaml.tmp"), "x: 2\n");
    fs::rename(dir.path().join("x.yaml.tmp"), &config).unwrap();
    watching
        .expect_trigger("renaming x.yaml.tmp over x.yaml")
        .await;

    // And the next save is seen too.
    write(&dir.path().join("x.yaml.tmp"), "x: 3\n");
    fs::rename(dir.path().join("x.yaml.tmp"), &config).unwrap();
    watching.expect_trigger("a second rename over x.yaml").await;
    watching.stop().await;
}

#[tokio::test]
async fn configmap_symlink_swap_triggers() {
    let dir = tempfile::tempdir().unwrap();
    let config = configmap(dir.path());
    let mut watching = Watching::start(&config, DEBOUNCE).await;

    // The swap alone triggers: the file read so far is untouched (it still exists, in
    // ..2026_a), only the path now leads elsewhere.
    configmap_swap(dir.path(), "..2026_b");
    watching.expect_trigger("swapping ..data to ..2026_b").await;
    assert_eq!(fs::read_to_string(&config).unwrap(), "version: ..2026_b\n");
    fs::remove_dir_all(dir.path().join("..2026_a")).unwrap();
    watching
        .expect_quiet(QUIET, "removing ..2026_a, no longer used")
        .await;

    configmap_swap(dir.path(), "..2026_c");
    watching.expect_trigger("swapping ..data to ..2026_c").await;
    watching.stop().await;
}

/// The same layout with names Kubernetes does not use: the rule is "every symlink the config's
/// path resolves through", not a special case for `..data`.
#[tokio::test]
async fn swapping_any_symlink_in_the_config_path_triggers() {
    let dir = tempfile::tempdir().unwrap();
    for version in ["v1", "v2"] {
        fs::create_dir(dir.path().join(version)).unwrap();
        write(&dir.path().join(version).join("app.yaml"), version);
    }
    symlink("v1", dir.path().join("current")).unwrap();
    symlink("current/app.yaml", dir.path().join("app.yaml")).unwrap();
    let mut watching = Watching::start(&dir.path().join("app.yaml"), DEBOUNCE).await;

    symlink("v2", dir.path().join("current.new")).unwrap();
    fs::rename(dir.path().join("current.new"), dir.path().join("current")).unwrap();
    watching.expect_trigger("swapping current to v2").await;

    // v1 no longer concerns the config; v2 does (its rename would break the path).
    write(&dir.path().join("v1").join("app.yaml"), "v1 again");
    fs::rename(dir.path().join("v1"), dir.path().join("v1.old")).unwrap();
    watching
        .expect_quiet(QUIET, "renaming v1, no longer used")
        .await;
    fs::rename(dir.path().join("v2"), dir.path().join("v2.old")).unwrap();
    watching.expect_trigger("renaming v2, in use").await;
    watching.stop().await;
}

#[tokio::test]
async fn a_burst_of_writes_triggers_once_after_the_debounce() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.yaml");
    write(&file, "n: 0\n");
    let mut watching = Watching::start(dir.path(), DEBOUNCE).await;

    let mut last_write = Instant::now();
    for n in 1..=20 {
        last_write = Instant::now();
        write(&file, &format!("n: {n}\n"));
    }
    watching.expect_trigger("20 writes").await;
    let waited = last_write.elapsed();
    assert!(
        waited >= DEBOUNCE,
        "the trigger came {waited:?} after the last write, before the {DEBOUNCE:?} debounce"
    );
    watching
        .expect_quiet(QUIET, "the burst's one trigger")
        .await;
    watching.stop().await;
}

#[tokio::test]
async fn single_file_ignores_other_files_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("x.yaml");
    write(&config, "x: 1\n");
    write(&dir.path().join("other.yaml"), "o: 1\n");
    let mut watching = Watching::start(&config, DEBOUNCE).await;

    write(&dir.path().join("other.yaml"), "o: 2\n");
    write(&dir.path().join(".x.yaml.swp"), "swap");
    write(&dir.path().join("x.yaml.tmp"), "x: 2\n");
    fs::remove_file(dir.path().join("x.yaml.tmp")).unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    watching.expect_quiet(QUIET, "changing other files").await;

    // The watch is alive: the config itself still triggers.
    write(&config, "x: 3\n");
    watching.expect_trigger("modifying x.yaml").await;
    watching.stop().await;
}

/// The daemon reads the config on every reload; if reading counted as a change, every reload
/// would trigger the next one.
#[tokio::test]
async fn reading_the_config_does_not_trigger() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("a.yaml"), "a: 1\n");
    let mut watching = Watching::start(dir.path(), DEBOUNCE).await;

    for entry in fs::read_dir(dir.path()).unwrap() {
        fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    watching.expect_quiet(QUIET, "reading the config").await;
    watching.stop().await;
}

#[tokio::test]
async fn cancellation_returns_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let watching = Watching::start(dir.path(), DEBOUNCE).await;
    watching.stop().await;

    // Also while waiting to retry a watch that cannot be set up yet.
    let missing = dir.path().join("missing/x.yaml");
    let mut retrying = Watching::spawn(&missing, DEBOUNCE);
    retrying
        .expect_quiet(QUIET, "watching a missing directory")
        .await;
    retrying.stop().await;
}

#[tokio::test]
async fn the_watcher_ends_when_nobody_listens() {
    let dir = tempfile::tempdir().unwrap();
    let mut watching = Watching::start(dir.path(), DEBOUNCE).await;
    let task = watching.task.take().expect("a running task");
    drop(watching);
    // Dropping also cancelled it; a second watcher shows the receiver alone is enough.
    let (tx, rx) = mpsc::channel(1);
    let alone = tokio::spawn(watch_config(
        dir.path().to_path_buf(),
        DEBOUNCE,
        tx,
        CancellationToken::new(),
    ));
    drop(rx);
    for task in [task, alone] {
        let result = timeout(Duration::from_secs(5), task)
            .await
            .expect("returns within 1s")
            .expect("does not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}

#[tokio::test]
async fn a_missing_directory_is_watched_once_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.d");
    let mut watching = Watching::spawn(&conf.join("a.yaml"), DEBOUNCE);
    watching
        .expect_quiet(QUIET, "watching a missing directory")
        .await;

    fs::create_dir(&conf).unwrap();
    watching.expect_trigger("the directory appearing").await;
    watching.settle(DEBOUNCE * 3).await;
    write(&conf.join("a.yaml"), "a: 1\n");
    watching.expect_trigger("creating a.yaml").await;
    watching.stop().await;
}

/// Replacing the config directory (rename the old one away, rename a new one in) leaves a watch
/// on the old directory's inode, which would never fire again: the watch must move to the new
/// directory.
#[tokio::test]
async fn a_replaced_directory_is_watched_again() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.d");
    fs::create_dir(&conf).unwrap();
    write(&conf.join("a.yaml"), "a: 1\n");
    let mut watching = Watching::start(&conf, DEBOUNCE).await;

    let next = dir.path().join("conf.d.new");
    fs::create_dir(&next).unwrap();
    write(&next.join("a.yaml"), "a: 2\n");
    fs::rename(&conf, dir.path().join("conf.d.old")).unwrap();
    fs::rename(&next, &conf).unwrap();
    watching.expect_trigger("replacing the directory").await;
    watching.settle(DEBOUNCE * 3).await;

    write(&dir.path().join("conf.d.old/a.yaml"), "a: old\n");
    watching
        .expect_quiet(QUIET, "writing in the old directory")
        .await;
    write(&conf.join("a.yaml"), "a: 3\n");
    watching
        .expect_trigger("writing in the new directory")
        .await;
    watching.stop().await;
}

/// The same after `rm -rf` and a new directory in its place.
#[tokio::test]
async fn a_removed_and_recreated_directory_is_watched_again() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.d");
    fs::create_dir(&conf).unwrap();
    write(&conf.join("a.yaml"), "a: 1\n");
    let mut watching = Watching::start(&conf, DEBOUNCE).await;

    fs::remove_dir_all(&conf).unwrap();
    watching.expect_trigger("removing the directory").await;
    fs::create_dir(&conf).unwrap();
    watching.expect_trigger("recreating the directory").await;
    watching.settle(DEBOUNCE * 3).await;

    write(&conf.join("a.yaml"), "a: 2\n");
    watching
        .expect_trigger("writing in the new directory")
        .await;
    watching.stop().await;
}
