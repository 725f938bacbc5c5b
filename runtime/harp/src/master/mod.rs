//! The master actor: hosts the app's driver, keeps the version clock and the executor map,
//! tags and routes dispatched micro-tasks, and hands completions to the driver.
//!
//! Completions arrive only after the flush carrying their updates was applied, so a task the
//! driver dispatches while handling completion `c` observes `c`'s updates (DESIGN §2.1).
//!
//! Scale events (moving executors and shards while the job runs) live in [`moves`]; SCAR's
//! running checkpoint in [`checkpoints`]; the partial recovery of a failed server in
//! [`recovery`]; consistent checkpoints (hold, capture, background write, resume start) in
//! [`consistent`].
//!
//! In a job that recovers worker nodes ([`worker_recovery`]), completions arrive as staged
//! flushes instead: the master commits each flush on its servers and waits until they all
//! applied it before handing its completions to the driver, so the guarantee above holds
//! although the servers hear the commit from the master and the task's reads come from the
//! workers. The master also keeps every dispatched task ([`task_book`]) until its
//! completion is handed over, to run again those of a dead worker node whose updates were
//! not committed.

#[cfg(test)]
mod add_node_tests;
mod checkpoints;
mod consistent;
#[cfg(test)]
mod end_wait_tests;
#[cfg(test)]
mod forget_node_tests;
mod inject;
mod moves;
mod moves_under_recovery;
mod recovery;
#[cfg(test)]
mod recovery_during_scale_tests;
#[cfg(test)]
mod scale_before_start_tests;
#[cfg(test)]
mod stop_tests;
mod task_book;
#[cfg(test)]
pub(crate) mod test_master;
mod worker_recovery;

pub(crate) use consistent::{ConsistentEnd, ConsistentSetup, ResumeStart, WriteSetup};
pub(crate) use inject::Held;
pub(crate) use moves::ExecutorInMotion;
pub use moves::{MoveRecord, ScaleReport};
pub(crate) use worker_recovery::CommitDone;

