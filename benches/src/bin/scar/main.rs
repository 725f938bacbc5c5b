//! `harp-scar`: SCAR's rework-cost experiments (SCAR §5.5.3–5.5.4) on MLR, in one process.
//!
//! MLR trains by full-batch gradient descent on the embedded MNIST subset (one iteration per
//! epoch; the loss of iteration `k` is the training loss at the weights after `k` updates).
//! A parameter (`--parameter`) is one weight, a row of its own, as SCAR §5.5.1 describes
//! MLR's parameters ("an M × N matrix of real numbers"), or one feature's row of weights for
//! every class: checkpoint rounds rank, and failures lose, whole parameters. A failure-free
//! run gives the loss curve and the convergence criterion, which it first reaches after
//! `--converge-at` iterations (SCAR's "reached in roughly 60 iterations"; the criterion is
//! halfway between the losses at `--converge-at - 1` and `--converge-at`). Each
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
//! * `overhead`: epoch time with prioritized 1/8 checkpoints (every C/8 iterations) on
//!   against off, no failure, the runs interleaved `--repeats` times (issue target: ≤ 1.01),
//!   with the pairs' mean ratio and its 95% CI, and a third run per repeat with a round every
//!   other iteration for the in-run comparison of epochs with and without a round
//!   (`overhead.rs`).
//!
//! Output: one JSON line per point on stdout, a table on stderr, and under `--out` the
//! figure's table (`<figure>.md`), plot (`<figure>.svg`) and every run's loss curve.

use anyhow::{anyhow, Result};
use clap::{Parser, ValueEnum};
use harp::scar::{
    fractional_rework_cost, mean_confidence_interval, rework_cost, ConvergenceCriterion,
    ReworkCost, SplitMix64,
};
use harp::{Fault, FaultTiming, Injection, JobConfig, Recovery, ScarOptions, Selection};
use harp_apps::data::Dataset;
use harp_apps::mlr::{EpochMetrics, MlrApp, MlrConfig, Quiet};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

mod overhead;
mod plot;

// The allocator the `harp` binary runs jobs with: `--figure overhead` measures what a job
// pays for its checkpoints, and under glibc's malloc the checkpointed side's longer-lived
// saved rows made every allocation dearer (about 7% more CPU in the allocator alone).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Figure {
    /// Rework after losing 1/2 of the parameters: full checkpoints and full recovery against
    /// prioritized 1/8 checkpoints and partial recovery.
    Headline,
    /// SCAR Fig. 5.7: partial against full recovery (full checkpoints) at 1/4, 1/2 and 3/4 lost.
    #[value(name = "5.7")]
    Fig57,
    /// SCAR Fig. 5.9: priority, round-robin and random selection at r = 1, 1/2, 1/4, 1/8.
    #[value(name = "5.9")]
    Fig59,
    /// Epoch time with the running checkpoint on against off (no failure).
    Overhead,
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
    /// The iteration at which the failure-free run first reaches the convergence criterion
    /// (halfway between its losses at this iteration and the one before).
    #[arg(long, default_value_t = 60)]
    converge_at: usize,
    /// C: the full checkpoint's period in iterations.
    #[arg(long, default_value_t = 8)]
    period: u64,
    /// Mean of the geometric distribution of the failure iteration (after the first C).
    #[arg(long, default_value_t = 16.0)]
    failure_mean: f64,
    /// Learning rate of full-batch gradient descent. Each of the 4 executors steps by it on
    /// its quarter of the data, so the whole model moves by 4× this per iteration; at 0.5 the
    /// loss oscillated (2.3 → 1.2 → 6.1 → …) and a lost parameter could even lower it.
    #[arg(long, default_value_t = 0.1)]
    lr: f32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// When the failure strikes: just before its iteration's checkpoint round (the image
    /// is one round old) or just after it (a failure at the start of the next iteration).
    /// A real failure falls between the two; measuring both brackets its rework.
    #[arg(long, value_enum, default_value_t = Timing::BeforeRound)]
    fault_timing: Timing,
    /// What one of MLR's parameters is: every weight on its own (SCAR §5.5.1: "the model
    /// parameters are an M × N matrix of real numbers"), or a feature's row of weights for
    /// every class. Checkpoints prioritize, and failures lose, whole parameters.
    #[arg(long, value_enum, default_value_t = Unit::Weight)]
    parameter: Unit,
    /// `--figure overhead`: runs with checkpoints on and off, interleaved, per setting.
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// `--figure overhead`: run only one side, `--repeats` times (to profile it, e.g. under
    /// `perf record`), and print its epoch times instead of the ratio.
    #[arg(long, value_enum, default_value_t = Side::Both)]
    side: Side,
    /// Where the figure's table (`<figure>.md`), plot (`<figure>.svg`) and every run's loss
    /// curve (`<figure>-curves.json`, to check a point by eye) are written.
    #[arg(long, default_value = "target/harp-scar")]
    out: std::path::PathBuf,
}

