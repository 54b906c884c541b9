//! The result of one probe run and the closed set of reasons a probe can fail.
//!
//! `FailureReason` is deliberately a closed enum: the same names appear in the API, as the
//! `reason` label of `probe_failures_total` and in logs, so a dashboard built on one of them works
//! on all of them, and the label's cardinality stays bounded.

use std::fmt;
use std::sync::Arc;
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
    /// The TLS handshake failed: bad certificate, wrong name, protocol mismatch.
    Tls,
    /// Any other I/O error.
    Io,
    /// The reply body was not what the probe expected (TCP `expect`, HTTP `body_contains`).
    Body,
    /// The HTTP status was not one of the expected ones.
    Status,
    /// A declared assertion on the reply (JSON field, header) did not hold.
    Assertion,
    /// A dependency of the target is down (reserved for the dependency tier).
    Dependency,
    /// The engine itself ran out of a resource (descriptors, buffers, memory, local ports): its
    /// fault, never the target's. The engine does not record such a run as the target's
    /// result (it retries it soon), so this reason is in no target's status and not in
    /// [`FailureReason::ALL`]; it is counted as `probe_engine_resource_errors_total{kind}`.
    Exhausted(Exhausted),
}

/// A resource the engine ran out of, by the error the kernel gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exhausted {
    /// File descriptors: `EMFILE` (the process's limit) or `ENFILE` (the system's).
    Descriptors,
    /// Socket buffers: `ENOBUFS`.
    Buffers,
    /// Kernel memory: `ENOMEM`.
    Memory,
    /// Local (ephemeral) ports: `EADDRNOTAVAIL` from a connect.
    Ports,
}

impl Exhausted {
    /// Every kind, in a stable order.
    pub const ALL: [Exhausted; 4] = [Self::Descriptors, Self::Buffers, Self::Memory, Self::Ports];

    /// The `kind` label of `probe_engine_resource_errors_total`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Descriptors => "descriptors",
            Self::Buffers => "buffers",
            Self::Memory => "memory",
            Self::Ports => "ports",
        }
    }

    /// The resource an I/O error says the process ran out of, if it says so.
    pub fn of(err: &std::io::Error) -> Option<Self> {
        match err.raw_os_error()? {
            libc::EMFILE | libc::ENFILE => Some(Self::Descriptors),
            libc::ENOBUFS => Some(Self::Buffers),
            libc::ENOMEM => Some(Self::Memory),
            libc::EADDRNOTAVAIL => Some(Self::Ports),
            _ => None,
        }
    }
}

impl FailureReason {
    /// Every reason, in a stable order; used to document and pre-register label values.
    pub const ALL: [FailureReason; 11] = [
        Self::Refused,
        Self::Timeout,
        Self::Reset,
        Self::Unreachable,
        Self::Dns,
        Self::Tls,
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
            Self::Tls => "tls",
            Self::Io => "io",
            Self::Body => "body",
            Self::Status => "status",
            Self::Assertion => "assertion",
            Self::Dependency => "dependency",
            Self::Exhausted(_) => "exhausted",
        }
    }

    /// Classifies an I/O error from a socket operation. The errors that say the engine ran out
    /// of something come first ([`Exhausted::of`]): they are never the target's.
    ///
    /// Timeouts are not classified here: the prober enforces its own deadline and reports
    /// `Timeout` itself, so an OS-level `TimedOut` only shows up for kernel-side retries giving up.
    pub fn from_io(err: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        if let Some(exhausted) = Exhausted::of(err) {
            return Self::Exhausted(exhausted);
        }
        match err.kind() {
            K::ConnectionRefused => Self::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Self::Reset,
            K::TimedOut => Self::Timeout,
            K::HostUnreachable | K::NetworkUnreachable => Self::Unreachable,
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

/// How well one check went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The target did its job.
    Up,
    /// The target did its job, but not well (slow, read-only, ...): the reasons say how.
    Degraded(Vec<String>),
    /// The target did not do its job.
    Failed(Failure),
}

/// How much a [`Signal`] matters, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing, nothing to do.
    Info,
    /// Minor.
    Low,
    /// Needs attention soon.
    Medium,
    /// Hurts the business now.
    High,
    /// An outage of a business function.
    Critical,
}

impl Severity {
    /// Every severity, lowest first.
    pub const ALL: [Severity; 5] = [
        Self::Info,
        Self::Low,
        Self::Medium,
        Self::High,
        Self::Critical,
    ];

