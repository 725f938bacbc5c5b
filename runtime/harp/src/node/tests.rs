//! The parameter store's tests, against real server actors (or silent and lossy stand-ins):
//! deadlines on reads and flushes, recorded batches, flush parts sent again to a lost
//! server's new owner and never applied twice, staged flushes, and a failed server without
//! recovery.

use super::*;
use crate::table::{Init, UpdateRule};
use crate::test_support::SilentServer;
use harp_core::ShardMap;
use ractor::{Actor, ActorRef};

async fn store_with_silent_server() -> (ParamStore, ParamKey) {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 4, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let (server, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    let id = ServerId(0);
    let routing = Routing {
        shard_map: ShardMap::round_robin(4, &[id]).unwrap(),
        servers: [(id, server)].into_iter().collect(),
    };
    let store = ParamStore::new(Arc::new(tables), routing)
        .with_request_deadline(Duration::from_millis(100));
    (store, ParamKey::new(table.id(), 0))
}

#[tokio::test]
async fn a_read_from_a_stuck_server_fails_at_the_deadline() {
    let (store, key) = store_with_silent_server().await;
    let err = store.read(&[key], Version(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            HarpError::RequestTimedOut {
                request: "read",
                after_ms: 100,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.stats().requests_timed_out, 1);
    assert!(err
        .to_string()
        .contains("did not answer a read within 100 ms"));
}

#[tokio::test]
async fn a_batch_records_like_one_row_after_another() {
    let (store, key) = store_with_silent_server().await;
    let row = |r: u64| ParamKey::new(key.table, r);
    let f32s = |v: f32| RowData::F32(vec![v; 4]);
    // Rows spread over every shard; row 7 three times more, in an order whose f32 sum
    // depends on it (1e8 + 7 rounds to 1e8 + 8, so in this order the sum is 9; with
    // the 1 first it would be 8).
    let mut updates: Vec<(ParamKey, RowData)> = (0..40).map(|r| (row(r), f32s(r as f32))).collect();
    updates.insert(3, (row(7), f32s(1e8)));
    updates.insert(20, (row(7), f32s(-1e8)));
    updates.push((row(7), f32s(1.0)));
    let (one_by_one, _) = store_with_silent_server().await;
    for (k, d) in updates.clone() {
        one_by_one.record(k, d).unwrap();
    }
    store.record_many(updates).unwrap();
    let drained = |s: &ParamStore| {
        let mut rows: Vec<_> = s.drain_log().into_values().flatten().collect();
        rows.sort_by_key(|(k, _)| *k);
        rows
    };
    let (batch, single) = (drained(&store), drained(&one_by_one));
    assert_eq!(batch, single);
    assert!(
        batch.contains(&(row(7), f32s(9.0))),
        "row 7 summed in another order"
    );
    assert_eq!(store.stats().updates_recorded, 43);
}

#[tokio::test]
async fn a_batch_with_a_row_that_does_not_fit_fails_and_is_counted() {
    let (store, key) = store_with_silent_server().await;
    store.record(key, RowData::F32(vec![1.0; 4])).unwrap();
    let err = store
        .record_many(vec![(key, RowData::F32(vec![1.0; 2]))])
        .unwrap_err();
    assert!(err.to_string().contains("width"), "{err}");
    assert_eq!(store.stats().updates_rejected, 1);
    assert_eq!(store.stats().updates_recorded, 1);
}

#[tokio::test]
async fn a_flush_to_a_stuck_server_fails_at_the_deadline() {
    let (store, key) = store_with_silent_server().await;
    store.record(key, RowData::F32(vec![1.0; 4])).unwrap();
    let err = store.apply(store.drain_log()).await.unwrap_err();
    assert!(
        matches!(
            err,
            HarpError::RequestTimedOut {
                request: "flush",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.stats().requests_timed_out, 1);
    assert_eq!(store.stats().flushes, 0);
}

/// A store on two real servers, every shard on server 0; the key of shard 0.
async fn store_on_two_servers(
    recover: bool,
) -> (Arc<ParamStore>, ParamKey, [ActorRef<ServerMsg>; 2]) {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let tables = Arc::new(tables);
    let spawn = |id: u32| {
        Actor::spawn(
            None,
            crate::server::ServerActor,
            (ServerId(id), tables.clone()),
        )
    };
    let (s0, _) = spawn(0).await.unwrap();
    let (s1, _) = spawn(1).await.unwrap();
    let routing = Routing {
        shard_map: ShardMap::round_robin(1, &[ServerId(0)]).unwrap(),
        servers: [(ServerId(0), s0.clone()), (ServerId(1), s1.clone())]
            .into_iter()
            .collect(),
    };
    let store = ParamStore::new(tables, routing);
    let store = if recover {
        store.awaiting_lost_servers()
    } else {
        store
    };
    (Arc::new(store), ParamKey::new(table.id(), 3), [s0, s1])
}

async fn crash(server: &ActorRef<ServerMsg>) -> Vec<(ParamKey, RowData)> {
    let (reply, rows) = oneshot::channel();
    server.send_message(ServerMsg::Crash { reply }).unwrap();
    rows.await.unwrap().rows
}

async fn dump(server: &ActorRef<ServerMsg>) -> Vec<(ParamKey, RowData)> {
    let (reply, rows) = oneshot::channel();
    server.send_message(ServerMsg::Dump { reply }).unwrap();
    rows.await.unwrap()
}

#[tokio::test]
async fn a_flush_to_a_failed_server_goes_to_the_new_owner_once_rerouted() {
    let (store, key, [s0, s1]) = store_on_two_servers(true).await;
    store.record(key, RowData::F32(vec![1.0, 2.0])).unwrap();
    store.apply(store.drain_log()).await.unwrap();
    assert_eq!(crash(&s0).await, vec![(key, RowData::F32(vec![1.0, 2.0]))]);
    store.record(key, RowData::F32(vec![10.0, 20.0])).unwrap();
    let flushing = crate::spawn::spawn({
        let store = store.clone();
        async move { store.apply(store.drain_log()).await }
    });
    let reading = crate::spawn::spawn({
        let store = store.clone();
        async move { store.read(&[key], Version(5)).await }
    });
    tokio::task::yield_now().await;
    assert!(!flushing.is_finished() && !reading.is_finished());
    // The recovery: the new owner holds the shard (here: empty), then the reroute.
    store.reroute(ShardId(0), ServerId(1)).unwrap();
    store.forget_server(ServerId(0));
    flushing.await.unwrap().unwrap();
    let read = reading.await.unwrap().unwrap();
    // The read may have been served before or after the resent flush.
    assert!(
        *read[0] == RowData::F32(vec![0.0, 0.0]) || *read[0] == RowData::F32(vec![10.0, 20.0]),
        "{:?}",
        read[0]
    );
    assert_eq!(dump(&s1).await, vec![(key, RowData::F32(vec![10.0, 20.0]))]);
    let stats = store.stats();
    assert_eq!(stats.requests_resent, 2, "{stats:?}");
    assert_eq!(stats.flushes, 2);
}

/// A server the job declared dead but that still answers (cut off from the master
/// only): once this node reported what it acknowledged, a part it acknowledges is
/// refused and goes to the shard's new owner once rerouted, so each update is either in
/// the report or applied by a live server.
#[tokio::test]
async fn after_its_loss_was_reported_a_servers_acknowledgement_is_refused_and_the_part_resent() {
    let (store, key, [s0, s1]) = store_on_two_servers(true).await;
    let store = Arc::new(Arc::into_inner(store).unwrap().with_lost_ledger());
    store.record(key, RowData::F32(vec![1.0, 2.0])).unwrap();
    store.apply(store.drain_log()).await.unwrap();
    // The master asks: the report holds the first flush, and fences server 0.
    let report = store.lost_updates(ServerId(0)).unwrap();
    assert_eq!(report.len(), 1, "{report:?}");
    store.record(key, RowData::F32(vec![10.0, 20.0])).unwrap();
    let flushing = crate::spawn::spawn({
        let store = store.clone();
        async move { store.apply(store.drain_log()).await }
    });
    // Server 0 applies and acknowledges it (it is alive), but the part is refused.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!flushing.is_finished(), "waits for the reroute");
    assert_eq!(dump(&s0).await, vec![(key, RowData::F32(vec![11.0, 22.0]))]);
    store.reroute(ShardId(0), ServerId(1)).unwrap();
    flushing.await.unwrap().unwrap();
    assert_eq!(dump(&s1).await, vec![(key, RowData::F32(vec![10.0, 20.0]))]);
    // The later report has nothing of the refused part.
    let again = store.lost_updates(ServerId(0)).unwrap();
    assert_eq!(again, report);
    assert_eq!(store.stats().requests_resent, 1);
}

/// Rows `a` = (1, 2) and `b` = (3, 4), as [`flush_through_lost_acks`] sends them.
fn two_rows(a: ParamKey, b: ParamKey) -> Vec<(ParamKey, RowData)> {
    vec![
        (a, RowData::F32(vec![1.0, 2.0])),
        (b, RowData::F32(vec![3.0, 4.0])),
    ]
}

/// Sends server 0's traffic through [`crate::test_support::LostAcks`] (it applies what
/// it gets, its answers are lost), and flushes [`two_rows`]; returns the flush once
/// `applied_on` holds both rows.
async fn flush_through_lost_acks(
    store: &Arc<ParamStore>,
    s0: &ActorRef<ServerMsg>,
    applied_on: &ActorRef<ServerMsg>,
    (a, b): (ParamKey, ParamKey),
) -> tokio::task::JoinHandle<Result<(), HarpError>> {
    let (lossy, _) = Actor::spawn(None, crate::test_support::LostAcks, s0.clone())
        .await
        .unwrap();
    store.add_server(ServerId(0), lossy);
    for (key, delta) in two_rows(a, b) {
        store.record(key, delta).unwrap();
    }
    let flushing = crate::spawn::spawn({
        let store = store.clone();
        async move { store.apply(store.drain_log()).await }
    });
    while dump(applied_on).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    flushing
}

/// Server 0 died: its shard goes to server 1, where the waiting `flushing` sends its
/// part again; server 1's rows once it ended, ascending.
async fn rerouted_to_server_1(
    store: &ParamStore,
    flushing: tokio::task::JoinHandle<Result<(), HarpError>>,
    s1: &ActorRef<ServerMsg>,
) -> Vec<(ParamKey, RowData)> {
    assert!(!flushing.is_finished(), "the part waits for the reroute");
    store.reroute(ShardId(0), ServerId(1)).unwrap();
    store.forget_server(ServerId(0));
    flushing.await.unwrap().unwrap();
    let mut rows = dump(s1).await;
    rows.sort_by_key(|(k, _)| *k);
    rows
}

/// A server applied a part, and a checkpoint save of one of its rows came after, but
/// the acknowledgement never left (the server was killed): the shard comes back from
/// the image, which holds that row's delta already, so only the other row goes again.
/// Sent whole (before the saves listed the parts they hold), row `a` counted twice.
#[tokio::test]
async fn a_part_applied_and_saved_whose_acknowledgement_was_lost_is_not_applied_twice() {
    let (store, key, [s0, s1]) = store_on_two_servers(true).await;
    let (a, b) = (key, ParamKey::new(key.table, 5));
    // Server 0 applies what it is sent, and its answers are lost.
    let flushing = flush_through_lost_acks(&store, &s0, &s0, (a, b)).await;
    // A checkpoint save of row `a` after the apply: the image holds a = (1, 2).
    let (reply, answer) = oneshot::channel();
    let request = crate::server::CheckpointRequest::Save {
        keys: vec![a],
        recorded: 0,
        reply,
    };
    s0.send_message(ServerMsg::Checkpoint(request)).unwrap();
    let save = answer.await.unwrap().unwrap();
    assert_eq!(save.applied.len(), 1, "the save lists the part: {save:?}");
    // The master tells the node, then server 0 dies and its shard is re-created on
    // server 1 from the image: row `a` at its saved value, row `b` never saved.
    store.rows_saved(ServerId(0), save.epoch, &[a], &save.applied);
    crash(&s0).await;
    let (reply, restored) = oneshot::channel();
    let updates = vec![(a, RowData::F32(vec![1.0, 2.0]))];
    let restore = ServerMsg::Apply {
        updates,
        part: None,
        reply,
    };
    s1.send_message(restore).unwrap();
    restored.await.unwrap().unwrap();
    let rows = rerouted_to_server_1(&store, flushing, &s1).await;
    assert_eq!(rows, two_rows(a, b));
    assert_eq!(store.stats().requests_resent, 1);
}

/// A part sent to a server that had given its shard away is forwarded to the new
/// owner, which applies it; the old owner dies before relaying the answer. The node
/// sends the part again, now straight to the new owner, which knows it applied those
/// keys (under the part's own number) and skips them. Sent under a new number, or
/// unrecorded, the rows counted twice.
#[tokio::test]
async fn a_part_forwarded_by_a_server_that_died_before_answering_is_not_applied_twice() {
    let (store, key, [s0, s1]) = store_on_two_servers(true).await;
    let (a, b) = (key, ParamKey::new(key.table, 5));
    // Server 0 gives the one shard to server 1; the node does not know yet.
    crate::test_support::hand_off(&s0, (0, 1), (1, &s1)).await;
    // Server 0's answers are lost: it forwards the part, server 1 applies it, and
    // the answer never reaches the node.
    let flushing = flush_through_lost_acks(&store, &s0, &s1, (a, b)).await;
    crash(&s0).await;
    let rows = rerouted_to_server_1(&store, flushing, &s1).await;
    assert_eq!(store.stats().requests_resent, 1);
    assert_eq!(rows, two_rows(a, b));
    // Acknowledged, the part is no longer held: the next one releases its record.
    store.record(a, RowData::F32(vec![1.0, 1.0])).unwrap();
    store.apply(store.drain_log()).await.unwrap();
    assert_eq!(store.unacked_lock().held_from(), 2);
}

/// Server 0 applies a part itself, its answer is lost, and it gives the part's shard to
/// server 1 before it dies: the shard's rows at server 1 hold the part. The node sends
/// the part again to server 1, which got the part's keys with the rows and skips them.
/// Without that record the rows counted twice.
#[tokio::test]
async fn a_part_applied_by_a_server_that_then_handed_its_shard_off_and_died_is_not_applied_twice() {
    let (store, key, [s0, s1]) = store_on_two_servers(true).await;
    let (a, b) = (key, ParamKey::new(key.table, 5));
    let flushing = flush_through_lost_acks(&store, &s0, &s0, (a, b)).await;
    crate::test_support::hand_off(&s0, (0, 1), (1, &s1)).await;
    crash(&s0).await;
    let rows = rerouted_to_server_1(&store, flushing, &s1).await;
    assert_eq!(store.stats().requests_resent, 1);
    assert_eq!(rows, two_rows(a, b));
}

#[tokio::test]
async fn a_staged_flush_names_its_servers_and_applies_only_once_committed() {
    let (store, key, [s0, _]) = store_on_two_servers(false).await;
    store.record(key, RowData::F32(vec![1.0, 2.0])).unwrap();
    let holders = store.stage(store.drain_log(), 4, 9).await.unwrap();
    assert_eq!(holders, vec![ServerId(0)]);
    assert!(dump(&s0).await.is_empty(), "staged, not applied");
    let (reply, committed) = oneshot::channel();
    s0.send_message(ServerMsg::Commit {
        node: 4,
        flush: 9,
        reply,
    })
    .unwrap();
    committed.await.unwrap().unwrap();
    assert_eq!(dump(&s0).await, vec![(key, RowData::F32(vec![1.0, 2.0]))]);
    // A flush with nothing in it names no server.
    assert!(store
        .stage(store.drain_log(), 4, 10)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn without_server_recovery_a_failed_server_fails_the_flush_and_the_read() {
    let (store, key, [s0, _]) = store_on_two_servers(false).await;
    crash(&s0).await;
    store.record(key, RowData::F32(vec![1.0, 2.0])).unwrap();
    let err = store.apply(store.drain_log()).await.unwrap_err();
    assert!(
        matches!(err, HarpError::ServerUnreachable(ServerId(0))),
        "{err}"
    );
    let err = store.read(&[key], Version(1)).await.unwrap_err();
    assert!(
        matches!(err, HarpError::ServerUnreachable(ServerId(0))),
        "{err}"
    );
}

/// A node process under a long lease (`remote::lease::reroute_wait`): its traffic for a
/// dead server waits for the master's verdict and the shards' re-creation after it, so a
/// reroute 75 s after the loss (a 60 s lease, then 14 s to re-create) saves the flush that
/// the usual minute gives up on.
#[tokio::test(start_paused = true)]
async fn under_a_long_lease_traffic_for_a_dead_server_waits_for_the_verdict_and_the_recovery() {
    let long_lease = crate::remote::lease::reroute_wait(SERVER_RECOVERY_WAIT, 60_000);
    for (wait, saved) in [(SERVER_RECOVERY_WAIT, false), (long_lease, true)] {
        let (store, key, [s0, s1]) = store_on_two_servers(true).await;
        let store = Arc::new(Arc::into_inner(store).unwrap().with_reroute_wait(wait));
        crash(&s0).await;
        store.record(key, RowData::F32(vec![1.0, 2.0])).unwrap();
        let began = tokio::time::Instant::now();
        let flushing = crate::spawn::spawn({
            let store = store.clone();
            async move { store.apply(store.drain_log()).await }
        });
        tokio::time::sleep(Duration::from_secs(75)).await;
        store.reroute(ShardId(0), ServerId(1)).unwrap();
        store.forget_server(ServerId(0));
        let flushed = flushing.await.unwrap();
        if saved {
            flushed.unwrap();
            assert_eq!(dump(&s1).await, vec![(key, RowData::F32(vec![1.0, 2.0]))]);
        } else {
            let err = flushed.unwrap_err();
            assert!(
                matches!(err, HarpError::ServerUnreachable(ServerId(0))),
                "{err}"
            );
            // It gave up when the usual wait was over, before the reroute.
            assert!(
                began.elapsed() >= SERVER_RECOVERY_WAIT,
                "{:?}",
                began.elapsed()
            );
            assert_eq!(dump(&s1).await, vec![]);
        }
    }
}
