//! A real DNS server for tests: dnsmasq on a free loopback port, answering from a hosts file of
//! the test's own, and nothing else (no `/etc/resolv.conf`, no `/etc/hosts`, no upstream).
//!
//! Tests that resolve a name outside `/etc/hosts` must go through one of these: a query must
//! never leave the machine. Names under `.test` that are not in the file get NXDOMAIN
//! (`--local=/test/`); names under `broken.test` are forwarded to a loopback socket that never
//! answers, so they time out while every other name resolves: one broken zone.
//!
//! [`DnsServer::pause`] stops the process (SIGSTOP), so that every query times out, as with a
//! resolver that hangs; [`DnsServer::resume`] lets it go on. [`DnsServer::start_with`] adds
//! records of other types, for the DNS probe's tests. Shared by the library's tests
//! (`crates/probe/tests/`), the workspace's and the daemon's, through `#[path]`.

#![allow(dead_code)] // Each test file uses a different part.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use probe::tier::resolve::{Names, Resolver, ResolverConfig};

/// A running dnsmasq; stopped when dropped.
pub struct DnsServer {
    child: Child,
    /// Where it listens, over UDP and TCP.
    pub addr: SocketAddr,
    hosts: PathBuf,
    /// The silent upstream of `broken.test`: bound, never read.
    _silent: UdpSocket,
    _dir: tempfile::TempDir,
}

/// Per query: short, so that a test on a silent server takes a fraction of a second per lookup.
pub const QUERY_TIMEOUT: Duration = Duration::from_millis(100);

impl DnsServer {
    /// Starts dnsmasq answering `names` (each with its address) and NXDOMAIN for other `.test`
    /// names; returns once it accepts connections.
    pub fn start(names: &[(&str, IpAddr)]) -> Self {
        Self::start_with(names, &[])
    }

    /// [`DnsServer::start`] with more dnsmasq options, for records a hosts file cannot hold:
    /// `--txt-record=`, `--mx-host=`, `--srv-host=`, `--cname=`, `--host-record=`,
    /// `--ptr-record=`.
    pub fn start_with(names: &[(&str, IpAddr)], records: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let hosts = dir.path().join("hosts");
        write_hosts(&hosts, names);
        let silent = UdpSocket::bind("127.0.0.1:0").expect("silent socket");
        let silent_port = silent.local_addr().unwrap().port();
        // A port free for both UDP and TCP, released just before dnsmasq binds it. Another
        // test may take it in between (dnsmasq then exits): start again on another port.
        for _ in 0..5 {
            let port = loop {
                let udp = UdpSocket::bind("127.0.0.1:0").expect("udp port");
                let port = udp.local_addr().unwrap().port();
                if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                    break port;
                }
            };
            let mut child = Command::new("dnsmasq")
                .args([
                    "--keep-in-foreground",
                    "--no-resolv",
                    "--no-hosts",
                    "--no-poll",
                    "--bind-interfaces",
                    "--listen-address=127.0.0.1",
                    // Root in tests: do not drop to `nobody`, who cannot read the temp dir.
                    "--user=root",
                    "--pid-file=",
                    "--log-facility=/dev/null",
                    "--local=/test/",
                ])
                .arg(format!("--server=/broken.test/127.0.0.1#{silent_port}"))
                .arg(format!("--port={port}"))
                .arg(format!("--addn-hosts={}", hosts.display()))
                .args(records)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("dnsmasq is installed (apt-get install dnsmasq)");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            if answers(&mut child, addr) {
                return Self {
                    child,
                    addr,
                    hosts,
                    _silent: silent,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("dnsmasq did not start on a free port in 5 tries");
    }

    /// The resolver settings that ask only this server, with short timeouts and one attempt.
    pub fn config(&self) -> ResolverConfig {
        ResolverConfig {
            servers: Some(vec![self.addr]),
            timeout: Some(QUERY_TIMEOUT),
            attempts: Some(1),
            ..ResolverConfig::default()
        }
    }

    /// A resolver that asks only this server.
    pub fn resolver(&self) -> Arc<Resolver> {
        Arc::new(Resolver::new(self.config()).expect("resolver"))
    }

    /// A probe's view of a resolver that asks only this server, with `stale_for`.
    pub fn names(&self, stale_for: Duration) -> Names {
        Names::new(self.resolver(), stale_for)
    }

    /// Replaces the names it answers (dnsmasq re-reads the file on SIGHUP).
    pub fn set_names(&self, names: &[(&str, IpAddr)]) {
        write_hosts(&self.hosts, names);
        self.signal("HUP");
    }

    /// Stops the process: queries go unanswered until [`DnsServer::resume`].
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server answer again.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} failed");
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_hosts(path: &std::path::Path, names: &[(&str, IpAddr)]) {
    let mut text = String::new();
    for (name, ip) in names {
        writeln!(text, "{ip} {name}").unwrap();
    }
    std::fs::write(path, text).expect("hosts file");
}

/// Whether the dnsmasq in `child` answers a query over UDP at `addr` and accepts TCP there:
/// ready, and not some other process that took the port. `false` once it has exited.
fn answers(child: &mut Child, addr: SocketAddr) -> bool {
    // A query for `ready.test A`, id 0x5eed: any answer (NXDOMAIN) comes from the server.
    const QUERY: &[u8] =
        b"\x5e\xed\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05ready\x04test\x00\x00\x01\x00\x01";
    let socket = UdpSocket::bind("127.0.0.1:0").expect("udp socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    for _ in 0..200 {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        let mut reply = [0u8; 512];
        let answered = socket.send_to(QUERY, addr).is_ok()
            && matches!(socket.recv_from(&mut reply), Ok((n, from)) if from == addr && n >= 2 && reply[..2] == QUERY[..2]);
        if answered && TcpStream::connect_timeout(&addr, Duration::from_millis(50)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}
