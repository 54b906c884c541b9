//! `--web-config`: TLS, basic authentication, response headers and a rate limit for the
//! listeners, read from the file Prometheus exporters read (exporter-toolkit's web config), so an
//! operator reuses the file they have:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt
//! basic_auth_users:
//!   prometheus: $2y$10$...
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! ```
//!
//! Every key means what it means to the exporters; relative paths start at the file's
//! directory. The API takes all of it; the gRPC health listener takes the TLS (HTTP/2 only).
//!
//! The file and every file it names are read again on SIGHUP and when one of them changes. A
//! new certificate serves the next handshake while open connections go on; a file that fails to
//! load keeps the running config, and says why in the log and in
//! `probe_engine_web_config_last_reload_successful`. Turning TLS on or off takes a restart: the
//! listeners were built for one or the other.
//!
//! How the credentials combine with the API's tokens is `api`'s: a request passes with a valid
//! basic user or a valid bearer token, and a basic user may read as a read token does.

mod basic;
mod listener;
mod raw;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use parking_lot::Mutex;
use probe_config::ConfigErrors;
use probe_config::yaml::{
    Diags, Kind, Node, collect, file_error, located, quote, read_file, syntax_error, yaml_options,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use basic::BasicUsers;
pub use listener::TlsListener;
pub use tls::Tls;

use raw::RawWeb;

/// The headers a web config may add, as exporter-toolkit allows them: security headers only, so
/// that no file can change what an answer means.
const HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// A loaded web config.
#[derive(Debug, Default)]
pub struct WebConfig {
    /// The listeners' TLS, when the file turns it on.
    pub tls: Option<Tls>,
    /// `basic_auth_users`; empty when none.
    pub users: BasicUsers,
    /// `http_server_config.headers`, added to every answer.
    pub headers: HeaderMap,
    /// `rate_limit`, when set.
    pub rate: Option<RateLimit>,
    /// The file and every file it names, to watch.
    files: Vec<PathBuf>,
    /// A digest of everything read, to tell a changed config from an unchanged one.
    fingerprint: Vec<u8>,
}

/// `rate_limit`: a token bucket over every request but the health checks, as exporter-toolkit's
/// (Go's `rate.Limiter`): `burst` at once, then one each `interval`.
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    burst: u32,
    /// The tokens left, and when they were counted.
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimit {
    /// Takes a token if one is left.
    pub fn admit(&self) -> bool {
        let now = Instant::now();
        let mut bucket = self.bucket.lock();
        let (tokens, then) = *bucket;
        let refilled = now.duration_since(then).as_secs_f64() / self.interval.as_secs_f64();
        let tokens = (tokens + refilled).min(f64::from(self.burst));
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }
}

/// Loads a web config and every file it names.
///
/// # Errors
/// Every problem, located (`file:line:col`), a file it names that cannot be read or used
/// included.
pub fn load(path: &Path) -> Result<WebConfig, ConfigErrors> {
    let text = read_file(path).map_err(|message| file_error(path, message))?;
    parse(path, &text)
}

/// As [`load`], with the file's text read.
fn parse(file: &Path, text: &str) -> Result<WebConfig, ConfigErrors> {
    let mut content = ring::digest::Context::new(&ring::digest::SHA256);
    content.update(text.as_bytes());
    let mut files = vec![file.to_path_buf()];
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) if !matches!(root.kind, Kind::Null) => root,
        // An empty file: exporter-toolkit serves plain HTTP, open.
        Ok(_) => {
            return Ok(WebConfig {
                files,
                fingerprint: content.finish().as_ref().to_vec(),
                ..WebConfig::default()
            });
        }
        Err(e) => return Err(located(file, vec![syntax_error(&e)])),
    };
    let (raw, mut diags) = collect::<RawWeb>(&root, text);
    let Some(raw) = raw else {
        return Err(located(file, diags));
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut reader = tls::Reader {
        dir,
        files: &mut files,
        content: &mut content,
    };
    let http2 = raw
        .http_server_config
        .as_ref()
        .and_then(|h| h.value.http2.as_ref())
        .is_none_or(|h| h.value);
    let tls = raw
        .tls_server_config
        .as_ref()
        .filter(|section| tls::turns_on(&section.value))
        .and_then(|section| tls::settings(section, &mut reader, &mut diags))
        .and_then(|settings| match settings.build(http2) {
            Ok(tls) => Some(tls),
            Err(diag) => {
                diags.push(diag);
                None
            }
        });
    let users = users(&raw, &mut diags);
    let headers = headers(&raw, &mut diags);
    let rate = rate(&raw, &mut diags);
    if !diags.is_empty() {
        return Err(located(file, diags));
    }
    Ok(WebConfig {
        tls,
        users,
        headers,
        rate,
        files,
        fingerprint: content.finish().as_ref().to_vec(),
    })
}

fn users(raw: &RawWeb, diags: &mut Diags) -> BasicUsers {
    let Some(users) = &raw.basic_auth_users else {
        return BasicUsers::default();
    };
    let mut checked = Vec::new();
    for (name, hash) in &users.value.0 {
        if name.contains(':') {
            diags.push((
                hash.key,
                format!(
                    "user {}: a basic auth user name cannot hold a colon",
                    quote(name)
                ),
            ));
        } else if let Err(why) = basic::check_hash(hash.value.trim()) {
            diags.push((hash.pos, format!("user {}: {why}", quote(name))));
        } else {
            checked.push((name.clone(), hash.value.trim().to_owned()));
        }
    }
    BasicUsers::new(checked)
}

fn headers(raw: &RawWeb, diags: &mut Diags) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(entries) = raw
        .http_server_config
        .as_ref()
        .and_then(|h| h.value.headers.as_ref())
    else {
        return headers;
    };
    for (name, value) in &entries.value.0 {
        let Some(known) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(name.trim())) else {
            diags.push((
                value.key,
                format!(
                    "header {} cannot be set here; these can: {}",
                    quote(name),
                    HEADERS.join(", ")
                ),
            ));
            continue;
        };
        let text = value.value.trim();
        let allowed: &[&str] = match *known {
            "X-Content-Type-Options" => &["nosniff"],
            "X-Frame-Options" => &["deny", "sameorigin"],
            _ => &[],
        };
        if !allowed.is_empty() && !allowed.iter().any(|a| a.eq_ignore_ascii_case(text)) {
            diags.push((
                value.pos,
                format!(
                    "{known} takes {}, not {}",
                    allowed.join(" or "),
                    quote(text)
                ),
            ));
            continue;
        }
        match (
            HeaderName::from_bytes(known.as_bytes()),
            HeaderValue::from_str(text),
        ) {
            (Ok(name), Ok(v)) => {
                headers.insert(name, v);
            }
            _ => diags.push((
                value.pos,
                format!("{known}: {} is not a header value", quote(text)),
            )),
        }
    }
    headers
}

fn rate(raw: &RawWeb, diags: &mut Diags) -> Option<RateLimit> {
    let section = raw.rate_limit.as_ref()?;
    let interval = match &section.value.interval {
        Some(text) => match crate::blackbox::duration::parse(&text.value) {
            Ok(d) => d,
            Err(why) => {
                diags.push((text.pos, format!("interval: {why}")));
                return None;
            }
        },
        None => Duration::ZERO,
    };
    // exporter-toolkit's: no interval, no limit.
    if interval.is_zero() {
        return None;
    }
    let burst = section.value.burst.as_ref().map_or(0, |b| b.value);
    if burst == 0 {
        let at = section.value.burst.as_ref().map_or(section.key, |b| b.pos);
        diags.push((
            at,
            "burst must be at least 1 with an interval: a bucket of 0 refuses every request"
                .to_owned(),
        ));
        return None;
    }
    Some(RateLimit {
        interval,
        burst,
        bucket: Mutex::new((f64::from(burst), Instant::now())),
    })
}

/// The web config in force, swapped whole by a reload.
#[derive(Clone, Debug)]
pub struct Web {
    path: Option<Arc<Path>>,
    current: Arc<ArcSwap<WebConfig>>,
}

impl Default for Web {
    /// No web config: plain HTTP, no basic users, no headers.
    fn default() -> Self {
        Self {
            path: None,
            current: Arc::default(),
        }
    }
}

impl Web {
    /// The web config at `path`.
    ///
    /// # Errors
    /// As [`load`].
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        let loaded = load(path)?;
        metrics::gauge!("probe_engine_web_config_last_reload_successful").set(1.0);
        Ok(Self {
            path: Some(path.into()),
            current: Arc::new(ArcSwap::from_pointee(loaded)),
        })
    }

    /// The config in force. A guard, not a clone: the API's door reads it on every request.
    pub fn current(&self) -> arc_swap::Guard<Arc<WebConfig>> {
        self.current.load()
    }

    /// Reads the file again and puts it in force, unless it fails to load or would turn TLS on
    /// or off; either is logged, and the running config stays.
    pub fn reload(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let running = self.current();
        let outcome = match load(path) {
            Ok(new) if new.fingerprint == running.fingerprint => Ok(()),
            Ok(new) if new.tls.is_some() != running.tls.is_some() => Err(format!(
                "{}: turning TLS {} takes a restart",
                path.display(),
                if new.tls.is_some() { "on" } else { "off" }
            )),
            Ok(new) => {
                self.current.store(Arc::new(new));
                tracing::info!(file = %path.display(), "web config reloaded");
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        let gauge = metrics::gauge!("probe_engine_web_config_last_reload_successful");
        match outcome {
            Ok(()) => gauge.set(1.0),
            Err(why) => {
                gauge.set(0.0);
                tracing::error!(error = %why, "web config not reloaded: the running one stays");
            }
        }
    }

    /// Reloads whenever the file or a file it names changes, until `cancel`. The watch follows
    /// the files the config in force names.
    pub async fn watch(self, debounce: Duration, cancel: CancellationToken) {
        if self.path.is_none() {
            return;
        }
        loop {
            let files = self.current().files.clone();
            let (trigger, mut changed) = mpsc::channel(1);
            let watching = cancel.child_token();
            for file in &files {
                let watch = crate::watch::watch_config(
                    file.clone(),
                    debounce,
                    trigger.clone(),
                    watching.clone(),
                );
                tokio::spawn(async move {
                    if let Err(e) = watch.await {
                        tracing::error!(error = %e, "not watching a file of the web config");
                    }
                });
            }
            drop(trigger);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    got = changed.recv() => {
                        if got.is_none() {
                            return;
                        }
                        self.reload();
                        if self.current().files != files {
                            watching.cancel();
                            break;
                        }
                    }
                }
            }
        }
    }
}
