//! The `harp` command on bad input (DESIGN G5): every case below must end the process with a
//! non-zero exit status (not a signal, not Rust's panic status 101), print a message on
//! stderr that names the problem (the file and the line or record where one applies), and
//! never panic.
//!
//! These run the real binary (see the crate docs for how it is built), one process per case.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use harp_tests::{gzip, harp_binary, idx_bytes, run_process, ProcessOutcome};

/// Exit status of a Rust program whose main thread panicked.
const PANIC_EXIT_CODE: i32 = 101;

/// Runs `harp` with `args` and checks that it refused them cleanly and that stderr contains
/// every one of `needles`.
fn refused<S: Into<OsString>>(
    args: impl IntoIterator<Item = S>,
    needles: &[&str],
) -> ProcessOutcome {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let out = run_process(&harp_binary!(), &args);
    let shown = || format!("harp {args:?}\n{}", out.describe());
    assert!(!out.status.success(), "expected a failure from {}", shown());
    let code = out.status.code();
    assert!(code.is_some(), "killed by a signal: {}", shown());
    assert_ne!(
        code,
        Some(PANIC_EXIT_CODE),
        "panic exit status: {}",
        shown()
    );
    assert!(!out.stderr.contains("panicked"), "panicked: {}", shown());
    assert!(
        !out.stderr.contains("RUST_BACKTRACE"),
        "panicked: {}",
        shown()
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr lacks {needle:?}: {}",
            shown()
        );
    }
    out
}

/// `harp run mlr --quiet --data <data> <extra...>`.
fn mlr_on(data: impl Into<OsString>, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["run", "mlr", "--quiet", "--data"]
        .into_iter()
        .map(OsString::from)
        .collect();
    args.push(data.into());
    args.extend(extra.iter().map(OsString::from));
    args
}

/// `harp run mlr --quiet <extra...>` on the built-in dataset.
fn mlr_default(extra: &[&str]) -> Vec<OsString> {
    ["run", "mlr", "--quiet"]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .collect()
}

/// `harp run counter --tasks 50 <extra...>`.
fn counter(extra: &[&str]) -> Vec<OsString> {
    ["run", "counter", "--tasks", "50"]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .collect()
}

/// Writes `contents` to `dir/name` and returns the path.
fn file(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write a test file");
    path
}

/// A directory holding `images` and `labels` under MNIST-style names.
fn idx_dir(
    images_name: &str,
    images: &[u8],
    labels_name: &str,
    labels: &[u8],
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    file(dir.path(), images_name, images);
    file(dir.path(), labels_name, labels);
    dir
}

/// Three 2x2 images and their labels.
fn tiny_idx_pair() -> (Vec<u8>, Vec<u8>) {
    let pixels: Vec<u8> = (0..12).map(|i| i * 20).collect();
    (idx_bytes(&[3, 2, 2], &pixels), idx_bytes(&[3], &[0, 1, 2]))
}

#[test]
fn the_tiny_idx_pair_itself_loads() {
    // Guards the cases below: they fail because of the one defect each introduces.
    let (images, labels) = tiny_idx_pair();
    let dir = idx_dir(
        "t-images-idx3-ubyte",
        &images,
        "t-labels-idx1-ubyte",
        &labels,
    );
    let data = harp_apps::data::load_path(dir.path()).expect("a valid IDX pair");
    assert_eq!(
        (data.rows(), data.num_features, data.num_classes),
        (3, 4, 3)
    );
}

#[test]
fn missing_data_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-file.libsvm");
    refused(mlr_on(&missing, &[]), &["no-such-file.libsvm", "not found"]);
    let missing_dir = dir.path().join("no-such-dir");
    refused(mlr_on(&missing_dir, &[]), &["no-such-dir", "not found"]);
}

