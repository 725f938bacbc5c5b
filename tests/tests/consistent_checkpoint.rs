//! Consistent checkpoints and `--resume` (issue 5, DESIGN G1) with the real `harp` binary:
//! a job killed with SIGKILL after a checkpoint was committed and resumed from it ends
//! exactly where an uninterrupted run does (counter: every row exact; MLR: the same
//! held-out accuracy); a flipped byte in the newest checkpoint makes the resume use the one
//! before; another app's checkpoints, a missing directory and other executors per worker
//! or shards per server are refused with clear messages, while other numbers of workers,
//! servers and node processes resume. Across processes (`--processes 3`: the master and two node
//! processes, each a worker and a server) the master is the process killed, and the resumed
//! job's counter rows are exact and its MLR accuracy is the uninterrupted one's. A job
//! stopped by Ctrl-C (SIGINT) says how to resume it, and the resume ends exact.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harp_tests::{harp_binary, read_json_lines, run_process, ProcessOutcome};

/// Exit status of a Rust program whose main thread panicked.
const PANIC_EXIT_CODE: i32 = 101;

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// Starts `harp` with `args` in the background.
fn spawn(args: &[OsString]) -> Child {
    Command::new(harp_binary!())
        .args(args)
        .env_remove("HARP_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start harp")
}

/// The seqs of the committed checkpoints in `dir`, ascending.
fn committed(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut seqs: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let seq = name.strip_prefix("ckpt-")?.parse().ok()?;
            e.path().join("MANIFEST.json").is_file().then_some(seq)
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

/// Kills `child` with SIGKILL once `dir` holds a committed checkpoint (polling the
/// directory); panics if the job ended first, which would test nothing.
fn kill_after_first_checkpoint(child: Child, dir: &Path) {
    kill_after_checkpoint_past(child, dir, None);
}

/// Kills `child` with SIGKILL once `dir` holds a committed checkpoint newer than `past`
/// (any, with `None`); panics if the job ended first.
fn kill_after_checkpoint_past(mut child: Child, dir: &Path, past: Option<u64>) {
    loop {
        if let Some(status) = child.try_wait().expect("poll harp") {
            panic!("the job ended ({status}) before it could be killed after a checkpoint");
        }
        if committed(dir)
            .last()
            .is_some_and(|newest| Some(*newest) > past)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5)); // polling interval, not a synchronization
    }
    child.kill().expect("SIGKILL harp");
    let status = child.wait().expect("reap harp");
    assert!(!status.success(), "the killed job reported success");
}

fn succeeded(args: &[OsString]) -> ProcessOutcome {
    let out = run_process(&harp_binary!(), args);
    assert!(
        out.status.success(),
        "harp {args:?} failed:\n{}",
        out.describe()
    );
    out
}

/// Runs `harp` with `args`, expects a clean refusal whose stderr holds every needle.
fn refused(args: &[OsString], needles: &[&str]) {
    let out = run_process(&harp_binary!(), args);
    let shown = || format!("harp {args:?}\n{}", out.describe());
    assert!(!out.status.success(), "expected a failure: {}", shown());
    assert!(
        out.status.code().is_some(),
        "killed by a signal: {}",
        shown()
    );
    assert_ne!(
        out.status.code(),
        Some(PANIC_EXIT_CODE),
        "panicked: {}",
        shown()
    );
    assert!(!out.stderr.contains("panicked"), "panicked: {}", shown());
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr lacks {needle:?}: {}",
            shown()
        );
    }
}

fn path_arg(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// The first line of `lines` that holds `needle`, waiting at most 60 s.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(_) => panic!("no line with {needle:?}"),
        }
    }
}

/// `harp run counter` with 20 000 tasks on 2 workers x 1 executor, each task waiting 200 µs
/// (so a run lasts long enough to be killed mid-way), and `extra`.
fn counter(extra: &[&str]) -> Vec<OsString> {
    counter_sized("20000", "500", extra)
}