/// `--parameter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Unit {
    Weight,
    Feature,
}

/// `--side`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Side {
    Both,
    On,
    Off,
}

/// `--fault-timing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Timing {
    BeforeRound,
    AfterRound,
}

impl Timing {
    fn fault_timing(self) -> FaultTiming {
        match self {
            Timing::BeforeRound => FaultTiming::BeforeRound,
            Timing::AfterRound => FaultTiming::AfterRound,
        }
    }
}

/// One experiment setting.
#[derive(Clone, Copy, Debug)]
struct Setting {
    selection: Selection,
    fraction: f64,
    recovery: Recovery,
    lost: f64,
}

/// Where a setting's point goes in the plot: its line, x position and x label.
struct PlotAt {
    series: String,
    x: f64,
    x_label: String,
}

impl PlotAt {
    fn new(series: impl Into<String>, x: f64, x_label: impl Into<String>) -> Self {
        Self {
            series: series.into(),
            x,
            x_label: x_label.into(),
        }
    }
}

/// `1/n` for a fraction `1/n`, else the fraction itself.
fn fraction_label(fraction: f64) -> String {
    let n = (1.0 / fraction).round();
    if (fraction * n - 1.0).abs() < 1e-9 && n > 1.0 {
        format!("1/{n}")
    } else {
        format!("{fraction}")
    }
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
    if args.figure == Figure::Overhead {
        return measure_overhead(&args, &data);
    }
    let baseline = losses(&args, &data, None)?;
    let criterion = criterion_at(&baseline, args.converge_at)?;
    eprintln!(
        "failure-free: loss {:.4} -> {:.4}; criterion {criterion:.4} (reached at iteration {})",
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
    let full_full = "full checkpoint, full recovery";
    let settings: Vec<(String, Setting, PlotAt)> = match args.figure {
        Figure::Headline => vec![
            (
                full_full.into(),
                full(0.5),
                PlotAt::new("mean rework", 0.0, full_full),
            ),
            (
                "priority 1/8, partial recovery".into(),
                Setting {
                    selection: Selection::Priority,
                    fraction: 0.125,
                    recovery: Recovery::Partial,
                    lost: 0.5,
                },
                PlotAt::new("mean rework", 1.0, "priority 1/8, partial recovery"),
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
                        PlotAt::new(format!("{recovery:?} recovery"), lost, fraction_label(lost)),
                    )
                })
            })
            .collect(),
        // Measured above, without failures.
        Figure::Overhead => Vec::new(),
        Figure::Fig59 => {
            let mut out = vec![(
                full_full.to_string(),
                full(0.5),
                PlotAt::new(full_full, 0.0, "1"),
            )];
            for fraction in [1.0, 0.5, 0.25, 0.125] {
                for selection in [
                    Selection::Priority,
                    Selection::RoundRobin,
                    Selection::Random { seed: args.seed },
                ] {
                    let series = match selection {
                        Selection::Random { .. } => "Random".to_string(),
                        other => format!("{other:?}"),
                    };
                    out.push((
                        format!("{series} r={fraction}"),
                        Setting {
                            selection,
                            fraction,
                            recovery: Recovery::Partial,
                            lost: 0.5,
                        },
                        PlotAt::new(series, (1.0 / fraction).log2(), fraction_label(fraction)),
                    ));
                }
            }
            out
        }
    };
    let mut reference: Option<(f64, f64)> = None;
    let mut curves = Vec::new();
    // Each trial's loss curve by `run_key`: settings that are the same experiment share them.
    let mut runs: HashMap<String, Vec<f64>> = HashMap::new();
    eprintln!(
        "{:<40} {:>8} {:>9} {:>8} {:>8} {:>9} {:>8}",
        "setting", "rework", "95% CI", "vs first", "interp.", "95% CI", "vs first"
    );
    let mut points = Vec::new();
    let mut table = vec![
        "| setting | trials | rework, whole iterations (95% CI) | vs first | rework, interpolated (95% CI) | vs first | not reached |".to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    for (name, setting, at_plot) in settings {
        let mut costs = Vec::new();
        let mut fractional_costs = Vec::new();
        let mut unreached = 0;
        for trial in 0..args.trials {
            let at = failure_iteration(&args, trial);
            let curve = match runs.get(&run_key(&setting, trial)) {
                Some(curve) => curve.clone(),
                None => {
                    let curve = losses(&args, &data, Some((setting, at, trial)))?;
                    runs.insert(run_key(&setting, trial), curve.clone());
                    curve
                }
            };
            let after = curve.get(at as usize..).unwrap_or(&[]);
            curves.push(
                json!({ "setting": name, "trial": trial, "failure_at": at, "losses": curve }),
            );
            let criterion = ConvergenceCriterion::Loss(criterion);
            let whole = rework_cost(&baseline, after, at as usize, criterion)
                .map_err(|e| anyhow!("{e}"))?;
            let fractional = fractional_rework_cost(&baseline, after, at as usize, criterion)
                .map_err(|e| anyhow!("{e}"))?;
            match (whole, fractional) {
                (ReworkCost::Iterations(n), Some(f)) => {
                    costs.push(n as f64);
                    fractional_costs.push(f);
                }
                // Not reached: both count the least it can be.
                (ReworkCost::NotReached { at_least }, _)
                | (ReworkCost::Iterations(at_least), None) => {
                    unreached += 1;
                    costs.push(at_least as f64);
                    fractional_costs.push(at_least as f64);
                }
            }
        }
        let (mean, half) = mean_confidence_interval(&costs, 0.95).map_err(|e| anyhow!("{e}"))?;
        let (f_mean, f_half) =
            mean_confidence_interval(&fractional_costs, 0.95).map_err(|e| anyhow!("{e}"))?;
        let (reference_mean, reference_f_mean) = *reference.get_or_insert((mean, f_mean));
        let ratio_to = |value: f64, reference: f64| {
            if reference > 0.0 {
                value / reference
            } else {
                f64::NAN
            }
        };
        let ratio = ratio_to(mean, reference_mean);
        let f_ratio = ratio_to(f_mean, reference_f_mean);
        eprintln!(
            "{name:<40} {mean:>8.2} {:>9} {ratio:>8.3} {f_mean:>8.2} {:>9} {f_ratio:>8.3}",
            format!("± {half:.2}"),
            format!("± {f_half:.2}"),
        );
        table.push(format!(
            "| {name} | {} | {mean:.2} ± {half:.2} | {ratio:.3} | {f_mean:.2} ± {f_half:.2} | {f_ratio:.3} | {unreached} |",
            args.trials
        ));
        points.push(plot::Point {
            series: at_plot.series,
            x: at_plot.x,
            x_label: at_plot.x_label,
            mean: f_mean,
            ci95: f_half,
        });
        println!(
            "{}",
            json!({
                "bench": "scar", "figure": format!("{:?}", args.figure), "setting": name,
                "selection": format!("{:?}", setting.selection), "fraction": setting.fraction,
                "recovery": format!("{:?}", setting.recovery), "lost": setting.lost,
                "fault_timing": format!("{:?}", args.fault_timing), "trials": args.trials, "rework_mean": mean, "rework_ci95": half,
                "rework": costs, "unreached": unreached, "ratio_vs_first": ratio,
                "reduction_vs_first": 1.0 - ratio, "criterion": criterion,
                "rework_interpolated_mean": f_mean, "rework_interpolated_ci95": f_half,
                "rework_interpolated": fractional_costs,
                "interpolated_ratio_vs_first": f_ratio,
                "interpolated_reduction_vs_first": 1.0 - f_ratio,
            })
        );
    }
    write_outputs(
        &args,
        &table,
        &points,
        &json!({
            "failure_free": baseline, "criterion": criterion, "trials": curves,
        }),
    )
}

