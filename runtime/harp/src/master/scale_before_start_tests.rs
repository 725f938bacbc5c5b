//! A scale-out that reaches the master before the job's `Start` (in one process the
//! control serves commands from the moment the job is spawned): the servers and workers it
//! added are kept by the `Start`, and its re-balancing, which waited for the `Start`, moves
//! load onto them. Before, the `Start` replaced the master's servers and workers with the
//! job's own, and the re-balancing failed with "unknown server-N".

use super::test_master::{real_servers, spawn_master, start};
use super::MasterMsg;
use harp_core::{ServerId, ShardMap, WorkerId};
use std::collections::BTreeMap;
use tokio::sync::oneshot;

#[tokio::test]
async fn a_server_added_before_the_start_is_kept_and_given_shards() {
    let mut servers = real_servers(3).await;
    let added = servers.remove(&ServerId(2)).unwrap();
    let (master, mut end) = spawn_master(2).await;
    master
        .send_message(MasterMsg::AddServer(ServerId(2), added))
        .unwrap();
    let (reply, scaled) = oneshot::channel();
    master
        .send_message(MasterMsg::Rebalance {
            live_workers: vec![WorkerId(0)],
            live_servers: vec![ServerId(0), ServerId(1), ServerId(2)],
            reply,
        })
        .unwrap();
    let shards = ShardMap::round_robin(6, &[ServerId(0), ServerId(1)]).unwrap();
    start(&master, servers, Vec::new(), shards).await;
    let report = scaled
        .await
        .expect("the master answers")
        .expect("the scale event succeeds");
    let to_the_added: BTreeMap<u32, u32> = report
        .moves
        .iter()
        .filter(|m| m.kind == "shard" && m.to == 2)
        .map(|m| (m.item, m.from))
        .collect();
    assert_eq!(to_the_added.len(), 2, "{report:?}");
    assert_eq!(report.shards_moved, 2, "{report:?}");
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}
