//! Consistent checkpoints (Litz §4.4, DESIGN §2.4 and G1): what a user asks for
//! ([`ConsistentOptions`]), what the job reports ([`ConsistentReport`]), and the on-disk
//! contents of one checkpoint, shared by the master that writes it
//! (`master/consistent.rs`) and the resume that reads it (`resume.rs`).
//!
//! A checkpoint is taken at an iteration boundary the driver reports
//! (`DriverContext::iteration_completed`), every [`ConsistentOptions::every`] iterations:
//! the master holds new dispatches, waits until nothing is in flight, captures the driver,
//! the held micro-tasks, every executor and every shard, then lets training go on while the
//! files are written in the background through `harp-checkpoint` (one write at a time; a
//! checkpoint due while the previous one is still being written is skipped and counted).
//!
//! Files of one checkpoint: `driver` (`Driver::save_state`), `held` (the held micro-tasks
//! with their versions, postcard), `rows` (every parameter row, postcard), `executor-<id>`
//! (`Executor::save_state`), and the manifest's metadata (`CheckpointMeta`, JSON).

use crate::error::HarpError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Format of [`CheckpointMeta`]; a resume refuses any other.
pub(crate) const META_FORMAT: u32 = 1;
/// File holding the driver's saved state.
pub(crate) const DRIVER_FILE: &str = "driver";
/// File holding the held micro-tasks.
pub(crate) const HELD_FILE: &str = "held";
/// File holding every parameter row.
pub(crate) const ROWS_FILE: &str = "rows";

/// File holding executor `id`'s saved state.
pub(crate) fn executor_file(id: u32) -> String {
    format!("executor-{id}")
}

/// Consistent checkpoints of a job (in one process or across processes), and resuming
/// from them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistentOptions {
    /// Write checkpoints into this directory (created if missing; it must not hold another
    /// job's checkpoints unless it is also [`resume_from`](Self::resume_from)). `None`:
    /// write none.
    pub checkpoint_dir: Option<PathBuf>,
    /// A checkpoint every this many iterations (the driver's `iteration_completed`), at
    /// least 1.
    pub every: u64,
    /// Complete checkpoints kept in the directory, at least 1.
    pub keep: usize,
    /// Resume from the newest complete checkpoint in this directory instead of starting
    /// afresh.
    pub resume_from: Option<PathBuf>,
    /// How long a stopped job ([`JobControl::stop`](crate::JobControl::stop)) that writes
    /// checkpoints waits for its micro-tasks in flight to finish, for one last checkpoint to
    /// go on from; after that it ends without it (a failed checkpoint). Zero: a last
    /// checkpoint only if nothing is in flight when the stop comes. Default
    /// [`STOP_WAIT_DEFAULT`] (20 s, within Kubernetes' default 30 s grace period).
    pub stop_wait: std::time::Duration,
}

/// Whether `dir` holds a complete checkpoint of app `app` to resume from (what
/// [`ConsistentOptions::resume_from`] needs; the manifests are read, not the files).
pub fn resumable(dir: &std::path::Path, app: &str) -> bool {
    harp_checkpoint::CheckpointStore::open_for_resume(dir, app, 1).is_ok()
}

/// [`ConsistentOptions::stop_wait`]'s default.
pub const STOP_WAIT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(20);

impl Default for ConsistentOptions {
    fn default() -> Self {
        Self {
            checkpoint_dir: None,
            every: 1,
            keep: 3,
            resume_from: None,
            stop_wait: STOP_WAIT_DEFAULT,
        }
    }
}

