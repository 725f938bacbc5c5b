//! The runtime's typed errors, seen through tiny apps defined here: what `harp::run_job`
//! returns when an executor fails or panics, when a driver dispatches to an executor that
//! does not exist, when an update is malformed, when an executor cannot be created; how a job
//! ends when the driver dispatches nothing or finishes early. (Server-side optimizer tables
//! driving a quadratic to its minimum: `server_optimizers.rs`.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use harp::{
    Adam, App, AppError, Completion, Driver, DriverContext, Executor, ExecutorId, HarpError, Init,
    JobConfig, JobInfo, JobOutcome, ParamClient, Table, TableId, TableSet, TaskId, UpdateRule,
};
use harp_tests::{runtime, Threads};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
// The tiny app: executor `e` adds 1 to every column of row `e` of table "t" once per round;
// its plan can inject one fault.
// ---------------------------------------------------------------------------------------

/// Columns of table "t".
const WIDTH: usize = 3;

/// What the executor does wrong, once, at `Plan::fault_at`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Fault {
    #[default]
    None,
    ReturnErr,
    Panic,
    WrongWidth,
    NaN,
    Infinite,
    /// `update_many` over rows `e` and `e + 100` whose second row holds a NaN.
    BatchWithNaN,
    /// `update_many` over two rows with five values.
    BatchBadShape,
    /// Reads through an `i64` handle whose id is the app's `f32` table.
    WrongKindHandle,
    /// Reads through an `f32` handle whose id is the app's `f32` table but whose width is not.
    WrongWidthHandle,
    /// Reads through a handle of a table the app never declared.
    UndeclaredTable,
}

/// What the driver does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Dispatch {
    /// Round 0 to every executor, then each executor's next round on its completion.
    #[default]
    Rounds,
    /// Nothing at all.
    Nothing,
    /// Round 0 to executor `num_executors + 2` first.
    OutOfRangeAtStart,
    /// Like `Rounds`, but after this many completions a task to executor `num_executors`.
    OutOfRangeAfter(u64),
    /// Like `Rounds`, but `ctx.finish()` right after the initial dispatch.
    FinishAtStart,
    /// Like `Rounds`, but `ctx.finish()` once this many completions were handled.
    FinishAfter(u64),
    /// Like `Rounds`, but the driver returns an error on this completion.
    FailAfter(u64),
}

