//! A real Prometheus (Debian's `prometheus`) on a free loopback port with a whole
//! `prometheus.yml`, its storage in a temporary directory: the scraper whose relabelling, scrape
//! timeouts and query API the daemon's endpoints must satisfy.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running Prometheus; stopped when dropped.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    /// The first line of `--version`, for reports.
    pub version: String,
    dir: tempfile::TempDir,
}

/// Why Prometheus did not start.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// No `prometheus` on `PATH` (`scripts/setup` installs it).
    #[error("prometheus is not installed (apt-get install prometheus)")]
    Missing,
    /// Setting up its directory, port or process failed.
    #[error("starting prometheus: {0}")]
    Io(#[from] io::Error),
}

impl Prometheus {
    /// Starts Prometheus from `PATH` with `config` as its `prometheus.yml`.
    ///
    /// # Errors
    /// [`PrometheusError::Missing`] without it, else what went wrong.
    pub fn start(config: &str) -> Result<Self, PrometheusError> {
        let binary = super::which("prometheus").ok_or(PrometheusError::Missing)?;
        Self::start_binary(&binary, config, &[])
    }

    /// As [`Prometheus::start`], with this binary and `extra` flags.
    ///
    /// # Errors
    /// As [`Prometheus::start`].
    pub fn start_binary(
        binary: &Path,
        config: &str,
        extra: &[&str],
    ) -> Result<Self, PrometheusError> {
        let dir = tempfile::tempdir()?;
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Self {
            child,
            addr,
            version: super::version_of(binary),
            dir,
        })
    }

    /// Where its API listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id, for the benchmarks that measure its CPU.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How it exited, once it has.
    ///
    /// # Errors
    /// When its status cannot be read.
    pub fn exited(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// The samples of an instant query (`data.result`); `None` while it does not answer yet.
    pub async fn query(&self, query: &str) -> Option<Vec<serde_json::Value>> {
        self.answer(query).await?["data"]["result"]
            .as_array()
            .cloned()
    }

    /// The whole answer to an instant query (`status`, `data` or `error`); `None` while it does
    /// not answer JSON yet (it answers HTTP a moment before).
    pub async fn answer(&self, query: &str) -> Option<serde_json::Value> {
        let mut url = reqwest::Url::parse(&format!("http://{}/api/v1/query", self.addr)).ok()?;
        url.query_pairs_mut().append_pair("query", query);
        let tls = probe::tier::tls::client_config(None).ok()?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .ok()?;
        client.get(url).send().await.ok()?.json().await.ok()
    }

    /// The last lines of its log.
    pub fn log(&self, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Prometheus with `config`, or says the test skipped (a failure under `CI`) when it is
/// not installed.
pub fn prometheus_or_skip(config: &str) -> Option<Prometheus> {
    match Prometheus::start(config) {
        Ok(prometheus) => Some(prometheus),
        Err(PrometheusError::Missing) => {
            super::skipped_outside_ci("prometheus is not installed");
            None
        }
        Err(e) => panic!("{e}"),
    }
}
