//! A node process killed in the middle of an executor's move (Litz §4.4 moves between real
//! `harp` processes over QUIC; issue 4's "a node that dies in the middle of a move").
//!
//! - Without worker recovery the job ends with a clear error: every process exits, the move
//!   is never reported done, and the job claims no result.
//! - With `--recover-workers` the job goes on: the move is reported failed, the executor is
//!   created afresh on a live worker (or, when the job writes consistent checkpoints, made
//!   again from its state in the newest one), its uncommitted micro-tasks run again, and at
//!   the end every counter is exact (no update lost or applied twice).
//!
//! Under a long lease a fetch held for longer than the usual 30 s still moves the state
//! (the waits on a silent peer outlast the master's verdict: `remote/lease.rs`).
//!
//! Also, with `--recover-workers`, a node that leaves after its moves: it departs only once
//! the flushes staged on its server are reported and committed, and a worker node that
//! dies meanwhile has its executors created afresh elsewhere than on the leaving node.

use harp_tests::{
    harp_binary, read_json_lines, wait_exit, wait_exit_within, LoggedNode, MasterProcess, PATIENCE,
};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The metrics file's scale events so far (a torn last line is skipped).
fn scale_events_so_far(metrics: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(metrics)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"] == "scale")
        .collect()
}

/// The executor a "state parked" log line names.
fn executor_in(parked_line: &str) -> String {
    let name = parked_line
        .split("executor=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next());
    name.unwrap_or_else(|| panic!("no executor named in: {parked_line}"))
        .to_string()
}

/// The counter app with two executors whose states (300 MB each, more than QUIC's 256 MiB
/// send window) take seconds to fetch, on a master that waits for one node; the job is long
/// enough never to end on its own during the test.
const MID_MOVE_RUN: [&str; 12] = [
    "run",
    "counter",
    "--tasks",
    "1000000",
    "--task-sleep-us",
    "1000",
    "--executors-per-worker",
    "2",
    "--state-bytes",
    "300000000",
    "--threads",
    "2",
];

/// Starts the master of [`MID_MOVE_RUN`]; also returns its metrics file.
fn mid_move_job(dir: &Path) -> (MasterProcess, PathBuf) {
    let metrics = dir.join("metrics.jsonl");
    let mut master_args = MID_MOVE_RUN.to_vec();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    (MasterProcess::start(harp_binary!(), &master_args), metrics)
}

/// What every kill mid-move must end with, whichever node died: the master exits non-zero
/// (within a bounded wait) with an error naming the dead node or the executor lost on its
/// way; nothing panicked; the surviving node exits on its own; the move's scale event is
/// reported failed, with an error that names the executor rather than claiming the master is
/// unreachable; and the job reported no result.
///
/// "No duplicated update" when the job ends with an error: the executor never runs in two
/// places (its old worker released it before the kill and never takes it back; the adopter,
/// if it lives, never restores it), the scale event is never reported done (`ok: true`),
/// and the job claims no result: the counter's final check, which compares every parameter
/// with the updates the driver counted, never runs, so no metrics line says `exact`. (The
/// updates applied before the failure stay in the dead job; none is applied twice, and the
/// job does not pretend the others were applied.)
fn assert_clean_failure(
    master: MasterProcess,
    survivor: LoggedNode,
    (metrics, cause, executor): (&Path, &str, &str),
) -> String {
    // The master's own error line, as soon as it is printed.
    let error = loop {
        let line = master.wait_for_line(&["error: "]);
        if line.starts_with("error: ") {
            break line;
        }
    };
    let (status, stderr) = master.finish_within(PATIENCE);
    assert!(!status.success(), "the master succeeded: {stderr}");
    assert!(
        error.contains("node 1 died") || error.contains(&format!("{executor} was lost moving")),
        "the error names neither the dead node nor the executor: {error}"
    );
    println!("the master: {error}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (node_status, node_log) = survivor.exit("the surviving node 0");
    assert!(
        !node_status.success(),
        "node 0 reported success for a failed job: {node_log}"
    );
    assert!(!node_log.contains("panicked"), "{node_log}");
    let records = read_json_lines(metrics);
    assert!(
        records.iter().all(|r| r.get("exact").is_none()),
        "a failed job reported a result: {records:?}"
    );
    let events: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "scale" && r["cause"] == cause)
        .collect();
    for event in &events {
        assert_eq!(event["ok"], false, "{event}");
        let why = event["error"].as_str().unwrap_or_default();
        println!("its {cause} event: {why}");
        assert!(
            why.contains(executor) && !why.contains("unreachable"),
            "the failed scale event does not say what happened to {executor}: {event}"
        );
    }
    node_log
}

/// Issue 4, bad input: the *adopting* node dies (SIGKILL) while it fetches an executor's
/// state. Node 1 joins, the planner gives it one of node 0's two executors, node 0 parks the
/// state and node 1 fetches it; the test kills node 1 once node 0 has handed the whole state
/// to QUIC (logged by node 0), which is while the state is still on its way: QUIC's send
/// window holds 256 MiB of the 300 MB, and the node never logged the state fetched. The job
/// ends with a clear error and no executor ends with two owners (see
/// [`assert_clean_failure`]).
#[test]
fn an_adopting_node_killed_mid_fetch_fails_the_job_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (master, metrics) = mid_move_job(dir.path());
    let (releasing, executor) = kill_the_adopting_node_mid_fetch(&master, &MID_MOVE_RUN, "both");
    let releaser_log = assert_clean_failure(master, releasing, (&metrics, "join", &executor));
    // The released executor never came back to the node that let it go.
    assert!(!releaser_log.contains("restored"), "{releaser_log}");
}

