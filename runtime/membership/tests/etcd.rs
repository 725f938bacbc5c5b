//! The etcd backend against a real etcd server on loopback, started by each test.
//!
//! Without an `etcd` binary (on PATH or in /usr/bin) these tests print a skip message and
//! pass, except under `CI=true`, where they fail: CI installs etcd with
//! `scripts/install-test-deps.sh`, so a missing binary there is a broken setup.
//! Timing assertions are loose (lease TTL + 3 s) so a loaded machine does not make them
//! flaky; the measured detection time is printed.

use harp_membership::test_server::{free_port, EtcdServer};
use harp_membership::{
    EtcdMembership, EtcdOptions, MemberInfo, MembershipBackend, MembershipBackendError,
    MembershipConfig, MembershipEvent, MembershipWatch, NodeId, NodeRoles,
};
use std::time::{Duration, Instant};

fn info(n: u32) -> MemberInfo {
    MemberInfo::new(format!("127.0.0.1:{}", 7000 + n), NodeRoles::BOTH)
}

/// Lease timeout 2 s: TTL 2 s, the minimum etcd grants with its default settings (a
/// shorter one is raised to it).
fn short_lease() -> MembershipConfig {
    MembershipConfig::with_lease_timeout_ms(2000)
}

async fn connect(server: &EtcdServer, job: &str) -> EtcdMembership {
    EtcdMembership::connect(&server.endpoint, job, short_lease(), EtcdOptions::default())
        .await
        .unwrap()
}

