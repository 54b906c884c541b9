//! The validated description of a target: who it is, how to probe it and on what schedule.
//!
//! These types are the library's input contract. Every constructor validates, so a `TargetSpec`
//! that exists is one the scheduler can run: configuration front ends (the daemon's YAML loader,
//! later etcd) map their raw input onto these constructors and attach source locations to the
//! errors they return.
//!
//! Specs compare by value (`PartialEq`), which is how a reload tells an unchanged target (keeps
//! its state and counters) from a changed one (restarted).

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::ExponentialBackoff;
use crate::probe::Probe;

/// A target's unique id: 1 to 128 characters of `[a-z0-9._-]`.
///
/// The alphabet keeps ids safe as metric label values, URL path segments and etcd key suffixes
/// without escaping. Cloning is a reference-count bump, since ids are copied into every event.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId(Arc<str>);

/// Why a string is not a valid [`TargetId`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTargetId {
    /// Empty ids cannot be addressed.
    #[error("target id is empty")]
    Empty,
    /// Longer ids are rejected to keep labels and keys bounded.
    #[error("target id is longer than {max} characters", max = TargetId::MAX_LEN)]
    TooLong,
    /// Only `[a-z0-9._-]` is allowed.
    #[error("target id {id:?} has character {ch:?}; allowed are a-z, 0-9, '.', '_' and '-'")]
    BadChar {
        /// The rejected id.
        id: String,
        /// The first offending character.
        ch: char,
    },
}

impl TargetId {
    /// The longest accepted id.
    pub const MAX_LEN: usize = 128;

