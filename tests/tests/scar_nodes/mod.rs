//! What the SCAR-across-processes tests share (`scar_processes.rs`, `scar_hand_offs.rs`):
//! the counter job they run, its app with every completion's instant recorded
//! ([`Watched`]), its `harp node` processes, its master on the test's runtime, a log that
//! stamps each line, and the counter's oracle after a server's loss.
#![allow(dead_code)]

use harp::{
    App, AppError, ClusterOptions, Completion, Driver, DriverContext, Executor, ExecutorId,
    HarpError, JobCredentials, JobInfo, ParamClient, ParamKey, TableSet,
};
use harp_apps::counter::{
    CounterApp, CounterArgs, CounterConfig, CounterDriver, CounterExecutor, CounterOutput,
};
use harp_tests::harp_binary;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) const TASKS: u64 = 8_000;
pub(crate) const ROWS: u64 = 400;
pub(crate) const SEED: u64 = 21;
pub(crate) const SHARDS_PER_SERVER: u32 = 4;
pub(crate) const KILL_AFTER_COMPLETIONS: usize = 2_000;
/// How long the worker node to be killed holds each staged flush before reporting it.
pub(crate) const STAGED_REPORT_DELAY_MS: u64 = 100;

/// The counter of `tasks` micro-tasks.
pub(crate) fn counter_config(tasks: u64, losses_expected: bool) -> CounterConfig {
    CounterConfig {
        tasks,
        rows: ROWS,
        seed: SEED,
        task_sleep_us: 1_000,
        losses_expected,
        ..CounterConfig::default()
    }
}

/// The `harp node -- run counter ...` arguments of the same counter.
pub(crate) fn node_run_args(scar: bool, tasks: u64) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "counter",
        "--tasks",
        &tasks.to_string(),
        "--rows",
        &ROWS.to_string(),
        "--seed",
        &SEED.to_string(),
        "--task-sleep-us",
        "1000",
        "--threads",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if scar {
        // Turns the counter's probe check off: a recovered server rolls rows back.
        args.extend(["--scar-fraction".to_string(), "1".to_string()]);
    }
    args
}

/// The counter, with the instant of every completion its driver is handed recorded (the
/// test's view of training progress).
pub(crate) struct Watched {
    pub(crate) inner: CounterApp,
    pub(crate) completions: Arc<Mutex<Vec<Instant>>>,
}

pub(crate) struct WatchedDriver {
    pub(crate) inner: CounterDriver,
    pub(crate) completions: Arc<Mutex<Vec<Instant>>>,
}

pub(crate) struct WatchedExecutor(CounterExecutor);

impl App for Watched {
    type Args = CounterArgs;
    type Output = CounterOutput;
    type Driver = WatchedDriver;
    type Executor = WatchedExecutor;

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn tables(&self) -> &TableSet {
        self.inner.tables()
    }

    // Its nodes run the plain counter: the same settings, or they refuse to join.
    fn settings(&self) -> Vec<String> {
        self.inner.settings()
    }

    fn create_driver(&self, job: &JobInfo) -> Result<WatchedDriver, AppError> {
        Ok(WatchedDriver {
            inner: self.inner.create_driver(job)?,
            completions: self.completions.clone(),
        })
    }

    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<WatchedExecutor, AppError> {
        Ok(WatchedExecutor(self.inner.create_executor(id, job)?))
    }
}

impl Driver<Watched> for WatchedDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        <CounterDriver as Driver<CounterApp>>::dispatch_initial_tasks(&mut self.inner, ctx)
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<CounterOutput>,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        self.completions.lock().unwrap().push(Instant::now());
        <CounterDriver as Driver<CounterApp>>::handle_task_completion(
            &mut self.inner,
            completion,
            ctx,
        )
    }
}

impl Executor<Watched> for WatchedExecutor {
    async fn run_task(
        &mut self,
        args: CounterArgs,
        ps: &mut ParamClient,
    ) -> Result<CounterOutput, AppError> {
        <CounterExecutor as Executor<CounterApp>>::run_task(&mut self.0, args, ps).await
    }
}

/// Log lines of this process with the instant each was written (the master's warnings mark
/// when it declared the server dead and when the recovery ended).
#[derive(Clone, Default)]
pub(crate) struct StampedLog(Arc<Mutex<Vec<(Instant, String)>>>);

