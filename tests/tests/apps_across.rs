//! Every app as MLR: across node processes it scales in and out while it trains, and it
//! survives a killed server node (issue 6: "Every app runs across processes, scales in and
//! out, and recovers from a killed server node").
//!
//! - **Scale in and out.** `harp run APP --processes 4`: after the second iteration node 2 is
//!   given back (`harp scale --remove 2`), after the fourth a node is taken back (`--add 1`).
//!   Every iteration is reported, both scale events succeed, and the figures equal an
//!   undisturbed run's: executors (with their state: LDA's documents and topic assignments)
//!   and shards moved without changing the computation. MF's SGD and LDA's sampling are
//!   exact under their model-parallel schedules; the CNN sums its gradients in executor
//!   order. Only the order in which the driver adds the executors' figures may differ, so
//!   they are compared to 1e-9.
//! - **A killed server node.** `--nodes 4` with SCAR's running checkpoint (a full image every
//!   iteration); two worker-only and two server-only `harp node` processes; one server node
//!   is SIGKILLed after the second iteration. The job finishes every iteration, the metrics
//!   file records the server's recovery, and the figures stay finite. (LDA's counts
//!   restored from the checkpoint no longer match its executors' topic assignments: it
//!   resyncs its tables from the assignments, see `harp_apps::lda`.)
//! - **A killed worker node** (LDA, whose executors keep state): `--recover-workers` on
//!   two worker-only and one server-only node; a worker SIGKILLed after the second
//!   iteration. Its executor is created afresh, the tables are resynced, and the run ends
//!   close to an undisturbed one, its tables equal to the assignments (`--check-counts`,
//!   on in every LDA run here).

use harp_tests::{harp_binary, read_json_lines, shared_data, MasterProcess, PATIENCE};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// One app's command line and what its metrics lines report.
struct AppRun {
    args: Vec<String>,
    /// The key every per-iteration metrics line has (`iteration` or `epoch`).
    progress: &'static str,
    /// The figures compared between runs.
    figures: &'static [&'static str],
    /// Iterations (or epochs) the run does.
    steps: usize,
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn mf() -> Option<AppRun> {
    mf_for(8)
}

fn mf_for(iterations: usize) -> Option<AppRun> {
    let data = shared_data("movielens-small/ratings.csv")?;
    let mut args = strings(&["run", "mf", "--solver", "sgd", "--rank", "8"]);
    args.extend([
        "--iterations".into(),
        iterations.to_string(),
        "--data".into(),
    ]);
    args.push(data.to_str()?.to_string());
    Some(AppRun {
        args,
        progress: "iteration",
        figures: &["train_rmse", "test_rmse"],
        steps: iterations,
    })
}

fn lda() -> Option<AppRun> {
    lda_for(10, 10)
}

fn lda_for(topics: usize, iterations: usize) -> Option<AppRun> {
    let data = shared_data("newsgroups-subset")?;
    // Every run ends by checking that the tables hold exactly the executors' topics: the
    // master fails otherwise (moves, a lost server's resync, a dead worker's).
    let mut args = strings(&[
        "run",
        "lda",
        "--check-counts",
        "--topics",
        &topics.to_string(),
    ]);
    args.extend(["--iterations".into(), iterations.to_string()]);
    args.extend(["--data".into(), data.to_str()?.to_string()]);
    Some(AppRun {
        args,
        progress: "iteration",
        figures: &["log_likelihood"],
        steps: iterations,
    })
}

fn cnn() -> Option<AppRun> {
    Some(AppRun {
        args: strings(&[
            "run",
            "cnn",
            "--epochs",
            "6",
            "--max-batches",
            "6",
            "--batch",
            "32",
            "--channels",
            "4,8",
            "--hidden",
            "32,16",
        ]),
        progress: "epoch",
        figures: &["loss", "accuracy"],
        steps: 6,
    })
}

fn steps_so_far(metrics: &Path, key: &str) -> usize {
    std::fs::read_to_string(metrics)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r[key].is_u64() && r.get("event").is_none())
        .count()
}