/// The convergence criterion: halfway between the failure-free losses at iterations
/// `converge_at - 1` and `converge_at`, so that the failure-free run first reaches it at
/// `converge_at`. A criterion equal to a recorded loss would make whole-iteration counts
/// hinge on rounding: a run that replays the same iterations after a full recovery lands a
/// hair above it (its updates meet on the servers in another order) and would count one
/// iteration more.
fn criterion_at(baseline: &[f64], converge_at: usize) -> Result<f64> {
    match (converge_at.checked_sub(1), baseline.get(converge_at)) {
        (Some(before), Some(&at)) => Ok(0.5 * (baseline[before] + at)),
        (None, _) => Err(anyhow!("--converge-at must be at least 1")),
        (_, None) => Err(anyhow!("--converge-at is beyond --iterations")),
    }
}

/// Writes the figure's table, plot and loss curves under `--out`.
fn write_outputs(
    args: &Args,
    table: &[String],
    points: &[plot::Point],
    curves: &serde_json::Value,
) -> Result<()> {
    let (stem, title, x_axis) = match args.figure {
        Figure::Headline => (
            "headline",
            "Losing 1/2 of MLR's parameters",
            "checkpoint and recovery",
        ),
        Figure::Fig57 => (
            "fig-5.7",
            "Partial vs full recovery (full checkpoints)",
            "fraction of parameters lost",
        ),
        Figure::Overhead => ("overhead", "Checkpoint overhead", "setting"),
        Figure::Fig59 => (
            "fig-5.9",
            "Prioritized checkpoints, 1/2 of the parameters lost",
            "checkpoint fraction r (saved every r·C iterations)",
        ),
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| anyhow!("creating {}: {e}", args.out.display()))?;
    let path = |ext: &str| args.out.join(format!("{stem}{ext}"));
    let mut markdown = format!(
        "# harp-scar --figure {stem}: MLR, {} trials per point, C = {}, lr {}, faults {:?}\n\n",
        args.trials, args.period, args.lr, args.fault_timing
    );
    markdown.push_str(&table.join("\n"));
    markdown.push('\n');
    std::fs::write(path(".md"), markdown)?;
    std::fs::write(path("-curves.json"), serde_json::to_vec(curves)?)?;
    plot::write_svg(&path(".svg"), title, x_axis, points)?;
    eprintln!(
        "wrote {}, {} and {}",
        path(".md").display(),
        path(".svg").display(),
        path("-curves.json").display()
    );
    Ok(())
}

