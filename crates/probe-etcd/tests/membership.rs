//! Cluster membership against a real etcd: members see each other, a taken name is refused with
//! its holder, a member that leaves is gone at once, and one that dies is gone after its TTL.

use std::time::Duration;

use probe::cluster::MemberId;
use probe_etcd::membership::{Lease, MemberRecord, Membership, MembershipError, unix_ms_now};
use probe_testkit::etcd::{TestEtcd, wait_for};
use tokio_util::sync::CancellationToken;

const PREFIX: &str = "/probe-engine/cluster/";
const TTL: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(20);

fn record(name: &str, api: &str) -> MemberRecord {
    MemberRecord {
        name: name.to_owned(),
        api: api.to_owned(),
        started_unix_ms: unix_ms_now(),
        version: "test".to_owned(),
    }
}

fn names(view: &probe_etcd::membership::View) -> Vec<&str> {
    view.members.keys().map(MemberId::as_str).collect()
}

#[tokio::test]
async fn members_see_each_other_come_and_go() {
    let etcd = TestEtcd::start().await.expect("etcd");
    let cancel = CancellationToken::new();
    let join = |name: &'static str, api: &'static str| {
        let etcd = &etcd;
        async move {
            let client = etcd.client().await.expect("client");
            Membership::join(client, PREFIX, record(name, api), TTL)
                .await
                .expect("join")
        }
    };
    let a = std::sync::Arc::new(join("a", "127.0.0.1:1001").await);
    let b = std::sync::Arc::new(join("b", "127.0.0.1:1002").await);
    for member in [&a, &b] {
        let member = member.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { member.run(cancel).await });
    }
    let mut seen_by_a = a.view();
    let view = wait_for(&mut seen_by_a, WAIT, |v| v.members.len() == 2 && !v.stale).await;
    assert_eq!(names(&view), ["a", "b"]);
    assert_eq!(
        view.members[&MemberId::new("b").unwrap()].api,
        "127.0.0.1:1002"
    );
    assert_eq!(view.lease, Lease::Live);

    // The same name again is refused, naming the address that holds it.
    let client = etcd.client().await.expect("client");
    match Membership::join(client, PREFIX, record("b", "127.0.0.1:9999"), TTL).await {
        Err(MembershipError::NameTaken { name, holder }) => {
            assert_eq!((name.as_str(), holder.as_str()), ("b", "127.0.0.1:1002"));
        }
        other => panic!("expected NameTaken, got {other:?}"),
    }

    // A member that leaves is gone at once: well before its lease would run out.
    let left = tokio::time::Instant::now();
    b.leave().await.expect("leave");
    let view = wait_for(&mut seen_by_a, WAIT, |v| v.members.len() == 1).await;
    assert_eq!(names(&view), ["a"]);
    assert!(left.elapsed() < TTL, "took {:?}", left.elapsed());

    // One that dies (stops renewing without leaving) is gone once its TTL has run out.
    let c = std::sync::Arc::new(join("c", "127.0.0.1:1003").await);
    let c_cancel = CancellationToken::new();
    {
        let c = c.clone();
        let c_cancel = c_cancel.clone();
        tokio::spawn(async move { c.run(c_cancel).await });
    }
    wait_for(&mut seen_by_a, WAIT, |v| v.members.len() == 2).await;
    c_cancel.cancel();
    let died = tokio::time::Instant::now();
    let view = wait_for(&mut seen_by_a, WAIT, |v| v.members.len() == 1).await;
    assert_eq!(names(&view), ["a"]);
    assert!(
        died.elapsed() >= TTL / 2,
        "gone before its lease could run out"
    );
    cancel.cancel();
}

#[tokio::test]
async fn a_member_cut_off_from_etcd_goes_stale_then_knows_its_lease_is_lost() {
    let mut etcd = TestEtcd::start().await.expect("etcd");
    let client = etcd.client().await.expect("client");
    let me = std::sync::Arc::new(
        Membership::join(client, PREFIX, record("a", "127.0.0.1:1001"), TTL)
            .await
            .expect("join"),
    );
    let cancel = CancellationToken::new();
    {
        let me = me.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { me.run(cancel).await });
    }
    let mut view = me.view();
    wait_for(&mut view, WAIT, |v| !v.stale && v.members.len() == 1).await;
    etcd.kill();
    let stale = wait_for(&mut view, WAIT, |v| v.stale).await;
    assert_eq!(names(&stale), ["a"], "the last set seen is kept");
    let lost = wait_for(&mut view, WAIT, |v| v.lease == Lease::Lost).await;
    assert!(lost.stale);
    cancel.cancel();
}
