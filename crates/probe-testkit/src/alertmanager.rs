//! A real Alertmanager (Debian's `prometheus-alertmanager`) on a free loopback port, with its
//! configuration and storage in a temporary directory and clustering off: what alert tests send
//! to and read back from (`GET /api/v2/alerts`), as Prometheus would.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running Alertmanager; stopped when dropped.
pub struct Alertmanager {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// Why Alertmanager did not start.
#[derive(Debug, thiserror::Error)]
pub enum AlertmanagerError {
    /// No `prometheus-alertmanager` (or `alertmanager`) binary (`scripts/setup` installs it).
    #[error("Alertmanager is not installed (apt-get install prometheus-alertmanager)")]
    Missing,
    /// It exited or never became ready; its log says why.
    #[error("Alertmanager did not start: {0}")]
    Start(String),
    /// Setting up its directory or port failed.
    #[error("setting up Alertmanager: {0}")]
    Io(#[from] io::Error),
}

impl Alertmanager {
    /// Starts Alertmanager with one receiver that sends nowhere, and waits until `/-/ready`
    /// answers 200.
    ///
    /// # Errors
    /// [`AlertmanagerError::Missing`] without the binary; otherwise what went wrong, with its
    /// log.
    pub fn start() -> Result<Self, AlertmanagerError> {
        let binary = ["prometheus-alertmanager", "alertmanager"]
            .into_iter()
            .find_map(super::which)
            .ok_or(AlertmanagerError::Missing)?;
        let dir = tempfile::tempdir()?;
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            "route: { receiver: nowhere, group_wait: 0s, group_interval: 1s }\n\
             receivers: [ { name: nowhere } ]\n",
        )?;
        let log = std::fs::File::create(dir.path().join("alertmanager.log"))?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            // Empty: no gossip port, no peers.
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut alertmanager = Self { child, addr, dir };
        alertmanager.wait_ready()?;
        Ok(alertmanager)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default()
    }

    /// `GET path`: the status code and body (HTTP/1.0, one connection each).
    ///
    /// # Errors
    /// When it cannot be reached or answers something that is not HTTP.
    pub fn get(&self, path: &str) -> io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr)?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| io::Error::other(format!("not an HTTP answer: {response:.80}")))?;
        let body = response
            .split_once("\r\n\r\n")
            .map_or_else(String::new, |(_, body)| body.to_owned());
        Ok((status, body))
    }

    /// Polls `/-/ready` until it answers 200, or fails with its log when it exits or takes
    /// longer than 20 s.
    fn wait_ready(&mut self) -> Result<(), AlertmanagerError> {
        for _ in 0..1000 {
            if matches!(self.get("/-/ready"), Ok((200, _))) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(AlertmanagerError::Start(format!(
                    "exited with {status}: {}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(AlertmanagerError::Start(format!(
            "not ready on {} after 20 s: {}",
            self.addr,
            self.log()
        )))
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
