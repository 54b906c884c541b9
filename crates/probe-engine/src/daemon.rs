//! The daemon's wiring: config in, engine running, API served, reloads applied as diffs.
//!
//! Signals stay in `main`: this module takes a cancellation token and exposes [`Daemon::reload`],
//! so tests drive it the same way the signal handlers do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use probe::engine::{Engine, EngineConfig};
use probe::gate::{self, Gate, GateConfig, Hook, ShutdownPlan};
use probe::serve::grpc::HealthService;
use probe::tier::resolve::{Resolver, ResolverConfig, ResolverError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::alerts::{self, Alerter, RuleFeed, Sender, first_member};
use crate::api::{self, ApiState};
use crate::api::{TokenError, TokenSources, Tokens};
use crate::history::{Backend, GroupsOurs, History, HistoryConfig};
use crate::persist::{PersistError, StateStore};
use crate::topology::TopologyHandle;
use crate::web::{TlsListener, Web};
use probe::cluster::MemberId;
use probe_config::{self as config, ClusterConfig, ConfigErrors};
use probe_etcd::cluster::Cluster;
use probe_etcd::membership::{MemberRecord, unix_ms_now};

/// How to start the daemon.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// A YAML file or a directory of them.
    pub config: PathBuf,
    /// This daemon's name in the config's cluster, over the `cluster` section's `member`.
    pub member: Option<String>,
    /// Engine limits.
    pub engine: EngineConfig,
    /// Where operator maintenance is saved; `None` keeps it in memory only.
    pub state_dir: Option<PathBuf>,
    /// The API's bearer tokens: operator and read, given and in files (see [`crate::api`]).
    pub tokens: TokenSources,
    /// How long the daemon keeps serving after it turns not ready on a stop, so that whatever
    /// balances or scrapes it notices.
    pub drain_delay: Duration,
    /// The status page's settings; `None` turns it off (`--ui false`).
    pub ui: Option<api::Ui>,
    /// blackbox_exporter's `GET /probe` (`--blackbox-config`); `None` leaves it out.
    pub blackbox: Option<crate::adhoc::AdHocOptions>,
    /// `--web-config`: TLS, basic users and headers for the listeners (see [`crate::web`]).
    pub web_config: Option<PathBuf>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config is invalid; every problem is listed.
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    /// The state directory cannot be used.
    #[error("state directory")]
    State(#[from] PersistError),
    /// The `resolver` section could not be set up.
    #[error("resolver")]
    Resolver(#[from] ResolverError),
    /// The API's tokens could not be read.
    #[error("api tokens")]
    Tokens(#[from] TokenError),
    /// The web config is invalid; every problem is listed.
    #[error("{0}")]
    Web(ConfigErrors),
    /// The cluster could not be joined: no member name, a name taken, etcd.
    #[error("{0}")]
    Cluster(String),
}

/// A running daemon: its engine, where its config comes from and where its state goes.
pub struct Daemon {
    engine: Engine,
    /// The engine's resolver, which the daemon made: its health is on `/health`, and a reload
    /// reconfigures it.
    resolver: Arc<Resolver>,
    topology: TopologyHandle,
    store: Option<StateStore>,
    tokens: Tokens,
    /// Read again on every reload: token files may have been rotated.
    token_sources: TokenSources,
    gate: Gate,
    drain_delay: Duration,
    /// Cancelled to start the stop sequence (SIGTERM, `POST /v1/drain`).
    stop: CancellationToken,
    /// Cancelled at the end of the stop sequence, or to stop at once.
    cancel: CancellationToken,
    /// Cancelled to stop at once ([`Daemon::stop_now`]): the stop sequence is cut short and open
    /// API connections are dropped.
    now: CancellationToken,
    /// Where grpc.health.v1 is served ([`Daemon::serve_grpc_health`]); taken by
    /// [`Daemon::serve`].
    grpc: parking_lot::Mutex<Option<TcpListener>>,
    /// The `cluster` section with this member's name, when there is one.
    clustered: Option<(ClusterConfig, MemberId)>,
    /// The cluster, once joined ([`Daemon::join_cluster`]).
    cluster: std::sync::OnceLock<Cluster>,
    /// The `alerts` section and where its rules come from, when there is one: alerting starts
    /// with the API, which its alerts link to.
    alerting: Option<(config::AlertsConfig, RuleFeed)>,
    /// `--state-dir`: the alerts' outbox is kept there.
    state_dir: Option<std::path::PathBuf>,
    /// The history, when it is kept.
    history: Option<History>,
    /// Once joined, the member set: whether this member records the groups' history.
    membership: Arc<std::sync::OnceLock<MembershipWatch>>,
    /// The status page's settings.
    ui: Option<api::Ui>,
    /// `GET /probe`'s prober, with `--blackbox-config`.
    adhoc: Option<Arc<crate::adhoc::AdHoc>>,
    /// The web config in force.
    web: Web,
}

/// A member's view of the cluster's member set.
type MembershipWatch = tokio::sync::watch::Receiver<probe_etcd::membership::View>;

/// How long the API's connections get to close once the stop sequence is over: for answers
/// being written at that moment (a health check, a refusal). Requests still in flight had their
/// `--shutdown-grace` already; after this their connections are dropped.
const SERVER_CLOSE: Duration = Duration::from_secs(1);

/// How long the web config's files must be quiet before a change reloads them: a certificate
/// and its key are written one after the other, and a Kubernetes Secret swaps a symlink.
const WEB_DEBOUNCE: Duration = Duration::from_millis(500);

/// Why credentials over plain HTTP beyond loopback are worth a warning, and what to do.
const CLEAR_TEXT_CREDENTIALS: &str = "the API listens beyond loopback without TLS, so its tokens \
     and passwords travel in clear text: give --web-config a tls_server_config";

/// How long a stopping daemon waits for the history's last write.
const HISTORY_LAST_WRITE: Duration = Duration::from_secs(5);

/// How long a stopping member waits for etcd to revoke its lease.
const CLUSTER_LEAVE: Duration = Duration::from_secs(2);

impl Daemon {
    /// Loads the config, starts the engine, schedules every target and restores saved
    /// maintenance.
    ///
    /// # Errors
    /// Every problem of the config, located, or an unusable state directory; nothing is
    /// started then.
    pub fn start(options: Options, cancel: CancellationToken) -> Result<Self, StartError> {
        let web = match &options.web_config {
            Some(path) => Web::load(path).map_err(StartError::Web)?,
            None => Web::default(),
        };
        let loaded = config::load(&options.config)?;
        let tokens = Tokens::new(options.tokens.load()?);
        let store = options
            .state_dir
            .as_deref()
            .map(StateStore::open)
            .transpose()?;
        // Without a `resolver` section, the system's, which falls back on the hosts file alone
        // when resolv.conf cannot be read; servers of the config's own must work.
        let resolver = Arc::new(if loaded.resolver == ResolverConfig::default() {
            Resolver::system()
        } else {
            Resolver::new(loaded.resolver.clone())?
        });
        let engine = Engine::start_with_resolver(options.engine, resolver.clone(), cancel.clone());
        let adhoc = options
            .blackbox
            .as_ref()
            .map(|blackbox| {
                crate::adhoc::AdHoc::start(blackbox, engine.clone(), resolver.clone()).map(Arc::new)
            })
            .transpose()?;
        let clustered = match &loaded.cluster {
            None => None,
            Some(cluster) => {
                let name = match options.member.as_deref() {
                    Some(name) => MemberId::new(name)
                        .map_err(|e| StartError::Cluster(format!("--member {e}")))?,
                    None => cluster.member.clone().ok_or_else(|| {
                        StartError::Cluster(
                            "the cluster needs this member's name: set cluster.member or --member"
                                .to_owned(),
                        )
                    })?,
                };
                // Before the first apply: no target is probed before the cluster says whose.
                engine.cluster().join(name.clone(), cluster.replication);
                Some((cluster.clone(), name))
            }
        };
        // In a cluster, operator maintenance lives in etcd, shared by every member.
        let maintenance_store = store.clone().filter(|_| clustered.is_none());
        // Which ICMP sockets the process may use is decided now, once, and said: an `icmp`
        // target that cannot ping fails as `io`, and this line says why before it does.
        let icmp = probe::tier::icmp::sockets();
        if icmp.flavour().is_some() {
            tracing::info!("icmp: {icmp}");
        } else {
            tracing::warn!("icmp: {icmp}");
        }
        // Before the first apply: the history sees every transition from the first.
        let membership: Arc<std::sync::OnceLock<MembershipWatch>> = Arc::default();
        let history = history_config(&loaded, options.state_dir.as_deref()).map(|config| {
            let member = clustered
                .as_ref()
                .map_or_else(|| "local".to_owned(), |(_, name)| name.to_string());
            let groups_ours: GroupsOurs = match &clustered {
                None => Arc::new(|| true),
                Some((_, name)) => {
                    let (membership, name) = (membership.clone(), name.to_string());
                    Arc::new(move || {
                        membership
                            .get()
                            .is_some_and(|view| first_member(&view.borrow(), &name))
                    })
                }
            };
            History::start(engine.clone(), config, member, groups_ours, cancel.clone())
        });
        let files = loaded.files.len();
        let (rule_sink, rule_feed) = alerts::rule_channel(&loaded);
        let alerting = loaded.alerts.clone().map(|alerts| (alerts, rule_feed));
        let (topology, diff) = TopologyHandle::start(
            engine.clone(),
            resolver.clone(),
            options.config.clone(),
            loaded,
            maintenance_store,
            rule_sink,
            cancel.clone(),
        )?;
        tracing::info!(
            targets = diff.added.len(),
            files,
            config = %options.config.display(),
            "config loaded"
        );
        let gate = Gate::new(GateConfig::default());
        gate.set_readiness(Arc::new(engine.clone()));
        let daemon = Self {
            engine,
            resolver,
            topology,
            store,
            tokens,
            token_sources: options.tokens,
            gate,
            drain_delay: options.drain_delay,
            stop: CancellationToken::new(),
            cancel,
            now: CancellationToken::new(),
            grpc: parking_lot::Mutex::new(None),
            clustered,
            cluster: std::sync::OnceLock::new(),
            alerting,
            state_dir: options.state_dir.clone(),
            history,
            membership,
            ui: options.ui.clone(),
            adhoc,
            web,
        };
        Ok(daemon)
    }

    /// Joins the cluster the config describes, if any, giving `api` as this member's address:
    /// the member key is written (a name in use is refused), the verdicts already published are
    /// read, and the member's tasks start. Call it once, before [`Daemon::serve`].
    ///
    /// # Errors
    /// [`StartError::Cluster`]: etcd could not be reached or refused, or the name is taken.
    pub async fn join_cluster(&self, api: SocketAddr) -> Result<(), StartError> {
        let Some((config, name)) = &self.clustered else {
            return Ok(());
        };
        let failed = |e: &dyn std::fmt::Display| StartError::Cluster(e.to_string());
        let client = config.etcd.connect().await.map_err(|e| failed(&e))?;
        let cluster = Cluster::join(
            self.engine.clone(),
            client,
            probe_etcd::cluster::ClusterConfig {
                prefix: config.prefix.clone(),
                me: MemberRecord {
                    name: name.to_string(),
                    api: api.to_string(),
                    started_unix_ms: unix_ms_now(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                },
                lease_ttl: config.lease_ttl,
            },
        )
        .await
        .map_err(|e| failed(&e))?;
        tracing::info!(member = %name, prefix = %config.prefix, "joined the cluster");
        let _ = self.membership.set(cluster.view());
        let running = cluster.clone();
        let cancel = self.cancel.clone();
        tokio::spawn(async move { running.run(cancel).await });
        let _ = self.cluster.set(cluster);
        Ok(())
    }

    /// The cluster this daemon is a member of, once joined.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.get()
    }

    /// The engine, for embedding tests and the API.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The topology: its status, and reload requests.
    pub fn topology(&self) -> &TopologyHandle {
        &self.topology
    }

    /// Asks for the config to be re-read and applied as a diff, and reads the token files and
    /// the web config again. An invalid config changes nothing: the running targets keep probing
    /// with their state, and every error is logged and shown in `GET /v1/topology`; an
    /// unreadable token file keeps the tokens in force, an invalid web config the one running.
    pub fn reload(&self) {
        self.topology.reload();
        self.tokens.reload(&self.token_sources);
        self.web.reload();
        if let Some(adhoc) = &self.adhoc {
            adhoc.reload();
        }
    }

    /// Starts the stop sequence: not ready at once, serving for the drain delay, then API
    /// requests drained and probes stopped within the grace, then [`Daemon::serve`] returns.
    /// Idempotent.
    pub fn stop(&self) {
        // Not ready now, not when the sequence's task gets to it (after leaving a cluster).
        self.gate.leave();
        self.stop.cancel();
    }

    /// Stops at once: cuts the stop sequence short wherever it is (the drain delay, the drain,
    /// the wait for probes), cancels the engine and drops the API's connections; then
    /// [`Daemon::serve`] returns.
    pub fn stop_now(&self) {
        self.now.cancel();
        self.cancel.cancel();
    }

    /// Whether the stop sequence has begun.
    pub fn stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Also serves grpc.health.v1 (`Check`, `Watch`; plaintext HTTP/2) on `listener` while
    /// [`Daemon::serve`] serves the API, from the same thread: `""` is what `/readyz` says,
    /// `"liveness"` what `/livez` says, a target's or group's id its health (see
    /// [`probe::serve::grpc`]). Every service turns NOT_SERVING in the stop sequence's first step,
    /// with `/readyz`; the server stops with the API's.
    pub fn serve_grpc_health(&self, listener: TcpListener) {
        *self.grpc.lock() = Some(listener);
    }

    /// The gate the API is admitted through.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Serves the API on `listener` until the stop sequence ([`Daemon::stop`]) has run, or until
    /// cancellation or [`Daemon::stop_now`] (at once). `grace` bounds both the drain of API
    /// requests and the wait for probes in flight; requests still in flight after it are cut.
    ///
    /// # Errors
    /// An I/O error of the server.
    pub async fn serve(
        &self,
        listener: TcpListener,
        metrics: Option<PrometheusHandle>,
        grace: Duration,
    ) -> std::io::Result<()> {
        let addr: SocketAddr = listener.local_addr()?;
        let loopback_only = addr.ip().to_canonical().is_loopback();
        let web = self.web.current();
        let tls = web.tls.is_some();
        if !self.tokens.has_operator() && !loopback_only {
            tracing::warn!(%addr, "{}", api::UNTOKENED_BEYOND_LOOPBACK);
        }
        if !tls && !loopback_only && (self.tokens.has_any() || !web.users.is_empty()) {
            tracing::warn!(%addr, "{CLEAR_TEXT_CREDENTIALS}");
        }
        let alerts = self.alerting.clone().map(|(config, rules)| {
            // Alertmanager knows an alert by its labels: every member of a cluster labels its
            // alerts with the cluster's prefix, so a handover goes on with the same alert.
            let (label, member) = match &self.clustered {
                Some((cluster, name)) => (cluster.prefix.clone(), name.to_string()),
                None => ("probe-engine".to_owned(), "probe-engine".to_owned()),
            };
            Alerter::start(
                self.engine.clone(),
                &config,
                rules,
                Sender {
                    label,
                    member,
                    api: format!("{}://{addr}", if tls { "https" } else { "http" }),
                    membership: self.cluster.get().map(Cluster::view),
                },
                self.state_dir.clone(),
                self.cancel.clone(),
            )
        });
        let app = api::router(ApiState {
            engine: self.engine.clone(),
            resolver: self.resolver.clone(),
            metrics,
            tokens: self.tokens.clone(),
            loopback_only,
            // In a cluster, maintenance is kept in etcd instead.
            store: self.store.clone().filter(|_| self.clustered.is_none()),
            topology: self.topology.clone(),
            shutdown: self.cancel.clone(),
            gate: self.gate.clone(),
            stop: self.stop.clone(),
            listing: Default::default(),
            cluster: self.cluster.get().cloned(),
            alerts,
            history: self.history.clone(),
            ui: self.ui.clone(),
            adhoc: self.adhoc.clone(),
            page_rows: self
                .ui
                .as_ref()
                .map(|_| api::Rows::start(self.engine.clone(), self.cancel.clone())),
            web: self.web.clone(),
        });
        let grpc = match self.grpc.lock().take() {
            Some(listener) => {
                let health = HealthService::new(self.engine.clone(), self.cancel.clone())
                    .with_gate(self.gate.clone());
                tracing::info!(addr = %listener.local_addr()?, tls, "grpc health listening");
                Some((listener.into_std()?, health))
            }
            None => None,
        };
        self.gate.startup_complete();
        tracing::info!(%addr, tls, "listening");
        crate::systemd::ready(&format!("serving on {addr}"));
        tokio::spawn(crate::systemd::watchdog(
            self.gate.clone(),
            self.cancel.clone(),
        ));
        tokio::spawn(self.web.clone().watch(WEB_DEBOUNCE, self.cancel.clone()));
        let server = serve_on_own_thread(
            listener,
            app,
            grpc,
            self.web.clone(),
            self.cancel.clone(),
            self.now.clone(),
        )?;
        let sequence = async {
            tokio::select! {
                () = self.cancel.cancelled() => return,
                () = self.stop.cancelled() => {}
            }
            crate::systemd::stopping();
            // First of all, so that the others take this member's targets over now, not after
            // the lease's TTL; while it drains, it follows their verdicts.
            if let Some(cluster) = self.cluster.get() {
                match tokio::time::timeout(CLUSTER_LEAVE, cluster.leave()).await {
                    Ok(Ok(())) => tracing::info!("left the cluster"),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "could not leave the cluster: its lease will expire")
                    }
                    Err(_) => {
                        tracing::warn!("leaving the cluster timed out: its lease will expire")
                    }
                }
            }
            let (engine, cancel) = (self.engine.clone(), self.cancel.clone());
            let plan = ShutdownPlan {
                propagation_delay: self.drain_delay,
                grace,
                hooks: vec![Hook::new("stop probing", async move {
                    cancel.cancel();
                    engine.stopped().await;
                })],
                hook_timeout: grace,
            };
            tokio::select! {
                report = gate::shutdown(&self.gate, plan) => {
                    if !report.hooks_timed_out.is_empty() {
                        tracing::warn!(
                            grace = %humantime::format_duration(grace),
                            "probes still in flight at the deadline"
                        );
                    }
                }
                // A second signal: no more waiting.
                () = self.now.cancelled() => {}
            }
            // Whatever happened, the server goes now.
            self.cancel.cancel();
        };
        let (served, ()) = tokio::join!(server, sequence);
        served?;
        if !self.stop.is_cancelled() {
            // Cancelled at once: still give probes in flight their grace.
            let _ = tokio::time::timeout(grace, self.engine.stopped()).await;
        }
        if let Some(history) = &self.history {
            // The hour so far and the last transitions, written before the process goes.
            if tokio::time::timeout(HISTORY_LAST_WRITE, history.stopped())
                .await
                .is_err()
            {
                tracing::warn!("history: the last write did not finish in time");
            }
        }
        Ok(())
    }
}

/// Where the history goes: the `history` section's database, a relative SQLite path under
/// `--state-dir`; `None` with `history: false`, or for SQLite without a state directory.
fn history_config(
    loaded: &config::Config,
    state_dir: Option<&std::path::Path>,
) -> Option<HistoryConfig> {
    let section = &loaded.history;
    let backend = match section.store.as_ref()? {
        config::HistoryStore::Postgres(url) => Backend::Postgres(url.clone()),
        config::HistoryStore::Sqlite(path) if path.is_absolute() => Backend::Sqlite(path.clone()),
        config::HistoryStore::Sqlite(path) => match state_dir {
            Some(dir) => Backend::Sqlite(dir.join(path)),
            None => {
                tracing::info!(
                    "no history: it is kept under the state directory, and --state-dir is none"
                );
                return None;
            }
        },
    };
    Some(HistoryConfig {
        backend,
        transitions: section.transitions,
        rollups: section.rollups,
        max_bytes: section.max_bytes,
        sla_window: loaded.sla_window,
    })
}

/// Serves `app` (and the gRPC health service, when given its listener) from a thread of its
/// own, with a single-threaded runtime, until `cancel`, then closes their connections gracefully
/// for up to [`SERVER_CLOSE`] (at once on `now`) and drops those still open; the future resolves
/// with the servers' result. Both speak TLS when the web config in force has it.
///
/// The engine's runtime runs the probes: on it, a health check would queue behind thousands of
/// them a second, and `/readyz` would be slow exactly when the machine is busy, which is when a
/// load balancer's check must not time out. On its own thread the API waits only for the OS
/// scheduler, as linkerd2-proxy's admin server does.
fn serve_on_own_thread(
    listener: TcpListener,
    app: axum::Router,
    grpc: Option<(std::net::TcpListener, HealthService)>,
    web: Web,
    cancel: CancellationToken,
    now: CancellationToken,
) -> std::io::Result<impl std::future::Future<Output = std::io::Result<()>>> {
    let listener = listener.into_std()?;
    let (done, served) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("probe-api".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| {
                    runtime.block_on(async {
                        let api = serve_api(listener, app, &web, cancel.clone())?;
                        let health = grpc_health(grpc, &web, cancel.clone());
                        let server = async {
                            let (api, grpc) = tokio::join!(api, health);
                            api.and(grpc)
                        };
                        let closing = async {
                            cancel.cancelled().await;
                            tokio::time::sleep(SERVER_CLOSE).await;
                        };
                        tokio::select! {
                            served = server => served,
                            () = closing => {
                                tracing::warn!("API requests still in flight at the stop: cut");
                                Ok(())
                            }
                            () = now.cancelled() => Ok(()),
                        }
                    })
                });
            // The runtime is gone, and with it every connection still open.
            // The daemon may be gone already: nobody to tell.
            let _ = done.send(result);
        })?;
    Ok(async move {
        served.await.unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the API thread ended without a result",
            ))
        })
    })
}

