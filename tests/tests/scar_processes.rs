//! SCAR across processes: the master runs here (with the counter's driver, so the test sees
//! every expected sum) and four real `harp node` processes (two workers, two servers) run
//! the executors and the parameter servers over QUIC. The running checkpoint's rounds reach
//! the servers in the node processes; one server node is killed with SIGKILL mid-run.
//!
//! What the recovery report claims across processes: the dead server's shards, each
//! re-created on the surviving server; the rows restored from the checkpoint's image (with a
//! full image every round, `fraction 1, period 1`, every row of those shards); and the
//! updates lost. The values the dead server held died with its process, but each node kept
//! what the server acknowledged since each row's last save, so the report's `lost` is
//! exact: the counter checks every row of a surviving shard exact, every row of a lost shard
//! at most its expected sum (recovery rolls rows back to their saved values and never
//! applies an update twice), and the report's sum of lost updates equal to the expected
//! minus the final values, summed over the lost shards.
//!
//! A worker node killed instead, in a job that recovers worker nodes
//! (`ClusterOptions::worker_recovery`): its executors are created again on the other worker,
//! the micro-tasks whose flushes were not committed run again, and every parameter ends
//! exact — no update lost, none applied twice. That node holds each staged flush for a
//! while before reporting it (fault injection), so it most likely dies with parts staged
//! on the servers that the master must never commit.

use harp::{
    App, AppError, ClusterOptions, Completion, Driver, DriverContext, Executor, ExecutorId,
    HarpError, JobCredentials, JobEvent, JobInfo, ParamClient, ParamKey, ScaleEvent, ScarOptions,
    Selection, ServerRecovery, TableSet,
};
use harp_apps::counter::{
    CounterApp, CounterArgs, CounterConfig, CounterDriver, CounterExecutor, CounterOutput,
};
use harp_tests::{harp_binary, runtime, Threads};
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASKS: u64 = 8_000;
const ROWS: u64 = 400;
const SEED: u64 = 21;
const SHARDS_PER_SERVER: u32 = 4;
const KILL_AFTER_COMPLETIONS: usize = 2_000;
/// How long the worker node to be killed holds each staged flush before reporting it.
const STAGED_REPORT_DELAY_MS: u64 = 100;

