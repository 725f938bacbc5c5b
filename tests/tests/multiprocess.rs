//! Jobs across processes: `harp run APP --processes N` starts N-1 `harp node` processes that
//! talk to the master and to each other over QUIC. The counter stays exact, MLR reaches the
//! accuracy of the in-process run, a node killed with SIGKILL is reported (which node,
//! what it held) and the master exits non-zero instead of hanging — or, with
//! `--recover-workers`, recovers from it when it sees its child exit, without waiting for
//! the lease — and SIGTERM on the master stops the job and its nodes cleanly. With etcd, a
//! run started again with the same credentials is not disturbed by what the earlier run's
//! dead nodes left there.

use harp_tests::{
    children_of, read_json_lines, resolve_binary, run_process, sigkill, spawn_piped,
    wait_for_children,
};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn harp() -> PathBuf {
    resolve_binary(env!("CARGO_BIN_EXE_harp-cli"))
}

fn temp_file(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

#[test]
fn counter_across_three_processes_is_exact() {
    let (_dir, metrics) = temp_file("counter.jsonl");
    let out = run_process(
        &harp(),
        [
            "run",
            "counter",
            "--processes",
            "3",
            "--tasks",
            "20000",
            "--executors-per-worker",
            "4",
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", out.describe());
    let records = read_json_lines(&metrics);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["exact"], true, "{}", out.describe());
    assert_eq!(records[0]["tasks"], 20000);
    // The counters of every node process, summed: the servers applied every row the
    // workers flushed and served every row they fetched.
    let stats = &records[0]["stats"];
    let (node, servers) = (&stats["node"], &stats["servers"]);
    assert_eq!(stats["nodes_counted"], 2, "{stats}");
    assert!(node["rows_flushed"].as_u64() > Some(0), "{stats}");
    assert_eq!(servers["updates_applied"], node["rows_flushed"], "{stats}");
    assert_eq!(servers["rows_read"], node["rows_fetched"], "{stats}");
    let params = out.stderr.lines().find(|l| l.starts_with("params: "));
    assert!(
        params.is_some_and(|l| l.ends_with("(summed over 2 nodes)")),
        "{}",
        out.describe()
    );
}

/// The best held-out accuracy over 10 epochs (the last epoch alone swings by a point or two
/// with SGD at this step size).
fn best_accuracy(args: &[&str]) -> f64 {
    let (_dir, metrics) = temp_file("mlr.jsonl");
    let mut all: Vec<&str> = vec!["run", "mlr", "--quiet", "--epochs", "10"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--metrics-out", metrics.to_str().unwrap()]);
    let out = run_process(&harp(), all);
    assert!(out.status.success(), "{}", out.describe());
    let records: Vec<_> = (read_json_lines(&metrics).into_iter())
        .filter(|r| r.get("event").is_none())
        .collect();
    assert_eq!(records.len(), 10, "{}", out.describe());
    records
        .iter()
        .filter_map(|r| r["accuracy"].as_f64())
        .fold(0.0, f64::max)
}

#[test]
fn mlr_across_processes_matches_the_in_process_accuracy() {
    let in_process = best_accuracy(&["--workers", "2", "--servers", "2"]);
    let across = best_accuracy(&["--processes", "3"]);
    println!("best held-out accuracy within 10 epochs: in process {in_process:.4}, across 3 processes {across:.4}");
    assert!(across >= 0.88, "across processes reached only {across}");
    assert!(
        (across - in_process).abs() <= 0.02,
        "across processes {across} vs in process {in_process}"
    );
}

/// Starts a throwaway etcd (or `None` when it is not installed and this is not CI).
fn etcd() -> Option<(
    tokio::runtime::Runtime,
    harp_membership::test_server::EtcdServer,
)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(harp_membership::test_server::EtcdServer::start())?;
    Some((runtime, server))
}

#[test]
fn counter_with_membership_in_etcd_is_exact() {
    let Some((_rt, etcd)) = etcd() else { return };
    let (_dir, metrics) = temp_file("counter.jsonl");
    let out = run_process(
        &harp(),
        [
            "run",
            "counter",
            "--processes",
            "3",
            "--tasks",
            "20000",
            "--etcd",
            &etcd.endpoint,
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", out.describe());
    assert_eq!(read_json_lines(&metrics)[0]["exact"], true);
}

/// The master started the node, so it sees the process exit and handles the death then,
/// saying so, rather than when the node's lease expires.
#[test]
fn a_node_killed_with_sigkill_is_reported_and_the_master_exits_non_zero() {
    let stderr = killed_node_is_reported(&[]);
    assert!(
        stderr.contains("died (its process exited (signal: 9 (SIGKILL))"),
        "{stderr}"
    );
}

#[test]
fn with_etcd_a_node_killed_with_sigkill_is_reported_and_the_master_exits_non_zero() {
    let Some((_rt, etcd)) = etcd() else { return };
    killed_node_is_reported(&["--etcd", &etcd.endpoint]);
}

/// A counter job on three processes, far too long to end by itself within a test.
const ENDLESS_COUNTER_ON_THREE: [&str; 6] =
    ["run", "counter", "--processes", "3", "--tasks", "100000000"];

/// With `--recover-workers --scar-fraction`, a SIGKILLed node the master started is
/// recovered from, and the death it recovers from is the process's exit: the lease (a
/// minute) and the link (whose idle timeout is the lease) cannot have told it. Every report
/// says how the death was learnt. (MLR: the counter would fail on the updates the
/// server's recovery loses.)
#[test]
fn a_killed_node_is_recovered_from_when_its_process_exits() {
    let (_dir, metrics) = temp_file("mlr.jsonl");
    let mut command = Command::new(harp());
    command.args([
        "run",
        "mlr",
        "--data",
        "synthetic:100000,200,10",
        "--epochs",
        "30",
        "--processes",
        "3",
        "--recover-workers",
        "--scar-fraction",
        "1",
        "--scar-period",
        "1",
        "--lease-timeout-ms",
        "60000",
        "--quiet",
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let (mut master, lines, reader) = harp_tests::spawn_reading_stderr(&mut command);
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(harp_tests::PATIENCE) {
            Ok(line) if line.starts_with("epoch   2 ") => break,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no epoch 2; the master said:\n{}", seen.join("\n")),
        }
    }
    let nodes = children_of(master.id());
    assert_eq!(nodes.len(), 2, "the master's children: {nodes:?}");
    sigkill(nodes[0]);
    let status = master.wait().unwrap();
    reader.join().unwrap();
    seen.extend(lines.try_iter());
    let stderr = seen.join("\n");
    assert!(status.success(), "the master failed: {stderr}");
    assert!(stderr.contains("done: 30 epochs"), "{stderr}");
    let worker = stderr
        .lines()
        .find(|l| l.starts_with("worker recovery: node"))
        .unwrap_or_else(|| panic!("no worker recovery in:\n{stderr}"));
    assert!(
        worker.contains("(its process exited (signal: 9 (SIGKILL)))"),
        "{worker}"
    );
    assert!(
        stderr.lines().any(|l| l.starts_with("recovery: server")),
        "no server recovery in:\n{stderr}"
    );
    let records = read_json_lines(&metrics);
    let causes: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "worker_recovery")
        .map(|r| r["report"]["cause"].clone())
        .collect();
    assert_eq!(
        causes,
        [serde_json::json!(
            "its process exited (signal: 9 (SIGKILL))"
        )],
        "{records:?}"
    );
    // The dead node's counters are in the job's, as it last reported them.
    let stats = records
        .iter()
        .find(|r| r["event"] == "job_stats")
        .unwrap_or_else(|| panic!("no job_stats record in {records:?}"));
    assert_eq!(stats["nodes_counted"], 2, "{stats}");
    assert_eq!(stats["nodes_counted_from_reports"], 1, "{stats}");
    assert!(
        stderr.contains("(summed over 2 nodes, 1 of them as last reported"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A node that goes silent for less than the lease is not dead: with `--lease-timeout-ms
/// 15000`, one of the master's two node processes is stopped (SIGSTOP) for 11 s and
/// continued, and the job ends exact, no node declared dead. Before, the nodes' QUIC
/// endpoints kept an idle timeout of 3 s and QUIC takes the shorter of the two ends', so
/// every link broke after 3 s of silence whatever the lease, and the master declared the
/// node dead ("connection ... lost: timed out"); and the other node's reads and flushes to
/// the silent one's server gave up after 10 s ("server-0 did not answer a flush within
/// 10000 ms"), which ended the job; they now wait a lease and a second when that is longer.
#[test]
fn a_node_silent_for_less_than_its_lease_is_not_declared_dead() {
    let (_dir, metrics) = temp_file("counter.jsonl");
    let mut master = spawn_piped(Command::new(harp()).args([
        "run",
        "counter",
        "--processes",
        "3",
        "--tasks",
        "8000",
        "--task-sleep-us",
        "1000",
        "--lease-timeout-ms",
        "15000",
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]));
    let nodes = wait_for_children(master.id(), 2);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert!(
        master.try_wait().unwrap().is_none(),
        "the job ended before the stop"
    );
    let signal = |name: &str| {
        let sent = Command::new("kill")
            .args([name, &nodes[0].to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    std::thread::sleep(std::time::Duration::from_secs(11));
    signal("-CONT");
    let output = master.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the master failed: {stderr}");
    assert!(!stderr.contains("died"), "{stderr}");
    let records = read_json_lines(&metrics);
    let verdict = (records.iter())
        .find(|r| r["tasks"].is_u64())
        .unwrap_or_else(|| panic!("no final counter record: {records:?}"));
    assert_eq!(verdict["tasks"], 8000, "{verdict}");
    assert_eq!(verdict["exact"], true, "{verdict}");
}

/// Kills one node of a job on three processes; the master's stderr.
fn killed_node_is_reported(extra: &[&str]) -> String {
    let master = spawn_piped(
        Command::new(harp())
            .args(ENDLESS_COUNTER_ON_THREE)
            .args(["--lease-timeout-ms", "2000"])
            .args(extra),
    );
    // Wait until both node processes run, then let the job make progress.
    let nodes = wait_for_children(master.id(), 2);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let killed_at = Instant::now();
    sigkill(nodes[0]);
    let output = master.wait_with_output().unwrap();
    let detected_s = killed_at.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("master exited {detected_s:.2} s after the kill (lease 2 s): {stderr}");
    assert!(!output.status.success(), "the master must fail: {stderr}");
    assert!(stderr.contains("died"), "{stderr}");
    assert!(
        stderr.contains("held worker-") && stderr.contains("server-"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr.into_owned()
}

/// SIGTERM on the master (a scheduler taking the job's machines back) stops the job
/// cleanly: the master says why and after how much work, every node process it started is
/// told the job ended and exits 0 (the master's stderr, which they share, ends only then),
/// the job's temporary credentials are removed, and the exit status is 128 + 15, as if the
/// signal had ended it. Before, the master died silently, its nodes found out only when
/// the link broke, and the credentials stayed in the temporary directory.
#[test]
fn a_master_stopped_by_sigterm_ends_its_nodes_and_cleans_up() {
    let args = [
        &ENDLESS_COUNTER_ON_THREE[..],
        &["--task-sleep-us", "200", "--threads", "2"],
    ];
    let master = harp_tests::MasterProcess::start(harp(), &args.concat());
    master.wait_for_nodes(&[0, 1].into());
    let credentials = master.credentials.clone();
    assert!(credentials.exists());
    master.signal("TERM");
    let (status, stderr) = master.finish();
    assert_eq!(status.code(), Some(128 + 15), "{status}: {stderr}");
    assert!(
        stderr.contains("the job was stopped (the master got SIGTERM) after"),
        "{stderr}"
    );
    let told = stderr
        .lines()
        .filter(|l| l.contains("the master ended the job: the job was stopped"))
        .count();
    assert_eq!(told, 2, "each node hears why the job ended: {stderr}");
    // A stopped job is a clean end for its nodes (a scheduler that restarts failed
    // processes leaves them alone).
    assert!(
        stderr.contains("node processes: 2 of 2 exited 0"),
        "{stderr}"
    );
    assert!(!stderr.contains("lost the master"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !credentials.exists(),
        "{} was left behind",
        credentials.display()
    );
}

/// `harp run --credentials DIR` on a fresh machine (the README's by-hand example) makes the
/// job's authority in `DIR`, says so, and a second job with the same `DIR` uses it. Before,
/// the master refused: "cannot read credentials from DIR/ca.pem".
#[test]
fn a_master_makes_its_credentials_where_there_are_none() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("job-ca");
    let creds_arg = creds.to_str().unwrap();
    let job = [
        "run",
        "counter",
        "--processes",
        "2",
        "--tasks",
        "200",
        "--credentials",
        creds_arg,
    ];
    let first = run_process(&harp(), job);
    assert!(first.status.success(), "{}", first.describe());
    let made = format!("created the job's credentials in {creds_arg}");
    assert!(first.stderr.contains(&made), "{}", first.describe());
    assert!(creds.join("ca.pem").is_file() && creds.join("ca.key").is_file());
    let ca = std::fs::read(creds.join("ca.pem")).unwrap();

    let second = run_process(&harp(), job);
    assert!(second.status.success(), "{}", second.describe());
    assert!(!second.stderr.contains(&made), "{}", second.describe());
    assert_eq!(
        std::fs::read(creds.join("ca.pem")).unwrap(),
        ca,
        "the same authority"
    );
}

/// A job started again with the same credentials (a restart, a `--resume` after its master
/// died) finds the etcd keys of the first run's nodes that died without leaving: their
/// leases expire only after their TTL. Those deaths are not the new run's: it ends exact,
/// and its nodes, which take the same ids, hold leases of their own. The desired size the
/// first run was given still holds, and the master says so.
#[test]
fn a_job_restarted_with_the_same_credentials_ignores_the_first_runs_stale_members() {
    let Some((rt, etcd)) = etcd() else { return };
    let dir = tempfile::tempdir().unwrap();
    let creds_dir = dir.path().join("job-ca");
    std::fs::create_dir_all(&creds_dir).unwrap();
    let (creds, _) = harp::JobCredentials::load_or_generate(&creds_dir, "counter").unwrap();
    let job: String = harp::remote::job_id(&creds)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The first run's nodes 0 and 1, killed: nothing renews their leases any more.
    rt.block_on(async {
        use harp_membership::{
            EtcdMembership, EtcdOptions, MemberInfo, MembershipBackend, MembershipConfig, NodeId,
            NodeRoles,
        };
        let config = MembershipConfig::with_lease_timeout_ms(2000);
        let first_run =
            EtcdMembership::connect(&etcd.endpoint, &job, config, EtcdOptions::default())
                .await
                .unwrap();
        for node in [0, 1] {
            let info = MemberInfo::new(format!("node-{node}"), NodeRoles::BOTH);
            first_run
                .register(NodeId(node), info)
                .await
                .unwrap()
                .abandon();
        }
        // And the size a scheduler wanted for it, which the new run follows (and says so).
        first_run.set_desired_nodes(2).await.unwrap();
    });
    let (_metrics_dir, metrics) = temp_file("counter.jsonl");
    // Long enough to outlast the stale leases (2 s).
    let out = run_process(
        &harp(),
        [
            "run",
            "counter",
            "--processes",
            "3",
            "--tasks",
            "6000",
            "--task-sleep-us",
            "500",
            "--etcd",
            &etcd.endpoint,
            "--credentials",
            creds_dir.to_str().unwrap(),
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", out.describe());
    assert!(
        out.stderr
            .contains("etcd: removed 2 member records an earlier run of this job left"),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("; it holds 2 already"),
        "{}",
        out.describe()
    );
    let summary = &read_json_lines(&metrics)[0];
    assert_eq!(summary["exact"], true, "{}", out.describe());
    assert!(
        summary["elapsed_s"].as_f64().unwrap_or(0.0) > 3.0,
        "the job ended before the stale leases expired: {summary}"
    );
}
