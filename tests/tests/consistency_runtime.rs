//! The Litz consistency rule (DESIGN §2.1) and exact accounting (§4) on the real in-process
//! runtime, under many cluster shapes, windows and seeds.
//!
//! The counter app checks the rule itself: every task reads a probe row and fails unless it
//! holds at least the sum of the updates of every task the driver saw complete before it
//! dispatched this one. With only 3 to 10 rows, reads and writes of concurrent tasks collide
//! on the same rows all the time, and windows of up to 4 tasks per executor keep many tasks
//! in flight. Each job must succeed (no violation), complete every task, and end exact.
//!
//! Shapes come from a seeded generator; a failure prints the job's full configuration, which
//! replays it (`run_counter_job` with the printed `CounterConfig` and `JobConfig`).

use harp::JobConfig;
use harp_apps::counter::CounterConfig;
use harp_tests::{run_counter_job, SplitMix, Threads};

/// Seed of the shape generator.
const SHAPES_SEED: u64 = 0x11A2_2024;

/// Jobs per runtime flavour.
const JOBS: usize = 60;

fn random_job(rng: &mut SplitMix, job_index: usize) -> (CounterConfig, JobConfig) {
    let config = CounterConfig {
        tasks: rng.range(500, 3_000),
        rows: rng.range(3, 10),
        width: rng.range(1, 3) as usize,
        updates_per_task: rng.range(1, 6) as usize,
        window: rng.range(1, 4) as u32,
        seed: SHAPES_SEED ^ ((job_index as u64) << 8) ^ (rng.next_u64() >> 16),
        ..CounterConfig::default()
    };
    let job = JobConfig {
        workers: rng.range(1, 4) as u32,
        servers: rng.range(1, 4) as u32,
        executors_per_worker: rng.range(1, 8) as u32,
        shards_per_server: rng.range(1, 8) as u32,
        collect_params: true,
        scar: None,
    };
    (config, job)
}

fn many_jobs(threads: Threads, stream: u64) {
    let mut rng = SplitMix(SHAPES_SEED ^ stream);
    let mut failures = Vec::new();
    for i in 0..JOBS {
        let (config, job) = random_job(&mut rng, i);
        match run_counter_job(&config, &job, threads) {
            Ok(summary) if summary.completed == config.tasks => {
                assert_eq!(summary.stats.tasks_completed, config.tasks);
                assert_eq!(summary.stats.final_version, config.tasks);
                assert!(summary.rows_checked as u64 <= config.rows);
            }
            Ok(summary) => failures.push(format!(
                "counter {config:?} on {job:?} with {threads:?}: {} of {} tasks completed",
                summary.completed, config.tasks
            )),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {JOBS} jobs failed (shape seed {SHAPES_SEED:#x}, stream {stream}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn many_shapes_on_one_thread_keep_consistency_and_exactness() {
    many_jobs(Threads::Current, 1);
}

#[test]
fn many_shapes_on_two_threads_keep_consistency_and_exactness() {
    many_jobs(Threads::Multi(2), 2);
}

#[test]
fn many_shapes_on_four_threads_keep_consistency_and_exactness() {
    // More threads than cores: preemption interleaves tasks in more ways.
    many_jobs(Threads::Multi(4), 3);
}

#[test]
fn one_row_many_writers() {
    // The extreme collision: every task of 3 workers x 8 executors reads and adds to row 0.
    for (window, seed) in [(1, 11), (2, 12), (4, 13)] {
        let config = CounterConfig {
            tasks: 1_500,
            rows: 1,
            width: 2,
            updates_per_task: 3,
            window,
            seed,
            ..CounterConfig::default()
        };
        let job = JobConfig {
            workers: 3,
            servers: 2,
            executors_per_worker: 8,
            shards_per_server: 1,
            collect_params: true,
            scar: None,
        };
        let summary =
            run_counter_job(&config, &job, Threads::Multi(2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(summary.completed, config.tasks);
        assert_eq!(summary.rows_checked, 1);
    }
}

#[test]
fn many_workers_flushing_at_once() {
    // One executor per worker and a window of one: every worker's task count drops to zero
    // after each task, so workers flush the node's shared update log concurrently all the
    // time. A completion must never be reported before the flush carrying its updates is
    // applied, whichever flush drained them.
    for (workers, threads, seed) in [
        (2, Threads::Multi(2), 20),
        (4, Threads::Multi(2), 21),
        (6, Threads::Multi(4), 22),
        (8, Threads::Multi(3), 23),
    ] {
        let config = CounterConfig {
            tasks: 20_000,
            rows: 5,
            width: 2,
            updates_per_task: 4,
            window: 1,
            seed,
            ..CounterConfig::default()
        };
        let job = JobConfig {
            workers,
            servers: 3,
            executors_per_worker: 1,
            shards_per_server: 2,
            collect_params: true,
            scar: None,
        };
        let summary = run_counter_job(&config, &job, threads).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(summary.completed, config.tasks);
    }
}
