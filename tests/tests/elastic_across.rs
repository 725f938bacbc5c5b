//! Executors moving between node processes' workers while the counter app runs (the nodes
//! run in this process but talk to the master and to each other over QUIC, exactly as node
//! processes do): every executor's saved state and unstarted micro-tasks travel through the
//! wire; every counter must still be exact. Moves the transport cannot do yet are refused
//! with a clear error.

use harp::{job_control, ClusterOptions, JobControl, JobCredentials, NodeRoles, WorkerId};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{runtime, spawn_nodes, SplitMix, Threads};
use std::sync::Arc;
use tokio::sync::oneshot;

const TASKS: u64 = 60_000;

type Outcome = Result<harp::JobOutcome<CounterApp>, harp::HarpError>;

/// Runs the counter job on `nodes` worker-and-server nodes while `drive` sends commands.
fn run_controlled<F, Fut>(nodes: usize, drive: F) -> (Arc<CounterApp>, Outcome)
where
    F: FnOnce(JobControl, tokio::task::JoinHandle<Outcome>) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let app = Arc::new(
        CounterApp::new(CounterConfig {
            tasks: TASKS,
            ..CounterConfig::default()
        })
        .unwrap(),
    );
    let creds = Arc::new(JobCredentials::generate("elastic").unwrap());
    let options = ClusterOptions {
        nodes: nodes as u32,
        executors_per_worker: 4,
        collect_params: true,
        join_timeout_ms: 10_000,
        ..ClusterOptions::default()
    };
    let outcome = runtime(Threads::Multi(2)).block_on(async {
        let (control, inbox) = job_control();
        let (addr_tx, addr_rx) = oneshot::channel();
        let master = {
            let (app, creds) = (app.clone(), creds.clone());
            tokio::spawn(async move {
                let (_failures_tx, failures) = tokio::sync::mpsc::unbounded_channel();
                harp::run_job_across_controlled(
                    app,
                    &creds,
                    &options,
                    |addr| {
                        let _ = addr_tx.send(addr);
                    },
                    failures,
                    inbox,
                )
                .await
            })
        };
        let addr = addr_rx.await.expect("the master listens");
        let roles = vec![NodeRoles::BOTH; nodes];
        let node_tasks = spawn_nodes(&app, &creds, addr, &roles);
        let outcome = drive(control, master).await;
        for node in node_tasks {
            let _ = node.await;
        }
        outcome
    });
    (app, outcome)
}

#[test]
fn counter_is_exact_while_executors_move_between_node_workers_fifty_times() {
    let (app, outcome) = run_controlled(3, |control, master| async move {
        let mut rng = SplitMix(7);
        let all = [WorkerId(0), WorkerId(1), WorkerId(2)];
        let (_, servers) = control.members().await.unwrap();
        let mut events = 0;
        let mut moved = 0;
        while events < 60 && !master.is_finished() {
            // A random non-empty subset of the workers takes all the executors.
            let mut onto: Vec<WorkerId> = all
                .iter()
                .copied()
                .filter(|_| rng.next_u64().is_multiple_of(2))
                .collect();
            if onto.is_empty() {
                onto.push(all[(rng.next_u64() % 3) as usize]);
            }
            match control.rebalance_onto(&onto, &servers).await {
                Ok(report) => {
                    events += 1;
                    moved += report.executors_moved;
                }
                Err(e) if master.is_finished() => {
                    eprintln!("the job ended during a scale event: {e}");
                    break;
                }
                Err(e) => panic!("scale event {events} failed: {e}"),
            }
        }
        println!("{events} scale events, {moved} executor moves across processes");
        assert!(
            events >= 50,
            "only {events} scale events before the job ended"
        );
        assert!(moved >= events, "the events moved almost nothing ({moved})");
        master.await.unwrap()
    });
    let outcome = outcome.expect("the job finishes");
    let params = outcome.params.expect("parameters collected");
    app.verify(&outcome.driver, &params)
        .unwrap_or_else(|diff| panic!("not exact after executor moves:\n{diff}"));
    assert_eq!(outcome.driver.completed(), TASKS);
}

#[test]
fn moves_across_processes_that_are_not_supported_yet_are_refused_clearly() {
    let (app, outcome) = run_controlled(2, |control, master| async move {
        let added = control.scale_out(1, 0).await.unwrap_err();
        assert!(added.to_string().contains("not supported"), "{added}");
        let shards = control
            .rebalance_onto(&[WorkerId(0), WorkerId(1)], &[harp::ServerId(0)])
            .await
            .unwrap_err();
        assert!(
            shards
                .to_string()
                .contains("moving shards between node processes"),
            "{shards}"
        );
        let last = control
            .scale_in(&[WorkerId(0), WorkerId(1)], &[])
            .await
            .unwrap_err();
        assert!(last.to_string().contains("last worker"), "{last}");
        master.await.unwrap()
    });
    let outcome = outcome.expect("the job finishes after the refused commands");
    app.verify(&outcome.driver, &outcome.params.unwrap())
        .unwrap();
}
