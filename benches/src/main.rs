//! `harp-bench`: benchmarks that print JSON lines, each with a ratio against a reference
//! measured in the same run on the same machine (DESIGN §6). Not part of CI; see README.
//!
//! | benchmark | compares |
//! |---|---|
//! | `overhead` | an MLR epoch on harp (1 worker, 1 server, 1 executor, 1 thread) against a plain single-threaded loop of the same kernel, data and batch |
//! | `overpartition` | 16 executors per worker against 1 (1 worker, 1 thread) |
//! | `speedup` | 2 workers on 2 threads against 1 worker on 1 thread |
//! | `transport-bulk` | parameter rows to another process through harp's `Link::send_bulk` against raw quinn on one stream (TCP loopback beside) |
//! | `transport-rtt` | a small `Get` answered with `Rows` between two processes through harp's `Link` against raw quinn request/response |
//! | `mlr-processes` | an MLR epoch with 2 `harp node` processes (`harp run mlr --processes 3`) against the same workers in one process |
//! | `elastic` | MLR micro-task throughput during one scale event (a server's shards or a worker's executors move) and just after, against just before; one process, or `--across` three `harp node` processes |
//! | `scale-in` | from `harp scale --remove` to the removed `harp node` process's exit, MLR (target ≤ 1 s) |
//! | `scale-out` | MLR started on 1 node process with a second joining at 30%: total time against the ideal from static 1- and 2-node runs |
//! | `state-transfer` | moving a 1 GiB executor state between two `harp node` processes against raw quinn on one stream |
//! | `lda` | harp's LDA (1 executor, 1 thread) against the Python `lda` package (same topics, α, β, iterations): tokens/s and log likelihood per token, on the newsgroups subset and a synthetic corpus (needs `scripts/python-bench-venv.sh`) |
//!
//! | `cnn` | an epoch of harp's CNN against PyTorch on the CPU with the same network, batch, Adam and threads (needs `scripts/torch-bench-venv.sh`) |
//!
//! `all` runs the first three; `transport` runs the last three. The transport benchmarks
//! start their second process by running this executable again (`transport-peer`, hidden).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bulk;
mod child;
mod cnn;
mod elastic;
mod host_counters;
mod lda;
mod measure;
mod peer;
mod plain;
mod processes;
mod rtt;
mod scaling;
mod state_transfer;
mod via_harp;
mod via_quinn;
mod via_tcp;

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
    /// overhead, overpartition and speedup.
    All,
    /// Parameter rows to another process: harp's Link against raw quinn (and TCP).
    TransportBulk,
    /// A small Get's round trip to another process: harp's Link against raw quinn.
    TransportRtt,
    /// An MLR epoch with 2 node processes against 2 workers in one process (runs `harp`).
    MlrProcesses,
    /// transport-bulk, transport-rtt and mlr-processes.
    Transport,
    /// Task throughput during single shard (or executor) moves, against just before.
    Elastic,
    /// `harp scale --remove` to the removed node process's exit (MLR, runs `harp`).
    ScaleIn,
    /// MLR on 1 node process, a second joining at 30%, against the ideal (runs `harp`).
    ScaleOut,
    /// A large executor state moved between node processes against raw quinn (runs `harp`).
    StateTransfer,
    /// harp's LDA against the Python `lda` package (needs scripts/python-bench-venv.sh).
    Lda,
    /// harp's CNN epoch against PyTorch on the CPU (needs scripts/torch-bench-venv.sh).
    Cnn,
    /// The second process of the transport benchmarks (started by them).
    #[value(hide = true)]
    TransportPeer,
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

    /// transport-bulk: parameter rows per transfer.
    #[arg(long, default_value_t = 32, help_heading = "Transport")]
    rows: usize,
    /// transport-bulk: f32 values per row (default: 1 MiB rows, 32 MiB per transfer).
    #[arg(long, default_value_t = 262_144, help_heading = "Transport")]
    row_values: usize,
    /// transport-bulk: transfers per path per round.
    #[arg(long, default_value_t = 4, help_heading = "Transport")]
    transfers: usize,
    /// transport-rtt: requests per path per round.
    #[arg(long, default_value_t = 10_000, help_heading = "Transport")]
    requests: usize,
    /// transport-rtt: f32 values of the row each answer carries.
    #[arg(long, default_value_t = 16, help_heading = "Transport")]
    reply_values: usize,
    /// elastic: length of the steady window before each event (and of the warm-up).
    #[arg(long, default_value_t = 1000, help_heading = "Elasticity")]
    window_ms: u64,
    /// elastic: length of the window right after each event.
    #[arg(long, default_value_t = 100, help_heading = "Elasticity")]
    after_ms: u64,
    /// elastic: pause before each round's steady window (spaces the events apart).
    #[arg(long, default_value_t = 500, help_heading = "Elasticity")]
    gap_ms: u64,
    /// elastic: what each scale event moves (one server's shards, or one worker's executors).
    #[arg(long, value_enum, default_value_t = elastic::Moving::Shards, help_heading = "Elasticity")]
    moving: elastic::Moving,
    /// elastic: the master here and three `harp node` processes talking over QUIC (shards
    /// move between the nodes' servers, forwarded meanwhile) instead of one in-process job.
    #[arg(long, help_heading = "Elasticity")]
    across: bool,
    /// elastic --across: keep the `harp node` processes' logs (stderr, at `HARP_LOG`'s
    /// level) and name their directory in the summary; each event's line gives its start as
    /// UNIX time (`started_unix_s`) to find it in them.
    #[arg(long, help_heading = "Elasticity")]
    keep_logs: bool,
    /// elastic: runtime threads of this process, which runs the master (and the driver),
    /// or with no --across the whole job.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..), help_heading = "Elasticity")]
    master_threads: u16,
    /// mlr-processes: epochs per run.
    #[arg(long, default_value_t = 8, help_heading = "MLR across processes")]
    epochs: u32,
    /// mlr-processes: runtime threads of each process.
    #[arg(long, default_value_t = 2, help_heading = "MLR across processes")]
    threads: usize,
    /// mlr-processes: the dataset (`harp run mlr --data`; `default` is the built-in
    /// mnist10k). Default: the synthetic benchmark dataset of the overhead benchmark.
    #[arg(
        long,
        default_value = "synthetic:200000,1000,100",
        help_heading = "MLR across processes"
    )]
    mlr_data: String,
    /// mlr-processes: executors per worker (Litz over-partitioning: the executors of one
    /// node share each fetch and each flush).
    #[arg(long, default_value_t = 32, help_heading = "MLR across processes")]
    mlr_executors_per_worker: u32,
    /// state-transfer: bytes of state each executor carries (default 1 GiB).
    #[arg(long, default_value_t = 1 << 30, help_heading = "MLR across processes")]
    state_bytes: u64,
    /// scale-out: epochs of each run. Default: sized by a short calibration run so that
    /// the static 1-node run takes at least --scale-out-min-s.
    #[arg(long, help_heading = "MLR across processes")]
    scale_out_epochs: Option<u32>,
    /// scale-out: the least time of the static 1-node run when the epochs are sized
    /// automatically (the issue asks for at least 30 s).
    #[arg(long, default_value_t = 30.0, help_heading = "MLR across processes")]
    scale_out_min_s: f64,

    /// lda: Gibbs sweeps of each run.
    #[arg(long, default_value_t = 50, help_heading = "LDA")]
    lda_iterations: u32,
    /// lda: topics (K).
    #[arg(long, default_value_t = 20, help_heading = "LDA")]
    lda_topics: usize,
    /// lda: tokens of the synthetic corpus.
    #[arg(long, default_value_t = 1_000_000, help_heading = "LDA")]
    lda_synthetic_tokens: usize,
    /// lda: vocabulary of the synthetic corpus.
    #[arg(long, default_value_t = 20_000, help_heading = "LDA")]
    lda_synthetic_words: usize,

    /// cnn: epochs of each run (each side's median epoch is compared).
    #[arg(long, default_value_t = 2, help_heading = "CNN")]
    cnn_epochs: u32,
    /// cnn: threads of harp's runtime (one executor each) and of PyTorch.
    #[arg(long, default_value_t = 1, help_heading = "CNN")]
    cnn_threads: usize,

    /// transport-peer: what to serve.
    #[arg(long, value_enum, hide = true)]
    mode: Option<peer::PeerMode>,
    /// transport-peer: the job's certificate authority.
    #[arg(long, hide = true)]
    credentials: Option<std::path::PathBuf>,
    /// transport-peer: harp's frame limit.
    #[arg(long, hide = true)]
    frame_bytes_max: Option<usize>,
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

