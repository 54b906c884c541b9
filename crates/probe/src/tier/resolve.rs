//! The engine's DNS resolver: one per engine, shared by every probe (TCP and both HTTP
//! transports), built on hickory-resolver.
//!
//! Why not `getaddrinfo`: its errors cannot be told apart (a timeout, a SERVFAIL and a name that
//! does not exist all read "failed to lookup address"), and it cannot be pointed at another
//! server. Yet the difference is the whole point here: **resolver trouble is not target
//! trouble**. A name that does not exist (NXDOMAIN), or has no address (NODATA), is an answer:
//! the target is misdeclared or gone, and its check fails at once as `dns`. A resolver that
//! times out, answers SERVFAIL or REFUSED, or cannot be reached says nothing about the target:
//!
//! - **Stale answers.** The resolver keeps the last good answer of every name. When a lookup
//!   fails with trouble and that answer is younger than the target's `dns_stale_for`
//!   ([`TargetSpec::dns_stale_for`](crate::topology::TargetSpec::dns_stale_for), 5 minutes by
//!   default), the check goes on with it and says so in its
//!   [`Remarks::dns_trouble`](crate::outcome::Remarks::dns_trouble). While a stale answer is at
//!   hand, the lookup gets only half of the check's remaining time, so that the connection still
//!   has the other half.
//! - **Outages.** When the trouble is the resolver's rather than one zone's, every target named
//!   through it would go DOWN at once. The resolver watches the distinct names looked up
//!   recently ([`OutageRule`]): when, among the names whose latest lookup ended within the last
//!   `window` (60 s), there are at least `min_names` (3) and **more than half** of them failed
//!   with trouble, the resolver is *out*. That is the engine's own fault, treated the way
//!   [self-health](crate::health) treats a starved engine: a check that failed as `dns`
//!   because of trouble is recorded and shown, but not counted toward DOWN. One broken zone
//!   among healthy ones stays below the half, so its targets still fail; names answered from
//!   `/etc/hosts` (and `localhost`) never reach a server and are left out of the count.
//!   While an outage forms, names fail one by one; until the other names have been looked up
//!   again (within their interval), one cannot be ruled out, and trouble failures wait too
//!   ([`Resolver::outage_possible`]): else a target re-probed at its fast interval would take
//!   its failures before the rule has seen enough names.
//!
//! An outage is logged once when it starts and once when it ends, counted in
//! `probe_resolver_outages_total` and shown by `probe_resolver_up`; stale answers used are
//! counted per target by the engine (`probe_dns_stale_answers_total`).
//!
//! The default ([`Resolver::system`]) is the host's configuration: `/etc/resolv.conf` and
//! `/etc/hosts`, so `localhost` and the hosts file resolve without a query.
//! [`ResolverConfig::servers`] points it at servers of its own. hickory keeps its own cache,
//! which honours the answers' TTLs.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use hickory_resolver::config::{
    NameServerConfig, ResolveHosts, ResolverConfig as HickoryConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::{Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RecordType};
use hickory_resolver::{Hosts, TokioResolver};
use tokio::time::{Instant, timeout_at};

use crate::outcome::DnsTrouble;

/// How long a name's last good answer may stand in by default, when the resolver has trouble
/// (`dns_stale_for`): longer than most resolver hiccups and restarts, short enough that a
/// renumbered service is followed within minutes once the resolver answers again.
pub const DEFAULT_STALE_FOR: Duration = Duration::from_secs(5 * 60);

/// When the resolver counts as out; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutageRule {
    /// Names whose latest lookup ended longer ago than this are not counted.
    pub window: Duration,
    /// The fewest distinct names that can make an outage: below it, a failing name may just be
    /// a broken zone.
    pub min_names: usize,
}

impl Default for OutageRule {
    /// 60 s (a dozen runs at the default interval, and one at a slow one), at least 3 names.
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            min_names: 3,
        }
    }
}

/// How the resolver is set up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolverConfig {
    /// The servers to ask, over UDP and TCP, in order; `None` takes them (and the search
    /// domains) from `/etc/resolv.conf`. `/etc/hosts` is read either way.
    pub servers: Option<Vec<SocketAddr>>,
    /// How long one query may wait for a server; `None` keeps the system's (or hickory's 5 s).
    /// hickory tries a silent server over UDP, then TCP, so a lookup of one takes about twice
    /// `timeout` per attempt (bounded by the check's own deadline).
    pub timeout: Option<Duration>,
    /// How many times a query is sent before giving up; `None` keeps the system's (or 2).
    pub attempts: Option<usize>,
    /// When the resolver counts as out.
    pub outage: OutageRule,
}

