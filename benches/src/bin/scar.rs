//! `harp-scar`: SCAR's rework-cost experiments (SCAR §5.5.3–5.5.4) on MLR, in one process.
//!
//! MLR trains by full-batch gradient descent on the embedded MNIST subset, its weights one
//! row per feature (one iteration per epoch; the loss of iteration `k` is the training loss at the weights after `k`
//! updates). A failure-free run gives the loss curve and the convergence criterion (its
//! loss after `--converge-at` iterations, SCAR's "reached in roughly 60 iterations"). Each
//! trial then runs the same job with one injected loss of parameters at an iteration drawn
//! from a geometric distribution, and its rework cost is the number of extra iterations it
//! needs to reach the criterion. Every point is the mean of `--trials` trials with a 95%
//! confidence interval.
//!
//! Figures (`--figure`):
//! * `headline`: losing 1/2 of the parameters, prioritized 1/8 checkpoints with partial
//!   recovery against full checkpoints with full recovery (SCAR: 78–95% less rework).
//! * `5.7`: partial against full recovery (full checkpoints) losing 1/4, 1/2, 3/4.
//! * `5.9`: priority, round-robin and random at checkpoint fractions 1, 1/2, 1/4, 1/8 with
//!   the saved rows per iteration held constant (`r` every `r·C` iterations), losing 1/2.
//!
//! Output: one JSON line per point on stdout and a table on stderr.

use anyhow::{anyhow, Result};
use clap::{Parser, ValueEnum};
use harp::scar::{
    mean_confidence_interval, rework_cost, ConvergenceCriterion, ReworkCost, SplitMix64,
};
use harp::{Fault, Injection, JobConfig, Recovery, ScarOptions, Selection};
use harp_apps::data::Dataset;
use harp_apps::mlr::{MlrApp, MlrConfig, Quiet};
use serde_json::json;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Figure {
    Headline,
    #[value(name = "5.7")]
    Fig57,
    #[value(name = "5.9")]
    Fig59,
}

