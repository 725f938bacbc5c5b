//! The control against a scripted master: a node that goes while a scale event runs (a
//! server failed by fault injection in one process, a node process forgotten across
//! processes) is not named live again when that event ends, neither by `members` nor by the
//! next scale event, and a command naming it is refused with a clear error; a scale-out the
//! master would refuse starts nothing.

use super::{job_control, serve, serve_across, ControlContext, JobControl, JobEvent, Started};
use crate::error::HarpError;
use crate::master::test_master::Running;
use crate::master::{MasterMsg, ScaleReport};
use crate::node::{ParamStore, Routing};
use crate::scar::ServerRecovery;
use crate::table::TableSet;
use crate::worker::NodeShared;
use harp_core::{ServerId, ShardMap, WorkerId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// A master that hands every message it gets to the test, which answers it.
struct ScriptedMaster;

impl Actor for ScriptedMaster {
    type Msg = MasterMsg<Running>;
    type State = mpsc::UnboundedSender<MasterMsg<Running>>;
    type Arguments = mpsc::UnboundedSender<MasterMsg<Running>>;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        to_test: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(to_test)
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        message: Self::Msg,
        to_test: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = to_test.send(message);
        Ok(())
    }
}

type Scripted = (
    ActorRef<MasterMsg<Running>>,
    mpsc::UnboundedReceiver<MasterMsg<Running>>,
);

async fn scripted_master() -> Scripted {
    let (tx, rx) = mpsc::unbounded_channel();
    let (master, _) = Actor::spawn(None, ScriptedMaster, tx).await.unwrap();
    (master, rx)
}

type RebalanceReply = oneshot::Sender<Result<ScaleReport, HarpError>>;

/// The next message the master got, which must be a re-balancing: its live servers and reply.
async fn next_rebalance(
    from_master: &mut mpsc::UnboundedReceiver<MasterMsg<Running>>,
) -> (Vec<WorkerId>, Vec<ServerId>, RebalanceReply) {
    match from_master
        .recv()
        .await
        .expect("the control asks the master")
    {
        MasterMsg::Rebalance {
            live_workers,
            live_servers,
            reply,
        } => (live_workers, live_servers, reply),
        _ => panic!("expected a re-balancing"),
    }
}

fn ids(n: u32) -> (Vec<WorkerId>, Vec<ServerId>) {
    (
        (0..n).map(WorkerId).collect(),
        (0..n).map(ServerId).collect(),
    )
}

/// A job in one process of 3 workers and 3 servers whose control talks to a scripted master.
async fn serve_in_one_process() -> (JobControl, mpsc::UnboundedReceiver<MasterMsg<Running>>) {
    let (control, from_master, _events) = serve_in_one_process_told().await;
    (control, from_master)
}

/// [`serve_in_one_process`], and the events the job tells.
async fn serve_in_one_process_told() -> (
    JobControl,
    mpsc::UnboundedReceiver<MasterMsg<Running>>,
    mpsc::UnboundedReceiver<JobEvent>,
) {
    let (master, from_master) = scripted_master().await;
    let tables = Arc::new(TableSet::new());
    let routing = Routing {
        shard_map: ShardMap::round_robin(1, &[ServerId(0)]).unwrap(),
        servers: Default::default(),
    };
    let node = Arc::new(NodeShared {
        store: Arc::new(ParamStore::new(tables.clone(), routing)),
        book: Mutex::new(harp_core::FlushBook::new()),
        master: master.clone(),
        staging: None,
        executors_on: crate::executor_runtime::ExecutorRuntime::for_job().unwrap(),
    });
    let (workers, servers) = ids(3);
    let (control, inbox) = job_control();
    let (events_tx, events) = mpsc::unbounded_channel();
    tokio::spawn(serve(
        inbox.with_events(events_tx),
        ControlContext {
            node,
            master,
            tables,
            workers,
            servers,
            started: Arc::new(Mutex::new(Started::default())),
            job_started: std::time::Instant::now(),
        },
    ));
    (control, from_master, events)
}

/// The next event told, within 10 s (a guard against a hang, not a measurement).
async fn next_event(events: &mut mpsc::UnboundedReceiver<JobEvent>) -> JobEvent {
    tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
        .await
        .expect("no event within 10 s")
        .expect("the events ended")
}

