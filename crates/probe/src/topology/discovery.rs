//! Where topology comes from: sources of target declarations, merged into one [`Topology`].
//!
//! The engine takes a whole topology and does not know where it came from. A [`Discovery`]
//! source (the daemon's YAML files, etcd in `probe-etcd`, anything an embedder has) publishes a
//! [`Catalog`]: every entry it declares, each a target with its dependencies or a group, or the
//! reason the entry could not be read. A [`Merger`] turns the catalogs of several sources into
//! one topology that the engine accepts, and says what it had to leave out:
//! - sources have a precedence; an id declared by two sources is kept from the higher one, and
//!   the lower entry is rejected, naming where the id is defined;
//! - each entry is last-known-good: one that turns invalid keeps its previous valid declaration
//!   in force (and is reported), so a bad write cannot take a running target away;
//! - the merged topology is checked the way the engine checks it. An entry that breaks the graph
//!   (a cycle, an unknown dependency) is rejected, back to its last-known-good declaration or
//!   out, and everything else applies;
//! - `scoring` and `readiness` come from the highest source that sets them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{TargetSpec, Topology, TopologyError};
use crate::graph::{
    Dependency, GraphConfig, GraphError, GroupRule, NodeKind, NodeSpec, ReadinessPolicy,
};
use crate::passive::pools::PoolPolicy;
use crate::target::TargetId;

/// One declared entry: what one item of a YAML `targets` list, or one etcd key, says.
#[derive(Clone, Debug, PartialEq)]
pub enum Declaration {
    /// A target to probe, with what it depends on.
    Target {
        /// The target (boxed: a spec is large next to a group).
        spec: Box<TargetSpec>,
        /// Its dependencies, in declaration order.
        depends_on: Vec<Dependency>,
    },
    /// A group: a name for a set of dependencies, with no probe.
    Group {
        /// The group's id.
        id: TargetId,
        /// Its dependencies; at least one.
        depends_on: Vec<Dependency>,
        /// Set when the group is a pool whose members are ejected on real-traffic failures
        /// (boxed: a policy is large, and most groups are no pool).
        pool: Option<Box<PoolPolicy>>,
        /// How its score becomes its verdict; `None` for the default rule.
        rule: Option<GroupRule>,
    },
}

impl Declaration {
    /// The declared id.
    pub fn id(&self) -> &TargetId {
        match self {
            Self::Target { spec, .. } => &spec.id,
            Self::Group { id, .. } => id,
        }
    }
}

/// One entry of a [`Catalog`].
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogEntry {
    /// The entry's name within its source (an etcd key's id, a target id); last-known-good
    /// declarations are kept by name.
    pub name: String,
    /// Where the entry is, for people: `etcd key /probe-engine/targets/db (revision 42)`.
    pub origin: String,
    /// The declaration, or why it could not be read. Shared: a source keeps its decoded values
    /// and the merger its last good ones without copying them.
    pub declaration: Result<Arc<Declaration>, String>,
}

/// Everything one source declares now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// The entries, in the source's order.
    pub entries: Vec<CatalogEntry>,
    /// How scores are computed, if this source says.
    pub scoring: Option<GraphConfig>,
    /// What readiness requires, if this source says.
    pub readiness: Option<ReadinessPolicy>,
}

impl From<Topology> for Catalog {
    /// The entries of a validated topology, named by id, with `origin` "config".
    fn from(topology: Topology) -> Self {
        let mut depends: HashMap<TargetId, NodeSpec> = topology
            .nodes
            .into_iter()
            .map(|n| (n.id.clone(), n))
            .collect();
        let entry = |declaration: Declaration| CatalogEntry {
            name: declaration.id().to_string(),
            origin: "config".to_owned(),
            declaration: Ok(Arc::new(declaration)),
        };
        let mut entries: Vec<CatalogEntry> = topology
            .targets
            .into_iter()
            .map(|spec| {
                let depends_on = depends
                    .remove(&spec.id)
                    .map(|n| n.depends_on)
                    .unwrap_or_default();
                entry(Declaration::Target {
                    spec: Box::new(spec),
                    depends_on,
                })
            })
            .collect();
        let mut groups: Vec<NodeSpec> = depends.into_values().collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        entries.extend(groups.into_iter().map(|n| {
            entry(Declaration::Group {
                pool: topology.pools.get(&n.id).copied().map(Box::new),
                rule: topology.groups.get(&n.id).copied(),
                id: n.id,
                depends_on: n.depends_on,
            })
        }));
        Self {
            entries,
            scoring: Some(topology.scoring),
            readiness: topology.readiness,
        }
    }
}

