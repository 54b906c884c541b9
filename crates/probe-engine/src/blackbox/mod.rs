//! blackbox_exporter's `blackbox.yml`, read as it is: every module validated into a [`Module`]
//! that, for a target as the exporter's `/probe?target=` takes it, becomes one entry of our probes
//! YAML ([`Entry`]) and the library's [`ProbeSpec`]. The ground for `import blackbox` and for a
//! `GET /probe` that answers the exporter's queries.
//!
//! # One path
//!
//! A module and a target become an [`Entry`] (our YAML, as `config` reads it), and the spec is
//! that entry compiled by the daemon's own compiler ([`Entry::compile`], through
//! [`probe_config::parse_entry`]). Rendering a spec back to YAML would need a second mapping
//! for every type the library has (and some, a CA bundle read from a file, cannot go back); this
//! way the mapping from the exporter's options to ours is written once, and what `import`
//! prints is exactly what the daemon runs.
//!
//! # What loading says
//!
//! - An input the exporter itself would refuse (YAML errors, an unknown key, with did-you-mean,
//!   a wrong type, an unknown prober, a bad regex or duration, a missing `query_name`) is an
//!   error: [`load`] returns every one, located (`file:line:col`), as the config loader does.
//! - A valid module with an option our probes have no equivalent for is *refused*: its
//!   [`ModuleEntry::module`] holds the located refusals, each naming the option and why, and the
//!   other modules load. The `unix` and `websocket` probers are refused so, by name.
//! - A module and a target that cannot be expressed together (a DNS server given by name, an
//!   IPv6-only module with an IPv4 target) are refused per target by [`Module::entry`].
//!
//! # The exporter's defaults
//!
//! They differ from ours, and a module keeps the exporter's: `http` follows redirects (up to 5
//! here; Go follows 10) and accepts `2xx` unless `valid_status_codes` says otherwise; DNS asks
//! for `ANY` with recursion desired and accepts `NOERROR` with any answers (`min_answers: 0`);
//! ICMP sends one echo; `preferred_ip_protocol: ip6` with `ip_protocol_fallback: true`. With the
//! fallback (the default) we connect as our probes do, to the first of the name's addresses that
//! accepts, where the exporter takes the preferred family's first; without it the exporter uses
//! that family only, which we express for a target given as an address of that family and
//! refuse for a name.
//!
//! The timeout is the exporter's: the module's `timeout` when it is under the scrape timeout
//! less the exporter's 0.5 s offset, else that; the scrape timeout is the job's
//! (`scrape_timeout`, [`Schedule`]) or Prometheus' default of 10 s. The interval is the job's
//! `scrape_interval` (Prometheus' default: 1 m).
//!
//! # Layout
//!
//! `raw` is the file's schema; `http`, `tcp`, `dns`, `icmp` and `grpc` each validate their
//! prober's section into its template (our section without its target), and each template fills
//! template in for one target, with `target`'s reading of `HOST:PORT` and of the address family;
//! `entry` is our YAML's shape and its compilation; `duration` reads Go's durations.

mod dns;
pub(crate) mod duration;
mod entry;
mod grpc;
mod http;
mod icmp;
mod raw;
mod target;
mod tcp;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use entry::Entry;
use probe::tier::ProbeSpec;
use raw::{RawFile, RawModule, RawTlsConfig};

use probe_config::ConfigErrors;
use probe_config::yaml::{
    Kind, Node, Pos, Sp, collect, did_you_mean, file_error, located, quote, read_file,
    syntax_error, value_of, yaml_options,
};

/// The exporter subtracts this from the scrape timeout (its `--timeout-offset` default).
pub const TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

/// The probers a module may name, as the exporter knows them.
const PROBERS: &[&str] = &["http", "tcp", "dns", "icmp", "grpc", "unix", "websocket"];

/// A loaded `blackbox.yml`.
#[derive(Debug)]
pub struct Blackbox {
    /// The file it was read from: where its errors point, and relative paths start.
    pub file: PathBuf,
    /// Its modules, in the file's order.
    pub modules: Vec<ModuleEntry>,
}

impl Blackbox {
    /// The module named `name`, if the file has one.
    pub fn module(&self, name: &str) -> Option<&ModuleEntry> {
        self.modules.iter().find(|m| m.name == name)
    }
}

