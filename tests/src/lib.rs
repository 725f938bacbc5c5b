//! Helpers shared by harp's integration tests (`tests/tests/*.rs`).
//!
//! | test file | checks |
//! |---|---|
//! | `cli_bad_input.rs` | the `harp` command refuses bad data and bad options with a clear message, a non-zero exit and no panic (G5) |
//! | `mlr_acceptance.rs` | `harp run mlr` reaches the accuracy targets on mnist10k, digits and the built-in data |
//! | `counter_acceptance.rs` | `harp run counter` and a grid of cluster shapes account for every update exactly |
//! | `runtime_errors.rs` | typed runtime errors from tiny apps: failing or panicking tasks, bad dispatches, bad updates, server-side Adam / AdaGrad |
//! | `consistency_runtime.rs` | the Litz consistency rule and exact accounting under many shapes and seeds |
//! | `elastic_processes.rs` | node processes joining and leaving a running job (`harp scale`, SIGTERM), large executor states moving node to node, Litz's priority scenario; under a 45 s lease a leave waits for a new owner stopped 35 s, longer than the usual 30 s take-over wait |
//! | `elastic_mid_move.rs` | a node killed in the middle of an executor's move: a clean failure, or with `--recover-workers` a recovery after which every counter is exact; with `--recover-workers`, a server leaving while a flush staged on it is unreported loses no update, and a node that dies while another leaves has its executors created afresh elsewhere than on the leaving node; under a 40 s lease a state fetch held 33 s, longer than the usual 30 s chunk wait, still moves the state |
//! | `elastic_etcd.rs` | the job's desired size in etcd grows and shrinks it |
//! | `scar_processes.rs` | SCAR across processes: a killed server node recovered from the running checkpoint (the lost updates exact), a killed worker node recovered with exactly-once updates, a server node killed while it hands its shards off, recovered on their new owner, and one killed while shards are handed to it (by servers there when it joined, or by a leaving server, whose leave is tried again after the recovery and ends with its exit 0), recovered on their old owners |
//! | `consistent_checkpoint.rs` | consistent checkpoints and `--resume` with the real binary: killed and resumed jobs end exact, resumes on fewer or more nodes, a stop's last checkpoint and `--stop-wait` |
//! | `plot_cli.rs` | `harp plot` on what `harp run` wrote (panels, the fault's line, `--x time`, `--out`); bad metrics files refused with file and line |
//! | `multiprocess.rs` | `harp run --processes`: the counter exact and MLR accurate across processes; a SIGKILLed node reported (the process's exit, which node, what it held) or, with `--recover-workers`, recovered from when its process exits; SIGTERM on the master ends its nodes cleanly; with etcd, a run started again with the same credentials ignores the earlier run's stale members |
//! | `job_events.rs` | `ControlInbox::with_events`: an injected fault and a server's recovery told while the job runs, once each, equal to `JobStats`, and each consistent checkpoint and the resume equal to the `ConsistentReport`; `harp run --metrics-out` writes a fault's record when it strikes, and a run stopped by SIGTERM keeps it |
//! | `start_failures.rs` | a job across processes whose node process exits before the start (`NodeFailure::Exited`, a SIGKILLed child of `harp run --processes` that joins late) ends the start at once naming the process, and the nodes that joined hear why; a death seen before the start is handled once the job runs; a node given SIGTERM while it joins leaves once the job runs; a peer that connects and never says hello holds up no node of the start |
//! | `multi_host.rs` | a job spread over hosts of their own (network namespaces, [`NetHosts`]): nodes beside the master (joined over loopback) and on other hosts train one job, which grows and shrinks there, every counter exact; a node bound to loopback is named to the remote node that cannot reach it; a node cut off by a partition is recovered from and stays out; a node cut off from the master only (a server: the lost-updates report stays exact; a worker: nothing committed after its death); a node cut off from the other nodes only is evicted and the job goes on; two nodes that lose each other but not the master, where neither can be recovered, end the job with `PeerLost` (with `--scar-fraction` too, without the node's 60 s wait) |
//! | `partition_soak.rs` | (ignored: soaks, `--ignored`) up to three faults (four kinds of network cut, SIGKILL, a blip) in a recoverable job of five nodes on hosts of their own, round after round: one recovery per lost node and the counter's verdict; and faults on the server nodes of a `--scar-fraction` job, the lost-updates reports exact |
//! | `job_stop.rs` | `JobControl::stop` (SIGTERM/SIGINT on `harp run`): a running job, a job across processes and one still waiting for its nodes end with `HarpError::Stopped` |
//!
//! Process-level elasticity tests drive a master process through [`MasterProcess`], and watch
//! where a node is (a move, a hand-off) in its log through [`LoggedNode`].
//!
//! # How the tests reach the `harp` command
//!
//! Most tests call the command in-process: [`run_cli`] parses the arguments with the same
//! [`harp_apps::cli::Cli`] the binary uses and calls [`harp_apps::cli::run`], exactly what
//! `apps/src/main.rs` does after installing its log subscriber. That is fast, needs no
//! process, and an error comes back as the same `anyhow::Error` the binary prints.
//!
//! The few tests that must see what a user sees (the exit status, stderr, the absence of a
//! panic message) spawn a real process. Cargo builds the binaries of the package under test
//! for its integration tests and passes their paths as `CARGO_BIN_EXE_<name>`, but it does
//! **not** build the binaries of a *dependency*; running `cargo build` from inside a test
//! would contend for the target directory's lock with the outer cargo (and with anyone else
//! building in the shared target directory) and would pick a profile of its own. So this
//! crate declares a binary, `harp-cli`, whose source *is* `apps/src/main.rs` (see
//! `tests/Cargo.toml`): the very file that makes the `harp` binary, compiled against the same
//! `harp-apps` library, built by the same `cargo test` invocation in the same profile, with
//! its path handed to the tests by Cargo. No lock, no stale binary, no guessing of paths.
//! [`harp_binary!`] resolves it; setting `HARP_BIN` to another executable (for example a
//! release build of `harp`) runs the same tests against that one instead.
//!
//! # Shared data
//!
//! The real datasets live in `shared/data` beside the repository (`../../shared/data` from
//! this crate's manifest directory). Tests that need them call [`shared_data`], which prints
//! `skipping: shared data not found at ...` and returns `None` when they are absent; tests on
//! the built-in dataset never skip.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;

