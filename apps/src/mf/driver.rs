//! The MF driver: each iteration solves the users, then the items (ALS), or runs `E` SGD
//! sub-rounds, then evaluates; one micro-task per executor per phase with a barrier between
//! phases.

use super::{MfArgs, MfOutput};
use harp::{AppError, Completion, Driver, DriverContext, ExecutorId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Figures of one finished iteration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MfMetrics {
    /// 1-based.
    pub iteration: u32,
    pub train_rmse: f64,
    /// `None` when no rating is held out (`--test-fraction 0`): left out of the metrics
    /// file rather than written as a 0 that reads as a perfect fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_rmse: Option<f64>,
    /// Seconds since the driver started.
    pub elapsed_s: f64,
}

/// Receives progress from the driver.
pub trait MfObserver: Send + Sync {
    fn iteration_completed(&self, _metrics: &MfMetrics) {}
}

impl MfObserver for crate::mlr::Quiet {}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
enum Phase {
    Users,
    Items,
    Sgd { sub_round: u32 },
    Eval,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tally {
    train_sse: f64,
    train_count: u64,
    test_sse: f64,
    test_count: u64,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    iteration: u32,
    phase: Phase,
    pending: u32,
    tally: Tally,
    history: Vec<MfMetrics>,
    elapsed_s: f64,
}

pub struct MfDriver {
    iterations: u32,
    executors: u32,
    /// SGD sub-rounds instead of the two ALS phases.
    sgd: bool,
    /// The iteration running (1-based) and its phase.
    iteration: u32,
    phase: Phase,
    /// Tasks of the phase not completed yet.
    pending: u32,
    tally: Tally,
    history: Vec<MfMetrics>,
    started: Instant,
    /// Seconds of earlier runs (a resumed job).
    elapsed_before: f64,
    observer: Arc<dyn MfObserver>,
}

impl MfDriver {
    pub fn new(iterations: u32, executors: u32, sgd: bool, observer: Arc<dyn MfObserver>) -> Self {
        Self {
            iterations,
            executors,
            sgd,
            iteration: 1,
            phase: Self::first_phase(sgd),
            pending: 0,
            tally: Tally::default(),
            history: Vec::new(),
            started: Instant::now(),
            elapsed_before: 0.0,
            observer,
        }
    }

    fn first_phase(sgd: bool) -> Phase {
        if sgd {
            Phase::Sgd { sub_round: 0 }
        } else {
            Phase::Users
        }
    }

    /// Every finished iteration's figures.
    pub fn history(&self) -> &[MfMetrics] {
        &self.history
    }

    fn dispatch_phase(&mut self, ctx: &mut DriverContext<'_, MfArgs>) -> Result<(), AppError> {
        let iteration = self.iteration;
        let args = match self.phase {
            Phase::Users => MfArgs::SolveUsers { iteration },
            Phase::Items => MfArgs::SolveItems { iteration },
            Phase::Sgd { sub_round } => MfArgs::SgdBlock {
                iteration,
                sub_round,
            },
            Phase::Eval => MfArgs::Eval { iteration },
        };
        self.pending = self.executors;
        for e in 0..self.executors {
            ctx.dispatch(ExecutorId(e), args)?;
        }
        Ok(())
    }

    fn finish_iteration(&mut self, ctx: &mut DriverContext<'_, MfArgs>) -> Result<(), AppError> {
        let rmse = |sse: f64, n: u64| (n > 0).then(|| (sse / n as f64).sqrt());
        let metrics = MfMetrics {
            iteration: self.iteration,
            train_rmse: rmse(self.tally.train_sse, self.tally.train_count).unwrap_or(0.0),
            test_rmse: rmse(self.tally.test_sse, self.tally.test_count),
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
        };
        self.observer.iteration_completed(&metrics);
        self.history.push(metrics);
        self.tally = Tally::default();
        ctx.iteration_completed(u64::from(self.iteration));
        if self.iteration >= self.iterations {
            ctx.finish();
            return Ok(());
        }
        self.iteration += 1;
        self.phase = Self::first_phase(self.sgd);
        self.dispatch_phase(ctx)
    }
}

impl Driver<super::MfApp> for MfDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, MfArgs>,
    ) -> Result<(), AppError> {
        self.started = Instant::now();
        if self.pending > 0 {
            return Ok(()); // resumed: the phase's tasks were restored with the checkpoint
        }
        self.dispatch_phase(ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<MfOutput>,
        ctx: &mut DriverContext<'_, MfArgs>,
    ) -> Result<(), AppError> {
        if let MfOutput::Eval {
            train_sse,
            train_count,
            test_sse,
            test_count,
        } = completion.output
        {
            self.tally.train_sse += train_sse;
            self.tally.train_count += train_count;
            self.tally.test_sse += test_sse;
            self.tally.test_count += test_count;
        }
        self.pending = self.pending.checked_sub(1).ok_or_else(|| -> AppError {
            format!(
                "mf: a completion from {} that the driver did not wait for",
                completion.executor
            )
            .into()
        })?;
        if self.pending > 0 {
            return Ok(());
        }
        match self.phase {
            Phase::Users => {
                self.phase = Phase::Items;
                self.dispatch_phase(ctx)
            }
            Phase::Items => {
                self.phase = Phase::Eval;
                self.dispatch_phase(ctx)
            }
            Phase::Sgd { sub_round } => {
                self.phase = if sub_round + 1 < self.executors {
                    Phase::Sgd {
                        sub_round: sub_round + 1,
                    }
                } else {
                    Phase::Eval
                };
                self.dispatch_phase(ctx)
            }
            Phase::Eval => self.finish_iteration(ctx),
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let saved = Saved {
            iteration: self.iteration,
            phase: self.phase,
            pending: self.pending,
            tally: self.tally.clone(),
            history: self.history.clone(),
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
        };
        Ok(serde_json::to_vec(&saved)?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let saved: Saved = serde_json::from_slice(state)?;
        let phase_fits = match saved.phase {
            Phase::Users | Phase::Items => !self.sgd,
            Phase::Sgd { sub_round } => self.sgd && sub_round < self.executors,
            Phase::Eval => true,
        };
        if saved.iteration == 0
            || saved.iteration > self.iterations
            || saved.pending > self.executors
            || !phase_fits
        {
            return Err(format!(
                "saved MF driver (iteration {}, phase {:?}, {} tasks pending) does not fit a job of {} iterations and {} executors ({})",
                saved.iteration,
                saved.phase,
                saved.pending,
                self.iterations,
                self.executors,
                if self.sgd { "SGD" } else { "ALS" }
            )
            .into());
        }
        self.iteration = saved.iteration;
        self.phase = saved.phase;
        self.pending = saved.pending;
        self.tally = saved.tally;
        self.history = saved.history;
        self.elapsed_before = saved.elapsed_s;
        Ok(())
    }
}
