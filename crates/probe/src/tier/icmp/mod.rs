//! The ICMP tier: echo requests (ping) to a host, and its echo replies.
//!
//! # Sockets
//! Two kinds of socket can ping on Linux, and the process uses one, decided once
//! ([`sockets`]), since what the system allows is a fact of the process rather than of a target:
//! - **datagram ICMP sockets** (`SOCK_DGRAM`, `IPPROTO_ICMP`/`IPPROTO_ICMPV6`), allowed to the
//!   groups in `net.ipv4.ping_group_range` (for IPv6 too) and needing no privilege. The kernel
//!   sets the echo's identifier and hands each socket only the replies to its own echoes. They
//!   are preferred: least privilege.
//! - **raw sockets** (`SOCK_RAW`), with `CAP_NET_RAW`, when datagram sockets are not allowed. A
//!   raw socket sees every ICMP packet from its peer, so replies are matched by identifier
//!   (one per run) and sequence; IPv4 ones come with their IP header, which is skipped.
//!
//! The echo is built here: the 8-byte header and the payload. The ICMPv4 checksum is computed
//! here (the kernel recomputes it on datagram sockets); the ICMPv6 one is the kernel's on both
//! kinds, since it covers the IPv6 pseudo-header.
//!
//! # A run
//! Each run has a socket of its own, connected to the host: the kernel then delivers only that
//! host's packets to it, and reports on it what it learns about the path. `count` echoes are
//! sent, spread over the first half of the timeout (at most [`MAX_SPACING`] apart), so that the
//! last one still has half the timeout to come back; the run ends when every echo is answered
//! or at the deadline. It passes when at least one echo came back; the share that did not, and
//! the average round trip, are for [`IcmpDegradedIf`] to judge.
//!
//! No reply at all fails as `timeout`. An error on the socket ends the run: no route to the
//! host (from the connect or a send), or a destination-unreachable the kernel reports on a
//! connected socket (administratively prohibited, for one) fails as `unreachable` when no
//! echo had come back; resource errors are the engine's (`exhausted`). A socket the system does
//! not allow fails as `io`, saying so.

pub(crate) mod spec;

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use std::os::fd::AsRawFd as _;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::time::{Instant, sleep_until};

use crate::outcome::{
    CheckResult, Failure, FailureReason, IcmpObserved, Observed, Remarks, Verdict,
};
use crate::tier::lookup;
use crate::tier::probe::Probe;
use crate::tier::resolve::Names;
use crate::tier::udp::pending_error;
pub use spec::{
    DEFAULT_SIZE, IcmpDegradedIf, IcmpHost, IcmpSpec, InvalidHost, InvalidIcmp, MAX_COUNT, MAX_SIZE,
};

/// The longest wait between two echoes of one run. `ping` waits a second; a probe has a timeout
/// to keep, and spacing only needs to keep the echoes from leaving as one burst.
pub const MAX_SPACING: Duration = Duration::from_millis(25);

/// The ICMP header: type, code, checksum, identifier, sequence.
const HEADER: usize = 8;
/// The longest IPv4 header a raw socket's packet can start with.
const MAX_IPV4_HEADER: usize = 60;

/// Which kind of socket sends the echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// Datagram ICMP sockets, allowed by `net.ipv4.ping_group_range`.
    Datagram,
    /// Raw sockets, which need `CAP_NET_RAW`.
    Raw,
}

/// What this process pings with, as [`sockets`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IcmpSockets {
    /// Datagram sockets; what allows them (`ping_group_range allows gid 1000`).
    Datagram(String),
    /// Raw sockets: datagram ones are not allowed, and the process has `CAP_NET_RAW`.
    Raw,
    /// Neither: why not, for each kind.
    Unavailable(String),
}

impl IcmpSockets {
    /// The kind of socket probes use; `None` when neither is allowed.
    pub fn flavour(&self) -> Option<Flavour> {
        match self {
            Self::Datagram(_) => Some(Flavour::Datagram),
            Self::Raw => Some(Flavour::Raw),
            Self::Unavailable(_) => None,
        }
    }
}

