//! `harp plot`: draws one or more `--metrics-out` files as an SVG convergence plot
//! ([`crate::plot`]).

use crate::plot::{self, PlotOptions, XAxis};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// `harp plot`'s arguments.
#[derive(clap::Args, Debug)]
pub struct PlotCliArgs {
    /// Metrics files written by `harp run APP --metrics-out FILE` (several: one line each
    /// per metric, to compare runs).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Where to write the SVG (default: the first file with `.svg` for its extension).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A metric to plot, a panel each (repeatable; default: loss, accuracy, RMSE and log
    /// likelihood, those the runs have).
    #[arg(long = "metric")]
    pub metrics: Vec<String>,
    /// The x axis: `iteration` (the records' epoch or iteration) or `time` (their
    /// elapsed_s).
    #[arg(long, value_enum, default_value_t = XChoice::Iteration)]
    pub x: XChoice,
}

/// `--x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XChoice {
    Iteration,
    Time,
}

pub fn run(args: PlotCliArgs) -> Result<()> {
    let out = (args.out.clone()).unwrap_or_else(|| args.files[0].with_extension("svg"));
    if let Some(input) = args.files.iter().find(|file| same_file(file, &out)) {
        anyhow::bail!(
            "--out {}: that is the metrics file {} this plot reads; write the SVG elsewhere",
            out.display(),
            input.display()
        );
    }
    let mut metrics = Vec::new();
    for metric in args.metrics {
        if !metrics.contains(&metric) {
            metrics.push(metric);
        }
    }
    let runs = args
        .files
        .iter()
        .map(|path| plot::read_run(path))
        .collect::<Result<Vec<_>, _>>()?;
    let options = PlotOptions {
        metrics,
        x: match args.x {
            XChoice::Iteration => XAxis::Iteration,
            XChoice::Time => XAxis::Time,
        },
    };
    let plan = plot::plan(&runs, &options)?;
    plot::chart::write_svg(&plan, &out)?;
    let panels: Vec<&str> = plan.panels.iter().map(|p| p.title.as_str()).collect();
    let unplaced = match plan.unplaced {
        0 => String::new(),
        n => format!(" ({n} without a time or iteration on this axis, not drawn)"),
    };
    println!(
        "wrote {}: {} ({}), {} run{}, {} event{}{unplaced}",
        out.display(),
        if panels.len() == 1 {
            "1 panel"
        } else {
            "panels"
        },
        panels.join(", "),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        plan.marks.len(),
        if plan.marks.len() == 1 { "" } else { "s" },
    );
    Ok(())
}

/// Whether `a` and `b` name the same file (through links and `..` where both exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