/// Prints one JSON line. If stdout is gone (its reader exited: a closed pipe), there is
/// no one left to report to: says so on stderr and exits 1 instead of panicking.
fn emit(value: serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{value}").and_then(|()| out.flush()) {
        eprintln!("harp-bench: cannot write a result to stdout ({e}); stopping");
        std::process::exit(1);
    }
}

/// `x` rounded to `digits` decimals (for readable JSON).
fn round_to(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn rounded(xs: &[f64], digits: i32) -> Vec<f64> {
    xs.iter().map(|&x| round_to(x, digits)).collect()
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
    // The runtime's log (a job's master runs in this process for `elastic`), as `harp`'s.
    harp_apps::cli::init_logging();
    let args = Args::parse();
    if args.bench == Bench::TransportPeer {
        // Its stdout is the protocol with the parent: nothing else goes there.
        return peer::main(&args);
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    emit(json!({"bench": "machine", "cores": cores}));
    let transport = args.bench == Bench::Transport;
    if transport || args.bench == Bench::TransportBulk {
        bulk::run(&args)?;
    }
    if transport || args.bench == Bench::TransportRtt {
        rtt::run(&args)?;
    }
    if transport || args.bench == Bench::MlrProcesses {
        processes::run(&args)?;
    }
    if args.bench == Bench::Elastic {
        elastic::run(&args)?;
    }
    if args.bench == Bench::ScaleIn {
        scaling::scale_in(&args)?;
    }
    if args.bench == Bench::ScaleOut {
        scaling::scale_out(&args)?;
    }
    if args.bench == Bench::StateTransfer {
        state_transfer::run(&args)?;
    }
    if args.bench == Bench::Cnn {
        cnn::run(&args)?;
    }
    if args.bench == Bench::Lda {
        lda::run(&args)?;
    }
    let in_process = [
        Bench::Overhead,
        Bench::Overpartition,
        Bench::Speedup,
        Bench::All,
    ];
    if !in_process.contains(&args.bench) {
        return Ok(());
    }
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