use crate::app::{App, Completion, Driver, DriverContext, JobInfo};
use crate::control::EventSink;
use crate::error::HarpError;
use crate::node::ParamStore;
use crate::scar::{CheckpointStats, ScarOptions, ServerRecovery};
use crate::server::checkpoint_round::ServerSave;
use crate::server::{ServerMsg, ShardMoved};
use crate::table::TableSet;
use crate::worker::{ReleasedExecutor, TaskEnvelope, WorkerMsg};
use checkpoints::{RoundDone, RunningCheckpoint};
use harp_core::{
    ExecutorId, ExecutorMap, ServerId, ShardId, ShardMap, TaskId, Version, VersionClock, WorkerId,
};
use inject::Injected;
use ractor::{Actor, ActorProcessingErr, ActorRef};
pub(crate) use recovery::Acknowledged;
use recovery::{Recovered, RecoveryReply};
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Messages the master handles.
pub(crate) enum MasterMsg<A: App> {
    /// Every worker is up: run the driver's initial dispatch.
    Start {
        workers: BTreeMap<WorkerId, ActorRef<WorkerMsg<A>>>,
        executors: ExecutorMap,
        servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
        shards: ShardMap,
        /// Every node's routing, told when a shard changes owner.
        routes: Vec<RouteTarget>,
        /// Where each server node listens (jobs across processes), for nodes that join later.
        server_places: Vec<harp_wire::ServerPlace>,
    },
    /// A worker joined the running job (it hosts nothing until a re-balancing).
    AddWorker(WorkerId, ActorRef<WorkerMsg<A>>),
    /// A server joined the running job (it holds nothing until a re-balancing). A joining
    /// node process's server is announced to the other nodes now, once that node is ready
    /// (see `AddNode`).
    AddServer(ServerId, ActorRef<ServerMsg>),
    /// A node process joined the running job: send it its (empty) assignment and the
    /// current placement (its own server included), and route shard moves to it from now
    /// on. Done here, in order with the reroutes and with other joins, so no node misses a
    /// reroute or a server. The other nodes learn of its server only with `AddServer`,
    /// after the node said it is ready: one that never gets ready (its data is missing, its
    /// tables differ) is never dialled by them.
    AddNode {
        node: u32,
        link: harp_net::Link,
        assignment: harp_wire::Assignment,
        server: Option<harp_wire::ServerPlace>,
        reply: oneshot::Sender<Result<(), HarpError>>,
    },
    /// A node left the job (or died, or never got ready): nodes that join later do not
    /// dial its server, and nothing of the master counts on its worker or server any more.
    ForgetNode(u32),
    /// A node left the job (its load moved away, its server drained): `ForgetNode`, after a
    /// check that it hosts no executor any more.
    NodeLeft(u32),
    /// Whether a scale event could start now (`Err`: why not). In one process a scale-out
    /// asks first, so one that would be refused starts no workers and servers.
    CanScale {
        reply: oneshot::Sender<Result<(), HarpError>>,
    },
    /// Re-balance onto these workers and servers; the others give their load away.
    Rebalance {
        live_workers: Vec<WorkerId>,
        live_servers: Vec<ServerId>,
        reply: oneshot::Sender<Result<ScaleReport, HarpError>>,
    },
    /// A worker gave an executor up for a move (internal).
    ExecutorReleased {
        executor: ExecutorId,
        from: WorkerId,
        result: Result<ReleasedExecutor<A>, HarpError>,
    },
    /// The new worker of a moving executor runs it, or could not take it (internal).
    ExecutorAdopted {
        executor: ExecutorId,
        result: Result<(), HarpError>,
    },
    /// A server handed a shard over (internal). `hand_off` numbers the hand-off: a late
    /// answer to one that already ended is not taken for a later move of the same shard.
    ShardHandedOff {
        shard: ShardId,
        to: ServerId,
        hand_off: u64,
        result: Result<ShardMoved, HarpError>,
    },
    /// Micro-tasks whose updates are applied.
    Completed(Vec<Completion<A::Output>>),
    /// Worker recovery: node `node` staged flush `flush` on `servers`; `completions` are the
    /// tasks whose updates it carries, handed to the driver once it is committed.
    FlushStaged {
        node: u32,
        flush: u64,
        servers: Vec<ServerId>,
        completions: Vec<Completion<A::Output>>,
    },
    /// Every server holding a part of a staged flush applied it (internal).
    FlushCommitted(CommitDone),
    /// Worker recovery: answer once no staged flush being committed has a part on `server`
    /// (a leaving server the nodes drained: its node departs after, and a part it still
    /// held would be lost with it).
    AwaitCommitsOn {
        server: ServerId,
        reply: oneshot::Sender<()>,
    },
    /// Across processes, on a node only: the node drained a leaving server (request
    /// `request_id`). Its master proxy sends it on the master link after every staged
    /// flush the node reported before, so the master commits those first.
    ServerDrained { request_id: u64 },
    /// Worker recovery: the worker node `node` died (`cause`: how the master learnt it).
    WorkerLost { node: u32, cause: String },
    /// A dead worker's executor runs on its new worker, or could not be created (internal).
    ExecutorRecreated {
        executor: ExecutorId,
        on: WorkerId,
        result: Result<(), HarpError>,
    },
    /// A checkpoint round ended (internal).
    CheckpointRoundDone(RoundDone),
    /// The driver finished while a checkpoint round ran, and the job has waited
    /// [`checkpoints::ROUND_AT_END_WAIT`] for it (internal).
    RoundAtEndWaitOver,
    /// A stopped job has waited its `ConsistentOptions::stop_wait` for its last
    /// checkpoint (internal): it ends without it if it is still not captured.
    StopWaitOver,
    /// Fault injection: make `server` (in this process) fail now, then recover from it as
    /// from any failure; the reply gets the recovery's report.
    CrashServer {
        server: ServerId,
        reply: oneshot::Sender<Result<ServerRecovery, HarpError>>,
    },
    /// A server crashed by fault injection had these counters (internal): the job's sums
    /// keep them.
    CrashedServerCounted(crate::server::ServerStats),
    /// `server` failed (`at_failure`: its rows at the failure, when known; `acknowledged`:
    /// across processes, what the live nodes report it acknowledged since each row's last
    /// save): re-create its shards from the running checkpoint.
    ServerLost {
        server: ServerId,
        at_failure: Option<Vec<(harp_core::ParamKey, harp_core::RowData)>>,
        acknowledged: Option<recovery::Acknowledged>,
        reply: RecoveryReply,
    },
    /// The live servers hold a failed server's shards (internal).
    Recovered(Recovered),
    /// Injected faults are in place (internal).
    Injected(Injected),
    /// Consistent checkpoints and the resume point (in one process and across processes,
    /// before `Start`).
    Consistent(Box<ConsistentSetup<A>>),
    /// Something the job cannot continue after.
    Failed(HarpError),
    /// Stop the job, with [`HarpError::Stopped`] (`JobControl::stop`): no more micro-tasks
    /// are handed out and the caller tells every node. A job that writes consistent
    /// checkpoints first takes one more once nothing is in flight, so that it resumes from
    /// where it was stopped; a checkpoint being written is finished.
    Stop { reason: String },
}

/// Sends the master `message` after `wait`: the end of a deadline, which the master may
/// no longer need (the job ended, or what it waited for came first).
fn tell_after<A: App>(
    master: &ActorRef<MasterMsg<A>>,
    wait: std::time::Duration,
    message: MasterMsg<A>,
) {
    let master = master.clone();
    crate::spawn::spawn(async move {
        tokio::time::sleep(wait).await;
        let _ = master.send_message(message);
    });
}

/// A scale command's live workers and servers and where its report goes.
type Rebalance = (
    Vec<WorkerId>,
    Vec<ServerId>,
    oneshot::Sender<Result<ScaleReport, HarpError>>,
);

