//! A forwarded part's record ([`forwarded_parts`]) at work in real servers: a part sent
//! again skips the keys its shard applied already, wherever the shard moved since, whether
//! the part came forwarded or straight to the old owner ([`direct_parts`]); a shard
//! re-created from the running checkpoint forgets them; the record survives the wire.

use super::checkpoint_round::tests::{dump, spawn_servers};
use super::restore_tests::take_over;
use super::*;
use crate::table::{Init, UpdateRule};

pub(super) fn tables() -> (Arc<TableSet>, harp_core::TableId) {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    (Arc::new(tables), table.id())
}

/// The first key of `table` in `shard` of 2.
pub(super) fn in_shard(table: harp_core::TableId, shard: u32) -> ParamKey {
    (0..)
        .map(|row| ParamKey::new(table, row))
        .find(|k| shard_of(*k, 2) == ShardId(shard))
        .unwrap()
}

pub(super) fn ones() -> RowData {
    RowData::F32(vec![1.0, 1.0])
}

/// Part 9 of node 4, as the node sends it (first or again).
pub(super) fn part_9() -> PartTag {
    PartTag {
        id: PartId { node: 4, seq: 9 },
        held_from: 9,
        forwarded: false,
    }
}

pub(super) async fn apply_part(
    server: &ActorRef<ServerMsg>,
    updates: Vec<(ParamKey, RowData)>,
    tag: PartTag,
) -> AppliedAt {
    let (reply, answer) = oneshot::channel();
    let part = Some(tag);
    server
        .send_message(ServerMsg::Apply {
            updates,
            part,
            reply,
        })
        .unwrap();
    answer.await.unwrap().unwrap()
}

/// Hands shard `shard` of 2 from `from` to `to`.
pub(super) async fn hand_off(
    from: &ActorRef<ServerMsg>,
    shard: u32,
    to: (u32, &ActorRef<ServerMsg>),
) {
    crate::test_support::hand_off(from, (shard, 2), to).await;
}

/// `N` servers, numbered from 0.
pub(super) async fn servers<const N: usize>(tables: &Arc<TableSet>) -> [ActorRef<ServerMsg>; N] {
    let spawned = spawn_servers(N as u32, tables).await;
    let actors: Vec<ActorRef<ServerMsg>> = spawned.into_iter().map(|(_, s)| s).collect();
    actors
        .try_into()
        .unwrap_or_else(|_| unreachable!("spawn_servers makes N"))
}

/// Two servers; server 0 gave shard 0 to server 1 and then got part 9 with a key of it,
/// which it forwarded there (applied there once): the servers and that key.
async fn part_9_forwarded_to_server_1(
    tables: &Arc<TableSet>,
    table: harp_core::TableId,
) -> ([ActorRef<ServerMsg>; 2], ParamKey) {
    let [s0, s1] = servers(tables).await;
    let key = in_shard(table, 0);
    hand_off(&s0, 0, (1, &s1)).await;
    apply_part(&s0, vec![(key, ones())], part_9()).await;
    assert_eq!(row(&s1, key).await, Some(ones()));
    ([s0, s1], key)
}

/// Part 9 sent again to `server` with `key`, applied there once already: skipped (answered
/// without an epoch), the row unchanged.
async fn sent_again_is_skipped(server: &ActorRef<ServerMsg>, key: ParamKey) {
    assert_eq!(
        apply_part(server, vec![(key, ones())], part_9()).await,
        None
    );
    assert_eq!(row(server, key).await, Some(ones()), "applied once");
}

