//! The daemon's topology: the YAML files and, when they say so, etcd, merged and applied to the
//! engine as diffs.
//!
//! Each source runs in its own task and hands its catalogs to one loop, which merges them
//! ([`probe::topology::Merger`], files first: a file wins an id over etcd), applies the result
//! as a diff (unchanged targets keep state, counters and score) and logs each applied diff once.
//! What the loop knows is shared with the API (`GET /v1/topology`) through a [`TopologyHandle`]
//! handle:
//! - the files: a reload (SIGHUP, `--watch-config`) that fails is rejected whole, the running
//!   topology stays, and the errors show until a good reload;
//! - etcd: synced, syncing or stale (since when, why); an outage keeps the last content, so it
//!   neither drops targets nor touches readiness;
//! - rejected entries: an etcd key that is not a valid declaration, or that would break the
//!   graph, is left out (or held at its last valid value) without disturbing anything else.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use probe::engine::{Diff, Engine};
use probe::tier::resolve::{Resolver, ResolverConfig};
use probe::topology::{Catalog, Discovery, Merger, Rejection};
use probe_etcd::{EtcdDiscovery, Source, SourceConfig};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::alerts::{DeclaredAlerts, FileRules, RuleSink};
use crate::persist::StateStore;
use probe_config::{self as config, Config, ConfigErrors};

/// The sources' names, in precedence order: the merger's indices.
const SOURCES: [&str; 2] = ["files", "etcd"];
const FILES: usize = 0;
const ETCD: usize = 1;

/// A handle on the daemon's topology: its status for the API, and reload requests.
#[derive(Clone)]
pub struct TopologyHandle {
    /// What the loop publishes, read by the API. A blocking mutex: every update is a few field
    /// writes and every read a copy, never held across an `.await`.
    shared: Arc<Mutex<Shared>>,
    reload: mpsc::Sender<()>,
}

/// What the loop publishes.
struct Shared {
    /// Topologies applied since start.
    generation: u64,
    /// When the last non-empty diff was applied.
    last_change: Option<SystemTime>,
    files: FilesStatus,
    etcd: Option<EtcdShared>,
    rejected: Vec<Rejection>,
}

/// The etcd source as the loop knows it.
struct EtcdShared {
    endpoints: Vec<String>,
    prefix: String,
    /// The source's status; `None` when it could not be started.
    sync: Option<watch::Receiver<probe_etcd::Status>>,
    error: Option<String>,
}

/// The files' part of [`TopologyStatus`].
#[derive(Clone, Debug)]
pub struct FilesStatus {
    /// The configured path (a file or a directory).
    pub path: PathBuf,
    /// The files of the last good load.
    pub files: Vec<PathBuf>,
    /// When the files were last loaded, successfully or not.
    pub last_reload: Option<SystemTime>,
    /// The errors of the last reload when it was rejected; empty when it applied.
    pub last_error: Vec<String>,
    /// The generation the files last applied at.
    pub last_good_generation: u64,
}

/// The etcd source as [`TopologyStatus`] shows it.
#[derive(Clone, Debug)]
pub struct EtcdStatus {
    /// Where it reads.
    pub endpoints: Vec<String>,
    /// Which keys.
    pub prefix: String,
    /// The source's own status; `None` when it could not be started (see `error`).
    pub sync: Option<probe_etcd::Status>,
    /// Why the source could not be started.
    pub error: Option<String>,
}

/// A copy of the topology's status.
#[derive(Clone, Debug)]
pub struct TopologyStatus {
    /// Topologies applied since start (the first load is generation 1).
    pub generation: u64,
    /// When the last non-empty diff was applied.
    pub last_change: Option<SystemTime>,
    /// The files.
    pub files: FilesStatus,
    /// etcd, when configured.
    pub etcd: Option<EtcdStatus>,
    /// Entries left out or held at their last valid value.
    pub rejected: Vec<Rejection>,
}

/// One catalog for the loop.
struct Update {
    /// The merger's index of the source.
    source: usize,
    /// Which run of the source sent it: an etcd source replaced by a reload may still send.
    incarnation: u64,
    catalog: Catalog,
}

/// The running etcd source.
struct RunningEtcd {
    config: SourceConfig,
    incarnation: u64,
    stop: CancellationToken,
}

