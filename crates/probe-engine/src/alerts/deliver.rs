//! Delivery, one task per receiver: Alertmanager gets the firing alerts (and the ones just
//! resolved) whenever they change and again every `resend`; a webhook gets each change in turn,
//! retried with jittered backoff until it answers 2xx. Nothing waits for a receiver but its own
//! task.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use probe::tier::tls::{TlsTrust, client_config};
use rand::RngExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Alert;
use crate::config::{AlertmanagerConfig, AlertsConfig, WebhookConfig};

/// The first retry after a failed delivery; doubled up to [`RETRY_MAX`], jittered.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the receivers are to be told.
#[derive(Clone)]
pub(super) struct Outbox {
    alertmanager: Option<Arc<Queue<AmState>>>,
    webhooks: Vec<Arc<Queue<VecDeque<Alert>>>>,
    /// Set while nothing may be sent (a member whose lease is lost).
    held: Arc<AtomicBool>,
}

/// A receiver's pending work and the signal that there is some.
struct Queue<T> {
    work: Mutex<T>,
    wake: Notify,
}

impl<T> Queue<T> {
    /// Waits for the next signal; `false` when cancelled first.
    async fn woken(&self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            () = self.wake.notified() => true,
        }
    }
}

#[derive(Default)]
struct AmState {
    firing: Vec<Alert>,
    /// Resolved since they were last sent.
    resolved: Vec<Alert>,
}

impl Outbox {
    /// Holds every delivery back (`true`), or lets it go on.
    pub fn hold(&self, held: bool) {
        if self.held.swap(held, Ordering::AcqRel) && !held {
            if let Some(am) = &self.alertmanager {
                am.wake.notify_one();
            }
            for hook in &self.webhooks {
                hook.wake.notify_one();
            }
        }
    }

    /// Hands the alerts firing now, and those that changed, to every receiver.
    pub fn update(&self, firing: Vec<Alert>, changed: Vec<Alert>) {
        if let Some(am) = &self.alertmanager {
            let mut state = am.work.lock();
            let dirty = !changed.is_empty();
            state
                .resolved
                .extend(changed.iter().filter(|a| a.status == "resolved").cloned());
            state.firing = firing;
            drop(state);
            if dirty {
                am.wake.notify_one();
            }
        }
        if changed.is_empty() {
            return;
        }
        for hook in &self.webhooks {
            hook.work.lock().extend(changed.iter().cloned());
            hook.wake.notify_one();
        }
    }
}

/// Starts a delivery task per receiver of `config`.
pub(super) fn start(config: &AlertsConfig, cancel: CancellationToken) -> Outbox {
    let client = client();
    let held = Arc::new(AtomicBool::new(false));
    let alertmanager = config.alertmanager.clone().map(|am| {
        let queue = Arc::new(Queue {
            work: Mutex::new(AmState::default()),
            wake: Notify::new(),
        });
        tokio::spawn(alertmanager(
            am,
            queue.clone(),
            client.clone(),
            held.clone(),
            cancel.clone(),
        ));
        queue
    });
    let webhooks = config
        .webhooks
        .iter()
        .map(|hook| {
            let queue = Arc::new(Queue {
                work: Mutex::new(VecDeque::new()),
                wake: Notify::new(),
            });
            tokio::spawn(webhook(
                hook.clone(),
                queue.clone(),
                client.clone(),
                held.clone(),
                cancel.clone(),
            ));
            queue
        })
        .collect();
    Outbox {
        alertmanager,
        webhooks,
        held,
    }
}

/// The client every receiver uses: the probes' TLS trust (the system's), no redirects, no proxy.
fn client() -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("probe-engine/", env!("CARGO_PKG_VERSION")));
    if let Ok(tls) = client_config(Some(&TlsTrust::System)) {
        builder = builder.tls_backend_preconfigured(tls);
    }
    builder.build().unwrap_or_else(|e| {
        tracing::error!(error = %e, "alerts: the HTTP client could not be built; none will be sent");
        reqwest::Client::new()
    })
}

