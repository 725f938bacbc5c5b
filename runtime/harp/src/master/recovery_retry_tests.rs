//! A failed server's shards whose first new owner fails too, during the take-over
//! (`recovery.rs::take_over_again`): they are re-created on another live server, from the
//! image, and the report says where they went; with no other server left the job cannot
//! recover, and the error names every server a take-over failed on. The new owner that fails is a
//! [`DroppingServer`] that drops the rows handed to it unanswered: a server node that died
//! with them.

use crate::error::HarpError;
use crate::master::test_master::{crash, real_servers, start_master};
use crate::test_support::{DroppingServer, Drops};
use harp_core::ServerId;
use ractor::Actor;

#[tokio::test]
async fn a_shard_whose_new_owner_fails_during_the_take_over_goes_to_another_server() {
    // Servers 0 and 2 are real; 1 drops what it is handed. One shard each.
    let mut servers = real_servers(3).await;
    let (dropping, _) = Actor::spawn(None, DroppingServer, Drops::TakeOvers)
        .await
        .unwrap();
    servers.insert(ServerId(1), dropping);
    let (master, _end) = start_master(servers, Vec::new()).await;
    // Server 0's shard goes first to server 1 (a tie with server 2, broken by id), whose
    // take-over fails, then to server 2.
    let report = crash(&master, 0).await.expect("recovered on server 2");
    assert_eq!(report.server, 0);
    assert_eq!(report.shards, vec![(0, 2)], "{report:?}");
    master.stop(None);
}

#[tokio::test]
async fn with_no_other_server_left_the_error_names_every_server_that_failed() {
    let mut servers = real_servers(1).await;
    for id in [1, 2] {
        let (dropping, _) = Actor::spawn(None, DroppingServer, Drops::TakeOvers)
            .await
            .unwrap();
        servers.insert(ServerId(id), dropping);
    }
    let (master, _end) = start_master(servers, Vec::new()).await;
    let err = crash(&master, 0).await.unwrap_err();
    let HarpError::Unrecoverable { server, reason } = err else {
        panic!("{err}");
    };
    assert_eq!(server, ServerId(0));
    assert!(
        reason.contains("failed on server-1, server-2")
            && reason.contains("shard-0 on server-2: server-2 is unreachable"),
        "{reason}"
    );
    assert!(
        reason.contains("no other server that takes load is left"),
        "{reason}"
    );
    master.stop(None);
}
