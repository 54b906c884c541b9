use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;
use HealthState::{Degraded as Deg, Down, Maintenance, Probing, Up};
use Quality::{Degraded as D, Failed as F, Good as G};

fn id(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

fn dep(target: &str) -> Dependency {
    Dependency::new(id(target), format!("test.yaml:{target}"))
}

fn weighted(target: &str, weight: f64) -> Dependency {
    Dependency {
        weight,
        ..dep(target)
    }
}

fn critical(target: &str) -> Dependency {
    Dependency {
        critical: true,
        ..dep(target)
    }
}

fn probed(name: &str, depends_on: Vec<Dependency>) -> NodeSpec {
    NodeSpec {
        id: id(name),
        kind: NodeKind::Probed,
        depends_on,
    }
}

fn group(name: &str, depends_on: Vec<Dependency>) -> NodeSpec {
    NodeSpec {
        id: id(name),
        kind: NodeKind::Group,
        depends_on,
    }
}

fn build(specs: &[NodeSpec]) -> Graph {
    Graph::build(GraphConfig::default(), specs).unwrap()
}

fn feed(g: &mut Graph, name: &str, results: &[Quality], state: HealthState) {
    for &q in results {
        g.record(&id(name), q, state).unwrap();
    }
}

fn score(g: &Graph, name: &str) -> Option<f64> {
    g.view().status(&id(name)).unwrap().score
}

/// The incremental values equal a full rescore's bit for bit, and scores are in [0, 1].
fn check_consistent(g: &Graph) -> Result<(), TestCaseError> {
    let mut full = g.clone();
    full.full_rescore();
    let (a, b) = (&g.nodes, &full.nodes);
    for i in 0..g.len() {
        let node = &g.topo.ids[i];
        prop_assert_eq!(
            a.scores[i].to_bits(),
            b.scores[i].to_bits(),
            "score of {}",
            node
        );
        prop_assert_eq!(
            a.stability[i].to_bits(),
            b.stability[i].to_bits(),
            "stability of {}",
            node
        );
        prop_assert_eq!(a.states[i], b.states[i], "state of {}", node);
        prop_assert_eq!(
            a.dependency_down[i],
            b.dependency_down[i],
            "dependency_down of {}",
            node
        );
        let score = a.scores[i];
        prop_assert!(
            score.to_bits() == f64::NAN.to_bits() || (0.0..=1.0).contains(&score),
            "{} scores {}",
            node,
            score
        );
        // Readers see what the writer has: every update published the nodes it moved.
        prop_assert_eq!(
            format!("{:?}", g.view.read(i)),
            format!("{:?}", g.published(i)),
            "published values of {}",
            node
        );
    }
    Ok(())
}

#[test]
fn chain_multiplies_stabilities() {
    let mut g = build(&[
        probed("a", vec![dep("b")]),
        probed("b", vec![dep("c")]),
        probed("c", vec![]),
    ]);
    feed(&mut g, "c", &[G, G, G, F], Up);
    feed(&mut g, "b", &[G, G], Up);
    assert_eq!(score(&g, "c"), Some(0.75));
    assert_eq!(score(&g, "b"), Some(0.75));
    assert_eq!(score(&g, "a"), None, "a has no results yet");
    feed(&mut g, "a", &[G], Up);
    feed(&mut g, "a", &[F], Probing);
    assert_eq!(score(&g, "a"), Some(0.375));
}

#[test]
fn diamond_weights_are_normalised() {
    let mut g = build(&[
        group("top", vec![weighted("left", 3.0), weighted("right", 1.0)]),
        probed("left", vec![dep("base")]),
        probed("right", vec![dep("base")]),
        probed("base", vec![]),
    ]);
    feed(&mut g, "base", &[G, G, G, D], Up);
    feed(&mut g, "left", &[G], Up);
    feed(&mut g, "right", &[G], Up);
    feed(&mut g, "right", &[F], Probing);
    assert_eq!(score(&g, "base"), Some(0.875));
    assert_eq!(score(&g, "left"), Some(0.875));
    assert_eq!(score(&g, "right"), Some(0.4375));
    assert_eq!(score(&g, "top"), Some(0.75 * 0.875 + 0.25 * 0.4375));
    assert_eq!(score(&g, "top"), Some(0.765625));
}

#[test]
fn group_of_groups() {
    let mut g = build(&[
        group("all", vec![dep("web"), dep("api")]),
        group("web", vec![dep("w1"), dep("w2")]),
        group("api", vec![weighted("a1", 1.0), weighted("a2", 3.0)]),
        probed("w1", vec![]),
        probed("w2", vec![]),
        probed("a1", vec![]),
        probed("a2", vec![]),
    ]);
    feed(&mut g, "w1", &[G], Up);
    feed(&mut g, "w2", &[F], Down);
    feed(&mut g, "a1", &[G], Up);
    feed(&mut g, "a1", &[F], Probing);
    assert_eq!(score(&g, "all"), None, "a2 is still unknown");
    feed(&mut g, "a2", &[G], Up);
    assert_eq!(score(&g, "web"), Some(0.5));
    assert_eq!(score(&g, "api"), Some(0.875));
    assert_eq!(score(&g, "all"), Some(0.6875));
    let all = g.view().status(&id("all")).unwrap();
    assert_eq!(
        (all.kind, all.state, all.dependency_down),
        // A group's verdict is judged apart (`judge`), and this one has not been yet.
        (NodeKind::Group, Some(Probing), false)
    );
}

#[test]
fn critical_down_caps_the_parent_only() {
    let specs = [
        group("top", vec![dep("app")]),
        probed("app", vec![critical("db"), dep("cache")]),
        probed("db", vec![]),
        probed("cache", vec![]),
    ];
    let mut g = build(&specs);
    feed(&mut g, "app", &[G], Up);
    feed(&mut g, "cache", &[G], Up);
    feed(&mut g, "db", &[G], Up);
    feed(&mut g, "db", &[F], Probing);
    assert_eq!(score(&g, "app"), Some(0.75));
    feed(&mut g, "db", &[F], Down);
    let app = g.view().status(&id("app")).unwrap();
    assert_eq!(app.score, Some(0.0), "capped at the default cap 0");
    assert!(app.dependency_down);
    assert_eq!(
        app.state,
        Some(Up),
        "the parent's own state does not change"
    );
    let top = g.view().status(&id("top")).unwrap();
    assert_eq!((top.score, top.dependency_down), (Some(0.0), false));

    // A DOWN dependency that is not critical only counts through its score.
    g.set_state(&id("db"), Probing).unwrap();
    g.set_state(&id("cache"), Down).unwrap();
    assert_eq!(score(&g, "app"), Some(0.5 / 3.0 + 0.5));
    assert!(!g.view().status(&id("app")).unwrap().dependency_down);

    // A cap above the score leaves it.
    let mut g = Graph::build(GraphConfig::try_new(20, 0.5, 0.3).unwrap(), &specs).unwrap();
    feed(&mut g, "app", &[G], Up);
    feed(&mut g, "cache", &[G], Up);
    feed(&mut g, "db", &[G, F], Down);
    assert_eq!(score(&g, "app"), Some(0.3));
    feed(&mut g, "cache", &[F; 20], Down);
    assert_eq!(score(&g, "app"), Some(0.25), "below the cap");
    assert!(g.view().status(&id("app")).unwrap().dependency_down);
}

#[test]
fn degraded_results_earn_their_credit() {
    let specs = [probed("a", vec![])];
    for (credit, expected) in [(0.5, 0.5), (0.25, 0.375), (0.0, 0.25), (1.0, 0.75)] {
        let config = GraphConfig::try_new(20, credit, 0.0).unwrap();
        let mut g = Graph::build(config, &specs).unwrap();
        feed(&mut g, "a", &[D, D, G, F], Deg);
        assert_eq!(score(&g, "a"), Some(expected), "credit {credit}");
    }
}

#[test]
fn the_window_slides_and_skips_maintenance() {
    let config = GraphConfig::try_new(4, 0.5, 0.0).unwrap();
    let mut g = Graph::build(config, &[probed("a", vec![]), group("g", vec![dep("a")])]).unwrap();
    feed(&mut g, "a", &[G, G], Up);
    feed(&mut g, "a", &[F, F, F], Maintenance);
    assert_eq!(
        score(&g, "a"),
        Some(1.0),
        "maintenance results are not counted"
    );
    assert_eq!(g.view().status(&id("a")).unwrap().state, Some(Maintenance));
    feed(&mut g, "a", &[G, G, F], Probing);
    assert_eq!(score(&g, "a"), Some(0.75));
    feed(&mut g, "a", &[F, F, F], Down);
    assert_eq!(
        score(&g, "a"),
        Some(0.0),
        "the goods slid out of the window"
    );
    assert_eq!(score(&g, "g"), Some(0.0));
}

#[test]
fn unknown_propagates_and_is_never_healthy() {
    let mut g = build(&[
        group("top", vec![dep("a"), dep("b")]),
        probed("a", vec![]),
        probed("b", vec![]),
        probed("parent", vec![dep("a")]),
    ]);
    feed(&mut g, "a", &[G], Up);
    assert_eq!(score(&g, "a"), Some(1.0));
    assert_eq!(score(&g, "b"), None);
    assert_eq!(score(&g, "top"), None, "b is unknown");
    assert_eq!(score(&g, "parent"), None, "no result of its own");
    g.set_state(&id("parent"), Up).unwrap();
    assert_eq!(score(&g, "parent"), None, "a state is not a result");
    feed(&mut g, "b", &[F], Probing);
    assert_eq!(score(&g, "b"), None, "PROBING without a verdict is unknown");
    assert_eq!(score(&g, "top"), None);
    g.set_state(&id("b"), Down).unwrap();
    assert_eq!(
        score(&g, "b"),
        Some(0.0),
        "the verdict makes the results count"
    );
    assert_eq!(score(&g, "top"), Some(0.5));
    g.set_state(&id("b"), Probing).unwrap();
    assert_eq!(score(&g, "b"), Some(0.0), "a verdict once reached stays");
    assert_eq!(
        g.view().explain(&id("parent")).unwrap().to_string(),
        "parent unknown UP, stability unknown: a 1.00 (w 1.00) UP"
    );
}

#[test]
fn updates_stop_where_nothing_changes() {
    let mut g = build(&[
        group("top", vec![dep("mid")]),
        group("mid", vec![dep("a"), dep("b")]),
        probed("a", vec![]),
        probed("b", vec![]),
    ]);
    feed(&mut g, "b", &[G], Up);
    assert_eq!(g.record(&id("a"), G, Up), Ok(3), "a, mid and top");
    assert_eq!(g.record(&id("a"), G, Up), Ok(1), "a's score did not move");
    assert_eq!(
        g.set_state(&id("a"), Down),
        Ok(2),
        "mid reads a's DOWN, then stops"
    );
    assert_eq!(
        g.record(&id("top"), G, Up),
        Err(NodeError::Group(id("top")))
    );
    assert_eq!(
        g.set_state(&id("nope"), Up),
        Err(NodeError::Unknown(id("nope")))
    );
}

#[test]
fn explanation_names_weights_criticality_and_the_cap() {
    let mut g = build(&[
        group(
            "checkout",
            vec![
                Dependency {
                    weight: 3.0,
                    critical: true,
                    ..dep("orders-api")
                },
                weighted("cache", 2.0),
            ],
        ),
        probed("orders-api", vec![]),
        probed("cache", vec![]),
    ]);
    feed(&mut g, "orders-api", &[G, G, G, G, G, G, G, F, F, F], Deg);
    feed(&mut g, "cache", &[F], Down);
    let e = g.view().explain(&id("checkout")).unwrap();
    assert_eq!(
        e.to_string(),
        "checkout 0.42 PROBING: orders-api 0.70 (w 0.60, critical) DEGRADED; cache 0.00 (w 0.40) DOWN"
    );
    assert_eq!(e.stability, Some(1.0));
    assert_eq!(e.children[0].weight, 0.6);
    assert!(!e.children[0].caps);

    g.set_state(&id("orders-api"), Down).unwrap();
    let e = g.view().explain(&id("checkout")).unwrap();
    assert!(e.children[0].caps);
    assert_eq!(
        e.to_string(),
        "checkout 0.00 PROBING, dependency down: orders-api 0.70 (w 0.60, critical, caps) DOWN; \
         cache 0.00 (w 0.40) DOWN"
    );
    assert_eq!(
        g.view().explain(&id("cache")).unwrap().to_string(),
        "cache 0.00 DOWN"
    );
    assert_eq!(g.view().explain(&id("nope")), None);
}

#[test]
fn validation_reports_every_error() {
    let errors = Graph::build(
        GraphConfig::default(),
        &[
            probed("a", vec![dep("ghost"), dep("a"), dep("b"), dep("b")]),
            probed("b", vec![weighted("c", 0.0), weighted("d", f64::NAN)]),
            group("c", vec![]),
            probed("d", vec![weighted("c", f64::INFINITY), weighted("e", 2e6)]),
            probed("e", vec![]),
            probed("b", vec![]),
        ],
    )
    .unwrap_err();
    let bad_weight = |node: &str, target: &str, weight| GraphError::BadWeight {
        node: id(node),
        target: id(target),
        weight,
        origin: format!("test.yaml:{target}"),
    };
    assert_eq!(errors.len(), 9, "{errors:#?}");
    assert_eq!(errors[0], GraphError::DuplicateNode { node: id("b") });
    assert_eq!(
        errors[1],
        GraphError::UnknownTarget {
            node: id("a"),
            target: id("ghost"),
            origin: "test.yaml:ghost".into()
        }
    );
    assert_eq!(
        errors[2],
        GraphError::SelfEdge {
            node: id("a"),
            origin: "test.yaml:a".into()
        }
    );
    assert_eq!(
        errors[3],
        GraphError::DuplicateEdge {
            node: id("a"),
            target: id("b"),
            origin: "test.yaml:b".into(),
            first: "test.yaml:b".into()
        }
    );
    assert_eq!(errors[4], bad_weight("b", "c", 0.0));
    // NaN != NaN, so compare the message.
    assert_eq!(
        errors[5].to_string(),
        "test.yaml:d: dependency b -> d has weight NaN; expected a number > 0 and <= 1000000"
    );
    assert_eq!(errors[6], GraphError::EmptyGroup { node: id("c") });
    assert_eq!(errors[7], bad_weight("d", "c", f64::INFINITY));
    assert_eq!(errors[8], bad_weight("d", "e", 2e6));
    assert_eq!(
        errors[1].to_string(),
        "test.yaml:ghost: a depends on unknown node ghost"
    );
}

#[test]
fn cycles_are_reported_whole_with_the_closing_edge() {
    let errors = Graph::build(
        GraphConfig::default(),
        &[
            probed("x", vec![dep("a")]),
            probed("a", vec![dep("b")]),
            probed("b", vec![dep("c"), dep("x")]),
            probed("c", vec![Dependency::new(id("a"), "probes/c.yaml:3:5")]),
            group("p", vec![dep("q")]),
            group("q", vec![dep("p")]),
        ],
    )
    .unwrap_err();
    assert_eq!(errors.len(), 2, "one per component: {errors:#?}");
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        texts.contains(&"test.yaml:x: dependency cycle x -> a -> b -> x".to_owned()),
        "{texts:?}"
    );
    assert!(
        texts.contains(&"test.yaml:p: dependency cycle p -> q -> p".to_owned()),
        "{texts:?}"
    );
    let errors = Graph::build(
        GraphConfig::default(),
        &[
            probed("a", vec![dep("b")]),
            probed("b", vec![dep("c")]),
            probed("c", vec![Dependency::new(id("a"), "probes/c.yaml:3:5")]),
        ],
    )
    .unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "probes/c.yaml:3:5: dependency cycle a -> b -> c -> a"
    );
}

