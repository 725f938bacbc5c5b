//! The master's side of consistent checkpoints (Litz §4.4): when one is due, holding new
//! dispatches until nothing is in flight, capturing the job, and writing it in the
//! background; and starting a resumed job from its held micro-tasks.
//!
//! When the driver reports an iteration that is due (every `every`-th), the master holds
//! what the driver dispatches from then on (the same hold fault injection uses,
//! [`MasterState::hold`]). Once no routed micro-task is in flight (every completion applied
//! and handed to the driver), no injection runs and no scale event moves anything, the
//! master captures: the driver's state, the held micro-tasks, the version clock and task
//! counter (at once), then every executor's state (its worker saves it between two
//! micro-tasks and keeps running it, `WorkerMsg::Save`; a worker node process sends a
//! small one in its answer and parks a large one for the master to fetch, so a state of
//! any size is captured) and every server's rows. It then
//! routes the held micro-tasks — training goes on — and writes the files on a blocking
//! thread. One write runs at a time; a checkpoint due meanwhile is skipped and counted. A
//! failed capture or write is counted with its error and training goes on; only a worker
//! the master cannot reach ends the job.

use super::inject::Held;
use super::{MasterMsg, MasterState};
use crate::app::{App, Driver};
use crate::consistent::{
    executor_file, CheckpointLayout, CheckpointMeta, CheckpointOutcome, CheckpointRecord,
    ConsistentReport, DRIVER_FILE, HELD_FILE, META_FORMAT, ROWS_FILE,
};
use crate::control::{EventSink, JobEvent};
use crate::error::HarpError;
use crate::server::checkpoint_round::RoundOutcome;
use crate::server::dump_servers;
use crate::worker::{CheckpointedState, WorkerMsg};
use harp_checkpoint::CheckpointStore;
use harp_core::{ExecutorId, ParamKey, RowData, Version, VersionClock, WorkerId};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Where and how often the master writes checkpoints.
pub(crate) struct WriteSetup {
    pub store: CheckpointStore,
    pub every: u64,
    pub layout: CheckpointLayout,
    /// How long a stop waits for the micro-tasks in flight to finish before its last
    /// checkpoint (`ConsistentOptions::stop_wait`); then the job ends without that
    /// checkpoint (a hung micro-task must not keep a stopped job from ending).
    pub stop_wait: std::time::Duration,
}

/// Where a resumed job starts.
pub(crate) struct ResumeStart<Args> {
    /// The micro-tasks held at the checkpoint, routed instead of the initial dispatch.
    pub held: Held<Args>,
    pub iteration: u64,
    pub version: Version,
    pub next_task: u64,
    pub tasks_completed: u64,
}

/// What the job hands the master before it starts (`MasterMsg::Consistent`).
pub(crate) struct ConsistentSetup<A: App> {
    pub write: Option<WriteSetup>,
    pub resume: Option<ResumeStart<A::Args>>,
    pub report: Arc<Mutex<ConsistentReport>>,
    /// A resumed job with SCAR's running checkpoint: the full round run on the restored
    /// rows before the start, the image's first content (`crate::resume::seed_image`).
    pub seed: Option<RoundOutcome>,
    /// The directory a resumed job started from, when it writes its checkpoints elsewhere
    /// (or none): worker recovery takes a dead node's executor states from there until the
    /// job has written a checkpoint of its own.
    pub resumed_from: Option<CheckpointStore>,
}

/// What the job waits for after the master ends: the write still running, if any.
pub(crate) struct ConsistentEnd {
    pub writing: Option<JoinHandle<()>>,
}

/// The master's consistent-checkpoint state.
pub(crate) struct ConsistentCheckpoint<A: App> {
    write: Option<WriteSetup>,
    resume: Option<Held<A::Args>>,
    /// [`ConsistentSetup::resumed_from`].
    resumed_from: Option<CheckpointStore>,
    /// The iteration whose checkpoint waits for the in-flight micro-tasks, and when the
    /// hold began.
    pending: Option<(u64, Instant)>,
    last_iteration: Option<u64>,
    writing: Option<JoinHandle<()>>,
    report: Arc<Mutex<ConsistentReport>>,
    /// Where each checkpoint's record is told as it is counted.
    events: EventSink,
}

