//! Options every `harp run` app shares: the shape of the in-process cluster and the thread
//! pool that runs it.

use anyhow::{Context, Result};
use clap::Args;
use harp::JobConfig;

#[derive(Args, Debug, Clone)]
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
    /// Threads of the runtime (default: the number of CPU cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write one JSON object per epoch (or per run) to this file.
    #[arg(long)]
    pub metrics_out: Option<std::path::PathBuf>,
}

impl ClusterArgs {
    pub fn job_config(&self, collect_params: bool) -> JobConfig {
        JobConfig {
            workers: self.workers,
            servers: self.servers,
            executors_per_worker: self.executors_per_worker,
            shards_per_server: self.shards_per_server,
            collect_params,
        }
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
