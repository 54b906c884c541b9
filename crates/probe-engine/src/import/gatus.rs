//! `probe-engine import gatus`: a Gatus config (`endpoints:` with conditions) as probes.
//!
//! The file is read as the daemon reads its own: a located tree, every key checked (a key Gatus
//! does not know is an error with a did-you-mean: Gatus would ignore it, and so run a check that
//! is not the one its author meant), every problem reported as `FILE:LINE:COL: message`.
//!
//! # The mapping
//!
//! | Gatus | probe-engine |
//! |---|---|
//! | `name`, `group` | `id`: `group.name`, lowercased, other characters as `-`, made unique with `-2`, `-3` in file order |
//! | `group` | a `kind: group` target per group (after the endpoints, in order of first use), `depends_on` its endpoints |
//! | `url: http(s)://`, `method`, `headers`, `body`, `graphql` | `http` (`graphql` wraps the body as `{"query": ...}`) |
//! | `url: tcp://`, `udp://` (+ `body`) | `tcp`, `udp` (`send`) |
//! | `url: icmp://` | `icmp` |
//! | `url: tls://`, `starttls://` | `tls`, `tls` with `starttls: smtp` |
//! | `url: grpc://`, `grpcs://` | `grpc`, plaintext or with `tls` |
//! | `dns: {query-name, query-type}`, `url: SERVER` | `dns` (`server`, `name`, `type`; a PTR name given as an IP is reversed) |
//! | `interval` (default 60s), `client.timeout` (default 10s) | `interval`, `timeout` (in `defaults` when Gatus's defaults) |
//! | `client.insecure` | `insecure_skip_verify` |
//! | `client.ignore-redirect` (default false) | `follow_redirects` (true unless ignored) |
//! | `[STATUS] op N`, `any()`, `pat()` | `expect.status`: the codes 100-599 for which every status condition holds, as codes, ranges and classes |
//! | `[RESPONSE_TIME] < N`, `<= N` | HTTP `expect.latency_under` (fails, as in Gatus); ICMP, DNS and gRPC: `degraded_if.latency_over` (noted) |
//! | `[BODY] == x`, `pat()`, `any()`; `has([BODY])` | HTTP `expect.body_contains` (for `pat(*text*)`) or `body_matches`; TCP, UDP `expect` / `expect_regex`; DNS `expect.answers` |
//! | `[BODY].path op x` | `expect.json` (`"$.path": x`, or `{ne, lt, le, gt, ge, matches, not_matches, any, none}`) |
//! | `len([BODY].path) op N`, `has([BODY].path) == b` | `expect.json`: `{len: {op: N}}`, `{exists: b}` |
//! | `[CERTIFICATE_EXPIRATION] > D` on `tls://` | `tls.expires_within: D`: DEGRADED, not DOWN (see below) |
//! | `[CONNECTED] == true`; gRPC `[BODY].status == SERVING` | implied: every check connects, a gRPC check passes on SERVING |
//! | `[DNS_RCODE] == X` | `dns.expect.rcode` |
//! | `alerts[]` of a configured provider: `failure-threshold` (3), `success-threshold` (2), `description` | `fall`, `rise`, `alert.annotations.description`; `alerting.custom` is a webhook |
//! | `maintenance` (every endpoint), `maintenance-windows` | `maintenance: [{daily, duration}]` |
//!
//! Gatus has no DEGRADED: a failed condition makes the endpoint unhealthy. The imported
//! conditions keep that verdict, with two exceptions, each said in a note where it applies or
//! here:
//! - a certificate that expires within `D` of a `tls://` endpoint is DEGRADED, as every
//!   certificate check of this daemon: it still serves, and readiness should not drop for a
//!   date. Its alert rule is `on: [DOWN, DEGRADED]`, so it pages as Gatus did;
//! - a response-time limit on ICMP, DNS and gRPC endpoints degrades (those sections know
//!   `degraded_if.latency_over` only).
//!
//! Comparisons are typed where Gatus compares text: `[BODY].id == 1` wants the number 1 (a
//! string `"1"` fails), and numbers compare as numbers (Gatus truncates `5.9` to 5, and reads a
//! missing or non-numeric value as 0; here both fail). A `pat()` is a glob (`*`, `?`, `[...]`)
//! over the whole value, where Gatus also deletes every `/` before matching. `len()` of an
//! object counts its members (Gatus counts the characters of its JSON). Gatus's DNS `[BODY]` is
//! the last answer; here the value must be among the answers.
//!
//! An endpoint without an alert gets the daemon's thresholds (rise 2, fall 3: Gatus's alert
//! defaults), and `alert: false` once any endpoint alerts. Everything else (placeholders and
//! keys with no counterpart, other alert providers, maintenance on given weekdays or in a time
//! zone other than UTC) becomes a note.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::{
    Alert, AlertRule, Alerts, Dependency, Dns, DnsExpect, Document, Grpc, Http, HttpExpect, Icmp,
    Import, JsonCondition, JsonTests, LatencyOver, Note, Pairs, Probe, Schedule, Stream, Target,
    Tls, Trust, Webhook, Window, refusal,
};
use probe_config::yaml::read_file;
use probe_config::yaml::{
    Diags, Entries, Kind, Node, Pos, Sp, collect, each, syntax_error, value_of, yaml_options,
};
use probe_config::yaml::{did_you_mean, file_error, quote};
use probe_config::{ConfigError, ConfigErrors};

/// Gatus's interval when an endpoint sets none.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Gatus's client timeout when an endpoint sets none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Gatus's `failure-threshold` when an alert sets none.
const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Gatus's `success-threshold` when an alert sets none.
const DEFAULT_SUCCESS_THRESHOLD: u32 = 2;
/// The daemon's own `fall` and `rise`, which need not be written.
const OUR_FALL: u32 = 3;
const OUR_RISE: u32 = 2;

#[derive(Deserialize)]
#[serde(rename = "Gatus config", deny_unknown_fields)]
struct RawConfig {
    #[serde(rename = "endpoints")]
    _endpoints: Option<Vec<IgnoredAny>>,
    #[serde(rename = "external-endpoints")]
    external_endpoints: Option<Vec<Sp<RawNamed>>>,
    suites: Option<Vec<Sp<RawNamed>>>,
    alerting: Option<Sp<Entries<RawProvider>>>,
    maintenance: Option<Sp<RawMaintenance>>,
    // Gatus's own server, storage and dashboard: nothing of a probe.
    #[serde(rename = "metrics")]
    _metrics: Option<IgnoredAny>,
    #[serde(rename = "storage")]
    _storage: Option<IgnoredAny>,
    #[serde(rename = "announcements")]
    _announcements: Option<IgnoredAny>,
    #[serde(rename = "security")]
    _security: Option<IgnoredAny>,
    #[serde(rename = "concurrency")]
    _concurrency: Option<IgnoredAny>,
    #[serde(rename = "disable-monitoring-lock")]
    _disable_monitoring_lock: Option<IgnoredAny>,
    #[serde(rename = "skip-invalid-config-update")]
    _skip_invalid_config_update: Option<IgnoredAny>,
    #[serde(rename = "web")]
    _web: Option<IgnoredAny>,
    #[serde(rename = "ui")]
    _ui: Option<IgnoredAny>,
    #[serde(rename = "tunneling")]
    _tunneling: Option<IgnoredAny>,
    #[serde(rename = "connectivity")]
    _connectivity: Option<IgnoredAny>,
    #[serde(rename = "remote")]
    _remote: Option<IgnoredAny>,
}

/// An external endpoint or a suite: only its name is read, for the note.
#[derive(Deserialize)]
struct RawNamed {
    name: Option<Sp<String>>,
}

/// One provider of `alerting`: what a default alert and the `custom` provider say.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawProvider {
    default_alert: Option<Sp<RawAlert>>,
    url: Option<Sp<String>>,
    headers: Option<Sp<Entries<String>>>,
}

#[derive(Deserialize)]
#[serde(rename = "endpoint", deny_unknown_fields, rename_all = "kebab-case")]
struct RawEndpoint {
    enabled: Option<Sp<bool>>,
    name: Sp<String>,
    group: Option<Sp<String>>,
    url: Sp<String>,
    method: Option<Sp<String>>,
    conditions: Option<Vec<Sp<String>>>,
    interval: Option<Sp<String>>,
    graphql: Option<Sp<bool>>,
    body: Option<Sp<String>>,
    headers: Option<Sp<Entries<String>>>,
    dns: Option<Sp<RawDns>>,
    // An SSH endpoint is known by its url's scheme; with another scheme Gatus ignores the block.
    #[serde(rename = "ssh")]
    _ssh: Option<IgnoredAny>,
    alerts: Option<Vec<Sp<RawAlert>>>,
    maintenance_windows: Option<Vec<Sp<RawMaintenance>>>,
    client: Option<Sp<RawClient>>,
    ui: Option<Sp<Entries<IgnoredAny>>>,
    extra_labels: Option<Sp<IgnoredAny>>,
    always_run: Option<Sp<IgnoredAny>>,
    store: Option<Sp<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename = "dns", deny_unknown_fields, rename_all = "kebab-case")]