impl fmt::Display for IcmpSockets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Datagram(why) => write!(f, "using datagram sockets ({why})"),
            Self::Raw => f.write_str("using raw sockets (CAP_NET_RAW)"),
            Self::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// The sockets this process pings with, decided on first use by trying them: datagram sockets
/// first, then raw ones. A daemon calls it at start, to say which in its log.
pub fn sockets() -> &'static IcmpSockets {
    static SOCKETS: OnceLock<IcmpSockets> = OnceLock::new();
    SOCKETS.get_or_init(detect)
}

fn detect() -> IcmpSockets {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
        .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    let datagram = match Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4)) {
        Ok(_) => {
            let why = allowed_group(&range).map_or_else(
                || format!("ping_group_range is {range}"),
                |gid| format!("ping_group_range allows gid {gid}"),
            );
            return IcmpSockets::Datagram(why);
        }
        Err(e) => e,
    };
    match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)) {
        Ok(_) => IcmpSockets::Raw,
        Err(raw) => IcmpSockets::Unavailable(format!(
            "datagram sockets: {datagram} (net.ipv4.ping_group_range is {range}); raw sockets: \
             {raw} (they need CAP_NET_RAW)"
        )),
    }
}

/// The process's first group (effective, then supplementary) within `range` (`"LOW HIGH"`).
fn allowed_group(range: &str) -> Option<u32> {
    let mut bounds = range.split(' ').map(str::parse::<u32>);
    let (Some(Ok(low)), Some(Ok(high))) = (bounds.next(), bounds.next()) else {
        return None;
    };
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().filter_map(|g| g.parse::<u32>().ok()))
    };
    // `Gid:` is real, effective, saved and filesystem; the kernel checks the effective one.
    let effective = field("Gid:")?.nth(1);
    effective
        .into_iter()
        .chain(field("Groups:").into_iter().flatten())
        .find(|gid| (low..=high).contains(gid))
}

/// Identifiers for raw sockets' echoes, one per run: the kernel gives datagram sockets theirs,
/// but a raw socket receives every reply from its host, including those to other runs.
/// Counting from a random start keeps concurrent runs (and other processes' pings) apart.
static NEXT_ID: LazyLock<AtomicU16> = LazyLock::new(|| AtomicU16::new(rand::random()));

/// Pings a host as its [`IcmpSpec`] says.
#[derive(Clone, Debug)]
pub struct IcmpProbe {
    spec: IcmpSpec,
    names: Names,
    flavour: Option<Flavour>,
}

/// How the echoes of one run went.
#[derive(Default)]
struct Tally {
    answered: u16,
    round_trips: Duration,
    /// The TTL (hop limit) of the first reply, when the kernel told it.
    hop_limit: Option<u8>,
    /// The socket error that ended the run early.
    error: Option<Failure>,
}

impl IcmpProbe {
    /// A probe for `spec`, resolving a host name through `names`, with the process's sockets
    /// ([`sockets`]).
    pub fn new(spec: IcmpSpec, names: Names) -> Self {
        Self {
            spec,
            names,
            flavour: None,
        }
    }

    /// Uses `flavour` sockets rather than the process's choice: for a caller that knows better,
    /// such as a test of each kind.
    #[must_use]
    pub fn with_flavour(mut self, flavour: Flavour) -> Self {
        self.flavour = Some(flavour);
        self
    }

    /// One run; `observed` gets the address pinged and the phases' times as they are known.
    async fn run(
        &self,
        timeout: Duration,
        remarks: &mut Remarks,
        observed: &mut Observed,
    ) -> Result<Verdict, Failure> {
        let deadline = Instant::now() + timeout;
        let flavour = match self.flavour {
            Some(flavour) => flavour,
            None => sockets().flavour().ok_or_else(|| {
                Failure::new(FailureReason::Io, format_args!("icmp {}", sockets()))
            })?,
        };
        let ips: Arc<[IpAddr]> = match &self.spec.host {
            IcmpHost::Ip(ip) => Arc::new([*ip]),
            IcmpHost::Name(name) => lookup::addresses(&self.names, name, deadline, remarks).await?,
        };
        let opening = Instant::now();
        let (ip, socket) = open_any(&ips, flavour)?;
        let setup = opening.elapsed();
        observed.addr = Some(ip);
        let tally = self.exchange(ip, &socket, flavour, deadline, timeout).await;
        observed.icmp = Some(IcmpObserved {
            setup,
            rtt: tally
                .round_trips
                .checked_div(u32::from(tally.answered))
                .unwrap_or_default(),
            hop_limit: tally.hop_limit,
        });
        self.judge(ip, tally)
    }