    /// The lowercase name used in config, the API and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named business event recognised in a reply, e.g. `StockReservationFailed` for a 503 whose
/// `x-reason` header says `inventory_shortage`.
///
/// Raw signals (status codes, headers) tell an operator what broke technically; a signal names
/// what the business lost, which is what an alert should say.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signal {
    /// The event's name, as declared.
    pub name: Arc<str>,
    /// How much it matters.
    pub severity: Severity,
}

/// What a probe's check returns: a verdict, the business signals seen in the reply, and what
/// the check had to work around on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// How the check went.
    pub verdict: Verdict,
    /// Signals recognised in the reply, whatever the verdict.
    pub signals: Vec<Signal>,
    /// What the check worked around to reach its verdict.
    pub remarks: Remarks,
    /// What the TLS handshake behind the check showed of the server, when there was one (the
    /// TLS tier; HTTPS), also when the certificate was refused.
    pub tls: Option<Arc<TlsFacts>>,
}

/// What a TLS handshake showed of a server: the certificates it sent and the protocol agreed.
///
/// Kept with a target's latest result: these are what `probe_ssl_earliest_cert_expiry` (and the
/// rest of blackbox_exporter's TLS series) and the API's `tls` field report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFacts {
    /// The protocol version agreed, as blackbox_exporter spells it ("TLS 1.3"); `None` when the
    /// handshake ended before that was known (a refused certificate).
    pub version: Option<&'static str>,
    /// The certificates the server sent, the leaf first.
    pub chain: Vec<CertificateFacts>,
    /// The SHA-256 of the leaf's DER encoding: the fingerprint that `openssl x509 -fingerprint
    /// -sha256` shows and blackbox_exporter's `probe_ssl_last_chain_info` carries. Kept for the
    /// leaf alone, the one certificate anything reports it for.
    pub leaf_sha256: Option<[u8; 32]>,
    /// The DNS names of the leaf's subjectAltName.
    pub leaf_dns_names: Vec<String>,
}

/// One certificate of a server's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateFacts {
    /// The subject's distinguished name, e.g. `CN=api.internal`.
    pub subject: String,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The start of its validity.
    pub not_before: SystemTime,
    /// The end of its validity.
    pub not_after: SystemTime,
}

impl TlsFacts {
    /// The leaf certificate, the one naming the server.
    pub fn leaf(&self) -> Option<&CertificateFacts> {
        self.chain.first()
    }

    /// The earliest end of validity of any certificate sent: blackbox_exporter's
    /// `probe_ssl_earliest_cert_expiry`.
    pub fn earliest_expiry(&self) -> Option<SystemTime> {
        self.chain.iter().map(|c| c.not_after).min()
    }

    /// The earliest end of validity along the chain the leaf heads: from the leaf, each
    /// certificate followed by the one sent that issued it (extra certificates a server sends
    /// out of that path do not count): the counterpart of blackbox_exporter's
    /// `probe_ssl_last_chain_expiry_timestamp_seconds`, for the one path a TLS client verifies.
    pub fn chain_expiry(&self) -> Option<SystemTime> {
        let mut current = self.leaf()?;
        let mut earliest = current.not_after;
        // At most one step per certificate, so a loop of issuers ends.
        for _ in 1..self.chain.len() {
            if current.issuer == current.subject {
                break;
            }
            let Some(issuer) = self.chain.iter().find(|c| c.subject == current.issuer) else {
                break;
            };
            earliest = earliest.min(issuer.not_after);
            current = issuer;
        }
        Some(earliest)
    }
}

/// What one check saw on the way to its verdict, beyond it: the figures blackbox_exporter's
/// `/probe` series report (the status code, the DNS sections' sizes, the gRPC status...), for an
/// embedder that answers such queries ([`crate::tier::Probe::observe`]).
///
/// Not part of [`CheckResult`]: the engine keeps a result per target, and a scheduled check has
/// no reader for these.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Observed {
    /// The address the check reached (connected to, or asked), once it got that far.
    pub addr: Option<std::net::IpAddr>,
    /// What an HTTP check's final reply was.
    pub http: Option<HttpObserved>,
    /// What a DNS check's reply held.
    pub dns: Option<DnsObserved>,
    /// What a gRPC health check was answered.
    pub grpc: Option<GrpcObserved>,
    /// What an ICMP check's phases took.
    pub icmp: Option<IcmpObserved>,
}