#[test]
fn libsvm_syntax_error_names_file_and_line_3() {
    let dir = tempfile::tempdir().unwrap();
    let text = "1 1:0.5 2:1\n0 3:1\n1 2:1 7-0.25\n0 1:1\n";
    let plain = file(dir.path(), "bad-syntax.libsvm", text);
    refused(
        mlr_on(&plain, &[]),
        &["bad-syntax.libsvm", "line 3", "7-0.25"],
    );

    // The same error inside a gzip file keeps its line number.
    let zipped = file(dir.path(), "bad-syntax.libsvm.gz", gzip(text.as_bytes()));
    refused(mlr_on(&zipped, &[]), &["bad-syntax.libsvm.gz", "line 3"]);

    // A bad value and a bad index token, also on line 3 (after a comment and a blank line).
    let value = file(dir.path(), "bad-value.libsvm", "# header\n\n1 2:abc\n");
    refused(mlr_on(&value, &[]), &["bad-value.libsvm", "line 3", "abc"]);
    let index = file(dir.path(), "bad-index.libsvm", "0 1:1\n1 2:1\n0 x:1\n");
    refused(mlr_on(&index, &[]), &["bad-index.libsvm", "line 3"]);
}

#[test]
fn libsvm_feature_index_zero_or_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let zero = file(dir.path(), "index-zero.libsvm", "0 1:1\n1 0:2\n");
    refused(
        mlr_on(&zero, &[]),
        &["index-zero.libsvm", "line 2", "feature index 0"],
    );
    let big = file(dir.path(), "index-big.libsvm", "0 4294967296:1\n1 1:2\n");
    refused(
        mlr_on(&big, &[]),
        &["index-big.libsvm", "line 1", "4294967296", "out of range"],
    );
    let overflow = file(
        dir.path(),
        "index-overflow.libsvm",
        "0 1:1\n1 2:1\n0 1:1\n1 99999999999999999999999:1\n",
    );
    refused(mlr_on(&overflow, &[]), &["index-overflow.libsvm", "line 4"]);
}

#[test]
fn libsvm_negative_or_non_integer_label() {
    let dir = tempfile::tempdir().unwrap();
    for (name, label) in [
        ("negative.libsvm", "-1"),
        ("fraction.libsvm", "1.5"),
        ("word.libsvm", "cat"),
        ("nan-label.libsvm", "nan"),
    ] {
        let path = file(dir.path(), name, format!("1 1:2\n{label} 2:3\n"));
        refused(mlr_on(&path, &[]), &[name, "line 2", "label", label]);
    }
}

#[test]
fn libsvm_non_finite_value() {
    let dir = tempfile::tempdir().unwrap();
    let nan = file(dir.path(), "nan.libsvm", "1 1:2\n0 2:NaN\n");
    refused(mlr_on(&nan, &[]), &["nan.libsvm", "line 2", "non-finite"]);
    let inf = file(dir.path(), "inf.libsvm", "1 1:inf\n0 2:1\n");
    refused(mlr_on(&inf, &[]), &["inf.libsvm", "line 1", "non-finite"]);
    // Finite in the text, infinite as an f32.
    let huge = file(dir.path(), "huge.libsvm", "1 1:1\n0 2:1\n1 1:1e39\n");
    refused(mlr_on(&huge, &[]), &["huge.libsvm", "line 3", "non-finite"]);
}

#[test]
fn empty_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let empty = file(dir.path(), "empty.libsvm", "");
    refused(mlr_on(&empty, &[]), &["empty.libsvm", "no records"]);
    let comments = file(dir.path(), "comments.libsvm", "# nothing here\n\n   \n");
    refused(mlr_on(&comments, &[]), &["comments.libsvm", "no records"]);
    let no_features = file(dir.path(), "labels-only.libsvm", "1\n0\n1\n");
    refused(
        mlr_on(&no_features, &[]),
        &["labels-only.libsvm", "no feature"],
    );
    let empty_dir = tempfile::tempdir().unwrap();
    refused(mlr_on(empty_dir.path(), &[]), &["idx3-ubyte", "idx1-ubyte"]);
}