    /// Sends the echoes and collects their replies until all are in, an error ends the run, or
    /// the deadline passes.
    async fn exchange(
        &self,
        ip: IpAddr,
        socket: &UdpSocket,
        flavour: Flavour,
        deadline: Instant,
        timeout: Duration,
    ) -> Tally {
        let count = self.spec.count();
        let spacing = (timeout / (2 * u32::from(count))).min(MAX_SPACING);
        let id = match flavour {
            Flavour::Raw => NEXT_ID.fetch_add(1, Ordering::Relaxed),
            // The kernel overwrites it with the socket's own.
            Flavour::Datagram => 0,
        };
        // On the heap, like everything sized by the spec: a probe's future stays small.
        let payload: Vec<u8> = (0..self.spec.size()).map(|i| i as u8).collect();
        let mut packet = Vec::with_capacity(HEADER + payload.len());
        let mut buf = vec![0; MAX_IPV4_HEADER + HEADER + payload.len()];
        let mut control = nix::cmsg_space!(libc::c_int);
        let mut sent_at: Vec<Option<Instant>> = Vec::with_capacity(usize::from(count));
        let mut tally = Tally::default();
        let mut next_send = Instant::now();
        while sent_at.len() < usize::from(count) || tally.answered < count {
            tokio::select! {
                biased;
                () = sleep_until(deadline) => break,
                // What the kernel learnt about the path (the socket's pending error) shows as
                // an error readiness, not a readable one.
                ready = socket.ready(Interest::READABLE | Interest::ERROR) => {
                    let ready = match ready {
                        Ok(ready) => ready,
                        Err(e) => {
                            tally.error = Some(Failure::io("receive", &e));
                            break;
                        }
                    };
                    if ready.is_error()
                        && let Some(e) = pending_error(socket)
                    {
                        tally.error = Some(Failure::io(&format!("from {ip}"), &e));
                        break;
                    }
                    if !ready.is_readable() {
                        continue;
                    }
                    match socket.try_io(Interest::READABLE, || receive(socket, &mut buf, &mut control)) {
                        // Stale readiness, which tokio has now cleared.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            tally.error = Some(Failure::io(&format!("from {ip}"), &e));
                            break;
                        }
                        Ok((n, hop_limit)) => {
                            let seq = echo_reply(&buf[..n], ip.is_ipv6(), flavour, id);
                            // A duplicate, or a reply to an echo of another run, is no answer.
                            if let Some(at) = seq
                                .and_then(|seq| sent_at.get_mut(usize::from(seq)))
                                .and_then(Option::take)
                            {
                                tally.answered += 1;
                                tally.round_trips += at.elapsed();
                                tally.hop_limit = tally.hop_limit.or(hop_limit);
                            }
                        }
                    }
                }
                () = sleep_until(next_send), if sent_at.len() < usize::from(count) => {
                    // At most MAX_COUNT echoes: the index fits.
                    let seq = sent_at.len() as u16;
                    echo_request(&mut packet, ip.is_ipv6(), id, seq, &payload);
                    match socket.try_send(&packet) {
                        Ok(_) => {
                            sent_at.push(Some(Instant::now()));
                            next_send += spacing;
                        }
                        // The send buffer is full: the next try will tell.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            next_send = Instant::now() + Duration::from_millis(1);
                        }
                        Err(e) => {
                            tally.error = Some(Failure::io(&format!("send to {ip}"), &e));
                            break;
                        }
                    }
                }
            }
        }
        tally
    }

    /// Passes when an echo came back, degraded by what [`IcmpDegradedIf`] says of the rest.
    fn judge(&self, ip: IpAddr, tally: Tally) -> Result<Verdict, Failure> {
        let count = self.spec.count();
        if tally.answered == 0 {
            return Err(tally.error.unwrap_or_else(|| {
                let detail = if count == 1 {
                    format!("no echo reply from {ip} in time")
                } else {
                    format!("none of {count} echoes to {ip} answered in time")
                };
                Failure::new(FailureReason::Timeout, detail)
            }));
        }
        let mut reasons = Vec::new();
        let degraded_if = self.spec.degraded_if();
        let lost = count - tally.answered;
        let loss = f64::from(lost) / f64::from(count);
        if let Some(limit) = degraded_if.loss_over
            && loss > limit
        {
            reasons.push(format!(
                "lost {lost} of {count} echoes ({}), over {}",
                percent(loss),
                percent(limit)
            ));
        }
        let average = tally.round_trips / u32::from(tally.answered);
        if let Some(limit) = degraded_if.latency_over
            && average > limit
        {
            reasons.push(format!(
                "average round trip {:.1}ms over {}",
                average.as_secs_f64() * 1000.0,
                humantime::format_duration(limit)
            ));
        }
        Ok(if reasons.is_empty() {
            Verdict::Up
        } else {
            Verdict::Degraded(reasons)
        })
    }
}

