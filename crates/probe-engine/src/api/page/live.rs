//! What the page shows that the engine's transitions do not carry: every node's score as the
//! rows show it (two decimals), each node's words and colour in the drawn graph, and a group's
//! verdict with them (its transitions come on the engine's stream too; here it is sent with the
//! score and words that go with it).
//!
//! One task looks at the graph every [`EVERY`] while at least one page listens (nothing is
//! looked at otherwise), and sends every listening page what changed since its last look, in
//! one `nodes` event: the stream stays one event a second at most, however many rows moved.
//! Its first look only learns what is shown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use probe::engine::Engine;
use probe::graph::{NodeKind, NodeStatus};
use probe::target::TargetId;
use probe::verdict::HealthState;
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::draw;
use super::model::node_state;
use super::render::score;

/// How often the graph is looked at while a page listens.
const EVERY: Duration = Duration::from_secs(1);

/// Looks a listener may fall behind by before it is told it missed some (`lagged`).
const BACKLOG: usize = 16;

/// The changes of the rows, for the pages' event streams.
#[derive(Clone)]
pub(crate) struct Rows {
    sender: broadcast::Sender<Arc<str>>,
}

/// A node as the page shows it: a group's state (a target's comes with its transitions), the
/// score's text, and its words and colour in the graph.
#[derive(PartialEq)]
struct Shown {
    state: Option<HealthState>,
    score: String,
    label: (String, &'static str),
}

impl Rows {
    /// Starts the task that looks at `engine`'s graph, until `cancel`.
    pub(crate) fn start(engine: Engine, cancel: CancellationToken) -> Self {
        let (sender, _) = broadcast::channel(BACKLOG);
        tokio::spawn(look(engine, sender.clone(), cancel));
        Self { sender }
    }

    /// The changes from now on, each look's as one JSON array.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.sender.subscribe()
    }
}

async fn look(engine: Engine, sender: broadcast::Sender<Arc<str>>, cancel: CancellationToken) {
    let mut shown: Option<HashMap<TargetId, Shown>> = None;
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if sender.receiver_count() == 0 {
            continue;
        }
        // Copied out under the engine's lock; the labels are made after it is let go.
        let nodes: Vec<NodeStatus> = engine.with_graph(|g| g.nodes().collect());
        let now: HashMap<TargetId, Shown> = nodes
            .into_iter()
            .map(|n| {
                let state = (n.kind == NodeKind::Group).then(|| node_state(&n));
                let score = score(n.score);
                let label = draw::label(&n);
                (
                    n.id,
                    Shown {
                        state,
                        score,
                        label,
                    },
                )
            })
            .collect();
        if let Some(before) = &shown
            && let Some(changes) = changes(before, &now)
        {
            // No listener left since: nothing lost.
            let _ = sender.send(changes);
        }
        shown = Some(now);
    }
}

/// What moved from `before` to `now`, as the `nodes` event's JSON array; `None` when nothing did.
fn changes(before: &HashMap<TargetId, Shown>, now: &HashMap<TargetId, Shown>) -> Option<Arc<str>> {
    let moved: Vec<serde_json::Value> = now
        .iter()
        .filter(|(id, row)| before.get(*id) != Some(*row))
        .map(|(id, row)| {
            json!({
                "id": id.as_str(),
                "state": row.state.map(HealthState::as_str),
                "score": row.score,
                "label": row.label.0,
                "colour": row.label.1,
            })
        })
        .collect();
    (!moved.is_empty()).then(|| Arc::from(serde_json::Value::from(moved).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TargetId {
        TargetId::new(s).unwrap()
    }

    fn shown(state: Option<HealthState>, score: &str) -> Shown {
        Shown {
            state,
            score: score.to_owned(),
            label: (score.to_owned(), draw::GREEN),
        }
    }

    #[test]
    fn only_what_a_page_would_show_differently_is_sent() {
        let before = HashMap::from([
            (id("web"), shown(Some(HealthState::Up), "0.90")),
            (id("db"), shown(None, "1.00")),
            (id("cache"), shown(None, "1.00")),
        ]);
        let same = HashMap::from([
            (id("web"), shown(Some(HealthState::Up), "0.90")),
            (id("db"), shown(None, "1.00")),
            (id("cache"), shown(None, "1.00")),
        ]);
        assert!(changes(&before, &same).is_none());
        let now = HashMap::from([
            (id("web"), shown(Some(HealthState::Down), "0.40")),
            (id("db"), shown(None, "0.50")),
            (id("cache"), shown(None, "1.00")),
            (id("new"), shown(None, "–")),
        ]);
        let sent: serde_json::Value =
            serde_json::from_str(&changes(&before, &now).unwrap()).unwrap();
        let mut sent = sent.as_array().unwrap().clone();
        sent.sort_by_key(|c| c["id"].as_str().unwrap().to_owned());
        assert_eq!(
            serde_json::Value::from(sent),
            json!([
                {"id": "db", "state": null, "score": "0.50", "label": "0.50", "colour": "#2e7d32"},
                {"id": "new", "state": null, "score": "–", "label": "–", "colour": "#2e7d32"},
                {"id": "web", "state": "DOWN", "score": "0.40", "label": "0.40", "colour": "#2e7d32"},
            ])
        );
    }
}
