//! Scale events on the master: runs a re-balancing plan of the core's planner by moving
//! executors between workers and shards between servers while micro-tasks keep running
//! (Litz §4.4).
//!
//! An executor in motion has its newly dispatched micro-tasks buffered here; its old worker
//! finishes the running one and hands back the executor with the ones it had not started;
//! the new worker gets all of them, in order; the move ends when the new worker runs it. A
//! shard's old server hands its rows to the new
//! one and forwards its traffic from then on; once the hand-off is done every node is told
//! the new owner. One scale event runs at a time. A job that ends while one runs (a node
//! died in the middle of a move, say) still answers it: with the moves that never ended.
//! In a job that recovers worker nodes such a death ends only the moves it took part in,
//! and training goes on ([`super::moves_under_recovery`]).

use super::moves_under_recovery::AwaitingReports;
use super::{MasterMsg, MasterState};
use crate::app::App;
use crate::error::HarpError;
use crate::server::{ServerMsg, ShardMoved};
use crate::worker::{ReleasedExecutor, TaskEnvelope, WorkerMsg};
use harp_core::{plan_rebalance, ExecutorId, Placed, RebalanceInput, ServerId, ShardId, WorkerId};
use ractor::ActorRef;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use tokio::sync::oneshot;

/// What one scale event did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ScaleReport {
    pub executors_moved: usize,
    pub shards_moved: usize,
    /// Micro-tasks that moved with their executors (not started when the move began).
    pub tasks_moved: usize,
    /// Bytes of parameter rows and optimizer state the shard moves carried.
    pub shard_bytes_moved: u64,
    /// Bytes of saved executor state the executor moves carried (0 within one process,
    /// where executors move as objects).
    pub executor_bytes_moved: u64,
    pub duration_s: f64,
    /// Every move, in the order it ended.
    pub moves: Vec<MoveRecord>,
}

/// One move of a scale event.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MoveRecord {
    /// `"executor"` or `"shard"`.
    pub kind: &'static str,
    /// The executor's or the shard's number.
    pub item: u32,
    /// The worker or server it left.
    pub from: u32,
    /// The worker or server it went to.
    pub to: u32,
    /// Bytes of rows and optimizer state (shards) or of saved state (executors moved
    /// between processes; 0 within one).
    pub bytes: u64,
    /// Micro-tasks that travelled with it (executors; 0 for shards).
    pub tasks: usize,
    /// Seconds from the start of the scale event to the end of this move.
    pub done_at_s: f64,
}

/// A scale event in progress.
pub(crate) struct ScaleInProgress {
    started: Instant,
    /// The moves under way: the item moving → the whole move (`executor-3 from worker-0 to
    /// worker-1`).
    unfinished: BTreeMap<Moving, String>,
    /// Each shard move of the plan: its old and new server.
    shard_ends: BTreeMap<ShardId, (ServerId, ServerId)>,
    /// The number of each shard's hand-off under way (`MasterState::hand_offs_begun`).
    hand_offs: BTreeMap<ShardId, u64>,
    report: ScaleReport,
    first_error: Option<HarpError>,
    /// Taken when the event is answered.
    reply: Option<oneshot::Sender<Result<ScaleReport, HarpError>>>,
}

/// What a move of a scale event moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Moving {
    Executor(ExecutorId),
    Shard(ShardId),
}

impl From<ExecutorId> for Moving {
    fn from(executor: ExecutorId) -> Self {
        Moving::Executor(executor)
    }
}

impl From<ShardId> for Moving {
    fn from(shard: ShardId) -> Self {
        Moving::Shard(shard)
    }
}

impl ScaleInProgress {
    /// Whether a shard's move from or to `server` is under way.
    pub(crate) fn moves_a_shard_of(&self, server: ServerId) -> bool {
        self.shard_ends.iter().any(|(shard, (from, to))| {
            (*from == server || *to == server)
                && self.unfinished.contains_key(&Moving::Shard(*shard))
        })
    }

