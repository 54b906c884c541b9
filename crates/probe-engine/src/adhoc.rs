//! Probes on request: blackbox_exporter's `GET /probe?module=M&target=T`, answered from the
//! modules of a `blackbox.yml` (`--blackbox-config`), so that the scrape jobs, alerts and
//! dashboards users wrote against the exporter keep working when it is replaced by the daemon.
//!
//! An open prober is a risk: whoever reaches it can make the daemon connect anywhere, and a
//! scrape storm could starve the scheduled probes. So the endpoint exists only with
//! `--blackbox-config`; the API's read token guards it like every read; `--blackbox-allow`
//! (CIDRs and host globs) restricts what it may probe; and its probes start only while the
//! scheduled ones leave room under the engine's in-flight cap, at most `--blackbox-max-in-flight`
//! at once. Past either bound the answer is 429, at once: a scraper retries at its next scrape,
//! whereas a queue would only make every answer late.
//!
//! The file is read at start (a module we cannot run refuses the start, located) and again on
//! each reload, where an invalid file keeps the modules in force.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;
use parking_lot::Mutex;
use probe::engine::Engine;
use probe::outcome::{CheckResult, Observed};
use probe::tier::resolve::{Names, Resolver};
use probe::tier::{Probe, ProbeSpec};
use tokio::sync::Semaphore;

use crate::blackbox::{self, Blackbox, Module, Prober, Schedule};
use probe_config::{ConfigError, ConfigErrors};

/// What `--blackbox-*` says.
#[derive(Clone, Debug)]
pub struct AdHocOptions {
    /// The `blackbox.yml`.
    pub config: PathBuf,
    /// What the endpoint may probe; empty allows every target.
    pub allow: Vec<String>,
    /// The most ad-hoc probes at once.
    pub max_in_flight: usize,
}

/// The `GET /probe` prober: the modules in force, the allow list and the bound.
pub struct AdHoc {
    path: PathBuf,
    modules: ArcSwap<Loaded>,
    allow: AllowList,
    slots: Semaphore,
    max_in_flight: usize,
    engine: Engine,
    names: Names,
}

/// The modules in force, and the probes built from them.
struct Loaded {
    blackbox: Blackbox,
    /// The probes built for each (module, target, hostname) asked for, kept: compiling a
    /// module's entry and building its probe (an HTTP client, a TLS configuration) cost more
    /// than most checks. A probe keeps no connection between checks (HTTP checks use a fresh
    /// one, as the exporter does), so a kept probe answers as a new one would. Replaced whole
    /// with the modules on a reload. The lock is held only to take a probe out or put it back.
    built: Mutex<Built>,
}

/// The probes kept, with as many for one query as ran at once; emptied when they reach
/// [`MAX_BUILT`], so a scraper asking for ever new targets cannot grow them.
#[derive(Default)]
struct Built {
    idle: HashMap<Asked, Vec<Arc<dyn Probe>>>,
    count: usize,
}

/// What a query asks for: the module, the target and the hostname.
type Asked = (String, String, Option<String>);

/// The most probes kept built.
const MAX_BUILT: usize = 4096;

impl Loaded {
    fn new(blackbox: Blackbox) -> Self {
        Self {
            blackbox,
            built: Mutex::default(),
        }
    }
}

/// Why an ad-hoc probe did not run.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The query names no module the file has, or the module cannot run the target: a 400.
    #[error("{0}")]
    BadRequest(String),
    /// The allow list does not cover the target: a 403.
    #[error("{0}")]
    Forbidden(String),
    /// No room: the ad-hoc bound or the engine's in-flight cap is reached. A 429.
    #[error("{0}")]
    Busy(String),
}

/// One ad-hoc probe's outcome.
pub struct Ran {
    /// The module's prober, whose series the answer carries.
    pub prober: Prober,
    /// What the check found.
    pub result: CheckResult,
    /// What it saw on the way: what the exporter's series report.
    pub observed: Observed,
    /// The target's host as the query gave it (an address, or a name).
    pub host: String,
    /// The first address the host resolved to, when it did.
    pub resolved: Option<IpAddr>,
    /// How long looking the host up took.
    pub lookup: Duration,
    /// How long the lookup and the check took.
    pub duration: Duration,
    /// The timeout it ran under.
    pub timeout: Duration,
}

impl AdHoc {
    /// Loads the file and the allow list.
    ///
    /// # Errors
    /// Every error of the file, and every module we cannot run (each refused option, named and
    /// located), and every allow-list entry that is neither a CIDR nor a host glob.
    pub fn start(
        options: &AdHocOptions,
        engine: Engine,
        resolver: Arc<Resolver>,
    ) -> Result<Self, ConfigErrors> {
        let modules = load(&options.config)?;
        let allow = AllowList::parse(&options.allow).map_err(|message| {
            ConfigErrors(vec![ConfigError {
                file: PathBuf::from("--blackbox-allow"),
                line: 0,
                column: 0,
                message,
            }])
        })?;
        let names = Names::new(resolver, Duration::ZERO);
        Ok(Self {
            path: options.config.clone(),
            modules: ArcSwap::from_pointee(Loaded::new(modules)),
            allow,
            slots: Semaphore::new(options.max_in_flight),
            max_in_flight: options.max_in_flight,
            engine,
            names,
        })
    }

