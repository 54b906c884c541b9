//! Reading the graph: one node's status, why it scores what it scores, and the whole graph for an
//! API or as Graphviz DOT.
//!
//! They read a [`GraphView`], without a lock, and copy out of it; they are for requests and
//! operators, not the hot path.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use super::{GraphView, NodeKind};
use crate::health::state::HealthState;
use crate::target::TargetId;

/// One node's score and state.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeStatus {
    /// The node.
    pub id: TargetId,
    /// Probed or group.
    pub kind: NodeKind,
    /// The score in `[0, 1]`; `None` while unknown (a probed node below, or this one, has not
    /// reached its first verdict).
    pub score: Option<f64>,
    /// Whether a critical dependency is DOWN (the score is capped).
    pub dependency_down: bool,
    /// The node's verdict: a probed node's state, a group's as its rule judges it
    /// ([`GroupRule`](super::GroupRule)). `None` only for a probed node the engine has not
    /// reported on.
    pub state: Option<HealthState>,
    /// Whether a group is held in PROBING for flapping (a target's flag is on its status).
    pub flapping: bool,
}

/// One dependency, as exported.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// The dependent node.
    pub from: TargetId,
    /// The node depended on.
    pub to: TargetId,
    /// The normalised weight: a node's edges sum to 1.
    pub weight: f64,
    /// Whether the dependency is critical.
    pub critical: bool,
}

/// The whole graph: nodes by id, and edges by dependent (by id), each node's in declaration
/// order.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    /// Every node.
    pub nodes: Vec<NodeStatus>,
    /// Every dependency.
    pub edges: Vec<Edge>,
}

/// Why a node scores what it does.
///
/// Displays on one line, e.g.
/// `checkout 0.42: orders-api 0.70 (w 0.60, critical) DEGRADED; cache 0.00 (w 0.40) DOWN`.
/// Each node adds its state (a group's verdict) after its score, a probed node `, stability 0.95` when it has
/// dependencies and `, sla 0.9990` when it has an SLA; a capped node adds `, dependency down`, and the capping child `caps`.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// The node's score and state.
    pub node: NodeStatus,
    /// The factor its children's mean is multiplied by: the success ratio of a probed node
    /// (`None` before its first result) times its SLA, 1 for a group.
    pub stability: Option<f64>,
    /// The probed node's SLA, when the embedder gave one
    /// ([`Graph::set_sla`](super::Graph::set_sla)).
    pub sla: Option<f64>,
    /// Its dependencies, in declaration order.
    pub children: Vec<ChildExplanation>,
}

/// One dependency's part in an [`Explanation`].
#[derive(Clone, Debug, PartialEq)]
pub struct ChildExplanation {
    /// The child's score and state.
    pub node: NodeStatus,
    /// The normalised weight.
    pub weight: f64,
    /// Whether the dependency is critical.
    pub critical: bool,
    /// Whether this child caps the parent: critical and DOWN.
    pub caps: bool,
}

impl GraphView {
    /// A node's score and state, or `None` when it is not in the graph.
    pub fn status(&self, id: &TargetId) -> Option<NodeStatus> {
        let &i = self.topo.index.get(id)?;
        Some(self.node_status(i as usize))
    }

    /// Why a node scores what it does, or `None` when it is not in the graph.
    pub fn explain(&self, id: &TargetId) -> Option<Explanation> {
        let i = *self.topo.index.get(id)? as usize;
        let node = self.read(i);
        let children = self
            .topo
            .children(i)
            .iter()
            .map(|child| {
                let status = self.node_status(child.index as usize);
                ChildExplanation {
                    caps: child.critical
                        && status.kind == NodeKind::Probed
                        && status.state == Some(HealthState::Down),
                    node: status,
                    weight: child.weight,
                    critical: child.critical,
                }
            })
            .collect();
        Some(Explanation {
            node: self.node_status(i),
            stability: known(node.stability),
            sla: node.sla,
            children,
        })
    }

    /// The nodes `id` covers: those it depends on, theirs, and so on down to the leaves (each
    /// once, in no order, without `id` itself); `None` when `id` is not in the graph. For a
    /// group, every target whose health counts toward it.
    pub fn covered(&self, id: &TargetId) -> Option<HashSet<&TargetId>> {
        let start = *self.topo.index.get(id)? as usize;
        let mut seen = vec![false; self.topo.len()];
        let mut todo = vec![start];
        let mut covered = HashSet::new();
        while let Some(i) = todo.pop() {
            for child in self.topo.children(i) {
                let c = child.index as usize;
                if !seen[c] {
                    seen[c] = true;
                    covered.insert(&self.topo.ids[c]);
                    todo.push(c);
                }
            }
        }
        Some(covered)
    }

