//! The master recovering a failed server while a scale event moves a shard (`recovery.rs`):
//! a shard move between two other servers does not stand in the way, the failed server's
//! shards go only to a server the event keeps, and a server a shard is moving from or to
//! cannot be recovered until the move ends. The move is held in flight for good: its old
//! owner is a [`SilentServer`], which never answers the hand-off.

use super::{MasterActor, MasterArgs, MasterMsg};
use crate::app::{Driver, DriverContext, JobInfo};
use crate::error::HarpError;
use crate::scar::{ScarOptions, ServerRecovery};
use crate::server::{ServerActor, ServerMsg};
use crate::test_support::{SilentServer, TestApp};
use crate::worker::WorkerMsg;
use crate::{AppError, Completion, ExecutorId, TableSet};
use harp_core::scar::Selection;
use harp_core::{ExecutorMap, ServerId, ShardMap, WorkerId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// An app whose driver dispatches one task, which its (quiet) worker never runs: the job
/// runs until stopped.
pub(super) type Running = TestApp<NeverDone>;

#[derive(Default)]
pub(super) struct NeverDone;

impl Driver<Running> for NeverDone {
    fn dispatch_initial_tasks(&mut self, ctx: &mut DriverContext<'_, ()>) -> Result<(), AppError> {
        Ok(ctx.dispatch(ExecutorId(0), ())?)
    }
    fn handle_task_completion(
        &mut self,
        _: Completion<()>,
        _: &mut DriverContext<'_, ()>,
    ) -> Result<(), AppError> {
        Ok(())
    }
}

/// A worker that takes every message and does nothing (no task is ever dispatched).
pub(super) struct QuietWorker;

impl Actor for QuietWorker {
    type Msg = WorkerMsg<Running>;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(())
    }
}

/// A running master of a job with a SCAR running checkpoint, one (quiet) worker and
/// `servers`, one shard each (shard `i` on the `i`-th), routing to `routes`.
pub(super) async fn start_master(
    servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
    routes: Vec<super::RouteTarget>,
) -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let (done, end) = oneshot::channel();
    let args = MasterArgs::<Running> {
        driver: NeverDone,
        info: JobInfo {
            num_executors: 1,
            num_workers: 1,
            num_servers: servers.len() as u32,
        },
        tables: Arc::new(TableSet::new()),
        scar: Some(ScarOptions {
            period: 8,
            fraction: 0.25,
            selection: Selection::Priority,
            ..ScarOptions::default()
        }),
        worker_recovery: false,
        done,
    };
    let (master, _) = Actor::spawn(None, MasterActor::<Running>::new(), args)
        .await
        .unwrap();
    let (worker, _) = Actor::spawn(None, QuietWorker, ()).await.unwrap();
    let ids: Vec<ServerId> = servers.keys().copied().collect();
    master
        .send_message(MasterMsg::Start {
            workers: BTreeMap::from([(WorkerId(0), worker)]),
            executors: ExecutorMap::round_robin(1, &[WorkerId(0)]).unwrap(),
            servers,
            shards: ShardMap::round_robin(ids.len() as u32, &ids).unwrap(),
            routes,
            server_places: Vec::new(),
        })
        .unwrap();
    (master, end)
}

/// Real servers `0..n` of a job without tables.
pub(super) async fn real_servers(n: u32) -> BTreeMap<ServerId, ActorRef<ServerMsg>> {
    let tables = Arc::new(TableSet::new());
    let mut servers = BTreeMap::new();
    for id in 0..n {
        let (server, _) = Actor::spawn(None, ServerActor, (ServerId(id), tables.clone()))
            .await
            .unwrap();
        servers.insert(ServerId(id), server);
    }
    servers
}

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

/// How the master's job ended (it must not, before the test stops it).
pub(super) type JobEnd = oneshot::Receiver<Result<super::MasterEnd<Running>, HarpError>>;

pub(super) async fn crash(
    master: &ActorRef<MasterMsg<Running>>,
    server: u32,
) -> Result<ServerRecovery, HarpError> {
    let (reply, answer) = oneshot::channel();
    master
        .send_message(MasterMsg::CrashServer {
            server: ServerId(server),
            reply,
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
