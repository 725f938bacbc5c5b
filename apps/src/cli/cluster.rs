//! Options every `harp run` app shares: the shape of the in-process cluster and the thread
//! pool that runs it.

use crate::device::{Compute, Device};
use anyhow::{Context, Result};
use clap::Args;
use harp::JobConfig;

/// `--checkpoint-every`, `--checkpoint-keep` and `--stop-wait` say how checkpoints are
/// written: given without `--checkpoint-dir` or `--resume` (where they go), they are refused
/// rather than ignored.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("checkpointing").args(["checkpoint_dir", "resume"]).multiple(true)))]
pub struct ClusterArgs {
    /// Worker actors (each hosts executors).
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Server actors (each hosts parameter shards).
    #[arg(long, default_value_t = 2)]
    pub servers: u32,
    /// Executors per worker (over-partitioning).
    #[arg(long, default_value_t = 1)]
    pub executors_per_worker: u32,
    /// Logical parameter shards per server.
    #[arg(long, default_value_t = 8)]
    pub shards_per_server: u32,
    /// Threads of the runtime (default: the number of CPU cores). A `harp node` process
    /// runs its executors on a second runtime of as many threads (HARP_EXECUTOR_THREADS=N
    /// sets N; 0 keeps them on the first). At most 1024.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=harp::MAX_RUNTIME_THREADS as u64))]
    pub threads: Option<usize>,
    /// Run across processes: this process is the master and starts N-1 `harp node`
    /// processes, each hosting one worker and one server (--workers/--servers are ignored).
    #[arg(long)]
    pub processes: Option<u32>,
    /// Run across processes with N nodes started by hand (`harp node --join`).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Where the master listens for nodes (default 127.0.0.1 on a free port; `HOST:PORT`
    /// or `IP:PORT`).
    #[arg(long, value_parser = super::host_port::host_port)]
    pub listen: Option<std::net::SocketAddr>,
    /// A directory with the job's certificate authority (`ca.pem`, `ca.key`), made there
    /// when it holds neither (give the nodes a copy); default: a fresh one per job, in a
    /// temporary directory removed at the end.
    #[arg(long)]
    pub credentials: Option<std::path::PathBuf>,
    /// Also track membership in etcd (`http://HOST:PORT`): nodes register under
    /// /harp/jobs/JOB/members/ with a lease; the master watches. The master also follows
    /// the job's desired size, /harp/jobs/JOB/desired_nodes (printed at start): a node
    /// count put there grows the job (a master started with --processes starts the nodes)
    /// or lets the most recently joined nodes leave. Needs a build with the `etcd` feature.
    #[arg(long)]
    pub etcd: Option<String>,
    /// A node not heard from for this long is declared dead (100 to 3,600,000).
    #[arg(long, default_value_t = 3_000, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(harp::MIN_LEASE_TIMEOUT_MS..=harp::MAX_LEASE_TIMEOUT_MS))]
    pub lease_timeout_ms: u64,
    /// Write one JSON object per epoch (or per run) to this file.
    #[arg(long)]
    pub metrics_out: Option<std::path::PathBuf>,
    /// Keep SCAR's running checkpoint, saving this fraction r of the parameters every r·C
    /// iterations (in (0, 1]); a failed server is then recovered from it (across processes:
    /// a node with only a server role that dies; with --recover-workers too, any node).
    #[arg(long)]
    pub scar_fraction: Option<f64>,
    /// C: the full-checkpoint period in iterations that sets the budget of the running
    /// checkpoint.
    #[arg(long, default_value_t = 8)]
    pub scar_period: u64,
    /// Which parameters a running-checkpoint round saves.
    #[arg(long, value_enum, default_value_t = ScarSelection::Priority)]
    pub scar_selection: ScarSelection,
    /// Seed of `--scar-selection random`.
    #[arg(long, default_value_t = 1)]
    pub scar_seed: u64,
    /// What an injected loss of parameters restores from the running checkpoint: only the
    /// lost ones (partial) or all of them (full).
    #[arg(long, value_enum, default_value_t = ScarRecovery::Partial)]
    pub scar_recovery: ScarRecovery,
    /// Inject a fault at the end of an iteration (needs --scar-fraction; repeatable):
    /// `lose:FRACTION@ITERATION` (lose that fraction of the parameters and recover them from
    /// the running checkpoint), `reset:FRACTION@ITERATION` (back to initial values),
    /// `perturb:NORM@ITERATION` (a random perturbation of that L2 norm); `:SEED` at the end
    /// picks the draw.
    #[arg(long, value_parser = parse_injection)]
    pub inject: Vec<harp::Injection>,
    /// When the --inject faults strike: before their iteration's running-checkpoint round
    /// (the image is one round old) or after it has saved.
    #[arg(long, value_enum, default_value_t = InjectTiming::BeforeRound)]
    pub inject_timing: InjectTiming,
    /// Write a consistent checkpoint (driver, held micro-tasks, executors, every shard) into
    /// this directory every --checkpoint-every iterations (in one process or across
    /// processes).
    #[arg(long)]
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Iterations between consistent checkpoints (MLR: an epoch; counter: one task per
    /// executor).
    #[arg(long, default_value_t = 1, requires = "checkpointing")]
    pub checkpoint_every: u64,
    /// Complete checkpoints kept in the directory.
    #[arg(long, default_value_t = 3, requires = "checkpointing")]
    pub checkpoint_keep: usize,
    /// With --checkpoint-dir: how long a stopped job (SIGTERM or Ctrl-C on the master) waits
    /// for its micro-tasks in flight to finish, for one last checkpoint to go on from,
    /// before it ends without it (seconds; 0: only if nothing is in flight). Keep it below
    /// your scheduler's grace period.
    #[arg(long, value_name = "SECONDS", default_value_t = harp::STOP_WAIT_DEFAULT.as_secs_f64(), value_parser = stop_wait_seconds, allow_negative_numbers = true, requires = "checkpointing")]
    pub stop_wait: f64,
    /// Survive the death of worker nodes (across processes): each flush is staged on the
    /// servers and committed by the master (one more round trip per flush), so a dead
    /// worker's executors are created again on the live workers and exactly the micro-tasks
    /// whose updates were not committed run again. With --checkpoint-dir, an executor is
    /// made from the state it saved in the newest checkpoint where the app can use it (LDA
    /// keeps its documents' sampling; the others start afresh). A node that also holds a
    /// server needs --scar-fraction too (every node of --processes does).
    #[arg(long)]
    pub recover_workers: bool,
    /// Resume from the newest complete checkpoint in this directory (a damaged one is passed
    /// over for the previous one); the job must have the checkpoint's --executors-per-worker
    /// and --shards-per-server, and may have more or fewer workers, servers or processes.
    /// Checkpoints go on into this directory unless --checkpoint-dir names another.
    #[arg(long)]
    pub resume: Option<std::path::PathBuf>,
}

/// `--stop-wait`: finite seconds, 0 or more, at most a day.
fn stop_wait_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("not a number of seconds: {text:?}"))?;
    if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!(
            "{text} is not a wait from 0 to 86400 seconds (a day)"
        ));
    }
    Ok(seconds)
}

