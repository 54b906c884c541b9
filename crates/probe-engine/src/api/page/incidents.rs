//! Recent incidents: the history's transitions grouped by their root cause.
//!
//! Each node's transitions make *episodes*: one begins when it goes DOWN or DEGRADED from
//! anything else, takes the worst state it reaches, and ends when it is UP again. An episode
//! whose node has a critical dependency (directly or through others, in the current graph)
//! with a DOWN episode that began within [`SAME_INCIDENT_MS`] of it, before or after (probes
//! of a dependent and its dependency do not run in step), is part of that dependency's
//! incident, and so on down to the root: an episode that is part of no other. The roots are
//! the incidents, each with what it impacted and whether it has recovered.

use std::collections::{BTreeSet, HashMap, HashSet};

use probe::TargetId;
use probe::graph::Export;
use probe::health::HealthState;

use crate::history::TransitionRow;
use crate::history::store::parse_state;

/// How far apart a dependency's and a dependent's troubles may begin and be one incident.
pub(super) const SAME_INCIDENT_MS: i64 = 5 * 60_000;

/// One incident: a root cause's episode and what it took down with it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Incident {
    /// The node whose trouble it is.
    pub(super) root: String,
    /// The worst state it reached: DOWN or DEGRADED.
    pub(super) worst: HealthState,
    /// Unix milliseconds.
    pub(super) started_ms: i64,
    /// When it was UP again; `None` while it is not.
    pub(super) recovered_ms: Option<i64>,
    /// The nodes whose troubles were part of it.
    pub(super) impacted: BTreeSet<String>,
}

/// A node's trouble, from the transition into it to the one out.
struct Episode<'a> {
    node: &'a str,
    started_ms: i64,
    worst: HealthState,
    ended_ms: Option<i64>,
}

/// The incidents of `transitions` (in any order), newest first, grouped over `export`'s
/// critical edges.
pub(super) fn incidents(transitions: &[TransitionRow], export: &Export) -> Vec<Incident> {
    let episodes = episodes(transitions);
    let below = Below::new(export);
    let mut by_node: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in episodes.iter().enumerate() {
        by_node.entry(e.node).or_default().push(i);
    }
    // Each episode's parts of others: DOWN episodes of its critical dependencies, near in time.
    let mut memo = HashMap::new();
    let parents: Vec<Vec<usize>> = episodes
        .iter()
        .map(|e| {
            below
                .of(e.node, &mut memo)
                .iter()
                .filter_map(|dependency| by_node.get(dependency.as_str()))
                .flatten()
                .copied()
                .filter(|&p| {
                    let p = &episodes[p];
                    p.worst == HealthState::Down
                        && (p.started_ms - e.started_ms).abs() <= SAME_INCIDENT_MS
                })
                .collect()
        })
        .collect();
    let mut incidents: HashMap<usize, Incident> = episodes
        .iter()
        .enumerate()
        .filter(|(i, _)| parents[*i].is_empty())
        .map(|(i, e)| {
            let incident = Incident {
                root: e.node.to_owned(),
                worst: e.worst,
                started_ms: e.started_ms,
                recovered_ms: e.ended_ms,
                impacted: BTreeSet::new(),
            };
            (i, incident)
        })
        .collect();
    let mut roots: Vec<Option<BTreeSet<usize>>> = vec![None; episodes.len()];
    for i in 0..episodes.len() {
        if parents[i].is_empty() {
            continue;
        }
        for root in roots_of(i, &parents, &mut roots) {
            if let Some(incident) = incidents.get_mut(&root) {
                incident.impacted.insert(episodes[i].node.to_owned());
            }
        }
    }
    let mut out: Vec<Incident> = incidents.into_values().collect();
    out.sort_by(|a, b| {
        b.started_ms
            .cmp(&a.started_ms)
            .then_with(|| a.root.cmp(&b.root))
    });
    out
}

/// Every node's episodes, in time order.
fn episodes(transitions: &[TransitionRow]) -> Vec<Episode<'_>> {
    let mut ordered: Vec<&TransitionRow> = transitions.iter().collect();
    ordered.sort_by_key(|t| t.at_ms);
    let mut episodes: Vec<Episode<'_>> = Vec::new();
    let mut open: HashMap<&str, usize> = HashMap::new();
    for t in ordered {
        let Some(to) = parse_state(&t.to) else {
            continue;
        };
        match to {
            HealthState::Down | HealthState::Degraded => match open.get(t.target.as_str()) {
                Some(&i) => {
                    if to == HealthState::Down {
                        episodes[i].worst = HealthState::Down;
                    }
                }
                None => {
                    open.insert(&t.target, episodes.len());
                    episodes.push(Episode {
                        node: &t.target,
                        started_ms: t.at_ms,
                        worst: to,
                        ended_ms: None,
                    });
                }
            },
            HealthState::Up => {
                if let Some(i) = open.remove(t.target.as_str()) {
                    episodes[i].ended_ms = Some(t.at_ms);
                }
            }
            // Neither trouble nor its end: maintenance, a hold, a restart's first verdict.
            HealthState::Probing | HealthState::Maintenance => {}
        }
    }
    episodes
}

/// The root episodes episode `i` is part of, memoised. Parents are episodes of strict
/// dependencies, and the graph is acyclic, so the walk ends.
fn roots_of(
    i: usize,
    parents: &[Vec<usize>],
    memo: &mut [Option<BTreeSet<usize>>],
) -> BTreeSet<usize> {
    if let Some(known) = &memo[i] {
        return known.clone();
    }
    let roots = if parents[i].is_empty() {
        BTreeSet::from([i])
    } else {
        parents[i]
            .iter()
            .flat_map(|&p| roots_of(p, parents, memo))
            .collect()
    };
    memo[i] = Some(roots.clone());
    roots
}

