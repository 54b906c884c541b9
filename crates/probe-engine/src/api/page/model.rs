//! What the page shows, from one snapshot: the overview, the rows the filter picks (groups
//! first, then the worst states first), the page of them asked for, the drawing of the graph,
//! and what the history says of the page's rows.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::StatusCode;
use probe::TargetId;
use probe::engine::{MaintenanceInfo, TargetStatus};
use probe::graph::{Causes, Export, NodeKind, NodeStatus};
use probe::health::HealthState;
use serde::Deserialize;

use super::super::draw;
use super::super::shared::{ApiError, ApiState, parse_id};
use crate::history::codec::Day;
use crate::history::rollup::DAY_MS;
use crate::history::store::parse_state;
use crate::history::uptime::WINDOWS;
use crate::history::{History, HistoryError, TransitionRow, Uptime, now_ms};

/// The windows of the uptime columns, by their names in [`WINDOWS`].
pub(super) const UPTIME_WINDOWS: [&str; 3] = ["24h", "7d", "30d"];

/// Days in the daily uptime bar, today's included.
pub(super) const BAR_DAYS: i64 = 90;

/// How far back the incidents go.
pub(super) const INCIDENTS_MS: i64 = 24 * 3_600_000;

/// The most transitions the incidents are grouped from.
pub(super) const INCIDENT_TRANSITIONS: i64 = 5_000;

/// The page's query: every field may be empty, as a GET form sends the ones left blank.
/// Unknown fields are ignored: `?token=` is the guard's.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct PageQuery {
    state: String,
    group: String,
    q: String,
    page: String,
}

/// What the rows are filtered by, and which page of them is shown.
pub(super) struct Filter {
    /// Rows in this state (a group's verdict as its rule judges it).
    pub(super) state: Option<HealthState>,
    /// Rows a group (or any node) depends on, directly or not.
    pub(super) group: Option<TargetId>,
    /// Rows whose id, reason or maintenance reason holds this, in any case; as typed.
    pub(super) text: Option<String>,
    /// From 1.
    pub(super) page: usize,
}

impl Filter {
    /// The filter a query asks for, or a 400 saying what is wrong with it.
    pub(super) fn parse(query: &PageQuery) -> Result<Self, ApiError> {
        let bad = |why: String| ApiError::new(StatusCode::BAD_REQUEST, why);
        let state = match query.state.trim() {
            "" => None,
            name => Some(parse_state(&name.to_ascii_uppercase()).ok_or_else(|| {
                bad(format!(
                    "unknown state {name:?}: expected UP, DEGRADED, PROBING, MAINTENANCE or DOWN"
                ))
            })?),
        };
        let group = match query.group.trim() {
            "" => None,
            id => Some(parse_id(id)?),
        };
        let text = Some(query.q.trim().to_owned()).filter(|t| !t.is_empty());
        let page = match query.page.trim() {
            "" => 1,
            n => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad(format!("page {n:?} is not a page number (1, 2, ...)")))?,
        };
        Ok(Self {
            state,
            group,
            text,
            page,
        })
    }

    /// Whether anything is filtered.
    pub(super) fn any(&self) -> bool {
        self.state.is_some() || self.group.is_some() || self.text.is_some()
    }

    /// The address of page `page` under this filter.
    pub(super) fn href(&self, page: usize) -> String {
        let mut parts = Vec::new();
        if let Some(state) = self.state {
            parts.push(format!("state={}", state.as_str()));
        }
        if let Some(group) = &self.group {
            parts.push(format!("group={}", group.as_str()));
        }
        if let Some(text) = &self.text {
            parts.push(format!("q={}", form_encode(text)));
        }
        if page > 1 {
            parts.push(format!("page={page}"));
        }
        if parts.is_empty() {
            "/status".to_owned()
        } else {
            format!("/status?{}", parts.join("&"))
        }
    }
}

/// `text` as a form value: what is not unreserved, percent-encoded by its UTF-8 bytes.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// One read of the engine: the listing, the graph and its root causes, readiness.
pub(super) struct Snapshot {
    pub(super) listing: Vec<Arc<TargetStatus>>,
    pub(super) export: Export,
    pub(super) causes: Causes,
    /// Ready, or why not, as `/readyz` answers.
    pub(super) not_ready: Option<String>,
    /// This member's name, in a cluster.
    pub(super) member: Option<String>,
}

