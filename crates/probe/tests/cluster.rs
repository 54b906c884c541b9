//! Engines in a cluster, wired by hand as the daemon wires them through etcd: each probes only
//! what the ranking gives it, shows the others' published verdicts, resumes a target it takes
//! over from the verdict in force, and decides a replicated target by a quorum of votes.

#[path = "support/switch.rs"]
mod switch;

use std::num::{NonZeroU8, NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use probe::TargetId;
use probe::cluster::MemberId;
use probe::cluster::{Replication, Role};
use probe::engine::EngineConfig;
use probe::health::{HealthState, Schedule, ScheduleSettings, Thresholds};
use probe::scheduler::SchedulerConfig;
use probe::tier::{CustomProbe, ProbeSpec};
use probe::{Engine, TargetSpec};
use switch::Switch;
use tokio_util::sync::CancellationToken;

const INTERVAL: Duration = Duration::from_secs(1);

/// One member: its engine and, by target, the probe it runs.
struct Member {
    name: MemberId,
    engine: Engine,
    probes: Vec<(TargetId, Arc<Switch>)>,
}

impl Member {
    fn start(
        name: &str,
        targets: &[&str],
        default: Replication,
        cancel: &CancellationToken,
    ) -> Self {
        let engine = Engine::start(
            EngineConfig {
                scheduler: SchedulerConfig {
                    max_in_flight: NonZeroUsize::new(64).unwrap(),
                    ..SchedulerConfig::default()
                },
                self_health: None,
                ..EngineConfig::default()
            },
            cancel.clone(),
        );
        let name = MemberId::new(name).unwrap();
        assert!(engine.cluster().join(name.clone(), default));
        let probes: Vec<(TargetId, Arc<Switch>)> = targets
            .iter()
            .map(|t| (TargetId::new(t).unwrap(), Arc::new(Switch::default())))
            .collect();
        let specs: Vec<TargetSpec> = probes.iter().map(|(id, probe)| spec(id, probe)).collect();
        engine.apply(specs).unwrap();
        Self {
            name,
            engine,
            probes,
        }
    }

    fn probe(&self, id: &str) -> &Switch {
        &self
            .probes
            .iter()
            .find(|(t, _)| t.as_str() == id)
            .unwrap()
            .1
    }

    fn role(&self, id: &TargetId) -> Role {
        self.engine.status(id).unwrap().placement.unwrap().role
    }

    fn state(&self, id: &str) -> HealthState {
        self.engine.status(&tid(id)).unwrap().state
    }
}

/// A target probed by `probe` every interval, two results to a verdict.
fn spec(id: &TargetId, probe: &Arc<Switch>) -> TargetSpec {
    TargetSpec::new(
        id.clone(),
        ProbeSpec::Custom(CustomProbe::new(probe.clone())),
    )
    .with_schedule(
        Schedule::try_new(ScheduleSettings {
            interval: INTERVAL,
            timeout: INTERVAL / 2,
            jitter: 0.0,
            ..ScheduleSettings::default()
        })
        .unwrap(),
    )
    .with_thresholds(Thresholds::new(
        NonZeroU32::new(2).unwrap(),
        NonZeroU32::new(2).unwrap(),
    ))
    .with_flap(None)
}

fn tid(s: &str) -> TargetId {
    TargetId::new(s).unwrap()
}

/// What the cluster's store carries, done by hand: every member's votes and decisions reach
/// the others.
fn relay(members: &[&Member]) {
    for _ in 0..3 {
        for from in members {
            let votes = from.engine.cluster().own_votes();
            let decisions = from.engine.cluster().decisions();
            for to in members.iter().filter(|m| m.name != from.name) {
                for (id, vote) in &votes {
                    to.engine
                        .cluster()
                        .set_vote(id, &from.name, Some(*vote))
                        .unwrap();
                }
                for (id, verdict) in &decisions {
                    to.engine.cluster().adopt(id, verdict);
                }
            }
        }
    }
}

async fn run_for(duration: Duration) {
    let step = Duration::from_millis(50);
    let mut left = duration;
    while !left.is_zero() {
        tokio::time::sleep(step.min(left)).await;
        left = left.saturating_sub(step);
    }
}

#[tokio::test(start_paused = true)]
async fn each_target_is_probed_and_exported_by_its_owner_alone() {
    let cancel = CancellationToken::new();
    let ids: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let a = Member::start("a", &ids, Replication::ONE, &cancel);
    let b = Member::start("b", &ids, Replication::ONE, &cancel);
    // Before the member set is known, nobody probes anything.
    run_for(3 * INTERVAL).await;
    for m in [&a, &b] {
        assert!(
            m.probes
                .iter()
                .all(|(_, p)| p.runs.load(Ordering::SeqCst) == 0)
        );
    }
    for m in [&a, &b] {
        let reassigned = m
            .engine
            .cluster()
            .set_members([a.name.clone(), b.name.clone()]);
        assert_eq!(reassigned.moved, 40);
        // Given out by the first member set: nothing was handed over.
        assert_eq!(reassigned.taken, 0);
    }
    run_for(3 * INTERVAL).await;
    let mut owned = [0, 0];
    for (i, id) in ids.iter().enumerate() {
        let target = tid(id);
        let (ra, rb) = (a.role(&target), b.role(&target));
        let (na, nb) = (
            a.probes[i].1.runs.load(Ordering::SeqCst),
            b.probes[i].1.runs.load(Ordering::SeqCst),
        );
        match (ra, rb) {
            (Role::Decide, Role::Follow) => {
                assert!(na >= 2 && nb == 0, "{id}: {na} runs at a, {nb} at b");
                owned[0] += 1;
            }
            (Role::Follow, Role::Decide) => {
                assert!(nb >= 2 && na == 0, "{id}: {na} runs at a, {nb} at b");
                owned[1] += 1;
            }
            other => panic!("{id}: roles {other:?}"),
        }
    }
    assert_eq!(owned[0] + owned[1], 40);
    assert!(owned[0] >= 10 && owned[1] >= 10, "{owned:?}");
    // The follower shows what the owner published.
    relay(&[&a, &b]);
    for id in &ids {
        assert_eq!(a.state(id), HealthState::Up, "{id}");
        assert_eq!(b.state(id), HealthState::Up, "{id}");
    }
    // Each target's series are in its owner's scrape only.
    let mut scrapes = [String::new(), String::new()];
    a.engine.encode_metrics(&mut scrapes[0]);
    b.engine.encode_metrics(&mut scrapes[1]);
    for id in &ids {
        let series = format!("probe_success{{target=\"{id}\"}}");
        let count = scrapes.iter().filter(|s| s.contains(&series)).count();
        assert_eq!(count, 1, "{id}");
    }
    let loads = a.engine.cluster().loads().unwrap();
    assert_eq!(loads.me, a.name);
    assert_eq!(loads.members[&a.name].0, owned[0]);
    assert_eq!(loads.members[&b.name].0, owned[1]);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_member_that_takes_a_target_over_resumes_from_its_verdict() {
    let cancel = CancellationToken::new();
    let a = Member::start("a", &["db"], Replication::ONE, &cancel);
    let b = Member::start("b", &["db"], Replication::ONE, &cancel);
    a.probe("db").down.store(true, Ordering::SeqCst);
    b.probe("db").down.store(true, Ordering::SeqCst);
    // a alone is a member: it owns the target and takes it DOWN.
    a.engine.cluster().set_members([a.name.clone()]);
    b.engine.cluster().set_members([a.name.clone()]);
    run_for(4 * INTERVAL).await;
    assert_eq!(a.state("db"), HealthState::Down);
    relay(&[&a, &b]);
    let before = b.engine.status(&tid("db")).unwrap();
    assert_eq!((before.state, before.transitions), (HealthState::Down, 1));
    assert_eq!(b.probe("db").runs.load(Ordering::SeqCst), 0);

    // a is gone: b takes the target over, probes it within one interval, and it stays DOWN
    // with no transition.
    let reassigned = b.engine.cluster().set_members([b.name.clone()]);
    assert_eq!(reassigned.taken, 1);
    // Probed soon: within a quarter of its interval.
    run_for(INTERVAL / 4 + Duration::from_millis(10)).await;
    assert!(b.probe("db").runs.load(Ordering::SeqCst) >= 1);
    run_for(3 * INTERVAL).await;
    let after = b.engine.status(&tid("db")).unwrap();
    assert_eq!((after.state, after.transitions), (HealthState::Down, 1));
    // Published with its counters capped at the thresholds: settled, it stops changing.
    let published = b.engine.cluster().decided(&tid("db")).unwrap();
    assert_eq!(
        (published.state, published.consecutive_failures),
        (HealthState::Down, 2)
    );

    // Its own results decide from there: back UP after `rise` passes (the first of them within
    // the DOWN backoff's longest step, four intervals and its jitter).
    b.probe("db").down.store(false, Ordering::SeqCst);
    run_for(10 * INTERVAL).await;
    assert_eq!(b.state("db"), HealthState::Up);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_replicated_target_goes_down_only_when_a_quorum_says_so() {
    let cancel = CancellationToken::new();
    let three_of_two =
        Replication::new(NonZeroU8::new(3).unwrap(), NonZeroU8::new(2).unwrap()).unwrap();
    let members: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|n| Member::start(n, &["api"], three_of_two, &cancel))
        .collect();
    let names: Vec<MemberId> = members.iter().map(|m| m.name.clone()).collect();
    for m in &members {
        m.engine.cluster().set_members(names.clone());
    }
    let all: Vec<&Member> = members.iter().collect();
    let id = tid("api");
    let roles: Vec<Role> = members.iter().map(|m| m.role(&id)).collect();
    assert_eq!(roles.iter().filter(|r| **r == Role::Lead).count(), 1);
    assert_eq!(roles.iter().filter(|r| **r == Role::Vote).count(), 2);
    run_for(3 * INTERVAL).await;
    relay(&all);
    for m in &members {
        assert_eq!(m.state("api"), HealthState::Up);
    }

    // One vantage point loses the target: it votes DOWN, the target stays UP.
    members[0].probe("api").down.store(true, Ordering::SeqCst);
    run_for(4 * INTERVAL).await;
    relay(&all);
    assert_eq!(
        members[0].engine.cluster().own_vote(&id),
        Some(HealthState::Down),
        "its own vote"
    );
    for m in &members {
        assert_eq!(m.state("api"), HealthState::Up, "{}", m.name);
    }

    // A second one: DOWN everywhere, by the owner's decision.
    members[1].probe("api").down.store(true, Ordering::SeqCst);
    run_for(4 * INTERVAL).await;
    relay(&all);
    for m in &members {
        assert_eq!(m.state("api"), HealthState::Down, "{}", m.name);
    }
    let owner = members.iter().find(|m| m.role(&id) == Role::Lead).unwrap();
    let votes = owner.engine.status(&id).unwrap().placement.unwrap().votes;
    assert_eq!(votes.len(), 3, "{votes:?}");
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_target_that_arrives_late_resumes_from_the_verdict_published_before_it() {
    let cancel = CancellationToken::new();
    let a = Member::start("a", &["db"], Replication::ONE, &cancel);
    a.engine.cluster().set_members([a.name.clone()]);
    let late = tid("late");
    let probe = Arc::new(Switch::default());
    probe.down.store(true, Ordering::SeqCst);
    let down = probe::cluster::Published {
        state: HealthState::Down,
        consecutive_successes: 0,
        consecutive_failures: 2,
        detail: Some("refused: published elsewhere".to_owned()),
        since: Some(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
    };
    // Published before the target reached this member (a source that lags): kept.
    assert!(!a.engine.cluster().adopt(&late, &down));
    a.engine
        .apply(vec![spec(&tid("db"), &a.probes[0].1), spec(&late, &probe)])
        .unwrap();
    // It is this member's to decide, and it starts DOWN: no PROBING, no transition of its own.
    let status = a.engine.status(&late).unwrap();
    assert_eq!(status.placement.unwrap().role, Role::Decide);
    assert_eq!(status.state, HealthState::Down);
    // DOWN since its decider says, not since it arrived here.
    assert_eq!(status.since, down.since);
    // Long enough for two runs at the DOWN backoff's longest step (four intervals).
    run_for(10 * INTERVAL).await;
    let status = a.engine.status(&late).unwrap();
    assert!(probe.runs.load(Ordering::SeqCst) >= 2);
    assert_eq!((status.state, status.transitions), (HealthState::Down, 1));
    // A withdrawn verdict is not kept.
    let gone = tid("gone");
    a.engine.cluster().adopt(&gone, &down);
    a.engine.cluster().withdraw(&gone);
    let probe = Arc::new(Switch::default());
    a.engine
        .apply(vec![
            spec(&tid("db"), &a.probes[0].1),
            spec(&tid("late"), &probe),
            spec(&gone, &probe),
        ])
        .unwrap();
    assert_eq!(a.engine.status(&gone).unwrap().state, HealthState::Probing);
    cancel.cancel();
}
