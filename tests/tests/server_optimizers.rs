//! Server-side optimizer tables through the runtime: executors send the gradients of
//! `sum_j (w_j - target_j)^2` to Adam and AdaGrad tables, which drive every row to its
//! target; also with many executors sending gradients to one Adam row at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use harp::{
    AdaGrad, Adam, App, AppError, Completion, Driver, DriverContext, Executor, ExecutorId, Init,
    JobConfig, JobInfo, ParamClient, Table, TableSet, UpdateRule,
};
use harp_tests::{runtime, Threads};
use serde::{Deserialize, Serialize};

/// Columns of the quadratic's rows.
const QUAD_WIDTH: usize = 4;

/// The target of row `r`: far from the zero start in every column.
fn target(row: u64) -> [f32; QUAD_WIDTH] {
    let r = row as f32;
    [2.0 + r, -3.0 + 0.5 * r, 1.5, -0.75 - r]
}

struct QuadApp {
    tables: TableSet,
    w: Table<f32>,
    steps: u32,
    /// Executors that share row 0 instead of each owning its own row.
    shared_row: bool,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct QuadArgs {
    step: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct QuadOutput {
    step: u32,
    /// The row as the task read it, before its gradient.
    read: Vec<f32>,
}

struct QuadDriver {
    steps: u32,
    /// Per executor, the rows read at each step.
    reads: BTreeMap<u32, Vec<Vec<f32>>>,
}

struct QuadExecutor {
    row: u64,
    w: Table<f32>,
}

impl QuadApp {
    fn new(rule: UpdateRule, steps: u32, shared_row: bool) -> Self {
        let mut tables = TableSet::new();
        let w = tables
            .dense_f32("quad.w", QUAD_WIDTH, rule, Init::Zeros)
            .unwrap();
        Self {
            tables,
            w,
            steps,
            shared_row,
        }
    }
}

impl App for QuadApp {
    type Args = QuadArgs;
    type Output = QuadOutput;
    type Driver = QuadDriver;
    type Executor = QuadExecutor;

    fn name(&self) -> &str {
        "quadratic"
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, _job: &JobInfo) -> Result<QuadDriver, AppError> {
        Ok(QuadDriver {
            steps: self.steps,
            reads: BTreeMap::new(),
        })
    }

    fn create_executor(&self, id: ExecutorId, _job: &JobInfo) -> Result<QuadExecutor, AppError> {
        Ok(QuadExecutor {
            row: if self.shared_row { 0 } else { u64::from(id.0) },
            w: self.w.clone(),
        })
    }
}

impl Driver<QuadApp> for QuadDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, QuadArgs>,
    ) -> Result<(), AppError> {
        for e in 0..ctx.num_executors() {
            ctx.dispatch(ExecutorId(e), QuadArgs { step: 0 })?;
        }
        Ok(())
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<QuadOutput>,
        ctx: &mut DriverContext<'_, QuadArgs>,
    ) -> Result<(), AppError> {
        let step = completion.output.step;
        self.reads
            .entry(completion.executor.0)
            .or_default()
            .push(completion.output.read);
        if step + 1 < self.steps {
            ctx.dispatch(completion.executor, QuadArgs { step: step + 1 })?;
        }
        Ok(())
    }
}

impl Executor<QuadApp> for QuadExecutor {
    async fn run_task(
        &mut self,
        args: QuadArgs,
        ps: &mut ParamClient,
    ) -> Result<QuadOutput, AppError> {
        let w = ps.get(&self.w, self.row).await?;
        let t = target(self.row);
        let grad: Vec<f32> = w.iter().zip(t).map(|(w, t)| 2.0 * (w - t)).collect();
        ps.update(&self.w, self.row, &grad)?;
        Ok(QuadOutput {
            step: args.step,
            read: w.to_vec(),
        })
    }
}

/// The optimizer, step by step, in f64: the oracle for one row that gets one gradient per step.
enum Oracle {
    Adam {
        p: Adam,
        m: Vec<f64>,
        v: Vec<f64>,
        t: i32,
    },
    AdaGrad {
        p: AdaGrad,
        accum: Vec<f64>,
    },
}

impl Oracle {
    fn new(rule: UpdateRule) -> Self {
        match rule {
            UpdateRule::Adam(p) => Oracle::Adam {
                p,
                m: vec![0.0; QUAD_WIDTH],
                v: vec![0.0; QUAD_WIDTH],
                t: 0,
            },
            UpdateRule::AdaGrad(p) => Oracle::AdaGrad {
                p,
                accum: vec![0.0; QUAD_WIDTH],
            },
            UpdateRule::Add => unreachable!("the oracle models optimizers"),
        }
    }

