//! A server's counters ([`stats`]) in real servers: what it read, applied, refused and sent
//! on to a shard's new owner, the shards it handed off or had restored, the keys of a part
//! sent again that it skipped, and a dead worker node's staged parts it dropped.

use super::forwarded_parts_tests::{apply_part, hand_off, in_shard, ones, part_9, servers, tables};
use super::restore_tests::take_over;
use super::*;

async fn stats_of(server: &ActorRef<ServerMsg>) -> ServerStats {
    let (reply, stats) = oneshot::channel();
    server.send_message(ServerMsg::Stats { reply }).unwrap();
    stats.await.unwrap()
}

async fn read(server: &ActorRef<ServerMsg>, keys: Vec<ParamKey>) {
    let (reply, rows) = oneshot::channel();
    let n = keys.len();
    server.send_message(ServerMsg::Get { keys, reply }).unwrap();
    assert_eq!(rows.await.unwrap().unwrap().len(), n);
}

/// Server 0 serves two shards, refuses a bad delta, gives shard 0 to server 1 and then
/// sends that shard's read and delta on; the part sent again to server 1 is skipped there.
#[tokio::test]
async fn a_servers_counters_say_what_it_read_applied_refused_forwarded_and_skipped() {
    let (tables, table) = tables();
    let [s0, s1] = &servers(&tables).await;
    let (moved, stays) = (in_shard(table, 0), in_shard(table, 1));
    apply_part(s0, vec![(moved, ones()), (stays, ones())], part_9()).await;
    let (reply, refused) = oneshot::channel();
    let too_short = RowData::F32(vec![1.0]);
    s0.send_message(ServerMsg::Apply {
        updates: vec![(stays, too_short)],
        part: None,
        reply,
    })
    .unwrap();
    assert!(refused.await.unwrap().is_err());
    read(s0, vec![moved, stays]).await;
    hand_off(s0, 0, (1, s1)).await;

    let part_10 = PartTag {
        id: PartId { node: 4, seq: 10 },
        ..part_9()
    };
    apply_part(s0, vec![(moved, ones()), (stays, ones())], part_10).await;
    read(s0, vec![moved, stays]).await;
    // Sent again to the shard's new owner (its node never heard the answer).
    apply_part(s1, vec![(moved, ones())], part_10).await;

    assert_eq!(
        stats_of(s0).await,
        ServerStats {
            rows_read: 3,
            updates_applied: 3,
            updates_refused: 1,
            reads_forwarded: 1,
            updates_forwarded: 1,
            shards_handed_off: 1,
            ..ServerStats::default()
        }
    );
    assert_eq!(
        stats_of(s1).await,
        ServerStats {
            rows_read: 1,
            updates_applied: 1,
            resent_updates_skipped: 1,
            ..ServerStats::default()
        }
    );
}

/// A shard re-created from the image in two messages counts as one restore; a dead worker
/// node's staged parts are counted as they are dropped, and a committed part is applied
/// (and counted) once however often it is committed.
#[tokio::test]
async fn restores_and_staged_parts_are_counted_once() {
    let (tables, table) = tables();
    let [server] = &servers(&tables).await;
    let (first, second) = (
        in_shard(table, 0),
        ParamKey::new(table, in_shard(table, 0).row + 2),
    );
    let image =
        |key: ParamKey| ShardRows::restored(&tables, vec![(key, Arc::new(ones()))]).unwrap();
    let restore = Restore {
        generation: 1,
        num_shards: 2,
    };
    take_over(server, 0, image(first), Some(restore)).await;
    take_over(server, 0, image(second), Some(restore)).await;

    let stage = |node: u32, flush: u64| {
        let (reply, staged) = oneshot::channel();
        server
            .send_message(ServerMsg::Stage {
                node,
                flush,
                updates: vec![(first, ones())],
                reply,
            })
            .unwrap();
        staged
    };
    stage(1, 0).await.unwrap().unwrap();
    stage(2, 0).await.unwrap().unwrap();
    stage(2, 1).await.unwrap().unwrap();
    for _ in 0..2 {
        let (reply, committed) = oneshot::channel();
        server
            .send_message(ServerMsg::Commit {
                node: 1,
                flush: 0,
                reply,
            })
            .unwrap();
        committed.await.unwrap().unwrap();
    }
    server
        .send_message(ServerMsg::DropStaged { node: 2 })
        .unwrap();

    let stats = stats_of(server).await;
    assert_eq!(stats.shards_restored, 1);
    assert_eq!(stats.updates_applied, 1, "the committed part, once");
    assert_eq!(stats.staged_parts_dropped, 2);
}
