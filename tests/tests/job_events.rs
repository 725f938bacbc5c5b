//! The job's events as they happen (`ControlInbox::with_events`): an injected fault and a
//! server's recovery are told while the job runs, once each and equal to what the job's
//! stats report at its end, as are its consistent checkpoints and the one it resumed from;
//! and `harp run --metrics-out` writes them to the file then, so a stopped job's file holds
//! them too. (Scale events across processes: `scar_hand_offs.rs`
//! and the `harp run` tests of `elastic_processes.rs`.)

use harp::{
    job_control, CheckpointOutcome, ConsistentOptions, Fault, FaultTiming, HarpError, Injection,
    JobConfig, JobEvent, Recovery, ScarOptions, Selection, ServerId,
};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{harp_binary, read_json_lines, runtime, spawn_reading_stderr, Threads, PATIENCE};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn counter(tasks: u64, losses_expected: bool) -> Arc<CounterApp> {
    Arc::new(
        CounterApp::new(CounterConfig {
            tasks,
            rows: 200,
            task_sleep_us: 200,
            losses_expected,
            ..CounterConfig::default()
        })
        .unwrap(),
    )
}

fn job(inject: Vec<Injection>) -> JobConfig {
    JobConfig {
        workers: 2,
        servers: 3,
        executors_per_worker: 2,
        shards_per_server: 4,
        collect_params: false,
        scar: Some(ScarOptions {
            period: 4,
            fraction: 0.25,
            selection: Selection::Priority,
            recovery: Recovery::Partial,
            inject,
        }),
    }
}

/// The reports `pick` takes out of `told`, in order.
fn picked<T: Clone>(told: &[JobEvent], pick: impl Fn(&JobEvent) -> Option<&T>) -> Vec<T> {
    told.iter().filter_map(pick).cloned().collect()
}

fn reset_at(at_iteration: u64) -> Injection {
    Injection {
        at_iteration,
        fault: Fault::ResetToInitial {
            fraction: 0.5,
            seed: at_iteration,
        },
        timing: FaultTiming::BeforeRound,
    }
}

/// A job far too long to end by itself hears of its fault while it runs: the test stops it
/// on the event, and it ends stopped.
#[test]
fn a_fault_is_told_while_the_job_runs() {
    let app = counter(100_000_000, true);
    let job = job(vec![reset_at(3)]);
    let (control, inbox) = job_control();
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let inbox = inbox.with_events(events_tx);
    let end = runtime(Threads::Multi(2)).block_on(async move {
        let running = tokio::spawn(async move { harp::run_job_controlled(app, &job, inbox).await });
        // A guard against a hang, not a measurement.
        let event = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .expect("no event within the patience")
            .expect("the events ended before any was told");
        let JobEvent::Fault(report) = event else {
            panic!("the first event is not the fault: {event:?}")
        };
        assert_eq!((report.at_iteration, report.fault), (3, "reset-to-initial"));
        assert!(report.rows_replaced > 0, "{report:?}");
        assert!(!running.is_finished(), "the job ended before its event");
        control.stop("the fault was heard");
        let end = running.await.unwrap();
        (end, std::iter::from_fn(|| events.try_recv().ok()).count())
    });
    match end {
        (Err(HarpError::Stopped { reason, .. }), more) => {
            assert_eq!(reason, "the fault was heard");
            assert_eq!(more, 0, "one fault was injected and no server failed");
        }
        (Err(e), _) => panic!("the job did not end stopped: {e}"),
        (Ok(_), _) => panic!("the job ended by itself"),
    }
}

