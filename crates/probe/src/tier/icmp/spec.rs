//! What an ICMP probe is asked to do: which host to ping, how many echoes of what size, and
//! when a host that answers is still degraded.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use crate::target::is_host_name;

/// The most echoes one run sends.
pub const MAX_COUNT: u16 = 100;

/// The largest payload of one echo: what fits in an IPv4 packet (65,535 bytes less the IP and
/// ICMP headers). The kernel fragments anything above the path's MTU.
pub const MAX_SIZE: usize = 65_507;

/// The payload size when none is given: `ping`'s, so a packet capture looks familiar.
pub const DEFAULT_SIZE: usize = 56;

/// Who an ICMP probe pings: an address, or a name resolved on every run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IcmpHost {
    /// An IPv4 or IPv6 address.
    Ip(IpAddr),
    /// A host name, resolved on every run through the engine's resolver.
    Name(String),
}

/// Why a string is not a valid [`IcmpHost`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("host {0:?} is neither an IP address nor a host name")]
pub struct InvalidHost(pub String);

impl FromStr for IcmpHost {
    type Err = InvalidHost;

    /// An IP address (`10.0.0.1`, `::1`, also `[::1]`) or a host name. A port is not a host: ping
    /// has none.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bare = s
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        if is_host_name(s) {
            Ok(Self::Name(s.to_owned()))
        } else {
            Err(InvalidHost(s.to_owned()))
        }
    }
}

impl fmt::Display for IcmpHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Name(name) => f.write_str(name),
        }
    }
}

/// When a host that answered is still degraded. Each condition that holds is one reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IcmpDegradedIf {
    /// More than this fraction of the echoes went unanswered (`0.2`: more than one in five).
    /// Only meaningful with more than one echo: with one, a lost echo fails the run.
    pub loss_over: Option<f64>,
    /// The answered echoes' average round trip took longer than this.
    pub latency_over: Option<Duration>,
}

/// Why an [`IcmpSpec`] cannot be built as asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InvalidIcmp {
    /// The echo count is outside 1 to [`MAX_COUNT`].
    #[error("count must be between 1 and {MAX_COUNT}, got {0}")]
    Count(u32),
    /// The payload is larger than an IP packet can carry.
    #[error("size must be at most {MAX_SIZE} bytes (an IP packet's limit), got {0}")]
    Size(usize),
    /// `loss_over` is not a fraction below 1 (losing every echo fails the run: it is never
    /// merely degraded).
    #[error("loss_over must be at least 0 and below 1, got {0}")]
    LossOver(f64),
    /// `loss_over` with a single echo: it could never hold, since that echo lost fails the run.
    #[error("loss_over needs a count above 1: with one echo, a lost echo fails the run")]
    LossNeedsCount,
}

/// An ICMP echo probe: `count` echo requests of `size` payload bytes to `host`.
///
/// The run passes when at least one echo comes back; how many did not is for
/// [`IcmpDegradedIf::loss_over`] to judge.
#[derive(Clone, Debug, PartialEq)]
pub struct IcmpSpec {
    /// Who to ping.
    pub host: IcmpHost,
    count: u16,
    size: usize,
    degraded_if: IcmpDegradedIf,
}

impl IcmpSpec {
    /// Pings `host` with the defaults:
    /// - one echo;
    /// - [`DEFAULT_SIZE`] (56) payload bytes;
    /// - never degraded.
    pub fn echo(host: IcmpHost) -> Self {
        Self {
            host,
            count: 1,
            size: DEFAULT_SIZE,
            degraded_if: IcmpDegradedIf::default(),
        }
    }

    /// Sends `count` echoes per run.
    ///
    /// # Errors
    /// [`InvalidIcmp::Count`] outside 1 to [`MAX_COUNT`]; [`InvalidIcmp::LossNeedsCount`] for 1
    /// when `loss_over` is set.
    pub fn with_count(mut self, count: u32) -> Result<Self, InvalidIcmp> {
        self.count = u16::try_from(count)
            .ok()
            .filter(|c| (1..=MAX_COUNT).contains(c))
            .ok_or(InvalidIcmp::Count(count))?;
        self.check_loss()?;
        Ok(self)
    }

    /// Sends `size` payload bytes in each echo.
    ///
    /// # Errors
    /// [`InvalidIcmp::Size`] above [`MAX_SIZE`].
    pub fn with_size(mut self, size: usize) -> Result<Self, InvalidIcmp> {
        if size > MAX_SIZE {
            return Err(InvalidIcmp::Size(size));
        }
        self.size = size;
        Ok(self)
    }

    /// When an answering host is degraded.
    ///
    /// # Errors
    /// [`InvalidIcmp::LossOver`] when `loss_over` is not in `[0, 1)`;
    /// [`InvalidIcmp::LossNeedsCount`] when it is set and the count is 1 (set the count first).
    pub fn with_degraded_if(mut self, degraded_if: IcmpDegradedIf) -> Result<Self, InvalidIcmp> {
        if let Some(loss) = degraded_if.loss_over
            && !(0.0..1.0).contains(&loss)
        {
            return Err(InvalidIcmp::LossOver(loss));
        }
        self.degraded_if = degraded_if;
        self.check_loss()?;
        Ok(self)
    }

    fn check_loss(&self) -> Result<(), InvalidIcmp> {
        if self.degraded_if.loss_over.is_some() && self.count == 1 {
            return Err(InvalidIcmp::LossNeedsCount);
        }
        Ok(())
    }

    /// Echoes per run.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Payload bytes per echo.
    pub fn size(&self) -> usize {
        self.size
    }

    /// When an answering host is degraded.
    pub fn degraded_if(&self) -> &IcmpDegradedIf {
        &self.degraded_if
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse() {
        assert_eq!(
            "10.0.0.1".parse::<IcmpHost>(),
            Ok(IcmpHost::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            "[::1]".parse::<IcmpHost>(),
            Ok(IcmpHost::Ip("::1".parse().unwrap()))
        );
        assert_eq!(
            "gw.internal".parse::<IcmpHost>(),
            Ok(IcmpHost::Name("gw.internal".into()))
        );
        assert!("gw:80".parse::<IcmpHost>().is_err());
        assert!("".parse::<IcmpHost>().is_err());
    }

    #[test]
    fn counts_sizes_and_loss_are_validated() {
        let spec = IcmpSpec::echo(IcmpHost::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(spec.clone().with_count(0), Err(InvalidIcmp::Count(0)));
        assert_eq!(spec.clone().with_count(101), Err(InvalidIcmp::Count(101)));
        assert_eq!(
            spec.clone().with_size(MAX_SIZE + 1),
            Err(InvalidIcmp::Size(MAX_SIZE + 1))
        );
        let lossy = IcmpDegradedIf {
            loss_over: Some(0.2),
            latency_over: None,
        };
        assert_eq!(
            spec.clone().with_degraded_if(lossy.clone()),
            Err(InvalidIcmp::LossNeedsCount)
        );
        let five = spec.with_count(5).unwrap();
        assert_eq!(five.clone().with_degraded_if(lossy).unwrap().count(), 5);
        assert_eq!(
            five.with_degraded_if(IcmpDegradedIf {
                loss_over: Some(1.0),
                latency_over: None
            }),
            Err(InvalidIcmp::LossOver(1.0))
        );
    }
}