/// `harp run counter` with `tasks` tasks over `rows` rows on 2 threads, and `extra`.
fn counter_sized(tasks: &str, rows: &str, extra: &[&str]) -> Vec<OsString> {
    let mut list = vec![
        "run",
        "counter",
        "--tasks",
        tasks,
        "--rows",
        rows,
        "--threads",
        "2",
    ];
    list.extend_from_slice(extra);
    args(&list)
}

/// Resumes [`counter`] from `dir` (a checkpoint every `every` iterations, its metrics in
/// `tmp`), checks that it ends with every row exact, and returns what it printed and the
/// checkpoint it resumed from (its metrics record's `from`).
fn resume_counter_to_exact_sums(
    tmp: &Path,
    dir: &str,
    every: &str,
) -> (ProcessOutcome, serde_json::Value) {
    let metrics = tmp.join("metrics.jsonl");
    let out = succeeded(&counter(&[
        "--resume",
        dir,
        "--checkpoint-every",
        every,
        "--metrics-out",
        path_arg(&metrics),
    ]));
    // The counter compares every row with the exact sum of every task's increments and
    // fails otherwise; the driver counts all 20 000 tasks across both processes.
    assert!(
        out.stderr.contains("counter: 20000 tasks, 500 rows exact"),
        "{}",
        out.describe()
    );
    (out, resumed_from(&metrics))
}

/// What the `resumed` record of the metrics file `metrics` says the job resumed from.
fn resumed_from(metrics: &Path) -> serde_json::Value {
    let records = read_json_lines(metrics);
    let resumed = records
        .iter()
        .find(|r| r["event"] == "resumed")
        .unwrap_or_else(|| panic!("no resume record in {records:?}"));
    resumed["from"].clone()
}

#[test]
fn counter_killed_after_a_checkpoint_resumes_to_exact_sums() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    let child = spawn(&counter(&[
        "--task-sleep-us",
        "200",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "500",
    ]));
    kill_after_first_checkpoint(child, &dir);
    let first = committed(&dir)[0];
    assert!(
        first < 10_000,
        "checkpoint {first} is at or past the last iteration"
    );

    let (_, resumed) = resume_counter_to_exact_sums(tmp.path(), d, "500");
    let seq = resumed["seq"].as_u64().expect("resumed seq");
    assert!(
        seq >= first,
        "resumed from {seq}, before the first checkpoint {first}"
    );
    // Checkpoints went on into the same directory after the resume.
    assert!(
        committed(&dir).iter().any(|s| *s > seq),
        "no checkpoint after the resumed one: {:?}",
        committed(&dir)
    );
}

/// `harp run mlr` on the built-in MNIST subset: staleness 0 (bulk-synchronous) so that runs
/// are repeatable, a checkpoint every epoch.
fn mlr(epochs: &str, extra: &[&str]) -> Vec<OsString> {
    let mut list = vec![
        "run",
        "mlr",
        "--quiet",
        "--epochs",
        epochs,
        "--staleness",
        "0",
        "--threads",
        "2",
    ];
    list.extend_from_slice(extra);
    args(&list)
}

/// `list` with the job across processes: the master and two `harp node` processes, each a
/// worker and a server (the master starts them). SIGKILL on the master leaves its nodes
/// behind; they leave once its link goes quiet (the lease timeout).
fn across(mut list: Vec<OsString>) -> Vec<OsString> {
    list.extend(args(&["--processes", "3"]));
    list
}