struct RawDns {
    query_name: Sp<String>,
    query_type: Sp<String>,
}

#[derive(Deserialize)]
#[serde(rename = "alert", deny_unknown_fields, rename_all = "kebab-case")]
struct RawAlert {
    #[serde(rename = "type")]
    kind: Option<Sp<String>>,
    enabled: Option<Sp<bool>>,
    failure_threshold: Option<Sp<u32>>,
    success_threshold: Option<Sp<u32>>,
    minimum_reminder_interval: Option<Sp<String>>,
    send_on_resolved: Option<Sp<bool>>,
    description: Option<Sp<String>>,
    provider_override: Option<Sp<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename = "maintenance", deny_unknown_fields)]
struct RawMaintenance {
    enabled: Option<Sp<bool>>,
    start: Sp<String>,
    duration: Sp<String>,
    timezone: Option<Sp<String>>,
    every: Option<Sp<Vec<Sp<String>>>>,
}

#[derive(Deserialize)]
#[serde(rename = "client", deny_unknown_fields, rename_all = "kebab-case")]
struct RawClient {
    insecure: Option<Sp<bool>>,
    ignore_redirect: Option<Sp<bool>>,
    timeout: Option<Sp<String>>,
    dns_resolver: Option<Sp<IgnoredAny>>,
    oauth2: Option<Sp<IgnoredAny>>,
    proxy_url: Option<Sp<IgnoredAny>>,
    identity_aware_proxy: Option<Sp<IgnoredAny>>,
    tls: Option<Sp<IgnoredAny>>,
    network: Option<Sp<IgnoredAny>>,
    tunnel: Option<Sp<IgnoredAny>>,
    store_cookies: Option<Sp<IgnoredAny>>,
}

/// Reads the Gatus config `file` and imports it.
///
/// # Errors
/// The file cannot be read, is not YAML, or is not a valid Gatus config: every problem, located.
pub fn import(file: &Path) -> Result<Import, ConfigErrors> {
    let text = read_file(file).map_err(|message| file_error(file, message))?;
    import_text(file, &text)
}

/// Imports the Gatus config `text`, named `file` in messages.
///
/// # Errors
/// `text` is not YAML, or not a valid Gatus config: every problem, located.
pub fn import_text(file: &Path, text: &str) -> Result<Import, ConfigErrors> {
    let located = |diags: Diags| {
        let mut errors: Vec<ConfigError> = diags
            .into_iter()
            .map(|(pos, message)| ConfigError {
                file: file.to_path_buf(),
                line: pos.line,
                column: pos.column,
                message,
            })
            .collect();
        errors.sort_by_key(|e| (e.line, e.column));
        ConfigErrors(errors)
    };
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) if !matches!(root.kind, Kind::Null) => root,
        Ok(_) => {
            return Err(file_error(
                file,
                "no endpoints: the file is empty".to_owned(),
            ));
        }
        Err(e) => return Err(located(vec![syntax_error(&e)])),
    };
    let (raw, mut diags) = collect::<RawConfig>(&root, text);
    let endpoints = each::<RawEndpoint>(value_of(&root, text, "endpoints"), text, &mut diags);
    let Some(raw) = raw.filter(|_| diags.is_empty()) else {
        return Err(located(diags));
    };
    let mut importer = Importer {
        file,
        notes: Vec::new(),
        diags: Vec::new(),
    };
    let document = importer.document(raw, endpoints.into_iter().flatten().collect());
    if importer.diags.is_empty() {
        let mut notes = importer.notes;
        notes.sort_by_key(|n| (n.at.line, n.at.column));
        Ok(Import { document, notes })
    } else {
        Err(located(importer.diags))
    }
}

/// One import's state: what it noted and what it found wrong.
struct Importer<'a> {
    file: &'a Path,
    notes: Vec<Note>,
    diags: Diags,
}

/// The alert settings of a configured provider.
struct Provider {
    default: Option<RawAlert>,
}

/// What an endpoint's alerts come to.
struct AlertPlan {
    thresholds: Option<(u32, u32)>,
    description: Option<String>,
}

