//! Executor moves in a job that recovers worker nodes (`ClusterOptions::worker_recovery`,
//! `harp run --recover-workers`): each micro-task's updates are applied exactly once even
//! when a node taking part in a move dies.
//!
//! - **A released executor waits for its reports.** A worker releases an executor between
//!   two of its micro-tasks, but the tasks it finished there reach the master with the
//!   node's next staged flush, which may come later. Until the master handles that report,
//!   those tasks are *dispatched* in its task book. Were the old node to die then, they
//!   would run again on an executor whose state already holds their effect; were the new
//!   node to die, they would run again on the executor created afresh while the old node's
//!   flush still commits them: twice. So the master hands a released executor to its new
//!   worker only once every task it finished on the old one is committing
//!   ([`TaskBook::unreported`](super::task_book::TaskBook::unreported) is empty).
//! - **A worker node dies mid-move** ([`MasterMsg::WorkerLost`], which reaches the master
//!   before any failed answer of that node, `remote/failures.rs`):
//!   - an executor moving *from* it (its release asked for, or released and waiting for
//!     reports) is made again with the dead node's own executors, since the map still
//!     names the node: its state and its unreported tasks died there, and every
//!     uncommitted task runs again;
//!   - an executor moving *to* it and not yet sent there goes back: the move's target
//!     becomes its old worker, which adopts it again (a state it parked for the dead node
//!     it fetches from itself);
//!   - an executor it was adopting is made again with its own executors (the map names
//!     it by then);
//!   - an executor it released and a live node was fetching: the fetch fails, and on that
//!     node's failed adoption the master makes the executor again there.
//!
//!   Made again means afresh, or from the executor's state in the newest consistent
//!   checkpoint when the job writes them (`MasterState::recreate`).
//!
//!   In every case the move is reported failed (the scale event says which executor and
//!   why), training goes on, and the executor has exactly one owner.

use super::{MasterMsg, MasterState};
use crate::app::App;
use crate::error::HarpError;
use crate::worker::ReleasedExecutor;
use harp_core::{ExecutorId, TaskId, WorkerId};
use ractor::ActorRef;
use std::collections::BTreeSet;

/// A released executor waiting for the reports of the tasks it finished on its old worker.
pub(crate) struct AwaitingReports<A: App> {
    executor: ReleasedExecutor<A>,
    tasks: BTreeSet<TaskId>,
}

impl<A: App> MasterState<A> {
    /// `executor`, released by its old worker, goes to its new one now, or (worker recovery)
    /// once the tasks it finished on the old one are reported.
    pub(super) fn adopt_once_reported(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        released: ReleasedExecutor<A>,
    ) -> Result<(), HarpError> {
        let Some(motion) = self.moving.get_mut(&executor) else {
            return Ok(()); // a dead node ended the move
        };
        if let Some(recovery) = self.worker_recovery.as_ref() {
            let unstarted: BTreeSet<TaskId> = released
                .pending
                .iter()
                .chain(&motion.buffered)
                .map(|t| t.task)
                .collect();
            let tasks = recovery.book().unreported(executor, &unstarted);
            if !tasks.is_empty() {
                tracing::debug!(
                    %executor,
                    tasks = tasks.len(),
                    "released; waiting for the reports of the tasks it finished on its old worker"
                );
                motion.released = Some(AwaitingReports {
                    executor: released,
                    tasks,
                });
                return Ok(());
            }
        }
        self.send_to_adopter(myself, executor, released)
    }

    /// Whether a released executor waits for the reports of its finished tasks.
    pub(super) fn awaiting_reports(&self) -> bool {
        self.moving.values().any(|motion| motion.released.is_some())
    }

    /// The master handled the report of `tasks` (committing now): released executors that
    /// waited for them go to their new workers.
    pub(super) fn reports_handled(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        tasks: &[TaskId],
    ) -> Result<(), HarpError> {
        let mut ready = Vec::new();
        for (executor, motion) in &mut self.moving {
            if let Some(waiting) = motion.released.as_mut() {
                for task in tasks {
                    waiting.tasks.remove(task);
                }
                if waiting.tasks.is_empty() {
                    ready.push(*executor);
                }
            }
        }
        for executor in ready {
            let released = self
                .moving
                .get_mut(&executor)
                .and_then(|motion| motion.released.take());
            if let Some(waiting) = released {
                self.send_to_adopter(myself, executor, waiting.executor)?;
            }
        }
        Ok(())
    }

    /// Worker `dead` died (worker recovery): the moves it took part in end as the module
    /// doc says. Called before its executors are placed on the live workers.
    pub(super) fn end_moves_of(&mut self, dead: WorkerId) {
        let leaving: Vec<ExecutorId> = self
            .moving
            .iter()
            .filter(|(_, motion)| motion.from == dead)
            .map(|(executor, _)| *executor)
            .collect();
        for executor in leaving {
            self.moving.remove(&executor);
            self.move_failed(
                executor,
                HarpError::MoveInterrupted(format!(
                    "{executor} was moving away from {dead}, which died: it is made again \
                     on a live worker (afresh, or from its state in the newest consistent \
                     checkpoint: the worker recovery report says which) and its uncommitted \
                     micro-tasks run again"
                )),
            );
        }
        for (executor, motion) in &mut self.moving {
            if motion.to == dead {
                let from = motion.from;
                motion.to = from;
                motion.diverted = Some(format!(
                    "{executor} was moving from {from} to {dead}, which died: it stays on {from}"
                ));
            }
        }
        let arriving: Vec<(ExecutorId, WorkerId)> = self
            .adopting
            .iter()
            .filter(|(_, adopting)| adopting.to == dead)
            .map(|(executor, adopting)| (*executor, adopting.from))
            .collect();
        for (executor, from) in arriving {
            self.adopting.remove(&executor);
            self.move_failed(
                executor,
                HarpError::MoveInterrupted(format!(
                    "{dead} died while it adopted {executor} from {from}: it is made again \
                     on a live worker (afresh, or from its state in the newest consistent \
                     checkpoint: the worker recovery report says which) and its uncommitted \
                     micro-tasks run again"
                )),
            );
        }
    }

    /// Makes `executor` again on `to` after its move failed (its state did not make it;
    /// [`MasterState::recreate`]), runs its uncommitted micro-tasks again there and reports
    /// the move failed: `why`, then how it was made (afresh or from which checkpoint).
    pub(super) fn recreate_after_failed_move(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        to: WorkerId,
        why: String,
    ) -> Result<(), HarpError> {
        let saved = self.checkpointed_states(&[executor]).remove(&executor);
        let made = self.recreate(myself, executor, to, saved)?;
        let how = match made.from_checkpoint {
            Some(checkpoint) => format!("from its state in checkpoint {checkpoint}"),
            None => "afresh".to_string(),
        };
        let why = format!("{why} {how}, and its uncommitted micro-tasks run again");
        tracing::warn!(%executor, %to, "{why}");
        self.move_failed(executor, HarpError::Remote(why));
        Ok(())
    }
}