/// Node 0 runs; node 1 (`role`) joins and the planner gives it one of node 0's executors:
/// node 0 parks its state and node 1 fetches it. Node 1 is SIGKILLed once node 0 has handed
/// the whole state to QUIC (logged by node 0), which is while the state is still on its
/// way; the test checks that node 1 never had it. Returns node 0 and the executor.
fn kill_the_adopting_node_mid_fetch(
    master: &MasterProcess,
    run: &[&str],
    role: &str,
) -> (LoggedNode, String) {
    let mut releasing = LoggedNode::start(master, run);
    master.wait_until_running();
    let mut adopting = LoggedNode::start_as(master, role, run);
    let parked = releasing.wait_for_line(&["state parked for the adopting node"]);
    let executor = executor_in(&parked);
    releasing.wait_for_line(&["parked executor state handed to QUIC"]);
    adopting.kill();
    let (_, adopter_log) = adopting.exit("the adopting node 1");
    assert!(
        !adopter_log.contains("executor state fetched"),
        "the kill came after the fetch; the test did not kill mid-fetch: {adopter_log}"
    );
    (releasing, executor)
}

/// Issue 4, bad input: the *releasing* node dies (SIGKILL) while its executor's state is
/// being fetched. Node 1 joins and takes one of node 0's executors; `harp scale --remove 1`
/// moves it back: node 1 parks the state and node 0 fetches it; the test kills node 1 once it
/// has handed the whole state to QUIC (so it no longer holds it, while up to 256 MiB are
/// still on their way). The job ends with a clear error, the `harp scale` command fails with
/// one, and no executor ends with two owners: node 0 never restores it (see
/// [`assert_clean_failure`]).
#[test]
fn a_releasing_node_killed_mid_fetch_fails_the_job_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (master, metrics) = mid_move_job(dir.path());
    let (adopting, remove, executor) =
        kill_the_releasing_node_mid_fetch(&master, &metrics, &MID_MOVE_RUN, "both");
    let adopter_log = assert_clean_failure(master, adopting, (&metrics, "leave", &executor));
    // Node 0 never had the whole state, so it never ran the executor.
    assert!(
        !adopter_log.contains("executor state fetched"),
        "the kill came after the fetch; the test did not kill mid-fetch: {adopter_log}"
    );
    assert!(!adopter_log.contains("restored"), "{adopter_log}");
    // `harp scale --remove` hears that its command failed, and why: the master answers every
    // command it took before it exits, even one the job's end decided.
    let said = failed_answer(remove);
    assert!(
        said.contains(&executor) && !said.contains("unreachable"),
        "harp scale --remove did not say what happened to {executor}: {said}"
    );
}

