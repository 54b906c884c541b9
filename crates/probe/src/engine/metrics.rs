//! The engine's metrics.
//!
//! Names follow Prometheus conventions, and where blackbox_exporter already names a concept
//! (`probe_success`, `probe_duration_seconds`) its name is kept, so existing alerts keep working.
//!
//! Two kinds, kept two ways:
//! - **Process-wide series** (scheduler lag, in-flight runs, self-health, the resolver, the
//!   fleet-wide durations and failures by probe kind) go through the `metrics` facade to whatever recorder the embedder installed;
//!   [`describe_metrics`] describes them.
//! - **Series about one target** (or one graph node, or one pool member) are counted in the
//!   target itself ([`Meters`]) and written out at scrape time from the live targets by
//!   [`Engine::encode_metrics`](super::Engine::encode_metrics), the way Prometheus clients'
//!   collectors work. A target that leaves the engine takes its series with it by the next
//!   scrape: nothing else holds them. The facade cannot do that, since a `metrics` recorder has
//!   no way to forget a series, so every target that ever existed (every pod of a lease-fed
//!   topology) would stay in every scrape. A target whose spec changes keeps its meters, and so
//!   its series.
//!
//! Counting in the target is also cheaper: a run bumps its own counters under one uncontended
//! lock, where the facade looks each labelled series up in a shared registry, and a target's
//! series cost 40 bytes plus 128 for its duration histogram, where the exporter's came
//! to about 2.8 KB.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::health::state::HealthState;
use crate::outcome::{FailureReason, TlsFacts};

/// Registers descriptions and units of the process-wide metrics the library emits through the
/// `metrics` facade.
///
/// Call it once after installing a `metrics` recorder, so exporters can print `# HELP` lines.
/// The per-target families are described by [`Engine::encode_metrics`](super::Engine::encode_metrics)
/// itself.
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        "probe_scheduler_lag_seconds",
        Unit::Seconds,
        "Delay between a run's planned and actual start."
    );
    describe_gauge!("probe_in_flight", "Probe runs in progress.");
    describe_counter!(
        "probe_engine_resource_errors_total",
        "Probe runs that found the engine itself out of descriptors, buffers, memory or local \
         ports, by kind: retried, never counted against their targets."
    );
    describe_histogram!(
        "probe_fleet_duration_seconds",
        Unit::Seconds,
        "How long probe runs of every target took, by probe kind: kept whether or not targets \
         keep histograms of their own."
    );
    describe_counter!(
        "probe_fleet_failures_total",
        "Failed probe runs of every target, by probe kind and closed failure reason."
    );
    describe_gauge!(
        "probe_self_health_multiplier",
        "The engine's local health multiplier: 0 when it keeps time; timeouts scale by 1 + it."
    );
    describe_gauge!(
        "probe_resolver_up",
        "Whether the engine's resolver works (1) or is out (0): trouble for most recent names."
    );
    describe_counter!(
        "probe_record_feed_dropped_total",
        "Records (transitions, runs) the history feed lost because its reader fell behind."
    );
    describe_counter!(
        "probe_resolver_outages_total",
        "Outages of the engine's resolver: DNS failures are not counted against targets meanwhile."
    );
}

