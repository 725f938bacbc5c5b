//! The node cache serves tasks that share a version, and refetches for tasks dispatched after
//! a completion (Litz §4.4).

use harp::{
    App, AppError, Completion, Driver, DriverContext, Executor, ExecutorId, Init, JobConfig,
    JobInfo, ParamClient, Table, TableSet, UpdateRule,
};
use std::sync::Arc;

struct Reader {
    tables: TableSet,
    table: Table<f32>,
    rounds: u32,
}

struct RoundDriver {
    executors: u32,
    rounds: u32,
    pending: u32,
    round: u32,
    /// Value of row 0 seen by each task, by round.
    seen: Vec<Vec<f32>>,
}

struct ReadExecutor {
    table: Table<f32>,
}

impl App for Reader {
    type Args = u32;
    type Output = (u32, f32);
    type Driver = RoundDriver;
    type Executor = ReadExecutor;
    fn name(&self) -> &str {
        "reader"
    }
    fn tables(&self) -> &TableSet {
        &self.tables
    }
    fn create_driver(&self, job: &JobInfo) -> Result<RoundDriver, AppError> {
        Ok(RoundDriver {
            executors: job.num_executors,
            rounds: self.rounds,
            pending: 0,
            round: 0,
            seen: Vec::new(),
        })
    }
    fn create_executor(&self, _id: ExecutorId, _job: &JobInfo) -> Result<ReadExecutor, AppError> {
        Ok(ReadExecutor {
            table: self.table.clone(),
        })
    }
}

impl RoundDriver {
    fn round(&mut self, ctx: &mut DriverContext<'_, u32>) -> Result<(), AppError> {
        for e in 0..self.executors {
            ctx.dispatch(ExecutorId(e), self.round)?;
        }
        self.pending = self.executors;
        self.seen.push(Vec::new());
        Ok(())
    }
}

impl Driver<Reader> for RoundDriver {
    fn dispatch_initial_tasks(&mut self, ctx: &mut DriverContext<'_, u32>) -> Result<(), AppError> {
        self.round(ctx)
    }
    fn handle_task_completion(
        &mut self,
        c: Completion<(u32, f32)>,
        ctx: &mut DriverContext<'_, u32>,
    ) -> Result<(), AppError> {
        self.seen[c.output.0 as usize].push(c.output.1);
        self.pending -= 1;
        if self.pending == 0 {
            self.round += 1;
            if self.round < self.rounds {
                self.round(ctx)?;
            }
        }
        Ok(())
    }
}

impl Executor<Reader> for ReadExecutor {
    async fn run_task(&mut self, round: u32, ps: &mut ParamClient) -> Result<(u32, f32), AppError> {
        let row = ps.get(&self.table, 0).await?;
        let value = row[0];
        ps.update(&self.table, 0, &[1.0, 0.0])?;
        Ok((round, value))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_version_tasks_share_reads_and_later_rounds_see_every_update() {
    let mut tables = TableSet::new();
    let table = tables
        .dense_f32("t", 2, UpdateRule::Add, Init::Zeros)
        .unwrap();
    let app = Arc::new(Reader {
        tables,
        table,
        rounds: 20,
    });
    let config = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 8,
        collect_params: true,
        ..JobConfig::default()
    };
    let outcome = harp::run_job(app.clone(), &config).await.unwrap();
    let executors = 16.0;
    // Round r is dispatched after every completion of rounds < r, so every task of round r
    // reads exactly 16 * r (and its own round's updates are not yet applied when it reads).
    for (r, seen) in outcome.driver.seen.iter().enumerate() {
        assert_eq!(seen.len(), 16);
        for v in seen {
            assert_eq!(*v, executors * r as f32, "round {r} read {v}");
        }
    }
    let params = outcome.params.unwrap();
    assert_eq!(params.row(&app.table, 0), Some(&[16.0 * 20.0, 0.0][..]));
    // 16 tasks of one version read one row: far fewer server fetches than reads.
    let s = outcome.stats.node;
    assert_eq!(s.cache_hits + s.cache_misses + s.fetch_waits, 320);
    assert!(
        s.cache_misses <= 20 * 2,
        "every round should fetch about once: {s:?}"
    );
    assert_eq!(outcome.stats.tasks_completed, 320);
    assert!(s.flushes >= 20);
}