/// Two faults and a server's failure: each is told once, in order, equal to the report the
/// job's stats give at its end (and the recovery to what the crash command returned).
#[test]
fn every_fault_and_recovery_is_told_once_as_the_stats_report_it() {
    // 20,000 tasks over 4 executors of at least 0.2 ms each: at least a second, so the
    // crash at 0.3 s lands mid-run.
    let app = counter(20_000, true);
    let job = job(vec![reset_at(2), reset_at(5)]);
    let (control, inbox) = job_control();
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let inbox = inbox.with_events(events_tx);
    let (outcome, crash, told) = runtime(Threads::Multi(2)).block_on(async move {
        let running = tokio::spawn(async move { harp::run_job_controlled(app, &job, inbox).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !running.is_finished(),
            "the job ended before the failure was injected; make it longer"
        );
        let crash = control.crash_server(ServerId(1)).await;
        let outcome = running.await.unwrap();
        let told: Vec<JobEvent> = std::iter::from_fn(|| events.try_recv().ok()).collect();
        (outcome, crash, told)
    });
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    let crash = crash.unwrap_or_else(|e| panic!("the crash was refused: {e}"));
    let faults = picked(&told, |e| match e {
        JobEvent::Fault(f) => Some(f),
        _ => None,
    });
    let recoveries = picked(&told, |e| match e {
        JobEvent::ServerRecovered(r) => Some(r),
        _ => None,
    });
    assert_eq!(faults, outcome.stats.injections);
    assert_eq!(
        faults.iter().map(|f| f.at_iteration).collect::<Vec<_>>(),
        [2, 5]
    );
    assert_eq!(recoveries, outcome.stats.recoveries);
    assert_eq!(recoveries, [crash]);
    assert_eq!(
        told.len(),
        3,
        "only the faults and the recovery happened: {told:?}"
    );
}

/// A job that writes consistent checkpoints tells each due one as the report at its end
/// has it; the job resumed from the newest tells that first, before any of its own.
#[test]
fn each_checkpoint_and_the_resume_are_told_as_the_report_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let options = |resume: bool| ConsistentOptions {
        checkpoint_dir: Some(dir.path().to_path_buf()),
        every: 100,
        keep: 10,
        resume_from: resume.then(|| dir.path().to_path_buf()),
        ..ConsistentOptions::default()
    };
    let run = |options: ConsistentOptions, tasks: u64| {
        // No SCAR and no fault: only the checkpoints are events.
        let job = JobConfig {
            scar: None,
            ..job(Vec::new())
        };
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let inbox = job_control().1.with_events(events_tx);
        let app = counter(tasks, false);
        let (_, report) = runtime(Threads::Multi(2))
            .block_on(harp::run_job_consistent_controlled(
                app, &job, &options, inbox,
            ))
            .unwrap_or_else(|e| panic!("the job failed: {e}"));
        let told: Vec<JobEvent> = std::iter::from_fn(|| events.try_recv().ok()).collect();
        (report, told)
    };
    let checkpoints_of = |told: &[JobEvent]| {
        picked(told, |e| match e {
            JobEvent::Checkpoint(c) => Some(c),
            _ => None,
        })
    };

    // 2,000 tasks over 4 executors: 500 iterations, a checkpoint due every 100.
    let (first, told) = run(options(false), 2_000);
    assert!(first.written >= 2, "{first:?}");
    assert_eq!(checkpoints_of(&told), first.checkpoints);
    assert_eq!(told.len(), first.checkpoints.len(), "{told:?}");

    let (second, told) = run(options(true), 4_000);
    let resumed = second.resumed.clone().expect("the job resumed");
    assert!(
        matches!(&told[0], JobEvent::Resumed(r) if *r == resumed),
        "the resume is told first: {told:?}"
    );
    let newest = first
        .checkpoints
        .iter()
        .filter(|c| c.outcome == CheckpointOutcome::Written)
        .map(|c| c.seq)
        .max();
    assert_eq!(Some(resumed.seq), newest);
    assert_eq!(checkpoints_of(&told[1..]), second.checkpoints);
    assert_eq!(told.len(), 1 + second.checkpoints.len(), "{told:?}");
}

/// `harp run --metrics-out` writes a fault's record when it strikes and a checkpoint's when
/// it is written: the file has them while the job still runs, and after SIGTERM stops the
/// job (its end reports never run) they are still there. Before, faults, recoveries and
/// checkpoints were written only at the end.
#[test]
fn harp_run_writes_faults_and_checkpoints_to_the_metrics_file_when_they_happen() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let checkpoints = dir.path().join("checkpoints");
    let mut command = std::process::Command::new(harp_binary!());
    command.args([
        "run",
        "counter",
        "--tasks",
        "100000000",
        "--task-sleep-us",
        "200",
        "--scar-fraction",
        "0.25",
        "--inject",
        "reset:0.5@3",
        "--checkpoint-dir",
        checkpoints.to_str().unwrap(),
        "--checkpoint-every",
        "50",
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let (mut child, lines, reader) = spawn_reading_stderr(&mut command);
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let mut wait_for_line = |start: &str| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.starts_with(start) => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no {start:?} line; the run said:\n{}", seen.join("\n")),
        }
    };
    let fault_line = wait_for_line("fault: ");
    assert!(
        fault_line.starts_with("fault: reset-to-initial at iteration 3: "),
        "{fault_line}"
    );
    let checkpoint_line = wait_for_line("checkpoint 50 (iteration 50): written");
    let records_of = |event: &str| {
        read_json_lines(&metrics)
            .into_iter()
            .filter(|r| r["event"] == event)
            .collect::<Vec<_>>()
    };
    // The line is printed first, so the record may be a moment behind it.
    let written = loop {
        let both = (records_of("fault"), records_of("checkpoint"));
        if !both.1.is_empty() || Instant::now() > deadline {
            break both;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended by itself"
    );
    let (faults, checkpoints) = &written;
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0]["at_iteration"], 3);
    assert_eq!(faults[0]["fault"], "reset-to-initial");
    let first = &checkpoints[0]["checkpoint"];
    assert_eq!(
        (&first["seq"], &first["outcome"]),
        (&serde_json::json!(50), &serde_json::json!("written")),
        "{checkpoint_line}"
    );

    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = harp_tests::wait_exit(&mut child, "the stopped run");
    reader.join().unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    assert_eq!(status.code(), Some(128 + 15), "{}", rest.join("\n"));
    assert_eq!(
        records_of("fault"),
        written.0,
        "the stop kept the fault's record"
    );
    let kept = records_of("checkpoint");
    assert_eq!(
        kept[..written.1.len()],
        written.1[..],
        "the stop kept the checkpoints' records"
    );
    let faults_printed = rest.iter().filter(|l| l.starts_with("fault: ")).count();
    assert_eq!(faults_printed, 0, "the fault was printed twice: {rest:?}");
}