#[test]
fn idx_wrong_magic() {
    let (mut images, labels) = tiny_idx_pair();
    images[2] = 0x09; // 00 00 09 03: not unsigned bytes
    let dir = idx_dir(
        "x-images-idx3-ubyte",
        &images,
        "x-labels-idx1-ubyte",
        &labels,
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["x-images-idx3-ubyte", "magic", "0x00000903"],
    );

    let (images, mut labels) = tiny_idx_pair();
    labels[0] = 0x12; // not 00 00 08 ..
    let dir = idx_dir(
        "y-images-idx3-ubyte",
        &images,
        "y-labels-idx1-ubyte.gz",
        &gzip(&labels),
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["y-labels-idx1-ubyte.gz", "magic"],
    );

    // Images and labels swapped: each has a valid magic, but the wrong number of dimensions.
    let (images, labels) = tiny_idx_pair();
    let dir = idx_dir(
        "z-images-idx3-ubyte",
        &labels,
        "z-labels-idx1-ubyte",
        &images,
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["z-images-idx3-ubyte", "dimension"],
    );
}

#[test]
fn idx_images_truncated() {
    let (images, labels) = tiny_idx_pair();
    let short = &images[..images.len() - 5];
    let dir = idx_dir("t-images-idx3-ubyte", short, "t-labels-idx1-ubyte", &labels);
    refused(
        mlr_on(dir.path(), &[]),
        &["t-images-idx3-ubyte", "truncated"],
    );

    // Truncated inside the header.
    let dir = idx_dir(
        "h-images-idx3-ubyte",
        &images[..9],
        "h-labels-idx1-ubyte",
        &labels,
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["h-images-idx3-ubyte", "truncated"],
    );

    // A complete gzip stream of a truncated file.
    let dir = idx_dir(
        "g-images-idx3-ubyte.gz",
        &gzip(short),
        "g-labels-idx1-ubyte",
        &labels,
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["g-images-idx3-ubyte.gz", "truncated"],
    );

    // A gzip stream cut short.
    let zipped = gzip(&images);
    let cut = &zipped[..zipped.len() / 2];
    let dir = idx_dir(
        "c-images-idx3-ubyte.gz",
        cut,
        "c-labels-idx1-ubyte",
        &labels,
    );
    refused(mlr_on(dir.path(), &[]), &["c-images-idx3-ubyte.gz"]);
}

#[test]
fn idx_count_mismatch() {
    let (images, _) = tiny_idx_pair();
    let labels = idx_bytes(&[2], &[0, 1]);
    let dir = idx_dir(
        "m-images-idx3-ubyte",
        &images,
        "m-labels-idx1-ubyte",
        &labels,
    );
    refused(
        mlr_on(dir.path(), &[]),
        &["m-labels-idx1-ubyte", "2 labels", "3 images"],
    );
}

#[test]
fn bad_synthetic_specs() {
    refused(mlr_on("synthetic:abc", &[]), &["synthetic:abc"]);
    refused(mlr_on("synthetic:10,5", &[]), &["synthetic:10,5"]);
    refused(mlr_on("synthetic:0,5,2", &[]), &["rows"]);
    refused(
        mlr_on("synthetic:18446744073709551615,2,2", &[]),
        &["18446744073709551615"],
    );
}

#[test]
fn invalid_cluster_shapes() {
    for (flag, needle) in [
        ("--workers", "worker"),
        ("--servers", "server"),
        ("--executors-per-worker", "executor"),
        ("--shards-per-server", "shard"),
    ] {
        refused(mlr_default(&[flag, "0"]), &[needle]);
        refused(counter(&[flag, "0"]), &[needle]);
    }
    refused(
        mlr_default(&["--workers", "4294967295", "--executors-per-worker", "2"]),
        &["too many"],
    );
    // Node processes are started on this machine: a typo must not start thousands.
    refused(
        counter(&["--processes", "100000"]),
        &["--processes 100000: a master starts at most 256 node processes"],
    );
    // A runtime of that many threads overflowed in tokio (a panic) or exhausted the OS.
    for threads in ["0", "1025", "100000", "18446744073709551615"] {
        refused(counter(&["--threads", threads]), &["--threads", "1..=1024"]);
    }
    // A fault out of range is said in the command's own words (it showed `Lose { fraction:
    // 2.0, seed: 1 }`).
    refused(
        mlr_default(&["--scar-fraction", "0.5", "--inject", "lose:2@1"]),
        &["SCAR fault injection: lose with a fraction of 2: it must be in (0, 1]"],
    );
    refused(
        mlr_default(&["--scar-fraction", "0.5", "--inject", "perturb:-1@1"]),
        &["perturb with a norm of -1: it must be finite and at least 0"],
    );
    // How checkpoints are written, without where: refused instead of ignored.
    for (flag, value) in [
        ("--checkpoint-every", "5"),
        ("--checkpoint-keep", "2"),
        ("--stop-wait", "3"),
    ] {
        refused(
            counter(&[flag, value]),
            &[flag, "--checkpoint-dir", "--resume"],
        );
    }
    // A lease QUIC cannot keep alive was refused as an "invalid TLS configuration".
    for lease in ["0", "5", "3600001"] {
        refused(
            counter(&["--processes", "2", "--lease-timeout-ms", lease]),
            &["--lease-timeout-ms", "100..=3600000"],
        );
    }
}