/// Why a resolver could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    /// `servers` was given, but empty.
    #[error("the resolver needs at least one server")]
    NoServers,
    /// `attempts` was zero.
    #[error("attempts must be at least 1")]
    ZeroAttempts,
    /// `timeout` was zero.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// hickory refused the configuration, or the system's could not be read.
    #[error("cannot set up the resolver: {0}")]
    Setup(String),
}

/// Why a name did not resolve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// An answer: the name does not exist, or has no address. Never worked around.
    #[error("{name} does not resolve: {detail}")]
    NotFound {
        /// The name looked up.
        name: Arc<str>,
        /// What the answer said.
        detail: String,
    },
    /// Resolver trouble, and no answer younger than `dns_stale_for` to fall back on.
    #[error("{0}")]
    Trouble(DnsTrouble),
}

/// A successful lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The addresses, in the resolver's order; never empty.
    pub addrs: Arc<[IpAddr]>,
    /// Set when these are the name's last good answer, used because of resolver trouble.
    pub stale: Option<DnsTrouble>,
}

/// The resolver's standing, as [`Resolver::health`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverHealth {
    /// Whether the resolver works; `false` during an outage.
    pub up: bool,
    /// Distinct names looked up within the rule's window.
    pub names: usize,
    /// Of them, those whose latest lookup failed with trouble.
    pub troubled: usize,
    /// Outages since the resolver was made.
    pub outages: u64,
    /// When the current outage started (wall clock).
    pub since: Option<SystemTime>,
    /// The latest trouble seen, e.g. "request timed out".
    pub last_error: Option<String>,
}

