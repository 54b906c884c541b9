//! The UDP tier: one datagram to the target, and its reply judged like a TCP reply.
//!
//! The socket is connected (socket2, `SOCK_NONBLOCK | SOCK_CLOEXEC`), for two reasons: the
//! kernel then delivers only the target's datagrams to it, so a stray packet on the port cannot
//! pass the check; and it reports an ICMP port-unreachable for the target as `ECONNREFUSED` on
//! the socket, so a closed port fails at once as `refused` instead of waiting out the timeout.
//! That report arrives as an error on the socket, not as data, so the wait is for readability
//! *or* an error.
//!
//! The first datagram back decides: UDP replies are messages, not a stream, so a reply that does
//! not hold the expectation fails as `body` with what it held. No reply within the timeout fails
//! as `timeout`: the peer is gone, drops the datagram, or does not speak the protocol.

pub(crate) mod spec;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout_at};

use crate::outcome::{CheckResult, Failure, FailureReason, Remarks};
use crate::target::Address;
use crate::tier::lookup;
use crate::tier::probe::Probe;
use crate::tier::reply::mismatch;
use crate::tier::resolve::Names;
pub use spec::{MAX_PAYLOAD, PayloadTooLarge, UdpSpec};

/// The most reply bytes looked at: the largest datagram there is.
const MAX_REPLY: usize = 65_536;

/// Probes a UDP endpoint as its [`UdpSpec`] says.
#[derive(Clone, Debug)]
pub struct UdpProbe {
    spec: UdpSpec,
    names: Names,
}

impl UdpProbe {
    /// A probe for `spec`, resolving a host name through `names`.
    pub fn new(spec: UdpSpec, names: Names) -> Self {
        Self { spec, names }
    }

    async fn run(&self, deadline: Instant, remarks: &mut Remarks) -> Result<(), Failure> {
        let addrs = match &self.spec.address {
            Address::Socket(addr) => vec![*addr],
            Address::Host { host, port } => lookup::addresses(&self.names, host, deadline, remarks)
                .await?
                .iter()
                .map(|ip| SocketAddr::new(*ip, *port))
                .collect(),
        };
        let socket = self.send_any(&addrs)?;
        self.await_reply(&socket, deadline).await
    }

    /// Sends the payload to the first address that takes it, in resolver order: an address the
    /// prober has no route to (an IPv6 one on an IPv4-only host) fails at once, and the next one
    /// may work. Once a datagram is out, its reply decides.
    fn send_any(&self, addrs: &[SocketAddr]) -> Result<UdpSocket, Failure> {
        let mut last = None;
        for addr in addrs {
            match send_to(*addr, self.spec.send()) {
                Ok(socket) => return Ok(socket),
                Err(err) => last = Some(Failure::io(&format!("send to {addr}"), &err)),
            }
        }
        Err(last.unwrap_or_else(|| Failure::new(FailureReason::Dns, "no address to send to")))
    }

    async fn await_reply(&self, socket: &UdpSocket, deadline: Instant) -> Result<(), Failure> {
        // On the heap: a buffer held across the await would bloat every probe's (boxed) future.
        let mut reply = vec![0; MAX_REPLY];
        loop {
            let ready = match timeout_at(
                deadline,
                socket.ready(Interest::READABLE | Interest::ERROR),
            )
            .await
            {
                Err(_) => return Err(Failure::new(FailureReason::Timeout, "no reply in time")),
                Ok(Err(err)) => return Err(Failure::io("receive", &err)),
                Ok(Ok(ready)) => ready,
            };
            // `ECONNREFUSED` (an ICMP port-unreachable) is the socket's pending error.
            if ready.is_error()
                && let Some(err) = pending_error(socket)
            {
                return Err(Failure::io("receive", &err));
            }
            if !ready.is_readable() {
                continue;
            }
            match socket.try_recv(&mut reply) {
                Ok(n) => {
                    let reply = &reply[..n];
                    return match self.spec.expect() {
                        Some(expect) if !expect.matches(reply) => {
                            Err(mismatch(expect, reply, "in the reply"))
                        }
                        _ => Ok(()),
                    };
                }
                // The readiness was stale (tokio has cleared it): wait for the next.
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Err(Failure::io("receive", &err)),
            }
        }
    }
}

/// The error the kernel has reported on `socket` (what it learnt from an ICMP error about the
/// path to its peer), taken so it is reported once; `None` when there is none any more.
///
/// Such an error shows as tokio's error readiness, which a receive does not clear (it waits
/// for readability), so the error is taken through `try_io`: when there is none, the
/// readiness is cleared, and a wait for readability or an error does not return at once again.
pub(crate) fn pending_error(socket: &UdpSocket) -> Option<io::Error> {
    socket
        .try_io(Interest::ERROR, || match socket.take_error() {
            Ok(Some(err)) | Err(err) => Ok(err),
            Ok(None) => Err(io::ErrorKind::WouldBlock.into()),
        })
        .ok()
}

/// A connected, non-blocking UDP socket to `addr` that has sent `payload`.
fn send_to(addr: SocketAddr, payload: &[u8]) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )?;
    socket.connect(&addr.into())?;
    // A fresh socket's send buffer is empty: a datagram this size goes out at once or fails.
    socket.send(payload)?;
    UdpSocket::from_std(socket.into())
}

#[async_trait::async_trait]
impl Probe for UdpProbe {
    async fn check(&self, timeout: Duration) -> CheckResult {
        let mut remarks = Remarks::default();
        let mut result: CheckResult = self
            .run(Instant::now() + timeout, &mut remarks)
            .await
            .into();
        result.remarks = remarks;
        result
    }
}
