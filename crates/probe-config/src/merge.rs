//! From documents to one [`Config`]: each document is read section by section into what it
//! produced (a [`FileOutcome`]), then the outcomes of every file are merged with the checks that
//! span files: duplicate ids, sections set in more than one file, the dependency graph and the
//! nodes readiness requires.
//!
//! This is the one place where the raw structs end up as the validated [`Config`], and where
//! every problem gets its file: the errors of all files are collected, ordered and reported as
//! `FILE:LINE:COL: message`, and a config with any error is rejected whole.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use probe::TargetId;
use probe::graph::GraphConfig;
use probe::topology::Topology;

use crate::schema::{RawDefaults, RawDocument};
use crate::sections::alerts::{self, AlertRule, AlertsConfig, TargetAlert};
use crate::sections::cluster::{self, ClusterConfig, ParsedCluster};
use crate::sections::history::{self, HistorySection};
use crate::sections::metrics::MetricsConfig;
use crate::sections::passive::Passive;
use crate::sections::schedule::Sched;
use crate::sections::{graph, metrics, resolver, topology};
use crate::targets::{Defaults, ParsedTarget, parse_target};
use crate::yaml::diagnostics::{ConfigError, ConfigErrors, quote};
use crate::yaml::files::Source;
use crate::yaml::node::{Diags, Kind, Node, Pos, collect, syntax_error, value_of, yaml_options};

/// A loaded, fully validated configuration.
///
/// Everything in it has passed the `probe` constructors and the dependency graph's checks, so the
/// engine can run it as is; a reload compares the new topology with the running one.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The targets of all files (in file order and then in document order), their dependencies,
    /// groups, scoring and readiness policy.
    pub topology: Topology,
    /// The files that were read, in the order they were merged, for logs and reload watches.
    pub files: Vec<PathBuf>,
    /// Where more targets come from: etcd, when the `topology` section says so.
    pub etcd: Option<probe_etcd::SourceConfig>,
    /// The engine's resolver, as the `resolver` section says (the host's configuration
    /// without one).
    pub resolver: probe::tier::resolve::ResolverConfig,
    /// What `/metrics` keeps per target, as the `metrics` section says.
    pub metrics: MetricsConfig,
    /// The cluster this daemon is a member of, as the `cluster` section says.
    pub cluster: Option<ClusterConfig>,
    /// Where alerts go, as the `alerts` section says.
    pub alerts: Option<AlertsConfig>,
    /// Where history is kept, as the `history` section says (its defaults without one).
    pub history: HistorySection,
    /// `scoring.sla_window`: each probed target's uptime over it is its SLA in the graph.
    pub sla_window: Option<std::time::Duration>,
    /// Each target's alert rule (`None`: `alert: false`); empty without an `alerts` section.
    pub alert_rules: BTreeMap<TargetId, Option<AlertRule>>,
}

/// A top-level section that may be set in one file only: where its key is, and its value when
/// valid.
struct Section<T> {
    key: Pos,
    value: Option<T>,
}

/// What parsing one file produced.
#[derive(Default)]
pub(crate) struct FileOutcome {
    diags: Diags,
    targets: Vec<ParsedTarget>,
    scoring: Option<Section<graph::Scoring>>,
    readiness: Option<Section<graph::ParsedReadiness>>,
    /// The `topology` section: `Some(None)` when it has no source.
    topology: Option<Section<Option<probe_etcd::SourceConfig>>>,
    resolver: Option<Section<probe::tier::resolve::ResolverConfig>>,
    metrics: Option<Section<MetricsConfig>>,
    cluster: Option<Section<ParsedCluster>>,
    alerts: Option<Section<AlertsConfig>>,
    history: Option<Section<HistorySection>>,
}

impl FileOutcome {
    pub(crate) fn failed(pos: Pos, message: String) -> Self {
        Self {
            diags: vec![(pos, message)],
            ..Self::default()
        }
    }
}