impl Snapshot {
    /// Reads it: the graph under one lock, the causes of the scores exported.
    pub(super) fn take(state: &ApiState) -> Self {
        let listing = state.engine.listing();
        let export = state.engine.graph().export();
        let causes = Causes::of(&export);
        Self {
            listing,
            export,
            causes,
            not_ready: state.gate.readiness().reason,
            member: state.cluster.as_ref().map(|c| c.name().as_str().to_owned()),
        }
    }

    /// The rows `filter` picks and the page of them it asks for, the overview and the graph's
    /// drawing.
    pub(super) fn select(
        &self,
        filter: &Filter,
        per_page: usize,
        graph_limit: usize,
    ) -> Result<Selection, ApiError> {
        let groups: Vec<&NodeStatus> = self
            .export
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Group)
            .collect();
        let below = match &filter.group {
            None => None,
            Some(id) => Some(self.below(id).ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("no group {:?} in the graph", id.as_str()),
                )
            })?),
        };
        let needle = filter.text.as_deref().map(str::to_lowercase);
        let mut picked: Vec<Candidate<'_>> = groups
            .iter()
            .map(|g| Candidate::Group(g))
            .chain(self.listing.iter().map(|t| Candidate::Target(t)))
            .filter(|c| filter.state.is_none_or(|s| c.state() == s))
            .filter(|c| below.as_ref().is_none_or(|b| b.contains(c.id())))
            .filter(|c| needle.as_deref().is_none_or(|n| c.mentions(n)))
            .collect();
        picked.sort_by(|a, b| {
            (a.is_target(), severity(a.state()), a.id()).cmp(&(
                b.is_target(),
                severity(b.state()),
                b.id(),
            ))
        });
        let matched = picked.len();
        let pages = matched.div_ceil(per_page).max(1);
        let page = filter.page.min(pages);
        let offset = (page - 1) * per_page;
        let rows = picked
            .iter()
            .skip(offset)
            .take(per_page)
            .map(|c| self.row(c))
            .collect();
        let mut counts = [0; 5];
        for target in &self.listing {
            counts[shown_order(target.state)] += 1;
        }
        Ok(Selection {
            rows,
            offset,
            matched,
            page,
            pages,
            counts,
            targets: self.listing.len(),
            groups: groups.iter().map(|g| g.id.clone()).collect(),
            drawing: self.drawing(filter.group.as_ref(), below.as_ref(), graph_limit),
        })
    }

    /// Every node `id` depends on, directly or not; `None` when it is not in the graph.
    fn below(&self, id: &TargetId) -> Option<HashSet<&TargetId>> {
        if !self.export.nodes.iter().any(|n| &n.id == id) {
            return None;
        }
        let mut children: HashMap<&TargetId, Vec<&TargetId>> = HashMap::new();
        for edge in &self.export.edges {
            children.entry(&edge.from).or_default().push(&edge.to);
        }
        let mut seen = HashSet::new();
        let mut queue: VecDeque<&TargetId> =
            children.get(id).into_iter().flatten().copied().collect();
        while let Some(next) = queue.pop_front() {
            if seen.insert(next) {
                queue.extend(children.get(next).into_iter().flatten());
            }
        }
        Some(seen)
    }

    /// The graph as the page draws it (see the module docs of `page`).
    fn drawing(
        &self,
        group: Option<&TargetId>,
        below: Option<&HashSet<&TargetId>>,
        limit: usize,
    ) -> Drawing {
        let nodes = self.export.nodes.len();
        if nodes <= limit {
            return Drawing::Whole(draw::graph(&self.export));
        }
        if let (Some(group), Some(below)) = (group, below)
            && below.len() < limit
        {
            let keep = |id: &TargetId| id == group || below.contains(id);
            let part = Export {
                nodes: self
                    .export
                    .nodes
                    .iter()
                    .filter(|n| keep(&n.id))
                    .cloned()
                    .collect(),
                edges: self
                    .export
                    .edges
                    .iter()
                    .filter(|e| keep(&e.from) && keep(&e.to))
                    .cloned()
                    .collect(),
            };
            return Drawing::Part(group.clone(), draw::graph(&part));
        }
        Drawing::TooLarge(nodes)
    }

    fn row(&self, candidate: &Candidate<'_>) -> Row {
        let id = candidate.id().clone();
        let roots = self
            .causes
            .roots
            .get(&id)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default();
        match candidate {
            Candidate::Group(node) => Row {
                id,
                group: true,
                state: candidate.state(),
                score: node.score,
                flapping: false,
                maintenance: None,
                roots,
                reason: None,
                owner: None,
                since: None,
            },
            Candidate::Target(status) => Row {
                id,
                group: false,
                state: status.state,
                score: status.score,
                flapping: status.flapping,
                maintenance: status.maintenance.clone(),
                roots,
                reason: reason(status),
                owner: status
                    .placement
                    .as_ref()
                    .and_then(|p| p.owner())
                    .map(|m| m.as_str().to_owned()),
                since: status.since,
            },
        }
    }
}

