//! harp-scar's plot: every point of one figure (mean rework cost with its 95% confidence
//! interval) as an SVG chart, one line per series, as SCAR's Fig. 5.7 and 5.9 draw them.

use anyhow::{anyhow, Result};
use harp_apps::plot::chart::PALETTE;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// One measured point.
pub struct Point {
    /// The line it belongs to (e.g. "Priority", "partial recovery").
    pub series: String,
    /// Where it sits on the x axis, and what that position is called.
    pub x: f64,
    pub x_label: String,
    pub mean: f64,
    pub ci95: f64,
}

/// Writes `points` as an SVG chart titled `title` with `x_axis` under its x axis.
pub fn write_svg(path: &Path, title: &str, x_axis: &str, points: &[Point]) -> Result<()> {
    if points.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let x_min = points.iter().map(|p| p.x).fold(f64::INFINITY, f64::min);
    let x_max = points.iter().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max);
    let y_low = points
        .iter()
        .map(|p| p.mean - p.ci95)
        .fold(0.0_f64, f64::min);
    let y_high = points
        .iter()
        .map(|p| p.mean + p.ci95)
        .fold(1.0_f64, f64::max);
    let labels: BTreeMap<i64, String> = points
        .iter()
        .map(|p| (label_key(p.x), p.x_label.clone()))
        .collect();
    let mut series: BTreeMap<&str, Vec<&Point>> = BTreeMap::new();
    for point in points {
        series.entry(&point.series).or_default().push(point);
    }

    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((x_min - 0.5)..(x_max + 0.5), (y_low * 1.1)..(y_high * 1.1))
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc(x_axis)
        .y_desc("rework cost (iterations, interpolated)")
        .x_labels(labels.len().max(2) * 4)
        .x_label_formatter(&|x| labels.get(&label_key(*x)).cloned().unwrap_or_default())
        .draw()
        .map_err(draw_error)?;
    for (index, (name, mut line)) in series.into_iter().enumerate() {
        line.sort_by(|a, b| a.x.total_cmp(&b.x));
        let color = PALETTE[index % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                line.iter().map(|p| (p.x, p.mean)),
                color.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(line.iter().map(|p| {
                ErrorBar::new_vertical(
                    p.x,
                    p.mean - p.ci95,
                    p.mean,
                    p.mean + p.ci95,
                    color.filled(),
                    8,
                )
            }))
            .map_err(draw_error)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

/// Axis positions are multiples of 1/1000 here; ticks between them get no label.
fn label_key(x: f64) -> i64 {
    (x * 1000.0).round() as i64
}

fn draw_error<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow!(harp_apps::plot::chart::draw_error(e))
}
