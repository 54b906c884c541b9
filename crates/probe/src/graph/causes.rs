//! Root causes: which DOWN targets are why others are failing.
//!
//! A node is `dependency_down` when one of its critical dependencies is DOWN. That dependency is
//! its cause, unless it is itself `dependency_down`: then the cause is further down, and so on
//! to the DOWN nodes none of whose critical dependencies is DOWN: the roots. A node's roots are
//! what an operator must fix (and what an alert should name); the nodes a root makes
//! `dependency_down`, directly or through others, are what it impacts. Only DOWN counts: a
//! dependency without a verdict yet (PROBING) is no cause.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::NodeKind;
use super::explain::Export;
use crate::health::state::HealthState;
use crate::target::TargetId;

/// The roots of the graph's failures, as of one export.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Causes {
    /// Each root, with every node it makes `dependency_down` (directly or through others).
    pub impacts: BTreeMap<TargetId, BTreeSet<TargetId>>,
    /// Each `dependency_down` node, with its roots.
    pub roots: BTreeMap<TargetId, BTreeSet<TargetId>>,
}

impl Causes {
    /// The causes in `export` (see the module docs).
    pub fn of(export: &Export) -> Self {
        let index: HashMap<&TargetId, usize> = export
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (&n.id, i))
            .collect();
        let mut critical: Vec<Vec<usize>> = vec![Vec::new(); export.nodes.len()];
        for edge in export.edges.iter().filter(|e| e.critical) {
            if let (Some(&from), Some(&to)) = (index.get(&edge.from), index.get(&edge.to)) {
                critical[from].push(to);
            }
        }
        // What caps a parent: a probed node DOWN (a group's verdict caps nothing).
        let down = |i: usize| {
            export.nodes[i].kind == NodeKind::Probed
                && export.nodes[i].state == Some(HealthState::Down)
        };
        let mut memo: Vec<Option<BTreeSet<usize>>> = vec![None; export.nodes.len()];
        let mut causes = Self::default();
        for (i, node) in export.nodes.iter().enumerate() {
            if !node.dependency_down {
                continue;
            }
            let roots = roots_of(i, &critical, &down, &export.nodes, &mut memo);
            if roots.is_empty() {
                continue;
            }
            for &root in &roots {
                causes
                    .impacts
                    .entry(export.nodes[root].id.clone())
                    .or_default()
                    .insert(node.id.clone());
            }
            causes.roots.insert(
                node.id.clone(),
                roots.iter().map(|&r| export.nodes[r].id.clone()).collect(),
            );
        }
        causes
    }

    /// Whether `id` fails because of something else: it has roots other than itself.
    pub fn is_impacted(&self, id: &TargetId) -> bool {
        self.roots.contains_key(id)
    }
}