/// What one trial of `setting` runs, as a key: settings that are the same experiment share
/// it, so their trials run once. A full recovery restores every row whatever was lost, and
/// a checkpoint fraction of 1 saves every row whatever the selection (so the full-recovery
/// points of `--figure 5.7` and the three `r = 1` points of `--figure 5.9` are each one set
/// of runs). Two runs of one setting need not be bit-identical (the order in which
/// updates and saves meet on the servers varies from run to run), only the same
/// experiment.
fn run_key(setting: &Setting, trial: u32) -> String {
    let selection = if setting.fraction >= 1.0 {
        "every row".to_string()
    } else {
        format!("{:?}", setting.selection)
    };
    let lost = match setting.recovery {
        Recovery::Full => "any".to_string(),
        Recovery::Partial => setting.lost.to_string(),
    };
    format!(
        "{selection} r={} {:?} lost={lost} trial={trial}",
        setting.fraction, setting.recovery
    )
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
            timing: args.fault_timing.fault_timing(),
        }],
    });
    let (history, stats) = run_mlr(args, data, scar)?;
    if let Some((_, at, _)) = failure {
        let injected = stats.injections.len();
        if injected != 1 {
            return Err(anyhow!(
                "the failure at iteration {at} was injected {injected} times"
            ));
        }
    }
    Ok(history.iter().map(|m| m.loss).collect())
}