impl TopologyHandle {
    /// Applies a loaded config (the daemon's first load), then starts the loop that follows the
    /// files and etcd until `cancel`. Saved maintenance in `store` is restored as its targets
    /// appear.
    ///
    /// # Errors
    /// When the engine refuses the config's topology, which its own checks should have caught.
    pub fn start(
        engine: Engine,
        resolver: Arc<Resolver>,
        path: PathBuf,
        loaded: Config,
        store: Option<StateStore>,
        alerts: RuleSink,
        cancel: CancellationToken,
    ) -> Result<(Self, Diff), ConfigErrors> {
        let mut merger = Merger::new(SOURCES);
        let etcd = loaded.etcd.clone();
        let files = loaded.files.clone();
        let cluster = loaded.cluster.clone();
        let started_receivers = receivers(&loaded);
        let history = (loaded.history.clone(), loaded.sla_window);
        let resolver = (resolver, loaded.resolver.clone());
        engine.set_per_target_histograms(loaded.metrics.per_target_histograms);
        merger.update(FILES, Catalog::from(loaded.topology));
        let merged = merger
            .merge()
            .map_err(|e| probe_config::yaml::file_error(&path, e.to_string()))?;
        let diff = engine
            .apply(merged.topology)
            .map_err(|e| probe_config::yaml::file_error(&path, e.to_string()))?;
        if let Some(store) = &store {
            store.load_pending();
            store.restore(&engine);
        }
        let (reload, triggers) = mpsc::channel(1);
        // The first load is generation 1 and a good load: shown from the start, not only after
        // the first reload.
        metrics::gauge!("probe_topology_generation").set(1.0);
        metrics::gauge!("probe_config_last_reload_successful").set(1.0);
        let shared = Arc::new(Mutex::new(Shared {
            generation: 1,
            last_change: Some(SystemTime::now()),
            files: FilesStatus {
                path: path.clone(),
                files,
                last_reload: Some(SystemTime::now()),
                last_error: Vec::new(),
                last_good_generation: 1,
            },
            etcd: None,
            rejected: merged.rejected,
        }));
        let (updates_tx, updates) = mpsc::channel(16);
        let (etcd_tx, files_etcd) = watch::channel(etcd.clone());
        let files = FileSource {
            path: path.clone(),
            triggers,
            shared: shared.clone(),
            etcd: etcd_tx,
            resolver,
            engine: engine.clone(),
            cluster,
            alerts: (alerts.files, started_receivers),
            history,
        };
        tokio::spawn(forward(files, FILES, 0, updates_tx.clone(), cancel.clone()));
        let mut looped = Loop {
            engine,
            merger,
            shared: shared.clone(),
            updates_tx,
            files_etcd,
            dir: config_dir(&path),
            store,
            etcd: None,
            incarnations: 0,
            declared: alerts.declared,
            cancel: cancel.clone(),
        };
        looped.set_etcd(etcd);
        tokio::spawn(looped.run(updates));
        Ok((Self { shared, reload }, diff))
    }

    /// Asks for the files to be reloaded. Requests while one is pending count once; the result
    /// is logged and shown in [`TopologyHandle::status`].
    pub fn reload(&self) {
        // Full: a reload is pending already. Closed: the daemon is stopping.
        let _ = self.reload.try_send(());
    }

    /// A sender that requests reloads, for a file watcher.
    pub fn reload_trigger(&self) -> mpsc::Sender<()> {
        self.reload.clone()
    }

    /// The current status.
    pub fn status(&self) -> TopologyStatus {
        let shared = self.shared.lock();
        let etcd = shared.etcd.as_ref().map(|e| EtcdStatus {
            endpoints: e.endpoints.clone(),
            prefix: e.prefix.clone(),
            sync: e.sync.as_ref().map(|r| r.borrow().clone()),
            error: e.error.clone(),
        });
        TopologyStatus {
            generation: shared.generation,
            last_change: shared.last_change,
            files: shared.files.clone(),
            etcd,
            rejected: shared.rejected.clone(),
        }
    }
}

/// The directory relative paths of etcd values are resolved against: the config directory, or
/// the config file's.
fn config_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).to_path_buf()
    }
}

/// The YAML files as a [`Discovery`] source: each reload request loads them; a load that fails
/// is reported and waits for the next request, so only good configs come out.
struct FileSource {
    path: PathBuf,
    triggers: mpsc::Receiver<()>,
    shared: Arc<Mutex<Shared>>,
    /// The etcd settings of the last good config, set before its catalog is returned.
    etcd: watch::Sender<Option<SourceConfig>>,
    /// The engine's resolver and the `resolver` section it runs with, so that a changed section
    /// reconfigures it.
    resolver: (Arc<Resolver>, ResolverConfig),
    /// For the `metrics` section, which takes effect as soon as it is loaded.
    engine: Engine,
    /// The `cluster` section the daemon started with: a member joins once, so a reload that
    /// changes it is said to wait for a restart.
    cluster: Option<config::ClusterConfig>,
    /// Where the alert rules of each good load go; the receivers the daemon started with,
    /// which (like the cluster) a reload cannot change.
    alerts: (watch::Sender<Arc<FileRules>>, Option<Receivers>),
    /// The `history` section and `scoring.sla_window` the daemon started with: its database is
    /// opened once.
    history: (config::HistorySection, Option<std::time::Duration>),
}