/// Reads one document, section by section, collecting every problem with its position.
pub(crate) fn parse_text(text: &str, source: &Source<'_>) -> FileOutcome {
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, yaml_options()) {
        Ok(Some(root)) => root,
        Ok(None) => return FileOutcome::default(),
        Err(e) => {
            let (pos, message) = syntax_error(&e);
            return FileOutcome::failed(pos, message);
        }
    };
    if matches!(root.kind, Kind::Null) {
        return FileOutcome::default();
    }

    let (_, mut diags) = collect::<RawDocument>(&root, text);
    let section = |name: &str| value_of(&root, text, name);

    let (defaults, defaults_clean) = match section("defaults") {
        None => (Defaults::default(), true),
        Some(node) => {
            let (raw, structural) = collect::<RawDefaults>(node, text);
            let clean = structural.is_empty();
            diags.extend(structural);
            match raw {
                Some(raw) => (
                    Defaults {
                        sched: Sched::parse(&raw.schedule(), &mut diags),
                        passive: Passive::parse(&raw.passive(), &mut diags),
                        votes: raw.votes(&mut diags),
                    },
                    clean,
                ),
                None => (Defaults::default(), false),
            }
        }
    };

    let mut targets = Vec::new();
    if let Some(Node {
        kind: Kind::Seq(items),
        ..
    }) = section("targets")
    {
        for item in items {
            targets.push(parse_target(
                item,
                text,
                source,
                &defaults,
                defaults_clean,
                &mut diags,
            ));
        }
    }
    // The key's position, found again: `section` gives the value.
    let key = |name: &str| {
        root.entries()
            .iter()
            .find(|(k, _)| k.text(text) == Some(name))
            .map_or(Pos::NONE, |(k, _)| k.pos)
    };
    let scoring = section("scoring").map(|node| Section {
        key: key("scoring"),
        value: graph::scoring(node, text, &mut diags),
    });
    let readiness = section("readiness").map(|node| Section {
        key: key("readiness"),
        value: graph::readiness(node, text, &mut diags),
    });
    let topology = section("topology").map(|node| Section {
        key: key("topology"),
        value: topology::parse(node, text, source, &mut diags),
    });
    let resolver = section("resolver").map(|node| Section {
        key: key("resolver"),
        value: resolver::parse(node, text, &mut diags),
    });
    let metrics = section("metrics").map(|node| Section {
        key: key("metrics"),
        value: metrics::parse(node, text, &mut diags),
    });
    let cluster = section("cluster").map(|node| Section {
        key: key("cluster"),
        value: cluster::parse(node, text, key("cluster"), source, &mut diags),
    });
    let alerts = section("alerts").map(|node| Section {
        key: key("alerts"),
        value: alerts::parse(node, text, source, &mut diags),
    });
    let history = section("history").map(|node| Section {
        key: key("history"),
        value: history::parse(node, text, source, &mut diags),
    });
    FileOutcome {
        diags,
        targets,
        scoring,
        readiness,
        topology,
        resolver,
        metrics,
        cluster,
        alerts,
        history,
    }
}

