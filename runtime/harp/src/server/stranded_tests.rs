//! A shard stranded on its way away ([`stranded`](super::stranded)): its new owner never
//! confirmed the rows and died. Its old owner holds every request for it, whichever way it
//! learned of the death, serves them once the shard is re-created there, and applies each
//! update exactly once; other shards keep flowing. So does a shard whose hand-off was
//! confirmed, for a request that reached it late.

use super::checkpoint_round::tests::{apply, distances, dump, spawn_servers};
use super::restore_tests::take_over;
use super::*;
use crate::table::{Init, UpdateRule};
use crate::test_support::{DroppingServer, Drops, SilentServer};
use tokio::sync::oneshot::error::TryRecvError;

/// A server with one width-2 table over 2 shards, and a key of each shard: `(moving, staying)`.
async fn server_with_two_shards() -> (Arc<TableSet>, ActorRef<ServerMsg>, ParamKey, ParamKey) {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let tables = Arc::new(tables);
    let server = spawn_servers(1, &tables).await.remove(0).1;
    let key_of = |shard: u32| {
        (0..)
            .map(|row| ParamKey::new(table.id(), row))
            .find(|k| shard_of(*k, 2) == ShardId(shard))
            .unwrap()
    };
    (tables, server, key_of(0), key_of(1))
}

fn f32s(v: f32) -> RowData {
    RowData::F32(vec![v, v])
}

/// Asks `server` to hand shard 0 (of 2) to `to`, as server 1.
fn hand_off_shard_0(
    server: &ActorRef<ServerMsg>,
    to: &ActorRef<ServerMsg>,
) -> oneshot::Receiver<Result<ShardMoved, HarpError>> {
    let (reply, answer) = oneshot::channel();
    server
        .send_message(ServerMsg::HandOff {
            shard: ShardId(0),
            num_shards: 2,
            to_id: ServerId(1),
            to: to.clone(),
            reply,
        })
        .unwrap();
    answer
}

fn send_apply(
    server: &ActorRef<ServerMsg>,
    updates: Vec<(ParamKey, RowData)>,
) -> oneshot::Receiver<Result<AppliedAt, HarpError>> {
    let (reply, answer) = oneshot::channel();
    server
        .send_message(ServerMsg::Apply {
            updates,
            part: None,
            reply,
        })
        .unwrap();
    answer
}

fn send_get(server: &ActorRef<ServerMsg>, key: ParamKey) -> oneshot::Receiver<GetResult> {
    let (reply, answer) = oneshot::channel();
    server
        .send_message(ServerMsg::Get {
            keys: vec![key],
            reply,
        })
        .unwrap();
    answer
}

type GetResult = Result<Vec<Arc<RowData>>, HarpError>;

/// `answer`, or a failure naming `what` if it does not come within 10 s (a bug would
/// otherwise hang the test).
async fn within<T>(what: &str, answer: oneshot::Receiver<T>) -> T {
    let waited = tokio::time::timeout(std::time::Duration::from_secs(10), answer).await;
    waited
        .unwrap_or_else(|_| panic!("{what}: no answer"))
        .unwrap_or_else(|_| panic!("{what}: dropped"))
}

/// Lets every queued message and spawned task run.
async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

/// Re-creates shard 0 (of 2) on `server` from a saved `(key, value)`, as a recovery does.
async fn re_create_shard_0(
    tables: &TableSet,
    server: &ActorRef<ServerMsg>,
    saved: (ParamKey, f32),
) {
    let rows = ShardRows::restored(tables, vec![(saved.0, Arc::new(f32s(saved.1)))]).unwrap();
    let restore = Restore {
        generation: 1,
        num_shards: 2,
    };
    take_over(server, 0, rows, Some(restore)).await;
}

/// Hands shard 0 to a new owner, which confirms it holds the rows and then dies.
async fn hand_off_shard_0_to_an_owner_that_dies(
    tables: &Arc<TableSet>,
    server: &ActorRef<ServerMsg>,
) {
    let new_owner = spawn_servers(1, tables).await.remove(0).1;
    hand_off_shard_0(server, &new_owner).await.unwrap().unwrap();
    stopped(&new_owner).await;
}

/// Hands shard 0 to a new owner that drops the rows: the failed confirmation strands it.
/// Then an update of `moving` (by 2) is sent: it is held, unanswered.
async fn strand_shard_0(
    server: &ActorRef<ServerMsg>,
    moving: ParamKey,
) -> oneshot::Receiver<Result<AppliedAt, HarpError>> {
    let (new_owner, _) = Actor::spawn(None, DroppingServer, Drops::TakeOvers)
        .await
        .unwrap();
    let answer = hand_off_shard_0(server, &new_owner).await.unwrap();
    assert!(
        matches!(answer, Err(HarpError::ShardInTransit { .. })),
        "{answer:?}"
    );
    let mut held = send_apply(server, vec![(moving, f32s(2.0))]);
    settle().await;
    assert!(matches!(held.try_recv(), Err(TryRecvError::Empty)));
    held
}