/// A node the filter looks at, before it is a row.
enum Candidate<'a> {
    Group(&'a NodeStatus),
    Target(&'a TargetStatus),
}

impl Candidate<'_> {
    fn id(&self) -> &TargetId {
        match self {
            Self::Group(n) => &n.id,
            Self::Target(t) => &t.id,
        }
    }

    fn is_target(&self) -> bool {
        matches!(self, Self::Target(_))
    }

    fn state(&self) -> HealthState {
        match self {
            Self::Group(n) => node_state(n),
            Self::Target(t) => t.state,
        }
    }

    /// Whether its id, its reason or its maintenance's reason holds `needle` (lowercase).
    fn mentions(&self, needle: &str) -> bool {
        if self.id().as_str().contains(needle) {
            return true;
        }
        let Self::Target(t) = self else {
            return false;
        };
        let holds = |text: &str| text.to_lowercase().contains(needle);
        reason(t).is_some_and(|r| holds(&r.text))
            || t.maintenance.as_ref().is_some_and(|m| holds(&m.reason))
    }
}

/// A node's verdict: a group's as its rule judges it; PROBING before the engine has one.
pub(super) fn node_state(node: &NodeStatus) -> HealthState {
    node.state.unwrap_or(HealthState::Probing)
}

/// Worst first: what needs a look comes to the top of the first page.
fn severity(state: HealthState) -> u8 {
    match state {
        HealthState::Down => 0,
        HealthState::Degraded => 1,
        HealthState::Probing => 2,
        HealthState::Maintenance => 3,
        HealthState::Up => 4,
    }
}

/// The states in the overview's order, best first.
pub(super) const SHOWN: [HealthState; 5] = [
    HealthState::Up,
    HealthState::Degraded,
    HealthState::Probing,
    HealthState::Maintenance,
    HealthState::Down,
];

fn shown_order(state: HealthState) -> usize {
    SHOWN.iter().position(|s| *s == state).unwrap_or(0)
}

/// Why a target is as it is: why its latest run was degraded, else its latest failure, which
/// may be old news (`current: false`) when it has passed since.
fn reason(status: &TargetStatus) -> Option<Reason> {
    if !status.degraded_reasons.is_empty() {
        return Some(Reason {
            text: status.degraded_reasons.join("; "),
            current: true,
        });
    }
    let failure = status.last_failure.as_ref()?;
    let current = status.last.as_ref().is_none_or(|l| l.reason().is_some())
        || status.state == HealthState::Down;
    Some(Reason {
        text: failure.to_string(),
        current,
    })
}

/// Why a row is as it is.
pub(super) struct Reason {
    pub(super) text: String,
    /// Whether it is why it is so now, rather than its last trouble.
    pub(super) current: bool,
}

/// One row of the table.
pub(super) struct Row {
    pub(super) id: TargetId,
    pub(super) group: bool,
    pub(super) state: HealthState,
    pub(super) score: Option<f64>,
    pub(super) flapping: bool,
    pub(super) maintenance: Option<MaintenanceInfo>,
    /// The DOWN nodes that make it `dependency_down`.
    pub(super) roots: Vec<TargetId>,
    pub(super) reason: Option<Reason>,
    /// The member that decides it, in a cluster.
    pub(super) owner: Option<String>,
    pub(super) since: Option<std::time::SystemTime>,
}

