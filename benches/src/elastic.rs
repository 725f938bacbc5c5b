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
//!
//! With `--across`, the same MLR job runs with its master here and three worker-and-server
//! nodes talking over QUIC on loopback (the nodes are tasks of this process, exactly as
//! `harp node` runs them): the moving window re-balances the shards onto servers {0, 1} and
//! back onto {0, 1, 2} over and over (executors stay), so every request for a moving shard
//! is forwarded by its old owner over QUIC until every node is rerouted.

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
    if args.across {
        return run_across(args);
    }
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

fn mlr_app(count: Arc<TaskCount>) -> Result<Arc<MlrApp>> {
    let mut mnist = harp_apps::default_data::mnist10k()?;
    mnist.scale_to_unit();
    let (train, test) = mnist.split_tail_fraction(0.2)?;
    let config = MlrConfig {
        epochs: 100_000, // stopped by the benchmark
        lr: 0.1,
        ..MlrConfig::default()
    };
    Ok(Arc::new(
        MlrApp::new(config, Arc::new(train), Arc::new(test), count).map_err(|e| anyhow!("{e}"))?,
    ))
}

/// Shards move onto servers {0, 1} and back onto {0, 1, 2} while executors stay.
async fn shards_away_and_back(control: &JobControl, moves: &mut Moves) -> Result<()> {
    use harp::{ServerId, WorkerId};
    let workers = [WorkerId(0), WorkerId(1), WorkerId(2)];
    let away = control
        .rebalance_onto(&workers, &[ServerId(0), ServerId(1)])
        .await?;
    moves.add(&away, true);
    let back = control
        .rebalance_onto(&workers, &[ServerId(0), ServerId(1), ServerId(2)])
        .await?;
    moves.add(&back, false);
    Ok(())
}

fn run_across(args: &Args) -> Result<()> {
    let count = Arc::new(TaskCount::default());
    let app = mlr_app(count.clone())?;
    let creds = Arc::new(harp::JobCredentials::generate("harp-bench-elastic")?);
    let options = harp::ClusterOptions {
        nodes: 3,
        executors_per_worker: 8,
        shards_per_server: 8,
        ..harp::ClusterOptions::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let span = Duration::from_millis(args.window_ms.max(50));
    let result = rt.block_on(async {
        let (control, inbox) = job_control();
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let running = {
            let (app, creds) = (app.clone(), creds.clone());
            tokio::spawn(async move {
                let (_keep, failures) = tokio::sync::mpsc::unbounded_channel();
                harp::run_job_across_controlled(
                    app,
                    &creds,
                    &options,
                    |addr| {
                        let _ = addr_tx.send(addr);
                    },
                    failures,
                    inbox,
                )
                .await
            })
        };
        let master = addr_rx
            .await
            .map_err(|_| anyhow!("the master did not start"))?;
        let localhost = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        let nodes: Vec<_> = (0..3)
            .map(|_| {
                let (app, creds) = (app.clone(), creds.clone());
                tokio::spawn(async move { harp::run_node(app, &creds, master, localhost).await })
            })
            .collect();
        tokio::time::sleep(span).await; // warm up
        let (mut steady, mut ratios, mut moves) = (Vec::new(), Vec::new(), Moves::default());
        for _ in 0..args.rounds.max(1) {
            let base = tasks_per_s(&count, span, &control, None, &mut Moves::default()).await?;
            let start = Instant::now();
            let before = count.0.load(Ordering::Relaxed);
            while start.elapsed() < span {
                shards_away_and_back(&control, &mut moves).await?;
            }
            let during =
                (count.0.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
            steady.push(base);
            ratios.push(during / base);
        }
        if running.is_finished() {
            return Err(anyhow!("the MLR job ended before the benchmark did"));
        }
        running.abort();
        for node in nodes {
            node.abort();
        }
        Ok((steady, ratios, moves))
    });
    rt.shutdown_background();
    let (steady, ratios, moves) = result?;
    let median = crate::measure::median;
    emit(json!({
        "bench": "elastic", "in_process": false, "nodes": 3, "window_ms": span.as_millis() as u64,
        "steady_tasks_per_s": rounded(&steady, 0),
        "shard_moves_ratios": rounded(&ratios, 3),
        "shard_moves_ratio": round_to(median(&ratios), 3), "shard_target_min": 0.8,
        "shard_scale_events": moves.events, "shards_moved": moves.moved,
        "scale_in_s_median": round_to(median(&moves.scale_in_s), 5),
    }));
    Ok(())
}
