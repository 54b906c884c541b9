//! `GET /probe`: blackbox_exporter's endpoint, answered by [`crate::adhoc::AdHoc`] with the
//! exporter's series (names, types, label sets), so that a scrape job written for the exporter
//! works when pointed here.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use probe::outcome::{TlsFacts, Verdict};

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

/// The exporter's series for what `ran` found, each family after its `# HELP` and `# TYPE`
/// (every one a gauge, as the exporter's are), in name order as the exporter writes them.
fn series(ran: &Ran) -> String {
    let gauge = |name, help, value: f64| Family {
        name,
        help,
        samples: vec![(String::new(), value)],
    };
    let flag = |yes: bool| if yes { 1.0 } else { 0.0 };
    let mut families = vec![
        gauge(
            "probe_success",
            "Displays whether or not the probe was a success",
            flag(succeeded(ran)),
        ),
        gauge(
            "probe_duration_seconds",
            "Returns how long the probe took to complete in seconds",
            ran.duration.as_secs_f64(),
        ),
    ];
    let observed = &ran.observed;
    // The address reached, else the target's own when it is one.
    if let Some(ip) = observed.addr.or_else(|| ran.host.parse().ok()) {
        families.push(gauge(
            "probe_ip_protocol",
            "Specifies whether probe ip protocol is IP4 or IP6",
            if ip.is_ipv4() { 4.0 } else { 6.0 },
        ));
        families.push(gauge(
            "probe_ip_addr_hash",
            "Specifies the hash of IP address. It's useful to detect if the IP address changes.",
            f64::from(fnv1a(&match ip {
                std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
                std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
            })),
        ));
    }
    match ran.prober {
        Prober::Http => {
            let http = observed.http.clone().unwrap_or_default();
            families.extend([
                gauge(
                    "probe_http_ssl",
                    "Indicates if SSL was used for the final redirect",
                    flag(ran.result.tls.is_some()),
                ),
                gauge(
                    "probe_http_status_code",
                    "Response HTTP status code",
                    f64::from(http.status),
                ),
                gauge(
                    "probe_http_version",
                    "Returns the version of HTTP of the probe response",
                    http.version,
                ),
                gauge(
                    "probe_http_redirects",
                    "The number of redirects",
                    http.redirects as f64,
                ),
                gauge(
                    "probe_http_content_length",
                    "Length of http content response",
                    http.content_length.map_or(-1.0, |l| l as f64),
                ),
                gauge(
                    "probe_failed_due_to_regex",
                    "Indicates if probe failed due to regex",
                    flag(http.failed_due_to_regex),
                ),
            ]);
        }
        Prober::Dns => {
            let dns = observed.dns.clone().unwrap_or_default();
            families.extend([
                gauge(
                    "probe_dns_answer_rrs",
                    "Returns number of entries in the answer resource record list",
                    dns.answer as f64,
                ),
                gauge(
                    "probe_dns_authority_rrs",
                    "Returns number of entries in the authority resource record list",
                    dns.authority as f64,
                ),
                gauge(
                    "probe_dns_additional_rrs",
                    "Returns number of entries in the additional resource record list",
                    dns.additional as f64,
                ),
                gauge(
                    "probe_dns_query_succeeded",
                    "Displays whether or not the query was executed successfully",
                    flag(observed.dns.is_some()),
                ),
            ]);
        }
        Prober::Grpc => {
            if let Some(grpc) = &observed.grpc {
                families.push(gauge(
                    "probe_grpc_status_code",
                    "Response gRPC status code",
                    f64::from(grpc.status_code),
                ));
                families.push(Family {
                    name: "probe_grpc_healthcheck_response",
                    help: "Response HealthCheck response",
                    samples: ["NOT_SERVING", "SERVICE_UNKNOWN", "SERVING", "UNKNOWN"]
                        .into_iter()
                        .map(|status| {
                            (
                                format!("{{serving_status=\"{status}\"}}"),
                                flag(grpc.serving_status == Some(status)),
                            )
                        })
                        .collect(),
                });
            }
        }
        Prober::Tcp | Prober::Icmp => {}
    }
    let tls_prober = matches!(ran.prober, Prober::Http | Prober::Tcp | Prober::Grpc);
    if let (true, Some(facts)) = (tls_prober, ran.result.tls.as_deref())
        && succeeded(ran)
    {
        families.extend(tls_families(facts));
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

/// The certificate series the exporter writes once a handshake succeeded.
fn tls_families(facts: &TlsFacts) -> Vec<Family> {
    let unix = |at: SystemTime| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let mut families = Vec::new();
    if let Some(at) = facts.earliest_expiry() {
        families.push(Family {
            name: "probe_ssl_earliest_cert_expiry",
            help: "Returns last SSL chain expiry in unixtime",
            samples: vec![(String::new(), unix(at))],
        });
    }
    if let Some(at) = facts.chain_expiry() {
        families.push(Family {
            name: "probe_ssl_last_chain_expiry_timestamp_seconds",
            help: "Returns last SSL chain expiry in timestamp",
            samples: vec![(String::new(), unix(at))],
        });
    }
    if let Some(version) = facts.version {
        families.push(Family {
            name: "probe_tls_version_info",
            help: "Returns the TLS version used, or NaN when unknown",
            samples: vec![(format!("{{version=\"{version}\"}}"), 1.0)],
        });
    }
    families
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