/// An HTTP check's final reply (after the redirects it followed).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct HttpObserved {
    /// Its status code.
    pub status: u16,
    /// Its HTTP version, as blackbox_exporter writes it: 1.0, 1.1, 2 or 3.
    pub version: f64,
    /// How many redirects it met: those followed to reach it, and itself when it is one that
    /// was not to be followed.
    pub redirects: usize,
    /// Its `Content-Length`, when it had one.
    pub content_length: Option<u64>,
    /// How many bytes of body were read, decoded: blackbox_exporter's
    /// `probe_http_uncompressed_body_length`.
    pub body_length: usize,
    /// Whether it came over TLS.
    pub tls: bool,
    /// Its `Last-Modified`, when it had one that reads as an HTTP date.
    pub last_modified: Option<std::time::SystemTime>,
    /// Whether it failed a body or header regular expression (`body_matches`,
    /// `header_matches`, and their `not` forms).
    pub failed_due_to_regex: bool,
    /// How long each phase took, summed over the redirects followed; measured only on a fresh
    /// connection (`fresh_connection`), where every phase happens within the check (zero
    /// otherwise).
    pub phases: HttpPhases,
}

/// The phases of an HTTP exchange, as blackbox_exporter's `probe_http_duration_seconds{phase}`
/// divides it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpPhases {
    /// Looking the host up.
    pub resolve: Duration,
    /// The TCP handshake.
    pub connect: Duration,
    /// The TLS handshake.
    pub tls: Duration,
    /// From the connection being ready to the reply's head.
    pub processing: Duration,
    /// Reading the body.
    pub transfer: Duration,
}

/// The phases of an ICMP check, as blackbox_exporter's `probe_icmp_duration_seconds{phase}`
/// divides it (its `resolve` phase is the lookup before the check).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IcmpObserved {
    /// Opening the socket and building the request.
    pub setup: Duration,
    /// From sending the echo request to its reply (the mean, over several).
    pub rtt: Duration,
    /// The TTL (IPv4) or hop limit (IPv6) of the first reply, as it arrived.
    pub hop_limit: Option<u8>,
}

/// What a DNS exchange took, and what its reply held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DnsObserved {
    /// Whether a reply to the query came back (whatever its code).
    pub replied: bool,
    /// Making the socket ready: a UDP socket's bind and connect, or the TCP handshake.
    pub connect: Duration,
    /// From then to the reply, or to giving up.
    pub request: Duration,
    /// For an SOA query, the serial of the SOA in the answer (0 without one).
    pub serial: Option<u32>,
    /// Records in its answer section.
    pub answer: usize,
    /// Records in its authority section.
    pub authority: usize,
    /// Records in its additional section.
    pub additional: usize,
}

/// What a gRPC health check was answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrpcObserved {
    /// The call's gRPC status code: 0 (OK) for an answer, 5 (NOT_FOUND) for an unknown service.
    pub status_code: i32,
    /// The serving status answered, as grpc.health.v1 names it (`SERVING`), when there was one.
    pub serving_status: Option<&'static str>,
}

/// What a check worked around to reach its verdict: ordinary trouble on the path (a kept-alive
/// connection the server had just closed) that is not the target's fault, and that the verdict
/// therefore does not show. The engine counts each kind and shows them with the result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remarks {
    /// A reused connection failed before any byte of the reply arrived (the keep-alive race),
    /// and the request was sent again on a fresh connection.
    pub stale_connection_retried: bool,
    /// The resolver failed with trouble (a timeout, SERVFAIL, no server reachable) rather than
    /// an answer. When the check went on with the name's last good answer, the verdict is about
    /// the target; when there was none young enough, the check failed as `dns`, and the engine
    /// defers that failure while the resolver itself is out (see [`crate::tier::resolve`]).
    pub dns_trouble: Option<DnsTrouble>,
}

/// Resolver trouble met while looking up one name: see [`Remarks::dns_trouble`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsTrouble {
    /// The name looked up.
    pub name: Arc<str>,
    /// What the resolver said, e.g. "request timed out".
    pub error: String,
    /// The age of the last good answer the check used instead; `None` when there was no answer
    /// younger than the target's `dns_stale_for`, and the check failed.
    pub stale_answer_age: Option<Duration>,
}

impl DnsTrouble {
    /// Whether the check went on with a stale answer.
    pub fn used_stale_answer(&self) -> bool {
        self.stale_answer_age.is_some()
    }
}

impl fmt::Display for DnsTrouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stale_answer_age {
            Some(age) => {
                // Whole seconds: the milliseconds of an age say nothing to a reader.
                let age = Duration::from_secs(age.as_secs());
                write!(
                    f,
                    "resolving {} failed ({}); used its last good answer, {} old",
                    self.name,
                    self.error,
                    humantime::format_duration(age)
                )
            }
            None => write!(
                f,
                "resolving {} failed ({}); no recent answer to fall back on",
                self.name, self.error
            ),
        }
    }
}