/// Waits until node 1's join moved an executor to it (the join's scale event ends once the
/// move is done) and checks that it did.
fn wait_for_join(metrics: &Path) {
    let deadline = Instant::now() + PATIENCE;
    let joined = loop {
        let events = scale_events_so_far(metrics);
        if let Some(join) = events.into_iter().find(|e| e["cause"] == "join") {
            break join;
        }
        assert!(Instant::now() < deadline, "node 1 never joined");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(joined["ok"], true, "{joined}");
}

/// Node 0 runs; node 1 (`role`) joins and takes one of its executors; `harp scale --remove
/// 1` moves it back: node 1 parks the state and node 0 fetches it. Node 1 is SIGKILLed once
/// it has handed the whole state to QUIC (so it no longer holds it, while up to 256 MiB are
/// still on their way). Returns node 0, the running `harp scale` and the executor.
fn kill_the_releasing_node_mid_fetch(
    master: &MasterProcess,
    metrics: &Path,
    run: &[&str],
    role: &str,
) -> (LoggedNode, Child, String) {
    let releasing = (role, &[][..]);
    let handed = "parked executor state handed to QUIC";
    kill_the_releasing_node_at(master, (metrics, run), releasing, || {}, handed)
}

/// The steps of [`kill_the_releasing_node_mid_fetch`], with node 1 started as `role` with
/// `env`, `before_remove` run once it joined, and the kill when node 1 logs `kill_at`.
fn kill_the_releasing_node_at(
    master: &MasterProcess,
    (metrics, run): (&Path, &[&str]),
    (role, env): (&str, &[(&str, &str)]),
    before_remove: impl FnOnce(),
    kill_at: &str,
) -> (LoggedNode, Child, String) {
    let adopting = LoggedNode::start(master, run);
    master.wait_until_running();
    let mut releasing = LoggedNode::start_with_env(master, role, run, env);
    wait_for_join(metrics);
    before_remove();
    let remove = remove_node_1(master);
    let parked = releasing.wait_for_line(&["state parked for the adopting node"]);
    let executor = executor_in(&parked);
    releasing.wait_for_line(&[kill_at]);
    releasing.kill();
    let (_, releaser_log) = releasing.exit("the releasing node 1");
    assert!(!releaser_log.contains("panicked"), "{releaser_log}");
    (adopting, remove, executor)
}

/// Starts `harp scale --remove 1` (it answers once the scale-in ends).
fn remove_node_1(master: &MasterProcess) -> Child {
    let cred = master.credentials.to_str().unwrap();
    Command::new(harp_binary!())
        .args(["scale", "--job", &master.addr, "--credentials", cred])
        .args(["--remove", "1"])
        .env_remove("HARP_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a `harp scale` command that must fail said; it must exit non-zero.
fn failed_answer(mut command: Child) -> String {
    let status = wait_exit(&mut command, "harp scale --remove 1");
    let mut said = String::new();
    command
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    println!("harp scale --remove 1: {said}");
    assert!(!status.success(), "{said}");
    said
}

/// [`MID_MOVE_RUN`] with `--recover-workers` and few enough micro-tasks that the job ends
/// some seconds after a kill mid-move (at the rate 2 executors run 1 ms tasks).
fn recovering_run() -> Vec<&'static str> {
    let mut run = MID_MOVE_RUN.to_vec();
    let tasks = run.iter().position(|a| *a == "--tasks").unwrap() + 1;
    run[tasks] = RECOVERED_TASKS;
    run.push("--recover-workers");
    run
}

/// [`recovering_run`] with 2 MB executor states: parked and fetched like the 300 MB ones,
/// quick to checkpoint and to move.
fn recovering_run_with_small_states() -> Vec<&'static str> {
    let mut run = recovering_run();
    let state_bytes = run.iter().position(|a| *a == "--state-bytes").unwrap() + 1;
    run[state_bytes] = "2000000";
    run
}

/// Micro-tasks of [`recovering_run`].
const RECOVERED_TASKS: &str = "30000";

/// Starts the master of [`recovering_run`]; also returns its metrics file and the run's
/// arguments, for the nodes.
fn recovering_job(dir: &Path) -> (MasterProcess, PathBuf, Vec<&'static str>) {
    let run = recovering_run();
    let metrics = dir.join("metrics.jsonl");
    let mut master_args = run.clone();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    (
        MasterProcess::start(harp_binary!(), &master_args),
        metrics,
        run,
    )
}

/// What every kill mid-move must end with under `--recover-workers`: the master succeeds and
/// every counter is exact (each micro-task's updates applied once, although the executor's
/// move failed and its uncommitted tasks ran again); the move's scale event is reported
/// failed, naming the executor and saying it was created afresh; node 1's death was one
/// worker recovery; nothing panicked; node 0 ends the job with it and exits 0. Returns node
/// 0's log.
fn assert_recovered(
    master: MasterProcess,
    survivor: LoggedNode,
    (metrics, cause, executor): (&Path, &str, &str),
) -> String {
    let (records, node_log) = assert_exact_end(master, metrics, survivor);
    let event = the_event(&records, cause);
    assert_eq!(event["ok"], false, "{event}");
    let why = event["error"].as_str().unwrap_or_default();
    println!("its {cause} event: {why}");
    assert!(
        why.contains(executor) && why.contains("afresh"),
        "the failed scale event does not say what became of {executor}: {event}"
    );
    node_log
}

/// `--recover-workers`: the *adopting* node (worker-only) is SIGKILLed mid-fetch, as in
/// [`an_adopting_node_killed_mid_fetch_fails_the_job_cleanly`]. The master ends the move and
/// creates the executor afresh on node 0 (the only live worker), where its uncommitted
/// micro-tasks run again; the job runs to its end with every counter exact.
#[test]
fn an_adopting_node_killed_mid_fetch_is_recovered_and_every_counter_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (master, metrics, run) = recovering_job(dir.path());
    let (releasing, executor) = kill_the_adopting_node_mid_fetch(&master, &run, "worker");
    let node_log = assert_recovered(master, releasing, (&metrics, "join", &executor));
    assert!(
        node_log.contains("created the executor of a dead worker node"),
        "{node_log}"
    );
}

