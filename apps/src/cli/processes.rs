//! Jobs across processes from the command line: the master side of `--processes N` (which
//! starts its own `harp node` children) and `--listen/--nodes` (which waits for nodes started
//! by hand), and the `harp node` side.

use super::ClusterArgs;
use anyhow::{anyhow, bail, Context, Result};
use harp::{App, ClusterOptions, JobConfig, JobCredentials, JobOutcome};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `app` in process, or across processes when `--processes` or `--nodes` is given.
pub fn execute<A: App>(
    app: Arc<A>,
    cluster: &ClusterArgs,
    collect_params: bool,
) -> Result<JobOutcome<A>> {
    let runtime = cluster.runtime()?;
    let Some(nodes) = cluster.node_count()? else {
        let job: JobConfig = cluster.job_config(collect_params);
        return Ok(runtime.block_on(harp::run_job(app, &job))?);
    };
    let (creds, creds_dir, own_dir) = match &cluster.credentials {
        Some(dir) => (JobCredentials::load(dir)?, dir.clone(), false),
        None => {
            let dir = unique_temp_dir()?;
            let creds = JobCredentials::generate(app.name())?;
            creds.save(&dir)?;
            (creds, dir, true)
        }
    };
    let listen = cluster
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let options = ClusterOptions {
        nodes,
        listen,
        executors_per_worker: cluster.executors_per_worker,
        shards_per_server: cluster.shards_per_server,
        collect_params,
        lease_timeout_ms: cluster.lease_timeout_ms,
        ..ClusterOptions::default()
    };
    let spawn_children = cluster.processes.is_some();
    let mut children: Vec<Child> = Vec::new();
    let mut spawn_error = None;
    let result = runtime.block_on(harp::run_job_across(app, &creds, &options, |addr| {
        if spawn_children {
            for _ in 0..nodes {
                match spawn_node(addr, &creds_dir) {
                    Ok(child) => children.push(child),
                    Err(e) => {
                        spawn_error.get_or_insert(e);
                    }
                }
            }
        } else {
            eprintln!(
                "master listening on {addr}; start {nodes} nodes with: harp node --join {addr} --credentials {} -- <the same run arguments>",
                creds_dir.display()
            );
        }
    }));
    reap(children);
    if own_dir {
        let _ = std::fs::remove_dir_all(&creds_dir);
    }
    if let Some(e) = spawn_error {
        return Err(e);
    }
    Ok(result?)
}

/// Starts `harp node` for this command line, joining the master at `addr`.
fn spawn_node(addr: SocketAddr, creds_dir: &Path) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the harp executable to start nodes")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    Command::new(exe)
        .arg("node")
        .arg("--join")
        .arg(addr.to_string())
        .arg("--credentials")
        .arg(creds_dir)
        .arg("--")
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start a node process")
}

/// Waits a little for the nodes to exit after the job, then stops the stragglers.
fn reap(mut children: Vec<Child>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    for child in &mut children {
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn unique_temp_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("harp-job-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// `harp node`: joins the master at `join` and runs `app` there until the job ends.
pub fn run_node<A: App>(
    app: Arc<A>,
    join: SocketAddr,
    credentials: &Path,
    bind: IpAddr,
    cluster: &ClusterArgs,
) -> Result<()> {
    let creds = JobCredentials::load(credentials).map_err(|e| anyhow!("{e}"))?;
    let runtime = cluster.runtime()?;
    runtime
        .block_on(harp::run_node(app, &creds, join, bind))
        .map_err(|e| anyhow!("node: {e}"))
}

impl ClusterArgs {
    /// Node processes the job runs on, if it runs across processes.
    pub fn node_count(&self) -> Result<Option<u32>> {
        match (self.processes, self.nodes) {
            (Some(_), Some(_)) => bail!("give either --processes or --nodes, not both"),
            (Some(p), None) if p < 2 => {
                bail!("--processes counts the master too: it needs at least 2")
            }
            (Some(p), None) => Ok(Some(p - 1)),
            (None, Some(0)) => bail!("--nodes must be at least 1"),
            (None, n) => Ok(n),
        }
    }
}
