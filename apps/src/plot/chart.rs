//! Draws a [`Plan`] as an SVG file with plotters: the panels stacked under each other on
//! one x axis, a colour per run (a dashed line for a panel's second metric), and the events
//! as vertical lines: red for faults and failures, blue for scale events and resumes.
//! Also the palette and the error conversion `harp-scar`'s figures use.

use super::{Mark, Panel, Plan, PlotError};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The colours of lines, one per run or series, in order (they repeat past six). No red:
/// that is the colour of failures.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

const FAILURE: RGBColor = RGBColor(200, 30, 30);
const SCALE: RGBColor = RGBColor(60, 110, 200);
const WIDTH: u32 = 900;
const PANEL_HEIGHT: u32 = 300;
/// Above this many events their lines carry no text (it would pile up).
const LABELLED_MARKS_MAX: usize = 12;

/// A plotters drawing error as text.
pub fn draw_error<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> String {
    format!("drawing the plot: {e}")
}

/// Writes `plan` to `path` as SVG.
pub fn write_svg(plan: &Plan, path: &Path) -> Result<(), PlotError> {
    let fail = |message: String| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    let height = PANEL_HEIGHT * plan.panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(draw_error(e)))?;
    let (x_low, x_high) = x_range(plan);
    let areas = root.split_evenly((plan.panels.len().max(1), 1));
    for (index, (panel, area)) in plan.panels.iter().zip(&areas).enumerate() {
        let labels = index == 0 && plan.marks.len() <= LABELLED_MARKS_MAX;
        draw_panel(
            area,
            panel,
            &plan.marks,
            plan.x_label,
            (x_low, x_high),
            labels,
        )
        .map_err(fail)?;
    }
    root.present().map_err(|e| fail(draw_error(e)))?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    marks: &[Mark],
    x_label: &str,
    (x_low, x_high): (f64, f64),
    labels: bool,
) -> Result<(), String> {
    let (y_low, y_high) = y_range(panel);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x_low..x_high, y_low..y_high)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .x_label_formatter(&|x| tick(*x))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_error)?;
    for line in &panel.lines {
        let color = PALETTE[line.run % PALETTE.len()];
        let style = color.stroke_width(2);
        let points = line.points.iter().copied();
        let dashed = line.metric > 0;
        let drawn = if dashed {
            chart.draw_series(DashedLineSeries::new(points, 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(points, style))
        };
        drawn
            .map_err(draw_error)?
            .label(line.label.clone())
            .legend(move |(x, y)| {
                // A dashed line's sample has a gap in the middle.
                let (end, start) = if dashed { (8, 12) } else { (10, 10) };
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (end, 0)], style)
                    + PathElement::new(vec![(start, 0), (20, 0)], style)
            });
    }
    for (failure, name) in [(false, "scale event or resume"), (true, "fault or failure")] {
        let color = if failure { FAILURE } else { SCALE };
        let these: Vec<&Mark> = marks.iter().filter(|m| m.failure == failure).collect();
        if these.is_empty() {
            continue;
        }
        chart
            .draw_series(these.iter().map(|m| {
                PathElement::new(
                    vec![(m.x, y_low), (m.x, y_high)],
                    color.mix(0.7).stroke_width(1),
                )
            }))
            .map_err(draw_error)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], color));
    }
    if labels {
        let rows = label_rows(marks, x_high - x_low);
        let row_height = (y_high - y_low) * 0.07;
        chart
            .draw_series(marks.iter().zip(rows).map(|(m, row)| {
                let color = if m.failure { FAILURE } else { SCALE };
                Text::new(
                    m.label.clone(),
                    (m.x, y_high - row as f64 * row_height),
                    ("sans-serif", 12).into_font().color(&color),
                )
            }))
            .map_err(draw_error)?;
    }
    chart
        .configure_series_labels()
        .position(legend_corner(panel))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    Ok(())
}

/// The text row of each mark's label (0: the top): a label closer than a tenth of the x
/// range to one on a row goes a row lower, so labels of events close together stay apart.
pub(super) fn label_rows(marks: &[Mark], x_span: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by(|&a, &b| marks[a].x.total_cmp(&marks[b].x));
    let mut rows = vec![0; marks.len()];
    // The x of the last label put on each row.
    let mut last_on_row: Vec<f64> = Vec::new();
    for index in order {
        let x = marks[index].x;
        let row = last_on_row
            .iter()
            .position(|&last| x - last >= x_span * 0.1)
            .unwrap_or(last_on_row.len());
        if row == last_on_row.len() {
            last_on_row.push(x);
        } else {
            last_on_row[row] = x;
        }
        rows[index] = row;
    }
    rows
}

/// A tick's text: whole numbers without a fraction (epochs), others with two digits.
fn tick(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// Where the legend covers the least: the lower right for a curve that rises (accuracy,
/// likelihood), the middle right for one that falls (loss, RMSE), which leaves the top to
/// the events' labels.
fn legend_corner(panel: &Panel) -> SeriesLabelPosition {
    let rises = panel.lines.first().is_some_and(
        |l| matches!((l.points.first(), l.points.last()), (Some(a), Some(b)) if b.1 > a.1),
    );
    if rises {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::MiddleRight
    }
}

/// The x range of every line and mark, padded.
fn x_range(plan: &Plan) -> (f64, f64) {
    let xs = plan
        .panels
        .iter()
        .flat_map(|p| p.lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)))
        .chain(plan.marks.iter().map(|m| m.x));
    padded(xs)
}

/// The y range of a panel's lines, padded.
fn y_range(panel: &Panel) -> (f64, f64) {
    padded(
        panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1)),
    )
}

/// `[min, max]` of `values` with 5% on each side (a single value gets room around it).
pub fn padded(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !low.is_finite() || !high.is_finite() {
        return (0.0, 1.0);
    }
    let span = high - low;
    let pad = if span > 0.0 {
        span * 0.05
    } else {
        (low.abs() * 0.05).max(0.5)
    };
    (low - pad, high + pad)
}