    /// Every node's status, in no order and without the edges: cheaper than a sorted
    /// [`GraphView::export`] for a watcher that compares them.
    pub fn nodes(&self) -> impl Iterator<Item = NodeStatus> + '_ {
        (0..self.topo.len()).map(|i| self.node_status(i))
    }

    /// The group nodes' statuses, in no order, without copying the probed nodes'.
    pub fn groups(&self) -> impl Iterator<Item = NodeStatus> + '_ {
        (0..self.topo.len())
            .filter(|&i| self.topo.kinds[i] == NodeKind::Group)
            .map(|i| self.node_status(i))
    }

    /// Every node and edge, sorted for a stable API output.
    pub fn export(&self) -> Export {
        let order = self.by_id();
        let nodes = order.iter().map(|&i| self.node_status(i)).collect();
        let edges = order
            .iter()
            .flat_map(|&i| {
                self.topo.children(i).iter().map(move |child| Edge {
                    from: self.topo.ids[i].clone(),
                    to: self.topo.ids[child.index as usize].clone(),
                    weight: child.weight,
                    critical: child.critical,
                })
            })
            .collect();
        Export { nodes, edges }
    }

    /// The graph in Graphviz DOT: probed nodes as boxes and groups as ellipses, filled from red
    /// (score 0) through yellow to green (1), grey while unknown; edges labelled with their
    /// normalised weight, critical ones bold. Nodes are sorted by id, so equal graphs render the
    /// same text.
    pub fn to_dot(&self) -> String {
        let mut dot = String::from("digraph dependencies {\n  node [style=filled];\n");
        let order = self.by_id();
        for &i in &order {
            let status = self.node_status(i);
            let shape = match status.kind {
                NodeKind::Probed => "box",
                NodeKind::Group => "ellipse",
            };
            let mut label = escape(status.id.as_str());
            label.push_str("\\n");
            label.push_str(&Score(status.score).to_string());
            if let Some(state) = status.state {
                label.push(' ');
                label.push_str(state.as_str());
            }
            if status.dependency_down {
                label.push_str("\\ndependency down");
            }
            let fill = match status.score {
                // HSV: hue 0 is red, 1/3 green.
                Some(score) => format!("{:.3} 0.400 1.000", score / 3.0),
                None => "lightgrey".to_owned(),
            };
            let _ = writeln!(
                dot,
                "  \"{}\" [shape={shape}, label=\"{label}\", fillcolor=\"{fill}\"];",
                escape(status.id.as_str())
            );
        }
        for &i in &order {
            for child in self.topo.children(i) {
                let bold = if child.critical { ", style=bold" } else { "" };
                let _ = writeln!(
                    dot,
                    "  \"{}\" -> \"{}\" [label=\"{:.2}\"{bold}];",
                    escape(self.topo.ids[i].as_str()),
                    escape(self.topo.ids[child.index as usize].as_str()),
                    child.weight,
                );
            }
        }
        dot.push_str("}\n");
        dot
    }

    fn node_status(&self, i: usize) -> NodeStatus {
        let values = self.read(i);
        NodeStatus {
            id: self.topo.ids[i].clone(),
            kind: self.topo.kinds[i],
            score: known(values.score),
            dependency_down: values.dependency_down,
            state: values.state,
            flapping: values.flapping,
        }
    }

    /// Node indices sorted by id.
    fn by_id(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.topo.len()).collect();
        order.sort_unstable_by(|&a, &b| self.topo.ids[a].cmp(&self.topo.ids[b]));
        order
    }
}

/// The module's NaN-for-unknown, as the API's `None`.
fn known(x: f64) -> Option<f64> {
    (!x.is_nan()).then_some(x)
}

/// Escapes a string for a double-quoted DOT id or label. Target ids cannot hold `"` or `\`
/// today; escaping anyway keeps the output valid if the id alphabet ever widens.
pub(super) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A score with two decimals, or `unknown`.
struct Score(Option<f64>);

impl fmt::Display for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(score) => write!(f, "{score:.2}"),
            None => f.write_str("unknown"),
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.node.id, Score(self.node.score))?;
        if let Some(state) = self.node.state {
            write!(f, " {state}")?;
        }
        if self.node.kind == NodeKind::Probed && !self.children.is_empty() {
            write!(f, ", stability {}", Score(self.stability))?;
        }
        if let Some(sla) = self.sla {
            write!(f, ", sla {sla:.4}")?;
        }
        if self.node.dependency_down {
            f.write_str(", dependency down")?;
        }
        for (n, child) in self.children.iter().enumerate() {
            f.write_str(if n == 0 { ": " } else { "; " })?;
            write!(
                f,
                "{} {} (w {:.2}",
                child.node.id,
                Score(child.node.score),
                child.weight
            )?;
            if child.critical {
                f.write_str(", critical")?;
            }
            if child.caps {
                f.write_str(", caps")?;
            }
            f.write_str(")")?;
            if let Some(state) = child.node.state {
                write!(f, " {state}")?;
            }
        }
        Ok(())
    }
}
