//! The master forgetting a node that left the job (`MasterMsg::ForgetNode`): its server is
//! no longer one of the job's (a checkpoint round or a recovery does not count on it) and
//! stops, nothing is routed to its process any more, the other node processes are told to
//! close their links to it (`Message::ServerLeft`), and a server that still holds shards
//! stays listed. Also: the saves a round tells the nodes about go in parts of keys.

use super::test_master::{crash, real_servers, start_master, JobEnd, Running};
use super::{MasterMsg, RouteTarget, ScaleReport};
use crate::error::HarpError;
use crate::server::checkpoint_round::ServerSave;
use crate::server::{AppliedPart, PartId, ServerMsg};
use crate::test_support::link_pair;
use harp_core::{ParamKey, ServerId, TableId, WorkerId};
use harp_net::Incoming;
use harp_wire::Message;
use ractor::{ActorRef, ActorStatus};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A running master with `n` real servers of one shard each (shard `i` on server `i`),
/// routing to `routes`; the servers too.
async fn master_with_servers(
    n: u32,
    routes: Vec<RouteTarget>,
) -> (
    ActorRef<MasterMsg<Running>>,
    JobEnd,
    Vec<ActorRef<ServerMsg>>,
) {
    let servers = real_servers(n).await;
    let actors = servers.values().cloned().collect();
    let (master, end) = start_master(servers, routes).await;
    (master, end, actors)
}

/// A scale event that leaves the load on `servers` (and the one worker).
async fn rebalance_onto(
    master: &ActorRef<MasterMsg<Running>>,
    servers: &[u32],
) -> Result<ScaleReport, HarpError> {
    let (reply, answer) = oneshot::channel();
    master
        .send_message(MasterMsg::Rebalance {
            live_workers: vec![WorkerId(0)],
            live_servers: servers.iter().copied().map(ServerId).collect(),
            reply,
        })
        .unwrap();
    answer.await.expect("the master answers")
}

/// The next `Reroute` that reaches `incoming` within a few seconds, if any.
async fn next_reroute(incoming: &mut mpsc::UnboundedReceiver<Incoming>) -> Option<(u32, u32)> {
    let wait = Duration::from_secs(5);
    while let Ok(Some(message)) = tokio::time::timeout(wait, incoming.recv()).await {
        if let Ok(Message::Reroute { shard, server }) = message {
            return Some((shard, server));
        }
    }
    None
}

/// The server of the next `ServerLeft` that reaches `incoming` within `wait`, if any.
async fn next_server_left(
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    wait: Duration,
) -> Option<u32> {
    while let Ok(Some(message)) = tokio::time::timeout(wait, incoming.recv()).await {
        if let Ok(Message::ServerLeft { server }) = message {
            return Some(server);
        }
    }
    None
}

