//! Worker recovery on the master (jobs across processes with
//! `ClusterOptions::worker_recovery`; the protocol as a whole is in `remote/failures.rs`).
//!
//! - **Commit.** A worker node stages each flush on its servers and reports it
//!   ([`MasterMsg::FlushStaged`]). The master marks the flush's tasks *committing* in its
//!   [`TaskBook`], tells every server holding a part to apply it ([`ServerMsg::Commit`],
//!   sent from the handler, so it precedes any later `DropStaged` of that node on the same
//!   link), waits for their acknowledgements on a spawned task and only then
//!   ([`MasterMsg::FlushCommitted`]) hands the completions to the driver: a task the driver
//!   dispatches next reads the committed updates (DESIGN §2.1), although the master→server
//!   and worker→server links are different.
//! - **Burial.** The master's mailbox orders a node's reports and its death
//!   ([`MasterMsg::WorkerLost`]): a flush reported before is committed (its tasks complete
//!   even though the node is gone); a report handled after is dropped, and its tasks are
//!   among those run again.
//! - **Recovery.** The dead node's servers drop its uncommitted parts and refuse later ones
//!   ([`ServerMsg::DropStaged`]); each of its executors is made again on the least
//!   loaded live worker ([`harp_core::ExecutorMap::place_orphans`], [`WorkerMsg::Create`];
//!   never on one the latest scale event empties, such as a leaving node's) by
//!   `App::recover_executor`, with its state in the newest consistent checkpoint when the
//!   job writes them (read from the checkpoint directory; older than the tables, which
//!   the app reconciles or ignores), and the map updated;
//!   every task of those executors still *dispatched* in the book is sent to the new host
//!   in task order, keeping its id and version and counted once in flight (it was counted
//!   when first dispatched). The [`WorkerRecovery`] report is complete once every executor
//!   runs on its new worker.
//! - **Leaves.** A leaving server's node departs only once every flush staged there is
//!   committed: each other node answers the drain of that server after its reports of the
//!   flushes it staged so far (`NodeShared::tell_master_after_staged_reports`), so the
//!   master holds those reports by then, and the roster waits for their commits
//!   ([`MasterMsg::AwaitCommitsOn`]). The server applies a part of a shard it gave away by
//!   forwarding it to the shard's new owner; departed first, it would lose the part.
//! - **Moves.** A death in the middle of an executor's move ends that move, and a released
//!   executor waits for the reports of its finished tasks before it moves on: see
//!   [`super::moves_under_recovery`].

use super::task_book::TaskBook;
use super::{MasterMsg, MasterState};
use crate::app::{App, Completion};
use crate::control::{EventSink, JobEvent};
use crate::error::HarpError;
use crate::remote::codec::{from_bytes, to_bytes};
use crate::scar::WorkerRecovery;
use crate::server::{AppliedAt, ServerMsg};
use crate::worker::{CheckpointedState, TaskEnvelope, WorkerMsg};
use harp_core::{ExecutorId, ServerId, TaskId, WorkerId};
use ractor::ActorRef;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use tokio::sync::oneshot;

/// What the master keeps to recover worker nodes.
pub(crate) struct WorkerRecoveryState<O> {
    book: TaskBook,
    /// Flushes being committed, by commit number: whose, and the completions they release.
    commits: BTreeMap<u64, PendingCommit<O>>,
    /// Who waits for every commit with a part on a server to be applied (a leaving server).
    commit_waiters: Vec<(ServerId, oneshot::Sender<()>)>,
    next_commit: u64,
    /// Worker nodes declared dead: their later reports are dropped.
    buried: BTreeSet<u32>,
    /// Recoveries whose executors do not all run on their new workers yet.
    recovering: Vec<InProgress>,
    reports: Vec<WorkerRecovery>,
    /// Reports of flushes that arrived after their node's burial (dropped).
    late_reports_dropped: u64,
    /// Where each recovery is told once its executors run again.
    events: EventSink,
}

/// How an executor was made again ([`MasterState::recreate`]).
pub(super) struct Recreated {
    /// Its micro-tasks sent to run again.
    pub tasks_rerun: usize,
    /// The consistent checkpoint whose saved state it was made from, if any.
    pub from_checkpoint: Option<u64>,
}

