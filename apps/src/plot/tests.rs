//! The plot's plan (panels, lines, where events go) and the SVG it writes.

use super::*;
use std::path::Path;

fn run(name: &str, text: &str) -> Run {
    records::parse_run(name, Path::new("m.jsonl"), text).unwrap()
}

/// An MLR-like run: epochs 1..=4 at 1 s each, a node joining at 2.5 s and a fault after
/// epoch 3.
fn mlr_run(name: &str) -> Run {
    run(
        name,
        concat!(
            r#"{"epoch":1,"loss":2.0,"test_loss":1.0,"accuracy":0.8,"elapsed_s":1.0,"tasks":80}"#,
            "\n",
            r#"{"epoch":2,"loss":1.0,"test_loss":0.8,"accuracy":0.85,"elapsed_s":2.0,"tasks":80}"#,
            "\n",
            r#"{"event":"scale","cause":"join","node":2,"at_s":2.5,"ok":true}"#,
            "\n",
            r#"{"epoch":3,"loss":0.5,"test_loss":0.6,"accuracy":0.9,"elapsed_s":3.0,"tasks":80}"#,
            "\n",
            r#"{"epoch":4,"loss":0.4,"test_loss":0.5,"accuracy":0.91,"elapsed_s":4.0,"tasks":80}"#,
            "\n",
            r#"{"event":"fault","at_iteration":3,"fault":"lose"}"#,
        ),
    )
}

fn options(x: XAxis) -> PlotOptions {
    PlotOptions {
        metrics: Vec::new(),
        x,
    }
}

#[test]
fn the_usual_metrics_make_the_panels_a_run_has() {
    let plan = plan(&[mlr_run("a")], &options(XAxis::Iteration)).unwrap();
    let titles: Vec<&str> = plan.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(
        titles,
        ["loss", "accuracy"],
        "no RMSE or likelihood in an MLR run"
    );
    let loss: Vec<&str> = plan.panels[0]
        .lines
        .iter()
        .map(|l| l.label.as_str())
        .collect();
    assert_eq!(loss, ["loss", "test_loss"]);
    assert_eq!(
        plan.panels[0].lines[1].points,
        [(1.0, 1.0), (2.0, 0.8), (3.0, 0.6), (4.0, 0.5)]
    );
    assert_eq!(
        plan.panels[0].lines[1].metric, 1,
        "the second metric is drawn dashed"
    );
}

#[test]
fn named_metrics_get_a_panel_each_and_unknown_ones_are_refused() {
    let options = PlotOptions {
        metrics: vec!["tasks".into(), "accuracy".into()],
        x: XAxis::Iteration,
    };
    let plan = plan(&[mlr_run("a")], &options).unwrap();
    let titles: Vec<&str> = plan.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(titles, ["tasks", "accuracy"]);
    let options = PlotOptions {
        metrics: vec!["rmse".into()],
        x: XAxis::Iteration,
    };
    let message = super::plan(&[mlr_run("a")], &options)
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "no run has the metric \"rmse\"; the runs have: accuracy, loss, tasks, test_loss"
    );
}

#[test]
fn a_run_without_the_usual_metrics_is_told_to_name_one() {
    let counter = run("c", r#"{"iteration":1,"tasks_per_s":5.0}"#);
    let message = plan(&[counter], &options(XAxis::Iteration))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("name one with --metric (the runs have: tasks_per_s)"),
        "{message}"
    );
}

