//! The `http` section of a target: raw schema and its mapping onto [`HttpSpec`].
//!
//! Every value is validated here, with the library's own parsers (URL, status patterns, JSON
//! paths, header names, CA files), so that a mistake is reported at load with its position rather
//! than discovered as a probe that can never pass. Header values are secrets: no message built
//! here contains one, only header and variable names.

use std::fmt;
use std::path::Path;

use probe::outcome::Severity;
use probe::tier::http::header::HeaderName;
use probe::tier::http::headers::InvalidHeader;
use probe::tier::http::{
    CaBundle, DegradedIf, Expect, HeaderMatch, HeaderPattern, HttpSpec, HttpUrl, HttpVersion,
    JsonMatch, JsonPath, JsonScalar, Match, Method, ReplyPatterns, RequestHeaders, SignalRule,
    StatusPattern, StatusSet, TlsTrust, expand_env,
};
use serde::Deserialize;
use serde::de::{self, IgnoredAny, Visitor};

use super::addresses;
use super::diagnostics::{did_you_mean, quote};
use super::files::Source;
use super::node::{Diags, Entries, Node, OneOrMany, Pos, Sp, each, value_of};
use super::schedule::duration;

/// The methods a probe may use. A health check has no business with `CONNECT` or `TRACE`.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

#[derive(Deserialize)]
#[serde(rename = "http", deny_unknown_fields)]
pub(super) struct RawHttp {
    url: Sp<String>,
    method: Option<Sp<String>>,
    headers: Option<Sp<Entries<String>>>,
    body: Option<Sp<String>>,
    tls: Option<Sp<RawTls>>,
    follow_redirects: Option<Sp<bool>>,
    fresh_connection: Option<Sp<bool>>,
    addresses: Option<Sp<String>>,
    expect: Option<Sp<RawExpect>>,
    degraded_if: Option<Sp<RawDegradedIf>>,
    // Only checked to be a sequence here: each signal is then read on its own (`node::each`).
    signals: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename = "tls", deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) insecure_skip_verify: Option<Sp<bool>>,
    pub(super) ca_file: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "expect", deny_unknown_fields)]
struct RawExpect {
    status: Option<Sp<OneOrMany<Sp<String>>>>,
    body_contains: Option<Sp<String>>,
    header: Option<Sp<Entries<String>>>,
    json: Option<Sp<Entries<RawScalar>>>,
    body_matches: Option<Sp<OneOrMany<Sp<String>>>>,
    body_not_matches: Option<Sp<OneOrMany<Sp<String>>>>,
    header_matches: Option<Sp<Vec<Sp<RawHeaderPattern>>>>,
    header_not_matches: Option<Sp<Vec<Sp<RawHeaderPattern>>>>,
    tls: Option<Sp<bool>>,
    http_version: Option<Sp<OneOrMany<Sp<String>>>>,
}

/// One item of `header_matches` or `header_not_matches`.
#[derive(Deserialize)]
#[serde(rename = "header pattern", deny_unknown_fields)]
struct RawHeaderPattern {
    header: Sp<String>,
    regex: Sp<String>,
    allow_missing: Option<Sp<bool>>,
}

#[derive(Deserialize)]
#[serde(rename = "degraded_if", deny_unknown_fields)]
struct RawDegradedIf {
    latency_over: Option<Sp<String>>,
    json: Option<Sp<Entries<RawScalar>>>,
}

#[derive(Deserialize)]
#[serde(rename = "signal", deny_unknown_fields)]
struct RawSignal {
    name: Sp<String>,
    severity: Sp<String>,
    when: Sp<RawWhen>,
}

#[derive(Deserialize)]
#[serde(rename = "when", deny_unknown_fields)]
struct RawWhen {
    status: Option<Sp<OneOrMany<Sp<String>>>>,
    header: Option<Sp<Entries<String>>>,
    json: Option<Sp<Entries<RawScalar>>>,
}

/// The expected value of a JSON condition: a YAML scalar, kept with its type.
struct RawScalar(JsonScalar);

impl<'de> Deserialize<'de> for RawScalar {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawScalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_unit<E>(self) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::Null))
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::Number(v.into())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::Number(v.into())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawScalar, E> {
                serde_json::Number::from_f64(v)
                    .map(|n| RawScalar(JsonScalar::Number(n)))
                    .ok_or_else(|| E::custom("JSON has no NaN or infinite numbers"))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::String(v.to_owned())))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Maps a raw `http` section (read from `node`) onto a spec, reporting every invalid value.