/// Sends the firing alerts (and the resolved ones not sent yet) to every URL on each change and
/// every `resend`; a URL that fails is tried again with backoff, the others are not held up.
async fn alertmanager(
    config: AlertmanagerConfig,
    queue: Arc<Queue<AmState>>,
    client: reqwest::Client,
    held: Arc<AtomicBool>,
    cancel: CancellationToken,
) {
    let mut retry = RETRY_MIN;
    loop {
        if held.load(Ordering::Acquire) {
            if !queue.woken(&cancel).await {
                return;
            }
            continue;
        }
        let (batch, resolved) = {
            let state = queue.work.lock();
            let resolved = state.resolved.len();
            let batch: Vec<Alert> = state
                .firing
                .iter()
                .chain(&state.resolved)
                .cloned()
                .collect();
            (batch, resolved)
        };
        let mut failed = false;
        if !batch.is_empty() {
            for url in &config.urls {
                let endpoint = format!("{}/api/v2/alerts", url.to_string().trim_end_matches('/'));
                let mut request = client
                    .post(&endpoint)
                    .json(&batch)
                    .timeout(Duration::from_secs(10));
                if let Some(auth) = &config.basic_auth {
                    request = request.basic_auth(&auth.username, Some(&auth.password));
                }
                failed |= !deliver(request, "alertmanager").await;
            }
        }
        if failed {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(jittered(retry)) => {}
            }
            retry = (retry * 2).min(RETRY_MAX);
            continue;
        }
        retry = RETRY_MIN;
        // Sent everywhere: the resolved ones are done.
        queue.work.lock().resolved.drain(..resolved);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = queue.wake.notified() => {}
            () = tokio::time::sleep(config.resend) => {}
        }
    }
}

/// Posts each change in turn, retrying one until it is delivered before the next, so a
/// receiver sees a target's firing before its resolved.
async fn webhook(
    config: WebhookConfig,
    queue: Arc<Queue<VecDeque<Alert>>>,
    client: reqwest::Client,
    held: Arc<AtomicBool>,
    cancel: CancellationToken,
) {
    let mut retry = RETRY_MIN;
    loop {
        if held.load(Ordering::Acquire) {
            if !queue.woken(&cancel).await {
                return;
            }
            continue;
        }
        let next = queue.work.lock().front().cloned();
        let Some(alert) = next else {
            if !queue.woken(&cancel).await {
                return;
            }
            continue;
        };
        let mut request = client
            .post(config.url.to_string())
            .json(&alert)
            .timeout(config.timeout);
        for (name, value) in config.headers.expose() {
            request = request.header(name, value);
        }
        if deliver(request, &config.name).await {
            queue.work.lock().pop_front();
            retry = RETRY_MIN;
        } else {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(jittered(retry)) => {}
            }
            retry = (retry * 2).min(RETRY_MAX);
        }
    }
}

/// Sends one request to `receiver`: delivered when it answers 2xx. The outcome is counted, and a
/// failure logged (without the URL).
async fn deliver(request: reqwest::RequestBuilder, receiver: &str) -> bool {
    let ok = match request.send().await {
        Ok(answer) if answer.status().is_success() => true,
        Ok(answer) => {
            tracing::warn!(receiver, status = %answer.status(), "alert receiver refused a notification");
            false
        }
        Err(e) => {
            tracing::warn!(receiver, error = %without_url(&e), "alert receiver not reached");
            false
        }
    };
    metrics::counter!(
        "probe_alert_notifications_total",
        "receiver" => receiver.to_owned(),
        "result" => if ok { "delivered" } else { "failed" }
    )
    .increment(1);
    ok
}

/// Between half of `step` and all of it, at random: receivers that failed together do not all
/// come back at the same instant.
fn jittered(step: Duration) -> Duration {
    step.mul_f64(rand::rng().random_range(0.5..=1.0))
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