impl<A: App> ConsistentCheckpoint<A> {
    /// Whether a checkpoint is due at `iteration` (some multiple of `every` in
    /// `(last reported, iteration]`); records `iteration` as reported.
    fn due(&mut self, iteration: u64) -> bool {
        let Some(write) = &self.write else {
            return false;
        };
        let last = self.last_iteration;
        if last.is_some_and(|last| iteration <= last) {
            return false;
        }
        self.last_iteration = Some(iteration);
        let first = last.map_or(1, |l| l + 1);
        let every = write.every.max(1);
        // The first multiple of `every` at or after `first`.
        let next_multiple = first.div_ceil(every).saturating_mul(every);
        next_multiple <= iteration
    }

    fn record(&self, record: CheckpointRecord) {
        record_told(&self.report, &self.events, record);
    }

    /// Each of `ids`' state in the newest checkpoint that holds one (worker recovery makes
    /// the executor again from it, `App::recover_executor`): in this job's directory, else,
    /// for a resumed job, in the directory it resumed from (the resume point, until the job
    /// has written a checkpoint of its own elsewhere). Only
    /// the manifests (listed once) and those files are read, each checked against its
    /// checksum; a checkpoint whose file cannot be read is passed over with a warning for
    /// the one before. Empty when the job writes no checkpoints; an executor no checkpoint
    /// holds yet is left out. The reads block the master's actor (it recovers meanwhile),
    /// not the other tasks of its runtime ([`blocking_io`]).
    pub(super) fn saved_states_of(
        &self,
        ids: &[ExecutorId],
    ) -> BTreeMap<ExecutorId, CheckpointedState> {
        let written = self.write.as_ref().map(|write| &write.store);
        blocking_io(|| states_written_or_resumed(written, self.resumed_from.as_ref(), ids))
    }

    /// The state to hand back when the job ends.
    pub(crate) fn end(&mut self) -> ConsistentEnd {
        ConsistentEnd {
            writing: self.writing.take(),
        }
    }
}

/// Counts `record` in `report` and tells it to `events`.
fn record_told(report: &Mutex<ConsistentReport>, events: &EventSink, record: CheckpointRecord) {
    lock(report).record(record.clone());
    events.tell(JobEvent::Checkpoint(record));
}

fn lock(report: &Mutex<ConsistentReport>) -> std::sync::MutexGuard<'_, ConsistentReport> {
    report
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a capture collected, ready to write.
struct Captured {
    meta: CheckpointMeta,
    driver: Vec<u8>,
    held: Vec<u8>,
    executors: Vec<(ExecutorId, Vec<u8>)>,
    rows: Vec<u8>,
}

impl<A: App> MasterState<A> {
    /// Installs consistent checkpoints (and the resume point, if any) before the start.
    pub(super) fn configure_consistent(&mut self, setup: ConsistentSetup<A>) {
        if let (Some(seed), Some(checkpoint)) = (setup.seed, self.checkpoint.as_mut()) {
            checkpoint.seed(seed);
        }
        let mut last_iteration = None;
        let mut resume = None;
        if let Some(start) = setup.resume {
            self.clock = VersionClock::starting_at(start.version);
            self.next_task = start.next_task;
            self.completed = start.tasks_completed;
            last_iteration = Some(start.iteration);
            resume = Some(start.held);
        }
        if let Some(resumed) = &lock(&setup.report).resumed {
            self.events.tell(JobEvent::Resumed(resumed.clone()));
        }
        self.consistent = Some(ConsistentCheckpoint {
            write: setup.write,
            resume,
            resumed_from: setup.resumed_from,
            pending: None,
            last_iteration,
            writing: None,
            report: setup.report,
            events: self.events.clone(),
        });
    }

    /// Starts the driver: routes a resumed job's held micro-tasks, or runs the initial
    /// dispatch. Returns whether the job is over.
    pub(super) fn start_driver(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
    ) -> Result<bool, HarpError> {
        let resumed = self.consistent.as_mut().and_then(|c| c.resume.take());
        match resumed {
            Some(held) => {
                for (dispatched, version) in held {
                    self.route(dispatched, version)?;
                }
                Ok(self.in_flight == 0)
            }
            None => self.drive(myself, |d, ctx| d.dispatch_initial_tasks(ctx)),
        }
    }

