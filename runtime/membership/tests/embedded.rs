//! The embedded backend under tokio's paused clock: a node that stops heartbeating is
//! reported dead within the lease timeout (the tick at its deadline), a live node never is,
//! a leave is `Left`, and a node declared dead learns it lost its lease.

use harp_membership::{
    EmbeddedMembership, MemberInfo, MembershipBackend, MembershipBackendError, MembershipConfig,
    MembershipEvent, NodeId, NodeRoles,
};
use std::time::Duration;

fn info(n: u32) -> MemberInfo {
    MemberInfo::new(format!("127.0.0.1:{}", 7000 + n), NodeRoles::BOTH)
}

/// Waits (on the paused clock) for the next event, at most `within`.
async fn next_within(
    watch: &mut harp_membership::MembershipWatch,
    within: Duration,
) -> Option<MembershipEvent> {
    tokio::time::timeout(within, watch.next())
        .await
        .ok()
        .map(|e| e.expect("watch ended"))
}

#[tokio::test(start_paused = true)]
async fn silent_node_reported_within_lease_live_node_never() {
    let config = MembershipConfig::default();
    let timeout_ms = config.lease_timeout_ms;
    let m = EmbeddedMembership::start(config).unwrap();
    let a = m.register(NodeId(1), info(1)).await.unwrap();
    let b = m.register(NodeId(2), info(2)).await.unwrap();
    let mut watch = m.watch().await.unwrap();
    for n in [1, 2] {
        let ev = next_within(&mut watch, Duration::from_millis(1))
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

    // Let both run for a while: nobody dies.
    assert_eq!(next_within(&mut watch, Duration::from_secs(20)).await, None);

    // Node 1 is killed: its renewals stop.
    let killed_at_ms = m.now_ms();
    a.abandon();
    let ev = next_within(&mut watch, Duration::from_millis(timeout_ms + 1000))
        .await
        .unwrap();
    let MembershipEvent::Died {
        node,
        info: died_info,
        last_seen_ms,
        detected_at_ms,
    } = ev
    else {
        panic!("expected a death, got {ev:?}");
    };
    assert_eq!((node, died_info), (NodeId(1), info(1)));
    assert!(last_seen_ms <= killed_at_ms);
    assert_eq!(
        detected_at_ms,
        last_seen_ms + timeout_ms,
        "detected by the tick at the deadline"
    );
    assert!(detected_at_ms - killed_at_ms <= timeout_ms);
    println!("embedded: killed at {killed_at_ms} ms, reported dead at {detected_at_ms} ms");

    // Node 2 keeps heartbeating: never reported, for a long time.
    assert_eq!(next_within(&mut watch, Duration::from_secs(60)).await, None);
    assert_eq!(m.members().await.unwrap(), vec![(NodeId(2), info(2))]);
    drop(b);
}

#[tokio::test(start_paused = true)]
async fn graceful_leave_is_left_not_died() {
    let m = EmbeddedMembership::start(MembershipConfig::with_lease_timeout_ms(500)).unwrap();
    let mut watch = m.watch().await.unwrap();
    let a = m.register(NodeId(7), info(7)).await.unwrap();
    assert!(matches!(
        watch.next().await.unwrap(),
        MembershipEvent::Joined { .. }
    ));
    tokio::time::sleep(Duration::from_millis(1234)).await;
    a.leave().await.unwrap();
    assert_eq!(
        watch.next().await.unwrap(),
        MembershipEvent::Left {
            node: NodeId(7),
            info: info(7)
        }
    );
    assert_eq!(next_within(&mut watch, Duration::from_secs(10)).await, None);
    assert!(m.members().await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn master_revoke_is_left_and_the_node_learns_it() {
    let m = EmbeddedMembership::start(MembershipConfig::with_lease_timeout_ms(900)).unwrap();
    let mut a = m.register(NodeId(3), info(3)).await.unwrap();
    let mut watch = m.watch().await.unwrap();
    assert!(matches!(
        watch.next().await.unwrap(),
        MembershipEvent::Joined { .. }
    ));
    m.revoke(NodeId(3)).await.unwrap();
    assert!(matches!(
        watch.next().await.unwrap(),
        MembershipEvent::Left { .. }
    ));
    // Its next heartbeat is refused: the handle reports the lost lease.
    let reason = tokio::time::timeout(Duration::from_secs(2), a.lost())
        .await
        .unwrap();
    assert_eq!(reason, MembershipBackendError::LeaseLost(NodeId(3)));
    assert_eq!(
        a.lost_reason(),
        Some(MembershipBackendError::LeaseLost(NodeId(3)))
    );
}

#[tokio::test(start_paused = true)]
async fn typed_errors_and_late_heartbeat() {
    let config = MembershipConfig {
        members_max: 2,
        ..MembershipConfig::with_lease_timeout_ms(1000)
    };
    let m = EmbeddedMembership::start(config).unwrap();
    let _a = m.register(NodeId(1), info(1)).await.unwrap();
    let err = m.register(NodeId(1), info(1)).await.unwrap_err();
    assert_eq!(err.to_string(), "node-1 is already a member");
    m.join(NodeId(2), info(2)).await.unwrap();
    let err = m.register(NodeId(3), info(3)).await.unwrap_err();
    assert_eq!(err.to_string(), "job is full: 2 members");
    // Node 2 joined by hand and never heartbeats: after the deadline its heartbeat is
    // refused instead of reviving it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let err = m.heartbeat(NodeId(2)).await.unwrap_err();
    assert!(matches!(err, MembershipBackendError::Rejected(_)), "{err}");
    let err = EmbeddedMembership::start(MembershipConfig::with_lease_timeout_ms(0))
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "lease timeout must be above 0 ms");
}

#[tokio::test(start_paused = true)]
async fn many_nodes_random_kills() {
    // 20 nodes; every third one is killed at a different time; exactly those die, once each.
    let config = MembershipConfig::with_lease_timeout_ms(600);
    let m = EmbeddedMembership::start(config).unwrap();
    let mut watch = m.watch().await.unwrap();
    let mut handles = Vec::new();
    for n in 0..20 {
        handles.push(Some(m.register(NodeId(n), info(n)).await.unwrap()));
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    let mut killed = Vec::new();
    for n in (0..20).step_by(3) {
        tokio::time::sleep(Duration::from_millis(111)).await;
        handles[n].take();
        killed.push((NodeId(n as u32), m.now_ms()));
    }
    let mut died = Vec::new();
    while let Some(ev) = next_within(&mut watch, Duration::from_secs(30)).await {
        if let MembershipEvent::Died {
            node,
            detected_at_ms,
            ..
        } = ev
        {
            died.push((node, detected_at_ms));
        }
    }
    assert_eq!(died.len(), killed.len());
    // Deaths come in deadline order, which need not be kill order: compare by node.
    died.sort();
    for ((node, killed_at), (dead, at)) in killed.iter().zip(&died) {
        assert_eq!(node, dead);
        assert!(
            at - killed_at <= 600,
            "{node} reported {} ms after its kill",
            at - killed_at
        );
    }
    assert_eq!(m.members().await.unwrap().len(), 20 - killed.len());
}

/// The same on the real clock, with a short lease: a smoke test of the driver loop's timer.
#[tokio::test]
async fn real_clock_detection() {
    let m = EmbeddedMembership::start(MembershipConfig::with_lease_timeout_ms(300)).unwrap();
    let a = m.register(NodeId(1), info(1)).await.unwrap();
    let _b = m.register(NodeId(2), info(2)).await.unwrap();
    let mut watch = m.watch().await.unwrap();
    watch.next().await.unwrap();
    watch.next().await.unwrap();
    let start = std::time::Instant::now();
    drop(a);
    let ev = tokio::time::timeout(Duration::from_secs(3), watch.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            ev,
            MembershipEvent::Died {
                node: NodeId(1),
                ..
            }
        ),
        "{ev:?}"
    );
    println!(
        "embedded (real clock, lease 300 ms): reported dead after {:?}",
        start.elapsed()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(900), watch.next())
            .await
            .is_err()
    );
}
