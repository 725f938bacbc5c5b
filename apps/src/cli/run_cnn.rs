//! `harp run cnn`: loads 28×28 digit images (IDX), trains the CNN with Adam on the servers,
//! prints one line per epoch, writes metrics.

use super::output::RunOutput;
use super::ClusterArgs;
use crate::cnn::{
    check_images, CnnApp, CnnConfig, CnnMetrics, CnnObserver, NetworkShape, Partition,
};
use crate::data::{load_path, Dataset};
use crate::default_data::{mnist10k, DEFAULT_DATASET_NAME};
use crate::device::{Compute, Device};
use crate::mlr::Quiet;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

/// `--partition`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PartitionArg {
    /// Each layer's weights, and its bias, whole on one shard.
    Layer,
    /// Every layer's parameters split into --pieces row groups spread over the shards.
    Shard,
}

#[derive(Args, Debug, Clone)]
pub struct CnnCliArgs {
    /// A directory with one IDX images file (`*idx3-ubyte[.gz]`, 28x28 images) and one IDX
    /// labels file (`*idx1-ubyte[.gz]`). Default: the built-in mnist10k.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Images taken from the end of the data for the held-out accuracy.
    #[arg(long, default_value_t = 2_000)]
    pub test_rows: usize,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[arg(long, default_value_t = 3)]
    pub epochs: u32,
    /// Images per minibatch (split among the executors).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Adam's step size (beta1 0.9, beta2 0.999, eps 1e-8).
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f32,
    /// Seed of the initial weights and of the shuffles.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How the parameters are spread over the shards.
    #[arg(long, value_enum, default_value_t = PartitionArg::Shard)]
    pub partition: PartitionArg,
    /// With --partition shard: row groups per layer tensor (along its first dimension).
    #[arg(long, default_value_t = 16)]
    pub pieces: usize,
    /// Output channels of the two convolutions, `C1,C2`.
    #[arg(long, default_value = "32,64")]
    pub channels: String,
    /// Widths of the two hidden dense layers, `H1,H2`.
    #[arg(long, default_value = "256,128")]
    pub hidden: String,
    /// Train only this many minibatches per epoch (short runs).
    #[arg(long)]
    pub max_batches: Option<u32>,
    /// Where the executors run the forward and backward passes: `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

fn pair(option: &str, spec: &str) -> Result<[usize; 2]> {
    let parse = || -> Option<[usize; 2]> {
        let (a, b) = spec.split_once(',')?;
        Some([a.trim().parse().ok()?, b.trim().parse().ok()?])
    };
    match parse() {
        Some([a, b]) if a > 0 && b > 0 => Ok([a, b]),
        _ => bail!("{option} {spec:?}: expected two positive integers, A,B"),
    }
}

fn cnn_config(args: &CnnCliArgs) -> Result<CnnConfig> {
    Ok(CnnConfig {
        epochs: args.epochs,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
        partition: match args.partition {
            PartitionArg::Layer => Partition::Layer,
            PartitionArg::Shard => Partition::Shard,
        },
        pieces: args.pieces,
        shape: NetworkShape {
            channels: pair("--channels", &args.channels)?,
            hidden: pair("--hidden", &args.hidden)?,
        },
        max_batches: args.max_batches,
    })
}

/// The training and held-out images (pixels scaled to [0, 1]) and a name for messages.
fn load_split(args: &CnnCliArgs) -> Result<(Dataset, Dataset, String)> {
    let (data, name) = match &args.data {
        None => (
            mnist10k().map_err(|e| anyhow!("the built-in dataset is damaged: {e}"))?,
            DEFAULT_DATASET_NAME.to_string(),
        ),
        Some(dir) => {
            if !dir.is_dir() {
                bail!(
                    "--data {}: expected a directory holding an IDX images file and an IDX labels file",
                    dir.display()
                );
            }
            (load_path(dir)?, dir.display().to_string())
        }
    };
    let mut data = data;
    check_images(&data).map_err(|e| anyhow!("{e}"))?;
    // IDX pixels are bytes: 0..255 → [0, 1].
    for v in &mut data.features {
        *v /= 255.0;
    }
    let (train, test) = data
        .split_tail(args.test_rows)
        .with_context(|| format!("cannot hold out {} images of {name}", args.test_rows))?;
    Ok((train, test, name))
}

/// The CNN app computing on `compute` (opened first, so a missing GPU is reported before
/// the data is read).
fn new_app(
    args: &CnnCliArgs,
    observer: Arc<dyn CnnObserver>,
    compute: Compute,
) -> Result<(CnnApp, String)> {
    let (train, test, name) = load_split(args)?;
    let app = CnnApp::new(cnn_config(args)?, Arc::new(train), Arc::new(test), observer)
        .and_then(|app| app.with_compute(compute))
        .map_err(|e| anyhow!("{e}"))?;
    Ok((app, name))
}

/// The CNN app a node process runs: same data and hyperparameters, no output.
pub fn build_app(args: &CnnCliArgs) -> Result<Arc<CnnApp>> {
    let compute = args.device.open().map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(new_app(args, Arc::new(Quiet), compute)?.0))
}

/// Epochs on the terminal and in the metrics file; the bar counts minibatches.
impl CnnObserver for RunOutput {
    fn batch_completed(&self) {
        self.inc();
    }

    fn epoch_completed(&self, m: &CnnMetrics) {
        self.line(format!(
            "epoch {:>3}  loss {:.4}  test loss {:.4}  accuracy {:.2}%  epoch {:.2}s",
            m.epoch,
            m.loss,
            m.test_loss,
            m.accuracy * 100.0,
            m.epoch_s
        ));
        self.record(m);
    }
}

pub fn run(args: CnnCliArgs) -> Result<()> {
    let compute = args.cluster.master_compute(args.device)?;
    let output = RunOutput::with_bar(&args.cluster, args.quiet, "minibatches")?;
    let (app, name) = new_app(&args, output.clone(), compute)?;
    output.set_length(u64::from(args.epochs) * u64::from(app.batches_per_epoch()));
    eprintln!(
        "cnn on {name}: {} parameters (channels {}, hidden {}), batch {}, Adam lr {}, --partition {}",
        app.network().parameter_count(),
        args.channels,
        args.hidden,
        args.batch,
        args.lr,
        match args.partition {
            PartitionArg::Layer => "layer",
            PartitionArg::Shard => "shard",
        }
    );
    let (outcome, checkpoints) = super::execute_app(Arc::new(app), &args.cluster, false, &output)?;
    if let Some(m) = outcome.driver.history().last() {
        eprintln!(
            "done: {} epochs in {:.2}s, held-out accuracy {:.2}%",
            m.epoch,
            outcome.stats.elapsed_s,
            m.accuracy * 100.0
        );
    }
    super::report_end(
        &outcome.stats,
        &args.cluster.inject,
        checkpoints.as_ref(),
        output.metrics(),
        super::traffic_report::CountersRecord::Write,
    )
}