/// A node's routing of parameter traffic: its store in this process, or the link to a node
/// process (told with `Message::Reroute`).
pub(crate) enum RouteTarget {
    Local(Arc<ParamStore>),
    /// Node `node`'s process, over its link.
    Remote {
        node: u32,
        link: harp_net::Link,
    },
}

impl RouteTarget {
    /// Sends `shard`'s traffic to `server` from now on.
    fn reroute(&self, shard: ShardId, server: ServerId) -> Result<(), HarpError> {
        match self {
            RouteTarget::Local(store) => store.reroute(shard, server),
            RouteTarget::Remote { link, .. } => {
                // A node that is gone no longer routes anything.
                let _ = link.send(&harp_wire::Message::Reroute {
                    shard: shard.0,
                    server: server.0,
                });
                Ok(())
            }
        }
    }

    /// Sends a node process `messages` (e.g. that a server left). Nodes in this process
    /// hold no links.
    fn tell(&self, messages: &[harp_wire::Message]) {
        if let RouteTarget::Remote { link, .. } = self {
            for message in messages {
                if link.send(message).is_err() {
                    return; // a node that is gone no longer keeps anything
                }
            }
        }
    }

    /// Tells a node process of a save in the image ([`SaveTold`]): first the parts of it
    /// the save lists as applied, if any, then the saved keys. Nodes in this process keep
    /// no ledger (an in-process failure is injected, and its values at the failure are read
    /// from the server) and send no part again.
    fn tell_save(&self, told: &SaveTold) {
        let RouteTarget::Remote { node, link } = self else {
            return;
        };
        if let Some(applied) = told.applied.get(node) {
            let message = harp_wire::Message::RowsSaved {
                server: told.server,
                epoch: told.epoch,
                keys: Vec::new(),
                applied: applied.clone(),
            };
            if link.send(&message).is_err() {
                return; // a node that is gone no longer keeps anything
            }
        }
        self.tell(&told.keys);
    }

    /// `server` failed and routes nothing any more (its shards were rerouted first).
    fn forget_server(&self, server: ServerId) {
        match self {
            RouteTarget::Local(store) => store.forget_server(server),
            // After the reroutes, on the same ordered stream. A node that is gone no longer
            // routes anything.
            RouteTarget::Remote { link, .. } => {
                let _ = link.send(&harp_wire::Message::ServerLost { server: server.0 });
            }
        }
    }
}

/// A server's save (its epoch, its keys) is in the checkpoint's image: a node process may
/// forget the deltas it keeps of what the server applied to them before it
/// (`node/lost_ledger.rs`), and drops those rows from the flush parts it still holds that
/// the save lists as applied (`server/applied_parts.rs`). The keys go in parts of
/// [`harp_wire::KEYS_PER_PART`], each a message of its own, so no save is too large for
/// one message, made once for every node; each node gets only its own applied parts, in a
/// message of their own before the keys ([`RouteTarget::tell_save`]).
pub(crate) struct SaveTold {
    server: u32,
    epoch: u64,
    keys: Vec<harp_wire::Message>,
    applied: HashMap<u32, Vec<harp_wire::AppliedPartWire>>,
}

impl SaveTold {
    pub(crate) fn new(save: &ServerSave) -> Self {
        let (server, epoch) = (save.server.0, save.epoch);
        let keys = save
            .keys
            .chunks(harp_wire::KEYS_PER_PART)
            .map(|part| harp_wire::Message::RowsSaved {
                server,
                epoch,
                keys: part.iter().map(|k| (*k).into()).collect(),
                applied: Vec::new(),
            })
            .collect();
        let mut applied: HashMap<u32, Vec<harp_wire::AppliedPartWire>> = HashMap::new();
        for part in crate::remote::codec::applied_to_wire(&save.applied) {
            applied.entry(part.node).or_default().push(part);
        }
        SaveTold {
            server,
            epoch,
            keys,
            applied,
        }
    }
}

/// What the master hands back when the job ends.
pub(crate) struct MasterEnd<A: App> {
    pub driver: A::Driver,
    pub tasks_completed: u64,
    pub final_version: Version,
    pub checkpoints: CheckpointStats,
    pub recoveries: Vec<ServerRecovery>,
    /// Every dead worker node recovered from (worker recovery).
    pub worker_recoveries: Vec<crate::scar::WorkerRecovery>,
    pub injections: Vec<crate::scar::InjectionReport>,
    /// The counters of the servers fault injection crashed, summed as they were then.
    pub crashed_servers: crate::server::ServerStats,
    /// The job's parameter shards.
    pub shards: u32,
    /// The consistent checkpoint still being written, if any.
    pub consistent: Option<ConsistentEnd>,
}

pub(crate) struct MasterArgs<A: App> {
    pub driver: A::Driver,
    pub info: JobInfo,
    pub tables: Arc<TableSet>,
    /// SCAR's running checkpoint, if the job keeps one.
    pub scar: Option<ScarOptions>,
    /// Recover dead worker nodes: flushes are committed here and dispatched tasks kept.
    pub worker_recovery: bool,
    /// Where injected faults and recoveries are told as they happen.
    pub events: EventSink,
    pub done: oneshot::Sender<Result<MasterEnd<A>, HarpError>>,
}