    /// Whether `shard`'s move is under way in this event.
    pub(crate) fn moves(&self, shard: ShardId) -> bool {
        self.unfinished.contains_key(&Moving::Shard(shard))
    }

    /// Whether `shard`'s move is under way in this event by hand-off number `hand_off`
    /// (not a late answer to an earlier hand-off of it, which a failure ended).
    fn awaits(&self, shard: ShardId, hand_off: u64) -> bool {
        self.moves(shard) && self.hand_offs.get(&shard) == Some(&hand_off)
    }
}

impl Drop for ScaleInProgress {
    /// The master stopped (the job ended) before the event did: answer with what never
    /// ended, rather than let the answer vanish (which its caller could only read as an
    /// unreachable master).
    fn drop(&mut self) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        let moves: Vec<&str> = self.unfinished.values().map(String::as_str).collect();
        let failed = self
            .first_error
            .take()
            .map(|e| format!("; a move had failed: {e}"))
            .unwrap_or_default();
        let _ = reply.send(Err(HarpError::Remote(format!(
            "the job ended before this scale event did; moves that never ended: {}{failed}",
            moves.join(", ")
        ))));
    }
}

/// An executor on its way, until its new worker is asked to adopt it: where from and to,
/// and the tasks dispatched to it meanwhile.
pub(crate) struct ExecutorInMotion<A: App> {
    pub from: WorkerId,
    pub to: WorkerId,
    pub buffered: Vec<TaskEnvelope<A::Args>>,
    /// Released, and waiting for the reports of the tasks it finished on `from` (a job that
    /// recovers worker nodes: `moves_under_recovery.rs`).
    pub released: Option<AwaitingReports<A>>,
    /// Why it no longer goes where the plan said: its target died, so it goes back to
    /// `from` (`to` is `from` then) and the move is reported failed.
    pub diverted: Option<String>,
}

/// An executor its new worker was asked to adopt, until it answers.
pub(crate) struct Adopting {
    pub from: WorkerId,
    pub to: WorkerId,
    /// Micro-tasks and bytes of saved state that moved with it.
    moved: (usize, u64),
    pub diverted: Option<String>,
}

impl<A: App> MasterState<A> {
    /// Why no scale event may start now, if none may: another runs, or a recovery is
    /// pending.
    pub(super) fn scale_refusal(&self) -> Option<HarpError> {
        if self.scale.is_some() {
            return Some(HarpError::ScaleBusy);
        }
        self.recovery_pending().map(HarpError::RecoveryPending)
    }

