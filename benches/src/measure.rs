//! Runs MLR on harp with a given cluster shape and records the duration of every epoch.

use crate::{Args, Workload};
use anyhow::Result;
use harp::JobConfig;
use harp_apps::mlr::{EpochMetrics, MlrApp, MlrConfig, MlrObserver};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub workers: u32,
    pub executors_per_worker: u32,
    pub threads: usize,
    pub staleness: u32,
}

/// One measured training run: the duration of every epoch and the final accuracy.
pub struct Run {
    pub epoch_s: Vec<f64>,
    pub accuracy: f64,
}

/// Rounds of a reference and a candidate measured back to back.
#[derive(Default)]
pub struct Paired {
    pub reference_s: Vec<f64>,
    pub candidate_s: Vec<f64>,
    pub ratios: Vec<f64>,
    pub ratio: f64,
    pub reference_accuracy: f64,
    pub candidate_accuracy: f64,
}

#[derive(Default)]
struct Recorder {
    elapsed: Mutex<Vec<f64>>,
}

impl MlrObserver for Recorder {
    fn epoch_completed(&self, m: &EpochMetrics) {
        self.elapsed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(m.elapsed_s);
    }
}

/// The median of `xs` (0 for none).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn harp_epochs(w: &Workload, shape: Shape, args: &Args) -> Result<Run> {
    let recorder = Arc::new(Recorder::default());
    let config = MlrConfig {
        epochs: w.epochs,
        lr: w.lr,
        batch: args.batch,
        staleness: shape.staleness,
        block_features: args.block_features,
        weight_per_row: false,
    };
    let app = Arc::new(
        MlrApp::new(config, w.train.clone(), w.test.clone(), recorder.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let job = JobConfig {
        workers: shape.workers,
        servers: 1,
        executors_per_worker: shape.executors_per_worker,
        ..JobConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(shape.threads)
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(harp::run_job(app, &job))?;
    let elapsed = recorder
        .elapsed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut epoch_s = Vec::with_capacity(elapsed.len());
    let mut last = 0.0;
    for e in elapsed {
        epoch_s.push(e - last);
        last = e;
    }
    let accuracy = outcome
        .driver
        .history()
        .last()
        .map(|m| m.accuracy)
        .unwrap_or(0.0);
    Ok(Run { epoch_s, accuracy })
}
