//! Elasticity in one process: executors and shards move between workers and servers while
//! the counter app (harp's exact-accounting oracle) runs; every counter must still be exact
//! (no update lost or applied twice), and bad scale commands are refused cleanly.

use harp::{job_control, JobConfig, JobControl, ServerId, WorkerId};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{runtime, SplitMix, Threads};
use std::sync::Arc;

type Running = tokio::task::JoinHandle<Result<harp::JobOutcome<CounterApp>, harp::HarpError>>;

fn spawn_job(app: Arc<CounterApp>, job: JobConfig, inbox: harp::ControlInbox) -> Running {
    tokio::spawn(async move { harp::run_job_controlled(app, &job, inbox).await })
}

/// One random scale event: grow by a worker and/or a server, or give some back (never the
/// last of either).
async fn random_event(
    control: &JobControl,
    rng: &mut SplitMix,
) -> Result<harp::ScaleReport, harp::HarpError> {
    let (workers, servers) = control.members().await?;
    let pick = rng.next_u64() % 4;
    let grow = pick == 0 || (workers.len() <= 1 && servers.len() <= 1);
    if grow || (pick == 1 && workers.len() < 6) {
        let add_worker = rng.next_u64().is_multiple_of(2) || servers.len() >= 6;
        let add_server = !add_worker || rng.next_u64().is_multiple_of(2);
        return control
            .scale_out(u32::from(add_worker), u32::from(add_server))
            .await;
    }
    let remove_worker: Vec<WorkerId> = if workers.len() > 1 && !rng.next_u64().is_multiple_of(3) {
        vec![workers[(rng.next_u64() % workers.len() as u64) as usize]]
    } else {
        Vec::new()
    };
    let remove_server: Vec<ServerId> = if servers.len() > 1 && rng.next_u64() % 3 != 2 {
        vec![servers[(rng.next_u64() % servers.len() as u64) as usize]]
    } else {
        Vec::new()
    };
    control.scale_in(&remove_worker, &remove_server).await
}

fn counter_stays_exact_under_random_scale_events(seed: u64, threads: Threads) {
    let config = CounterConfig {
        tasks: 400_000,
        seed,
        ..CounterConfig::default()
    };
    let app = Arc::new(CounterApp::new(config).unwrap());
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 4,
        shards_per_server: 8,
        collect_params: true,
        scar: None,
    };
    let rt = runtime(threads);
    let (events, outcome) = rt.block_on(async {
        let (control, inbox) = job_control();
        let running = spawn_job(app.clone(), job.clone(), inbox);
        let mut rng = SplitMix(seed);
        let mut events = Vec::new();
        while events.len() < 60 && !running.is_finished() {
            match random_event(&control, &mut rng).await {
                Ok(report) => events.push(report),
                Err(e) if running.is_finished() => {
                    eprintln!("the job ended during a scale event: {e}");
                    break;
                }
                Err(e) => panic!("seed {seed}: scale event {} failed: {e}", events.len()),
            }
        }
        let outcome = running.await.unwrap();
        (events, outcome)
    });
    let outcome = outcome.unwrap_or_else(|e| panic!("seed {seed}: the job failed: {e}"));
    let moved: usize = events
        .iter()
        .map(|r| r.executors_moved + r.shards_moved)
        .sum();
    println!(
        "seed {seed}: {} scale events, {moved} moves, {} tasks",
        events.len(),
        outcome.driver.completed()
    );
    assert!(
        events.len() >= 50,
        "seed {seed}: only {} scale events ran before the job ended",
        events.len()
    );
    assert!(
        moved >= events.len(),
        "seed {seed}: events moved almost nothing"
    );
    let params = outcome.params.expect("collected parameters");
    let rows = app
        .verify(&outcome.driver, &params)
        .unwrap_or_else(|diff| panic!("seed {seed}: not exact after scale events:\n{diff}"));
    assert!(rows > 0);
    assert_eq!(outcome.driver.completed(), 400_000);
}

#[test]
fn counter_is_exact_under_sixty_random_scale_events_multi_thread() {
    for seed in [1, 2] {
        counter_stays_exact_under_random_scale_events(seed, Threads::Multi(2));
    }
}

#[test]
fn counter_is_exact_under_sixty_random_scale_events_current_thread() {
    counter_stays_exact_under_random_scale_events(3, Threads::Current);
}

#[test]
fn bad_scale_commands_are_refused_and_leave_the_job_exact() {
    let app = Arc::new(
        CounterApp::new(CounterConfig {
            tasks: 100_000,
            ..CounterConfig::default()
        })
        .unwrap(),
    );
    let job = JobConfig {
        workers: 1,
        servers: 1,
        executors_per_worker: 4,
        shards_per_server: 4,
        collect_params: true,
        scar: None,
    };
    let rt = runtime(Threads::Multi(2));
    let outcome = rt.block_on(async {
        let (control, inbox) = job_control();
        let running = spawn_job(app.clone(), job.clone(), inbox);
        let last_worker = control.scale_in(&[WorkerId(0)], &[]).await.unwrap_err();
        assert!(
            last_worker.to_string().contains("last worker"),
            "{last_worker}"
        );
        let last_server = control.scale_in(&[], &[ServerId(0)]).await.unwrap_err();
        assert!(
            last_server.to_string().contains("last server"),
            "{last_server}"
        );
        let unknown = control.scale_in(&[WorkerId(7)], &[]).await.unwrap_err();
        assert!(unknown.to_string().contains("worker-7"), "{unknown}");
        // Two overlapping commands: one runs, the other is refused or runs after it; both
        // leave every executor and shard with one owner.
        let (a, b) = tokio::join!(control.scale_out(1, 1), control.scale_out(1, 1));
        assert!(a.is_ok() || b.is_ok(), "{a:?} {b:?}");
        for r in [&a, &b] {
            if let Err(e) = r {
                assert!(e.to_string().contains("already running"), "{e}");
            }
        }
        running.await.unwrap()
    });
    let outcome = outcome.unwrap();
    let params = outcome.params.unwrap();
    app.verify(&outcome.driver, &params).unwrap();
}
