//! `JobControl::stop`, what `harp run` does on SIGTERM and SIGINT, through the library: a
//! running job in one process ends with `HarpError::Stopped` (the first reason given, the
//! micro-tasks completed by then); a job across processes tells the node that joined why
//! it ended (the node's `run_node` ends with the same `HarpError::Stopped`); a job still
//! waiting for its nodes stops waiting. (The signals themselves, with
//! the real binary: `multiprocess.rs` and `consistent_checkpoint.rs`.)

use harp::{job_control, ClusterOptions, HarpError, JobConfig, JobCredentials, NodeRoles};
use harp_apps::counter::CounterApp;
use harp_tests::{endless_counter, runtime, spawn_master, spawn_node_joined, MasterEnd, Threads};
use std::sync::Arc;
use std::time::Duration;

/// The endless counter across processes, waiting for `nodes` nodes (for ten minutes), with
/// one node that joins it: the job's control, its master and that node, once it joined.
async fn job_of_endless_counter(
    nodes: u32,
) -> (
    harp::JobControl,
    tokio::task::JoinHandle<MasterEnd<CounterApp>>,
    tokio::task::JoinHandle<Result<(), HarpError>>,
) {
    let creds = Arc::new(JobCredentials::generate("job-stop").unwrap());
    let (control, inbox) = job_control();
    let app = endless_counter();
    let (_outside, failures) = tokio::sync::mpsc::unbounded_channel();
    let (master, addr) = spawn_master(&app, &creds, nodes, failures, inbox).await;
    let (node, joined) = spawn_node_joined(&app, &creds, addr, NodeRoles::BOTH);
    tokio::time::timeout(GUARD, joined)
        .await
        .expect("the node joins within the guard")
        .expect("the node is welcomed");
    (control, master, node)
}

/// How long a test waits for a stopped job to end before it fails (a guard against a hang,
/// not a measurement).
const GUARD: Duration = Duration::from_secs(60);

#[test]
fn a_running_job_in_one_process_stops_with_the_first_reason_given() {
    runtime(Threads::Multi(2)).block_on(async {
        let (control, inbox) = job_control();
        let job = JobConfig {
            workers: 2,
            servers: 2,
            ..JobConfig::default()
        };
        let app = endless_counter();
        let running = tokio::spawn(async move { harp::run_job_controlled(app, &job, inbox).await });
        // Some micro-tasks complete first.
        tokio::time::sleep(Duration::from_millis(500)).await;
        control.stop("the operator asked");
        control.stop("a second request");
        let ended = tokio::time::timeout(GUARD, running)
            .await
            .expect("the stopped job ends")
            .unwrap();
        match ended {
            Err(HarpError::Stopped {
                reason,
                started,
                tasks_completed,
                ..
            }) => {
                assert_eq!(reason, "the operator asked");
                assert!(started);
                assert!(tasks_completed < 100_000_000, "{tasks_completed}");
            }
            Err(e) => panic!("not a stop: {e}"),
            Ok(_) => panic!("the job ended by itself"),
        }
    });
}

#[test]
fn a_job_across_processes_tells_its_node_it_was_stopped() {
    runtime(Threads::Multi(2)).block_on(async {
        let (control, master, node) = job_of_endless_counter(1).await;
        // The control answers once the job runs (it waits in its inbox until then).
        tokio::time::timeout(GUARD, control.members())
            .await
            .expect("the job starts within the guard")
            .expect("the job's members");
        control.stop("the test is over");
        let ended = tokio::time::timeout(GUARD, master)
            .await
            .expect("the master ends");
        let completed = match ended.unwrap() {
            Err(HarpError::Stopped {
                reason,
                tasks_completed,
                ..
            }) => {
                assert_eq!(reason, "the test is over");
                tasks_completed
            }
            Err(e) => panic!("not a stop: {e}"),
            Ok(_) => panic!("the job ended by itself"),
        };
        let node_end = tokio::time::timeout(GUARD, node)
            .await
            .expect("the node ends");
        // The node hears the same stop: its reason and how much was done, not a failure.
        match node_end.unwrap() {
            Err(HarpError::Stopped {
                reason,
                started,
                tasks_completed,
                ..
            }) => {
                assert_eq!(reason, "the test is over");
                assert!(started);
                assert_eq!(tasks_completed, completed);
            }
            Err(e) => panic!("the node did not hear of a stop: {e}"),
            Ok(()) => panic!("the node reports a job that ended well"),
        }
    });
}

#[test]
fn a_job_across_processes_that_waits_for_its_nodes_stops_waiting() {
    runtime(Threads::Multi(2)).block_on(async {
        let creds = JobCredentials::generate("job-stop").unwrap();
        let (control, inbox) = job_control();
        // Without the stop it would wait ten minutes for nodes that never come.
        let options = ClusterOptions {
            nodes: 3,
            join_timeout_ms: 600_000,
            ..ClusterOptions::default()
        };
        let (_outside, failures) = tokio::sync::mpsc::unbounded_channel();
        let stopper = control.clone();
        let listening = move |_| stopper.stop("nobody came");
        let run = harp::run_job_across_consistent(
            endless_counter(),
            &creds,
            &options,
            listening,
            failures,
            inbox,
        );
        match tokio::time::timeout(GUARD, run)
            .await
            .expect("the stop ends the wait")
        {
            Err(e @ HarpError::Stopped { .. }) => {
                assert_eq!(
                    e.to_string(),
                    "the job was stopped (nobody came) before it started"
                );
            }
            Err(e) => panic!("not a stop: {e}"),
            Ok(_) => panic!("the job ran without nodes"),
        }
        drop(control);
    });
}

/// A job stopped while it waits for more nodes tells the one that joined: its `run_node`
/// ends with the same stop ("before it started"), which `harp node` takes as a clean end.
/// Before, the node saw the master hang up while it waited for its assignment, an error.
#[test]
fn a_node_of_a_job_stopped_before_it_started_hears_of_the_stop() {
    runtime(Threads::Multi(2)).block_on(async {
        // One of the three nodes the job waits for has joined.
        let (control, master, node) = job_of_endless_counter(3).await;
        control.stop("the operator asked");
        let ended = tokio::time::timeout(GUARD, master)
            .await
            .expect("the master ends");
        assert!(
            matches!(
                ended.unwrap(),
                Err(HarpError::Stopped { started: false, .. })
            ),
            "the master's end"
        );
        let node_end = tokio::time::timeout(GUARD, node)
            .await
            .expect("the node ends");
        match node_end.unwrap() {
            Err(e @ HarpError::Stopped { started: false, .. }) => assert_eq!(
                e.to_string(),
                "the job was stopped (the operator asked) before it started"
            ),
            Err(e) => panic!("the node did not hear of the stop: {e}"),
            Ok(()) => panic!("the node reports a job that ended well"),
        }
    });
}
