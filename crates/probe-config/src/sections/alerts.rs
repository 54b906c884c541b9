//! The top-level `alerts` section (where notifications go, and the rule targets get by default)
//! and a target's or group's `alert` key.
//!
//! ```yaml
//! alerts:                                   # optional, in one file at most
//!   alertmanager:
//!     urls: ["http://127.0.0.1:9093"]       # all are sent to, as Prometheus does
//!     basic_auth: { username: pe, password: "${AM_PASSWORD}" }   # optional
//!     resend: 1m                            # firing alerts sent again (default 1m)
//!     tls: { ca_file: ca.pem }              # optional, for https:// URLs
//!   webhooks:
//!     - name: ops
//!       url: http://127.0.0.1:8099/hook
//!       headers: { Authorization: "Bearer ${HOOK_TOKEN}" }       # values are secrets
//!       timeout: 5s                         # default 5s
//!   defaults: { on: [DOWN], for: 0s, severity: page, labels: { team: core } }
//!   outbox_limit: 50000                     # notifications kept for the receivers (default)
//! targets:
//!   - id: orders-db
//!     tcp: { address: 127.0.0.1:5432 }
//!     alert: { on: [DOWN, DEGRADED], for: 30s, annotations: { runbook: "https://..." } }
//!     # or alert: false
//!   - id: checkout
//!     kind: group
//!     depends_on: [{ target: orders-db, critical: true }]
//!     state: { degraded_from: 0.5 }         # its verdict: DOWN under 0.5
//!     alert: { on: [DOWN, DEGRADED] }       # a group alerts on its verdict, as a target does
//! ```
//!
//! A target's `alert` keys win over `defaults`, key by key (`labels` and `annotations` merge,
//! the target's winning a name both set). Passwords and header values are expanded from the
//! environment at load and never shown: not in errors, logs or `Debug`.

use std::collections::BTreeMap;
use std::time::Duration;

use probe::health::HealthState;
use probe::tier::http::expand_env;
use probe::tier::http::{HttpUrl, RequestHeaders};
use probe::tier::tls::TlsTrust;
use serde::Deserialize;

use super::http::{headers, trust};
use super::schedule::{Slot, duration};
use crate::yaml::diagnostics::quote;
use crate::yaml::files::Source;
use crate::yaml::node::{BoolOr, Diags, Entries, Node, Sp, collect};
use crate::yaml::words::one_of;

/// The states an alert may be raised on, by their API names. PROBING is no verdict (a target
/// held there for flapping raises `ProbeFlapping`), and MAINTENANCE is by definition silent.
const STATES: [&str; 2] = ["DOWN", "DEGRADED"];

/// Receivers a notification can be owed to: Alertmanager and the webhooks, one bit each.
pub const MAX_WEBHOOKS: usize = 63;

#[derive(Deserialize)]
#[serde(rename = "alerts", deny_unknown_fields)]
struct RawAlerts {
    alertmanager: Option<Sp<RawAlertmanager>>,
    webhooks: Option<Vec<Sp<RawWebhook>>>,
    defaults: Option<Sp<RawRule>>,
    outbox_limit: Option<Sp<u32>>,
}

#[derive(Deserialize)]
#[serde(rename = "alertmanager", deny_unknown_fields)]
struct RawAlertmanager {
    urls: Sp<Vec<Sp<String>>>,
    basic_auth: Option<Sp<RawBasicAuth>>,
    resend: Option<Sp<String>>,
    tls: Option<Sp<RawTls>>,
}

#[derive(Deserialize)]
#[serde(rename = "tls", deny_unknown_fields)]
struct RawTls {
    ca_file: Option<Sp<String>>,
    insecure_skip_verify: Option<Sp<bool>>,
}

#[derive(Deserialize)]
#[serde(rename = "basic_auth", deny_unknown_fields)]
struct RawBasicAuth {
    username: Sp<String>,
    password: Sp<String>,
}

#[derive(Deserialize)]
#[serde(rename = "webhook", deny_unknown_fields)]
struct RawWebhook {
    name: Sp<String>,
    url: Sp<String>,
    headers: Option<Sp<Entries<String>>>,
    timeout: Option<Sp<String>>,
}