/// The graph as the page shows it.
pub(super) enum Drawing {
    /// Every node.
    Whole(String),
    /// The filter's group and what it depends on.
    Part(TargetId, String),
    /// Too many nodes to draw: how many.
    TooLarge(usize),
}

/// The rows picked and what else the page shows.
pub(super) struct Selection {
    /// This page's rows.
    pub(super) rows: Vec<Row>,
    /// How many rows come before them.
    pub(super) offset: usize,
    /// Rows the filter picks, on every page.
    pub(super) matched: usize,
    /// The page shown, from 1, and how many there are.
    pub(super) page: usize,
    pub(super) pages: usize,
    /// Targets in each state, in the order of [`SHOWN`].
    pub(super) counts: [usize; 5],
    pub(super) targets: usize,
    /// Every group, for the filter's choices.
    pub(super) groups: Vec<TargetId>,
    pub(super) drawing: Drawing,
}

/// What the history says of the page's rows.
pub(super) enum Recorded {
    /// No history is kept.
    Off,
    /// It could not be read: why.
    Failed(String),
    /// What it holds.
    Kept(Record),
}

/// The history of the page's rows.
pub(super) struct Record {
    /// By window (in the order of [`UPTIME_WINDOWS`]), by id.
    pub(super) uptimes: Vec<HashMap<String, Uptime>>,
    /// By id: the days of the bar, oldest first.
    pub(super) days: HashMap<String, Vec<(i64, Day)>>,
    /// Transitions of every target and group over the last [`INCIDENTS_MS`], newest first.
    pub(super) recent: Vec<TransitionRow>,
    pub(super) now_ms: i64,
}

/// The transitions the incidents are grouped from: every target's and group's over the last
/// [`INCIDENTS_MS`] before `now`, newest first, at most [`INCIDENT_TRANSITIONS`].
pub(super) async fn recent_transitions(
    history: &History,
    now: i64,
) -> Result<Vec<TransitionRow>, HistoryError> {
    history
        .recent(now - INCIDENTS_MS, INCIDENT_TRANSITIONS)
        .await
}

impl Recorded {
    /// Looks up `ids`: one call per uptime window, one for the days, one for the transitions,
    /// all at once.
    pub(super) async fn look_up(history: &History, ids: &[&str]) -> Self {
        let now = now_ms();
        let today = now.div_euclid(DAY_MS);
        let uptimes = futures_util::future::try_join_all(UPTIME_WINDOWS.iter().map(|name| {
            let length = WINDOWS
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, length)| *length);
            history.uptimes(ids, now - length, now)
        }));
        let days = history.days(ids, today - (BAR_DAYS - 1), today);
        let recent = recent_transitions(history, now);
        let looked: Result<_, HistoryError> =
            futures_util::future::try_join3(uptimes, days, recent).await;
        match looked {
            Ok((uptimes, days, recent)) => Self::Kept(Record {
                uptimes,
                days,
                recent,
                now_ms: now,
            }),
            Err(e) => Self::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(state: &str, group: &str, q: &str, page: &str) -> PageQuery {
        PageQuery {
            state: state.into(),
            group: group.into(),
            q: q.into(),
            page: page.into(),
        }
    }

    #[test]
    fn an_empty_form_filters_nothing_and_links_keep_the_filter() {
        let none = Filter::parse(&PageQuery::default()).unwrap();
        assert!(!none.any());
        assert_eq!(none.href(1), "/status");
        let some = Filter::parse(&query("down", "shop", " a b&c ", "3")).unwrap();
        assert_eq!(some.state, Some(HealthState::Down));
        assert_eq!(
            some.href(2),
            "/status?state=DOWN&group=shop&q=a%20b%26c&page=2"
        );
        for bad in [
            query("SIDEWAYS", "", "", ""),
            query("", "Not An Id", "", ""),
            query("", "", "", "0"),
            query("", "", "", "x"),
        ] {
            let e = Filter::parse(&bad).err().unwrap();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{}", e.message);
        }
    }
}