pub(crate) struct MasterState<A: App> {
    driver: Option<A::Driver>,
    info: JobInfo,
    clock: VersionClock,
    executors: ExecutorMap,
    workers: BTreeMap<WorkerId, ActorRef<WorkerMsg<A>>>,
    servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
    shards: ShardMap,
    routes: Vec<RouteTarget>,
    /// Placements sent to nodes that joined after the start (the first one is 1).
    placement_epoch: u64,
    /// Where each server node of the job listens (jobs across processes).
    server_places: BTreeMap<u32, harp_wire::ServerPlace>,
    /// The servers of joining node processes that are not ready yet: told only to their
    /// own node until then.
    joining_places: BTreeMap<u32, harp_wire::ServerPlace>,
    moving: BTreeMap<ExecutorId, ExecutorInMotion<A>>,
    /// Executors a new worker was asked to adopt, until it answers.
    adopting: BTreeMap<ExecutorId, moves::Adopting>,
    scale: Option<moves::ScaleInProgress>,
    /// Scale commands that came before `Start` (the master did not know its workers and
    /// servers yet): carried out right after it, in order. `None` once started.
    before_start: Option<Vec<Rebalance>>,
    next_task: u64,
    in_flight: u64,
    completed: u64,
    tables: Arc<TableSet>,
    checkpoint: Option<RunningCheckpoint>,
    recoveries: Vec<ServerRecovery>,
    /// Shards that ever changed owner (a move or a recovery): a dead server's lost updates
    /// are known exactly only on shards it held from the start (`recovery.rs`).
    shards_moved: std::collections::BTreeSet<ShardId>,
    /// Servers the latest scale event empties or emptied (they were not among its live
    /// servers): a failed server's shards never go there (`recovery.rs`).
    given_away: std::collections::BTreeSet<ServerId>,
    /// Workers the latest scale event empties or emptied (they were not among its live
    /// workers): a dead worker node's executors never go there (`worker_recovery.rs`).
    workers_given_away: std::collections::BTreeSet<WorkerId>,
    /// Shard hand-offs asked for and not confirmed, `shard → (old owner, new owner)`: the
    /// old owner may have sent the rows, and the new one may hold them. One whose old owner
    /// vanished before answering stays until a recovery re-creates the shard, on the new
    /// owner (`moves.rs`, `recovery.rs`).
    unconfirmed_hand_offs: BTreeMap<ShardId, (ServerId, ServerId)>,
    /// The server each moved shard was last handed off from: it may still forward the
    /// shard's requests, so a recovery re-creates the shard there when it can
    /// (`recovery.rs`, `server/stranded.rs`).
    came_from: BTreeMap<ShardId, ServerId>,
    /// Server recoveries started so far: each one's take-overs carry its number, so that a
    /// new owner drops what a failed hand-off left there first (`server::Restore`).
    restore_generation: u64,
    /// Failed servers whose shards are being re-created (the take-overs are in flight): the
    /// shard map still names them, so no scale event starts until they are done
    /// (`recovery.rs`).
    servers_recovering: std::collections::BTreeSet<ServerId>,
    /// Shard hand-offs asked for so far: each one's number tells its answer from a late
    /// answer to an earlier hand-off of the same shard (`moves.rs`).
    hand_offs_begun: u64,
    /// Dispatches held while injected faults are applied.
    held: Option<Held<A::Args>>,
    /// The iteration whose checkpoint round waits for the injections to end.
    deferred_iteration: Option<u64>,
    /// Injected faults are being applied (dispatches are held).
    injecting: bool,
    /// Consistent checkpoints, if the job takes them or resumed from one.
    consistent: Option<consistent::ConsistentCheckpoint<A>>,
    /// The job is being stopped (`MasterMsg::Stop`, the reason) and waits for its last
    /// checkpoint's capture (`consistent.rs::checkpoint_before_stop`).
    stopping: Option<String>,
    injections: Vec<crate::scar::InjectionReport>,
    /// The counters of the servers fault injection crashed, summed.
    crashed_servers: crate::server::ServerStats,
    /// Staged flushes, dispatched tasks and dead workers, if the job recovers workers.
    worker_recovery: Option<worker_recovery::WorkerRecoveryState<A::Output>>,
    /// The driver finished while a checkpoint round ran: the job ends when the round does
    /// (or the wait for it is over), and nothing else is handled meanwhile.
    ending_after_round: bool,
    /// When the master started: the origin of the server and worker recovery reports'
    /// `detected_at_s`.
    started: std::time::Instant,
    /// Where injected faults and server recoveries are told as they happen (worker
    /// recoveries: [`worker_recovery::WorkerRecoveryState`] holds a clone).
    events: EventSink,
    done: Option<oneshot::Sender<Result<MasterEnd<A>, HarpError>>>,
}