/// `--recover-workers`: the *releasing* node (worker-only) is SIGKILLed while node 0
/// fetches the executor it gave up on `harp scale --remove 1`, as in
/// [`a_releasing_node_killed_mid_fetch_fails_the_job_cleanly`]. Node 0's fetch fails; the
/// master creates the executor afresh on node 0, and the job runs to its end with every
/// counter exact. `harp scale --remove 1` hears that the move failed and why.
#[test]
fn a_releasing_node_killed_mid_fetch_is_recovered_and_every_counter_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (master, metrics, run) = recovering_job(dir.path());
    let (adopting, remove, executor) =
        kill_the_releasing_node_mid_fetch(&master, &metrics, &run, "worker");
    let node_log = assert_recovered(master, adopting, (&metrics, "leave", &executor));
    assert!(
        !node_log.contains("executor state fetched"),
        "the kill came after the fetch; the test did not kill mid-fetch: {node_log}"
    );
    let said = failed_answer(remove);
    assert!(
        said.contains(&executor) && said.contains("afresh"),
        "harp scale --remove did not say what became of {executor}: {said}"
    );
}

/// `--recover-workers` with consistent checkpoints: the *releasing* node (worker-only) is
/// SIGKILLed while node 0 fetches the executor it gave up on `harp scale --remove 1`. The
/// master makes the executor again on node 0 from its state in the newest consistent
/// checkpoint, not afresh, says so in the leave event and in `harp scale`'s answer, and
/// the job ends with every counter exact. The states are 2 MB (parked, as every state of
/// 1 MiB or more is) and node 1 holds the fetch of the state it released for a minute
/// (`RELEASED_STATE_SERVE_DELAY_VAR`), so the kill comes mid-fetch however fast the
/// machine, with states small enough to checkpoint every 500 iterations.
#[test]
fn a_releasing_node_killed_mid_fetch_is_made_again_from_its_checkpointed_state() {
    let dir = tempfile::tempdir().unwrap();
    let run = recovering_run_with_small_states();
    let (metrics, checkpoints) = (dir.path().join("metrics.jsonl"), dir.path().join("ckpt"));
    let mut master_args = run.clone();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    master_args.extend(["--checkpoint-dir", checkpoints.to_str().unwrap()]);
    master_args.extend(["--checkpoint-every", "500"]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let held = [(harp::remote::RELEASED_STATE_SERVE_DELAY_VAR, "60000")];
    let (adopting, remove, executor) = kill_the_releasing_node_at(
        &master,
        (&metrics, &run),
        ("worker", &held),
        || {
            master.wait_for_line(&["checkpoint", "written"]);
        },
        "fetch is held by a fault delay",
    );

    let (records, node_log) = assert_exact_end(master, &metrics, adopting);
    // Node 0 fetched the executor's state once: the checkpointed one, from the master.
    let restored: Vec<_> = (node_log.lines())
        .filter(|l| l.contains("executor state fetched and restored"))
        .collect();
    assert_eq!(restored.len(), 1, "{node_log}");
    assert!(restored[0].contains("how=Recovered"), "{node_log}");
    let event = the_event(&records, "leave");
    assert_eq!(event["ok"], false, "{event}");
    let why = event["error"].as_str().unwrap_or_default();
    println!("its leave event: {why}");
    let made_again = |said: &str| {
        let (_, after) = said.split_once("from its state in checkpoint ")?;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    };
    let checkpoint = made_again(why)
        .filter(|_| why.contains(&executor))
        .unwrap_or_else(|| panic!("not made again from a checkpoint: {event}"));
    assert!(
        checkpoint >= 500 && checkpoint % 500 == 0,
        "checkpoints are taken every 500 iterations: {why}"
    );
    let said = failed_answer(remove);
    assert_eq!(made_again(&said), Some(checkpoint), "{said}");
    assert!(said.contains(&executor), "{said}");
}

/// A long lease holds during a move too: under a 40 s lease, node 1 holds the fetch of the
/// executor state it released on `harp scale --remove 1` for 33 s
/// (`RELEASED_STATE_SERVE_DELAY_VAR`), longer than a fetch's usual 30 s wait for the next
/// chunk. Node 0 waits for it (a lease and a second: a peer silent for less than the lease
/// fails nothing), restores the moved state, the leave succeeds, both nodes exit 0 and
/// every counter is exact. While the chunk wait stayed at 30 s whatever the lease, the
/// fetch gave up and the executor was created afresh.
#[test]
fn under_a_long_lease_a_state_fetch_held_past_thirty_seconds_still_moves_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = recovering_run_with_small_states();
    run.extend(["--lease-timeout-ms", "40000"]);
    let metrics = dir.path().join("metrics.jsonl");
    let mut master_args = run.clone();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let adopting = LoggedNode::start(&master, &run);
    master.wait_until_running();
    let held = [(harp::remote::RELEASED_STATE_SERVE_DELAY_VAR, "33000")];
    let mut releasing = LoggedNode::start_with_env(&master, "worker", &run, &held);
    wait_for_join(&metrics);
    let began = Instant::now();
    let mut remove = remove_node_1(&master);
    releasing.wait_for_line(&["fetch is held by a fault delay"]);
    let status = wait_exit_within(&mut remove, "harp scale --remove 1", PATIENCE);
    assert!(status.success(), "harp scale --remove 1 failed");
    assert!(
        began.elapsed() >= Duration::from_secs(33),
        "the leave did not wait for the held fetch: {:?}",
        began.elapsed()
    );
    let (records, _) = assert_exact(master, &metrics);
    let event = the_event(&records, "leave");
    assert_eq!(event["ok"], true, "{event}");
    let node_log = assert_nodes_exit_0(vec![(releasing, "node 1"), (adopting, "node 0")]);
    let restored: Vec<_> = (node_log.lines())
        .filter(|l| l.contains("executor state fetched and restored"))
        .collect();
    assert!(
        restored.iter().any(|l| l.contains("how=Moved")),
        "{node_log}"
    );
    assert!(!node_log.contains("afresh"), "{node_log}");
}

