//! The MLR driver: stale-synchronous training iterations with a barrier and an evaluation
//! round at the end of every epoch.

use super::{MlrArgs, MlrOutput};
use harp::{AppError, Completion, Driver, DriverContext, ExecutorId, SspSchedule};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Figures of one finished epoch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EpochMetrics {
    /// 1-based.
    pub epoch: u32,
    /// Mean training cross-entropy over the epoch's minibatches.
    pub loss: f64,
    /// Mean cross-entropy on the held-out rows after the epoch.
    pub test_loss: f64,
    /// Held-out accuracy after the epoch, in [0, 1].
    pub accuracy: f64,
    /// Seconds since the driver started.
    pub elapsed_s: f64,
    /// Training micro-tasks completed in this epoch.
    pub tasks: u64,
}

/// Receives progress from the driver (the `harp` command draws a progress bar and writes
/// metrics; tests record).
pub trait MlrObserver: Send + Sync {
    fn task_completed(&self) {}
    fn epoch_completed(&self, _metrics: &EpochMetrics) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl MlrObserver for Quiet {}

#[derive(Default, Serialize, Deserialize)]
struct EpochTally {
    train_loss: f64,
    train_rows: u64,
    train_tasks: u64,
    eval_correct: u64,
    eval_loss: f64,
    eval_rows: u64,
    eval_pending: u32,
}

pub struct MlrDriver {
    epochs: u32,
    iterations_per_epoch: u32,
    executors: u32,
    test_rows: u64,
    schedule: SspSchedule,
    epoch: u32,
    tally: EpochTally,
    history: Vec<EpochMetrics>,
    started: Instant,
    observer: Arc<dyn MlrObserver>,
}

impl MlrDriver {
    pub fn new(
        epochs: u32,
        staleness: u32,
        iterations_per_epoch: u32,
        executors: u32,
        test_rows: u64,
        observer: Arc<dyn MlrObserver>,
    ) -> Self {
        Self {
            epochs,
            iterations_per_epoch,
            executors,
            test_rows,
            // executors >= 1 in every job, so the schedule is valid; fall back to 1 otherwise.
            schedule: SspSchedule::new(staleness, executors.max(1)),
            epoch: 0,
            tally: EpochTally::default(),
            history: Vec::new(),
            started: Instant::now(),
            observer,
        }
    }

    /// Every finished epoch's figures.
    pub fn history(&self) -> &[EpochMetrics] {
        &self.history
    }

    fn epoch_end(&self) -> u64 {
        (self.epoch as u64 + 1) * self.iterations_per_epoch as u64
    }

    fn dispatch_ready(&mut self, ctx: &mut DriverContext<'_, MlrArgs>) -> Result<(), AppError> {
        for iteration in self.schedule.ready() {
            let within = (iteration % self.iterations_per_epoch as u64) as u32;
            for e in 0..self.executors {
                ctx.dispatch(
                    ExecutorId(e),
                    MlrArgs::Train {
                        epoch: self.epoch,
                        iteration: within,
                    },
                )?;
            }
        }
        Ok(())
    }

    fn start_epoch(&mut self, ctx: &mut DriverContext<'_, MlrArgs>) -> Result<(), AppError> {
        self.tally = EpochTally::default();
        self.schedule.allow_until(self.epoch_end());
        self.dispatch_ready(ctx)
    }