/// In one process each scale command's outcome is told as a scale event once it is
/// answered: one carried out with its report, one refused with why.
#[tokio::test]
async fn each_scale_command_in_one_process_is_told_as_a_scale_event() {
    let (control, mut from_master, mut events) = serve_in_one_process_told().await;
    let scale_in = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(0)], &[]).await }
    });
    let (_, _, reply) = next_rebalance(&mut from_master).await;
    assert!(events.try_recv().is_err(), "told before it was answered");
    let report = ScaleReport {
        executors_moved: 1,
        ..ScaleReport::default()
    };
    reply.send(Ok(report.clone())).unwrap();
    assert_eq!(scale_in.await.unwrap().unwrap(), report);
    let JobEvent::Scale(done) = next_event(&mut events).await else {
        panic!("not a scale event")
    };
    assert_eq!((done.cause, done.node, done.ok), ("scale-in", None, true));
    assert_eq!(done.report, report);

    let refused = control.rebalance_onto(&[WorkerId(7)], &[]).await;
    assert!(refused.is_err(), "{refused:?}");
    let JobEvent::Scale(refusal) = next_event(&mut events).await else {
        panic!("not a scale event")
    };
    assert_eq!((refusal.cause, refusal.ok), ("rebalance", false));
    let why = refusal.error.unwrap_or_default();
    assert!(
        why.contains("worker-7 is not one of the job's workers"),
        "{why}"
    );
}

/// Across processes each command of a `JobControl` is told as a scale event once it is
/// answered, as in one process (a refused one with why); a node process's leave, which is a
/// scale-in too, is not: the roster tells it, naming the node.
#[tokio::test]
async fn each_scale_command_across_processes_is_told_but_not_a_nodes_leave() {
    let (master, mut from_master) = scripted_master().await;
    let (control, inbox) = job_control();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (workers, servers) = ids(3);
    let job_started = std::time::Instant::now();
    tokio::spawn(serve_across(
        inbox.with_events(events_tx),
        master,
        workers,
        servers,
        job_started,
    ));
    // Node 0 leaves: its load moves away.
    let leave = tokio::spawn({
        let control = control.clone();
        async move {
            control
                .node_leaving(Some(WorkerId(0)), Some(ServerId(0)))
                .await
        }
    });
    let (onto_workers, onto_servers, reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_workers, vec![WorkerId(1), WorkerId(2)]);
    assert_eq!(onto_servers, vec![ServerId(1), ServerId(2)]);
    reply.send(Ok(ScaleReport::default())).unwrap();
    leave.await.unwrap().expect("the leave succeeds");
    // (A told answer is told before it is passed on.)
    assert!(
        events.try_recv().is_err(),
        "the leave was told as a command"
    );
    // Once it has gone, the roster has it forgotten.
    control.forget(Some(WorkerId(0)), Some(ServerId(0)));

    let scale_in = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(1)], &[]).await }
    });
    let (onto_workers, _, reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_workers, vec![WorkerId(2)]);
    assert!(events.try_recv().is_err(), "told before it was answered");
    let report = ScaleReport {
        executors_moved: 2,
        ..ScaleReport::default()
    };
    reply.send(Ok(report.clone())).unwrap();
    assert_eq!(scale_in.await.unwrap().unwrap(), report);
    let JobEvent::Scale(done) = next_event(&mut events).await else {
        panic!("not a scale event")
    };
    assert_eq!((done.cause, done.node, done.ok), ("scale-in", None, true));
    assert_eq!(done.report, report);
    assert!(done.at_s <= job_started.elapsed().as_secs_f64());

    let refused = control.scale_out(1, 0).await;
    assert!(refused.is_err(), "{refused:?}");
    let JobEvent::Scale(refusal) = next_event(&mut events).await else {
        panic!("not a scale event")
    };
    assert_eq!((refusal.cause, refusal.ok), ("scale-out", false));
    let why = refusal.error.unwrap_or_default();
    assert!(why.contains("grows when node processes join"), "{why}");

    let refused = control.rebalance_onto(&[WorkerId(0)], &[]).await;
    assert!(refused.is_err(), "{refused:?}");
    let JobEvent::Scale(refusal) = next_event(&mut events).await else {
        panic!("not a scale event")
    };
    assert_eq!((refusal.cause, refusal.ok), ("rebalance", false));
    let why = refusal.error.unwrap_or_default();
    assert!(
        why.contains("worker-0 is no longer one of the job's workers"),
        "{why}"
    );
    assert!(events.try_recv().is_err(), "one event per command");
}

