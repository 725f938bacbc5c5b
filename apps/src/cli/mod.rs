//! The `harp` command line: argument parsing and the `run` subcommands.

mod checkpoints;
mod cluster;
mod host_port;
mod output;
mod plot;
mod processes;
mod run_cnn;
mod run_counter;
mod run_lda;
mod run_mf;
mod run_mlr;
mod scar_report;
mod signals;
mod traffic_report;

use crate::metrics;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::sync::Arc;

pub use cluster::ClusterArgs;
pub use plot::PlotCliArgs;
pub use run_cnn::CnnCliArgs;
pub use run_counter::CounterCliArgs;
pub use run_lda::LdaCliArgs;
pub use run_mf::MfCliArgs;
pub use run_mlr::MlrCliArgs;
pub use signals::stopped_by;

/// Writes `line` and its newline to stderr in one write. A `harp node` process started by
/// `harp run --processes` shares its master's stderr, and `eprintln!` may write a line in
/// pieces that another process's line then splits.
pub fn eprint_line(line: &str) {
    use std::io::Write;
    let whole = format!("{line}\n");
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}

/// Sends the runtime's log to stderr, filtered by `HARP_LOG` (a `tracing` filter; default
/// `warn`), coloured only when stderr is a terminal. For the `harp` command and the
/// benchmarks that run jobs in their own process.
pub fn init_logging() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HARP_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// harp: an elastic runtime for distributed ML training.
#[derive(Parser, Debug)]
#[command(name = "harp", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the `run` arguments does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run an app: in process, or across processes with --processes / --nodes. SIGTERM or
    /// Ctrl-C stops the job cleanly (its nodes too) and exits with 128 + the signal; a
    /// second one ends it at once.
    Run {
        #[command(subcommand)]
        app: RunApp,
    },
    /// Join a job across processes as a node (a worker, a server, or both). SIGTERM or
    /// Ctrl-C makes it leave gracefully (its load moves to the other nodes; it exits 0).
    Node {
        /// The master's address (`HOST:PORT` or `IP:PORT`).
        #[arg(long, value_parser = host_port::host_port)]
        join: std::net::SocketAddr,
        /// The job's credentials directory (`ca.pem`, `ca.key`).
        #[arg(long)]
        credentials: std::path::PathBuf,
        /// The address this node listens on for the other nodes. Default: every interface
        /// (`0.0.0.0`, or `::` for an IPv6 master); the others then reach it at the address
        /// it joined the master from, or, for a node on the master's host that joined over
        /// loopback, at the master's address. A loopback address keeps it to this host.
        #[arg(long)]
        bind: Option<std::net::IpAddr>,
        /// What this node offers: executors (`worker`), parameter shards (`server`) or both.
        #[arg(long, value_enum, default_value_t = NodeRole::Both)]
        role: NodeRole,
        /// The job's `run` arguments, after `--` (e.g. `-- run counter --tasks 100000`).
        #[arg(last = true, required = true)]
        job: Vec<String>,
    },
    /// Grow or shrink a running job across processes: `--remove NODE` moves the node's
    /// executors and shards to the others, then the node exits; `--add N` has the master
    /// start N more node processes (masters started with `--processes`), which get load as
    /// they join; with neither, lists the job's nodes.
    Scale {
        /// The master's address (printed by `harp run` when it starts; `HOST:PORT` or
        /// `IP:PORT`).
        #[arg(long, value_parser = host_port::host_port)]
        job: std::net::SocketAddr,
        /// The job's credentials directory (`ca.pem`, `ca.key`).
        #[arg(long)]
        credentials: std::path::PathBuf,
        /// Start this many more node processes.
        #[arg(long, default_value_t = 0)]
        add: u32,
        /// Let this node leave (repeatable); node ids are in the master's log.
        #[arg(long)]
        remove: Vec<u32>,
    },
    /// Draw metrics files (`harp run APP --metrics-out FILE`) as an SVG convergence plot:
    /// a panel per metric, a line per run, and each scale event, fault and recovery the
    /// runs recorded as a vertical line.
    Plot(PlotCliArgs),
}

/// `harp node --role`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeRole {
    Worker,
    Server,
    Both,
}

