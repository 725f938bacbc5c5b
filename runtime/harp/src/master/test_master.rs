//! A master actor for unit tests of the master (cfg(test)): a job with a SCAR running
//! checkpoint, one quiet worker that never runs a task, and the servers a test gives it
//! ([`start_master`], [`real_servers`]); [`crash`] injects a server failure and returns the
//! recovery's report.

use super::{MasterActor, MasterArgs, MasterMsg};
use crate::app::{Driver, DriverContext, JobInfo};
use crate::error::HarpError;
use crate::scar::{ScarOptions, ServerRecovery};
use crate::server::{ServerActor, ServerMsg};
use crate::test_support::TestApp;
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
pub(crate) type Running = TestApp<NeverDone>;

#[derive(Default)]
pub(crate) struct NeverDone;

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
pub(crate) struct QuietWorker;

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
pub(crate) async fn start_master(
    servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
    routes: Vec<super::RouteTarget>,
) -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let ids: Vec<ServerId> = servers.keys().copied().collect();
    let shards = ShardMap::round_robin(ids.len() as u32, &ids).unwrap();
    start_master_with_shards(servers, routes, shards).await
}

/// [`start_master`] with the shards placed as `shards` says.
pub(crate) async fn start_master_with_shards(
    servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
    routes: Vec<super::RouteTarget>,
    shards: ShardMap,
) -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let (master, end) = spawn_master(servers.len() as u32).await;
    start(&master, servers, routes, shards).await;
    (master, end)
}

/// A master of a job of `num_servers` servers, not started yet ([`start`]).
pub(crate) async fn spawn_master(num_servers: u32) -> (ActorRef<MasterMsg<Running>>, JobEnd) {
    let (done, end) = oneshot::channel();
    let args = MasterArgs::<Running> {
        driver: NeverDone,
        info: JobInfo {
            num_executors: 1,
            num_workers: 1,
            num_servers,
        },
        tables: Arc::new(TableSet::new()),
        scar: Some(ScarOptions {
            period: 8,
            fraction: 0.25,
            selection: Selection::Priority,
            ..ScarOptions::default()
        }),
        worker_recovery: false,
        events: Default::default(),
        done,
    };
    let (master, _) = Actor::spawn(None, MasterActor::<Running>::new(), args)
        .await
        .unwrap();
    (master, end)
}

/// Starts `master`'s job: one quiet worker and `servers`, the shards placed as `shards`
/// says, routing to `routes`.
pub(crate) async fn start(
    master: &ActorRef<MasterMsg<Running>>,
    servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
    routes: Vec<super::RouteTarget>,
    shards: ShardMap,
) {
    let (worker, _) = Actor::spawn(None, QuietWorker, ()).await.unwrap();
    master
        .send_message(MasterMsg::Start {
            workers: BTreeMap::from([(WorkerId(0), worker)]),
            executors: ExecutorMap::round_robin(1, &[WorkerId(0)]).unwrap(),
            servers,
            shards,
            routes,
            server_places: Vec::new(),
        })
        .unwrap();
}

/// Real servers `0..n` of a job without tables.
pub(crate) async fn real_servers(n: u32) -> BTreeMap<ServerId, ActorRef<ServerMsg>> {
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

/// How the master's job ended (it must not, before the test stops it).
pub(crate) type JobEnd = oneshot::Receiver<Result<super::MasterEnd<Running>, HarpError>>;

pub(crate) async fn crash(
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