pub(crate) struct MasterActor<A>(PhantomData<fn() -> A>);

impl<A> MasterActor<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: App> MasterState<A> {
    /// Runs one driver callback, then tags and routes what it dispatched.
    fn drive(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        call: impl FnOnce(
            &mut A::Driver,
            &mut DriverContext<'_, A::Args>,
        ) -> Result<(), crate::AppError>,
    ) -> Result<bool, HarpError> {
        let Some(driver) = self.driver.as_mut() else {
            return Ok(true);
        };
        let mut dispatched = Vec::new();
        let mut finish = false;
        let mut iteration = None;
        let version = self.clock.current();
        let mut ctx = DriverContext::new(
            version,
            self.info.num_executors,
            &mut dispatched,
            &mut finish,
            &mut iteration,
        );
        call(driver, &mut ctx).map_err(HarpError::DriverFailed)?;
        let injecting = match iteration {
            Some(i) if self.held.is_none() => self.start_injections(myself, i),
            _ => false,
        };
        if let Some(i) = iteration {
            // Holds what follows if a consistent checkpoint is due.
            self.consistent_due(i);
        }
        if self.held.is_some() {
            // Faults are being injected: these tasks run once they are in place.
            self.hold(dispatched, version);
            if let (false, Some(i)) = (injecting, iteration) {
                self.deferred_iteration = self.deferred_iteration.max(Some(i));
            }
        } else {
            self.route(dispatched, version)?;
            if let Some(iteration) = iteration {
                self.iteration_completed(myself, iteration);
            }
        }
        Ok(finish || self.in_flight == 0)
    }

    /// Node `node` left the job (or died, or never got ready): nodes that join later do not
    /// dial its server, and the master stops counting on its worker and server. No
    /// checkpoint round, consistent checkpoint or recovery asks that server for anything (a
    /// round asked a server whose node had left, and waited for good), and no worker
    /// recovery re-creates executors on that worker (they were re-created on a worker whose
    /// node had left, and the job failed). A worker or server that still holds executors or
    /// shards (a node that died, whose recovery has not moved them yet) stays listed: its
    /// recovery takes it out.
    fn forget_node(&mut self, node: u32) {
        self.server_places.remove(&node);
        self.joining_places.remove(&node);
        // Nothing is routed to a node that is gone (told every reroute and save, the routes
        // of departed nodes added up over a long elastic job).
        self.routes
            .retain(|route| !matches!(route, RouteTarget::Remote { node: n, .. } if *n == node));
        let server = ServerId(node);
        // One a shard was on its way to still has it to give back (its recovery follows).
        let receiving = (self.unconfirmed_hand_offs.values()).any(|(_, to)| *to == server);
        if self.shards.shards_on(server).is_empty() && !receiving {
            if let Some(proxy) = self.servers.remove(&server) {
                tracing::debug!(%server, "the master forgets a server that is gone");
                proxy.stop(Some("its node left the job".into()));
                // The node processes stop their links to it too (after the reroutes of its
                // shards, on the same ordered streams).
                let left = [harp_wire::Message::ServerLeft { server: node }];
                for route in &self.routes {
                    route.tell(&left);
                }
            }
        }
        let worker = WorkerId(node);
        if self.executors.executors_on(worker).is_empty() {
            if let Some(proxy) = self.workers.remove(&worker) {
                tracing::debug!(%worker, "the master forgets a worker that is gone");
                proxy.stop(Some("its node left the job".into()));
            }
        }
    }

    /// Node `node` left the job ([`MasterMsg::NodeLeft`]): forgotten, unless its worker
    /// still hosts executors (nothing should let that happen: a leave moves them away
    /// first, and no recovery places one on a worker a scale event empties), which is
    /// handled as a dead worker node instead of left with tasks nobody runs: recovered with
    /// worker recovery, the end of the job (`NodeDied`) without.
    fn node_left(&mut self, myself: &ActorRef<MasterMsg<A>>, node: u32) -> Result<(), HarpError> {
        let worker = WorkerId(node);
        // A buried worker hosts nothing: its recovery placed its executors elsewhere.
        if !self.executors.executors_on(worker).is_empty() {
            let cause = "it left the job while it still hosted executors".to_string();
            tracing::error!(node, %worker, "{cause}: handled as a dead worker node");
            self.on_worker_lost(myself, node, cause)?;
        }
        self.forget_node(node);
        Ok(())
    }

    /// Starts a checkpoint round if one is due after `iteration`.
    fn iteration_completed(&mut self, myself: &ActorRef<MasterMsg<A>>, iteration: u64) {
        let round_servers = self.round_servers();
        let Some(checkpoint) = self.checkpoint.as_mut() else {
            return;
        };
        if let Some(round) = checkpoint.iteration_completed(iteration, round_servers) {
            checkpoints::spawn_round(myself, round);
        }
    }

