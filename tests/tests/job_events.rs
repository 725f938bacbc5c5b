//! The job's events as they happen (`ControlInbox::with_events`): an injected fault and a
//! server's recovery are told while the job runs, once each and equal to what the job's
//! stats report at its end; and `harp run --metrics-out` writes them to the file then, so a
//! stopped job's file holds them too. (Scale events across processes: `scar_processes.rs`
//! and the `harp run` tests of `elastic_processes.rs`.)

use harp::{
    job_control, Fault, FaultTiming, HarpError, Injection, JobConfig, JobEvent, Recovery,
    ScarOptions, Selection, ServerId,
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
    let faults: Vec<_> = told
        .iter()
        .filter_map(|e| match e {
            JobEvent::Fault(f) => Some(f.clone()),
            _ => None,
        })
        .collect();
    let recoveries: Vec<_> = told
        .iter()
        .filter_map(|e| match e {
            JobEvent::ServerRecovered(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
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

/// `harp run --metrics-out` writes a fault's record when it strikes: the file has it while
/// the job still runs, and after SIGTERM stops the job (its end reports never run) it is
/// still there. Before, faults and recoveries were written only at a successful end.
#[test]
fn harp_run_writes_a_fault_to_the_metrics_file_when_it_strikes() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
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
        "--metrics-out",
        metrics.to_str().unwrap(),
    ]);
    let (mut child, lines, reader) = spawn_reading_stderr(&mut command);
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let fault_line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.starts_with("fault: ") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no fault line; the run said:\n{}", seen.join("\n")),
        }
    };
    assert!(
        fault_line.starts_with("fault: reset-to-initial at iteration 3: "),
        "{fault_line}"
    );
    let faults_in = |path: &std::path::Path| {
        read_json_lines(path)
            .into_iter()
            .filter(|r| r["event"] == "fault")
            .collect::<Vec<_>>()
    };
    // The line is printed first, so the record may be a moment behind it.
    let written = loop {
        let faults = faults_in(&metrics);
        if !faults.is_empty() || Instant::now() > deadline {
            break faults;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended by itself"
    );
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0]["at_iteration"], 3);
    assert_eq!(written[0]["fault"], "reset-to-initial");

    let term = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = harp_tests::wait_exit(&mut child, "the stopped run");
    reader.join().unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    assert_eq!(status.code(), Some(128 + 15), "{}", rest.join("\n"));
    assert_eq!(faults_in(&metrics), written, "the stop kept the record");
    let faults_printed = rest.iter().filter(|l| l.starts_with("fault: ")).count();
    assert_eq!(faults_printed, 0, "the fault was printed twice: {rest:?}");
}
