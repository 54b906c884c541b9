//! Delivery, one task per receiver, each from its own place in the outbox: Alertmanager is
//! posted what it has not had yet, in batches, and every alert firing again every `resend`; a
//! webhook is posted each notification in turn, retried until it answers 2xx. A failure is
//! retried with jittered backoff; nothing waits for a receiver but its own task.

use std::time::{Duration, SystemTime};

use probe::health::ExponentialBackoff;
use probe::tier::tls::{TlsTrust, client_config};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::outbox::{Outbox, Receiver};
use super::{Alert, rfc3339};
use probe_config::{ALERTMANAGER, AlertmanagerConfig, AlertsConfig, WebhookConfig};

/// The first retry after a failed delivery, doubled up to the last.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Retries after failed deliveries: the probes' backoff, jittered down by up to half, so that
/// receivers that failed together do not all come back at the same instant.
fn retries() -> ExponentialBackoff {
    ExponentialBackoff::try_new(RETRY_MIN, RETRY_MAX, 0.5)
        .unwrap_or_else(|e| unreachable!("200 ms to 30 s, half jittered, is a valid backoff: {e}"))
}

/// How long to wait before retry `attempt` (0-based).
fn retry_delay(attempt: u32) -> Duration {
    retries().delay(attempt, 1.0, &mut rand::rng())
}

/// Alerts per post to Alertmanager.
const BATCH: usize = 1000;

/// A receiver's client, and where and how it posts.
#[derive(Clone)]
pub(super) enum Target {
    Alertmanager(AlertmanagerConfig, reqwest::Client),
    Webhook(WebhookConfig, reqwest::Client),
}

impl Target {
    /// Every receiver of `config`, Alertmanager first (the outbox's order).
    pub fn all(config: &AlertsConfig) -> Vec<Self> {
        let system = client(&TlsTrust::System);
        config
            .alertmanager
            .iter()
            .map(|am| Self::Alertmanager(am.clone(), client(&am.trust)))
            .chain(
                config
                    .webhooks
                    .iter()
                    .map(|hook| Self::Webhook(hook.clone(), system.clone())),
            )
            .collect()
    }

    /// Its name among the receivers.
    pub fn name(&self) -> &str {
        match self {
            Self::Alertmanager(..) => ALERTMANAGER,
            Self::Webhook(hook, _) => &hook.name,
        }
    }

    /// Posts `alerts` (one, for a webhook); `Ok` once every URL took them, else why not, in
    /// words without the URL.
    pub async fn post(&self, alerts: &[Alert]) -> Result<(), String> {
        match self {
            Self::Alertmanager(config, client) => {
                let mut failed = None;
                for chunk in alerts.chunks(BATCH) {
                    let body: Vec<AmAlert<'_>> = chunk
                        .iter()
                        .map(|a| AmAlert::new(a, config.resend))
                        .collect();
                    for url in &config.urls {
                        let endpoint =
                            format!("{}/api/v2/alerts", url.to_string().trim_end_matches('/'));
                        let mut request = client
                            .post(&endpoint)
                            .json(&body)
                            .timeout(Duration::from_secs(10));
                        if let Some(auth) = &config.basic_auth {
                            request = request.basic_auth(&auth.username, Some(&auth.password));
                        }
                        if let Err(e) = send(request, ALERTMANAGER).await {
                            failed = Some(e);
                        }
                    }
                }
                failed.map_or(Ok(()), Err)
            }
            Self::Webhook(config, client) => {
                let mut result = Ok(());
                for alert in alerts {
                    let mut request = client
                        .post(config.url.to_string())
                        .json(alert)
                        .timeout(config.timeout);
                    for (name, value) in config.headers.expose() {
                        request = request.header(name, value);
                    }
                    result = result.and(send(request, &config.name).await);
                }
                result
            }
        }
    }
}

/// An alert as Alertmanager's v2 API takes it. A firing one ends after four `resend`s unless
/// sent again, as Prometheus does it: a sender that died does not leave it firing forever.
#[derive(Serialize)]
struct AmAlert<'a> {
    labels: &'a std::collections::BTreeMap<String, String>,
    annotations: &'a std::collections::BTreeMap<String, String>,
    #[serde(rename = "startsAt")]
    starts_at: &'a str,
    #[serde(rename = "endsAt")]
    ends_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: &'a str,
}

impl<'a> AmAlert<'a> {
    fn new(alert: &'a Alert, resend: Duration) -> Self {
        let ends_at = alert
            .ends_at
            .clone()
            .unwrap_or_else(|| rfc3339(SystemTime::now() + 4 * resend));
        Self {
            labels: &alert.labels,
            annotations: &alert.annotations,
            starts_at: &alert.starts_at,
            ends_at,
            generator_url: &alert.generator_url,
        }
    }
}

/// Starts a delivery task per receiver.
pub(super) fn start(targets: Vec<Target>, outbox: &Outbox, cancel: &CancellationToken) {
    for target in targets {
        let Some(place) = outbox.receiver(target.name()) else {
            continue;
        };
        match &target {
            Target::Alertmanager(config, _) => {
                let resend = config.resend;
                tokio::spawn(alertmanager(target, resend, place, cancel.clone()));
            }
            Target::Webhook(..) => {
                tokio::spawn(webhook(target, place, cancel.clone()));
            }
        }
    }
}

