//! [`Netns`]: a network namespace with a veth pair to the root namespace, nftables faults inside
//! it, and sockets bound in it by the test process itself.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nix::sched::CloneFlags;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The private range the namespaces' addresses come from. It is routed nowhere: each /30 of it
/// exists only on one veth pair while its [`Netns`] lives.
const RANGE: [u8; 2] = [10, 213];
/// How many /30 subnets the range holds.
const SUBNETS: u32 = 1 << 14;
/// The prefix of every name the fixture gives (namespace `pe<pid>n<k>`, veth ends `...h` in the
/// root namespace and `...p` inside), which is how stale ones are recognised.
const PREFIX: &str = "pe";
/// The nftables table that holds the faults, inside the namespace (so it dies with it).
const TABLE: &str = "inet faults";
/// `CAP_NET_ADMIN` (links, addresses, nftables) and `CAP_SYS_ADMIN` (`ip netns add` mounts the
/// namespace; `setns(2)` needs it too), as bit numbers of `CapEff`.
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Makes each namespace's name unique within the process; the pid makes it unique on the host.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Why a [`Netns`] could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// This machine cannot run network-fault tests (not root, or a tool is missing): the test
    /// should be skipped, saying why ([`netns_or_skip!`](crate::netns_or_skip)).
    #[error("{0}")]
    Skip(String),
    /// A command failed; `stderr` is what it said (nft's own error, with the offending rule).
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A system call or a command that could not be started.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A request the fixture refuses (a loss rate above 100%, a partition that could route
    /// traffic off the machine).
    #[error("{0}")]
    Invalid(String),
}

impl NetnsError {
    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

/// Creates a [`Netns`](crate::Netns), or prints `SKIPPED: <why>` and returns from the
/// calling test when this machine cannot (not root, `ip` or `nft` missing). Any other failure
/// panics. Usable in tests that return `()`.
#[macro_export]
macro_rules! netns_or_skip {
    () => {
        match $crate::Netns::new() {
            Ok(netns) => netns,
            Err($crate::NetnsError::Skip(why)) => {
                $crate::skipped_outside_ci(&why);
                return;
            }
            Err(e) => panic!("could not create a network namespace: {e}"),
        }
    };
}

/// A network namespace joined to the root namespace by a veth pair, with a /30 of its own from
/// 10.213.0.0/16: [`host_addr`](Self::host_addr) on the root side, [`addr`](Self::addr) inside.
/// Listeners bound inside ([`tcp_listener`](Self::tcp_listener)) are reached from the root
/// namespace at `addr`, through the faults set with [`loss_syn`](Self::loss_syn),
/// [`loss_data`](Self::loss_data), [`blackhole_port`](Self::blackhole_port) and
/// [`partition`](Self::partition).
///
/// Dropping it deletes the veth pair and the namespace, with its nftables table. Sockets bound
/// inside keep the namespace itself alive until they are closed, which is why the root side of
/// the veth is deleted explicitly rather than left to the namespace's end.
#[derive(Debug)]
pub struct Netns {
    name: String,
    host_if: String,
    peer_if: String,
    host_addr: Ipv4Addr,
    addr: Ipv4Addr,
}

impl Netns {
    /// Creates the namespace, its veth pair and addresses, brings both ends and the namespace's
    /// loopback up, and installs the (empty) fault table.
    ///
    /// Namespaces this fixture left behind in processes that no longer run (killed before their
    /// drop) are removed first.
    ///
    /// # Errors
    /// [`NetnsError::Skip`] when the process lacks CAP_NET_ADMIN or CAP_SYS_ADMIN or `ip` or
    /// `nft` is missing; any other error when a step fails (what was made is removed again).
    pub fn new() -> Result<Self, NetnsError> {
        preflight()?;
        remove_stale();
        let pid = std::process::id();
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{pid}n{k}");
        let (host_addr, addr) = free_subnet(pid, k)?;
        // Built before the first command: from here on, a failed step's drop removes what the
        // steps before it made.
        let netns = Self {
            host_if: format!("{name}h"),
            peer_if: format!("{name}p"),
            name,
            host_addr,
            addr,
        };
        let (name, host, peer) = (&netns.name, &netns.host_if, &netns.peer_if);
        run("ip", &["netns", "add", name])?;
        run(
            "ip",
            &[
                "link", "add", host, "type", "veth", "peer", "name", peer, "netns", name,
            ],
        )?;
        // IPv4 only: no router solicitations or other IPv6 chatter on the pair. (Best effort: a
        // kernel without IPv6 has nothing to turn off.)
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6"), "1");
        run(
            "ip",
            &["addr", "add", &format!("{host_addr}/30"), "dev", host],
        )?;
        run("ip", &["link", "set", host, "up"])?;
        run(
            "ip",
            &[
                "-n",
                name,
                "addr",
                "add",
                &format!("{addr}/30"),
                "dev",
                peer,
            ],
        )?;
        run("ip", &["-n", name, "link", "set", peer, "up"])?;
        run("ip", &["-n", name, "link", "set", "lo", "up"])?;
        netns.nft(&format!(
            "table {TABLE} {{\n\
             \tchain syn_loss {{}}\n\
             \tchain data_loss {{}}\n\
             \tchain blackhole {{}}\n\
             \tchain input {{ type filter hook input priority 0; policy accept; \
             jump syn_loss; jump data_loss; jump blackhole; }}\n\
             \tchain output {{ type filter hook output priority 0; policy accept; \
             jump data_loss; }}\n\
             }}\n"
        ))?;
        Ok(netns)
    }