/// A source of target declarations.
#[async_trait::async_trait]
pub trait Discovery: Send {
    /// Waits until the source's content differs from what it last returned, then returns all of
    /// it. `None` once the source has stopped for good.
    ///
    /// Must be cancel-safe: callers select on it with their cancellation and other sources, and
    /// a dropped call loses nothing (the next one returns the then current content).
    async fn next(&mut self) -> Option<Catalog>;
}

/// An entry the merged topology does without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The source's name.
    pub source: String,
    /// The entry's name.
    pub name: String,
    /// Where the entry is.
    pub origin: String,
    /// What is wrong with it.
    pub reason: String,
    /// Whether its previous valid declaration is still in force (last-known-good); otherwise
    /// the entry is left out.
    pub kept_previous: bool,
}

/// What [`Merger::merge`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// The topology to apply; the engine accepts it.
    pub topology: Topology,
    /// What was left out or held back, by source precedence then entry order.
    pub rejected: Vec<Rejection>,
}

/// Merges the catalogs of several sources into one valid topology; see the module docs.
#[derive(Debug)]
pub struct Merger {
    sources: Vec<Source>,
}

#[derive(Debug)]
struct Source {
    name: String,
    catalog: Catalog,
    /// The declaration in force per entry name: the last valid one that was applied.
    last_good: HashMap<String, Arc<Declaration>>,
}

/// A declaration competing for a place in the merged topology.
struct Candidate<'a> {
    source: usize,
    entry: &'a CatalogEntry,
    declaration: Arc<Declaration>,
    /// Whether `declaration` is the entry's last-known-good (not a new value).
    previous: bool,
}

