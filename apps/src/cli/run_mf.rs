//! `harp run mf`: loads a ratings file, factorizes it by ALS or SGD, prints one line per
//! iteration, writes metrics.

use super::output::RunOutput;
use super::ClusterArgs;
use crate::data::{load_ratings, RatingRange, RatingsData};
use crate::device::Device;
use crate::mf::{MfApp, MfConfig, MfMetrics, MfObserver, MfSolver};
use crate::mlr::Quiet;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct MfCliArgs {
    /// A ratings file in MovieLens' `ratings.csv` layout (`userId,movieId,rating[,...]`,
    /// header optional; plain or gzip), e.g. `../shared/data/movielens-small/ratings.csv`.
    #[arg(long)]
    pub data: PathBuf,
    /// Fraction of the ratings held out for the test RMSE (chosen by a hash of the pair and
    /// --seed).
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,
    /// Accepted ratings, `MIN,MAX` (inclusive); a rating outside is an error.
    #[arg(long, default_value = "0.5,5")]
    pub rating_range: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Factors per user and item (1..=128).
    #[arg(long, default_value_t = 20)]
    pub rank: usize,
    /// How the factors are fitted: `als` (ALS-WR, SCAR's MF) or `sgd` (stratified SGD,
    /// every rating once per iteration).
    #[arg(long, value_enum, default_value_t = SolverArg::Als)]
    pub solver: SolverArg,
    /// Regularization. ALS-WR: a row with n ratings is regularized by lambda·n (default
    /// 0.1). SGD: the L2 term of each step (default 0.05).
    #[arg(long)]
    pub lambda: Option<f32>,
    /// SGD's learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f32,
    /// Iterations (ALS: each solves the users, then the items; SGD: each visits every
    /// training rating once).
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Seed of the held-out split and of the items' initial values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the executors solve (ALS) or step (SGD): `cpu`, `cuda` or `cuda:N`. On the
    /// GPU, SGD within a block is Hogwild (not bit-identical to the CPU's pass).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SolverArg {
    Als,
    Sgd,
}

fn rating_range(spec: &str) -> Result<RatingRange> {
    let parse = || -> Option<RatingRange> {
        let (min, max) = spec.split_once(',')?;
        let (min, max) = (min.trim().parse().ok()?, max.trim().parse().ok()?);
        Some(RatingRange { min, max })
    };
    match parse() {
        Some(r) if r.min.is_finite() && r.max.is_finite() && r.min <= r.max => Ok(r),
        _ => bail!("--rating-range {spec:?}: expected MIN,MAX with MIN <= MAX"),
    }
}

fn load_split(args: &MfCliArgs) -> Result<(RatingsData, RatingsData)> {
    let ratings = load_ratings(&args.data, rating_range(&args.rating_range)?)?;
    ratings
        .split(args.test_fraction, args.seed)
        .with_context(|| format!("cannot hold out {} of the ratings", args.test_fraction))
}

fn mf_config(args: &MfCliArgs) -> MfConfig {
    let (solver, default_lambda) = match args.solver {
        SolverArg::Als => (MfSolver::Als, 0.1),
        SolverArg::Sgd => (MfSolver::Sgd { lr: args.lr }, 0.05),
    };
    MfConfig {
        rank: args.rank,
        lambda: args.lambda.unwrap_or(default_lambda),
        solver,
        iterations: args.iterations,
        seed: args.seed,
        ..MfConfig::default()
    }
}

/// The MF app a node process runs: same data and hyperparameters, no output.
pub fn build_app(args: &MfCliArgs) -> Result<Arc<MfApp>> {
    let (train, test) = load_split(args)?;
    let app = MfApp::new(
        mf_config(args),
        Arc::new(train),
        Arc::new(test),
        Arc::new(Quiet),
    )
    .and_then(|app| app.with_compute(args.device.open()?))
    .map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(app))
}

/// The held-out RMSE as printed: `n/a` when nothing is held out.
fn test_rmse(m: &MfMetrics) -> String {
    m.test_rmse
        .map_or_else(|| "n/a (none held out)".into(), |rmse| format!("{rmse:.4}"))
}

/// Iterations on the terminal and in the metrics file.
impl MfObserver for RunOutput {
    fn iteration_completed(&self, m: &MfMetrics) {
        self.line(format!(
            "iteration {:>3}  train RMSE {:.4}  test RMSE {}  {:.2}s",
            m.iteration,
            m.train_rmse,
            test_rmse(m),
            m.elapsed_s
        ));
        self.record(m);
    }
}

pub fn run(args: MfCliArgs) -> Result<()> {
    let compute = args.cluster.master_compute(args.device)?;
    let (train, test) = load_split(&args)?;
    eprintln!(
        "mf on {}: {} users, {} items, {} training ratings, {} held out, rank {}, on {}",
        args.data.display(),
        train.num_users(),
        train.num_items(),
        train.len(),
        test.len(),
        args.rank,
        args.device
    );
    let output = RunOutput::lines(&args.cluster)?;
    let app = Arc::new(
        MfApp::new(
            mf_config(&args),
            Arc::new(train),
            Arc::new(test),
            output.clone(),
        )
        .and_then(|app| app.with_compute(compute))
        .map_err(|e| anyhow!("{e}"))?,
    );
    let (outcome, checkpoints) = super::execute_app(app, &args.cluster, false, &output)?;
    if let Some(m) = outcome.driver.history().last() {
        eprintln!(
            "done: {} iterations in {:.2}s, train RMSE {:.4}, test RMSE {}",
            m.iteration,
            outcome.stats.elapsed_s,
            m.train_rmse,
            test_rmse(m)
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