impl Importer<'_> {
    fn note(&mut self, pos: Pos, subject: &str, key: &str, why: &str) {
        self.notes.push(Note::new(
            self.file,
            (pos.line, pos.column),
            subject,
            key,
            why,
        ));
    }

    fn document(&mut self, raw: RawConfig, endpoints: Vec<(RawEndpoint, Pos)>) -> Document {
        let (providers, webhooks) = self.providers(raw.alerting);
        let global = raw
            .maintenance
            .and_then(|m| self.window(m, "maintenance", "maintenance"));
        for (list, what, key) in [
            (
                raw.external_endpoints,
                "external endpoint",
                "external-endpoints",
            ),
            (raw.suites, "suite", "suites"),
        ] {
            for item in list.into_iter().flatten() {
                let name = item.value.name.map_or_else(String::new, |n| n.value);
                self.note(
                    item.pos,
                    &format!("{what} {}", quote(&name)),
                    key,
                    if key == "suites" {
                        "a suite chains requests through a shared context; each target here is one check"
                    } else {
                        "its results are pushed to Gatus; targets here are probed"
                    },
                );
            }
        }
        let defaults = Schedule {
            interval: Some(go_format(DEFAULT_INTERVAL)),
            timeout: Some(go_format(DEFAULT_TIMEOUT)),
            ..Schedule::default()
        };
        let mut ids = Ids::default();
        let mut targets = Vec::new();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        let mut alerting = false;
        for (endpoint, pos) in endpoints {
            if endpoint.enabled.as_ref().is_some_and(|e| !e.value) {
                continue;
            }
            let group = endpoint
                .group
                .as_ref()
                .map(|g| g.value.trim().to_owned())
                .filter(|g| !g.is_empty());
            let Some(mut target) = self.endpoint(endpoint, pos, &providers, &mut alerting) else {
                continue;
            };
            if let Some(window) = &global {
                target.maintenance.insert(0, window.clone());
            }
            let name = target.id.clone();
            let wanted = match &group {
                Some(group) => format!("{}.{}", slug(group), slug(&name)),
                None => slug(&name),
            };
            target.id = ids.claim(&wanted);
            if let Some(why) = refusal(&target, &defaults) {
                let subject = endpoint_subject(&name, group.as_deref());
                self.note(pos, &subject, "endpoint", &why);
                continue;
            }
            if let Some(group) = group {
                match groups.iter_mut().find(|(name, _)| *name == group) {
                    Some((_, members)) => members.push(target.id.clone()),
                    None => groups.push((group, vec![target.id.clone()])),
                }
            }
            targets.push(target);
        }
        for (name, members) in groups {
            targets.push(Target {
                id: ids.claim(&slug(&name)),
                kind: Some("group"),
                depends_on: members
                    .into_iter()
                    .map(|target| Dependency { target })
                    .collect(),
                ..Target::default()
            });
        }
        let mut alerts = None;
        if alerting {
            for target in &mut targets {
                target.alert.get_or_insert(Alert::Off(false));
            }
            alerts = Some(Alerts { webhooks });
        }
        Document {
            defaults,
            targets,
            alerts,
        }
    }

    /// The providers of `alerting`, by name: the `custom` one is a webhook, the others are
    /// noted.
    fn providers(
        &mut self,
        alerting: Option<Sp<Entries<RawProvider>>>,
    ) -> (Vec<(String, Provider)>, Vec<Webhook>) {
        let mut providers = Vec::new();
        let mut webhooks = Vec::new();
        for (name, provider) in alerting.map(|a| a.value.0).unwrap_or_default() {
            if name == "custom" {
                match provider.value.url {
                    Some(url) => {
                        webhooks.push(Webhook {
                            name: "custom".to_owned(),
                            url: url.value,
                            headers: Pairs(
                                provider
                                    .value
                                    .headers
                                    .map(|h| h.value.0)
                                    .unwrap_or_default()
                                    .into_iter()
                                    .map(|(k, v)| (k, v.value))
                                    .collect(),
                            ),
                        });
                        self.note(
                            provider.key,
                            "alerting",
                            "custom",
                            "it is the webhook \"custom\", which posts the alert as JSON (labels, annotations, status): the method, the body and its placeholders are not kept",
                        );
                    }
                    None => self.diags.push((
                        provider.key,
                        "missing field \"url\" in alerting.custom".to_owned(),
                    )),
                }
            } else {
                self.note(
                    provider.key,
                    "alerting",
                    &name,
                    "alerts go to Alertmanager and webhooks: add an alerts.alertmanager section whose route has this receiver",
                );
            }
            providers.push((
                name,
                Provider {
                    default: provider.value.default_alert.map(|d| d.value),
                },
            ));
        }
        (providers, webhooks)
    }

    /// One endpoint as a target (its id still the endpoint's name), or `None` when it cannot be
    /// one (noted).
    fn endpoint(
        &mut self,
        endpoint: RawEndpoint,
        pos: Pos,
        providers: &[(String, Provider)],
        alerting: &mut bool,
    ) -> Option<Target> {
        let name = endpoint.name.value.trim().to_owned();
        let subject = endpoint_subject(&name, endpoint.group.as_ref().map(|g| g.value.trim()));
        let mut e = Endpoint {
            subject: subject.clone(),
            degrades: false,
        };
        let interval = endpoint
            .interval
            .as_ref()
            .and_then(|i| self.duration(i))
            .unwrap_or(DEFAULT_INTERVAL);
        let client = endpoint.client.map(|c| c.value);
        let timeout = client
            .as_ref()
            .and_then(|c| c.timeout.as_ref())
            .and_then(|t| self.duration(t))
            .unwrap_or(DEFAULT_TIMEOUT);
        let mut schedule = Schedule::default();
        if interval != DEFAULT_INTERVAL {
            schedule.interval = Some(go_format(interval));
        }
        if timeout >= interval {
            let fitted = interval / 2;
            schedule.timeout = Some(go_format(fitted));
            let at = client
                .as_ref()
                .and_then(|c| c.timeout.as_ref())
                .map_or(pos, |t| t.pos);
            self.note(
                at,
                &subject,
                "client.timeout",
                &format!(
                    "a check must end before the next is due: timeout {} is not below interval {}, so it is {}",
                    go_format(timeout),
                    go_format(interval),
                    go_format(fitted)
                ),
            );
        } else if timeout != DEFAULT_TIMEOUT {
            schedule.timeout = Some(go_format(timeout));
        }
        let insecure = client
            .as_ref()
            .and_then(|c| c.insecure.as_ref())
            .is_some_and(|i| i.value);
        let follow = !client
            .as_ref()
            .and_then(|c| c.ignore_redirect.as_ref())
            .is_some_and(|i| i.value);
        if let Some(client) = &client {
            self.client_notes(client, &subject);
        }
        for (key, value) in [
            ("extra-labels", &endpoint.extra_labels),
            ("always-run", &endpoint.always_run),
            ("store", &endpoint.store),
        ] {
            if let Some(value) = value {
                let why = if key == "extra-labels" {
                    "a target's series carry its id; labels go on alerts"
                } else {
                    "suites only"
                };
                self.note(value.key, &subject, key, why);
            }
        }
        for (key, value) in endpoint.ui.map(|u| u.value.0).unwrap_or_default() {
            self.note(
                value.key,
                &subject,
                &format!("ui.{key}"),
                "a display option of Gatus's dashboard",
            );
        }
        let conditions: Vec<(Condition, Pos, String)> = endpoint
            .conditions
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| match parse_condition(&c.value) {
                Ok(condition) => Some((condition, c.pos, c.value)),
                Err(message) => {
                    self.diags.push((
                        c.pos,
                        format!("invalid condition {}: {message}", quote(&c.value)),
                    ));
                    None
                }
            })
            .collect();
        let body = endpoint.body.map(|b| {
            let group = endpoint.group.as_ref().map_or("", |g| g.value.as_str());
            let filled = b
                .value
                .replace("[ENDPOINT_NAME]", &name)
                .replace("[ENDPOINT_GROUP]", group)
                .replace("[ENDPOINT_URL]", &endpoint.url.value);
            if filled.contains("[LOCAL_ADDRESS]") || filled.contains("[RANDOM_STRING_") {
                self.note(
                    b.pos,
                    &subject,
                    "body",
                    "[LOCAL_ADDRESS] and [RANDOM_STRING_N] change on every request; the body is sent as written",
                );
            }
            (filled, b.pos)
        });
        let url = endpoint.url.value.trim().to_owned();
        let probe = if let Some(dns) = endpoint.dns {
            self.dns(&mut e, &url, dns.value, &conditions)
        } else {
            let Some((scheme, rest)) = url.split_once("://") else {
                self.diags.push((
                    endpoint.url.pos,
                    format!(
                        "url {} has no scheme: expected http://, https://, tcp://, udp://, icmp://, tls://, starttls://, grpc:// or grpcs://, or a dns block",
                        quote(&url)
                    ),
                ));
                return None;
            };
            match scheme.to_ascii_lowercase().as_str() {
                "http" | "https" => {
                    let graphql = endpoint.graphql.is_some_and(|g| g.value);
                    self.http(
                        &mut e,
                        HttpParts {
                            url: url.clone(),
                            method: endpoint.method.map(|m| m.value),
                            headers: endpoint.headers.map(|h| h.value),
                            body: body.map(|b| b.0),
                            graphql,
                            insecure,
                            follow,
                        },
                        &conditions,
                        endpoint.url.pos,
                    )
                }
                "tcp" | "udp" => {
                    let udp = scheme.eq_ignore_ascii_case("udp");
                    if udp && body.is_none() {
                        self.note(
                            endpoint.url.pos,
                            &subject,
                            "url",
                            "a UDP check sends a datagram and waits for the reply; without a body Gatus only opens a socket, which always works",
                        );
                        return None;
                    }
                    let stream = self.stream(&mut e, rest, body.map(|b| b.0), &conditions);
                    Some(if udp {
                        Probe::Udp(stream)
                    } else {
                        Probe::Tcp(stream)
                    })
                }
                "icmp" => Some(self.icmp(&mut e, rest, &conditions)),
                "tls" | "starttls" => Some(self.tls(
                    &mut e,
                    rest,
                    scheme.eq_ignore_ascii_case("starttls"),
                    insecure,
                    &conditions,
                )),
                "grpc" | "grpcs" => Some(self.grpc(
                    &mut e,
                    rest,
                    scheme.eq_ignore_ascii_case("grpcs"),
                    insecure,
                    &conditions,
                )),
                "sctp" | "ws" | "wss" | "ssh" => {
                    self.note(
                        endpoint.url.pos,
                        &subject,
                        "url",
                        &format!("probe-engine has no {scheme} probe"),
                    );
                    return None;
                }
                other => {
                    self.diags.push((
                        endpoint.url.pos,
                        format!("unknown scheme {} in url", quote(other)),
                    ));
                    return None;
                }
            }
        }?;
        let plan = self.alerts(endpoint.alerts.unwrap_or_default(), &subject, providers);
        let mut alert = None;
        if let Some(plan) = plan {
            *alerting = true;
            if let Some((fall, rise)) = plan.thresholds {
                schedule.fall = (fall != OUR_FALL).then_some(fall);
                schedule.rise = (rise != OUR_RISE).then_some(rise);
            }
            alert = Some(Alert::Rule(AlertRule {
                on: e.degrades.then(|| vec!["DOWN", "DEGRADED"]),
                annotations: plan
                    .description
                    .map(|d| ("description".to_owned(), d))
                    .into_iter()
                    .collect(),
            }));
        }
        let maintenance = endpoint
            .maintenance_windows
            .unwrap_or_default()
            .into_iter()
            .filter_map(|w| self.window(w, &subject, "maintenance-windows"))
            .collect();
        Some(Target {
            id: name,
            probe: Some(probe),
            schedule,
            maintenance,
            alert,
            ..Target::default()
        })
    }

    fn client_notes(&mut self, client: &RawClient, subject: &str) {
        for (key, value, why) in [
            (
                "dns-resolver",
                &client.dns_resolver,
                "names are resolved by the daemon's one resolver (the resolver section)",
            ),
            ("oauth2", &client.oauth2, "no OAuth2 client"),
            ("proxy-url", &client.proxy_url, "checks connect directly"),
            (
                "identity-aware-proxy",
                &client.identity_aware_proxy,
                "no Identity-Aware-Proxy client",
            ),
            ("tls", &client.tls, "no client certificates"),
            (
                "network",
                &client.network,
                "a name's addresses are all of its families",
            ),
            ("tunnel", &client.tunnel, "checks connect directly"),
            (
                "store-cookies",
                &client.store_cookies,
                "no cookies are kept",
            ),
        ] {
            if let Some(value) = value {
                self.note(value.key, subject, &format!("client.{key}"), why);
            }
        }
    }

    /// The thresholds and description of an endpoint's first enabled alert of a configured
    /// provider; `None` when it has none. The others are noted.
    fn alerts(
        &mut self,
        alerts: Vec<Sp<RawAlert>>,
        subject: &str,
        providers: &[(String, Provider)],
    ) -> Option<AlertPlan> {
        let mut plan: Option<AlertPlan> = None;
        for (i, alert) in alerts.into_iter().enumerate() {
            let key = format!("alerts[{i}]");
            let Some(kind) = &alert.value.kind else {
                self.diags
                    .push((alert.pos, "missing field \"type\" in alert".to_owned()));
                continue;
            };
            let Some((_, provider)) = providers.iter().find(|(name, _)| *name == kind.value) else {
                self.note(
                    kind.pos,
                    subject,
                    &key,
                    &format!(
                        "alerting has no {} provider, so Gatus ignores this alert",
                        quote(&kind.value)
                    ),
                );
                continue;
            };
            let default = provider.default.as_ref();
            let enabled = alert
                .value
                .enabled
                .as_ref()
                .or(default.and_then(|d| d.enabled.as_ref()))
                .is_none_or(|e| e.value);
            if !enabled {
                continue;
            }
            let fall = alert
                .value
                .failure_threshold
                .as_ref()
                .or(default.and_then(|d| d.failure_threshold.as_ref()))
                .map_or(DEFAULT_FAILURE_THRESHOLD, |t| t.value);
            let rise = alert
                .value
                .success_threshold
                .as_ref()
                .or(default.and_then(|d| d.success_threshold.as_ref()))
                .map_or(DEFAULT_SUCCESS_THRESHOLD, |t| t.value);
            let description = alert
                .value
                .description
                .as_ref()
                .or(default.and_then(|d| d.description.as_ref()))
                .map(|d| d.value.clone());
            for (name, set, why) in [
                (
                    "minimum-reminder-interval",
                    alert
                        .value
                        .minimum_reminder_interval
                        .as_ref()
                        .map(|m| m.key),
                    "firing alerts are sent again as each receiver's resend says",
                ),
                (
                    "provider-override",
                    alert.value.provider_override.as_ref().map(|p| p.key),
                    "receivers are set in the alerts section, for every alert",
                ),
                (
                    "send-on-resolved",
                    alert
                        .value
                        .send_on_resolved
                        .as_ref()
                        .filter(|s| !s.value)
                        .map(|s| s.key),
                    "a resolved alert is always sent",
                ),
            ] {
                if let Some(at) = set {
                    self.note(at, subject, &format!("{key}.{name}"), why);
                }
            }
            match &plan {
                None => {
                    plan = Some(AlertPlan {
                        thresholds: Some((fall, rise)),
                        description,
                    });
                }
                Some(first) if first.thresholds != Some((fall, rise)) => self.note(
                    alert.pos,
                    subject,
                    &key,
                    "a target has one pair of thresholds (fall, rise): the first alert's are used",
                ),
                Some(_) => {}
            }
        }
        plan
    }

    /// A Gatus maintenance window as a daily window, or `None` (noted) when ours cannot say it.
    fn window(&mut self, raw: Sp<RawMaintenance>, subject: &str, key: &str) -> Option<Window> {
        let m = raw.value;
        if m.enabled.as_ref().is_some_and(|e| !e.value) {
            return None;
        }
        let start = m.start.value.trim();
        let valid = start.len() == 5
            && start.as_bytes()[2] == b':'
            && start[..2].parse::<u8>().is_ok_and(|h| h < 24)
            && start[3..].parse::<u8>().is_ok_and(|m| m < 60);
        if !valid {
            self.diags.push((
                m.start.pos,
                format!(
                    "invalid maintenance start {}: expected hh:mm, from 00:00 to 23:59",
                    quote(start)
                ),
            ));
            return None;
        }
        let duration = self.duration(&m.duration)?;
        if duration.is_zero() || duration > Duration::from_secs(86_400) {
            self.diags.push((
                m.duration.pos,
                "a maintenance window lasts more than 0s and at most 24h".to_owned(),
            ));
            return None;
        }
        if let Some(zone) = &m.timezone
            && !matches!(
                zone.value.trim(),
                "" | "UTC" | "Etc/UTC" | "GMT" | "Etc/GMT" | "Z"
            )
        {
            self.note(
                zone.pos,
                subject,
                &format!("{key}.timezone"),
                &format!(
                    "windows are in UTC, and {} may change its offset with daylight saving time: the window was left out",
                    quote(&zone.value)
                ),
            );
            return None;
        }
        if let Some(every) = &m.every {
            const DAYS: [&str; 7] = [
                "Sunday",
                "Monday",
                "Tuesday",
                "Wednesday",
                "Thursday",
                "Friday",
                "Saturday",
            ];
            for day in &every.value {
                if !DAYS.contains(&day.value.as_str()) {
                    self.diags.push((
                        day.pos,
                        format!(
                            "invalid day {}: expected one of {}",
                            quote(&day.value),
                            DAYS.join(", ")
                        ),
                    ));
                    return None;
                }
            }
            let all = DAYS
                .iter()
                .all(|d| every.value.iter().any(|day| day.value == *d));
            if !every.value.is_empty() && !all {
                self.note(
                    every.pos,
                    subject,
                    &format!("{key}.every"),
                    "windows recur every day or happen once: the window was left out",
                );
                return None;
            }
        }
        Some(Window {
            daily: start.to_owned(),
            duration: go_format(duration),
        })
    }

    /// A Go duration (`1h30m`, `500ms`); an invalid one is an error at its value.
    fn duration(&mut self, raw: &Sp<String>) -> Option<Duration> {
        parse_go_duration(raw.value.trim())
            .map_err(|why| {
                self.diags.push((
                    raw.pos,
                    format!("invalid duration {}: {why}", quote(&raw.value)),
                ));
            })
            .ok()
    }
}