/// The counter of `tasks` micro-tasks.
fn counter_config(tasks: u64, losses_expected: bool) -> CounterConfig {
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
fn node_run_args(scar: bool, tasks: u64) -> Vec<String> {
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
struct Watched {
    inner: CounterApp,
    completions: Arc<Mutex<Vec<Instant>>>,
}

struct WatchedDriver {
    inner: CounterDriver,
    completions: Arc<Mutex<Vec<Instant>>>,
}

struct WatchedExecutor(CounterExecutor);

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
struct StampedLog(Arc<Mutex<Vec<(Instant, String)>>>);

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
    fn first(&self, needle: &str) -> Option<Instant> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }

    /// Milliseconds from `killed_at` to the first line with `declared`, to the first with
    /// `recovered`, and to the first completion after that (training resumed), as text for
    /// the test's printout ("?" for what never happened). Printed, never asserted.
    fn recovery_times(
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

fn install_log() -> StampedLog {
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
fn node_process(
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
fn node_command(
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
async fn start_master(
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
async fn start_master_with(
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

fn sigkill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix
    let _ = child.wait();
}

struct Run {
    outcome: Result<harp::JobOutcome<Watched>, HarpError>,
    app: Arc<Watched>,
    killed_at: Instant,
}

/// Which node process a run kills.
#[derive(Clone, Copy, PartialEq)]
enum Victim {
    /// The first of 2 server-only nodes (beside 2 worker-only nodes).
    Server,
    /// The first of 2 worker-only nodes (beside 2 server-only nodes).
    Worker,
    /// The first of 3 nodes that each hold a worker and a server.
    Both,
}

impl Victim {
    /// The `--role` of every node process of the run, and which one is killed.
    fn roles(self) -> (Vec<&'static str>, usize) {
        match self {
            Victim::Server => (vec!["server", "server", "worker", "worker"], 0),
            Victim::Worker => (vec!["server", "server", "worker", "worker"], 2),
            Victim::Both => (vec!["both"; 3], 0),
        }
    }
}

/// Runs the counter with its master here and 2 worker + 2 server node processes, and
/// SIGKILLs the first server node once the driver has seen `KILL_AFTER_COMPLETIONS`
/// completions.
fn run_and_kill_a_server(scar: Option<ScarOptions>) -> Run {
    run_and_kill(scar, false, Victim::Server)
}

/// [`run_and_kill_a_server`], killing the first node of `victim`'s role, in a job that
/// recovers worker nodes if `worker_recovery`.
fn run_and_kill(scar: Option<ScarOptions>, worker_recovery: bool, victim: Victim) -> Run {
    // A worker to be killed holds each staged flush a while before reporting it, so it
    // most likely dies with parts staged that the master never commits.
    let fault = (worker_recovery && victim != Victim::Server).then_some((
        harp::remote::STAGED_REPORT_DELAY_VAR,
        STAGED_REPORT_DELAY_MS,
    ));
    run_and_kill_with_fault(scar, worker_recovery, victim, fault)
}

/// [`run_and_kill`], the node to be killed started with the fault-injection delay `fault`.
fn run_and_kill_with_fault(
    scar: Option<ScarOptions>,
    worker_recovery: bool,
    victim: Victim,
    fault: Option<(&str, u64)>,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("creds");
    let creds = JobCredentials::generate("scar-processes").unwrap();
    creds.save(&credentials).unwrap();
    let app = Arc::new(Watched {
        inner: CounterApp::new(counter_config(TASKS, scar.is_some())).unwrap(),
        completions: Arc::new(Mutex::new(Vec::new())),
    });
    let with_scar = scar.is_some();
    let (roles, victim) = victim.roles();
    let options = ClusterOptions {
        nodes: roles.len() as u32,
        executors_per_worker: 4,
        shards_per_server: SHARDS_PER_SERVER,
        collect_params: true,
        // Long enough that a node starved of CPU on a busy machine is not declared dead.
        lease_timeout_ms: 3_000,
        join_timeout_ms: 20_000,
        scar,
        worker_recovery,
        ..ClusterOptions::default()
    };
    runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master(app.clone(), creds, options).await;
        let mut nodes: Vec<Child> = roles
            .iter()
            .enumerate()
            .map(|(i, role)| {
                let fault = fault.filter(|_| i == victim);
                node_process(&addr, &credentials, role, with_scar, fault)
            })
            .collect();
        // Mid-run, observed: the driver has been handed this many completions.
        loop {
            let seen = app.completions.lock().unwrap().len();
            assert!(
                !master.is_finished(),
                "the job ended before the kill ({seen} completions)"
            );
            if seen >= KILL_AFTER_COMPLETIONS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let killed_at = Instant::now();
        sigkill(&mut nodes[victim]);
        let outcome = master.await.unwrap();
        for child in nodes.iter_mut() {
            // Nodes exit once the job ends; one that would not is not left behind.
            let _ = child.kill();
            let _ = child.wait();
        }
        Run {
            outcome,
            app: app.clone(),
            killed_at,
        }
    })
}

/// The oracle after a server's loss: every row of a surviving shard exact, every row of a
/// lost shard (`lost_shards` of `num_shards`) at most its expected sum. Returns how many
/// rows the lost shards hold and how many increments they lost.
fn check_the_counter(
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

/// A full image every round.
fn full_image() -> ScarOptions {
    ScarOptions {
        period: 1,
        fraction: 1.0,
        selection: Selection::Priority,
        ..ScarOptions::default()
    }
}

#[test]
fn a_killed_server_node_is_recovered_from_the_running_checkpoint() {
    let log = install_log();
    let run = run_and_kill_a_server(Some(full_image()));
    check_a_server_recovery(run, &log);
}

/// The server node answers the flush parts of one worker node 1 s after applying them,
/// while the other worker's completions keep the iterations, and the checkpoint rounds that
/// save every row each of them, going: when it is killed, it holds parts of that worker it
/// applied, saved and never acknowledged. Sent again whole, they would count twice in the
/// saved rows (a lost shard's row above its expected sum); the worker sends only the rows
/// no save after the part's apply holds.
#[test]
fn parts_a_killed_server_node_applied_and_saved_but_never_acknowledged_count_once() {
    let log = install_log();
    let fault = (harp::remote::APPLY_ANSWER_DELAY_VAR, 1_000);
    let run = run_and_kill_with_fault(Some(full_image()), false, Victim::Server, Some(fault));
    check_a_server_recovery(run, &log);
}

/// The oracle of a run that killed a server node of a job with a full image every round:
/// the report names the dead server's shards, each re-created on the other server; every
/// surviving row exact, every lost row at most its expected sum, every lost row restored,
/// and the report's lost updates exactly what the counter misses.
fn check_a_server_recovery(run: Run, log: &StampedLog) {
    let Run {
        outcome,
        app,
        killed_at,
    } = run;
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    let stats = &outcome.stats;
    assert_eq!(outcome.driver.inner.completed(), TASKS);
    assert!(
        stats.checkpoints.rounds > 0 && stats.checkpoints.rows_saved > 0,
        "no checkpoint round reached the node processes' servers: {:?}",
        stats.checkpoints
    );

    // The report: the dead server's shards, each re-created on the surviving server.
    assert_eq!(stats.recoveries.len(), 1, "{:?}", stats.recoveries);
    let report = &stats.recoveries[0];
    let survivors: BTreeSet<u32> = report.shards.iter().map(|(_, to)| *to).collect();
    assert_eq!(survivors.len(), 1, "{report:?}");
    let survivor = *survivors.iter().next().unwrap();
    assert_ne!(survivor, report.server);
    // Shards were dealt round-robin over the two servers in id order.
    let num_shards = 2 * SHARDS_PER_SERVER;
    let slot = u32::from(report.server > survivor);
    let expected_lost: BTreeSet<u32> = (0..num_shards).filter(|s| s % 2 == slot).collect();
    let lost_shards: BTreeSet<u32> = report.shards.iter().map(|(s, _)| *s).collect();
    assert_eq!(lost_shards, expected_lost);
    let (rows_of_lost_shards, missing_total) =
        check_the_counter(&outcome, &app, &lost_shards, num_shards);
    // A full image every round: every row of the lost shards came back from it.
    assert_eq!(report.rows_restored, rows_of_lost_shards, "{report:?}");
    // The updates lost, as the nodes reported them: exactly what the counter misses.
    let lost = report
        .lost
        .as_ref()
        .unwrap_or_else(|| panic!("no lost updates in the report: {report:?}"));
    assert_eq!(
        lost.lost_sum, missing_total as f64,
        "reported lost updates against expected − final: {report:?}"
    );

    let [declared, recovered, resumed] = log.recovery_times(
        killed_at,
        "a server node died",
        "server recovered from the running checkpoint",
        &app.completions,
    );
    println!(
        "server {} killed: declared dead after {}, shards re-created and rerouted after {} (recovery {:.0} ms), training resumed after {}; {} checkpoint rounds, {} rows restored, {missing_total} increments lost",
        report.server,
        declared,
        recovered,
        report.duration_s * 1e3,
        resumed,
        stats.checkpoints.rounds,
        report.rows_restored,
    );
}

#[test]
fn without_a_running_checkpoint_a_killed_server_node_ends_the_job_with_a_clear_error() {
    let Run { outcome, .. } = run_and_kill_a_server(None);
    match outcome {
        Err(HarpError::NodeDied { detail, .. }) => {
            assert!(detail.contains("server-"), "{detail}");
            assert!(detail.contains("--scar-fraction"), "{detail}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("the job survived a server node's death without a checkpoint"),
    }
}

#[test]
fn a_killed_worker_node_is_recovered_and_every_parameter_is_exact() {
    let log = install_log();
    let Run {
        outcome,
        app,
        killed_at,
    } = run_and_kill(None, true, Victim::Worker);
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    let stats = &outcome.stats;
    assert_eq!(outcome.driver.inner.completed(), TASKS);
    assert!(stats.recoveries.is_empty(), "no server was lost");

    // The report: the dead worker node, its 4 executors re-created on the other worker,
    // the micro-tasks run again (at most the counter's window of 2 per executor was in
    // flight on it).
    assert_eq!(
        stats.worker_recoveries.len(),
        1,
        "{:?}",
        stats.worker_recoveries
    );
    let report = &stats.worker_recoveries[0];
    assert_eq!(report.executors.len(), 4, "{report:?}");
    let hosts: BTreeSet<u32> = report.executors.iter().map(|(_, to)| *to).collect();
    assert_eq!(hosts.len(), 1, "{report:?}");
    assert!(!hosts.contains(&report.node), "{report:?}");
    assert!(
        report.tasks_rerun > 0 && report.tasks_rerun <= 2 * 4,
        "{report:?}"
    );

    // The oracle: every row exactly the sum of the increments of the completed tasks; rows
    // only read (probe rows never updated) are still zero.
    let params = outcome.params.as_ref().unwrap();
    let table = app.inner.counters();
    let expected = outcome.driver.inner.expected();
    for (row, want) in expected {
        let got = params.row(table, *row).unwrap_or(&[]);
        assert_eq!(got, want.as_slice(), "row {row}");
    }
    for (row, got) in params.table(table) {
        if !expected.contains_key(&row) {
            assert!(got.iter().all(|v| *v == 0), "row {row} = {got:?}");
        }
    }

    let [declared, recovered, resumed] = log.recovery_times(
        killed_at,
        "a worker node died",
        "worker node recovered",
        &app.completions,
    );
    println!(
        "worker node {} killed: declared dead after {}, executors {:?} running again after {} (recovery {:.0} ms), first completion after that at {}; {} micro-tasks run again; every one of {} rows exact",
        report.node,
        declared,
        report.executors,
        recovered,
        report.duration_s * 1e3,
        resumed,
        report.tasks_rerun,
        expected.len(),
    );
}

#[test]
fn a_killed_node_with_a_worker_and_a_server_is_recovered_both_ways() {
    let Run { outcome, app, .. } = run_and_kill(Some(full_image()), true, Victim::Both);
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    let stats = &outcome.stats;
    assert_eq!(outcome.driver.inner.completed(), TASKS);
    assert_eq!(stats.recoveries.len(), 1, "{:?}", stats.recoveries);
    assert_eq!(
        stats.worker_recoveries.len(),
        1,
        "{:?}",
        stats.worker_recoveries
    );
    let (server, worker) = (&stats.recoveries[0], &stats.worker_recoveries[0]);
    assert_eq!(server.server, worker.node, "one node died");
    assert_eq!(
        server.shards.len(),
        SHARDS_PER_SERVER as usize,
        "{server:?}"
    );
    assert!(server.shards.iter().all(|(_, to)| *to != server.server));
    assert_eq!(worker.executors.len(), 4, "{worker:?}");
    assert!(worker.executors.iter().all(|(_, to)| *to != worker.node));
    // Its shards lose at most what they applied after their last save; every other row is
    // exact: the dead worker's tasks were neither lost nor applied twice.
    let lost_shards: BTreeSet<u32> = server.shards.iter().map(|(s, _)| *s).collect();
    let num_shards = 3 * SHARDS_PER_SERVER;
    let (rows, missing) = check_the_counter(&outcome, &app, &lost_shards, num_shards);
    assert_eq!(server.rows_restored, rows, "{server:?}");
    println!(
        "node {} (worker and server) killed: {} shards re-created, executors {:?} re-created, {} micro-tasks run again, {missing} increments lost on its shards",
        worker.node,
        server.shards.len(),
        worker.executors,
        worker.tasks_rerun,
    );
}

#[test]
fn without_a_running_checkpoint_a_killed_node_with_a_worker_and_a_server_ends_the_job() {
    let Run { outcome, .. } = run_and_kill(None, true, Victim::Both);
    match outcome {
        Err(HarpError::NodeDied { detail, .. }) => {
            assert!(
                detail.contains("worker-") && detail.contains("server-"),
                "{detail}"
            );
            assert!(detail.contains("--scar-fraction"), "{detail}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("the job survived losing a server without a checkpoint"),
    }
}

/// A counter job of 2 worker and 2 server node processes (started by each test) whose shards
/// move mid-run, with its credentials in a directory kept while it runs.
struct MidMoveJob {
    _dir: tempfile::TempDir,
    credentials: std::path::PathBuf,
    creds: JobCredentials,
    app: Arc<Watched>,
    options: ClusterOptions,
}

fn mid_move_job(name: &str, tasks: u64) -> MidMoveJob {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("creds");
    let creds = JobCredentials::generate(name).unwrap();
    creds.save(&credentials).unwrap();
    let app = Arc::new(Watched {
        inner: CounterApp::new(counter_config(tasks, true)).unwrap(),
        completions: Arc::new(Mutex::new(Vec::new())),
    });
    let options = ClusterOptions {
        nodes: 4,
        executors_per_worker: 4,
        shards_per_server: SHARDS_PER_SERVER,
        collect_params: true,
        lease_timeout_ms: 3_000,
        join_timeout_ms: 20_000,
        // A partial image: rows it never saved start again at their initial value, so a
        // copy a hand-off left on a server would show if it were kept.
        scar: Some(ScarOptions {
            period: 2,
            fraction: 0.25,
            selection: Selection::Priority,
            ..ScarOptions::default()
        }),
        ..ClusterOptions::default()
    };
    MidMoveJob {
        _dir: dir,
        credentials,
        creds,
        app,
        options,
    }
}

/// Issue 4's "a node that dies in the middle of a move", with SCAR. A server node gets
/// SIGTERM (a scheduler takes its machine back), so it hands its shards to the other server
/// node, and is SIGKILLed (the grace period is over) once the other node holds their rows
/// but before the master heard that the hand-offs were done (it answers late: fault
/// injection). The master re-creates those shards on the node that holds them, from the
/// running checkpoint (dropping what the hand-offs brought there, which the image does not
/// hold: while a hand-off is unconfirmed, no round saves the new owner's rows of it), and
/// the job runs to its end: every row of another shard exact, every row of a re-created
/// shard at most its expected sum (no update applied twice), and the updates the report
/// says were lost exactly what the counter misses (when the report can say: not once the
/// victim acknowledged updates it forwarded to the new owner). Before, a server failure
/// during a shard move from it ended the job.
#[test]
fn a_server_node_killed_while_it_hands_its_shards_off_is_recovered_on_their_new_owner() {
    let log = install_log();
    let MidMoveJob {
        _dir,
        credentials,
        creds,
        app,
        options,
    } = mid_move_job("scar-mid-move", TASKS);
    let outcome = runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master(app.clone(), creds, options).await;
        let mut victim = node_command(&addr, &credentials, "server", true, TASKS);
        victim.env(harp::remote::HAND_OFF_ANSWER_DELAY_VAR, "60000");
        let (mut victim, lines, _reader) = harp_tests::spawn_reading_stderr(&mut victim);
        // The other server node: the new owner of the victim's shards.
        let mut heir = node_command(&addr, &credentials, "server", true, TASKS);
        let (heir, heir_lines, _heir_reader) = harp_tests::spawn_reading_stderr(&mut heir);
        let mut others: Vec<Child> = ["worker", "worker"]
            .iter()
            .map(|role| node_process(&addr, &credentials, role, true, None))
            .collect();
        others.push(heir);
        while app.completions.lock().unwrap().len() < KILL_AFTER_COMPLETIONS / 2 {
            assert!(!master.is_finished(), "the job ended before the SIGTERM");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let term = Command::new("kill")
            .args(["-TERM", &victim.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        // The other server holds a shard of the victim's; the master does not know yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .expect("the victim hands a shard off");
            if line.contains("answering the hand-off late") {
                break;
            }
        }
        // Training goes on a while: the victim forwards its shards' traffic to their new
        // owner, and checkpoint rounds run (none may save what the new owner holds).
        let rounds_before = app.completions.lock().unwrap().len();
        while app.completions.lock().unwrap().len() < rounds_before + 400 {
            assert!(!master.is_finished(), "the job ended before the kill");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sigkill(&mut victim);
        let outcome = master.await.unwrap();
        for child in others.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        (outcome, heir_lines.try_iter().collect::<Vec<String>>())
    });
    let (outcome, heir_log) = outcome;
    // The new owner held rows a hand-off brought (the victim said so before it died), and
    // dropped them for the restored ones.
    assert!(
        heir_log
            .iter()
            .any(|l| l.contains("dropped the rows a failed server's hand-off left here")),
        "{heir_log:?}"
    );
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    assert_eq!(outcome.driver.inner.completed(), TASKS);
    let recoveries = &outcome.stats.recoveries;
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let report = &recoveries[0];
    // Every shard the victim held went to the one other server, which held their rows.
    assert_eq!(
        report.shards.len(),
        SHARDS_PER_SERVER as usize,
        "{report:?}"
    );
    let heirs: BTreeSet<u32> = report.shards.iter().map(|(_, to)| *to).collect();
    assert_eq!(heirs.len(), 1, "{report:?}");
    assert!(!heirs.contains(&report.server), "{report:?}");
    let lost_shards: BTreeSet<u32> = report.shards.iter().map(|(s, _)| *s).collect();
    let (_, missing_total) = check_the_counter(&outcome, &app, &lost_shards, 2 * SHARDS_PER_SERVER);
    // The updates lost are known exactly unless the victim acknowledged some it forwarded
    // to the new owner (then the report leaves them out, and says why).
    match &report.lost {
        Some(lost) => assert_eq!(
            lost.lost_sum, missing_total as f64,
            "reported lost updates against expected − final: {report:?}"
        ),
        None => assert!(
            log.first(&format!(
                "server-{} acknowledged a flush part it did not apply all by itself",
                report.server
            ))
            .is_some(),
            "the report leaves the lost updates out without saying why: {report:?}"
        ),
    }
    println!(
        "server {} killed mid-hand-off: {} shards re-created on server {:?}, {} rows restored, {missing_total} increments lost",
        report.server,
        report.shards.len(),
        heirs,
        report.rows_restored
    );
}

/// How shards come to the server node a mid-arrival test kills.
#[derive(Clone, Copy, PartialEq)]
enum Arrival {
    /// It joins the running job (2 servers there) and is given shards.
    Join,
    /// One of 3 servers is given SIGTERM; its shards move to the other two.
    ScaleIn,
}

impl Arrival {
    /// How many micro-tasks the counter runs: a leave runs two scale events, which must
    /// end before the job does.
    fn tasks(self) -> u64 {
        match self {
            Arrival::Join => TASKS,
            Arrival::ScaleIn => 3 * TASKS,
        }
    }

    /// How late the servers answer their hand-offs: long enough that the test kills the
    /// new owner before; short enough that a leave's two events end within the job.
    fn answer_delay_ms(self) -> u64 {
        match self {
            Arrival::Join => 30_000,
            Arrival::ScaleIn => 5_000,
        }
    }
}

/// A server node of a mid-arrival test, at info level (it says which node it is) and
/// answering its hand-offs late, whose stderr the test reads.
struct LoggedServer {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
    _reader: std::thread::JoinHandle<()>,
}

impl LoggedServer {
    fn start(addr: &str, credentials: &std::path::Path, arrival: Arrival) -> LoggedServer {
        let mut server = node_command(addr, credentials, "server", true, arrival.tasks());
        let delay = arrival.answer_delay_ms().to_string();
        server.env(harp::remote::HAND_OFF_ANSWER_DELAY_VAR, delay);
        server.env("HARP_LOG", "info");
        let (child, lines, reader) = harp_tests::spawn_reading_stderr(&mut server);
        LoggedServer {
            child,
            lines,
            log: Vec::new(),
            _reader: reader,
        }
    }

    /// Reads what it wrote since the last call.
    fn read(&mut self) {
        self.log.extend(self.lines.try_iter());
    }

    /// Its node's id, once it said which it is.
    fn id(&self) -> Option<u32> {
        let joined = self.log.iter().find(|l| l.contains("joined the job"))?;
        number_after(joined, " node=")
    }

    /// The shards it answered a hand-off of late, with the server it handed each to.
    fn handed_late(&self) -> Vec<(u32, u32)> {
        let late = self
            .log
            .iter()
            .filter(|l| l.contains("answering the hand-off late"));
        late.map(|line| {
            let shard = number_after(line, "shard=shard-").expect("the line names its shard");
            let to = number_after(line, "to=server-").expect("the line names the new owner");
            (shard, to)
        })
        .collect()
    }
}

/// The number right after `field` in `line`.
fn number_after(line: &str, field: &str) -> Option<u32> {
    let at = line.find(field)? + field.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Runs the counter on 2 workers and the servers of `arrival`, then SIGKILLs the server
/// node shards are on their way to once it holds one but before the master heard it does
/// (every old owner answers its hand-offs late, fault injection), after 200 more
/// completions of forwarding. Checks the recovery and the counter, and that a leaving
/// server left all the same.
fn kill_a_server_while_shards_come(arrival: Arrival) {
    let MidMoveJob {
        _dir,
        credentials,
        creds,
        app,
        mut options,
    } = mid_move_job("scar-mid-arrival", arrival.tasks());
    let servers_at_start = match arrival {
        Arrival::Join => 2,
        Arrival::ScaleIn => 3,
    };
    options.nodes = servers_at_start + 2;
    let (events, mut job_events) = tokio::sync::mpsc::unbounded_channel();
    let inbox = harp::job_control().1.with_events(events);
    let outcome = runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master_with(app.clone(), creds, options, inbox).await;
        let mut servers: Vec<LoggedServer> = (0..servers_at_start)
            .map(|_| LoggedServer::start(&addr, &credentials, arrival))
            .collect();
        let mut workers: Vec<Child> = ["worker", "worker"]
            .iter()
            .map(|role| {
                let mut worker = node_command(&addr, &credentials, role, true, arrival.tasks());
                worker.stderr(Stdio::inherit()).spawn().unwrap()
            })
            .collect();
        while app.completions.lock().unwrap().len() < KILL_AFTER_COMPLETIONS / 2 {
            assert!(
                !master.is_finished(),
                "the job ended before the scale event"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match arrival {
            Arrival::Join => servers.push(LoggedServer::start(&addr, &credentials, arrival)),
            Arrival::ScaleIn => {
                let term = Command::new("kill")
                    .args(["-TERM", &servers[0].child.id().to_string()])
                    .status()
                    .unwrap();
                assert!(term.success());
            }
        }
        // A shard is on its new owner; the master does not know yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        let victim = loop {
            assert!(Instant::now() < deadline, "no server handed a shard off");
            servers.iter_mut().for_each(LoggedServer::read);
            let late = servers.iter().flat_map(|s| s.handed_late()).next();
            if let Some((_, to)) = late {
                if let Some(at) = servers.iter().position(|s| s.id() == Some(to)) {
                    break at;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Training goes on a while: the old owners forward those shards to the new owner.
        let before = app.completions.lock().unwrap().len();
        while app.completions.lock().unwrap().len() < before + 200 {
            assert!(!master.is_finished(), "the job ended before the kill");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sigkill(&mut servers[victim].child);
        let outcome = master.await.unwrap();
        // The leaving server exits by itself.
        let left = (arrival == Arrival::ScaleIn).then(|| exit_within(&mut servers[0].child));
        let children = workers
            .iter_mut()
            .chain(servers.iter_mut().map(|s| &mut s.child));
        for child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
        servers.iter_mut().for_each(LoggedServer::read);
        (outcome, servers, left)
    });
    let (outcome, servers, left) = outcome;
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    assert_eq!(outcome.driver.inner.completed(), arrival.tasks());
    let recoveries = &outcome.stats.recoveries;
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let report = &recoveries[0];
    // Which server handed which shard to the dead one.
    let handed_to_victim: BTreeSet<(u32, u32)> = servers
        .iter()
        .flat_map(|s| {
            let from = s.id().expect("a server says which node it is");
            let late = s.handed_late().into_iter();
            late.filter(|(_, to)| *to == report.server)
                .map(move |(shard, _)| (shard, from))
        })
        .collect();
    let leaving = servers[0].id();
    for &(shard, to) in &report.shards {
        match handed_to_victim.iter().find(|(s, _)| *s == shard) {
            // On its way to the dead server: back to the server that handed it off.
            Some(&(_, from)) => assert_eq!(to, from, "{shard} of {report:?}"),
            // Its own: to a server that takes load (not the one leaving).
            None => assert!(
                arrival == Arrival::ScaleIn && Some(to) != leaving && to != report.server,
                "{shard} of {report:?}; handed to it: {handed_to_victim:?}"
            ),
        }
    }
    let went_back = report
        .shards
        .iter()
        .filter(|(s, _)| handed_to_victim.iter().any(|(handed, _)| handed == s));
    assert!(went_back.count() > 0, "{report:?}");
    // Every event was told before the job ended: the recovery once, as the stats have it.
    let told: Vec<JobEvent> = std::iter::from_fn(|| job_events.try_recv().ok()).collect();
    let recoveries_told: Vec<&ServerRecovery> = told
        .iter()
        .filter_map(|e| match e {
            JobEvent::ServerRecovered(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(recoveries_told, [report], "the recovery's event");
    if let (Some(exit), Some(leaving)) = (left, leaving) {
        let leaves = told.iter().filter_map(|e| match e {
            JobEvent::Scale(e) if e.cause == "leave" && e.node == Some(leaving) => Some(e.clone()),
            _ => None,
        });
        check_left_after_a_retry(leaves.collect(), exit, report.server);
    }
    let lost_shards: BTreeSet<u32> = report.shards.iter().map(|(s, _)| *s).collect();
    let num_shards = servers_at_start * SHARDS_PER_SERVER;
    let (_, missing_total) = check_the_counter(&outcome, &app, &lost_shards, num_shards);
    println!(
        "server {} killed while shards came: shards re-created {:?}, {} rows restored, {missing_total} increments lost",
        report.server, report.shards, report.rows_restored
    );
}

/// How a child process exited, within 10 s.
fn exit_within(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "it did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A leaving server whose moves to `dead` the death cut short: its leave's first scale
/// event failed saying so, the next one (after the recovery) moved the rest of its load,
/// and it exited 0.
fn check_left_after_a_retry(leaves: Vec<ScaleEvent>, exit: std::process::ExitStatus, dead: u32) {
    let summary: Vec<(bool, Option<&str>)> =
        leaves.iter().map(|e| (e.ok, e.error.as_deref())).collect();
    let [first, .., last] = &leaves[..] else {
        panic!("one leave event, not a failed one and a retry: {summary:?}");
    };
    let cut_short = format!("server-{dead} failed while");
    let why = first.error.as_deref().unwrap_or_default();
    assert!(!first.ok && why.contains(&cut_short), "{summary:?}");
    assert!(
        last.ok,
        "the leave was not tried again or failed: {summary:?}"
    );
    assert!(last.report.shards_moved > 0, "{:?}", last.report);
    assert!(exit.success(), "the leaving server exited {exit}");
}

/// A server node that joins a running job is given shards from the two servers there, and
/// is SIGKILLed after it holds some but before the master heard it does (both old owners
/// answer their hand-offs late, fault injection). The old owners gave the rows away and
/// forward those shards to the dead node; what they forwarded goes unanswered. The master
/// recovers the dead node by re-creating each shard that was on its way to it on the
/// server it came from, which holds the shard's requests until then and serves them after
/// (`server/stranded.rs`). The job runs to its end: every row of another shard exact, every
/// row of a re-created shard at most its expected sum (no update applied twice). Before,
/// such a death ended the job ("a scale event was moving a shard to it").
#[test]
fn a_server_node_killed_while_shards_are_handed_to_it_is_recovered_on_their_old_owners() {
    kill_a_server_while_shards_come(Arrival::Join);
}

/// The same when one of three servers is given SIGTERM and the one its shards move to
/// dies: the shards on their way go back to the leaving server, the dead server's own
/// shards go to the third. The leave's scale event fails once its other moves end; a
/// second one, after the recovery, moves the shards that came back to the third server,
/// and the leaving server exits 0. Before, it kept serving them until it was killed.
#[test]
fn a_server_node_killed_while_a_leaving_server_hands_it_shards_is_recovered() {
    kill_a_server_while_shards_come(Arrival::ScaleIn);
}