    /// The driver reported `iteration`: if a checkpoint is due, hold new dispatches from now
    /// on (the caller holds what this callback dispatched) and return true. A checkpoint due
    /// while the previous one is still being written is skipped and counted.
    pub(super) fn consistent_due(&mut self, iteration: u64) -> bool {
        let Some(consistent) = self.consistent.as_mut() else {
            return false;
        };
        if consistent.pending.is_some() || !consistent.due(iteration) {
            return false;
        }
        if consistent
            .writing
            .as_ref()
            .is_some_and(|w| !w.is_finished())
        {
            tracing::warn!(
                iteration,
                "consistent checkpoint skipped: the previous one is still being written"
            );
            consistent.record(CheckpointRecord {
                seq: iteration,
                iteration,
                outcome: CheckpointOutcome::Skipped,
                bytes: 0,
                pause_ms: 0.0,
                write_ms: 0.0,
                error: None,
            });
            return false;
        }
        consistent.pending = Some((iteration, Instant::now()));
        self.held.get_or_insert_with(Vec::new);
        true
    }

    /// Routes the held micro-tasks and runs the deferred iteration's SCAR round — unless a
    /// consistent checkpoint still waits for its capture, which releases them itself.
    pub(super) fn release_held(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
    ) -> Result<(), HarpError> {
        if self.capture_pending() {
            return Ok(());
        }
        for (dispatched, version) in self.held.take().unwrap_or_default() {
            let count = dispatched.len() as u64;
            self.in_flight = self.in_flight.saturating_sub(count);
            self.route(dispatched, version)?;
        }
        if let Some(iteration) = self.deferred_iteration.take() {
            self.iteration_completed(myself, iteration);
        }
        Ok(())
    }

    /// A checkpoint waits and nothing else is in flight or moving: capture now.
    pub(super) fn capture_ready(&self) -> bool {
        if !self.capture_pending()
            || self.injecting
            || self.scale.is_some()
            || !self.moving.is_empty()
        {
            return false;
        }
        self.in_flight == self.held_count()
    }

    /// Micro-tasks the driver dispatched that are held (counted in `in_flight`).
    fn held_count(&self) -> u64 {
        self.held
            .iter()
            .flatten()
            .map(|(dispatched, _)| dispatched.len() as u64)
            .sum()
    }

    /// A checkpoint waits for its capture.
    pub(super) fn capture_pending(&self) -> bool {
        self.consistent
            .as_ref()
            .is_some_and(|c| c.pending.is_some())
    }

    /// The job is being stopped: with checkpoints to write and the driver started, hold what
    /// the driver dispatches from now on, so that one more checkpoint is captured once
    /// nothing is in flight (`capture_ready`), and return true. It is taken at the last
    /// iteration the driver reported (a checkpoint of that iteration is replaced: this one
    /// holds everything after it too), and the job resumes from the point it was stopped
    /// at. A checkpoint still being written is finished first; one waiting for its capture
    /// is the last one.
    pub(super) async fn checkpoint_before_stop(&mut self) -> bool {
        if self.before_start.is_some() {
            return false;
        }
        let Some(consistent) = self.consistent.as_mut() else {
            return false;
        };
        if consistent.write.is_none() {
            return false;
        }
        if let Some(writing) = consistent.writing.take() {
            let _ = writing.await;
        }
        if consistent.pending.is_none() {
            let iteration = consistent.last_iteration.unwrap_or(0);
            consistent.pending = Some((iteration, Instant::now()));
            self.held.get_or_insert_with(Vec::new);
        }
        true
    }

    /// How long a stop waits for its last checkpoint (`ConsistentOptions::stop_wait`).
    pub(super) fn stop_wait(&self) -> std::time::Duration {
        self.consistent
            .as_ref()
            .and_then(|c| c.write.as_ref())
            .map_or(crate::consistent::STOP_WAIT_DEFAULT, |w| w.stop_wait)
    }

    /// A stopped job waited [`Self::stop_wait`] and its last checkpoint is still not
    /// captured: give it up (counted as failed, with why).
    pub(super) fn give_up_stop_checkpoint(&mut self) {
        let unfinished = self.in_flight.saturating_sub(self.held_count());
        let waited_s = self.stop_wait().as_secs_f64();
        let Some(consistent) = self.consistent.as_mut() else {
            return;
        };
        let Some((iteration, held_since)) = consistent.pending.take() else {
            return;
        };
        let why = format!(
            "the job was stopped and {unfinished} micro-tasks were still in flight after {waited_s} s"
        );
        tracing::warn!(iteration, "{why}: it ends without its last checkpoint");
        let pause_ms = held_since.elapsed().as_secs_f64() * 1e3;
        consistent.record(failed(iteration, pause_ms, 0.0, why));
    }

