//! The master recovering a failed server while a scale event moves a shard (`recovery.rs`):
//! a shard move between two other servers does not stand in the way, the failed server's
//! shards go only to a server the event keeps, a failure injected into a server a shard is
//! moving from or to waits until the move ends, a server that died while handing a shard
//! off has that shard re-created on its new owner (the move is reported failed), and one a
//! shard was moving to has that shard re-created on its old owner, whether its death or the
//! old owner's failed hand-off reaches the master first. The move is held in flight for
//! good: its old owner (or its new one) is a [`SilentServer`], which never answers. A
//! failed server's shard goes back to the server it came from, or, when that one gives its
//! load away, elsewhere, and every other server is told where. A move a failure ends fails
//! as interrupted, and no scale event starts while a recovery is under way or awaited.

use super::moves::ScaleReport;
use super::test_master::{
    crash, real_servers, start_master, start_master_with_shards, JobEnd, Running,
};
use super::MasterMsg;
use crate::error::HarpError;
use crate::scar::ServerRecovery;
use crate::server::ServerMsg;
use crate::test_support::{DroppingServer, Drops, SilentServer, TappedServer};
use harp_core::{ServerId, WorkerId};
use ractor::{Actor, ActorRef};
use tokio::sync::{mpsc, oneshot};

/// The answer to the scale event that empties server 2.
type Scaled = oneshot::Receiver<Result<ScaleReport, HarpError>>;

/// A running master with one worker and three servers of one shard each (shard `i` on
/// server `i`): servers 0 and 1 are real, server 2 never answers.
async fn master_with_three_servers() -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let (master, end, scaled) = master_emptying_server_2().await;
    std::mem::forget(scaled); // the event never ends; its answer is never awaited
    (master, end)
}

