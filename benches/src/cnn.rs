//! `cnn`: an epoch of harp's CNN (`harp_apps::cnn`: 1 worker, 1 server, one executor per
//! thread, a runtime of `--cnn-threads` threads) against PyTorch on the CPU
//! (`benches/python/cnn_torch.py` in `target/torch-venv`, made by
//! `scripts/torch-bench-venv.sh`) with the same network, data (the first 8,000 images of
//! mnist10k), batch, Adam settings and threads (`torch.set_num_threads`), in the same run.
//!
//! Each round runs harp, then PyTorch, for `--cnn-epochs` epochs each; an epoch's time is
//! its training only (harp: both phases of every minibatch, `CnnMetrics::epoch_s`; PyTorch:
//! the minibatch loop), and each side's figure for the round is its median epoch. The
//! reported ratio (harp / PyTorch, target ≤ 1.5) is the median of the rounds' ratios.

use crate::{emit, round_to};
use anyhow::{bail, Context, Result};
use harp::JobConfig;
use harp_apps::cnn::{CnnApp, CnnConfig, CnnMetrics, CnnObserver, NetworkShape};
use harp_apps::data::Dataset;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// Held-out images at the end of mnist10k.
const TEST_ROWS: usize = 2_000;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Default)]
struct Recorder {
    epochs: Mutex<Vec<CnnMetrics>>,
}

impl CnnObserver for Recorder {
    fn epoch_completed(&self, m: &CnnMetrics) {
        self.epochs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(m.clone());
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Epoch seconds and final held-out accuracy of one harp run.
fn harp_run(
    config: &CnnConfig,
    threads: usize,
    train: &Arc<Dataset>,
    test: &Arc<Dataset>,
) -> Result<(Vec<f64>, f64)> {
    let recorder = Arc::new(Recorder::default());
    let app = Arc::new(
        CnnApp::new(
            config.clone(),
            train.clone(),
            test.clone(),
            recorder.clone(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let job = JobConfig {
        workers: 1,
        servers: 1,
        executors_per_worker: threads as u32,
        shards_per_server: 8,
        collect_params: false,
        scar: None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    runtime.block_on(harp::run_job(app, &job))?;
    let epochs = recorder
        .epochs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let accuracy = epochs.last().map_or(0.0, |m| m.accuracy);
    Ok((epochs.iter().map(|m| m.epoch_s).collect(), accuracy))
}

/// Epoch seconds, final held-out accuracy and version of one PyTorch run.
fn torch_run(python: &Path, config: &CnnConfig, threads: usize) -> Result<(Vec<f64>, f64, String)> {
    let root = repo_root();
    let data = root.join("apps/data/mnist10k");
    let shape = config.shape;
    let out = Command::new(python)
        .arg(root.join("benches/python/cnn_torch.py"))
        .arg(data.join("t10k-images-idx3-ubyte.gz"))
        .arg(data.join("t10k-labels-idx1-ubyte.gz"))
        .args(["--epochs", &config.epochs.to_string()])
        .args(["--batch", &config.batch.to_string()])
        .args(["--lr", &config.lr.to_string()])
        .args(["--threads", &threads.to_string()])
        .args([
            "--channels",
            &format!("{},{}", shape.channels[0], shape.channels[1]),
        ])
        .args([
            "--hidden",
            &format!("{},{}", shape.hidden[0], shape.hidden[1]),
        ])
        .args(["--test-rows", &TEST_ROWS.to_string()])
        .args(["--seed", &config.seed.to_string()])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "cnn_torch.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .context("cnn_torch.py printed nothing")?;
    let v: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("cnn_torch.py printed {line:?}"))?;
    let epoch_s = v["epoch_s"]
        .as_array()
        .context("no epoch_s")?
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    let accuracy = v["accuracy"].as_f64().unwrap_or(f64::NAN);
    let version = v["torch"].as_str().unwrap_or("?").to_string();
    Ok((epoch_s, accuracy, version))
}

pub fn run(args: &crate::Args) -> Result<()> {
    let python = repo_root().join("target/torch-venv/bin/python");
    if !python.exists() {
        bail!(
            "{} not found: run scripts/torch-bench-venv.sh first",
            python.display()
        );
    }
    let mut data = harp_apps::default_data::mnist10k()?;
    for v in &mut data.features {
        *v /= 255.0;
    }
    let (train, test) = data.split_tail(TEST_ROWS)?;
    let (train, test) = (Arc::new(train), Arc::new(test));
    let config = CnnConfig {
        epochs: args.cnn_epochs,
        shape: NetworkShape::default(),
        ..CnnConfig::default()
    };
    let threads = args.cnn_threads.max(1);
    let mut ratios = Vec::new();
    for round in 0..args.rounds {
        let (harp_epochs, harp_accuracy) = harp_run(&config, threads, &train, &test)?;
        let (torch_epochs, torch_accuracy, version) = torch_run(&python, &config, threads)?;
        let (harp_s, torch_s) = (median(&harp_epochs), median(&torch_epochs));
        let ratio = harp_s / torch_s;
        ratios.push(ratio);
        emit(json!({
            "bench": "cnn",
            "round": round,
            "threads": threads,
            "batch": config.batch,
            "channels": config.shape.channels,
            "hidden": config.shape.hidden,
            "harp_epoch_s": harp_epochs.iter().map(|&x| round_to(x, 3)).collect::<Vec<_>>(),
            "torch_epoch_s": torch_epochs.iter().map(|&x| round_to(x, 3)).collect::<Vec<_>>(),
            "harp_accuracy": harp_accuracy,
            "torch_accuracy": torch_accuracy,
            "torch": version,
            "ratio": round_to(ratio, 3),
        }));
    }
    emit(json!({
        "bench": "cnn",
        "summary": true,
        "threads": threads,
        "ratios": ratios.iter().map(|&x| round_to(x, 3)).collect::<Vec<_>>(),
        "ratio": round_to(median(&ratios), 3),
        "target": 1.5,
    }));
    Ok(())
}