/// The client of one receiver: `trust` for its certificates, no redirects, no proxy.
fn client(trust: &TlsTrust) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("probe-engine/", env!("CARGO_PKG_VERSION")));
    match client_config(Some(trust)) {
        Ok(tls) => builder = builder.tls_backend_preconfigured(tls),
        Err(e) => {
            tracing::error!(error = %e, "alerts: TLS cannot be set up; https receivers will fail")
        }
    }
    builder.build().unwrap_or_else(|e| {
        tracing::error!(error = %e, "alerts: the HTTP client could not be built; none will be sent");
        reqwest::Client::new()
    })
}

/// Posts what Alertmanager has not had, and every firing alert again every `resend` (so a
/// restarted Alertmanager learns them again).
async fn alertmanager(
    target: Target,
    resend: Duration,
    place: Receiver,
    cancel: CancellationToken,
) {
    let mut failures = 0_u32;
    let mut next_resend = tokio::time::Instant::now() + resend;
    loop {
        if place.held() {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = place.woken() => continue,
            }
        }
        let (seqs, mut alerts) = place.batch(BATCH);
        let full = tokio::time::Instant::now() >= next_resend;
        if full {
            // Everything firing, with what is new: one pass that also carries the news.
            let news: std::collections::BTreeSet<String> =
                alerts.iter().map(|a| a.fingerprint.clone()).collect();
            alerts.extend(
                place
                    .open()
                    .into_iter()
                    .filter(|a| !news.contains(&a.fingerprint)),
            );
        }
        if alerts.is_empty() {
            if full {
                // Nothing firing to send again: the next resend is one `resend` from now.
                next_resend = tokio::time::Instant::now() + resend;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = place.woken() => {}
                () = tokio::time::sleep_until(next_resend) => {}
            }
            continue;
        }
        if target.post(&alerts).await.is_ok() {
            place.delivered(&seqs);
            failures = 0;
            if full {
                next_resend = tokio::time::Instant::now() + resend;
            }
            continue;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(retry_delay(failures)) => {}
        }
        failures = failures.saturating_add(1);
    }
}

/// Posts each notification in turn, retrying one until it is delivered before the next, so a
/// receiver sees a target's firing before its resolved.
async fn webhook(target: Target, place: Receiver, cancel: CancellationToken) {
    let mut failures = 0_u32;
    let mut after = 0;
    loop {
        let next = (!place.held()).then(|| place.next(after)).flatten();
        let Some((seq, alert)) = next else {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = place.woken() => {}
            }
            continue;
        };
        if target.post(std::slice::from_ref(&alert)).await.is_ok() {
            place.delivered(&[seq]);
            after = seq;
            failures = 0;
            continue;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(retry_delay(failures)) => {}
        }
        failures = failures.saturating_add(1);
    }
}

/// Sends one request to `receiver`: delivered when it answers 2xx. The outcome is counted, and a
/// failure logged (without the URL).
async fn send(request: reqwest::RequestBuilder, receiver: &str) -> Result<(), String> {
    let result = match request.send().await {
        Ok(answer) if answer.status().is_success() => Ok(()),
        Ok(answer) => Err(format!("answered {}", answer.status())),
        Err(e) => Err(without_url(&e)),
    };
    if let Err(e) = &result {
        tracing::warn!(receiver, error = %e, "alert receiver did not take a notification");
    }
    metrics::counter!(
        "probe_alert_notifications_total",
        "receiver" => receiver.to_owned(),
        "result" => if result.is_ok() { "delivered" } else { "failed" }
    )
    .increment(1);
    result
}

/// A reqwest error without its URL, which may carry a secret in its query.
fn without_url(e: &reqwest::Error) -> String {
    let mut e = std::error::Error::source(e);
    let mut last = None;
    while let Some(inner) = e {
        last = Some(inner.to_string());
        e = inner.source();
    }
    last.unwrap_or_else(|| "request failed".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With nothing to send, the Alertmanager task waits: run on paused time, it lets the clock
    /// pass many resends. (A task that never waited would keep the clock from moving, and the
    /// watchdog would see the runtime stuck.)
    #[test]
    fn with_nothing_to_send_alertmanager_s_task_waits_past_its_resends() {
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let config = AlertmanagerConfig {
                    urls: vec!["http://127.0.0.1:9".parse().unwrap()],
                    basic_auth: None,
                    resend: Duration::from_secs(1),
                    trust: TlsTrust::System,
                };
                let target = Target::Alertmanager(config, client(&TlsTrust::System));
                let outbox = Outbox::open(vec![ALERTMANAGER.to_owned()], 10, None);
                let cancel = CancellationToken::new();
                start(vec![target], &outbox, &cancel);
                tokio::time::sleep(Duration::from_secs(60)).await;
                cancel.cancel();
            });
            let _ = done_tx.send(());
        });
        done.recv_timeout(Duration::from_secs(30))
            .expect("the runtime never got past the first resend: the task does not wait");
    }
}
