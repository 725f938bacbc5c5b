//! The master stopping a job that writes consistent checkpoints (`MasterMsg::Stop`): it
//! waits for the micro-tasks in flight to take one last checkpoint, but not for good: a
//! micro-task that never finishes (here, on a worker that never runs it) makes it give that
//! checkpoint up after the job's `ConsistentOptions::stop_wait`, count it as failed and end
//! with `HarpError::Stopped`. Time is paused, so the wait passes at once.

use super::consistent::{ConsistentSetup, WriteSetup};
use super::test_master::{real_servers, start_master};
use super::MasterMsg;
use crate::consistent::{CheckpointLayout, CheckpointOutcome, ConsistentReport, STOP_WAIT_DEFAULT};
use crate::error::HarpError;
use harp_checkpoint::{CheckpointStore, JobIdentity};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_its_last_checkpoint_when_a_micro_task_never_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::create(dir.path(), JobIdentity::new("job", "test"), 3).unwrap();
    // Its one micro-task is dispatched to a worker that never runs it.
    let (master, end) = start_master(real_servers(1).await, Vec::new()).await;
    let report = Arc::new(Mutex::new(ConsistentReport::default()));
    // Shorter than the default, so the test tells the job's wait from the default one.
    let stop_wait = Duration::from_secs(7);
    let setup = ConsistentSetup {
        write: Some(WriteSetup {
            store: store.clone(),
            every: 1_000,
            layout: CheckpointLayout {
                workers: 1,
                executors_per_worker: 1,
                servers: 1,
                shards_per_server: 1,
            },
            stop_wait,
        }),
        resume: None,
        report: report.clone(),
        seed: None,
        resumed_from: None,
    };
    master
        .send_message(MasterMsg::Consistent(Box::new(setup)))
        .unwrap();
    let began = tokio::time::Instant::now();
    master
        .send_message(MasterMsg::Stop {
            reason: "the test".into(),
        })
        .unwrap();
    match end.await.expect("the master answers") {
        Err(e @ HarpError::Stopped { .. }) => {
            assert_eq!(
                e.to_string(),
                "the job was stopped (the test) after 0 completed micro-tasks"
            )
        }
        Err(e) => panic!("not a stop: {e}"),
        Ok(_) => panic!("the job ended by itself"),
    }
    let waited = began.elapsed();
    assert!(
        waited >= stop_wait,
        "it ended after {waited:?}, before the wait for its micro-task was over"
    );
    assert!(
        waited < STOP_WAIT_DEFAULT,
        "it waited {waited:?}: the default, not the job's {stop_wait:?}"
    );
    let report = report.lock().unwrap().clone();
    assert_eq!(report.checkpoints.len(), 1, "{report:?}");
    let record = &report.checkpoints[0];
    assert_eq!(record.outcome, CheckpointOutcome::Failed);
    let why = record.error.as_deref().unwrap_or_default();
    assert!(
        why.contains("1 micro-tasks were still in flight after 7 s"),
        "{why}"
    );
    assert!(store.list().unwrap().is_empty(), "nothing was written");
    master.stop(None);
}
