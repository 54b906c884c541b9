//! A real TLS server that no one here wrote: OpenSSL's `s_server`, on a free loopback port,
//! presenting the certificates a test made. rustls against rustls would test our TLS stack
//! against itself; OpenSSL sends chains, versions and signatures as the servers users run do.

use std::io::{self, BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `openssl s_server`; stopped when dropped.
pub struct OpensslServer {
    child: Child,
    addr: SocketAddr,
}

/// Why `s_server` did not start.
#[derive(Debug, thiserror::Error)]
pub enum OpensslError {
    /// No `openssl` on `PATH` (`scripts/setup` installs it).
    #[error("openssl is not installed (apt-get install openssl)")]
    Missing,
    /// It exited before listening (a certificate it could not load, say).
    #[error("openssl s_server did not start: {0}")]
    Start(String),
    /// Spawning it failed.
    #[error("starting openssl s_server: {0}")]
    Io(#[from] io::Error),
}

impl OpensslServer {
    /// Starts `openssl s_server -www` on 127.0.0.1 with `cert` and `key` (PEM files), the
    /// certificates of `chain` sent after the leaf in the file's order when given, and `extra`
    /// arguments (`-tls1_2`, ...), and returns once it listens.
    ///
    /// # Errors
    /// [`OpensslError::Missing`] without it; what it printed when it exits before listening.
    pub fn start(
        cert: &Path,
        key: &Path,
        chain: Option<&Path>,
        extra: &[&str],
    ) -> Result<Self, OpensslError> {
        let binary = super::which("openssl").ok_or(OpensslError::Missing)?;
        let mut command = Command::new(binary);
        command
            .args(["s_server", "-accept", "127.0.0.1:0", "-www", "-cert"])
            .arg(cert)
            .arg("-key")
            .arg(key);
        if let Some(chain) = chain {
            command.arg("-cert_chain").arg(chain);
        }
        let mut child = command
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let mut lines = BufReader::new(stdout);
        // It prints `ACCEPT 127.0.0.1:PORT` once it listens, with the port it was given.
        let mut printed = String::new();
        let addr = loop {
            let mut line = String::new();
            if lines.read_line(&mut line)? == 0 {
                let mut stderr = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = err.read_to_string(&mut stderr);
                }
                let _ = child.wait();
                return Err(OpensslError::Start(format!("{printed}{stderr}")));
            }
            if let Some(addr) = line
                .trim()
                .strip_prefix("ACCEPT ")
                .and_then(|a| a.parse().ok())
            {
                break addr;
            }
            printed.push_str(&line);
        };
        // Keep draining what it prints per connection, so that a full pipe never stalls it.
        let stderr = child.stderr.take();
        std::thread::spawn(move || {
            let _ = io::copy(&mut lines, &mut io::sink());
        });
        if let Some(mut stderr) = stderr {
            std::thread::spawn(move || {
                let _ = io::copy(&mut stderr, &mut io::sink());
            });
        }
        Ok(Self { child, addr })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for OpensslServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `openssl` with `args` in `dir` (making keys and certificates), failing with what it
/// printed when it fails.
///
/// # Errors
/// [`OpensslError::Missing`] without it, [`OpensslError::Start`] with its output when it fails.
pub fn openssl(dir: &Path, args: &[&str]) -> Result<(), OpensslError> {
    let binary = super::which("openssl").ok_or(OpensslError::Missing)?;
    let output = Command::new(binary).args(args).current_dir(dir).output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(OpensslError::Start(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}
