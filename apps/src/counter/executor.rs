//! The counter executor: checks its probe row against the driver's floor, then adds the
//! task's known increments.

use super::ballast::Ballast;
use super::plan::{task_updates, CounterConfig};
use super::{CounterArgs, CounterOutput};
use harp::{AppError, Executor, ParamClient, Table};

pub struct CounterExecutor {
    config: CounterConfig,
    counters: Table<i64>,
    /// The state it carries when it moves (`--state-bytes`; empty by default).
    ballast: Ballast,
}

impl CounterExecutor {
    pub fn new(config: CounterConfig, counters: Table<i64>, ballast: Ballast) -> Self {
        Self {
            config,
            counters,
            ballast,
        }
    }
}

impl Executor<super::CounterApp> for CounterExecutor {
    async fn run_task(
        &mut self,
        args: CounterArgs,
        ps: &mut ParamClient,
    ) -> Result<CounterOutput, AppError> {
        if self.config.task_sleep_us > 0 {
            tokio::time::sleep(std::time::Duration::from_micros(self.config.task_sleep_us)).await;
        }
        let seen = ps.get(&self.counters, args.probe_row).await?;
        let below_floor = seen.iter().zip(&args.probe_floor).any(|(s, f)| s < f);
        if below_floor && !self.config.losses_expected {
            return Err(format!(
                "consistency violation: task {} read row {} = {:?}, but tasks completed before its \
                 dispatch had already added {:?}",
                args.seq,
                args.probe_row,
                seen.as_slice(),
                args.probe_floor
            )
            .into());
        }
        for (row, incs) in task_updates(&self.config, args.seq) {
            ps.update(&self.counters, row, &incs)?;
        }
        self.ballast.tasks_run += 1;
        Ok(CounterOutput {
            seq: args.seq,
            probe_seen: seen.to_vec(),
        })
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        Ok(self.ballast.save())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let (executor, bytes) = (self.ballast.executor(), self.config.state_bytes);
        self.ballast = Ballast::restore(executor, bytes, state.to_vec())?;
        Ok(())
    }

    fn into_saved_state(self) -> Result<Vec<u8>, AppError> {
        Ok(self.ballast.into_saved())
    }
}