    /// Why the job ends when it is stopped: [`HarpError::Stopped`], once the checkpoint
    /// being written, if any, is written (it is one to resume from).
    pub(super) async fn stopped(&mut self, reason: String) -> HarpError {
        let writing = self.consistent.as_mut().and_then(|c| c.end().writing);
        if let Some(writing) = writing {
            let _ = writing.await;
        }
        tracing::info!(%reason, completed = self.completed, "the job is stopped");
        HarpError::Stopped {
            reason,
            started: self.before_start.is_none(),
            tasks_completed: self.completed,
            checkpoints: self
                .consistent
                .as_ref()
                .map(|c| Box::new(lock(&c.report).clone())),
        }
    }

    /// Captures the job, releases the hold and starts the background write. An error is
    /// returned only when the job cannot go on (a worker the master cannot reach). A job
    /// being stopped keeps its hold: the held micro-tasks run when it is resumed.
    pub(super) async fn capture(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
    ) -> Result<(), HarpError> {
        let Some((iteration, held_since)) = self.consistent.as_mut().and_then(|c| c.pending.take())
        else {
            return Ok(());
        };
        let captured = self.collect(iteration).await;
        let pause_ms = held_since.elapsed().as_secs_f64() * 1e3;
        if self.stopping.is_none() {
            self.release_held(myself)?;
        }
        let captured = match captured {
            Ok(captured) => captured,
            Err(CaptureError::Fatal(e)) => return Err(e),
            Err(CaptureError::Failed(why)) => {
                tracing::warn!(iteration, error = %why, "consistent checkpoint failed; training goes on");
                if let Some(c) = &self.consistent {
                    c.record(failed(iteration, pause_ms, 0.0, why));
                }
                return Ok(());
            }
        };
        let Some(consistent) = self.consistent.as_mut() else {
            return Ok(());
        };
        let Some(write) = &consistent.write else {
            return Ok(());
        };
        let store = write.store.clone();
        let report = consistent.report.clone();
        let events = consistent.events.clone();
        consistent.writing = Some(tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let result = write_checkpoint(&store, iteration, captured);
            let write_ms = started.elapsed().as_secs_f64() * 1e3;
            let record = match result {
                Ok(bytes) => {
                    tracing::info!(
                        iteration,
                        bytes,
                        pause_ms,
                        write_ms,
                        "consistent checkpoint written"
                    );
                    CheckpointRecord {
                        seq: iteration,
                        iteration,
                        outcome: CheckpointOutcome::Written,
                        bytes,
                        pause_ms,
                        write_ms,
                        error: None,
                    }
                }
                Err(e) => {
                    tracing::warn!(iteration, error = %e, "writing a consistent checkpoint failed; training goes on");
                    failed(iteration, pause_ms, write_ms, e)
                }
            };
            record_told(&report, &events, record);
        }));
        Ok(())
    }

    /// Collects everything a checkpoint holds; nothing is in flight.
    async fn collect(&mut self, iteration: u64) -> Result<Captured, CaptureError> {
        let Some(layout) = self
            .consistent
            .as_ref()
            .and_then(|c| c.write.as_ref())
            .map(|w| w.layout)
        else {
            return Err(CaptureError::Failed("no checkpoint directory".into()));
        };
        let driver = match self.driver.as_ref().map(Driver::save_state) {
            Some(Ok(state)) => state,
            Some(Err(e)) => return Err(CaptureError::Failed(format!("the driver's state: {e}"))),
            None => return Err(CaptureError::Failed("the driver is gone".into())),
        };
        let empty = Vec::new();
        let held = postcard::to_allocvec(self.held.as_ref().unwrap_or(&empty))
            .map_err(|e| CaptureError::Failed(format!("the held micro-tasks: {e}")))?;
        let meta = CheckpointMeta {
            format: META_FORMAT,
            iteration,
            version: self.clock.current().0,
            next_task: self.next_task,
            tasks_completed: self.completed,
            layout,
        };
        let executors = self.save_executors().await?;
        let servers = self.servers.iter().map(|(id, actor)| (*id, actor.clone()));
        let mut rows: Vec<(ParamKey, RowData)> = dump_servers(servers)
            .await
            .map_err(|e| CaptureError::Failed(format!("the parameter rows: {e}")))?
            .into_iter()
            .flatten()
            .collect();
        rows.sort_unstable_by_key(|(key, _)| *key);
        let rows = postcard::to_allocvec(&rows)
            .map_err(|e| CaptureError::Failed(format!("the parameter rows: {e}")))?;
        Ok(Captured {
            meta,
            driver,
            held,
            executors,
            rows,
        })
    }

    /// Every executor's saved state, asked of its worker (`WorkerMsg::Save`; a worker node
    /// process sends it, on a stream of its own when it is large), which keeps running it:
    /// nothing is in flight during a capture, so each is saved between two micro-tasks.
    async fn save_executors(&mut self) -> Result<Vec<(ExecutorId, Vec<u8>)>, CaptureError> {
        let placed: Vec<(ExecutorId, WorkerId)> = self.executors.iter().collect();
        let mut asked = Vec::with_capacity(placed.len());
        for (executor, worker) in placed {
            let actor = self
                .workers
                .get(&worker)
                .ok_or(CaptureError::Fatal(HarpError::WorkerUnreachable(worker)))?;
            let (reply, saved) = oneshot::channel();
            actor
                .send_message(WorkerMsg::Save { executor, reply })
                .map_err(|_| CaptureError::Fatal(HarpError::WorkerUnreachable(worker)))?;
            asked.push((executor, worker, saved));
        }
        let mut states = Vec::with_capacity(asked.len());
        let mut failure = None;
        for (executor, worker, saved) in asked {
            let saved = saved
                .await
                .unwrap_or(Err(HarpError::WorkerUnreachable(worker)));
            match saved {
                Ok(state) => states.push((executor, state)),
                Err(e) => {
                    failure.get_or_insert(format!("the state of {executor}: {e}"));
                }
            }
        }
        match failure {
            Some(why) => Err(CaptureError::Failed(why)),
            None => Ok(states),
        }
    }
}