#[derive(Clone, Debug, Default)]
struct Plan {
    /// Tasks per executor, one after the other.
    rounds: u32,
    fault: Fault,
    /// `(executor, round)` where the fault happens.
    fault_at: Option<(u32, u32)>,
    /// Return an update or read error from the task (`?`) instead of noting it and going on.
    propagate: bool,
    dispatch: Dispatch,
    /// Executor whose creation fails.
    fail_create: Option<u32>,
    fail_create_driver: bool,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
struct TinyArgs {
    round: u32,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
struct TinyOutput {
    round: u32,
    /// Column 0 of the executor's row as the task read it.
    seen: f32,
}

/// What the app's pieces report to the test.
#[derive(Default)]
struct Probe {
    tasks_run: AtomicU64,
    executors_created: AtomicU64,
    /// Errors the executors noted (not propagated).
    noted: Mutex<Vec<HarpError>>,
    /// The task id each `(executor, round)` ran as.
    task_ids: Mutex<BTreeMap<(u32, u32), TaskId>>,
}

impl Probe {
    fn noted(&self) -> std::sync::MutexGuard<'_, Vec<HarpError>> {
        self.noted.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn task_of(&self, executor: u32, round: u32) -> Option<TaskId> {
        let ids = self.task_ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.get(&(executor, round)).copied()
    }
}

struct TinyApp {
    plan: Plan,
    tables: TableSet,
    table: Table<f32>,
    wrong_kind: Table<i64>,
    wrong_width: Table<f32>,
    undeclared: Table<f32>,
    probe: Arc<Probe>,
}

impl TinyApp {
    fn new(plan: Plan) -> Self {
        let mut tables = TableSet::new();
        let table = tables
            .dense_f32("t", WIDTH, UpdateRule::Add, Init::Zeros)
            .unwrap();
        // Handles from other apps' declarations: same id with another element type, same id
        // and type with another width, and an id this app never declared.
        let wrong_width = TableSet::new()
            .dense_f32("t", WIDTH + 2, UpdateRule::Add, Init::Zeros)
            .unwrap();
        assert_eq!(wrong_width.id(), table.id());
        let mut other = TableSet::new();
        let wrong_kind = other.counters_i64("c", WIDTH).unwrap();
        other.counters_i64("c2", WIDTH).unwrap();
        let undeclared = other
            .dense_f32("far", WIDTH, UpdateRule::Add, Init::Zeros)
            .unwrap();
        assert_eq!(wrong_kind.id(), table.id());
        assert_eq!(undeclared.id(), TableId(2));
        Self {
            plan,
            tables,
            table,
            wrong_kind,
            wrong_width,
            undeclared,
            probe: Arc::default(),
        }
    }
}

struct TinyDriver {
    plan: Plan,
    executors: u32,
    completed: u64,
    /// Every completion, in the order the driver saw them.
    seen: Vec<Completion<TinyOutput>>,
    /// Versions the context reported that differ from the completions handled so far.
    version_errors: Vec<String>,
}

struct TinyExecutor {
    id: ExecutorId,
    plan: Plan,
    table: Table<f32>,
    wrong_kind: Table<i64>,
    wrong_width: Table<f32>,
    undeclared: Table<f32>,
    probe: Arc<Probe>,
}

impl App for TinyApp {
    type Args = TinyArgs;
    type Output = TinyOutput;
    type Driver = TinyDriver;
    type Executor = TinyExecutor;

