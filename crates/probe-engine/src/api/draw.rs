//! SVG drawing for the API: the text measure and escaping every drawing shares, and the
//! dependency graph drawn (`GET /v1/graph?format=svg`).
//!
//! The graph is laid out by levels: a node with no dependencies is on the bottom row, every
//! other one a row above its highest dependency, so every edge points down. Within a row, nodes
//! are ordered by the mean position of their dependencies (one pass, bottom up, which removes
//! most crossings of a layered drawing), then by id. Nodes are coloured by state (a group's by
//! its score) and say it in words; critical edges are drawn solid and thick, the others thin and
//! dashed. Each node's and edge's title says it in words (`GET /v1/targets/{id}/explain` has
//! the why).

use std::collections::HashMap;
use std::fmt::Write as _;

use probe::TargetId;
use probe::graph::{Export, NodeKind, NodeStatus};
use probe::health::HealthState;

/// Colours dark enough for white text (WCAG AA at 11 px).
pub(super) const GREEN: &str = "#2e7d32";
pub(super) const AMBER: &str = "#a35200";
pub(super) const RED: &str = "#c62828";
pub(super) const BLUE: &str = "#1565c0";
pub(super) const GREY: &str = "#616161";

/// The colour of `state`.
pub(super) fn state_colour(state: HealthState) -> &'static str {
    match state {
        HealthState::Up => GREEN,
        HealthState::Degraded => AMBER,
        HealthState::Down => RED,
        HealthState::Maintenance => BLUE,
        HealthState::Probing => GREY,
    }
}

/// About how wide `text` is in 11 px Verdana, with 10 px on either side.
pub(super) fn width(text: &str) -> u32 {
    let glyphs: u32 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '|' | '!' | '\'' => 3,
            ' ' | '-' | 'f' | 'r' | 't' | '(' | ')' => 4,
            'm' | 'w' | 'M' | 'W' | '%' => 10,
            'A'..='Z' => 8,
            _ => 7,
        })
        .sum();
    glyphs + 20
}

/// `text` safe inside an XML element or attribute.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Space between nodes in a row, and between rows.
const GAP: u32 = 24;
const ROW: u32 = 64;
const NODE_HEIGHT: u32 = 34;

