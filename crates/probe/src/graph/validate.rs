//! Validation of a declared set of nodes: every error at once, cycles with their whole chain.
//!
//! A configuration front end wants to show an operator everything that is wrong with a file in one
//! go, so nothing here stops at the first error. Edges that are invalid on their own (unknown or
//! self target, duplicate) are left out of the cycle search, so one mistake is not reported twice.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;

use petgraph::graph::{DiGraph, NodeIndex};

use super::{Dependency, NodeKind, NodeSpec};
use crate::target::TargetId;

/// Why a set of [`NodeSpec`]s is not a valid dependency graph.
///
/// Errors about an edge quote the edge's [`Dependency::origin`], so the front end that built the
/// specs can point at the right line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// Two specs declare the same id. The first one is validated, the later ones are not.
    #[error("node {node} is declared more than once")]
    DuplicateNode {
        /// The repeated id.
        node: TargetId,
    },
    /// A dependency names a node that is not declared.
    #[error("{origin}: {node} depends on unknown node {target}")]
    UnknownTarget {
        /// The node that declares the dependency.
        node: TargetId,
        /// The missing node.
        target: TargetId,
        /// Where the dependency is declared.
        origin: String,
    },
    /// A node depends on itself, which is a cycle of one.
    #[error("{origin}: {node} depends on itself")]
    SelfEdge {
        /// The node.
        node: TargetId,
        /// Where the dependency is declared.
        origin: String,
    },
    /// A node names the same dependency twice; its weight would be ambiguous.
    #[error("{origin}: {node} depends on {target} again (first at {first})")]
    DuplicateEdge {
        /// The node that declares the dependencies.
        node: TargetId,
        /// The repeated target.
        target: TargetId,
        /// Where the repeated dependency is declared.
        origin: String,
        /// Where the first one is declared.
        first: String,
    },
    /// Weights are relative shares: positive, and at most [`Dependency::MAX_WEIGHT`].
    #[error(
        "{origin}: dependency {node} -> {target} has weight {weight}; expected a number > 0 and <= {max}",
        max = Dependency::MAX_WEIGHT
    )]
    BadWeight {
        /// The node that declares the dependency.
        node: TargetId,
        /// The dependency's target.
        target: TargetId,
        /// The rejected weight.
        weight: f64,
        /// Where the dependency is declared.
        origin: String,
    },
    /// A group's score is made only of its dependencies, so it needs at least one.
    #[error("group {node} has no dependencies")]
    EmptyGroup {
        /// The group.
        node: TargetId,
    },
    /// Dependencies form a cycle, so no node on it can be scored. One error per strongly
    /// connected component: fixing the reported cycle may reveal another in the same component.
    #[error("{origin}: dependency cycle {chain}", chain = Chain(.chain))]
    Cycle {
        /// The cycle, starting and ending at the same node: `a -> b -> c -> a`.
        chain: Vec<TargetId>,
        /// Where the edge that closes the cycle (the last one) is declared.
        origin: String,
    },
    /// The compiled form indexes nodes and edges with `u32`.
    #[error("{nodes} nodes and {edges} edges exceed the limit of {max} each", max = u32::MAX)]
    TooLarge {
        /// How many nodes were declared.
        nodes: usize,
        /// How many dependencies were declared.
        edges: usize,
    },
}

impl GraphError {
    /// Where the offending dependency is declared, for the errors about one: the
    /// [`Dependency::origin`] that their message starts with.
    pub fn origin(&self) -> Option<&str> {
        match self {
            Self::UnknownTarget { origin, .. }
            | Self::SelfEdge { origin, .. }
            | Self::DuplicateEdge { origin, .. }
            | Self::BadWeight { origin, .. }
            | Self::Cycle { origin, .. } => Some(origin),
            Self::DuplicateNode { .. } | Self::EmptyGroup { .. } | Self::TooLarge { .. } => None,
        }
    }
}

/// Displays a cycle as `a -> b -> a`.
struct Chain<'a>(&'a [TargetId]);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, id) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" -> ")?;
            }
            write!(f, "{id}")?;
        }
        Ok(())
    }
}

/// Where a dependency points.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    /// A node of the validated set, by its position in the specs.
    Spec(usize),
    /// A node outside the set (already compiled), by its index there.
    Outside(u32),
}

/// A valid set of specs, ready to compile.
#[derive(Debug)]
pub(super) struct Validated {
    /// Spec positions, children before parents.
    pub order: Vec<usize>,
    /// The targets of spec `j`'s dependencies, in declaration order, are
    /// `targets[starts[j]..starts[j + 1]]`.
    pub starts: Vec<usize>,
    /// See `starts`.
    pub targets: Vec<Target>,
}

/// One resolved dependency, kept for the cycle search.
#[derive(Clone, Copy)]
struct Edge {
    target: Target,
    /// Its position in the node's `depends_on`, to quote its origin.
    dep: usize,
}