/// The shared resolver; see the module docs. Cheap to share behind an [`Arc`].
pub struct Resolver {
    inner: RwLock<Arc<TokioResolver>>,
    rule: RwLock<OutageRule>,
    /// The hosts file, to leave names it answers out of the outage count.
    hosts: Arc<Hosts>,
    answers: Mutex<Answers>,
    tracker: Mutex<Tracker>,
    /// Whether an outage is on: read on every `dns` failure, so one atomic load.
    out: AtomicBool,
    /// Whether one may be starting (see [`Resolver::outage_possible`]).
    undecided: AtomicBool,
    up_gauge: metrics::Gauge,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("out", &self.out.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// The host's configuration: `/etc/resolv.conf` and `/etc/hosts`. When `resolv.conf` cannot
    /// be read, a resolver with no server (the hosts file only) is made, and the reason logged:
    /// every other name then fails as resolver trouble, which the targets will show.
    pub fn system() -> Self {
        match Self::new(ResolverConfig::default()) {
            Ok(resolver) => resolver,
            Err(e) => {
                tracing::warn!(error = %e, "no system resolver configuration: only /etc/hosts resolves");
                let builder = TokioResolver::builder_with_config(
                    HickoryConfig::from_parts(None, Vec::new(), Vec::new()),
                    TokioRuntimeProvider::default(),
                );
                let inner = builder
                    .build()
                    .unwrap_or_else(|_| unreachable!("an empty configuration builds"));
                Self::from_parts(inner, OutageRule::default())
            }
        }
    }

    /// A resolver as `config` says.
    ///
    /// # Errors
    /// [`ResolverError`] for an empty server list, a zero timeout or attempt count, or a
    /// system configuration that cannot be read.
    pub fn new(config: ResolverConfig) -> Result<Self, ResolverError> {
        let inner = build(&config)?;
        Ok(Self::from_parts(inner, config.outage))
    }

    fn from_parts(inner: TokioResolver, rule: OutageRule) -> Self {
        let up_gauge = metrics::gauge!("probe_resolver_up");
        up_gauge.set(1.0);
        Self {
            inner: RwLock::new(Arc::new(inner)),
            rule: RwLock::new(rule),
            hosts: Arc::new(Hosts::from_system().unwrap_or_default()),
            answers: Mutex::default(),
            tracker: Mutex::new(Tracker::default()),
            out: AtomicBool::new(false),
            undecided: AtomicBool::new(false),
            up_gauge,
        }
    }

    /// Switches to `config` (a reloaded configuration), keeping the last good answers and the
    /// outage record.
    ///
    /// # Errors
    /// As [`Resolver::new`]; the resolver is unchanged then.
    pub fn reconfigure(&self, config: &ResolverConfig) -> Result<(), ResolverError> {
        let inner = build(config)?;
        *self.inner.write() = Arc::new(inner);
        *self.rule.write() = config.outage;
        Ok(())
    }

    /// Whether the resolver is out (see the module docs): one atomic load.
    pub fn is_out(&self) -> bool {
        self.out.load(Ordering::Acquire)
    }

    /// Whether the resolver is out, or may be and does not know yet: the outage rule holds if
    /// every name not looked up since the latest one went into trouble fails too. While one
    /// forms, the names' lookups fail one by one, a probe interval apart at worst; a target that
    /// fails fast (its fast interval is shorter) would otherwise take its failures before the
    /// rule has seen enough names. It is decided once the other names were looked up again,
    /// within their interval, so a broken zone's failures wait that long at most.
    pub fn outage_possible(&self) -> bool {
        self.is_out() || self.undecided.load(Ordering::Acquire)
    }

    /// The resolver's standing now.
    pub fn health(&self) -> ResolverHealth {
        let rule = *self.rule.read();
        let mut tracker = self.tracker.lock();
        self.settle(&mut tracker, Instant::now(), &rule, true);
        ResolverHealth {
            up: !tracker.out,
            names: tracker.names.len(),
            troubled: tracker.troubled,
            outages: tracker.outages,
            since: tracker.since,
            last_error: tracker.last_error.clone(),
        }
    }

    /// Looks `host` up, by `deadline`, falling back on its last good answer when it is younger
    /// than `stale_for` and the resolver has trouble (see the module docs).
    ///
    /// # Errors
    /// [`LookupError::NotFound`] for an answer without addresses, [`LookupError::Trouble`] for
    /// trouble without a stale answer to use (including running out of time).
    pub async fn lookup(
        &self,
        host: &str,
        deadline: Instant,
        stale_for: Duration,
    ) -> Result<Resolved, LookupError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Resolved {
                addrs: Arc::from([ip]),
                stale: None,
            });
        }
        let name: Arc<str> = Arc::from(host);
        let parsed = match Name::from_utf8(host) {
            Ok(parsed) => parsed,
            // Not a name any server could answer for: the declaration's fault.
            Err(e) => {
                return Err(LookupError::NotFound {
                    name,
                    detail: format!("not a valid name: {e}"),
                });
            }
        };
        let counted = !self.is_static(host, &parsed);
        let started = Instant::now();
        let fallback = self.fallback(&name, started, stale_for);
        // With a fallback at hand, half the remaining time stays for the connection.
        let lookup_deadline = match fallback {
            Some(_) => started + deadline.saturating_duration_since(started) / 2,
            None => deadline,
        };
        let inner = Arc::clone(&self.inner.read());
        let outcome = timeout_at(lookup_deadline, inner.lookup_ip(parsed)).await;
        let now = Instant::now();
        let error = match outcome {
            Err(_) => "no answer in time".to_owned(),
            Ok(Ok(found)) => {
                let addrs: Arc<[IpAddr]> = found.iter().collect();
                if counted {
                    self.observe(&name, None, now);
                }
                if addrs.is_empty() {
                    self.forget(&name);
                    return Err(LookupError::NotFound {
                        name,
                        detail: "no addresses".into(),
                    });
                }
                self.remember(&name, &addrs, now, stale_for);
                return Ok(Resolved { addrs, stale: None });
            }
            // An answer without addresses: NXDOMAIN, or NODATA (NOERROR, no records). Any
            // other code with it (SERVFAIL) is trouble, below.
            Ok(Err(NetError::Dns(DnsError::NoRecordsFound(none))))
                if matches!(
                    none.response_code,
                    ResponseCode::NXDomain | ResponseCode::NoError
                ) =>
            {
                // An answer, and the freshest one: any older answer is void.
                if counted {
                    self.observe(&name, None, now);
                }
                self.forget(&name);
                let detail = if none.response_code == ResponseCode::NXDomain {
                    "no such name (NXDOMAIN)".to_owned()
                } else {
                    "no address records".to_owned()
                };
                return Err(LookupError::NotFound { name, detail });
            }
            Ok(Err(e)) => describe(&e),
        };
        if counted {
            self.observe(&name, Some(&error), now);
        }
        match fallback {
            Some((addrs, at)) => Ok(Resolved {
                addrs,
                stale: Some(DnsTrouble {
                    name,
                    error,
                    stale_answer_age: Some(now.saturating_duration_since(at)),
                }),
            }),
            None => Err(LookupError::Trouble(DnsTrouble {
                name,
                error,
                stale_answer_age: None,
            })),
        }
    }

    /// Whether `name` is answered without a query: the hosts file, or `localhost`.
    fn is_static(&self, host: &str, name: &Name) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        host == "localhost"
            || host.ends_with(".localhost")
            || [RecordType::A, RecordType::AAAA].into_iter().any(|kind| {
                self.hosts
                    .lookup_static_host(&Query::query(name.clone(), kind))
                    .is_some()
            })
    }

    fn fallback(
        &self,
        name: &str,
        now: Instant,
        stale_for: Duration,
    ) -> Option<(Arc<[IpAddr]>, Instant)> {
        if stale_for.is_zero() {
            return None;
        }
        let answers = self.answers.lock();
        let good = answers.by_name.get(name)?;
        (now.saturating_duration_since(good.at) <= stale_for).then(|| (good.addrs.clone(), good.at))
    }

    /// Keeps `addrs` as the name's last good answer. Targets sharing a name may keep it for
    /// different times: the entry lasts for the longest, and any target's lookup refreshes it.
    fn remember(&self, name: &Arc<str>, addrs: &Arc<[IpAddr]>, now: Instant, keep: Duration) {
        let mut answers = self.answers.lock();
        let keep = match answers.by_name.get(name) {
            Some(known) => known.keep.max(keep),
            None if keep.is_zero() => return,
            None => keep,
        };
        answers.by_name.insert(
            name.clone(),
            Good {
                addrs: addrs.clone(),
                at: now,
                keep,
            },
        );
        answers.prune(now);
    }

    fn forget(&self, name: &str) {
        self.answers.lock().by_name.remove(name);
    }

    /// Books one lookup's result (`trouble` is its error) and moves the outage state.
    fn observe(&self, name: &Arc<str>, trouble: Option<&str>, now: Instant) {
        let rule = *self.rule.read();
        let mut tracker = self.tracker.lock();
        tracker.book(name, trouble.is_some(), now);
        if let Some(error) = trouble {
            tracker.last_error = Some(error.to_owned());
        }
        self.settle(&mut tracker, now, &rule, false);
    }

    /// Sweeps names out of the window (at most once a second, unless `force`) and starts or
    /// ends an outage as the rule says.
    fn settle(&self, tracker: &mut Tracker, now: Instant, rule: &OutageRule, force: bool) {
        if force
            || tracker
                .swept
                .is_none_or(|at| now.saturating_duration_since(at) >= SWEEP)
        {
            tracker.sweep(now, rule.window);
        }
        let names = tracker.names.len();
        self.undecided
            .store(tracker.possibly_out(rule), Ordering::Release);
        let out = tracker.out(rule);
        if out == tracker.out {
            return;
        }
        tracker.out = out;
        self.out.store(out, Ordering::Release);
        self.up_gauge.set(if out { 0.0 } else { 1.0 });
        let troubled = tracker.troubled;
        if out {
            tracker.outages += 1;
            tracker.since = Some(SystemTime::now());
            metrics::counter!("probe_resolver_outages_total").increment(1);
            tracing::warn!(
                names,
                troubled,
                error = tracker.last_error.as_deref().unwrap_or(""),
                "the resolver is failing for most names: DNS failures are not counted against targets"
            );
        } else {
            tracker.since = None;
            tracing::info!(names, troubled, "the resolver answers again");
        }
    }
}

