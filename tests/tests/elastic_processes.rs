//! Node processes joining and leaving a running job: real `harp` processes over QUIC. A node
//! started while the job runs is given load; `harp scale --remove` and SIGTERM make a node
//! give its load away and exit 0; `harp scale --add` has the master start more nodes; every
//! scale event lands in the metrics file; and through all of it every counter stays exact.
//! After a node leaves, SCAR's rounds and consistent checkpoints go on over the nodes that
//! stay, and a node that dies later is recovered onto them. (A node killed in the middle of
//! a move: `elastic_mid_move.rs`.) Under a long lease, a leave waits for a new owner
//! stopped for longer than the usual 30 s take-over wait.

use harp_tests::{
    harp_binary, read_json_lines, scale_summaries, wait_exit, MasterProcess, SplitMix,
};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn node_process(master: &MasterProcess, run_args: &[&str]) -> Child {
    Command::new(harp_binary!())
        .args(["node", "--join", &master.addr, "--credentials"])
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

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Starts the master of `run_args` waiting for one node (more join the running job), with
/// credentials in `dir` (named `name`) that the nodes join with; also returns its metrics
/// file.
fn master_of_one_node(
    dir: &Path,
    name: &str,
    run_args: &[&str],
) -> (MasterProcess, std::path::PathBuf) {
    let metrics = dir.join("metrics.jsonl");
    let credentials = harp_tests::credentials_in(dir, name);
    let mut master_args = run_args.to_vec();
    master_args.extend(["--nodes", "1", "--credentials"]);
    master_args.extend([credentials.to_str().unwrap(), "--metrics-out"]);
    master_args.push(metrics.to_str().unwrap());
    (MasterProcess::start(harp_binary!(), &master_args), metrics)
}

/// The acceptance run: 50 random scale events (node processes joining, leaving on `harp
/// scale --remove`, leaving on SIGTERM) while the counter app runs; every counter exact,
/// every leaving process exits 0, every event in the metrics file.
#[test]
fn counter_is_exact_under_fifty_scale_events_of_real_processes() {
    const EVENTS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    // 8 executors, each with at most 4 tasks in flight that wait 2 ms: the job lasts at
    // least 4 s (about 30 s here, where the 50 events take about 3 s).
    let run_args = [
        "run",
        "counter",
        "--tasks",
        "60000",
        "--executors-per-worker",
        "8",
        "--task-sleep-us",
        "2000",
        "--window",
        "4",
        "--threads",
        "2",
    ];
    let (master, metrics) = master_of_one_node(dir.path(), "elastic-processes", &run_args);
    // node id → its process (the test started every node). Nodes start one at a time, so
    // each gets the next id.
    let mut nodes: Vec<(u32, Child)> = vec![(0, node_process(&master, &run_args))];
    let mut expected = BTreeSet::from([0]);
    master.wait_for_nodes(&expected);
    nodes.push((1, node_process(&master, &run_args)));
    expected.insert(1);
    master.wait_for_nodes(&expected);
    let mut next_id = 2;
    let mut rng = SplitMix(2026);
    let (mut joins, mut removes, mut terms) = (0, 0, 0);
    let events_began = Instant::now();
    for _ in 0..EVENTS {
        let grow = nodes.len() <= 2 || (nodes.len() < 6 && rng.range(0, 1) == 0);
        if grow {
            nodes.push((next_id, node_process(&master, &run_args)));
            expected.insert(next_id);
            next_id += 1;
            joins += 1;
        } else {
            let (id, mut child) = nodes.remove(rng.range(0, nodes.len() as u64 - 1) as usize);
            expected.remove(&id);
            if rng.range(0, 1) == 0 {
                let out = master.scale(&["--remove", &id.to_string()]);
                assert!(out.status.success(), "{}", out.describe());
                assert!(
                    out.stdout.contains(&format!("node {id} left")),
                    "{}",
                    out.describe()
                );
                removes += 1;
            } else {
                sigterm(&child);
                terms += 1;
            }
            let status = wait_exit(&mut child, &format!("node {id}"));
            assert!(status.success(), "node {id} left with {status:?}");
        }
        master.wait_for_nodes(&expected);
    }
    println!(
        "{joins} joins, {removes} removals by harp scale, {terms} by SIGTERM in {:.1} s",
        events_began.elapsed().as_secs_f64()
    );
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    for (id, mut child) in nodes {
        let status = wait_exit(&mut child, &format!("node {id}"));
        assert!(status.success(), "node {id} ended with {status:?}");
    }
    let records = read_json_lines(&metrics);
    let report = records.last().unwrap();
    assert_eq!(report["exact"], true, "{report}");
    assert_eq!(report["tasks"], 60000);
    // The counters of every node that joined (those that left sent theirs as they went).
    // Nothing failed: the servers applied every row the workers flushed and served every
    // row they fetched, wherever the shards had moved meanwhile.
    let stats = &report["stats"];
    let (node, servers) = (&stats["node"], &stats["servers"]);
    assert_eq!(stats["nodes_counted"], next_id, "{stats}");
    assert_eq!(servers["updates_applied"], node["rows_flushed"], "{stats}");
    assert_eq!(servers["rows_read"], node["rows_fetched"], "{stats}");
    assert!(servers["shards_handed_off"].as_u64() > Some(0), "{stats}");
    // One line per scale event, and one for node 1 joining before the random ones.
    let events: Vec<_> = records.iter().filter(|r| r["event"] == "scale").collect();
    assert_eq!(events.len(), EVENTS + 1, "one metrics line per scale event");
    assert!(events.iter().all(|e| e["ok"] == true), "{events:?}");
    let joined = events.iter().filter(|e| e["cause"] == "join").count();
    assert_eq!(joined, joins + 1);
    // Each event moved something (a join takes load, a leave gives all of its load away).
    assert!(events.iter().all(|e| e["report"]["moves"]
        .as_array()
        .is_some_and(|m| !m.is_empty())));
}

/// `harp scale --add` on a master that starts its own nodes, then `--remove`; refusals for an
/// unknown node, the last worker, a node named twice and too many processes at once; the
/// counter stays exact.
#[test]
fn harp_scale_adds_and_removes_node_processes_and_refuses_bad_commands() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "counter",
            "--processes",
            "2",
            "--tasks",
            "20000",
            "--task-sleep-us",
            "1000",
            "--executors-per-worker",
            "2",
            "--threads",
            "2",
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    master.wait_for_nodes(&BTreeSet::from([0]));
    let out = master.scale(&["--remove", "0"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("last worker"), "{}", out.describe());
    let out = master.scale(&["--remove", "7"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("node 7 is not one of the job's nodes"),
        "{}",
        out.describe()
    );
    // A typo does not flood the machine with processes, and a command refused for one of
    // its words changes nothing: node 0 does not leave.
    let out = master.scale(&["--add", "100000", "--remove", "0"]);
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains("cannot start 100000 node processes at once: a master starts at most 256"),
        "{}",
        out.describe()
    );
    let out = master.scale(&["--remove", "0", "--remove", "0"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("node 0 is named twice"),
        "{}",
        out.describe()
    );
    assert_eq!(master.nodes(), Some(BTreeSet::from([0])));
    let out = master.scale(&["--add", "2"]);
    assert!(out.status.success(), "{}", out.describe());
    master.wait_for_nodes(&BTreeSet::from([0, 1, 2]));
    let out = master.scale(&["--remove", "0", "--remove", "2"]);
    assert!(out.status.success(), "{}", out.describe());
    master.wait_for_nodes(&BTreeSet::from([1]));
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let records = read_json_lines(&metrics);
    assert_eq!(records.last().unwrap()["exact"], true);
    let mut causes = scale_summaries(&records);
    // The refused leave of the last worker is an event too; the unknown node never got one.
    // The two joins may end in either order.
    causes.sort();
    assert_eq!(
        causes,
        [
            "join:1:true",
            "join:2:true",
            "leave:0:false",
            "leave:0:true",
            "leave:2:true"
        ]
    );
}

/// A node asked to leave (SIGTERM) while it holds the job's last worker and last server
/// keeps serving, listed as waiting to leave, and leaves by itself once a node joins that
/// can take its load; it exits 0, the new node runs the rest, every counter exact, and the
/// only leave event is the one carried out.
#[test]
fn the_last_node_asked_to_leave_leaves_once_another_node_joins() {
    let dir = tempfile::tempdir().unwrap();
    let run_args = harp_tests::busy_counter("20000", &[]);
    let (master, metrics) = master_of_one_node(dir.path(), "waits-to-leave", &run_args);
    let mut first = node_process(&master, &run_args);
    master.wait_for_nodes(&BTreeSet::from([0]));
    sigterm(&first);
    master.wait_for_line(&[
        "node 0 asked to leave, but it holds the job's last worker and last server",
    ]);
    let listed = master.scale(&[]);
    assert!(
        listed.stdout.contains("0 (worker+server, waits to leave)"),
        "{}",
        listed.describe()
    );
    assert!(first.try_wait().unwrap().is_none(), "node 0 keeps serving");
    let mut second = node_process(&master, &run_args);
    master.wait_for_nodes(&BTreeSet::from([1]));
    let status = wait_exit(&mut first, "node 0");
    assert!(status.success(), "node 0 left with {status:?}");
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let status = wait_exit(&mut second, "node 1");
    assert!(status.success(), "node 1 ended with {status:?}");
    assert_exact_after(&metrics, 20000, &["join:1:true", "leave:0:true"]);
}

/// The metrics file's last record says all `tasks` ran and every counter is exact, after
/// exactly the scale `events` (`cause:node:ok`).
fn assert_exact_after(metrics: &Path, tasks: u64, events: &[&str]) {
    let records = read_json_lines(metrics);
    let report = records.last().unwrap();
    assert_eq!(report["exact"], true, "{report}");
    assert_eq!(report["tasks"], tasks);
    assert_eq!(scale_summaries(&records), events);
}

/// A long lease holds during a leave: under `--lease-timeout-ms 45000`, node 0 (which takes
/// some of the leaving node's shards) is stopped (SIGSTOP) for 35 s while `harp scale
/// --remove 1` runs. Each hand-off to it waits for the new owner's confirmation a lease and
/// a second, so the leave succeeds once node 0 is continued, no node is declared dead,
/// every node exits 0 and every counter is exact. While a take-over confirmation waited a
/// fixed 30 s, the rows left for node 0 were taken for lost ("did not confirm it holds
/// them"), the shards stranded on the leaving node, and the job failed.
#[test]
fn under_a_long_lease_a_leave_waits_for_a_new_owner_stopped_for_longer_than_thirty_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let run_args = [
        "run",
        "counter",
        "--tasks",
        "20000",
        "--task-sleep-us",
        "1000",
        "--executors-per-worker",
        "2",
        "--lease-timeout-ms",
        "45000",
    ];
    let (master, metrics) = master_of_one_node(dir.path(), "long-lease-leave", &run_args);
    let mut nodes = Vec::new();
    for id in 0..3 {
        nodes.push(node_process(&master, &run_args));
        master.wait_for_nodes(&(0..=id).collect());
    }
    let pid = nodes[0].id().to_string();
    let signal = move |name: &str| {
        let sent = Command::new("kill").args([name, &pid]).status().unwrap();
        assert!(sent.success(), "kill {name} {pid}");
    };
    signal("-STOP");
    let stopped_at = Instant::now();
    let continuing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(35));
        signal("-CONT");
    });
    let removed = master.scale(&["--remove", "1"]);
    continuing.join().unwrap();
    assert!(removed.status.success(), "{}", removed.describe());
    assert!(
        stopped_at.elapsed() >= Duration::from_secs(35),
        "the leave did not wait for node 0"
    );
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    assert!(!stderr.contains("died"), "{stderr}");
    for (id, node) in nodes.iter_mut().enumerate() {
        let status = wait_exit(node, &format!("node {id}"));
        assert!(status.success(), "node {id} ended with {status:?}");
    }
    assert_exact_after(
        &metrics,
        20000,
        &["join:1:true", "join:2:true", "leave:1:true"],
    );
}