/// The counter run of the late-report tests: 600 micro-tasks, 50 in flight per executor,
/// executor states of `state_bytes`, worker recovery, a lease of 1.5 s.
fn late_reports_run(state_bytes: &'static str) -> Vec<&'static str> {
    vec![
        "run",
        "counter",
        "--tasks",
        "600",
        "--window",
        "50",
        "--executors-per-worker",
        "2",
        "--state-bytes",
        state_bytes,
        "--threads",
        "2",
        "--recover-workers",
        "--lease-timeout-ms",
        "1500",
    ]
}

/// Starts the master of `run` and its node 0 (worker and server), which holds each staged
/// flush `delay_ms` before reporting it (`HARP_FAULT_STAGED_REPORT_DELAY_MS`); waits until
/// the job runs. Also returns the metrics file.
fn late_reports_job(
    dir: &Path,
    run: &[&str],
    delay_ms: &str,
) -> (MasterProcess, PathBuf, LoggedNode) {
    let metrics = dir.join("metrics.jsonl");
    let mut master_args = run.to_vec();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let late = LoggedNode::start_with_env(
        &master,
        "both",
        run,
        &[(harp::remote::STAGED_REPORT_DELAY_VAR, delay_ms)],
    );
    master.wait_until_running();
    (master, metrics, late)
}

/// The job ended well: the master succeeded and the counter's one check found every row
/// exact. Returns the metrics records and the master's log.
fn assert_exact(master: MasterProcess, metrics: &Path) -> (Vec<serde_json::Value>, String) {
    let (status, stderr) = master.finish_within(PATIENCE);
    assert!(status.success(), "the master failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let records = read_json_lines(metrics);
    let checks: Vec<_> = records
        .iter()
        .filter(|r| r.get("exact").is_some())
        .collect();
    assert_eq!(checks.len(), 1, "{records:?}");
    assert_eq!(checks[0]["exact"], true, "{}", checks[0]);
    (records, stderr)
}

/// The one worker recovery among the metrics records, of node `node`: its report.
fn the_worker_recovery(records: &[serde_json::Value], node: u32) -> serde_json::Value {
    let recoveries: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "worker_recovery")
        .collect();
    assert_eq!(recoveries.len(), 1, "{records:?}");
    let report = recoveries[0]["report"].clone();
    assert_eq!(report["node"], node, "{report}");
    report
}

/// Each node exits 0 without a panic; the log of the last.
fn assert_nodes_exit_0(nodes: Vec<(LoggedNode, &str)>) -> String {
    let mut last = String::new();
    for (node, which) in nodes {
        let (node_status, node_log) = node.exit(which);
        assert!(node_status.success(), "{which} failed: {node_log}");
        assert!(!node_log.contains("panicked"), "{node_log}");
        last = node_log;
    }
    last
}

/// The job ended well after its node 1 died: the master succeeded, the counter's one check
/// found every row exact, node 1's death was one worker recovery, and node 0 exited 0.
/// Returns the metrics records and node 0's log.
fn assert_exact_end(
    master: MasterProcess,
    metrics: &Path,
    survivor: LoggedNode,
) -> (Vec<serde_json::Value>, String) {
    let (records, _) = assert_exact(master, metrics);
    the_worker_recovery(&records, 1);
    let node_log = assert_nodes_exit_0(vec![(survivor, "the surviving node 0")]);
    (records, node_log)
}

/// The metrics file's one scale event of `cause`.
fn the_event(records: &[serde_json::Value], cause: &str) -> serde_json::Value {
    let events: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "scale" && r["cause"] == cause)
        .collect();
    assert_eq!(events.len(), 1, "{records:?}");
    events[0].clone()
}