    /// Starts a re-balancing onto `live_workers` and `live_servers` (a worker or server not
    /// listed gives its load away). Answers on `reply` when every move is done.
    pub(crate) fn start_rebalance(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        live_workers: Vec<WorkerId>,
        live_servers: Vec<ServerId>,
        reply: oneshot::Sender<Result<ScaleReport, HarpError>>,
    ) {
        if let Some(refusal) = self.scale_refusal() {
            let _ = reply.send(Err(refusal));
            return;
        }
        if let Err(e) = self.check_live(&live_workers, &live_servers) {
            let _ = reply.send(Err(e));
            return;
        }
        let given_away = self
            .servers
            .keys()
            .filter(|s| !live_servers.contains(s))
            .copied()
            .collect();
        let workers_given_away = self
            .workers
            .keys()
            .filter(|w| !live_workers.contains(w))
            .copied()
            .collect();
        let input = RebalanceInput {
            executors: self
                .executors
                .iter()
                .map(|(item, owner)| Placed {
                    item,
                    owner,
                    bytes: 1,
                })
                .collect(),
            shards: (0..self.shards.num_shards())
                .filter_map(|s| {
                    let shard = ShardId(s);
                    let owner = self.shards.server_of(shard).ok()?;
                    Some(Placed {
                        item: shard,
                        owner,
                        bytes: 1,
                    })
                })
                .collect(),
            live_workers,
            live_servers,
        };
        let plan = match plan_rebalance(&input) {
            Ok(plan) => plan,
            Err(e) => {
                let _ = reply.send(Err(HarpError::InvalidConfig(e.to_string())));
                return;
            }
        };
        tracing::info!(
            executor_moves = plan.executor_moves.len(),
            shard_moves = plan.shard_moves.len(),
            "scale event started"
        );
        let mut scale = ScaleInProgress {
            started: Instant::now(),
            unfinished: BTreeMap::new(),
            shard_ends: plan
                .shard_moves
                .iter()
                .map(|m| (m.item, (m.from, m.to)))
                .collect(),
            hand_offs: BTreeMap::new(),
            report: ScaleReport::default(),
            first_error: None,
            reply: Some(reply),
        };
        for m in &plan.executor_moves {
            match self.begin_executor_move(myself, m.item, m.from, m.to) {
                Ok(()) => {
                    let whole = format!("{} from {} to {}", m.item, m.from, m.to);
                    scale.unfinished.insert(m.item.into(), whole);
                }
                Err(e) => {
                    scale.first_error.get_or_insert(e);
                }
            }
        }
        for m in &plan.shard_moves {
            match self.begin_shard_move(myself, m.item, m.from, m.to) {
                Ok(hand_off) => {
                    let whole = format!("{} from {} to {}", m.item, m.from, m.to);
                    scale.unfinished.insert(m.item.into(), whole);
                    scale.hand_offs.insert(m.item, hand_off);
                }
                Err(e) => {
                    scale.first_error.get_or_insert(e);
                }
            }
        }
        self.scale = Some(scale);
        self.given_away = given_away;
        self.workers_given_away = workers_given_away;
        self.maybe_finish_scale();
    }

    fn check_live(&self, workers: &[WorkerId], servers: &[ServerId]) -> Result<(), HarpError> {
        let unknown_worker = workers.iter().find(|w| !self.workers.contains_key(w));
        if let Some(w) = unknown_worker {
            return Err(HarpError::InvalidConfig(format!("unknown {w}")));
        }
        let workers: BTreeSet<_> = workers.iter().collect();
        let servers: BTreeSet<_> = servers.iter().collect();
        if let Some(s) = servers.iter().find(|s| !self.servers.contains_key(s)) {
            return Err(HarpError::InvalidConfig(format!("unknown {s}")));
        }
        if workers.is_empty() {
            return Err(HarpError::InvalidConfig(
                "cannot remove the last worker: the job's executors would have nowhere to run"
                    .into(),
            ));
        }
        if servers.is_empty() {
            return Err(HarpError::InvalidConfig(
                "cannot remove the last server: the job's parameters would have nowhere to live"
                    .into(),
            ));
        }
        Ok(())
    }

    fn begin_executor_move(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        from: WorkerId,
        to: WorkerId,
    ) -> Result<(), HarpError> {
        let source = self
            .workers
            .get(&from)
            .ok_or(HarpError::WorkerUnreachable(from))?;
        let (tx, rx) = oneshot::channel();
        source
            .send_message(WorkerMsg::Release {
                executor,
                reply: tx,
            })
            .map_err(|_| HarpError::WorkerUnreachable(from))?;
        self.moving.insert(
            executor,
            ExecutorInMotion {
                from,
                to,
                buffered: Vec::new(),
                released: None,
                diverted: None,
            },
        );
        reply_to_master(
            myself,
            rx,
            HarpError::WorkerUnreachable(from),
            move |result| MasterMsg::ExecutorReleased {
                executor,
                from,
                result,
            },
        );
        Ok(())
    }