/// One module of the file: valid and ours to run, or refused.
#[derive(Debug)]
pub struct ModuleEntry {
    /// Its name, the key under `modules`.
    pub name: String,
    /// The module, or why we cannot run it: every refused option, located and named.
    pub module: Result<Module, ConfigErrors>,
}

/// The prober a module uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prober {
    /// `http`: the target is a URL (`http://` is assumed without a scheme).
    Http,
    /// `tcp`: the target is `HOST:PORT`.
    Tcp,
    /// `dns`: the target is the server, `HOST[:PORT]` (port 53).
    Dns,
    /// `icmp`: the target is a host.
    Icmp,
    /// `grpc`: the target is `[http[s]://]HOST[:PORT]`.
    Grpc,
}

impl Prober {
    /// The prober's name in a `blackbox.yml`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Tcp => "tcp",
            Self::Dns => "dns",
            Self::Icmp => "icmp",
            Self::Grpc => "grpc",
        }
    }
}

/// The address family a module prefers, and whether it may use the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpProtocol {
    /// `preferred_ip_protocol`: `true` for `ip6` (the default), `false` for `ip4`.
    pub ip6: bool,
    /// `ip_protocol_fallback`, default `true`.
    pub fallback: bool,
}

impl Default for IpProtocol {
    /// The exporter's: IPv6 preferred, IPv4 allowed.
    fn default() -> Self {
        Self {
            ip6: true,
            fallback: true,
        }
    }
}

/// What a scrape job says about time: how often it scrapes and how long it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// `scrape_interval`: our interval.
    pub interval: Duration,
    /// `scrape_timeout`: the exporter's timeout is under it.
    pub scrape_timeout: Duration,
}

impl Default for Schedule {
    /// Prometheus' defaults: every minute, 10 s to answer.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(60),
            scrape_timeout: Duration::from_secs(10),
        }
    }
}

/// A module we can run, validated; [`Module::entry`] gives it a target.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// Its name.
    pub name: String,
    /// Its prober.
    pub prober: Prober,
    /// `timeout`, when set (and not zero).
    pub timeout: Option<Duration>,
    /// Its address family.
    pub ip: IpProtocol,
    template: Template,
}

/// A module's section in our terms, without its target.
#[derive(Clone, Debug, PartialEq)]
enum Template {
    Http(http::Template),
    Tcp(tcp::Template),
    Dns(dns::Template),
    Icmp(icmp::Template),
    Grpc(grpc::Template),
}

impl Module {
    /// The timeout of a probe under `scrape_timeout`, as the exporter computes it.
    ///
    /// # Errors
    /// When it leaves no time: a scrape timeout within the offset and no module timeout.
    pub fn timeout_within(&self, scrape_timeout: Duration) -> Result<Duration, String> {
        let max = scrape_timeout
            .checked_sub(TIMEOUT_OFFSET)
            .filter(|d| !d.is_zero());
        match (self.timeout, max) {
            (Some(own), Some(max)) if own < max => Ok(own),
            (_, Some(max)) => Ok(max),
            (Some(own), None) => Ok(own),
            (None, None) => Err(format!(
                "the scrape timeout ({}) leaves nothing after the exporter's {} offset",
                humantime::format_duration(scrape_timeout),
                humantime::format_duration(TIMEOUT_OFFSET)
            )),
        }
    }

    /// Our probes YAML's entry for `target` under `id`, scheduled as `schedule` says.
    ///
    /// # Errors
    /// Why this target cannot be expressed with this module, in words.
    pub fn entry(&self, target: &str, id: &str, schedule: Schedule) -> Result<Entry, String> {
        let timeout = self.timeout_within(schedule.scrape_timeout)?;
        if timeout >= schedule.interval {
            return Err(format!(
                "its timeout ({}) is not under the scrape interval ({}), which our schedule needs",
                humantime::format_duration(timeout),
                humantime::format_duration(schedule.interval)
            ));
        }
        let probe = match &self.template {
            Template::Http(t) => t.probe(target, self.ip)?,
            Template::Tcp(t) => t.probe(target, self.ip)?,
            Template::Dns(t) => t.probe(target, self.ip)?,
            Template::Icmp(t) => t.probe(target, self.ip)?,
            Template::Grpc(t) => t.probe(target, self.ip)?,
        };
        Ok(Entry {
            id: id.to_owned(),
            probe,
            interval: entry::duration_text(schedule.interval),
            timeout: entry::duration_text(timeout),
        })
    }