#[test]
fn counter_across_processes_resumes_after_the_master_is_killed_with_exact_sums() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    // Executor states of 3 MB: more than a move relays through the master (1 MiB), so this
    // also checks that a worker node sends a large state for a checkpoint, and that the
    // resumed nodes restore it (a ballast that arrives truncated or mixed up is refused).
    let short = |extra: &[&str]| {
        let mut extra = extra.to_vec();
        extra.extend(["--state-bytes", "3000000"]);
        across(counter_sized("4000", "200", &extra))
    };
    let child = spawn(&short(&[
        "--task-sleep-us",
        "200",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "200",
    ]));
    kill_after_first_checkpoint(child, &dir);
    let first = committed(&dir)[0];
    assert!(first < 2_000, "checkpoint {first} is at or past the end");
    let state = checkpoint_dir(&dir, first).join("executor-0");
    let bytes = std::fs::metadata(&state).map(|m| m.len());
    assert_eq!(bytes.ok(), Some(3_000_016), "{}", state.display());

    // With SCAR's running checkpoint on after the resume: the image is seeded with the
    // resumed rows by a full round over the server nodes before the driver starts.
    let out = succeeded(&short(&[
        "--resume",
        d,
        "--checkpoint-every",
        "200",
        "--scar-fraction",
        "0.125",
        "--scar-period",
        "8",
    ]));
    // Every row is compared with the exact sum of all 4 000 tasks' increments: an update
    // lost or applied twice across the kill fails the run.
    assert!(
        out.stderr.contains("counter: 4000 tasks, 200 rows exact"),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("resumed from checkpoint") && !l.contains("checkpoint 0 ")),
        "{}",
        out.describe()
    );
    assert!(
        committed(&dir).iter().any(|s| *s > first),
        "no checkpoint after the resume: {:?}",
        committed(&dir)
    );
}

/// An executor state and a server's rows each larger than the largest message between
/// processes (64 MiB). For the checkpoint the worker node parks the state and the master
/// fetches it in chunks, and the server node sends its rows in parts; on resume the master
/// parks the state and the node fetches it from the master, and the rows go into the server
/// in parts. The counter's ballast refuses a state that arrives truncated or mixed up, and
/// every row must end exact (the final collection is 80 MB of rows too).
#[test]
fn a_state_and_rows_larger_than_a_message_are_checkpointed_and_resumed_across_processes() {
    // Above the largest frame (`harp_wire::FRAME_BYTES_MAX`, 64 MiB).
    const STATE_BYTES: u64 = 70_000_000;
    const MESSAGE_BYTES_MAX: u64 = 64 << 20;
    const { assert!(STATE_BYTES > MESSAGE_BYTES_MAX) };
    // 100 rows of 100 000 counters (800 kB each, 80 MB in all). By the checkpoint, 50 tasks
    // of 8 updates each, a row is untouched with probability 0.99^400 < 2%: the checkpoint
    // holds far more than the 84 rows that fill 64 MiB.
    const ROWS: &str = "100";
    const WIDTH: &str = "100000";
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    // The master and one node (a worker with one executor, and a server): a checkpoint
    // after 50 of the 100 tasks.
    let run = |extra: &[&str]| {
        let mut extra = extra.to_vec();
        extra.extend(["--state-bytes", "70000000", "--width", WIDTH]);
        extra.extend(["--checkpoint-every", "50"]);
        let mut list = counter_sized("100", ROWS, &extra);
        list.extend(args(&["--processes", "2"]));
        list
    };
    let exact = "counter: 100 tasks, 100 rows exact";
    let out = succeeded(&run(&["--checkpoint-dir", d]));
    assert!(out.stderr.contains(exact), "{}", out.describe());
    let first = committed(&dir)[0];
    let state = checkpoint_dir(&dir, first).join("executor-0");
    let bytes = std::fs::metadata(&state).map(|m| m.len());
    assert_eq!(bytes.ok(), Some(STATE_BYTES + 16), "{}", state.display());

    let out = succeeded(&run(&["--resume", d]));
    assert!(out.stderr.contains(exact), "{}", out.describe());
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with(&format!("resumed from checkpoint {first} "))),
        "{}",
        out.describe()
    );
}

#[test]
fn mlr_across_processes_resumes_after_the_master_is_killed_to_the_uninterrupted_accuracy() {
    // Across processes a task may read the other node's update of the same iteration when
    // it was flushed first (reads may be fresher than the bound), so two uninterrupted runs
    // differ by up to about 1.3% per epoch (measured); an epoch lost or rows reset cost
    // 5-12%: the loss of every epoch is what tells a bad resume. The final accuracy varies
    // too: eight uninterrupted runs on the 2-core VM, two at a time beside two busy loops,
    // ended between 90.75% and 91.05%, and a CI run's resume ended 0.40 points below its
    // uninterrupted run with every epoch's loss within the 3% (the in-process test's 0.25
    // points, used here before 2026-12-07, is tighter than that spread). A lost epoch moves
    // it by about 0.2 points (90.55%, 90.75%, 90.8% after 4, 5, 6 epochs), so the accuracy
    // only guards against a gross failure, with 0.6 points (12 of the 2000 rows).
    mlr_resume_matches_uninterrupted("6", across, 0.03, 0.6);
}