#[test]
fn negative_learning_rate() {
    refused(mlr_default(&["--lr=-1"]), &["learning rate", "-1"]);
    refused(mlr_default(&["--lr", "0"]), &["learning rate"]);
    refused(mlr_default(&["--lr", "NaN"]), &["learning rate"]);
    // With a space, clap takes `-1` for a flag: refused, naming the value (see
    // `negative_learning_rate_with_a_space_names_the_option` for the message we want).
    refused(mlr_default(&["--lr", "-1"]), &["-1"]);
}

#[test]
fn negative_learning_rate_with_a_space_names_the_option() {
    refused(mlr_default(&["--lr", "-1"]), &["learning rate"]);
}

#[test]
fn zero_batch_or_epochs() {
    refused(mlr_default(&["--batch", "0"]), &["batch"]);
    refused(mlr_default(&["--epochs", "0"]), &["epochs"]);
}

#[test]
fn held_out_fraction_outside_zero_one() {
    refused(mlr_default(&["--test-fraction", "1.5"]), &["1.5"]);
    refused(mlr_default(&["--test-fraction", "0"]), &["fraction"]);
    refused(mlr_default(&["--test-fraction", "1"]), &["fraction"]);
    refused(mlr_default(&["--test-fraction", "NaN"]), &["NaN"]);
    // Two rows cannot be split 80/20.
    let dir = tempfile::tempdir().unwrap();
    let tiny = file(dir.path(), "two-rows.libsvm", "0 1:1\n1 2:1\n");
    refused(mlr_on(&tiny, &[]), &["two-rows.libsvm", "0 test rows"]);
}

#[test]
fn counter_bad_options() {
    refused(counter(&["--window", "0"]), &["window"]);
    refused(counter(&["--rows", "0"]), &["rows"]);
    refused(counter(&["--width", "0"]), &["width"]);
    refused(
        counter(&["--stop-wait", "-1"]),
        &["--stop-wait", "0 to 86400 seconds"],
    );
    refused(
        counter(&["--stop-wait", "inf"]),
        &["--stop-wait", "0 to 86400 seconds"],
    );
    refused(
        counter(&["--stop-wait", "soon"]),
        &["not a number of seconds"],
    );
}

#[test]
fn unknown_subcommands_and_options() {
    refused(["run", "lda"], &["lda"]);
    refused(["run", "mlr", "--no-such-option"], &["--no-such-option"]);
    refused(mlr_default(&["--workers", "two"]), &["two"]);
}

/// A node bound to loopback cannot join a master on another host (nor be reached by the
/// job's other nodes): refused before it loads its data or dials, naming both addresses;
/// an address of the other family is refused too.
#[test]
fn a_node_bind_that_cannot_reach_the_master_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = |join: &str, bind: &str| {
        let creds = dir.path().to_str().unwrap().to_string();
        [
            "node",
            "--join",
            join,
            "--bind",
            bind,
            "--credentials",
            &creds,
            "--",
            "run",
            "counter",
        ]
        .map(String::from)
    };
    refused(
        node("10.0.0.1:7000", "127.0.0.1"),
        &[
            "bound to 127.0.0.1, a loopback address",
            "the master at 10.0.0.1:7000 on another host cannot be reached",
            "--bind 0.0.0.0",
        ],
    );
    refused(
        node("[fd00::1]:7000", "0.0.0.0"),
        &["bound to 0.0.0.0", "family"],
    );
}
