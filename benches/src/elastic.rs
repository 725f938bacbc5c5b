//! `harp-bench elastic`: micro-task throughput of an MLR job around single scale events,
//! Litz-style (§4.5, "forwarding"): in a steady window before an event, over the event
//! itself, and in a window right after it.
//!
//! The job: MLR on mnist10k (lr 0.1, `--batch`, `--staleness`, epochs enough to outlast the
//! benchmark) with three workers and three servers, 8 executors per worker and 8 shards per
//! server. The weights are 16 rows of 49 features × 10 classes (`--block-features`, default
//! 49 here): with the app's default of one row per 1,638 features, mnist10k's whole model is
//! one row in one shard, and most shard moves would move nothing anyone reads. In one
//! process by default (`run_job_controlled` on `--master-threads` runtime threads, default
//! 2); with `--across`, the master runs here (`run_job_across_controlled` on as many) and three `harp node` processes (the `harp` binary beside `harp-bench`,
//! each a worker and a server with `--threads` threads) talk to it and to each other over
//! QUIC on loopback. Completions are counted where the driver sees them, in this process.
//!
//! After a warm-up of `--window-ms`, each of `--rounds` rounds waits `--gap-ms` (so events are
//! spaced apart), counts completions over a steady window of `--window-ms` ("before"),
//! triggers ONE scale event through [`JobControl::rebalance_onto`] and counts from its start
//! to the master's answer ("during"), then over `--after-ms` right after ("after"). Events
//! alternate between "away" (with `--moving shards`, the default: the last server's shards go
//! to the other two servers; with `--moving executors`: the last worker's executors go to the
//! other two workers) and "back" (a re-balancing onto all three: as many move back). Shard
//! events keep every executor where it is and executor events every shard. The control API
//! has no "move shard S": the smallest shard event it offers is one server's share, 8 of the
//! 24 shards. While a shard moves, its old server forwards its requests to the new owner
//! (over QUIC across processes) until every node has been rerouted: right behind the rows
//! for shards of up to `IN_ORDER_ROWS_MAX` (256 KiB; this bench's are a few KB), else held
//! until the new owner has confirmed the rows. The "after" window shows what the forwarding
//! tail costs.
//!
//! Output: one `elastic-event` JSON line per round (rates, ratios to "before", the event's
//! duration measured here and by the master, what moved) and an `elastic` summary line with
//! the medians of the rounds' ratios (target ≥ 0.8). A "during" window lasts as long as the
//! event, a few milliseconds, and the driver sees completions in batches (one per flush), so
//! one round's window holds a handful of them or none (`tasks_during`) and its ratio jumps
//! between 0 and several. Two figures average that out over the rounds:
//! `during_ratio_pooled` (every round's completions during its event over the events' total
//! time, against the mean "before" rate) and `profile_ratios`, the rate in 10 ms bins from
//! 50 ms before each event's start to 100 ms after it, summed over the rounds, against the
//! summed "before" rates (completion times are recorded for this). `move_ratio`, over the
//! event and the "after" window together, is the per-round figure. Each event's line also
//! gives `host`: what the kernel (direct compaction and reclaim stalls, huge page and major
//! faults) and the job's processes, `master_*` (this one) and `nodes_*` (faults, context
//! switches, CPU time and run-queue waits of all their threads) counted from just before
//! the event to its answer (`host_counters`), to tell an event that waited on the machine
//! from one that waited on harp; the summary sums them (`host_during_events`) and gives the
//! transparent huge page settings (`thp`).

use crate::host_counters::{self, Snapshot};
use crate::processes::NodeProcesses;
use crate::{emit, round_to, rounded, Args};
use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use harp::{job_control, HarpError, JobConfig, JobControl, ScaleReport, ServerId, WorkerId};
use harp_apps::mlr::{MlrApp, MlrConfig, MlrObserver};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// What one scale event moves.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum Moving {
    /// One server's shards (executors stay).
    Shards,
    /// One worker's executors (shards stay).
    Executors,
}