/// The held-out accuracy (in %) of the last epoch, from `harp run mlr`'s final line.
fn final_accuracy(out: &ProcessOutcome) -> f64 {
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("done:"))
        .unwrap_or_else(|| panic!("no final line:\n{}", out.describe()));
    let value = line
        .rsplit("accuracy ")
        .next()
        .and_then(|v| v.trim().strip_suffix('%'))
        .unwrap_or_else(|| panic!("no accuracy in {line:?}"));
    value.parse().expect("accuracy is a number")
}

/// Each epoch's held-out loss from an MLR metrics file, by epoch.
fn epoch_losses(metrics: &Path) -> Vec<(u64, f64)> {
    read_json_lines(metrics)
        .iter()
        .filter_map(|r| Some((r["epoch"].as_u64()?, r["test_loss"].as_f64()?)))
        .collect()
}

/// Every epoch the resumed run reports has the uninterrupted run's held-out loss within
/// `relative`: a resume that lost the rows (the weights start over) or went back an epoch
/// is several percent off at its first epoch.
fn assert_epochs_match(resumed: &Path, uninterrupted: &Path, relative: f64) {
    let resumed = epoch_losses(resumed);
    let uninterrupted: std::collections::BTreeMap<u64, f64> =
        epoch_losses(uninterrupted).into_iter().collect();
    assert!(!resumed.is_empty(), "the resumed run reported no epoch");
    for (epoch, loss) in &resumed {
        let want = uninterrupted[epoch];
        assert!(
            ((loss - want) / want).abs() <= relative,
            "epoch {epoch}: held-out loss {loss} after the resume, {want} uninterrupted (resumed {resumed:?})"
        );
    }
}

#[test]
fn mlr_killed_and_resumed_reaches_the_uninterrupted_accuracy() {
    // One worker hosting both executors: the master hands it each iteration's two tasks in
    // one message and its node flushes once both have finished, so no task reads the other's
    // update of the same iteration and the job repeats itself to the last bit, however
    // loaded the machine. (With two workers, a task that starts after the other worker
    // flushed reads that update, which §2.1 allows; under load the per-epoch losses of two
    // uninterrupted runs then differed by up to 0.15%.) A resume restores exactly, so every
    // epoch's loss must match to rounding of the printed value; the accuracy, to 0.25 points
    // (5 of the 2000 held-out rows).
    mlr_resume_matches_uninterrupted("8", one_worker, 1e-12, 0.25);
}

#[test]
fn mlr_across_processes_on_one_node_resumes_to_the_uninterrupted_run_exactly() {
    // The across-process job laid out as the in-process test above: one node process
    // hosting the job's one worker (both executors) and its one server, so it repeats
    // itself to the last bit and a resume (the master SIGKILLed, the node leaving when its
    // link goes quiet, a new node adopting both saved states over QUIC) must match every
    // epoch's loss to rounding and the accuracy exactly. The two-node test above checks
    // adoptions on two nodes, with the tolerance a job that does not repeat itself needs.
    mlr_resume_matches_uninterrupted("8", one_node, 1e-12, 0.0);
}

/// `list` with the job across processes on one node process: the master and one `harp
/// node`, a worker hosting two executors and a server.
fn one_node(mut list: Vec<OsString>) -> Vec<OsString> {
    list.extend(args(&["--processes", "2", "--executors-per-worker", "2"]));
    list
}

/// `list` with the job on one worker hosting two executors.
fn one_worker(mut list: Vec<OsString>) -> Vec<OsString> {
    list.extend(args(&["--workers", "1", "--executors-per-worker", "2"]));
    list
}

