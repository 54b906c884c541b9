//! Passive health: what real traffic says about a target.
//!
//! Active probes notice a failure only after `interval x fall`; the requests a service sends
//! notice it at once. Callers (the gate's tower layer for a service's own requests, a client
//! layer for the calls a service makes to its dependencies, or any code) describe each call with
//! a [`Call`], and the passive detectors (circuit breaker, outlier ejection) judge targets from a
//! stream of them.

use std::time::Duration;

/// How one real call to a target ended, in the classes the detectors count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// A response that is not a server error.
    Success,
    /// A 5xx other than a gateway failure: the target answered, badly.
    ServerError,
    /// 502, 503 or 504: the target (or what is in front of it) could not serve.
    GatewayFailure,
    /// No answer in time.
    Timeout,
    /// The connection was reset.
    Reset,
    /// The connection was refused.
    Refused,
}

impl CallOutcome {
    /// The class of an HTTP status.
    pub fn from_status(status: u16) -> Self {
        match status {
            502..=504 => Self::GatewayFailure,
            500..=599 => Self::ServerError,
            _ => Self::Success,
        }
    }

    /// Whether the call failed.
    pub fn is_failure(self) -> bool {
        self != Self::Success
    }

    /// Whether the failure says the target could not serve at all rather than served an error:
    /// gateway statuses and connection failures (Envoy's "gateway failure" class).
    pub fn is_gateway_failure(self) -> bool {
        matches!(
            self,
            Self::GatewayFailure | Self::Timeout | Self::Reset | Self::Refused
        )
    }

    /// Every outcome, for parsing and listing.
    pub const ALL: [Self; 6] = [
        Self::Success,
        Self::ServerError,
        Self::GatewayFailure,
        Self::Timeout,
        Self::Reset,
        Self::Refused,
    ];

    /// The outcome named `name` ([`CallOutcome::as_str`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == name)
    }

    /// The lowercase name used in metric labels and the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::ServerError => "server_error",
            Self::GatewayFailure => "gateway_failure",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::Refused => "refused",
        }
    }
}

/// One real call to a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// How it ended.
    pub outcome: CallOutcome,
    /// How long it took.
    pub latency: Duration,
}

impl Call {
    /// A call that ended with an HTTP `status` after `latency`.
    pub fn http(status: u16, latency: Duration) -> Self {
        Self {
            outcome: CallOutcome::from_status(status),
            latency,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fall_in_their_class() {
        assert_eq!(CallOutcome::from_status(200), CallOutcome::Success);
        assert_eq!(CallOutcome::from_status(404), CallOutcome::Success);
        assert_eq!(CallOutcome::from_status(500), CallOutcome::ServerError);
        for gateway in [502, 503, 504] {
            assert!(CallOutcome::from_status(gateway).is_gateway_failure());
        }
        assert!(!CallOutcome::ServerError.is_gateway_failure());
        assert!(CallOutcome::Refused.is_gateway_failure());
        assert!(!CallOutcome::Success.is_failure());
        for outcome in CallOutcome::ALL {
            assert_eq!(CallOutcome::from_name(outcome.as_str()), Some(outcome));
        }
        assert_eq!(CallOutcome::from_name("fine"), None);
    }
}