struct PendingCommit<O> {
    node: u32,
    flush: u64,
    /// The servers told to apply their parts.
    servers: BTreeSet<ServerId>,
    completions: Vec<Completion<O>>,
}

struct InProgress {
    report: WorkerRecovery,
    waiting: BTreeSet<ExecutorId>,
    began: Instant,
}

/// The servers' answers to one flush's commit (internal).
pub(crate) struct CommitDone {
    seq: u64,
    result: Result<(), HarpError>,
}

impl<O> WorkerRecoveryState<O> {
    pub(crate) fn new(events: EventSink) -> Self {
        Self {
            events,
            book: TaskBook::default(),
            commits: BTreeMap::new(),
            commit_waiters: Vec::new(),
            next_commit: 0,
            buried: BTreeSet::new(),
            recovering: Vec::new(),
            reports: Vec::new(),
            late_reports_dropped: 0,
        }
    }

    /// The book of dispatched tasks.
    pub(super) fn book(&self) -> &TaskBook {
        &self.book
    }

    /// Whether a flush being committed has a part on `server`.
    fn commits_on(&self, server: ServerId) -> bool {
        self.commits.values().any(|c| c.servers.contains(&server))
    }

    /// Answers the waiters whose server holds no part of a flush being committed any more.
    fn answer_commit_waiters(&mut self) {
        let waiters = std::mem::take(&mut self.commit_waiters);
        for (server, reply) in waiters {
            if self.commits_on(server) {
                self.commit_waiters.push((server, reply));
            } else {
                let _ = reply.send(());
            }
        }
    }

    /// Every recovery, those still creating executors included (as far as they got).
    pub(crate) fn take_reports(&mut self) -> Vec<WorkerRecovery> {
        let mut reports = std::mem::take(&mut self.reports);
        for open in self.recovering.drain(..) {
            let mut report = open.report;
            report.duration_s = open.began.elapsed().as_secs_f64();
            // Never told: its executors did not all run again before the end.
            self.events.tell(JobEvent::WorkerRecovered(report.clone()));
            reports.push(report);
        }
        if self.late_reports_dropped > 0 {
            tracing::info!(
                flushes = self.late_reports_dropped,
                "staged flushes of dead worker nodes were dropped (their tasks ran again)"
            );
        }
        reports
    }
}

impl<A: App> MasterState<A> {
    /// Keeps a dispatched task until its completion is handed over (worker recovery only).
    pub(super) fn keep_dispatched(
        &mut self,
        envelope: &TaskEnvelope<A::Args>,
    ) -> Result<(), HarpError> {
        if let Some(recovery) = self.worker_recovery.as_mut() {
            let args = to_bytes(&envelope.args)?;
            recovery
                .book
                .dispatched(envelope.task, envelope.executor, envelope.version, args);
        }
        Ok(())
    }

    /// Whether `task`'s completion reaches the driver for the first time (always, without
    /// worker recovery); a second one is dropped.
    pub(super) fn first_delivery(&mut self, task: TaskId) -> bool {
        let Some(recovery) = self.worker_recovery.as_mut() else {
            return true;
        };
        let first = recovery.book.delivered(task);
        if !first {
            tracing::warn!(%task, "a completion reached the master twice; the second is dropped");
        }
        first
    }