/// MLR for `epochs`, placed by `place` (in one process or across processes): an
/// uninterrupted run, then one SIGKILLed after its first checkpoint and resumed. Every
/// epoch after the resume has the uninterrupted held-out loss within `loss_relative`, and
/// the final accuracy is within `accuracy_points`.
fn mlr_resume_matches_uninterrupted(
    epochs: &str,
    place: fn(Vec<OsString>) -> Vec<OsString>,
    loss_relative: f64,
    accuracy_points: f64,
) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (whole, part) = (
        tmp.path().join("whole.jsonl"),
        tmp.path().join("part.jsonl"),
    );
    let uninterrupted = final_accuracy(&succeeded(&place(mlr(
        epochs,
        &["--metrics-out", path_arg(&whole)],
    ))));

    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    let child = spawn(&place(mlr(epochs, &["--checkpoint-dir", d])));
    kill_after_first_checkpoint(child, &dir);
    let out = succeeded(&place(mlr(
        epochs,
        &["--resume", d, "--metrics-out", path_arg(&part)],
    )));
    assert!(
        out.stderr.contains("resumed from checkpoint"),
        "{}",
        out.describe()
    );
    assert_epochs_match(&part, &whole, loss_relative);
    let resumed = final_accuracy(&out);
    assert!(
        (resumed - uninterrupted).abs() <= accuracy_points,
        "resumed accuracy {resumed}% vs uninterrupted {uninterrupted}%"
    );
}

/// Flips one byte in the middle of `file`.
fn flip_a_byte(file: &Path) {
    let mut bytes = std::fs::read(file).expect("read checkpoint file");
    assert!(!bytes.is_empty(), "{} is empty", file.display());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(file, bytes).expect("write checkpoint file");
}

fn checkpoint_dir(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("ckpt-{seq:020}"))
}

#[test]
fn a_flipped_byte_in_the_newest_checkpoint_resumes_from_the_previous_one() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    // Checkpoints every 1000 iterations of 10 000, each task waiting 100 µs so writes finish
    // between them; the newest 3 are kept.
    succeeded(&counter(&[
        "--task-sleep-us",
        "100",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "1000",
        "--checkpoint-keep",
        "3",
    ]));
    let seqs = committed(&dir);
    assert!(seqs.len() >= 2, "need two checkpoints, found {seqs:?}");
    let newest = seqs[seqs.len() - 1];
    let previous = seqs[seqs.len() - 2];
    flip_a_byte(&checkpoint_dir(&dir, newest).join("rows"));

    // A checkpoint every iteration, the default.
    let (out, resumed) = resume_counter_to_exact_sums(tmp.path(), d, "1");
    assert!(
        out.stderr
            .contains(&format!("resumed from checkpoint {previous} in")),
        "{}",
        out.describe()
    );
    assert_eq!(resumed["seq"].as_u64(), Some(previous), "{resumed}");
    let skipped = resumed["skipped"].as_array().expect("skipped list");
    assert_eq!(skipped.len(), 1, "{resumed}");
    assert_eq!(skipped[0][0].as_u64(), Some(newest), "{resumed}");
    assert!(
        skipped[0][1]
            .as_str()
            .is_some_and(|why| why.contains("rows")),
        "the reason names the damaged file: {resumed}"
    );
}