/// How notes name an endpoint: by its name, and its group when it has one.
fn endpoint_subject(name: &str, group: Option<&str>) -> String {
    match group.filter(|g| !g.is_empty()) {
        Some(group) => format!("endpoint {} (group {})", quote(name), quote(group)),
        None => format!("endpoint {}", quote(name)),
    }
}

/// What the translation of one endpoint's conditions learns beyond its probe section.
struct Endpoint {
    subject: String,
    /// Some condition was mapped onto a DEGRADED verdict, so the alert rule must include it.
    degrades: bool,
}

/// What an HTTP endpoint sends.
struct HttpParts {
    url: String,
    method: Option<String>,
    headers: Option<Entries<String>>,
    body: Option<String>,
    graphql: bool,
    insecure: bool,
    follow: bool,
}

impl Importer<'_> {
    /// A condition this kind of endpoint cannot keep.
    fn cannot(&mut self, e: &Endpoint, at: Pos, text: &str, why: &str) {
        self.note(at, &e.subject, &format!("condition {}", quote(text)), why);
    }

    /// Conditions every check implies (`[CONNECTED] == true`), true for the others.
    fn implied(&mut self, e: &Endpoint, c: &Condition, at: Pos, text: &str) -> bool {
        match (&c.subject, c.op, &c.value) {
            (Subject::Connected, Op::Eq, Value::Literal(v)) if v == "true" => true,
            (Subject::Connected, _, _) => {
                self.cannot(e, at, text, "a check passes only when it connects");
                true
            }
            (Subject::Context(_), _, _) => {
                self.cannot(e, at, text, "[CONTEXT] belongs to suites");
                true
            }
            (Subject::DomainExpiration, _, _) => {
                self.cannot(e, at, text, "no WHOIS lookups");
                true
            }
            (Subject::Ip, _, _) => {
                self.cannot(
                    e,
                    at,
                    text,
                    "no condition on the address a name resolved to",
                );
                true
            }
            _ => false,
        }
    }

    fn http(
        &mut self,
        e: &mut Endpoint,
        parts: HttpParts,
        conditions: &[Cond],
        at: Pos,
    ) -> Option<Probe> {
        let mut expect = HttpExpect::default();
        let mut statuses = [true; 500];
        let mut json: Vec<(String, JsonTests)> = Vec::new();
        let mut latency: Option<u64> = None;
        for (c, at, text) in conditions {
            if self.implied(e, c, *at, text) {
                continue;
            }
            match &c.subject {
                Subject::Status => {
                    for (code, accepted) in (100u16..).zip(statuses.iter_mut()) {
                        *accepted &= gatus_holds(&code.to_string(), c.op, &c.value);
                    }
                }
                Subject::ResponseTime => match (c.op, gatus_number(&c.value)) {
                    (Op::Lt, Some(n)) if n > 0 => {
                        latency = Some(latency.map_or(n, |l| l.min(n)));
                    }
                    (Op::Le, Some(n)) => {
                        let n = n.saturating_add(1);
                        latency = Some(latency.map_or(n, |l| l.min(n)));
                    }
                    _ => self.cannot(
                        e,
                        *at,
                        text,
                        "a response-time condition here is an upper limit (< or <=)",
                    ),
                },
                Subject::Body(None) | Subject::Has(None) => match body_regex(c) {
                    Some(Body::Contains(needle)) if expect.body_contains.is_none() => {
                        expect.body_contains = Some(needle);
                    }
                    Some(body) => expect.body_matches.push(body.regex()),
                    None => self.cannot(
                        e,
                        *at,
                        text,
                        "the body can be required to match, not to differ",
                    ),
                },
                Subject::Body(Some(_)) | Subject::Len(_) | Subject::Has(_) => {
                    match json_condition(c) {
                        Ok((path, test)) => merge_json(&mut json, path, test),
                        Err(why) => self.cannot(e, *at, text, why),
                    }
                }
                Subject::CertificateExpiration => self.cannot(
                    e,
                    *at,
                    text,
                    "an http target has no certificate condition: add a tls target for its host",
                ),
                Subject::DnsRcode => {
                    self.cannot(e, *at, text, "[DNS_RCODE] belongs to DNS endpoints");
                }
                Subject::Connected
                | Subject::Context(_)
                | Subject::DomainExpiration
                | Subject::Ip => {}
            }
        }
        expect.status = status_patterns(&statuses);
        if expect.status.is_empty() {
            self.note(
                at,
                &e.subject,
                "conditions",
                "no status passes every [STATUS] condition, so Gatus always fails it: left out",
            );
            return None;
        }
        expect.latency_under = latency.map(|ms| go_format(Duration::from_millis(ms)));
        expect.json = Pairs(
            json.into_iter()
                .map(|(path, tests)| (path, JsonCondition::from(tests)))
                .collect(),
        );
        let mut headers: Vec<(String, String)> = parts
            .headers
            .map(|h| h.0)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.value))
            .collect();
        let body = match (parts.body, parts.graphql) {
            (Some(body), true) => {
                if !headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                {
                    headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
                }
                Some(serde_json::json!({ "query": body }).to_string())
            }
            (body, _) => body,
        };
        Some(Probe::Http(Http {
            url: parts.url,
            method: parts.method.filter(|m| !m.eq_ignore_ascii_case("GET")),
            headers: Pairs(headers),
            body,
            tls: parts.insecure.then_some(Trust {
                insecure_skip_verify: true,
            }),
            follow_redirects: parts.follow.then_some(true),
            expect,
            degraded_if: None,
        }))
    }

    fn stream(
        &mut self,
        e: &mut Endpoint,
        address: &str,
        send: Option<String>,
        conditions: &[Cond],
    ) -> Stream {
        let mut stream = Stream {
            address: address.to_owned(),
            send,
            ..Stream::default()
        };
        for (c, at, text) in conditions {
            if self.implied(e, c, *at, text) {
                continue;
            }
            match (&c.subject, body_regex(c)) {
                (Subject::Body(None), Some(body))
                    if stream.expect.is_none() && stream.expect_regex.is_none() =>
                {
                    match body {
                        Body::Contains(needle) => stream.expect = Some(needle),
                        other => stream.expect_regex = Some(other.regex()),
                    }
                }
                (Subject::Body(None), Some(_)) => {
                    self.cannot(e, *at, text, "a reply is matched by one expectation");
                }
                (Subject::ResponseTime, _) => {
                    self.cannot(e, *at, text, "a TCP or UDP target has no latency condition");
                }
                (Subject::Body(_) | Subject::Len(_) | Subject::Has(_), _) => self.cannot(
                    e,
                    *at,
                    text,
                    "a TCP or UDP reply is matched by == on [BODY] (a value or pat())",
                ),
                _ => self.cannot(e, *at, text, "a TCP or UDP target has no condition on this"),
            }
        }
        stream
    }

    fn icmp(&mut self, e: &mut Endpoint, host: &str, conditions: &[Cond]) -> Probe {
        let degraded_if = self.latency_degrades(e, conditions, "an ICMP target");
        Probe::Icmp(Icmp {
            host: host.trim_end_matches('/').to_owned(),
            degraded_if,
        })
    }

    fn tls(
        &mut self,
        e: &mut Endpoint,
        address: &str,
        starttls: bool,
        insecure: bool,
        conditions: &[Cond],
    ) -> Probe {
        let mut within: Option<Duration> = None;
        for (c, at, text) in conditions {
            if self.implied(e, c, *at, text) {
                continue;
            }
            let days = match (&c.subject, c.op, &c.value) {
                (Subject::CertificateExpiration, Op::Gt | Op::Ge, Value::Literal(v)) => {
                    gatus_duration_ms(v).filter(|ms| *ms > 0)
                }
                _ => None,
            };
            match days {
                Some(ms) => {
                    let d = Duration::from_millis(ms);
                    within = Some(within.map_or(d, |w| w.max(d)));
                    e.degrades = true;
                }
                None => self.cannot(
                    e,
                    *at,
                    text,
                    "a tls target knows the handshake and how soon its certificates expire ([CERTIFICATE_EXPIRATION] > D)",
                ),
            }
        }
        Probe::Tls(Tls {
            address: address.to_owned(),
            insecure_skip_verify: insecure,
            expires_within: within.map(go_format),
            starttls: starttls.then_some("smtp"),
        })
    }

    fn grpc(
        &mut self,
        e: &mut Endpoint,
        address: &str,
        tls: bool,
        insecure: bool,
        conditions: &[Cond],
    ) -> Probe {
        let serving: Vec<Cond> = conditions
            .iter()
            .filter(|(c, _, _)| {
                !matches!(
                    (&c.subject, c.op, &c.value),
                    (Subject::Body(Some(path)), Op::Eq, Value::Literal(v))
                        if path == ".status" && v == "SERVING"
                )
            })
            .cloned()
            .collect();
        let degraded_if = self.latency_degrades(e, &serving, "a gRPC target");
        Probe::Grpc(Grpc {
            address: address.to_owned(),
            tls: tls.then_some(Trust {
                insecure_skip_verify: insecure,
            }),
            degraded_if,
        })
    }

    /// `[RESPONSE_TIME] < N` as `degraded_if.latency_over` for the kinds that only degrade on
    /// latency; every other condition is noted.
    fn latency_degrades(
        &mut self,
        e: &mut Endpoint,
        conditions: &[Cond],
        what: &str,
    ) -> Option<LatencyOver> {
        let mut over: Option<u64> = None;
        for (c, at, text) in conditions {
            if self.implied(e, c, *at, text) {
                continue;
            }
            let limit = match (&c.subject, c.op, gatus_number(&c.value)) {
                (Subject::ResponseTime, Op::Lt, Some(n)) if n > 0 => Some(n),
                (Subject::ResponseTime, Op::Le, Some(n)) => Some(n.saturating_add(1)),
                _ => None,
            };
            match limit {
                Some(ms) => {
                    over = Some(over.map_or(ms, |o| o.min(ms)));
                    e.degrades = true;
                    self.cannot(
                        e,
                        *at,
                        text,
                        &format!(
                            "{what} only degrades on latency: a slower reply is DEGRADED, not DOWN"
                        ),
                    );
                }
                None => self.cannot(e, *at, text, &format!("{what} has no condition on this")),
            }
        }
        over.map(|ms| LatencyOver {
            latency_over: go_format(Duration::from_millis(ms)),
        })
    }

    fn dns(
        &mut self,
        e: &mut Endpoint,
        server: &str,
        raw: RawDns,
        conditions: &[Cond],
    ) -> Option<Probe> {
        let record_type = raw.query_type.value.trim().to_ascii_uppercase();
        let mut name = raw.query_name.value.trim().to_owned();
        if record_type == "PTR"
            && let Ok(ip) = name.parse::<IpAddr>()
        {
            name = reverse_name(ip);
        }
        let mut expect = DnsExpect::default();
        let mut rcode_seen = false;
        let mut timing = Vec::new();
        for cond @ (c, at, text) in conditions {
            if self.implied(e, c, *at, text) {
                continue;
            }
            match &c.subject {
                Subject::DnsRcode => {
                    rcode_seen = true;
                    let accepted: Vec<&str> = RCODES
                        .iter()
                        .copied()
                        .filter(|r| gatus_holds(r, c.op, &c.value))
                        .collect();
                    match accepted.as_slice() {
                        [one] if expect.rcode.as_deref().is_none_or(|r| r == *one) => {
                            expect.rcode = Some((*one).to_owned());
                        }
                        _ => self.cannot(e, *at, text, "a DNS target expects one response code"),
                    }
                }
                Subject::Body(None) => match dns_answer(c, &record_type) {
                    Some(answer) => expect.answers.push(answer),
                    None => self.cannot(
                        e,
                        *at,
                        text,
                        "answers are matched by == (a value, pat() or any()) on A, AAAA, CNAME, MX, NS, PTR and TXT records",
                    ),
                },
                Subject::ResponseTime => timing.push(cond.clone()),
                _ => self.cannot(e, *at, text, "a DNS target has no condition on this"),
            }
        }
        if !rcode_seen {
            expect.rcode = Some("NOERROR".to_owned());
        }
        if expect.answers.is_empty() && expect.rcode.as_deref() == Some("NOERROR") {
            // Gatus asks for nothing about the answers unless [BODY] says so.
            expect.min_answers = Some(0);
        }
        let degraded_if = self.latency_degrades(e, &timing, "a DNS target");
        Some(Probe::Dns(Dns {
            server: server.to_owned(),
            name,
            record_type,
            expect,
            degraded_if,
        }))
    }
}