impl ConsistentOptions {
    /// Refuses `every == 0` and `keep == 0`.
    pub fn validate(&self) -> Result<(), HarpError> {
        if self.every == 0 {
            return Err(HarpError::InvalidConfig(
                "a checkpoint every 0 iterations: --checkpoint-every must be at least 1".into(),
            ));
        }
        if self.keep == 0 {
            return Err(HarpError::InvalidConfig(
                "keeping 0 checkpoints: --checkpoint-keep must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What happened to one due checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointOutcome {
    /// Committed to the directory.
    Written,
    /// Captured or written with an error (the error says which); training went on.
    Failed,
    /// Not taken: the previous checkpoint was still being written.
    Skipped,
}

/// One due checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckpointRecord {
    /// The checkpoint's sequence number in the directory: its iteration.
    pub seq: u64,
    pub iteration: u64,
    pub outcome: CheckpointOutcome,
    /// Bytes of its files (0 unless written).
    pub bytes: u64,
    /// How long new dispatches were held (from the boundary to the end of the capture).
    pub pause_ms: f64,
    /// How long writing and committing took, in the background.
    pub write_ms: f64,
    /// Why it failed.
    pub error: Option<String>,
}

/// The checkpoint a job resumed from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResumeRecord {
    pub dir: PathBuf,
    /// The seq (= iteration) loaded.
    pub seq: u64,
    /// The version clock at the checkpoint.
    pub version: u64,
    /// Newer checkpoints passed over, newest first: `(seq, why)`.
    pub skipped: Vec<(u64, String)>,
}

/// What the job's consistent checkpoints did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConsistentReport {
    pub written: u64,
    pub failed: u64,
    pub skipped: u64,
    /// Bytes of every written checkpoint.
    pub bytes: u64,
    /// Every due checkpoint, in order.
    pub checkpoints: Vec<CheckpointRecord>,
    /// The checkpoint the job started from, if it resumed.
    pub resumed: Option<ResumeRecord>,
}

impl ConsistentReport {
    /// Adds `record` and counts it.
    pub(crate) fn record(&mut self, record: CheckpointRecord) {
        match record.outcome {
            CheckpointOutcome::Written => {
                self.written += 1;
                self.bytes += record.bytes;
            }
            CheckpointOutcome::Failed => self.failed += 1,
            CheckpointOutcome::Skipped => self.skipped += 1,
        }
        self.checkpoints.push(record);
    }
}

/// The job's shape at its first start: `workers × executors_per_worker` executors and
/// `servers × shards_per_server` shards. A resumed job keeps the checkpoint's executors and
/// shards (and writes this same layout into its own checkpoints) but may place them on
/// more or fewer workers and servers than the checkpointed job had: a job stopped on three
/// nodes goes on on two. Its executors and shards per worker and server must be the
/// checkpoint's (they are the same command's options).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointLayout {
    pub workers: u32,
    pub executors_per_worker: u32,
    pub servers: u32,
    pub shards_per_server: u32,
}

impl CheckpointLayout {
    pub(crate) fn of(config: &crate::JobConfig) -> Self {
        Self {
            workers: config.workers,
            executors_per_worker: config.executors_per_worker,
            servers: config.servers,
            shards_per_server: config.shards_per_server,
        }
    }

    /// The job's executors, `0..num_executors()`.
    pub(crate) fn num_executors(&self) -> u32 {
        self.workers.saturating_mul(self.executors_per_worker)
    }

    /// The job's shards, `0..num_shards()`.
    pub(crate) fn num_shards(&self) -> u32 {
        self.servers.saturating_mul(self.shards_per_server)
    }

    /// What keeps a job shaped `job` from resuming this checkpoint, one entry per field as
    /// `"name: checkpoint A, this job B"`: the executors per worker and the shards per
    /// server. The numbers of workers and servers may differ (the checkpoint's executors
    /// and shards are spread over the job's).
    pub(crate) fn refusals(&self, job: &Self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, saved: u32, now: u32| {
            if saved != now {
                out.push(format!("{name}: checkpoint {saved}, this job {now}"));
            }
        };
        check(
            "executors per worker",
            self.executors_per_worker,
            job.executors_per_worker,
        );
        check(
            "shards per server",
            self.shards_per_server,
            job.shards_per_server,
        );
        out
    }
}

/// The manifest metadata of one consistent checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckpointMeta {
    pub format: u32,
    pub iteration: u64,
    /// The version clock when it was captured.
    pub version: u64,
    /// The next task id the master hands out.
    pub next_task: u64,
    /// Completions handed to the driver so far.
    pub tasks_completed: u64,
    pub layout: CheckpointLayout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_refusals_name_each_per_node_field_and_allow_other_node_counts() {
        let a = CheckpointLayout {
            workers: 2,
            executors_per_worker: 1,
            servers: 2,
            shards_per_server: 8,
        };
        assert!(a.refusals(&a).is_empty());
        let fewer_nodes = CheckpointLayout {
            workers: 1,
            servers: 3,
            ..a
        };
        assert!(a.refusals(&fewer_nodes).is_empty());
        let b = CheckpointLayout {
            servers: 3,
            executors_per_worker: 2,
            shards_per_server: 4,
            ..a
        };
        assert_eq!(
            a.refusals(&b),
            vec![
                "executors per worker: checkpoint 1, this job 2".to_string(),
                "shards per server: checkpoint 8, this job 4".to_string()
            ]
        );
        assert_eq!((a.num_executors(), a.num_shards()), (2, 16));
    }

    #[test]
    fn options_refuse_zero_every_and_keep() {
        assert!(ConsistentOptions::default().validate().is_ok());
        let zero_every = ConsistentOptions {
            every: 0,
            ..Default::default()
        };
        assert!(zero_every.validate().is_err());
        let zero_keep = ConsistentOptions {
            keep: 0,
            ..Default::default()
        };
        assert!(zero_keep.validate().is_err());
    }
}
