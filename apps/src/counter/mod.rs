//! The counter app: exact accounting of parameter updates (DESIGN §4).
//!
//! Every micro-task adds known positive integers to known rows of an `i64` table. The updates
//! of task `seq` are a pure function of `(seed, seq)`, so the driver knows the exact sum every
//! row must reach from the completions it was handed. Each task also reads one probe row and
//! checks it against the sum the driver had seen completed when it dispatched the task: a
//! smaller value means the task missed an update it was guaranteed to observe (the Litz
//! consistency rule), and the task fails loudly. At the end every row is compared with its
//! expected sum; any difference fails the job, but for the losses SCAR allows after a
//! server's recovery or an injected fault ([`verdict`]).

mod ballast;
mod driver;
mod executor;
mod plan;
pub mod verdict;

pub use driver::CounterDriver;
pub use executor::CounterExecutor;
pub use plan::{task_updates, CounterConfig};
pub use verdict::Verdict;

use harp::{App, AppError, ExecutorId, JobInfo, JobStats, ParamDump, Table, TableSet};
use serde::{Deserialize, Serialize};

/// Arguments of one counter task.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CounterArgs {
    /// Sequence number: the task's updates are `task_updates(seed, seq, ..)`.
    pub seq: u64,
    /// The row the task reads before updating.
    pub probe_row: u64,
    /// Per column, the probe row's sum over every task the driver saw complete before
    /// dispatching this one: the value read must be at least this.
    pub probe_floor: Vec<i64>,
}

/// Output of one counter task.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CounterOutput {
    pub seq: u64,
    /// The probe row as the task read it.
    pub probe_seen: Vec<i64>,
}

/// The counter app.
pub struct CounterApp {
    config: CounterConfig,
    tables: TableSet,
    counters: Table<i64>,
}

impl CounterApp {
    pub fn new(config: CounterConfig) -> Result<Self, AppError> {
        config.validate()?;
        let mut tables = TableSet::new();
        let counters = tables.counters_i64("counters", config.width)?;
        // SCAR's distances in L1: how many increments a row gained since it was saved.
        tables.set_norm(counters.id(), harp::Norm::L1)?;
        Ok(Self {
            config,
            tables,
            counters,
        })
    }

    pub fn counters(&self) -> &Table<i64> {
        &self.counters
    }

    /// Compares every row of `params` with the driver's expected sums. Returns the number of
    /// rows checked, or a description of the first differences.
    pub fn verify(&self, driver: &CounterDriver, params: &ParamDump) -> Result<usize, String> {
        let expected = driver.expected();
        verdict::check(self, expected, params, &verdict::Allowed::Nowhere, None).map(|v| v.rows)
    }

    /// [`Self::verify`] after the losses the job reported (`stats`: servers recovered from
    /// SCAR's running checkpoint, injected faults): see [`verdict`].
    pub fn verdict(
        &self,
        driver: &CounterDriver,
        params: &ParamDump,
        stats: &JobStats,
    ) -> Result<Verdict, String> {
        verdict::verdict(self, driver.expected(), params, stats)
    }
}

impl App for CounterApp {
    type Args = CounterArgs;
    type Output = CounterOutput;
    type Driver = CounterDriver;
    type Executor = CounterExecutor;

    fn name(&self) -> &str {
        "counter"
    }

    fn settings(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            format!("tasks {}", c.tasks),
            format!("updates per task {}", c.updates_per_task),
            format!("window {}", c.window),
            format!("seed {}", c.seed),
            format!("task sleep {} us", c.task_sleep_us),
            format!("state bytes {}", c.state_bytes),
        ]
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<CounterDriver, AppError> {
        Ok(CounterDriver::new(self.config.clone(), job.num_executors))
    }

    fn create_executor(&self, id: ExecutorId, _job: &JobInfo) -> Result<CounterExecutor, AppError> {
        let ballast = ballast::Ballast::new(id, self.config.state_bytes)?;
        Ok(CounterExecutor::new(
            self.config.clone(),
            self.counters.clone(),
            ballast,
        ))
    }

    fn restore_executor(
        &self,
        id: ExecutorId,
        _job: &JobInfo,
        state: Vec<u8>,
    ) -> Result<CounterExecutor, AppError> {
        let ballast = ballast::Ballast::restore(id, self.config.state_bytes, state)?;
        Ok(CounterExecutor::new(
            self.config.clone(),
            self.counters.clone(),
            ballast,
        ))
    }

    /// The counter's state (its ballast) does not touch the tables, so a dead worker's
    /// executor takes the one it saved in a consistent checkpoint whatever its age; the
    /// restore checks it arrived whole. Without one, afresh.
    fn recover_executor(
        &self,
        id: ExecutorId,
        job: &JobInfo,
        saved: Option<Vec<u8>>,
    ) -> Result<CounterExecutor, AppError> {
        match saved {
            Some(state) => self.restore_executor(id, job, state),
            None => self.create_executor(id, job),
        }
    }
}
