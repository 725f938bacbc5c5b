//! SCAR in a running job (SCAR §5.4, DESIGN §2.4): the options of the running checkpoint,
//! what it did, and the report of each partial recovery.
//!
//! A job with [`ScarOptions`] (`JobConfig::scar`) keeps a running checkpoint: every
//! `r·C` iterations the driver reports (`DriverContext::iteration_completed`), the master
//! runs one checkpoint round over the servers (`server::checkpoint_round`) without stopping
//! training, and keeps every saved row (the checkpoint's image). When a server fails, only
//! its shards are re-created on the live servers from that image ([`ServerRecovery`]).
//! The rounds, their failures and their bytes are counted in [`CheckpointStats`].

use crate::error::HarpError;
use harp_core::scar::{checkpoint_schedule, RecoveryReport, Selection};

/// How a job keeps SCAR's running checkpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScarOptions {
    /// `C`: a full checkpoint's period in iterations (the budget: the saved bytes per
    /// iteration of a full checkpoint every `C` iterations).
    pub period: u64,
    /// `r` in `(0, 1]`: each round saves this fraction of the rows, every `r·C` iterations.
    pub fraction: f64,
    /// Which rows a round saves.
    pub selection: Selection,
}

impl Default for ScarOptions {
    fn default() -> Self {
        Self {
            period: 8,
            fraction: 0.125,
            selection: Selection::Priority,
        }
    }
}

impl ScarOptions {
    /// The interval between rounds in iterations (`r·C`, at least 1); refuses a fraction
    /// outside `(0, 1]` or a period of 0.
    pub fn interval(&self) -> Result<u64, HarpError> {
        checkpoint_schedule(self.period, self.fraction)
            .map_err(|e| HarpError::InvalidConfig(format!("SCAR checkpoints: {e}")))
    }
}

/// What the running checkpoint did during a job.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CheckpointStats {
    /// Rounds that saved rows.
    pub rounds: u64,
    /// Rounds that failed before saving (a server unreachable, e.g. a failed one).
    pub rounds_failed: u64,
    /// Rounds due while the previous one still ran (not run; the next due one is).
    pub rounds_skipped: u64,
    /// Rows saved over all rounds (a row saved twice counts twice).
    pub rows_saved: u64,
    /// Bytes of the saved values over all rounds.
    pub bytes_saved: u64,
    /// Rows the checkpoint holds a saved value for now (the others are at their initial
    /// value in it).
    pub rows_held: usize,
    /// The last iteration the driver reported complete.
    pub last_iteration: Option<u64>,
}

/// One partial recovery: a failed server's shards re-created on the live servers from the
/// running checkpoint (SCAR §5.4.1).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ServerRecovery {
    /// The server that failed.
    pub server: u32,
    /// `(shard, new server)` for each of its shards.
    pub shards: Vec<(u32, u32)>,
    /// Rows re-created at their saved value (the others start again at their initial
    /// value).
    pub rows_restored: usize,
    /// Bytes of those rows.
    pub bytes_restored: u64,
    /// Seconds from the failure being handled to the shards being served again.
    pub duration_s: f64,
    /// The perturbation, when the values at the failure are known (an injected failure
    /// answers with them; a process that died does not): every row the server held,
    /// compared with what replaced it (its saved value, or its initial value if it was
    /// never saved).
    pub lost: Option<LostValues>,
}

/// How far a recovery moved the lost rows, when their values at the failure are known.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LostValues {
    /// Per table (by name): the distance between the values at the failure and the
    /// restored ones, in the table's norm (see [`RecoveryReport`]).
    pub tables: Vec<(String, RecoveryReport)>,
    /// `Σ (value at failure − restored value)` over every scalar of the lost rows: for
    /// tables updated by addition only, the sum of the updates the failure lost.
    pub lost_sum: f64,
}