    /// Validates and wraps an id.
    ///
    /// # Errors
    /// [`InvalidTargetId`] when the id is empty, longer than [`TargetId::MAX_LEN`] or has a
    /// character outside `[a-z0-9._-]`.
    pub fn new(id: &str) -> Result<Self, InvalidTargetId> {
        if id.is_empty() {
            return Err(InvalidTargetId::Empty);
        }
        if id.len() > Self::MAX_LEN {
            return Err(InvalidTargetId::TooLong);
        }
        if let Some(ch) = id
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '.' | '_' | '-'))
        {
            return Err(InvalidTargetId::BadChar { id: id.into(), ch });
        }
        Ok(Self(id.into()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TargetId {
    type Err = InvalidTargetId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Where to connect: a literal socket address, or a host name resolved at probe time.
///
/// Names are resolved on every probe (with the probe's deadline) rather than once at load, so a
/// DNS change is followed without a reload, and a name that does not resolve is a probe failure
/// (`dns`). Resolver trouble is not: see the `resolve` module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// An IPv4 or IPv6 address with port, e.g. `127.0.0.1:80` or `[::1]:80`.
    Socket(SocketAddr),
    /// A host name and port, e.g. `db.internal:5432`.
    Host {
        /// The name to resolve.
        host: String,
        /// The port to connect to.
        port: u16,
    },
}

/// Why a string is not a valid [`Address`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAddress {
    /// The port is missing: `host` instead of `host:port`.
    #[error("address {0:?} has no port; expected HOST:PORT or [IPV6]:PORT")]
    MissingPort(String),
    /// The port is not a number in 1..=65535.
    #[error("address {0:?} has an invalid port; expected 1-65535")]
    BadPort(String),
    /// The host part is empty or has characters a host name cannot have.
    #[error("address {0:?} has an invalid host")]
    BadHost(String),
}

impl FromStr for Address {
    type Err = InvalidAddress;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            if addr.port() == 0 {
                return Err(InvalidAddress::BadPort(s.into()));
            }
            return Ok(Self::Socket(addr));
        }
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| InvalidAddress::MissingPort(s.into()))?;
        let port: u16 = match port.parse() {
            Ok(p) if p != 0 => p,
            _ => return Err(InvalidAddress::BadPort(s.into())),
        };
        let valid_host = !host.is_empty()
            && host.len() <= 253
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
        if !valid_host {
            return Err(InvalidAddress::BadHost(s.into()));
        }
        Ok(Self::Host {
            host: host.into(),
            port,
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Socket(addr) => write!(f, "{addr}"),
            Self::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What a TCP probe expects in the peer's reply.
#[derive(Clone, Debug)]
pub enum Expect {
    /// The reply must contain these bytes.
    Contains(Vec<u8>),
    /// The reply must match this regular expression (over bytes, so binary replies work).
    Regex(regex::bytes::Regex),
}

impl PartialEq for Expect {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Contains(a), Self::Contains(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Expect {
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

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Contains(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            Self::Regex(re) => write!(f, "/{}/", re.as_str()),
        }
    }
}

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
    exchange: Option<Box<Exchange>>,
}

/// What a TCP probe sends and expects once connected.
#[derive(Clone, Debug, Default, PartialEq)]
struct Exchange {
    send: Option<Vec<u8>>,
    expect: Option<Expect>,
}

impl TcpSpec {
    /// A plain connect probe to `address`: no payload, reset on close.
    pub fn connect(address: Address) -> Self {
        Self {
            address,
            close: CloseMode::Reset,
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
    pub fn with_expect(mut self, expect: Expect) -> Self {
        self.exchange.get_or_insert_default().expect = Some(expect);
        self
    }

    /// The bytes written after connecting, if any.
    pub fn send(&self) -> Option<&[u8]> {
        self.exchange.as_ref()?.send.as_deref()
    }

    /// What the reply must contain or match, if anything.
    pub fn expect(&self) -> Option<&Expect> {
        self.exchange.as_ref()?.expect.as_ref()
    }
}

/// Which tier probes the target. Later tiers add variants.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ProbeSpec {
    /// A TCP connect probe.
    Tcp(TcpSpec),
    /// An HTTP request judged by conditions. Boxed: it is much larger than the other variants,
    /// and a target's spec is cloned on every apply.
    Http(Box<crate::http::HttpSpec>),
    /// A probe supplied in code by an embedder (or a test).
    Custom(CustomProbe),
}

/// A probe implemented in code rather than declared.
///
/// Two custom specs are equal only if they share the same probe instance, so re-applying the
/// same `Arc` keeps the target's state, while a new instance restarts it.
#[derive(Clone)]
pub struct CustomProbe(Arc<dyn Probe>);

impl CustomProbe {
    /// Wraps a probe.
    pub fn new(probe: Arc<dyn Probe>) -> Self {
        Self(probe)
    }

    /// The wrapped probe.
    pub fn probe(&self) -> &Arc<dyn Probe> {
        &self.0
    }
}

impl PartialEq for CustomProbe {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for CustomProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomProbe")
    }
}

/// Why a [`Schedule`] or [`Thresholds`] could not be built. Each variant names one field, so a
/// front end can point at the right line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// The interval must be positive.
    #[error("interval must be greater than zero")]
    ZeroInterval,
    /// The timeout must be positive.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// A probe must finish before the next one is due.
    #[error("timeout ({timeout}) must be less than interval ({interval})", timeout = humantime::format_duration(*.timeout), interval = humantime::format_duration(*.interval))]
    TimeoutNotBelowInterval {
        /// The requested timeout.
        timeout: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// Jitter is a fraction of the interval.
    #[error("jitter {0} is outside 0..=1")]
    JitterOutOfRange(f64),
    /// The fast interval is for deciding faster, so it cannot exceed the interval.
    #[error("fast_interval ({fast}) must be between 1ms and interval ({interval})", fast = humantime::format_duration(*.fast), interval = humantime::format_duration(*.interval))]
    FastIntervalOutOfRange {
        /// The requested fast interval.
        fast: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// The DOWN backoff starts from the interval, so its cap cannot be below it.
    #[error("backoff max ({max}) must be at least interval ({interval})", max = humantime::format_duration(*.max), interval = humantime::format_duration(*.interval))]
    BackoffMaxBelowInterval {
        /// The requested cap.
        max: Duration,
        /// The requested interval.
        interval: Duration,
    },
    /// The backoff's own validation failed.
    #[error(transparent)]
    Backoff(#[from] crate::backoff::BackoffError),
}

/// When a target is probed.
///
/// - `interval`: the period while the target's state is settled.
/// - `timeout`: the deadline of one run; must be below `interval`.
/// - `jitter`: each run starts up to `jitter * interval` late, at random, so targets sharing an
///   interval drift apart rather than staying aligned. Runs stay on the interval grid: jitter
///   never accumulates.
/// - `fast_interval`: the period while a verdict is pending (some failures, but fewer than `fall`;
///   or a first success after DOWN), like HAProxy's `fastinter`.
/// - `backoff`: the period while DOWN, starting at `interval` and growing to the backoff's max
///   (HAProxy's `downinter`, made adaptive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    interval: Duration,
    timeout: Duration,
    jitter: f64,
    fast_interval: Duration,
    backoff: ExponentialBackoff,
}

impl Schedule {
    /// The default interval.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
    /// The default timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default jitter fraction.
    pub const DEFAULT_JITTER: f64 = 0.1;
    /// The default cap of the DOWN backoff, as a multiple of the interval.
    pub const DEFAULT_BACKOFF_FACTOR: u32 = 4;
    /// The default jitter of the DOWN backoff.
    pub const DEFAULT_BACKOFF_JITTER: f64 = 0.5;

    /// Builds a schedule.
    ///
    /// Defaults when `None`:
    /// - `fast_interval`: half the interval;
    /// - `backoff_max`: four times the interval;
    /// - `backoff_jitter`: 0.5.
    ///
    /// # Errors
    /// One [`ScheduleError`] naming the first invalid field: zero interval or timeout, timeout not
    /// below interval, jitter outside 0..=1, fast interval zero or above the interval, backoff max
    /// below the interval, backoff jitter outside 0..=1.
    pub fn try_new(
        interval: Duration,
        timeout: Duration,
        jitter: f64,
        fast_interval: Option<Duration>,
        backoff_max: Option<Duration>,
        backoff_jitter: Option<f64>,
    ) -> Result<Self, ScheduleError> {
        if interval.is_zero() {
            return Err(ScheduleError::ZeroInterval);
        }
        if timeout.is_zero() {
            return Err(ScheduleError::ZeroTimeout);
        }
        if timeout >= interval {
            return Err(ScheduleError::TimeoutNotBelowInterval { timeout, interval });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ScheduleError::JitterOutOfRange(jitter));
        }
        let fast = fast_interval.unwrap_or(interval / 2);
        if fast < Duration::from_millis(1) || fast > interval {
            return Err(ScheduleError::FastIntervalOutOfRange { fast, interval });
        }
        let max = backoff_max.unwrap_or_else(|| {
            interval
                .checked_mul(Self::DEFAULT_BACKOFF_FACTOR)
                .unwrap_or(Duration::MAX)
        });
        if max < interval {
            return Err(ScheduleError::BackoffMaxBelowInterval { max, interval });
        }
        let backoff = ExponentialBackoff::try_new(
            interval,
            max,
            backoff_jitter.unwrap_or(Self::DEFAULT_BACKOFF_JITTER),
        )?;
        Ok(Self {
            interval,
            timeout,
            jitter,
            fast_interval: fast,
            backoff,
        })
    }

    /// The settled-state period.
    pub fn interval(&self) -> Duration {
        self.interval
    }
    /// The deadline of one run.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// The per-run start jitter, as a fraction of the interval.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
    /// The period while a verdict is pending.
    pub fn fast_interval(&self) -> Duration {
        self.fast_interval
    }
    /// The backoff used while DOWN.
    pub fn backoff(&self) -> &ExponentialBackoff {
        &self.backoff
    }
}

impl Default for Schedule {
    fn default() -> Self {
        let interval = Self::DEFAULT_INTERVAL;
        Self {
            interval,
            timeout: Self::DEFAULT_TIMEOUT,
            jitter: Self::DEFAULT_JITTER,
            fast_interval: interval / 2,
            backoff: ExponentialBackoff::try_new(
                interval,
                interval * Self::DEFAULT_BACKOFF_FACTOR,
                Self::DEFAULT_BACKOFF_JITTER,
            )
            .unwrap_or_else(|_| unreachable!("default backoff is valid")),
        }
    }
}

/// Hysteresis thresholds: consecutive results needed to change a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Consecutive passing results to reach a verdict (UP or DEGRADED) from PROBING.
    pub rise: NonZeroU32,
    /// Consecutive failures to become DOWN.
    pub fall: NonZeroU32,
    /// Consecutive degraded results to go from UP to DEGRADED.
    pub degrade: NonZeroU32,
    /// Consecutive good results to go from DEGRADED back to UP.
    pub recover: NonZeroU32,
}

impl Thresholds {
    /// Thresholds with `degrade` and `recover` equal to `rise`.
    pub fn new(rise: NonZeroU32, fall: NonZeroU32) -> Self {
        Self {
            rise,
            fall,
            degrade: rise,
            recover: rise,
        }
    }
}

impl Default for Thresholds {
    /// `rise: 2`, `fall: 3` (and `degrade`, `recover` 2): a single lost packet never flips a
    /// verdict.
    fn default() -> Self {
        let two = NonZeroU32::MIN.saturating_add(1);
        Self::new(two, two.saturating_add(1))
    }
}

/// When a target counts as flapping: more than `transitions` verdict changes within `window`.
///
/// A flapping target is held in PROBING (and reported as flapping) until its results have
/// pointed to the same verdict for `min_stable`, so an unstable target raises one signal instead
/// of a page per flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlapPolicy {
    /// The most verdict changes allowed within `window`.
    pub transitions: u32,
    /// The window the changes are counted in.
    pub window: Duration,
    /// How long the results must agree before a flapping target gets a verdict again.
    pub min_stable: Duration,
}

