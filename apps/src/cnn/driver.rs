//! The CNN driver: per minibatch a `Gradient` phase then an `Apply` phase (one micro-task
//! per executor each, a barrier between), and an `Eval` phase after every epoch.

use super::{CnnArgs, CnnOutput};
use harp::{AppError, Completion, Driver, DriverContext, ExecutorId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Figures of one finished epoch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CnnMetrics {
    /// 1-based.
    pub epoch: u32,
    /// Mean training cross-entropy over the epoch's minibatches (as they were trained).
    pub loss: f64,
    /// Training accuracy over the epoch's minibatches, in [0, 1].
    pub train_accuracy: f64,
    /// Mean cross-entropy on the held-out images after the epoch.
    pub test_loss: f64,
    /// Held-out accuracy after the epoch, in [0, 1].
    pub accuracy: f64,
    /// Seconds of the epoch's training (both phases of every minibatch; not the evaluation).
    pub epoch_s: f64,
    /// Seconds since the driver started.
    pub elapsed_s: f64,
    /// Minibatches trained in the epoch.
    pub batches: u32,
}

/// Receives progress from the driver.
pub trait CnnObserver: Send + Sync {
    fn batch_completed(&self) {}
    fn epoch_completed(&self, _metrics: &CnnMetrics) {}
}

impl CnnObserver for crate::mlr::Quiet {}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
enum Phase {
    Gradient,
    Apply,
    Eval,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tally {
    train_loss: f64,
    train_correct: u64,
    train_images: u64,
    test_loss: f64,
    test_correct: u64,
    test_images: u64,
    /// Training seconds of the epoch so far (finished phases of earlier runs included).
    train_s: f64,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    epoch: u32,
    batch: u32,
    phase: Phase,
    pending: u32,
    #[serde(default)]
    phase_loss: Vec<f64>,
    tally: Tally,
    history: Vec<CnnMetrics>,
    elapsed_s: f64,
}

pub struct CnnDriver {
    epochs: u32,
    batches_per_epoch: u32,
    executors: u32,
    test_images: u64,
    /// The epoch (0-based), minibatch and phase running.
    epoch: u32,
    batch: u32,
    phase: Phase,
    /// Tasks of the phase not completed yet.
    pending: u32,
    /// Each executor's loss in the phase, added to the tally in executor order when the
    /// phase ends, so the figures do not depend on the order completions arrive in.
    phase_loss: Vec<f64>,
    tally: Tally,
    history: Vec<CnnMetrics>,
    started: Instant,
    /// When the epoch's training (re)started.
    epoch_started: Instant,
    /// Seconds of earlier runs (a resumed job).
    elapsed_before: f64,
    observer: Arc<dyn CnnObserver>,
}

impl CnnDriver {
    pub fn new(
        epochs: u32,
        batches_per_epoch: u32,
        executors: u32,
        test_images: u64,
        observer: Arc<dyn CnnObserver>,
    ) -> Self {
        Self {
            epochs,
            batches_per_epoch,
            executors,
            test_images,
            epoch: 0,
            batch: 0,
            phase: Phase::Gradient,
            pending: 0,
            phase_loss: vec![0.0; executors as usize],
            tally: Tally::default(),
            history: Vec::new(),
            started: Instant::now(),
            epoch_started: Instant::now(),
            elapsed_before: 0.0,
            observer,
        }
    }

    /// Every finished epoch's figures.
    pub fn history(&self) -> &[CnnMetrics] {
        &self.history
    }

    fn dispatch_phase(&mut self, ctx: &mut DriverContext<'_, CnnArgs>) -> Result<(), AppError> {
        let (epoch, batch) = (self.epoch, self.batch);
        let args = match self.phase {
            Phase::Gradient => CnnArgs::Gradient { epoch, batch },
            Phase::Apply => CnnArgs::Apply { epoch, batch },
            Phase::Eval => CnnArgs::Eval { epoch },
        };
        self.pending = self.executors;
        self.phase_loss.clear();
        self.phase_loss.resize(self.executors as usize, 0.0);
        for e in 0..self.executors {
            ctx.dispatch(ExecutorId(e), args)?;
        }
        Ok(())
    }

    fn finish_epoch(&mut self, ctx: &mut DriverContext<'_, CnnArgs>) -> Result<(), AppError> {
        let t = &self.tally;
        let mean = |sum: f64, n: u64| if n == 0 { 0.0 } else { sum / n as f64 };
        let metrics = CnnMetrics {
            epoch: self.epoch + 1,
            loss: mean(t.train_loss, t.train_images),
            train_accuracy: mean(t.train_correct as f64, t.train_images),
            test_loss: mean(t.test_loss, t.test_images),
            accuracy: mean(t.test_correct as f64, self.test_images),
            epoch_s: t.train_s,
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
            batches: self.batches_per_epoch,
        };
        self.observer.epoch_completed(&metrics);
        self.history.push(metrics);
        self.tally = Tally::default();
        self.epoch += 1;
        // An iteration for SCAR's running checkpoint (and consistent checkpoints) is an epoch.
        ctx.iteration_completed(u64::from(self.epoch));
        if self.epoch >= self.epochs {
            ctx.finish();
            return Ok(());
        }
        self.batch = 0;
        self.phase = Phase::Gradient;
        self.epoch_started = Instant::now();
        self.dispatch_phase(ctx)
    }
}

impl Driver<super::CnnApp> for CnnDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, CnnArgs>,
    ) -> Result<(), AppError> {
        self.started = Instant::now();
        self.epoch_started = Instant::now();
        if self.pending > 0 {
            return Ok(()); // resumed: the phase's tasks were restored with the checkpoint
        }
        self.dispatch_phase(ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<CnnOutput>,
        ctx: &mut DriverContext<'_, CnnArgs>,
    ) -> Result<(), AppError> {
        let executor = completion.executor.0 as usize;
        let mut record_loss = |loss: f64| -> Result<(), AppError> {
            let slot = self
                .phase_loss
                .get_mut(executor)
                .ok_or_else(|| -> AppError {
                    format!("cnn: a completion from unknown {}", completion.executor).into()
                })?;
            *slot = loss;
            Ok(())
        };
        match completion.output {
            CnnOutput::Gradient {
                loss_sum,
                correct,
                images,
            } => {
                record_loss(loss_sum)?;
                self.tally.train_correct += correct;
                self.tally.train_images += images;
            }
            CnnOutput::Applied { .. } => {}
            CnnOutput::Eval {
                loss_sum,
                correct,
                images,
            } => {
                record_loss(loss_sum)?;
                self.tally.test_correct += correct;
                self.tally.test_images += images;
            }
        }
        self.pending = self.pending.checked_sub(1).ok_or_else(|| -> AppError {
            format!(
                "cnn: a completion from {} that the driver did not wait for",
                completion.executor
            )
            .into()
        })?;
        if self.pending > 0 {
            return Ok(());
        }
        let phase_loss: f64 = self.phase_loss.iter().sum();
        match self.phase {
            Phase::Gradient => self.tally.train_loss += phase_loss,
            Phase::Eval => self.tally.test_loss += phase_loss,
            Phase::Apply => {}
        }
        match self.phase {
            Phase::Gradient => {
                self.phase = Phase::Apply;
                self.dispatch_phase(ctx)
            }
            Phase::Apply => {
                self.observer.batch_completed();
                self.batch += 1;
                if self.batch >= self.batches_per_epoch {
                    self.tally.train_s += self.epoch_started.elapsed().as_secs_f64();
                    self.phase = Phase::Eval;
                } else {
                    self.phase = Phase::Gradient;
                }
                self.dispatch_phase(ctx)
            }
            Phase::Eval => self.finish_epoch(ctx),
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let mut tally = self.tally.clone();
        if self.phase != Phase::Eval {
            tally.train_s += self.epoch_started.elapsed().as_secs_f64();
        }
        let saved = Saved {
            epoch: self.epoch,
            batch: self.batch,
            phase: self.phase,
            pending: self.pending,
            phase_loss: self.phase_loss.clone(),
            tally,
            history: self.history.clone(),
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
        };
        Ok(serde_json::to_vec(&saved)?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let saved: Saved = serde_json::from_slice(state)?;
        if saved.epoch > self.epochs
            || saved.batch > self.batches_per_epoch
            || saved.pending > self.executors
        {
            return Err(format!(
                "saved CNN driver (epoch {}, minibatch {}, {} tasks pending) does not fit a job of {} epochs of {} minibatches and {} executors",
                saved.epoch, saved.batch, saved.pending, self.epochs, self.batches_per_epoch, self.executors
            )
            .into());
        }
        self.epoch = saved.epoch;
        self.batch = saved.batch;
        self.phase = saved.phase;
        self.pending = saved.pending;
        self.phase_loss = saved.phase_loss;
        self.phase_loss.resize(self.executors as usize, 0.0);
        self.tally = saved.tally;
        self.history = saved.history;
        self.elapsed_before = saved.elapsed_s;
        Ok(())
    }
}