    fn step(&mut self, w: &mut [f64], grad: &[f64]) {
        match self {
            Oracle::Adam { p, m, v, t } => {
                *t += 1;
                let (b1, b2) = (f64::from(p.beta1), f64::from(p.beta2));
                for j in 0..w.len() {
                    m[j] = b1 * m[j] + (1.0 - b1) * grad[j];
                    v[j] = b2 * v[j] + (1.0 - b2) * grad[j] * grad[j];
                    let m_hat = m[j] / (1.0 - b1.powi(*t));
                    let v_hat = v[j] / (1.0 - b2.powi(*t));
                    w[j] -= f64::from(p.lr) * m_hat / (v_hat.sqrt() + f64::from(p.eps));
                }
            }
            Oracle::AdaGrad { p, accum } => {
                for j in 0..w.len() {
                    accum[j] += grad[j] * grad[j];
                    w[j] -= f64::from(p.lr) * grad[j] / (accum[j].sqrt() + f64::from(p.eps));
                }
            }
        }
    }
}

fn run_quadratic(app: QuadApp, job: &JobConfig) -> (QuadDriver, harp::ParamDump, Table<f32>) {
    let app = Arc::new(app);
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app.clone(), job))
        .unwrap_or_else(|e| panic!("the quadratic job failed: {e}"));
    assert_eq!(outcome.stats.node.updates_rejected, 0);
    let params = outcome.params.expect("parameters collected");
    (outcome.driver, params, app.w.clone())
}

/// Each executor owns a row and sends one gradient per step: the row must follow the
/// optimizer's own trajectory step by step and end at its target.
fn optimizer_converges_through_the_runtime(rule: UpdateRule, steps: u32, tolerance: f32) {
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 2,
        shards_per_server: 4,
        collect_params: true,
        scar: None,
    };
    let (driver, params, w) = run_quadratic(QuadApp::new(rule, steps, false), &job);
    for e in 0..job.num_executors() {
        let row = u64::from(e);
        let goal = target(row);
        let reads = &driver.reads[&e];
        assert_eq!(reads.len(), steps as usize, "executor {e}");
        let mut oracle = Oracle::new(rule);
        let mut expected = vec![0.0f64; QUAD_WIDTH];
        for (step, read) in reads.iter().enumerate() {
            for (j, (&got, &want)) in read.iter().zip(&expected).enumerate() {
                assert!(
                    (f64::from(got) - want).abs() <= 1e-3 * (1.0 + want.abs()),
                    "{rule:?}: row {row} column {j} read {got} at step {step}, the optimizer \
                     gives {want}"
                );
            }
            let grad: Vec<f64> = expected
                .iter()
                .zip(goal)
                .map(|(w, t)| 2.0 * (w - f64::from(t)))
                .collect();
            oracle.step(&mut expected, &grad);
        }
        let end = params.row(&w, row).expect("the row exists");
        for (j, (&got, &want)) in end.iter().zip(&goal).enumerate() {
            assert!(
                (got - want).abs() <= tolerance,
                "{rule:?}: row {row} column {j} ended at {got}, target {want}"
            );
        }
    }
}

#[test]
fn a_server_side_adam_table_minimizes_a_quadratic() {
    let adam = Adam {
        lr: 0.1,
        ..Adam::default()
    };
    optimizer_converges_through_the_runtime(UpdateRule::Adam(adam), 400, 0.05);
}

#[test]
fn a_server_side_adagrad_table_minimizes_a_quadratic() {
    let adagrad = AdaGrad { lr: 1.0, eps: 1e-8 };
    optimizer_converges_through_the_runtime(UpdateRule::AdaGrad(adagrad), 400, 0.05);
}

#[test]
fn concurrent_gradients_to_one_adam_row_converge() {
    // Eight executors push gradients to the same row; a flush sums those that meet, and the
    // server takes one Adam step per flush. Every executor pulls toward target(0).
    let adam = Adam {
        lr: 0.05,
        ..Adam::default()
    };
    let job = JobConfig {
        workers: 2,
        servers: 1,
        executors_per_worker: 4,
        shards_per_server: 2,
        collect_params: true,
        scar: None,
    };
    let (_, params, w) = run_quadratic(QuadApp::new(UpdateRule::Adam(adam), 300, true), &job);
    let end = params.row(&w, 0).expect("row 0 exists");
    for (j, (&got, want)) in end.iter().zip(target(0)).enumerate() {
        assert!(
            (got - want).abs() <= 0.1,
            "column {j} ended at {got}, target {want}"
        );
    }
}
