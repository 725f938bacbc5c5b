//! Rows larger than one message between processes (a frame holds at most 64 MiB) travel in
//! parts: a read's answer, a flush's updates, a SCAR round's distances and saved rows. A
//! counter job runs with one worker-only node and one server-only node (in this process,
//! over QUIC on loopback), so every read, flush and checkpoint request crosses the link.
//!
//! With 8 rows of 2M counters (128 MB in all), each task first reads every row at once (a
//! 128 MB answer), then adds the counter's increments to nearly every row (about 110–128 MB
//! in one flush to the one server), and every round of the running checkpoint saves every
//! row (128 MB). With 300 000 rows of one counter, the same answers are made of many small
//! rows, more than one part holds, and the read's and the save's keys go in parts too. Either job must end with every row exact and no failed
//! checkpoint round or save.

use harp::{
    App, AppError, ClusterOptions, Completion, Driver, DriverContext, Executor, ExecutorId,
    JobInfo, NodeRoles, ParamClient, ScarOptions, Selection, TableSet,
};
use harp_apps::counter::{
    CounterApp, CounterArgs, CounterConfig, CounterDriver, CounterExecutor, CounterOutput,
};
use harp_tests::run_across_in_process;
use std::sync::Arc;

const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The counter, whose executor reads the whole table before each task.
struct WholeTable(CounterApp, CounterConfig);

struct WholeTableDriver(CounterDriver);

struct WholeTableExecutor {
    inner: CounterExecutor,
    counters: harp::Table<i64>,
    /// The counter's rows and width.
    rows: u64,
    width: usize,
}

impl App for WholeTable {
    type Args = CounterArgs;
    type Output = CounterOutput;
    type Driver = WholeTableDriver;
    type Executor = WholeTableExecutor;

    fn name(&self) -> &str {
        self.0.name()
    }

    fn tables(&self) -> &TableSet {
        self.0.tables()
    }

    fn create_driver(&self, job: &JobInfo) -> Result<WholeTableDriver, AppError> {
        Ok(WholeTableDriver(self.0.create_driver(job)?))
    }

    fn create_executor(
        &self,
        id: ExecutorId,
        job: &JobInfo,
    ) -> Result<WholeTableExecutor, AppError> {
        Ok(WholeTableExecutor {
            inner: self.0.create_executor(id, job)?,
            counters: self.0.counters().clone(),
            rows: self.1.rows,
            width: self.1.width,
        })
    }
}

impl Driver<WholeTable> for WholeTableDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        <CounterDriver as Driver<CounterApp>>::dispatch_initial_tasks(&mut self.0, ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<CounterOutput>,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        <CounterDriver as Driver<CounterApp>>::handle_task_completion(&mut self.0, completion, ctx)
    }
}

impl Executor<WholeTable> for WholeTableExecutor {
    async fn run_task(
        &mut self,
        args: CounterArgs,
        ps: &mut ParamClient,
    ) -> Result<CounterOutput, AppError> {
        let all: Vec<u64> = (0..self.rows).collect();
        let rows = ps.get_many(&self.counters, &all).await?;
        if rows.len() as u64 != self.rows || rows.iter().any(|r| r.len() != self.width) {
            return Err(format!(
                "a whole-table read returned {} rows, {} of them not {} wide",
                rows.len(),
                rows.iter().filter(|r| r.len() != self.width).count(),
                self.width
            )
            .into());
        }
        <CounterExecutor as Executor<CounterApp>>::run_task(&mut self.inner, args, ps).await
    }
}

/// Runs `config` with a whole-table read before each task, SCAR saving every row every
/// iteration, on a worker-only and a server-only node; checks every row exact and that no
/// round or save failed. Returns the checkpoint statistics.
fn run_whole_table(config: CounterConfig) -> harp::CheckpointStats {
    let counter = CounterApp::new(config.clone()).expect("a valid counter");
    let app = Arc::new(WholeTable(counter, config.clone()));
    let options = ClusterOptions {
        nodes: 2,
        executors_per_worker: 1,
        collect_params: true,
        join_timeout_ms: 10_000,
        scar: Some(ScarOptions {
            period: 1,
            fraction: 1.0,
            selection: Selection::Priority,
            ..ScarOptions::default()
        }),
        ..ClusterOptions::default()
    };
    let roles = [NodeRoles::WORKER, NodeRoles::SERVER];
    let outcome = run_across_in_process(&app, options, &roles);
    let outcome = outcome.expect("the job runs");
    let params = outcome.params.as_ref().expect("parameters collected");
    let updated = outcome.driver.0.expected().len();
    assert!(updated > 0);
    assert_eq!(
        app.0.verify(&outcome.driver.0, params),
        Ok(updated),
        "every updated row exact"
    );
    let checkpoints = outcome.stats.checkpoints.clone();
    assert!(checkpoints.rounds > 0, "{checkpoints:?}");
    assert_eq!(checkpoints.rounds_failed, 0, "{checkpoints:?}");
    assert_eq!(checkpoints.saves_failed, 0, "{checkpoints:?}");
    checkpoints
}

#[test]
fn a_read_a_flush_and_a_checkpoint_save_larger_than_a_message_cross_in_parts() {
    const ROWS: u64 = 8;
    // 16 MB of i64 counters a row.
    const WIDTH: usize = 2_000_000;
    const { assert!(ROWS as usize * WIDTH * 8 > MESSAGE_BYTES_MAX) };
    let checkpoints = run_whole_table(CounterConfig {
        tasks: 12,
        rows: ROWS,
        width: WIDTH,
        // 32 draws over 8 rows: a task misses a given row with probability (7/8)^32 < 1.4%,
        // so its flush carries nearly every row.
        updates_per_task: 32,
        ..CounterConfig::default()
    });
    assert!(
        checkpoints.bytes_saved / checkpoints.rounds > MESSAGE_BYTES_MAX as u64,
        "a round saves more than a message holds: {checkpoints:?}"
    );
}

#[test]
fn answers_of_more_small_rows_than_one_part_holds_cross_in_parts() {
    // A part holds at most 16 MiB counting 64 bytes a row besides its values: 233 016 rows
    // of one counter, or 262 144 distances.
    const ROWS: u64 = 300_000;
    let checkpoints = run_whole_table(CounterConfig {
        tasks: 12,
        rows: ROWS,
        width: 1,
        updates_per_task: 1_000,
        ..CounterConfig::default()
    });
    // The first read creates every row, so every round saves all of them.
    assert_eq!(
        checkpoints.rows_saved,
        checkpoints.rounds * ROWS,
        "{checkpoints:?}"
    );
}