async fn row(server: &ActorRef<ServerMsg>, key: ParamKey) -> Option<RowData> {
    dump(server)
        .await
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Server 0 gave shard 0 to server 1 and forwards a part's key of it there; server 1 hands
/// the shard on to server 2. The part sent again to server 2 (its node never heard the
/// answer) is not applied again there, and the answer carries no epoch (some keys were
/// applied earlier); a key of the part not applied yet still is.
#[tokio::test]
async fn a_part_sent_again_skips_the_keys_its_shard_applied_wherever_the_shard_moved() {
    let (tables, table) = tables();
    let [s0, s1, s2] = &servers(&tables).await;
    let (moved, stays) = (in_shard(table, 0), in_shard(table, 1));
    hand_off(s0, 0, (1, s1)).await;
    let first = vec![(moved, ones()), (stays, ones())];
    // Partly forwarded: answered without an epoch.
    assert_eq!(apply_part(s0, first, part_9()).await, None);
    assert_eq!(row(s1, moved).await, Some(ones()));
    hand_off(s1, 0, (2, s2)).await;
    // Sent again with a key the first send's servers never applied (say, one of a shard
    // of the dead server re-created from the checkpoint).
    let fresh = ParamKey::new(table, moved.row + 2);
    let again = vec![(moved, ones()), (fresh, ones())];
    assert_eq!(apply_part(s2, again, part_9()).await, None);
    assert_eq!(row(s2, moved).await, Some(ones()), "applied once");
    assert_eq!(row(s2, fresh).await, Some(ones()));
    // Another part of the same node is applied whole, with its epoch.
    let next = PartTag {
        id: PartId { node: 4, seq: 10 },
        ..part_9()
    };
    assert_eq!(apply_part(s2, vec![(moved, ones())], next).await, Some(0));
    assert_eq!(row(s2, moved).await, Some(RowData::F32(vec![2.0, 2.0])));
}

/// A part forwarded along a chain of moves (0 gave shard 0 to 1, 1 gave it on to 2, the
/// node still sends to 0) is applied and remembered where the shard is, and a key of
/// another shard is applied by the first server itself. Sent again to the shard's owner,
/// the shard's key is skipped.
#[tokio::test]
async fn a_part_forwarded_along_a_chain_is_remembered_where_it_was_applied() {
    let (tables, table) = tables();
    let [s0, s1, s2] = &servers(&tables).await;
    let (moved, stays) = (in_shard(table, 0), in_shard(table, 1));
    hand_off(s0, 0, (1, s1)).await;
    hand_off(s1, 0, (2, s2)).await;
    let part = vec![(moved, ones()), (stays, ones())];
    assert_eq!(apply_part(s0, part, part_9()).await, None);
    assert_eq!(row(s2, moved).await, Some(ones()));
    assert_eq!(row(s0, stays).await, Some(ones()));
    // Sent again: to 2 for the moved shard (skipped), to 0 for the other (not forwarded
    // there, so not remembered: a server that applied a part itself and lives answered it).
    sent_again_is_skipped(s2, moved).await;
    assert_eq!(
        apply_part(s0, vec![(stays, ones())], part_9()).await,
        Some(0)
    );
    assert_eq!(row(s0, stays).await, Some(RowData::F32(vec![2.0, 2.0])));
}

/// Server 0 applied part 9 itself, straight from its node, then gave the part's shard to
/// server 1, which gave it on to server 2; the answer never reached the node. Sent again
/// to the shard's owner, the part's key of it is skipped there: the hand-offs carried it.
/// Server 0 keeps the key of the shard it still holds.
#[tokio::test]
async fn a_part_the_old_owner_applied_itself_is_skipped_where_its_shard_went() {
    let (tables, table) = tables();
    let [s0, s1, s2] = &servers(&tables).await;
    let (moved, stays) = (in_shard(table, 0), in_shard(table, 1));
    let part = vec![(moved, ones()), (stays, ones())];
    assert_eq!(apply_part(s0, part, part_9()).await, Some(0));
    hand_off(s0, 0, (1, s1)).await;
    hand_off(s1, 0, (2, s2)).await;
    sent_again_is_skipped(s2, moved).await;
    // Shard 1 moves too: its key of the part goes along.
    hand_off(s0, 1, (1, s1)).await;
    sent_again_is_skipped(s1, stays).await;
}

/// A shard re-created from the image where a part was applied lost what the part did to
/// it: handed off later, it says nothing of the part, which sent again is applied.
#[tokio::test]
async fn a_shard_restored_where_a_part_was_applied_does_not_carry_the_part() {
    let (tables, table) = tables();
    let [s0, s1] = &servers(&tables).await;
    let key = in_shard(table, 0);
    apply_part(s0, vec![(key, ones())], part_9()).await;
    let image = ShardRows::restored(&tables, Vec::new()).unwrap();
    let restore = Restore {
        generation: 1,
        num_shards: 2,
    };
    take_over(s0, 0, image, Some(restore)).await;
    hand_off(s0, 0, (1, s1)).await;
    assert_eq!(apply_part(s1, vec![(key, ones())], part_9()).await, Some(0));
    assert_eq!(row(s1, key).await, Some(ones()));
}

/// A shard re-created from the running checkpoint holds the image's rows, not what was
/// applied before: a part sent again is applied to them whole.
#[tokio::test]
async fn a_shard_restored_from_the_checkpoint_forgets_the_parts_applied_before() {
    let (tables, table) = tables();
    let ([_, s1], key) = part_9_forwarded_to_server_1(&tables, table).await;
    // Recovery re-creates shard 0 on server 1 from an image without the part.
    let image = ShardRows::restored(&tables, Vec::new()).unwrap();
    let restore = Restore {
        generation: 1,
        num_shards: 2,
    };
    take_over(&s1, 0, image, Some(restore)).await;
    assert_eq!(row(&s1, key).await, None);
    apply_part(&s1, vec![(key, ones())], part_9()).await;
    assert_eq!(row(&s1, key).await, Some(ones()));
}

/// A node that holds no part below `held_from` any more has its older records forgotten.
#[tokio::test]
async fn a_part_the_node_no_longer_holds_is_forgotten_by_the_next_one() {
    let (tables, table) = tables();
    let ([_, s1], key) = part_9_forwarded_to_server_1(&tables, table).await;
    let s1 = &s1;
    let send_again = || apply_part(s1, vec![(key, ones())], part_9());
    // Still held by its node (`held_from` 9): skipped.
    send_again().await;
    assert_eq!(row(s1, key).await, Some(ones()));
    // The node's next part says it holds nothing below 10 any more: part 9 is forgotten
    // (the node never sends it again; were it sent, it would be applied).
    let next = PartTag {
        id: PartId { node: 4, seq: 10 },
        held_from: 10,
        forwarded: false,
    };
    apply_part(s1, Vec::new(), next).await;
    send_again().await;
    assert_eq!(row(s1, key).await, Some(RowData::F32(vec![2.0, 2.0])));
}

#[test]
fn a_moved_shards_record_of_parts_round_trips_through_the_wire() {
    let (_, table) = tables();
    let parts = vec![
        (PartId { node: 4, seq: 9 }, vec![ParamKey::new(table, 3)]),
        (
            PartId { node: 1, seq: 0 },
            vec![ParamKey::new(table, 1), ParamKey::new(table, 7)],
        ),
    ];
    let rows = ShardRows::default().with_parts(parts.clone());
    assert_eq!(ShardRows::parts_from_wire(rows.parts_to_wire()), parts);
}