fn wait_for_steps(metrics: &Path, key: &str, steps: usize) {
    let deadline = Instant::now() + PATIENCE;
    while steps_so_far(metrics, key) < steps {
        assert!(
            Instant::now() < deadline,
            "the job never reached {key} {steps}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The per-step figures of a finished run's metrics file.
fn figures(app: &AppRun, metrics: &Path) -> Vec<Vec<f64>> {
    let rows: Vec<Vec<f64>> = read_json_lines(metrics)
        .iter()
        .filter(|r| r[app.progress].is_u64() && r.get("event").is_none())
        .map(|r| {
            app.figures
                .iter()
                .map(|f| r[*f].as_f64().unwrap_or_else(|| panic!("no {f} in {r}")))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), app.steps, "{:?}", app.args);
    for row in &rows {
        assert!(row.iter().all(|v| v.is_finite()), "{row:?}");
    }
    rows
}

/// `app` on 3 node processes; `disturb` gives node 2 back after step 2 and takes a node
/// back after step 4. Returns the figures and the scale events.
fn on_three_nodes(app: &AppRun, disturb: bool) -> (Vec<Vec<f64>>, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let mut args: Vec<&str> = app.args.iter().map(String::as_str).collect();
    args.extend([
        "--processes",
        "4",
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let master = MasterProcess::start(harp_binary!(), &args);
    if disturb {
        wait_for_steps(&metrics, app.progress, 2);
        let out = master.scale(&["--remove", "2"]);
        assert!(out.status.success(), "{}", out.describe());
        master.wait_for_nodes(&BTreeSet::from([0, 1]));
        wait_for_steps(&metrics, app.progress, 4);
        let out = master.scale(&["--add", "1"]);
        assert!(
            out.status.success(),
            "{} (the job had done {} of its {} steps)",
            out.describe(),
            steps_so_far(&metrics, app.progress),
            app.steps
        );
        master.wait_for_nodes(&BTreeSet::from([0, 1, 3]));
    }
    let (status, stderr) = master.finish();
    assert!(
        status.success(),
        "{:?}: the master failed: {stderr}",
        app.args
    );
    let events = read_json_lines(&metrics)
        .into_iter()
        .filter(|r| r["event"] == "scale")
        .collect();
    (figures(app, &metrics), events)
}

fn scales_in_and_out_without_changing_the_result(app: Option<AppRun>) {
    let Some(app) = app else {
        eprintln!("skipped: the shared dataset is not here");
        return;
    };
    let (steady, none) = on_three_nodes(&app, false);
    assert!(none.is_empty());
    let (disturbed, events) = on_three_nodes(&app, true);
    let summary: Vec<String> = events
        .iter()
        .map(|e| format!("{}:{}:{}", e["cause"].as_str().unwrap(), e["node"], e["ok"]))
        .collect();
    assert_eq!(summary, ["leave:2:true", "join:3:true"], "{:?}", app.args);
    for e in &events {
        assert!(e["report"]["executors_moved"].as_u64().unwrap() >= 1, "{e}");
    }
    for (step, (a, b)) in steady.iter().zip(&disturbed).enumerate() {
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(1.0),
                "{:?}, step {}: undisturbed {a:?}, disturbed {b:?}",
                app.args,
                step + 1
            );
        }
    }
}

// The scale tests' jobs must outlast both scale commands (a node process started and
// joined, load moved both ways: seconds): MF gets 30 iterations, LDA (a few ms an iteration
// on newsgroups) 100 topics and 200 iterations.

#[test]
fn mf_scales_in_and_out_without_changing_the_result() {
    scales_in_and_out_without_changing_the_result(mf_for(30));
}

#[test]
fn lda_scales_in_and_out_without_changing_the_result() {
    scales_in_and_out_without_changing_the_result(lda_for(100, 200));
}

#[test]
fn cnn_scales_in_and_out_without_changing_the_result() {
    scales_in_and_out_without_changing_the_result(cnn());
}

fn node_process(master: &MasterProcess, role: &str, run_args: &[String]) -> Child {
    Command::new(harp_binary!())
        .args([
            "node",
            "--role",
            role,
            "--join",
            &master.addr,
            "--credentials",
        ])
        .arg(&master.credentials)
        .arg("--")
        .args(run_args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Runs `app` with `flags` on `--nodes` processes of `roles` (the nodes get the flags too),
/// SIGKILLs node `victim` once the metrics file shows step 2, and asserts that the master
/// still ends the job successfully.
fn kill_a_node_after_step_2(
    app: &AppRun,
    flags: &[&str],
    roles: &[&str],
    victim: usize,
    metrics: &Path,
) {
    let nodes = roles.len().to_string();
    let mut args: Vec<&str> = app.args.iter().map(String::as_str).collect();
    args.extend(flags);
    args.extend([
        "--nodes",
        &nodes,
        "--lease-timeout-ms",
        "3000",
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let master = MasterProcess::start(harp_binary!(), &args);
    let mut node_args = app.args.clone();
    node_args.extend(flags.iter().map(|s| s.to_string()));
    let mut nodes: Vec<Child> = roles
        .iter()
        .map(|role| node_process(&master, role, &node_args))
        .collect();
    wait_for_steps(metrics, app.progress, 2);
    nodes[victim].kill().unwrap(); // SIGKILL
    let _ = nodes[victim].wait();
    let (status, stderr) = master.finish();
    for node in nodes.iter_mut() {
        let _ = node.kill();
        let _ = node.wait();
    }
    assert!(
        status.success(),
        "{:?}: the master failed: {stderr}",
        app.args
    );
}

/// Returns the run's figures (`None` without the shared dataset).
fn survives_a_killed_server_node(app: Option<AppRun>) -> Option<Vec<Vec<f64>>> {
    let Some(app) = app else {
        eprintln!("skipped: the shared dataset is not here");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let metrics: PathBuf = dir.path().join("metrics.jsonl");
    let scar = ["--scar-fraction", "1", "--scar-period", "1"];
    kill_a_node_after_step_2(
        &app,
        &scar,
        &["worker", "worker", "server", "server"],
        2,
        &metrics,
    );
    let figures = figures(&app, &metrics);
    let recoveries: Vec<serde_json::Value> = read_json_lines(&metrics)
        .into_iter()
        .filter(|r| r["event"] == "recovery")
        .collect();
    assert_eq!(recoveries.len(), 1, "{:?}: {recoveries:?}", app.args);
    let shards = recoveries[0]["report"]["shards"].as_array().unwrap();
    assert!(!shards.is_empty(), "{recoveries:?}");
    Some(figures)
}

#[test]
fn mf_survives_a_killed_server_node() {
    survives_a_killed_server_node(mf());
}

#[test]
fn lda_survives_a_killed_server_node() {
    let Some(killed) = survives_a_killed_server_node(lda()) else {
        return;
    };
    // After the kill the restored counts (if they lost anything) were resynced from the
    // topic assignments and the chain goes on within 0.1 nats per token of the undisturbed
    // one (about twice the seed-to-seed spread, see lda_acceptance).
    let undisturbed = undisturbed_lda();
    same_until_the_kill(&killed, &undisturbed);
    let (a, b) = (killed[9][0], undisturbed[9][0]);
    assert!((a - b).abs() < 0.1, "after 10 iterations: {a} vs {b}");
}

/// [`lda`]'s figures undisturbed, in one process: two workers of one executor, as the two
/// worker nodes of the tests that kill a node, so the same sampling.
fn undisturbed_lda() -> Vec<Vec<f64>> {
    let app = lda().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let mut args: Vec<&str> = app.args.iter().map(String::as_str).collect();
    args.extend(["--workers", "2", "--metrics-out", metrics.to_str().unwrap()]);
    let out = harp_tests::run_process(&harp_binary!(), &args);
    assert!(out.status.success(), "{}", out.describe());
    figures(&app, &metrics)
}

/// A node killed after the second iteration: the first two are the undisturbed run's.
fn same_until_the_kill(killed: &[Vec<f64>], undisturbed: &[Vec<f64>]) {
    for step in 0..2 {
        let (a, b) = (killed[step][0], undisturbed[step][0]);
        assert!((a - b).abs() <= 1e-9, "iteration {}: {a} vs {b}", step + 1);
    }
}

#[test]
fn cnn_survives_a_killed_server_node() {
    survives_a_killed_server_node(cnn());
}

/// LDA's executors hold their documents' topic assignments, which die with a worker node.
/// `--recover-workers` makes the dead node's executors again on the live worker and runs
/// their uncommitted sub-rounds again: afresh (initial topics), or, with consistent
/// checkpoints, from the topics each saved in the newest one (`App::recover_executor`).
/// Either way the tables count topics that no executor holds any more; a made-again
/// executor says so (it reports its sub-rounds stale until the tables count its topics),
/// and the driver resyncs the tables from the assignments: each job ends, its likelihood
/// finite and close to an undisturbed run's, with at least one resync, and its tables equal
/// to the assignments (`--check-counts`); from a checkpoint, every executor of the dead
/// node names one taken before the kill. (Before the resync, the job failed: the recreated
/// executor could not take its tokens out of counts of topics it never had.)
#[test]
fn lda_survives_a_killed_worker_node_afresh_or_from_a_checkpoint() {
    let Some(app) = lda() else {
        eprintln!("skipped: the shared dataset is not here");
        return;
    };
    let undisturbed = undisturbed_lda();
    let afresh = lda_with_a_killed_worker(&app, &[]);
    assert!(afresh.restored.is_empty(), "no checkpoint to restore from");
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints");
    let checkpoints = checkpoints.to_str().unwrap();
    let flags = ["--checkpoint-dir", checkpoints, "--checkpoint-every", "1"];
    let restored = lda_with_a_killed_worker(&app, &flags);
    assert_eq!(
        restored
            .restored
            .iter()
            .map(|(e, _)| *e)
            .collect::<Vec<_>>(),
        restored.executors,
        "every executor of the dead node is made from its checkpointed state"
    );
    let before_the_kill = 1..=restored.first_recovered as u64;
    assert!(
        (restored.restored.iter()).all(|(_, c)| before_the_kill.contains(c)),
        "each executor is made from a checkpoint taken before iteration {}, the first after \
         the kill: {:?}",
        restored.first_recovered + 1,
        restored.restored
    );
    println!(
        "log likelihood per token: afresh {:?} (recovered before iteration {}), from checkpoints {:?} ({:?}, before iteration {}), undisturbed {undisturbed:?}",
        afresh.figures,
        afresh.first_recovered + 1,
        restored.figures,
        restored.restored,
        restored.first_recovered + 1
    );
    for run in [&afresh, &restored] {
        let killed = &run.figures;
        same_until_the_kill(killed, &undisturbed);
        // The run falls back at the kill and climbs again: after 10 iterations it is above
        // its second and within 0.1 nats per token of the undisturbed run (0.01–0.04 seen).
        let (a, b) = (killed[9][0], undisturbed[9][0]);
        assert!(
            a > killed[1][0],
            "the chain did not climb again: {killed:?}"
        );
        assert!((a - b).abs() < 0.1, "after 10 iterations: {a} vs {b}");
    }
    // How far the first iteration reported after the recovery falls below the undisturbed
    // run's depends on when the kill lands (the job runs an iteration in about 20 ms here)
    // and on the checkpoint: seen afresh 0.29–0.96 nats per token, from the checkpoint
    // just before the kill's iteration 0–0.13, from an older one 0.13–0.42. Printed, not
    // asserted; that the saved topics are what a recovered executor holds is
    // `lda::executor`'s unit test.
    let fall = |run: &KilledWorkerRun| {
        let i = run.first_recovered;
        undisturbed[i][0] - run.figures[i][0]
    };
    println!(
        "the first iteration after the recovery falls {:.3} below the undisturbed run afresh, \
         {:.3} from a checkpoint",
        fall(&afresh),
        fall(&restored)
    );
}

/// A dead worker node's counter executors, each carrying 2 MB of state (`--state-bytes`),
/// are made again from the states they saved in the newest consistent checkpoint: a state
/// of 1 MiB or more does not go in the message, so each is parked on the master and fetched
/// by the node that takes the executor over, and the counter's restore checks every byte of
/// its pattern (a state lost, cut short or mixed up fails the job). The job ends with every
/// counter exact and its recovery report names a checkpoint for each of the node's
/// executors.
#[test]
fn a_dead_worker_nodes_large_states_come_back_from_a_checkpoint() {
    dead_worker_states_come_back_from_a_checkpoint("2000000");
}

/// The same with 200 KB states, which go in the `CreateExecutor` message itself: the
/// micro-tasks the master sends again right after it must not overtake it (a message of
/// 64 KiB or more went on a QUIC stream of its own, and the node refused the first task
/// for an executor it did not host yet, ending the job; the partition soak found it).
#[test]
fn a_dead_worker_nodes_states_in_the_message_stay_ahead_of_their_micro_tasks() {
    dead_worker_states_come_back_from_a_checkpoint("200000");
}

/// A counter job on two worker nodes and a server node, with executor states of
/// `state_bytes` and a consistent checkpoint every 500 iterations; the first worker node is
/// SIGKILLed once a checkpoint is written.
fn dead_worker_states_come_back_from_a_checkpoint(state_bytes: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let checkpoints = dir.path().join("checkpoints");
    let run_args = recoverable_counter(state_bytes);
    let every_500 = ["--checkpoint-every", "500"];
    let (master, nodes) = start_on_three_nodes(&run_args, &checkpoints, &every_500, &metrics);
    master.wait_for_line(&["checkpoint", "written"]);
    let taken = kill_a_worker_node_and_check_the_end(master, nodes, &metrics);
    assert!(
        taken.iter().all(|c| *c >= 500 && c % 500 == 0),
        "checkpoints are taken every 500 iterations: {taken:?}"
    );
}

/// A job resumed from one directory that writes its checkpoints into another (and none
/// before its worker node dies: one every 1,000,000 iterations) makes the dead node's
/// executors again from the checkpoint it resumed from, not afresh (until 2026-12-07 only
/// the directory the job writes was looked in); every counter ends exact.
#[test]
fn a_job_resumed_into_another_directory_makes_dead_workers_again_from_the_resumed_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let run_args = recoverable_counter("2000");
    // The first run checkpoints into `first`; its master is SIGKILLed after one checkpoint.
    let every_500 = ["--checkpoint-every", "500"];
    let (master, nodes) = start_on_three_nodes(
        &run_args,
        &first,
        &every_500,
        &dir.path().join("first.jsonl"),
    );
    master.wait_for_line(&["checkpoint", "written"]);
    master.signal("KILL");
    let _ = master.finish();
    for mut node in nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
    // The second resumes from `first` and writes into `second`.
    let metrics = dir.path().join("second.jsonl");
    let resume = ["--resume", first.to_str().unwrap()];
    let extra = [&resume[..], &["--checkpoint-every", "1000000"]].concat();
    let (master, nodes) = start_on_three_nodes(&run_args, &second, &extra, &metrics);
    master.wait_until_running();
    let taken = kill_a_worker_node_and_check_the_end(master, nodes, &metrics);
    let records = read_json_lines(&metrics);
    let resumed = (records.iter())
        .find(|r| r["event"] == "resumed")
        .unwrap_or_else(|| panic!("no resume record: {records:?}"));
    let seq = resumed["from"]["seq"].as_u64().unwrap();
    assert!(
        taken.iter().all(|c| *c == seq),
        "made again from {taken:?}, not from the resumed checkpoint {seq}"
    );
}

/// A worker recovery report's list of number pairs (`executors`: executor and worker;
/// `restored_from_checkpoint`: executor and checkpoint).
fn number_pairs(list: &serde_json::Value) -> Vec<(u64, u64)> {
    let number = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{list}"));
    (list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter())
    .map(|pair| (number(&pair[0]), number(&pair[1])))
    .collect()
}

/// The counter run of the dead-worker tests: 40,000 micro-tasks of 1 ms, executor states
/// of `state_bytes`, worker recovery.
fn recoverable_counter(state_bytes: &'static str) -> [&'static str; 9] {
    [
        "run",
        "counter",
        "--tasks",
        "40000",
        "--task-sleep-us",
        "1000",
        "--state-bytes",
        state_bytes,
        "--recover-workers",
    ]
}

/// Starts `run_args`' master (4 executors per worker, a lease of 3 s, consistent
/// checkpoints into `checkpoints`, `extra`, metrics into `metrics`) and its nodes: two
/// worker nodes and a server node.
fn start_on_three_nodes(
    run_args: &[&str],
    checkpoints: &Path,
    extra: &[&str],
    metrics: &Path,
) -> (MasterProcess, Vec<Child>) {
    let mut args = run_args.to_vec();
    args.extend(["--nodes", "3", "--executors-per-worker", "4"]);
    args.extend(["--lease-timeout-ms", "3000"]);
    args.extend(["--checkpoint-dir", checkpoints.to_str().unwrap()]);
    args.extend(["--metrics-out", metrics.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let master = MasterProcess::start(harp_binary!(), &args);
    let node_args = strings(run_args);
    let nodes = ["worker", "worker", "server"]
        .iter()
        .map(|role| node_process(&master, role, &node_args))
        .collect();
    (master, nodes)
}

/// SIGKILLs the first worker node of [`start_on_three_nodes`]; the job must end well: one
/// worker recovery, whose executors were all made again from a checkpoint, and every
/// counter exact. Returns the checkpoint each was made from.
fn kill_a_worker_node_and_check_the_end(
    master: MasterProcess,
    mut nodes: Vec<Child>,
    metrics: &Path,
) -> Vec<u64> {
    nodes[0].kill().unwrap(); // SIGKILL
    let _ = nodes[0].wait();
    let (status, stderr) = master.finish();
    for node in nodes.iter_mut() {
        let _ = node.kill();
        let _ = node.wait();
    }
    assert!(status.success(), "the master failed: {stderr}");
    for line in stderr
        .lines()
        .filter(|l| l.contains("recovery") || l.contains("done"))
    {
        println!("{line}");
    }
    let records = read_json_lines(metrics);
    let recoveries: Vec<_> = (records.iter())
        .filter(|r| r["event"] == "worker_recovery")
        .collect();
    assert_eq!(recoveries.len(), 1, "{stderr}");
    let report = &recoveries[0]["report"];
    let pairs = |field: &str| number_pairs(&report[field]);
    let executors: Vec<u64> = pairs("executors").into_iter().map(|p| p.0).collect();
    assert!(!executors.is_empty(), "{report}");
    let restored = pairs("restored_from_checkpoint");
    let made_again: Vec<u64> = restored.iter().map(|p| p.0).collect();
    assert_eq!(made_again, executors, "{report}");
    let verdict = (records.iter())
        .find(|r| r["tasks"].is_u64())
        .unwrap_or_else(|| panic!("no final counter record: {records:?}"));
    assert_eq!(verdict["tasks"], 40000, "{verdict}");
    assert_eq!(verdict["exact"], true, "{verdict}");
    restored.into_iter().map(|p| p.1).collect()
}

/// An LDA run with `--recover-workers` (and `flags`) across two worker nodes, the first
/// SIGKILLed after the second iteration.
struct KilledWorkerRun {
    figures: Vec<Vec<f64>>,
    /// The dead node's executors, as the recovery report lists them.
    executors: Vec<u64>,
    /// `(executor, checkpoint)` of those made from a checkpointed state.
    restored: Vec<(u64, u64)>,
    /// The index in `figures` of the first iteration reported after the recovery.
    first_recovered: usize,
}

/// Runs [`KilledWorkerRun`] and checks what every such run must show: one worker
/// recovery of at least one executor, at least one resync, and tables that end exact.
fn lda_with_a_killed_worker(app: &AppRun, flags: &[&str]) -> KilledWorkerRun {
    let dir = tempfile::tempdir().unwrap();
    let metrics: PathBuf = dir.path().join("metrics.jsonl");
    let mut all = vec!["--recover-workers"];
    all.extend(flags);
    kill_a_node_after_step_2(app, &all, &["worker", "worker", "server"], 0, &metrics);
    let records = read_json_lines(&metrics);
    let recoveries: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "worker_recovery")
        .collect();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let report = &recoveries[0]["report"];
    let first_recovered = (records.iter())
        .take_while(|r| r["event"] != "worker_recovery")
        .filter(|r| r[app.progress].is_u64() && r.get("event").is_none())
        .count();
    let pairs = |field: &str| number_pairs(&report[field]);
    let executors: Vec<u64> = pairs("executors").into_iter().map(|(e, _)| e).collect();
    assert!(!executors.is_empty(), "{report}");
    let resyncs = (records.iter().filter_map(|r| r["resyncs"].as_u64()))
        .max()
        .unwrap_or(0);
    assert!(
        resyncs >= 1,
        "the made-again executor's topics were never counted into the tables: {records:?}"
    );
    let checks: Vec<_> = (records.iter())
        .filter(|r| r["event"] == "counts_check")
        .collect();
    assert_eq!(checks.len(), 1, "{records:?}");
    assert_eq!(checks[0]["exact"], true, "{}", checks[0]);
    KilledWorkerRun {
        figures: figures(app, &metrics),
        executors,
        restored: pairs("restored_from_checkpoint"),
        first_recovered,
    }
}