/// `--recover-workers`: an executor's old node reports the tasks it finished there late, and
/// its new node dies right after adopting it. Node 0 holds each staged flush 3.5 s before
/// reporting it, so when node 1's join takes one of its executors, that executor's last
/// micro-tasks are finished on node 0 but not yet reported. The test kills node 1 as soon
/// as the join is reported done, well within those 3.5 s with a lease of 1.5 s. The master
/// hands a released executor to its new worker only once those reports are in
/// (`moves_under_recovery.rs`); if it did not, node 1's death would run them again on the
/// executor created afresh while node 0's late report still committed them: their updates
/// applied twice and the job failed. Here the join's move is done, every counter ends
/// exact and node 1's death is one worker recovery.
#[test]
fn a_new_node_killed_after_adopting_an_executor_whose_tasks_were_reported_late_costs_no_update_twice(
) {
    let dir = tempfile::tempdir().unwrap();
    let run = late_reports_run("0");
    let (master, metrics, late) = late_reports_job(dir.path(), &run, "3500");
    let mut adopting = LoggedNode::start_as(&master, "worker", &run);
    wait_for_join(&metrics);
    adopting.kill();
    let _ = adopting.exit("node 1");
    let (records, _) = assert_exact_end(master, &metrics, late);
    assert_eq!(the_event(&records, "join")["ok"], true);
}