    /// Node `node` staged flush `flush` on `servers`: commit it, then hand `completions` to
    /// the driver; dropped if the node is already buried.
    pub(super) fn on_flush_staged(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        (node, flush): (u32, u64),
        servers: Vec<ServerId>,
        completions: Vec<Completion<A::Output>>,
    ) -> Result<bool, HarpError> {
        let awaiting = self.awaiting_reports();
        let Some(recovery) = self.worker_recovery.as_mut() else {
            return Err(HarpError::InvalidConfig(format!(
                "node {node} staged a flush, but this job does not recover worker nodes"
            )));
        };
        if recovery.buried.contains(&node) {
            // Its servers dropped the parts; its tasks ran again.
            recovery.late_reports_dropped += 1;
            tracing::debug!(
                node,
                flush,
                "a staged flush reported after its node's death; dropped"
            );
            return Ok(false);
        }
        for completion in &completions {
            if !recovery.book.committing(completion.task) {
                return Err(HarpError::InvalidConfig(format!(
                    "node {node} reported {} in flush {flush}, but the master holds no such task \
                     in flight: committing the flush could apply its updates twice",
                    completion.task
                )));
            }
        }
        // Released executors waiting for these reports may move on (`moves_under_recovery.rs`;
        // nothing to collect on the usual path, where none waits).
        let reported: Vec<TaskId> = if awaiting {
            completions.iter().map(|c| c.task).collect()
        } else {
            Vec::new()
        };
        if servers.is_empty() {
            self.reports_handled(myself, &reported)?;
            return self.hand_to_driver(myself, completions); // nothing to apply
        }
        let seq = recovery.next_commit;
        recovery.next_commit += 1;
        let mut answers = Vec::with_capacity(servers.len());
        let mut told = BTreeSet::new();
        for server in servers {
            let (reply, answer) = oneshot::channel();
            let message = ServerMsg::Commit { node, flush, reply };
            match self.servers.get(&server) {
                Some(actor) if actor.send_message(message).is_ok() => {
                    told.insert(server);
                    answers.push((server, answer))
                }
                // A leaving server's node departs only once the nodes reported every flush
                // staged there and those commits were applied (`AwaitCommitsOn`): only a
                // failed server gets here.
                _ => {
                    tracing::warn!(%server, node, flush, "a flush part is staged on a server that is gone: it is lost with that server")
                }
            }
        }
        recovery.commits.insert(
            seq,
            PendingCommit {
                node,
                flush,
                servers: told,
                completions,
            },
        );
        let master = myself.clone();
        crate::spawn::spawn(async move {
            let result = all_committed(answers).await;
            // The job may have ended meanwhile.
            let _ = master.send_message(MasterMsg::FlushCommitted(CommitDone { seq, result }));
        });
        self.reports_handled(myself, &reported)?;
        Ok(false)
    }

    /// Every server holding a part of a flush applied it: its completions go to the driver.
    pub(super) fn on_flush_committed(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        done: CommitDone,
    ) -> Result<bool, HarpError> {
        let Some(recovery) = self.worker_recovery.as_mut() else {
            return Ok(false);
        };
        let Some(pending) = recovery.commits.remove(&done.seq) else {
            return Ok(false);
        };
        recovery.answer_commit_waiters();
        if let Err(e) = done.result {
            return Err(HarpError::Remote(format!(
                "committing flush {} of node {} failed: {e}",
                pending.flush, pending.node
            )));
        }
        self.hand_to_driver(myself, pending.completions)
    }

    /// [`MasterMsg::AwaitCommitsOn`]: answers once no flush being committed has a part on
    /// `server` (at once in a job that stages no flushes).
    pub(super) fn await_commits_on(&mut self, server: ServerId, reply: oneshot::Sender<()>) {
        match self.worker_recovery.as_mut() {
            Some(recovery) if recovery.commits_on(server) => {
                recovery.commit_waiters.push((server, reply));
            }
            _ => {
                let _ = reply.send(());
            }
        }
    }