/// A condition with where it is and how it was written.
type Cond = (Condition, Pos, String);

/// The response codes a DNS condition may name.
const RCODES: [&str; 11] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
    "NXRRSET", "NOTAUTH", "NOTZONE",
];

/// The `in-addr.arpa` or `ip6.arpa` name of an address, as Gatus asks a PTR of an IP.
fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut labels: Vec<String> = v6
                .octets()
                .iter()
                .flat_map(|byte| [byte >> 4, byte & 0xf])
                .map(|nibble| format!("{nibble:x}"))
                .collect();
            labels.reverse();
            format!("{}.ip6.arpa", labels.join("."))
        }
    }
}

/// A DNS `[BODY]` condition as one `answers` entry: exact where the answer's text is the same
/// here and in Gatus, a regex where it differs (an MX answer is `PREF HOST` here).
fn dns_answer(c: &Condition, record_type: &str) -> Option<String> {
    if c.op != Op::Eq {
        return None;
    }
    let regex = match &c.value {
        Value::Literal(v) if record_type != "MX" => return Some(v.clone()),
        Value::Literal(v) => regex::escape(v),
        Value::Pattern(glob) => glob_regex(glob),
        Value::Any(options) => alternatives(options),
    };
    match record_type {
        "A" | "AAAA" | "CNAME" | "NS" | "PTR" | "TXT" => Some(format!("re:^{regex}$")),
        "MX" => Some(format!("re:^[0-9]+ {regex}$")),
        _ => None,
    }
}

