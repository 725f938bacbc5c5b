//! Convergence plots of `harp run` metrics files (`harp plot`): one panel per metric (or
//! per pair, like training and held-out loss), one line per run, and a vertical line at
//! each scale event, fault and recovery the runs recorded, so a failure's perturbation or a
//! scale-out's speed-up can be seen where it happened. Output: SVG.
//!
//! This module owns what is drawn where ([`plan`]: panels, x positions, events placed on
//! either axis); [`records`] reads the files and [`chart`] draws the plan.

pub mod chart;
pub mod records;

pub use records::{read_run, At, Event, PlotError, Point, Run};

/// The x axis of a plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// The records' `epoch` or `iteration`.
    Iteration,
    /// The records' `elapsed_s`: seconds since the run started.
    Time,
}

/// What to plot.
#[derive(Clone, Debug)]
pub struct PlotOptions {
    /// One panel per metric named here; empty: the usual ones the runs have
    /// ([`DEFAULT_PANELS`]).
    pub metrics: Vec<String>,
    pub x: XAxis,
}

/// The panels drawn when no metric is named, each with the metrics it puts together, in
/// this order; a panel is drawn when any run has one of its metrics.
pub const DEFAULT_PANELS: [(&str, &[&str]); 4] = [
    ("loss", &["loss", "test_loss"]),
    ("accuracy", &["train_accuracy", "accuracy"]),
    ("RMSE", &["train_rmse", "test_rmse"]),
    ("log likelihood per token", &["log_likelihood"]),
];

/// One line: a run's metric, at x positions.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    /// The index of the run (its colour), and of the metric within its panel (its dash).
    pub run: usize,
    pub metric: usize,
    pub points: Vec<(f64, f64)>,
}

/// One panel of the plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub title: String,
    pub lines: Vec<Line>,
}

/// An event at its x position.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub x: f64,
    pub label: String,
    pub failure: bool,
}

/// Everything the chart draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub x_label: &'static str,
    pub panels: Vec<Panel>,
    pub marks: Vec<Mark>,
    /// Events that could not be placed on this axis (no time or iteration to go by).
    pub unplaced: usize,
}

/// Decides the panels, lines and event marks of `runs` under `options`.
pub fn plan(runs: &[Run], options: &PlotOptions) -> Result<Plan, PlotError> {
    let panels = panel_metrics(runs, &options.metrics)?;
    let many_runs = runs.len() > 1;
    let mut plan = Plan {
        x_label: match options.x {
            XAxis::Iteration => "epoch or iteration",
            XAxis::Time => "seconds since the start",
        },
        panels: Vec::new(),
        marks: Vec::new(),
        unplaced: runs.iter().map(|r| r.unplaced.len()).sum(),
    };
    for (title, metrics) in panels {
        let mut lines = Vec::new();
        for (run_index, run) in runs.iter().enumerate() {
            for (metric_index, metric) in metrics.iter().enumerate() {
                let points: Vec<(f64, f64)> = run
                    .points
                    .iter()
                    .filter_map(|p| Some((x_of(p, options.x)?, *p.values.get(metric)?)))
                    .collect();
                if points.is_empty() {
                    continue;
                }
                let label = match (many_runs, metrics.len() > 1) {
                    (true, true) => format!("{}: {metric}", run.name),
                    (true, false) => run.name.clone(),
                    (false, _) => metric.clone(),
                };
                lines.push(Line {
                    label,
                    run: run_index,
                    metric: metric_index,
                    points,
                });
            }
        }
        plan.panels.push(Panel { title, lines });
    }
    if plan.panels.iter().all(|p| p.lines.is_empty()) {
        // Every metric is in some run, so only the time axis can leave them all out.
        return Err(PlotError::NoElapsed);
    }
    for run in runs {
        let clock = clock(run);
        for event in &run.events {
            match place(&clock, event.at, options.x) {
                Some(x) => plan.marks.push(Mark {
                    x,
                    label: event.label.clone(),
                    failure: event.failure,
                }),
                None => plan.unplaced += 1,
            }
        }
    }
    Ok(plan)
}

