//! Acceptance of the counter app, harp's exact-accounting oracle (DESIGN §4): after a job,
//! every counter row must equal the sum of the updates of the tasks reported complete.

use harp::JobConfig;
use harp_apps::counter::CounterConfig;
use harp_tests::{
    harp_binary, read_json_lines, run_counter_job, run_process, run_with_metrics, Threads,
};

#[test]
fn hundred_thousand_tasks_on_four_workers_four_servers_sixteen_executors_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("counter.jsonl");
    let out = run_process(
        &harp_binary!(),
        [
            "run".as_ref(),
            "counter".as_ref(),
            "--workers".as_ref(),
            "4".as_ref(),
            "--servers".as_ref(),
            "4".as_ref(),
            "--executors-per-worker".as_ref(),
            "16".as_ref(),
            "--tasks".as_ref(),
            "100000".as_ref(),
            "--metrics-out".as_ref(),
            metrics.as_os_str(),
        ]
        .map(std::ffi::OsStr::to_os_string),
    );
    assert!(
        out.status.success(),
        "harp run counter failed:\n{}",
        out.describe()
    );
    let records = read_json_lines(&metrics);
    assert_eq!(records.len(), 1, "one record per run: {records:#?}");
    let record = &records[0];
    assert_eq!(record["exact"], serde_json::json!(true), "{record}");
    assert_eq!(record["tasks"], serde_json::json!(100_000), "{record}");
    assert_eq!(
        record["stats"]["tasks_completed"],
        serde_json::json!(100_000),
        "{record}"
    );
    assert_eq!(
        record["stats"]["node"]["updates_rejected"],
        serde_json::json!(0),
        "{record}"
    );
    // Every task's 8 updates were recorded (the default --updates-per-task).
    assert_eq!(
        record["stats"]["node"]["updates_recorded"],
        serde_json::json!(800_000),
        "{record}"
    );
    let rows = record["rows_checked"].as_u64().unwrap_or(0);
    assert!(rows > 0 && rows <= 1000, "rows_checked {rows}: {record}");
}

#[test]
fn a_grid_of_small_shapes_is_exact() {
    let mut failures = Vec::new();
    let mut jobs = 0;
    for workers in 1..=3u32 {
        for servers in 1..=3u32 {
            for executors_per_worker in 1..=4u32 {
                for window in 1..=3u32 {
                    let config = CounterConfig {
                        tasks: 2_000,
                        rows: 64,
                        width: 3,
                        updates_per_task: 4,
                        window,
                        seed: u64::from(
                            workers * 1000 + servers * 100 + executors_per_worker * 10 + window,
                        ),
                        ..CounterConfig::default()
                    };
                    let job = JobConfig {
                        workers,
                        servers,
                        executors_per_worker,
                        shards_per_server: 4,
                        collect_params: true,
                        scar: None,
                    };
                    jobs += 1;
                    match run_counter_job(&config, &job, Threads::Multi(2)) {
                        Ok(summary) => {
                            if summary.completed != config.tasks
                                || summary.stats.tasks_completed != config.tasks
                                || summary.rows_checked == 0
                            {
                                failures.push(format!(
                                    "{job:?} window {window}: completed {} (stats {}), rows {}",
                                    summary.completed,
                                    summary.stats.tasks_completed,
                                    summary.rows_checked
                                ));
                            }
                        }
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    assert_eq!(jobs, 108);
    assert!(
        failures.is_empty(),
        "{} of {jobs} counter jobs were not exact:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn verify_detects_a_wrong_parameter() {
    // The oracle itself must be able to fail: tamper with one collected row.
    let config = CounterConfig {
        tasks: 200,
        rows: 16,
        width: 2,
        updates_per_task: 3,
        window: 2,
        seed: 5,
        ..CounterConfig::default()
    };
    let app = std::sync::Arc::new(harp_apps::counter::CounterApp::new(config).unwrap());
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 2,
        shards_per_server: 2,
        collect_params: true,
        scar: None,
    };
    let outcome = harp_tests::runtime(Threads::Multi(2))
        .block_on(harp::run_job(app.clone(), &job))
        .unwrap_or_else(|e| panic!("counter job failed: {e}"));
    let mut params = outcome.params.expect("collected parameters");
    assert!(app.verify(&outcome.driver, &params).is_ok());
    let key = *params
        .rows
        .keys()
        .next()
        .expect("at least one row was updated");
    match params.rows.get_mut(&key) {
        Some(harp::RowData::I64(values)) => values[0] += 1,
        other => panic!("row {key:?} is not an i64 row: {other:?}"),
    }
    let diff = app
        .verify(&outcome.driver, &params)
        .expect_err("an off-by-one row must be reported");
    assert!(diff.contains(&format!("row {}", key.row)), "{diff}");
}

#[test]
fn zero_tasks_is_an_empty_exact_job() {
    let config = CounterConfig {
        tasks: 0,
        ..CounterConfig::default()
    };
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 2,
        ..JobConfig::default()
    };
    let summary = run_counter_job(&config, &job, Threads::Multi(2)).unwrap();
    assert_eq!((summary.completed, summary.rows_checked), (0, 0));
    assert_eq!(summary.stats.tasks_completed, 0);
}

/// `harp run counter` after an injected loss: the rows the fault rolled back are below their
/// sums, none above, and the run says so and succeeds (before, any loss SCAR allows failed
/// the run with "parameters differ from the expected sums"); a real server's recovery:
/// `tests/tests/multi_host.rs`.
#[test]
fn an_injected_loss_is_reported_as_the_loss_scar_allows() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let args = [
        "run",
        "counter",
        "--tasks",
        "5000",
        "--scar-fraction",
        "0.25",
        "--inject",
        "lose:0.5@3",
    ];
    let (out, reports) = run_with_metrics(&harp_binary!(), &args, &metrics, "rows_checked");
    let report = &reports[0];
    assert_eq!(report["exact"], false, "{report}");
    let verdict = &report["verdict"];
    let below = verdict["below"].as_u64().unwrap();
    assert!(below > 0, "the fault lost nothing: {report}");
    assert_eq!(verdict["exact"].as_u64().unwrap() + below, 1000, "{report}");
    assert!(verdict["missing"].as_i64().unwrap() > 0, "{report}");
    let line = format!(
        "below their sums where a loss is allowed, missing {}",
        verdict["missing"]
    );
    assert!(out.stderr.contains(&line), "{}", out.describe());
    assert!(out.stderr.contains("; none above"), "{}", out.describe());
}