use clap::Parser;
use harp::JobConfig;
use harp_apps::counter::{CounterApp, CounterConfig};

mod hosts;
mod logged_node;
mod master_process;
pub use hosts::NetHosts;
pub use logged_node::LoggedNode;
pub use master_process::{spawn_reading_stderr, MasterProcess, PATIENCE};

/// The `harp` executable the process-level tests run: `$HARP_BIN` when set, else the
/// `harp-cli` binary Cargo built for this crate's tests.
#[macro_export]
macro_rules! harp_binary {
    () => {
        $crate::resolve_binary(env!("CARGO_BIN_EXE_harp-cli"))
    };
}

/// `$HARP_BIN` when it is set and non-empty, else `built`.
pub fn resolve_binary(built: &str) -> PathBuf {
    match std::env::var_os("HARP_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(built),
    }
}

/// What a finished `harp` process left behind.
#[derive(Debug)]
pub struct ProcessOutcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ProcessOutcome {
    /// A one-paragraph description for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "status: {:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            self.status, self.stderr, self.stdout
        )
    }
}

/// Runs `binary` with `args` (no stdin, default log level) and waits for it.
pub fn run_process<I, S>(binary: &Path, args: I) -> ProcessOutcome
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let output = Command::new(binary)
        .args(&args)
        .env_remove("HARP_LOG")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    ProcessOutcome {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `binary` with `args` plus `--metrics-out METRICS`, asserts that it succeeded, and
/// returns its outcome and the metrics lines that carry `key` (e.g. one per epoch).
pub fn run_with_metrics(
    binary: &Path,
    args: &[&str],
    metrics: &Path,
    key: &str,
) -> (ProcessOutcome, Vec<serde_json::Value>) {
    let metrics_arg = metrics.to_str().expect("a UTF-8 metrics path");
    let all: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--metrics-out", metrics_arg])
        .collect();
    let out = run_process(binary, &all);
    assert!(out.status.success(), "{}", out.describe());
    let lines = read_json_lines(metrics)
        .into_iter()
        .filter(|r| r.get(key).is_some())
        .collect();
    (out, lines)
}

/// Runs the `harp` command line in this process: `args` are what follows `harp`.
///
/// Parse errors come back as errors too (as clap would print them). Must not be called from
/// inside a tokio runtime: the command starts its own.
pub fn run_cli<I, S>(args: I) -> anyhow::Result<()>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let argv = std::iter::once(OsString::from("harp")).chain(args.into_iter().map(Into::into));
    let cli = harp_apps::cli::Cli::try_parse_from(argv)?;
    harp_apps::cli::run(cli)
}

/// `shared/data/<relative>` when it exists; otherwise prints why the caller skips and
/// returns `None`.
pub fn shared_data(relative: &str) -> Option<PathBuf> {
    // `$HARP_SHARED_DATA` where the tests run away from the checkout (the GPU bundle).
    let root = match std::env::var_os("HARP_SHARED_DATA") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
    };
    let path = root.join(relative);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipping: shared data not found at {}", path.display());
        None
    }
}

