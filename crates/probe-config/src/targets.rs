//! Targets and groups: one `targets` item, validated into the library's [`TargetSpec`] (or a
//! group's pool policy) and its graph node, with the file's `defaults` filled in; and
//! [`parse_entry`], the same for one declaration kept outside the files (an etcd value).
//!
//! One function reads an item whatever its kind, so that a file's targets and etcd's are
//! checked by the same code: the id, the kind and the dependencies first (a target's dependents
//! need its id even when the rest is invalid), then the probe, the schedule, passive health and
//! maintenance windows. Each problem is reported at its key or value.

use std::path::Path;
use std::time::Duration;

use probe::graph::{GroupRule, NodeKind};
use probe::health::{MaintenanceWindow, WindowError, WindowStart};
use probe::passive::PoolPolicy;
use probe::tier::ProbeSpec;
use probe::tier::tcp::{CloseMode, TcpSpec};
use probe::topology::Declaration;
use probe::topology::TargetSpec;
use probe::{Address, TargetId};

use crate::schema::{RawTarget, RawTcp, RawWindow};
use crate::sections::alerts::{TargetAlert, target_alert};
use crate::sections::cluster::Votes;
use crate::sections::passive::{self, Passive};
use crate::sections::reply::reply_expect;
use crate::sections::schedule::{Sched, duration_at_most};
use crate::sections::{addresses, dns, graph, grpc, http, icmp, tls, udp};
use crate::yaml::diagnostics::{did_you_mean, one_line, quote};
use crate::yaml::files::{Source, process_env};
use crate::yaml::node::{
    Diags, Kind, Node, Pos, collect, each, syntax_error, value_of, yaml_options,
};

/// The probe kinds a target can have, exactly one of which it must have.
const PROBE_KINDS: &[&str] = &["tcp", "http", "grpc", "tls", "dns", "icmp", "udp"];

/// The longest accepted one-time maintenance window. Daily windows last at most a day.
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// The accepted `close` modes.
const CLOSE_MODES: &[&str] = &["reset", "graceful"];

/// A file's `defaults`, validated field by field.
#[derive(Default)]
pub(crate) struct Defaults {
    pub(crate) sched: Sched,
    pub(crate) passive: Passive,
    pub(crate) votes: Votes,
}

/// A target or group after validation: its id (for duplicate detection, even when the rest is
/// invalid), its spec when it is a valid target, and its graph node when its id, kind and
/// dependencies are valid.
pub(crate) struct ParsedTarget {
    pub(crate) id: Option<(TargetId, Pos)>,
    pub(crate) spec: Option<TargetSpec>,
    pub(crate) node: Option<graph::DeclaredNode>,
    /// A group has no spec, and that is no error.
    pub(crate) group: bool,
    /// A valid group's pool policy, when it is a pool.
    pub(crate) pool: Option<PoolPolicy>,
    /// A group's rule, when it declares one (`state`).
    pub(crate) rule: Option<GroupRule>,
    /// Its `replicas` and `quorum`, with the defaults' filled in.
    pub(crate) votes: Votes,
    /// Its `alert` key, and where it is.
    pub(crate) alert: (TargetAlert, Pos),
}

/// Reads one target declaration kept outside the files, such as an etcd value: a JSON (or
/// YAML) mapping with the schema of one `targets` item. No `defaults` apply: a target has a
/// circuit breaker only with a `circuit_breaker` block of its own, and a group is a pool (its
/// [`Declaration::Group`] has a `pool`) only with an `outlier` block of its own.
///
/// `name` is the entry's name (an etcd key's id): the declaration's `id` must be the same, so a
/// key cannot declare someone else's target. `origin` names the entry in its dependencies'
/// origins (`ORIGIN:LINE:COL`); `dir` anchors relative paths (`tls.ca_file`).
///
/// # Errors
/// Every problem found, as `LINE:COL: message` joined by `; ` (positions within the value).
pub fn parse_entry(
    name: &str,
    origin: &str,
    value: &[u8],
    dir: &Path,
) -> Result<Declaration, String> {
    parse_declared(name, origin, value, dir).map(|d| d.declaration)
}

/// A declaration kept outside the files, with its `alert` key: the alerts' part of it, which
/// the library's [`Declaration`] does not carry.
#[derive(Debug)]
pub struct Declared {
    /// The target or group.
    pub declaration: Declaration,
    /// Its `alert` key, taken over `alerts.defaults` wherever there is an `alerts` section.
    pub alert: TargetAlert,
}