#[tokio::test]
async fn a_node_that_left_is_forgotten_and_one_that_still_holds_shards_is_not() {
    let mut node_1 = link_pair().await;
    let mut node_2 = link_pair().await;
    let routes = vec![
        RouteTarget::Remote {
            node: 1,
            link: node_1.dialer.0.clone(),
        },
        RouteTarget::Remote {
            node: 2,
            link: node_2.dialer.0.clone(),
        },
    ];
    let (master, mut end, servers) = master_with_servers(3, routes).await;

    // Node 1 leaves: its shard moves away and both nodes hear of it.
    let report = rebalance_onto(&master, &[0, 2]).await.expect("scaled in");
    assert_eq!(report.shards_moved, 1);
    assert_eq!(next_reroute(&mut node_1.acceptor.1).await, Some((1, 0)));
    assert_eq!(next_reroute(&mut node_2.acceptor.1).await, Some((1, 0)));
    master.send_message(MasterMsg::ForgetNode(1)).unwrap();

    // Node 2 is told to close its link to server 1; node 1, which left, is told nothing.
    let long = Duration::from_secs(5);
    let quiet = Duration::from_millis(300);
    assert_eq!(
        next_server_left(&mut node_2.acceptor.1, long).await,
        Some(1)
    );
    assert_eq!(next_server_left(&mut node_1.acceptor.1, quiet).await, None);

    // Its server is no longer the job's, and it stops.
    match crash(&master, 1).await {
        Err(HarpError::Unrecoverable { reason, .. }) => {
            assert!(
                reason.contains("not one of the job's live servers"),
                "{reason}"
            )
        }
        other => panic!("server 1 is still the job's: {other:?}"),
    }
    let stopped = async {
        while servers[1].get_status() != ActorStatus::Stopped {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), stopped)
        .await
        .expect("the forgotten server stops");

    // Nothing is routed to node 1 any more: the next move reaches node 2 only.
    let report = rebalance_onto(&master, &[0]).await.expect("scaled in");
    assert_eq!(report.shards_moved, 1);
    assert_eq!(next_reroute(&mut node_2.acceptor.1).await, Some((2, 0)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        node_1.acceptor.1.try_recv().is_err(),
        "a node that left was still told a reroute"
    );

    // A server that still holds shards stays listed when its node is forgotten, and no node
    // is told it left.
    master.send_message(MasterMsg::ForgetNode(0)).unwrap();
    assert_eq!(next_server_left(&mut node_2.acceptor.1, quiet).await, None);
    match crash(&master, 0).await {
        Err(HarpError::Unrecoverable { reason, .. }) => assert!(
            reason.contains("no other server that takes load"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(servers[0].get_status(), ActorStatus::Running);
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// A round's saves reach a node process in parts of keys, so that no save is too large for
/// one message (600 000 keys were about 9.6 MB of keys in one message, and a save of more
/// than about 4 million was refused by the link, silently). The flush parts the save lists
/// as applied go once, before the keys, and only the node's own.
#[tokio::test]
async fn the_saves_a_node_is_told_of_go_in_parts_of_keys() {
    let mut pair = link_pair().await;
    let route = RouteTarget::Remote {
        node: 1,
        link: pair.dialer.0.clone(),
    };
    let keys: Vec<ParamKey> = (0..600_000).map(|r| ParamKey::new(TableId(2), r)).collect();
    let part = |node, seq| AppliedPart {
        part: PartId { node, seq },
        epoch: 6,
    };
    let applied = vec![part(1, 40), part(2, 40), part(1, 41)];
    let save = ServerSave {
        server: ServerId(3),
        epoch: 7,
        keys: keys.clone(),
        applied,
    };
    route.tell_save(&super::SaveTold::new(&save));
    let mut told = Vec::new();
    let mut sizes = Vec::new();
    let mut applied_told = Vec::new();
    while told.len() < keys.len() || applied_told.is_empty() {
        let wait = tokio::time::timeout(Duration::from_secs(10), pair.acceptor.1.recv());
        match wait.await.expect("every part arrives") {
            Some(Ok(Message::RowsSaved {
                server: 3,
                epoch: 7,
                keys: part,
                applied,
            })) => {
                applied_told.push(applied.iter().map(|p| p.seq).collect::<Vec<_>>());
                assert!(applied.iter().all(|p| p.node == 1), "{applied:?}");
                sizes.push(part.len());
                told.extend(part.into_iter().map(ParamKey::from));
            }
            // The dialler's hello.
            Some(Ok(Message::Heartbeat { .. })) => {}
            other => panic!("not a save of server 3 at epoch 7: {other:?}"),
        }
    }
    let per_part = harp_wire::KEYS_PER_PART;
    assert_eq!(sizes, [0, per_part, per_part, keys.len() - 2 * per_part]);
    assert_eq!(told, keys);
    let none = Vec::new();
    assert_eq!(
        applied_told,
        [vec![40, 41], none.clone(), none.clone(), none]
    );
}

/// A node that left while its worker still hosted an executor (a leave moves them away
/// first, so only a bug gets here) is not forgotten with that executor's tasks waiting for
/// good: without worker recovery the job ends, naming the node.
#[tokio::test]
async fn a_node_that_left_still_hosting_executors_ends_a_job_without_worker_recovery() {
    let (master, end, _servers) = master_with_servers(1, Vec::new()).await;
    // Worker 0 hosts executor 0; node 0 holds that worker.
    master.send_message(MasterMsg::NodeLeft(0)).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), end)
        .await
        .expect("the job ends")
        .expect("the master answers");
    match ended {
        Err(HarpError::NodeDied { node, detail }) => {
            assert_eq!(node, 0);
            assert!(detail.contains("still hosted executors"), "{detail}");
        }
        other => panic!("the job went on, or ended otherwise: {:?}", other.err()),
    }
    master.stop(None);
}