/// Why a capture did not produce a checkpoint.
enum CaptureError {
    /// The checkpoint is lost; training goes on.
    Failed(String),
    /// The job cannot go on.
    Fatal(HarpError),
}

fn failed(iteration: u64, pause_ms: f64, write_ms: f64, why: String) -> CheckpointRecord {
    CheckpointRecord {
        seq: iteration,
        iteration,
        outcome: CheckpointOutcome::Failed,
        bytes: 0,
        pause_ms,
        write_ms,
        error: Some(why),
    }
}

/// Writes and commits checkpoint `seq`; returns its bytes.
fn write_checkpoint(store: &CheckpointStore, seq: u64, captured: Captured) -> Result<u64, String> {
    let meta =
        serde_json::to_value(&captured.meta).map_err(|e| format!("checkpoint metadata: {e}"))?;
    let write = || -> Result<u64, harp_checkpoint::CheckpointError> {
        let mut writer = store.begin(seq)?;
        writer.write_file(DRIVER_FILE, &captured.driver)?;
        writer.write_file(HELD_FILE, &captured.held)?;
        writer.write_file(ROWS_FILE, &captured.rows)?;
        for (executor, state) in &captured.executors {
            writer.write_file(&executor_file(executor.0), state)?;
        }
        let bytes = writer.files().iter().map(|f| f.size).sum();
        writer.commit(meta)?;
        Ok(bytes)
    };
    write().map_err(|e| e.to_string())
}

/// [`ConsistentCheckpoint::saved_states_of`]'s reading: each of `ids` from the newest
/// checkpoint in `written` that holds it, else from `resumed`.
fn states_written_or_resumed(
    written: Option<&CheckpointStore>,
    resumed: Option<&CheckpointStore>,
    ids: &[ExecutorId],
) -> BTreeMap<ExecutorId, CheckpointedState> {
    let mut found = written
        .map(|store| read_saved_states(store, ids))
        .unwrap_or_default();
    if let Some(resumed) = resumed {
        let missing: Vec<ExecutorId> = (ids.iter())
            .filter(|id| !found.contains_key(id))
            .copied()
            .collect();
        if !missing.is_empty() {
            found.extend(read_saved_states(resumed, &missing));
        }
    }
    found
}

/// Each of `ids`' state in the newest checkpoint in `store` that holds a sound copy.
fn read_saved_states(
    store: &CheckpointStore,
    ids: &[ExecutorId],
) -> BTreeMap<ExecutorId, CheckpointedState> {
    let mut found = BTreeMap::new();
    let listed = match store.list() {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the consistent checkpoints; the executors are created afresh");
            return found;
        }
    };
    for &id in ids {
        let name = executor_file(id.0);
        for info in listed
            .iter()
            .rev()
            .filter(|info| info.file(&name).is_some())
        {
            match info.read_file(&name) {
                Ok(state) => {
                    let checkpoint = info.seq;
                    found.insert(id, CheckpointedState { checkpoint, state });
                    break;
                }
                Err(e) => {
                    tracing::warn!(executor = %id, checkpoint = info.seq, error = %e, "cannot read an executor's saved state; trying an older checkpoint");
                }
            }
        }
    }
    found
}

