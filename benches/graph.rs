//! Criterion benchmark: the dependency graph at 100k nodes and 300k edges.
//!
//! The graph is a random layered DAG from a fixed seed (a seeded `StdRng`: the same graph on
//! every run of a build; `Cargo.lock` pins the `rand` whose stream it is), shaped like a service
//! estate: 50k probed
//! leaves, then layers of 25k, 13k, 7k, 3.5k and 1.5k nodes (80% probed, 20% groups), each with
//! 6 distinct dependencies, 80% on the layer just below and 20% on any lower layer; weights from
//! {0.5, 1, 2, 4}, 10% critical. Every probed node starts with a full window of results
//! (70% good, 15% degraded, 15% failed), each recorded with the state UP, DEGRADED or DOWN by its
//! quality, so updates slide full windows and critical caps come and go.
//!
//! - `graph_100k/build`: validate and compile the specs ([`Graph::build`]), first full rescore
//!   included;
//! - `graph_100k/full_rescore`: [`Graph::full_rescore`];
//! - `graph_100k/record_leaf`: one [`Graph::record`] on a random leaf, with its ancestors
//!   rescored.
//!
//! Criterion reports means. The update's tail is measured separately and printed as
//! `record_leaf latency`: 10k single updates timed one by one, sorted, p50/p99/max, with how many
//! nodes each update rescored (printed before criterion's own output, whatever the filter). The
//! same is printed for a *uniform* random DAG (each node depends on 3 nodes drawn from all lower
//! indices, so the only leaves are the 3 lowest nodes and everything is their ancestor): the
//! worst case, where every update that moves the leaf's score rescores nearly the whole graph.
//!
//! ```text
//! cargo bench --bench graph -- --quick
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use probe::TargetId;
use probe::graph::{Dependency, Graph, GraphConfig, NodeKind, NodeSpec};
use probe::health::{HealthState, Quality};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

/// A result's quality: 70% good, 15% degraded, 15% failed.
fn quality(rng: &mut StdRng) -> Quality {
    match rng.random_range(0..100) {
        0..70 => Quality::Good,
        70..85 => Quality::Degraded,
        _ => Quality::Failed,
    }
}

const SEED: u64 = 0x5EED_0002;
/// Layer sizes of the layered DAG, leaves first: 100k nodes.
const LAYERS: [usize; 6] = [50_000, 25_000, 13_000, 7_000, 3_500, 1_500];
/// Dependencies per non-leaf node of the layered DAG: 300k edges.
const FAN_OUT: usize = 6;
const WEIGHTS: [f64; 4] = [0.5, 1.0, 2.0, 4.0];

fn node_id(i: usize) -> TargetId {
    TargetId::new(&format!("svc-{i:06}")).expect("valid bench id")
}

fn dependency(rng: &mut StdRng, ids: &[TargetId], child: usize) -> Dependency {
    Dependency {
        weight: WEIGHTS[rng.random_range(0..WEIGHTS.len())],
        critical: rng.random_bool(0.1),
        ..Dependency::new(ids[child].clone(), "bench")
    }
}

/// Picks `count` distinct children with `pick`, as dependencies.
fn children(
    rng: &mut StdRng,
    ids: &[TargetId],
    count: usize,
    mut pick: impl FnMut(&mut StdRng) -> usize,
) -> Vec<Dependency> {
    let mut chosen: Vec<usize> = Vec::with_capacity(count);
    while chosen.len() < count {
        let child = pick(rng);
        if !chosen.contains(&child) {
            chosen.push(child);
        }
    }
    chosen
        .into_iter()
        .map(|c| dependency(rng, ids, c))
        .collect()
}

fn kind(rng: &mut StdRng) -> NodeKind {
    if rng.random_bool(0.2) {
        NodeKind::Group
    } else {
        NodeKind::Probed
    }
}

/// The layered DAG described in the module docs. Node `i`'s id is `svc-i`; ids are not in
/// topological order of declaration, as specs are listed top layer first.
fn layered() -> Vec<NodeSpec> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let n: usize = LAYERS.iter().sum();
    let ids: Vec<TargetId> = (0..n).map(node_id).collect();
    let mut specs = Vec::with_capacity(n);
    let mut start = 0;
    for (layer, &size) in LAYERS.iter().enumerate() {
        let below = start - LAYERS[layer.saturating_sub(1)].min(start);
        for i in start..start + size {
            let spec = if layer == 0 {
                NodeSpec {
                    id: ids[i].clone(),
                    kind: NodeKind::Probed,
                    depends_on: Vec::new(),
                }
            } else {
                let depends_on = children(&mut rng, &ids, FAN_OUT, |rng| {
                    if rng.random_bool(0.8) {
                        rng.random_range(below..start)
                    } else {
                        rng.random_range(0..start)
                    }
                });
                NodeSpec {
                    id: ids[i].clone(),
                    kind: kind(&mut rng),
                    depends_on,
                }
            };
            specs.push(spec);
        }
        start += size;
    }
    specs.reverse();
    specs
}

