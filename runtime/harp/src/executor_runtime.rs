//! Where a node runs its executors' micro-tasks, and where its own work (flushes) runs.
//!
//! **Node processes** (`harp node`) run their executor loops on a runtime of their own, with
//! as many threads as the node's runtime has (`--threads`). An executor's micro-task
//! computes inside its future, holding a runtime thread for the whole compute. On a shared
//! runtime, a node whose executors are all computing has no thread left for its server
//! actors and links: a shard hand-off, a forwarded request or a reply waits until some
//! micro-task ends. Tokio also places a task woken from a worker thread in that thread's
//! LIFO slot, which other threads cannot steal, so a task woken just before a compute waits
//! for that compute even when other threads are idle. Both showed as 2–14 ms shard-move
//! stalls across processes on a 16-core machine (issue 4). With the executors apart, the
//! node's runtime only runs short message handlers; executors and servers talk through
//! channels, which work across runtimes, and a wake from the executors' runtime reaches the
//! node's runtime through its shared queue, where any idle thread takes it.
//!
//! **Jobs in one process** run on the caller's runtime and keep their executors there by
//! default: harp does not start threads behind an embedding program's back.
//!
//! `HARP_EXECUTOR_THREADS` (read when a job or node starts, inherited by `harp node`
//! children) overrides both: `N` gives the executors a runtime of N threads of their own;
//! `0` keeps them on the node's runtime (the layout before, kept for comparisons).

use crate::error::HarpError;
use std::future::Future;
use tokio::runtime::Handle;

/// The environment variable that chooses where executors run (module doc).
pub const EXECUTOR_THREADS_VAR: &str = "HARP_EXECUTOR_THREADS";

/// The most threads a runtime of a harp process may be given (`--threads`,
/// [`EXECUTOR_THREADS_VAR`]): far above any machine's cores, far below what makes the OS
/// refuse threads.
pub const MAX_RUNTIME_THREADS: usize = 1024;

/// Where executor loops run when `HARP_EXECUTOR_THREADS` does not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// On the node's (the caller's) runtime.
    Shared,
    /// On a runtime of this many threads of their own.
    Own(usize),
}

/// The runtime a node's executor loops are spawned on, and a handle to the node's own.
pub(crate) struct ExecutorRuntime {
    own: Option<tokio::runtime::Runtime>,
    node: Handle,
}

impl ExecutorRuntime {
    /// The layout of a job in one process: the caller's runtime, unless the variable says.
    pub(crate) fn for_job() -> Result<Self, HarpError> {
        Self::start(node_handle()?, from_env(Layout::Shared)?)
    }

    /// The layout of a node process: a runtime of the executors' own with as many threads
    /// as the node's runtime, unless the variable says. A node without a worker
    /// (`hosts_executors` false: `--role server`) never runs an executor and starts no
    /// threads for them.
    pub(crate) fn for_node(hosts_executors: bool) -> Result<Self, HarpError> {
        let node = node_handle()?;
        if !hosts_executors {
            return Self::start(node, Layout::Shared);
        }
        let threads = node.metrics().num_workers();
        Self::start(node, from_env(Layout::Own(threads))?)
    }

    /// Starts `layout` beside the node's runtime `node`.
    fn start(node: Handle, layout: Layout) -> Result<Self, HarpError> {
        let own = match layout {
            Layout::Shared => None,
            Layout::Own(n) => Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(n.max(1))
                    .thread_name("harp-executor")
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        HarpError::InvalidConfig(format!(
                            "cannot start the executors' runtime of {n} threads: {e}"
                        ))
                    })?,
            ),
        };
        Ok(Self { own, node })
    }

    /// Runs an executor loop.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let executors = self.own.as_ref().map_or(&self.node, |own| own.handle());
        crate::spawn::spawn_on(executors, task);
    }

    /// Runs the node's own work (a flush and its report), never on the executors' threads.
    pub(crate) fn spawn_on_node<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        crate::spawn::spawn_on(&self.node, task);
    }
}

/// The runtime the caller runs on (a job or node always starts from async code).
fn node_handle() -> Result<Handle, HarpError> {
    Handle::try_current().map_err(|_| {
        HarpError::InvalidConfig("a harp job or node must start inside a tokio runtime".into())
    })
}

/// The layout `HARP_EXECUTOR_THREADS` asks for, or `default` when it is unset or empty.
fn from_env(default: Layout) -> Result<Layout, HarpError> {
    let value = std::env::var(EXECUTOR_THREADS_VAR).unwrap_or_default();
    parse_layout(&value, default)
}

/// `value` read as `HARP_EXECUTOR_THREADS` (empty: `default`).
fn parse_layout(value: &str, default: Layout) -> Result<Layout, HarpError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(default);
    }
    match value.parse::<usize>() {
        Ok(0) => Ok(Layout::Shared),
        Ok(n) if n <= MAX_RUNTIME_THREADS => Ok(Layout::Own(n)),
        _ => Err(HarpError::InvalidConfig(format!(
            "{EXECUTOR_THREADS_VAR}={value:?}: expected a number of threads up to \
             {MAX_RUNTIME_THREADS} (0: run executors on the node's runtime)"
        ))),
    }
}

impl Drop for ExecutorRuntime {
    /// Stops an own runtime without waiting for its tasks (a node drops it from async code,
    /// where a blocking shutdown is not allowed).
    fn drop(&mut self) {
        if let Some(runtime) = self.own.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests;
