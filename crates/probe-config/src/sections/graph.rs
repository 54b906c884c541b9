//! The dependency tier's part of the configuration: `kind: group`, `depends_on`, and the
//! top-level `scoring` and `readiness` sections.
//!
//! ```yaml
//! scoring:                 # optional, in one file at most
//!   window: 20             # results per target in its success ratio, 1..=1000
//!   degraded_credit: 0.5   # what a DEGRADED result counts for, 0..=1
//!   critical_cap: 0        # the highest score with a critical dependency DOWN, 0..=1
//!   sla_window: 30d        # optional: a target's uptime over it multiplies its success ratio
//! readiness:               # optional, in one file at most; without it: every target healthy
//!   require: [checkout]    # targets or groups
//!   min_score: 0.8         # default 0.8
//!   hysteresis: 0.05       # once ready, not ready only under min_score - hysteresis
//! targets:
//!   - id: checkout
//!     kind: group          # no probe: the score of its dependencies
//!     depends_on:
//!       - { target: orders-api, weight: 0.6, critical: true }
//!       - { target: cache, weight: 0.4 }    # weight default 1, critical default false
//! ```
//!
//! Dependencies are checked by [`probe::graph::Graph::build`], the same code the engine runs, so
//! the file and the engine cannot disagree; its errors are located here: a dependency's errors
//! (unknown or self target, duplicate, bad weight, the edge closing a cycle) at the dependency,
//! a group's at its id.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use probe::TargetId;
use probe::graph::{
    Dependency, Graph, GraphConfig, GraphConfigError, GraphError, GroupRule, GroupRuleError,
    NodeKind, NodeSpec, ReadinessPolicy, ReadinessPolicyError,
};
use probe::health::{FlapPolicy, Thresholds};
use serde::Deserialize;

use super::schedule::{RawFlap, checked, count, flap};
use crate::yaml::diagnostics::{did_you_mean, quote};
use crate::yaml::node::{BoolOr, Diags, Node, Pos, Sp, collect, each, value_of};

#[derive(Deserialize)]
#[serde(rename = "dependency", deny_unknown_fields)]
struct RawDependency {
    target: Sp<String>,
    weight: Option<Sp<f64>>,
    critical: Option<Sp<bool>>,
}

#[derive(Deserialize)]
#[serde(rename = "scoring", deny_unknown_fields)]
struct RawScoring {
    window: Option<Sp<u32>>,
    degraded_credit: Option<Sp<f64>>,
    critical_cap: Option<Sp<f64>>,
    sla_window: Option<Sp<String>>,
}

/// A valid `scoring` section: the graph's configuration, and the window of the SLA the daemon
/// gives each probed target from its history.
pub(crate) struct Scoring {
    pub graph: GraphConfig,
    pub sla_window: Option<std::time::Duration>,
}

#[derive(Deserialize)]
#[serde(rename = "readiness", deny_unknown_fields)]
struct RawReadiness {
    require: Sp<Vec<Sp<String>>>,
    min_score: Option<Sp<f64>>,
    hysteresis: Option<Sp<f64>>,
}

/// `state: {...}` of a group: how its score becomes its verdict ([`GroupRule`]).
#[derive(Deserialize)]
#[serde(rename = "state", deny_unknown_fields)]
pub(crate) struct RawGroupState {
    up_from: Option<Sp<f64>>,
    degraded_from: Option<Sp<f64>>,
    rise: Option<Sp<u32>>,
    fall: Option<Sp<u32>>,
    degrade_after: Option<Sp<u32>>,
    recover_after: Option<Sp<u32>>,
    flap: Option<Sp<BoolOr<RawFlap>>>,
}