/// How a whole-body condition matches.
enum Body {
    /// The body holds this text (`pat(*text*)`).
    Contains(String),
    /// The body matches this regex.
    Regex(String),
}

impl Body {
    fn regex(self) -> String {
        match self {
            Self::Contains(needle) => regex::escape(&needle),
            Self::Regex(regex) => regex,
        }
    }
}

/// A whole-body condition (`[BODY] == x`, `has([BODY]) == b`) as a match on the body, which
/// Gatus trims first. `None` for what a match cannot say (`!=`, comparisons).
fn body_regex(c: &Condition) -> Option<Body> {
    let anchored = |inner: String| Body::Regex(format!(r"(?s)^\s*{inner}\s*$"));
    if c.subject == Subject::Has(None) {
        // Gatus's has([BODY]): the trimmed body is not empty.
        return match (c.op, &c.value) {
            (Op::Eq | Op::Ne, Value::Literal(v)) if v == "true" || v == "false" => {
                let nonempty = (v == "true") == (c.op == Op::Eq);
                Some(Body::Regex(
                    if nonempty { r"\S" } else { r"^\s*$" }.to_owned(),
                ))
            }
            _ => None,
        };
    }
    match (c.op, &c.value) {
        (Op::Eq, Value::Literal(v)) => Some(anchored(regex::escape(v))),
        (Op::Eq, Value::Pattern(glob)) => {
            match glob.strip_prefix('*').and_then(|g| g.strip_suffix('*')) {
                Some(inner) if !inner.is_empty() && !inner.contains(['*', '?', '[', '\\']) => {
                    Some(Body::Contains(inner.to_owned()))
                }
                _ => Some(anchored(glob_regex(glob))),
            }
        }
        (Op::Eq, Value::Any(options)) => Some(anchored(alternatives(options))),
        _ => None,
    }
}

/// `(?:a|b)`: any of Gatus's `any()` options, each literal.
fn alternatives(options: &[String]) -> String {
    let escaped: Vec<String> = options.iter().map(|o| regex::escape(o)).collect();
    format!("(?:{})", escaped.join("|"))
}

/// A Gatus pattern (Go's `filepath.Match`: `*`, `?`, `[...]` with `^` or `!`, `\` escapes) as
/// the body of an anchored regex.
fn glob_regex(glob: &str) -> String {
    let mut out = String::new();
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push_str(&regex::escape(&next.to_string()));
                }
            }
            '[' => {
                let mut class = String::from("[");
                if matches!(chars.peek(), Some('^' | '!')) {
                    chars.next();
                    class.push('^');
                }
                let mut closed = false;
                while let Some(c) = chars.next() {
                    match c {
                        ']' => {
                            closed = true;
                            break;
                        }
                        '\\' => {
                            if let Some(next) = chars.next() {
                                class.push_str(&regex::escape(&next.to_string()));
                            }
                        }
                        '-' => class.push('-'),
                        c => class.push_str(&regex::escape(&c.to_string())),
                    }
                }
                if closed {
                    class.push(']');
                    out.push_str(&class);
                } else {
                    // Go refuses a malformed pattern, which then never matches.
                    return "[^\\s\\S]".to_owned();
                }
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
    }
    out
}

/// A JSON condition (`[BODY].path`, `len()`, `has()`) as a path and its test.
fn json_condition(c: &Condition) -> Result<(String, JsonTests), &'static str> {
    let mut tests = JsonTests::default();
    let path = match &c.subject {
        Subject::Body(path) | Subject::Len(path) | Subject::Has(path) => {
            json_path(path.as_deref().unwrap_or(""))?
        }
        _ => return Err("not a JSON condition"),
    };
    match (&c.subject, c.op, &c.value) {
        (Subject::Has(_), Op::Eq | Op::Ne, Value::Literal(v)) if v == "true" || v == "false" => {
            tests.exists = Some((v == "true") == (c.op == Op::Eq));
        }
        (Subject::Has(_), _, _) => return Err("has() is compared with true or false"),
        (Subject::Len(_), op, value) => {
            let n = gatus_number(value).ok_or("len() is compared with a number")?;
            tests.len.insert(op.key(), n);
        }
        (Subject::Body(_), op @ (Op::Eq | Op::Ne), Value::Literal(v)) => {
            let scalar = scalar(v);
            if op == Op::Eq {
                tests.eq = Some(scalar);
            } else {
                tests.ne = Some(scalar);
            }
        }
        (Subject::Body(_), op @ (Op::Eq | Op::Ne), Value::Pattern(glob)) => {
            let regex = format!("(?s)^{}$", glob_regex(glob));
            if op == Op::Eq {
                tests.matches = Some(regex);
            } else {
                tests.not_matches = Some(regex);
            }
        }
        (Subject::Body(_), op @ (Op::Eq | Op::Ne), Value::Any(options)) => {
            let list = options.iter().map(|o| scalar(o)).collect();
            if op == Op::Eq {
                tests.any = Some(list);
            } else {
                tests.none = Some(list);
            }
        }
        (Subject::Body(_), op, Value::Literal(v)) => {
            let serde_json::Value::Number(n) = scalar(v) else {
                return Err("a comparison needs a number");
            };
            let slot = match op {
                Op::Lt => &mut tests.lt,
                Op::Le => &mut tests.le,
                Op::Gt => &mut tests.gt,
                _ => &mut tests.ge,
            };
            *slot = Some(n);
        }
        _ => return Err("pat() and any() work with == and != only"),
    }
    Ok((path, tests))
}

/// Adds `test` to the conditions on `path`, in the order paths first appear.
fn merge_json(json: &mut Vec<(String, JsonTests)>, path: String, test: JsonTests) {
    let Some((_, tests)) = json.iter_mut().find(|(p, _)| *p == path) else {
        json.push((path, test));
        return;
    };
    macro_rules! take {
        ($($field:ident),*) => { $( if test.$field.is_some() { tests.$field = test.$field; } )* };
    }
    take!(
        eq,
        ne,
        any,
        none,
        matches,
        not_matches,
        lt,
        le,
        gt,
        ge,
        exists
    );
    tests.len.extend(test.len);
}

impl From<JsonTests> for JsonCondition {
    /// The short form (`"$.status": UP`) when the tests are one equality.
    fn from(tests: JsonTests) -> Self {
        match tests {
            JsonTests {
                eq: Some(value),
                ne: None,
                any: None,
                none: None,
                matches: None,
                not_matches: None,
                lt: None,
                le: None,
                gt: None,
                ge: None,
                ref len,
                exists: None,
            } if len.is_empty() => Self::Is(value),
            tests => Self::Tests(Box::new(tests)),
        }
    }
}

/// A Gatus literal as the JSON scalar it most likely stands for: a number, a boolean, else a
/// string.
fn scalar(text: &str) -> serde_json::Value {
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return n.into();
    }
    if let Some(n) = text
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
    {
        return serde_json::Value::Number(n);
    }
    match text {
        "true" => true.into(),
        "false" => false.into(),
        _ => text.into(),
    }
}

/// A Gatus JSON path (`.data[0].id`, `[0].name`) as ours (`$.data[0].id`).
fn json_path(gatus: &str) -> Result<String, &'static str> {
    let mut out = String::from("$");
    let path = gatus.strip_prefix('.').unwrap_or(gatus);
    if path.is_empty() {
        return Ok(out);
    }
    for key in path.split('.') {
        let (name, indices) = key.split_once('[').map_or((key, ""), |(n, rest)| (n, rest));
        if !name.is_empty() {
            if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                out.push('.');
                out.push_str(name);
            } else {
                out.push('[');
                out.push_str(&serde_json::Value::from(name).to_string());
                out.push(']');
            }
        } else if key.is_empty() {
            return Err("the JSON path has an empty key");
        }
        if !indices.is_empty() {
            for index in format!("[{indices}").split_inclusive(']') {
                let digits = index
                    .strip_prefix('[')
                    .and_then(|i| i.strip_suffix(']'))
                    .filter(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()))
                    .ok_or("a JSON path index is a number in brackets")?;
                out.push('[');
                out.push_str(digits);
                out.push(']');
            }
        }
    }
    Ok(out)
}

/// The codes of `accepted` (100 to 599) as the fewest patterns: classes, ranges, codes; empty
/// when none is accepted.
fn status_patterns(accepted: &[bool; 500]) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = 0;
    while code < accepted.len() {
        if !accepted[code] {
            code += 1;
            continue;
        }
        let start = code;
        while code < accepted.len() && accepted[code] {
            code += 1;
        }
        // [start, code) is a run; whole classes inside it are written as classes.
        let mut at = start;
        while at < code {
            let class_end = (at / 100 + 1) * 100;
            if at % 100 == 0 && class_end <= code {
                out.push(format!("{}xx", at / 100 + 1));
                at = class_end;
                continue;
            }
            let end = code.min(class_end);
            let (low, high) = (at + 100, end + 99);
            out.push(if low == high {
                low.to_string()
            } else {
                format!("{low}-{high}")
            });
            at = end;
        }
    }
    out
}

