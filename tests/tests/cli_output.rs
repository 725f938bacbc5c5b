//! What `harp run` prints when its stderr is not a terminal (a log file, a pipe, CI): every
//! app's per-epoch or per-iteration lines, with and without `--quiet`. A progress bar is not
//! drawn there, and lines sent through it would be dropped with it.

use harp_tests::{harp_binary, run_process, ProcessOutcome};
use std::path::Path;

fn harp(args: &[&str]) -> ProcessOutcome {
    let out = run_process(&harp_binary!(), args);
    assert!(out.status.success(), "{}", out.describe());
    out
}

/// Asserts that stderr has a line starting with `prefix` followed by each of `numbers`.
fn assert_numbered_lines(out: &ProcessOutcome, prefix: &str, numbers: &[u32]) {
    for n in numbers {
        let line = format!("{prefix} {n:>3} ");
        assert!(
            out.stderr.lines().any(|l| l.starts_with(&line)),
            "no {line:?} line:\n{}",
            out.describe()
        );
    }
}

#[test]
fn mlr_prints_its_epochs_to_a_pipe_with_and_without_quiet() {
    for quiet in [false, true] {
        let mut args = vec!["run", "mlr", "--epochs", "2"];
        if quiet {
            args.push("--quiet");
        }
        let out = harp(&args);
        assert_numbered_lines(&out, "epoch", &[1, 2]);
    }
}

#[test]
fn cnn_prints_its_epochs_to_a_pipe() {
    let out = harp(&[
        "run",
        "cnn",
        "--epochs",
        "1",
        "--max-batches",
        "2",
        "--test-rows",
        "100",
    ]);
    assert_numbered_lines(&out, "epoch", &[1]);
}

#[test]
fn lda_and_mf_print_their_iterations_to_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let docword = write(
        "docword.txt",
        "3\n4\n6\n1 1 3\n1 2 1\n2 2 2\n2 3 4\n3 1 1\n3 4 2\n",
    );
    let vocab = write("vocab.txt", "orbit\nmoon\ngod\nfaith\n");
    let out = harp(&[
        "run",
        "lda",
        "--docword",
        path(&docword),
        "--vocab",
        path(&vocab),
        "--topics",
        "2",
        "--iterations",
        "2",
    ]);
    assert_numbered_lines(&out, "iteration", &[1, 2]);

    let ratings: String = std::iter::once("userId,movieId,rating,timestamp\n".to_string())
        .chain(
            (1..=8)
                .flat_map(|u| (1..=6).map(move |i| format!("{u},{i},{}.0,0\n", 1 + (u * i) % 5))),
        )
        .collect();
    let ratings = write("ratings.csv", &ratings);
    let out = harp(&[
        "run",
        "mf",
        "--data",
        path(&ratings),
        "--rank",
        "2",
        "--iterations",
        "2",
    ]);
    assert_numbered_lines(&out, "iteration", &[1, 2]);
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}
