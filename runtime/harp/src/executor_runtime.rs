//! Where a node runs its executors' micro-tasks. By default on the runtime that also runs
//! its actors, servers and links (`--threads`). With `HARP_EXECUTOR_THREADS=N` (an
//! experiment, read when a job or node starts) they run on a runtime of N threads of their
//! own, so an executor's compute cannot hold up a server's shard hand-off or a link's reads
//! behind it on a busy thread (the suspected cause of the 5–14 ms shard-move stalls seen
//! across processes on a 16-core machine; issue 4). Micro-tasks and the node's servers
//! talk through channels, which work across runtimes.

use crate::error::HarpError;
use std::future::Future;

/// The environment variable that gives executors a runtime of their own.
pub const EXECUTOR_THREADS_VAR: &str = "HARP_EXECUTOR_THREADS";

/// The runtime a node's executor loops are spawned on.
pub(crate) struct ExecutorRuntime(Option<tokio::runtime::Runtime>);

impl ExecutorRuntime {
    /// The caller's runtime (the default).
    pub(crate) fn shared() -> Self {
        Self(None)
    }

    /// A runtime of `HARP_EXECUTOR_THREADS` threads, or the caller's when it is unset,
    /// empty or 0; anything else is refused.
    pub(crate) fn from_env() -> Result<Self, HarpError> {
        let value = std::env::var(EXECUTOR_THREADS_VAR).unwrap_or_default();
        match threads(&value)? {
            0 => Ok(Self::shared()),
            n => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .thread_name("harp-executor")
                .enable_all()
                .build()
                .map(|runtime| Self(Some(runtime)))
                .map_err(|e| {
                    HarpError::InvalidConfig(format!(
                        "{EXECUTOR_THREADS_VAR}={n}: cannot start the executors' runtime: {e}"
                    ))
                }),
        }
    }

    /// Runs `task` on this runtime.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.0 {
            Some(runtime) => {
                runtime.spawn(task);
            }
            None => {
                tokio::spawn(task);
            }
        }
    }
}

/// The thread count `value` asks for (empty: 0).
fn threads(value: &str) -> Result<usize, HarpError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(0);
    }
    value.parse().map_err(|_| {
        HarpError::InvalidConfig(format!(
            "{EXECUTOR_THREADS_VAR}={value:?}: expected a number of threads (0: share the node's runtime)"
        ))
    })
}

impl Drop for ExecutorRuntime {
    /// Stops an own runtime without waiting for its tasks (a node drops it from async code,
    /// where a blocking shutdown is not allowed).
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_parse_and_nonsense_is_refused() {
        assert_eq!(threads("").unwrap(), 0);
        assert_eq!(threads(" 4 ").unwrap(), 4);
        assert_eq!(threads("0").unwrap(), 0);
        let refused = threads("many").unwrap_err().to_string();
        assert!(refused.contains("HARP_EXECUTOR_THREADS") && refused.contains("many"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_own_runtime_runs_tasks_on_its_threads_and_drops_inside_async_code() {
        let runtime = ExecutorRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("harp-executor")
                .enable_all()
                .build()
                .unwrap(),
        ));
        let (tx, rx) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let _ = tx.send(std::thread::current().name().map(str::to_string));
        });
        assert_eq!(rx.await.unwrap().as_deref(), Some("harp-executor"));
        drop(runtime);
        let (tx, rx) = tokio::sync::oneshot::channel();
        ExecutorRuntime::shared().spawn(async move {
            let _ = tx.send(std::thread::current().name().map(str::to_string));
        });
        assert_ne!(rx.await.unwrap().as_deref(), Some("harp-executor"));
    }
}