/// The endpoint ids handed out so far.
#[derive(Default)]
struct Ids(HashMap<String, u32>);

impl Ids {
    /// `wanted`, or `wanted-2`, `wanted-3`, ... when taken.
    fn claim(&mut self, wanted: &str) -> String {
        let mut n = 1;
        loop {
            let id = if n == 1 {
                wanted.to_owned()
            } else {
                format!("{wanted}-{n}")
            };
            if !self.0.contains_key(&id) {
                self.0.insert(id.clone(), 1);
                return id;
            }
            n += 1;
        }
    }
}

/// A name as an id: lowercase ASCII letters, digits, `.`, `_`, `-`; anything else a `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '_') {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "endpoint".to_owned()
    } else {
        out
    }
}

// ---- Conditions -----------------------------------------------------------------------------

/// A comparison operator of a Gatus condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// The operator with its operands swapped: `a < b` is `b > a`.
    fn flipped(self) -> Self {
        match self {
            Self::Lt => Self::Gt,
            Self::Le => Self::Ge,
            Self::Gt => Self::Lt,
            Self::Ge => Self::Le,
            other => other,
        }
    }

    /// Its key in a `len` test.
    fn key(self) -> &'static str {
        match self {
            Self::Eq => "eq",
            Self::Ne => "ne",
            Self::Lt => "lt",
            Self::Le => "le",
            Self::Gt => "gt",
            Self::Ge => "ge",
        }
    }
}

/// What of a check's result a condition looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Subject {
    Status,
    ResponseTime,
    Ip,
    Connected,
    CertificateExpiration,
    DomainExpiration,
    DnsRcode,
    /// `[BODY]` (`None`) or `[BODY]` followed by a path (`.data[0].id`).
    Body(Option<String>),
    Context(String),
    /// `len([BODY]...)`.
    Len(Option<String>),
    /// `has([BODY]...)`.
    Has(Option<String>),
}

/// What a subject is compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Literal(String),
    /// `pat(...)`.
    Pattern(String),
    /// `any(a, b)`, each option trimmed.
    Any(Vec<String>),
}

/// A parsed condition, its subject on the left.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Condition {
    subject: Subject,
    op: Op,
    value: Value,
}

/// One side of a condition as written.
enum Side {
    Subject(Subject),
    Value(Value),
}

const PLACEHOLDERS: [&str; 9] = [
    "[STATUS]",
    "[RESPONSE_TIME]",
    "[IP]",
    "[CONNECTED]",
    "[CERTIFICATE_EXPIRATION]",
    "[DOMAIN_EXPIRATION]",
    "[DNS_RCODE]",
    "[BODY]",
    "[CONTEXT]",
];

/// Parses a condition as Gatus does: the first operator found, in the order `==`, `!=`, `<=`,
/// `>=`, `>`, `<` (each with a space either side), splits it.
fn parse_condition(text: &str) -> Result<Condition, String> {
    let (op, symbol) = [
        (Op::Eq, " == "),
        (Op::Ne, " != "),
        (Op::Le, " <= "),
        (Op::Ge, " >= "),
        (Op::Gt, " > "),
        (Op::Lt, " < "),
    ]
    .into_iter()
    .find(|(_, symbol)| text.contains(symbol))
    .ok_or("no operator: expected ==, !=, <, <=, > or >= with a space either side")?;
    let (left, right) = text.split_once(symbol).ok_or("no operator")?;
    let right = right.split(symbol).next().unwrap_or(right);
    let (left, right) = (side(left.trim())?, side(right.trim())?);
    let (subject, op, value) = match (left, right) {
        (Side::Subject(s), Side::Value(v)) => (s, op, v),
        (Side::Value(v), Side::Subject(s)) => (s, op.flipped(), v),
        (Side::Subject(_), Side::Subject(_)) => {
            return Err("it compares two values of the result with each other".to_owned());
        }
        (Side::Value(_), Side::Value(_)) => {
            return Err("neither side is a placeholder such as [STATUS] or [BODY]".to_owned());
        }
    };
    if matches!(value, Value::Pattern(_) | Value::Any(_)) && !matches!(op, Op::Eq | Op::Ne) {
        return Err("pat() and any() work with == and != only".to_owned());
    }
    Ok(Condition { subject, op, value })
}

fn side(text: &str) -> Result<Side, String> {
    let call = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(')'))
    };
    if let Some(inner) = call("len(").or_else(|| call("has(")) {
        let has = text.starts_with("has(");
        return match placeholder(inner.trim())? {
            Some(Subject::Body(path)) if has => Ok(Side::Subject(Subject::Has(path))),
            Some(Subject::Body(path)) => Ok(Side::Subject(Subject::Len(path))),
            _ => Err(format!(
                "{}() works with [BODY] only",
                if has { "has" } else { "len" }
            )),
        };
    }
    if let Some(inner) = call("pat(") {
        return Ok(Side::Value(Value::Pattern(inner.to_owned())));
    }
    if let Some(inner) = call("any(") {
        return Ok(Side::Value(Value::Any(
            inner.split(',').map(|o| o.trim().to_owned()).collect(),
        )));
    }
    Ok(match placeholder(text)? {
        Some(subject) => Side::Subject(subject),
        None => Side::Value(Value::Literal(text.to_owned())),
    })
}

/// The placeholder `text` names, `None` for a literal. A bracketed word that is no placeholder
/// is an error: Gatus would compare it as text, which never holds.
fn placeholder(text: &str) -> Result<Option<Subject>, String> {
    let upper = text.to_ascii_uppercase();
    for (name, subject) in [
        ("[STATUS]", Subject::Status),
        ("[RESPONSE_TIME]", Subject::ResponseTime),
        ("[IP]", Subject::Ip),
        ("[CONNECTED]", Subject::Connected),
        ("[CERTIFICATE_EXPIRATION]", Subject::CertificateExpiration),
        ("[DOMAIN_EXPIRATION]", Subject::DomainExpiration),
        ("[DNS_RCODE]", Subject::DnsRcode),
        ("[BODY]", Subject::Body(None)),
    ] {
        if upper == name {
            return Ok(Some(subject));
        }
    }
    for (name, build) in [
        ("[BODY]", Subject::Body as fn(Option<String>) -> Subject),
        ("[CONTEXT]", |p: Option<String>| {
            Subject::Context(p.unwrap_or_default())
        }),
    ] {
        if upper.starts_with(name) {
            let rest = &text[name.len()..];
            if rest.starts_with('.') || rest.starts_with('[') {
                return Ok(Some(build(Some(rest.to_owned()))));
            }
        }
    }
    if let Some(word) = text
        .strip_prefix('[')
        .and_then(|t| t.split(']').next())
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphabetic() || c == '_'))
    {
        let word = format!("[{word}]");
        let hint = did_you_mean(&word, PLACEHOLDERS)
            .map_or_else(String::new, |best| format!(", did you mean {best}?"));
        return Err(format!("unknown placeholder {word}{hint}"));
    }
    Ok(None)
}

/// Whether Gatus's `==`/`!=`/ordering of `resolved` (a result's value, as text) with `value`
/// holds: equality with `pat()`, `any()` or as integers when both are, ordering as numbers.
fn gatus_holds(resolved: &str, op: Op, value: &Value) -> bool {
    let equal = || match value {
        Value::Pattern(glob) => regex::Regex::new(&format!("(?s)^{}$", glob_regex(glob)))
            .is_ok_and(|re| re.is_match(resolved)),
        Value::Any(options) => options.iter().any(|o| o == resolved),
        Value::Literal(literal) => match (go_int(resolved), go_int(literal)) {
            (Some(a), Some(b)) => a == b,
            _ => resolved == literal,
        },
    };
    match op {
        Op::Eq => equal(),
        Op::Ne => !equal(),
        ordering => {
            let (Value::Literal(literal), Some(a)) = (value, go_number(resolved)) else {
                return false;
            };
            let b = go_number(literal).unwrap_or(0);
            match ordering {
                Op::Lt => a < b,
                Op::Le => a <= b,
                Op::Gt => a > b,
                _ => a >= b,
            }
        }
    }
}

/// A literal as Gatus reads a number for an ordering: a duration in milliseconds, an integer,
/// or a float truncated.
fn go_number(text: &str) -> Option<i64> {
    if let Ok(d) = parse_go_duration(text)
        && !d.is_zero()
    {
        return i64::try_from(d.as_millis()).ok();
    }
    go_int(text).or_else(|| {
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f as i64)
    })
}

/// A non-negative whole number of a condition's literal (milliseconds, a length).
fn gatus_number(value: &Value) -> Option<u64> {
    match value {
        Value::Literal(v) => go_number(v.trim()).and_then(|n| u64::try_from(n).ok()),
        _ => None,
    }
}

/// A `[CERTIFICATE_EXPIRATION]` operand (`48h`, or milliseconds) in milliseconds.
fn gatus_duration_ms(text: &str) -> Option<u64> {
    go_number(text.trim()).and_then(|n| u64::try_from(n).ok())
}