/// `--inject-timing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InjectTiming {
    BeforeRound,
    AfterRound,
}

/// `--scar-recovery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScarRecovery {
    Partial,
    Full,
}

/// Parses `--inject KIND:VALUE@ITERATION[:SEED]`.
pub fn parse_injection(spec: &str) -> Result<harp::Injection, String> {
    let usage = || {
        format!("--inject {spec:?}: expected lose:FRACTION@ITERATION, reset:FRACTION@ITERATION or perturb:NORM@ITERATION, optionally followed by :SEED")
    };
    let (kind, rest) = spec.split_once(':').ok_or_else(usage)?;
    let (value, rest) = rest.split_once('@').ok_or_else(usage)?;
    let (iteration, seed) = match rest.split_once(':') {
        Some((iteration, seed)) => (iteration, seed.parse::<u64>().map_err(|_| usage())?),
        None => (rest, 1),
    };
    let value: f64 = value.parse().map_err(|_| usage())?;
    let at_iteration: u64 = iteration.parse().map_err(|_| usage())?;
    let fault = match kind {
        "lose" => harp::Fault::Lose {
            fraction: value,
            seed,
        },
        "reset" => harp::Fault::ResetToInitial {
            fraction: value,
            seed,
        },
        "perturb" => harp::Fault::Perturb { norm: value, seed },
        _ => return Err(usage()),
    };
    fault.validate().map_err(|e| e.to_string())?;
    Ok(harp::Injection {
        at_iteration,
        fault,
        timing: harp::FaultTiming::BeforeRound,
    })
}

/// `--scar-selection`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScarSelection {
    /// The parameters that moved farthest from their saved values (SCAR's priority).
    Priority,
    /// The next parameters in key order, cyclically.
    RoundRobin,
    /// Parameters drawn uniformly at random.
    Random,
    /// Every parameter, every round.
    Full,
}

impl ClusterArgs {
    pub fn job_config(&self, collect_params: bool) -> JobConfig {
        JobConfig {
            workers: self.workers,
            servers: self.servers,
            executors_per_worker: self.executors_per_worker,
            shards_per_server: self.shards_per_server,
            collect_params,
            scar: self.scar_options(),
        }
    }

