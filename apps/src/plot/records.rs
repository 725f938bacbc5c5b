//! Reading `--metrics-out` files for `harp plot` ([`super::plan`]): each line is one JSON
//! object; a line with an `epoch` or `iteration` number is a point of the run's curves (its
//! other numbers are the metrics), a line with an `event` the runtime wrote is something
//! that happened (a node joined or left, a fault, a recovery, a resume). Everything else is
//! passed over.
//!
//! Bad input is refused with the file and the line ([`PlotError`]), never guessed at.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What can go wrong while reading metrics files or drawing them.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: line {line}: {message}", .path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{}: line {line}: {message}", .path.display())]
    Field {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{}: no epoch or iteration lines to plot (a metrics file that `harp run APP --metrics-out FILE` wrote has one per epoch or iteration)", .path.display())]
    NoPoints { path: PathBuf },
    #[error("no run has the metric {metric:?}; the runs have: {available}")]
    UnknownMetric { metric: String, available: String },
    #[error("none of the usual metrics ({wanted}) is in these runs; name one with --metric (the runs have: {available})")]
    NoDefaultMetric { wanted: String, available: String },
    #[error("no epoch or iteration line of these runs has an elapsed_s: plot them against the iteration (--x iteration)")]
    NoElapsed,
    #[error("cannot write the plot {}: {message}", .path.display())]
    Draw { path: PathBuf, message: String },
}

/// One epoch or iteration of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The record's `epoch` or `iteration`.
    pub iteration: f64,
    /// Seconds since the run started (`elapsed_s`), when the record has it.
    pub elapsed_s: Option<f64>,
    /// Every other number of the record, by its field name.
    pub values: BTreeMap<String, f64>,
}

/// Where an event happened, as the record says it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum At {
    /// Seconds since the job started.
    Seconds(f64),
    /// At this iteration (a boundary: after it completed).
    Iteration(f64),
}

/// Something the runtime recorded: a scale event, a fault, a recovery, a resume.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at: At,
    /// What a reader sees beside its line: `join 2`, `lose`, `server 1 lost`...
    pub label: String,
    /// A failure or a fault (drawn red) rather than a change of size (drawn blue).
    pub failure: bool,
}

/// One metrics file.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// What the legend calls it: the file's name without `.jsonl`.
    pub name: String,
    pub points: Vec<Point>,
    pub events: Vec<Event>,
    /// Events that carry no time or iteration (passed over by the plot), by kind.
    pub unplaced: Vec<String>,
}

/// Fields of a point that are its position or bookkeeping, not something to plot.
const NOT_METRICS: [&str; 3] = ["epoch", "iteration", "elapsed_s"];

/// Reads the metrics file at `path`.
pub fn read_run(path: &Path) -> Result<Run, PlotError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".jsonl").to_string())
        .unwrap_or_else(|| path.display().to_string());
    parse_run(&name, path, &text)
}

/// Parses the text of a metrics file (`path` only names it in errors).
pub fn parse_run(name: &str, path: &Path, text: &str) -> Result<Run, PlotError> {
    let mut run = Run {
        name: name.to_string(),
        points: Vec::new(),
        events: Vec::new(),
        unplaced: Vec::new(),
    };
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let at = |message: String| PlotError::Field {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| PlotError::Syntax {
                path: path.to_path_buf(),
                line: line_no,
                message: not_json(&e),
            })?;
        let serde_json::Value::Object(record) = value else {
            return Err(PlotError::Syntax {
                path: path.to_path_buf(),
                line: line_no,
                message: format!("not a JSON object: found {}", kind_of(&value)),
            });
        };
        if let Some(kind) = record.get("event") {
            let kind = kind
                .as_str()
                .ok_or_else(|| at("\"event\" is not a string".into()))?;
            match event(kind, &record).map_err(at)? {
                Some(event) => run.events.push(event),
                None if PLACED_KINDS.contains(&kind) => run.unplaced.push(kind.to_string()),
                None => {}
            }
            continue;
        }
        if let Some(point) = point(&record).map_err(at)? {
            run.points.push(point);
        }
    }
    if run.points.is_empty() {
        return Err(PlotError::NoPoints {
            path: path.to_path_buf(),
        });
    }
    Ok(run)
}

/// The event kinds a plot places on its x axis (the others, like `checkpoints`, are
/// summaries).
const PLACED_KINDS: [&str; 5] = ["scale", "fault", "recovery", "worker_recovery", "resumed"];