/// An `alert` block: of `defaults`, of a target or of a group.
#[derive(Deserialize)]
#[serde(rename = "alert", deny_unknown_fields)]
pub(crate) struct RawRule {
    on: Option<Sp<Vec<Sp<String>>>>,
    #[serde(rename = "for")]
    hold: Option<Sp<String>>,
    severity: Option<Sp<String>>,
    labels: Option<Sp<Entries<String>>>,
    annotations: Option<Sp<Entries<String>>>,
}

/// What the `alerts` section says.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertsConfig {
    /// Where alerts go through Alertmanager, if anywhere.
    pub alertmanager: Option<AlertmanagerConfig>,
    /// Plain webhooks.
    pub webhooks: Vec<WebhookConfig>,
    /// The rule of every target that sets no `alert` of its own.
    pub defaults: AlertRule,
    /// How many notifications wait for the receivers at most; past it the oldest resolved
    /// ones go first.
    pub outbox_limit: usize,
}

impl AlertsConfig {
    /// Every receiver's name, Alertmanager's (`alertmanager`) first: the names metrics and the
    /// outbox know them by.
    pub fn receivers(&self) -> Vec<String> {
        self.alertmanager
            .iter()
            .map(|_| ALERTMANAGER.to_owned())
            .chain(self.webhooks.iter().map(|w| w.name.clone()))
            .collect()
    }
}

/// Alertmanager's name among the receivers; a webhook may not take it.
pub const ALERTMANAGER: &str = "alertmanager";

/// Alertmanager's v2 API, at every URL.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertmanagerConfig {
    /// Every Alertmanager of a cluster of them: each is sent every alert.
    pub urls: Vec<HttpUrl>,
    /// Basic authentication, when they are behind it.
    pub basic_auth: Option<BasicAuth>,
    /// How often firing alerts are sent again (less than Alertmanager's `resolve_timeout`).
    pub resend: Duration,
    /// Which certificates `https://` URLs are trusted with: the system's, by default.
    pub trust: TlsTrust,
}

/// A user name and its password; the password never shows.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The user name.
    pub username: String,
    /// The password, expanded from the environment.
    pub password: String,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A webhook receiver.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookConfig {
    /// Its name, in metrics and logs.
    pub name: String,
    /// Where notifications are posted.
    pub url: HttpUrl,
    /// Headers sent with each (their values are secrets: `Debug` hides them).
    pub headers: RequestHeaders,
    /// How long a delivery may take.
    pub timeout: Duration,
}

/// When a target alerts, and what its alerts carry.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertRule {
    /// The states it alerts in.
    pub on: Vec<HealthState>,
    /// How long it must have been in one of them first.
    pub hold: Duration,
    /// The `severity` label.
    pub severity: String,
    /// Labels added to its alerts.
    pub labels: BTreeMap<String, String>,
    /// Annotations added to its alerts.
    pub annotations: BTreeMap<String, String>,
}