impl Write for StampedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf).into_owned();
        eprint!("{line}");
        self.0.lock().unwrap().push((Instant::now(), line));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl StampedLog {
    pub(crate) fn first(&self, needle: &str) -> Option<Instant> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }

    /// Milliseconds from `killed_at` to the first line with `declared`, to the first with
    /// `recovered`, and to the first completion after that (training resumed), as text for
    /// the test's printout ("?" for what never happened). Printed, never asserted.
    pub(crate) fn recovery_times(
        &self,
        killed_at: Instant,
        declared: &str,
        recovered: &str,
        completions: &Mutex<Vec<Instant>>,
    ) -> [String; 3] {
        let declared = self.first(declared);
        let recovered = self.first(recovered);
        let resumed = recovered.and_then(|done| {
            let completions = completions.lock().unwrap();
            completions.iter().copied().find(|t| *t > done)
        });
        [declared, recovered, resumed].map(|t| {
            t.map_or("?".to_string(), |t| {
                format!("{:.0} ms", (t - killed_at).as_secs_f64() * 1e3)
            })
        })
    }
}

pub(crate) fn install_log() -> StampedLog {
    // One subscriber per test binary, installed by the first test that asks: the others
    // share its log (tests that run at the same time write to it too).
    static LOG: std::sync::OnceLock<StampedLog> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log = StampedLog::default();
        let writer = log.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_writer(move || writer.clone())
            .try_init();
        log
    })
    .clone()
}

/// A `harp node` process of the counter of [`TASKS`] micro-tasks; `fault` sets one of the
/// fault-injection delays (`harp::remote::*_DELAY_VAR`) to that many milliseconds.
pub(crate) fn node_process(
    addr: &str,
    credentials: &std::path::Path,
    role: &str,
    scar: bool,
    fault: Option<(&str, u64)>,
) -> Child {
    let mut command = node_command(addr, credentials, role, scar, TASKS);
    if let Some((var, ms)) = fault {
        command.env(var, ms.to_string());
    }
    command.stderr(Stdio::inherit()).spawn().unwrap()
}

/// The command of a `harp node` process of the counter of `tasks` micro-tasks (its stderr
/// not set yet).
pub(crate) fn node_command(
    addr: &str,
    credentials: &std::path::Path,
    role: &str,
    scar: bool,
    tasks: u64,
) -> Command {
    let mut command = Command::new(harp_binary!());
    command
        .args(["node", "--role", role, "--join", addr, "--credentials"])
        .arg(credentials)
        .arg("--")
        .args(node_run_args(scar, tasks))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// The job's master on this process's runtime, and the address its nodes join.
pub(crate) async fn start_master(
    app: Arc<Watched>,
    creds: JobCredentials,
    options: ClusterOptions,
) -> (
    tokio::task::JoinHandle<Result<harp::JobOutcome<Watched>, HarpError>>,
    String,
) {
    start_master_with(app, creds, options, harp::job_control().1).await
}

/// [`start_master`], the job taking `inbox`'s commands and telling its events.
pub(crate) async fn start_master_with(
    app: Arc<Watched>,
    creds: JobCredentials,
    options: ClusterOptions,
    inbox: harp::ControlInbox,
) -> (
    tokio::task::JoinHandle<Result<harp::JobOutcome<Watched>, HarpError>>,
    String,
) {
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let master = tokio::spawn(async move {
        let (_outside, failures) = tokio::sync::mpsc::unbounded_channel();
        let listening = |addr| {
            let _ = addr_tx.send(addr);
        };
        harp::run_job_across_controlled(app, &creds, &options, listening, failures, inbox).await
    });
    (master, addr_rx.await.unwrap().to_string())
}

pub(crate) fn sigkill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix
    let _ = child.wait();
}

/// The oracle after a server's loss: every row of a surviving shard exact, every row of a
/// lost shard (`lost_shards` of `num_shards`) at most its expected sum. Returns how many
/// rows the lost shards hold and how many increments they lost.
pub(crate) fn check_the_counter(
    outcome: &harp::JobOutcome<Watched>,
    app: &Watched,
    lost_shards: &BTreeSet<u32>,
    num_shards: u32,
) -> (usize, i64) {
    let params = outcome.params.as_ref().unwrap();
    let table = app.inner.counters();
    let mut rows_of_lost_shards = 0;
    let mut missing_total = 0i64;
    for (row, want) in outcome.driver.inner.expected() {
        let got = params.row(table, *row).unwrap_or(&[]);
        let shard = harp::shard_of(ParamKey::new(table.id(), *row), num_shards).0;
        if lost_shards.contains(&shard) {
            rows_of_lost_shards += 1;
            assert_eq!(got.len(), want.len(), "row {row}");
            for (g, w) in got.iter().zip(want) {
                assert!(
                    g <= w,
                    "row {row} of a lost shard gained updates: {got:?} > {want:?}"
                );
                missing_total += w - g;
            }
        } else {
            assert_eq!(got, want.as_slice(), "row {row} of a surviving shard");
        }
    }
    (rows_of_lost_shards, missing_total)
}