/// Validates `specs`, whose dependencies may also name nodes outside the set.
///
/// `outside` resolves such a node to its index among `outside_len` compiled nodes. The caller
/// guarantees that outside nodes do not depend on the set (so cycles stay within it): that is
/// what lets [`Graph::apply`](super::Graph::apply) validate only added nodes.
pub(super) fn validate(
    specs: &[&NodeSpec],
    outside: impl Fn(&TargetId) -> Option<u32>,
    outside_len: usize,
) -> Result<Validated, Vec<GraphError>> {
    let n = specs.len();
    let m: usize = specs.iter().map(|s| s.depends_on.len()).sum();
    if u32::try_from(n + outside_len).is_err() || u32::try_from(m).is_err() {
        return Err(vec![GraphError::TooLarge { nodes: n, edges: m }]);
    }
    let mut errors = Vec::new();
    let mut resolver = Resolver {
        index: HashMap::with_capacity(n),
        outside,
        nodes: n,
        seen: vec![(0, 0); n + outside_len],
    };
    let mut declared = vec![true; n];
    for (j, spec) in specs.iter().enumerate() {
        match resolver.index.entry(&spec.id) {
            Entry::Vacant(slot) => {
                slot.insert(j);
            }
            Entry::Occupied(_) => {
                declared[j] = false;
                errors.push(GraphError::DuplicateNode {
                    node: spec.id.clone(),
                });
            }
        }
    }

    let mut starts = Vec::with_capacity(n + 1);
    let mut edges = Vec::with_capacity(m);
    starts.push(0);
    for (j, spec) in specs.iter().enumerate() {
        if declared[j] {
            resolver.check(j, spec, &mut errors, &mut edges);
        }
        starts.push(edges.len());
    }

    let mut graph = DiGraph::<(), ()>::with_capacity(n, edges.len());
    for _ in 0..n {
        graph.add_node(());
    }
    for (j, window) in starts.windows(2).enumerate() {
        for edge in &edges[window[0]..window[1]] {
            if let Target::Spec(t) = edge.target {
                graph.add_edge(NodeIndex::new(j), NodeIndex::new(t), ());
            }
        }
    }
    // Kosaraju's algorithm is iterative (a deep chain cannot overflow the stack) and yields the
    // components children first, which is the order compiling needs when there is no cycle.
    let components = petgraph::algo::kosaraju_scc(&graph);
    let mut component = vec![0usize; n];
    for (c, members) in components.iter().enumerate() {
        for node in members {
            component[node.index()] = c;
        }
    }
    for (c, members) in components.iter().enumerate() {
        if members.len() < 2 {
            continue;
        }
        let start = members.iter().map(|v| v.index()).min().unwrap_or_default();
        let within = |v: usize| component[v] == c;
        errors.extend(shortest_cycle(specs, &starts, &edges, start, within));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let order = components
        .into_iter()
        .flatten()
        .map(|v| v.index())
        .collect();
    let targets = edges.into_iter().map(|e| e.target).collect();
    Ok(Validated {
        order,
        starts,
        targets,
    })
}

/// Resolves and checks dependencies.
struct Resolver<'a, F> {
    /// Declared ids (the first of duplicates) to their position.
    index: HashMap<&'a TargetId, usize>,
    /// Resolves nodes outside the set.
    outside: F,
    /// How many specs there are: the first key of outside nodes.
    nodes: usize,
    /// `seen[key]` is (1 + the spec that last named the target, the dependency that did), where
    /// `key` numbers set nodes first and outside nodes after: a duplicate check that needs no
    /// set per node.
    seen: Vec<(usize, usize)>,
}

impl<F: Fn(&TargetId) -> Option<u32>> Resolver<'_, F> {
    /// Checks spec `j` and its dependencies; appends its valid edges to `edges`.
    fn check(
        &mut self,
        j: usize,
        spec: &NodeSpec,
        errors: &mut Vec<GraphError>,
        edges: &mut Vec<Edge>,
    ) {
        if spec.kind == NodeKind::Group && spec.depends_on.is_empty() {
            errors.push(GraphError::EmptyGroup {
                node: spec.id.clone(),
            });
        }
        for (k, dep) in spec.depends_on.iter().enumerate() {
            if !(dep.weight > 0.0 && dep.weight <= Dependency::MAX_WEIGHT) {
                errors.push(GraphError::BadWeight {
                    node: spec.id.clone(),
                    target: dep.target.clone(),
                    weight: dep.weight,
                    origin: dep.origin.clone(),
                });
            }
            if dep.target == spec.id {
                errors.push(GraphError::SelfEdge {
                    node: spec.id.clone(),
                    origin: dep.origin.clone(),
                });
                continue;
            }
            let (target, key) = if let Some(&t) = self.index.get(&dep.target) {
                (Target::Spec(t), t)
            } else if let Some(o) = (self.outside)(&dep.target) {
                (Target::Outside(o), self.nodes + o as usize)
            } else {
                errors.push(GraphError::UnknownTarget {
                    node: spec.id.clone(),
                    target: dep.target.clone(),
                    origin: dep.origin.clone(),
                });
                continue;
            };
            let (by, first) = self.seen[key];
            if by == j + 1 {
                errors.push(GraphError::DuplicateEdge {
                    node: spec.id.clone(),
                    target: dep.target.clone(),
                    origin: dep.origin.clone(),
                    first: spec.depends_on[first].origin.clone(),
                });
                continue;
            }
            self.seen[key] = (j + 1, k);
            edges.push(Edge { target, dep: k });
        }
    }
}

/// The shortest cycle through `start` within a strongly connected component, found breadth
/// first along dependencies in declaration order, so the same input always gives the same chain.
fn shortest_cycle(
    specs: &[&NodeSpec],
    starts: &[usize],
    edges: &[Edge],
    start: usize,
    within: impl Fn(usize) -> bool,
) -> Option<GraphError> {
    let mut previous: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(u) = queue.pop_front() {
        for edge in &edges[starts[u]..starts[u + 1]] {
            let Target::Spec(v) = edge.target else {
                continue;
            };
            if v == start {
                let mut chain = vec![specs[u].id.clone()];
                let mut at = u;
                while at != start {
                    at = previous.get(&at).copied()?;
                    chain.push(specs[at].id.clone());
                }
                chain.reverse();
                chain.push(specs[start].id.clone());
                return Some(GraphError::Cycle {
                    chain,
                    origin: specs[u].depends_on[edge.dep].origin.clone(),
                });
            }
            if within(v) && !previous.contains_key(&v) {
                previous.insert(v, u);
                queue.push_back(v);
            }
        }
    }
    None
}