    /// Fault injection: fails `server` now and recovers from it (the reply gets the report).
    /// Not while a shard moves from or to it: an injected failure picks a quiet moment (a
    /// real one, `ServerLost`, is recovered from in the middle of a move from it too).
    fn crash_server(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        server: ServerId,
        reply: oneshot::Sender<Result<ServerRecovery, HarpError>>,
    ) {
        let moving = self
            .scale
            .as_ref()
            .is_some_and(|scale| scale.moves_a_shard_of(server));
        if moving {
            let _ = reply.send(Err(HarpError::Unrecoverable {
                server,
                reason:
                    "a scale event was moving a shard from or to it; inject again once it ended"
                        .into(),
            }));
            return;
        }
        if let Err(e) = self.recoverable(server) {
            let _ = reply.send(Err(e));
            return;
        }
        let Some(actor) = self.servers.get(&server).cloned() else {
            return; // recoverable() checked it is there
        };
        let (rows_tx, rows) = oneshot::channel();
        if actor
            .send_message(ServerMsg::Crash { reply: rows_tx })
            .is_err()
        {
            let _ = reply.send(Err(HarpError::ServerUnreachable(server)));
            return;
        }
        let myself = myself.clone();
        crate::spawn::spawn(async move {
            // A server that cannot answer died before the injection: its values are unknown.
            let crashed = rows.await.ok();
            let at_failure = crashed.map(|crashed| {
                // Before the loss, so the job's end has them (the mailbox keeps the order).
                let _ = myself.send_message(MasterMsg::CrashedServerCounted(crashed.stats));
                crashed.rows
            });
            let _ = myself.send_message(MasterMsg::ServerLost {
                server,
                at_failure,
                acknowledged: None,
                reply: Some(reply),
            });
        });
    }

    /// Hands completed micro-tasks to the driver, one at a time, each after the version
    /// moved on; stops at the first that ends the job.
    fn hand_to_driver(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        completions: Vec<Completion<A::Output>>,
    ) -> Result<bool, HarpError> {
        let mut finished = Ok(false);
        for completion in completions {
            if !self.first_delivery(completion.task) {
                continue;
            }
            self.in_flight = self.in_flight.saturating_sub(1);
            self.completed += 1;
            self.clock.on_completion();
            finished = self.drive(myself, |d, ctx| d.handle_task_completion(completion, ctx));
            if !matches!(finished, Ok(false)) {
                break;
            }
        }
        finished
    }

    fn route(
        &mut self,
        dispatched: Vec<(ExecutorId, A::Args)>,
        version: Version,
    ) -> Result<(), HarpError> {
        let mut per_worker: BTreeMap<WorkerId, Vec<TaskEnvelope<A::Args>>> = BTreeMap::new();
        for (executor, args) in dispatched {
            let worker = self.executors.worker_of(executor)?;
            let task = TaskId(self.next_task);
            self.next_task += 1;
            let envelope = TaskEnvelope {
                task,
                executor,
                version,
                args,
            };
            self.keep_dispatched(&envelope)?;
            if let Some(motion) = self.moving.get_mut(&executor) {
                // Held until the executor arrives at its new worker.
                motion.buffered.push(envelope);
                self.in_flight += 1;
                continue;
            }
            per_worker.entry(worker).or_default().push(envelope);
        }
        for (worker, tasks) in per_worker {
            let count = tasks.len() as u64;
            let actor = self
                .workers
                .get(&worker)
                .ok_or(HarpError::WorkerUnreachable(worker))?;
            actor
                .send_message(WorkerMsg::Run(tasks))
                .map_err(|_| HarpError::WorkerUnreachable(worker))?;
            self.in_flight += count;
        }
        Ok(())
    }

    fn add_node(
        &mut self,
        node: u32,
        link: harp_net::Link,
        assignment: harp_wire::Assignment,
        server: Option<harp_wire::ServerPlace>,
    ) -> Result<(), HarpError> {
        let own = server.clone().into_iter();
        let servers = self.server_places.values().cloned().chain(own).collect();
        let placement = self.placement(servers);
        if let Some(place) = server {
            self.joining_places.insert(place.server, place);
        }
        link.send(&harp_wire::Message::Assign(assignment))?;
        link.send(&harp_wire::Message::Placement(placement))?;
        self.routes.push(RouteTarget::Remote { node, link });
        Ok(())
    }

    /// A joining node's server is ready: every other node process learns where it listens
    /// (the node itself knew from its own placement).
    fn announce_joined_server(&mut self, server: ServerId) {
        let Some(place) = self.joining_places.remove(&server.0) else {
            return; // a server of the job's start, or one of a job in one process
        };
        self.server_places.insert(place.server, place);
        let placement = self.placement(self.server_places.values().cloned().collect());
        let message = harp_wire::Message::Placement(placement);
        for route in &self.routes {
            if let RouteTarget::Remote { node, link } = route {
                if *node != server.0 {
                    // A node that is gone no longer needs it.
                    let _ = link.send(&message);
                }
            }
        }
    }