    /// Reads the file again; an invalid one keeps the modules in force, and says why.
    pub fn reload(&self) {
        match load(&self.path) {
            Ok(modules) => {
                let count = modules.modules.len();
                self.modules.store(Arc::new(Loaded::new(modules)));
                tracing::info!(modules = count, file = %self.path.display(), "blackbox modules reloaded");
            }
            Err(errors) => tracing::error!(
                file = %self.path.display(),
                errors = %errors,
                "the blackbox config is invalid; the modules in force stay"
            ),
        }
    }

    /// Whether `module` names a module of the file in force: only those are counted by name.
    pub fn knows(&self, module: &str) -> bool {
        self.modules.load().blackbox.module(module).is_some()
    }

    /// Probes `target` through `module`, with `hostname` as the HTTP `Host` when given, under
    /// the scrape's timeout (`X-Prometheus-Scrape-Timeout-Seconds`) when the scraper sent one.
    ///
    /// # Errors
    /// A [`Refusal`]: an unknown module or a target it cannot run, a target the allow list does
    /// not cover, or no room.
    pub async fn probe(
        &self,
        module: &str,
        target: &str,
        hostname: Option<&str>,
        scrape_timeout: Option<Duration>,
    ) -> Result<Ran, Refusal> {
        let loaded = self.modules.load_full();
        let module = loaded
            .blackbox
            .module(module)
            .ok_or_else(|| Refusal::BadRequest(format!("Unknown module {module:?}")))?;
        let module: &Module = module.module.as_ref().map_err(|e| {
            Refusal::BadRequest(format!("module {:?} cannot run: {e}", module.name))
        })?;
        let host = host_of(target, module.prober);
        if !self.allow.allows(host) {
            return Err(Refusal::Forbidden(format!(
                "target {target:?} is not allowed: {host:?} matches none of --blackbox-allow"
            )));
        }
        // The exporter waits 120 s for a scraper that does not say (curl, a person).
        let scrape_timeout = scrape_timeout.unwrap_or(Duration::from_secs(120));
        let timeout = module
            .timeout_within(scrape_timeout)
            .map_err(Refusal::BadRequest)?;
        let workload = self.engine.workload();
        if workload.in_flight >= workload.in_flight_cap {
            return Err(Refusal::Busy(
                "the scheduled probes take the whole in-flight cap; try again later".to_owned(),
            ));
        }
        let Ok(_slot) = self.slots.try_acquire() else {
            return Err(Refusal::Busy(format!(
                "{} ad-hoc probes are running, the most --blackbox-max-in-flight allows; try \
                 again later",
                self.max_in_flight
            )));
        };
        let key = (
            module.name.clone(),
            target.to_owned(),
            hostname.map(str::to_owned),
        );
        // Taken out while it runs: a probe notes what its check saw (a handshake's certificate)
        // for that check, so two checks must not share one. A second request for the same
        // target meanwhile takes another, or builds its own, kept too after.
        let kept = {
            let mut built = loaded.built.lock();
            let kept = built.idle.get_mut(&key).and_then(Vec::pop);
            built.count -= usize::from(kept.is_some());
            kept
        };
        let probe = match kept {
            Some(probe) => probe,
            None => self.build(
                module,
                target,
                hostname,
                Schedule {
                    // Any interval over the timeout: an ad-hoc probe is not scheduled.
                    interval: timeout + Duration::from_secs(1),
                    scrape_timeout,
                },
                loaded.blackbox.file.parent().unwrap_or(Path::new("")),
            )?,
        };
        // Looked up first, and timed, as the exporter does: its `probe_dns_lookup_time_seconds`.
        // The check's own lookup then finds the answer in the resolver's cache.
        let started = tokio::time::Instant::now();
        let resolved = self.names.lookup(host, started + timeout).await;
        let lookup = started.elapsed();
        let (result, observed) = probe.observe(timeout.saturating_sub(lookup)).await;
        {
            let mut built = loaded.built.lock();
            if built.count >= MAX_BUILT {
                *built = Built::default();
            }
            built.idle.entry(key).or_default().push(probe);
            built.count += 1;
        }
        Ok(Ran {
            prober: module.prober,
            result,
            observed,
            host: host.to_owned(),
            resolved: resolved.ok().and_then(|r| r.addrs.first().copied()),
            lookup,
            duration: started.elapsed(),
            timeout,
        })
    }