    fn finish_epoch(&mut self, ctx: &mut DriverContext<'_, MlrArgs>) -> Result<(), AppError> {
        let t = &self.tally;
        let metrics = EpochMetrics {
            epoch: self.epoch + 1,
            loss: t.train_loss / t.train_rows.max(1) as f64,
            test_loss: t.eval_loss / t.eval_rows.max(1) as f64,
            accuracy: t.eval_correct as f64 / self.test_rows.max(1) as f64,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            tasks: t.train_tasks,
        };
        self.observer.epoch_completed(&metrics);
        self.history.push(metrics);
        self.epoch += 1;
        // An iteration for SCAR's running checkpoint (and its fault injection) is an epoch.
        ctx.iteration_completed(u64::from(self.epoch));
        if self.epoch >= self.epochs {
            ctx.finish();
            Ok(())
        } else {
            self.start_epoch(ctx)
        }
    }
}

impl Driver<super::MlrApp> for MlrDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, MlrArgs>,
    ) -> Result<(), AppError> {
        self.started = Instant::now();
        self.start_epoch(ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<MlrOutput>,
        ctx: &mut DriverContext<'_, MlrArgs>,
    ) -> Result<(), AppError> {
        self.observer.task_completed();
        match completion.output {
            MlrOutput::Train {
                epoch,
                iteration,
                loss_sum,
                rows,
            } => {
                self.tally.train_loss += loss_sum;
                self.tally.train_rows += rows;
                self.tally.train_tasks += 1;
                let global = epoch as u64 * self.iterations_per_epoch as u64 + iteration as u64;
                self.schedule.complete(global)?;
                if self.schedule.completed_prefix() == self.epoch_end() {
                    self.tally.eval_pending = self.executors;
                    for e in 0..self.executors {
                        ctx.dispatch(ExecutorId(e), MlrArgs::Eval { epoch: self.epoch })?;
                    }
                } else {
                    self.dispatch_ready(ctx)?;
                }
            }
            MlrOutput::Eval {
                correct,
                loss_sum,
                rows,
            } => {
                self.tally.eval_correct += correct;
                self.tally.eval_loss += loss_sum;
                self.tally.eval_rows += rows;
                self.tally.eval_pending = self.tally.eval_pending.saturating_sub(1);
                if self.tally.eval_pending == 0 {
                    self.finish_epoch(ctx)?;
                }
            }
        }
        Ok(())
    }

    /// Saves everything the driver needs to go on exactly where it is: the epoch, its
    /// running tally, the history, the schedule's position (complete prefix and dispatched
    /// iterations) and the elapsed time. Refused in the middle of an iteration (some but not
    /// all of an iteration's tasks completed), which the schedule cannot be rebuilt from;
    /// the runtime saves at iteration boundaries.
    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let epoch_start = u64::from(self.epoch) * u64::from(self.iterations_per_epoch);
        let prefix = self.schedule.completed_prefix();
        let whole = prefix.saturating_sub(epoch_start) * u64::from(self.executors);
        if self.tally.train_tasks != whole {
            return Err(format!(
                "the MLR driver's state cannot be saved in the middle of an iteration \
                 ({} training tasks completed in epoch {}, {whole} in whole iterations)",
                self.tally.train_tasks,
                self.epoch + 1
            )
            .into());
        }
        let saved = SavedMlrDriver {
            epoch: self.epoch,
            tally: &self.tally,
            history: &self.history,
            completed_prefix: prefix,
            dispatched: self.schedule.dispatched(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
        };
        Ok(serde_json::to_vec(&saved)?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let saved: RestoredMlrDriver = serde_json::from_slice(state)?;
        if saved.epoch > self.epochs {
            return Err(format!(
                "saved MLR driver is at epoch {} of a job with {} epochs",
                saved.epoch, self.epochs
            )
            .into());
        }
        self.epoch = saved.epoch;
        self.tally = saved.tally;
        self.history = saved.history;
        // Every iteration below the prefix is complete and none above it has a completion:
        // restart there, open the epoch, and advance to what was dispatched.
        let mut schedule = self.schedule.restarted_at(saved.completed_prefix);
        schedule.allow_until(self.epoch_end());
        let _already_dispatched = schedule.ready();
        if schedule.dispatched() != saved.dispatched {
            return Err(format!(
                "saved MLR schedule does not match: {} iterations dispatched, {} rebuilt",
                saved.dispatched,
                schedule.dispatched()
            )
            .into());
        }
        self.schedule = schedule;
        self.started = Instant::now()
            .checked_sub(std::time::Duration::from_secs_f64(saved.elapsed_s.max(0.0)))
            .unwrap_or_else(Instant::now);
        Ok(())
    }
}

/// The MLR driver's saved form.
#[derive(Serialize)]
struct SavedMlrDriver<'a> {
    epoch: u32,
    tally: &'a EpochTally,
    history: &'a [EpochMetrics],
    completed_prefix: u64,
    dispatched: u64,
    elapsed_s: f64,
}

/// [`SavedMlrDriver`], read back.
#[derive(Deserialize)]
struct RestoredMlrDriver {
    epoch: u32,
    tally: EpochTally,
    history: Vec<EpochMetrics>,
    completed_prefix: u64,
    dispatched: u64,
    elapsed_s: f64,
}