/// Runs `io` (file reads) on this thread; on a multi-threaded runtime the runtime first
/// hands this thread's other tasks to the others (`block_in_place`), so only the caller
/// waits. On a current-thread runtime it just runs.
fn blocking_io<T>(io: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(io)
        }
        _ => io(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_checkpoint::JobIdentity;

    /// Commits checkpoint `seq` with a state `[seq, id]` for each of `executors`.
    fn commit(store: &CheckpointStore, seq: u64, executors: &[u32]) -> std::path::PathBuf {
        let mut writer = store.begin(seq).unwrap();
        for &id in executors {
            writer
                .write_file(&executor_file(id), &[seq as u8, id as u8])
                .unwrap();
        }
        writer.commit(serde_json::json!({})).unwrap().path
    }

    /// Each executor's state comes from the newest checkpoint that holds a sound copy: a
    /// damaged file (checksum) falls back to the checkpoint before, an executor only an
    /// older checkpoint holds is found there, and one none holds is left out.
    #[test]
    fn saved_states_come_from_the_newest_checkpoint_with_a_sound_copy() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            CheckpointStore::create(dir.path(), JobIdentity::new("job", "test"), 3).unwrap();
        commit(&store, 1, &[0, 1, 2]);
        let newest = commit(&store, 2, &[0, 1]);
        let damaged = newest.join(executor_file(1));
        std::fs::write(&damaged, [9u8, 9]).unwrap();

        let ids = [ExecutorId(0), ExecutorId(1), ExecutorId(2), ExecutorId(3)];
        let found = blocking_io(|| read_saved_states(&store, &ids));
        let got: Vec<(u32, u64, Vec<u8>)> = found
            .into_iter()
            .map(|(id, s)| (id.0, s.checkpoint, s.state))
            .collect();
        assert_eq!(
            got,
            vec![(0, 2, vec![2, 0]), (1, 1, vec![1, 1]), (2, 1, vec![1, 2])]
        );
    }

    /// A resumed job that writes its checkpoints into another directory recovers a dead
    /// node's executors from the checkpoint it resumed from until it has written one of its
    /// own, and from its own from then on; an executor neither holds is left out.
    #[test]
    fn states_come_from_the_resumed_directory_until_the_job_wrote_its_own() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let identity = JobIdentity::new("job", "test");
        let resumed = CheckpointStore::create(a.path(), identity.clone(), 3).unwrap();
        commit(&resumed, 4, &[0, 1]);
        let written = CheckpointStore::create(b.path(), identity, 3).unwrap();
        let ids = [ExecutorId(0), ExecutorId(1), ExecutorId(2)];
        let got = |written: Option<&CheckpointStore>, resumed: Option<&CheckpointStore>| {
            (states_written_or_resumed(written, resumed, &ids).into_iter())
                .map(|(id, s)| (id.0, s.checkpoint, s.state))
                .collect::<Vec<_>>()
        };
        let from_resumed = vec![(0, 4, vec![4, 0]), (1, 4, vec![4, 1])];
        assert_eq!(got(Some(&written), Some(&resumed)), from_resumed);
        assert_eq!(
            got(None, Some(&resumed)),
            from_resumed,
            "a job that writes none"
        );
        assert_eq!(got(Some(&written), None), vec![], "nothing resumed");

        commit(&written, 6, &[1]);
        assert_eq!(
            got(Some(&written), Some(&resumed)),
            vec![(0, 4, vec![4, 0]), (1, 6, vec![6, 1])]
        );
    }

    /// In a task of a multi-threaded runtime the read runs in place (`block_in_place`); in
    /// one of a current-thread runtime, where that would panic, and outside any runtime, it
    /// simply runs.
    #[test]
    fn blocking_io_runs_on_either_runtime() {
        for multi in [false, true] {
            let runtime = if multi {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .build()
            } else {
                tokio::runtime::Builder::new_current_thread().build()
            }
            .unwrap();
            let spawned =
                runtime.block_on(async { tokio::spawn(async { blocking_io(|| 7) }).await });
            assert_eq!(spawned.unwrap(), 7);
        }
        assert_eq!(blocking_io(|| 8), 8, "outside a runtime");
    }
}