/// [`master_with_three_servers`], with the scale event's answer.
async fn master_emptying_server_2() -> (ActorRef<MasterMsg<Running>>, JobEnd, Scaled) {
    let mut servers = real_servers(2).await;
    let (silent, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    servers.insert(ServerId(2), silent);
    let (master, end) = start_master(servers, Vec::new()).await;
    // Empty server 2: its shard goes to server 0 (a tie with server 1, broken by id), and
    // the hand-off is never answered.
    let scaled = rebalance(&master, &[0, 1]);
    (master, end, scaled)
}

/// Asks the master to re-balance onto `live_servers` (and the one worker); its answer.
fn rebalance(master: &ActorRef<MasterMsg<Running>>, live_servers: &[u32]) -> Scaled {
    let (reply, scaled) = oneshot::channel();
    master
        .send_message(MasterMsg::Rebalance {
            live_workers: vec![WorkerId(0)],
            live_servers: live_servers.iter().map(|s| ServerId(*s)).collect(),
            reply,
        })
        .unwrap();
    scaled
}

/// The master's answer to whether a scale event could start now.
async fn can_scale(master: &ActorRef<MasterMsg<Running>>) -> Result<(), HarpError> {
    let (reply, answer) = oneshot::channel();
    master.send_message(MasterMsg::CanScale { reply }).unwrap();
    answer.await.expect("the master answers")
}

/// Tells the master `server` died (as a node process's death does), returns the answer.
async fn died(
    master: &ActorRef<MasterMsg<Running>>,
    server: u32,
) -> Result<ServerRecovery, HarpError> {
    let (reply, answer) = oneshot::channel();
    master
        .send_message(MasterMsg::ServerLost {
            server: ServerId(server),
            at_failure: None,
            acknowledged: None,
            reply: Some(reply),
        })
        .unwrap();
    answer.await.expect("the master answers")
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

#[tokio::test]
async fn a_server_that_dies_handing_a_shard_off_has_it_re_created_on_the_new_owner() {
    let (master, mut end, scaled) = master_emptying_server_2().await;
    let report = died(&master, 2).await.expect("recovered");
    // Shard 2, on its way from server 2 to server 0, is re-created on server 0.
    assert_eq!(report.shards, vec![(2, 0)]);
    // The scale event ends, its move failed and said why.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), scaled)
        .await
        .expect("the scale event ends");
    match answer.expect("the scale event is answered") {
        // Cut short by a failure: a leave tries it again.
        Err(HarpError::MoveInterrupted(why)) => assert!(
            why.contains("server-2 failed while handing shard-2 to server-0"),
            "{why}"
        ),
        other => panic!("the move did not fail as interrupted: {other:?}"),
    }
    assert!(end.try_recv().is_err(), "the job goes on");
    // Shard 2 is server 0's now: losing server 0 re-creates both of its shards.
    let report = died(&master, 0).await.expect("recovered");
    assert_eq!(report.shards, vec![(0, 1), (2, 1)]);
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// A running master with one worker and three servers of one shard each (shard `i` on
/// server `i`): server 0 never answers, 1 and 2 are real. The scale event empties server 1:
/// its shard goes to server 0 (a tie with server 2, broken by id), which never confirms it.
async fn master_moving_shard_1_to_silent_server_0() -> (ActorRef<MasterMsg<Running>>, JobEnd, Scaled)
{
    let (silent, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    master_moving_shard_1_to_server_0(silent).await
}

/// [`master_moving_shard_1_to_silent_server_0`] with `server_0` as server 0.
async fn master_moving_shard_1_to_server_0(
    server_0: ActorRef<crate::server::ServerMsg>,
) -> (ActorRef<MasterMsg<Running>>, JobEnd, Scaled) {
    let mut servers = real_servers(3).await;
    servers.insert(ServerId(0), server_0);
    let (master, end) = start_master(servers, Vec::new()).await;
    let scaled = rebalance(&master, &[0, 2]);
    (master, end, scaled)
}

/// Why the scale event failed, once it ends: a move a failure cut short (a leave tries
/// such an event again).
async fn interrupted(scaled: Scaled) -> String {
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), scaled)
        .await
        .expect("the scale event ends");
    match answer.expect("the scale event is answered") {
        Err(HarpError::MoveInterrupted(why)) => why,
        other => panic!("the move did not fail as interrupted: {other:?}"),
    }
}

/// The answer to a scale event that ends (or is refused) at once.
async fn answer_to(scaled: Scaled) -> Result<ScaleReport, HarpError> {
    let wait = std::time::Duration::from_secs(10);
    let answer = tokio::time::timeout(wait, scaled).await;
    answer
        .expect("the event ends at once")
        .expect("the master answers")
}

/// The death of a shard's new owner, handled while the hand-off is still unanswered: the
/// shard goes back to its old owner (its rows may have left it), the new owner's own shard
/// to the server the event keeps, and the move fails saying so.
#[tokio::test]
async fn a_server_that_dies_while_a_shard_comes_has_it_re_created_on_its_old_owner() {
    let (master, mut end, scaled) = master_moving_shard_1_to_silent_server_0().await;
    let asked = can_scale(&master).await;
    assert!(matches!(asked, Err(HarpError::ScaleBusy)), "{asked:?}");
    let report = died(&master, 0).await.expect("recovered");
    assert_eq!(report.shards, vec![(0, 2), (1, 1)]);
    let error = interrupted(scaled).await;
    assert!(
        error.contains("server-0 failed while server-1 handed shard-1 to it; shard-1 was re-created on server-1"),
        "{error}"
    );
    assert!(end.try_recv().is_err(), "the job goes on");
    // Shard 1 is server 1's: losing it re-creates that shard, on server 2.
    let report = died(&master, 1).await.expect("recovered");
    assert_eq!(report.shards, vec![(1, 2)]);
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// The old owner's hand-off fails first (the new owner died holding the unconfirmed rows):
/// the move fails, and the shard is re-created on the old owner when the death is handled.
/// No scale event starts until then (the shard map still says the shard is on its way).
#[tokio::test]
async fn a_hand_off_the_new_owner_never_confirmed_is_re_created_at_the_new_owners_death() {
    let (dying, _) = Actor::spawn(None, DroppingServer, Drops::TakeOvers)
        .await
        .unwrap();
    let (master, mut end, scaled) = master_moving_shard_1_to_server_0(dying).await;
    let error = interrupted(scaled).await;
    assert!(
        error.contains("the rows of shard-1 left for server-0, which did not confirm"),
        "{error}"
    );
    assert!(end.try_recv().is_err(), "the job goes on");
    match answer_to(rebalance(&master, &[1, 2])).await {
        Err(HarpError::RecoveryPending(pending)) => assert_eq!(
            pending,
            "the hand-off of shard-1 from server-1 to server-0 was cut short by a failure, \
             and the shard's place is settled once the failed server is recovered"
        ),
        other => panic!("expected RecoveryPending, got {other:?}"),
    }
    let report = died(&master, 0).await.expect("recovered");
    assert_eq!(report.shards, vec![(0, 2), (1, 1)]);
    assert!(end.try_recv().is_err(), "the job goes on");
    // The recovery is over: a scale event runs again.
    let scaled = answer_to(rebalance(&master, &[1, 2])).await;
    assert!(scaled.is_ok(), "{scaled:?}");
    master.stop(None);
}

/// No scale event starts while a failed server's shards are being re-created: the shard
/// map still names the failed server until every take-over is answered (here never: the
/// heir, server 1, does not answer).
#[tokio::test]
async fn no_scale_event_starts_while_a_failed_servers_shards_are_re_created() {
    let mut servers = real_servers(1).await;
    let (silent, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    servers.insert(ServerId(1), silent);
    let (master, mut end) = start_master(servers, Vec::new()).await;
    let (reply, _never_answered) = oneshot::channel();
    master
        .send_message(MasterMsg::ServerLost {
            server: ServerId(0),
            at_failure: None,
            acknowledged: None,
            reply: Some(reply),
        })
        .unwrap();
    let scaled = rebalance(&master, &[1]);
    let pending = "server-0 failed and its shards are being re-created from the running checkpoint";
    match answer_to(scaled).await {
        Err(HarpError::RecoveryPending(why)) => assert_eq!(why, pending),
        other => panic!("expected RecoveryPending, got {other:?}"),
    }
    // Asked first (a scale-out in one process), the master says the same.
    match can_scale(&master).await {
        Err(HarpError::RecoveryPending(why)) => assert_eq!(why, pending),
        other => panic!("expected RecoveryPending, got {other:?}"),
    }
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// A shard moved and confirmed goes back where it came from when its new owner dies (that
/// server may still forward requests for it, and holds them once they go unanswered), even
/// where another server is less loaded.
#[tokio::test]
async fn a_failed_servers_shard_goes_back_to_the_server_it_came_from() {
    let servers = real_servers(3).await;
    // Server 0 holds shard 0; server 1 shards 1, 2 and 3; server 2 nothing.
    let mut shards = harp_core::ShardMap::round_robin(4, &[ServerId(1)]).unwrap();
    shards.assign(harp_core::ShardId(0), ServerId(0)).unwrap();
    let (master, mut end) = start_master_with_shards(servers, Vec::new(), shards).await;
    let scaled = rebalance(&master, &[0, 1, 2]);
    let report = scaled.await.unwrap().expect("the scale event succeeds");
    assert_eq!(report.moves.len(), 1, "{report:?}");
    let moved = &report.moves[0];
    assert_eq!((moved.from, moved.to), (1, 2), "{report:?}");
    // Server 1 holds two shards, server 0 one: the least loaded would be server 0.
    let report = died(&master, 2).await.expect("recovered");
    assert_eq!(report.shards, vec![(moved.item, 1)]);
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// Runs a rebalance onto `live_servers` to its end; its moves as `(shard, from, to)`.
async fn rebalanced(
    master: &ActorRef<MasterMsg<Running>>,
    live_servers: &[u32],
) -> Vec<(u32, u32, u32)> {
    let scaled = rebalance(master, live_servers);
    let report = scaled.await.unwrap().expect("the scale event succeeds");
    report
        .moves
        .iter()
        .map(|m| (m.item, m.from, m.to))
        .collect()
}

/// The server a failed server's shards came from gives its load away: they are re-created
/// elsewhere, and that server (which may still forward requests for them to the failed
/// one, or hold them stranded: `server/stranded.rs`) is told where; so is every other
/// live server, but not the new owner.
#[tokio::test]
async fn servers_are_told_where_a_shard_that_could_not_go_back_was_re_created() {
    let mut servers = real_servers(3).await;
    let mut taps = Vec::new();
    for id in [0, 1] {
        let (told, relocations) = mpsc::unbounded_channel();
        let inner = servers.remove(&ServerId(id)).unwrap();
        let (tapped, _) = Actor::spawn(None, TappedServer, (inner, told))
            .await
            .unwrap();
        servers.insert(ServerId(id), tapped.clone());
        taps.push((tapped, relocations));
    }
    // Server 0 holds shard 0; server 1 shards 1, 2 and 3; server 2 nothing.
    let mut shards = harp_core::ShardMap::round_robin(4, &[ServerId(1)]).unwrap();
    shards.assign(harp_core::ShardId(0), ServerId(0)).unwrap();
    let (master, mut end) = start_master_with_shards(servers, Vec::new(), shards).await;
    let first = rebalanced(&master, &[0, 1, 2]).await;
    // Server 1 gives its load away: one shard of it to each of servers 0 and 2.
    let second = rebalanced(&master, &[0, 2]).await;
    let on_2: Vec<u32> = first
        .iter()
        .chain(&second)
        .filter(|(_, from, to)| (*from, *to) == (1, 2))
        .map(|(shard, _, _)| *shard)
        .collect();
    assert_eq!(on_2.len(), 2, "{first:?} then {second:?}");
    // Both came from server 1, which takes no load: re-created on server 0.
    let report = died(&master, 2).await.expect("recovered");
    let expected: Vec<(u32, u32)> = on_2.iter().map(|s| (*s, 0)).collect();
    assert_eq!(report.shards, expected);
    let mut told = Vec::new();
    for _ in &expected {
        let wait = std::time::Duration::from_secs(10);
        let next = tokio::time::timeout(wait, taps[1].1.recv()).await;
        let (shard, to) = next.expect("server 1 is told").unwrap();
        told.push((shard.0, to.0));
    }
    assert_eq!(told, expected, "what server 1 was told");
    // A round trip through server 0 after the recovery's answer: anything the master told it
    // before that answer has reached its tap by then.
    let (reply, dumped) = oneshot::channel();
    taps[0].0.send_message(ServerMsg::Dump { reply }).unwrap();
    dumped.await.unwrap();
    assert!(
        taps[0].1.try_recv().is_err(),
        "the new owner is told nothing"
    );
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}

/// A late answer to an earlier hand-off of a shard (a failure ended that move, and a later
/// event moves the shard again) is not taken for the hand-off under way: it may name a
/// server that is dead by now, where every node would then send the shard's traffic.
#[tokio::test]
async fn a_late_answer_to_an_ended_hand_off_is_not_taken_for_a_later_one() {
    // Shard 2 is on its way from server 2 to server 0: hand-off number 1, never answered.
    let (master, mut end, mut scaled) = master_emptying_server_2().await;
    // An answer to another hand-off of shard 2, which went to server 1.
    master
        .send_message(MasterMsg::ShardHandedOff {
            shard: harp_core::ShardId(2),
            to: ServerId(1),
            hand_off: 0,
            result: Ok(crate::server::ShardMoved::default()),
        })
        .unwrap();
    // Shard 2 is not server 1's: losing server 1 re-creates its own shard only.
    let report = crash(&master, 1).await.expect("recovered");
    assert_eq!(report.shards, vec![(1, 0)]);
    // The master handled the answer before the crash (its mailbox keeps their order), and
    // the event is still under way.
    assert!(scaled.try_recv().is_err(), "the move is still under way");
    assert!(end.try_recv().is_err(), "the job goes on");
    master.stop(None);
}