/// One MLR run of `--iterations` epochs with SCAR's options `scar`: every epoch's figures
/// and the job's stats.
fn run_mlr(
    args: &Args,
    data: &Data,
    scar: Option<ScarOptions>,
) -> Result<(Vec<EpochMetrics>, harp::JobStats)> {
    let executors = 4usize;
    let per_executor = data.train.rows().div_ceil(executors);
    let config = MlrConfig {
        epochs: args.iterations,
        lr: args.lr,
        batch: per_executor,
        staleness: 0,
        // One row per parameter (`--parameter`): a fraction of "the parameters" is a
        // fraction of these rows.
        block_features: Some(1),
        weight_per_row: args.parameter == Unit::Weight,
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
    Ok((outcome.driver.history().to_vec(), outcome.stats))
}

/// `--figure overhead`: prioritized 1/8 checkpoints every C/8 iterations on against off, and
/// a third run per repeat with rounds every other iteration for the in-run comparison
/// (`overhead::round_epoch_ratios`).
fn measure_overhead(args: &Args, data: &Data) -> Result<()> {
    const FRACTION: f64 = 0.125;
    let scar = |period: u64| ScarOptions {
        period,
        fraction: FRACTION,
        selection: Selection::Priority,
        recovery: Recovery::Partial,
        inject: Vec::new(),
    };
    // Rounds every other iteration: twice the period at the same fraction.
    let alternate_period = 2 * args.period;
    let alternate_interval =
        harp::scar::checkpoint_schedule(alternate_period, FRACTION).map_err(|e| anyhow!("{e}"))?;
    let elapsed = |scar: Option<ScarOptions>| -> Result<(Vec<f64>, u64)> {
        let (history, stats) = run_mlr(args, data, scar)?;
        let elapsed = history.iter().map(|m| m.elapsed_s).collect();
        Ok((elapsed, stats.checkpoints.rounds))
    };
    let timing = |scar: Option<ScarOptions>| -> Result<(overhead::EpochTiming, Vec<f64>)> {
        let (elapsed, rounds) = elapsed(scar)?;
        let timing = overhead::EpochTiming {
            seconds_per_epoch: overhead::seconds_per_epoch(&elapsed)?,
            median_epoch_s: overhead::median_epoch(&elapsed)?,
            rounds,
        };
        Ok((timing, elapsed))
    };
    if args.side != Side::Both {
        let checkpointed = args.side == Side::On;
        let mut per_epoch = Vec::new();
        for repeat in 0..args.repeats {
            let (t, elapsed) = timing(checkpointed.then(|| scar(args.period)))?;
            let q = overhead::epoch_quantiles(&elapsed, &[0.1, 0.5, 0.9])?;
            eprintln!(
                "repeat {repeat}: {:.2} ms/epoch (epochs p10 {:.2}, median {:.2}, p90 {:.2} ms; {} rounds)",
                t.seconds_per_epoch * 1e3,
                q[0] * 1e3,
                q[1] * 1e3,
                q[2] * 1e3,
                t.rounds
            );
            per_epoch.push(t.seconds_per_epoch);
        }
        println!(
            "{}",
            json!({
                "bench": "scar", "figure": "overhead", "side": format!("{:?}", args.side),
                "period": args.period, "epochs": args.iterations, "s_per_epoch": per_epoch,
            })
        );
        return Ok(());
    }
    let (mut on, mut off, mut round_epochs) = (Vec::new(), Vec::new(), Vec::new());
    // The off runs' epochs compared the same way (no round anywhere): the in-run figure's
    // control, which shows any bias of the comparison itself.
    let mut control_epochs = Vec::new();
    for repeat in 0..args.repeats {
        // Alternate which goes first, so neither always runs on a warmer machine.
        let order = if repeat % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for checkpointed in order {
            let (timing, elapsed) = timing(checkpointed.then(|| scar(args.period)))?;
            if checkpointed {
                on.push(timing);
            } else {
                control_epochs.extend(overhead::round_epoch_ratios(&elapsed, alternate_interval));
                off.push(timing);
            }
        }
        let (alternate, _) = elapsed(Some(scar(alternate_period)))?;
        round_epochs.extend(overhead::round_epoch_ratios(&alternate, alternate_interval));
        let (last_on, last_off) = (&on[on.len() - 1], &off[off.len() - 1]);
        eprintln!(
            "repeat {repeat}: on {:.2} ms/epoch (median epoch {:.2}; {} rounds), off {:.2} ms/epoch (median {:.2})",
            last_on.seconds_per_epoch * 1e3,
            last_on.median_epoch_s * 1e3,
            last_on.rounds,
            last_off.seconds_per_epoch * 1e3,
            last_off.median_epoch_s * 1e3
        );
    }
    let (ratio, on_s, off_s) = overhead::overhead_ratio(&on, &off);
    let median_epoch_ratio = overhead::median_epoch_ratio(&on, &off);
    let pairs = overhead::pair_ratios(&on, &off);
    let interval = |samples: &[f64]| mean_confidence_interval(samples, 0.95).ok();
    let pair_ci = interval(&pairs);
    let round_ci = interval(&round_epochs);
    let control_ci = interval(&control_epochs);
    eprintln!(
        "epoch time, checkpoints on / off (medians of {}): {:.2} / {:.2} ms = {ratio:.4}",
        args.repeats,
        on_s * 1e3,
        off_s * 1e3
    );
    if let Some((mean, half)) = pair_ci {
        eprintln!(
            "mean of the {} pairs' ratios: {mean:.4} ± {half:.4} (95% CI)",
            pairs.len()
        );
    }
    if let Some((mean, half)) = round_ci {
        eprintln!(
            "in-run, rounds every {alternate_interval} iterations: an epoch with a round over its neighbours without, {mean:.4} ± {half:.4} (95% CI, {} epochs)",
            round_epochs.len()
        );
    }
    if let Some((mean, half)) = control_ci {
        eprintln!(
            "control, the runs without checkpoints read the same way: {mean:.4} ± {half:.4} (95% CI, {} epochs)",
            control_epochs.len()
        );
    }
    println!(
        "{}",
        json!({
            "bench": "scar", "figure": "overhead", "selection": "Priority", "fraction": FRACTION,
            "period": args.period, "epochs": args.iterations, "repeats": args.repeats,
            "on_s_per_epoch": on.iter().map(|t| t.seconds_per_epoch).collect::<Vec<_>>(),
            "off_s_per_epoch": off.iter().map(|t| t.seconds_per_epoch).collect::<Vec<_>>(),
            "rounds": on.iter().map(|t| t.rounds).collect::<Vec<_>>(),
            "median_on_s": on_s, "median_off_s": off_s, "ratio": ratio,
            "on_median_epoch_s": on.iter().map(|t| t.median_epoch_s).collect::<Vec<_>>(),
            "off_median_epoch_s": off.iter().map(|t| t.median_epoch_s).collect::<Vec<_>>(),
            "median_epoch_ratio": median_epoch_ratio,
            "pair_ratio_mean": pair_ci.map(|c| c.0), "pair_ratio_ci95": pair_ci.map(|c| c.1),
            "round_epoch_interval": alternate_interval,
            "round_epoch_ratio_mean": round_ci.map(|c| c.0),
            "round_epoch_ratio_ci95": round_ci.map(|c| c.1),
            "round_epochs": round_epochs.len(),
            "control_epoch_ratio_mean": control_ci.map(|c| c.0),
            "control_epoch_ratio_ci95": control_ci.map(|c| c.1),
        })
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(selection: Selection, fraction: f64, recovery: Recovery, lost: f64) -> Setting {
        Setting {
            selection,
            fraction,
            recovery,
            lost,
        }
    }

    #[test]
    fn the_criterion_is_first_reached_at_the_converge_iteration() {
        let baseline = [2.0, 1.0, 0.6, 0.5, 0.45];
        let criterion = criterion_at(&baseline, 3).unwrap();
        assert_eq!(criterion, 0.55);
        assert_eq!(
            harp::scar::iterations_to_reach(&baseline, criterion),
            Some(3)
        );
        assert!(criterion_at(&baseline, 0).is_err());
        assert!(criterion_at(&baseline, 5).is_err());
    }

    #[test]
    fn only_settings_that_are_the_same_experiment_share_their_runs() {
        let key = |s: Setting| run_key(&s, 3);
        // Full recovery: whatever was lost.
        assert_eq!(
            key(setting(Selection::Full, 1.0, Recovery::Full, 0.25)),
            key(setting(Selection::Full, 1.0, Recovery::Full, 0.75))
        );
        // A fraction of 1: whatever the selection.
        assert_eq!(
            key(setting(Selection::Priority, 1.0, Recovery::Partial, 0.5)),
            key(setting(Selection::RoundRobin, 1.0, Recovery::Partial, 0.5))
        );
        // Everything else differs.
        let distinct = [
            setting(Selection::Full, 1.0, Recovery::Partial, 0.25),
            setting(Selection::Full, 1.0, Recovery::Partial, 0.75),
            setting(Selection::Full, 1.0, Recovery::Full, 0.25),
            setting(Selection::Priority, 0.5, Recovery::Partial, 0.5),
            setting(Selection::RoundRobin, 0.5, Recovery::Partial, 0.5),
            setting(Selection::Priority, 0.25, Recovery::Partial, 0.5),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(run_key(a, 3), run_key(b, 3), "{a:?} vs {b:?}");
            }
        }
        assert_ne!(run_key(&distinct[0], 1), run_key(&distinct[0], 2), "trials");
    }
}
