//! The job's desired size in etcd (`/harp/jobs/<job>/desired_nodes`), with real `harp`
//! processes and a real etcd: a count written there grows the job (the master starts node
//! processes, as `harp scale --add` does) or shrinks it (the most recently joined node
//! leaves and exits 0, as after `harp scale --remove`); malformed values change nothing and
//! are reported; growth on a master that cannot start processes is a failed scale event; the
//! counter stays exact throughout.
//!
//! Without an `etcd` binary these tests print a skip message and pass (under `CI=true` they
//! fail: CI installs etcd with `scripts/install-test-deps.sh`).

use harp_membership::test_server::EtcdServer;
use harp_membership::{EtcdMembership, EtcdOptions, MembershipConfig};
use harp_tests::{harp_binary, read_json_lines, scale_summaries, MasterProcess};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The key the master printed that it follows (`desired size key: KEY`).
fn desired_key(master: &MasterProcess) -> String {
    let line = master.wait_for_line(&["desired size key: "]);
    let key = line.split("desired size key: ").nth(1).unwrap();
    key.split_whitespace().next().unwrap().to_string()
}

/// The scheduler's side: an etcd client for the job whose key the master printed.
fn scheduler(runtime: &tokio::runtime::Runtime, etcd: &EtcdServer, key: &str) -> EtcdMembership {
    let job = key
        .strip_prefix("/harp/jobs/")
        .and_then(|k| k.strip_suffix("/desired_nodes"))
        .unwrap_or_else(|| panic!("not a desired size key: {key}"));
    let backend = runtime
        .block_on(EtcdMembership::connect(
            &etcd.endpoint,
            job,
            MembershipConfig::default(),
            EtcdOptions::default(),
        ))
        .unwrap();
    assert_eq!(backend.desired_nodes_key(), key);
    backend
}

fn etcd() -> Option<(tokio::runtime::Runtime, EtcdServer)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(EtcdServer::start())?;
    Some((runtime, server))
}

/// The scale events of a finished counter run, as `cause:node:ok`, sorted.
fn scale_events(metrics: &Path) -> Vec<String> {
    let mut events = scale_summaries(&read_json_lines(metrics));
    events.sort();
    events
}

/// 1 node → desired 3 → 3 nodes; "abc" and "0" change nothing; desired 2 → the newest node
/// leaves and exits 0; the counter is exact.
#[test]
fn the_desired_node_count_in_etcd_grows_and_shrinks_the_job() {
    let Some((runtime, etcd)) = etcd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    // 4 executors with 2 tasks in flight that each wait 5 ms: the job lasts at least 10 s
    // (about 30 s here), whatever its number of nodes; the steps below take about 1 s.
    let master = MasterProcess::start(
        harp_binary!(),
        &[
            "run",
            "counter",
            "--processes",
            "2",
            "--tasks",
            "16000",
            "--executors-per-worker",
            "4",
            "--window",
            "2",
            "--task-sleep-us",
            "5000",
            "--threads",
            "2",
            "--etcd",
            etcd.endpoint.as_str(),
            "--metrics-out",
            metrics.to_str().unwrap(),
        ],
    );
    let key = desired_key(&master);
    let scheduler = scheduler(&runtime, &etcd, &key);
    master.wait_for_nodes(&BTreeSet::from([0]));

    let began = Instant::now();
    runtime.block_on(scheduler.set_desired_nodes(3)).unwrap();
    master.wait_for_nodes(&BTreeSet::from([0, 1, 2]));
    println!("1 -> 3 nodes in {:.1} s", began.elapsed().as_secs_f64());

    for bad in ["abc", "0"] {
        runtime
            .block_on(scheduler.put_desired_nodes_raw(bad.as_bytes()))
            .unwrap();
        let quoted = format!("\"{bad}\"");
        let line = master.wait_for_line(&["ignored a desired node count", &quoted]);
        assert!(line.contains(&key), "{line}");
    }
    assert_eq!(master.nodes(), Some(BTreeSet::from([0, 1, 2])));

    let began = Instant::now();
    runtime.block_on(scheduler.set_desired_nodes(2)).unwrap();
    master.wait_for_nodes(&BTreeSet::from([0, 1]));
    println!("3 -> 2 nodes in {:.1} s", began.elapsed().as_secs_f64());

    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    // The node that left, and the two that stayed to the end, all exited 0.
    assert!(
        stderr.contains("node processes: 3 of 3 exited 0"),
        "{stderr}"
    );
    let records = read_json_lines(&metrics);
    let report = records.last().unwrap();
    assert_eq!(report["exact"], true, "{report}");
    assert_eq!(report["tasks"], 16000);
    assert_eq!(
        scale_events(&metrics),
        ["join:1:true", "join:2:true", "leave:2:true"]
    );
}

/// A master started with `--nodes` cannot start processes: a desired count above the job's
/// size is a failed scale event and a log line, and the job goes on unchanged.
#[test]
fn growth_the_master_cannot_start_is_a_failed_scale_event() {
    let Some((runtime, etcd)) = etcd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    // 2 executors, 2 tasks in flight, 5 ms each: at least 10 s.
    let run_args = [
        "run",
        "counter",
        "--tasks",
        "8000",
        "--executors-per-worker",
        "2",
        "--window",
        "2",
        "--task-sleep-us",
        "5000",
        "--threads",
        "2",
        "--etcd",
        etcd.endpoint.as_str(),
    ];
    let mut master_args = run_args.to_vec();
    master_args.extend(["--nodes", "1", "--metrics-out", metrics.to_str().unwrap()]);
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let mut node = Command::new(harp_binary!())
        .args(["node", "--join", &master.addr, "--credentials"])
        .arg(&master.credentials)
        .arg("--")
        .args(run_args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let scheduler = scheduler(&runtime, &etcd, &desired_key(&master));
    master.wait_for_nodes(&BTreeSet::from([0]));

    runtime.block_on(scheduler.set_desired_nodes(2)).unwrap();
    master.wait_for_line(&["cannot grow the job", "started with --nodes"]);
    assert_eq!(master.nodes(), Some(BTreeSet::from([0])));

    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    assert!(node.wait().unwrap().success());
    assert_eq!(read_json_lines(&metrics).last().unwrap()["exact"], true);
    assert_eq!(scale_events(&metrics), ["join:null:false"]);
}