impl Remarks {
    /// Whether there is nothing to say.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The remarks in words, for the API and logs; `None` when there are none.
    pub fn describe(&self) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        if self.stale_connection_retried {
            parts
                .push("a reused connection closed before the reply; retried on a fresh one".into());
        }
        if let Some(trouble) = &self.dns_trouble {
            parts.push(trouble.to_string());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

impl CheckResult {
    /// A passing check without signals.
    pub fn up() -> Self {
        Self::of(Verdict::Up)
    }

    /// A check with this verdict and nothing else to say.
    pub fn of(verdict: Verdict) -> Self {
        Self {
            verdict,
            signals: Vec::new(),
            remarks: Remarks::default(),
            tls: None,
        }
    }

    /// A failed check without signals.
    pub fn failed(failure: Failure) -> Self {
        Self::of(Verdict::Failed(failure))
    }

    /// The failure, if the check failed.
    pub fn failure(&self) -> Option<&Failure> {
        match &self.verdict {
            Verdict::Failed(f) => Some(f),
            _ => None,
        }
    }
}

impl From<Result<(), Failure>> for CheckResult {
    fn from(result: Result<(), Failure>) -> Self {
        match result {
            Ok(()) => Self::up(),
            Err(f) => Self::failed(f),
        }
    }
}

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
    /// Passed, but degraded.
    degraded: bool,
}

impl Outcome {
    /// Records a run that finished at `at` after `latency` with `verdict`.
    pub fn new(at: SystemTime, latency: Duration, verdict: &Verdict) -> Self {
        let at_unix_ms = unix_ms(at);
        let latency_us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        let (reason, degraded) = match verdict {
            Verdict::Up => (None, false),
            Verdict::Degraded(_) => (None, true),
            Verdict::Failed(f) => (Some(f.reason), false),
        };
        Self {
            at_unix_ms,
            latency_us,
            reason,
            degraded,
        }
    }

    /// Whether the run passed (possibly degraded).
    pub fn ok(&self) -> bool {
        self.reason.is_none()
    }

    /// Whether the run passed but was degraded.
    pub fn degraded(&self) -> bool {
        self.degraded
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

/// `at` in milliseconds since the Unix epoch (0 before it): 8 bytes where a `SystemTime` takes
/// 16, and how records and fingerprints carry times.
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `ms` after the Unix epoch; `None` for 0, which stands for "not yet".
pub fn from_unix_ms(ms: u64) -> Option<SystemTime> {
    (ms != 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
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
        let o = Outcome::new(
            at,
            Duration::from_micros(1500),
            &Verdict::Failed(Failure::new(FailureReason::Reset, "test")),
        );
        assert_eq!(o.at(), at);
        assert_eq!(o.latency(), Duration::from_micros(1500));
        assert_eq!(o.reason(), Some(FailureReason::Reset));
        assert!(!o.ok());
    }

    #[test]
    fn running_out_is_the_engines_and_other_errors_are_the_targets() {
        let io = std::io::Error::from_raw_os_error;
        for (errno, kind) in [
            (libc::EMFILE, Exhausted::Descriptors),
            (libc::ENFILE, Exhausted::Descriptors),
            (libc::ENOBUFS, Exhausted::Buffers),
            (libc::ENOMEM, Exhausted::Memory),
            (libc::EADDRNOTAVAIL, Exhausted::Ports),
        ] {
            assert_eq!(
                FailureReason::from_io(&io(errno)),
                FailureReason::Exhausted(kind)
            );
        }
        assert_eq!(
            FailureReason::from_io(&io(libc::ECONNREFUSED)),
            FailureReason::Refused
        );
        assert_eq!(
            FailureReason::from_io(&io(libc::EHOSTUNREACH)),
            FailureReason::Unreachable
        );
        assert!(
            !FailureReason::ALL
                .iter()
                .any(|r| matches!(r, FailureReason::Exhausted(_)))
        );
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

    #[test]
    fn dns_trouble_is_described_with_the_answers_age() {
        let mut remarks = Remarks::default();
        assert_eq!(remarks.describe(), None);
        remarks.dns_trouble = Some(DnsTrouble {
            name: "db.internal".into(),
            error: "request timed out".into(),
            stale_answer_age: Some(Duration::from_millis(42_700)),
        });
        assert_eq!(
            remarks.describe().as_deref(),
            Some(
                "resolving db.internal failed (request timed out); used its last good answer, \
                 42s old"
            )
        );
        remarks.stale_connection_retried = true;
        remarks.dns_trouble = Some(DnsTrouble {
            stale_answer_age: None,
            ..remarks.dns_trouble.clone().unwrap()
        });
        assert_eq!(
            remarks.describe().as_deref(),
            Some(
                "a reused connection closed before the reply; retried on a fresh one; resolving \
                 db.internal failed (request timed out); no recent answer to fall back on"
            )
        );
    }
}