    /// The probe `module` makes of `target`: its entry compiled, with `hostname` as the HTTP
    /// `Host`, and a fresh connection per HTTP check, as the exporter makes one.
    fn build(
        &self,
        module: &Module,
        target: &str,
        hostname: Option<&str>,
        schedule: Schedule,
        dir: &Path,
    ) -> Result<Arc<dyn Probe>, Refusal> {
        let mut spec = module
            .spec(target, schedule, dir)
            .map_err(Refusal::BadRequest)?;
        if let ProbeSpec::Http(http) = &mut spec {
            http.fresh_connection = true;
            if let Some(hostname) = hostname {
                http.headers
                    .append("host", hostname)
                    .map_err(|e| Refusal::BadRequest(format!("hostname {hostname:?}: {e}")))?;
            }
        }
        Ok(probe::tier::build(&spec, &self.names))
    }
}

/// Loads `path`, refusing it when any module cannot run: the exporter would run every module
/// it loaded, so a module left out would fail its scrapes in silence.
fn load(path: &Path) -> Result<Blackbox, ConfigErrors> {
    let loaded = blackbox::load(path)?;
    let refused: Vec<ConfigError> = loaded
        .modules
        .iter()
        .filter_map(|m| m.module.as_ref().err())
        .flat_map(|errors| errors.0.iter().cloned())
        .collect();
    if refused.is_empty() {
        Ok(loaded)
    } else {
        Err(ConfigErrors(refused))
    }
}

/// The host of a target as the module's prober reads it: a URL's host for `http`, the host of
/// `HOST:PORT` (or `[V6]:PORT`) for the others, a bare host for `icmp`.
fn host_of(target: &str, prober: Prober) -> &str {
    let rest = match target.split_once("://") {
        Some((_, rest)) => rest,
        None => target,
    };
    let authority = match prober {
        Prober::Http | Prober::Grpc => rest.split(['/', '?', '#']).next().unwrap_or(rest),
        _ => rest,
    };
    // Credentials in a URL's authority come before the host.
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if let Some(inner) = authority.strip_prefix('[') {
        return inner.split(']').next().unwrap_or(inner);
    }
    match authority.split_once(':') {
        // One colon: HOST:PORT. More: an IPv6 address without brackets.
        Some((host, port)) if !port.contains(':') => host,
        _ => authority,
    }
}

/// `--blackbox-allow`: CIDRs (an address alone is a /32 or /128) and host globs (`*.internal`).
#[derive(Debug, Default)]
struct AllowList {
    nets: Vec<IpNet>,
    globs: Vec<wildmatch::WildMatch>,
}

impl AllowList {
    fn parse(entries: &[String]) -> Result<Self, String> {
        let mut list = Self::default();
        for entry in entries.iter().flat_map(|e| e.split(',')).map(str::trim) {
            if entry.is_empty() {
                continue;
            }
            if let Ok(net) = entry.parse::<IpNet>() {
                list.nets.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                list.nets.push(IpNet::from(ip));
            } else if entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*' | '?'))
            {
                list.globs
                    .push(wildmatch::WildMatch::new(&entry.to_ascii_lowercase()));
            } else {
                return Err(format!(
                    "{entry:?} is neither a CIDR (10.0.0.0/8), an address nor a host glob \
                     (*.internal)"
                ));
            }
        }
        Ok(list)
    }

    /// Whether `host` may be probed: an address inside a listed network, or a name (or an
    /// address's text) matching a glob. A name is judged by its text, not by where it resolves:
    /// allow names with globs.
    fn allows(&self, host: &str) -> bool {
        if self.nets.is_empty() && self.globs.is_empty() {
            return true;
        }
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        if let Ok(ip) = host.parse::<IpAddr>()
            && self.nets.iter().any(|net| net.contains(&ip))
        {
            return true;
        }
        self.globs.iter().any(|glob| glob.matches(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_read_as_each_prober_writes_its_target() {
        assert_eq!(
            host_of("https://user@api.internal:8443/ready?x=1", Prober::Http),
            "api.internal"
        );
        assert_eq!(host_of("api.internal/health", Prober::Http), "api.internal");
        assert_eq!(host_of("10.0.0.1:5432", Prober::Tcp), "10.0.0.1");
        assert_eq!(host_of("[::1]:53", Prober::Dns), "::1");
        assert_eq!(host_of("::1", Prober::Icmp), "::1");
        assert_eq!(host_of("gateway", Prober::Icmp), "gateway");
        assert_eq!(
            host_of("grpcs://pay.internal:443", Prober::Grpc),
            "pay.internal"
        );
    }

    #[test]
    fn the_allow_list_takes_networks_addresses_and_globs() {
        let list = AllowList::parse(&["10.0.0.0/8, 127.0.0.1".to_owned(), "*.internal".to_owned()])
            .unwrap();
        assert!(list.allows("10.1.2.3"));
        assert!(list.allows("127.0.0.1"));
        assert!(!list.allows("127.0.0.2"));
        assert!(list.allows("API.internal."));
        assert!(!list.allows("internal.example.com"));
        assert!(!list.allows("192.168.0.1"));
        assert!(AllowList::parse(&[]).unwrap().allows("anything"));
        assert!(AllowList::parse(&["10.0.0.0/33".to_owned()]).is_err());
        assert!(AllowList::parse(&["http://x".to_owned()]).is_err());
    }
}