/// The name, type and help of every per-target family that
/// [`Engine::encode_metrics`](super::Engine::encode_metrics) may write. A family appears in a
/// scrape only once a target has samples for it, so this, not a scrape, is the list to document
/// or lint what an embedder exports.
pub fn target_metric_families() -> impl Iterator<Item = (&'static str, &'static str, &'static str)>
{
    Family::ALL.into_iter().map(Family::describe)
}

/// The upper bounds of the duration histograms' buckets, in seconds: loopback microseconds to
/// multi-second timeouts. Explicit buckets (not summaries) so they aggregate across instances;
/// an exporter gives `probe_fleet_duration_seconds` the same.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram of durations over [`DURATION_BUCKETS`]: 128 bytes.
#[derive(Default)]
pub(crate) struct Histogram {
    /// Observations per bucket, not cumulative; the last one is `+Inf`.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    /// The sum of observations, in nanoseconds (584 years before it wraps).
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Writes the histogram's `_bucket`, `_sum` and `_count` lines, each labelled `labels`
    /// (`key="value"` pairs, comma-separated, no braces). Written piece by piece, the bounds
    /// as constant text: at 100k targets this is two million lines a scrape.
    fn encode(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut count = 0;
        for (bucket, le) in self.buckets.iter().zip(BUCKET_LABELS) {
            count += bucket.load(Ordering::Relaxed);
            out.push_str(name);
            out.push_str("_bucket{");
            out.push_str(labels);
            out.push_str(sep);
            out.push_str("le=\"");
            out.push_str(le);
            out.push_str("\"} ");
            let _ = writeln!(out, "{count}");
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        for (suffix, value) in [("_sum", None), ("_count", Some(count))] {
            out.push_str(name);
            out.push_str(suffix);
            if !labels.is_empty() {
                out.push('{');
                out.push_str(labels);
                out.push('}');
            }
            let _ = match value {
                Some(count) => writeln!(out, " {count}"),
                None => writeln!(out, " {sum}"),
            };
        }
    }
}

/// [`DURATION_BUCKETS`] as the `le` labels spell them, and `+Inf`.
const BUCKET_LABELS: [&str; DURATION_BUCKETS.len() + 1] = [
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10", "+Inf",
];

/// One counter a target keeps, by what it counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    Failure(FailureReason),
    Transition { from: HealthState, to: HealthState },
    Signal(Arc<str>),
    Ejection(&'static str),
    Deferred,
    StaleConnectionRetry,
    DnsStaleAnswer,
    ActiveSkipped,
}

impl Counted {
    fn family(&self) -> Family {
        match self {
            Self::Failure(_) => Family::Failures,
            Self::Transition { .. } => Family::Transitions,
            Self::Signal(_) => Family::Signals,
            Self::Ejection(_) => Family::Ejections,
            Self::Deferred => Family::Deferred,
            Self::StaleConnectionRetry => Family::StaleRetries,
            Self::DnsStaleAnswer => Family::DnsStale,
            Self::ActiveSkipped => Family::ActiveSkipped,
        }
    }

    /// The labels besides `target`, with a leading comma when there are any.
    fn labels(&self, out: &mut String) {
        match self {
            Self::Failure(reason) => {
                let _ = write!(out, ",reason=\"{}\"", reason.as_str());
            }
            Self::Transition { from, to } => {
                let _ = write!(out, ",from=\"{}\",to=\"{}\"", from.as_str(), to.as_str());
            }
            Self::Signal(name) => {
                out.push_str(",signal=\"");
                escape_label(out, name);
                out.push('"');
            }
            Self::Ejection(reason) => {
                let _ = write!(out, ",reason=\"{reason}\"");
            }
            Self::Deferred
            | Self::StaleConnectionRetry
            | Self::DnsStaleAnswer
            | Self::ActiveSkipped => {}
        }
    }
}

/// What a target counts about itself, for [`Engine::encode_metrics`](super::Engine::encode_metrics):
/// 40 bytes in the target, plus its histogram. Handed on to its successor when its spec
/// changes, so its series go on.
pub(crate) struct Meters {
    /// The last run's outcome: 0 failed, 1 succeeded, 2 no run yet.
    last_success: AtomicU8,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    /// `None` until the first run, and while per-target histograms are off.
    durations: Option<Box<Histogram>>,
    /// A handful at most: a target fails in few ways, and moves between few states.
    counters: Vec<(Counted, u64)>,
}

impl Meters {
    pub fn new() -> Self {
        Self {
            last_success: AtomicU8::new(2),
            counts: Mutex::default(),
        }
    }

    /// Takes over what `predecessor` counted (a target whose spec changed); it counts nothing
    /// more that shows.
    pub fn take_over(&self, predecessor: &Self) {
        let taken = std::mem::take(&mut *predecessor.counts.lock());
        self.last_success.store(
            predecessor.last_success.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        *self.counts.lock() = taken;
    }

    /// Counts a run: whether it passed, its duration for the target's own histogram (`None`
    /// while per-target histograms are off) and what else it counts.
    pub fn run(&self, ok: bool, latency: Option<Duration>, counted: impl Iterator<Item = Counted>) {
        self.last_success.store(u8::from(ok), Ordering::Relaxed);
        let mut counts = self.counts.lock();
        match latency {
            Some(latency) => counts
                .durations
                .get_or_insert_with(Box::default)
                .record(latency),
            None => counts.durations = None,
        }
        for counted in counted {
            counts.add(counted);
        }
    }

    pub fn count(&self, counted: Counted) {
        self.counts.lock().add(counted);
    }

    /// Frees the target's histogram: per-target histograms were turned off.
    pub fn drop_histogram(&self) {
        self.counts.lock().durations = None;
    }
}

impl Counts {
    fn add(&mut self, counted: Counted) {
        match self.counters.iter_mut().find(|(c, _)| *c == counted) {
            Some((_, n)) => *n += 1,
            None => self.counters.push((counted, 1)),
        }
    }
}

/// The families written at scrape time, in the order they are written.
#[derive(Clone, Copy)]
enum Family {
    Success,
    Durations,
    Up,
    State,
    Transitions,
    Failures,
    Signals,
    Deferred,
    StaleRetries,
    DnsStale,
    ActiveSkipped,
    Ejections,
    Ejected,
    Weight,
    Circuit,
    Score,
    DependencyDown,
    SslEarliestExpiry,
    SslChainExpiry,
    TlsVersion,
}

impl Family {
    const ALL: [Family; 20] = [
        Self::Success,
        Self::Durations,
        Self::Up,
        Self::State,
        Self::Transitions,
        Self::Failures,
        Self::Signals,
        Self::Deferred,
        Self::StaleRetries,
        Self::DnsStale,
        Self::ActiveSkipped,
        Self::Ejections,
        Self::Ejected,
        Self::Weight,
        Self::Circuit,
        Self::Score,
        Self::DependencyDown,
        Self::SslEarliestExpiry,
        Self::SslChainExpiry,
        Self::TlsVersion,
    ];

    /// Name, type and help.
    const fn describe(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Success => (
                "probe_success",
                "gauge",
                "Whether the latest probe of the target succeeded (1) or failed (0).",
            ),
            Self::Durations => (
                "probe_duration_seconds",
                "histogram",
                "How long the target's probe runs took (when per-target histograms are on).",
            ),
            Self::Up => (
                "probe_target_up",
                "gauge",
                "Whether the target's verdict is UP (1) or not (0).",
            ),
            Self::State => (
                "probe_target_state",
                "gauge",
                "The target's or group's verdict: 0 PROBING, 1 UP, 2 DEGRADED, 3 MAINTENANCE, \
                 4 DOWN.",
            ),
            Self::Transitions => (
                "probe_state_transitions_total",
                "counter",
                "Verdict changes of the target, by from and to state.",
            ),
            Self::Failures => (
                "probe_failures_total",
                "counter",
                "Failed probe runs, by closed failure reason.",
            ),
            Self::Signals => (
                "probe_signals_total",
                "counter",
                "Business signals recognised in probe replies, by target and signal.",
            ),
            Self::Deferred => (
                "probe_verdicts_deferred_total",
                "counter",
                "Probe failures not counted towards DOWN because the engine itself ran late, or \
                 its resolver was out.",
            ),
            Self::StaleRetries => (
                "probe_http_stale_connection_retries_total",
                "counter",
                "HTTP probe requests sent again on a fresh connection because a reused \
                 kept-alive one closed before the reply.",
            ),
            Self::DnsStale => (
                "probe_dns_stale_answers_total",
                "counter",
                "Probe runs that used a name's last good answer because the resolver had trouble.",
            ),
            Self::ActiveSkipped => (
                "probe_active_skipped_total",
                "counter",
                "Active probe runs skipped because real traffic proved the target healthy.",
            ),
            Self::Ejections => (
                "probe_ejections_total",
                "counter",
                "Ejections of the target from its pool by real traffic, by rule (reason).",
            ),
            Self::Ejected => (
                "probe_ejected",
                "gauge",
                "Whether the target is out of its pool (1) or serving (0).",
            ),
            Self::Weight => (
                "probe_target_weight",
                "gauge",
                "The target's share of its pool's traffic in [0, 1]: 0 while ejected, ramping up \
                 after.",
            ),
            Self::Circuit => (
                "probe_circuit_state",
                "gauge",
                "The target's circuit: 0 closed, 1 open, 2 half-open, 3 forced open, 4 disabled.",
            ),
            Self::Score => (
                "probe_health_score",
                "gauge",
                "Dependency-graph health score of the target or group in [0, 1]; NaN while \
                 unknown.",
            ),
            Self::DependencyDown => (
                "probe_dependency_down",
                "gauge",
                "Whether a critical dependency of the target or group is DOWN (1) or not (0).",
            ),
            // blackbox_exporter's names and units, so that alerts written for it keep working.
            Self::SslEarliestExpiry => (
                "probe_ssl_earliest_cert_expiry",
                "gauge",
                "Unix time at which the first certificate the server sent expires.",
            ),
            Self::SslChainExpiry => (
                "probe_ssl_last_chain_expiry_timestamp_seconds",
                "gauge",
                "Unix time at which the first certificate of the chain from the server's \
                 certificate to its issuers expires.",
            ),
            Self::TlsVersion => (
                "probe_tls_version_info",
                "gauge",
                "The TLS version the latest handshake agreed, as the version label.",
            ),
        }
    }
}

/// The per-target families being written: one buffer each, so that one pass over the targets
/// writes every family and each comes out whole.
pub(crate) struct Encoder {
    families: [String; Family::ALL.len()],
    /// A target's labels, reused from one target to the next.
    labels: String,
}

impl Encoder {
    pub fn new() -> Self {
        Self {
            families: Default::default(),
            labels: String::new(),
        }
    }

    fn family(&mut self, family: Family) -> &mut String {
        &mut self.families[family as usize]
    }

    /// Writes a gauge sample of `target`.
    fn gauge(&mut self, family: Family, target: &str, value: f64) {
        let (name, ..) = family.describe();
        let out = self.family(family);
        out.push_str(name);
        out.push_str("{target=\"");
        out.push_str(target);
        out.push_str("\"} ");
        write_value(out, value);
        out.push('\n');
    }

    /// Writes a target's own series.
    pub fn target(&mut self, target: &str, state: HealthState, meters: &Meters) {
        match meters.last_success.load(Ordering::Relaxed) {
            0 => self.gauge(Family::Success, target, 0.0),
            1 => self.gauge(Family::Success, target, 1.0),
            _ => {}
        }
        self.gauge(
            Family::Up,
            target,
            if state == HealthState::Up { 1.0 } else { 0.0 },
        );
        self.gauge(Family::State, target, f64::from(state as u8));
        let counts = meters.counts.lock();
        if let Some(h) = &counts.durations {
            let (name, ..) = Family::Durations.describe();
            let labels = &mut self.labels;
            labels.clear();
            labels.push_str("target=\"");
            labels.push_str(target);
            labels.push('"');
            h.encode(&mut self.families[Family::Durations as usize], name, labels);
        }
        for (counted, n) in &counts.counters {
            let family = counted.family();
            let (name, ..) = family.describe();
            let out = self.family(family);
            let _ = write!(out, "{name}{{target=\"{target}\"");
            counted.labels(out);
            let _ = writeln!(out, "}} {n}");
        }
    }

    /// A pool member's standing.
    pub fn member(&mut self, target: &str, weight: f64, ejected: bool) {
        self.gauge(Family::Weight, target, weight);
        self.gauge(Family::Ejected, target, if ejected { 1.0 } else { 0.0 });
    }

    /// A circuit breaker's state, by its code.
    pub fn circuit(&mut self, target: &str, code: u8) {
        self.gauge(Family::Circuit, target, f64::from(code));
    }

    /// A graph node's score and mark (targets and groups), and a group's verdict (a target's is
    /// written with its own series).
    pub fn node(
        &mut self,
        node: &str,
        score: Option<f64>,
        dependency_down: bool,
        group_state: Option<HealthState>,
    ) {
        if let Some(state) = group_state {
            self.gauge(Family::State, node, f64::from(state as u8));
        }
        self.gauge(Family::Score, node, score.unwrap_or(f64::NAN));
        self.gauge(
            Family::DependencyDown,
            node,
            if dependency_down { 1.0 } else { 0.0 },
        );
    }

    /// What the target's latest TLS handshake showed.
    pub fn tls(&mut self, target: &str, facts: &TlsFacts) {
        let unix = |at: SystemTime| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        if let Some(at) = facts.earliest_expiry() {
            self.gauge(Family::SslEarliestExpiry, target, unix(at));
        }
        if let Some(at) = facts.chain_expiry() {
            self.gauge(Family::SslChainExpiry, target, unix(at));
        }
        if let Some(version) = facts.version {
            let (name, ..) = Family::TlsVersion.describe();
            let out = self.family(Family::TlsVersion);
            let _ = writeln!(out, "{name}{{target=\"{target}\",version=\"{version}\"}} 1");
        }
    }

    /// Appends every family with samples, each after its `# HELP` and `# TYPE` lines.
    pub fn finish(self, out: &mut String) {
        for (family, samples) in Family::ALL.into_iter().zip(self.families) {
            if samples.is_empty() {
                continue;
            }
            let (name, kind, help) = family.describe();
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            out.push_str(&samples);
        }
    }
}

/// A sample value as the text format spells it.
fn write_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value == 0.0 {
        out.push('0');
    } else if value == 1.0 {
        out.push('1');
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Escapes a label value: backslash, double quote and newline, as the text format asks. Target
/// ids need none (they are `[a-z0-9._-]`); signal names are the user's.
fn escape_label(out: &mut String, value: &str) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            ch => out.push(ch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_is_cumulative_and_counts_everything() {
        let h = Histogram::default();
        h.record(Duration::from_micros(300));
        h.record(Duration::from_millis(7));
        h.record(Duration::from_secs(60));
        let mut out = String::new();
        h.encode(&mut out, "x", "target=\"a\"");
        assert!(
            out.contains("x_bucket{target=\"a\",le=\"0.0005\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{target=\"a\",le=\"0.005\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{target=\"a\",le=\"0.01\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{target=\"a\",le=\"10\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{target=\"a\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("x_sum{target=\"a\"} 60.0073\n"), "{out}");
        assert!(out.contains("x_count{target=\"a\"} 3\n"), "{out}");
    }

    #[test]
    fn the_bucket_labels_spell_the_bounds() {
        for (bound, label) in DURATION_BUCKETS.iter().zip(BUCKET_LABELS) {
            assert_eq!(bound.to_string(), label);
        }
        assert_eq!(BUCKET_LABELS[DURATION_BUCKETS.len()], "+Inf");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        Counted::Signal("a\"b\\c\nd".into()).labels(&mut out);
        assert_eq!(out, r#",signal="a\"b\\c\nd""#);
    }

    #[test]
    fn families_come_out_whole_with_help_and_type_and_only_with_samples() {
        let a = Meters::new();
        let b = Meters::new();
        for meters in [&a, &b] {
            meters.run(
                false,
                None,
                [Counted::Failure(FailureReason::Refused)].into_iter(),
            );
        }
        let mut encoder = Encoder::new();
        encoder.target("a", HealthState::Down, &a);
        encoder.target("b", HealthState::Up, &b);
        let mut out = String::new();
        encoder.finish(&mut out);
        let failures = "# HELP probe_failures_total Failed probe runs, by closed failure reason.\n\
             # TYPE probe_failures_total counter\n\
             probe_failures_total{target=\"a\",reason=\"refused\"} 1\n\
             probe_failures_total{target=\"b\",reason=\"refused\"} 1\n";
        assert!(out.contains(failures), "{out}");
        assert!(out.contains("probe_target_up{target=\"a\"} 0\nprobe_target_up{target=\"b\"} 1\n"));
        assert!(out.contains(
            "# TYPE probe_target_state gauge\n\
             probe_target_state{target=\"a\"} 4\nprobe_target_state{target=\"b\"} 1\n"
        ));
        assert!(
            !out.contains("probe_duration_seconds"),
            "histograms are off: {out}"
        );
        assert!(
            !out.contains("probe_signals_total"),
            "no samples, no family: {out}"
        );
    }
}