/// The scale events among a metrics file's records, each as `cause:node:ok`, in the file's
/// order.
pub fn scale_summaries(records: &[serde_json::Value]) -> Vec<String> {
    (records.iter())
        .filter(|r| r["event"] == "scale")
        .map(|r| {
            format!(
                "{}:{}:{}",
                r["cause"].as_str().unwrap_or("?"),
                r["node"],
                r["ok"]
            )
        })
        .collect()
}

/// Reads a JSON-lines file into one value per non-empty line.
pub fn read_json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("{} line {}: not JSON ({e}): {line}", path.display(), i + 1)
            })
        })
        .collect()
}

/// An IDX file of unsigned bytes (magic `00 00 08 NN`, big-endian sizes, then the data).
pub fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(bytes)
        .and_then(|_| encoder.finish())
        .expect("gzip into memory")
}

/// How to run a job: a tokio runtime flavour and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// A current-thread runtime: every actor and task interleaves on one thread.
    Current,
    /// A multi-thread runtime with this many worker threads.
    Multi(usize),
}

/// A tokio runtime of the given flavour.
pub fn runtime(threads: Threads) -> tokio::runtime::Runtime {
    let mut builder = match threads {
        Threads::Current => tokio::runtime::Builder::new_current_thread(),
        Threads::Multi(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n.max(1));
            b
        }
    };
    builder.enable_all().build().expect("a tokio runtime")
}

/// What an exact counter job reports.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterSummary {
    /// Completions the driver was handed.
    pub completed: u64,
    /// Rows compared with their expected sums.
    pub rows_checked: usize,
    pub stats: harp::JobStats,
}

/// Runs the counter app in-process on `job` (parameters collected) and checks every row
/// against the driver's expected sums. The error says which shape and seed failed and how.
pub fn run_counter_job(
    config: &CounterConfig,
    job: &JobConfig,
    threads: Threads,
) -> Result<CounterSummary, String> {
    let context = || format!("counter {config:?} on {job:?} with {threads:?}");
    let app = Arc::new(CounterApp::new(config.clone()).map_err(|e| format!("{}: {e}", context()))?);
    let job = JobConfig {
        collect_params: true,
        ..job.clone()
    };
    let outcome = runtime(threads)
        .block_on(harp::run_job(app.clone(), &job))
        .map_err(|e| format!("{}: the job failed: {e}", context()))?;
    let params = outcome
        .params
        .ok_or_else(|| format!("{}: no parameters collected", context()))?;
    let rows_checked = app
        .verify(&outcome.driver, &params)
        .map_err(|diff| format!("{}: not exact:\n{diff}", context()))?;
    Ok(CounterSummary {
        completed: outcome.driver.completed(),
        rows_checked,
        stats: outcome.stats,
    })
}

/// A small deterministic generator (splitmix64) for test shapes; print its seed to replay.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        harp::mix64(self.0)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Starts one node per entry of `roles` (in this process, joining over QUIC on loopback) for
/// the job whose master listens at `master`.
pub fn spawn_nodes<A: harp::App>(
    app: &Arc<A>,
    creds: &Arc<harp::JobCredentials>,
    master: std::net::SocketAddr,
    roles: &[harp::NodeRoles],
) -> Vec<tokio::task::JoinHandle<Result<(), harp::HarpError>>> {
    let localhost = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    roles
        .iter()
        .map(|&role| {
            let (app, creds) = (app.clone(), creds.clone());
            tokio::spawn(async move {
                harp::run_node_with(app, &creds, master, localhost, role, |_| {}).await
            })
        })
        .collect()
}

/// What the master of a job across processes ends with (`run_job_across_consistent`).
pub type MasterEnd<A> = Result<(harp::JobOutcome<A>, harp::ConsistentReport), harp::HarpError>;

/// Starts the master of `app` across processes in this process: it waits (for ten
/// minutes) for `nodes` nodes, hears of deaths on `failures` and takes commands from
/// `inbox`. Its task, and where it listens.
pub async fn spawn_master<A: harp::App>(
    app: &Arc<A>,
    creds: &Arc<harp::JobCredentials>,
    nodes: u32,
    failures: tokio::sync::mpsc::UnboundedReceiver<harp::NodeFailure>,
    inbox: harp::ControlInbox,
) -> (tokio::task::JoinHandle<MasterEnd<A>>, std::net::SocketAddr) {
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (app, creds) = (app.clone(), creds.clone());
    let master = tokio::spawn(async move {
        let options = harp::ClusterOptions {
            nodes,
            join_timeout_ms: 600_000,
            ..harp::ClusterOptions::default()
        };
        let listening = |addr| {
            let _ = addr_tx.send(addr);
        };
        harp::run_job_across_consistent(app, &creds, &options, listening, failures, inbox).await
    });
    (master, addr_rx.await.expect("the master listens"))
}

