//! The result of one probe run and the closed set of reasons a probe can fail.
//!
//! `FailureReason` is deliberately a closed enum: the same names appear in the API, as the
//! `reason` label of `probe_failures_total` and in logs, so a dashboard built on one of them works
//! on all of them, and the label's cardinality stays bounded.

use std::fmt;
use std::time::{Duration, SystemTime};

/// Why a probe failed. The string forms (`as_str`) are a public contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FailureReason {
    /// The peer answered the connect with a reset: nothing listens on the port.
    Refused,
    /// No verdict within the probe's timeout (connect, reply or name resolution).
    Timeout,
    /// An established connection was reset by the peer.
    Reset,
    /// No route to the host or network.
    Unreachable,
    /// The name did not resolve to any address.
    Dns,
    /// Any other I/O error.
    Io,
    /// The reply was not what the probe expected (TCP `expect`).
    Body,
    /// A protocol status was not the expected one (HTTP status, reserved for that tier).
    Status,
    /// A declared assertion on the reply did not hold (reserved for the business tier).
    Assertion,
    /// A dependency of the target is down (reserved for the dependency tier).
    Dependency,
}

impl FailureReason {
    /// Every reason, in a stable order; used to document and pre-register label values.
    pub const ALL: [FailureReason; 10] = [
        Self::Refused,
        Self::Timeout,
        Self::Reset,
        Self::Unreachable,
        Self::Dns,
        Self::Io,
        Self::Body,
        Self::Status,
        Self::Assertion,
        Self::Dependency,
    ];

    /// The stable, lowercase name used in the API, metric labels and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::Unreachable => "unreachable",
            Self::Dns => "dns",
            Self::Io => "io",
            Self::Body => "body",
            Self::Status => "status",
            Self::Assertion => "assertion",
            Self::Dependency => "dependency",
        }
    }

    /// Classifies an I/O error from a socket operation.
    ///
    /// Timeouts are not classified here: the prober enforces its own deadline and reports
    /// `Timeout` itself, so an OS-level `TimedOut` only shows up for kernel-side retries giving up.
    pub fn from_io(err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match err.kind() {
            K::ConnectionRefused => Self::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Self::Reset,
            K::TimedOut => Self::Timeout,
            K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Self::Unreachable,
            _ => Self::Io,
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed check: the closed reason plus a human-readable detail for logs and the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The classified reason, used for metrics and decisions.
    pub reason: FailureReason,
    /// Free text (the OS error, what was expected); never used as a metric label.
    pub detail: String,
}

impl Failure {
    /// Builds a failure from a reason and anything displayable.
    pub fn new(reason: FailureReason, detail: impl fmt::Display) -> Self {
        Self {
            reason,
            detail: detail.to_string(),
        }
    }

    /// Builds a failure from an I/O error, classifying it with [`FailureReason::from_io`].
    pub fn io(context: &str, err: &std::io::Error) -> Self {
        Self::new(
            FailureReason::from_io(err),
            format_args!("{context}: {err}"),
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

/// What a probe's check returns: `Ok(())` when the target did its job.
pub type CheckResult = Result<(), Failure>;

/// One finished probe run, as kept in a target's history.
///
/// Kept to 16 bytes so that a history of recent results per target stays cheap at 100k targets;
/// the failure's free-text detail is kept only for the latest run (see the engine's status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Wall-clock time the run finished, in milliseconds since the Unix epoch (for display).
    at_unix_ms: u64,
    /// How long the run took, in microseconds, saturating at about 71 minutes.
    latency_us: u32,
    /// `None` on success.
    reason: Option<FailureReason>,
}

impl Outcome {
    /// Records a run that finished at `at` after `latency`.
    pub fn new(at: SystemTime, latency: Duration, reason: Option<FailureReason>) -> Self {
        let at_unix_ms = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let latency_us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        Self {
            at_unix_ms,
            latency_us,
            reason,
        }
    }

    /// Whether the run succeeded.
    pub fn ok(&self) -> bool {
        self.reason.is_none()
    }

    /// The failure reason, `None` on success.
    pub fn reason(&self) -> Option<FailureReason> {
        self.reason
    }

    /// How long the run took.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(u64::from(self.latency_us))
    }

    /// When the run finished (wall clock).
    pub fn at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.at_unix_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_is_compact() {
        assert_eq!(std::mem::size_of::<Outcome>(), 16);
    }

    #[test]
    fn outcome_round_trips_time_and_latency() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let o = Outcome::new(at, Duration::from_micros(1500), Some(FailureReason::Reset));
        assert_eq!(o.at(), at);
        assert_eq!(o.latency(), Duration::from_micros(1500));
        assert_eq!(o.reason(), Some(FailureReason::Reset));
        assert!(!o.ok());
    }

    #[test]
    fn reason_names_are_unique_lowercase() {
        let mut names: Vec<_> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FailureReason::ALL.len());
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase()))
        );
    }
}
