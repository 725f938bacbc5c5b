//! `harp run counter`: runs the exact-accounting app and fails unless every parameter equals
//! its expected sum, or, after a loss SCAR allows (a server recovered from the running
//! checkpoint, an injected fault), is what that loss allows (`counter::verdict`).

use super::output::RunOutput;
use super::ClusterArgs;
use crate::counter::{CounterApp, CounterConfig, Verdict};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct CounterCliArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Micro-tasks in the job.
    #[arg(long, default_value_t = 100_000)]
    pub tasks: u64,
    /// Distinct counter rows.
    #[arg(long, default_value_t = 1_000)]
    pub rows: u64,
    /// Counters per row.
    #[arg(long, default_value_t = 4)]
    pub width: usize,
    /// Rows each task adds to.
    #[arg(long, default_value_t = 8)]
    pub updates_per_task: usize,
    /// Tasks in flight per executor.
    #[arg(long, default_value_t = 2)]
    pub window: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Microseconds each task waits before its work (stands for compute; for elasticity
    /// tests that need a job to last).
    #[arg(long, default_value_t = 0)]
    pub task_sleep_us: u64,
    /// Bytes of state each executor carries (a pattern checked whenever the executor is
    /// restored after a move); for elasticity tests and the state-transfer benchmark.
    #[arg(long, default_value_t = 0)]
    pub state_bytes: u64,
}

#[derive(serde::Serialize)]
struct CounterReport {
    tasks: u64,
    rows_checked: usize,
    /// Every row at its expected sum.
    exact: bool,
    /// Where a loss was allowed (a server's recovery, an injected fault): how the rows
    /// came out (`None` where they differ from what the losses allow).
    verdict: Option<Verdict>,
    elapsed_s: f64,
    tasks_per_s: f64,
    stats: harp::JobStats,
}

/// The counter app described by the command line.
pub fn build_app(args: &CounterCliArgs) -> Result<Arc<CounterApp>> {
    let config = CounterConfig {
        tasks: args.tasks,
        rows: args.rows,
        width: args.width,
        updates_per_task: args.updates_per_task,
        window: args.window,
        seed: args.seed,
        task_sleep_us: args.task_sleep_us,
        state_bytes: args.state_bytes,
        // A server recovered from the running checkpoint rolls its rows back.
        losses_expected: args.cluster.scar_fraction.is_some(),
    };
    Ok(Arc::new(
        CounterApp::new(config).map_err(|e| anyhow!("{e}"))?,
    ))
}

pub fn run(args: CounterCliArgs) -> Result<()> {
    let app = build_app(&args)?;
    // Scale events are printed and written as they happen (a scheduler or a benchmark may
    // follow them), the report at the end.
    let output = RunOutput::lines(&args.cluster)?;
    let (outcome, checkpoints) = super::execute_app(app.clone(), &args.cluster, true, &output)?;
    let params = outcome
        .params
        .ok_or_else(|| anyhow!("the job returned no parameters to check"))?;
    let checked = app.verdict(&outcome.driver, &params, &outcome.stats);
    let report = CounterReport {
        tasks: outcome.driver.completed(),
        rows_checked: checked.as_ref().map_or(0, |v| v.rows),
        exact: checked
            .as_ref()
            .is_ok_and(|v| v.exact == v.rows && v.unchecked.is_none()),
        verdict: checked.as_ref().ok().cloned(),
        elapsed_s: outcome.stats.elapsed_s,
        tasks_per_s: outcome.driver.completed() as f64 / outcome.stats.elapsed_s.max(1e-9),
        stats: outcome.stats,
    };
    // The counter's one record carries every counter (`stats`).
    let counters = super::traffic_report::CountersRecord::InTheAppsRecord;
    super::report_end(
        &report.stats,
        &args.cluster.inject,
        checkpoints.as_ref(),
        output.metrics(),
        counters,
    )?;
    if let Some(writer) = output.metrics() {
        writer.write(&report)?;
    }
    match checked {
        Ok(verdict) => {
            eprintln!(
                "counter: {} tasks, {} ({:.0} tasks/s)",
                report.tasks,
                verdict.describe(),
                report.tasks_per_s
            );
            Ok(())
        }
        Err(diff) => bail!("counter: parameters differ from the expected sums\n{diff}"),
    }
}