/// [`parse_entry`], with the entry's `alert` key.
///
/// # Errors
/// As [`parse_entry`].
pub fn parse_declared(
    name: &str,
    origin: &str,
    value: &[u8],
    dir: &Path,
) -> Result<Declared, String> {
    let text = std::str::from_utf8(value).map_err(|e| format!("the value is not UTF-8: {e}"))?;
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) if matches!(root.kind, Kind::Map(_)) => root,
        Ok(_) => return Err("expected a JSON object: one target declaration".to_owned()),
        Err(e) => {
            let (pos, message) = syntax_error(&e);
            return Err(format!("{}:{}: {message}", pos.line, pos.column));
        }
    };
    let source = Source {
        dir,
        env: &process_env,
    };
    let mut diags = Vec::new();
    let parsed = parse_target(&root, text, &source, &Defaults::default(), true, &mut diags);
    if let Some((id, pos)) = &parsed.id
        && id.as_str() != name
    {
        diags.push((
            *pos,
            format!(
                "id {} does not match the entry's name {}",
                quote(id.as_str()),
                quote(name)
            ),
        ));
    }
    if !diags.is_empty() {
        diags.sort_by_key(|(pos, _)| *pos);
        let shown: Vec<String> = diags
            .iter()
            .map(|(pos, message)| format!("{}:{}: {}", pos.line, pos.column, one_line(message)))
            .collect();
        return Err(shown.join("; "));
    }
    let node = parsed
        .node
        .ok_or_else(|| "the declaration could not be read".to_owned())?;
    let depends_on = node
        .depends_on
        .into_iter()
        .map(|d| d.into_dependency(|pos| format!("{origin}:{}:{}", pos.line, pos.column)))
        .collect();
    match parsed.spec {
        Some(mut spec) => {
            // No cluster section here to fill in from: an entry that sets one of the two has
            // 1 for the other.
            if parsed.votes.is_set() {
                let replication = parsed
                    .votes
                    .resolve(probe::cluster::Replication::ONE, Pos::NONE)
                    .map_err(|(pos, message)| format!("{}:{}: {message}", pos.line, pos.column))?;
                spec.replication = Some(replication);
            }
            Ok(Declared {
                declaration: Declaration::Target {
                    spec: Box::new(spec),
                    depends_on,
                },
                alert: parsed.alert.0,
            })
        }
        None => Ok(Declared {
            declaration: Declaration::Group {
                id: node.id,
                depends_on,
                pool: parsed.pool.map(Box::new),
                rule: parsed.rule,
            },
            alert: parsed.alert.0,
        }),
    }
}

