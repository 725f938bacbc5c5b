//! The master actor at a job's end with a checkpoint round still running, against a server
//! that never answers: it waits [`ROUND_AT_END_WAIT`], then ends without the round, which
//! it counts as unfinished (`master/checkpoints.rs`). Time is paused, so the wait passes at
//! once.

use super::checkpoints::ROUND_AT_END_WAIT;
use super::{MasterActor, MasterArgs, MasterMsg};
use crate::app::JobInfo;
use crate::scar::ScarOptions;
use crate::test_support::{FinishAtOnce, OneIteration, SilentServer};
use crate::TableSet;
use harp_core::scar::Selection;
use harp_core::{ExecutorMap, ServerId, ShardMap, WorkerId};
use ractor::Actor;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::oneshot;

#[tokio::test(start_paused = true)]
async fn a_round_a_server_never_answers_is_waited_for_then_counted_unfinished() {
    let (done, end) = oneshot::channel();
    let args = MasterArgs::<OneIteration> {
        driver: FinishAtOnce,
        info: JobInfo {
            num_executors: 1,
            num_workers: 1,
            num_servers: 1,
        },
        tables: Arc::new(TableSet::new()),
        // r = 1, C = 1: a full round after every iteration, so one is due at iteration 1.
        scar: Some(ScarOptions {
            period: 1,
            fraction: 1.0,
            selection: Selection::Full,
            ..ScarOptions::default()
        }),
        worker_recovery: false,
        events: Default::default(),
        done,
    };
    let (master, _) = Actor::spawn(None, MasterActor::<OneIteration>::new(), args)
        .await
        .unwrap();
    let (silent, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
    let began = tokio::time::Instant::now();
    master
        .send_message(MasterMsg::Start {
            workers: BTreeMap::new(),
            executors: ExecutorMap::round_robin(1, &[WorkerId(0)]).unwrap(),
            servers: BTreeMap::from([(ServerId(0), silent.clone())]),
            shards: ShardMap::round_robin(1, &[ServerId(0)]).unwrap(),
            routes: Vec::new(),
            server_places: Vec::new(),
        })
        .unwrap();
    let end = end
        .await
        .expect("the master answers")
        .expect("the job ends well");
    let waited = began.elapsed();
    assert!(
        waited >= ROUND_AT_END_WAIT,
        "the job ended after {waited:?}, before the wait for its round was over"
    );
    let stats = end.checkpoints;
    assert_eq!(
        (stats.rounds, stats.rounds_unfinished),
        (0, 1),
        "the round the server never answered: {stats:?}"
    );
    master.stop(None);
    silent.stop(None);
}
