//! The daemon's wiring: config in, engine running, API served, reloads applied as diffs.
//!
//! Signals stay in `main`: this module takes a cancellation token and exposes [`Daemon::reload`],
//! so tests drive it the same way the signal handlers do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use probe::engine::{Diff, Engine, EngineConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::config::{self, ConfigErrors};

/// A running daemon: its engine and where its config comes from.
pub struct Daemon {
    engine: Engine,
    config_path: PathBuf,
    cancel: CancellationToken,
}

impl Daemon {
    /// Loads the config at `config_path`, starts the engine and schedules every target.
    ///
    /// # Errors
    /// Every problem of the config, located; nothing is started then.
    pub fn start(
        config_path: PathBuf,
        engine_config: EngineConfig,
        cancel: CancellationToken,
    ) -> Result<Self, ConfigErrors> {
        let loaded = config::load(&config_path)?;
        let engine = Engine::start(engine_config, cancel.clone());
        let diff = engine.apply(loaded.targets);
        tracing::info!(
            targets = diff.added.len(),
            files = loaded.files.len(),
            config = %config_path.display(),
            "config loaded"
        );
        Ok(Self {
            engine,
            config_path,
            cancel,
        })
    }

    /// The engine, for embedding tests and the API.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Re-reads the config and applies it as a diff. An invalid config changes nothing: the
    /// running targets keep probing with their state, and every error is logged.
    ///
    /// # Errors
    /// The new config's errors, when it is rejected.
    pub fn reload(&self) -> Result<Diff, ConfigErrors> {
        match config::load(&self.config_path) {
            Ok(loaded) => {
                let diff = self.engine.apply(loaded.targets);
                metrics::counter!("probe_config_reloads_total", "result" => "success").increment(1);
                metrics::gauge!("probe_config_last_reload_successful").set(1.0);
                tracing::info!(
                    added = diff.added.len(),
                    removed = diff.removed.len(),
                    changed = diff.changed.len(),
                    unchanged = diff.unchanged,
                    "config reloaded"
                );
                Ok(diff)
            }
            Err(errors) => {
                metrics::counter!("probe_config_reloads_total", "result" => "failure").increment(1);
                metrics::gauge!("probe_config_last_reload_successful").set(0.0);
                for e in &errors.0 {
                    tracing::error!(error = %e, "invalid config");
                }
                tracing::error!(
                    errors = errors.0.len(),
                    "config reload rejected; the running config stays in force"
                );
                Err(errors)
            }
        }
    }

    /// Serves the API on `listener` until cancellation, then waits up to `grace` for in-flight
    /// probes to finish.
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
        tracing::info!(%addr, "listening");
        let app = api::router(ApiState {
            engine: self.engine.clone(),
            metrics,
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(self.cancel.clone().cancelled_owned())
            .await?;
        tracing::info!("stopping: waiting for probes in flight");
        if tokio::time::timeout(grace, self.engine.stopped())
            .await
            .is_err()
        {
            tracing::warn!(grace = %humantime::format_duration(grace), "probes still in flight at the deadline");
        }
        Ok(())
    }
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

/// Registers descriptions of the daemon's own metrics and the library's.
pub fn describe_metrics() {
    probe::engine::describe_metrics();
    metrics::describe_counter!(
        "probe_config_reloads_total",
        "Config reloads, by result (success or failure)."
    );
    metrics::describe_gauge!(
        "probe_config_last_reload_successful",
        "Whether the last config reload was applied (1) or rejected (0)."
    );
}
