//! A real nginx (Debian's `nginx-light`) on a free loopback port, its whole prefix in a
//! temporary directory, for the keep-alive race: nginx closes an idle kept-alive connection
//! after its `keepalive_timeout`, and any connection after `keepalive_requests`, as servers and
//! load balancers do everywhere.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How nginx keeps connections alive.
#[derive(Clone, Copy, Debug)]
pub struct KeepAlive {
    /// `keepalive_timeout`: an idle connection is closed after this.
    pub timeout: Duration,
    /// `keepalive_requests`: a connection is closed after this many requests.
    pub requests: u32,
}

/// A running nginx answering `200 ok` on every path; stopped when dropped.
pub struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// Why nginx did not start.
#[derive(Debug, thiserror::Error)]
pub enum NginxError {
    /// No `nginx` binary on `PATH` or in `/usr/sbin` (`scripts/setup` installs `nginx-light`).
    #[error("nginx is not installed (apt-get install nginx-light)")]
    Missing,
    /// It exited or never listened; its error log says why.
    #[error("nginx did not start: {0}")]
    Start(String),
    /// Setting up its directory or port failed.
    #[error("setting up nginx: {0}")]
    Io(#[from] io::Error),
}

impl Nginx {
    /// Starts nginx and waits until it accepts connections.
    ///
    /// # Errors
    /// [`NginxError::Missing`] without nginx; otherwise what went wrong, with its error log.
    pub fn start(keep_alive: KeepAlive) -> Result<Self, NginxError> {
        let binary = super::which("nginx").ok_or(NginxError::Missing)?;
        let dir = tempfile::tempdir()?;
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let prefix = dir.path().display();
        let timeout_ms = keep_alive.timeout.as_millis();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n\
             error_log {prefix}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  \
             proxy_temp_path {prefix}/proxy;\n  fastcgi_temp_path {prefix}/fastcgi;\n  \
             uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n  \
             keepalive_timeout {timeout_ms}ms;\n  keepalive_requests {};\n  \
             server {{ listen {addr}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n",
            keep_alive.requests
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut nginx = Self { child, addr, dir };
        nginx.wait_listening()?;
        Ok(nginx)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// Connects until nginx accepts (a connection is the signal it listens), or fails with its
    /// error log when it exits or takes longer than 10 s.
    fn wait_listening(&mut self) -> Result<(), NginxError> {
        for _ in 0..500 {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(NginxError::Start(format!(
                    "exited with {status}: {}",
                    self.error_log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(NginxError::Start(format!(
            "not listening on {} after 10 s: {}",
            self.addr,
            self.error_log()
        )))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