/// `0.2` as `20%`, `0.125` as `12.5%`.
fn percent(fraction: f64) -> String {
    format!("{}%", (fraction * 1000.0).round() / 10.0)
}

/// A socket connected to the first address that has a route, in resolver order.
fn open_any(ips: &[IpAddr], flavour: Flavour) -> Result<(IpAddr, UdpSocket), Failure> {
    let mut last = None;
    for ip in ips {
        match open(*ip, flavour) {
            Ok(socket) => return Ok((*ip, socket)),
            Err(e) => {
                let failure = Failure::io(&format!("connect to {ip}"), &e);
                // The engine's own shortage: the next address would meet it too.
                if matches!(failure.reason, FailureReason::Exhausted(_)) {
                    return Err(failure);
                }
                last = Some(failure);
            }
        }
    }
    Err(last.unwrap_or_else(|| Failure::new(FailureReason::Dns, "no address to ping")))
}

/// A non-blocking ICMP socket of `flavour`, connected to `ip` (which looks up its route: no
/// route fails here, as `ENETUNREACH`).
///
/// It is registered with tokio as a `UdpSocket`: tokio has no ICMP socket, its generic
/// `AsyncFd` needs `unsafe` to register a descriptor, and the only calls made on it are
/// `send` and `recv` on a connected datagram socket, which mean the same for every protocol.
fn open(ip: IpAddr, flavour: Flavour) -> io::Result<UdpSocket> {
    let (domain, protocol) = match ip {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6),
    };
    let kind = match flavour {
        Flavour::Datagram => Type::DGRAM,
        Flavour::Raw => Type::RAW,
    };
    let socket = Socket::new(domain, kind.nonblocking().cloexec(), Some(protocol))?;
    socket.connect(&SocketAddr::new(ip, 0).into())?;
    // Each reply then comes with its TTL (hop limit); without it a reply only lacks that.
    let _ = match ip {
        IpAddr::V4(_) => setsockopt(&socket, sockopt::Ipv4RecvTtl, &true),
        IpAddr::V6(_) => setsockopt(&socket, sockopt::Ipv6RecvHopLimit, &true),
    };
    UdpSocket::from_std(socket.into())
}

/// One datagram into `buf`: its length, and the TTL (hop limit) it arrived with when the kernel
/// passed it in `control`.
fn receive(
    socket: &UdpSocket,
    buf: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, Option<u8>)> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(control),
        MsgFlags::empty(),
    )?;
    let hop_limit = message.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|cmsg| match cmsg {
            ControlMessageOwned::Ipv4Ttl(ttl) | ControlMessageOwned::Ipv6HopLimit(ttl) => {
                u8::try_from(ttl).ok()
            }
            _ => None,
        })
    });
    Ok((message.bytes, hop_limit))
}