/// A group's rule from its `state` block, each field checked where it is written; `None` when
/// there is no block (the default rule applies) or it is invalid (reported).
pub(crate) fn group_rule(raw: Option<&Sp<RawGroupState>>, diags: &mut Diags) -> Option<GroupRule> {
    let raw = &raw?.value;
    let before = diags.len();
    let score = |value: Option<&Sp<f64>>, name: &str, default: f64, diags: &mut Diags| {
        checked(
            value,
            |v| (0.0..=1.0).contains(&v),
            |v| format!("{name} must be a score in [0, 1], not {v}"),
            diags,
        )
        .value()
        .unwrap_or(default)
    };
    let up_from = score(
        raw.up_from.as_ref(),
        "up_from",
        GroupRule::DEFAULT_UP_FROM,
        diags,
    );
    let degraded_from = score(
        raw.degraded_from.as_ref(),
        "degraded_from",
        GroupRule::DEFAULT_DEGRADED_FROM,
        diags,
    );
    let default = Thresholds::default();
    let rise = count(raw.rise.as_ref(), "rise", diags)
        .value()
        .unwrap_or(default.rise);
    let thresholds = Thresholds {
        degrade: count(raw.degrade_after.as_ref(), "degrade_after", diags)
            .value()
            .unwrap_or(rise),
        recover: count(raw.recover_after.as_ref(), "recover_after", diags)
            .value()
            .unwrap_or(rise),
        ..Thresholds::new(
            rise,
            count(raw.fall.as_ref(), "fall", diags)
                .value()
                .unwrap_or(default.fall),
        )
    };
    let flap = flap(raw.flap.as_ref(), diags)
        .value()
        .unwrap_or(Some(FlapPolicy::default()));
    if diags.len() > before {
        return None;
    }
    GroupRule::try_new(up_from, degraded_from, thresholds, flap)
        .map_err(|e| {
            // Each field is a score in [0, 1]: what is wrong is an `up_from` of 0, or the pair,
            // reported at `degraded_from` unless it was left to its default.
            let up_from = raw.up_from.as_ref().map(|u| u.pos);
            let at = match e {
                GroupRuleError::UpFrom(_) => up_from,
                GroupRuleError::DegradedFrom { .. } => {
                    raw.degraded_from.as_ref().map(|d| d.pos).or(up_from)
                }
            };
            diags.push((at.unwrap_or(Pos::NONE), e.to_string()));
        })
        .ok()
}

/// The keys a group may have: it has no probe, schedule or maintenance; its `state` rule judges
/// its score, its passive-health keys make it a pool, and it may alert.
const GROUP_KEYS: &[&str] = &[
    "id",
    "kind",
    "depends_on",
    "state",
    "alert",
    "outlier",
    "recovery",
    "slow_start",
];

/// One declared dependency, before the graph checks it.
pub(crate) struct ParsedDependency {
    target: TargetId,
    weight: f64,
    critical: bool,
    /// The dependency's position: where its errors point.
    pos: Pos,
}

impl ParsedDependency {
    /// The dependency, with its position written into its origin by `origin`.
    pub fn into_dependency(self, origin: impl FnOnce(Pos) -> String) -> Dependency {
        Dependency {
            target: self.target,
            weight: self.weight,
            critical: self.critical,
            origin: origin(self.pos),
        }
    }
}

/// A target's `kind` (probed unless `kind: group`), or `None` when invalid.
pub(crate) fn kind(raw: Option<&Sp<String>>, diags: &mut Diags) -> Option<NodeKind> {
    match raw.map(|k| (k.value.as_str(), k.pos)) {
        None => Some(NodeKind::Probed),
        Some(("group", _)) => Some(NodeKind::Group),
        Some((other, pos)) => {
            diags.push((
                pos,
                format!(
                    "unknown kind {}: the only kind is \"group\" (leave kind out for a probed target)",
                    quote(other)
                ),
            ));
            None
        }
    }
}

/// Reports every key of a group's mapping that only a probed target may have.
pub(crate) fn check_group_keys(node: &Node, src: &str, label: &str, diags: &mut Diags) {
    for (key, _) in node.entries() {
        if let Some(name) = key.text(src)
            && !GROUP_KEYS.contains(&name)
        {
            let message = match super::passive::target_only(name) {
                Some(why) => format!("{label} is a group: {why}"),
                None => format!(
                    "{label} is a group: {} does not apply (a group has no probe; it has {})",
                    quote(name),
                    GROUP_KEYS.join(", ")
                ),
            };
            diags.push((key.pos, message));
        }
    }
}

/// A target's `depends_on`, each item read on its own: the valid ones, and whether every item
/// was.
pub(crate) fn depends_on(
    node: &Node,
    src: &str,
    present: bool,
    diags: &mut Diags,
) -> (Vec<ParsedDependency>, bool) {
    if !present {
        return (Vec::new(), true);
    }
    let items = each::<RawDependency>(value_of(node, src, "depends_on"), src, diags);
    let parsed: Vec<_> = items
        .into_iter()
        .map(|item| {
            let (raw, pos) = item?;
            let target = TargetId::new(&raw.target.value)
                .map_err(|e| diags.push((raw.target.pos, e.to_string())))
                .ok()?;
            Some(ParsedDependency {
                target,
                weight: raw.weight.map_or(Dependency::DEFAULT_WEIGHT, |w| w.value),
                critical: raw.critical.is_some_and(|c| c.value),
                pos,
            })
        })
        .collect();
    let complete = parsed.iter().all(Option::is_some);
    (parsed.into_iter().flatten().collect(), complete)
}

