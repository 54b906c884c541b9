//! What a reply must hold, for the tiers that send bytes and read an answer back (TCP, UDP):
//! the expectation and the failure that says what came back instead.

use std::fmt;

use crate::outcome::{Failure, FailureReason};

/// What a probe expects in the peer's reply.
#[derive(Clone, Debug)]
pub enum ReplyExpect {
    /// The reply must contain these bytes.
    Contains(Vec<u8>),
    /// The reply must match this regular expression (over bytes, so binary replies work).
    Regex(regex::bytes::Regex),
}

impl PartialEq for ReplyExpect {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Contains(a), Self::Contains(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl ReplyExpect {
    /// Whether `reply` satisfies the expectation.
    pub fn matches(&self, reply: &[u8]) -> bool {
        match self {
            Self::Contains(needle) => {
                needle.is_empty() || reply.windows(needle.len()).any(|w| w == needle.as_slice())
            }
            Self::Regex(re) => re.is_match(reply),
        }
    }
}

impl fmt::Display for ReplyExpect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Contains(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            Self::Regex(re) => write!(f, "/{}/", re.as_str()),
        }
    }
}

/// A `body` failure showing the start of what came back: enough to recognise a wrong service
/// or an error message, bounded so a large reply does not bloat the status.
pub(crate) fn mismatch(expect: &ReplyExpect, reply: &[u8], when: &str) -> Failure {
    const SHOWN: usize = 64;
    let shown = String::from_utf8_lossy(&reply[..reply.len().min(SHOWN)]);
    Failure::new(
        FailureReason::Body,
        format_args!("expected {expect} {when}, got {shown:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_matches() {
        assert!(ReplyExpect::Contains(b"PONG".to_vec()).matches(b"+PONG\r\n"));
        assert!(!ReplyExpect::Contains(b"PONG".to_vec()).matches(b"+PON"));
        let re = regex::bytes::Regex::new(r"^\+PO+NG").unwrap();
        assert!(ReplyExpect::Regex(re).matches(b"+POOONG"));
    }
}