    /// The old worker gave `executor` up (or could not): hand it and its tasks to the new one
    /// (in a job that recovers worker nodes, once the tasks it finished there are reported).
    pub(crate) fn on_executor_released(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        from: WorkerId,
        result: Result<ReleasedExecutor<A>, HarpError>,
    ) -> Result<(), HarpError> {
        let released = match result {
            Ok(released) => released,
            Err(e) => {
                let Some(motion) = self.moving.remove(&executor) else {
                    return Ok(());
                };
                // It never left: the tasks held here go to where it still is.
                let source = self
                    .workers
                    .get(&from)
                    .ok_or(HarpError::WorkerUnreachable(from))?;
                if !motion.buffered.is_empty() {
                    source
                        .send_message(WorkerMsg::Run(motion.buffered))
                        .map_err(|_| HarpError::WorkerUnreachable(from))?;
                }
                self.move_failed(executor, e);
                return Ok(());
            }
        };
        self.adopt_once_reported(myself, executor, released)
    }

    /// Asks the new worker to adopt `executor`, released by its old one, with the tasks it
    /// had not started and those dispatched to it since.
    pub(super) fn send_to_adopter(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        mut released: ReleasedExecutor<A>,
    ) -> Result<(), HarpError> {
        let Some(motion) = self.moving.remove(&executor) else {
            return Ok(());
        };
        // Diverted back to its old worker (`to == from`), a state parked there is fetched
        // by that node from itself.
        let (from, to) = (motion.from, motion.to);
        let tasks = released.pending.len();
        let bytes = released.executor.state_bytes();
        released.pending.extend(motion.buffered);
        let target = self
            .workers
            .get(&to)
            .ok_or(HarpError::WorkerUnreachable(to))?;
        let (tx, rx) = oneshot::channel();
        target
            .send_message(WorkerMsg::Adopt {
                executor,
                released,
                adopted: tx,
            })
            .map_err(|_| HarpError::WorkerUnreachable(to))?;
        // Tasks dispatched from now on go to the new worker, after the adopted ones.
        self.executors.assign(executor, to)?;
        self.adopting.insert(
            executor,
            Adopting {
                from,
                to,
                moved: (tasks, bytes),
                diverted: motion.diverted,
            },
        );
        reply_to_master(
            myself,
            rx,
            HarpError::WorkerUnreachable(to),
            move |result| MasterMsg::ExecutorAdopted { executor, result },
        );
        Ok(())
    }

    /// The new worker runs `executor` (the move is done), or could not take it: then the
    /// executor has no host, and the job cannot go on unless it recovers worker nodes (it
    /// is then created afresh there).
    pub(crate) fn on_executor_adopted(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        executor: ExecutorId,
        result: Result<(), HarpError>,
    ) -> Result<(), HarpError> {
        let Some(adopting) = self.adopting.remove(&executor) else {
            return Ok(()); // its new worker died meanwhile: created afresh elsewhere
        };
        let Adopting {
            from,
            to,
            moved: (tasks, bytes),
            diverted,
        } = adopting;
        if let Err(e) = result {
            if self.worker_recovery.is_some() && self.workers.contains_key(&to) {
                let why = format!(
                    "{executor} lost its state moving from {from} to {to} ({e}); it was made \
                     again on {to}"
                );
                return self.recreate_after_failed_move(myself, executor, to, why);
            }
            let lost = format!("{executor} was lost moving from {from} to {to}: {e}");
            self.move_failed(executor, HarpError::Remote(lost.clone()));
            return Err(HarpError::Remote(lost));
        }
        if let Some(why) = diverted {
            tracing::warn!(%executor, %from, "{why}");
            self.move_failed(executor, HarpError::MoveInterrupted(why));
            return Ok(());
        }
        tracing::info!(%executor, %from, %to, tasks, bytes, "executor moved");
        self.move_done(
            executor,
            Ok(move |report: &mut ScaleReport, done_at_s| {
                report.executors_moved += 1;
                report.tasks_moved += tasks;
                report.executor_bytes_moved += bytes;
                report.moves.push(MoveRecord {
                    kind: "executor",
                    item: executor.0,
                    from: from.0,
                    to: to.0,
                    bytes,
                    tasks,
                    done_at_s,
                });
            }),
        );
        Ok(())
    }