/// The critical dependencies of each node, directly or not.
struct Below<'a> {
    critical: HashMap<&'a str, Vec<&'a TargetId>>,
}

impl<'a> Below<'a> {
    fn new(export: &'a Export) -> Self {
        let mut critical: HashMap<&str, Vec<&TargetId>> = HashMap::new();
        for edge in export.edges.iter().filter(|e| e.critical) {
            critical
                .entry(edge.from.as_str())
                .or_default()
                .push(&edge.to);
        }
        Self { critical }
    }

    /// `node`'s, memoised: only the nodes with episodes are asked for, each once.
    fn of<'m>(
        &self,
        node: &str,
        memo: &'m mut HashMap<String, HashSet<&'a TargetId>>,
    ) -> &'m HashSet<&'a TargetId> {
        memo.entry(node.to_owned()).or_insert_with(|| {
            let mut seen = HashSet::new();
            let mut stack: Vec<&TargetId> = self.critical.get(node).cloned().unwrap_or_default();
            while let Some(next) = stack.pop() {
                if seen.insert(next) {
                    stack.extend(self.critical.get(next.as_str()).into_iter().flatten());
                }
            }
            seen
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe::graph::{Edge, NodeKind, NodeStatus};

    const MIN: i64 = 60_000;

    fn node(id: &str, kind: NodeKind) -> NodeStatus {
        NodeStatus {
            id: TargetId::new(id).unwrap(),
            kind,
            score: None,
            dependency_down: false,
            state: None,
            flapping: false,
        }
    }

    fn edge(from: &str, to: &str, critical: bool) -> Edge {
        Edge {
            from: TargetId::new(from).unwrap(),
            to: TargetId::new(to).unwrap(),
            weight: 1.0,
            critical,
        }
    }

    fn at(target: &str, at_ms: i64, from: &str, to: &str) -> TransitionRow {
        TransitionRow {
            target: target.to_owned(),
            at_ms,
            from: from.to_owned(),
            to: to.to_owned(),
            cause: "result".to_owned(),
            reason: None,
            detail: None,
        }
    }

    /// shop -> api -> db critically, shop -> cache not; db -> disk critically.
    fn graph() -> Export {
        Export {
            nodes: vec![
                node("api", NodeKind::Probed),
                node("cache", NodeKind::Probed),
                node("db", NodeKind::Probed),
                node("disk", NodeKind::Probed),
                node("shop", NodeKind::Group),
            ],
            edges: vec![
                edge("api", "db", true),
                edge("db", "disk", true),
                edge("shop", "api", true),
                edge("shop", "cache", false),
            ],
        }
    }

    #[test]
    fn dependents_that_fell_with_a_dependency_are_its_incident() {
        let t = 1_000 * MIN;
        let transitions = [
            // db goes first; api notices 30 s later, the group 40 s; db is back 10 min on.
            at("db", t, "UP", "DOWN"),
            at("api", t + MIN / 2, "UP", "DEGRADED"),
            at("api", t + MIN, "DEGRADED", "DOWN"),
            at("shop", t + 2 * MIN / 3, "UP", "DOWN"),
            at("api", t + 10 * MIN, "DOWN", "UP"),
            at("db", t + 9 * MIN, "DOWN", "UP"),
            // cache is not critical to shop: its own incident, still going.
            at("cache", t + MIN, "UP", "DOWN"),
            // api fails again 40 minutes later on its own.
            at("api", t + 50 * MIN, "UP", "DOWN"),
        ];
        // Newest first, as the history answers.
        let mut newest_first = transitions.to_vec();
        newest_first.sort_by_key(|t| std::cmp::Reverse(t.at_ms));
        let found = incidents(&newest_first, &graph());
        let summary: Vec<(&str, i64, Option<i64>, Vec<&str>)> = found
            .iter()
            .map(|i| {
                (
                    i.root.as_str(),
                    i.started_ms - t,
                    i.recovered_ms.map(|r| r - t),
                    i.impacted.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("api", 50 * MIN, None, vec![]),
                ("cache", MIN, None, vec![]),
                ("db", 0, Some(9 * MIN), vec!["api", "shop"]),
            ]
        );
        assert_eq!(found[2].worst, HealthState::Down);
    }

    #[test]
    fn a_chain_leads_to_its_deepest_root_and_a_late_fall_is_its_own() {
        let t = 1_000 * MIN;
        let transitions = [
            at("disk", t + MIN, "UP", "DOWN"),
            at("db", t, "UP", "DOWN"),
            at("api", t + 4 * MIN, "UP", "DOWN"),
            // Within five minutes of api alone: it still comes to disk, through api.
            at("shop", t + 7 * MIN, "UP", "DOWN"),
            at("cache", t, "UP", "DEGRADED"),
        ];
        let found = incidents(&transitions, &graph());
        let disk = found.iter().find(|i| i.root == "disk").unwrap();
        assert_eq!(
            disk.impacted.iter().map(String::as_str).collect::<Vec<_>>(),
            ["api", "db", "shop"]
        );
        let cache = found.iter().find(|i| i.root == "cache").unwrap();
        assert_eq!(cache.worst, HealthState::Degraded);
        assert_eq!(found.len(), 2, "{found:?}");
        // Twenty minutes later is another incident.
        let late = [
            at("db", t, "UP", "DOWN"),
            at("api", t + 20 * MIN, "UP", "DOWN"),
        ];
        assert_eq!(incidents(&late, &graph()).len(), 2);
    }
}
