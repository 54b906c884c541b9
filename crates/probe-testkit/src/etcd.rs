//! A real, throw-away `etcd` for tests.
//!
//! [`TestEtcd::start`] runs the `etcd` binary (Debian's `etcd-server` package, installed by
//! `scripts/setup`; or the program named by `PROBE_ETCD_BIN`) as a single-member cluster with
//! its own temporary data directory, on free 127.0.0.1 ports, and waits until it answers. It
//! listens on loopback only, unless a test asks for the host's end of a namespace of its own.
//! Dropping it kills the process and removes the data.
//!
//! [`TestEtcd::start_tls`] serves https instead, with the certificates a test generates;
//! [`TestEtcd::start_cluster`] starts several members forming one etcd cluster;
//! [`TestEtcd::start_reachable_from`] also serves the host's ends of test network namespaces.
//!
//! It can be killed and restarted on the same data and ports ([`TestEtcd::kill`],
//! [`TestEtcd::restart`]), which is how outage tests make etcd disappear and come back with the
//! content it had.
//!
//! ```no_run
//! use probe_testkit::etcd::{TestEtcd, wait_for};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let etcd = TestEtcd::start().await?;
//! let mut client = etcd.client().await?;
//! client.put("/probe-engine/targets/web", r#"{"id":"web"}"#, None).await?;
//! // What a test waits on instead of sleeping: a watch channel (an etcd source's snapshots,
//! // say) until its value holds.
//! let (_tx, mut rx) = tokio::sync::watch::channel(1);
//! let seen = wait_for(&mut rx, Duration::from_secs(10), |v| *v == 1).await;
//! # let _ = seen; Ok(()) }
//! ```

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long [`TestEtcd::start`] and [`TestEtcd::restart`] wait for etcd to answer.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// The bound on one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause between readiness probes that failed fast (connection refused).
const PROBE_PAUSE: Duration = Duration::from_millis(25);
/// The member name; any name works for a single-member cluster.
const NAME: &str = "probe-etcd-test";

/// TLS for a [`TestEtcd`]'s client URL (the peer URL, loopback too, stays plain).
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The server certificate (PEM); it must name 127.0.0.1 (an IP subject alternative name).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// When set, etcd requires client certificates signed by this CA (`--client-cert-auth`).
    pub client_ca_file: Option<PathBuf>,
    /// How the harness's own clients ([`TestEtcd::client`] and the readiness probe) connect.
    pub client: etcd_client::TlsOptions,
}

/// An etcd member on loopback (a cluster of one, or one of [`TestEtcd::start_cluster`]'s),
/// killed and deleted on drop.
pub struct TestEtcd {
    /// Owns the data directory and the log: removed on drop, after the process is gone.
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    extra_args: Vec<String>,
    tls: Option<ServerTls>,
    /// Addresses besides 127.0.0.1 its clients are served on.
    also: Vec<std::net::IpAddr>,
    /// Its member name, and every member's `name=peer URL` when it is one of several.
    name: String,
    peers: Option<String>,
    child: Option<Child>,
}

impl TestEtcd {
    /// Starts etcd and waits until it serves requests.
    ///
    /// # Errors
    /// When the binary is missing, etcd exits early (its log is in the message), or it does not
    /// answer within 30 s.
    pub async fn start() -> io::Result<Self> {
        Self::start_with_args(std::iter::empty::<String>()).await
    }