    /// Worker node `node` died (`cause`: how the master learnt it): bury it, have its
    /// staged parts dropped, re-create its executors on the live workers and dispatch their
    /// uncommitted tasks again. An error ends the job.
    pub(super) fn on_worker_lost(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        node: u32,
        cause: String,
    ) -> Result<(), HarpError> {
        let began = Instant::now();
        let worker = WorkerId(node);
        let died = |detail: String| HarpError::NodeDied { node, detail };
        let Some(recovery) = self.worker_recovery.as_mut() else {
            return Err(died(format!(
                "{cause}; the job does not recover worker nodes"
            )));
        };
        if !recovery.buried.insert(node) {
            return Ok(());
        }
        let detected_at_s = began.duration_since(self.started).as_secs_f64();
        // The moves it took part in end (`moves_under_recovery.rs`); an executor it was
        // releasing or adopting is among its executors below.
        self.end_moves_of(worker);
        for server in self.servers.values() {
            // A server that is gone has nothing of it any more.
            let _ = server.send_message(ServerMsg::DropStaged { node });
        }
        if let Some(proxy) = self.workers.remove(&worker) {
            proxy.stop(Some("worker node died".into()));
        }
        // Not on a worker a scale event empties (a leaving node's: it departs once drained,
        // and executors created there would be lost with it).
        let live: Vec<WorkerId> = (self.workers.keys())
            .filter(|w| !self.workers_given_away.contains(w))
            .copied()
            .collect();
        let placed = self.executors.place_orphans(worker, &live).map_err(|_| {
            died(format!(
                "{cause}; no live worker is left to run its executors (a worker giving its load away, such as a leaving node's, takes none)"
            ))
        })?;
        let orphans: Vec<ExecutorId> = placed.iter().map(|(e, _)| *e).collect();
        let mut saved = self.checkpointed_states(&orphans);
        let (mut tasks_rerun, mut restored_from_checkpoint) = (0, Vec::new());
        for &(executor, to) in &placed {
            let made = self.recreate(myself, executor, to, saved.remove(&executor))?;
            tasks_rerun += made.tasks_rerun;
            if let Some(checkpoint) = made.from_checkpoint {
                restored_from_checkpoint.push((executor.0, checkpoint));
            }
        }
        let report = WorkerRecovery {
            node,
            cause,
            executors: placed.iter().map(|(e, w)| (e.0, w.0)).collect(),
            restored_from_checkpoint,
            tasks_rerun,
            detected_at_s,
            duration_s: 0.0,
        };
        tracing::warn!(
            node,
            executors = placed.len(),
            tasks_rerun,
            "a worker node died: re-creating its executors on the live workers and running their uncommitted tasks again"
        );
        let open = InProgress {
            report,
            waiting: placed.iter().map(|(e, _)| *e).collect(),
            began,
        };
        if let Some(recovery) = self.worker_recovery.as_mut() {
            recovery.recovering.push(open);
            recovery.finish_recoveries();
        }
        Ok(())
    }

    /// The states `ids` saved in the newest consistent checkpoints that hold them, if the
    /// job writes them (`ConsistentCheckpoint::saved_states_of`).
    pub(super) fn checkpointed_states(
        &self,
        ids: &[ExecutorId],
    ) -> BTreeMap<ExecutorId, CheckpointedState> {
        (self.consistent.as_ref())
            .map(|c| c.saved_states_of(ids))
            .unwrap_or_default()
    }

    /// Makes `executor` again on worker `to` (`App::recover_executor`, from `saved`, its
    /// state in a consistent checkpoint, if any, else afresh) and sends it the tasks to run
    /// again.
    pub(super) fn recreate(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        to: WorkerId,
        saved: Option<CheckpointedState>,
    ) -> Result<Recreated, HarpError> {
        let rerun = match self.worker_recovery.as_ref() {
            Some(recovery) => recovery
                .book
                .to_rerun(executor)
                .into_iter()
                .map(|(task, kept)| {
                    Ok(TaskEnvelope {
                        task,
                        executor,
                        version: kept.version,
                        args: from_bytes(&kept.args)?,
                    })
                })
                .collect::<Result<Vec<_>, HarpError>>()?,
            None => Vec::new(),
        };
        let count = rerun.len();
        self.executors.assign(executor, to)?;
        let target = self
            .workers
            .get(&to)
            .ok_or(HarpError::WorkerUnreachable(to))?;
        let from_checkpoint = saved.as_ref().map(|s| s.checkpoint);
        let (created, answer) = oneshot::channel();
        target
            .send_message(WorkerMsg::Create {
                executor,
                saved,
                created,
            })
            .map_err(|_| HarpError::WorkerUnreachable(to))?;
        // After the creation, on the same ordered link.
        if !rerun.is_empty() {
            target
                .send_message(WorkerMsg::Run(rerun))
                .map_err(|_| HarpError::WorkerUnreachable(to))?;
        }
        let master = myself.clone();
        crate::spawn::spawn(async move {
            let result = answer
                .await
                .unwrap_or(Err(HarpError::WorkerUnreachable(to)));
            // A master that stopped no longer needs it.
            let _ = master.send_message(MasterMsg::ExecutorRecreated {
                executor,
                on: to,
                result,
            });
        });
        Ok(Recreated {
            tasks_rerun: count,
            from_checkpoint,
        })
    }

