//! `harp run mlr`: loads the data, trains, prints one line per epoch, writes metrics.

use super::output::RunOutput;
use super::ClusterArgs;
use crate::data::{load_path, synthetic_classification, Dataset};
use crate::default_data::{mnist10k, DEFAULT_DATASET_NAME};
use crate::device::Device;
use crate::mlr::{EpochMetrics, MlrApp, MlrConfig, MlrObserver, Quiet};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::Path;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct MlrCliArgs {
    /// Dataset: a LibSVM file, a directory with IDX files (`*idx3-ubyte[.gz]` and
    /// `*idx1-ubyte[.gz]`), or `synthetic:ROWS,FEATURES,CLASSES[,SEED]`. Default: the built-in
    /// mnist10k.
    #[arg(long)]
    pub data: Option<String>,
    /// Fraction of the rows, taken from the end, held out for accuracy.
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// SSP staleness bound (0 = bulk-synchronous).
    #[arg(long, default_value_t = 1)]
    pub staleness: u32,
    #[arg(long, default_value_t = 10)]
    pub epochs: u32,
    /// Learning rate (the step of one executor's minibatch update).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub lr: f32,
    /// Minibatch rows per task.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Features per parameter row (default: at least 256 features, about 16K values per row).
    #[arg(long)]
    pub block_features: Option<usize>,
    /// One parameter row per weight (a feature's weight for one class) instead of blocks of
    /// features, so that SCAR's checkpoint rounds rank, and injected faults lose, single
    /// weights, as in SCAR's experiments (`harp-scar --parameter weight`). Slower: every
    /// task reads and updates features × classes rows.
    #[arg(long, conflicts_with = "block_features")]
    pub weight_per_row: bool,
    /// Where the executors compute the training gradients: `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Loads the dataset named by `--data` (or the default) with features scaled to [-1, 1].
pub fn load_dataset(spec: Option<&str>) -> Result<Dataset> {
    let mut data = match spec {
        None => mnist10k().map_err(|e| anyhow!("the built-in dataset is damaged: {e}"))?,
        Some(s) if s.starts_with("synthetic:") => {
            let nums: Vec<u64> = s["synthetic:".len()..]
                .split(',')
                .map(|p| p.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .with_context(|| {
                    format!("cannot read '{s}': expected synthetic:ROWS,FEATURES,CLASSES[,SEED]")
                })?;
            let (rows, features, classes, seed) = match nums.as_slice() {
                [r, f, c] => (*r, *f, *c, 1),
                [r, f, c, seed] => (*r, *f, *c, *seed),
                _ => bail!("cannot read '{s}': expected synthetic:ROWS,FEATURES,CLASSES[,SEED]"),
            };
            synthetic_classification(rows as usize, features as usize, classes as usize, seed)?
        }
        Some(path) => load_path(Path::new(path))?,
    };
    data.scale_to_unit();
    Ok(data)
}

/// Epochs on the terminal and in the metrics file; the bar counts tasks.
impl MlrObserver for RunOutput {
    fn task_completed(&self) {
        self.inc();
    }

    fn epoch_completed(&self, m: &EpochMetrics) {
        self.line(format!(
            "epoch {:>3}  loss {:.4}  test loss {:.4}  accuracy {:.2}%  {:.2}s",
            m.epoch,
            m.loss,
            m.test_loss,
            m.accuracy * 100.0,
            m.elapsed_s
        ));
        self.record(m);
    }
}

/// The training and held-out sets the command line names, and a name for messages.
fn load_split(args: &MlrCliArgs) -> Result<(Dataset, Dataset, String)> {
    let data = load_dataset(args.data.as_deref())?;
    let name = args
        .data
        .clone()
        .unwrap_or_else(|| DEFAULT_DATASET_NAME.to_string());
    let (train, test) = data
        .split_tail_fraction(args.test_fraction)
        .with_context(|| format!("cannot hold out {} of {name}", args.test_fraction))?;
    Ok((train, test, name))
}

fn mlr_config(args: &MlrCliArgs) -> MlrConfig {
    MlrConfig {
        epochs: args.epochs,
        lr: args.lr,
        batch: args.batch,
        staleness: args.staleness,
        block_features: args.block_features,
        weight_per_row: args.weight_per_row,
    }
}

/// The MLR app a node process runs: same data and hyperparameters, no progress output.
pub fn build_app(args: &MlrCliArgs, _node: bool) -> Result<Arc<MlrApp>> {
    let (train, test, _) = load_split(args)?;
    let app = MlrApp::new(
        mlr_config(args),
        Arc::new(train),
        Arc::new(test),
        Arc::new(Quiet),
    )
    .and_then(|app| app.with_compute(args.device.open()?))
    .map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(app))
}

pub fn run(args: MlrCliArgs) -> Result<()> {
    let compute = args.cluster.master_compute(args.device)?;
    let (train, test, name) = load_split(&args)?;
    eprintln!(
        "mlr on {name}: {} training rows, {} held out, {} features, {} classes, on {}",
        train.rows(),
        test.rows(),
        train.num_features,
        train.num_classes.max(test.num_classes),
        args.device
    );
    let config = mlr_config(&args);
    let job = args.cluster.job_config(false);
    job.validate()?;
    let executors = match args.cluster.node_count()? {
        Some(nodes) => nodes * args.cluster.executors_per_worker,
        None => job.num_executors(),
    } as u64;
    let iterations = (train.rows() as u64)
        .div_ceil(executors.max(1))
        .div_ceil(args.batch.max(1) as u64);
    let total_tasks = args.epochs as u64 * executors * (iterations + 1);
    let output = RunOutput::with_bar(&args.cluster, args.quiet, "tasks")?;
    output.set_length(total_tasks);
    let app = Arc::new(
        MlrApp::new(config, Arc::new(train), Arc::new(test), output.clone())
            .and_then(|app| app.with_compute(compute))
            .map_err(|e| anyhow!("{e}"))?,
    );
    let (outcome, checkpoints) = super::execute_app(app, &args.cluster, false, &output)?;
    let last = outcome.driver.history().last().cloned();
    if let Some(m) = last {
        eprintln!(
            "done: {} epochs, {} tasks in {:.2}s, held-out accuracy {:.2}%",
            m.epoch,
            outcome.stats.tasks_completed,
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