impl Merger {
    /// A merger for sources named `names`, highest precedence first, each with an empty catalog.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        Self {
            sources: names
                .into_iter()
                .map(|name| Source {
                    name: name.into(),
                    catalog: Catalog::default(),
                    last_good: HashMap::new(),
                })
                .collect(),
        }
    }

    /// Replaces source `index`'s catalog (by the order given to [`Merger::new`]). An index out
    /// of range is ignored.
    pub fn update(&mut self, index: usize, catalog: Catalog) {
        if let Some(source) = self.sources.get_mut(index) {
            source.catalog = catalog;
        }
    }

    /// Merges the current catalogs.
    ///
    /// # Errors
    /// The engine's [`TopologyError`] when the topology is invalid in a way no entry can be
    /// blamed for (more nodes than the graph can index); the running topology should stay.
    pub fn merge(&mut self) -> Result<Merged, TopologyError> {
        let mut rejected = Vec::new();
        let mut candidates: Vec<Candidate<'_>> = Vec::new();
        let mut owners: HashMap<TargetId, (usize, &str)> = HashMap::new();
        for (index, source) in self.sources.iter().enumerate() {
            for entry in &source.catalog.entries {
                let previous = source.last_good.get(&entry.name);
                let (declaration, is_previous) = match &entry.declaration {
                    Ok(declaration) => (declaration.clone(), false),
                    Err(reason) => {
                        rejected.push(rejection(source, entry, reason.clone(), previous.is_some()));
                        match previous {
                            Some(previous) => (previous.clone(), true),
                            None => continue,
                        }
                    }
                };
                let id = declaration.id().clone();
                if let Some(&(owner, origin)) = owners.get(&id) {
                    let reason = format!(
                        "{id} is already declared by {} ({origin}), which wins",
                        self.sources[owner].name
                    );
                    rejected.push(rejection(source, entry, reason, false));
                    continue;
                }
                owners.insert(id, (index, &entry.origin));
                candidates.push(Candidate {
                    source: index,
                    entry,
                    declaration,
                    previous: is_previous,
                });
            }
        }
        let scoring = self
            .sources
            .iter()
            .find_map(|s| s.catalog.scoring)
            .unwrap_or_default();
        let readiness = self
            .sources
            .iter()
            .find_map(|s| s.catalog.readiness.clone());

        // Each round drops or reverts at least one candidate, so this ends.
        let topology = loop {
            let topology = assemble(&candidates, scoring, readiness.clone());
            let errors = match topology.check() {
                Ok(()) => break topology,
                Err(TopologyError::Graph(errors)) => errors,
                Err(other) => return Err(other),
            };
            let blamed: Vec<(usize, String)> = errors
                .iter()
                .filter_map(|e| blame(e, &candidates).map(|c| (c, e.to_string())))
                .collect();
            if blamed.is_empty() {
                return Err(TopologyError::Graph(errors));
            }
            let mut dropped = vec![false; candidates.len()];
            for (c, reason) in blamed {
                if dropped[c] {
                    continue;
                }
                let candidate = &mut candidates[c];
                let source = &self.sources[candidate.source];
                let fallback = source
                    .last_good
                    .get(&candidate.entry.name)
                    .filter(|previous| {
                        !candidate.previous && previous.id() == candidate.declaration.id()
                    });
                rejected.push(rejection(
                    source,
                    candidate.entry,
                    reason,
                    fallback.is_some(),
                ));
                match fallback {
                    Some(previous) => {
                        candidate.declaration = previous.clone();
                        candidate.previous = true;
                    }
                    None => dropped[c] = true,
                }
            }
            let mut keep = dropped.iter().map(|d| !d);
            candidates.retain(|_| keep.next().unwrap_or(true));
        };

        // What applies becomes every entry's last-known-good; gone entries are forgotten.
        let mut in_force: Vec<HashMap<String, Arc<Declaration>>> =
            vec![HashMap::new(); self.sources.len()];
        for c in &candidates {
            in_force[c.source].insert(c.entry.name.clone(), c.declaration.clone());
        }
        drop(candidates);
        for (source, in_force) in self.sources.iter_mut().zip(in_force) {
            let names: HashSet<&str> = source
                .catalog
                .entries
                .iter()
                .map(|e| e.name.as_str())
                .collect();
            source
                .last_good
                .retain(|name, _| names.contains(name.as_str()));
            source.last_good.extend(in_force);
        }
        rejected.sort_by_key(|r| {
            self.sources
                .iter()
                .position(|s| s.name == r.source)
                .unwrap_or(usize::MAX)
        });
        Ok(Merged { topology, rejected })
    }
}

fn rejection(
    source: &Source,
    entry: &CatalogEntry,
    reason: String,
    kept_previous: bool,
) -> Rejection {
    Rejection {
        source: source.name.clone(),
        name: entry.name.clone(),
        origin: entry.origin.clone(),
        reason,
        kept_previous,
    }
}