/// The API's server on `listener`, under TLS when the web config has it, until `cancel`.
fn serve_api(
    listener: std::net::TcpListener,
    app: axum::Router,
    web: &Web,
    cancel: CancellationToken,
) -> std::io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>>>>> {
    use axum::serve::ListenerExt;
    let listener = TcpListener::from_std(listener)?;
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let stop = cancel.clone().cancelled_owned();
    if web.current().tls.is_none() {
        return Ok(Box::pin(
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .into_future(),
        ));
    }
    let web = web.clone();
    let config = move || web.current().tls.as_ref().map(|tls| tls.api.clone());
    // The tap does nothing: axum gives a custom listener's address to `ConnectInfo` (which the
    // guard reads the peer from) only through it.
    let tls = TlsListener::start(listener, config, cancel)?.tap_io(|_| ());
    Ok(Box::pin(
        axum::serve(tls, app)
            .with_graceful_shutdown(stop)
            .into_future(),
    ))
}

/// Serves grpc.health.v1 on `listener` until `cancel` (a graceful HTTP/2 shutdown: the
/// service's `Watch` streams end on the same token), under TLS when the web config has it; at
/// once without a listener.
async fn grpc_health(
    grpc: Option<(std::net::TcpListener, HealthService)>,
    web: &Web,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let Some((listener, health)) = grpc else {
        return Ok(());
    };
    let listener = TcpListener::from_std(listener)?;
    let server = tonic::transport::Server::builder().add_service(health.into_server());
    let stop = cancel.clone().cancelled_owned();
    let served = if web.current().tls.is_some() {
        let web = web.clone();
        let config = move || web.current().tls.as_ref().map(|tls| tls.grpc.clone());
        let incoming = TlsListener::start(listener, config, cancel)?.into_stream();
        server.serve_with_incoming_shutdown(incoming, stop).await
    } else {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        server.serve_with_incoming_shutdown(incoming, stop).await
    };
    served.map_err(std::io::Error::other)
}