/// How often the outage window is swept at most.
const SWEEP: Duration = Duration::from_secs(1);

fn build(config: &ResolverConfig) -> Result<TokioResolver, ResolverError> {
    if config.attempts == Some(0) {
        return Err(ResolverError::ZeroAttempts);
    }
    if config.timeout.is_some_and(|t| t.is_zero()) {
        return Err(ResolverError::ZeroTimeout);
    }
    let provider = TokioRuntimeProvider::default();
    let mut builder = match &config.servers {
        None => {
            TokioResolver::builder(provider).map_err(|e| ResolverError::Setup(e.to_string()))?
        }
        Some(servers) if servers.is_empty() => return Err(ResolverError::NoServers),
        Some(servers) => {
            let servers = servers
                .iter()
                .map(|addr| {
                    let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                    for connection in &mut server.connections {
                        connection.port = addr.port();
                    }
                    server
                })
                .collect();
            let builder = TokioResolver::builder_with_config(
                HickoryConfig::from_parts(None, Vec::new(), servers),
                provider,
            );
            builder.with_options(ResolverOpts::default())
        }
    };
    let options = builder.options_mut();
    options.use_hosts_file = ResolveHosts::Auto;
    if let Some(timeout) = config.timeout {
        options.timeout = timeout;
    }
    if let Some(attempts) = config.attempts {
        options.attempts = attempts;
    }
    builder
        .build()
        .map_err(|e| ResolverError::Setup(e.to_string()))
}