    fn name(&self) -> &str {
        "tiny"
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<TinyDriver, AppError> {
        if self.plan.fail_create_driver {
            return Err("the tiny driver refuses to start".into());
        }
        Ok(TinyDriver {
            plan: self.plan.clone(),
            executors: job.num_executors,
            completed: 0,
            seen: Vec::new(),
            version_errors: Vec::new(),
        })
    }

    fn create_executor(&self, id: ExecutorId, _job: &JobInfo) -> Result<TinyExecutor, AppError> {
        if self.plan.fail_create == Some(id.0) {
            return Err(format!("no input partition for {id}").into());
        }
        self.probe.executors_created.fetch_add(1, Ordering::Relaxed);
        Ok(TinyExecutor {
            id,
            plan: self.plan.clone(),
            table: self.table.clone(),
            wrong_kind: self.wrong_kind.clone(),
            wrong_width: self.wrong_width.clone(),
            undeclared: self.undeclared.clone(),
            probe: self.probe.clone(),
        })
    }
}

impl TinyDriver {
    fn check_version(&mut self, ctx: &DriverContext<'_, TinyArgs>) {
        if ctx.version().0 != self.completed {
            self.version_errors.push(format!(
                "version {} after {} completions",
                ctx.version().0,
                self.completed
            ));
        }
    }
}

impl Driver<TinyApp> for TinyDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, TinyArgs>,
    ) -> Result<(), AppError> {
        self.check_version(ctx);
        assert_eq!(ctx.num_executors(), self.executors);
        match self.plan.dispatch {
            Dispatch::Nothing => return Ok(()),
            Dispatch::OutOfRangeAtStart => {
                ctx.dispatch(ExecutorId(self.executors + 2), TinyArgs { round: 0 })?;
            }
            _ => {}
        }
        if self.plan.rounds > 0 {
            for e in 0..self.executors {
                ctx.dispatch(ExecutorId(e), TinyArgs { round: 0 })?;
            }
        }
        if self.plan.dispatch == Dispatch::FinishAtStart {
            ctx.finish();
        }
        Ok(())
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<TinyOutput>,
        ctx: &mut DriverContext<'_, TinyArgs>,
    ) -> Result<(), AppError> {
        self.completed += 1;
        self.check_version(ctx);
        let (executor, round) = (completion.executor, completion.output.round);
        self.seen.push(completion);
        match self.plan.dispatch {
            Dispatch::FinishAfter(n) if self.completed == n => {
                ctx.finish();
                return Ok(());
            }
            Dispatch::OutOfRangeAfter(n) if self.completed == n => {
                ctx.dispatch(ExecutorId(self.executors), TinyArgs { round: 0 })?;
            }
            Dispatch::FailAfter(n) if self.completed == n => {
                return Err(format!("the tiny driver gives up after {n} completions").into());
            }
            _ => {}
        }
        if round + 1 < self.plan.rounds {
            ctx.dispatch(executor, TinyArgs { round: round + 1 })?;
        }
        Ok(())
    }
}

impl TinyExecutor {
    /// The injected fault, as the `Result` of the call that goes wrong.
    async fn fault(&mut self, round: u32, ps: &mut ParamClient) -> Result<(), HarpError> {
        let row = u64::from(self.id.0);
        match self.plan.fault {
            Fault::None => Ok(()),
            Fault::ReturnErr | Fault::Panic => unreachable!("handled by run_task"),
            Fault::WrongWidth => ps.update(&self.table, row, &[1.0; WIDTH - 1]),
            Fault::NaN => ps.update(&self.table, row, &[1.0, f32::NAN, 1.0]),
            Fault::Infinite => ps.update(&self.table, row, &[f32::INFINITY, 0.0, 0.0]),
            Fault::BatchWithNaN => ps.update_many(
                &self.table,
                &[row, row + 100],
                &[1.0, 1.0, 1.0, 1.0, f32::NAN, 1.0],
            ),
            Fault::BatchBadShape => ps.update_many(&self.table, &[row, row + 100], &[1.0; 5]),
            Fault::WrongKindHandle => ps.get(&self.wrong_kind, row).await.map(drop),
            Fault::WrongWidthHandle => ps.get(&self.wrong_width, row).await.map(drop),
            Fault::UndeclaredTable => ps.get(&self.undeclared, u64::from(round)).await.map(drop),
        }
    }
}

impl Executor<TinyApp> for TinyExecutor {
    async fn run_task(
        &mut self,
        args: TinyArgs,
        ps: &mut ParamClient,
    ) -> Result<TinyOutput, AppError> {
        self.probe.tasks_run.fetch_add(1, Ordering::Relaxed);
        assert_eq!(ps.executor(), self.id);
        self.probe
            .task_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((self.id.0, args.round), ps.task());
        let row = u64::from(self.id.0);
        let seen = ps.get(&self.table, row).await?[0];
        if self.plan.fault_at == Some((self.id.0, args.round)) {
            match self.plan.fault {
                Fault::ReturnErr => {
                    return Err(format!("tiny failure in round {}", args.round).into())
                }
                Fault::Panic => panic!("tiny panic in round {}", args.round),
                _ => {}
            }
            if let Err(e) = self.fault(args.round, ps).await {
                if self.plan.propagate {
                    return Err(e.into());
                }
                self.probe.noted().push(e);
            }
        }
        ps.update(&self.table, row, &[1.0; WIDTH])?;
        Ok(TinyOutput {
            round: args.round,
            seen,
        })
    }
}

fn tiny_job(workers: u32, executors_per_worker: u32) -> JobConfig {
    JobConfig {
        workers,
        servers: 2,
        executors_per_worker,
        shards_per_server: 4,
        collect_params: true,
        scar: None,
    }
}

fn run_tiny(plan: Plan, job: &JobConfig) -> (Result<JobOutcome<TinyApp>, HarpError>, Arc<TinyApp>) {
    let app = Arc::new(TinyApp::new(plan));
    let result = runtime(Threads::Multi(2)).block_on(harp::run_job(app.clone(), job));
    (result, app)
}

/// The error of a job that had to fail.
fn job_error(result: Result<JobOutcome<TinyApp>, HarpError>) -> HarpError {
    match result {
        Ok(outcome) => panic!(
            "the job succeeded ({} tasks) but had to fail",
            outcome.stats.tasks_completed
        ),
        Err(e) => e,
    }
}

/// The outcome of a job that had to succeed.
fn job_ok(result: Result<JobOutcome<TinyApp>, HarpError>) -> JobOutcome<TinyApp> {
    result.unwrap_or_else(|e| panic!("the job failed: {e}"))
}

/// Checks that every row `e` of table "t" holds `rounds` in every column.
fn assert_rows_hold(outcome: &JobOutcome<TinyApp>, app: &TinyApp, executors: u32, rounds: u32) {
    let params = outcome.params.as_ref().expect("parameters collected");
    for e in 0..executors {
        assert_eq!(
            params.row(&app.table, u64::from(e)),
            Some(&[rounds as f32; WIDTH][..]),
            "row {e}"
        );
    }
    let rows = params.table(&app.table).count();
    assert_eq!(rows, executors as usize, "only the executors' rows exist");
}

fn source_as_harp_error(source: &AppError) -> &HarpError {
    source
        .downcast_ref::<HarpError>()
        .unwrap_or_else(|| panic!("the source is not a HarpError: {source}"))
}

// ---------------------------------------------------------------------------------------
// The app without faults: the baseline every fault test departs from.
// ---------------------------------------------------------------------------------------

#[test]
fn the_tiny_app_without_faults_completes_every_round_exactly() {
    let (workers, per_worker, rounds) = (2, 2, 6);
    let plan = Plan {
        rounds,
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(workers, per_worker));
    let outcome = job_ok(result);
    let executors = workers * per_worker;
    let total = u64::from(executors * rounds);
    assert_eq!(outcome.stats.tasks_completed, total);
    assert_eq!(outcome.stats.final_version, total);
    assert_eq!(outcome.driver.completed, total);
    assert!(
        outcome.driver.version_errors.is_empty(),
        "{:?}",
        outcome.driver.version_errors
    );
    assert_eq!(outcome.stats.node.updates_rejected, 0);
    assert_eq!(
        app.probe.executors_created.load(Ordering::Relaxed),
        u64::from(executors)
    );
    assert_rows_hold(&outcome, &app, executors, rounds);
    // Round r of executor e was dispatched after round r-1's completion: it must see exactly
    // r updates of its row (nobody else writes it).
    for c in &outcome.driver.seen {
        assert_eq!(
            c.output.seen, c.output.round as f32,
            "{} in round {} read a stale row",
            c.executor, c.output.round
        );
    }
}

// ---------------------------------------------------------------------------------------
// Failing and panicking tasks.
// ---------------------------------------------------------------------------------------

#[test]
fn an_executor_error_fails_the_job_naming_task_and_executor() {
    let plan = Plan {
        rounds: 4,
        fault: Fault::ReturnErr,
        fault_at: Some((2, 1)),
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 2));
    let error = job_error(result);
    let message = error.to_string();
    let HarpError::TaskFailed {
        task,
        executor,
        source,
    } = error
    else {
        panic!("expected TaskFailed, got {message}");
    };
    assert_eq!(executor, ExecutorId(2));
    assert_eq!(Some(task), app.probe.task_of(2, 1), "the failed task's id");
    assert!(
        source.to_string().contains("tiny failure in round 1"),
        "{source}"
    );
    assert!(message.contains("executor-2"), "{message}");
    assert!(message.contains(&task.to_string()), "{message}");
}

