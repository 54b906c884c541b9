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
    CaBundle, Comparison, DegradedIf, Expect, HeaderMatch, HeaderPattern, HttpSpec, HttpUrl,
    HttpVersion, JsonMatch, JsonPath, JsonScalar, JsonTest, Match, Method, Pattern, ReplyPatterns,
    RequestHeaders, SignalRule, StatusPattern, StatusSet, TlsTrust, expand_env,
};
use serde::Deserialize;
use serde::de::{self, IgnoredAny, Visitor};

use super::addresses;
use super::reply::bytes_regex;
use super::schedule::duration;
use crate::yaml::diagnostics::{did_you_mean, quote};
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Entries, Node, OneOrMany, Pos, Sp, each, value_of};

/// The methods a probe may use. A health check has no business with `CONNECT` or `TRACE`.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

#[derive(Deserialize)]
#[serde(rename = "http", deny_unknown_fields)]
pub(crate) struct RawHttp {
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
pub(crate) struct RawTls {
    pub(crate) insecure_skip_verify: Option<Sp<bool>>,
    pub(crate) ca_file: Option<Sp<String>>,
}

#[derive(Deserialize)]
#[serde(rename = "expect", deny_unknown_fields)]
struct RawExpect {
    status: Option<Sp<OneOrMany<Sp<String>>>>,
    body_contains: Option<Sp<String>>,
    header: Option<Sp<Entries<String>>>,
    json: Option<Sp<Entries<RawJson>>>,
    latency_under: Option<Sp<String>>,
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
    json: Option<Sp<Entries<RawJson>>>,
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
    json: Option<Sp<Entries<RawJson>>>,
}

/// What a JSON condition asks of its path: a scalar the value must be, or a mapping of tests
/// that must all hold (`{ gt: 0, len: { lt: 5 } }`).
enum RawJson {
    Scalar(JsonScalar),
    Tests(Box<RawTests>),
}

/// The tests of a JSON condition's mapping form, each key one test.
#[derive(Deserialize)]
#[serde(rename = "json test", deny_unknown_fields)]
struct RawTests {
    eq: Option<RawScalar>,
    ne: Option<RawScalar>,
    any: Option<Sp<Vec<RawScalar>>>,
    none: Option<Sp<Vec<RawScalar>>>,
    matches: Option<Sp<String>>,
    not_matches: Option<Sp<String>>,
    lt: Option<Sp<f64>>,
    le: Option<Sp<f64>>,
    gt: Option<Sp<f64>>,
    ge: Option<Sp<f64>>,
    len: Option<RawLen>,
    exists: Option<bool>,
}

/// `len: 8` (equal), or `len: { lt: 5 }` with any of `eq`, `ne`, `lt`, `le`, `gt`, `ge`.
struct RawLen(Vec<(Comparison, u64)>);

#[derive(Deserialize)]
#[serde(rename = "len", deny_unknown_fields)]
struct RawLenOps {
    eq: Option<u64>,
    ne: Option<u64>,
    lt: Option<u64>,
    le: Option<u64>,
    gt: Option<u64>,
    ge: Option<u64>,
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number, boolean, null or a mapping of tests")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawJson, A::Error> {
                RawTests::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|tests| RawJson::Tests(Box::new(tests)))
            }
            fn visit_unit<E>(self) -> Result<RawJson, E> {
                Ok(RawJson::Scalar(JsonScalar::Null))
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawJson, E> {
                Ok(RawJson::Scalar(JsonScalar::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawJson, E> {
                Ok(RawJson::Scalar(JsonScalar::Number(v.into())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawJson, E> {
                Ok(RawJson::Scalar(JsonScalar::Number(v.into())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawJson, E> {
                RawScalar::number(v).map(|s| RawJson::Scalar(s.0))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawJson, E> {
                Ok(RawJson::Scalar(JsonScalar::String(v.to_owned())))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawLen {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawLen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a length, or a mapping of eq, ne, lt, le, gt, ge to lengths")
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawLen, E> {
                Ok(RawLen(vec![(Comparison::Eq, v)]))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawLen, E> {
                u64::try_from(v)
                    .map(|v| RawLen(vec![(Comparison::Eq, v)]))
                    .map_err(|_| E::custom("a length is not negative"))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawLen, A::Error> {
                let ops = RawLenOps::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let values = [ops.eq, ops.ne, ops.lt, ops.le, ops.gt, ops.ge];
                let tests: Vec<_> = Comparison::ALL
                    .iter()
                    .zip(values)
                    .filter_map(|((op, _), value)| Some((*op, value?)))
                    .collect();
                if tests.is_empty() {
                    return Err(de::Error::custom(
                        "give at least one of eq, ne, lt, le, gt, ge",
                    ));
                }
                Ok(RawLen(tests))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The expected value of a JSON condition: a YAML scalar, kept with its type.
struct RawScalar(JsonScalar);

impl RawScalar {
    fn number<E: de::Error>(v: f64) -> Result<Self, E> {
        serde_json::Number::from_f64(v)
            .map(|n| RawScalar(JsonScalar::Number(n)))
            .ok_or_else(|| E::custom("JSON has no NaN or infinite numbers"))
    }
}

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
                RawScalar::number(v)
            }
            fn visit_str<E>(self, v: &str) -> Result<RawScalar, E> {
                Ok(RawScalar(JsonScalar::String(v.to_owned())))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Maps a raw `http` section (read from `node`) onto a spec, reporting every invalid value.
pub(crate) fn parse(
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
pub(crate) type Checked<T> = Result<T, ()>;

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
pub(crate) fn headers(
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
pub(crate) fn trust(
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

fn json_matches(raw: Entries<RawJson>, diags: &mut Diags) -> Checked<Vec<JsonMatch>> {
    let mut matches = Vec::new();
    let mut ok = true;
    let ends: Vec<Option<Pos>> = raw.0.iter().skip(1).map(|(_, v)| Some(v.key)).collect();
    for ((path, value), end) in raw.0.into_iter().zip(ends.into_iter().chain([None])) {
        let tests = match value.value {
            RawJson::Scalar(scalar) => Ok(vec![JsonTest::Is(scalar)]),
            RawJson::Tests(tests) => json_tests(*tests, (value.pos, end), diags),
        };
        match (path.parse::<JsonPath>(), tests) {
            (Ok(path), Ok(tests)) => matches.push(JsonMatch { path, tests }),
            (Err(e), _) => {
                diags.push((
                    value.key,
                    format!("invalid JSON path {}: {e}", quote(&path)),
                ));
                ok = false;
            }
            (_, Err(())) => ok = false,
        }
    }
    ok.then_some(matches).ok_or(())
}

/// The tests of one mapping, in the order of [`RawTests`]' keys. `span` is where the mapping
/// starts and where the next entry does: a mapping left empty by keys already reported there
/// (an unknown one, a bad value) is not reported again as empty.
fn json_tests(
    raw: RawTests,
    span: (Pos, Option<Pos>),
    diags: &mut Diags,
) -> Checked<Vec<JsonTest>> {
    let (pos, end) = span;
    let reported = diags
        .iter()
        .any(|(at, _)| *at >= pos && end.is_none_or(|end| *at < end));
    let mut tests = Vec::new();
    let mut ok = true;
    let mut pattern = |raw: Option<Sp<String>>, key: &str, diags: &mut Diags| {
        raw.map(|raw| {
            bytes_regex(&raw, key, diags)
                .map(Pattern)
                .inspect_err(|()| ok = false)
        })
        .and_then(Result::ok)
    };
    let matches = pattern(raw.matches, "matches", diags);
    let not_matches = pattern(raw.not_matches, "not_matches", diags);
    let scalars = |list: Sp<Vec<RawScalar>>, key: &str, diags: &mut Diags| {
        if list.value.is_empty() {
            diags.push((list.pos, format!("{key:?} needs at least one value")));
            return None;
        }
        Some(list.value.into_iter().map(|s| s.0).collect::<Vec<_>>())
    };
    tests.extend(raw.eq.map(|s| JsonTest::Is(s.0)));
    tests.extend(raw.ne.map(|s| JsonTest::IsNot(s.0)));
    for (list, key, test) in [
        (raw.any, "any", JsonTest::OneOf as fn(_) -> _),
        (raw.none, "none", JsonTest::NoneOf),
    ] {
        match list.map(|list| scalars(list, key, diags)) {
            Some(Some(list)) => tests.push(test(list)),
            Some(None) => ok = false,
            None => {}
        }
    }
    tests.extend(matches.map(JsonTest::Matches));
    tests.extend(not_matches.map(JsonTest::NotMatches));
    for (op, value) in [
        (Comparison::Lt, raw.lt),
        (Comparison::Le, raw.le),
        (Comparison::Gt, raw.gt),
        (Comparison::Ge, raw.ge),
    ] {
        match value {
            Some(n) if !n.value.is_finite() => {
                diags.push((n.pos, "a comparison needs a finite number".to_owned()));
                ok = false;
            }
            Some(n) => tests.push(JsonTest::Number(op, n.value)),
            None => {}
        }
    }
    if let Some(len) = raw.len {
        tests.extend(len.0.into_iter().map(|(op, n)| JsonTest::Len(op, n)));
    }
    tests.extend(raw.exists.map(JsonTest::Exists));
    if ok && tests.is_empty() && !reported {
        diags.push((
            pos,
            "a JSON test needs at least one of eq, ne, any, none, matches, not_matches, lt, le, gt, ge, len, exists".to_owned(),
        ));
        ok = false;
    }
    ok.then_some(tests).ok_or(())
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
    let latency = duration(raw.latency_under.as_ref(), "latency_under", true, diags);
    if latency.is_invalid() {
        return Err(());
    }
    Ok((
        Expect {
            status: status?,
            body_contains: raw.body_contains.map(|b| b.value),
            headers: headers?,
            json: json?,
            latency_under: latency.value(),
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
