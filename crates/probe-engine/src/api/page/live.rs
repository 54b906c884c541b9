//! What the page shows that the engine's transitions do not carry: every node's score as the
//! rows show it (two decimals), each node's words and colour in the drawn graph, and a group's
//! verdict with them (its transitions come on the engine's stream too; here it is sent with the
//! score and words that go with it).
//!
//! One task looks at the graph when the engine says it moved ([`Engine::graph_changes`]) and a
//! page listens, and sends every listening page what changed since its last look, in one `nodes`
//! event; after a look it lets [`EVERY`] pass before the next, so the stream stays one event a
//! second at most, however many rows moved. Nothing is looked at while the graph stands still or
//! no page listens. A page's arrival is a look too: the first one only learns what is shown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use probe::TargetId;
use probe::engine::Engine;
use probe::graph::NodeKind;
use probe::health::HealthState;
use serde_json::json;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use super::draw;
use super::model::node_state;
use super::render::score;

/// The least time between two looks at the graph.
const EVERY: Duration = Duration::from_secs(1);

/// Looks a listener may fall behind by before it is told it missed some (`lagged`).
const BACKLOG: usize = 16;

/// The changes of the rows, for the pages' event streams.
#[derive(Clone)]
pub(crate) struct Rows {
    sender: broadcast::Sender<Arc<str>>,
    /// Told when a page starts listening, so that what it is sent is measured from then.
    joined: Arc<Notify>,
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
        let joined = Arc::new(Notify::new());
        tokio::spawn(look(engine, sender.clone(), joined.clone(), cancel));
        Self { sender, joined }
    }

    /// The changes from now on, each look's as one JSON array.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        let receiver = self.sender.subscribe();
        self.joined.notify_one();
        receiver
    }
}

async fn look(
    engine: Engine,
    sender: broadcast::Sender<Arc<str>>,
    joined: Arc<Notify>,
    cancel: CancellationToken,
) {
    let mut shown: Option<HashMap<TargetId, Shown>> = None;
    let mut moved = engine.graph_changes();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = joined.notified() => {}
            changed = moved.changed() => if changed.is_err() { return },
        }
        if sender.receiver_count() == 0 {
            // Nobody to tell: what was shown is let go, and the next page's arrival learns it.
            shown = None;
            continue;
        }
        let now: HashMap<TargetId, Shown> = engine
            .graph()
            .nodes()
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
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
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