    /// Starts etcd with extra command-line flags (kept for restarts), e.g.
    /// `--experimental-watch-progress-notify-interval=100ms`.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_with_args<S: Into<String>>(
        args: impl IntoIterator<Item = S>,
    ) -> io::Result<Self> {
        Self::launch(args.into_iter().map(Into::into).collect(), None, Vec::new()).await
    }

    /// Starts etcd serving its clients over TLS: [`endpoint`](Self::endpoint) is then
    /// `https://127.0.0.1:<port>`.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_tls(tls: ServerTls) -> io::Result<Self> {
        Self::launch(Vec::new(), Some(tls), Vec::new()).await
    }

    /// Starts etcd serving its clients on `also` too, besides loopback: the host's ends of
    /// test network namespaces, so that members inside them reach it
    /// ([`endpoint_on`](Self::endpoint_on)).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_reachable_from(also: &[std::net::IpAddr]) -> io::Result<Self> {
        Self::launch(Vec::new(), None, also.to_vec()).await
    }

    /// The client URL on `addr`, one of those given to
    /// [`start_reachable_from`](Self::start_reachable_from).
    pub fn endpoint_on(&self, addr: std::net::IpAddr) -> String {
        format!("http://{addr}:{}", self.client_port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// Starts a cluster of `size` etcd members on loopback, each with its own data directory and
    /// ports, and waits until every one answers (which takes a quorum of them, so all are
    /// started before any is waited for).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_cluster(size: usize) -> io::Result<Vec<Self>> {
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let (client_port, peer_port) = free_ports()?;
            members.push(Self {
                dir: tempfile::Builder::new()
                    .prefix("probe-etcd-test")
                    .tempdir()?,
                client_port,
                peer_port,
                extra_args: Vec::new(),
                tls: None,
                also: Vec::new(),
                name: format!("{NAME}-{i}"),
                peers: None,
                child: None,
            });
        }
        let peers: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        // One token for the cluster (a later flag wins over the single member's own).
        let token = format!(
            "--initial-cluster-token={NAME}-cluster-{}",
            members[0].peer_port
        );
        for member in &mut members {
            member.peers = Some(peers.join(","));
            member.extra_args.push(token.clone());
            member.spawn()?;
        }
        for member in &mut members {
            member.ready().await?;
        }
        Ok(members)
    }

    async fn launch(
        extra_args: Vec<String>,
        tls: Option<ServerTls>,
        also: Vec<std::net::IpAddr>,
    ) -> io::Result<Self> {
        // A port picked by binding port 0 is free when picked, not necessarily when etcd binds
        // it: try again with new ports when etcd cannot start.
        let mut last_error = None;
        for _ in 0..3 {
            let (client_port, peer_port) = free_ports()?;
            let mut etcd = Self {
                dir: tempfile::Builder::new()
                    .prefix("probe-etcd-test")
                    .tempdir()?,
                client_port,
                peer_port,
                extra_args: extra_args.clone(),
                tls: tls.clone(),
                also: also.clone(),
                name: NAME.to_owned(),
                peers: None,
                child: None,
            };
            match etcd.run().await {
                Ok(()) => return Ok(etcd),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    /// The client URL, `http://127.0.0.1:<port>` (`https` with TLS).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The data directory, kept across [`restart`](Self::restart)s.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// etcd's own log (stdout and stderr of every run).
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// A new client of this etcd.
    ///
    /// # Errors
    /// The client's, for an endpoint that cannot be parsed (never, in practice).
    pub async fn client(&self) -> Result<etcd_client::Client, etcd_client::Error> {
        etcd_client::Client::connect([self.endpoint()], self.client_options()).await
    }

    fn client_options(&self) -> Option<etcd_client::ConnectOptions> {
        let tls = self.tls.as_ref()?;
        Some(etcd_client::ConnectOptions::new().with_tls(tls.client.clone()))
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills etcd with SIGKILL (a crash: no graceful shutdown) and reaps it. The data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fails only when it already exited, which is the goal.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data directory and ports (killing it first if it still
    /// runs) and waits until it serves requests.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.run().await
    }

    async fn run(&mut self) -> io::Result<()> {
        self.spawn()?;
        self.ready().await
    }

    /// Waits until this member answers; kills it (with its log in the error) when it does not.
    async fn ready(&mut self) -> io::Result<()> {
        match self.wait_ready().await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.kill();
                Err(io::Error::new(
                    e.kind(),
                    format!("{e}; etcd log:\n{}", self.log_tail()),
                ))
            }
        }
    }

    fn spawn(&mut self) -> io::Result<()> {
        let program = std::env::var_os("PROBE_ETCD_BIN").unwrap_or_else(|| "etcd".into());
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())?;
        let client_url = self.endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new(&program);
        command
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!(
                "--listen-client-urls={}",
                std::iter::once(client_url.clone())
                    .chain(self.also.iter().map(|a| self.endpoint_on(*a)))
                    .collect::<Vec<_>>()
                    .join(",")
            ))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!(
                "--initial-cluster={}",
                self.peers
                    .clone()
                    .unwrap_or_else(|| format!("{}={peer_url}", self.name))
            ))
            .arg("--initial-cluster-state=new")
            .arg(format!("--initial-cluster-token={NAME}-{}", self.peer_port))
            .args(&self.extra_args)
            .args(self.tls.iter().flat_map(|tls| {
                let mut flags = vec![
                    format!("--cert-file={}", tls.cert_file.display()),
                    format!("--key-file={}", tls.key_file.display()),
                ];
                if let Some(ca) = &tls.client_ca_file {
                    flags.push(format!("--trusted-ca-file={}", ca.display()));
                    flags.push("--client-cert-auth".to_owned());
                }
                flags
            }))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Hermetic: no ETCD_* setting from the environment (etcd reads its flags from there too).
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        let child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run {}: {e} (scripts/setup installs Debian's etcd-server)",
                    Path::new(&program).display()
                ),
            )
        })?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls a read until it succeeds, the process exits, or the deadline passes.
    async fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + READY_WITHIN;
        let endpoint = self.endpoint();
        let options = self.client_options();
        loop {
            if !self.is_running() {
                return Err(io::Error::other("etcd exited during start-up"));
            }
            let attempt = async {
                let mut client =
                    etcd_client::Client::connect([endpoint.as_str()], options.clone()).await?;
                client.get("probe-etcd-test-ready", None).await
            };
            match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(_)) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(PROBE_PAUSE).await;
                }
                Ok(Err(e)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("etcd at {endpoint} not ready within {READY_WITHIN:?}: {e}"),
                    ));
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("etcd at {endpoint} not ready within {READY_WITHIN:?}"),
                    ));
                }
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = File::open(self.log_file())
            .and_then(|mut f| {
                let mut s = String::new();
                io::Read::read_to_string(&mut f, &mut s).map(|_| s)
            })
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Debug for TestEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEtcd")
            .field("endpoint", &self.endpoint())
            .field("dir", &self.dir.path())
            .field("running", &self.child.is_some())
            .finish()
    }
}

/// Two distinct free loopback ports: both listeners are open at once, so they differ.
fn free_ports() -> io::Result<(u16, u16)> {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

/// Waits until the value in `rx` satisfies `predicate` and returns a clone of it: the way tests
/// synchronise with a watched source (an etcd source's snapshots), instead of sleeping.
///
/// # Panics
/// When `within` passes first, or the sender is dropped, with the last value in the message;
/// that is the test failing.
pub async fn wait_for<T: Clone + Debug>(
    rx: &mut watch::Receiver<T>,
    within: Duration,
    mut predicate: impl FnMut(&T) -> bool,
) -> T {
    let outcome = tokio::time::timeout(within, async {
        rx.wait_for(|v| predicate(v)).await.map(|v| v.clone())
    })
    .await;
    match outcome {
        Ok(Ok(value)) => value,
        Ok(Err(_)) => panic!("the sender was dropped; last value: {:?}", *rx.borrow()),
        Err(_) => panic!(
            "condition not met within {within:?}; last value: {:?}",
            *rx.borrow()
        ),
    }
}