#[test]
fn config_is_validated() {
    assert_eq!(
        GraphConfig::try_new(0, 0.5, 0.0),
        Err(GraphConfigError::Window(0))
    );
    assert_eq!(
        GraphConfig::try_new(GraphConfig::MAX_WINDOW + 1, 0.5, 0.0),
        Err(GraphConfigError::Window(1001))
    );
    assert_eq!(
        GraphConfig::try_new(20, 1.5, 0.0),
        Err(GraphConfigError::DegradedCredit(1.5))
    );
    assert!(GraphConfig::try_new(20, f64::NAN, 0.0).is_err());
    assert_eq!(
        GraphConfig::try_new(20, 0.5, -0.1),
        Err(GraphConfigError::CriticalCap(-0.1))
    );
    assert_eq!(
        GraphConfig::try_new(20, 0.5, 0.0),
        Ok(GraphConfig::default())
    );
}

#[test]
fn apply_adds_and_removes_incrementally_and_keeps_results() {
    let mut g = build(&[
        group("old-top", vec![dep("a")]),
        probed("a", vec![dep("b")]),
        probed("b", vec![]),
    ]);
    feed(&mut g, "b", &[G], Up);
    feed(&mut g, "b", &[F], Probing);
    feed(&mut g, "a", &[G], Up);
    let applied = g
        .apply(&[
            probed("b", vec![]),
            probed("a", vec![dep("b")]),
            group("new-top", vec![dep("a"), dep("c")]),
            probed("c", vec![]),
        ])
        .unwrap();
    assert_eq!(
        applied,
        Applied {
            added: vec![id("c"), id("new-top")],
            removed: vec![id("old-top")],
            changed: vec![],
            incremental: true,
        }
    );
    assert_eq!(score(&g, "a"), Some(0.5), "results survive the reload");
    assert_eq!(g.view().status(&id("a")).unwrap().state, Some(Up));
    assert_eq!(score(&g, "new-top"), None, "c is new");
    feed(&mut g, "c", &[G], Up);
    assert_eq!(score(&g, "new-top"), Some(0.75));
    assert_eq!(g.view().status(&id("old-top")), None);
    check_consistent(&g).unwrap();
}

