//! The compiled graph: flat arrays indexed by a dense node index that *is* the topological
//! position.
//!
//! Nodes are numbered children first, so every child has a smaller index than each of its
//! parents. A full rescore is then one pass over the arrays in index order, and the incremental
//! walk's "lowest topological position first" is "lowest index first", with no separate order
//! array to consult. Edges are stored in CSR form (compressed sparse rows): the dependencies of
//! node `i` are one contiguous run of [`Child`] records, its dependents one run of indices, and
//! the offsets of both runs sit side by side. Scoring touches only these arrays, never the hash
//! map or the ids.

use std::collections::HashMap;

use super::{Dependency, NodeKind};
use crate::target::TargetId;

/// One dependency as scoring reads it. Weight, target and flag together make 16 bytes, so a
/// node's dependencies are one or two cache lines rather than a line in each of three arrays.
#[derive(Clone, Copy, Debug)]
pub(super) struct Child {
    /// The normalised weight: a node's weights sum to 1.
    pub weight: f64,
    /// The dependency's node index.
    pub index: u32,
    /// Whether the dependency is critical.
    pub critical: bool,
}

/// Where a node's runs of children and parents start.
#[derive(Clone, Copy, Debug, Default)]
struct Starts {
    children: u32,
    parents: u32,
}

/// The topology of a validated graph, children before parents.
#[derive(Clone, Debug)]
pub(super) struct Compiled {
    /// Node ids by index.
    pub ids: Vec<TargetId>,
    /// Ids to indices.
    pub index: HashMap<TargetId, u32>,
    /// Node kinds by index.
    pub kinds: Vec<NodeKind>,
    /// CSR offsets into `children` and `parents`; one more than there are nodes.
    starts: Vec<Starts>,
    /// Dependencies, each node's in declaration order (which is the summation order).
    children: Vec<Child>,
    /// Dependents, each node's in ascending index order.
    parents: Vec<u32>,
}

impl Compiled {
    /// An empty graph with room for `nodes` and `edges`. Nodes are then added children first with
    /// [`Compiled::push`], and [`Compiled::finish`] derives the parents.
    pub fn with_capacity(nodes: usize, edges: usize) -> Self {
        let mut starts = Vec::with_capacity(nodes + 1);
        starts.push(Starts::default());
        Self {
            ids: Vec::with_capacity(nodes),
            index: HashMap::with_capacity(nodes),
            kinds: Vec::with_capacity(nodes),
            starts,
            children: Vec::with_capacity(edges),
            parents: Vec::new(),
        }
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// How many edges there are.
    pub fn edge_count(&self) -> usize {
        self.children.len()
    }

    /// The index the next pushed node gets. Validation bounds the node count by `u32::MAX`.
    pub fn next_index(&self) -> u32 {
        self.ids.len() as u32
    }

    /// Adds a node whose children are already in.
    pub fn push(
        &mut self,
        id: TargetId,
        kind: NodeKind,
        children: impl IntoIterator<Item = Child>,
    ) {
        let index = self.next_index();
        for child in children {
            debug_assert!(
                child.index < index,
                "children must be compiled before their parents"
            );
            self.children.push(child);
        }
        self.starts.push(Starts {
            children: self.children.len() as u32,
            parents: 0,
        });
        self.index.insert(id.clone(), index);
        self.ids.push(id);
        self.kinds.push(kind);
    }

    /// Derives the parents (CSR) from the children, once every node is in.
    pub fn finish(&mut self) {
        let n = self.len();
        let mut fill = vec![0u32; n + 1];
        for child in &self.children {
            fill[child.index as usize + 1] += 1;
        }
        for i in 0..n {
            fill[i + 1] += fill[i];
        }
        for (start, &at) in self.starts.iter_mut().zip(&fill) {
            start.parents = at;
        }
        self.parents = vec![0; self.children.len()];
        for parent in 0..n {
            let run =
                self.starts[parent].children as usize..self.starts[parent + 1].children as usize;
            for child in &self.children[run] {
                let at = &mut fill[child.index as usize];
                self.parents[*at as usize] = parent as u32;
                *at += 1;
            }
        }
    }

    /// Node `i`'s dependencies, in declaration order.
    pub fn children(&self, i: usize) -> &[Child] {
        &self.children[self.starts[i].children as usize..self.starts[i + 1].children as usize]
    }

    /// Node `i`'s dependents, ascending.
    pub fn parents(&self, i: usize) -> &[u32] {
        &self.parents[self.starts[i].parents as usize..self.starts[i + 1].parents as usize]
    }

    /// Whether node `i`'s dependencies are exactly `deps`: same targets, normalised weights and
    /// critical flags, in the same order (the order fixes the summation, hence the bits).
    pub fn same_dependencies(&self, i: usize, deps: &[Dependency]) -> bool {
        let children = self.children(i);
        children.len() == deps.len()
            && children
                .iter()
                .zip(deps)
                .zip(normalised(deps))
                .all(|((child, dep), weight)| {
                    self.ids[child.index as usize] == dep.target
                        && weight.to_bits() == child.weight.to_bits()
                        && child.critical == dep.critical
                })
    }
}

/// The weights of `deps` divided by their sum, in order: the one place weights are normalised,
/// so a recompiled node gets the very same bits.
pub(super) fn normalised(deps: &[Dependency]) -> impl Iterator<Item = f64> + '_ {
    let total: f64 = deps.iter().map(|d| d.weight).sum();
    deps.iter().map(move |d| d.weight / total)
}
