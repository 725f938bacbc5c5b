//! A recovery's take-over ([`Restore`]) makes its shard exactly the restored rows: the
//! first part of a recovery drops the rows of that shard a failed server's hand-off left on
//! the new owner, a later part of the same recovery keeps what the first brought, and a
//! take-over of a move drops nothing.

use super::checkpoint_round::tests::{apply, dump, spawn_servers};
use super::*;
use crate::table::{Init, UpdateRule};

pub(super) async fn take_over(
    server: &ActorRef<ServerMsg>,
    shard: u32,
    rows: ShardRows,
    restore: Option<Restore>,
) {
    let (ack, acked) = oneshot::channel();
    server
        .send_message(ServerMsg::TakeOver {
            shard: ShardId(shard),
            rows,
            ack,
            in_order: false,
            restore,
        })
        .unwrap();
    acked.await.unwrap();
}

#[tokio::test]
async fn a_restore_drops_what_a_failed_hand_off_left_and_keeps_its_own_parts() {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let tables = Arc::new(tables);
    let server = spawn_servers(1, &tables).await.remove(0).1;
    let in_shard = |shard: u32, nth: usize| {
        (0..)
            .map(|row| ParamKey::new(table.id(), row))
            .filter(|k| shard_of(*k, 2) == ShardId(shard))
            .nth(nth)
            .unwrap()
    };
    let (left, restored, later, other) = (
        in_shard(0, 0),
        in_shard(0, 1),
        in_shard(0, 2),
        in_shard(1, 0),
    );
    let f32s = |v: f32| RowData::F32(vec![v, v]);
    // What a hand-off brought before its sender died, and a row of another shard.
    apply(&server, vec![(left, f32s(1.0)), (other, f32s(2.0))]).await;
    let saved = |key: ParamKey, v: f32| {
        ShardRows::restored(&tables, vec![(key, Arc::new(f32s(v)))]).unwrap()
    };
    let first = Restore {
        generation: 1,
        num_shards: 2,
    };
    take_over(&server, 0, saved(restored, 5.0), Some(first)).await;
    assert_eq!(
        dump(&server).await,
        sorted(vec![(restored, f32s(5.0)), (other, f32s(2.0))]),
        "the left-over row is gone, the other shard untouched"
    );
    // A second part of the same recovery adds to the first.
    take_over(&server, 0, saved(later, 7.0), Some(first)).await;
    assert_eq!(
        dump(&server).await,
        sorted(vec![
            (restored, f32s(5.0)),
            (later, f32s(7.0)),
            (other, f32s(2.0))
        ])
    );
    // A move's take-over drops nothing; a later recovery starts the shard afresh again.
    take_over(&server, 0, saved(left, 3.0), None).await;
    assert_eq!(dump(&server).await.len(), 4);
    let second = Restore {
        generation: 2,
        ..first
    };
    take_over(&server, 0, saved(later, 9.0), Some(second)).await;
    assert_eq!(
        dump(&server).await,
        sorted(vec![(later, f32s(9.0)), (other, f32s(2.0))])
    );
}

fn sorted(mut rows: Vec<(ParamKey, RowData)>) -> Vec<(ParamKey, RowData)> {
    rows.sort_unstable_by_key(|(k, _)| *k);
    rows
}
