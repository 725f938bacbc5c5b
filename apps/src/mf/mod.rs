//! Matrix factorization of explicit ratings (`R ≈ μ + P Qᵀ`) by alternating least squares
//! (ALS-WR, as SCAR's MF) or by stochastic gradient descent, model-parallel on harp.
//!
//! Both factor matrices live on the parameter servers: `mf.users` (one row of `rank`
//! values per user) and `mf.items` (one per item); the items start uniform in
//! `[-init_scale, init_scale]`, the users at zero. Executor `e` of `E` owns the users
//! `u ≡ e (mod E)` and the items `i ≡ e (mod E)`, with their training ratings in
//! compressed-row form both ways. One iteration is three phases, each one micro-task per
//! executor with a barrier between them (a completion arrives only once its updates are
//! applied, so the next phase reads them):
//!
//! 1. `SolveUsers`: read the item rows its users rated, solve every owned user's
//!    regularized least squares ([`harp_kernels::als_half_step`]), send `new − old`;
//! 2. `SolveItems`: the same for its items against the user rows;
//! 3. `Eval`: squared errors of its users' training and held-out ratings.
//!
//! With [`MfSolver::Sgd`] the first two phases are replaced by `E` stratified SGD
//! sub-rounds (DSGD): the items are split into `E` blocks (`i mod E`), and in sub-round `s`
//! executor `e` runs SGD ([`harp_kernels::mf::sgd_step`]) over its users' ratings of items in
//! block `(e + s) mod E`, reading those user and item rows and sending `new − old`. Users are
//! owned and each block is worked on by one executor per sub-round, so no two executors
//! update the same row at once and no update is lost or stale.
//!
//! Ratings are centred on the training mean μ, so a user or item with no training rating
//! predicts μ. The driver reports `train_rmse` and `test_rmse` per iteration.

mod driver;
mod executor;
#[cfg(feature = "cuda")]
mod gpu;

pub use driver::{MfDriver, MfMetrics, MfObserver};
pub use executor::MfExecutor;

use crate::data::RatingsData;
use crate::device::Compute;
use harp::{App, AppError, ExecutorId, Init, JobInfo, Table, TableSet, UpdateRule};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How the factors are fitted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum MfSolver {
    /// Alternating least squares (ALS-WR): each phase solves one side exactly.
    #[default]
    Als,
    /// Stratified SGD with step `lr`, every rating once per iteration.
    Sgd { lr: f32 },
}

/// Hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct MfConfig {
    pub rank: usize,
    /// Regularization. ALS-WR: a row with `n` ratings is regularized by `λ·n`; SGD: the L2
    /// term of every step (`p += lr·(e·q − λ·p)`).
    pub lambda: f32,
    pub solver: MfSolver,
    pub iterations: u32,
    /// Items start uniform in `[-init_scale, init_scale]`.
    pub init_scale: f32,
    pub seed: u64,
}

impl Default for MfConfig {
    fn default() -> Self {
        Self {
            rank: 20,
            lambda: 0.1,
            solver: MfSolver::Als,
            iterations: 10,
            init_scale: 0.1,
            seed: 1,
        }
    }
}

/// One MF micro-task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum MfArgs {
    SolveUsers {
        iteration: u32,
    },
    SolveItems {
        iteration: u32,
    },
    Eval {
        iteration: u32,
    },
    /// SGD over the executor's ratings of the items of block `(e + sub_round) mod E`.
    SgdBlock {
        iteration: u32,
        sub_round: u32,
    },
}

/// What a micro-task reports.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub enum MfOutput {
    Solved {
        rows: u64,
    },
    Eval {
        train_sse: f64,
        train_count: u64,
        test_sse: f64,
        test_count: u64,
    },
}

/// The MF app over a training and a held-out set of the same users and items.
pub struct MfApp {
    config: MfConfig,
    train: Arc<RatingsData>,
    test: Arc<RatingsData>,
    mean: f32,
    tables: TableSet,
    users: Table<f32>,
    items: Table<f32>,
    observer: Arc<dyn MfObserver>,
    compute: Compute,
}

impl MfApp {
    pub fn new(
        config: MfConfig,
        train: Arc<RatingsData>,
        test: Arc<RatingsData>,
        observer: Arc<dyn MfObserver>,
    ) -> Result<Self, AppError> {
        if config.rank == 0 || config.rank > 128 {
            return Err(format!("mf: the rank must be in 1..=128, got {}", config.rank).into());
        }
        if !(config.lambda.is_finite() && config.lambda > 0.0) {
            return Err(format!(
                "mf: lambda must be a positive number, got {}",
                config.lambda
            )
            .into());
        }
        if !(config.init_scale.is_finite() && config.init_scale > 0.0) {
            return Err(format!(
                "mf: the initial scale must be a positive number, got {}",
                config.init_scale
            )
            .into());
        }
        if let MfSolver::Sgd { lr } = config.solver {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(
                    format!("mf: the learning rate must be a positive number, got {lr}").into(),
                );
            }
        }
        if config.iterations == 0 {
            return Err("mf: iterations must be at least 1".into());
        }
        if train.is_empty() {
            return Err(format!("mf: no training ratings in {}", train.source).into());
        }
        if train.num_users() != test.num_users() || train.num_items() != test.num_items() {
            return Err("mf: the training and held-out sets index different users or items".into());
        }
        let mut tables = TableSet::new();
        let users = tables.dense_f32("mf.users", config.rank, UpdateRule::Add, Init::Zeros)?;
        let items = tables.dense_f32(
            "mf.items",
            config.rank,
            UpdateRule::Add,
            Init::Uniform {
                scale: config.init_scale,
                seed: config.seed,
            },
        )?;
        Ok(Self {
            mean: train.mean() as f32,
            config,
            train,
            test,
            tables,
            users,
            items,
            observer,
            compute: Compute::Cpu,
        })
    }

    /// Runs the ALS solves and SGD steps on `compute` (`--device`); the CPU by default.
    /// The RMSE evaluation stays on the CPU.
    pub fn with_compute(mut self, compute: Compute) -> Result<Self, AppError> {
        #[cfg(feature = "cuda")]
        compute.prepare(&gpu::KERNELS)?;
        self.compute = compute;
        Ok(self)
    }

    pub fn users(&self) -> &Table<f32> {
        &self.users
    }

    pub fn items(&self) -> &Table<f32> {
        &self.items
    }

    /// The training mean the ratings are centred on.
    pub fn mean(&self) -> f32 {
        self.mean
    }
}

impl App for MfApp {
    type Args = MfArgs;
    type Output = MfOutput;
    type Driver = MfDriver;
    type Executor = MfExecutor;

    fn name(&self) -> &str {
        "mf"
    }

    fn settings(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            format!("lambda {:?}", c.lambda),
            format!("solver {:?}", c.solver),
            format!("iterations {}", c.iterations),
            format!("init scale {:?}", c.init_scale),
            format!("seed {}", c.seed),
            format!("training ratings {}", self.train.len()),
            format!("held-out ratings {}", self.test.len()),
        ]
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<MfDriver, AppError> {
        Ok(MfDriver::new(
            self.config.iterations,
            job.num_executors,
            matches!(self.config.solver, MfSolver::Sgd { .. }),
            self.observer.clone(),
        ))
    }

    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<MfExecutor, AppError> {
        MfExecutor::new(
            id.0,
            job.num_executors.max(1),
            &self.config,
            self.mean,
            &self.train,
            &self.test,
            self.users.clone(),
            self.items.clone(),
            &self.compute,
        )
    }
}