#[test]
fn an_executor_panic_fails_the_job_naming_task_and_executor() {
    let plan = Plan {
        rounds: 4,
        fault: Fault::Panic,
        fault_at: Some((1, 2)),
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 1));
    let error = job_error(result);
    let message = error.to_string();
    let HarpError::TaskFailed {
        task,
        executor,
        source,
    } = error
    else {
        panic!("expected TaskFailed, got {message}");
    };
    assert_eq!(executor, ExecutorId(1));
    assert_eq!(Some(task), app.probe.task_of(1, 2));
    let source = source.to_string();
    assert!(source.contains("panic"), "{source}");
    assert!(source.contains("tiny panic in round 2"), "{source}");
    assert!(message.contains("executor-1"), "{message}");

    // The process and the runtime carry on: a clean job right after runs to completion.
    let (result, app) = run_tiny(
        Plan {
            rounds: 3,
            ..Plan::default()
        },
        &tiny_job(2, 1),
    );
    let outcome = job_ok(result);
    assert_rows_hold(&outcome, &app, 2, 3);
}

#[test]
fn a_panic_on_a_current_thread_runtime_does_not_hang_or_abort() {
    let plan = Plan {
        rounds: 3,
        fault: Fault::Panic,
        fault_at: Some((0, 0)),
        ..Plan::default()
    };
    let app = Arc::new(TinyApp::new(plan));
    let result = runtime(Threads::Current).block_on(harp::run_job(app, &tiny_job(1, 3)));
    assert!(matches!(
        job_error(result),
        HarpError::TaskFailed {
            executor: ExecutorId(0),
            ..
        }
    ));
}

