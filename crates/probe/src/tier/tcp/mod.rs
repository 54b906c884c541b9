//! The TCP tier: a non-blocking connect, optionally a payload and an expected reply.
//!
//! The socket is built with socket2 so the prober controls what tokio's connect does not expose
//! up front: `SOCK_NONBLOCK | SOCK_CLOEXEC` at creation, `TCP_NODELAY` when there is a `send`
//! payload (so it leaves at once; a bare connect saves the system call), and `SO_LINGER 0` so closing sends a reset and leaves no `TIME_WAIT` entry on the
//! prober. At thousands of probes per second, `TIME_WAIT` entries would otherwise pin ephemeral
//! ports for a minute each and eventually fail connects with `EADDRNOTAVAIL`.
//!
//! Instead of one send and one expect, a spec may hold a conversation ([`Step`]s): lines read
//! until one matches, bytes written, in order, for text protocols that greet and answer.
//!
//! The whole check (resolve, connect, send, read) shares one deadline; each phase reports its own
//! failure reason and detail when it is the one that runs out. Names go through the engine's
//! resolver ([`crate::tier::resolve`]), which may answer with a stale address on resolver trouble.

pub(crate) mod spec;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::outcome::{CheckResult, Failure, FailureReason, Remarks};
use crate::target::Address;
use crate::tier::lookup;
use crate::tier::probe::Probe;
use crate::tier::reply::mismatch;
use crate::tier::resolve::Names;
pub use spec::{CloseMode, Step, TcpExpect, TcpSpec};

/// The most reply bytes read while looking for `expect`; a larger reply fails as `body`.
pub const MAX_REPLY: usize = 64 * 1024;

/// Probes a TCP endpoint as its [`TcpSpec`] says.
#[derive(Clone, Debug)]
pub struct TcpProbe {
    spec: TcpSpec,
    names: Names,
}

impl TcpProbe {
    /// A probe for `spec`, resolving a host name through `names`.
    pub fn new(spec: TcpSpec, names: Names) -> Self {
        Self { spec, names }
    }

    async fn run(&self, deadline: Instant, remarks: &mut Remarks) -> Result<(), Failure> {
        let addrs = resolve(&self.spec.address, &self.names, deadline, remarks).await?;
        let nodelay = self.spec.send().is_some() || !self.spec.conversation().is_empty();
        let mut stream = connect_any(&addrs, self.spec.close, nodelay, deadline).await?;
        let result = self.converse(&mut stream, deadline).await;
        if self.spec.close == CloseMode::Graceful {
            // Best effort: the verdict is already made, a failed FIN changes nothing.
            let _ = timeout_at(deadline, stream.shutdown()).await;
        }
        result
    }

    async fn converse(&self, stream: &mut TcpStream, deadline: Instant) -> Result<(), Failure> {
        if !self.spec.conversation().is_empty() {
            return conversation(self.spec.conversation(), stream, deadline).await;
        }
        if let Some(payload) = self.spec.send() {
            match timeout_at(deadline, stream.write_all(payload)).await {
                Err(_) => return Err(Failure::new(FailureReason::Timeout, "send timed out")),
                Ok(Err(err)) => return Err(Failure::io("send", &err)),
                Ok(Ok(())) => {}
            }
        }
        let Some(expect) = self.spec.expect() else {
            return Ok(());
        };
        // Read straight into `reply`: a buffer held across awaits would bloat every probe's
        // (boxed) future by its size.
        let mut reply = Vec::new();
        loop {
            if expect.matches(&reply) {
                return Ok(());
            }
            if reply.len() >= MAX_REPLY {
                return Err(Failure::new(
                    FailureReason::Body,
                    format_args!("no match for {expect} in the first {MAX_REPLY} bytes"),
                ));
            }
            reply.reserve(1024);
            match timeout_at(deadline, stream.read_buf(&mut reply)).await {
                Err(_) if reply.is_empty() => {
                    return Err(Failure::new(FailureReason::Timeout, "no reply in time"));
                }
                Err(_) => return Err(mismatch(expect, &reply, "in time")),
                Ok(Ok(0)) => return Err(mismatch(expect, &reply, "before the peer closed")),
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return Err(Failure::io("read", &err)),
            }
        }
    }
}