    /// `Ok` when the module compiles for a target of its prober's form, or cannot take that
    /// target at all (refused per target): the loader's last check, so that a module it accepts
    /// is never one whose every entry the compiler would refuse (a value the exporter takes and
    /// our sections do not, such as a server name with a space).
    fn compiles(&self, dir: &Path) -> Result<(), String> {
        let target = match self.prober {
            Prober::Http => "http://127.0.0.1:8080/health",
            Prober::Tcp | Prober::Grpc => "127.0.0.1:443",
            Prober::Dns | Prober::Icmp => "127.0.0.1",
        };
        match self.entry(target, "check", Schedule::default()) {
            Ok(entry) => entry.compile(dir).map(drop).map_err(|why| {
                format!(
                    "the module cannot run here: our probe refuses it: {}",
                    probe_config::yaml::one_line(&why)
                )
            }),
            Err(_) => Ok(()),
        }
    }

    /// The library's spec for `target`: [`Module::entry`] compiled by the config compiler,
    /// with relative paths from `dir`.
    ///
    /// # Errors
    /// As [`Module::entry`], or what the compiler refused.
    pub fn spec(&self, target: &str, schedule: Schedule, dir: &Path) -> Result<ProbeSpec, String> {
        let entry = self.entry(target, "blackbox", schedule)?;
        Ok(entry.compile(dir)?.probe)
    }
}

/// Loads a `blackbox.yml`.
///
/// # Errors
/// Every problem the exporter would refuse the file for, located; refused options are not
/// errors (see the module docs).
pub fn load(path: &Path) -> Result<Blackbox, ConfigErrors> {
    let text = read_file(path).map_err(|message| file_error(path, message))?;
    parse(path, &text)
}

/// Parses a `blackbox.yml` held in memory; `file` names it in errors and anchors relative paths.
///
/// # Errors
/// As [`load`].
pub fn parse(file: &Path, text: &str) -> Result<Blackbox, ConfigErrors> {
    let place = |diags: Vec<(Pos, String)>| located(file, diags);
    // The exporter reads a `!!binary` scalar into a string as its bytes; the tree keeps such a
    // scalar as its base64 text, and the sections that take one (`send`) refuse it by its tag.
    let mut options = yaml_options();
    options.ignore_binary_tag_for_string = true;
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, options) {
        Ok(Some(root)) if !matches!(root.kind, Kind::Null) => root,
        Ok(_) => {
            return Ok(Blackbox {
                file: file.to_path_buf(),
                modules: Vec::new(),
            });
        }
        Err(e) => return Err(place(vec![syntax_error(&e)])),
    };
    let (_, mut invalid) = collect::<RawFile>(&root, text);
    let dir = file.parent().unwrap_or(Path::new(""));
    let mut modules = Vec::new();
    match value_of(&root, text, "modules") {
        None => {}
        Some(Node {
            kind: Kind::Map(entries),
            ..
        }) => {
            let mut names = std::collections::HashSet::new();
            for (key, node) in entries {
                let name = key.text(text).unwrap_or_default().to_owned();
                if !names.insert(name.clone()) {
                    invalid.push((key.pos, format!("module {} is defined twice", quote(&name))));
                    continue;
                }
                let mut check = Check {
                    dir,
                    text,
                    invalid: Vec::new(),
                    refused: Vec::new(),
                };
                let module = module(&name, key.pos, node, text, &mut check);
                invalid.append(&mut check.invalid);
                if let Some(found) = &module
                    && check.refused.is_empty()
                    && let Err(why) = found.compiles(dir)
                {
                    check.refused.push((key.pos, why));
                }
                let module = match module {
                    Some(module) if check.refused.is_empty() => Ok(module),
                    _ => Err(place(check.refused)),
                };
                modules.push(ModuleEntry { name, module });
            }
        }
        Some(other) => invalid.push((
            other.pos,
            "\"modules\" must be a mapping of names to modules".to_owned(),
        )),
    }
    if !invalid.is_empty() {
        return Err(place(invalid));
    }
    Ok(Blackbox {
        file: file.to_path_buf(),
        modules,
    })
}

/// What validating one module found: errors (the input is wrong) and refusals (it is right,
/// and we cannot run it).
struct Check<'a> {
    /// Where relative paths start: the file's directory.
    dir: &'a Path,
    /// The file's text, for what the tree does not keep (a scalar's tag).
    text: &'a str,
    invalid: Vec<(Pos, String)>,
    refused: Vec<(Pos, String)>,
}