/// Go's `strconv.ParseInt(s, 0, 64)`: decimal, `0x`, `0o`, `0b` or a leading-zero octal, with a
/// sign and `_` separators after a prefix.
fn go_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex.replace('_', ""))
    } else if let Some(oct) = lower.strip_prefix("0o") {
        (8, oct.replace('_', ""))
    } else if let Some(bin) = lower.strip_prefix("0b") {
        (2, bin.replace('_', ""))
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].replace('_', ""))
    } else {
        (10, lower.clone())
    };
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = i128::from_str_radix(&body, radix).ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// Go's `time.ParseDuration`: `300ms`, `1h30m`, `1.5s`; units ns, us, µs, ms, s, m, h.
fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return Err("expected a Go duration such as 30s, 1m30s or 500ms".to_owned());
    }
    let mut total = 0f64;
    let mut chars = rest.char_indices().peekable();
    while chars.peek().is_some() {
        let start = chars.peek().map_or(0, |(i, _)| *i);
        while chars
            .next_if(|(_, c)| c.is_ascii_digit() || *c == '.')
            .is_some()
        {}
        let unit_start = chars.peek().map_or(rest.len(), |(i, _)| *i);
        while chars.next_if(|(_, c)| c.is_alphabetic()).is_some() {}
        let end = chars.peek().map_or(rest.len(), |(i, _)| *i);
        let number: f64 = rest[start..unit_start]
            .parse()
            .map_err(|_| "expected a number before each unit".to_owned())?;
        let unit = match &rest[unit_start..end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".to_owned()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        total += number * unit;
    }
    Duration::try_from_secs_f64(total).map_err(|e| e.to_string())
}

/// A duration as the daemon's YAML writes it (humantime: `1m 30s`, `500ms`).
fn go_format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Condition {
        parse_condition(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn lit(v: &str) -> Value {
        Value::Literal(v.to_owned())
    }

    #[test]
    fn conditions_parse_as_gatus_splits_them() {
        let c = parsed("[STATUS] == 200");
        assert_eq!(
            (c.subject, c.op, c.value),
            (Subject::Status, Op::Eq, lit("200"))
        );
        let c = parsed("300 > [RESPONSE_TIME]");
        assert_eq!((c.subject, c.op), (Subject::ResponseTime, Op::Lt));
        let c = parsed("[body].data[0].id >= 1");
        assert_eq!(c.subject, Subject::Body(Some(".data[0].id".into())));
        assert_eq!(c.op, Op::Ge);
        let c = parsed("len([BODY].data) < 5");
        assert_eq!(c.subject, Subject::Len(Some(".data".into())));
        let c = parsed("has([BODY].errors) == false");
        assert_eq!(
            (c.subject, c.value),
            (Subject::Has(Some(".errors".into())), lit("false"))
        );
        let c = parsed("[BODY] == pat(*<h1>Example Domain</h1>*)");
        assert_eq!(c.value, Value::Pattern("*<h1>Example Domain</h1>*".into()));
        let c = parsed("[STATUS] == any(200, 429)");
        assert_eq!(c.value, Value::Any(vec!["200".into(), "429".into()]));
        let c = parsed("[CERTIFICATE_EXPIRATION] > 48h");
        assert_eq!(
            (c.subject, c.value),
            (Subject::CertificateExpiration, lit("48h"))
        );
        let c = parsed("[DNS_RCODE] != NXDOMAIN");
        assert_eq!((c.subject, c.op), (Subject::DnsRcode, Op::Ne));
        // "==" is looked for first, as Gatus does.
        assert_eq!(parsed("[BODY].op == a < b").value, lit("a < b"));
    }

    #[test]
    fn bad_conditions_are_refused_with_a_reason() {
        for (text, why) in [
            ("[STATUS]==200", "no operator"),
            (
                "[STATUSS] == 200",
                "unknown placeholder [STATUSS], did you mean [STATUS]?",
            ),
            ("[BODY].a == [BODY].b", "two values of the result"),
            ("1 == 1", "neither side"),
            ("len([STATUS]) == 3", "len() works with [BODY] only"),
            ("[STATUS] < any(200, 300)", "with == and != only"),
        ] {
            let e = parse_condition(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn status_conditions_become_the_set_gatus_accepts() {
        let set = |conditions: &[&str]| {
            let mut accepted = [true; 500];
            for text in conditions {
                let c = parsed(text);
                for (code, a) in (100u16..).zip(accepted.iter_mut()) {
                    *a &= gatus_holds(&code.to_string(), c.op, &c.value);
                }
            }
            status_patterns(&accepted)
        };
        assert_eq!(set(&[]), ["1xx", "2xx", "3xx", "4xx", "5xx"]);
        assert_eq!(set(&["[STATUS] == 200"]), ["200"]);
        assert_eq!(set(&["[STATUS] < 300"]), ["1xx", "2xx"]);
        assert_eq!(set(&["[STATUS] <= 299", "[STATUS] >= 200"]), ["2xx"]);
        assert_eq!(set(&["[STATUS] > 400"]), ["401-499", "5xx"]);
        assert_eq!(set(&["[STATUS] == any(200, 429)"]), ["200", "429"]);
        assert_eq!(
            set(&["[STATUS] != 200", "[STATUS] < 300"]),
            ["1xx", "201-299"]
        );
        assert_eq!(set(&["[STATUS] == pat(2*)"]), ["2xx"]);
        assert_eq!(set(&["[STATUS] == 0x1F4"]), ["500"]);
        assert!(set(&["[STATUS] == 200", "[STATUS] == 201"]).is_empty());
    }

    #[test]
    fn json_conditions_become_tests() {
        let json = |text: &str| {
            let (path, tests) = json_condition(&parsed(text)).unwrap();
            (
                path,
                serde_json::to_value(JsonCondition::from(tests)).unwrap(),
            )
        };
        assert_eq!(
            json("[BODY].data.status == UP"),
            ("$.data.status".into(), serde_json::json!("UP"))
        );
        assert_eq!(
            json("[BODY].data[0].id == 1"),
            ("$.data[0].id".into(), serde_json::json!(1))
        );
        assert_eq!(
            json("[BODY].mode != readonly"),
            ("$.mode".into(), serde_json::json!({"ne": "readonly"}))
        );
        assert_eq!(
            json("[BODY].count > 5"),
            ("$.count".into(), serde_json::json!({"gt": 5}))
        );
        assert_eq!(
            json("len([BODY].data) < 5"),
            ("$.data".into(), serde_json::json!({"len": {"lt": 5}}))
        );
        assert_eq!(
            json("has([BODY].errors) == false"),
            ("$.errors".into(), serde_json::json!({"exists": false}))
        );
        assert_eq!(
            json("[BODY].name == pat(john*)"),
            (
                "$.name".into(),
                serde_json::json!({"matches": "(?s)^john.*$"})
            )
        );
        assert_eq!(
            json("[BODY].id == any(1, 2)"),
            ("$.id".into(), serde_json::json!({"any": [1, 2]}))
        );
        assert_eq!(
            json("[BODY][0].ok == true"),
            ("$[0].ok".into(), serde_json::json!(true))
        );
        assert_eq!(
            json("[BODY].a.b-c.d_e.f%g == x"),
            ("$.a.b-c.d_e[\"f%g\"]".into(), serde_json::json!("x"))
        );
        assert!(json_condition(&parsed("[BODY].id > abc")).is_err());
        assert!(json_condition(&parsed("has([BODY].x) == maybe")).is_err());
    }

    #[test]
    fn patterns_translate_to_anchored_regexes() {
        let matches = |glob: &str, text: &str| {
            regex::Regex::new(&format!("^{}$", glob_regex(glob)))
                .unwrap()
                .is_match(text)
        };
        assert!(matches("john*", "john.doe"));
        assert!(!matches("john*", "bob"));
        assert!(matches("192.168.*", "192.168.0.1"));
        assert!(!matches("192.168.*", "192x168.0.1"));
        assert!(matches("a?c", "abc"));
        assert!(matches("[a-c]x", "bx") && !matches("[!a-c]x", "bx"));
        assert!(matches(r"\*", "*") && !matches(r"\*", "a"));
        assert!(!matches("[abc", "[abc"));
    }

    #[test]
    fn go_numbers_and_durations_read_as_in_gatus() {
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("-1s").is_err());
        assert_eq!(go_number("48h"), Some(172_800_000));
        assert_eq!(go_number("300"), Some(300));
        assert_eq!(go_number("5.9"), Some(5));
        assert_eq!(go_int("0x10"), Some(16));
        assert_eq!(go_int("010"), Some(8));
        assert_eq!(go_int("abc"), None);
    }

    #[test]
    fn ids_are_valid_and_unique_in_order() {
        let mut ids = Ids::default();
        assert_eq!(ids.claim(&slug("Front End")), "front-end");
        assert_eq!(ids.claim(&slug("front end!")), "front-end-2");
        assert_eq!(
            ids.claim(&format!("{}.{}", slug("Core"), slug("API / v2"))),
            "core.api-v2"
        );
        assert_eq!(slug("¿?"), "endpoint");
        assert_eq!(
            reverse_name("10.0.0.1".parse().unwrap()),
            "1.0.0.10.in-addr.arpa"
        );
    }
}