#[test]
fn resumes_that_cannot_work_are_refused_clearly() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    succeeded(&args(&[
        "run",
        "counter",
        "--tasks",
        "400",
        "--threads",
        "2",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "50",
    ]));
    assert!(!committed(&dir).is_empty());

    // Another app's checkpoints.
    refused(
        &mlr("1", &["--resume", d]),
        &["holds checkpoints of app \"counter\"", "not of app \"mlr\""],
    );
    // A missing directory.
    let missing = tmp.path().join("nothing-here");
    refused(
        &counter(&["--resume", path_arg(&missing)]),
        &["nothing-here", "does not exist"],
    );
    // Other executors per worker or shards per server (the numbers of workers, servers
    // and processes may differ: see the test after this one).
    refused(
        &counter(&["--resume", d, "--executors-per-worker", "2"]),
        &[
            "cannot resume from checkpoint",
            "executors per worker: checkpoint 1, this job 2",
            "give the checkpointed job's --executors-per-worker and --shards-per-server",
        ],
    );
    refused(
        &counter(&["--resume", d, "--shards-per-server", "4"]),
        &["shards per server: checkpoint 8, this job 4"],
    );
    // Across processes too (the node is told why and exits).
    refused(
        &counter(&[
            "--resume",
            d,
            "--processes",
            "2",
            "--shards-per-server",
            "4",
        ]),
        &[
            "cannot resume from checkpoint",
            "shards per server: checkpoint 8, this job 4",
            "shut down by the master before the job started: cannot resume",
        ],
    );
    // A checkpoint directory that is a file; zero iterations between checkpoints.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write file");
    refused(
        &counter(&["--checkpoint-dir", path_arg(&file)]),
        &["a-file", "not a directory"],
    );
    refused(
        &counter(&["--checkpoint-dir", d, "--checkpoint-every", "0"]),
        &["--checkpoint-every must be at least 1"],
    );
    // A model of another shape (the data has other features): named by its table and
    // widths, not as a row kind mismatch deep in a server.
    let mlr_dir = tmp.path().join("mlr-ckpt");
    let m = path_arg(&mlr_dir);
    let data = |features: &str| format!("synthetic:300,{features},3");
    let twenty = data("20");
    succeeded(&mlr(
        "2",
        &[
            "--data",
            &twenty,
            "--checkpoint-dir",
            m,
            "--checkpoint-every",
            "1",
        ],
    ));
    let thirty = data("30");
    refused(
        &mlr("3", &["--data", &thirty, "--resume", m]),
        &[
            "cannot resume from checkpoint",
            "values, and this job's rows of",
            "written with other data or model options",
        ],
    );
}

/// `--stop-wait`: a stopped job waits that long for its micro-tasks in flight, and no
/// longer, for its last checkpoint. Here each micro-task takes 3 s and the wait is 0.2 s: the
/// job ends without the checkpoint and says why (the tasks in flight, after 0.2 s, not the
/// default 20 s); nothing is written, and the job does not offer a `--resume` that would be
/// refused.
#[test]
fn a_stop_waits_for_its_last_checkpoint_only_as_long_as_stop_wait() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let mut command = Command::new(harp_binary!());
    command.args(counter_sized(
        "100",
        "10",
        &[
            "--task-sleep-us",
            "3000000",
            "--checkpoint-dir",
            path_arg(&dir),
            "--checkpoint-every",
            "1000000",
            "--stop-wait",
            "0.2",
        ],
    ));
    command.env_remove("HARP_LOG");
    let (mut child, lines, reader) = harp_tests::spawn_reading_stderr(&mut command);
    // Let its first micro-tasks start.
    std::thread::sleep(Duration::from_millis(500));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let gave_up = wait_for_line(&lines, "micro-tasks were still in flight after");
    assert!(gave_up.contains("after 0.2 s"), "{gave_up}");
    // The report counts it as failed, with why.
    let failed = wait_for_line(&lines, "): FAILED (the job was stopped and");
    assert!(failed.contains("after 0.2 s"), "{failed}");
    let said = wait_for_line(&lines, "the job was stopped (the master got SIGTERM)");
    let status = harp_tests::wait_exit(&mut child, "the stopped job");
    reader.join().expect("the stderr reader");
    assert_eq!(status.code(), Some(128 + 15), "{status}: {said}");
    // No `--resume` offered for a directory with nothing to resume from.
    assert!(
        said.contains("holds no complete checkpoint of this job to go on from"),
        "{said}"
    );
    assert!(!said.contains("--resume"), "{said}");
    assert!(committed(&dir).is_empty(), "{:?}", committed(&dir));
}