async fn next_within(watch: &mut MembershipWatch, within: Duration) -> Option<MembershipEvent> {
    tokio::time::timeout(within, watch.next())
        .await
        .ok()
        .map(|e| e.expect("watch ended"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_two_nodes_watch_sees_both() {
    let Some(server) = EtcdServer::start().await else {
        return;
    };
    let master = connect(&server, "job-a").await;
    let node = connect(&server, "job-a").await;
    let _one = node.register(NodeId(1), info(1)).await.unwrap();
    let _two = node.register(NodeId(2), info(2)).await.unwrap();
    let mut watch = master.watch().await.unwrap();
    for n in [1, 2] {
        let ev = next_within(&mut watch, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            ev,
            MembershipEvent::Joined {
                node: NodeId(n),
                info: info(n)
            }
        );
    }
    // A node joining after the watch started is seen live.
    let _three = node.register(NodeId(3), info(3)).await.unwrap();
    let ev = next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        ev,
        MembershipEvent::Joined {
            node: NodeId(3),
            info: info(3)
        }
    );
    assert_eq!(
        master.members().await.unwrap(),
        vec![
            (NodeId(1), info(1)),
            (NodeId(2), info(2)),
            (NodeId(3), info(3))
        ]
    );
    // One id, one holder.
    let err = node.register(NodeId(2), info(2)).await.unwrap_err();
    assert_eq!(err, MembershipBackendError::AlreadyRegistered(NodeId(2)));
    // Another job's prefix is separate.
    let other = connect(&server, "job-b").await;
    assert!(other.members().await.unwrap().is_empty());
    assert_eq!(master.malformed_records(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_is_reported_dead_live_node_is_not() {
    let Some(server) = EtcdServer::start().await else {
        return;
    };
    let master = connect(&server, "job-kill").await;
    let node = connect(&server, "job-kill").await;
    let victim = node.register(NodeId(1), info(1)).await.unwrap();
    let _survivor = node.register(NodeId(2), info(2)).await.unwrap();
    let mut watch = master.watch().await.unwrap();
    next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();
    next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();

    // Kill: the keep-alive task is aborted, the lease is not revoked.
    let killed = Instant::now();
    victim.abandon();
    let ttl_s = master.lease_ttl_s();
    let ev = next_within(&mut watch, Duration::from_secs(ttl_s as u64 + 3)).await;
    let elapsed = killed.elapsed();
    let Some(MembershipEvent::Died {
        node: dead,
        info: dead_info,
        ..
    }) = ev
    else {
        panic!("expected node-1 to die within TTL {ttl_s} s + 3 s, got {ev:?}");
    };
    assert_eq!((dead, dead_info), (NodeId(1), info(1)));
    println!("etcd: killed node reported dead after {elapsed:?} (lease TTL asked {ttl_s} s)");

    // The survivor keeps its lease well past several TTLs.
    assert_eq!(
        next_within(&mut watch, Duration::from_secs(ttl_s as u64 * 2 + 2)).await,
        None
    );
    assert_eq!(master.members().await.unwrap(), vec![(NodeId(2), info(2))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_leave_and_revoke_are_left() {
    let Some(server) = EtcdServer::start().await else {
        return;
    };
    let master = connect(&server, "job-leave").await;
    let node = connect(&server, "job-leave").await;
    let mut watch = master.watch().await.unwrap();
    let leaver = node.register(NodeId(4), info(4)).await.unwrap();
    let mut removed = node.register(NodeId(5), info(5)).await.unwrap();
    next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();
    next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();

    leaver.leave().await.unwrap();
    let ev = next_within(&mut watch, Duration::from_secs(5)).await;
    assert_eq!(
        ev,
        Some(MembershipEvent::Left {
            node: NodeId(4),
            info: info(4)
        })
    );

    // The master removes node 5: Left, and node 5's keep-alive learns its lease is gone.
    master.revoke(NodeId(5)).await.unwrap();
    let ev = next_within(&mut watch, Duration::from_secs(5)).await;
    assert_eq!(
        ev,
        Some(MembershipEvent::Left {
            node: NodeId(5),
            info: info(5)
        })
    );
    let reason = tokio::time::timeout(
        Duration::from_secs(master.lease_ttl_s() as u64 + 3),
        removed.lost(),
    )
    .await
    .expect("the removed node learns it lost its lease");
    assert_eq!(reason, MembershipBackendError::LeaseLost(NodeId(5)));

    // No death follows; unknown nodes are typed errors.
    assert_eq!(next_within(&mut watch, Duration::from_secs(3)).await, None);
    assert_eq!(
        master.revoke(NodeId(9)).await,
        Err(MembershipBackendError::UnknownNode(NodeId(9)))
    );
    // The id is free again.
    let _again = node.register(NodeId(4), info(4)).await.unwrap();
    let ev = next_within(&mut watch, Duration::from_secs(5)).await;
    assert_eq!(
        ev,
        Some(MembershipEvent::Joined {
            node: NodeId(4),
            info: info(4)
        })
    );
}

#[tokio::test]
async fn unreachable_etcd_fails_fast_with_a_typed_error() {
    // Needs no etcd: a loopback port nobody listens on.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let options = EtcdOptions {
        connect_timeout_ms: 1000,
        request_timeout_ms: 1000,
    };
    let start = Instant::now();
    let err = EtcdMembership::connect(&endpoint, "job", short_lease(), options)
        .await
        .unwrap_err();
    println!("unreachable etcd: {err} (after {:?})", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&err, MembershipBackendError::EtcdUnavailable { endpoint: e, .. } if *e == endpoint),
        "{err:?}"
    );
}

#[tokio::test]
async fn bad_endpoints_and_jobs_are_refused() {
    for endpoint in [
        "127.0.0.1:2379",
        "https://127.0.0.1:2379",
        "http://:2379",
        "http://h",
        "http://h:0",
        "http://h:x",
    ] {
        let err = EtcdMembership::connect(endpoint, "job", short_lease(), EtcdOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(err, MembershipBackendError::InvalidEndpoint { .. }),
            "{endpoint}: {err:?}"
        );
    }
    for job in ["", "a/b"] {
        let err = EtcdMembership::connect(
            "http://127.0.0.1:1",
            job,
            short_lease(),
            EtcdOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, MembershipBackendError::InvalidJob { .. }),
            "{job:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_going_away_ends_watch_and_lease_with_errors() {
    let Some(server) = EtcdServer::start().await else {
        return;
    };
    let master = connect(&server, "job-gone").await;
    let mut lease = master.register(NodeId(1), info(1)).await.unwrap();
    let mut watch = master.watch().await.unwrap();
    next_within(&mut watch, Duration::from_secs(5))
        .await
        .unwrap();

    let stopped = Instant::now();
    drop(server);
    let ended = tokio::time::timeout(Duration::from_secs(15), watch.next())
        .await
        .expect("the watch must end, not hang, when etcd goes away");
    let err = ended.unwrap_err();
    println!(
        "etcd gone: watch ended after {:?}: {err}",
        stopped.elapsed()
    );
    assert!(
        matches!(err, MembershipBackendError::WatchLost(_)),
        "{err:?}"
    );
    assert_eq!(
        watch.next().await.unwrap_err(),
        err,
        "the watch stays ended"
    );

    let lost = tokio::time::timeout(Duration::from_secs(15), lease.lost())
        .await
        .expect("the lease must be reported lost, not hang, when etcd goes away");
    println!(
        "etcd gone: lease reported lost after {:?}: {lost}",
        stopped.elapsed()
    );
    assert_eq!(lost, MembershipBackendError::LeaseLost(NodeId(1)));
    let err = master.members().await.unwrap_err();
    assert!(
        matches!(
            err,
            MembershipBackendError::EtcdUnavailable { .. }
                | MembershipBackendError::DeadlineExceeded { .. }
        ),
        "{err:?}"
    );
}

/// A master starting a run clears what an earlier run's dead nodes left: their records would
/// be reported dying once their leases expire (and hold their ids meanwhile). After
/// `clear_members`, a watch reports nothing of them and the ids register again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_members_removes_an_earlier_runs_records() {
    let Some(server) = EtcdServer::start().await else {
        return;
    };
    let earlier = connect(&server, "job-again").await;
    for n in [0, 1] {
        earlier
            .register(NodeId(n), info(n))
            .await
            .unwrap()
            .abandon();
    }
    let master = connect(&server, "job-again").await;
    // Another job's member is not this job's to clear.
    let other = connect(&server, "job-other").await;
    let _other_member = other.register(NodeId(0), info(0)).await.unwrap();
    assert_eq!(master.clear_members().await.unwrap(), 2);
    assert_eq!(master.members().await.unwrap(), vec![]);
    let mut watch = master.watch().await.unwrap();
    let node = connect(&server, "job-again").await;
    let _again = node.register(NodeId(1), info(1)).await.unwrap();
    let ev = next_within(&mut watch, Duration::from_secs(5)).await;
    assert_eq!(
        ev,
        Some(MembershipEvent::Joined {
            node: NodeId(1),
            info: info(1)
        })
    );
    // The earlier run's leases expire meanwhile: nothing is reported of them.
    let ttl_s = master.lease_ttl_s() as u64;
    assert_eq!(
        next_within(&mut watch, Duration::from_secs(ttl_s + 2)).await,
        None
    );
    assert_eq!(other.members().await.unwrap(), vec![(NodeId(0), info(0))]);
    assert_eq!(master.clear_members().await.unwrap(), 1, "this run's node");
}