pub(super) fn parse(
    raw: RawHttp,
    node: Option<&Node>,
    src: &str,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<HttpSpec> {
    let url = raw
        .url
        .value
        .trim()
        .parse::<HttpUrl>()
        .map_err(|e| diags.push((raw.url.pos, e.to_string())));
    let method = raw.method.map_or(Ok(Method::GET), |m| method(&m, diags));
    let headers = raw.headers.map_or(Ok(RequestHeaders::new()), |h| {
        headers(h.value, source, diags)
    });
    let tls = raw.tls.map_or(Ok(TlsTrust::System), |t| {
        trust(
            t.value.ca_file,
            t.value.insecure_skip_verify,
            source.dir,
            diags,
        )
    });
    let expect = raw
        .expect
        .map_or(Ok((Expect::default(), ReplyPatterns::default())), |e| {
            expect(e.value, diags)
        });
    let degraded_if = raw
        .degraded_if
        .map_or(Ok(DegradedIf::default()), |d| degraded_if(d.value, diags));
    let signals = match (raw.signals, node) {
        (Some(_), Some(node)) => {
            let items = each::<RawSignal>(value_of(node, src, "signals"), src, diags);
            signals(items, diags)
        }
        _ => Ok(Vec::new()),
    };

    let policy = addresses::parse(raw.addresses.as_ref(), diags);
    let mut spec = HttpSpec::get(url.ok()?);
    spec.addresses = policy.ok()?;
    spec.method = method.ok()?;
    spec.headers = headers.ok()?;
    spec.body = raw.body.map(|b| b.value.into());
    spec.tls = tls.ok()?;
    spec.follow_redirects = raw.follow_redirects.is_some_and(|f| f.value);
    spec.fresh_connection = raw.fresh_connection.is_some_and(|f| f.value);
    (spec.expect, spec.patterns) = expect.ok()?;
    spec.degraded_if = degraded_if.ok()?;
    spec.signals = signals.ok()?;
    Some(spec)
}

/// Marks a value that failed validation; its error is already in the diagnostics.
pub(super) type Checked<T> = Result<T, ()>;

fn method(raw: &Sp<String>, diags: &mut Diags) -> Checked<Method> {
    let upper = raw.value.trim().to_ascii_uppercase();
    if let Some(known) = METHODS.iter().find(|m| **m == upper) {
        return Method::from_bytes(known.as_bytes()).map_err(|_| ());
    }
    let hint = match did_you_mean(&upper, METHODS.iter().copied()) {
        Some(best) => format!(", did you mean {best:?}?"),
        None => format!("; expected one of {}", METHODS.join(", ")),
    };
    diags.push((
        raw.pos,
        format!("unknown method {} for \"method\"{hint}", quote(&raw.value)),
    ));
    Err(())
}

/// Request headers (or gRPC metadata), their values expanded from the environment.
pub(super) fn headers(
    raw: Entries<String>,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Checked<RequestHeaders> {
    let mut headers = RequestHeaders::new();
    let mut ok = true;
    for (name, value) in raw.0 {
        // Errors name the header and the variable, never the value (it is a secret).
        let expanded = match expand_env(&value.value, source.env) {
            Ok(expanded) => expanded,
            Err(e) => {
                diags.push((value.pos, format!("in header {}: {e}", quote(&name))));
                ok = false;
                continue;
            }
        };
        if let Err(e) = headers.append(&name, &expanded) {
            let pos = match e {
                InvalidHeader::Value(_) => value.pos,
                InvalidHeader::Name(_) | InvalidHeader::Managed(_) => value.key,
            };
            diags.push((pos, e.to_string()));
            ok = false;
        }
    }
    ok.then_some(headers).ok_or(())
}

/// The trust of a section with `ca_file` and `insecure_skip_verify` (an `http` or `grpc`
/// section's `tls`, or a `tls` probe), the CA file read relative to `dir`.
pub(super) fn trust(
    ca_file: Option<Sp<String>>,
    insecure_skip_verify: Option<Sp<bool>>,
    dir: &Path,
    diags: &mut Diags,
) -> Checked<TlsTrust> {
    let insecure = insecure_skip_verify.is_some_and(|i| i.value);
    match ca_file {
        Some(ca) if insecure => {
            diags.push((
                ca.key,
                r#""insecure_skip_verify" and "ca_file" are mutually exclusive: keep only one"#
                    .to_owned(),
            ));
            Err(())
        }
        Some(ca) => CaBundle::from_file(&dir.join(ca.value.trim()))
            .map(TlsTrust::WithCa)
            .map_err(|e| diags.push((ca.pos, e.to_string()))),
        None if insecure => Ok(TlsTrust::InsecureSkipVerify),
        None => Ok(TlsTrust::System),
    }
}

fn status_set(raw: Sp<OneOrMany<Sp<String>>>, diags: &mut Diags) -> Checked<StatusSet> {
    let mut patterns = Vec::new();
    let mut ok = true;
    for item in raw.value.0 {
        match item.value.trim().parse::<StatusPattern>() {
            Ok(pattern) => patterns.push(pattern),
            Err(e) => {
                diags.push((item.pos, e.to_string()));
                ok = false;
            }
        }
    }
    if !ok {
        return Err(());
    }
    StatusSet::new(patterns).map_err(|e| diags.push((raw.pos, e.to_string())))
}

fn header_matches(raw: Entries<String>, diags: &mut Diags) -> Checked<Vec<HeaderMatch>> {
    let mut matches = Vec::new();
    let mut ok = true;
    for (name, value) in raw.0 {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => matches.push(HeaderMatch {
                name,
                value: value.value.trim().to_owned(),
            }),
            Err(_) => {
                diags.push((value.key, format!("invalid header name {}", quote(&name))));
                ok = false;
            }
        }
    }
    ok.then_some(matches).ok_or(())
}

fn json_matches(raw: Entries<RawScalar>, diags: &mut Diags) -> Checked<Vec<JsonMatch>> {
    let mut matches = Vec::new();
    let mut ok = true;
    for (path, value) in raw.0 {
        match path.parse::<JsonPath>() {
            Ok(path) => matches.push(JsonMatch {
                path,
                value: value.value.0,
            }),
            Err(e) => {
                diags.push((
                    value.key,
                    format!("invalid JSON path {}: {e}", quote(&path)),
                ));
                ok = false;
            }
        }
    }
    ok.then_some(matches).ok_or(())
}

/// Runs an optional part's parser; an absent part is `default`.
fn part<R, T>(
    raw: Option<Sp<R>>,
    default: T,
    diags: &mut Diags,
    parse: impl FnOnce(Sp<R>, &mut Diags) -> Checked<T>,
) -> Checked<T> {
    raw.map_or(Ok(default), |raw| parse(raw, diags))
}

fn expect(raw: RawExpect, diags: &mut Diags) -> Checked<(Expect, ReplyPatterns)> {
    let patterns = patterns(&raw, diags);
    let status = part(raw.status, StatusSet::default(), diags, status_set);
    let headers = part(raw.header, Vec::new(), diags, |h, d| {
        header_matches(h.value, d)
    });
    let json = part(raw.json, Vec::new(), diags, |j, d| json_matches(j.value, d));
    Ok((
        Expect {
            status: status?,
            body_contains: raw.body_contains.map(|b| b.value),
            headers: headers?,
            json: json?,
        },
        patterns?,
    ))
}

/// The pattern conditions of `expect`: body and header regexes, `tls` and `http_version`.
fn patterns(raw: &RawExpect, diags: &mut Diags) -> Checked<ReplyPatterns> {
    let mut bodies = |items: &Option<Sp<OneOrMany<Sp<String>>>>, field: &str| {
        let parsed: Vec<Checked<_>> = items
            .iter()
            .flat_map(|i| &i.value.0)
            .map(|item| super::reply::bytes_regex(item, field, diags))
            .collect();
        parsed.into_iter().collect::<Checked<Vec<_>>>()
    };
    let body_matches = bodies(&raw.body_matches, "body_matches");
    let body_not_matches = bodies(&raw.body_not_matches, "body_not_matches");
    let mut headers = |items: &Option<Sp<Vec<Sp<RawHeaderPattern>>>>, field: &str| {
        let parsed: Vec<Checked<HeaderPattern>> = items
            .iter()
            .flat_map(|i| &i.value)
            .map(|item| {
                let name = HeaderName::from_bytes(item.value.header.value.trim().as_bytes())
                    .map_err(|_| {
                        diags.push((
                            item.value.header.pos,
                            format!("invalid header name {}", quote(&item.value.header.value)),
                        ));
                    });
                let regex = super::reply::regex(&item.value.regex, field, diags);
                Ok(HeaderPattern {
                    name: name?,
                    regex: regex?,
                    allow_missing: item.value.allow_missing.as_ref().is_some_and(|a| a.value),
                })
            })
            .collect();
        parsed.into_iter().collect::<Checked<Vec<_>>>()
    };
    let header_matches = headers(&raw.header_matches, "header_matches");
    let header_not_matches = headers(&raw.header_not_matches, "header_not_matches");
    let versions: Vec<Checked<HttpVersion>> = raw
        .http_version
        .iter()
        .flat_map(|v| &v.value.0)
        .map(|v| {
            v.value
                .parse()
                .map_err(|e: probe::tier::http::patterns::UnknownVersion| {
                    diags.push((v.pos, e.to_string()));
                })
        })
        .collect();
    Ok(ReplyPatterns {
        body_matches: body_matches?,
        body_not_matches: body_not_matches?,
        header_matches: header_matches?,
        header_not_matches: header_not_matches?,
        tls: raw.tls.as_ref().map(|t| t.value),
        versions: versions.into_iter().collect::<Checked<Vec<_>>>()?,
    })
}

fn degraded_if(raw: RawDegradedIf, diags: &mut Diags) -> Checked<DegradedIf> {
    let latency = duration(raw.latency_over.as_ref(), "latency_over", true, diags);
    let json = part(raw.json, Vec::new(), diags, |j, d| json_matches(j.value, d));
    if latency.is_invalid() {
        return Err(());
    }
    Ok(DegradedIf {
        latency_over: latency.value(),
        json: json?,
    })
}

fn signals(items: Vec<Option<(RawSignal, Pos)>>, diags: &mut Diags) -> Checked<Vec<SignalRule>> {
    let mut rules: Vec<SignalRule> = Vec::new();
    let mut ok = true;
    for item in items {
        let Some((
            RawSignal {
                name,
                severity,
                when,
            },
            _,
        )) = item
        else {
            ok = false;
            continue;
        };
        let level = Severity::ALL
            .into_iter()
            .find(|s| s.as_str() == severity.value.trim())
            .ok_or_else(|| {
                let names = Severity::ALL.map(Severity::as_str);
                let hint = match did_you_mean(severity.value.trim(), names) {
                    Some(best) => format!(", did you mean {best:?}?"),
                    None => format!("; expected one of {}", names.join(", ")),
                };
                diags.push((
                    severity.pos,
                    format!(
                        "unknown severity {} for \"severity\"{hint}",
                        quote(&severity.value)
                    ),
                ));
            });
        let when_pos = when.pos;
        let status = when
            .value
            .status
            .map(|s| status_set(s, diags).map(Some))
            .unwrap_or(Ok(None));
        let headers = part(when.value.header, Vec::new(), diags, |h, d| {
            header_matches(h.value, d)
        });
        let json = part(when.value.json, Vec::new(), diags, |j, d| {
            json_matches(j.value, d)
        });
        let (Ok(level), Ok(status), Ok(headers), Ok(json)) = (level, status, headers, json) else {
            ok = false;
            continue;
        };
        let matcher = Match {
            status,
            headers,
            json,
        };
        let name_text = name.value.trim();
        if rules.iter().any(|r| &*r.signal().name == name_text) {
            diags.push((
                name.pos,
                format!("duplicate signal name {}", quote(name_text)),
            ));
            ok = false;
            continue;
        }
        match SignalRule::try_new(name_text, level, matcher) {
            Ok(rule) => rules.push(rule),
            Err(e) => {
                let pos = match e {
                    probe::tier::http::conditions::InvalidSignal::BadName(_) => name.pos,
                    probe::tier::http::conditions::InvalidSignal::EmptyWhen(_) => when_pos,
                };
                diags.push((pos, e.to_string()));
                ok = false;
            }
        }
    }
    ok.then_some(rules).ok_or(())
}