    /// The namespace's name (as `ip netns` lists it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address inside the namespace, where its listeners are reached.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The address of the root namespace's end of the veth pair: the source of connections
    /// from the root namespace.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The name of the veth end in the root namespace.
    pub fn host_interface(&self) -> &str {
        &self.host_if
    }

    /// Runs `f` on a new thread that has entered the namespace (`setns(2)`), and returns what it
    /// returned. A socket keeps the namespace it was created in for its whole life, so sockets
    /// made by `f` can be used from any thread afterwards; the thread ends with `f`, so the
    /// caller's threads never change namespace.
    ///
    /// # Errors
    /// When the namespace cannot be entered, or `f` fails or panics.
    pub fn in_namespace<T, F>(&self, f: F) -> Result<T, NetnsError>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let path = Path::new("/run/netns").join(&self.name);
        let ns =
            File::open(&path).map_err(NetnsError::io(format!("opening {}", path.display())))?;
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(move || {
                nix::sched::setns(ns, CloneFlags::CLONE_NEWNET)
                    .map_err(|e| NetnsError::io(format!("setns into {name}"))(e.into()))?;
                f().map_err(NetnsError::io(format!("in namespace {name}")))
            })
            .map_err(NetnsError::io("spawning a thread for setns"))?
            .join()
            .map_err(|_| NetnsError::Invalid("the closure run in the namespace panicked".into()))?
    }

    /// A TCP listener bound to [`addr`](Self::addr) on a free port, inside the namespace.
    ///
    /// # Errors
    /// As [`in_namespace`](Self::in_namespace).
    pub fn tcp_listener(&self) -> Result<TcpListener, NetnsError> {
        self.tcp_listener_on(0)
    }

    /// A TCP listener bound to [`addr`](Self::addr) and `port`, inside the namespace.
    ///
    /// # Errors
    /// As [`in_namespace`](Self::in_namespace).
    pub fn tcp_listener_on(&self, port: u16) -> Result<TcpListener, NetnsError> {
        let addr = self.addr;
        self.in_namespace(move || TcpListener::bind((addr, port)))
    }

    /// A UDP socket bound to [`addr`](Self::addr) on a free port, inside the namespace.
    ///
    /// # Errors
    /// As [`in_namespace`](Self::in_namespace).
    pub fn udp_socket(&self) -> Result<UdpSocket, NetnsError> {
        let addr = self.addr;
        self.in_namespace(move || UdpSocket::bind((addr, 0)))
    }