/// Lines whose figures are not numbers (a loss written as a string) leave nothing to name:
/// the message says so instead of an empty list.
#[test]
fn a_run_without_a_numeric_figure_says_so() {
    let strings = run("s", r#"{"epoch":1,"loss":"low"}"#);
    let message = plan(&[strings], &options(XAxis::Iteration))
        .unwrap_err()
        .to_string();
    assert!(
        message.ends_with("(the runs have: no numeric figure at all)"),
        "{message}"
    );
}

#[test]
fn events_are_placed_on_either_axis_by_the_runs_own_clock() {
    let plan_it = plan(&[mlr_run("a")], &options(XAxis::Iteration)).unwrap();
    let marks: Vec<(f64, &str, bool)> = plan_it
        .marks
        .iter()
        .map(|m| (m.x, m.label.as_str(), m.failure))
        .collect();
    // 2.5 s lies halfway between epoch 2 (2 s) and epoch 3 (3 s).
    assert_eq!(marks, [(2.5, "join 2", false), (3.0, "lose", true)]);
    let plan_t = plan(&[mlr_run("a")], &options(XAxis::Time)).unwrap();
    let marks: Vec<f64> = plan_t.marks.iter().map(|m| m.x).collect();
    assert_eq!(marks, [2.5, 3.0], "after epoch 3 is at 3 s");
    assert_eq!(plan_t.panels[0].lines[0].points[0], (1.0, 2.0));
    assert_eq!(plan_t.unplaced, 0);
}

#[test]
fn an_event_before_the_first_point_is_read_from_the_start_of_the_run() {
    let r = run(
        "a",
        concat!(
            r#"{"epoch":1,"loss":1.0,"elapsed_s":2.0}"#,
            "\n",
            r#"{"event":"scale","cause":"leave","node":1,"at_s":1.0,"ok":true}"#,
        ),
    );
    let plan = plan(&[r], &options(XAxis::Iteration)).unwrap();
    assert_eq!(plan.marks[0].x, 0.5, "0 s is epoch 0, 2 s epoch 1");
}

#[test]
fn without_elapsed_times_the_time_axis_is_refused_and_timed_events_go_unplaced() {
    let r = run(
        "lda",
        concat!(
            r#"{"iteration":1,"log_likelihood":-9.0}"#,
            "\n",
            r#"{"iteration":2,"log_likelihood":-8.5}"#,
            "\n",
            r#"{"event":"scale","cause":"join","node":3,"at_s":1.0,"ok":true}"#,
        ),
    );
    let message = plan(std::slice::from_ref(&r), &options(XAxis::Time))
        .unwrap_err()
        .to_string();
    assert!(message.contains("--x iteration"), "{message}");
    let plan = plan(&[r], &options(XAxis::Iteration)).unwrap();
    assert!(plan.marks.is_empty());
    assert_eq!(plan.unplaced, 1, "a time with no clock to read it on");
}

#[test]
fn several_runs_are_told_apart_by_name_and_colour() {
    let plan = plan(
        &[mlr_run("baseline"), mlr_run("failure")],
        &options(XAxis::Iteration),
    )
    .unwrap();
    let loss: Vec<(&str, usize)> = plan.panels[0]
        .lines
        .iter()
        .map(|l| (l.label.as_str(), l.run))
        .collect();
    assert_eq!(
        loss,
        [
            ("baseline: loss", 0),
            ("baseline: test_loss", 0),
            ("failure: loss", 1),
            ("failure: test_loss", 1)
        ]
    );
    let accuracy: Vec<&str> = plan.panels[1]
        .lines
        .iter()
        .map(|l| l.label.as_str())
        .collect();
    assert_eq!(
        accuracy,
        ["baseline", "failure"],
        "one metric: the run's name is enough"
    );
    assert_eq!(plan.marks.len(), 4);
}

#[test]
fn interpolation_holds_at_the_ends() {
    let pairs = [(0.0, 0.0), (1.0, 10.0), (3.0, 30.0)];
    assert_eq!(interpolate(&pairs, -1.0), 0.0);
    assert_eq!(interpolate(&pairs, 0.5), 5.0);
    assert_eq!(interpolate(&pairs, 2.0), 20.0);
    assert_eq!(interpolate(&pairs, 9.0), 30.0);
    assert_eq!(interpolate(&[(1.0, 4.0), (1.0, 6.0)], 1.0), 4.0);
}

#[test]
fn the_svg_has_every_panel_line_and_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plot.svg");
    let plan = plan(&[mlr_run("a")], &options(XAxis::Iteration)).unwrap();
    chart::write_svg(&plan, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    for text in [
        "loss",
        "accuracy",
        "test_loss",
        "join 2",
        "lose",
        "epoch or iteration",
    ] {
        assert!(
            svg.contains(&format!(">{text}<")) || svg.contains(&format!(">\n{text}\n<")),
            "the SVG lacks the text {text:?}"
        );
    }
    // Each event is a vertical line in each of the two panels (the legend's samples are
    // opaque, the events' lines not): the join's blue, the fault's red.
    let points = |polyline: &str| -> Vec<(i64, i64)> {
        let list = polyline.split("points=\"").nth(1).unwrap_or("");
        list.split('"')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|p| p.split_once(','))
            .map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap()))
            .collect()
    };
    let event_lines = |color: &str| {
        let head = format!(" fill=\"none\" opacity=\"0.7\" stroke=\"{color}\"");
        let lines: Vec<Vec<(i64, i64)>> = svg
            .split("<polyline")
            .filter(|p| p.starts_with(&head))
            .map(points)
            .collect();
        for line in &lines {
            let vertical = line.len() == 2 && line[0].0 == line[1].0 && line[0].1 != line[1].1;
            assert!(vertical, "an event's line is not vertical: {line:?}");
        }
        lines.len()
    };
    assert_eq!(event_lines("#3C6EC8"), 2, "the join's lines");
    assert_eq!(event_lines("#C81E1E"), 2, "the fault's lines");
    // The solid lines (loss, accuracy) are one polyline each through the run's 4 epochs.
    let solid_run_lines = svg
        .split("<polyline")
        .filter(|p| p.contains("stroke=\"#1F77B4\" stroke-width=\"2\""))
        .filter(|p| points(p).len() == 4)
        .count();
    assert_eq!(solid_run_lines, 2, "loss and accuracy");
}

#[test]
fn a_plot_that_cannot_be_written_names_its_path() {
    let plan = plan(&[mlr_run("a")], &options(XAxis::Iteration)).unwrap();
    let message = chart::write_svg(&plan, Path::new("/nonexistent/dir/plot.svg"))
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("cannot write the plot /nonexistent/dir/plot.svg"),
        "{message}"
    );
}

#[test]
fn padding_gives_a_flat_line_room() {
    assert_eq!(chart::padded([2.0, 2.0].into_iter()), (1.5, 2.5));
    assert_eq!(chart::padded([0.0, 10.0].into_iter()), (-0.5, 10.5));
    assert_eq!(chart::padded(std::iter::empty()), (0.0, 1.0));
}

#[test]
fn labels_of_events_close_together_go_on_rows_of_their_own() {
    let mark = |x: f64| Mark {
        x,
        label: String::new(),
        failure: false,
    };
    // On a span of 100: 50 and 52 collide, 55 collides with both, 80 fits on the top row
    // again, and 10 is alone.
    let marks = [mark(52.0), mark(50.0), mark(80.0), mark(10.0), mark(55.0)];
    assert_eq!(chart::label_rows(&marks, 100.0), [1, 0, 0, 0, 2]);
}
