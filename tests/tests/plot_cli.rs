//! `harp plot` on what `harp run` wrote: a run with an injected fault is drawn with its
//! panels and the fault's line, and bad files are refused naming the file and line.

use harp_tests::{harp_binary, run_process};

#[test]
fn a_run_with_a_fault_is_plotted_with_its_panels_and_the_faults_line() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("failure.jsonl");
    let metrics_arg = metrics.to_str().unwrap();
    let run = run_process(
        &harp_binary!(),
        [
            "run",
            "mlr",
            "--epochs",
            "4",
            "--quiet",
            "--scar-fraction",
            "0.25",
            "--inject",
            "lose:0.5@2",
            "--metrics-out",
            metrics_arg,
        ],
    );
    assert!(run.status.success(), "{}", run.describe());

    let out = run_process(&harp_binary!(), ["plot", metrics_arg]);
    assert!(out.status.success(), "{}", out.describe());
    let svg_path = dir.path().join("failure.svg");
    assert_eq!(
        out.stdout.trim(),
        format!(
            "wrote {}: panels (loss, accuracy), 1 run, 1 event",
            svg_path.display()
        )
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    for text in ["loss", "test_loss", "accuracy", "lose"] {
        assert!(has_text(&svg, text), "the plot lacks the text {text:?}");
    }

    // The same run against time, one metric (named twice: one panel), to a file named
    // with --out.
    let chosen = dir.path().join("accuracy.svg");
    let out = run_process(
        &harp_binary!(),
        [
            "plot",
            metrics_arg,
            "--x",
            "time",
            "--metric",
            "accuracy",
            "--metric",
            "accuracy",
            "--out",
            chosen.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", out.describe());
    assert!(
        out.stdout.contains(": 1 panel (accuracy), 1 run, 1 event"),
        "{}",
        out.describe()
    );
    let svg = std::fs::read_to_string(&chosen).unwrap();
    assert!(has_text(&svg, "seconds since the start"));

    // An --out that is the metrics file itself is refused, and the file is left as it was.
    let before = std::fs::read(&metrics).unwrap();
    let out = run_process(&harp_binary!(), ["plot", metrics_arg, "--out", metrics_arg]);
    assert_eq!(out.status.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("that is the metrics file") && out.stderr.contains("failure.jsonl"),
        "{}",
        out.describe()
    );
    assert_eq!(
        std::fs::read(&metrics).unwrap(),
        before,
        "the metrics file changed"
    );
}

/// Whether `svg` has a text element that says `text` (plotters writes it on a line of
/// its own).
fn has_text(svg: &str, text: &str) -> bool {
    svg.contains(&format!(">{text}<")) || svg.contains(&format!(">\n{text}\n<"))
}

#[test]
fn bad_metrics_files_are_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"epoch\":1,\"loss\":0.5}\n{\"epoch\":2,\"loss\":\n").unwrap();
    let summary = dir.path().join("summary.jsonl");
    std::fs::write(&summary, "{\"tasks\":100,\"exact\":true}\n").unwrap();
    let cases = [
        (
            bad.clone(),
            "bad.jsonl: line 2: not valid JSON: EOF while parsing a value",
        ),
        (
            summary,
            "summary.jsonl: no epoch or iteration lines to plot",
        ),
        (dir.path().join("missing.jsonl"), "cannot read"),
    ];
    for (file, wanted) in cases {
        let out = run_process(&harp_binary!(), ["plot", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", out.describe());
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(wanted),
            "{wanted:?}:\n{}",
            out.describe()
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    }
    assert!(
        !dir.path().join("bad.svg").exists(),
        "nothing is written for a bad file"
    );
}