    fn begin_shard_move(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        shard: ShardId,
        from: ServerId,
        to: ServerId,
    ) -> Result<u64, HarpError> {
        let source = self
            .servers
            .get(&from)
            .ok_or(HarpError::ServerUnreachable(from))?;
        let target = self
            .servers
            .get(&to)
            .ok_or(HarpError::ServerUnreachable(to))?
            .clone();
        let (tx, rx) = oneshot::channel();
        source
            .send_message(ServerMsg::HandOff {
                shard,
                num_shards: self.shards.num_shards(),
                to_id: to,
                to: target,
                reply: tx,
            })
            .map_err(|_| HarpError::ServerUnreachable(from))?;
        self.unconfirmed_hand_offs.insert(shard, (from, to));
        self.hand_offs_begun += 1;
        let hand_off = self.hand_offs_begun;
        reply_to_master(
            myself,
            rx,
            HarpError::ServerUnreachable(from),
            move |result| MasterMsg::ShardHandedOff {
                shard,
                to,
                hand_off,
                result,
            },
        );
        Ok(hand_off)
    }

    /// The old server handed `shard` to `to` (or refused): record the new owner everywhere.
    /// The answer to a move that already ended (a failure of its old or new owner ended it)
    /// changes nothing, even when a later event moves the shard again: it answers another
    /// hand-off, which may have gone to a server that is dead by now.
    pub(crate) fn on_shard_handed_off(
        &mut self,
        (shard, to, hand_off): (ShardId, ServerId, u64),
        result: Result<ShardMoved, HarpError>,
    ) -> Result<(), HarpError> {
        let awaited = (self.scale.as_ref()).is_some_and(|scale| scale.awaits(shard, hand_off));
        if !awaited {
            tracing::debug!(%shard, %to, ok = result.is_ok(), "the answer to a shard move that already ended");
            return Ok(());
        }
        let from = self.shards.server_of(shard).unwrap_or(to);
        // The old owner vanished before it answered: it may have sent the rows on, so the
        // recovery of its shards puts this one on `to` (`recovery.rs`).
        let source_vanished = matches!(&result, Err(HarpError::ServerUnreachable(s)) if *s == from);
        // The rows left the old owner and the new one never confirmed them: it died (or its
        // link did) with them, and the old owner forwards the shard to it. The hand-off
        // stays unconfirmed until the new owner's recovery re-creates the shard on the old
        // owner (`recovery.rs`).
        let stranded = matches!(&result, Err(HarpError::ShardInTransit { .. }));
        let result = if stranded {
            self.shards_moved.insert(shard);
            tracing::warn!(%shard, %from, %to, "a shard's rows left its old owner and the new owner never confirmed them; it is re-created from the running checkpoint once the new owner's failure is handled");
            // A failure cut the move short: the event may be tried again after the recovery.
            result.map_err(|e| HarpError::MoveInterrupted(e.to_string()))
        } else {
            if !source_vanished {
                self.unconfirmed_hand_offs.remove(&shard);
            }
            result
        };
        let from = from.0;
        if let Ok(moved) = &result {
            self.shards.assign(shard, to)?;
            self.came_from.insert(shard, ServerId(from));
            self.shards_moved.insert(shard);
            for route in &self.routes {
                route.reroute(shard, to)?;
            }
            tracing::info!(%shard, %to, rows = moved.rows, bytes = moved.bytes, "shard moved");
        }
        self.move_done(
            shard,
            result.map(|moved| {
                move |report: &mut ScaleReport, done_at_s| {
                    report.shards_moved += 1;
                    report.shard_bytes_moved += moved.bytes;
                    report.moves.push(MoveRecord {
                        kind: "shard",
                        item: shard.0,
                        from,
                        to: to.0,
                        bytes: moved.bytes,
                        tasks: 0,
                        done_at_s,
                    });
                }
            }),
        );
        Ok(())
    }