/// Runs a conversation's steps in order, over TCP or (the TLS tier's) TLS. The bytes read past
/// a matching line stay for the next `ExpectLine`; at most [`MAX_REPLY`] bytes are read while
/// looking for one line.
pub(crate) async fn conversation<S: AsyncRead + AsyncWrite + Unpin>(
    steps: &[Step],
    stream: &mut S,
    deadline: Instant,
) -> Result<(), Failure> {
    let mut pending: Vec<u8> = Vec::new();
    let mut closed = false;
    // The regex and the line of the last match, for `Reply`.
    let mut matched: Option<(&regex::bytes::Regex, Vec<u8>)> = None;
    for (index, step) in steps.iter().enumerate() {
        let number = index + 1;
        let payload: Option<std::borrow::Cow<'_, [u8]>> = match step {
            Step::Send(payload) => Some(payload.into()),
            Step::Reply(template) => {
                let mut out = Vec::new();
                match matched.as_ref().and_then(|(re, line)| re.captures(line)) {
                    Some(caps) => caps.expand(template, &mut out),
                    None => out.clone_from(template),
                }
                Some(out.into())
            }
            Step::ExpectLine(_) => None,
        };
        if let Some(payload) = payload {
            match timeout_at(deadline, stream.write_all(&payload)).await {
                Err(_) => {
                    return Err(Failure::new(
                        FailureReason::Timeout,
                        format_args!("step {number}: send timed out"),
                    ));
                }
                Ok(Err(err)) => return Err(Failure::io(&format!("step {number}: send"), &err)),
                Ok(Ok(())) => continue,
            }
        }
        let Step::ExpectLine(re) = step else {
            continue;
        };
        let (mut scanned, mut last) = (0, Vec::new());
        loop {
            if let Some(line) = next_line(&mut pending, closed) {
                if re.is_match(&line) {
                    matched = Some((re, line));
                    break;
                }
                scanned += line.len();
                last = line;
                continue;
            }
            let expect = TcpExpect::Regex(re.clone());
            if closed {
                return Err(mismatch(
                    &expect,
                    &last,
                    &format!("in a line at step {number} before the peer closed"),
                ));
            }
            if scanned + pending.len() >= MAX_REPLY {
                return Err(Failure::new(
                    FailureReason::Body,
                    format_args!("step {number}: no line matching {expect} in {MAX_REPLY} bytes"),
                ));
            }
            pending.reserve(1024);
            match timeout_at(deadline, stream.read_buf(&mut pending)).await {
                Err(_) => {
                    return Err(Failure::new(
                        FailureReason::Timeout,
                        format_args!("step {number}: no line matching {expect} in time"),
                    ));
                }
                Ok(Ok(0)) => closed = true,
                // A TLS peer that closes without close_notify (many do) has closed.
                Ok(Err(err)) if err.kind() == io::ErrorKind::UnexpectedEof => closed = true,
                Ok(Ok(_)) => {}
                Ok(Err(err)) => {
                    return Err(Failure::io(&format!("step {number}: read"), &err));
                }
            }
        }
    }
    Ok(())
}

/// Takes the first whole line out of `pending`, without its `\n` or `\r\n`; once the peer has
/// closed, what is left is the last line.
fn next_line(pending: &mut Vec<u8>, closed: bool) -> Option<Vec<u8>> {
    let end = match pending.iter().position(|b| *b == b'\n') {
        Some(end) => end,
        None if closed && !pending.is_empty() => pending.len(),
        None => return None,
    };
    let mut line: Vec<u8> = pending.drain(..end).collect();
    if !pending.is_empty() {
        pending.remove(0);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Some(line)
}

/// The socket addresses of `address`, looked up through `names` when it is a host name; resolver
/// trouble is noted in `remarks`.
pub(crate) async fn resolve(
    address: &Address,
    names: &Names,
    deadline: Instant,
    remarks: &mut Remarks,
) -> Result<Vec<SocketAddr>, Failure> {
    match address {
        Address::Socket(addr) => Ok(vec![*addr]),
        Address::Host { host, port } => {
            let addrs = lookup::addresses(names, host, deadline, remarks).await?;
            Ok(addrs.iter().map(|ip| SocketAddr::new(*ip, *port)).collect())
        }
    }
}

/// Connects to the first address that accepts, in resolver order.
pub(crate) async fn connect_any(
    addrs: &[SocketAddr],
    close: CloseMode,
    nodelay: bool,
    deadline: Instant,
) -> Result<TcpStream, Failure> {
    let mut last = None;
    for addr in addrs {
        match connect(*addr, close, nodelay, deadline).await {
            Ok(stream) => return Ok(stream),
            // Out of time: trying the next address cannot succeed either.
            Err(f) if f.reason == FailureReason::Timeout => return Err(f),
            Err(f) => last = Some(f),
        }
    }
    Err(last.unwrap_or_else(|| Failure::new(FailureReason::Dns, "no address to connect to")))
}

/// A non-blocking connect: socket2 builds and starts it, tokio waits for writability. Also the
/// TLS and DNS tiers' (for DNS over TCP).
pub(crate) async fn connect(
    addr: SocketAddr,
    close: CloseMode,
    nodelay: bool,
    deadline: Instant,
) -> Result<TcpStream, Failure> {
    let stream = start_connect(addr, close, nodelay).map_err(|e| Failure::io("connect", &e))?;
    match timeout_at(deadline, stream.writable()).await {
        Err(_) => Err(Failure::new(
            FailureReason::Timeout,
            format_args!("connect to {addr} timed out"),
        )),
        Ok(Err(err)) => Err(Failure::io("connect", &err)),
        Ok(Ok(())) => match stream.take_error() {
            Ok(None) => Ok(stream),
            Ok(Some(err)) | Err(err) => Err(Failure::io(&format!("connect to {addr}"), &err)),
        },
    }
}

fn start_connect(addr: SocketAddr, close: CloseMode, nodelay: bool) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    if nodelay {
        socket.set_tcp_nodelay(true)?;
    }
    if close == CloseMode::Reset {
        socket.set_linger(Some(Duration::ZERO))?;
    }
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        // EINPROGRESS: the non-blocking connect has started; writability will tell how it ended.
        Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(err) => return Err(err),
    }
    TcpStream::from_std(socket.into())
}

#[async_trait::async_trait]
impl Probe for TcpProbe {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_as_text_protocols_end_them() {
        let mut pending = b"+OK ready\r\nsecond\npartial".to_vec();
        assert_eq!(
            next_line(&mut pending, false).as_deref(),
            Some(&b"+OK ready"[..])
        );
        assert_eq!(
            next_line(&mut pending, false).as_deref(),
            Some(&b"second"[..])
        );
        assert_eq!(next_line(&mut pending, false), None);
        assert_eq!(
            next_line(&mut pending, true).as_deref(),
            Some(&b"partial"[..])
        );
        assert_eq!(next_line(&mut pending, true), None);
    }
}