impl Check<'_> {
    /// Refuses `option`, set at `key`, for `why`.
    fn refuse(&mut self, key: Pos, option: &str, why: &str) {
        self.refused
            .push((key, format!("{option:?} is not supported: {why}")));
    }

    /// Refuses each option of `options` that is set.
    fn refuse_set<T>(&mut self, options: &[(&Option<Sp<T>>, &str)], why: &str) {
        for (value, name) in options {
            if let Some(value) = value {
                self.refuse(value.key, name, why);
            }
        }
    }

    /// Whether the value at `pos` is tagged `!!binary`.
    fn binary(&self, pos: Pos) -> bool {
        let line = usize::try_from(pos.line)
            .ok()
            .and_then(|l| l.checked_sub(1));
        let column = usize::try_from(pos.column)
            .ok()
            .and_then(|c| c.checked_sub(1));
        let (Some(line), Some(column)) = (line, column) else {
            return false;
        };
        // The position is the scalar's, after its tag (or the tag's own).
        let tags = ["!!binary", "!<tag:yaml.org,2002:binary>"];
        self.text.lines().nth(line).is_some_and(|text| {
            let before: String = text.chars().take(column).collect();
            let at: String = text.chars().skip(column).collect();
            tags.iter()
                .any(|tag| before.trim_end().ends_with(tag) || at.starts_with(tag))
        })
    }

    /// An error in the input at `pos`.
    fn error(&mut self, pos: Pos, message: String) {
        self.invalid.push((pos, message));
    }
}

/// Validates one module; `None` when it was invalid or refused (its problems are in `check`).
fn module(name: &str, key: Pos, node: &Node, text: &str, check: &mut Check<'_>) -> Option<Module> {
    let (raw, structural) = collect::<RawModule>(node, text);
    let clean = structural.is_empty();
    check.invalid.extend(structural);
    let raw = raw?;
    let timeout = raw
        .timeout
        .as_ref()
        .and_then(|t| match duration::parse(&t.value) {
            Ok(d) => Some(d),
            Err(why) => {
                check.error(
                    t.pos,
                    format!(
                        "invalid duration {} for \"timeout\": {why}",
                        quote(&t.value)
                    ),
                );
                None
            }
        });
    let Some(prober) = &raw.prober else {
        if clean {
            check.error(key, format!("module {} has no \"prober\"", quote(name)));
        }
        return None;
    };
    let (ip, template) = match prober.value.as_str() {
        "http" => wrap(http::template(raw.http, check), Template::Http),
        "tcp" => wrap(tcp::template(raw.tcp, check), Template::Tcp),
        "dns" => match raw.dns {
            Some(dns) => wrap(dns::template(dns, check), Template::Dns),
            None => {
                check.error(
                    prober.pos,
                    "query name must be set for DNS module: add a \"dns\" section with \"query_name\""
                        .to_owned(),
                );
                return None;
            }
        },
        "icmp" => wrap(icmp::template(raw.icmp, check), Template::Icmp),
        "grpc" => wrap(grpc::template(raw.grpc, check), Template::Grpc),
        "unix" | "websocket" => {
            check.refuse(
                prober.pos,
                &format!("prober: {}", prober.value),
                "our probes have no such kind",
            );
            return None;
        }
        other => {
            let hint = match did_you_mean(other, PROBERS.iter().copied()) {
                Some(best) => format!(", did you mean {best:?}?"),
                None => format!("; expected one of {}", PROBERS.join(", ")),
            };
            check.error(
                prober.pos,
                format!("prober {} is not valid{hint}", quote(other)),
            );
            return None;
        }
    };
    let timeout = match (raw.timeout.is_some(), timeout) {
        (true, None) => return None,
        (_, timeout) => timeout.filter(|t| !t.is_zero()),
    };
    Some(Module {
        name: name.to_owned(),
        prober: match template {
            Template::Http(_) => Prober::Http,
            Template::Tcp(_) => Prober::Tcp,
            Template::Dns(_) => Prober::Dns,
            Template::Icmp(_) => Prober::Icmp,
            Template::Grpc(_) => Prober::Grpc,
        },
        timeout,
        ip,
        template,
    })
}