    /// The move of `item` in the running scale event ended: count it, or keep its error.
    fn move_done(
        &mut self,
        item: impl Into<Moving>,
        outcome: Result<impl FnOnce(&mut ScaleReport, f64), HarpError>,
    ) {
        if let Some(scale) = self.scale.as_mut() {
            scale.unfinished.remove(&item.into());
            match outcome {
                Ok(count) => count(&mut scale.report, scale.started.elapsed().as_secs_f64()),
                Err(e) => {
                    scale.first_error.get_or_insert(e);
                }
            }
        }
        self.maybe_finish_scale();
    }

    /// The move of `item` failed with `error` (the scale event reports the first one).
    pub(super) fn move_failed(&mut self, item: impl Into<Moving>, error: HarpError) {
        self.move_done(item, Err::<fn(&mut ScaleReport, f64), _>(error));
    }

    fn maybe_finish_scale(&mut self) {
        if !matches!(&self.scale, Some(s) if s.unfinished.is_empty()) {
            return;
        }
        let Some(mut scale) = self.scale.take() else {
            return;
        };
        scale.report.duration_s = scale.started.elapsed().as_secs_f64();
        tracing::info!(
            executors_moved = scale.report.executors_moved,
            shards_moved = scale.report.shards_moved,
            bytes = scale.report.shard_bytes_moved,
            duration_s = scale.report.duration_s,
            "scale event ended"
        );
        let outcome = match scale.first_error.take() {
            None => Ok(std::mem::take(&mut scale.report)),
            Some(e) => Err(e),
        };
        if let Some(reply) = scale.reply.take() {
            let _ = reply.send(outcome);
        }
    }
}

/// Hands the answer on `rx` (or `lost`, if its sender went away) back to the master as the
/// message `wrap` makes of it.
fn reply_to_master<A: App, T: Send + 'static>(
    master: &ActorRef<MasterMsg<A>>,
    rx: oneshot::Receiver<Result<T, HarpError>>,
    lost: HarpError,
    wrap: impl FnOnce(Result<T, HarpError>) -> MasterMsg<A> + Send + 'static,
) {
    let master = master.clone();
    crate::spawn::spawn(async move {
        let result = rx.await.unwrap_or(Err(lost));
        // A master that stopped no longer needs it.
        let _ = master.send_message(wrap(result));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An injected server failure waits out only a shard move from or to that server.
    #[test]
    fn only_an_unfinished_shard_move_from_or_to_a_server_is_moving_its_shards() {
        let (s0, s1, s2) = (ServerId(0), ServerId(1), ServerId(2));
        let mut scale = ScaleInProgress {
            started: Instant::now(),
            unfinished: BTreeMap::new(),
            shard_ends: BTreeMap::from([(ShardId(1), (s0, s1)), (ShardId(4), (s2, s0))]),
            hand_offs: BTreeMap::from([(ShardId(1), 7), (ShardId(4), 8)]),
            report: ScaleReport::default(),
            first_error: None,
            reply: None,
        };
        let moving = |scale: &ScaleInProgress| [s0, s1, s2].map(|s| scale.moves_a_shard_of(s));
        assert_eq!(moving(&scale), [false; 3], "nothing unfinished");
        scale.unfinished.insert(
            ExecutorId(3).into(),
            "executor-3 from worker-0 to worker-1".into(),
        );
        assert_eq!(moving(&scale), [false; 3], "an executor move only");
        scale.unfinished.insert(
            ShardId(1).into(),
            "shard-1 from server-0 to server-1".into(),
        );
        assert_eq!(moving(&scale), [true, true, false]);
        scale.unfinished.remove(&ShardId(1).into());
        scale.unfinished.insert(
            ShardId(4).into(),
            "shard-4 from server-2 to server-0".into(),
        );
        assert_eq!(moving(&scale), [true, false, true]);
        assert!(scale.moves(ShardId(4)) && !scale.moves(ShardId(1)));
        // Only the answer to the hand-off under way is awaited.
        assert!(scale.awaits(ShardId(4), 8));
        assert!(!scale.awaits(ShardId(4), 7) && !scale.awaits(ShardId(1), 7));
    }
}