impl Default for AlertRule {
    /// DOWN at once, severity `page`.
    fn default() -> Self {
        Self {
            on: vec![HealthState::Down],
            hold: Duration::ZERO,
            severity: "page".to_owned(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}

/// A rule as one block gives it: only the keys it sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartialRule {
    on: Option<Vec<HealthState>>,
    hold: Option<Duration>,
    severity: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl PartialRule {
    /// The rule with `base` filled in where this block is silent.
    pub fn over(&self, base: &AlertRule) -> AlertRule {
        let mut labels = base.labels.clone();
        labels.extend(self.labels.clone());
        let mut annotations = base.annotations.clone();
        annotations.extend(self.annotations.clone());
        AlertRule {
            on: self.on.clone().unwrap_or_else(|| base.on.clone()),
            hold: self.hold.unwrap_or(base.hold),
            severity: self
                .severity
                .clone()
                .unwrap_or_else(|| base.severity.clone()),
            labels,
            annotations,
        }
    }
}

/// A target's or group's `alert` key: off, or its own keys over the defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TargetAlert {
    /// No `alert` key: the defaults.
    #[default]
    Defaults,
    /// `alert: false`.
    Off,
    /// `alert: {...}`.
    Rule(PartialRule),
}

impl TargetAlert {
    /// The rule it gives with `defaults`; `None` for `alert: false`.
    pub fn over(&self, defaults: &AlertRule) -> Option<AlertRule> {
        match self {
            Self::Defaults => Some(defaults.clone()),
            Self::Off => None,
            Self::Rule(rule) => Some(rule.over(defaults)),
        }
    }
}

/// The `alerts` section; `None` when invalid (every problem reported).
pub(crate) fn parse(
    node: &Node,
    src: &str,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<AlertsConfig> {
    let (raw, structural) = collect::<RawAlerts>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    let before = diags.len();
    let alertmanager = raw
        .alertmanager
        .and_then(|am| alertmanager(am.value, source, diags));
    let mut webhooks = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for hook in raw.webhooks.into_iter().flatten() {
        let name = hook.value.name.value.trim().to_owned();
        if names.contains(&name) {
            diags.push((
                hook.value.name.pos,
                format!("webhook name {} is used twice", quote(&name)),
            ));
        }
        if name == ALERTMANAGER {
            diags.push((
                hook.value.name.pos,
                format!(
                    "{} names Alertmanager among the receivers; give the webhook another name",
                    quote(&name)
                ),
            ));
        }
        if names.len() == MAX_WEBHOOKS {
            diags.push((
                hook.key,
                format!("at most {MAX_WEBHOOKS} webhooks; route through Alertmanager for more"),
            ));
        }
        names.push(name);
        if let Some(hook) = webhook(hook.value, source, diags) {
            webhooks.push(hook);
        }
    }
    let defaults = raw
        .defaults
        .and_then(|d| rule(&d.value, diags))
        .map_or_else(AlertRule::default, |d| d.over(&AlertRule::default()));
    let outbox_limit = match raw.outbox_limit {
        Some(limit) if limit.value == 0 => {
            diags.push((limit.pos, "outbox_limit must be at least 1".to_owned()));
            DEFAULT_OUTBOX_LIMIT
        }
        Some(limit) => limit.value as usize,
        None => DEFAULT_OUTBOX_LIMIT,
    };
    (diags.len() == before).then_some(AlertsConfig {
        alertmanager,
        webhooks,
        defaults,
        outbox_limit,
    })
}

fn url(raw: &Sp<String>, diags: &mut Diags) -> Option<HttpUrl> {
    raw.value
        .trim()
        .parse::<HttpUrl>()
        .map_err(|e| diags.push((raw.pos, e.to_string())))
        .ok()
}

fn alertmanager(
    raw: RawAlertmanager,
    source: &Source<'_>,
    diags: &mut Diags,
) -> Option<AlertmanagerConfig> {
    let before = diags.len();
    if raw.urls.value.is_empty() {
        diags.push((raw.urls.pos, "urls lists no Alertmanager".to_owned()));
    }
    let urls: Vec<HttpUrl> = raw
        .urls
        .value
        .iter()
        .filter_map(|u| url(u, diags))
        .collect();
    let basic_auth = raw.basic_auth.and_then(|auth| {
        let password = expand_env(&auth.value.password.value, source.env)
            // The message names the variable, never the value.
            .map_err(|e| diags.push((auth.value.password.pos, format!("in password: {e}"))))
            .ok()?;
        Some(BasicAuth {
            username: auth.value.username.value.clone(),
            password,
        })
    });
    let resend = match duration(raw.resend.as_ref(), "resend", true, diags) {
        Slot::Set { value, .. } => value,
        Slot::Absent | Slot::Invalid => DEFAULT_RESEND,
    };
    let trust = match raw.tls {
        Some(tls) => trust(
            tls.value.ca_file,
            tls.value.insecure_skip_verify,
            source.dir,
            diags,
        )
        .unwrap_or_default(),
        None => TlsTrust::System,
    };
    (diags.len() == before).then_some(AlertmanagerConfig {
        urls,
        basic_auth,
        resend,
        trust,
    })
}

fn webhook(raw: RawWebhook, source: &Source<'_>, diags: &mut Diags) -> Option<WebhookConfig> {
    let before = diags.len();
    let name = raw.name.value.trim().to_owned();
    if name.is_empty() {
        diags.push((raw.name.pos, "a webhook needs a name".to_owned()));
    }
    let url = url(&raw.url, diags);
    let headers = raw.headers.map_or(Ok(RequestHeaders::new()), |h| {
        headers(h.value, source, diags)
    });
    let timeout = match duration(raw.timeout.as_ref(), "timeout", true, diags) {
        Slot::Set { value, .. } => value,
        Slot::Absent | Slot::Invalid => DEFAULT_WEBHOOK_TIMEOUT,
    };
    (diags.len() == before).then_some(WebhookConfig {
        name,
        url: url?,
        headers: headers.ok()?,
        timeout,
    })
}

/// An `alert` block's keys; `None` when one is invalid (reported).
pub(crate) fn rule(raw: &RawRule, diags: &mut Diags) -> Option<PartialRule> {
    let before = diags.len();
    let on = raw.on.as_ref().map(|on| {
        if on.value.is_empty() {
            diags.push((on.pos, "on lists no state".to_owned()));
        }
        on.value
            .iter()
            .filter_map(|state| {
                let name = one_of(state, "state", "on", STATES, diags).ok()?;
                [
                    HealthState::Down,
                    HealthState::Degraded,
                    HealthState::Probing,
                    HealthState::Maintenance,
                ]
                .into_iter()
                .find(|s| s.as_str() == name)
            })
            .collect::<Vec<_>>()
    });
    let hold = match duration(raw.hold.as_ref(), "for", false, diags) {
        Slot::Set { value, .. } => Some(value),
        Slot::Absent | Slot::Invalid => None,
    };
    let severity = raw.severity.as_ref().and_then(|s| {
        let text = s.value.trim();
        if text.is_empty() {
            diags.push((s.pos, "severity must not be empty".to_owned()));
            return None;
        }
        Some(text.to_owned())
    });
    let entries = |raw: &Option<Sp<Entries<String>>>, what: &str, diags: &mut Diags| {
        let mut out = BTreeMap::new();
        for (name, value) in raw.iter().flat_map(|e| &e.value.0) {
            if !label_name(name) {
                diags.push((
                    value.key,
                    format!(
                        "{what} name {} must match [a-zA-Z_][a-zA-Z0-9_]*",
                        quote(name)
                    ),
                ));
            }
            out.insert(name.clone(), value.value.clone());
        }
        out
    };
    let labels = entries(&raw.labels, "label", diags);
    let annotations = entries(&raw.annotations, "annotation", diags);
    (diags.len() == before).then_some(PartialRule {
        on,
        hold,
        severity,
        labels,
        annotations,
    })
}

/// A target's or group's `alert` key.
pub(crate) fn target_alert(raw: Option<&Sp<BoolOr<RawRule>>>, diags: &mut Diags) -> TargetAlert {
    match raw.map(|r| &r.value) {
        None | Some(BoolOr::Bool(true)) => TargetAlert::Defaults,
        Some(BoolOr::Bool(false)) => TargetAlert::Off,
        Some(BoolOr::Value(rule_)) => {
            rule(rule_, diags).map_or(TargetAlert::Defaults, TargetAlert::Rule)
        }
    }
}

/// Whether `name` is a Prometheus label name (Alertmanager's rule for labels).
fn label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Prometheus's default: a resend every minute keeps a firing alert alive in Alertmanager
/// under its default `resolve_timeout` of 5 minutes, and tells a restarted one within a minute.
const DEFAULT_RESEND: Duration = Duration::from_secs(60);
/// A receiver slower than this is retried later, not waited for.
const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Enough for every target of a large fleet going DOWN at once and resolving before a receiver
/// is back (tens of megabytes at most).
const DEFAULT_OUTBOX_LIMIT: usize = 50_000;