/// `--recover-workers`: the node a join's move goes to dies before the executor is sent
/// there. Node 0 holds each staged flush 5 s before reporting it, so the executor node 1's
/// join takes from it waits, released, for the reports of its last tasks; the test kills
/// node 1 300 ms after it joined, and the master (lease 1.5 s) usually learns of the death
/// while the executor still waits: the move then goes back, node 0 adopts its own executor
/// again, and the join's event says it stayed there. (When the reports win the race, the
/// executor reaches node 1 first and is created afresh on node 0 after its death.) Either
/// way the job goes on with every counter exact and the join reported failed, naming the
/// executor.
#[test]
fn a_new_node_killed_while_its_join_moves_an_executor_to_it_costs_no_update() {
    let dir = tempfile::tempdir().unwrap();
    kill_the_joining_node_during_its_move(dir.path(), "0");
}

/// The same with executor states of 300 MB, which node 0 parks for node 1 when it releases
/// one. When the move goes back, node 0 fetches the
/// state it parked from itself and runs the executor with it again (node 0 logs the fetch);
/// when the reports win the race the executor is created afresh on node 0. Either way every
/// counter ends exact.
#[test]
fn a_new_node_killed_while_its_join_moves_a_parked_state_to_it_costs_no_update() {
    let dir = tempfile::tempdir().unwrap();
    kill_the_joining_node_during_its_move(dir.path(), "300000000");
}

/// Node 0 (worker and server) holds each staged flush 5 s before reporting it; node 1
/// (worker) joins and is SIGKILLed 300 ms after it joined, while the executor its join
/// takes from node 0 usually still waits, released, for the reports of its last tasks. The
/// job must end with every counter exact and the join reported failed, saying what became
/// of the executor.
fn kill_the_joining_node_during_its_move(dir: &Path, state_bytes: &'static str) {
    let run = late_reports_run(state_bytes);
    let (master, metrics, late) = late_reports_job(dir, &run, "5000");
    let mut joining = LoggedNode::start_as(&master, "worker", &run);
    joining.wait_for_line(&["joined the job"]);
    std::thread::sleep(Duration::from_millis(300));
    joining.kill();
    let _ = joining.exit("node 1");
    let (records, node_log) = assert_exact_end(master, &metrics, late);
    let join = the_event(&records, "join");
    assert_eq!(join["ok"], false, "{join}");
    let why = join["error"].as_str().unwrap_or_default().to_string();
    println!("the join event: {why}");
    assert!(
        why.contains("executor-") && (why.contains("stays on worker-0") || why.contains("afresh")),
        "the failed join does not say what became of its executor: {join}"
    );
    if why.contains("stays on worker-0") && state_bytes != "0" {
        assert!(
            node_log.contains("executor state fetched"),
            "node 0 did not fetch back the state it parked: {node_log}"
        );
    }
}