/// Tells `server` that `shard` was re-created on `heir`, as server 2.
fn relocated(server: &ActorRef<ServerMsg>, shard: u32, heir: &ActorRef<ServerMsg>) {
    server
        .send_message(ServerMsg::Relocated {
            shard: ShardId(shard),
            to_id: ServerId(2),
            to: heir.clone(),
        })
        .unwrap();
}

async fn stopped(server: &ActorRef<ServerMsg>) {
    server.stop(None);
    while server.get_status() != ractor::ActorStatus::Stopped {
        tokio::task::yield_now().await;
    }
}

/// The new owner gets the rows and the requests forwarded behind them, then dies without
/// confirming or answering: the old owner learns it from the dropped parts and the failed
/// confirmation, in whatever order, holds them with everything sent later for the shard,
/// and serves them once the shard is re-created there. The other shard flows meanwhile.
#[tokio::test]
async fn requests_forwarded_to_a_new_owner_that_died_are_held_and_applied_once_re_created() {
    let (tables, server, moving, staying) = server_with_two_shards().await;
    apply(&server, vec![(moving, f32s(1.0)), (staying, f32s(1.0))]).await;
    let (new_owner, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    let handed = hand_off_shard_0(&server, &new_owner);
    // Forwarded right behind the rows (small rows travel in order).
    let mut mixed = send_apply(&server, vec![(moving, f32s(2.0)), (staying, f32s(3.0))]);
    let mut read = send_get(&server, moving);
    settle().await;
    assert!(matches!(mixed.try_recv(), Err(TryRecvError::Empty)));
    // The new owner dies with the rows, the forwarded parts and its acknowledgement.
    stopped(&new_owner).await;
    let answer = handed.await.unwrap();
    assert!(
        matches!(
            answer,
            Err(HarpError::ShardInTransit {
                shard: ShardId(0),
                to: ServerId(1),
                ..
            })
        ),
        "{answer:?}"
    );
    let mut later = send_apply(&server, vec![(moving, f32s(4.0))]);
    let other = send_apply(&server, vec![(staying, f32s(5.0))]);
    assert_eq!(
        other.await.unwrap().unwrap(),
        Some(0),
        "the other shard flows"
    );
    settle().await;
    for (what, pending) in [("mixed", &mut mixed), ("later", &mut later)] {
        assert!(
            matches!(pending.try_recv(), Err(TryRecvError::Empty)),
            "{what} is held"
        );
    }
    assert!(
        matches!(read.try_recv(), Err(TryRecvError::Empty)),
        "the read is held"
    );
    // Held, so not this server's to measure or save.
    assert!(distances(&server).await.iter().all(|(k, _)| *k != moving));
    re_create_shard_0(&tables, &server, (moving, 10.0)).await;
    within("mixed", mixed).await.unwrap();
    within("later", later).await.unwrap();
    let row = within("read", read).await.unwrap();
    assert!(
        [10.0, 12.0, 16.0].map(f32s).contains(&*row[0]),
        "{:?}",
        row[0]
    );
    // Each update once: the restored value plus the two held updates; the other shard's.
    let mut rows = dump(&server).await;
    rows.sort_unstable_by_key(|(k, _)| *k);
    let mut expected = vec![(moving, f32s(16.0)), (staying, f32s(9.0))];
    expected.sort_unstable_by_key(|(k, _)| *k);
    assert_eq!(rows, expected);
}

/// The new owner drops the rows at once: the failed confirmation strands the shard, so a
/// request sent after it is held here, not forwarded to the dead owner (which would keep it
/// unanswered for good), and a new move of the shard is refused until it is re-created.
#[tokio::test]
async fn after_a_failed_confirmation_requests_are_held_not_forwarded() {
    let (tables, server, moving, _) = server_with_two_shards().await;
    let held = strand_shard_0(&server, moving).await;
    // Nothing to hand on while it is stranded: a move of it is refused, saying why.
    let (other, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    let refused = hand_off_shard_0(&server, &other).await.unwrap();
    assert!(
        matches!(&refused, Err(HarpError::InvalidConfig(why)) if why.contains("never confirmed them")),
        "{refused:?}"
    );
    re_create_shard_0(&tables, &server, (moving, 10.0)).await;
    // Applied after its wait: no save epoch to tell (as for a part forwarded on).
    assert_eq!(within("held", held).await.unwrap(), None);
    assert_eq!(dump(&server).await, vec![(moving, f32s(12.0))]);
}

/// The new owner keeps the rows unconfirmed and drops what is forwarded behind them (its
/// node died; the failed confirmation is still on its way): the dropped part strands the
/// shard by itself, so it is held here instead of forwarded to the dead owner again and
/// again, and applied once the shard is re-created here.
#[tokio::test]
async fn a_part_the_new_owner_dropped_strands_the_shard_before_the_confirmation_fails() {
    let (tables, server, moving, _) = server_with_two_shards().await;
    let (new_owner, _) = Actor::spawn(None, DroppingServer, Drops::AllButTakeOvers)
        .await
        .unwrap();
    let mut handed = hand_off_shard_0(&server, &new_owner);
    let mut dropped = send_apply(&server, vec![(moving, f32s(2.0))]);
    settle().await;
    assert!(
        matches!(dropped.try_recv(), Err(TryRecvError::Empty)),
        "held"
    );
    assert!(
        matches!(handed.try_recv(), Err(TryRecvError::Empty)),
        "unconfirmed"
    );
    assert!(distances(&server).await.iter().all(|(k, _)| *k != moving));
    re_create_shard_0(&tables, &server, (moving, 10.0)).await;
    within("the dropped part", dropped).await.unwrap();
    assert_eq!(dump(&server).await, vec![(moving, f32s(12.0))]);
}

/// A confirmed hand-off made the shard the new owner's; a request sent here before its
/// sender learned that is forwarded there. The new owner died: the request comes back
/// unanswered and is held, like one for a shard still in transit, until the shard is
/// re-created here (where the master puts a failed server's shard that came from here).
#[tokio::test]
async fn a_request_forwarded_to_a_confirmed_owner_that_died_waits_for_the_shard_here() {
    let (tables, server, moving, _) = server_with_two_shards().await;
    hand_off_shard_0_to_an_owner_that_dies(&tables, &server).await;
    let mut late = send_apply(&server, vec![(moving, f32s(2.0))]);
    settle().await;
    assert!(matches!(late.try_recv(), Err(TryRecvError::Empty)), "held");
    re_create_shard_0(&tables, &server, (moving, 10.0)).await;
    within("the late part", late).await.unwrap();
    assert_eq!(dump(&server).await, vec![(moving, f32s(12.0))]);
}

/// The master re-created a stranded shard on another server (its old owner gives its load
/// away): the requests held here go there, and so does everything sent here for it later;
/// each update is applied once, on the new owner.
#[tokio::test]
async fn a_stranded_shard_re_created_on_another_server_sends_what_it_held_there() {
    let (tables, server, moving, _) = server_with_two_shards().await;
    let held = strand_shard_0(&server, moving).await;
    let heir = spawn_servers(1, &tables).await.remove(0).1;
    re_create_shard_0(&tables, &heir, (moving, 10.0)).await;
    relocated(&server, 0, &heir);
    within("the held part", held).await.unwrap();
    within(
        "a later part",
        send_apply(&server, vec![(moving, f32s(4.0))]),
    )
    .await
    .unwrap();
    let read = within("a read", send_get(&server, moving)).await.unwrap();
    assert_eq!(*read[0], f32s(16.0));
    assert_eq!(dump(&heir).await, vec![(moving, f32s(16.0))]);
    assert!(dump(&server).await.is_empty());
}

/// A shard this server handed off (confirmed) to a server that then died was re-created
/// elsewhere: a late request for it goes there, not to the dead owner (where it would wait
/// in vain); a relocation of a shard this server holds changes nothing.
#[tokio::test]
async fn a_shard_forwarded_to_an_owner_that_died_goes_where_it_was_re_created() {
    let (tables, server, moving, staying) = server_with_two_shards().await;
    apply(&server, vec![(staying, f32s(1.0))]).await;
    hand_off_shard_0_to_an_owner_that_dies(&tables, &server).await;
    let heir = spawn_servers(1, &tables).await.remove(0).1;
    re_create_shard_0(&tables, &heir, (moving, 10.0)).await;
    relocated(&server, 0, &heir);
    relocated(&server, 1, &heir);
    let late = send_apply(&server, vec![(moving, f32s(2.0)), (staying, f32s(3.0))]);
    within("the late request", late).await.unwrap();
    assert_eq!(dump(&heir).await, vec![(moving, f32s(12.0))]);
    assert_eq!(dump(&server).await, vec![(staying, f32s(4.0))]);
}