/// Validates one `targets` item (from a file, or an etcd value through [`parse_entry`]) against
/// its file's `defaults`; `defaults_clean` says whether they could all be read, since checks that
/// depend on them would otherwise report the consequences of a dropped key.
pub(crate) fn parse_target(
    node: &Node,
    src: &str,
    source: &Source<'_>,
    defaults: &Defaults,
    defaults_clean: bool,
    diags: &mut Diags,
) -> ParsedTarget {
    let (raw, structural) = collect::<RawTarget>(node, src);
    // Checks about what is missing or how fields combine are skipped when some field could not be
    // read: it would silently fall back to its default and produce a misleading error.
    let clean = structural.is_empty();
    diags.extend(structural);
    let Some(raw) = raw else {
        return ParsedTarget {
            id: None,
            spec: None,
            node: None,
            group: false,
            pool: None,
            rule: None,
            votes: Votes::default(),
            alert: (TargetAlert::Defaults, Pos::NONE),
        };
    };

    let label = raw.id.as_ref().map_or_else(
        || "target".to_owned(),
        |id| format!("target {}", quote(&id.value)),
    );
    let id = match &raw.id {
        None => {
            diags.push((node.pos, r#"missing field "id" in target"#.to_owned()));
            None
        }
        Some(id) => TargetId::new(&id.value)
            .map(|valid| (valid, id.pos))
            .map_err(|e| diags.push((id.pos, e.to_string())))
            .ok(),
    };

    let kind = graph::kind(raw.kind.as_ref(), diags);
    let (depends_on, complete) = graph::depends_on(node, src, raw.depends_on.is_some(), diags);
    // With an invalid kind, the node still stands for its id, so that its dependents do not
    // report it unknown.
    let declared = id.as_ref().map(|(id, _)| graph::DeclaredNode {
        id: id.clone(),
        kind: kind.unwrap_or(NodeKind::Probed),
        depends_on,
        partial: kind.is_none() || !complete,
    });
    let alert = (
        target_alert(raw.alert.as_ref(), diags),
        raw.alert.as_ref().map_or(Pos::NONE, |a| a.key),
    );
    // An invalid kind was reported; what a target of that kind would need is unknown.
    if kind != Some(NodeKind::Probed) {
        let (mut pool, mut rule) = (None, None);
        if kind == Some(NodeKind::Group) {
            graph::check_group_keys(node, src, &label, diags);
            rule = graph::group_rule(raw.state.as_ref(), diags);
            let passive = Passive::parse(&raw.passive().group_keys(), diags);
            // While a block could not be read, whether the group is a pool is unknown.
            if clean && defaults_clean {
                let group = raw.id.as_ref().map_or_else(
                    || "this group".to_owned(),
                    |id| format!("group {}", quote(&id.value)),
                );
                pool = passive
                    .pool(&defaults.passive, &group, node.pos, diags)
                    .flatten();
            }
        }
        return ParsedTarget {
            id,
            spec: None,
            node: declared,
            group: kind == Some(NodeKind::Group),
            pool,
            rule,
            votes: Votes::default(),
            alert,
        };
    }

    if let Some(state) = &raw.state {
        diags.push((
            state.key,
            format!(
                "{label}: state is for groups; a target's verdict comes from its own results \
                 (rise, fall)"
            ),
        ));
    }
    passive::check_target_keys(&raw.passive(), &label, diags);
    let passive = Passive::parse(&raw.passive().target_keys(), diags);
    let votes = raw.votes(diags).or(defaults.votes);
    let sched = Sched::parse(&raw.schedule(), diags).or(&defaults.sched);
    let (health, passive) = if clean && defaults_clean {
        (
            sched.build(node.pos, diags),
            passive.target(&defaults.passive, node.pos, diags),
        )
    } else {
        (None, None)
    };
    let maintenance = if raw.maintenance.is_some() {
        let windows = each::<RawWindow>(value_of(node, src, "maintenance"), src, diags);
        // Every window is checked (and reports its errors) before any failure counts.
        let parsed: Vec<_> = windows
            .into_iter()
            .map(|w| w.and_then(|(window, pos)| parse_window(window, pos, diags)))
            .collect();
        parsed.into_iter().collect::<Option<Vec<_>>>()
    } else {
        Some(Vec::new())
    };

    // Exactly one probe kind. A new kind is one more line here and one more field on RawTarget.
    let mut probes: Vec<(Pos, Option<ProbeSpec>)> = Vec::new();
    if let Some(tcp) = raw.tcp {
        probes.push((tcp.key, parse_tcp(tcp.value, diags).map(ProbeSpec::Tcp)));
    }
    if let Some(section) = raw.http {
        let node = value_of(node, src, "http");
        let spec = http::parse(section.value, node, src, source, diags);
        probes.push((section.key, spec.map(|h| ProbeSpec::Http(Box::new(h)))));
    }
    if let Some(section) = raw.grpc {
        let spec = grpc::parse(section.value, source, diags);
        probes.push((section.key, spec.map(|g| ProbeSpec::Grpc(Box::new(g)))));
    }
    if let Some(section) = raw.tls {
        let spec = tls::parse(section.value, source, diags);
        probes.push((section.key, spec.map(|t| ProbeSpec::Tls(Box::new(t)))));
    }
    if let Some(section) = raw.dns {
        let spec = dns::parse(section.value, section.key, diags);
        probes.push((section.key, spec.map(|d| ProbeSpec::Dns(Box::new(d)))));
    }
    if let Some(section) = raw.icmp {
        probes.push((
            section.key,
            icmp::parse(section.value, diags).map(ProbeSpec::Icmp),
        ));
    }
    if let Some(section) = raw.udp {
        probes.push((
            section.key,
            udp::parse(section.value, diags).map(ProbeSpec::Udp),
        ));
    }
    // The second in document order is the one to remove.
    probes.sort_by_key(|(pos, _)| *pos);
    let probe = match probes.as_mut_slice() {
        [] => {
            if clean {
                let kinds: Vec<String> = PROBE_KINDS.iter().map(|k| format!("{k:?}")).collect();
                let hint = match kinds.as_slice() {
                    [one] => format!("add a {one} section"),
                    many => format!("add one of {}", many.join(", ")),
                };
                diags.push((node.pos, format!("{label} has no probe: {hint}")));
            }
            None
        }
        [(_, probe)] => probe.take(),
        [_, (second, _), ..] => {
            diags.push((
                *second,
                format!("{label} has more than one probe: keep only one"),
            ));
            None
        }
    };

    let spec = match (&id, probe, health, maintenance, passive) {
        (Some((id, _)), Some(probe), Some(health), Some(maintenance), Some(passive)) => Some(
            TargetSpec::new(id.clone(), probe)
                .with_schedule(health.schedule)
                .with_thresholds(health.thresholds)
                .with_flap(health.flap)
                .with_maintenance(maintenance)
                .with_circuit_breaker(passive.circuit_breaker)
                .with_skip_active_after(passive.skip_active_after)
                .with_dns_stale_for(health.dns_stale_for),
        ),
        _ => None,
    };
    ParsedTarget {
        id,
        spec,
        node: declared,
        group: false,
        pool: None,
        rule: None,
        votes,
        alert,
    }
}

/// A `tcp` section as the library's [`TcpSpec`].
fn parse_tcp(raw: RawTcp, diags: &mut Diags) -> Option<TcpSpec> {
    let address = raw
        .address
        .value
        .parse::<Address>()
        .map_err(|e| diags.push((raw.address.pos, e.to_string())));
    let send = raw.send.map(|s| s.value.into_bytes());
    let expect = reply_expect(raw.expect, raw.expect_regex, diags);
    let close = match raw.close {
        None => Ok(CloseMode::default()),
        Some(close) => match close.value.as_str() {
            "reset" => Ok(CloseMode::Reset),
            "graceful" => Ok(CloseMode::Graceful),
            other => {
                let hint = match did_you_mean(other, CLOSE_MODES.iter().copied()) {
                    Some(best) => format!(", did you mean {best:?}?"),
                    None => r#"; expected "reset" or "graceful""#.to_owned(),
                };
                diags.push((
                    close.pos,
                    format!("unknown close mode {} for \"close\"{hint}", quote(other)),
                ));
                Err(())
            }
        },
    };
    let policy = addresses::parse(raw.addresses.as_ref(), diags);
    let conversation = match raw.conversation {
        None => Ok(Vec::new()),
        Some(steps) => crate::sections::reply::conversation(
            steps,
            send.is_some() || expect.as_ref().is_ok_and(Option::is_some),
            diags,
        ),
    };
    let (address, expect, close) = (address.ok()?, expect.ok()?, close.ok()?);
    let conversation = conversation.ok()?;
    let mut spec = TcpSpec::connect(address);
    spec.close = close;
    spec.addresses = policy.ok()?;
    if let Some(send) = send {
        spec = spec.with_send(send);
    }
    if let Some(expect) = expect {
        spec = spec.with_expect(expect);
    }
    if !conversation.is_empty() {
        spec = spec.with_conversation(conversation);
    }
    Some(spec)
}

/// One `maintenance` entry: `{start: RFC 3339 UTC time, duration}` or `{daily: "HH:MM", duration}`.
fn parse_window(window: RawWindow, pos: Pos, diags: &mut Diags) -> Option<MaintenanceWindow> {
    let duration = duration_at_most(Some(&window.duration), "duration", true, MAX_WINDOW, diags);
    let start = match (window.start, window.daily) {
        (Some(_), Some(daily)) => {
            diags.push((
                daily.key,
                r#""start" and "daily" are mutually exclusive: keep only one"#.to_owned(),
            ));
            None
        }
        (None, None) => {
            diags.push((
                pos,
                r#"maintenance window needs "start" (a UTC time such as 2026-12-01T02:00:00Z) or "daily" (a UTC time of day such as "02:00")"#.to_owned(),
            ));
            None
        }
        (Some(start), None) => match humantime::parse_rfc3339(start.value.trim()) {
            Ok(at) => Some((WindowStart::Once(at), start.pos)),
            Err(e) => {
                diags.push((
                    start.pos,
                    format!(
                        "invalid time {} for \"start\": {e}; expected an RFC 3339 UTC time such as 2026-12-01T02:00:00Z",
                        quote(&start.value)
                    ),
                ));
                None
            }
        },
        (None, Some(daily)) => match time_of_day(daily.value.trim()) {
            Some(offset) => Some((WindowStart::Daily(offset), daily.pos)),
            None => {
                diags.push((
                    daily.pos,
                    format!(
                        "invalid time of day {} for \"daily\"; expected HH:MM or HH:MM:SS (UTC), from 00:00 to 23:59:59",
                        quote(&daily.value)
                    ),
                ));
                None
            }
        },
    };
    let (start, start_pos) = start?;
    let duration = duration.value()?;
    MaintenanceWindow::try_new(start, duration)
        .map_err(|e| {
            let pos = match e {
                WindowError::TimeOfDay => start_pos,
                WindowError::ZeroDuration | WindowError::DailyTooLong => window.duration.pos,
            };
            diags.push((pos, e.to_string()));
        })
        .ok()
}

/// `HH:MM` or `HH:MM:SS`, as the offset from midnight.
fn time_of_day(text: &str) -> Option<Duration> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let mut seconds = 0;
    for (part, (max, unit)) in parts.iter().zip([(23, 3600), (59, 60), (59, 1)]) {
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let value: u64 = part.parse().ok()?;
        if value > max {
            return None;
        }
        seconds += value * unit;
    }
    Some(Duration::from_secs(seconds))
}