/// A point, if the record has an `epoch` or an `iteration`.
fn point(record: &serde_json::Map<String, serde_json::Value>) -> Result<Option<Point>, String> {
    let Some((field, position)) = ["epoch", "iteration"]
        .iter()
        .find_map(|f| record.get(*f).map(|v| (*f, v)))
    else {
        return Ok(None);
    };
    let iteration = finite(position).ok_or_else(|| format!("{field:?} is not a number"))?;
    let elapsed_s = match record.get("elapsed_s") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(finite(v).ok_or("\"elapsed_s\" is not a number")?),
    };
    let values = record
        .iter()
        .filter(|(k, _)| !NOT_METRICS.contains(&k.as_str()))
        .filter_map(|(k, v)| finite(v).map(|x| (k.clone(), x)))
        .collect();
    Ok(Some(Point {
        iteration,
        elapsed_s,
        values,
    }))
}

/// The event a record of kind `kind` describes, if a plot can place it.
fn event(
    kind: &str,
    record: &serde_json::Map<String, serde_json::Value>,
) -> Result<Option<Event>, String> {
    let number = |value: Option<&serde_json::Value>, what: &str| -> Result<f64, String> {
        value
            .and_then(finite)
            .ok_or_else(|| format!("a {kind:?} event without a number {what}"))
    };
    let node = |value: Option<&serde_json::Value>| {
        value
            .and_then(serde_json::Value::as_u64)
            .map_or("?".to_string(), |n| n.to_string())
    };
    Ok(Some(match kind {
        "scale" => {
            let cause = record
                .get("cause")
                .and_then(|c| c.as_str())
                .unwrap_or("scale");
            let ok = record.get("ok").and_then(|o| o.as_bool()).unwrap_or(true);
            Event {
                at: At::Seconds(number(record.get("at_s"), "at_s")?),
                label: format!(
                    "{cause} {}{}",
                    node(record.get("node")),
                    if ok { "" } else { " (failed)" }
                ),
                failure: !ok,
            }
        }
        "fault" => Event {
            at: At::Iteration(number(record.get("at_iteration"), "at_iteration")?),
            label: record
                .get("fault")
                .and_then(|f| f.as_str())
                .unwrap_or("fault")
                .to_string(),
            failure: true,
        },
        "worker_recovery" => {
            let report = record.get("report");
            let field = |f: &str| report.and_then(|r| r.get(f));
            Event {
                at: At::Seconds(number(field("detected_at_s"), "report.detected_at_s")?),
                label: format!("worker node {} lost", node(field("node"))),
                failure: true,
            }
        }
        "recovery" => {
            let report = record.get("report");
            let field = |f: &str| report.and_then(|r| r.get(f));
            // Files written before server recoveries carried their time have none.
            let Some(at) = field("detected_at_s").and_then(finite) else {
                return Ok(None);
            };
            Event {
                at: At::Seconds(at),
                label: format!("server {} lost", node(field("server"))),
                failure: true,
            }
        }
        "resumed" => {
            let seq = record.get("from").and_then(|f| f.get("seq"));
            Event {
                at: At::Iteration(number(seq, "from.seq")?),
                label: "resumed".to_string(),
                failure: false,
            }
        }
        _ => return Ok(None),
    }))
}

fn finite(value: &serde_json::Value) -> Option<f64> {
    value.as_f64().filter(|x| x.is_finite())
}

/// What is wrong with a line that is not JSON, at its column (serde_json says `at line 1`
/// of the one line it was given, which is not the file's line).
fn not_json(e: &serde_json::Error) -> String {
    let said = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let what = said.strip_suffix(&position).unwrap_or(&said);
    format!("not valid JSON: {what} (column {})", e.column())
}

fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Run, PlotError> {
        parse_run("run", Path::new("m.jsonl"), text)
    }

    #[test]
    fn epoch_lines_become_points_with_their_numbers() {
        let run = parse(concat!(
            r#"{"epoch":1,"loss":2.5,"accuracy":0.8,"elapsed_s":0.5,"tasks":80}"#,
            "\n\n",
            r#"{"epoch":2,"loss":0.5,"accuracy":0.9,"elapsed_s":1.0,"tasks":80,"note":"x"}"#,
            "\n"
        ))
        .unwrap();
        assert_eq!(run.points.len(), 2);
        let p = &run.points[1];
        assert_eq!(p.iteration, 2.0);
        assert_eq!(p.elapsed_s, Some(1.0));
        let names: Vec<&str> = p.values.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["accuracy", "loss", "tasks"],
            "strings and positions are not metrics"
        );
        assert_eq!(p.values["loss"], 0.5);
    }

    #[test]
    fn iteration_lines_count_too_and_elapsed_may_be_missing() {
        let run = parse(r#"{"iteration":3,"log_likelihood":-9.5}"#).unwrap();
        assert_eq!(run.points[0].iteration, 3.0);
        assert_eq!(run.points[0].elapsed_s, None);
        assert_eq!(run.points[0].values["log_likelihood"], -9.5);
    }

    #[test]
    fn the_runtimes_events_are_placed() {
        let run = parse(concat!(
            r#"{"epoch":1,"loss":1.0}"#,
            "\n",
            r#"{"event":"scale","cause":"join","node":2,"at_s":2.0,"ok":true}"#,
            "\n",
            r#"{"event":"scale","cause":"leave","node":1,"at_s":3.0,"ok":false}"#,
            "\n",
            r#"{"event":"fault","at_iteration":3,"fault":"lose"}"#,
            "\n",
            r#"{"event":"worker_recovery","report":{"node":4,"detected_at_s":1.5}}"#,
            "\n",
            r#"{"event":"recovery","report":{"server":1,"detected_at_s":2.5}}"#,
            "\n",
            r#"{"event":"resumed","from":{"seq":6,"dir":"d"}}"#,
            "\n",
            r#"{"event":"checkpoints","stats":{}}"#,
            "\n",
            r#"{"event":"job_stats","node":{},"servers":{},"nodes_counted":1}"#,
        ))
        .unwrap();
        let got: Vec<(At, &str, bool)> = run
            .events
            .iter()
            .map(|e| (e.at, e.label.as_str(), e.failure))
            .collect();
        assert_eq!(
            got,
            [
                (At::Seconds(2.0), "join 2", false),
                (At::Seconds(3.0), "leave 1 (failed)", true),
                (At::Iteration(3.0), "lose", true),
                (At::Seconds(1.5), "worker node 4 lost", true),
                (At::Seconds(2.5), "server 1 lost", true),
                (At::Iteration(6.0), "resumed", false),
            ]
        );
        assert!(run.unplaced.is_empty());
    }

    #[test]
    fn a_server_recovery_without_a_time_is_counted_not_placed() {
        let run = parse(concat!(
            r#"{"epoch":1,"loss":1.0}"#,
            "\n",
            r#"{"event":"recovery","report":{"server":1}}"#
        ))
        .unwrap();
        assert!(run.events.is_empty());
        assert_eq!(run.unplaced, ["recovery"]);
    }

    #[test]
    fn bad_lines_are_refused_with_their_line() {
        let cases = [
            (
                "{\"epoch\":1}\n{\"epoch\":",
                "m.jsonl: line 2: not valid JSON: EOF while parsing a value (column 9)",
            ),
            (
                "{\"epoch\":1,\"loss\":1e400}",
                "m.jsonl: line 1: not valid JSON: number out of range (column 23)",
            ),
            (
                "[1,2]",
                "m.jsonl: line 1: not a JSON object: found an array",
            ),
            (
                "{\"epoch\":\"one\"}",
                "m.jsonl: line 1: \"epoch\" is not a number",
            ),
            (
                "{\"epoch\":1,\"elapsed_s\":\"x\"}",
                "line 1: \"elapsed_s\" is not a number",
            ),
            ("{\"event\":7}", "line 1: \"event\" is not a string"),
            (
                "{\"epoch\":1}\n{\"event\":\"scale\",\"cause\":\"join\"}",
                "line 2: a \"scale\" event without a number at_s",
            ),
            (
                "{\"event\":\"fault\"}",
                "line 1: a \"fault\" event without a number at_iteration",
            ),
        ];
        for (text, wanted) in cases {
            let message = parse(text).unwrap_err().to_string();
            assert!(
                message.contains(wanted),
                "{text:?}: {message:?} lacks {wanted:?}"
            );
        }
    }

    #[test]
    fn a_file_without_points_says_what_it_needs() {
        let message = parse("{\"tasks\":100,\"exact\":true}\n")
            .unwrap_err()
            .to_string();
        assert!(message.contains("no epoch or iteration lines"), "{message}");
        let message = parse("").unwrap_err().to_string();
        assert!(message.contains("no epoch or iteration lines"), "{message}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let message = read_run(Path::new("/nonexistent/m.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("cannot read /nonexistent/m.jsonl"),
            "{message}"
        );
    }

    #[test]
    fn the_run_is_named_after_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("with-failure.jsonl");
        std::fs::write(&path, "{\"epoch\":1,\"loss\":1}\n").unwrap();
        assert_eq!(read_run(&path).unwrap().name, "with-failure");
    }
}