/// A scale command the master still answers when the job ends is told before the run
/// function returns: the run awaits `CommandsTold`, which waits for the command's answer
/// (an error, once the master stopped) and its event.
#[tokio::test]
async fn the_end_of_a_job_waits_until_a_command_in_flight_is_told() {
    let (master, mut from_master) = scripted_master().await;
    let (control, mut inbox) = job_control();
    let told = inbox.commands_told();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (workers, servers) = ids(3);
    let serving = tokio::spawn(serve_across(
        inbox.with_events(events_tx),
        master,
        workers,
        servers,
        std::time::Instant::now(),
    ));
    let scale_in = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(0)], &[]).await }
    });
    let (_, _, reply) = next_rebalance(&mut from_master).await;
    // The job ends: its control loop stops...
    serving.abort();
    let waiting = tokio::spawn(told.wait());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the end did not wait for the command"
    );
    // ...and so does the master, dropping what it was answering.
    drop(reply);
    waiting.await.unwrap();
    let JobEvent::Scale(event) = events.try_recv().expect("told before the wait ended") else {
        panic!("not a scale event")
    };
    assert_eq!((event.cause, event.ok), ("scale-in", false));
    assert!(scale_in.await.unwrap().is_err());
}

#[tokio::test]
async fn a_server_crashed_while_a_scale_event_runs_is_not_named_live_when_it_ends() {
    let (control, mut from_master) = serve_in_one_process().await;
    // A scale event that moves worker 0's executors away runs...
    let scale_in = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(0)], &[]).await }
    });
    let (_, onto_servers, scale_reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_servers, ids(3).1);
    // ...and server 2, which it does not touch, fails meanwhile and is recovered.
    let crash = tokio::spawn({
        let control = control.clone();
        async move { control.crash_server(ServerId(2)).await }
    });
    match from_master
        .recv()
        .await
        .expect("the control asks the master")
    {
        MasterMsg::CrashServer { server, reply } => {
            assert_eq!(server, ServerId(2));
            let _ = reply.send(Ok(ServerRecovery {
                server: 2,
                shards: Vec::new(),
                rows_restored: 0,
                bytes_restored: 0,
                detected_at_s: 0.0,
                duration_s: 0.0,
                lost: None,
            }));
        }
        _ => panic!("expected the crash"),
    }
    crash.await.unwrap().expect("the crash is recovered");
    scale_reply.send(Ok(ScaleReport::default())).unwrap();
    scale_in.await.unwrap().expect("the scale event succeeds");

    let (workers, servers) = control.members().await.unwrap();
    assert_eq!(workers, vec![WorkerId(1), WorkerId(2)]);
    assert_eq!(servers, vec![ServerId(0), ServerId(1)], "server 2 failed");
    // The next scale event re-balances onto the servers that are left.
    let next = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(1)], &[]).await }
    });
    let (onto_workers, onto_servers, reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_workers, vec![WorkerId(2)]);
    assert_eq!(onto_servers, vec![ServerId(0), ServerId(1)]);
    reply.send(Ok(ScaleReport::default())).unwrap();
    next.await.unwrap().unwrap();
    // A command naming the failed server is refused, without asking the master. (From here
    // the master drops what it gets: a request that reached it fails as "not running".)
    drop(from_master);
    let refused = control.rebalance_onto(&[WorkerId(2)], &[ServerId(2)]).await;
    match refused {
        Err(HarpError::InvalidConfig(why)) => {
            assert!(
                why.contains("server-2 is no longer one of the job's servers"),
                "{why}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_node_forgotten_while_a_scale_event_runs_is_not_named_live_when_it_ends() {
    let (master, mut from_master) = scripted_master().await;
    let (control, inbox) = job_control();
    let (workers, servers) = ids(3);
    tokio::spawn(serve_across(
        inbox,
        master,
        workers,
        servers,
        std::time::Instant::now(),
    ));
    // Node 0 leaves: a scale event moves its worker's and server's load away...
    let leave = tokio::spawn({
        let control = control.clone();
        async move { control.scale_in(&[WorkerId(0)], &[ServerId(0)]).await }
    });
    let (onto_workers, onto_servers, leave_reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_workers, vec![WorkerId(1), WorkerId(2)]);
    assert_eq!(onto_servers, vec![ServerId(1), ServerId(2)]);
    // ...and node 2 dies meanwhile and is recovered. (`members` answers after the control
    // took the `Forget`: both go through its inbox in order.)
    control.forget(Some(WorkerId(2)), Some(ServerId(2)));
    assert_eq!(
        control.members().await.unwrap(),
        (ids(3).0[..2].to_vec(), ids(3).1[..2].to_vec())
    );
    leave_reply.send(Ok(ScaleReport::default())).unwrap();
    leave.await.unwrap().expect("the leave succeeds");

    assert_eq!(
        control.members().await.unwrap(),
        (vec![WorkerId(1)], vec![ServerId(1)]),
        "node 0 left and node 2 died"
    );
    // A node joining gets load beside node 1 only.
    let join = tokio::spawn({
        let control = control.clone();
        async move {
            control
                .node_joined(Some(WorkerId(3)), Some(ServerId(3)))
                .await
        }
    });
    let (onto_workers, onto_servers, reply) = next_rebalance(&mut from_master).await;
    assert_eq!(onto_workers, vec![WorkerId(1), WorkerId(3)]);
    assert_eq!(onto_servers, vec![ServerId(1), ServerId(3)]);
    reply.send(Ok(ScaleReport::default())).unwrap();
    join.await.unwrap().unwrap();
    // Naming the dead node is refused; naming one that never was the job's too. Neither
    // reaches the master, which from here drops what it gets.
    drop(from_master);
    for (server, why) in [
        (2, "server-2 is no longer one of the job's servers"),
        (9, "server-9 is not one of the job's servers"),
    ] {
        match control.scale_in(&[], &[ServerId(server)]).await {
            Err(HarpError::InvalidConfig(got)) => assert!(got.contains(why), "{got}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// Starts a scale-out of one worker and one server; the master answers its question
/// whether it may scale with `answer`. Returns the scale-out's task.
async fn scale_out_answered(
    control: &JobControl,
    from_master: &mut mpsc::UnboundedReceiver<MasterMsg<Running>>,
    answer: Result<(), HarpError>,
) -> tokio::task::JoinHandle<Result<ScaleReport, HarpError>> {
    let scaling = tokio::spawn({
        let control = control.clone();
        async move { control.scale_out(1, 1).await }
    });
    match from_master
        .recv()
        .await
        .expect("the control asks the master")
    {
        MasterMsg::CanScale { reply } => reply.send(answer).unwrap(),
        _ => panic!("expected the control to ask whether it may scale"),
    }
    scaling
}

/// In one process a scale-out the master would refuse (another scale event runs, or a
/// recovery is pending) starts no workers or servers; one it takes adds them after the
/// job's and re-balances onto all.
#[tokio::test]
async fn a_scale_out_the_master_refuses_starts_nothing() {
    let (control, mut from_master) = serve_in_one_process().await;
    let pending = "server-0 failed and its shards are being re-created".to_string();
    let refusal = Err(HarpError::RecoveryPending(pending));
    let refused = scale_out_answered(&control, &mut from_master, refusal).await;
    match refused.await.unwrap() {
        Err(HarpError::RecoveryPending(_)) => {}
        other => panic!("expected RecoveryPending, got {other:?}"),
    }
    assert_eq!(control.members().await.unwrap(), ids(3));

    // Nothing was added for the refused one: the next message asks again.
    let taken = scale_out_answered(&control, &mut from_master, Ok(())).await;
    match from_master.recv().await.expect("a worker is added") {
        MasterMsg::AddWorker(id, _) => assert_eq!(id, WorkerId(3)),
        _ => panic!("expected the new worker"),
    }
    match from_master.recv().await.expect("a server is added") {
        MasterMsg::AddServer(id, _) => assert_eq!(id, ServerId(3)),
        _ => panic!("expected the new server"),
    }
    let (onto_workers, onto_servers, reply) = next_rebalance(&mut from_master).await;
    assert_eq!((onto_workers, onto_servers), ids(4));
    reply.send(Ok(ScaleReport::default())).unwrap();
    taken.await.unwrap().expect("the scale-out succeeds");
    assert_eq!(control.members().await.unwrap(), ids(4));
}
