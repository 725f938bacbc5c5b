//! `harp-bench`: benchmarks that print JSON lines, each with a ratio against a reference
//! measured in the same run on the same machine (DESIGN §6). Not part of CI; see README.
//!
//! | benchmark | compares |
//! |---|---|
//! | `overhead` | an MLR epoch on harp (1 worker, 1 server, 1 executor, 1 thread) against a plain single-threaded loop of the same kernel, data and batch |
//! | `overpartition` | 16 executors per worker against 1 (1 worker, 1 thread) |
//! | `speedup` | 2 workers on 2 threads against 1 worker on 1 thread |

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod measure;
mod plain;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use harp_apps::data::Dataset;
use measure::{harp_epochs, median, Paired, Run, Shape};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Bench {
    Overhead,
    Overpartition,
    Speedup,
    All,
}

#[derive(Parser, Debug)]
#[command(name = "harp-bench", about = "harp benchmarks (JSON lines on stdout)")]
pub(crate) struct Args {
    /// Which benchmark to run.
    #[arg(value_enum, default_value_t = Bench::All)]
    bench: Bench,
    /// Rows of the synthetic dataset (features and classes below).
    #[arg(long, default_value_t = 200_000)]
    synthetic_rows: usize,
    #[arg(long, default_value_t = 1_000)]
    synthetic_features: usize,
    #[arg(long, default_value_t = 100)]
    synthetic_classes: usize,
    /// Epochs per measured run on mnist10k (the median epoch is compared).
    #[arg(long, default_value_t = 10)]
    mnist_epochs: u32,
    /// Epochs per measured run on the synthetic dataset.
    #[arg(long, default_value_t = 3)]
    synthetic_epochs: u32,
    /// Rounds per benchmark: each round measures the reference and the candidate back to
    /// back, and the median of the rounds' ratios is reported (this machine is noisy).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Minibatch rows per task.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Features per parameter row of the MLR weights (default: at least 256 features, about 16K values per row).
    #[arg(long)]
    block_features: Option<usize>,
    /// SSP staleness of the harp runs.
    #[arg(long, default_value_t = 1)]
    staleness: u32,
}

struct Workload {
    name: &'static str,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    epochs: u32,
    lr: f32,
}

fn workloads(args: &Args) -> Result<Vec<Workload>> {
    let mut mnist = harp_apps::default_data::mnist10k()?;
    mnist.scale_to_unit();
    let (train, test) = mnist.split_tail_fraction(0.2)?;
    let mut out = vec![Workload {
        name: "mnist10k",
        train: Arc::new(train),
        test: Arc::new(test),
        epochs: args.mnist_epochs,
        lr: 0.5,
    }];
    if args.synthetic_rows > 0 {
        let synthetic = harp_apps::data::synthetic_classification(
            args.synthetic_rows,
            args.synthetic_features,
            args.synthetic_classes,
            7,
        )?;
        let (train, test) = synthetic.split_tail_fraction(0.2)?;
        out.push(Workload {
            name: "synthetic",
            train: Arc::new(train),
            test: Arc::new(test),
            epochs: args.synthetic_epochs,
            lr: 0.1,
        });
    }
    Ok(out)
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

/// Runs `reference` and `candidate` back to back `rounds` times; returns the median epoch
/// times of each round and the median ratio candidate/reference.
fn paired(
    rounds: usize,
    mut reference: impl FnMut() -> Result<Run>,
    mut candidate: impl FnMut() -> Result<Run>,
) -> Result<Paired> {
    let mut out = Paired::default();
    for _ in 0..rounds.max(1) {
        let r = reference()?;
        let c = candidate()?;
        out.ratios.push(median(&c.epoch_s) / median(&r.epoch_s));
        out.reference_s.push(median(&r.epoch_s));
        out.candidate_s.push(median(&c.epoch_s));
        out.reference_accuracy = r.accuracy;
        out.candidate_accuracy = c.accuracy;
    }
    out.ratio = median(&out.ratios);
    Ok(out)
}

fn overhead(w: &Workload, args: &Args) -> Result<()> {
    let shape = Shape {
        workers: 1,
        executors_per_worker: 1,
        threads: 1,
        staleness: args.staleness,
    };
    let p = paired(
        args.rounds,
        || plain::epochs(&w.train, &w.test, args.batch, w.lr, w.epochs),
        || harp_epochs(w, shape, args),
    )?;
    emit(json!({
        "bench": "overhead", "dataset": w.name, "batch": args.batch, "staleness": args.staleness,
        "plain_epoch_s": p.reference_s, "harp_epoch_s": p.candidate_s, "ratios": p.ratios,
        "ratio": p.ratio, "target_max": 1.15,
        "plain_accuracy": p.reference_accuracy, "harp_accuracy": p.candidate_accuracy,
    }));
    Ok(())
}

fn overpartition(w: &Workload, args: &Args) -> Result<()> {
    let one = Shape {
        workers: 1,
        executors_per_worker: 1,
        threads: 1,
        staleness: args.staleness,
    };
    let sixteen = Shape {
        executors_per_worker: 16,
        ..one
    };
    let p = paired(
        args.rounds,
        || harp_epochs(w, one, args),
        || harp_epochs(w, sixteen, args),
    )?;
    emit(json!({
        "bench": "overpartition", "dataset": w.name, "batch": args.batch,
        "epoch_s_1_executor": p.reference_s, "epoch_s_16_executors": p.candidate_s,
        "ratios": p.ratios, "ratio": p.ratio, "target_max": 1.11,
        "accuracy_1": p.reference_accuracy, "accuracy_16": p.candidate_accuracy,
    }));
    Ok(())
}

fn speedup(w: &Workload, args: &Args) -> Result<()> {
    let one = Shape {
        workers: 1,
        executors_per_worker: 1,
        threads: 1,
        staleness: args.staleness,
    };
    let two = Shape {
        workers: 2,
        threads: 2,
        ..one
    };
    let p = paired(
        args.rounds,
        || harp_epochs(w, one, args),
        || harp_epochs(w, two, args),
    )?;
    emit(json!({
        "bench": "speedup", "dataset": w.name, "batch": args.batch,
        "epoch_s_1_worker": p.reference_s, "epoch_s_2_workers": p.candidate_s,
        "speedups": p.ratios.iter().map(|r| 1.0 / r).collect::<Vec<_>>(),
        "speedup": 1.0 / p.ratio, "target_min": 1.6,
        "accuracy_1": p.reference_accuracy, "accuracy_2": p.candidate_accuracy,
    }));
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    emit(json!({"bench": "machine", "cores": cores}));
    for w in workloads(&args)? {
        if matches!(args.bench, Bench::Overhead | Bench::All) {
            overhead(&w, &args)?;
        }
        if matches!(args.bench, Bench::Overpartition | Bench::All) {
            overpartition(&w, &args)?;
        }
        if matches!(args.bench, Bench::Speedup | Bench::All) {
            speedup(&w, &args)?;
        }
    }
    Ok(())
}