/// The `scoring` section; `None` when invalid.
pub(crate) fn scoring(node: &Node, src: &str, diags: &mut Diags) -> Option<Scoring> {
    let (raw, structural) = collect::<RawScoring>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    use super::schedule::{Slot, duration_at_most};
    // At most as long as the history keeps rollups by default.
    let longest = std::time::Duration::from_secs(400 * 86_400);
    let sla_window =
        match duration_at_most(raw.sla_window.as_ref(), "sla_window", true, longest, diags) {
            Slot::Set { value, key } if value < std::time::Duration::from_secs(3600) => {
                diags.push((
                    key,
                    "sla_window must be at least 1h: an SLA is a long window".to_owned(),
                ));
                return None;
            }
            Slot::Set { value, .. } => Some(value),
            Slot::Absent => None,
            Slot::Invalid => return None,
        };
    let window = raw.window.as_ref();
    let credit = raw.degraded_credit.as_ref();
    let cap = raw.critical_cap.as_ref();
    let config = GraphConfig::try_new(
        window.map_or(GraphConfig::DEFAULT_WINDOW, |w| w.value as usize),
        credit.map_or(GraphConfig::DEFAULT_DEGRADED_CREDIT, |c| c.value),
        cap.map_or(GraphConfig::DEFAULT_CRITICAL_CAP, |c| c.value),
    );
    config
        .map_err(|e| {
            let pos = match e {
                GraphConfigError::Window(_) => window.map(|w| w.pos),
                GraphConfigError::DegradedCredit(_) => credit.map(|c| c.pos),
                GraphConfigError::CriticalCap(_) => cap.map(|c| c.pos),
            };
            diags.push((pos.unwrap_or(node.pos), e.to_string()));
        })
        .ok()
        .map(|graph| Scoring { graph, sla_window })
}

/// A valid `readiness` section.
pub(crate) struct ParsedReadiness {
    pub policy: ReadinessPolicy,
    /// Each required id with its position, for the check against the targets.
    pub required: Vec<(TargetId, Pos)>,
}

/// The `readiness` section; `None` when invalid.
pub(crate) fn readiness(node: &Node, src: &str, diags: &mut Diags) -> Option<ParsedReadiness> {
    let (raw, structural) = collect::<RawReadiness>(node, src);
    let clean = structural.is_empty();
    diags.extend(structural);
    let raw = raw.filter(|_| clean)?;
    let ids: Vec<Option<(TargetId, Pos)>> = raw
        .require
        .value
        .iter()
        .map(|id| {
            TargetId::new(&id.value)
                .map(|valid| (valid, id.pos))
                .map_err(|e| diags.push((id.pos, e.to_string())))
                .ok()
        })
        .collect();
    let required: Vec<(TargetId, Pos)> = ids.into_iter().collect::<Option<_>>()?;
    let require = required.iter().map(|(id, _)| id.clone()).collect();
    let min = raw.min_score.as_ref();
    let hysteresis = raw.hysteresis.as_ref();
    let policy = ReadinessPolicy::try_new(
        require,
        min.map_or(ReadinessPolicy::DEFAULT_MIN_SCORE, |m| m.value),
        hysteresis.map_or(ReadinessPolicy::DEFAULT_HYSTERESIS, |h| h.value),
    );
    policy
        .map_err(|e| {
            let pos = match e {
                ReadinessPolicyError::NothingRequired => Some(raw.require.pos),
                ReadinessPolicyError::MinScore(_) => min.map(|m| m.pos),
                ReadinessPolicyError::Hysteresis(_) => hysteresis.map(|h| h.pos),
            };
            diags.push((pos.unwrap_or(node.pos), e.to_string()));
        })
        .ok()
        .map(|policy| ParsedReadiness { policy, required })
}

/// One file's declared node, for the whole-configuration check.
pub(crate) struct DeclaredNode {
    pub id: TargetId,
    pub kind: NodeKind,
    /// The dependencies that could be read.
    pub depends_on: Vec<ParsedDependency>,
    /// Whether something about the node was invalid and left out (already reported): its
    /// dependencies are checked, but not whether it has any.
    pub partial: bool,
}

/// An error of the whole configuration: the index of its file, its position and message.
pub(crate) type Located = (usize, Pos, String);

