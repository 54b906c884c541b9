//! A real blackbox_exporter (Debian's `prometheus-blackbox-exporter`) on a free loopback port,
//! started from a whole `blackbox.yml`, for the tests that hold our verdicts side by side with
//! the exporter users already run: same server, same module, same answer.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running blackbox_exporter; stopped when dropped.
pub struct Blackbox {
    child: Child,
    addr: SocketAddr,
    /// The first line of `--version`, for reports.
    pub version: String,
    _dir: tempfile::TempDir,
}

/// Why blackbox_exporter did not start.
#[derive(Debug, thiserror::Error)]
pub enum BlackboxError {
    /// No `prometheus-blackbox-exporter` on `PATH` (`scripts/setup` installs it).
    #[error("blackbox_exporter is not installed (apt-get install prometheus-blackbox-exporter)")]
    Missing,
    /// It exited (a config it refused, say) or never listened.
    #[error("blackbox_exporter did not start: {0}")]
    Start(String),
    /// Setting up its directory or port failed.
    #[error("setting up blackbox_exporter: {0}")]
    Io(#[from] io::Error),
}

/// What one `/probe` answered.
#[derive(Clone, Debug)]
pub struct BlackboxAnswer {
    /// The HTTP status: 200 for a probe that ran (whatever its success), 400 for a bad query.
    pub status: u16,
    /// The body: the exposition of the probe's series, or the error.
    pub body: String,
}

impl BlackboxAnswer {
    /// `probe_success`: whether the probe succeeded. `None` when the answer has no such line.
    pub fn success(&self) -> Option<bool> {
        self.value("probe_success").map(|v| v == 1.0)
    }

    /// The value of the first sample named exactly `name` (any labels).
    pub fn value(&self, name: &str) -> Option<f64> {
        self.body
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
    }
}

impl Blackbox {
    /// Starts the exporter from `PATH` with `config` as its `blackbox.yml`, and waits until it
    /// answers.
    ///
    /// # Errors
    /// [`BlackboxError::Missing`] without it; otherwise what went wrong, with its output.
    pub fn start(config: &str) -> Result<Self, BlackboxError> {
        let binary = super::which("prometheus-blackbox-exporter").ok_or(BlackboxError::Missing)?;
        Self::start_binary(&binary, config)
    }

    /// As [`Blackbox::start`], with this binary.
    ///
    /// # Errors
    /// As [`Blackbox::start`].
    pub fn start_binary(binary: &Path, config: &str) -> Result<Self, BlackboxError> {
        let dir = tempfile::tempdir()?;
        let config_path = dir.path().join("blackbox.yml");
        std::fs::write(&config_path, config)?;
        let log = dir.path().join("exporter.log");
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let mut blackbox = Self {
            child,
            addr,
            version: version_of(binary),
            _dir: dir,
        };
        blackbox.wait_listening(&log)?;
        Ok(blackbox)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id, for the benchmarks that measure its CPU.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET /probe?module=M&target=T`.
    ///
    /// # Errors
    /// When the exporter cannot be reached.
    pub async fn probe(&self, module: &str, target: &str) -> Result<BlackboxAnswer, String> {
        let mut url = reqwest::Url::parse(&format!("http://{}/probe", self.addr))
            .map_err(|e| e.to_string())?;
        url.query_pairs_mut()
            .append_pair("module", module)
            .append_pair("target", target);
        self.get(url.as_str()).await
    }

    /// A GET of `url` (a query of the exporter's own), as [`Blackbox::probe`] answers it.
    ///
    /// # Errors
    /// When the exporter cannot be reached.
    pub async fn get(&self, url: &str) -> Result<BlackboxAnswer, String> {
        // Plain HTTP, but reqwest is built without a default crypto provider: hand it a TLS
        // configuration so that it needs none.
        let tls = probe::tier::tls::client_config(None).map_err(|e| e.to_string())?;
        let response = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(|e| e.to_string())?;
        Ok(BlackboxAnswer { status, body })
    }

    /// Connects until the exporter accepts, or fails with its log when it exits or takes
    /// longer than 10 s.
    fn wait_listening(&mut self, log: &PathBuf) -> Result<(), BlackboxError> {
        let output = || std::fs::read_to_string(log).unwrap_or_default();
        for _ in 0..500 {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(BlackboxError::Start(format!(
                    "exited with {status}: {}",
                    output()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(BlackboxError::Start(format!(
            "not listening on {} after 10 s: {}",
            self.addr,
            output()
        )))
    }
}

impl Drop for Blackbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first line `binary --version` prints (on stdout or stderr, as blackbox_exporter does);
/// empty when it prints none.
pub fn version_of(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or_default().trim().to_owned()
        })
        .unwrap_or_default()
}

/// Starts blackbox_exporter with `config`, or says the test was skipped (outside CI) when it is
/// not installed. Any other failure to start fails the test.
///
/// # Panics
/// When it is missing under `CI`, or fails to start.
pub fn blackbox_or_skip(config: &str) -> Option<Blackbox> {
    match Blackbox::start(config) {
        Ok(blackbox) => Some(blackbox),
        Err(BlackboxError::Missing) => {
            super::skipped_outside_ci("blackbox_exporter is not installed");
            None
        }
        Err(e) => panic!("{e}"),
    }
}