/// A job checkpointed on two node processes (two workers, two servers) goes on on fewer
/// and on more: resumed on one node process (its one worker hosts both executors, its one
/// server every shard) and killed again after a checkpoint of its own, then resumed in one
/// process on three workers (one of them hosting no executor) and one server. Every row
/// ends exact, so no update was lost or applied twice across either move. Before, a resume
/// was refused unless it had the checkpointed job's numbers of workers and servers: a job
/// stopped on three machines could not go on on the two a scheduler gave it back.
#[test]
fn a_checkpoint_resumes_on_fewer_nodes_and_then_on_more_workers_with_exact_sums() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    let short = |extra: &[&str]| counter_sized("4000", "200", extra);
    let checkpointing = ["--task-sleep-us", "200", "--checkpoint-every", "200"];
    let mut first_run = short(&checkpointing);
    first_run.extend(args(&["--checkpoint-dir", d, "--processes", "3"]));
    kill_after_first_checkpoint(spawn(&first_run), &dir);
    let first = committed(&dir)[0];
    assert!(first < 2_000, "checkpoint {first} is at or past the end");

    let mut on_one_node = short(&checkpointing);
    on_one_node.extend(args(&["--resume", d, "--processes", "2"]));
    kill_after_checkpoint_past(spawn(&on_one_node), &dir, Some(first));
    let second = *committed(&dir).last().expect("a checkpoint");
    assert!(second > first && second < 4_000, "checkpoint {second}");

    let metrics = tmp.path().join("metrics.jsonl");
    let out = succeeded(&short(&[
        "--resume",
        d,
        "--workers",
        "3",
        "--servers",
        "1",
        "--metrics-out",
        path_arg(&metrics),
    ]));
    assert!(
        out.stderr.contains("counter: 4000 tasks, 200 rows exact"),
        "{}",
        out.describe()
    );
    // The last resume went on from the one-node job's checkpoint, not the first job's.
    let from = resumed_from(&metrics);
    assert!(from["seq"].as_u64() >= Some(second), "{from}");
}

/// Ctrl-C (SIGINT) on a job that writes checkpoints stops it: it takes one last checkpoint
/// once nothing is in flight (here the only one: none was due yet), says it was stopped,
/// after how many micro-tasks, and how to go on (`--resume DIR`), and exits with 128 + 2.
/// Running the same command with that `--resume` goes on from where it was stopped and
/// ends with every counter exact. Before, SIGINT killed the process on the spot, and the
/// work since the last due checkpoint was lost.
#[test]
fn counter_stopped_by_sigint_checkpoints_says_how_to_resume_and_the_resume_is_exact() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ckpt");
    let d = path_arg(&dir);
    let metrics = tmp.path().join("stopped.jsonl");
    let mut command = Command::new(harp_binary!());
    command.args(counter(&[
        "--task-sleep-us",
        "200",
        "--checkpoint-dir",
        d,
        "--checkpoint-every",
        "1000000",
        "--metrics-out",
        path_arg(&metrics),
    ]));
    command.env_remove("HARP_LOG");
    let (mut child, lines, reader) = harp_tests::spawn_reading_stderr(&mut command);
    // Let it work a while (how much does not matter to what is checked).
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        child.try_wait().expect("poll harp").is_none(),
        "the job ended early"
    );
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // The stopped job reports its checkpoint, on the terminal and in the metrics file.
    let written = wait_for_line(&lines, "): written,");
    let said = wait_for_line(&lines, "the job was stopped (the master got SIGINT) after");
    let status = harp_tests::wait_exit(&mut child, "the stopped job");
    reader.join().expect("the stderr reader");
    assert_eq!(status.code(), Some(128 + 2), "{status}: {said}");
    let records = read_json_lines(&metrics);
    let checkpoints: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "checkpoint")
        .collect();
    assert_eq!(checkpoints.len(), 1, "{records:?}");
    assert_eq!(
        checkpoints[0]["checkpoint"]["outcome"], "written",
        "{checkpoints:?}"
    );
    let seq = checkpoints[0]["checkpoint"]["seq"].as_u64();
    assert!(
        seq.is_some_and(|seq| written.starts_with(&format!("checkpoint {seq} "))),
        "{written}"
    );
    assert!(
        said.contains(&format!("run the same command with --resume {d}")),
        "{said}"
    );
    let stopped_after: u64 = said
        .split(" after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of micro-tasks in {said:?}"));
    assert_eq!(committed(&dir).len(), 1, "the stop's checkpoint");

    let (_, resumed) = resume_counter_to_exact_sums(tmp.path(), d, "1000000");
    // It went on from where it was stopped, not from the start: the version clock, one
    // step per completion handed to the driver, is where the stop left it.
    assert_eq!(
        resumed["version"].as_u64(),
        Some(stopped_after),
        "{resumed}"
    );
}
