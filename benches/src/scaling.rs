//! `harp-bench scale-in` and `harp-bench scale-out`: MLR jobs of real `harp` processes that
//! shrink and grow while they train (Litz §4.5.1).
//!
//! Both run the `harp` command beside `harp-bench` (`cargo build --release -p harp-apps`):
//! a master `harp run mlr --nodes N` and `harp node` processes this benchmark starts itself,
//! so it knows which process is which node.
//!
//! * **scale-in**: a job on one node; in each round a second node joins (and gets load),
//!   then `harp scale --remove` sends it away; measured is the time from starting the
//!   command to the removed process's exit (target ≤ 1 s; Litz reports 2.5 s).
//! * **scale-out**: a static run on 1 node (the trigger is set at 30% of its time), a
//!   static run on 2 nodes (its epoch time for the rest), and the elastic run: 1 node, a
//!   second joins at the trigger. All three have the same executors (`--mlr-executors-per-
//!   worker` in all: the static 2-node run gives each worker half), as a job that grows
//!   keeps its executors and moves half of them. Ideal = time at the trigger + the epochs left at the
//!   trigger × the 2-node epoch time; reported is elastic total / ideal (target ≤ 1.05).

use crate::child::KilledOnDrop;
use crate::{emit, median, round_to, rounded, Args};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `harp run` master.
pub(crate) struct Master {
    pub child: KilledOnDrop,
    addr: String,
    lines: mpsc::Receiver<String>,
    started: Instant,
}

/// The `harp run` command line of a job whose processes a benchmark starts itself.
pub(crate) struct Job {
    harp: PathBuf,
    credentials: PathBuf,
    run_args: Vec<String>,
}

impl Job {
    /// A job of `harp run ARGS` (the app and its options), with fresh credentials in `dir`.
    pub(crate) fn from_run_args(dir: &Path, run_args: Vec<String>) -> Result<Job> {
        let credentials = dir.join("creds");
        harp::JobCredentials::generate("harp-bench")?.save(&credentials)?;
        Ok(Job {
            harp: crate::processes::harp_exe()?,
            credentials,
            run_args,
        })
    }

    fn new(args: &Args, dir: &Path, epochs: u32) -> Result<Job> {
        Self::with_executors(args, dir, epochs, args.mlr_executors_per_worker)
    }