/// A uniform random DAG: node `i >= 3` depends on 3 distinct nodes below `i`; nodes 0..3 are
/// leaves. 100k nodes, ~300k edges.
fn uniform() -> Vec<NodeSpec> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let n: usize = LAYERS.iter().sum();
    let ids: Vec<TargetId> = (0..n).map(node_id).collect();
    (0..n)
        .map(|i| {
            let (kind, depends_on) = if i < 3 {
                (NodeKind::Probed, Vec::new())
            } else {
                let deps = children(&mut rng, &ids, 3, |rng| rng.random_range(0..i));
                (kind(&mut rng), deps)
            };
            NodeSpec {
                id: ids[i].clone(),
                kind,
                depends_on,
            }
        })
        .collect()
}

fn state_after(quality: Quality) -> HealthState {
    match quality {
        Quality::Good => HealthState::Up,
        Quality::Degraded => HealthState::Degraded,
        Quality::Failed => HealthState::Down,
    }
}

/// Builds the graph and fills every probed node's window.
fn filled(specs: &[NodeSpec], rng: &mut StdRng) -> Graph {
    let config = GraphConfig::default();
    let mut graph = Graph::build(config, specs).expect("the bench graph is valid");
    for spec in specs.iter().filter(|s| s.kind == NodeKind::Probed) {
        for _ in 0..config.window() {
            let q = quality(rng);
            graph
                .record(&spec.id, q, state_after(q))
                .expect("probed node");
        }
    }
    graph
}

/// The ids of the probed leaves.
fn leaves(specs: &[NodeSpec]) -> Vec<TargetId> {
    specs
        .iter()
        .filter(|s| s.kind == NodeKind::Probed && s.depends_on.is_empty())
        .map(|s| s.id.clone())
        .collect()
}

/// Times `updates` single leaf results one by one and prints the distribution.
fn latency(name: &str, specs: &[NodeSpec], updates: usize) {
    let mut rng = StdRng::seed_from_u64(SEED ^ 1);
    let mut graph = filled(specs, &mut rng);
    let leaves = leaves(specs);
    let mut times = Vec::with_capacity(updates);
    let mut rescored = Vec::with_capacity(updates);
    for _ in 0..updates {
        let leaf = &leaves[rng.random_range(0..leaves.len())];
        let q = quality(&mut rng);
        let start = Instant::now();
        let n = graph.record(leaf, q, state_after(q)).expect("probed leaf");
        times.push(start.elapsed());
        rescored.push(n);
    }
    times.sort_unstable();
    rescored.sort_unstable();
    let at = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
    let mean = times.iter().sum::<Duration>() / updates as u32;
    let mean_rescored = rescored.iter().sum::<usize>() as f64 / rescored.len() as f64;
    println!(
        "{name}: {updates} updates: mean {mean:?}, p50 {:?}, p99 {:?}, max {:?}; nodes rescored \
         per update: mean {mean_rescored:.0}, p99 {}, max {}",
        at(50),
        at(99),
        times[times.len() - 1],
        rescored[(rescored.len() * 99 / 100).min(rescored.len() - 1)],
        rescored[rescored.len() - 1],
    );
}

fn graph_100k(c: &mut Criterion) {
    let specs = layered();
    let edges: usize = specs.iter().map(|s| s.depends_on.len()).sum();
    println!("layered DAG: {} nodes, {edges} edges", specs.len());
    latency("record_leaf latency (layered)", &specs, 10_000);
    latency("record_leaf latency (uniform)", &uniform(), 1_000);

    let mut group = c.benchmark_group("graph_100k");
    group.sample_size(10);
    group.bench_function("build", |b| {
        b.iter_with_large_drop(|| Graph::build(GraphConfig::default(), black_box(&specs)));
    });

    let mut rng = StdRng::seed_from_u64(SEED ^ 2);
    let mut graph = filled(&specs, &mut rng);
    group.bench_function("full_rescore", |b| b.iter(|| graph.full_rescore()));

    let leaves = leaves(&specs);
    let results: Vec<(TargetId, Quality)> = (0..4096)
        .map(|_| {
            let leaf = leaves[rng.random_range(0..leaves.len())].clone();
            (leaf, quality(&mut rng))
        })
        .collect();
    let mut next = 0;
    group.sample_size(50);
    group.bench_function("record_leaf", |b| {
        b.iter(|| {
            let (leaf, q) = &results[next % results.len()];
            next += 1;
            graph.record(leaf, *q, state_after(*q))
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = graph_100k
}
criterion_main!(benches);