#[test]
fn apply_rebuilds_on_changed_edges_and_keeps_results() {
    let mut g = build(&[
        group("top", vec![dep("a")]),
        probed("a", vec![]),
        probed("b", vec![]),
    ]);
    feed(&mut g, "a", &[G], Up);
    feed(&mut g, "a", &[F], Probing);
    feed(&mut g, "b", &[G], Up);
    let applied = g
        .apply(&[
            group("top", vec![dep("a"), dep("b")]),
            probed("a", vec![]),
            group("b", vec![dep("a")]),
        ])
        .unwrap();
    assert_eq!(
        applied,
        Applied {
            added: vec![],
            removed: vec![],
            changed: vec![id("b"), id("top")],
            incremental: false,
        }
    );
    assert_eq!(score(&g, "a"), Some(0.5));
    assert_eq!(
        score(&g, "b"),
        Some(0.5),
        "b is a group now, its results are gone"
    );
    assert_eq!(score(&g, "top"), Some(0.5));
    check_consistent(&g).unwrap();
}

#[test]
fn a_failed_apply_changes_nothing() {
    let specs = [group("top", vec![dep("a")]), probed("a", vec![])];
    let mut g = build(&specs);
    feed(&mut g, "a", &[G], Up);
    // Incremental path: the added nodes form a cycle.
    let errors = g
        .apply(&[
            specs[0].clone(),
            specs[1].clone(),
            probed("x", vec![dep("y"), dep("a")]),
            probed("y", vec![dep("x")]),
        ])
        .unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "test.yaml:x: dependency cycle x -> y -> x"
    );
    // Full path: a survivor depends on a removed node.
    let errors = g.apply(&[specs[0].clone()]).unwrap_err();
    assert_eq!(
        errors,
        [GraphError::UnknownTarget {
            node: id("top"),
            target: id("a"),
            origin: "test.yaml:a".into()
        }]
    );
    assert_eq!(g.len(), 2);
    assert_eq!(score(&g, "top"), Some(1.0));
    check_consistent(&g).unwrap();
}