impl Default for FlapPolicy {
    /// More than 6 changes of verdict in 5 minutes is flapping (three confirmed outages, each
    /// UP → DOWN → UP); 2 stable minutes end it.
    fn default() -> Self {
        Self {
            transitions: 6,
            window: Duration::from_secs(300),
            min_stable: Duration::from_secs(120),
        }
    }
}

/// Everything needed to run one target.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSpec {
    /// The unique id.
    pub id: TargetId,
    /// How to probe it.
    pub probe: ProbeSpec,
    /// When to probe it.
    pub schedule: Schedule,
    /// How many results change its verdict.
    pub thresholds: Thresholds,
    /// When it counts as flapping; `None` turns flap detection off.
    pub flap: Option<FlapPolicy>,
    /// Declared maintenance windows.
    pub maintenance: Vec<crate::maintenance::MaintenanceWindow>,
    /// The circuit breaker that real calls to the target go through ([`Engine::pick`] and the
    /// client layer fail fast while it is open); `None` for none.
    ///
    /// [`Engine::pick`]: crate::Engine::pick
    pub circuit_breaker: Option<crate::breaker::BreakerConfig>,
    /// Lets real traffic stand in for active probes: a run is skipped while the target is UP and
    /// at least this many passive successes, and no passive failure, were reported since the
    /// previous run. `None` always probes.
    ///
    /// Envoy's no-traffic interval inverted: a target that real calls prove healthy every second
    /// gains nothing from a synthetic request, while one without traffic is still probed.
    pub skip_active_after: Option<NonZeroU32>,
    /// How long the last good answer for the target's host name may stand in when the resolver
    /// has trouble (a timeout, SERVFAIL; never a name that does not exist); zero turns stale
    /// answers off. See the `resolve` module.
    pub dns_stale_for: Duration,
}

