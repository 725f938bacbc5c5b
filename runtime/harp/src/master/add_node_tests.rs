//! The master taking in a node process that joins the running job (`MasterMsg::AddNode`):
//! the joiner gets its assignment and a placement naming its own server at once, and the
//! other nodes learn of that server only when it is added (`MasterMsg::AddServer`, sent once
//! the joiner is ready). A joiner that never gets ready is never announced, so no node dials
//! a server that is not there (each such dial held the node's loop for its connect
//! deadline).

use super::test_master::{real_servers, start_master, Running};
use super::{MasterMsg, RouteTarget};
use crate::test_support::link_pair;
use harp_core::ServerId;
use harp_net::{Incoming, Link};
use harp_wire::{Assignment, Message, Placement, ServerPlace};
use ractor::ActorRef;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

fn place(node: u32) -> ServerPlace {
    ServerPlace {
        server: node,
        node_id: node,
        listen_addr: format!("127.0.0.1:{}", 40_000 + node),
    }
}

/// Asks the master to take in node `node` (a worker and a server) on `link`.
async fn add_node(master: &ActorRef<MasterMsg<Running>>, node: u32, link: Link) {
    let (reply, answer) = oneshot::channel();
    master
        .send_message(MasterMsg::AddNode {
            node,
            link,
            assignment: Assignment {
                worker: Some(node),
                server: Some(node),
                ..Assignment::default()
            },
            server: Some(place(node)),
            reply,
        })
        .unwrap();
    answer.await.unwrap().expect("the master takes the node in");
}

/// The servers named by the next placement on `incoming` within `wait`, if one comes.
async fn next_placement(
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    wait: Duration,
) -> Option<Vec<u32>> {
    while let Ok(Some(message)) = tokio::time::timeout(wait, incoming.recv()).await {
        if let Ok(Message::Placement(Placement { servers, .. })) = message {
            return Some(servers.iter().map(|p| p.server).collect());
        }
    }
    None
}

#[tokio::test]
async fn a_joining_server_is_announced_to_the_other_nodes_only_once_it_is_added() {
    let mut old_node = link_pair().await;
    let routes = vec![RouteTarget::Remote {
        node: 1,
        link: old_node.dialer.0.clone(),
    }];
    let servers = real_servers(2).await;
    let (master, _end) = start_master(servers, routes).await;
    let quiet = Duration::from_millis(300);
    let long = Duration::from_secs(5);

    // Node 5 joins: it knows its own server at once; node 1 hears nothing yet.
    let mut joiner = link_pair().await;
    add_node(&master, 5, joiner.dialer.0.clone()).await;
    assert_eq!(
        next_placement(&mut joiner.acceptor.1, long).await,
        Some(vec![5])
    );
    assert_eq!(
        next_placement(&mut old_node.acceptor.1, quiet).await,
        None,
        "a server that is not ready was announced"
    );

    // Node 6 joins and never gets ready: it is forgotten, and nobody is told of it.
    let mut failed = link_pair().await;
    add_node(&master, 6, failed.dialer.0.clone()).await;
    assert_eq!(
        next_placement(&mut failed.acceptor.1, long).await,
        Some(vec![6])
    );
    master.send_message(MasterMsg::ForgetNode(6)).unwrap();

    // Node 5 is ready: node 1 learns of its server, node 5 is not told again.
    let (_, server_5) = real_servers(1).await.pop_first().unwrap();
    master
        .send_message(MasterMsg::AddServer(ServerId(5), server_5))
        .unwrap();
    assert_eq!(
        next_placement(&mut old_node.acceptor.1, long).await,
        Some(vec![5])
    );
    assert_eq!(next_placement(&mut joiner.acceptor.1, quiet).await, None);

    // A later joiner gets the ready servers and its own, not the one that failed.
    let mut later = link_pair().await;
    add_node(&master, 7, later.dialer.0.clone()).await;
    assert_eq!(
        next_placement(&mut later.acceptor.1, long).await,
        Some(vec![5, 7])
    );
    assert_eq!(next_placement(&mut old_node.acceptor.1, quiet).await, None);
    assert_eq!(next_placement(&mut joiner.acceptor.1, quiet).await, None);
    master.stop(None);
}
