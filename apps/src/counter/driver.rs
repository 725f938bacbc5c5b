//! The counter driver: keeps `window` tasks in flight per executor and the exact expected
//! sum of every row over the completions it was handed.

use super::plan::{probe_row, task_updates, CounterConfig};
use super::{CounterArgs, CounterOutput};
use harp::{AppError, Completion, Driver, DriverContext, ExecutorId};
use std::collections::BTreeMap;

pub struct CounterDriver {
    config: CounterConfig,
    num_executors: u32,
    dispatched: u64,
    completed: u64,
    expected: BTreeMap<u64, Vec<i64>>,
}

impl CounterDriver {
    pub fn new(config: CounterConfig, num_executors: u32) -> Self {
        Self {
            config,
            num_executors,
            dispatched: 0,
            completed: 0,
            expected: BTreeMap::new(),
        }
    }

    /// The expected value of every row updated by a completed task.
    pub fn expected(&self) -> &BTreeMap<u64, Vec<i64>> {
        &self.expected
    }

    pub fn completed(&self) -> u64 {
        self.completed
    }

    fn dispatch_next(
        &mut self,
        executor: ExecutorId,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        if self.dispatched >= self.config.tasks {
            return Ok(());
        }
        let seq = self.dispatched;
        self.dispatched += 1;
        let probe = probe_row(&self.config, seq);
        let floor = self
            .expected
            .get(&probe)
            .cloned()
            .unwrap_or_else(|| vec![0; self.config.width]);
        ctx.dispatch(
            executor,
            CounterArgs {
                seq,
                probe_row: probe,
                probe_floor: floor,
            },
        )?;
        Ok(())
    }
}

impl Driver<super::CounterApp> for CounterDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        for _ in 0..self.config.window {
            for e in 0..self.num_executors {
                self.dispatch_next(ExecutorId(e), ctx)?;
            }
        }
        Ok(())
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<CounterOutput>,
        ctx: &mut DriverContext<'_, CounterArgs>,
    ) -> Result<(), AppError> {
        self.completed += 1;
        for (row, incs) in task_updates(&self.config, completion.output.seq) {
            let sums = self
                .expected
                .entry(row)
                .or_insert_with(|| vec![0; self.config.width]);
            for (s, i) in sums.iter_mut().zip(incs) {
                *s += i;
            }
        }
        // An iteration (for SCAR's running checkpoint) is one task per executor.
        let per_iteration = u64::from(self.num_executors.max(1));
        if self.completed.is_multiple_of(per_iteration) {
            ctx.iteration_completed(self.completed / per_iteration);
        }
        if self.completed == self.config.tasks {
            ctx.finish();
            return Ok(());
        }
        self.dispatch_next(completion.executor, ctx)
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let state = (self.dispatched, self.completed, &self.expected);
        Ok(serde_json::to_vec(&state)?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let (dispatched, completed, expected) = serde_json::from_slice(state)?;
        self.dispatched = dispatched;
        self.completed = completed;
        self.expected = expected;
        Ok(())
    }
}