    /// The shards' owners and where `servers` listen, under a new epoch.
    fn placement(&mut self, servers: Vec<harp_wire::ServerPlace>) -> harp_wire::Placement {
        self.placement_epoch += 1;
        harp_wire::Placement {
            epoch: self.placement_epoch,
            num_shards: self.shards.num_shards(),
            shards: (0..self.shards.num_shards())
                .filter_map(|s| {
                    let server = self.shards.server_of(ShardId(s)).ok()?;
                    Some(harp_wire::ShardPlace {
                        shard: s,
                        server: server.0,
                    })
                })
                .collect(),
            servers,
        }
    }

    fn end(&mut self, result: Result<(), HarpError>) {
        let Some(done) = self.done.take() else { return };
        let outcome = match (result, self.driver.take()) {
            (Ok(()), Some(driver)) => Ok(MasterEnd {
                driver,
                tasks_completed: self.completed,
                final_version: self.clock.current(),
                checkpoints: self
                    .checkpoint
                    .as_ref()
                    .map(RunningCheckpoint::stats)
                    .unwrap_or_default(),
                recoveries: std::mem::take(&mut self.recoveries),
                worker_recoveries: self
                    .worker_recovery
                    .as_mut()
                    .map(|r| r.take_reports())
                    .unwrap_or_default(),
                injections: std::mem::take(&mut self.injections),
                crashed_servers: self.crashed_servers,
                shards: self.shards.num_shards(),
                consistent: self.consistent.as_mut().map(|c| c.end()),
            }),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(HarpError::MasterUnreachable),
        };
        // run_job is waiting on the other end unless it was dropped.
        let _ = done.send(outcome);
    }
}

