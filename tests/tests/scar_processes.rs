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
//!
//! A server node that dies while shards move from or to it: `scar_hand_offs.rs`. Both
//! share the job, its nodes and the counter's oracle (`scar_nodes/`).

use harp::{ClusterOptions, HarpError, JobCredentials, ScarOptions, Selection};
use harp_apps::counter::CounterApp;
use harp_tests::{runtime, Threads};
use std::collections::BTreeSet;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod scar_nodes;
use scar_nodes::*;

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