/// A short account of resolver trouble.
fn describe(e: &NetError) -> String {
    match e {
        NetError::Timeout => "request timed out".to_owned(),
        NetError::NoConnections => "no connection to any server".to_owned(),
        NetError::Dns(DnsError::ResponseCode(code)) => format!("server answered {code}"),
        other => other.to_string(),
    }
}

/// The last good answer of a name.
struct Good {
    addrs: Arc<[IpAddr]>,
    at: Instant,
    /// The longest `dns_stale_for` it was kept for; it is dropped once older.
    keep: Duration,
}

#[derive(Default)]
struct Answers {
    by_name: HashMap<Arc<str>, Good>,
    /// The size after the last prune: the next one waits until it doubles.
    pruned_at: usize,
}

impl Answers {
    /// Drops answers older than they were kept for, when the map has doubled since last time:
    /// linear work at most once per doubling.
    fn prune(&mut self, now: Instant) {
        if self.by_name.len() < (2 * self.pruned_at).max(1024) {
            return;
        }
        self.by_name
            .retain(|_, good| now.saturating_duration_since(good.at) <= good.keep);
        self.pruned_at = self.by_name.len();
    }
}

/// The latest result of each name looked up within the window.
#[derive(Default)]
struct Tracker {
    names: HashMap<Arc<str>, Entry>,
    troubled: usize,
    /// Bumped each time a name goes into trouble: the names looked up since (in this epoch)
    /// are the ones known to answer *now*.
    epoch: u64,
    /// Names of the current epoch whose lookup succeeded.
    fresh_ok: usize,
    swept: Option<Instant>,
    out: bool,
    outages: u64,
    since: Option<SystemTime>,
    last_error: Option<String>,
}

/// One name's latest lookup.
#[derive(Clone, Copy)]
struct Entry {
    /// When it ended.
    at: Instant,
    /// Whether it failed with trouble.
    trouble: bool,
    /// The tracker's epoch then.
    epoch: u64,
}

impl Tracker {
    fn book(&mut self, name: &Arc<str>, trouble: bool, now: Instant) {
        let previous = self.names.get(name).copied();
        if previous.is_none_or(|p| !p.trouble) && trouble {
            // A name newly in trouble: which others still answer is known again only once
            // they are looked up again.
            self.epoch += 1;
            self.fresh_ok = 0;
        }
        if let Some(p) = previous {
            self.troubled -= usize::from(p.trouble);
            self.fresh_ok -= usize::from(!p.trouble && p.epoch == self.epoch);
        }
        self.troubled += usize::from(trouble);
        self.fresh_ok += usize::from(!trouble);
        self.names.insert(
            name.clone(),
            Entry {
                at: now,
                trouble,
                epoch: self.epoch,
            },
        );
    }

    fn sweep(&mut self, now: Instant, window: Duration) {
        self.names
            .retain(|_, e| now.saturating_duration_since(e.at) <= window);
        self.troubled = self.names.values().filter(|e| e.trouble).count();
        self.fresh_ok = self
            .names
            .values()
            .filter(|e| !e.trouble && e.epoch == self.epoch)
            .count();
        self.swept = Some(now);
    }