    /// Routes `addr` (an address of the root namespace, such as another namespace's
    /// [`host_addr`](Self::host_addr)) from inside the namespace through its veth, so that a
    /// process inside reaches a server the root namespace holds there. One /32 route: nothing
    /// else leaves the namespace.
    ///
    /// # Errors
    /// `ip`'s error.
    pub fn route_to(&self, addr: Ipv4Addr) -> Result<(), NetnsError> {
        run(
            "ip",
            &[
                "-n",
                &self.name,
                "route",
                "add",
                &format!("{addr}/32"),
                "via",
                &self.host_addr.to_string(),
            ],
        )
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`), e.g. a server whose
    /// traffic the faults should reach. The caller owns the child and must end it.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Applies an nftables script inside the namespace (`nft -f -`), in one transaction: either
    /// every line takes effect or none does. The fault table is `inet faults`.
    ///
    /// # Errors
    /// [`NetnsError::Command`] with nft's standard error when nft rejects the script.
    pub fn nft(&self, script: &str) -> Result<(), NetnsError> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(NetnsError::io("starting nft"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(NetnsError::io("writing the nft script"))?;
        }
        let output = child
            .wait_with_output()
            .map_err(NetnsError::io("waiting for nft"))?;
        check(&format!("nft -f - <<'EOF'\n{script}EOF"), &output)
    }

    /// Drops `percent`% of the TCP SYNs entering the namespace (connection attempts: SYN
    /// without ACK), each independently at random (`numgen random mod 100 < percent`), as a
    /// lossy network would: the connect's first SYN is lost, and the client's retransmission
    /// comes only after its initial RTO of 1 s, past any sub-second probe timeout. Replaces the
    /// previous SYN loss; 0 turns it off.
    ///
    /// # Errors
    /// [`NetnsError::Invalid`] above 100; nft's error otherwise.
    pub fn loss_syn(&self, percent: u8) -> Result<(), NetnsError> {
        self.set_loss("syn_loss", "tcp flags & (syn | ack) == syn", percent)
    }

    /// Drops `percent`% of the TCP data segments in both directions (those with PSH set: Linux
    /// sets it on the last segment of every write, so every small HTTP request and response is
    /// exposed), each independently at random. Connection set-up and pure ACKs pass, so the
    /// connect succeeds and the exchange then waits for TCP's retransmission (200 ms or more).
    /// Replaces the previous data loss; 0 turns it off.
    ///
    /// # Errors
    /// [`NetnsError::Invalid`] above 100; nft's error otherwise.
    pub fn loss_data(&self, percent: u8) -> Result<(), NetnsError> {
        self.set_loss("data_loss", "tcp flags & psh == psh", percent)
    }

    fn set_loss(&self, chain: &str, matches: &str, percent: u8) -> Result<(), NetnsError> {
        if percent > 100 {
            return Err(NetnsError::Invalid(format!(
                "a loss of {percent}% is not a percentage"
            )));
        }
        let mut script = format!("flush chain {TABLE} {chain}\n");
        match percent {
            0 => {}
            // `numgen random mod 100` is 0..=99: `< 100` is out of nft's range for it.
            100 => script.push_str(&format!("add rule {TABLE} {chain} {matches} drop\n")),
            p => script.push_str(&format!(
                "add rule {TABLE} {chain} {matches} numgen random mod 100 < {p} drop\n"
            )),
        }
        self.nft(&script)
    }

    /// Drops everything entering the namespace for `port` (TCP and UDP): SYNs vanish without an
    /// answer, so connects time out as against a host that is gone, instead of being refused.
    /// Adds to the ports already blackholed.
    ///
    /// # Errors
    /// nft's error.
    pub fn blackhole_port(&self, port: u16) -> Result<(), NetnsError> {
        self.nft(&format!(
            "add rule {TABLE} blackhole meta l4proto {{ tcp, udp }} th dport {port} drop\n"
        ))
    }

    /// Removes every fault set with nftables (losses and blackholes); a partition stays until
    /// [`heal`](Self::heal).
    ///
    /// # Errors
    /// nft's error.
    pub fn clear(&self) -> Result<(), NetnsError> {
        self.nft(&format!(
            "flush chain {TABLE} syn_loss\nflush chain {TABLE} data_loss\n\
             flush chain {TABLE} blackhole\n"
        ))
    }

    /// Cuts the link: the namespace's end of the veth goes down, so whatever is sent to it is
    /// dropped and connects time out. The root end stays up, and with it its route to the /30:
    /// taking that end down would remove the route, and the root namespace's default route
    /// would then carry the traffic off the machine. (Once ARP gives up on the namespace's
    /// address, after about 3 s, connects fail with "no route to host" instead, as they do when
    /// a host on a LAN vanishes.)
    ///
    /// # Errors
    /// [`NetnsError::Invalid`] when the root namespace ignores routes over a link without
    /// carrier (`ignore_routes_with_linkdown`), where a partition could route traffic off the
    /// machine; `ip`'s error otherwise.
    pub fn partition(&self) -> Result<(), NetnsError> {
        for conf in ["all", &self.host_if] {
            let path = format!("/proc/sys/net/ipv4/conf/{conf}/ignore_routes_with_linkdown");
            if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() != "0") {
                return Err(NetnsError::Invalid(format!(
                    "{path} is set: with the link down, traffic for {} would take the default \
                     route",
                    self.addr
                )));
            }
        }
        run(
            "ip",
            &["-n", &self.name, "link", "set", &self.peer_if, "down"],
        )
    }

    /// Restores the link cut by [`partition`](Self::partition). The neighbour entries are
    /// flushed too: during the partition ARP went unanswered, and an entry left INCOMPLETE
    /// would hold the first packets after the heal until ARP's next retry, up to a second
    /// later, where a healed link answers at once.
    ///
    /// # Errors
    /// `ip`'s error.
    pub fn heal(&self) -> Result<(), NetnsError> {
        run(
            "ip",
            &["-n", &self.name, "link", "set", &self.peer_if, "up"],
        )?;
        run("ip", &["neigh", "flush", "dev", &self.host_if])?;
        run(
            "ip",
            &["-n", &self.name, "neigh", "flush", "dev", &self.peer_if],
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both. Failures only leave a namespace behind,
        // which the next `Netns::new` of a later process removes as stale.
        if let Err(e) = run("ip", &["link", "del", &self.host_if]) {
            let _ = writeln!(io::stderr(), "netns fixture: {e}");
        }
        if let Err(e) = run("ip", &["netns", "del", &self.name]) {
            let _ = writeln!(io::stderr(), "netns fixture: {e}");
        }
    }
}

/// An accept-and-close TCP server on the current tokio runtime: every connection is accepted
/// and closed at once, which is all a connect probe needs. [`stop`](Self::stop) closes the
/// listener, after which connects are refused.
#[derive(Debug)]
pub struct AcceptServer {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl AcceptServer {
    /// Serves `listener` (for example one from [`Netns::tcp_listener`]). Must be called within
    /// a tokio runtime.
    ///
    /// # Errors
    /// When the listener cannot be made non-blocking or registered with tokio.
    pub fn start(listener: TcpListener) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (accepted, stop) = (accepted.clone(), stop.clone());
            async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        conn = listener.accept() => {
                            // A failed accept (the peer reset while queued) is the peer's loss.
                            if conn.is_ok() {
                                accepted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                // `listener` is dropped here: closed, so later connects are refused.
            }
        });
        Ok(Self {
            addr,
            accepted,
            stop,
            task: Some(task),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections it has accepted.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops serving; when it returns the listener is closed, so connects are refused from then
    /// on (the instant to measure a refusal's detection from).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for AcceptServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The reasons this machine cannot run the fixture, as a [`NetnsError::Skip`].
fn preflight() -> Result<(), NetnsError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(NetnsError::io("reading /proc/self/status"))?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| effective & (1 << cap) != 0;
    if !has(CAP_NET_ADMIN) || !has(CAP_SYS_ADMIN) {
        return Err(NetnsError::Skip(
            "network-fault tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network \
             namespaces"
                .into(),
        ));
    }
    for (tool, arg, package) in [("ip", "-V", "iproute2"), ("nft", "--version", "nftables")] {
        match Command::new(tool).arg(arg).output() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(NetnsError::Skip(format!(
                    "network-fault tests need `{tool}` (Debian package {package}; scripts/setup \
                     installs it)"
                )));
            }
            Err(e) => return Err(NetnsError::io(format!("running {tool} {arg}"))(e)),
        }
    }
    Ok(())
}

/// A /30 of the range that no interface of the root namespace uses, as (root end, namespace
/// end). The search starts at a point mixed from the pid and the counter, so concurrent test
/// processes (each with its own pid) start far apart; the check skips subnets in use by
/// namespaces already there.
fn free_subnet(pid: u32, k: u32) -> Result<(Ipv4Addr, Ipv4Addr), NetnsError> {
    let output = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(NetnsError::io("running ip addr show"))?;
    check("ip -o -4 addr show", &output)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let used: HashSet<Ipv4Addr> = text
        .split_whitespace()
        .filter_map(|w| w.split_once('/').and_then(|(a, _)| a.parse().ok()))
        .collect();
    let start = pid.wrapping_mul(0x9E37_79B1) ^ k.wrapping_mul(0x85EB_CA6B);
    (0..SUBNETS)
        .map(|i| start.wrapping_add(i) % SUBNETS)
        .map(|s| {
            let base = s * 4;
            let [hi, lo] = [(base >> 8) as u8, (base & 0xff) as u8];
            (
                Ipv4Addr::new(RANGE[0], RANGE[1], hi, lo + 1),
                Ipv4Addr::new(RANGE[0], RANGE[1], hi, lo + 2),
            )
        })
        .find(|(host, ns)| !used.contains(host) && !used.contains(ns))
        .ok_or_else(|| NetnsError::Invalid("every /30 of 10.213.0.0/16 is in use".into()))
}

/// Removes the namespaces (and veth pairs) this fixture made in processes that have ended
/// without dropping them (killed by a signal, or aborted).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('n'))
            .filter(|(pid, k)| {
                !pid.is_empty() && pid.bytes().chain(k.bytes()).all(|b| b.is_ascii_digit())
            })
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = run("ip", &["link", "del", &format!("{name}h")]);
        let _ = run("ip", &["netns", "del", &name]);
    }
}

/// Runs a command to completion, failing with its standard error.
fn run(program: &str, args: &[&str]) -> Result<(), NetnsError> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(NetnsError::io(format!("running {program}")))?;
    check(&format!("{program} {}", args.join(" ")), &output)
}

fn check(command: &str, output: &Output) -> Result<(), NetnsError> {
    if output.status.success() {
        return Ok(());
    }
    Err(NetnsError::Command {
        command: command.to_owned(),
        status: output.status.to_string(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}