/// The graph of `export` as an SVG document.
pub(super) fn graph(export: &Export) -> String {
    let index: HashMap<&TargetId, usize> = export
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&n.id, i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); export.nodes.len()];
    for edge in &export.edges {
        if let (Some(&from), Some(&to)) = (index.get(&edge.from), index.get(&edge.to)) {
            children[from].push(to);
        }
    }
    let levels = levels(&children);
    let height = levels.iter().copied().max().map_or(0, |l| l + 1);
    // Rows, bottom (level 0) first; each node's x once placed.
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); height];
    for (i, &level) in levels.iter().enumerate() {
        rows[level].push(i);
    }
    let widths: Vec<u32> = export
        .nodes
        .iter()
        .map(|n| width(n.id.as_str()).max(width(&label(n).0)))
        .collect();
    let mut centre = vec![0.0_f64; export.nodes.len()];
    let mut total_width = 0;
    for row in &mut rows {
        // By the mean centre of their dependencies (placed on rows below), then by id.
        let key = |&i: &usize| {
            let kids = &children[i];
            if kids.is_empty() {
                f64::MAX
            } else {
                kids.iter().map(|&k| centre[k]).sum::<f64>() / kids.len() as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = row.iter().map(|i| (key(i), *i)).collect();
        keyed.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| export.nodes[a.1].id.cmp(&export.nodes[b.1].id))
        });
        *row = keyed.into_iter().map(|(_, i)| i).collect();
        let mut x = GAP;
        for &i in row.iter() {
            centre[i] = f64::from(x) + f64::from(widths[i]) / 2.0;
            x += widths[i] + GAP;
        }
        total_width = total_width.max(x);
    }
    let height_px = u32::try_from(height).unwrap_or(u32::MAX) * ROW + GAP;
    // Row `level` is drawn `height - 1 - level` rows from the top: dependents above.
    let top = |level: usize| u32::try_from(height - 1 - level).unwrap_or(0) * ROW + GAP;
    let mut out = String::new();
    let _ = write!(
        out,
        concat!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="dependency graph">"#,
            "<title>dependency graph</title>",
            r#"<g font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">"#,
        ),
        w = total_width.max(GAP),
        h = height_px
    );
    for edge in &export.edges {
        let (Some(&from), Some(&to)) = (index.get(&edge.from), index.get(&edge.to)) else {
            continue;
        };
        let (x1, y1) = (centre[from], top(levels[from]) + NODE_HEIGHT);
        let (x2, y2) = (centre[to], top(levels[to]));
        let style = if edge.critical {
            r##"class="edge critical" stroke="#333" stroke-width="2""##
        } else {
            r##"class="edge" stroke="#888" stroke-width="1" stroke-dasharray="4 3""##
        };
        let _ = write!(
            out,
            r#"<line x1="{x1:.1}" y1="{y1}" x2="{x2:.1}" y2="{y2}" {style}><title>{} depends on {}{} (weight {:.2})</title></line>"#,
            escape(edge.from.as_str()),
            escape(edge.to.as_str()),
            if edge.critical { ", critically" } else { "" },
            edge.weight,
        );
    }
    for (i, node) in export.nodes.iter().enumerate() {
        let (words, colour) = label(node);
        let x = centre[i] - f64::from(widths[i]) / 2.0;
        let y = top(levels[i]);
        let id = escape(node.id.as_str());
        let title = format!(
            "{id}: {}{}",
            escape(&words),
            if node.dependency_down && node.state.is_some() {
                ", a critical dependency is DOWN"
            } else {
                ""
            }
        );
        let kind = match node.kind {
            NodeKind::Probed => "target",
            NodeKind::Group => "group",
        };
        let _ = write!(
            out,
            concat!(
                r#"<g class="node {kind}" data-id="{id}"><title>{title}</title>"#,
                r#"<rect x="{x:.1}" y="{y}" width="{w}" height="{nh}" rx="{rx}" fill="{colour}"/>"#,
                r##"<text x="{cx:.1}" y="{ty}" fill="#fff">{id}</text>"##,
                r##"<text x="{cx:.1}" y="{sy}" fill="#fff">{words}</text></g>"##,
            ),
            kind = kind,
            id = id,
            title = title,
            x = x,
            y = y,
            w = widths[i],
            nh = NODE_HEIGHT,
            rx = if node.kind == NodeKind::Group { 12 } else { 3 },
            colour = colour,
            cx = centre[i],
            ty = y + 14,
            sy = y + 28,
            words = escape(&words),
        );
    }
    out.push_str("</g></svg>");
    out
}

/// A node's words and colour in the drawing: its verdict (a group's as its rule judges it) and
/// its score.
pub(super) fn label(node: &NodeStatus) -> (String, &'static str) {
    let state = node.state.unwrap_or(HealthState::Probing);
    let score = node
        .score
        .map_or_else(String::new, |s| format!(" {:.2}", s));
    (format!("{}{score}", state.as_str()), state_colour(state))
}

/// Each node's level: 0 without dependencies, else one above its highest dependency. The graph
/// is acyclic (the engine refuses cycles), so the walk ends.
fn levels(children: &[Vec<usize>]) -> Vec<usize> {
    let mut level: Vec<Option<usize>> = vec![None; children.len()];
    for start in 0..children.len() {
        // Iterative depth-first: a node is done once its children are.
        let mut stack = vec![(start, false)];
        while let Some((i, expanded)) = stack.pop() {
            if level[i].is_some() {
                continue;
            }
            if expanded {
                let top = children[i]
                    .iter()
                    .filter_map(|&c| level[c])
                    .max()
                    .map_or(0, |l| l + 1);
                level[i] = Some(top);
            } else {
                stack.push((i, true));
                stack.extend(
                    children[i]
                        .iter()
                        .filter(|&&c| level[c].is_none())
                        .map(|&c| (c, false)),
                );
            }
        }
    }
    level.into_iter().map(Option::unwrap_or_default).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_one_level_above_its_highest_dependency() {
        // 0 -> 1 -> 2, 0 -> 2, 3 alone.
        let children = vec![vec![1, 2], vec![2], vec![], vec![]];
        assert_eq!(levels(&children), [2, 1, 0, 0]);
    }

    #[test]
    fn every_value_is_escaped() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
