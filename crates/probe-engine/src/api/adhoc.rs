//! `GET /probe`: blackbox_exporter's endpoint, answered by [`crate::adhoc::AdHoc`] with the
//! exporter's series (names, types, label sets), so that a scrape job written for the exporter
//! works when pointed here.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::outcome::{FailureReason, TlsFacts, Verdict};

use super::auth::Readable;
use super::shared::{ApiState, error};
use crate::adhoc::{Ran, Refusal};
use crate::blackbox::Prober;

/// The parameters the exporter takes; any other is refused, so that a typo is not ignored.
const PARAMETERS: [&str; 4] = ["module", "target", "hostname", "debug"];

/// The header Prometheus sends with every scrape: how long it waits for the answer.
const SCRAPE_TIMEOUT: &str = "X-Prometheus-Scrape-Timeout-Seconds";

/// `GET /probe?module=M&target=T[&hostname=H][&debug=true]`.
pub(super) async fn probe(
    State(state): State<Arc<ApiState>>,
    _: Readable,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let Some(adhoc) = &state.adhoc else {
        return error(StatusCode::NOT_FOUND, "no such path");
    };
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    if let Some(unknown) = query.keys().find(|k| !PARAMETERS.contains(&k.as_str())) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("unknown parameter {unknown:?}: expected module, target, hostname or debug"),
        );
    }
    // The exporter's default module.
    let module = query.get("module").map_or("http_2xx", String::as_str);
    let Some(target) = query.get("target").filter(|t| !t.is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "Target parameter is missing");
    };
    let debug = match query.get("debug").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("debug={other:?}: expected true or false"),
            );
        }
    };
    let scrape_timeout = match headers.get(SCRAPE_TIMEOUT).map(|v| v.to_str()) {
        None => None,
        Some(Ok(text)) => match text.trim().parse::<f64>() {
            Ok(seconds) if seconds.is_finite() && seconds > 0.0 => {
                Some(Duration::from_secs_f64(seconds.min(86_400.0)))
            }
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("{SCRAPE_TIMEOUT} {text:?} is not a positive number of seconds"),
                );
            }
        },
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{SCRAPE_TIMEOUT} is not text"),
            );
        }
    };
    let hostname = query.get("hostname").map(String::as_str);
    let counted = if adhoc.knows(module) {
        module
    } else {
        "unknown"
    };
    let ran = adhoc.probe(module, target, hostname, scrape_timeout).await;
    let result = match &ran {
        Ok(ran) if succeeded(ran) => "success",
        Ok(_) => "failure",
        Err(Refusal::Busy(_)) => "busy",
        Err(Refusal::Forbidden(_)) => "forbidden",
        Err(Refusal::BadRequest(_)) => "invalid",
    };
    metrics::counter!("probe_adhoc_probes_total", "module" => counted.to_owned(), "result" => result)
        .increment(1);
    let ran = match ran {
        Ok(ran) => ran,
        Err(refusal) => {
            let status = match refusal {
                Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
                Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
                Refusal::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            };
            return error(status, refusal.to_string());
        }
    };
    let series = series(&ran);
    let body = if debug {
        format!(
            "Logs for the probe:\n{}\n\nMetrics that would have been returned:\n{series}\n\
             Module configuration:\nmodule: {module}\nprober: {}\ntimeout: {}\n",
            log(&ran),
            ran.prober.as_str(),
            humantime::format_duration(ran.timeout)
        )
    } else {
        series
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Whether the probe succeeded as the exporter counts it: a degraded answer is still an answer.
fn succeeded(ran: &Ran) -> bool {
    !matches!(ran.result.verdict, Verdict::Failed(_))
}

/// What the probe did, in the lines `debug=true` shows.
fn log(ran: &Ran) -> String {
    let mut out = String::new();
    match &ran.result.verdict {
        Verdict::Up => out.push_str("Probe succeeded"),
        Verdict::Degraded(reasons) => {
            let _ = write!(out, "Probe succeeded, degraded: {}", reasons.join("; "));
        }
        Verdict::Failed(failure) => {
            let _ = write!(out, "Probe failed: {failure}");
        }
    }
    if let Some(remarks) = ran.result.remarks.describe() {
        let _ = write!(out, "\n{remarks}");
    }
    let _ = write!(out, "\nduration_seconds={:.6}", ran.duration.as_secs_f64());
    out
}

/// One family of the answer.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

impl Family {
    /// A family of one series without labels.
    fn one(name: &'static str, help: &'static str, value: f64) -> Self {
        Self {
            name,
            help,
            samples: vec![(String::new(), value)],
        }
    }

    /// A family with one series per value of `label`.
    fn by(
        name: &'static str,
        help: &'static str,
        label: &str,
        values: impl IntoIterator<Item = (&'static str, f64)>,
    ) -> Self {
        Self {
            name,
            help,
            samples: values
                .into_iter()
                .map(|(key, value)| (format!("{{{label}=\"{key}\"}}"), value))
                .collect(),
        }
    }
}

/// 1 for yes, 0 for no.
fn flag(yes: bool) -> f64 {
    if yes { 1.0 } else { 0.0 }
}

/// The exporter's series for what `ran` found, each family after its `# HELP` and `# TYPE`
/// (every one a gauge, as the exporter's are), in name order as the exporter writes them. Each
/// prober writes the families the exporter's writes, also when the probe failed early (zero
/// then, as the exporter leaves them), so that a dashboard finds the same series either way.
fn series(ran: &Ran) -> String {
    let mut families = vec![
        Family::one(
            "probe_success",
            "Displays whether or not the probe was a success",
            flag(succeeded(ran)),
        ),
        Family::one(
            "probe_duration_seconds",
            "Returns how long the probe took to complete in seconds",
            ran.duration.as_secs_f64(),
        ),
        Family::one(
            "probe_dns_lookup_time_seconds",
            "Returns the time taken for probe dns lookup in seconds",
            ran.lookup.as_secs_f64(),
        ),
    ];
    let observed = &ran.observed;
    // The address reached, else the target's own, else the one it resolved to; 0 for neither
    // when it did not resolve, as the exporter writes them.
    let ip = observed
        .addr
        .or_else(|| ran.host.parse().ok())
        .or(ran.resolved);
    families.push(Family::one(
        "probe_ip_protocol",
        "Specifies whether probe ip protocol is IP4 or IP6",
        match ip {
            Some(IpAddr::V4(_)) => 4.0,
            Some(IpAddr::V6(_)) => 6.0,
            None => 0.0,
        },
    ));
    families.push(Family::one(
        "probe_ip_addr_hash",
        "Specifies the hash of IP address. It's useful to detect if the IP address changes.",
        match ip {
            Some(IpAddr::V4(v4)) => f64::from(fnv1a(&v4.octets())),
            Some(IpAddr::V6(v6)) => f64::from(fnv1a(&v6.octets())),
            None => 0.0,
        },
    ));
    let resolve = ran.lookup.as_secs_f64();
    // No address at all: the lookup failed, where the exporter stops with only its resolve
    // phase timed.
    let looked_up = ip.is_some();
    // The handshake's facts, once it completed (the version is known only then).
    let handshake = ran.result.tls.as_deref().filter(|f| f.version.is_some());
    match ran.prober {
        Prober::Http => {
            let http = observed.http.clone().unwrap_or_default();
            let answered = http.status != 0;
            let phases = http.phases;
            families.push(Family::by(
                "probe_http_duration_seconds",
                "Duration of http request by phase, summed over all redirects",
                "phase",
                if looked_up {
                    vec![
                        ("connect", phases.connect.as_secs_f64()),
                        ("processing", phases.processing.as_secs_f64()),
                        ("resolve", resolve + phases.resolve.as_secs_f64()),
                        ("tls", phases.tls.as_secs_f64()),
                        ("transfer", phases.transfer.as_secs_f64()),
                    ]
                } else {
                    vec![("resolve", resolve)]
                },
            ));
            families.extend([
                Family::one(
                    "probe_http_ssl",
                    "Indicates if SSL was used for the final redirect",
                    flag(http.tls),
                ),
                Family::one(
                    "probe_http_status_code",
                    "Response HTTP status code",
                    f64::from(http.status),
                ),
                Family::one(
                    "probe_http_version",
                    "Returns the version of HTTP of the probe response",
                    http.version,
                ),
                Family::one(
                    "probe_http_redirects",
                    "The number of redirects",
                    http.redirects as f64,
                ),
                // Go's -1 for a reply that did not say; 0 without a reply.
                Family::one(
                    "probe_http_content_length",
                    "Length of http content response",
                    match http.content_length {
                        Some(length) => length as f64,
                        None if answered => -1.0,
                        None => 0.0,
                    },
                ),
                Family::one(
                    "probe_http_uncompressed_body_length",
                    "Length of uncompressed response body",
                    http.body_length as f64,
                ),
                Family::one(
                    "probe_failed_due_to_regex",
                    "Indicates if probe failed due to regex",
                    flag(http.failed_due_to_regex),
                ),
            ]);
            if let Some(at) = http.last_modified {
                families.push(Family::one(
                    "probe_http_last_modified_timestamp_seconds",
                    "Returns the Last-Modified HTTP response header in unixtime",
                    unix(at),
                ));
            }
            if let (true, Some(facts)) = (answered && http.tls, handshake) {
                families.extend(tls_families(facts, true));
            }
        }
        Prober::Tcp => {
            // A `query_response` expect that found no line: the exporter's regex failure.
            let regex = matches!(&ran.result.verdict, Verdict::Failed(f) if f.reason == FailureReason::Body);
            families.push(Family::one(
                "probe_failed_due_to_regex",
                "Indicates if probe failed due to regex",
                flag(regex),
            ));
            if let Some(facts) = handshake {
                families.extend(tls_families(facts, true));
            }
        }
        Prober::Icmp => {
            let icmp = observed.icmp.unwrap_or_default();
            families.push(Family::by(
                "probe_icmp_duration_seconds",
                "Duration of icmp request by phase",
                "phase",
                [
                    ("resolve", resolve),
                    ("rtt", icmp.rtt.as_secs_f64()),
                    ("setup", icmp.setup.as_secs_f64()),
                ],
            ));
            if let Some(hops) = icmp.hop_limit {
                families.push(Family::one(
                    "probe_icmp_reply_hop_limit",
                    "Replied packet hop limit (TTL for ipv4)",
                    f64::from(hops),
                ));
            }
        }
        Prober::Dns => {
            let dns = observed.dns.clone().unwrap_or_default();
            families.extend([
                Family::by(
                    "probe_dns_duration_seconds",
                    "Duration of DNS request by phase",
                    "phase",
                    [
                        ("connect", dns.connect.as_secs_f64()),
                        ("request", dns.request.as_secs_f64()),
                        ("resolve", resolve),
                    ],
                ),
                Family::one(
                    "probe_dns_answer_rrs",
                    "Returns number of entries in the answer resource record list",
                    dns.answer as f64,
                ),
                Family::one(
                    "probe_dns_authority_rrs",
                    "Returns number of entries in the authority resource record list",
                    dns.authority as f64,
                ),
                Family::one(
                    "probe_dns_additional_rrs",
                    "Returns number of entries in the additional resource record list",
                    dns.additional as f64,
                ),
                Family::one(
                    "probe_dns_query_succeeded",
                    "Displays whether or not the query was executed successfully",
                    flag(dns.replied),
                ),
            ]);
            if let Some(serial) = dns.serial {
                families.push(Family::one(
                    "probe_dns_serial",
                    "Returns the serial number of the zone",
                    f64::from(serial),
                ));
            }
        }
        Prober::Grpc => {
            let grpc = observed.grpc.clone().unwrap_or_default();
            let check = ran.duration.saturating_sub(ran.lookup).as_secs_f64();
            let phases = if looked_up {
                vec![("check", check), ("resolve", resolve)]
            } else {
                vec![("resolve", resolve)]
            };
            families.extend([
                Family::by(
                    "probe_grpc_duration_seconds",
                    "Duration of gRPC request by phase",
                    "phase",
                    phases,
                ),
                Family::one(
                    "probe_grpc_status_code",
                    "Response gRPC status code",
                    f64::from(grpc.status_code),
                ),
                Family::by(
                    "probe_grpc_healthcheck_response",
                    "Response HealthCheck response",
                    "serving_status",
                    ["NOT_SERVING", "SERVICE_UNKNOWN", "SERVING", "UNKNOWN"]
                        .map(|status| (status, flag(grpc.serving_status == Some(status)))),
                ),
                Family::one(
                    "probe_grpc_ssl",
                    "Indicates if SSL was used for the connection",
                    flag(handshake.is_some()),
                ),
            ]);
            match handshake {
                Some(facts) => families.extend(tls_families(facts, false)),
                // The exporter writes this one for every gRPC probe: 0 without TLS.
                None => families.push(Family::one(
                    "probe_ssl_earliest_cert_expiry",
                    EARLIEST_EXPIRY_HELP,
                    0.0,
                )),
            }
        }
    }
    families.sort_by_key(|f| f.name);
    let mut out = String::new();
    for family in families {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} gauge", family.name);
        for (labels, value) in family.samples {
            let _ = writeln!(out, "{}{labels} {}", family.name, number(value));
        }
    }
    out
}

/// 32-bit FNV-1a, the hash behind the exporter's `probe_ip_addr_hash` (of the address's bytes,
/// 4 for IPv4 and 16 for IPv6), so that the values agree and an alert on a change fires the
/// same.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

const EARLIEST_EXPIRY_HELP: &str = "Returns last SSL chain expiry in unixtime";

/// The certificate series the exporter writes once a handshake completed; `chain_expiry` for
/// the probers whose exporter writes `probe_ssl_last_chain_expiry_timestamp_seconds` (all but
/// gRPC).
fn tls_families(facts: &TlsFacts, chain_expiry: bool) -> Vec<Family> {
    let mut families = vec![Family::one(
        "probe_ssl_earliest_cert_expiry",
        EARLIEST_EXPIRY_HELP,
        facts.earliest_expiry().map_or(0.0, unix),
    )];
    if chain_expiry {
        families.push(Family::one(
            "probe_ssl_last_chain_expiry_timestamp_seconds",
            "Returns last SSL chain expiry in timestamp",
            facts.chain_expiry().map_or(0.0, unix),
        ));
    }
    if let Some(version) = facts.version {
        families.push(Family::by(
            "probe_tls_version_info",
            "Returns the TLS version used or NaN when unknown",
            "version",
            [(version, 1.0)],
        ));
    }
    if let (Some(leaf), Some(sha256)) = (facts.leaf(), facts.leaf_sha256) {
        let fingerprint: String = sha256.iter().map(|b| format!("{b:02x}")).collect();
        families.push(Family {
            name: "probe_ssl_last_chain_info",
            help: "Contains SSL leaf certificate information",
            samples: vec![(
                format!(
                    "{{fingerprint_sha256=\"{fingerprint}\",issuer=\"{}\",subject=\"{}\",\
                     subjectalternative=\"{}\"}}",
                    label_value(&leaf.issuer),
                    label_value(&leaf.subject),
                    label_value(&facts.leaf_dns_names.join(",")),
                ),
                1.0,
            )],
        });
    }
    families
}

/// Seconds since the epoch, as the exporter writes a time (0 before it).
fn unix(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A label value escaped as the exposition format asks: backslash, double quote and newline.
fn label_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A sample's value as the exposition format writes it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}