/// The roots behind node `i`: its DOWN critical dependencies, each replaced by its own roots
/// when it is `dependency_down` too. The graph is acyclic, so the walk ends; each node's roots
/// are found once.
fn roots_of(
    i: usize,
    critical: &[Vec<usize>],
    down: &impl Fn(usize) -> bool,
    nodes: &[super::explain::NodeStatus],
    memo: &mut Vec<Option<BTreeSet<usize>>>,
) -> BTreeSet<usize> {
    if let Some(known) = &memo[i] {
        return known.clone();
    }
    let mut roots = BTreeSet::new();
    for &child in &critical[i] {
        if !down(child) {
            continue;
        }
        if nodes[child].dependency_down {
            let deeper = roots_of(child, critical, down, nodes, memo);
            if deeper.is_empty() {
                roots.insert(child);
            } else {
                roots.extend(deeper);
            }
        } else {
            roots.insert(child);
        }
    }
    memo[i] = Some(roots.clone());
    roots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Dependency, Graph, GraphConfig, NodeKind, NodeSpec};
    use crate::health::state::Quality;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    fn node(name: &str, kind: NodeKind, critical_deps: &[&str], other_deps: &[&str]) -> NodeSpec {
        let dep = |t: &&str, critical| Dependency {
            critical,
            ..Dependency::new(id(t), format!("test.yaml:{t}"))
        };
        NodeSpec {
            id: id(name),
            kind,
            depends_on: critical_deps
                .iter()
                .map(|t| dep(t, true))
                .chain(other_deps.iter().map(|t| dep(t, false)))
                .collect(),
        }
    }

    fn set(g: &mut Graph, name: &str, state: HealthState) {
        let quality = if state == HealthState::Down {
            Quality::Failed
        } else {
            Quality::Good
        };
        g.record(&id(name), quality, state).unwrap();
    }

    fn ids(names: &[&str]) -> BTreeSet<TargetId> {
        names.iter().map(|n| id(n)).collect()
    }

    #[test]
    fn a_down_database_is_the_one_root_of_what_depends_on_it_critically() {
        use NodeKind::{Group, Probed};
        let specs = [
            node("db", Probed, &[], &[]),
            node("cache", Probed, &[], &[]),
            node("orders", Probed, &["db"], &["cache"]),
            node("billing", Probed, &["db"], &[]),
            node("shop", Group, &["db"], &["orders"]),
            node("report", Probed, &[], &["db"]),
        ];
        let mut g = Graph::build(GraphConfig::default(), &specs).unwrap();
        for name in ["db", "cache", "orders", "billing", "report"] {
            set(&mut g, name, HealthState::Up);
        }
        assert_eq!(Causes::of(&g.view().export()), Causes::default());
        set(&mut g, "db", HealthState::Down);
        // The services fail too, but because of the database.
        set(&mut g, "orders", HealthState::Down);
        let causes = Causes::of(&g.view().export());
        assert_eq!(
            causes.impacts,
            BTreeMap::from([(id("db"), ids(&["billing", "orders", "shop"]))])
        );
        assert!(causes.is_impacted(&id("orders")));
        assert!(!causes.is_impacted(&id("db")));
        // A non-critical dependent is not impacted.
        assert!(!causes.is_impacted(&id("report")));
    }

    #[test]
    fn a_chain_of_down_nodes_leads_to_its_bottom_and_unknown_is_no_cause() {
        use NodeKind::Probed;
        let specs = [
            node("disk", Probed, &[], &[]),
            node("db", Probed, &["disk"], &[]),
            node("api", Probed, &["db"], &[]),
            node("new", Probed, &[], &[]),
            node("web", Probed, &["new"], &[]),
        ];
        let mut g = Graph::build(GraphConfig::default(), &specs).unwrap();
        for name in ["disk", "db", "api"] {
            set(&mut g, name, HealthState::Down);
        }
        // `new` has no verdict yet (PROBING): `web` has no cause.
        set(&mut g, "web", HealthState::Down);
        let causes = Causes::of(&g.view().export());
        assert_eq!(
            causes.impacts,
            BTreeMap::from([(id("disk"), ids(&["api", "db"]))])
        );
        assert_eq!(causes.roots[&id("api")], ids(&["disk"]));
        assert!(!causes.is_impacted(&id("web")));
        // The bottom recovers: db is the root now.
        set(&mut g, "disk", HealthState::Up);
        let causes = Causes::of(&g.view().export());
        assert_eq!(causes.impacts, BTreeMap::from([(id("db"), ids(&["api"]))]));
    }

    #[test]
    fn two_roots_share_what_both_take_down() {
        use NodeKind::Probed;
        let specs = [
            node("a", Probed, &[], &[]),
            node("b", Probed, &[], &[]),
            node("both", Probed, &["a", "b"], &[]),
        ];
        let mut g = Graph::build(GraphConfig::default(), &specs).unwrap();
        set(&mut g, "a", HealthState::Down);
        set(&mut g, "b", HealthState::Down);
        set(&mut g, "both", HealthState::Up);
        let causes = Causes::of(&g.view().export());
        assert_eq!(causes.roots[&id("both")], ids(&["a", "b"]));
        assert_eq!(causes.impacts.len(), 2);
    }
}
