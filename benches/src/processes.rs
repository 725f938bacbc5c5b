//! `harp-bench mlr-processes`: an MLR epoch with two node processes against the same
//! workers in one process.
//!
//! Runs the `harp` command that sits next to `harp-bench` (build it with
//! `cargo build --release -p harp-apps`) as `harp run mlr --quiet --epochs E --metrics-out F
//! --threads T` with `--workers 2 --servers 2` (the reference, in one process) and with
//! `--processes 3` (a master and two `harp node` processes, each hosting one worker and one
//! server), back to back in every round, both with `--executors-per-worker E` (default 32)
//! on `--mlr-data` (default the synthetic 200,000×1,000, 100-class benchmark dataset).
//! Every micro-task's parameter traffic is the same whatever the executor count, so the
//! ratio falls as executors per node share more of it: with the built-in mnist10k and one
//! executor per worker an epoch is 9 ms of compute against ~80 fetches and flushes of
//! round trips, and the ratio is about 4 on a 2-core machine. Epoch times are the differences of the metrics
//! file's `elapsed_s`; reported are each run's median epoch and the median of the rounds'
//! ratios processes/in-process (`ratio`, target ≤ 1.3).
//!
//! Also home of [`NodeProcesses`]: `harp node` processes joining a master that runs inside
//! `harp-bench` (the `elastic --across` benchmark).

use crate::child::KilledOnDrop;
use crate::measure::Run;
use crate::{emit, paired, round_to, rounded, Args};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `harp` executable beside this one.
pub(crate) fn harp_exe() -> Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find the harp-bench executable")?;
    let harp = me.with_file_name(format!("harp{}", std::env::consts::EXE_SUFFIX));
    if !harp.is_file() {
        bail!(
            "this benchmark runs the harp command beside harp-bench, expected at {}; build it \
             first with `cargo build --release -p harp-apps`",
            harp.display()
        );
    }
    Ok(harp)
}

/// Runs `harp run mlr` with `shape` and reads the epochs back from its metrics file.
fn run_mlr(harp: &Path, args: &Args, shape: &[&str], metrics: &Path) -> Result<Run> {
    let mut command = Command::new(harp);
    command
        .args(["run", "mlr", "--quiet", "--epochs"])
        .arg(args.epochs.to_string())
        .arg("--threads")
        .arg(args.threads.to_string())
        .arg("--executors-per-worker")
        .arg(args.mlr_executors_per_worker.to_string())
        .arg("--metrics-out")
        .arg(metrics)
        .args(shape);
    if args.mlr_data != "default" {
        command.arg("--data").arg(&args.mlr_data);
    }
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {}", harp.display()))?;
    if !out.status.success() {
        bail!(
            "`harp run mlr {}` failed ({}):\n{}",
            shape.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(metrics)
        .with_context(|| format!("cannot read {}", metrics.display()))?;
    let (mut epoch_s, mut last, mut accuracy) = (Vec::new(), 0.0, 0.0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let record: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("a bad line in {}: {line}", metrics.display()))?;
        // Events (the job's counters at the end) are not epochs.
        if record.get("event").is_some() {
            continue;
        }
        let field = |name: &str| {
            record[name]
                .as_f64()
                .ok_or_else(|| anyhow!("no {name} in {}: {line}", metrics.display()))
        };
        let elapsed = field("elapsed_s")?;
        accuracy = field("accuracy")?;
        epoch_s.push(elapsed - last);
        last = elapsed;
    }
    if epoch_s.is_empty() {
        bail!("`harp run mlr {}` reported no epochs", shape.join(" "));
    }
    Ok(Run { epoch_s, accuracy })
}

pub fn run(args: &Args) -> Result<()> {
    let harp = harp_exe()?;
    let dir = std::env::temp_dir().join(format!("harp-bench-mlr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let in_process = ["--workers", "2", "--servers", "2"];
    let processes = ["--processes", "3"];
    let result = paired(
        args.rounds,
        || run_mlr(&harp, args, &in_process, &dir.join("in-process.jsonl")),
        || run_mlr(&harp, args, &processes, &dir.join("processes.jsonl")),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let p = result?;
    emit(json!({
        "bench": "mlr-processes", "dataset": args.mlr_data,
        "executors_per_worker": args.mlr_executors_per_worker,
        "epochs": args.epochs, "threads_per_process": args.threads,
        "in_process_epoch_s": rounded(&p.reference_s, 4),
        "processes_epoch_s": rounded(&p.candidate_s, 4),
        "ratios": rounded(&p.ratios, 3), "ratio": round_to(p.ratio, 3), "target_max": 1.3,
        "in_process_accuracy": round_to(p.reference_accuracy, 4),
        "processes_accuracy": round_to(p.candidate_accuracy, 4),
    }));
    Ok(())
}

/// `harp node` processes joined to a master at a known address; killed when dropped.
pub(crate) struct NodeProcesses {
    children: Vec<KilledOnDrop>,
    logs: Vec<PathBuf>,
}

impl NodeProcesses {
    /// Starts `count` processes `harp node --join MASTER --credentials CREDS -- RUN_ARGS`;
    /// each one's stderr goes to `dir/node-I.log`.
    pub(crate) fn start(
        dir: &Path,
        credentials: &Path,
        master: SocketAddr,
        count: usize,
        run_args: &[String],
    ) -> Result<NodeProcesses> {
        let harp = harp_exe()?;
        let mut nodes = NodeProcesses {
            children: Vec::with_capacity(count),
            logs: Vec::with_capacity(count),
        };
        for i in 0..count {
            let log_path = dir.join(format!("node-{i}.log"));
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("cannot create {}", log_path.display()))?;
            let child = Command::new(&harp)
                .args(["node", "--join", &master.to_string(), "--credentials"])
                .arg(credentials)
                .arg("--")
                .args(run_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("cannot start {} node", harp.display()))?;
            nodes.children.push(KilledOnDrop::new(child));
            nodes.logs.push(log_path);
        }
        Ok(nodes)
    }

    /// The first node process that has exited: its status and the end of its log.
    pub(crate) fn exited(&mut self) -> Option<String> {
        for (child, log) in self.children.iter_mut().zip(&self.logs) {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: String = text.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Some(format!("a node process exited ({status}): {tail}"));
            }
        }
        None
    }

    /// Process ids (to profile them).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }
}