/// A prober's template under its variant.
fn wrap<T>((ip, template): (IpProtocol, T), variant: fn(T) -> Template) -> (IpProtocol, Template) {
    (ip, variant(template))
}

/// `preferred_ip_protocol` and `ip_protocol_fallback`, shared by every prober.
fn ip_protocol(
    preferred: Option<&Sp<String>>,
    fallback: Option<&Sp<bool>>,
    check: &mut Check<'_>,
) -> IpProtocol {
    let ip6 = match preferred.map(|p| p.value.trim()) {
        None | Some("" | "ip6" | "ipv6") => true,
        Some("ip4" | "ipv4") => false,
        Some(other) => {
            // The exporter reads anything else as ip6.
            let at = preferred.map_or(Pos::NONE, |p| p.pos);
            check.error(
                at,
                format!(
                    "unknown preferred_ip_protocol {}; expected ip4 or ip6",
                    quote(other)
                ),
            );
            true
        }
    };
    IpProtocol {
        ip6,
        fallback: fallback.is_none_or(|f| f.value),
    }
}

/// A `tls_config`: the trust we can express, its `server_name`, and refusals of the rest.
fn tls_config(
    raw: Option<Sp<RawTlsConfig>>,
    check: &mut Check<'_>,
) -> (entry::TlsTrust, Option<(String, Pos)>) {
    let Some(raw) = raw else {
        return (entry::TlsTrust::default(), None);
    };
    let raw = raw.value;
    check.refuse_set(
        &[
            (&raw.cert, "tls_config.cert"),
            (&raw.cert_file, "tls_config.cert_file"),
            (&raw.cert_ref, "tls_config.cert_ref"),
            (&raw.key, "tls_config.key"),
            (&raw.key_file, "tls_config.key_file"),
            (&raw.key_ref, "tls_config.key_ref"),
        ],
        "our probes present no client certificate",
    );
    check.refuse_set(
        &[
            (&raw.ca, "tls_config.ca"),
            (&raw.ca_ref, "tls_config.ca_ref"),
        ],
        "give the CA as a file with \"ca_file\"",
    );
    check.refuse_set(
        &[
            (&raw.min_version, "tls_config.min_version"),
            (&raw.max_version, "tls_config.max_version"),
        ],
        "our probes negotiate TLS 1.2 or 1.3 and cannot pin a version",
    );
    let ca_file = raw.ca_file.map(|ca| {
        let path = check.dir.join(ca.value.trim());
        std::path::absolute(&path)
            .unwrap_or(path)
            .display()
            .to_string()
    });
    let insecure = raw.insecure_skip_verify.is_some_and(|i| i.value);
    let server_name = raw
        .server_name
        .map(|s| (s.value.trim().to_owned(), s.key))
        .filter(|(s, _)| !s.is_empty());
    (
        entry::TlsTrust {
            // Verification is off: a CA would be unused, and our sections refuse both.
            ca_file: ca_file.filter(|_| !insecure),
            insecure_skip_verify: insecure,
        },
        server_name,
    )
}

/// Whether `name: value` is a header our probes can send, checked by the library's own
/// [`RequestHeaders`](probe::tier::http::RequestHeaders); otherwise the problem is reported: an
/// invalid name or value is an error, a header the probe manages itself is refused.
fn header(name: &str, value: &Sp<String>, field: &str, check: &mut Check<'_>) -> bool {
    use probe::tier::http::headers::InvalidHeader;
    match probe::tier::http::RequestHeaders::new().append(name, &value.value) {
        Ok(()) => true,
        Err(InvalidHeader::Managed(_)) => {
            check.refuse(
                value.key,
                &format!("{field}.{name}"),
                "our probes set this header themselves",
            );
            false
        }
        // The message names the header, never its value: values may be secrets.
        Err(e @ InvalidHeader::Name(_)) => {
            check.error(value.key, e.to_string());
            false
        }
        Err(e @ InvalidHeader::Value(_)) => {
            check.error(value.pos, e.to_string());
            false
        }
    }
}

/// The regexes of a list, each compiled (the exporter's are Go's RE2, which Rust's `regex`
/// reads the same for all but a few escapes) and refused at its place when it does not.
fn regexes(raw: raw::Strings, field: &str, check: &mut Check<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for item in raw.map(|r| r.value.0).unwrap_or_default() {
        if probe_config::regex(&item, field, &mut check.invalid).is_ok() {
            out.push(item.value);
        }
    }
    out
}