impl TargetSpec {
    /// The default `dns_stale_for` ([`crate::resolve::DEFAULT_STALE_FOR`]).
    pub const DEFAULT_DNS_STALE_FOR: Duration = crate::resolve::DEFAULT_STALE_FOR;

    /// A target with the default schedule, thresholds and flap policy and no maintenance
    /// windows; set the public fields to change them.
    pub fn new(id: TargetId, probe: ProbeSpec) -> Self {
        Self {
            id,
            probe,
            schedule: Schedule::default(),
            thresholds: Thresholds::default(),
            flap: Some(FlapPolicy::default()),
            maintenance: Vec::new(),
            circuit_breaker: None,
            skip_active_after: None,
            dns_stale_for: Self::DEFAULT_DNS_STALE_FOR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert!(TargetId::new("orders-db.v2_a").is_ok());
        assert_eq!(TargetId::new(""), Err(InvalidTargetId::Empty));
        assert!(matches!(
            TargetId::new("Orders"),
            Err(InvalidTargetId::BadChar { ch: 'O', .. })
        ));
        assert_eq!(
            TargetId::new(&"a".repeat(129)),
            Err(InvalidTargetId::TooLong)
        );
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "127.0.0.1:80".parse::<Address>(),
            Ok(Address::Socket("127.0.0.1:80".parse().unwrap()))
        );
        assert_eq!(
            "[::1]:443".parse::<Address>(),
            Ok(Address::Socket("[::1]:443".parse().unwrap()))
        );
        assert_eq!(
            "db.internal:5432".parse::<Address>(),
            Ok(Address::Host {
                host: "db.internal".into(),
                port: 5432
            })
        );
        assert!(matches!(
            "db.internal".parse::<Address>(),
            Err(InvalidAddress::MissingPort(_))
        ));
        assert!(matches!(
            "db:0".parse::<Address>(),
            Err(InvalidAddress::BadPort(_))
        ));
        assert!(matches!(
            "db:http".parse::<Address>(),
            Err(InvalidAddress::BadPort(_))
        ));
        assert!(matches!(
            "d b:80".parse::<Address>(),
            Err(InvalidAddress::BadHost(_))
        ));
    }

