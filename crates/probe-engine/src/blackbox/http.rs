//! The `http` prober: its section as our `http` section, and a target (a URL) filled in.

use base64::Engine as _;

use super::entry::{self, HeaderPattern, Http, HttpExpect, Pairs, Probe};
use super::raw::{RawHeaderMatch, RawHttp};
use super::{Check, IpProtocol, header, ip_protocol, regexes, target, tls_config};
use probe_config::yaml::{Sp, quote};

/// The methods our HTTP probe sends.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// An `http` module in our terms: the section without its URL.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Template {
    section: Http,
}

impl Template {
    /// Our section for `target`: a URL, `http://` assumed without a scheme, as the exporter
    /// does. Credentials in the URL become a basic `Authorization` header (our URLs carry none,
    /// since a URL is shown in logs and the API).
    pub(super) fn probe(&self, target: &str, ip: IpProtocol) -> Result<Probe, String> {
        let text = target.trim();
        let lower = text.to_ascii_lowercase();
        let text = if lower.starts_with("http://") || lower.starts_with("https://") {
            text.to_owned()
        } else {
            format!("http://{text}")
        };
        let mut url = probe::tier::http::Url::parse(&text)
            .map_err(|e| format!("{target:?} is not a URL: {e}"))?;
        let host = url
            .host_str()
            .ok_or_else(|| format!("{target:?} has no host"))?
            .to_owned();
        target::family(&host, ip)?;
        let mut section = self.section.clone();
        let vhost = section
            .headers
            .0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("host"))
            .map(|(_, value)| value.replace("$$", "$"));
        if url.scheme() == "https"
            && let Some(vhost) = vhost.filter(|v| !v.eq_ignore_ascii_case(&host))
        {
            return Err(format!(
                "the exporter checks the certificate against the Host header ({vhost:?}), ours \
                 against the URL's host ({host:?})"
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            let user = percent_decoded(url.username());
            let password = url.password().map(percent_decoded).unwrap_or_default();
            section
                .headers
                .0
                .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
            section
                .headers
                .0
                .push(("Authorization".to_owned(), basic(&user, &password)));
            // Clearing cannot fail on a URL with a host.
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        section.url = url.to_string();
        Ok(Probe::Http(section))
    }
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `Basic base64(user:password)`, written as a literal for our YAML.
fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    entry::literal(&format!("Basic {token}"))
}

/// Validates an `http` section (absent: every default) into its template.
pub(super) fn template(raw: Option<Sp<RawHttp>>, check: &mut Check<'_>) -> (IpProtocol, Template) {
    let Some(raw) = raw else {
        let template = Template {
            section: Http {
                follow_redirects: true,
                ..Http::default()
            },
        };
        return (IpProtocol::default(), template);
    };
    let raw = raw.value;
    let ip = ip_protocol(
        raw.preferred_ip_protocol.as_ref(),
        raw.ip_protocol_fallback.as_ref(),
        check,
    );
    refusals(&raw, check);

    let mut expect = HttpExpect::default();
    for code in raw.valid_status_codes.iter().flat_map(|c| &c.value.0) {
        if (100..=599).contains(&code.value) {
            expect.status.push(code.value.to_string());
        } else {
            check.error(
                code.pos,
                format!(
                    "invalid status code {} in \"valid_status_codes\"",
                    code.value
                ),
            );
        }
    }
    versions(&raw, &mut expect, check);
    match (
        raw.fail_if_ssl.as_ref().filter(|f| f.value),
        raw.fail_if_not_ssl.as_ref().filter(|f| f.value),
    ) {
        (Some(_), Some(both)) => check.refuse(
            both.key,
            "fail_if_not_ssl",
            "with fail_if_ssl too, no reply can pass",
        ),
        (Some(_), None) => expect.tls = Some(false),
        (None, Some(_)) => expect.tls = Some(true),
        (None, None) => {}
    }
    // The exporter's names say what fails; ours say what must hold.
    expect.body_not_matches = regexes(
        raw.fail_if_body_matches_regexp,
        "fail_if_body_matches_regexp",
        check,
    );
    expect.body_matches = regexes(
        raw.fail_if_body_not_matches_regexp,
        "fail_if_body_not_matches_regexp",
        check,
    );
    expect.header_not_matches = header_patterns(raw.fail_if_header_matches, check);
    expect.header_matches = header_patterns(raw.fail_if_header_not_matches, check);

    let method = raw.method.and_then(|m| {
        let upper = m.value.trim().to_ascii_uppercase();
        if upper.is_empty() || upper == "GET" {
            None
        } else if METHODS.contains(&upper.as_str()) {
            Some(upper)
        } else {
            check.refuse(
                m.pos,
                &format!("method: {}", m.value),
                &format!("our HTTP probe sends {}", METHODS.join(", ")),
            );
            None
        }
    });
    let mut headers = Pairs::default();
    for (name, value) in raw.headers.map(|h| h.value.0).unwrap_or_default() {
        if header(&name, &value, "headers", check) {
            headers.0.push((name, entry::literal(&value.value)));
        }
    }
    let authorization = authorization(raw.basic_auth, raw.authorization, raw.bearer_token, check);
    if let Some(value) = authorization {
        headers
            .0
            .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
        headers.0.push(("Authorization".to_owned(), value));
    }
    let (trust, server_name) = tls_config(raw.tls_config, check);
    if let Some((_, at)) = server_name {
        check.refuse(
            at,
            "tls_config.server_name",
            "our HTTP probe names the URL's host",
        );
    }
    let no_follow = raw.no_follow_redirects.map(|n| !n.value);
    let follow = raw.follow_redirects.map(|f| f.value);
    let template = Template {
        section: Http {
            url: String::new(),
            method,
            headers,
            body: raw.body.map(|b| b.value).filter(|b| !b.is_empty()),
            tls: (trust != entry::TlsTrust::default()).then_some(trust),
            follow_redirects: no_follow.or(follow).unwrap_or(true),
            expect,
        },
    };
    (ip, template)
}

/// What of an `http` section has no equivalent.
fn refusals(raw: &RawHttp, check: &mut Check<'_>) {
    check.refuse_set(
        &[
            (
                &raw.fail_if_body_json_matches_cel,
                "fail_if_body_json_matches_cel",
            ),
            (
                &raw.fail_if_body_json_not_matches_cel,
                "fail_if_body_json_not_matches_cel",
            ),
        ],
        "our HTTP probe has no CEL; its expect.json compares values at JSON paths",
    );
    check.refuse_set(
        &[(&raw.body_file, "body_file")],
        "give the body inline with \"body\"",
    );
    check.refuse_set(
        &[(&raw.body_size_limit, "body_size_limit")],
        "our HTTP probe reads bodies up to 1 MiB",
    );
    check.refuse_set(
        &[(&raw.oauth2, "oauth2")],
        "our HTTP probe fetches no tokens: send one in \"authorization\" or \"headers\"",
    );
    check.refuse_set(
        &[(&raw.bearer_token_file, "bearer_token_file")],
        "give the token inline, with \"bearer_token\"",
    );
    check.refuse_set(
        &[
            (&raw.proxy_url, "proxy_url"),
            (&raw.no_proxy, "no_proxy"),
            (&raw.proxy_connect_header, "proxy_connect_header"),
        ],
        "our HTTP probe connects directly",
    );
    check.refuse_set(
        &[(&raw.http_headers, "http_headers")],
        "give the values in \"headers\"",
    );
    if let Some(proxy) = raw.proxy_from_environment.as_ref().filter(|p| p.value) {
        check.refuse(
            proxy.key,
            "proxy_from_environment",
            "our HTTP probe connects directly",
        );
    }
    if let Some(h3) = raw.enable_http3.as_ref().filter(|h| h.value) {
        check.refuse(h3.key, "enable_http3", "our HTTP probe speaks HTTP/1.1");
    }
    if let Some(compression) = &raw.compression
        && !matches!(compression.value.trim(), "" | "identity")
    {
        check.refuse(
            compression.key,
            "compression",
            "our HTTP probe reads bodies as they come",
        );
    }
}

/// `valid_http_versions`: HTTP/2.0 and HTTP/3.0 are dropped (our probe speaks HTTP/1.1), and
/// a list left empty by that is refused.
fn versions(raw: &RawHttp, expect: &mut HttpExpect, check: &mut Check<'_>) {
    let Some(list) = &raw.valid_http_versions else {
        return;
    };
    let mut dropped = false;
    for version in &list.value.0 {
        match version.value.trim() {
            name @ ("HTTP/1.0" | "HTTP/1.1") => expect.http_version.push(name.to_owned()),
            "HTTP/2.0" => dropped = true,
            "HTTP/3.0" if !raw.enable_http3.as_ref().is_some_and(|h| h.value) => check.error(
                version.pos,
                "HTTP/3 cannot be used as a valid HTTP version when enable_http3 is false"
                    .to_owned(),
            ),
            "HTTP/3.0" => dropped = true,
            other => check.error(
                version.pos,
                format!(
                    "unknown HTTP version {} in \"valid_http_versions\"; expected HTTP/1.0, \
                     HTTP/1.1, HTTP/2.0 or HTTP/3.0",
                    quote(other)
                ),
            ),
        }
    }
    if dropped && expect.http_version.is_empty() {
        check.refuse(
            list.key,
            "valid_http_versions",
            "our HTTP probe speaks HTTP/1.1, so an HTTP/2 or HTTP/3 reply never comes",
        );
    }
}

/// `fail_if_header_matches` or `fail_if_header_not_matches` items, checked as the exporter
/// checks them (a header name and a regex each).
fn header_patterns(
    raw: Option<Sp<Vec<Sp<RawHeaderMatch>>>>,
    check: &mut Check<'_>,
) -> Vec<HeaderPattern> {
    let mut out = Vec::new();
    for item in raw.map(|r| r.value).unwrap_or_default() {
        let (pos, item) = (item.pos, item.value);
        let Some(header) = item.header.filter(|h| !h.value.trim().is_empty()) else {
            check.error(
                pos,
                "header name must be set for HTTP header matchers".to_owned(),
            );
            continue;
        };
        let Some(regexp) = item.regexp.filter(|r| !r.value.is_empty()) else {
            check.error(
                pos,
                "regexp must be set for HTTP header matchers".to_owned(),
            );
            continue;
        };
        if probe_config::regex(&regexp, "regexp", &mut check.invalid).is_err() {
            continue;
        }
        // Go matches a name that is no valid header name against nothing; ours refuses it.
        if probe::tier::http::header::HeaderName::from_bytes(header.value.trim().as_bytes())
            .is_err()
        {
            check.error(
                header.pos,
                format!(
                    "invalid header name {}",
                    probe_config::yaml::quote(&header.value)
                ),
            );
            continue;
        }
        out.push(HeaderPattern {
            header: header.value.trim().to_owned(),
            regex: regexp.value,
            allow_missing: item.allow_missing.is_some_and(|a| a.value),
        });
    }
    out
}

/// The `Authorization` value of `basic_auth`, `authorization` or `bearer_token` (at most one,
/// as the exporter's client requires).
fn authorization(
    basic_auth: Option<Sp<super::raw::RawBasicAuth>>,
    authorization: Option<Sp<super::raw::RawAuthorization>>,
    bearer_token: Option<Sp<String>>,
    check: &mut Check<'_>,
) -> Option<String> {
    let set = [
        basic_auth.as_ref().map(|b| b.key),
        authorization.as_ref().map(|a| a.key),
        bearer_token.as_ref().map(|b| b.key),
    ];
    if let Some(second) = set.iter().flatten().nth(1) {
        check.error(
            *second,
            "at most one of basic_auth, authorization and bearer_token may be set".to_owned(),
        );
        return None;
    }
    if let Some(auth) = basic_auth {
        let auth = auth.value;
        check.refuse_set(
            &[
                (&auth.username_file, "basic_auth.username_file"),
                (&auth.username_ref, "basic_auth.username_ref"),
                (&auth.password_file, "basic_auth.password_file"),
                (&auth.password_ref, "basic_auth.password_ref"),
            ],
            "give the credentials inline",
        );
        let user = auth.username.map(|u| u.value).unwrap_or_default();
        let password = auth.password.map(|p| p.value).unwrap_or_default();
        return Some(basic(&user, &password));
    }
    if let Some(auth) = authorization {
        let auth = auth.value;
        check.refuse_set(
            &[
                (&auth.credentials_file, "authorization.credentials_file"),
                (&auth.credentials_ref, "authorization.credentials_ref"),
            ],
            "give the credentials inline",
        );
        let kind = auth.kind.as_ref().map_or("Bearer", |k| k.value.trim());
        if kind.eq_ignore_ascii_case("basic") {
            let at = auth
                .kind
                .as_ref()
                .map_or(probe_config::yaml::Pos::NONE, |k| k.pos);
            check.error(
                at,
                "authorization type cannot be set to \"basic\", use \"basic_auth\" instead"
                    .to_owned(),
            );
            return None;
        }
        let credentials = auth.credentials.map(|c| c.value).unwrap_or_default();
        return Some(entry::literal(&format!("{kind} {credentials}")));
    }
    bearer_token.map(|token| entry::literal(&format!("Bearer {}", token.value)))
}