impl From<NodeRole> for harp::NodeRoles {
    fn from(role: NodeRole) -> Self {
        match role {
            NodeRole::Worker => harp::NodeRoles::WORKER,
            NodeRole::Server => harp::NodeRoles::SERVER,
            NodeRole::Both => harp::NodeRoles::BOTH,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum RunApp {
    /// Multinomial logistic regression (softmax) by minibatch SGD under SSP.
    Mlr(MlrCliArgs),
    /// Exact-accounting app: every parameter must equal its expected sum at the end.
    Counter(CounterCliArgs),
    /// Matrix factorization of a ratings file by alternating least squares.
    Mf(MfCliArgs),
    /// Topic modelling of a bag-of-words corpus by collapsed Gibbs sampling (LDA).
    Lda(LdaCliArgs),
    /// A convolutional network on 28x28 digit images (IDX), trained with Adam on the servers.
    Cnn(CnnCliArgs),
}

/// Runs `app` as the command line asks: with consistent checkpoints (`--checkpoint-dir`,
/// `--resume`; their report is returned) or without, in one process or across processes.
/// `output` hears each of the job's events as it happens and is finished (bar cleared,
/// metrics-file errors reported) when the job ends, whether or not it succeeded.
fn execute_app<A: harp::App>(
    app: Arc<A>,
    cluster: &ClusterArgs,
    collect_params: bool,
    output: &Arc<output::RunOutput>,
) -> Result<(harp::JobOutcome<A>, Option<harp::ConsistentReport>)> {
    let consistent = cluster.consistent_options();
    let told = output.clone();
    let on_event = move |e: &harp::JobEvent| told.job_event(e);
    let result = processes::execute(app, cluster, collect_params, on_event, consistent.as_ref());
    // A stopped job sums up what its checkpoints did (the stop's last one too) before its
    // error.
    if let Some(harp::HarpError::Stopped {
        checkpoints: Some(report),
        ..
    }) = result.as_ref().err().and_then(|e| e.downcast_ref())
    {
        checkpoints::report(report);
    }
    let finished = output.finish();
    let outcome = result?;
    finished?;
    Ok(outcome)
}

/// The reports every app prints and writes at its end: SCAR's checkpoint rounds, a warning
/// for each `--inject` fault that never struck (the job ended before its iteration), and
/// the sum of the consistent checkpoints (each fault, recovery and checkpoint was printed and
/// recorded as it happened).
fn report_end(
    stats: &harp::JobStats,
    injected: &[harp::Injection],
    checkpoints: Option<&harp::ConsistentReport>,
    metrics: Option<&metrics::MetricsWriter>,
    counters: traffic_report::CountersRecord,
) -> Result<()> {
    traffic_report::report(stats, metrics, counters)?;
    scar_report::report(stats, metrics)?;
    for line in scar_report::never_struck(injected, &stats.injections) {
        eprintln!("{line}");
    }
    if let Some(checkpoints) = checkpoints {
        checkpoints::report(checkpoints);
    }
    Ok(())
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            app: RunApp::Mlr(args),
        } => run_mlr::run(args),
        Command::Run {
            app: RunApp::Counter(args),
        } => run_counter::run(args),
        Command::Run {
            app: RunApp::Mf(args),
        } => run_mf::run(args),
        Command::Run {
            app: RunApp::Lda(args),
        } => run_lda::run(args),
        Command::Run {
            app: RunApp::Cnn(args),
        } => run_cnn::run(args),
        Command::Node {
            join,
            credentials,
            bind,
            role,
            job,
        } => {
            let job = Cli::try_parse_from(std::iter::once("harp".to_string()).chain(job))?;
            let node = |cluster: &ClusterArgs| processes::NodeTarget {
                join,
                credentials: credentials.clone(),
                bind: bind.unwrap_or_else(|| harp::default_bind(join)),
                roles: role.into(),
                cluster: cluster.clone(),
            };
            match job.command {
                Command::Run {
                    app: RunApp::Mlr(args),
                } => node(&args.cluster).run(|| run_mlr::build_app(&args, true)),
                Command::Run {
                    app: RunApp::Counter(args),
                } => node(&args.cluster).run(|| run_counter::build_app(&args)),
                Command::Run {
                    app: RunApp::Mf(args),
                } => node(&args.cluster).run(|| run_mf::build_app(&args)),
                Command::Run {
                    app: RunApp::Lda(args),
                } => node(&args.cluster).run(|| run_lda::build_app(&args)),
                Command::Run {
                    app: RunApp::Cnn(args),
                } => node(&args.cluster).run(|| run_cnn::build_app(&args)),
                Command::Node { .. } | Command::Scale { .. } | Command::Plot(_) => {
                    anyhow::bail!("a node's job must be a `run` command")
                }
            }
        }
        Command::Plot(args) => plot::run(args),
        Command::Scale {
            job,
            credentials,
            add,
            remove,
        } => {
            // With neither --add nor --remove the master lists the job's nodes.
            processes::scale(job, &credentials, add, remove)
        }
    }
}