/// `--recover-workers`: a node leaves while another node holds a flush staged on its server,
/// not yet reported. Node 0 (worker and server) holds each staged flush 3.5 s before
/// reporting it (so the 600 micro-tasks take some 20 s); node 1, a server only, joins and
/// takes shards, and `harp scale --remove 1` runs 4 s after the join ended, when the flush
/// node 0 holds has parts on node 1's server. The leave moves node 1's shards back at once,
/// but those parts stay on node 1's server, which applies them (forwarding them to the
/// shards' new owner) only when the master commits the flush. So node 1 departs only once
/// node 0 reported that flush (node 0 answers the drain of node 1's server after its
/// reports) and the master committed it; when it departed first, the parts were lost with
/// its server and the counter ended short. Here the leave succeeds, both nodes exit 0 and
/// every counter is exact.
#[test]
fn a_server_leaving_while_a_flush_staged_on_it_is_unreported_loses_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let run = late_reports_run("0");
    let (master, metrics, late) = late_reports_job(dir.path(), &run, "3500");
    let leaving = LoggedNode::start_as(&master, "server", &run);
    wait_for_join(&metrics);
    std::thread::sleep(Duration::from_secs(4));
    let removed = master.scale(&["--remove", "1"]);
    assert!(removed.status.success(), "{}", removed.describe());
    let (records, stderr) = assert_exact(master, &metrics);
    assert!(
        !stderr.contains("lost with that server"),
        "a staged part was lost: {stderr}"
    );
    assert_eq!(the_event(&records, "leave")["ok"], true);
    assert_nodes_exit_0(vec![(leaving, "node 1"), (late, "node 0")]);
}

/// Waits until the metrics file holds `n` scale events of `cause`; the last one.
fn wait_for_events(metrics: &Path, cause: &str, n: usize) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let events: Vec<_> = scale_events_so_far(metrics)
            .into_iter()
            .filter(|e| e["cause"] == cause)
            .collect();
        if events.len() >= n {
            return events[n - 1].clone();
        }
        assert!(Instant::now() < deadline, "no {n} {cause} events came");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--recover-workers`: a worker node dies while a node that gave all its load away waits
/// to depart. Node 0 (worker and server) answers the drain of a leaving server 8 s late
/// (`HARP_FAULT_DRAIN_ANSWER_DELAY_MS`); node 1 (worker and server) and node 2 (worker)
/// join; `harp scale --remove 1` moves node 1's load away, and node 2 is SIGKILLed as soon
/// as that move is reported, while node 1 waits for node 0's answer. Node 2's executors
/// are created afresh on node 0: node 1, holding no executor, is the least loaded worker,
/// but it departs seconds later, and an executor created there was lost with it (or its
/// creation failed when node 1 went away, ending the job). The leave then ends, and every
/// counter is exact.
#[test]
fn a_dead_nodes_executors_are_not_created_on_a_node_that_is_leaving() {
    let dir = tempfile::tempdir().unwrap();
    let run = [
        "run",
        "counter",
        "--tasks",
        "40000",
        "--task-sleep-us",
        "2000",
        "--window",
        "50",
        "--executors-per-worker",
        "4",
        "--threads",
        "2",
        "--recover-workers",
        "--lease-timeout-ms",
        "1500",
    ];
    let metrics = dir.path().join("metrics.jsonl");
    let mut master_args = run.to_vec();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let first = LoggedNode::start_with_env(
        &master,
        "both",
        &run,
        &[(harp::remote::DRAIN_ANSWER_DELAY_VAR, "8000")],
    );
    master.wait_until_running();
    let leaving = LoggedNode::start_as(&master, "both", &run);
    assert_eq!(wait_for_events(&metrics, "join", 1)["ok"], true);
    let mut dying = LoggedNode::start_as(&master, "worker", &run);
    assert_eq!(wait_for_events(&metrics, "join", 2)["ok"], true);
    let remove = remove_node_1(&master);
    assert_eq!(wait_for_events(&metrics, "leave", 1)["ok"], true);
    dying.kill();
    let _ = dying.exit("node 2");
    let mut remove = remove;
    let removed = wait_exit(&mut remove, "harp scale --remove 1");
    assert!(removed.success(), "harp scale --remove 1 failed");
    let (records, _) = assert_exact(master, &metrics);
    let report = the_worker_recovery(&records, 2);
    let placed = report["executors"]
        .as_array()
        .expect("the executors placed");
    assert!(!placed.is_empty(), "node 2 held no executor: {report}");
    assert!(
        placed.iter().all(|pair| pair[1] == 0),
        "an executor of the dead node went elsewhere than node 0: {report}"
    );
    assert_nodes_exit_0(vec![(leaving, "node 1"), (first, "node 0")]);
}