    /// Whether the rule holds on what is known.
    fn out(&self, rule: &OutageRule) -> bool {
        let names = self.names.len();
        names >= rule.min_names.max(1) && self.troubled * 2 > names
    }

    /// Whether the rule could hold: counting every name not seen to answer since the latest
    /// name went into trouble as failing too.
    fn possibly_out(&self, rule: &OutageRule) -> bool {
        let names = self.names.len();
        names >= rule.min_names.max(1) && (names - self.fresh_ok) * 2 > names
    }
}

/// The resolver as one target sees it: the shared [`Resolver`] and the target's
/// `dns_stale_for`. What probes are built with (`tiers::build`).
#[derive(Clone, Debug)]
pub struct Names {
    resolver: Arc<Resolver>,
    stale_for: Duration,
    /// Every name "resolves" to this address, without a lookup: a per-address probe's view
    /// (see `tier::addresses`).
    pinned: Option<IpAddr>,
}

impl Names {
    /// Looks names up through `resolver`, falling back on answers up to `stale_for` old.
    pub fn new(resolver: Arc<Resolver>, stale_for: Duration) -> Self {
        Self {
            resolver,
            stale_for,
            pinned: None,
        }
    }

    /// The same resolver, but every name answers `ip` and nothing is looked up: for a probe of
    /// one of a name's addresses, which connects there and keeps the name for the rest (SNI,
    /// `Host`).
    pub fn pinned(&self, ip: IpAddr) -> Self {
        Self {
            pinned: Some(ip),
            ..self.clone()
        }
    }

    /// A fresh system resolver of its own ([`Resolver::system`]) with the default
    /// `dns_stale_for`: for a probe used outside an engine.
    pub fn system() -> Self {
        Self::new(Arc::new(Resolver::system()), DEFAULT_STALE_FOR)
    }

    /// The shared resolver.
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }

    /// How old a last good answer may be and still be used.
    pub fn stale_for(&self) -> Duration {
        self.stale_for
    }

    /// [`Resolver::lookup`] with this target's `dns_stale_for`.
    ///
    /// # Errors
    /// As [`Resolver::lookup`].
    pub async fn lookup(&self, host: &str, deadline: Instant) -> Result<Resolved, LookupError> {
        if let Some(ip) = self.pinned {
            return Ok(Resolved {
                addrs: Arc::new([ip]),
                stale: None,
            });
        }
        self.resolver.lookup(host, deadline, self.stale_for).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_counts_each_name_once_by_its_latest_result() {
        let mut t = Tracker::default();
        let now = Instant::now();
        let a: Arc<str> = "a".into();
        t.book(&a, true, now);
        t.book(&a, true, now);
        assert_eq!((t.names.len(), t.troubled), (1, 1));
        t.book(&a, false, now);
        assert_eq!((t.names.len(), t.troubled), (1, 0));
        t.book(&"b".into(), true, now);
        t.sweep(now + Duration::from_secs(61), Duration::from_secs(60));
        assert_eq!((t.names.len(), t.troubled), (0, 0));
    }

    #[test]
    fn an_outage_is_possible_until_the_other_names_answer_again() {
        let rule = OutageRule::default();
        let mut t = Tracker::default();
        let now = Instant::now();
        let names: Vec<Arc<str>> = ["a", "b", "c", "x"].map(Arc::from).to_vec();
        for name in &names {
            t.book(name, false, now);
        }
        assert!(!t.possibly_out(&rule));
        // One name fails: the others are not known to answer now.
        t.book(&names[3], true, now);
        assert!(t.possibly_out(&rule) && !t.out(&rule));
        t.book(&names[0], false, now);
        assert!(t.possibly_out(&rule));
        t.book(&names[1], false, now);
        // Two of four seen to answer: the failing ones cannot be more than half.
        assert!(!t.possibly_out(&rule));
        // The broken one failing again changes nothing; another name failing does.
        t.book(&names[3], true, now);
        assert!(!t.possibly_out(&rule));
        t.book(&names[2], true, now);
        assert!(t.possibly_out(&rule) && !t.out(&rule));
        t.book(&names[0], true, now);
        assert!(t.out(&rule));
    }
}