#[test]
fn export_and_dot() {
    let mut g = build(&[
        group("shop", vec![weighted("db", 3.0), critical("cache")]),
        probed("db", vec![]),
        probed("cache", vec![]),
    ]);
    feed(&mut g, "db", &[G], Up);
    feed(&mut g, "cache", &[F], Down);
    let export = g.view().export();
    let ids: Vec<&str> = export.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["cache", "db", "shop"]);
    assert_eq!(
        export.nodes[2],
        NodeStatus {
            id: id("shop"),
            kind: NodeKind::Group,
            score: Some(0.0),
            dependency_down: true,
            // Not judged yet.
            state: Some(HealthState::Probing),
            flapping: false,
        }
    );
    assert_eq!(
        g.view().groups().collect::<Vec<_>>(),
        [export.nodes[2].clone()]
    );
    let mut nodes: Vec<NodeStatus> = g.view().nodes().collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(nodes, export.nodes);
    assert_eq!(
        export.edges,
        [
            Edge {
                from: id("shop"),
                to: id("db"),
                weight: 0.75,
                critical: false
            },
            Edge {
                from: id("shop"),
                to: id("cache"),
                weight: 0.25,
                critical: true
            },
        ]
    );
    assert_eq!(
        g.view().to_dot(),
        "digraph dependencies {
  node [style=filled];
  \"cache\" [shape=box, label=\"cache\\n0.00 DOWN\", fillcolor=\"0.000 0.400 1.000\"];
  \"db\" [shape=box, label=\"db\\n1.00 UP\", fillcolor=\"0.333 0.400 1.000\"];
  \"shop\" [shape=ellipse, label=\"shop\\n0.00 PROBING\\ndependency down\", fillcolor=\"0.000 0.400 1.000\"];
  \"shop\" -> \"db\" [label=\"0.75\"];
  \"shop\" -> \"cache\" [label=\"0.25\", style=bold];
}
"
    );
    assert_eq!(explain::escape(r#"a"b\c"#), r#"a\"b\\c"#);
}

/// The weights random graphs draw from.
const WEIGHTS: [f64; 5] = [0.1, 0.5, 1.0, 2.0, 3.7];

/// A random DAG: node `i` depends only on nodes below `i` (so there is no cycle), then ids and
/// declaration order are shuffled so neither gives the order away. Nodes with dependencies may be
/// groups.
fn dag(max_nodes: usize) -> impl Strategy<Value = Vec<NodeSpec>> {
    (1..=max_nodes)
        .prop_flat_map(|n| {
            let dependency = (any::<Index>(), 0..WEIGHTS.len(), prop::bool::weighted(0.2));
            let node = (
                prop::bool::weighted(0.3),
                prop::collection::vec(dependency, 0..4),
            );
            (
                prop::collection::vec(node, n),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_map(|(nodes, names)| {
            let name = |i: usize| id(&format!("n{}", names[i]));
            let mut specs: Vec<(usize, NodeSpec)> = nodes
                .into_iter()
                .enumerate()
                .map(|(i, (is_group, deps))| {
                    let mut depends_on: Vec<Dependency> = Vec::new();
                    if i > 0 {
                        for (child, w, critical) in deps {
                            let target = name(child.index(i));
                            if depends_on.iter().all(|d| d.target != target) {
                                depends_on.push(Dependency {
                                    target: target.clone(),
                                    weight: WEIGHTS[w],
                                    critical,
                                    origin: format!("{} -> {target}", name(i)),
                                });
                            }
                        }
                    }
                    let kind = if is_group && !depends_on.is_empty() {
                        NodeKind::Group
                    } else {
                        NodeKind::Probed
                    };
                    let spec = NodeSpec {
                        id: name(i),
                        kind,
                        depends_on,
                    };
                    (names[i], spec)
                })
                .collect();
            specs.sort_by_key(|(declared, _)| *declared);
            specs.into_iter().map(|(_, spec)| spec).collect()
        })
}

fn config() -> impl Strategy<Value = GraphConfig> {
    (
        1usize..6,
        prop::sample::select(vec![0.0, 0.3, 0.5, 1.0]),
        prop::sample::select(vec![0.0, 0.25, 1.0]),
    )
        .prop_map(|(window, credit, cap)| GraphConfig::try_new(window, credit, cap).unwrap())
}

fn state() -> impl Strategy<Value = HealthState> {
    prop::sample::select(vec![Probing, Up, Deg, Maintenance, Down])
}

#[derive(Clone, Debug)]
enum Op {
    Record(Quality, HealthState),
    SetState(HealthState),
}

fn op() -> impl Strategy<Value = (Index, Op)> {
    let quality = prop::sample::select(vec![G, D, F]);
    let op = prop_oneof![
        4 => (quality, state()).prop_map(|(q, s)| Op::Record(q, s)),
        1 => state().prop_map(Op::SetState),
    ];
    (any::<Index>(), op)
}

fn run(g: &mut Graph, specs: &[NodeSpec], ops: Vec<(Index, Op)>) -> Result<(), TestCaseError> {
    for (node, op) in ops {
        let spec = node.get(specs);
        let result = match op {
            Op::Record(q, s) => g.record(&spec.id, q, s),
            Op::SetState(s) => g.set_state(&spec.id, s),
        };
        match spec.kind {
            NodeKind::Probed => prop_assert!(result.is_ok_and(|n| n >= 1)),
            NodeKind::Group => prop_assert_eq!(result, Err(NodeError::Group(spec.id.clone()))),
        }
        check_consistent(g)?;
    }
    Ok(())
}

/// The probed nodes' results and states, by id.
fn results(g: &Graph) -> HashMap<TargetId, (Vec<Quality>, Option<HealthState>)> {
    (0..g.len())
        .filter(|&i| g.topo.kinds[i] == NodeKind::Probed)
        .map(|i| {
            let window = g.nodes.windows.recent(i);
            (g.topo.ids[i].clone(), (window, g.nodes.states[i]))
        })
        .collect()
}

proptest! {
    #[test]
    fn incremental_scores_equal_a_full_rescore(
        specs in dag(40),
        config in config(),
        ops in prop::collection::vec(op(), 0..80),
    ) {
        let mut g = Graph::build(config, &specs).unwrap();
        check_consistent(&g)?;
        run(&mut g, &specs, ops)?;
    }

    #[test]
    fn a_back_edge_is_rejected_with_a_real_cycle(
        mut specs in dag(30),
        from in any::<Index>(),
        to in any::<Index>(),
    ) {
        // Close a cycle: pick a node with dependencies and one of its descendants, and make the
        // descendant depend on it.
        let deps: HashMap<TargetId, Vec<TargetId>> = specs
            .iter()
            .map(|s| (s.id.clone(), s.depends_on.iter().map(|d| d.target.clone()).collect()))
            .collect();
        let parents: Vec<usize> = (0..specs.len()).filter(|&i| !specs[i].depends_on.is_empty()).collect();
        prop_assume!(!parents.is_empty());
        let top = specs[*from.get(&parents)].id.clone();
        let mut below = Vec::new();
        let mut stack = deps[&top].clone();
        while let Some(n) = stack.pop() {
            if !below.contains(&n) {
                stack.extend(deps[&n].iter().cloned());
                below.push(n);
            }
        }
        let bottom = to.get(&below).clone();
        let at = specs.iter().position(|s| s.id == bottom).unwrap();
        specs[at].depends_on.push(Dependency::new(top.clone(), "back edge"));

        let errors = Graph::build(GraphConfig::default(), &specs).unwrap_err();
        prop_assert_eq!(errors.len(), 1, "{:?}", errors);
        let GraphError::Cycle { chain, origin } = &errors[0] else {
            return Err(TestCaseError::fail(format!("not a cycle: {errors:?}")));
        };
        prop_assert!(chain.len() >= 3);
        prop_assert_eq!(chain.first(), chain.last());
        let mut inner = chain[1..].to_vec();
        inner.sort();
        inner.dedup();
        prop_assert_eq!(inner.len(), chain.len() - 1, "not a simple cycle: {:?}", chain);
        for pair in chain.windows(2) {
            prop_assert!(depends(&specs, &pair[0], &pair[1]), "{:?} is not an edge", pair);
        }
        let closing = &specs.iter().find(|s| s.id == chain[chain.len() - 2]).unwrap().depends_on;
        let closing = closing.iter().find(|d| d.target == chain[chain.len() - 1]).unwrap();
        prop_assert_eq!(&closing.origin, origin);
        prop_assert!(chain.contains(&top) && chain.contains(&bottom));
    }

    #[test]
    fn apply_keeps_results_and_scores_consistent(
        specs in dag(30),
        config in config(),
        ops in prop::collection::vec(op(), 0..40),
        removals in prop::collection::vec(any::<Index>(), 0..4),
        additions in prop::collection::vec(
            (prop::bool::weighted(0.3), prop::collection::vec((any::<Index>(), 0..WEIGHTS.len(), any::<bool>()), 0..4)),
            0..4,
        ),
        modify in prop::option::weighted(0.3, (any::<Index>(), 0..WEIGHTS.len())),
        more_ops in prop::collection::vec(op(), 0..20),
    ) {
        let mut g = Graph::build(config, &specs).unwrap();
        run(&mut g, &specs, ops)?;
        let before = results(&g);

        // Remove some roots, add nodes depending on anything left, maybe reweigh one edge.
        let mut next: Vec<NodeSpec> = specs.clone();
        let roots: Vec<TargetId> = specs
            .iter()
            .filter(|s| specs.iter().all(|p| p.depends_on.iter().all(|d| d.target != s.id)))
            .map(|s| s.id.clone())
            .collect();
        for r in &removals {
            let root = r.get(&roots);
            next.retain(|s| &s.id != root);
        }
        for (k, (is_group, deps)) in additions.into_iter().enumerate() {
            let pool: Vec<TargetId> = next.iter().map(|s| s.id.clone()).collect();
            let mut depends_on: Vec<Dependency> = Vec::new();
            for (child, w, critical) in deps {
                if pool.is_empty() {
                    break;
                }
                let target = child.get(&pool).clone();
                if depends_on.iter().all(|d| d.target != target) {
                    depends_on.push(Dependency { target, weight: WEIGHTS[w], critical, origin: String::new() });
                }
            }
            let kind = if is_group && !depends_on.is_empty() { NodeKind::Group } else { NodeKind::Probed };
            next.push(NodeSpec { id: id(&format!("added-{k}")), kind, depends_on });
        }
        let mut modified = false;
        if let Some((node, w)) = modify {
            let with_deps: Vec<usize> = (0..next.len()).filter(|&i| !next[i].depends_on.is_empty()).collect();
            if !with_deps.is_empty() {
                let i = *node.get(&with_deps);
                modified = next[i].depends_on[0].weight != WEIGHTS[w] && next[i].depends_on.len() > 1;
                next[i].depends_on[0].weight = WEIGHTS[w];
            }
        }

        let applied = g.apply(&next).unwrap();
        if !modified {
            prop_assert!(applied.incremental, "{:?}", applied);
        }
        check_consistent(&g)?;
        for (node, (window, state)) in results(&g) {
            if let Some(old) = before.get(&node) {
                prop_assert_eq!(&(window, state), old, "{} lost its results", node);
            }
        }
        if !next.is_empty() {
            run(&mut g, &next, more_ops)?;
        }
    }
}

/// Whether `from` depends on `to` in `specs`.
fn depends(specs: &[NodeSpec], from: &TargetId, to: &TargetId) -> bool {
    specs
        .iter()
        .any(|s| &s.id == from && s.depends_on.iter().any(|d| &d.target == to))
}

#[test]
fn reset_forgets_a_nodes_results() {
    let mut g = build(&[group("svc", vec![dep("db")]), probed("db", vec![])]);
    feed(&mut g, "db", &[G, F], Up);
    assert_eq!(score(&g, "svc"), Some(0.5));
    g.reset(&id("db")).unwrap();
    assert_eq!(score(&g, "db"), None);
    assert_eq!(score(&g, "svc"), None);
    assert_eq!(g.view().status(&id("db")).unwrap().state, Some(Probing));
    feed(&mut g, "db", &[G], Up);
    assert_eq!(score(&g, "svc"), Some(1.0));
    assert_eq!(g.reset(&id("svc")), Err(NodeError::Group(id("svc"))));
    check_consistent(&g).unwrap();
}

#[test]
fn reconfigure_keeps_the_most_recent_results() {
    let mut g = build(&[probed("db", vec![]), group("svc", vec![critical("db")])]);
    // Oldest first: F F G D.
    feed(&mut g, "db", &[F, F, G, D], Deg);
    assert_eq!(score(&g, "db"), Some(1.5 / 4.0));
    // A window of 2 keeps G D; a degraded result now counts fully.
    g.reconfigure(GraphConfig::try_new(2, 1.0, 0.3).unwrap());
    assert_eq!(score(&g, "db"), Some(1.0));
    g.set_state(&id("db"), Down).unwrap();
    assert_eq!(score(&g, "svc"), Some(0.3), "the new cap applies");
    // Growing the window keeps what there is and fills up from there.
    g.reconfigure(GraphConfig::try_new(4, 0.0, 0.3).unwrap());
    feed(&mut g, "db", &[F], Down);
    assert_eq!(score(&g, "db"), Some(1.0 / 3.0));
    check_consistent(&g).unwrap();
}

fn policy(require: &[&str], min_score: f64, hysteresis: f64) -> ReadinessPolicy {
    ReadinessPolicy::try_new(
        require.iter().map(|r| id(r)).collect(),
        min_score,
        hysteresis,
    )
    .unwrap()
}

#[test]
fn readiness_policies_are_validated() {
    assert_eq!(
        ReadinessPolicy::try_new(vec![], 0.8, 0.05),
        Err(ReadinessPolicyError::NothingRequired)
    );
    assert_eq!(
        ReadinessPolicy::try_new(vec![id("a")], 1.5, 0.05),
        Err(ReadinessPolicyError::MinScore(1.5))
    );
    assert!(matches!(
        ReadinessPolicy::try_new(vec![id("a")], 0.8, f64::NAN),
        Err(ReadinessPolicyError::Hysteresis(_))
    ));
    assert_eq!(
        policy(&["a", "b", "a"], 0.8, 0.0).require(),
        [id("a"), id("b")]
    );
}

/// A service with a critical database and a non-critical cache, required at 0.8 with a 0.1 margin.
fn service() -> (Graph, ReadinessLatch) {
    let g = build(&[
        group(
            "svc",
            vec![
                Dependency {
                    weight: 4.0,
                    ..critical("db")
                },
                dep("cache"),
            ],
        ),
        probed("db", vec![]),
        probed("cache", vec![]),
    ]);
    (g, ReadinessLatch::new(policy(&["svc"], 0.8, 0.1)))
}

#[test]
fn readiness_waits_for_scores_and_holds_through_unknown() {
    let (mut g, mut latch) = service();
    assert!(!latch.verdict().ready);
    assert!(!latch.update(&g));
    assert_eq!(
        latch.verdict().reason.as_deref(),
        Some("svc has no score yet")
    );
    feed(&mut g, "db", &[G], Up);
    assert!(!latch.update(&g), "the cache is still unknown");
    feed(&mut g, "cache", &[G], Up);
    assert!(latch.update(&g));
    assert_eq!(
        latch.verdict(),
        &GraphReadiness {
            ready: true,
            required: 1,
            passing: 1,
            reason: None,
            checks: std::sync::Arc::from([NodeCheck {
                node: id("svc"),
                failure: None
            }]),
        }
    );
    // A reset (the cache's probe changed) makes the score unknown: the verdict holds.
    g.reset(&id("cache")).unwrap();
    assert!(!latch.update(&g));
    assert!(latch.verdict().ready);
}

#[test]
fn readiness_ignores_a_non_critical_dependency_down_but_not_a_critical_one() {
    let (mut g, mut latch) = service();
    feed(&mut g, "db", &[G], Up);
    feed(&mut g, "cache", &[G], Up);
    latch.update(&g);
    // The cache fails for good: svc = 0.8 * 1 + 0.2 * 0 = 0.8, still ready.
    feed(&mut g, "cache", &[F; 20], Down);
    assert!(!latch.update(&g));
    assert!(latch.verdict().ready);
    assert_eq!(score(&g, "svc"), Some(0.8));
    // The database goes DOWN: capped and not ready, whatever the score was.
    feed(&mut g, "db", &[F], Down);
    assert!(latch.update(&g));
    assert_eq!(
        latch.verdict().reason.as_deref(),
        Some("svc has a critical dependency DOWN (db)")
    );
    // Both back: ready again.
    feed(&mut g, "cache", &[G; 20], Up);
    feed(&mut g, "db", &[G; 20], Up);
    assert!(latch.update(&g));
}

#[test]
fn readiness_has_hysteresis_at_the_threshold() {
    let mut g = build(&[probed("db", vec![])]);
    let mut latch = ReadinessLatch::new(policy(&["db"], 0.8, 0.1));
    let step = |g: &mut Graph, latch: &mut ReadinessLatch, results: &[Quality]| {
        feed(g, "db", results, Up);
        latch.update(g);
        (latch.verdict().ready, score(g, "db").unwrap())
    };
    assert_eq!(step(&mut g, &mut latch, &[G; 20]), (true, 1.0));
    assert_eq!(
        step(&mut g, &mut latch, &[F; 5]),
        (true, 0.75),
        "under 0.8, above 0.7"
    );
    assert_eq!(
        step(&mut g, &mut latch, &[F]),
        (true, 0.7),
        "at the lower threshold"
    );
    assert_eq!(step(&mut g, &mut latch, &[F]), (false, 0.65));
    assert_eq!(
        latch.verdict().reason.as_deref(),
        Some("db scores 0.65 < 0.70")
    );
    // The failures roll out of the window one by one after 13 more good results.
    assert_eq!(step(&mut g, &mut latch, &[G; 13]), (false, 0.65));
    assert_eq!(
        step(&mut g, &mut latch, &[G; 2]),
        (false, 0.75),
        "above 0.7, under 0.8"
    );
    assert_eq!(step(&mut g, &mut latch, &[G]), (true, 0.8));
    // A DOWN required node fails whatever its score.
    g.set_state(&id("db"), Down).unwrap();
    latch.update(&g);
    assert_eq!(latch.verdict().reason.as_deref(), Some("db is DOWN"));
}

#[test]
fn an_empty_graph_grows_by_apply() {
    let mut g = Graph::empty(GraphConfig::default());
    assert!(g.is_empty());
    let applied = g
        .apply(&[probed("db", vec![]), group("svc", vec![dep("db")])])
        .unwrap();
    assert_eq!(applied.added, [id("db"), id("svc")]);
    feed(&mut g, "db", &[G], Up);
    assert_eq!(score(&g, "svc"), Some(1.0));
}

#[test]
fn an_sla_multiplies_a_leafs_success_ratio_and_moves_its_parents() {
    let mut g = build(&[
        probed("db", vec![]),
        probed("cache", vec![]),
        group("shop", vec![dep("db"), dep("cache")]),
    ]);
    feed(&mut g, "db", &[G, G, G, F], Up);
    feed(&mut g, "cache", &[G], Up);
    assert_eq!(score(&g, "db"), Some(0.75));
    assert_eq!(g.set_sla(&id("db"), Some(0.9)), Ok(2));
    assert_eq!(score(&g, "db"), Some(0.75 * 0.9));
    assert_eq!(score(&g, "shop"), Some((0.75 * 0.9 + 1.0) / 2.0));
    assert_eq!(g.sla(&id("db")), Some(0.9));
    // The incremental path agrees with a full rescore to the bit.
    let incremental: Vec<_> = ["db", "cache", "shop"]
        .map(|n| score(&g, n).map(f64::to_bits))
        .into();
    g.full_rescore();
    let full: Vec<_> = ["db", "cache", "shop"]
        .map(|n| score(&g, n).map(f64::to_bits))
        .into();
    assert_eq!(incremental, full);
    let explained = g.view().explain(&id("db")).unwrap();
    assert_eq!(explained.sla, Some(0.9));
    assert!(explained.to_string().contains("sla 0.9000"), "{explained}");
    // The same SLA again changes nothing; none goes back to the ratio alone; out of range clamps.
    assert_eq!(g.set_sla(&id("db"), Some(0.9)), Ok(0));
    g.set_sla(&id("db"), None).unwrap();
    assert_eq!(score(&g, "db"), Some(0.75));
    g.set_sla(&id("db"), Some(7.0)).unwrap();
    assert_eq!(g.sla(&id("db")), Some(1.0));
    assert!(matches!(
        g.set_sla(&id("shop"), Some(0.5)),
        Err(NodeError::Group(_))
    ));
}