    /// A job whose workers get `executors_per_worker` executors each at the start.
    fn with_executors(
        args: &Args,
        dir: &Path,
        epochs: u32,
        executors_per_worker: u32,
    ) -> Result<Job> {
        let credentials = dir.join("creds");
        harp::JobCredentials::generate("harp-bench-scale")?.save(&credentials)?;
        let mut run_args: Vec<String> = [
            "run",
            "mlr",
            "--quiet",
            "--epochs",
            &epochs.to_string(),
            "--threads",
            &args.threads.to_string(),
            "--executors-per-worker",
            &executors_per_worker.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if args.mlr_data != "default" {
            run_args.extend(["--data".to_string(), args.mlr_data.clone()]);
        }
        Ok(Job {
            harp: crate::processes::harp_exe()?,
            credentials,
            run_args,
        })
    }

    /// Starts the master for `nodes` nodes and waits until it listens.
    pub(crate) fn master(&self, nodes: u32, metrics: &Path) -> Result<Master> {
        let mut child = KilledOnDrop::new(
            Command::new(&self.harp)
                .args(&self.run_args)
                .arg("--nodes")
                .arg(nodes.to_string())
                .arg("--credentials")
                .arg(&self.credentials)
                .arg("--metrics-out")
                .arg(metrics)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("cannot start the master")?,
        );
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let started = Instant::now();
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(120))
                .map_err(|_| anyhow!("the master did not say where it listens"))?;
            if let Some(rest) = line.split("master listening on ").nth(1) {
                let addr = rest
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                return Ok(Master {
                    child,
                    addr,
                    lines,
                    started,
                });
            }
        }
    }

    pub(crate) fn node(&self, master: &Master) -> Result<KilledOnDrop> {
        let child = Command::new(&self.harp)
            .args(["node", "--join", &master.addr, "--credentials"])
            .arg(&self.credentials)
            .arg("--")
            .args(&self.run_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start a node")?;
        Ok(KilledOnDrop::new(child))
    }

    pub(crate) fn scale(&self, master: &Master, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.harp)
            .args(["scale", "--job", &master.addr, "--credentials"])
            .arg(&self.credentials)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("cannot run harp scale")?;
        if !out.status.success() {
            bail!(
                "harp scale {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until `harp scale` lists `count` nodes, none leaving.
    pub(crate) fn wait_nodes(&self, master: &Master, count: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(listed) = self.scale(master, &[]) {
                let nodes = listed.matches("worker").count();
                if nodes == count && !listed.contains("leaving") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("the job never had {count} nodes")
    }
}

/// Epochs of the short 1-node run that sizes `scale-out` when `--scale-out-epochs` is not
/// given.
const CALIBRATION_EPOCHS: u32 = 5;

/// The time of each epoch but the first (which also pays the job's start) from the
/// epochs' end times.
fn epoch_times(ends: &[f64]) -> Vec<f64> {
    ends.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Epochs of `epoch_s` each that take at least `min_s` (10% over, for the epochs of a long
/// run that come out faster than the calibration's), at least 10.
fn epochs_for(min_s: f64, epoch_s: f64) -> Result<u32> {
    if !(epoch_s > 0.0 && epoch_s.is_finite()) {
        bail!("the calibration run measured an epoch of {epoch_s} s; pass --scale-out-epochs");
    }
    let epochs = (1.1 * min_s / epoch_s).ceil().max(10.0);
    if epochs > f64::from(u32::MAX) {
        bail!("{min_s} s is {epochs} epochs of {epoch_s} s; pass --scale-out-epochs");
    }
    Ok(epochs as u32)
}

fn finish(mut master: Master, nodes: Vec<KilledOnDrop>) -> Result<f64> {
    let status = master.child.wait()?;
    let total = master.started.elapsed().as_secs_f64();
    for mut node in nodes {
        let _ = node.wait();
    }
    if !status.success() {
        let rest: Vec<String> = master.lines.try_iter().collect();
        bail!("the master failed: {}", rest.join("\n"));
    }
    Ok(total)
}

/// Each epoch's end, in seconds since the job's start, from the metrics file.
fn epoch_ends(metrics: &Path) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(metrics)
        .with_context(|| format!("cannot read {}", metrics.display()))?;
    let mut ends = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let record: serde_json::Value = serde_json::from_str(line)?;
        // Events (scale, the job's counters at the end) are not epochs.
        if record.get("event").is_some() {
            continue;
        }
        if let Some(e) = record["elapsed_s"].as_f64() {
            ends.push(e);
        }
    }
    Ok(ends)
}

pub(crate) fn temp_dir(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("harp-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

pub fn scale_in(args: &Args) -> Result<()> {
    let dir = temp_dir("scale-in")?;
    let job = Job::new(args, &dir, 10_000)?;
    let master = job.master(1, &dir.join("metrics.jsonl"))?;
    let first = job.node(&master)?;
    job.wait_nodes(&master, 1)?;
    let mut to_exit = Vec::new();
    let mut command = Vec::new();
    for round in 0..args.rounds.max(1) * 3 {
        let mut node = job.node(&master)?;
        job.wait_nodes(&master, 2)?;
        // Let it train a little with its new load.
        std::thread::sleep(Duration::from_millis(500));
        let id = (round + 1).to_string();
        let began = Instant::now();
        job.scale(&master, &["--remove", &id])?;
        command.push(began.elapsed().as_secs_f64());
        let status = node.wait()?;
        to_exit.push(began.elapsed().as_secs_f64());
        if !status.success() {
            bail!("the removed node exited with {status}");
        }
    }
    drop((master, first)); // killed: the job would train on
    let _ = std::fs::remove_dir_all(&dir);
    emit(json!({
        "bench": "scale-in", "dataset": args.mlr_data,
        "executors_per_worker": args.mlr_executors_per_worker,
        "command_s": rounded(&command, 4), "to_exit_s": rounded(&to_exit, 4),
        "median_to_exit_s": round_to(median(&to_exit), 4), "target_max_s": 1.0,
        "litz_s": 2.5,
    }));
    Ok(())
}

pub fn scale_out(args: &Args) -> Result<()> {
    let dir = temp_dir("scale-out")?;
    // The job keeps its executors when it grows, so the static runs have the same number:
    // `--mlr-executors-per-worker` in all, split over the nodes.
    let run_static = |nodes: u32, epochs: u32, name: &str| -> Result<Vec<f64>> {
        let per_worker = (args.mlr_executors_per_worker / nodes).max(1);
        let job = Job::with_executors(args, &dir, epochs, per_worker)?;
        let metrics = dir.join(format!("{name}.jsonl"));
        let master = job.master(nodes, &metrics)?;
        let children = (0..nodes)
            .map(|_| job.node(&master))
            .collect::<Result<Vec<_>>>()?;
        finish(master, children)?;
        epoch_ends(&metrics)
    };
    let (epochs, calibration_epoch_s) = match args.scale_out_epochs {
        Some(epochs) => (epochs, None),
        None => {
            let ends = run_static(1, CALIBRATION_EPOCHS, "calibration")?;
            let epoch_s = median(&epoch_times(&ends));
            (epochs_for(args.scale_out_min_s, epoch_s)?, Some(epoch_s))
        }
    };
    let mut epochs = epochs;
    let mut one = run_static(1, epochs, "static-1")?;
    let mut one_total = *one.last().ok_or_else(|| anyhow!("no epochs"))?;
    // A calibration slower per epoch than the long run (warming up, or a machine still
    // busy with what ran before) sizes it too short: sized again from its own epochs, once.
    let mut resized_from = None;
    if calibration_epoch_s.is_some() {
        if let Some(more) = resized_epochs(args.scale_out_min_s, epochs, &one)? {
            resized_from = Some(epochs);
            epochs = more;
            one = run_static(1, epochs, "static-1-resized")?;
            one_total = *one.last().ok_or_else(|| anyhow!("no epochs"))?;
        }
    }
    let job = Job::new(args, &dir, epochs)?;
    let two = run_static(2, epochs, "static-2")?;
    let two_epoch_s = median(&epoch_times(&two));
    let trigger_s = 0.3 * one_total;

    let metrics = dir.join("elastic.jsonl");
    let master = job.master(1, &metrics)?;
    let mut nodes = vec![job.node(&master)?];
    // The trigger counts from the job's start: the first epoch's clock starts then too.
    job.wait_nodes(&master, 1)?;
    let job_started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(trigger_s));
    let at_trigger = job_started.elapsed().as_secs_f64();
    nodes.push(job.node(&master)?);
    finish(master, nodes)?;
    let elastic = epoch_ends(&metrics)?;
    let elastic_total = *elastic.last().ok_or_else(|| anyhow!("no epochs"))?;
    // Epochs done at the trigger (fractional: the running epoch counts by its share).
    let done = elastic.iter().filter(|&&e| e <= at_trigger).count();
    let last_end = if done == 0 { 0.0 } else { elastic[done - 1] };
    let running = one.get(done).map_or(1.0, |&end| {
        let start = if done == 0 { 0.0 } else { one[done - 1] };
        ((at_trigger - last_end) / (end - start).max(1e-9)).clamp(0.0, 1.0)
    });
    let left = f64::from(epochs) - done as f64 - running;
    let ideal = at_trigger + left * two_epoch_s;
    let _ = std::fs::remove_dir_all(&dir);
    emit(json!({
        "bench": "scale-out", "dataset": args.mlr_data, "epochs": epochs,
        "epochs_sized_for_s": args.scale_out_epochs.map_or(json!(args.scale_out_min_s), |_| json!(null)),
        "calibration_epoch_s": calibration_epoch_s.map(|s| round_to(s, 4)),
        // The epochs the calibration gave, where the static run came out too short with
        // them and was sized again from its own epochs.
        "resized_from_epochs": resized_from,
        "static_1_node_below_min_s": calibration_epoch_s.is_some() && one_total < args.scale_out_min_s,
        "executors_per_worker": args.mlr_executors_per_worker,
        "static_1_node_s": round_to(one_total, 3),
        "static_2_node_epoch_s": round_to(two_epoch_s, 4),
        "trigger_s": round_to(at_trigger, 3), "epochs_left_at_trigger": round_to(left, 3),
        "elastic_s": round_to(elastic_total, 3), "ideal_s": round_to(ideal, 3),
        "ratio": round_to(elastic_total / ideal, 4), "target_max": 1.05,
    }));
    Ok(())
}

/// More epochs for a static run of `epochs` that ended at `ends` (each epoch's end) before
/// `min_s`, sized from its own epochs; `None` if it took long enough.
fn resized_epochs(min_s: f64, epochs: u32, ends: &[f64]) -> Result<Option<u32>> {
    let total = ends.last().copied().unwrap_or(0.0);
    if total >= min_s {
        return Ok(None);
    }
    let more = epochs_for(min_s, median(&epoch_times(ends)))?;
    Ok(Some(more.max(epochs + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_times_leave_out_the_first_epoch_which_pays_the_start() {
        assert_eq!(epoch_times(&[2.0, 2.5, 3.25, 4.0]), vec![0.5, 0.75, 0.75]);
        assert!(epoch_times(&[2.0]).is_empty());
    }

    #[test]
    fn epochs_cover_the_least_time_with_a_tenth_to_spare() {
        // 30 s of 0.35 s epochs: 85.7 epochs, 94.3 with the margin.
        assert_eq!(epochs_for(30.0, 0.35).unwrap(), 95);
        assert!(f64::from(epochs_for(30.0, 0.35).unwrap()) * 0.35 >= 30.0);
        // Fast epochs still give a run long enough to scale in.
        assert_eq!(epochs_for(30.0, 100.0).unwrap(), 10);
    }

    #[test]
    fn a_static_run_that_came_out_short_is_sized_again_from_its_own_epochs() {
        // Calibrated at 0.75 s an epoch, 45 epochs ran at 0.43 s: 19.5 s, not 30.
        let ends: Vec<f64> = (0..45).map(|i| 0.6 + 0.43 * f64::from(i)).collect();
        let more = resized_epochs(30.0, 45, &ends).unwrap().expect("too short");
        assert_eq!(more, epochs_for(30.0, 0.43).unwrap());
        assert!(f64::from(more) * 0.43 >= 30.0);
        // Long enough: kept.
        let long: Vec<f64> = (0..80).map(|i| 0.6 + 0.43 * f64::from(i)).collect();
        assert_eq!(resized_epochs(30.0, 80, &long).unwrap(), None);
        // Never fewer epochs than ran, even if its epochs look slow.
        let slow = [1.0, 11.0, 21.0];
        assert_eq!(resized_epochs(30.0, 3, &slow).unwrap(), Some(10));
        assert_eq!(resized_epochs(300.0, 29, &[1.0, 2.0]).unwrap(), Some(330));
    }

    #[test]
    fn a_calibration_that_measured_nothing_asks_for_the_epochs() {
        for epoch_s in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = epochs_for(30.0, epoch_s).unwrap_err().to_string();
            assert!(e.contains("--scale-out-epochs"), "{epoch_s}: {e}");
        }
        assert!(epochs_for(1e12, 1e-3).is_err());
    }
}