/// Checks what spans files (duplicate ids, sections set twice, the dependency graph, the
/// required nodes), orders the errors and assembles the result.
pub(crate) fn finish(
    files: Vec<PathBuf>,
    mut outcomes: Vec<FileOutcome>,
) -> Result<Config, ConfigErrors> {
    let mut positions: HashMap<TargetId, (usize, Pos)> = HashMap::new();
    let mut late: Vec<graph::Located> = Vec::new();
    for (index, outcome) in outcomes.iter().enumerate() {
        for (id, pos) in outcome.targets.iter().filter_map(|t| t.id.as_ref()) {
            match positions.get(id) {
                Some(&(first_index, first_pos)) => late.push((
                    index,
                    *pos,
                    format!(
                        "duplicate target id {} (first defined at {})",
                        quote(id.as_str()),
                        at(&files, first_index, first_pos)
                    ),
                )),
                None => {
                    positions.insert(id.clone(), (index, *pos));
                }
            }
        }
    }
    let scoring = once(
        &files,
        &mut outcomes,
        "scoring",
        |o| o.scoring.take(),
        &mut late,
    );
    let readiness = once(
        &files,
        &mut outcomes,
        "readiness",
        |o| o.readiness.take(),
        &mut late,
    );
    let (scoring, sla_window) = scoring
        .and_then(|(_, config)| config)
        .map_or((GraphConfig::default(), None), |s| (s.graph, s.sla_window));
    let etcd = once(
        &files,
        &mut outcomes,
        "topology",
        |o| o.topology.take(),
        &mut late,
    )
    .and_then(|(_, etcd)| etcd.flatten());
    let resolver = once(
        &files,
        &mut outcomes,
        "resolver",
        |o| o.resolver.take(),
        &mut late,
    )
    .and_then(|(_, resolver)| resolver)
    .unwrap_or_default();
    let metrics = once(
        &files,
        &mut outcomes,
        "metrics",
        |o| o.metrics.take(),
        &mut late,
    )
    .and_then(|(_, metrics)| metrics)
    .unwrap_or_default();
    let cluster = once(
        &files,
        &mut outcomes,
        "cluster",
        |o| o.cluster.take(),
        &mut late,
    )
    .and_then(|(index, parsed)| {
        let parsed = parsed?;
        let Some(etcd) = parsed.etcd.or_else(|| etcd.clone()) else {
            late.push((
                index,
                parsed.key,
                "the cluster needs etcd: give cluster an etcd block, or set topology.etcd"
                    .to_owned(),
            ));
            return None;
        };
        Some(ClusterConfig {
            etcd,
            ..parsed.rest
        })
    });
    let alerts = once(
        &files,
        &mut outcomes,
        "alerts",
        |o| o.alerts.take(),
        &mut late,
    );
    let history = once(
        &files,
        &mut outcomes,
        "history",
        |o| o.history.take(),
        &mut late,
    )
    .and_then(|(_, history)| history)
    .unwrap_or_default();
    // An invalid section is reported as it is, not again at every `alert` key.
    let section = alerts.is_some();
    let alerts = alerts.and_then(|(_, alerts)| alerts);
    // Each target's rule over the defaults; without the section, an `alert` key has nowhere to
    // send to.
    let mut alert_rules = BTreeMap::new();
    for (index, outcome) in outcomes.iter().enumerate() {
        for target in &outcome.targets {
            let Some((id, _)) = &target.id else { continue };
            let (alert, at) = &target.alert;
            match (&alerts, alert) {
                (None, TargetAlert::Defaults) => {}
                (None, _) if section => {}
                (None, _) => late.push((
                    index,
                    *at,
                    "alert needs an alerts section to send to".to_owned(),
                )),
                (Some(config), alert) => {
                    alert_rules.insert(id.clone(), alert.over(&config.defaults));
                }
            }
        }
    }
    // A target's replicas and quorum over the section's; outside a cluster they mean nothing.
    for (index, outcome) in outcomes.iter_mut().enumerate() {
        for target in &mut outcome.targets {
            let (Some(spec), true) = (&mut target.spec, target.votes.is_set()) else {
                continue;
            };
            let at = target.votes.at().unwrap_or(Pos::NONE);
            let Some(cluster) = &cluster else {
                late.push((
                    index,
                    at,
                    "replicas and quorum apply in a cluster: add a cluster section".to_owned(),
                ));
                continue;
            };
            match target.votes.resolve(cluster.replication, at) {
                Ok(replication) => spec.replication = Some(replication),
                Err((pos, message)) => late.push((index, pos, message)),
            }
        }
    }

    let declared: Vec<(usize, graph::DeclaredNode)> = outcomes
        .iter_mut()
        .enumerate()
        .flat_map(|(index, o)| {
            o.targets
                .iter_mut()
                .filter_map(move |t| Some((index, t.node.take()?)))
        })
        .collect();
    let nodes = graph::check(&files, declared, &positions, scoring, etcd.is_some()).unwrap_or_else(
        |errors| {
            late.extend(errors);
            Vec::new()
        },
    );
    let readiness = readiness.and_then(|(index, section)| {
        let parsed = section?;
        // With etcd, a required node may be declared there: it is then checked at run time.
        if etcd.is_none() {
            late.extend(graph::check_required(&parsed.required, index, &positions));
        }
        Some(parsed.policy)
    });
    for (index, pos, message) in late {
        if let Some(outcome) = outcomes.get_mut(index) {
            outcome.diags.push((pos, message));
        }
    }

    let mut errors = Vec::new();
    for (file, outcome) in files.iter().zip(&mut outcomes) {
        // A target is only left unbuilt because of a reported error; guard against a silent drop.
        if outcome.diags.is_empty() && outcome.targets.iter().any(|t| t.spec.is_none() && !t.group)
        {
            outcome
                .diags
                .push((Pos::NONE, "a target could not be built".to_owned()));
        }
        // Stable: errors at the same position keep the order they were found in.
        outcome.diags.sort_by_key(|(pos, _)| *pos);
        // The same defaults error can be reached through several targets.
        outcome.diags.dedup();
        errors.extend(
            outcome
                .diags
                .drain(..)
                .map(|(pos, message)| ConfigError::at(file, pos, &message)),
        );
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let mut targets = Vec::new();
    let (mut pools, mut groups) = (BTreeMap::new(), BTreeMap::new());
    for parsed in outcomes.into_iter().flat_map(|o| o.targets) {
        if let Some((id, _)) = parsed.id {
            if let Some(pool) = parsed.pool {
                pools.insert(id.clone(), pool);
            }
            if let Some(rule) = parsed.rule {
                groups.insert(id, rule);
            }
        }
        targets.extend(parsed.spec);
    }
    Ok(Config {
        topology: Topology {
            targets,
            nodes,
            scoring,
            readiness,
            pools,
            groups,
        },
        files,
        etcd,
        resolver,
        metrics,
        cluster,
        alerts,
        alert_rules,
        history,
        sla_window,
    })
}

/// `FILE:LINE:COL` of a position in file `index`.
fn at(files: &[PathBuf], index: usize, pos: Pos) -> String {
    let file = files.get(index).map_or(Path::new("?"), |f| f);
    format!("{}:{}:{}", file.display(), pos.line, pos.column)
}

/// The one file's `name` section, if any: its file's index and its value when valid. A second
/// one is an error: sections do not merge, and which file wins would depend on file names.
fn once<T>(
    files: &[PathBuf],
    outcomes: &mut [FileOutcome],
    name: &str,
    take: impl Fn(&mut FileOutcome) -> Option<Section<T>>,
    late: &mut Vec<graph::Located>,
) -> Option<(usize, Option<T>)> {
    let mut found: Option<(usize, Pos, Option<T>)> = None;
    for (index, outcome) in outcomes.iter_mut().enumerate() {
        let Some(section) = take(outcome) else {
            continue;
        };
        match &found {
            Some((first, key, _)) => late.push((
                index,
                section.key,
                format!(
                    "{name} is already set at {}; set it in one file only",
                    at(files, *first, *key)
                ),
            )),
            None => found = Some((index, section.key, section.value)),
        }
    }
    found.map(|(index, _, value)| (index, value))
}