/// Epoch lines in a metrics file that is still being written (a torn last line is skipped).
fn epochs_so_far(metrics: &Path) -> usize {
    std::fs::read_to_string(metrics)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["epoch"].is_u64())
        .count()
}

fn wait_for_epochs(metrics: &Path, epochs: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while epochs_so_far(metrics) < epochs {
        assert!(
            Instant::now() < deadline,
            "the job never reached epoch {epochs}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// MLR on 3 node processes; `disturb` gives node 2 back after epoch 2 and takes a node back
/// after epoch 5 (Litz §4.5.2). Returns the held-out accuracy of every epoch and the scale
/// events.
fn mlr_on_three_nodes(disturb: bool) -> (Vec<f64>, Vec<serde_json::Value>) {
    const EPOCHS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("mlr.jsonl");
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "mlr",
            "--quiet",
            "--epochs",
            &EPOCHS.to_string(),
            "--processes",
            "4",
            "--threads",
            "2",
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    if disturb {
        wait_for_epochs(&metrics, 2);
        let out = master.scale(&["--remove", "2"]);
        assert!(out.status.success(), "{}", out.describe());
        master.wait_for_nodes(&BTreeSet::from([0, 1]));
        // It keeps training on two (the wait fails if it does not): at least one epoch
        // there, and until epoch 5 unless the give-back took that long on a busy machine.
        let given_back_at = epochs_so_far(&metrics);
        wait_for_epochs(&metrics, (given_back_at + 1).max(5));
        let out = master.scale(&["--add", "1"]);
        assert!(out.status.success(), "{}", out.describe());
        master.wait_for_nodes(&BTreeSet::from([0, 1, 3]));
    }
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let records = read_json_lines(&metrics);
    let accuracy: Vec<f64> = records
        .iter()
        .filter_map(|r| r["accuracy"].as_f64())
        .collect();
    assert_eq!(accuracy.len(), EPOCHS);
    let events = records
        .into_iter()
        .filter(|r| r["event"] == "scale")
        .collect();
    (accuracy, events)
}

/// Litz §4.5.2 across processes: a job on 3 node processes gives one back on request, keeps
/// training on 2, takes one back, and converges like an undisturbed run.
#[test]
fn a_job_on_three_node_processes_gives_one_back_and_takes_it_back() {
    let (steady, none) = mlr_on_three_nodes(false);
    assert!(none.is_empty());
    let (disturbed, events) = mlr_on_three_nodes(true);
    let summary: Vec<String> = events
        .iter()
        .map(|e| format!("{}:{}:{}", e["cause"].as_str().unwrap(), e["node"], e["ok"]))
        .collect();
    assert_eq!(summary, ["leave:2:true", "join:3:true"]);
    // The node given back took executors and shards with it; the new one got load.
    for e in &events {
        assert!(e["report"]["executors_moved"].as_u64().unwrap() >= 1, "{e}");
        assert!(e["report"]["shards_moved"].as_u64().unwrap() >= 1, "{e}");
    }
    let best = |a: &[f64]| a.iter().copied().fold(0.0, f64::max);
    println!(
        "best held-out accuracy: undisturbed {:.4}, gave a node back and took one back {:.4}",
        best(&steady),
        best(&disturbed)
    );
    assert!(best(&disturbed) >= 0.88, "{disturbed:?}");
    assert!(
        (best(&disturbed) - best(&steady)).abs() <= 0.02,
        "disturbed {disturbed:?} vs undisturbed {steady:?}"
    );
}

/// Executor state too large for one frame (64 MiB) moves straight between node processes: a
/// node given back hands its executors' 70 MB states to the node that stays, a node that
/// joins fetches states from it; every state arrives intact (the counter checks its pattern
/// when it restores an executor) and every counter stays exact.
#[test]
fn executor_states_larger_than_a_frame_move_between_node_processes() {
    states_move_between_node_processes(70_000_000);
}

/// A state of 200 KB goes in the adopt message itself (under the 1 MiB from which a state is
/// parked and fetched), which must stay ahead of the micro-tasks the master dispatches to
/// the executor right after it: the message went on a QUIC stream of its own, as any of
/// 64 KiB or more, and a micro-task sent after it on the control stream could overtake it
/// (the node then refused "a task for an executor it does not host" and the job failed).
#[test]
fn executor_states_sent_in_the_adopt_message_stay_ahead_of_their_micro_tasks() {
    states_move_between_node_processes(200_000);
}

/// A counter job on node processes 0 and 1 with executor states of `state_size` bytes gives
/// node 1 back and takes a node back: each event moves two executors with their whole
/// states and every counter ends exact.
fn states_move_between_node_processes(state_size: u64) {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let state_bytes = state_size.to_string();
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "counter",
            "--processes",
            "3",
            "--tasks",
            "40000",
            "--task-sleep-us",
            "1000",
            "--executors-per-worker",
            "2",
            "--state-bytes",
            &state_bytes,
            "--threads",
            "2",
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    master.wait_for_nodes(&BTreeSet::from([0, 1]));
    let out = master.scale(&["--remove", "1"]);
    assert!(out.status.success(), "{}", out.describe());
    master.wait_for_nodes(&BTreeSet::from([0]));
    let out = master.scale(&["--add", "1"]);
    assert!(out.status.success(), "{}", out.describe());
    master.wait_for_nodes(&BTreeSet::from([0, 2]));
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let records = read_json_lines(&metrics);
    assert_eq!(records.last().unwrap()["exact"], true);
    let events: Vec<_> = records.iter().filter(|r| r["event"] == "scale").collect();
    let summary: Vec<String> = events
        .iter()
        .map(|e| format!("{}:{}:{}", e["cause"].as_str().unwrap(), e["node"], e["ok"]))
        .collect();
    assert_eq!(summary, ["leave:1:true", "join:2:true"]);
    // Each event moved two executors, each with its whole state (16 bytes of header).
    for e in events {
        let moves: Vec<_> = e["report"]["moves"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["kind"] == "executor")
            .collect();
        assert_eq!(moves.len(), 2, "{e}");
        for m in moves {
            assert_eq!(m["bytes"].as_u64(), Some(state_size + 16), "{m}");
        }
        assert_eq!(
            e["report"]["executor_bytes_moved"].as_u64(),
            Some(2 * (state_size + 16))
        );
    }
}

/// A node process leaving the job takes nothing from either kind of checkpoint: SCAR's
/// running checkpoint goes on over the servers that stay, and so do consistent checkpoints.
/// The master used to keep asking the departed server: every consistent checkpoint after the
/// leave failed ("server-1 is unreachable"), and a SCAR round waited for its answer until
/// the job ended, so no round ran after the leave.
#[test]
fn checkpoints_go_on_after_a_node_process_leaves() {
    const EPOCHS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ckpt");
    let epochs = EPOCHS.to_string();
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "mlr",
            "--processes",
            "3",
            "--data",
            "synthetic:100000,200,10",
            "--epochs",
            &epochs,
            "--checkpoint-dir",
            checkpoints.to_str().unwrap(),
            "--checkpoint-every",
            "1",
            "--scar-fraction",
            "0.5",
            "--scar-period",
            "1",
            "--quiet",
        ],
    );
    master.wait_for_line(&["epoch   2 "]);
    let out = master.scale(&["--remove", "1"]);
    assert!(out.status.success(), "{}", out.describe());
    let left = master.wait_for_line(&["scale: leave of node 1"]);
    assert!(left.contains("done"), "{left}");
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");

    let line = |prefix: &str| {
        let found = stderr.lines().find(|l| l.starts_with(prefix));
        found
            .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{stderr}"))
            .to_string()
    };
    let due = EPOCHS - 1; // the last iteration ends the job instead
                          // `checkpoints: 29 written (N bytes), 0 failed, 0 skipped`: one due while another is
                          // written is skipped.
    let consistent = line("checkpoints: ");
    let [written, failed, skipped] =
        ["written", "failed", "skipped"].map(|what| count_before(&consistent, what));
    assert_eq!(failed, 0, "{consistent}");
    assert_eq!(written + skipped, due, "{consistent}");
    // `scar: 29 checkpoint rounds (0 failed, 0 skipped), ...`
    let scar = line("scar: ");
    assert!(!scar.contains("unfinished"), "{scar}");
    let [rounds, failed, skipped] =
        ["checkpoint", "failed", "skipped"].map(|what| count_before(&scar, what));
    assert_eq!(failed, 0, "{scar}");
    assert_eq!(rounds + skipped, due, "{scar}");
    assert!(
        rounds >= due / 2,
        "only {rounds} of {due} rounds ran: did rounds stop after the leave? {scar}"
    );
}

/// The number right before the first ` WHAT` in `line` (`3 written` → 3).
fn count_before(line: &str, what: &str) -> usize {
    let at = line
        .find(&format!(" {what}"))
        .unwrap_or_else(|| panic!("no '{what}' in {line}"));
    let number = line[..at].rsplit([' ', '(']).next().unwrap_or_default();
    number
        .parse()
        .unwrap_or_else(|_| panic!("no count before '{what}' in {line}"))
}

/// A node that dies after another one left has its executors and shards re-created on the
/// nodes that are still in the job. The departed node had none left, so it was the least
/// loaded worker: its executors went there, could not be created ("the node creating
/// executor-1 went away"), and the job failed.
#[test]
fn a_node_that_dies_after_another_left_is_recovered_onto_the_nodes_that_stay() {
    let run_args = [
        "run",
        "mlr",
        "--data",
        "synthetic:100000,200,10",
        "--epochs",
        "60",
        "--recover-workers",
        "--scar-fraction",
        "1",
        "--scar-period",
        "1",
        "--lease-timeout-ms",
        "1000",
        "--quiet",
    ];
    let mut master_args = run_args.to_vec();
    master_args.extend(["--nodes", "3"]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let mut nodes: Vec<Child> = (0..3).map(|_| node_process(&master, &run_args)).collect();
    master.wait_for_line(&["epoch   2 "]);

    let out = master.scale(&["--remove", "0"]);
    assert!(out.status.success(), "{}", out.describe());
    // The node that left exits 0; SIGKILL one of the two that stay.
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let exited = nodes
            .iter_mut()
            .position(|n| n.try_wait().unwrap().is_some());
        if let Some(i) = exited {
            break i;
        }
        assert!(Instant::now() < deadline, "the removed node never exited");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(wait_exit(&mut nodes[left], "the node that left").success());
    let victim = (left + 1) % nodes.len();
    nodes[victim].kill().unwrap();
    let _ = nodes[victim].wait();

    let (status, stderr) = master.finish();
    for node in nodes.iter_mut() {
        let _ = node.kill();
        let _ = node.wait();
    }
    assert!(status.success(), "the master failed: {stderr}");
    assert!(stderr.contains("done: 60 epochs"), "{stderr}");
    let recovered = stderr
        .lines()
        .find(|l| l.starts_with("worker recovery: node"))
        .unwrap_or_else(|| panic!("no worker recovery in:\n{stderr}"));
    assert!(!recovered.contains("-> worker 0"), "{recovered}");
    assert!(
        stderr.lines().any(|l| l.starts_with("recovery: server")),
        "no server recovery in:\n{stderr}"
    );
}

/// A node started with other tables than the job's (here: counters of width 3 where the
/// job's are 4) says so and exits, and the job it tried to join goes on: a node joining
/// later gets load and every counter ends exact. Such a node used to join and corrupt the
/// job; refused, it then took the job down, since the other nodes failed to reach its server.
#[test]
fn a_node_whose_tables_differ_from_the_jobs_is_refused_and_the_job_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "counter",
            "--processes",
            "2",
            "--tasks",
            "8000",
            "--task-sleep-us",
            "1000",
            "--executors-per-worker",
            "2",
            "--threads",
            "2",
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    master.wait_for_nodes(&BTreeSet::from([0]));
    let misfit = Command::new(harp_binary!())
        .args(["node", "--join", &master.addr, "--credentials"])
        .arg(&master.credentials)
        .args(["--", "run", "counter", "--tasks", "8000", "--width", "3"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&misfit.stderr);
    assert!(!misfit.status.success(), "{said}");
    assert!(
        said.contains("this node's parameter tables differ from the job's")
            && said.contains("width 4")
            && said.contains("width 3"),
        "{said}"
    );
    let refused = master.wait_for_line(&["did not get ready", "tables differ"]);
    assert!(refused.contains("node=1"), "{refused}");

    let out = master.scale(&["--add", "1"]);
    assert!(out.status.success(), "{}", out.describe());
    master.wait_for_nodes(&BTreeSet::from([0, 2]));
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let records = read_json_lines(&metrics);
    assert_eq!(records.last().unwrap()["exact"], true);
    let joins: Vec<String> = records
        .iter()
        .filter(|r| r["event"] == "scale")
        .map(|r| format!("{}:{}:{}", r["cause"].as_str().unwrap(), r["node"], r["ok"]))
        .collect();
    assert_eq!(joins, ["join:2:true"]);
}