    #[test]
    fn schedule_is_validated() {
        let s = |i, t| Schedule::try_new(i, t, 0.1, None, None, None);
        let sec = Duration::from_secs;
        assert!(s(sec(5), sec(1)).is_ok());
        assert_eq!(
            s(sec(1), sec(1)),
            Err(ScheduleError::TimeoutNotBelowInterval {
                timeout: sec(1),
                interval: sec(1)
            })
        );
        assert_eq!(
            s(sec(1), sec(1)).unwrap_err().to_string(),
            "timeout (1s) must be less than interval (1s)"
        );
        assert_eq!(
            Schedule::try_new(sec(5), sec(1), 2.0, None, None, None),
            Err(ScheduleError::JitterOutOfRange(2.0))
        );
        assert!(matches!(
            Schedule::try_new(sec(5), sec(1), 0.1, Some(sec(6)), None, None),
            Err(ScheduleError::FastIntervalOutOfRange { .. })
        ));
        assert!(matches!(
            Schedule::try_new(sec(5), sec(1), 0.1, None, Some(sec(4)), None),
            Err(ScheduleError::BackoffMaxBelowInterval { .. })
        ));
        assert_eq!(Schedule::default(), s(sec(5), sec(1)).unwrap());
    }

    #[test]
    fn expect_matches() {
        assert!(Expect::Contains(b"PONG".to_vec()).matches(b"+PONG\r\n"));
        assert!(!Expect::Contains(b"PONG".to_vec()).matches(b"+PON"));
        let re = regex::bytes::Regex::new(r"^\+PO+NG").unwrap();
        assert!(Expect::Regex(re).matches(b"+POOONG"));
    }
}
