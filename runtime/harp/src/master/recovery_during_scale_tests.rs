//! The master recovering a failed server while a scale event moves a shard (`recovery.rs`):
//! a shard move between two other servers does not stand in the way, the failed server's
//! shards go only to a server the event keeps, and a server a shard is moving from or to
//! cannot be recovered until the move ends. The move is held in flight for good: its old
//! owner is a [`SilentServer`], which never answers the hand-off.

use super::test_master::{crash, real_servers, start_master, JobEnd, Running};
use super::MasterMsg;
use crate::error::HarpError;
use crate::test_support::SilentServer;
use harp_core::{ServerId, WorkerId};
use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

/// A running master with one worker and three servers of one shard each (shard `i` on
/// server `i`): servers 0 and 1 are real, server 2 never answers.
async fn master_with_three_servers() -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let mut servers = real_servers(2).await;
    let (silent, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    servers.insert(ServerId(2), silent);
    let (master, end) = start_master(servers, Vec::new()).await;
    // Empty server 2: its shard goes to server 0 (a tie with server 1, broken by id), and
    // the hand-off is never answered.
    let (reply, _scaled) = oneshot::channel();
    master
        .send_message(MasterMsg::Rebalance {
            live_workers: vec![WorkerId(0)],
            live_servers: vec![ServerId(0), ServerId(1)],
            reply,
        })
        .unwrap();
    std::mem::forget(_scaled); // the event never ends; its answer is never awaited
    (master, end)
}

#[tokio::test]
async fn a_server_is_recovered_while_a_shard_moves_between_two_others() {
    let (master, mut end) = master_with_three_servers().await;
    let report = crash(&master, 1).await.expect("recovered");
    assert!(end.try_recv().is_err(), "the job goes on");
    // Not to server 2, which the event empties.
    assert_eq!(report.shards, vec![(1, 0)]);
    master.stop(None);
}

#[tokio::test]
async fn a_server_a_shard_moves_from_or_to_is_not_recovered_while_it_moves() {
    let (master, mut end) = master_with_three_servers().await;
    for server in [2, 0] {
        match crash(&master, server).await {
            Err(HarpError::Unrecoverable { reason, .. }) => {
                assert!(reason.contains("moving a shard from or to it"), "{reason}")
            }
            other => panic!("server {server}: {other:?}"),
        }
    }
    // The refusals changed nothing: server 1 is still recovered, onto server 0.
    let report = crash(&master, 1).await.expect("recovered");
    assert_eq!(report.shards, vec![(1, 0)]);
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}
