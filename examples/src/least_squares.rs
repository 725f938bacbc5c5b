//! Linear regression `y ≈ x·w` by minibatch SGD on harp: the smallest complete app.
//!
//! * The **app** declares one `f32` table holding `w` in a single row, with the server-side
//!   rule AdaGrad: executors send gradients, the servers apply the step and keep AdaGrad's
//!   accumulator beside the weights.
//! * The **driver** runs `rounds` bulk-synchronous rounds: it dispatches one task to every
//!   executor, and when the last one of a round completes it dispatches the next round. Tasks
//!   of round `r + 1` are dispatched after the driver saw every completion of round `r`, so
//!   they observe all of round `r`'s updates.
//! * Each **executor** generates its own slice of data (in a real app: loads its partition of
//!   the dataset) and keeps a cursor into it: state the runtime saves and restores with the
//!   `save_state`/`restore_state` hooks.

use harp::{
    AdaGrad, App, AppError, Completion, Driver, DriverContext, Executor, ExecutorId, Init, JobInfo,
    ParamClient, Table, TableSet, UpdateRule,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The app: problem size and the weight table.
pub struct LeastSquares {
    pub features: usize,
    pub rows_per_executor: usize,
    pub batch: usize,
    pub rounds: u32,
    tables: TableSet,
    weights: Table<f32>,
}

impl LeastSquares {
    pub fn new(
        features: usize,
        rows_per_executor: usize,
        batch: usize,
        rounds: u32,
    ) -> Result<Self, AppError> {
        let mut tables = TableSet::new();
        let rule = UpdateRule::AdaGrad(AdaGrad { lr: 0.5, eps: 1e-8 });
        let weights = tables.dense_f32("weights", features, rule, Init::Zeros)?;
        Ok(Self {
            features,
            rows_per_executor,
            batch,
            rounds,
            tables,
            weights,
        })
    }

    /// The weights the data is generated from: `w*[j] = (j % 7) - 3`.
    pub fn true_weight(j: usize) -> f32 {
        (j % 7) as f32 - 3.0
    }

    pub fn weights(&self) -> &Table<f32> {
        &self.weights
    }
}

/// A task: one minibatch of round `round`.
#[derive(Serialize, Deserialize)]
pub struct Step {
    pub round: u32,
}

/// What a task reports: its minibatch's mean squared error before the update.
#[derive(Serialize, Deserialize)]
pub struct StepLoss {
    pub round: u32,
    pub mse: f64,
}

impl App for LeastSquares {
    type Args = Step;
    type Output = StepLoss;
    type Driver = RoundsDriver;
    type Executor = SliceExecutor;

    fn name(&self) -> &str {
        "least_squares"
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<RoundsDriver, AppError> {
        Ok(RoundsDriver {
            rounds: self.rounds,
            executors: job.num_executors,
            pending: 0,
            round: 0,
            round_mse: 0.0,
            history: Vec::new(),
        })
    }

    fn create_executor(&self, id: ExecutorId, _job: &JobInfo) -> Result<SliceExecutor, AppError> {
        let mut rng = StdRng::seed_from_u64(id.0 as u64);
        let f = self.features;
        let x: Vec<f32> = (0..self.rows_per_executor * f)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let y = x
            .chunks_exact(f)
            .map(|row| {
                row.iter()
                    .enumerate()
                    .map(|(j, v)| v * Self::true_weight(j))
                    .sum()
            })
            .collect();
        Ok(SliceExecutor {
            features: f,
            batch: self.batch,
            weights: self.weights.clone(),
            x,
            y,
            cursor: 0,
        })
    }
}

/// Bulk-synchronous rounds; records the mean minibatch error of each round.
pub struct RoundsDriver {
    rounds: u32,
    executors: u32,
    pending: u32,
    round: u32,
    round_mse: f64,
    pub history: Vec<f64>,
}

impl RoundsDriver {
    fn dispatch_round(&mut self, ctx: &mut DriverContext<'_, Step>) -> Result<(), AppError> {
        for e in 0..self.executors {
            ctx.dispatch(ExecutorId(e), Step { round: self.round })?;
        }
        self.pending = self.executors;
        self.round_mse = 0.0;
        Ok(())
    }
}

impl Driver<LeastSquares> for RoundsDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, Step>,
    ) -> Result<(), AppError> {
        self.dispatch_round(ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<StepLoss>,
        ctx: &mut DriverContext<'_, Step>,
    ) -> Result<(), AppError> {
        self.round_mse += completion.output.mse / self.executors as f64;
        self.pending -= 1;
        if self.pending > 0 {
            return Ok(());
        }
        self.history.push(self.round_mse);
        self.round += 1;
        if self.round < self.rounds {
            self.dispatch_round(ctx)?;
        }
        Ok(()) // no task in flight and none dispatched: the job ends
    }
}

/// One executor's rows and its position in them.
pub struct SliceExecutor {
    features: usize,
    batch: usize,
    weights: Table<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
    cursor: usize,
}

impl Executor<LeastSquares> for SliceExecutor {
    async fn run_task(&mut self, step: Step, ps: &mut ParamClient) -> Result<StepLoss, AppError> {
        let w = ps.get(&self.weights, 0).await?; // waits on the server only on a cache miss
        let f = self.features;
        let mut grad = vec![0f32; f];
        let mut sq = 0.0f64;
        for _ in 0..self.batch {
            let i = self.cursor;
            self.cursor = (self.cursor + 1) % self.y.len();
            let row = &self.x[i * f..(i + 1) * f];
            let err: f32 = row.iter().zip(w.iter()).map(|(a, b)| a * b).sum::<f32>() - self.y[i];
            sq += (err as f64).powi(2);
            for (g, v) in grad.iter_mut().zip(row) {
                *g += err * v / self.batch as f32;
            }
        }
        ps.update(&self.weights, 0, &grad)?; // a gradient: the table's rule is AdaGrad
        Ok(StepLoss {
            round: step.round,
            mse: sq / self.batch as f64,
        })
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        Ok((self.cursor as u64).to_le_bytes().to_vec())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let bytes: [u8; 8] = state
            .try_into()
            .map_err(|_| "cursor state must be 8 bytes")?;
        self.cursor = u64::from_le_bytes(bytes) as usize % self.y.len().max(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn converges_to_the_true_weights() {
        let app = Arc::new(LeastSquares::new(8, 200, 20, 150).unwrap());
        let config = harp::JobConfig {
            workers: 2,
            servers: 2,
            executors_per_worker: 2,
            collect_params: true,
            ..Default::default()
        };
        let outcome = harp::run_job(app.clone(), &config).await.unwrap();
        let w = outcome
            .params
            .as_ref()
            .unwrap()
            .row(app.weights(), 0)
            .unwrap()
            .to_vec();
        for (j, v) in w.iter().enumerate() {
            assert!(
                (v - LeastSquares::true_weight(j)).abs() < 0.1,
                "w[{j}] = {v}"
            );
        }
        let h = &outcome.driver.history;
        assert_eq!(h.len(), 150);
        assert!(h[h.len() - 1] < h[0] / 100.0, "mse did not fall: {h:?}");
    }
}