/// The topology of the candidates.
fn assemble(
    candidates: &[Candidate<'_>],
    scoring: GraphConfig,
    readiness: Option<ReadinessPolicy>,
) -> Topology {
    let mut topology = Topology {
        scoring,
        readiness,
        ..Topology::default()
    };
    for c in candidates {
        match c.declaration.as_ref() {
            Declaration::Target { spec, depends_on } => {
                topology.targets.push(TargetSpec::clone(spec));
                if !depends_on.is_empty() {
                    topology.nodes.push(NodeSpec {
                        id: spec.id.clone(),
                        kind: NodeKind::Probed,
                        depends_on: depends_on.clone(),
                    });
                }
            }
            Declaration::Group {
                id,
                depends_on,
                pool,
                rule,
            } => {
                topology.nodes.push(NodeSpec {
                    id: id.clone(),
                    kind: NodeKind::Group,
                    depends_on: depends_on.clone(),
                });
                if let Some(pool) = pool {
                    topology.pools.insert(id.clone(), **pool);
                }
                if let Some(rule) = rule {
                    topology.groups.insert(id.clone(), *rule);
                }
            }
        }
    }
    topology
}

/// The candidate to blame for a graph error: the one declaring the offending dependency or node.
/// For a cycle, every entry on it is part of the problem: the one to drop is the newest change
/// of the lowest precedence, since that is what most likely closed it.
fn blame(error: &GraphError, candidates: &[Candidate<'_>]) -> Option<usize> {
    let by_id = |id: &TargetId| candidates.iter().position(|c| c.declaration.id() == id);
    match error {
        GraphError::Cycle { chain, .. } => chain
            .iter()
            .filter_map(by_id)
            .max_by_key(|&c| (!candidates[c].previous, candidates[c].source, c)),
        GraphError::DuplicateNode { node }
        | GraphError::EmptyGroup { node }
        | GraphError::UnknownTarget { node, .. }
        | GraphError::SelfEdge { node, .. }
        | GraphError::DuplicateEdge { node, .. }
        | GraphError::BadWeight { node, .. } => by_id(node),
        GraphError::TooLarge { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Address;
    use crate::tier::spec::ProbeSpec;
    use crate::tier::tcp::spec::TcpSpec;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    fn target(name: &str, deps: &[&str]) -> Declaration {
        let port = 1000 + name.len() as u16;
        Declaration::Target {
            spec: Box::new(TargetSpec::new(
                id(name),
                ProbeSpec::Tcp(TcpSpec::connect(Address::Socket(
                    ([127, 0, 0, 1], port).into(),
                ))),
            )),
            depends_on: deps
                .iter()
                .map(|d| Dependency::new(id(d), format!("{name} -> {d}")))
                .collect(),
        }
    }

    fn group(name: &str, deps: &[&str]) -> Declaration {
        let Declaration::Target { depends_on, .. } = target(name, deps) else {
            unreachable!()
        };
        Declaration::Group {
            id: id(name),
            depends_on,
            pool: None,
            rule: None,
        }
    }

    fn entry(declaration: Result<Declaration, &str>, name: &str) -> CatalogEntry {
        CatalogEntry {
            name: name.to_owned(),
            origin: format!("key {name}"),
            declaration: declaration.map(Arc::new).map_err(str::to_owned),
        }
    }

    fn catalog(entries: Vec<CatalogEntry>) -> Catalog {
        Catalog {
            entries,
            ..Catalog::default()
        }
    }

    fn ids(merged: &Merged) -> Vec<String> {
        let mut ids: Vec<String> = merged
            .topology
            .targets
            .iter()
            .map(|t| t.id.to_string())
            .chain(merged.topology.nodes.iter().map(|n| n.id.to_string()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    #[test]
    fn the_higher_source_wins_an_id() {
        let mut merger = Merger::new(["files", "etcd"]);
        merger.update(0, catalog(vec![entry(Ok(target("db", &[])), "db")]));
        merger.update(
            1,
            catalog(vec![
                entry(Ok(target("db", &["cache"])), "db"),
                entry(Ok(target("cache", &[])), "cache"),
            ]),
        );
        let merged = merger.merge().unwrap();
        assert_eq!(ids(&merged), ["cache", "db"]);
        assert!(
            merged.topology.nodes.is_empty(),
            "the file's db has no dependencies"
        );
        assert_eq!(
            merged.rejected,
            [Rejection {
                source: "etcd".into(),
                name: "db".into(),
                origin: "key db".into(),
                reason: "db is already declared by files (key db), which wins".into(),
                kept_previous: false,
            }]
        );
    }

    #[test]
    fn an_invalid_entry_keeps_its_last_good_declaration_until_deleted() {
        let mut merger = Merger::new(["etcd"]);
        merger.update(0, catalog(vec![entry(Ok(target("db", &[])), "db")]));
        let first = merger.merge().unwrap();
        assert!(first.rejected.is_empty());

        merger.update(0, catalog(vec![entry(Err("invalid JSON at 1:2"), "db")]));
        let held = merger.merge().unwrap();
        assert_eq!(
            held.topology, first.topology,
            "the previous declaration stays"
        );
        assert_eq!(held.rejected[0].reason, "invalid JSON at 1:2");
        assert!(held.rejected[0].kept_previous);

        // Deleted: gone, and its last-known-good forgotten.
        merger.update(0, catalog(vec![]));
        assert!(merger.merge().unwrap().topology.targets.is_empty());
        merger.update(0, catalog(vec![entry(Err("still bad"), "db")]));
        let merged = merger.merge().unwrap();
        assert!(merged.topology.targets.is_empty());
        assert!(!merged.rejected[0].kept_previous);
    }

    #[test]
    fn entries_that_break_the_graph_are_rejected_and_the_rest_applies() {
        let mut merger = Merger::new(["files", "etcd"]);
        merger.update(0, catalog(vec![entry(Ok(group("svc", &["api"])), "svc")]));
        merger.update(1, catalog(vec![entry(Ok(target("api", &[])), "api")]));
        let good = merger.merge().unwrap();
        assert_eq!(ids(&good), ["api", "svc"]);

        // A new api value closes a cycle through the file's group; a new entry depends on a
        // node nobody declares; another is fine.
        merger.update(
            1,
            catalog(vec![
                entry(Ok(target("api", &["svc"])), "api"),
                entry(Ok(target("web", &["ghost"])), "web"),
                entry(Ok(target("cache", &[])), "cache"),
            ]),
        );
        let merged = merger.merge().unwrap();
        assert_eq!(ids(&merged), ["api", "cache", "svc"]);
        assert!(
            merged.topology.nodes.iter().all(|n| n.id != id("api")),
            "api is back to its dependency-free declaration"
        );
        let reasons: Vec<(&str, &str, bool)> = merged
            .rejected
            .iter()
            .map(|r| (r.name.as_str(), r.reason.as_str(), r.kept_previous))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "web",
                    "web -> ghost: web depends on unknown node ghost",
                    false
                ),
                (
                    "api",
                    "api -> svc: dependency cycle svc -> api -> svc",
                    true
                ),
            ]
        );
        merged.topology.check().unwrap();
    }

    #[test]
    fn settings_come_from_the_highest_source_that_sets_them() {
        let mut merger = Merger::new(["files", "etcd"]);
        let window = |n| GraphConfig::try_new(n, 0.5, 0.0).unwrap();
        merger.update(
            1,
            Catalog {
                scoring: Some(window(5)),
                ..Catalog::default()
            },
        );
        assert_eq!(merger.merge().unwrap().topology.scoring, window(5));
        merger.update(
            0,
            Catalog {
                scoring: Some(window(7)),
                ..Catalog::default()
            },
        );
        assert_eq!(merger.merge().unwrap().topology.scoring, window(7));
    }

    #[test]
    fn a_topology_round_trips_through_a_catalog() {
        let topology = Topology {
            targets: vec![
                match target("db", &[]) {
                    Declaration::Target { spec, .. } => *spec,
                    Declaration::Group { .. } => unreachable!(),
                },
                match target("api", &["db"]) {
                    Declaration::Target { spec, .. } => *spec,
                    Declaration::Group { .. } => unreachable!(),
                },
            ],
            nodes: vec![
                NodeSpec {
                    id: id("api"),
                    kind: NodeKind::Probed,
                    depends_on: vec![Dependency::new(id("db"), "api -> db")],
                },
                NodeSpec {
                    id: id("svc"),
                    kind: NodeKind::Group,
                    depends_on: vec![Dependency::new(id("api"), "svc -> api")],
                },
            ],
            ..Topology::default()
        };
        let mut merger = Merger::new(["files"]);
        merger.update(0, Catalog::from(topology.clone()));
        let merged = merger.merge().unwrap();
        assert_eq!(merged.topology, topology);
    }
}
