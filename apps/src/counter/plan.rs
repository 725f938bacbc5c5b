//! What each counter task adds where: a pure function of the seed and the task's sequence
//! number, shared by the driver (to compute expected sums) and the executors (to update).

use harp::{mix64, AppError};

/// Shape of a counter job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterConfig {
    /// Micro-tasks in the whole job.
    pub tasks: u64,
    /// Distinct rows the tasks update.
    pub rows: u64,
    /// Columns per row.
    pub width: usize,
    /// Rows each task updates.
    pub updates_per_task: usize,
    /// Tasks each executor may have dispatched and not yet completed.
    pub window: u32,
    pub seed: u64,
    /// Microseconds each micro-task waits (without holding a thread) before its work: stands
    /// for compute, so a job lasts long enough for scale events (elasticity tests).
    pub task_sleep_us: u64,
    /// Bytes of state each executor carries and moves with it (a checkable pattern; stands
    /// for an app's per-executor state in elasticity tests and the state-transfer bench).
    pub state_bytes: u64,
    /// Tasks read no probe check: for jobs that may lose updates on purpose (a failed server
    /// recovered from SCAR's running checkpoint rolls its rows back), where a probe row may
    /// read less than tasks completed before had added. The final values then differ from
    /// the expected sums by exactly what the failures lost.
    pub losses_expected: bool,
}

impl Default for CounterConfig {
    fn default() -> Self {
        Self {
            tasks: 100_000,
            rows: 1_000,
            width: 4,
            updates_per_task: 8,
            window: 2,
            seed: 1,
            task_sleep_us: 0,
            state_bytes: 0,
            losses_expected: false,
        }
    }
}

impl CounterConfig {
    pub fn validate(&self) -> Result<(), AppError> {
        if self.rows == 0 || self.width == 0 || self.updates_per_task == 0 || self.window == 0 {
            return Err(
                "counter: rows, width, updates per task and window must be at least 1".into(),
            );
        }
        Ok(())
    }
}

/// The `(row, increments)` pairs task `seq` applies; increments are in `1..=100`.
pub fn task_updates(config: &CounterConfig, seq: u64) -> Vec<(u64, Vec<i64>)> {
    let base = mix64(config.seed ^ mix64(seq.wrapping_add(0x9E37_79B9_7F4A_7C15)));
    (0..config.updates_per_task as u64)
        .map(|u| {
            let h = mix64(base ^ u.wrapping_mul(0xA24B_AED4_963E_E407));
            let row = h % config.rows;
            let incs = (0..config.width as u64)
                .map(|c| (mix64(h ^ (c + 1)) % 100) as i64 + 1)
                .collect();
            (row, incs)
        })
        .collect()
}

/// The row task `seq` reads as its consistency probe.
pub fn probe_row(config: &CounterConfig, seq: u64) -> u64 {
    mix64(config.seed.wrapping_mul(31) ^ seq) % config.rows
}
