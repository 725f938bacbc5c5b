//! `harp-bench elastic`: micro-task throughput of an MLR job while executors or shards move,
//! against the same job's throughput just before, in one process (`JobControl`).
//!
//! One job (`--workers 2 --servers 2 --executors-per-worker 8`, mnist10k, many epochs) runs
//! on 2 runtime threads. Each round measures three windows of `--window-ms`, back to back:
//! steady (no scale event), shard moves (a server joins and leaves again, over and over: its
//! shards move in and out, and the old owners forward meanwhile) and executor moves (a
//! worker joins and leaves again, over and over). Reported: tasks/s of each window, the
//! medians of the rounds' ratios moving/steady (target ≥ 0.8 for the shard moves, Litz's
//! "forwarding" figure), the number of moves, and the median duration of a scale-in event
//! (from the command to the moved load running elsewhere).

use crate::{emit, round_to, rounded, Args};
use anyhow::{anyhow, Result};
use harp::{job_control, JobConfig, JobControl, ScaleReport};
use harp_apps::mlr::{MlrApp, MlrConfig, MlrObserver};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct TaskCount(AtomicU64);

impl MlrObserver for TaskCount {
    fn task_completed(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one kind of scale event did during a window.
#[derive(Default)]
struct Moves {
    events: usize,
    moved: usize,
    scale_in_s: Vec<f64>,
}

impl Moves {
    fn add(&mut self, report: &ScaleReport, scale_in: bool) {
        self.events += 1;
        self.moved += report.executors_moved + report.shards_moved;
        if scale_in {
            self.scale_in_s.push(report.duration_s);
        }
    }
}

/// Tasks/s while `event` runs back to back for `span` (none: a steady window).
async fn tasks_per_s(
    count: &TaskCount,
    span: Duration,
    control: &JobControl,
    event: Option<(u32, u32)>,
    moves: &mut Moves,
) -> Result<f64> {
    let start = Instant::now();
    let before = count.0.load(Ordering::Relaxed);
    while start.elapsed() < span {
        match event {
            Some((workers, servers)) => grow_and_shrink(control, workers, servers, moves).await?,
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let tasks = count.0.load(Ordering::Relaxed) - before;
    Ok(tasks as f64 / start.elapsed().as_secs_f64())
}

async fn grow_and_shrink(
    control: &JobControl,
    workers: u32,
    servers: u32,
    moves: &mut Moves,
) -> Result<()> {
    let out = control.scale_out(workers, servers).await?;
    moves.add(&out, false);
    let (w, s) = control.members().await?;
    let gone_w: Vec<_> = if workers > 0 {
        w.last().copied().into_iter().collect()
    } else {
        Vec::new()
    };
    let gone_s: Vec<_> = if servers > 0 {
        s.last().copied().into_iter().collect()
    } else {
        Vec::new()
    };
    let back = control.scale_in(&gone_w, &gone_s).await?;
    moves.add(&back, true);
    Ok(())
}

pub fn run(args: &Args) -> Result<()> {
    let mut mnist = harp_apps::default_data::mnist10k()?;
    mnist.scale_to_unit();
    let (train, test) = mnist.split_tail_fraction(0.2)?;
    let count = Arc::new(TaskCount::default());
    let config = MlrConfig {
        epochs: 100_000, // stopped by the benchmark
        lr: 0.1,
        ..MlrConfig::default()
    };
    let app = Arc::new(
        MlrApp::new(config, Arc::new(train), Arc::new(test), count.clone())
            .map_err(|e| anyhow!("{e}"))?,
    );
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 8,
        shards_per_server: 8,
        collect_params: false,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let span = Duration::from_millis(args.window_ms.max(50));
    let result = rt.block_on(async {
        let (control, inbox) = job_control();
        let running = tokio::spawn(async move { harp::run_job_controlled(app, &job, inbox).await });
        tokio::time::sleep(span).await; // warm up
        let (mut steady, mut shard_ratio, mut exec_ratio) = (Vec::new(), Vec::new(), Vec::new());
        let (mut shard_moves, mut exec_moves) = (Moves::default(), Moves::default());
        for _ in 0..args.rounds.max(1) {
            let mut none = Moves::default();
            let base = tasks_per_s(&count, span, &control, None, &mut none).await?;
            let shards =
                tasks_per_s(&count, span, &control, Some((0, 1)), &mut shard_moves).await?;
            let executors =
                tasks_per_s(&count, span, &control, Some((1, 0)), &mut exec_moves).await?;
            steady.push(base);
            shard_ratio.push(shards / base);
            exec_ratio.push(executors / base);
        }
        if running.is_finished() {
            return Err(anyhow!("the MLR job ended before the benchmark did"));
        }
        running.abort();
        Ok((steady, shard_ratio, exec_ratio, shard_moves, exec_moves))
    });
    rt.shutdown_background();
    let (steady, shard_ratio, exec_ratio, shard_moves, exec_moves) = result?;
    let median = crate::measure::median;
    emit(json!({
        "bench": "elastic", "in_process": true, "window_ms": span.as_millis() as u64,
        "steady_tasks_per_s": rounded(&steady, 0),
        "shard_moves_ratios": rounded(&shard_ratio, 3),
        "shard_moves_ratio": round_to(median(&shard_ratio), 3), "shard_target_min": 0.8,
        "shard_scale_events": shard_moves.events, "shards_moved": shard_moves.moved,
        "executor_moves_ratios": rounded(&exec_ratio, 3),
        "executor_moves_ratio": round_to(median(&exec_ratio), 3),
        "executor_scale_events": exec_moves.events, "executors_moved": exec_moves.moved,
        "scale_in_s_median": round_to(median(&shard_moves.scale_in_s.iter().chain(&exec_moves.scale_in_s).copied().collect::<Vec<_>>()), 5),
    }));
    Ok(())
}