    /// SCAR's running checkpoint as the command line asks for it (`--scar-fraction`).
    pub fn scar_options(&self) -> Option<harp::ScarOptions> {
        let fraction = self.scar_fraction?;
        // (--inject without --scar-fraction is refused by validate_scar.)
        let selection = match self.scar_selection {
            ScarSelection::Priority => harp::Selection::Priority,
            ScarSelection::RoundRobin => harp::Selection::RoundRobin,
            ScarSelection::Random => harp::Selection::Random {
                seed: self.scar_seed,
            },
            ScarSelection::Full => harp::Selection::Full,
        };
        Some(harp::ScarOptions {
            period: self.scar_period,
            fraction,
            selection,
            recovery: match self.scar_recovery {
                ScarRecovery::Partial => harp::Recovery::Partial,
                ScarRecovery::Full => harp::Recovery::Full,
            },
            inject: self
                .inject
                .iter()
                .map(|injection| harp::Injection {
                    timing: match self.inject_timing {
                        InjectTiming::BeforeRound => harp::FaultTiming::BeforeRound,
                        InjectTiming::AfterRound => harp::FaultTiming::AfterRound,
                    },
                    ..injection.clone()
                })
                .collect(),
        })
    }

    /// Consistent checkpoints as the command line asks for them (`None`: neither
    /// --checkpoint-dir nor --resume). A resumed job writes into its resume directory by
    /// default.
    pub fn consistent_options(&self) -> Option<harp::ConsistentOptions> {
        if self.checkpoint_dir.is_none() && self.resume.is_none() {
            return None;
        }
        Some(harp::ConsistentOptions {
            checkpoint_dir: self.checkpoint_dir.clone().or_else(|| self.resume.clone()),
            every: self.checkpoint_every,
            keep: self.checkpoint_keep,
            resume_from: self.resume.clone(),
            stop_wait: std::time::Duration::from_secs_f64(self.stop_wait),
        })
    }

    /// Refuses `--inject` without `--scar-fraction` (faults are injected through the
    /// running checkpoint).
    pub fn validate_scar(&self) -> Result<()> {
        if !self.inject.is_empty() && self.scar_fraction.is_none() {
            anyhow::bail!("--inject needs --scar-fraction (faults are recovered from SCAR's running checkpoint)");
        }
        Ok(())
    }

    /// The device this process's executors compute on. In one process, `device` itself.
    /// Across processes the master runs no executor and the nodes open their own: with
    /// `--processes` (nodes on this host) `device` is opened once and let go, so a missing
    /// GPU is said before any node starts; with `--nodes` (nodes on hosts that may have a
    /// GPU this one lacks) the master opens nothing.
    pub fn master_compute(&self, device: Device) -> Result<Compute> {
        let open = || device.open().map_err(|e| anyhow::anyhow!("{e}"));
        if self.nodes.is_some() {
            Ok(Compute::Cpu)
        } else if self.processes.is_some() {
            // Opened to check it, and let go at once (the nodes open their own).
            let _checked = open()?;
            Ok(Compute::Cpu)
        } else {
            open()
        }
    }

    /// Refuses `--recover-workers` where it cannot help: in one process (workers cannot die
    /// apart from the master there) and with `--processes` but no `--scar-fraction` (each
    /// of those nodes holds a server too, whose loss would still end the job).
    pub fn validate_worker_recovery(&self) -> Result<()> {
        if !self.recover_workers {
            return Ok(());
        }
        if self.processes.is_none() && self.nodes.is_none() {
            anyhow::bail!("--recover-workers recovers worker node processes: it needs --processes or --nodes (in one process, workers cannot die apart from the master)");
        }
        if self.processes.is_some() && self.scar_fraction.is_none() {
            anyhow::bail!("--recover-workers with --processes: every node there holds a server too, and recovering its shards needs --scar-fraction (or start worker-only nodes with --nodes and harp node --role worker)");
        }
        Ok(())
    }

    /// A multi-threaded tokio runtime with `--threads` threads.
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        let threads = self
            .threads
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
            .max(1);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .context("cannot start the runtime's threads")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cluster: ClusterArgs,
    }

    fn worker_recovery(args: &[&str]) -> Result<()> {
        let args = ["harp"].iter().chain(args);
        Cli::try_parse_from(args)
            .unwrap()
            .cluster
            .validate_worker_recovery()
    }

    #[test]
    fn recover_workers_is_refused_where_it_cannot_help() {
        let err = worker_recovery(&["--recover-workers"]).unwrap_err();
        assert!(err.to_string().contains("--processes or --nodes"), "{err}");
        let err = worker_recovery(&["--recover-workers", "--processes", "3"]).unwrap_err();
        assert!(err.to_string().contains("--scar-fraction"), "{err}");
        worker_recovery(&["--recover-workers", "--nodes", "4"]).unwrap();
        worker_recovery(&[
            "--recover-workers",
            "--processes",
            "3",
            "--scar-fraction",
            "1",
        ])
        .unwrap();
        worker_recovery(&[]).unwrap();
    }
}
