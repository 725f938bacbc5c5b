//! `harp-bench state-transfer`: moving a large executor state between two `harp node`
//! processes, against raw quinn throughput measured in the same run (issue: ≥ 0.7).
//!
//! The job is the counter app with one executor per worker, each carrying `--state-bytes`
//! (default 1 GiB) of state, on a master started with `--nodes 2` and node processes this
//! benchmark starts itself. Each round:
//! 1. raw quinn: the same number of bytes on one stream to a peer process that reads it to
//!    its end and acks ([`crate::via_quinn`]);
//! 2. `harp scale --remove` the newest node: its executor moves to the other node;
//! 3. a new node joins: the re-balancing moves one executor to it.
//!
//! A move is timed by the master, from the start of the scale event to the new worker's
//! answer that the executor runs there (`done_at_s` of its move in the metrics file): it
//! covers releasing, saving, fetching node to node, restoring (the counter checks every
//! byte of its state) and adopting. Reported: MB/s (10^6 bytes of state per second) of each
//! move and of each quinn transfer, and the median of the rounds' harp/quinn ratios (each
//! move against the quinn transfer of its round).

use crate::child::KilledOnDrop;
use crate::peer::{runtime, JobDir, PeerMode, PeerProcess};
use crate::scaling::{temp_dir, Job};
use crate::via_quinn::QuinnBulkClient;
use crate::{emit, median, round_to, rounded, Args};
use anyhow::{anyhow, bail, Result};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

pub fn run(args: &Args) -> Result<()> {
    let bytes = args.state_bytes;
    let dir = temp_dir("state-transfer")?;
    let run_args: Vec<String> = [
        "run",
        "counter",
        "--tasks",
        "1000000000",
        "--task-sleep-us",
        "1000",
        "--executors-per-worker",
        "1",
        "--state-bytes",
        &bytes.to_string(),
        "--threads",
        &args.threads.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let job = Job::from_run_args(&dir, run_args)?;
    let metrics = dir.join("metrics.jsonl");
    let result = measure(args, &job, &metrics, bytes);
    let _ = std::fs::remove_dir_all(&dir);
    let (harp_mb_s, quinn_mb_s, ratios) = result?;
    emit(json!({
        "bench": "state-transfer", "state_bytes": bytes, "moves": harp_mb_s.len(),
        "harp_mb_s": rounded(&harp_mb_s, 1), "quinn_mb_s": rounded(&quinn_mb_s, 1),
        "harp_mb_s_median": round_to(median(&harp_mb_s), 1),
        "quinn_mb_s_median": round_to(median(&quinn_mb_s), 1),
        "ratios_harp_vs_quinn": rounded(&ratios, 3),
        "ratio_harp_vs_quinn": round_to(median(&ratios), 3), "target_min": 0.7,
    }));
    Ok(())
}

type Figures = (Vec<f64>, Vec<f64>, Vec<f64>);

fn measure(args: &Args, job: &Job, metrics: &Path, bytes: u64) -> Result<Figures> {
    let master = job.master(2, metrics)?;
    let mut nodes = vec![job.node(&master)?, job.node(&master)?];
    // The master and the nodes are killed when they go out of scope, error or not.
    rounds(args, job, &master, &mut nodes, metrics, bytes)
}

fn rounds(
    args: &Args,
    job: &Job,
    master: &crate::scaling::Master,
    nodes: &mut Vec<KilledOnDrop>,
    metrics: &Path,
    bytes: u64,
) -> Result<Figures> {
    job.wait_nodes(master, 2)?;
    let quinn_job = JobDir::create("bench-state-quinn")?;
    let peer = PeerProcess::spawn(PeerMode::QuinnBulk, &quinn_job.dir, &[])?;
    let rt = runtime()?;
    let mut quinn = rt.block_on(QuinnBulkClient::connect(&quinn_job.creds, peer.addr))?;
    let payload = bytes::Bytes::from(vec![7u8; usize::try_from(bytes)?]);
    rt.block_on(quinn.bulk(&payload))?; // warm up
    let (mut harp_mb_s, mut quinn_mb_s, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds.max(1) {
        // Nodes 0 and 1 started the job; round r removes node r + 1 and adds node r + 2.
        let newest = round as u32 + 1;
        let began = Instant::now();
        rt.block_on(quinn.bulk(&payload))?;
        let reference = bytes as f64 / 1e6 / began.elapsed().as_secs_f64();
        quinn_mb_s.push(reference);
        // The newest node gives its executor back, then a new node takes one.
        job.scale(master, &["--remove", &newest.to_string()])?;
        wait_one_exit(nodes)?;
        nodes.push(job.node(master)?);
        job.wait_nodes(master, 2)?;
        for rate in executor_move_rates(metrics, 2 * (round + 1))? {
            harp_mb_s.push(rate);
            ratios.push(rate / reference);
        }
    }
    quinn.close();
    Ok((harp_mb_s, quinn_mb_s, ratios))
}

/// Waits until one of `nodes` exits (the one removed) and drops it from the list.
fn wait_one_exit(nodes: &mut Vec<KilledOnDrop>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        for i in 0..nodes.len() {
            if let Some(status) = nodes[i].try_wait()? {
                if !status.success() {
                    bail!("the removed node exited with {status}");
                }
                nodes.remove(i); // reaped as it is dropped
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("the removed node did not exit")
}

/// MB/s of the executor moves of the last two scale events, once the metrics file holds
/// `events` of them.
fn executor_move_rates(metrics: &Path, events: usize) -> Result<Vec<f64>> {
    // The join's event is written once its re-balancing ends; wait for it.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let text = std::fs::read_to_string(metrics).unwrap_or_default();
        let scale: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r["event"] == "scale")
            .collect();
        let seen = scale.len();
        if seen >= events {
            let mut rates = Vec::new();
            for event in &scale[events - 2..events] {
                if event["ok"] != true {
                    bail!("a scale event failed: {event}");
                }
                let moves = event["report"]["moves"]
                    .as_array()
                    .ok_or_else(|| anyhow!("a scale event without moves: {event}"))?;
                for m in moves.iter().filter(|m| m["kind"] == "executor") {
                    let (b, s) = (m["bytes"].as_f64(), m["done_at_s"].as_f64());
                    let (Some(b), Some(s)) = (b, s) else {
                        bail!("a move without bytes or time: {m}");
                    };
                    rates.push(b / 1e6 / s);
                }
            }
            return Ok(rates);
        }
        if Instant::now() > deadline {
            bail!("the scale events never reached the metrics file");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