impl<A: App> Actor for MasterActor<A> {
    type Msg = MasterMsg<A>;
    type State = MasterState<A>;
    type Arguments = MasterArgs<A>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let checkpoint = args.scar.map(RunningCheckpoint::new).transpose()?;
        Ok(MasterState {
            driver: Some(args.driver),
            info: args.info,
            clock: VersionClock::new(),
            executors: ExecutorMap::default(),
            workers: BTreeMap::new(),
            servers: BTreeMap::new(),
            shards: ShardMap::default(),
            routes: Vec::new(),
            placement_epoch: 1,
            server_places: BTreeMap::new(),
            joining_places: BTreeMap::new(),
            moving: BTreeMap::new(),
            adopting: BTreeMap::new(),
            scale: None,
            before_start: Some(Vec::new()),
            next_task: 0,
            in_flight: 0,
            completed: 0,
            tables: args.tables,
            checkpoint,
            recoveries: Vec::new(),
            shards_moved: std::collections::BTreeSet::new(),
            given_away: std::collections::BTreeSet::new(),
            workers_given_away: std::collections::BTreeSet::new(),
            unconfirmed_hand_offs: BTreeMap::new(),
            came_from: BTreeMap::new(),
            restore_generation: 0,
            servers_recovering: std::collections::BTreeSet::new(),
            hand_offs_begun: 0,
            held: None,
            deferred_iteration: None,
            injecting: false,
            consistent: None,
            stopping: None,
            injections: Vec::new(),
            crashed_servers: Default::default(),
            worker_recovery: args
                .worker_recovery
                .then(|| worker_recovery::WorkerRecoveryState::new(args.events.clone())),
            ending_after_round: false,
            started: std::time::Instant::now(),
            events: args.events,
            done: Some(args.done),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if state.done.is_none() {
            return Ok(()); // the job already ended; late messages are dropped
        }
        if state.ending_after_round {
            state.while_ending_after_round(msg);
            return Ok(());
        }
        let step = match msg {
            MasterMsg::Start {
                workers,
                executors,
                servers,
                shards,
                routes,
                server_places,
            } => {
                // Beside any a scale-out added while the job started.
                state.workers.extend(workers);
                state.executors = executors;
                state.servers.extend(servers);
                state.shards = shards;
                state.routes = routes;
                state.server_places = server_places.into_iter().map(|p| (p.server, p)).collect();
                let over = state.start_driver(&myself);
                for (live_workers, live_servers, reply) in
                    state.before_start.take().unwrap_or_default()
                {
                    state.start_rebalance(&myself, live_workers, live_servers, reply);
                }
                over
            }
            MasterMsg::AddWorker(id, actor) => {
                state.workers.insert(id, actor);
                Ok(false)
            }
            MasterMsg::AddServer(id, actor) => {
                state.servers.insert(id, actor);
                state.announce_joined_server(id);
                Ok(false)
            }
            MasterMsg::AddNode {
                node,
                link,
                assignment,
                server,
                reply,
            } => {
                let _ = reply.send(state.add_node(node, link, assignment, server));
                Ok(false)
            }
            MasterMsg::ForgetNode(node) => {
                state.forget_node(node);
                Ok(false)
            }
            MasterMsg::NodeLeft(node) => state.node_left(&myself, node).map(|()| false),
            MasterMsg::CanScale { reply } => {
                let answer = match state.before_start.as_ref() {
                    // The first command waiting for the start runs first.
                    Some(waiting) if !waiting.is_empty() => Err(HarpError::ScaleBusy),
                    Some(_) => Ok(()),
                    None => state.scale_refusal().map_or(Ok(()), Err),
                };
                let _ = reply.send(answer);
                Ok(false)
            }
            MasterMsg::Rebalance {
                live_workers,
                live_servers,
                reply,
            } => {
                match state.before_start.as_mut() {
                    Some(waiting) => waiting.push((live_workers, live_servers, reply)),
                    None => state.start_rebalance(&myself, live_workers, live_servers, reply),
                }
                Ok(false)
            }
            MasterMsg::ExecutorReleased {
                executor,
                from,
                result,
            } => state
                .on_executor_released(&myself, executor, from, result)
                .map(|_| false),
            MasterMsg::ExecutorAdopted { executor, result } => state
                .on_executor_adopted(&myself, executor, result)
                .map(|_| false),
            MasterMsg::ShardHandedOff {
                shard,
                to,
                hand_off,
                result,
            } => state
                .on_shard_handed_off((shard, to, hand_off), result)
                .map(|_| false),
            MasterMsg::Completed(completions) => state.hand_to_driver(&myself, completions),
            MasterMsg::FlushStaged {
                node,
                flush,
                servers,
                completions,
            } => state.on_flush_staged(&myself, (node, flush), servers, completions),
            MasterMsg::FlushCommitted(done) => state.on_flush_committed(&myself, done),
            MasterMsg::AwaitCommitsOn { server, reply } => {
                state.await_commits_on(server, reply);
                Ok(false)
            }
            MasterMsg::ServerDrained { .. } => {
                tracing::debug!("a node's drain answer reached the master actor; ignored");
                Ok(false)
            }
            MasterMsg::WorkerLost { node, cause } => {
                state.on_worker_lost(&myself, node, cause).map(|()| false)
            }
            MasterMsg::ExecutorRecreated {
                executor,
                on,
                result,
            } => state
                .on_executor_recreated(executor, on, result)
                .map(|()| false),
            MasterMsg::CheckpointRoundDone(done) => {
                let saves = state.checkpoint_round_ended(done);
                // Nodes of a job that recovers workers keep no ledger (staged parts are
                // applied at their commit): nothing to tell them.
                if state.worker_recovery.is_none() {
                    for save in saves {
                        let told = SaveTold::new(&save);
                        for route in &state.routes {
                            route.tell_save(&told);
                        }
                    }
                }
                state.after_round_done(&myself);
                Ok(false)
            }
            MasterMsg::CrashServer { server, reply } => {
                state.crash_server(&myself, server, reply);
                Ok(false)
            }
            MasterMsg::CrashedServerCounted(stats) => {
                state.crashed_servers.add(&stats);
                Ok(false)
            }
            MasterMsg::ServerLost {
                server,
                at_failure,
                acknowledged,
                reply,
            } => state
                .on_server_lost(&myself, server, (at_failure, acknowledged), reply)
                .map(|_| false),
            MasterMsg::Recovered(done) => state.on_recovered(&myself, done).map(|_| false),
            MasterMsg::Injected(injected) => state.on_injected(&myself, injected).map(|_| false),
            MasterMsg::Consistent(setup) => {
                state.configure_consistent(*setup);
                Ok(false)
            }
            // Sent only while the job waits for its last round (handled above).
            MasterMsg::RoundAtEndWaitOver => Ok(false),
            MasterMsg::StopWaitOver => match state.stopping.take() {
                Some(reason) => {
                    state.give_up_stop_checkpoint();
                    Err(state.stopped(reason).await)
                }
                None => Ok(false),
            },
            MasterMsg::Failed(e) => Err(e),
            MasterMsg::Stop { reason } => {
                if state.stopping.is_some() {
                    Ok(false) // already stopping: the first reason stands
                } else if state.checkpoint_before_stop().await {
                    tracing::info!(%reason, "stopping the job after a last checkpoint");
                    state.stopping = Some(reason);
                    let wait = state.stop_wait();
                    tell_after(&myself, wait, MasterMsg::StopWaitOver);
                    Ok(false)
                } else {
                    Err(state.stopped(reason).await)
                }
            }
        };
        // A consistent checkpoint captures once nothing is in flight (awaited here: nothing
        // the capture waits for needs the master).
        let step = match step {
            Ok(false) if state.capture_ready() => state.capture(&myself).await.map(|()| false),
            other => other,
        };
        // A stop waits only for its last checkpoint's capture.
        let step = match step {
            Ok(false) if !state.capture_pending() => match state.stopping.take() {
                Some(reason) => Err(state.stopped(reason).await),
                None => Ok(false),
            },
            other => other,
        };
        match step {
            Ok(false) => {}
            Ok(true) => state.finish(&myself),
            Err(e) => state.end(Err(e)),
        }
        Ok(())
    }
}