// ---------------------------------------------------------------------------------------
// Driver errors.
// ---------------------------------------------------------------------------------------

#[test]
fn dispatch_to_an_executor_out_of_range_fails_the_job() {
    let plan = Plan {
        rounds: 3,
        dispatch: Dispatch::OutOfRangeAtStart,
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 2));
    let error = job_error(result);
    let message = error.to_string();
    let HarpError::DriverFailed(source) = error else {
        panic!("expected DriverFailed, got {message}");
    };
    assert!(
        matches!(
            source_as_harp_error(&source),
            HarpError::UnknownExecutor(ExecutorId(6), 4)
        ),
        "{source}"
    );
    assert!(message.contains("executor-6"), "{message}");
    assert_eq!(app.probe.tasks_run.load(Ordering::Relaxed), 0);
}

#[test]
fn dispatch_out_of_range_while_tasks_run_fails_the_job() {
    let plan = Plan {
        rounds: 50,
        dispatch: Dispatch::OutOfRangeAfter(5),
        ..Plan::default()
    };
    let (result, _app) = run_tiny(plan, &tiny_job(2, 2));
    let error = job_error(result);
    let message = error.to_string();
    let HarpError::DriverFailed(source) = error else {
        panic!("expected DriverFailed, got {message}");
    };
    assert!(
        matches!(
            source_as_harp_error(&source),
            HarpError::UnknownExecutor(ExecutorId(4), 4)
        ),
        "{source}"
    );
}

#[test]
fn a_failing_driver_fails_the_job() {
    let plan = Plan {
        rounds: 50,
        dispatch: Dispatch::FailAfter(3),
        ..Plan::default()
    };
    let (result, _) = run_tiny(plan, &tiny_job(2, 2));
    let error = job_error(result);
    assert!(matches!(error, HarpError::DriverFailed(_)), "{error}");
    assert!(error.to_string().contains("gives up after 3"), "{error}");

    let plan = Plan {
        rounds: 1,
        fail_create_driver: true,
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(1, 1));
    let error = job_error(result);
    assert!(matches!(error, HarpError::DriverFailed(_)), "{error}");
    assert!(error.to_string().contains("refuses to start"), "{error}");
    assert_eq!(app.probe.tasks_run.load(Ordering::Relaxed), 0);
}

// ---------------------------------------------------------------------------------------
// Malformed updates and reads: typed errors, counted, and nothing of them applied.
// ---------------------------------------------------------------------------------------

/// Runs 2 workers x 2 executors for 3 rounds with `fault` in executor 1's round 1, noted
/// rather than propagated; checks that the job succeeded, that the bad call changed nothing,
/// and returns the error the call gave.
fn noted_fault(fault: Fault) -> (HarpError, JobOutcome<TinyApp>) {
    let plan = Plan {
        rounds: 3,
        fault,
        fault_at: Some((1, 1)),
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 2));
    let outcome = job_ok(result);
    assert_rows_hold(&outcome, &app, 4, 3);
    let mut noted = app.probe.noted();
    assert_eq!(noted.len(), 1, "one noted error expected: {noted:?}");
    (noted.remove(0), outcome)
}