#[derive(Parser, Debug)]
#[command(
    name = "harp-scar",
    about = "SCAR rework-cost experiments on MLR (JSON lines)"
)]
struct Args {
    #[arg(long, value_enum, default_value_t = Figure::Headline)]
    figure: Figure,
    /// Trials per point.
    #[arg(long, default_value_t = 20)]
    trials: u32,
    /// Iterations of every run.
    #[arg(long, default_value_t = 100)]
    iterations: u32,
    /// The failure-free run's iteration whose loss is the convergence criterion.
    #[arg(long, default_value_t = 60)]
    converge_at: usize,
    /// C: the full checkpoint's period in iterations.
    #[arg(long, default_value_t = 8)]
    period: u64,
    /// Mean of the geometric distribution of the failure iteration (after the first C).
    #[arg(long, default_value_t = 16.0)]
    failure_mean: f64,
    /// Learning rate of full-batch gradient descent.
    #[arg(long, default_value_t = 0.5)]
    lr: f32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// One experiment setting.
#[derive(Clone, Copy, Debug)]
struct Setting {
    selection: Selection,
    fraction: f64,
    recovery: Recovery,
    lost: f64,
}

struct Data {
    train: Arc<Dataset>,
    test: Arc<Dataset>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut mnist = harp_apps::default_data::mnist10k()?;
    mnist.scale_to_unit();
    let (train, test) = mnist.split_tail_fraction(0.2)?;
    let data = Data {
        train: Arc::new(train),
        test: Arc::new(test),
    };
    let baseline = losses(&args, &data, None)?;
    let criterion = *baseline
        .get(args.converge_at)
        .ok_or_else(|| anyhow!("--converge-at is beyond --iterations"))?;
    eprintln!(
        "failure-free: loss {:.4} -> {:.4}; criterion {criterion:.4} (iteration {})",
        baseline[0],
        baseline.last().copied().unwrap_or(f64::NAN),
        args.converge_at
    );
    let full = |lost| Setting {
        selection: Selection::Full,
        fraction: 1.0,
        recovery: Recovery::Full,
        lost,
    };
    let settings: Vec<(String, Setting)> = match args.figure {
        Figure::Headline => vec![
            ("full checkpoint, full recovery".into(), full(0.5)),
            (
                "priority 1/8, partial recovery".into(),
                Setting {
                    selection: Selection::Priority,
                    fraction: 0.125,
                    recovery: Recovery::Partial,
                    lost: 0.5,
                },
            ),
        ],
        Figure::Fig57 => [0.25, 0.5, 0.75]
            .into_iter()
            .flat_map(|lost| {
                [Recovery::Full, Recovery::Partial].map(|recovery| {
                    (
                        format!("lost {lost}, {recovery:?} recovery"),
                        Setting {
                            recovery,
                            ..full(lost)
                        },
                    )
                })
            })
            .collect(),
        Figure::Fig59 => {
            let mut out = vec![("full checkpoint, full recovery".to_string(), full(0.5))];
            for fraction in [1.0, 0.5, 0.25, 0.125] {
                for selection in [
                    Selection::Priority,
                    Selection::RoundRobin,
                    Selection::Random { seed: args.seed },
                ] {
                    out.push((
                        format!("{selection:?} r={fraction}"),
                        Setting {
                            selection,
                            fraction,
                            recovery: Recovery::Partial,
                            lost: 0.5,
                        },
                    ));
                }
            }
            out
        }
    };
    let mut reference = None;
    eprintln!(
        "{:<40} {:>10} {:>16} {:>10}",
        "setting", "rework", "95% CI", "vs first"
    );
    for (name, setting) in settings {
        let mut costs = Vec::new();
        let mut unreached = 0;
        for trial in 0..args.trials {
            let at = failure_iteration(&args, trial);
            let curve = losses(&args, &data, Some((setting, at, trial)))?;
            let after = curve.get(at as usize..).unwrap_or(&[]);
            match rework_cost(
                &baseline,
                after,
                at as usize,
                ConvergenceCriterion::Loss(criterion),
            )
            .map_err(|e| anyhow!("{e}"))?
            {
                ReworkCost::Iterations(n) => costs.push(n as f64),
                ReworkCost::NotReached { at_least } => {
                    unreached += 1;
                    costs.push(at_least as f64);
                }
            }
        }
        let (mean, half) = mean_confidence_interval(&costs, 0.95).map_err(|e| anyhow!("{e}"))?;
        let ratio = match reference {
            None => {
                reference = Some(mean);
                1.0
            }
            Some(r) if r > 0.0 => mean / r,
            Some(_) => f64::NAN,
        };
        eprintln!(
            "{name:<40} {mean:>10.2} {:>16} {ratio:>10.3}",
            format!("± {half:.2}")
        );
        println!(
            "{}",
            json!({
                "bench": "scar", "figure": format!("{:?}", args.figure), "setting": name,
                "selection": format!("{:?}", setting.selection), "fraction": setting.fraction,
                "recovery": format!("{:?}", setting.recovery), "lost": setting.lost,
                "trials": args.trials, "rework_mean": mean, "rework_ci95": half,
                "rework": costs, "unreached": unreached, "ratio_vs_first": ratio,
                "reduction_vs_first": 1.0 - ratio, "criterion": criterion,
            })
        );
    }
    Ok(())
}

/// The failure iteration of `trial`: the first `C` iterations, then a geometric number of
/// further ones (mean `--failure-mean`), before the criterion is reached.
fn failure_iteration(args: &Args, trial: u32) -> u64 {
    let draw = SplitMix64::for_round(args.seed, u64::from(trial)).next_u64();
    let u = ((draw >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let p = 1.0 / args.failure_mean.max(1.0);
    let extra = (u.ln() / (1.0 - p).ln()).floor() as u64;
    (args.period + extra).min(args.converge_at.saturating_sub(2) as u64)
}

/// The training loss after each iteration `0..iterations` of one run, with the failure of
/// `failure` (setting, iteration, trial) injected if given.
fn losses(args: &Args, data: &Data, failure: Option<(Setting, u64, u32)>) -> Result<Vec<f64>> {
    let executors = 4usize;
    let per_executor = data.train.rows().div_ceil(executors);
    let config = MlrConfig {
        epochs: args.iterations,
        lr: args.lr,
        batch: per_executor,
        staleness: 0,
        // One row per feature (its weight for every class), as SCAR partitions MLR's
        // parameter matrix: a fraction of "the parameters" is a fraction of these rows.
        block_features: Some(1),
    };
    let app = Arc::new(
        MlrApp::new(
            config,
            data.train.clone(),
            data.test.clone(),
            Arc::new(Quiet),
        )
        .map_err(|e| anyhow!("{e}"))?,
    );
    let scar = failure.map(|(setting, at, trial)| ScarOptions {
        period: args.period,
        fraction: setting.fraction,
        selection: setting.selection,
        recovery: setting.recovery,
        inject: vec![Injection {
            at_iteration: at,
            fault: Fault::Lose {
                fraction: setting.lost,
                seed: args.seed.wrapping_mul(1_000_003) ^ u64::from(trial),
            },
        }],
    });
    let job = JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 2,
        shards_per_server: 8,
        collect_params: false,
        scar,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = rt.block_on(harp::run_job(app, &job))?;
    let history = outcome.driver.history();
    if let Some((_, at, _)) = failure {
        let injected = outcome.stats.injections.len();
        if injected != 1 {
            return Err(anyhow!(
                "the failure at iteration {at} was injected {injected} times"
            ));
        }
    }
    Ok(history.iter().map(|m| m.loss).collect())
}
