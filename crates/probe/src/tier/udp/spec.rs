//! What a UDP probe is asked to do: where to send, what to send, and what the reply must hold.

use crate::target::Address;
use crate::tier::reply::ReplyExpect;

/// The largest payload one UDP datagram can carry over IPv4 (65,535 bytes less the IP and UDP
/// headers).
pub const MAX_PAYLOAD: usize = 65_507;

/// A payload too large for one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a payload of {0} bytes does not fit in one UDP datagram (at most {MAX_PAYLOAD})")]
pub struct PayloadTooLarge(pub usize);

/// A UDP probe: one datagram out, and a reply back that contains or matches `expect` (any reply,
/// without one).
///
/// UDP has no handshake, so the reply is the only sign of life: a probe that sent nothing would
/// learn nothing, which is why the payload is part of the constructor rather than optional.
#[derive(Clone, Debug, PartialEq)]
pub struct UdpSpec {
    /// Where to send.
    pub address: Address,
    send: Vec<u8>,
    expect: Option<ReplyExpect>,
}

impl UdpSpec {
    /// Sends `payload` to `address` and passes on any reply.
    ///
    /// # Errors
    /// [`PayloadTooLarge`] when `payload` is longer than [`MAX_PAYLOAD`].
    pub fn new(address: Address, payload: impl Into<Vec<u8>>) -> Result<Self, PayloadTooLarge> {
        let send = payload.into();
        if send.len() > MAX_PAYLOAD {
            return Err(PayloadTooLarge(send.len()));
        }
        Ok(Self {
            address,
            send,
            expect: None,
        })
    }

    /// Requires the reply to contain or match `expect`.
    #[must_use]
    pub fn with_expect(mut self, expect: ReplyExpect) -> Self {
        self.expect = Some(expect);
        self
    }

    /// The datagram sent.
    pub fn send(&self) -> &[u8] {
        &self.send
    }

    /// What the reply must contain or match, if anything.
    pub fn expect(&self) -> Option<&ReplyExpect> {
        self.expect.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_must_fit_in_a_datagram() {
        let address: Address = "127.0.0.1:9".parse().unwrap();
        assert!(UdpSpec::new(address.clone(), vec![0; MAX_PAYLOAD]).is_ok());
        assert_eq!(
            UdpSpec::new(address, vec![0; MAX_PAYLOAD + 1]),
            Err(PayloadTooLarge(MAX_PAYLOAD + 1))
        );
    }
}