/// Starts one node with `role` (in this process, joining over QUIC on loopback) for the
/// job whose master listens at `master`: its task, and a receiver that gets the node's id
/// once the master welcomed it (a test's sync point for "the node joined").
pub fn spawn_node_joined<A: harp::App>(
    app: &Arc<A>,
    creds: &Arc<harp::JobCredentials>,
    master: std::net::SocketAddr,
    role: harp::NodeRoles,
) -> (
    tokio::task::JoinHandle<Result<(), harp::HarpError>>,
    tokio::sync::oneshot::Receiver<u32>,
) {
    let (joined_tx, joined) = tokio::sync::oneshot::channel();
    let (app, creds) = (app.clone(), creds.clone());
    let node = tokio::spawn(async move {
        let localhost = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        harp::run_node_with(app, &creds, master, localhost, role, |id| {
            let _ = joined_tx.send(id);
        })
        .await
    });
    (node, joined)
}

/// Runs `app` across nodes in this process: the master with `options` and one node per
/// entry of `roles`, joining over QUIC on loopback (a runtime of 2 threads), and returns the
/// job's outcome once every node ended.
pub fn run_across_in_process<A: harp::App>(
    app: &Arc<A>,
    options: harp::ClusterOptions,
    roles: &[harp::NodeRoles],
) -> Result<harp::JobOutcome<A>, harp::HarpError> {
    let creds = Arc::new(harp::JobCredentials::generate("in-process").unwrap());
    runtime(Threads::Multi(2)).block_on(async {
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let master = {
            let (app, creds) = (app.clone(), creds.clone());
            tokio::spawn(async move {
                harp::run_job_across(app, &creds, &options, |addr| {
                    let _ = addr_tx.send(addr);
                })
                .await
            })
        };
        let addr = addr_rx.await.expect("the master listens");
        let nodes = spawn_nodes(app, &creds, addr, roles);
        let outcome = master.await.expect("the master's task");
        for node in nodes {
            let _ = node.await;
        }
        outcome
    })
}

/// A counter job far too long to end by itself within a test.
pub fn endless_counter() -> Arc<CounterApp> {
    let config = CounterConfig {
        tasks: 100_000_000,
        task_sleep_us: 200,
        ..CounterConfig::default()
    };
    Arc::new(CounterApp::new(config).unwrap())
}

/// Children of `pid` (Linux /proc).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command name (which is in parentheses): state, ppid, ...
        let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Waits (at most 30 s) until process `pid` has at least `count` children and returns
/// them; fewer fails the test (e.g. a master that did not start its node processes).
pub fn wait_for_children(pid: u32, count: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let children = children_of(pid);
        if children.len() >= count {
            return children;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} has {} of {count} children",
            children.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits (at most 30 s) until process `pid` has a handler for signal number `signal`
/// (Linux /proc: the `SigCgt` mask), e.g. a `harp node` that will take SIGTERM as a
/// request to leave rather than die of it. A process that does not fails the test.
pub fn wait_until_catching(pid: u32, signal: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0);
        if caught & (1 << (signal - 1)) != 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} does not catch signal {signal}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A job's credentials (`harp::JobCredentials::generate(name)`) saved in `dir/creds`, for
/// `--credentials`; the directory's path.
pub fn credentials_in(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join("creds");
    let creds = harp::JobCredentials::generate(name).unwrap();
    creds.save(&path).unwrap();
    path
}

/// Sends process `pid` SIGKILL.
pub fn sigkill(pid: u32) {
    send_signal(pid, "KILL");
}

/// Sends process `pid` the signal `name` (`TERM`, `KILL`, ...).
pub fn send_signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Starts `command` with no stdin, its stdout and stderr piped (for `wait_with_output`),
/// and no backtraces.
#[allow(clippy::zombie_processes)] // the caller waits for it
pub fn spawn_piped(command: &mut Command) -> std::process::Child {
    command
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most 30 s) for `child` to exit; a process that does not fails the test
/// (`what` names it).
pub fn wait_exit(child: &mut std::process::Child, what: &str) -> ExitStatus {
    wait_exit_within(child, what, std::time::Duration::from_secs(30))
}

/// [`wait_exit`] with another limit.
pub fn wait_exit_within(
    child: &mut std::process::Child,
    what: &str,
    limit: std::time::Duration,
) -> ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not exit");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The counter's run arguments for `tasks` tasks on 4 executors per worker, 4 tasks in
/// flight each, 2 ms per task (about 2,000 tasks/s on three nodes here), 2 threads, a 2 s
/// lease, and `extra`.
pub fn busy_counter(tasks: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "run",
        "counter",
        "--tasks",
        tasks,
        "--executors-per-worker",
        "4",
        "--task-sleep-us",
        "2000",
        "--window",
        "4",
        "--threads",
        "2",
        "--lease-timeout-ms",
        "2000",
    ];
    args.extend(extra);
    args
}
