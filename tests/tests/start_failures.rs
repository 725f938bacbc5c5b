//! A job across processes that cannot start: a node process its launcher started exits
//! before the job starts (a crash while it loads its data, the OOM killer, a SIGKILL). The
//! master ends the start at once, saying which process exited and how, and the nodes that
//! joined hear why; before, it waited out its join timeout (30 s by default) and then said
//! only that too few nodes had joined. Other deaths reported before the start are not
//! lost: the job handles them once it runs. A node asked to leave (SIGTERM) while it joins
//! does not end the start: it leaves as soon as the job runs. A peer that connects and then
//! says nothing holds up no node that joins after it.

use harp::{job_control, HarpError, JobCredentials, NodeFailure, NodeRoles};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{
    endless_counter, resolve_binary, runtime, send_signal, sigkill, spawn_master,
    spawn_node_joined, spawn_piped, wait_for_children, wait_until_catching, MasterEnd, Threads,
};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a test waits for a job to end before it fails (a guard against a hang, not a
/// measurement).
const GUARD: Duration = Duration::from_secs(60);

async fn guarded<T>(what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(GUARD, task)
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {GUARD:?}"))
        .unwrap_or_else(|e| panic!("{what}'s task failed: {e}"))
}

/// The endless counter's master in this process, waiting for `nodes` nodes: the app and
/// credentials for its nodes, where the test reports deaths, the master and its address.
async fn waiting_master(
    nodes: u32,
) -> (
    Arc<CounterApp>,
    Arc<JobCredentials>,
    mpsc::UnboundedSender<NodeFailure>,
    tokio::task::JoinHandle<MasterEnd<CounterApp>>,
    std::net::SocketAddr,
) {
    let creds = Arc::new(JobCredentials::generate("start-failures").unwrap());
    let app = endless_counter();
    let (outside, failures) = mpsc::unbounded_channel();
    let (master, addr) = spawn_master(&app, &creds, nodes, failures, job_control().1).await;
    (app, creds, outside, master, addr)
}

/// The master waits for 3 nodes; one joined, and the launcher reports that another node
/// process exited: the start ends with that exit, and the node that joined hears why.
#[test]
fn a_node_process_that_exits_before_the_start_ends_it_and_the_joined_nodes_hear_why() {
    runtime(Threads::Multi(2)).block_on(async {
        let (app, creds, outside, master, addr) = waiting_master(3).await;
        let (node, joined) = spawn_node_joined(&app, &creds, addr, NodeRoles::BOTH);
        tokio::time::timeout(GUARD, joined)
            .await
            .expect("the node joins")
            .expect("the node is welcomed");
        outside
            .send(NodeFailure::Exited {
                launch_id: 2,
                how: "exit status: 3".into(),
            })
            .unwrap();
        match guarded("the master", master).await {
            Err(e @ HarpError::NodeExitedBeforeStart { .. }) => assert_eq!(
                e.to_string(),
                "node process 2 exited before the job started (exit status: 3); the job cannot start without it"
            ),
            Err(e) => panic!("the start ended otherwise: {e}"),
            Ok(_) => panic!("the job ran without its nodes"),
        }
        match guarded("the node", node).await {
            Err(e) => {
                let why = e.to_string();
                assert!(
                    why.contains("shut down by the master before the job started")
                        && why.contains("node process 2 exited before the job started"),
                    "the node did not hear why: {why}"
                );
            }
            Ok(()) => panic!("the node reports a job that ended well"),
        }
    });
}

/// A death an outside membership service reports before the job starts does not end the
/// start (only a launched process's exit does) and is not lost: the job handles it once it
/// runs, here as the death of its only node.
#[test]
fn a_death_seen_before_the_start_is_handled_once_the_job_runs() {
    runtime(Threads::Multi(2)).block_on(async {
        let (app, creds, outside, master, addr) = waiting_master(1).await;
        outside
            .send(NodeFailure::Seen {
                node: 0,
                seen: "the test says its lease expired".into(),
            })
            .unwrap();
        let (node, _joined) = spawn_node_joined(&app, &creds, addr, NodeRoles::BOTH);
        match guarded("the master", master).await {
            Err(HarpError::NodeDied { node: 0, detail }) => assert!(
                detail.contains("the test says its lease expired"),
                "{detail}"
            ),
            Err(e) => panic!("not the reported death: {e}"),
            Ok(_) => panic!("the job ended well after its only node died"),
        }
        let _ = guarded("the node", node).await;
    });
}

/// `harp run --processes 3` whose nodes start slowly (`HARP_FAULT_JOIN_DELAY_MS`): one is
/// killed with SIGKILL before it joined. The master fails at once naming the process and
/// its signal, not after its 30 s join timeout with "only 0 of 2 nodes joined".
#[test]
fn harp_run_fails_at_once_when_a_node_process_dies_before_the_job_starts() {
    let harp = resolve_binary(env!("CARGO_BIN_EXE_harp-cli"));
    let master = spawn_piped(
        Command::new(harp)
            .args(["run", "counter", "--processes", "3", "--tasks", "1000"])
            .env(harp::remote::JOIN_DELAY_VAR, "600000"),
    );
    let nodes = wait_for_children(master.id(), 2);
    let killed_at = Instant::now();
    sigkill(nodes[0]);
    let output = master.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!(
        "the master exited {:.2} s after the kill: {stderr}",
        killed_at.elapsed().as_secs_f64()
    );
    assert!(!output.status.success(), "the master must fail: {stderr}");
    assert!(
        stderr.contains("exited before the job started (signal: 9 (SIGKILL))"),
        "{stderr}"
    );
    assert!(!stderr.contains("nodes joined within"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A node process asked to leave (SIGTERM) while it still joins does not die by the
/// signal's default action (exit 143, which would end the start): it joins, and leaves
/// gracefully as soon as the job runs; the job ends exact on the other node.
#[test]
fn a_node_given_sigterm_while_it_joins_leaves_once_the_job_runs() {
    let harp = resolve_binary(env!("CARGO_BIN_EXE_harp-cli"));
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("counter.jsonl");
    let master = spawn_piped(
        Command::new(harp)
            .args(["run", "counter", "--processes", "3", "--tasks", "4000"])
            .args(["--task-sleep-us", "500", "--metrics-out"])
            .arg(&metrics)
            .env(harp::remote::JOIN_DELAY_VAR, "1500"),
    );
    let nodes = wait_for_children(master.id(), 2);
    // Once it handles SIGTERM (before that the signal's default action would kill it).
    wait_until_catching(nodes[0], 15);
    send_signal(nodes[0], "TERM");
    let output = master.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the job must end well: {stderr}");
    assert!(
        stderr.contains("harp node: got SIGTERM: leaving the job"),
        "{stderr}"
    );
    assert!(
        stderr.contains("node processes: 2 of 2 exited 0"),
        "{stderr}"
    );
    let records = harp_tests::read_json_lines(&metrics);
    let leaves: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "scale" && r["cause"] == "leave")
        .collect();
    assert_eq!(leaves.len(), 1, "{records:?}");
    assert_eq!(leaves[0]["ok"], true, "{records:?}");
    let summary = records.iter().find(|r| r.get("exact").is_some()).unwrap();
    assert_eq!(summary["exact"], true, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A peer with the job's credentials that connects to the master of a starting job and
/// then says nothing (its handshake done, no stream opened, no hello: a node stuck right
/// after it connected) takes no place of the job and holds up no node: the node that
/// connects after it is welcomed, and the job runs to its end, every counter exact.
/// Before, the master took its first nodes one at a time and waited for the silent peer's
/// first stream without a bound: the node never joined.
#[test]
fn a_peer_that_connects_and_never_says_hello_holds_up_no_node_of_the_start() {
    runtime(Threads::Multi(2)).block_on(async {
        let creds = Arc::new(JobCredentials::generate("silent-peer").unwrap());
        let config = CounterConfig {
            tasks: 200,
            ..CounterConfig::default()
        };
        let app = Arc::new(CounterApp::new(config).unwrap());
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let master = {
            let (app, creds) = (app.clone(), creds.clone());
            let options = harp::ClusterOptions {
                nodes: 1,
                collect_params: true,
                join_timeout_ms: 600_000,
                ..harp::ClusterOptions::default()
            };
            tokio::spawn(async move {
                harp::run_job_across(app, &creds, &options, |addr| {
                    let _ = addr_tx.send(addr);
                })
                .await
            })
        };
        let addr = addr_rx.await.expect("the master listens");
        let silent = {
            let identity = creds.issue_node().unwrap();
            let transport = harp_net::TransportConfig {
                keep_alive_ms: 200,
                idle_timeout_ms: 600_000,
                ..harp_net::TransportConfig::default()
            };
            let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let endpoint =
                harp_net::NetEndpoint::bind(loopback, &creds, &identity, transport).unwrap();
            let connection = endpoint
                .connect(addr)
                .await
                .expect("the silent peer connects");
            (endpoint, connection)
        };
        let (node, joined) = spawn_node_joined(&app, &creds, addr, NodeRoles::BOTH);
        let id = tokio::time::timeout(GUARD, joined)
            .await
            .expect("the node joins while the silent peer holds its connection")
            .expect("the node is welcomed");
        assert_eq!(id, 0, "the silent peer took no place of the job");
        let outcome = guarded("the master", master)
            .await
            .unwrap_or_else(|e| panic!("the job failed: {e}"));
        let params = outcome.params.as_ref().expect("the final parameters");
        app.verify(&outcome.driver, params)
            .unwrap_or_else(|e| panic!("counters not exact: {e}"));
        guarded("the node", node)
            .await
            .unwrap_or_else(|e| panic!("the node failed: {e}"));
        drop(silent);
    });
}