impl Moving {
    fn name(self) -> &'static str {
        match self {
            Moving::Shards => "shards",
            Moving::Executors => "executors",
        }
    }
}

const NODES: u32 = 3;
const EXECUTORS_PER_WORKER: u32 = 8;
const SHARDS_PER_SERVER: u32 = 8;
const LEARNING_RATE: f32 = 0.1;
/// Features per weight row unless `--block-features` says otherwise: 784 / 49 = 16 rows.
const BLOCK_FEATURES: usize = 49;
/// More than any benchmark runs: the job is stopped by the benchmark.
const EPOCHS: u32 = 100_000;

/// Bins of the event-aligned throughput profile: width, and the first bin's start and the
/// last bin's end relative to the event's start.
const PROFILE_BIN_MS: i64 = 10;
const PROFILE_FROM_MS: i64 = -50;
const PROFILE_TO_MS: i64 = 100;

/// Completions as the driver sees them: a count, and each one's time.
#[derive(Default)]
struct TaskCount {
    total: AtomicU64,
    times: Mutex<Vec<Instant>>,
}

impl TaskCount {
    fn get(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The completion times recorded since the last call.
    fn take_times(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.times.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl MlrObserver for TaskCount {
    fn task_completed(&self) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(now);
    }
}

/// Completions per profile bin around `start` (bins of [`PROFILE_BIN_MS`] from
/// [`PROFILE_FROM_MS`] to [`PROFILE_TO_MS`]).
fn profile_counts(times: &[Instant], start: Instant) -> Vec<u64> {
    let bins = ((PROFILE_TO_MS - PROFILE_FROM_MS) / PROFILE_BIN_MS) as usize;
    let mut counts = vec![0; bins];
    for t in times {
        let offset_us = if *t >= start {
            t.duration_since(start).as_micros() as i64
        } else {
            -(start.duration_since(*t).as_micros() as i64)
        };
        let bin = (offset_us - PROFILE_FROM_MS * 1000).div_euclid(PROFILE_BIN_MS * 1000);
        if let Some(count) = usize::try_from(bin).ok().and_then(|b| counts.get_mut(b)) {
            *count += 1;
        }
    }
    counts
}

/// The figures of one round.
struct Round {
    direction: &'static str,
    before: f64,
    during: f64,
    after: f64,
    /// Completions counted over the event.
    tasks_during: u64,
    /// Completions in each profile bin around the event's start.
    profile: Vec<u64>,
    /// From the command to its answer, measured here.
    event_s: f64,
    /// The command's wall-clock time, seconds since the UNIX epoch (to find the event in
    /// the nodes' logs).
    started_unix_s: f64,
    report: ScaleReport,
    /// What the kernel and the job's processes counted from just before the event to just
    /// after its answer (`host_counters`).
    host: Snapshot,
}

impl Round {
    fn during_ratio(&self) -> f64 {
        self.during / self.before
    }

    fn after_ratio(&self) -> f64 {
        self.after / self.before
    }

    /// Throughput over the event and the window after it together, against before.
    fn move_ratio(&self, after_s: f64) -> f64 {
        let tasks = self.during * self.event_s + self.after * after_s;
        tasks / (self.event_s + after_s) / self.before
    }
}

/// A running job the benchmark drives.
struct Running {
    control: JobControl,
    job: JoinHandle<Result<(), HarpError>>,
    /// The node processes of a job across processes.
    nodes: Option<NodeProcesses>,
}

impl Running {
    /// Why the job cannot be measured any more, if it cannot.
    fn broken(&mut self) -> Option<String> {
        if self.job.is_finished() {
            return Some("the MLR job ended before the benchmark did".into());
        }
        self.nodes.as_mut().and_then(NodeProcesses::exited)
    }

    /// The job's processes by role: `master` this one (the master, or the whole job in
    /// one process) and `nodes` the node processes (none in one process).
    fn process_groups(&self) -> Vec<(&'static str, Vec<u32>)> {
        let mut groups = vec![("master", vec![std::process::id()])];
        if let Some(nodes) = &self.nodes {
            groups.push(("nodes", nodes.pids()));
        }
        groups
    }

    fn stop(self) {
        self.job.abort();
        drop(self.nodes); // kills the node processes
    }
}

fn mlr_config(args: &Args) -> MlrConfig {
    MlrConfig {
        epochs: EPOCHS,
        lr: LEARNING_RATE,
        batch: args.batch,
        staleness: args.staleness,
        block_features: Some(args.block_features.unwrap_or(BLOCK_FEATURES)),
        weight_per_row: false,
    }
}

fn mlr_app(args: &Args, count: Arc<TaskCount>) -> Result<Arc<MlrApp>> {
    let mut mnist = harp_apps::default_data::mnist10k()?;
    mnist.scale_to_unit();
    let (train, test) = mnist.split_tail_fraction(0.2)?;
    let app = MlrApp::new(mlr_config(args), Arc::new(train), Arc::new(test), count)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(app))
}

/// The `harp run` arguments of the node processes: the same app as [`mlr_app`] (the CLI's
/// defaults hold out the same 0.2 of the built-in mnist10k, scaled to [-1, 1]).
fn node_run_args(args: &Args) -> Vec<String> {
    let config = mlr_config(args);
    let mut out: Vec<String> = ["run", "mlr", "--quiet", "--test-fraction", "0.2"]
        .map(String::from)
        .to_vec();
    let values = [
        ("--epochs", config.epochs.to_string()),
        ("--lr", config.lr.to_string()),
        ("--batch", config.batch.to_string()),
        ("--staleness", config.staleness.to_string()),
        ("--threads", args.threads.to_string()),
    ];
    for (name, value) in values {
        out.extend([name.to_string(), value]);
    }
    if let Some(features) = config.block_features {
        out.extend(["--block-features".to_string(), features.to_string()]);
    }
    out
}

fn start_in_process(app: Arc<MlrApp>) -> Running {
    let (control, inbox) = job_control();
    let config = JobConfig {
        workers: NODES,
        servers: NODES,
        executors_per_worker: EXECUTORS_PER_WORKER,
        shards_per_server: SHARDS_PER_SERVER,
        // No parameter dump at the end, and whatever else a job has off, as by default.
        ..JobConfig::default()
    };
    let job = tokio::spawn(async move {
        harp::run_job_controlled(app, &config, inbox)
            .await
            .map(|_| ())
    });
    Running {
        control,
        job,
        nodes: None,
    }
}

async fn start_across(app: Arc<MlrApp>, args: &Args, dir: &Path) -> Result<Running> {
    let credentials = dir.join("creds");
    let creds = harp::JobCredentials::generate("harp-bench-elastic")?;
    creds.save(&credentials)?;
    let options = harp::ClusterOptions {
        nodes: NODES,
        executors_per_worker: EXECUTORS_PER_WORKER,
        shards_per_server: SHARDS_PER_SERVER,
        ..harp::ClusterOptions::default()
    };
    let (control, inbox) = job_control();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let job = tokio::spawn(async move {
        // Node failures come from the master's own lease checks only.
        let (_no_outside_reports, failures) = tokio::sync::mpsc::unbounded_channel();
        let listening = |addr| {
            let _ = addr_tx.send(addr);
        };
        harp::run_job_across_controlled(app, &creds, &options, listening, failures, inbox)
            .await
            .map(|_| ())
    });
    let master = addr_rx
        .await
        .map_err(|_| anyhow!("the master did not start"))?;
    let nodes = NodeProcesses::start(
        dir,
        &credentials,
        master,
        NODES as usize,
        &node_run_args(args),
    )?;
    emit(
        json!({"bench": "elastic-nodes", "master": master.to_string(), "node_pids": nodes.pids()}),
    );
    Ok(Running {
        control,
        job,
        nodes: Some(nodes),
    })
}

/// Waits until tasks complete (the nodes joined and the driver started), then `warm_up`.
async fn warm_up(count: &TaskCount, running: &mut Running, warm_up: Duration) -> Result<()> {
    let started = Instant::now();
    while count.get() == 0 {
        if let Some(why) = running.broken() {
            bail!(why);
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("no micro-task completed within 120 s of the start");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(warm_up).await;
    Ok(())
}

/// Completions per second over `span` from now.
async fn rate(count: &TaskCount, span: Duration) -> f64 {
    let start = Instant::now();
    let before = count.get();
    tokio::time::sleep(span).await;
    (count.get() - before) as f64 / start.elapsed().as_secs_f64()
}

type Members = (Vec<WorkerId>, Vec<ServerId>);

/// Where the load goes in an "away" event and in a "back" event.
fn targets(moving: Moving, (workers, servers): Members) -> Result<(Members, Members)> {
    let mut away = (workers.clone(), servers.clone());
    let left = match moving {
        Moving::Shards => away.1.pop().map(|_| away.1.len()),
        Moving::Executors => away.0.pop().map(|_| away.0.len()),
    };
    if left.unwrap_or(0) == 0 {
        bail!("the job needs two {} or more to move them", moving.name());
    }
    Ok((away, (workers, servers)))
}

/// One round: gap, steady window, one event onto `onto`, the window after it.
async fn round(
    count: &TaskCount,
    control: &JobControl,
    args: &Args,
    direction: &'static str,
    onto: &Members,
    processes: &[(&str, &[u32])],
) -> Result<Round> {
    let window = Duration::from_millis(args.window_ms);
    tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
    count.take_times(); // from earlier rounds
    let before = rate(count, window).await;
    let host_before = Snapshot::take(processes);
    let start = Instant::now();
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let first = count.get();
    let report = control.rebalance_onto(&onto.0, &onto.1).await?;
    let tasks_during = count.get() - first;
    let event_s = start.elapsed().as_secs_f64();
    let host = Snapshot::take(processes).since(&host_before);
    let after = rate(count, Duration::from_millis(args.after_ms)).await;
    // The profile needs PROFILE_TO_MS after the start: wait for the rest, if any.
    let profile_end = start + Duration::from_millis(PROFILE_TO_MS as u64);
    tokio::time::sleep_until(profile_end.into()).await;
    Ok(Round {
        profile: profile_counts(&count.take_times(), start),
        direction,
        before,
        during: tasks_during as f64 / event_s,
        after,
        tasks_during,
        event_s,
        started_unix_s,
        report,
        host,
    })
}

/// Checks that an event moved what it was meant to, and nothing else.
fn check_moved(moving: Moving, report: &ScaleReport) -> Result<()> {
    let (wanted, other) = match moving {
        Moving::Shards => (report.shards_moved, report.executors_moved),
        Moving::Executors => (report.executors_moved, report.shards_moved),
    };
    if wanted == 0 || other != 0 {
        bail!(
            "a {} event moved {} executors and {} shards",
            moving.name(),
            report.executors_moved,
            report.shards_moved
        );
    }
    Ok(())
}

async fn measure(count: &TaskCount, running: &mut Running, args: &Args) -> Result<Vec<Round>> {
    warm_up(count, running, Duration::from_millis(args.window_ms)).await?;
    let (away, back) = targets(args.moving, running.control.members().await?)?;
    let groups = running.process_groups();
    let processes: Vec<(&str, &[u32])> = groups.iter().map(|(g, p)| (*g, &p[..])).collect();
    let mut rounds = Vec::with_capacity(args.rounds);
    for i in 0..args.rounds.max(1) {
        let (direction, onto) = if i % 2 == 0 {
            ("away", &away)
        } else {
            ("back", &back)
        };
        let r = round(count, &running.control, args, direction, onto, &processes).await?;
        check_moved(args.moving, &r.report)?;
        if let Some(why) = running.broken() {
            bail!(why);
        }
        emit_round(i, &r, args);
        rounds.push(r);
    }
    Ok(rounds)
}

fn emit_round(index: usize, r: &Round, args: &Args) {
    emit(json!({
        "bench": "elastic-event", "round": index, "moving": args.moving.name(),
        "direction": r.direction,
        "before_tasks_per_s": round_to(r.before, 0), "during_tasks_per_s": round_to(r.during, 0),
        "after_tasks_per_s": round_to(r.after, 0),
        "during_ratio": round_to(r.during_ratio(), 3), "after_ratio": round_to(r.after_ratio(), 3),
        "move_ratio": round_to(r.move_ratio(args.after_ms as f64 / 1e3), 3),
        "tasks_during": r.tasks_during, "started_unix_s": round_to(r.started_unix_s, 6),
        "event_s": round_to(r.event_s, 5), "master_event_s": round_to(r.report.duration_s, 5),
        "shards_moved": r.report.shards_moved, "shard_bytes_moved": r.report.shard_bytes_moved,
        "executors_moved": r.report.executors_moved, "tasks_moved": r.report.tasks_moved,
        // When each move ended (from the event's start, as the master saw it) and the last
        // one: tells a slow event with one slow move from one where every move was slow.
        "moves_done_s": r.report.moves.iter().map(|m| round_to(m.done_at_s, 5)).collect::<Vec<_>>(),
        "slowest_move": r.report.moves.iter().max_by(|a, b| a.done_at_s.total_cmp(&b.done_at_s))
            .map(|m| json!({"kind": m.kind, "item": m.item, "from": m.from, "to": m.to,
                            "done_at_s": round_to(m.done_at_s, 5)})),
        // The kernel's memory stalls and the job's faults and switches over the event.
        "host": r.host.to_json(),
    }));
}

/// The summary line; `logs`: where the nodes' logs were kept (`--keep-logs`).
fn emit_summary(rounds: &[Round], args: &Args, logs: Option<&Path>) {
    let median = crate::measure::median;
    let all = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(f).collect::<Vec<_>>();
    let after_s = args.after_ms as f64 / 1e3;
    let during = all(&Round::during_ratio);
    let after = all(&Round::after_ratio);
    let both = all(&|r| r.move_ratio(after_s));
    let event_s = all(&|r| r.event_s);
    let before_sum: f64 = rounds.iter().map(|r| r.before).sum();
    let during_sum: u64 = rounds.iter().map(|r| r.tasks_during).sum();
    let during_pooled =
        during_sum as f64 / event_s.iter().sum::<f64>() / before_sum * rounds.len() as f64;
    let mut host_total = Snapshot::default();
    for r in rounds {
        host_total.add(&r.host);
    }
    let bin_s = PROFILE_BIN_MS as f64 / 1e3;
    let profile: Vec<f64> = (0..rounds.first().map_or(0, |r| r.profile.len()))
        .map(|b| {
            let tasks: u64 = rounds.iter().map(|r| r.profile[b]).sum();
            tasks as f64 / bin_s / before_sum
        })
        .collect();
    let profile_ms: Vec<i64> = (0..profile.len() as i64)
        .map(|b| PROFILE_FROM_MS + b * PROFILE_BIN_MS)
        .collect();
    emit(json!({
        "bench": "elastic", "in_process": !args.across, "nodes": NODES,
        "moving": args.moving.name(), "rounds": rounds.len(),
        "window_ms": args.window_ms, "after_ms": args.after_ms, "gap_ms": args.gap_ms,
        "block_features": mlr_config(args).block_features,
        "master_threads": args.master_threads,
        "node_threads": args.across.then_some(args.threads),
        "before_tasks_per_s": rounded(&all(&|r| r.before), 0),
        "during_ratios": rounded(&during, 3), "during_ratio": round_to(median(&during), 3),
        "during_ratio_pooled": round_to(during_pooled, 3),
        "after_ratios": rounded(&after, 3), "after_ratio": round_to(median(&after), 3),
        "move_ratios": rounded(&both, 3), "move_ratio": round_to(median(&both), 3),
        "event_s": rounded(&event_s, 5), "event_s_median": round_to(median(&event_s), 5),
        "tasks_during": rounds.iter().map(|r| r.tasks_during).collect::<Vec<_>>(),
        "profile_ms": profile_ms, "profile_ratios": rounded(&profile, 3),
        "node_logs": logs.map(|dir| dir.display().to_string()),
        "host_during_events": host_total.to_json(), "thp": host_counters::thp_settings(),
        "target_min": 0.8,
    }));
}

/// A fresh scratch directory for the credentials and the nodes' logs.
fn scratch_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("harp-bench-elastic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

pub fn run(args: &Args) -> Result<()> {
    if args.window_ms == 0 || args.after_ms == 0 {
        bail!("--window-ms and --after-ms must be at least 1");
    }
    let count = Arc::new(TaskCount::default());
    let app = mlr_app(args, count.clone())?;
    let dir = scratch_dir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.master_threads))
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let mut running = if args.across {
            start_across(app, args, &dir).await?
        } else {
            start_in_process(app)
        };
        let measured = measure(&count, &mut running, args).await;
        running.stop();
        measured
    });
    rt.shutdown_background();
    let kept_logs = args.across && (result.is_err() || args.keep_logs);
    if !kept_logs {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let rounds = result.map_err(|e| {
        if kept_logs {
            e.context(format!("node logs are in {}", dir.display()))
        } else {
            e
        }
    })?;
    emit_summary(&rounds, args, kept_logs.then_some(dir.as_path()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_fall_into_the_bins_around_the_events_start() {
        let start = Instant::now() + Duration::from_secs(1);
        let at = |ms: i64| {
            if ms >= 0 {
                start + Duration::from_millis(ms as u64)
            } else {
                start - Duration::from_millis((-ms) as u64)
            }
        };
        // -55 and 100 are outside; -50 opens the first bin; -1 is in the bin before 0.
        let times: Vec<Instant> = [-55, -50, -41, -1, 0, 9, 10, 99, 100]
            .into_iter()
            .map(at)
            .collect();
        let counts = profile_counts(&times, start);
        assert_eq!(counts.len(), 15);
        assert_eq!(counts[0], 2, "{counts:?}"); // -50, -41
        assert_eq!(counts[4], 1, "{counts:?}"); // -1
        assert_eq!(counts[5], 2, "{counts:?}"); // 0, 9
        assert_eq!(counts[6], 1, "{counts:?}"); // 10
        assert_eq!(counts[14], 1, "{counts:?}"); // 99
        assert_eq!(counts.iter().sum::<u64>(), 7);
    }

    #[test]
    fn an_away_event_leaves_out_the_last_server_or_worker_and_back_is_everyone() {
        let members = (
            vec![WorkerId(0), WorkerId(1), WorkerId(2)],
            vec![ServerId(0), ServerId(1), ServerId(2)],
        );
        let (away, back) = targets(Moving::Shards, members.clone()).unwrap();
        assert_eq!(away, (members.0.clone(), vec![ServerId(0), ServerId(1)]));
        assert_eq!(back, members);
        let (away, _) = targets(Moving::Executors, members.clone()).unwrap();
        assert_eq!(away, (vec![WorkerId(0), WorkerId(1)], members.1.clone()));
        let lone = (vec![WorkerId(0)], vec![ServerId(0)]);
        assert!(targets(Moving::Shards, lone).is_err());
    }
}