/// What of an `alerts` section only a restart changes: the receivers and the outbox.
type Receivers = (
    Option<config::AlertmanagerConfig>,
    Vec<config::WebhookConfig>,
    usize,
);

fn receivers(config: &Config) -> Option<Receivers> {
    config
        .alerts
        .as_ref()
        .map(|a| (a.alertmanager.clone(), a.webhooks.clone(), a.outbox_limit))
}

impl FileSource {
    /// Loads the config after a request; `None` when no more requests can come.
    async fn load(&mut self) -> Option<Config> {
        loop {
            self.triggers.recv().await?;
            let path = self.path.clone();
            // Reading and parsing files blocks: off the async workers.
            let loaded = tokio::task::spawn_blocking(move || config::load(&path))
                .await
                .unwrap_or_else(|e| Err(probe_config::yaml::file_error(&self.path, e.to_string())));
            let mut shared = self.shared.lock();
            shared.files.last_reload = Some(SystemTime::now());
            match loaded {
                Ok(config) => {
                    metrics::counter!("probe_config_reloads_total", "result" => "success")
                        .increment(1);
                    metrics::gauge!("probe_config_last_reload_successful").set(1.0);
                    shared.files.last_error.clear();
                    shared.files.files.clone_from(&config.files);
                    self.etcd.send_replace(config.etcd.clone());
                    let (resolver, running) = &mut self.resolver;
                    if config.resolver != *running {
                        match resolver.reconfigure(&config.resolver) {
                            Ok(()) => {
                                tracing::info!("resolver reconfigured");
                                running.clone_from(&config.resolver);
                            }
                            Err(e) => tracing::error!(
                                error = %e,
                                "the new resolver section cannot be set up; the running one stays"
                            ),
                        }
                    }
                    self.engine
                        .set_per_target_histograms(config.metrics.per_target_histograms);
                    if config.cluster != self.cluster {
                        tracing::warn!(
                            "the cluster section changed: it takes effect at the next start; \
                             the targets' own replicas and quorum apply now"
                        );
                    }
                    if (config.history.clone(), config.sla_window) != self.history {
                        tracing::warn!(
                            "the history section or scoring.sla_window changed: they take effect \
                             at the next start"
                        );
                    }
                    if receivers(&config) != self.alerts.1 {
                        tracing::warn!(
                            "the alerts section's receivers changed: they take effect at the next \
                             start; the rules apply now"
                        );
                    }
                    self.alerts.0.send_if_modified(|rules| {
                        let new = FileRules::of(&config);
                        let changed = **rules != new;
                        if changed {
                            *rules = Arc::new(new);
                        }
                        changed
                    });
                    return Some(config);
                }
                Err(errors) => {
                    metrics::counter!("probe_config_reloads_total", "result" => "failure")
                        .increment(1);
                    metrics::gauge!("probe_config_last_reload_successful").set(0.0);
                    for e in &errors.0 {
                        tracing::error!(error = %e, "invalid config");
                    }
                    tracing::error!(
                        errors = errors.0.len(),
                        "config reload rejected; the running config stays in force"
                    );
                    shared.files.last_error = errors.0.iter().map(ToString::to_string).collect();
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Discovery for FileSource {
    async fn next(&mut self) -> Option<Catalog> {
        Some(Catalog::from(self.load().await?.topology))
    }
}

/// Hands each catalog of a source to the loop until `stop`.
async fn forward(
    mut source: impl Discovery,
    index: usize,
    incarnation: u64,
    updates: mpsc::Sender<Update>,
    stop: CancellationToken,
) {
    loop {
        let catalog = tokio::select! {
            () = stop.cancelled() => return,
            catalog = source.next() => match catalog {
                Some(catalog) => catalog,
                None => return,
            },
        };
        let update = Update {
            source: index,
            incarnation,
            catalog,
        };
        if updates.send(update).await.is_err() {
            return;
        }
    }
}

/// The loop that merges and applies.
struct Loop {
    engine: Engine,
    merger: Merger,
    shared: Arc<Mutex<Shared>>,
    updates_tx: mpsc::Sender<Update>,
    /// The etcd settings of the files' last good config.
    files_etcd: watch::Receiver<Option<SourceConfig>>,
    dir: PathBuf,
    store: Option<StateStore>,
    etcd: Option<RunningEtcd>,
    incarnations: u64,
    /// etcd's entries' `alert` keys, for the alerting loop.
    declared: Arc<DeclaredAlerts>,
    cancel: CancellationToken,
}

impl Loop {
    async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        loop {
            let update = tokio::select! {
                () = self.cancel.cancelled() => break,
                update = updates.recv() => match update {
                    Some(update) => update,
                    None => break,
                },
            };
            if update.source == FILES {
                self.merger.update(FILES, update.catalog);
                let wanted = self.files_etcd.borrow_and_update().clone();
                if wanted != self.etcd.as_ref().map(|e| e.config.clone()) {
                    self.set_etcd(wanted);
                }
                self.apply(FILES);
            } else if self.etcd.as_ref().map(|e| e.incarnation) == Some(update.incarnation) {
                self.merger.update(ETCD, update.catalog);
                self.apply(ETCD);
            }
        }
        if let Some(etcd) = self.etcd.take() {
            etcd.stop.cancel();
        }
    }

    /// Stops the running etcd source, if any, and starts one with `config`, if any. The old
    /// source's content stays in force until the new one has read: a reconnection elsewhere is
    /// not an outage. Without etcd any more, its targets go.
    fn set_etcd(&mut self, config: Option<SourceConfig>) {
        if let Some(old) = self.etcd.take() {
            old.stop.cancel();
        }
        let Some(config) = config else {
            self.merger.update(ETCD, Catalog::default());
            self.shared.lock().etcd = None;
            return;
        };
        self.incarnations += 1;
        let incarnation = self.incarnations;
        let stop = self.cancel.child_token();
        let mut status = EtcdShared {
            endpoints: config.endpoints.clone(),
            prefix: config.prefix.clone(),
            sync: None,
            error: None,
        };
        status.sync = match Source::new(config.clone()) {
            Ok(source) => {
                let dir = self.dir.clone();
                let declared = self.declared.clone();
                let discovery = EtcdDiscovery::new(
                    source.snapshots(),
                    config.prefix.clone(),
                    Box::new(move |name, key, value| {
                        let entry = config::parse_declared(name, key, value, &dir)?;
                        declared.set(entry.declaration.id().clone(), entry.alert);
                        Ok(entry.declaration)
                    }),
                );
                let receiver = source.status();
                tokio::spawn(source.run(stop.clone()));
                tokio::spawn(forward(
                    discovery,
                    ETCD,
                    incarnation,
                    self.updates_tx.clone(),
                    stop.clone(),
                ));
                tracing::info!(endpoints = ?config.endpoints, prefix = %config.prefix, "etcd source started");
                Some(receiver)
            }
            Err(e) => {
                tracing::error!(error = %e, "etcd source not started");
                status.error = Some(e.to_string());
                None
            }
        };
        self.shared.lock().etcd = Some(status);
        self.etcd = Some(RunningEtcd {
            config,
            incarnation,
            stop,
        });
    }

    /// Merges, applies and publishes; logs the diff once, and each new rejection once. A files
    /// reload counts as a generation even when it changes nothing, so that it shows.
    fn apply(&mut self, trigger: usize) {
        let source = SOURCES[trigger];
        let merged = match self.merger.merge() {
            Ok(merged) => merged,
            Err(e) => {
                tracing::error!(error = %e, source, "topology not applied; the running one stays");
                return;
            }
        };
        let diff = match self.engine.apply(merged.topology) {
            Ok(diff) => diff,
            Err(e) => {
                tracing::error!(error = %e, source, "topology refused by the engine; the running one stays");
                return;
            }
        };
        if let Some(store) = self.store.as_ref().filter(|_| !diff.added.is_empty()) {
            store.restore(&self.engine);
        }
        let mut shared = self.shared.lock();
        for rejection in merged
            .rejected
            .iter()
            .filter(|r| !shared.rejected.contains(r))
        {
            metrics::counter!("probe_topology_errors_total", "source" => rejection.source.clone())
                .increment(1);
            tracing::warn!(
                source = %rejection.source,
                entry = %rejection.name,
                origin = %rejection.origin,
                kept_previous = rejection.kept_previous,
                reason = %rejection.reason,
                "topology entry rejected"
            );
        }
        shared.rejected = merged.rejected;
        if trigger == FILES || !diff.is_empty() {
            shared.generation += 1;
            if trigger == FILES {
                // Before the log line: whoever reads it then sees the files' generation too.
                shared.files.last_good_generation = shared.generation;
            }
            if !diff.is_empty() {
                shared.last_change = Some(SystemTime::now());
            }
            metrics::gauge!("probe_topology_generation").set(shared.generation as f64);
            tracing::info!(
                source,
                generation = shared.generation,
                added = diff.added.len(),
                removed = diff.removed.len(),
                changed = diff.changed.len(),
                unchanged = diff.unchanged,
                "topology applied"
            );
        }
    }
}