#[test]
fn an_update_of_the_wrong_width_is_refused_and_counted() {
    let (error, outcome) = noted_fault(Fault::WrongWidth);
    assert!(
        matches!(
            &error,
            HarpError::WidthMismatch { table, expected: 3, found: 2 } if table == "t"
        ),
        "{error:?}"
    );
    assert!(outcome.stats.node.updates_rejected >= 1);
    // Refused at the node: nothing of it reached a server.
    assert_eq!(outcome.stats.servers.updates_refused, 0);
}

#[test]
fn an_update_with_nan_or_infinity_is_refused_and_counted() {
    for fault in [Fault::NaN, Fault::Infinite] {
        let (error, outcome) = noted_fault(fault);
        assert!(
            matches!(&error, HarpError::NonFiniteUpdate { table, row: 1 } if table == "t"),
            "{fault:?}: {error:?}"
        );
        assert!(outcome.stats.node.updates_rejected >= 1, "{fault:?}");
    }
}

#[test]
fn a_batch_with_one_bad_row_applies_none_of_its_rows() {
    // assert_rows_hold (in noted_fault) checks that row 1 got none of the batch and that
    // row 101 was never created.
    let (error, _) = noted_fault(Fault::BatchWithNaN);
    assert!(
        matches!(&error, HarpError::NonFiniteUpdate { table, row: 101 } if table == "t"),
        "{error:?}"
    );
    let (error, _) = noted_fault(Fault::BatchBadShape);
    assert!(
        matches!(
            &error,
            HarpError::BatchShapeMismatch {
                rows: 2,
                values: 5,
                width: 3,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn handles_from_other_declarations_are_refused() {
    let (error, _) = noted_fault(Fault::WrongKindHandle);
    assert!(
        matches!(
            &error,
            HarpError::TableKindMismatch { table, expected: "f32", requested: "i64" } if table == "t"
        ),
        "{error:?}"
    );
    let (error, _) = noted_fault(Fault::WrongWidthHandle);
    assert!(
        matches!(
            &error,
            HarpError::WidthMismatch { table, expected: 3, found: 5 } if table == "t"
        ),
        "{error:?}"
    );
    let (error, _) = noted_fault(Fault::UndeclaredTable);
    assert!(
        matches!(error, HarpError::UnknownTable(TableId(2))),
        "{error:?}"
    );
}

#[test]
fn a_propagated_bad_update_fails_the_job_with_the_typed_cause() {
    for (fault, check) in [
        (
            Fault::WrongWidth,
            (|e: &HarpError| matches!(e, HarpError::WidthMismatch { .. }))
                as fn(&HarpError) -> bool,
        ),
        (Fault::NaN, |e| {
            matches!(e, HarpError::NonFiniteUpdate { .. })
        }),
        (Fault::UndeclaredTable, |e| {
            matches!(e, HarpError::UnknownTable(_))
        }),
    ] {
        let plan = Plan {
            rounds: 3,
            fault,
            fault_at: Some((3, 2)),
            propagate: true,
            ..Plan::default()
        };
        let (result, app) = run_tiny(plan, &tiny_job(2, 2));
        let error = job_error(result);
        let message = error.to_string();
        let HarpError::TaskFailed {
            task,
            executor,
            source,
        } = error
        else {
            panic!("{fault:?}: expected TaskFailed, got {message}");
        };
        assert_eq!(executor, ExecutorId(3), "{fault:?}");
        assert_eq!(Some(task), app.probe.task_of(3, 2), "{fault:?}");
        let cause = source_as_harp_error(&source);
        assert!(check(cause), "{fault:?}: {cause:?}");
    }
}

#[test]
fn table_declarations_refuse_duplicates_and_width_zero() {
    let mut set = TableSet::new();
    set.dense_f32("w", 4, UpdateRule::Add, Init::Zeros).unwrap();
    set.counters_i64("c", 2).unwrap();
    let refusals = [
        set.dense_f32("w", 4, UpdateRule::Add, Init::Zeros)
            .map(drop),
        set.dense_f32("w", 8, UpdateRule::Adam(Adam::default()), Init::Zeros)
            .map(drop),
        set.counters_i64("w", 4).map(drop),
        set.dense_f32("c", 2, UpdateRule::Add, Init::Zeros)
            .map(drop),
        set.dense_f32("zero", 0, UpdateRule::Add, Init::Zeros)
            .map(drop),
        set.counters_i64("zero-counters", 0).map(drop),
    ];
    for (i, refusal) in refusals.into_iter().enumerate() {
        match refusal {
            Err(HarpError::InvalidConfig(message)) => {
                let named = ["'w'", "'w'", "'w'", "'c'", "'zero'", "'zero-counters'"][i];
                assert!(message.contains(named), "refusal {i}: {message}");
            }
            other => panic!("refusal {i}: expected InvalidConfig, got {other:?}"),
        }
    }
    // Nothing refused was declared: two tables, ids 0 and 1, and the next id is 2.
    assert_eq!(set.len(), 2);
    let next = set
        .dense_f32("next", 1, UpdateRule::Add, Init::Zeros)
        .unwrap();
    assert_eq!(next.id(), TableId(2));
}

// ---------------------------------------------------------------------------------------
// Executor creation.
// ---------------------------------------------------------------------------------------

#[test]
fn a_failing_executor_creation_fails_the_job_naming_the_executor() {
    let plan = Plan {
        rounds: 2,
        fail_create: Some(3),
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 2));
    let message = job_error(result).to_string();
    assert!(message.contains("executor-3"), "{message}");
    assert!(message.contains("no input partition"), "{message}");
    assert_eq!(app.probe.tasks_run.load(Ordering::Relaxed), 0);
}

#[test]
fn a_failing_executor_creation_is_a_typed_executor_creation_error() {
    let plan = Plan {
        rounds: 2,
        fail_create: Some(3),
        ..Plan::default()
    };
    let (result, _) = run_tiny(plan, &tiny_job(2, 2));
    let error = job_error(result);
    assert!(
        matches!(
            error,
            HarpError::ExecutorCreation {
                executor: ExecutorId(3),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.to_string().contains("panicked"), "{error}");
}

// ---------------------------------------------------------------------------------------
// How jobs end.
// ---------------------------------------------------------------------------------------

#[test]
fn a_driver_that_dispatches_nothing_ends_the_job_at_once() {
    let plan = Plan {
        rounds: 5,
        dispatch: Dispatch::Nothing,
        ..Plan::default()
    };
    let (result, app) = run_tiny(plan, &tiny_job(2, 3));
    let outcome = job_ok(result);
    assert_eq!(outcome.stats.tasks_completed, 0);
    assert_eq!(outcome.stats.final_version, 0);
    assert_eq!(outcome.driver.completed, 0);
    assert_eq!(app.probe.tasks_run.load(Ordering::Relaxed), 0);
    let params = outcome.params.expect("parameters collected");
    assert!(params.rows.is_empty(), "{:?}", params.rows);
}

#[test]
fn finish_ends_the_job_early() {
    let plan = Plan {
        rounds: 1_000_000,
        dispatch: Dispatch::FinishAfter(7),
        ..Plan::default()
    };
    let (result, _) = run_tiny(plan, &tiny_job(2, 2));
    let outcome = job_ok(result);
    assert_eq!(outcome.stats.tasks_completed, 7);
    assert_eq!(outcome.driver.completed, 7);
    assert_eq!(outcome.driver.seen.len(), 7);
}

#[test]
fn finish_during_the_initial_dispatch_ends_the_job() {
    let plan = Plan {
        rounds: 1_000_000,
        dispatch: Dispatch::FinishAtStart,
        ..Plan::default()
    };
    let (result, _) = run_tiny(plan, &tiny_job(2, 2));
    let outcome = job_ok(result);
    assert_eq!(outcome.stats.tasks_completed, 0);
    assert_eq!(outcome.driver.completed, 0);
}