/// The panels to draw: a title and its metrics.
fn panel_metrics(runs: &[Run], named: &[String]) -> Result<Vec<(String, Vec<String>)>, PlotError> {
    let has = |metric: &str| {
        runs.iter()
            .any(|r| r.points.iter().any(|p| p.values.contains_key(metric)))
    };
    let available = || {
        let mut all: Vec<&str> = runs
            .iter()
            .flat_map(|r| r.points.iter().flat_map(|p| p.values.keys()))
            .map(String::as_str)
            .collect();
        all.sort_unstable();
        all.dedup();
        if all.is_empty() {
            "no numeric figure at all".into()
        } else {
            all.join(", ")
        }
    };
    if !named.is_empty() {
        return named
            .iter()
            .map(|metric| {
                if has(metric) {
                    Ok((metric.clone(), vec![metric.clone()]))
                } else {
                    Err(PlotError::UnknownMetric {
                        metric: metric.clone(),
                        available: available(),
                    })
                }
            })
            .collect();
    }
    let panels: Vec<(String, Vec<String>)> = DEFAULT_PANELS
        .iter()
        .filter_map(|(title, metrics)| {
            let present: Vec<String> = metrics
                .iter()
                .filter(|m| has(m))
                .map(|m| m.to_string())
                .collect();
            (!present.is_empty()).then(|| (title.to_string(), present))
        })
        .collect();
    if panels.is_empty() {
        let wanted: Vec<&str> = DEFAULT_PANELS
            .iter()
            .flat_map(|(_, m)| m.iter().copied())
            .collect();
        return Err(PlotError::NoDefaultMetric {
            wanted: wanted.join(", "),
            available: available(),
        });
    }
    Ok(panels)
}

fn x_of(point: &Point, axis: XAxis) -> Option<f64> {
    match axis {
        XAxis::Iteration => Some(point.iteration),
        XAxis::Time => point.elapsed_s,
    }
}

/// A run's (seconds, iteration) pairs, from its points with an `elapsed_s`: the run starts
/// at 0 s, one iteration before its first point. Empty when no point has a time.
fn clock(run: &Run) -> Vec<(f64, f64)> {
    let mut pairs: Vec<(f64, f64)> = run
        .points
        .iter()
        .filter_map(|p| Some((p.elapsed_s?, p.iteration)))
        .collect();
    if let Some(&(_, first)) = pairs.first() {
        pairs.insert(0, (0.0, first - 1.0));
    }
    pairs
}

/// Where on `axis` an event at `at` goes: read off the run's `clock` when the event is
/// given in the other unit (`None` when the run has no clock).
fn place(clock: &[(f64, f64)], at: At, axis: XAxis) -> Option<f64> {
    match (at, axis) {
        (At::Iteration(i), XAxis::Iteration) => Some(i),
        (At::Seconds(s), XAxis::Time) => Some(s),
        _ if clock.is_empty() => None,
        (At::Seconds(s), XAxis::Iteration) => Some(interpolate(clock, s)),
        (At::Iteration(i), XAxis::Time) => {
            let flipped: Vec<(f64, f64)> = clock.iter().map(|&(t, i)| (i, t)).collect();
            Some(interpolate(&flipped, i))
        }
    }
}

/// The y of `x` on the polyline through `pairs` (sorted by x), held at its ends.
pub fn interpolate(pairs: &[(f64, f64)], x: f64) -> f64 {
    let Some(&(x0, y0)) = pairs.first() else {
        return x;
    };
    if x <= x0 {
        return y0;
    }
    for window in pairs.windows(2) {
        let ((xa, ya), (xb, yb)) = (window[0], window[1]);
        if x <= xb {
            return if xb > xa {
                ya + (yb - ya) * (x - xa) / (xb - xa)
            } else {
                yb
            };
        }
    }
    pairs[pairs.len() - 1].1
}

#[cfg(test)]
mod tests;