    /// `executor` runs on worker `on` (or could not be created there: the job ends).
    pub(super) fn on_executor_recreated(
        &mut self,
        executor: ExecutorId,
        on: WorkerId,
        result: Result<(), HarpError>,
    ) -> Result<(), HarpError> {
        let buried = |recovery: &WorkerRecoveryState<A::Output>| recovery.buried.contains(&on.0);
        if let Err(e) = result {
            if self.worker_recovery.as_ref().is_some_and(buried) {
                // `on` died too: its death's recovery created the executor elsewhere.
                tracing::warn!(%executor, %on, error = %e, "an executor's new worker died before running it; it is created elsewhere");
                return Ok(());
            }
            return Err(HarpError::Remote(format!(
                "{executor} could not be created on {on}: {e}"
            )));
        }
        if let Some(recovery) = self.worker_recovery.as_mut() {
            for open in &mut recovery.recovering {
                open.waiting.remove(&executor);
            }
            recovery.finish_recoveries();
        }
        Ok(())
    }
}

impl<O> WorkerRecoveryState<O> {
    /// Completes the reports of recoveries whose executors all run again.
    fn finish_recoveries(&mut self) {
        let (done, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.recovering)
            .into_iter()
            .partition(|r| r.waiting.is_empty());
        self.recovering = open;
        for finished in done {
            let mut report = finished.report;
            report.duration_s = finished.began.elapsed().as_secs_f64();
            tracing::warn!(
                node = report.node,
                executors = report.executors.len(),
                tasks_rerun = report.tasks_rerun,
                took_ms = (report.duration_s * 1e3) as u64,
                "worker node recovered: its executors run on the live workers"
            );
            self.events.tell(JobEvent::WorkerRecovered(report.clone()));
            self.reports.push(report);
        }
    }
}

/// Waits for every server's answer to a commit. A server that went away before answering
/// took its part with it (its shards are recovered from SCAR's running checkpoint, or its
/// death ends the job); any other refusal is the error.
async fn all_committed(
    answers: Vec<(ServerId, oneshot::Receiver<Result<AppliedAt, HarpError>>)>,
) -> Result<(), HarpError> {
    let mut first_error = None;
    for (server, answer) in answers {
        match answer.await {
            Ok(Ok(_)) => {}
            Err(_) | Ok(Err(HarpError::ServerUnreachable(_))) => {
                tracing::warn!(%server, "a server went away before confirming a commit: its part is lost with it");
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_on(servers: &[u32]) -> PendingCommit<()> {
        PendingCommit {
            node: 0,
            flush: 0,
            servers: servers.iter().map(|&s| ServerId(s)).collect(),
            completions: Vec::new(),
        }
    }

    /// A leaving server's waiter is answered only once no commit with a part there is
    /// pending; a waiter for a server no commit names is answered by the next check.
    #[test]
    fn a_commit_waiter_is_answered_once_no_pending_commit_names_its_server() {
        let mut state = WorkerRecoveryState::<()>::new(EventSink::default());
        state.commits.insert(0, commit_on(&[1, 2]));
        state.commits.insert(1, commit_on(&[2]));
        let (to_1, mut on_1) = oneshot::channel();
        let (to_2, mut on_2) = oneshot::channel();
        state.commit_waiters.push((ServerId(1), to_1));
        state.commit_waiters.push((ServerId(2), to_2));
        assert!(state.commits_on(ServerId(1)) && !state.commits_on(ServerId(3)));
        state.answer_commit_waiters();
        assert!(on_1.try_recv().is_err() && on_2.try_recv().is_err());
        state.commits.remove(&0);
        state.answer_commit_waiters();
        assert_eq!(on_1.try_recv(), Ok(()));
        assert!(
            on_2.try_recv().is_err(),
            "commit 1 still has a part on server 2"
        );
        state.commits.remove(&1);
        state.answer_commit_waiters();
        assert_eq!(on_2.try_recv(), Ok(()));
        assert!(state.commit_waiters.is_empty());
    }
}
