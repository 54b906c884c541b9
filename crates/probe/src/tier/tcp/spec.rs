//! What a TCP probe is asked to do: where to connect, what to send, what the reply must hold,
//! and how to close.

use crate::target::{Address, Addresses};

/// What a TCP probe expects in the peer's reply: the expectation every tier that reads a reply
/// shares, under the name the TCP tier has always given it.
pub use crate::tier::reply::ReplyExpect as TcpExpect;

/// How a TCP probe closes its connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloseMode {
    /// `SO_LINGER 0`: close with a reset. The prober keeps no `TIME_WAIT` entry, so a high probe
    /// rate never exhausts ephemeral ports. The default.
    #[default]
    Reset,
    /// A normal FIN close, for peers that log resets as errors. Leaves `TIME_WAIT` on the prober.
    Graceful,
}

/// A TCP connect probe: connect, optionally send bytes and expect a reply.
///
/// The payload and the expectation sit behind one pointer, set with [`TcpSpec::with_send`] and
/// [`TcpSpec::with_expect`]: most TCP probes only connect, and a spec is kept with every target
/// (48 bytes rather than 96, at a million targets).
#[derive(Clone, Debug, PartialEq)]
pub struct TcpSpec {
    /// Where to connect.
    pub address: Address,
    /// How the connection is closed.
    pub close: CloseMode,
    /// Which of a host name's addresses are probed.
    pub addresses: Addresses,
    exchange: Option<Box<Exchange>>,
}

/// What a TCP probe sends and expects once connected.
#[derive(Clone, Debug, Default, PartialEq)]
struct Exchange {
    send: Option<Vec<u8>>,
    expect: Option<TcpExpect>,
    conversation: Vec<Step>,
}

/// One step of a [conversation](TcpSpec::with_conversation): the line-oriented exchanges of
/// text protocols (SMTP, IMAP, Redis, a service's own banner) that one `send` and one `expect`
/// cannot describe.
#[derive(Clone, Debug)]
pub enum Step {
    /// Reads lines until one matches: each line without its end (`\n`, or `\r\n`), the last
    /// one also when the peer closes without ending it. A regex's `^` and `$` are the line's.
    ExpectLine(regex::bytes::Regex),
    /// Writes these bytes, as they are.
    Send(Vec<u8>),
    /// Writes these bytes with `$1`, `${1}` or `${name}` replaced by that group of the line the
    /// last `ExpectLine` matched (`$$` is a `$`): an answer made of what the peer said, such as
    /// IRC's `PONG` to its `PING`.
    Reply(Vec<u8>),
}

impl PartialEq for Step {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::ExpectLine(a), Self::ExpectLine(b)) => a.as_str() == b.as_str(),
            (Self::Send(a), Self::Send(b)) | (Self::Reply(a), Self::Reply(b)) => a == b,
            _ => false,
        }
    }
}

impl TcpSpec {
    /// A plain connect probe to `address`: no payload, reset on close.
    pub fn connect(address: Address) -> Self {
        Self {
            address,
            close: CloseMode::Reset,
            addresses: Addresses::First,
            exchange: None,
        }
    }

    /// Writes `payload` right after the connection is established.
    #[must_use]
    pub fn with_send(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.exchange.get_or_insert_default().send = Some(payload.into());
        self
    }

    /// Requires the reply to contain or match `expect`, read until it does or the deadline
    /// passes.
    #[must_use]
    pub fn with_expect(mut self, expect: TcpExpect) -> Self {
        self.exchange.get_or_insert_default().expect = Some(expect);
        self
    }

    /// Runs `steps` in order once connected, instead of one `send` and one `expect`: the
    /// conversation's steps are the whole exchange (a spec has one or the other).
    #[must_use]
    pub fn with_conversation(mut self, steps: Vec<Step>) -> Self {
        let exchange = self.exchange.get_or_insert_default();
        exchange.send = None;
        exchange.expect = None;
        exchange.conversation = steps;
        self
    }

    /// The conversation's steps; empty for a probe that sends and expects at most once.
    pub fn conversation(&self) -> &[Step] {
        self.exchange.as_ref().map_or(&[], |e| &e.conversation)
    }

    /// The bytes written after connecting, if any.
    pub fn send(&self) -> Option<&[u8]> {
        self.exchange.as_ref()?.send.as_deref()
    }

    /// What the reply must contain or match, if anything.
    pub fn expect(&self) -> Option<&TcpExpect> {
        self.exchange.as_ref()?.expect.as_ref()
    }
}