/// Folds recorded histogram samples into their buckets every `period` until cancellation.
///
/// The Prometheus recorder buffers raw samples until upkeep runs; without this, an unscraped
/// daemon probing 10k targets a second would grow by megabytes a minute.
pub async fn metrics_upkeep(handle: PrometheusHandle, period: Duration, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {
                let handle = handle.clone();
                // Upkeep walks every series: off the async workers.
                let _ = tokio::task::spawn_blocking(move || handle.run_upkeep()).await;
            }
        }
    }
}

/// A Prometheus exporter builder with the daemon's histogram buckets.
///
/// Histograms get explicit buckets (rather than the exporter's default summaries) so they can be
/// aggregated across instances. The recorder holds the process-wide series only: the engine
/// writes the per-target ones itself ([`probe::Engine::encode_metrics`]).
///
/// # Errors
/// Never with these constant buckets; the exporter's API is fallible.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    const LAG_BUCKETS: &[f64] = &[
        0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("probe_fleet_duration_seconds".into()),
            &probe::engine::DURATION_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("probe_scheduler_lag_seconds".into()),
            LAG_BUCKETS,
        )
}

/// Registers descriptions of the daemon's own metrics and the library's.
pub fn describe_metrics() {
    probe::engine::describe_metrics();
    probe_etcd::describe_metrics();
    metrics::describe_gauge!(
        "probe_alerts_firing",
        "Alerts firing now: one per root cause, not per target it takes down."
    );
    metrics::describe_counter!(
        "probe_adhoc_probes_total",
        "Probes made on request through GET /probe, by module (unknown for a module the \
         blackbox config lacks) and result (success, failure, invalid, forbidden or busy)."
    );
    metrics::describe_counter!(
        "probe_alert_notifications_total",
        "Notifications sent, by receiver (alertmanager, or a webhook's name) and result \
         (delivered or failed)."
    );
    metrics::describe_gauge!(
        "probe_alert_outbox_size",
        "Notifications waiting for a receiver (on disk with --state-dir)."
    );
    metrics::describe_counter!(
        "probe_alert_outbox_dropped_total",
        "Notifications dropped for room in a full outbox, oldest resolved first."
    );
    metrics::describe_counter!(
        "probe_history_write_errors_total",
        "History writes that failed; their rows wait for the next."
    );
    metrics::describe_counter!(
        "probe_history_dropped_total",
        "History rows dropped, by reason: queue_full (the database fell behind), retention, \
         size_cap (the oldest days, for room)."
    );
    metrics::describe_gauge!(
        "probe_history_pending_rows",
        "History rows waiting for the writer."
    );
    metrics::describe_gauge!(
        "probe_history_bytes",
        "The history's size as of the last hourly look: SQLite's used pages, PostgreSQL's live rows."
    );
    metrics::describe_counter!(
        "probe_topology_errors_total",
        "Topology entries rejected (invalid, conflicting or breaking the graph), by source."
    );
    metrics::describe_gauge!(
        "probe_topology_generation",
        "Topologies applied since start: files reloads and etcd changes."
    );
    metrics::describe_counter!(
        "probe_config_reloads_total",
        "Config reloads, by result (success or failure)."
    );
    metrics::describe_gauge!(
        "probe_engine_fd_limit",
        "The process's soft descriptor limit, after the daemon raised it to the hard one."
    );
    metrics::describe_gauge!(
        "probe_engine_open_fds",
        "Descriptors the process holds, as of the scrape."
    );
    metrics::describe_gauge!(
        "probe_engine_ready",
        "Whether /readyz answers 200 (1) or 503 (0), as of the scrape."
    );
    metrics::describe_gauge!(
        "probe_engine_requests_in_flight",
        "/v1 requests the readiness gate admitted and that have not finished, as of the scrape: \
         what a drain waits for."
    );
    metrics::describe_gauge!(
        "probe_engine_web_config_last_reload_successful",
        "Whether the last read of --web-config is in force (1) or was rejected (0)."
    );
    metrics::describe_counter!(
        "probe_engine_tls_handshake_failures_total",
        "TLS handshakes the listeners refused or that timed out: no or an untrusted client \
         certificate, plain HTTP to a TLS port, a client gone silent."
    );
    metrics::describe_gauge!(
        "probe_config_last_reload_successful",
        "Whether the last config reload was applied (1) or rejected (0)."
    );
}