/// Checks the dependency graph of every file's nodes together and returns the graph nodes for
/// the engine: the groups, and the targets that have dependencies.
///
/// `nodes` holds each file's index with its nodes; `positions` where each id is declared.
/// With `external` (etcd is configured), a dependency on an id no file declares is no error: etcd
/// may declare it, and the merged topology is checked when it is applied.
pub(crate) fn check(
    files: &[PathBuf],
    nodes: Vec<(usize, DeclaredNode)>,
    positions: &HashMap<TargetId, (usize, Pos)>,
    scoring: GraphConfig,
    external: bool,
) -> Result<Vec<NodeSpec>, Vec<Located>> {
    let mut origins: HashMap<String, (usize, Pos)> = HashMap::new();
    let partial: HashSet<TargetId> = nodes
        .iter()
        .filter(|(_, node)| node.partial)
        .map(|(_, node)| node.id.clone())
        .collect();
    let specs: Vec<NodeSpec> = nodes
        .into_iter()
        .filter(|(_, node)| node.kind == NodeKind::Group || !node.depends_on.is_empty())
        .map(|(file, node)| NodeSpec {
            id: node.id,
            kind: node.kind,
            depends_on: node
                .depends_on
                .into_iter()
                .map(|dep| {
                    dep.into_dependency(|pos| {
                        let origin = origin(&files[file], pos);
                        origins.insert(origin.clone(), (file, pos));
                        origin
                    })
                })
                .collect(),
        })
        .collect();
    // Every other target is a leaf the declared nodes may point to.
    let declared: HashSet<&TargetId> = specs.iter().map(|s| &s.id).collect();
    let mut all = specs.clone();
    all.extend(
        positions
            .keys()
            .filter(|id| !declared.contains(id))
            .map(|id| NodeSpec {
                id: id.clone(),
                kind: NodeKind::Probed,
                depends_on: Vec::new(),
            }),
    );
    let errors: Vec<Located> = match Graph::build(scoring, &all) {
        Ok(_) => return Ok(specs),
        Err(errors) => errors
            .into_iter()
            .filter(|e| match e {
                // Reported with both places by the duplicate id check.
                GraphError::DuplicateNode { .. } => false,
                GraphError::EmptyGroup { node } => !partial.contains(node),
                GraphError::UnknownTarget { .. } => !external,
                _ => true,
            })
            .map(|e| locate(e, &origins, positions))
            .collect(),
    };
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors)
    }
}

/// `FILE:LINE:COL`, the origin a dependency's errors quote and are located by.
fn origin(file: &Path, pos: Pos) -> String {
    format!("{}:{}:{}", file.display(), pos.line, pos.column)
}

/// Places a graph error at its dependency or node, without the origin the message starts with.
fn locate(
    e: GraphError,
    origins: &HashMap<String, (usize, Pos)>,
    positions: &HashMap<TargetId, (usize, Pos)>,
) -> Located {
    let text = e.to_string();
    let (place, message) = match e.origin() {
        Some(origin) => (
            origins.get(origin).copied(),
            text.strip_prefix(origin)
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(&text)
                .to_owned(),
        ),
        None => {
            let node = match &e {
                GraphError::DuplicateNode { node } | GraphError::EmptyGroup { node } => {
                    positions.get(node).copied()
                }
                _ => None,
            };
            (node, text.clone())
        }
    };
    let message = match &e {
        GraphError::UnknownTarget { target, .. } => {
            match did_you_mean(target.as_str(), positions.keys().map(|id| id.as_str())) {
                Some(near) => format!("{message} (did you mean {}?)", quote(near)),
                None => message,
            }
        }
        _ => message,
    };
    let (file, pos) = place.unwrap_or((0, Pos::NONE));
    (file, pos, message)
}

/// Reports required ids that are neither a target nor a group.
pub(crate) fn check_required(
    required: &[(TargetId, Pos)],
    file: usize,
    positions: &HashMap<TargetId, (usize, Pos)>,
) -> Vec<Located> {
    required
        .iter()
        .filter(|(id, _)| !positions.contains_key(id))
        .map(|(id, pos)| {
            let hint = did_you_mean(id.as_str(), positions.keys().map(|id| id.as_str()))
                .map(|near| format!(" (did you mean {}?)", quote(near)))
                .unwrap_or_default();
            (
                file,
                *pos,
                format!(
                    "readiness requires {}, which is neither a target nor a group{hint}",
                    quote(id.as_str())
                ),
            )
        })
        .collect()
}