/// Writes an echo request into `packet`: type 8 (ICMPv4) or 128 (ICMPv6), code 0, the
/// checksum, `id`, `seq`, then `payload`.
fn echo_request(packet: &mut Vec<u8>, v6: bool, id: u16, seq: u16, payload: &[u8]) {
    packet.clear();
    packet.push(if v6 { 128 } else { 8 });
    packet.push(0);
    packet.extend_from_slice(&[0, 0]);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(payload);
    if !v6 {
        let sum = checksum(packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The Internet checksum (RFC 1071): the ones' complement of the ones' complement sum of the
/// 16-bit words, an odd last byte padded with zero.
fn checksum(data: &[u8]) -> u16 {
    let mut words = data.chunks_exact(2);
    // At most MAX_SIZE / 2 words of at most 0xffff each: no overflow in 64 bits.
    let mut sum: u64 = (&mut words)
        .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    // Folded into 16 bits above.
    !(sum as u16)
}

/// The sequence number of an echo reply in `packet` (as received), if it is one to this run:
/// type 0 (ICMPv4) or 129 (ICMPv6), and on a raw socket, this run's `id`.
fn echo_reply(packet: &[u8], v6: bool, flavour: Flavour, id: u16) -> Option<u16> {
    let icmp = if !v6 && flavour == Flavour::Raw {
        // A raw IPv4 socket's packet starts with the IP header, of IHL 32-bit words.
        let header = usize::from(packet.first()? & 0x0f) * 4;
        packet.get(header..)?
    } else {
        packet
    };
    let reply = if v6 { 129 } else { 0 };
    match *icmp {
        [kind, 0, _, _, id_hi, id_lo, seq_hi, seq_lo, ..]
            if kind == reply
                && (flavour == Flavour::Datagram || u16::from_be_bytes([id_hi, id_lo]) == id) =>
        {
            Some(u16::from_be_bytes([seq_hi, seq_lo]))
        }
        _ => None,
    }
}

#[async_trait::async_trait]
impl Probe for IcmpProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        self.observe(timeout).await.0
    }

    async fn observe(&self, timeout: Duration) -> (CheckResult, Observed) {
        let mut remarks = Remarks::default();
        let mut observed = Observed::default();
        let mut result = match self.run(timeout, &mut remarks, &mut observed).await {
            Ok(verdict) => CheckResult {
                verdict,
                ..CheckResult::up()
            },
            Err(failure) => CheckResult::failed(failure),
        };
        result.remarks = remarks;
        (result, observed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_requests_carry_a_valid_checksum() {
        let mut packet = Vec::new();
        echo_request(&mut packet, false, 0x1234, 7, b"abc");
        assert_eq!(&packet[..2], &[8, 0]);
        assert_eq!(&packet[4..8], &[0x12, 0x34, 0, 7]);
        // Summing a packet with its checksum in place gives zero.
        assert_eq!(checksum(&packet), 0);
        echo_request(&mut packet, true, 1, 2, b"");
        assert_eq!(packet, [128, 0, 0, 0, 0, 1, 0, 2]);
    }

    #[test]
    fn replies_are_matched_by_type_identifier_and_sequence() {
        let reply = [0, 0, 0, 0, 0x12, 0x34, 0, 9, 1, 2];
        assert_eq!(echo_reply(&reply, false, Flavour::Datagram, 0), Some(9));
        // A raw IPv4 socket's packet: a 20-byte IP header first.
        let mut raw = vec![0x45];
        raw.resize(20, 0);
        raw.extend_from_slice(&reply);
        assert_eq!(echo_reply(&raw, false, Flavour::Raw, 0x1234), Some(9));
        assert_eq!(echo_reply(&raw, false, Flavour::Raw, 0x1235), None);
        // Our own echo request, looped back, is not a reply.
        let mut request = raw.clone();
        request[20] = 8;
        assert_eq!(echo_reply(&request, false, Flavour::Raw, 0x1234), None);
        let v6 = [129, 0, 0, 0, 0, 1, 0, 3];
        assert_eq!(echo_reply(&v6, true, Flavour::Raw, 1), Some(3));
        assert_eq!(echo_reply(&v6[..7], true, Flavour::Raw, 1), None);
    }

    #[test]
    fn loss_reads_as_a_percentage() {
        assert_eq!(percent(0.2), "20%");
        assert_eq!(percent(0.125), "12.5%");
        assert_eq!(percent(0.0), "0%");
    }
}
