//! The runtime's error type: one variant per operating condition a user can meet.

use harp_core::{CoreError, ExecutorId, ServerId, ShardId, TableId, TaskId, WorkerId};

/// Errors an app may return from its `Driver` and `Executor` code. Anything that implements
/// `std::error::Error` converts into it with `?`.
pub type AppError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl From<harp_checkpoint::CheckpointError> for HarpError {
    fn from(e: harp_checkpoint::CheckpointError) -> Self {
        HarpError::Checkpoint(Box::new(e))
    }
}

/// Errors of the harp runtime.
#[derive(Debug, thiserror::Error)]
pub enum HarpError {
    #[error("invalid job configuration: {0}")]
    InvalidConfig(String),
    /// A scale command arrived while another scale event ran (one runs at a time).
    #[error("another scale event is already running; wait for it to finish")]
    ScaleBusy,
    /// A scale command arrived while the shard map was not settled: a failed server's
    /// shards were being re-created, or a hand-off a failure cut short awaits the failed
    /// server's recovery. Says which.
    #[error("a scale event waits for a server recovery: {0}; try again once it is over")]
    RecoveryPending(String),
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error("table '{table}' holds {expected} rows, not {requested}")]
    TableKindMismatch {
        table: String,
        expected: &'static str,
        requested: &'static str,
    },
    #[error("table '{table}': a row has width {expected}, got {found} values")]
    WidthMismatch {
        table: String,
        expected: usize,
        found: usize,
    },
    #[error(
        "table '{table}': {rows} rows but {values} values (not a multiple of the width {width})"
    )]
    BatchShapeMismatch {
        table: String,
        rows: usize,
        values: usize,
        width: usize,
    },
    #[error("non-finite value in an update to table '{table}' row {row}")]
    NonFiniteUpdate { table: String, row: u64 },
    #[error("dispatch to unknown {0} (the job has {1} executors)")]
    UnknownExecutor(ExecutorId, u32),
    #[error("{0} is unreachable")]
    ServerUnreachable(ServerId),
    #[error("{0} is unreachable")]
    WorkerUnreachable(WorkerId),
    #[error("{server} did not answer a {request} within {after_ms} ms")]
    RequestTimedOut {
        server: ServerId,
        request: &'static str,
        after_ms: u64,
    },
    /// A shard's rows left its old owner for a new one that never confirmed it holds them
    /// (it died, or the link to it did). The old owner forwards the shard's traffic there
    /// until the master re-creates the shard from SCAR's running checkpoint, on the new
    /// owner's failure.
    #[error("the rows of {shard} left for {to}, which did not confirm it holds them ({detail})")]
    ShardInTransit {
        shard: ShardId,
        to: ServerId,
        detail: String,
    },
    #[error("the master is unreachable")]
    MasterUnreachable,
    #[error("{task} on {executor} failed: {source}")]
    TaskFailed {
        task: TaskId,
        executor: ExecutorId,
        source: AppError,
    },
    #[error("creating {executor} failed: {source}")]
    ExecutorCreation {
        executor: ExecutorId,
        source: AppError,
    },
    #[error("the driver failed: {0}")]
    DriverFailed(AppError),
    #[error("actor failed to start: {0}")]
    ActorSpawn(String),
    #[error("{0}")]
    Remote(String),
    /// A move of a scale event was cut short because a node it involved failed and was
    /// recovered (the message says which and where the item is now). Nothing was lost that
    /// the recovery does not report; the event may be tried again.
    #[error("{0}")]
    MoveInterrupted(String),
    /// A server failed and the job could not recover from it.
    #[error("{server} failed and the job cannot recover from it: {reason}")]
    Unrecoverable { server: ServerId, reason: String },
    #[error("node {node} died ({detail})")]
    NodeDied { node: u32, detail: String },
    /// Node `node` lost its link to node `peer`'s server while `peer` still renewed its
    /// lease with the master: the network between the two is cut (a partition between
    /// nodes that both reach the master) or the peer is stuck. Nothing the master can
    /// recover from: the server lives and owns its shards.
    #[error(
        "node {node} lost node {peer}'s server ({detail}), but node {peer} still renews its \
         lease with the master: the link between the two nodes broke (a network partition \
         between them, or a stuck node) and the job cannot go on without it"
    )]
    PeerLost {
        node: u32,
        peer: u32,
        detail: String,
    },
    /// Node `node`'s requests to its own server went unanswered while the node still renewed
    /// its lease: no link broke, the server is stuck (say, holding the requests of a shard
    /// it handed off whose new owner never confirmed the rows, in a job that keeps no
    /// running checkpoint to re-create it from). Nothing the master can recover from.
    #[error(
        "node {node}'s own server stopped answering it ({detail}) while node {node} still \
         renews its lease with the master: the server is stuck, and the job cannot go on \
         without it"
    )]
    OwnServerStuck { node: u32, detail: String },
    /// A node process its launcher started for the job exited, not cleanly, before the job
    /// started ([`NodeFailure::Exited`](crate::NodeFailure::Exited) while the master still
    /// waited for its nodes): the job cannot have all its nodes, so it does not start.
    #[error("node process {launch_id} exited before the job started ({how}); the job cannot start without it")]
    NodeExitedBeforeStart { launch_id: u64, how: String },
    /// The job was stopped from outside before it finished ([`JobControl::stop`], e.g. `harp
    /// run` got SIGTERM or SIGINT): nothing failed.
    ///
    /// [`JobControl::stop`]: crate::JobControl::stop
    #[error("the job was stopped ({reason}) {}", stopped_when(*started, *tasks_completed))]
    Stopped {
        reason: String,
        /// Whether the driver had started (a job across processes may be stopped while it
        /// still waits for its nodes).
        started: bool,
        tasks_completed: u64,
        /// What the job's consistent checkpoints did, the stop's last one included (`None`
        /// for a job that wrote none, and on a node, which hears of the stop from its
        /// master).
        checkpoints: Option<Box<crate::ConsistentReport>>,
    },
    /// Checkpoint storage refused or failed (missing or unwritable directory, another
    /// app's or job's checkpoints, nothing complete to resume from, ...).
    #[error(transparent)]
    Checkpoint(Box<harp_checkpoint::CheckpointError>),
    /// A checkpoint cannot be resumed by this job: `what` says what differs.
    #[error("cannot resume from checkpoint {seq} in {}: {what}", .dir.display())]
    ResumeMismatch {
        dir: std::path::PathBuf,
        seq: u64,
        what: String,
    },
    #[error(transparent)]
    Net(#[from] harp_net::NetError),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// When a job was stopped, in words.
fn stopped_when(started: bool, tasks_completed: u64) -> String {
    match started {
        true => format!("after {tasks_completed} completed micro-tasks"),
        false => "before it started".into(),
    }
}

impl HarpError {
    /// The server this error says was lost: unreachable, or silent past a request's
    /// deadline, directly or as the reason a micro-task failed. A node that fails with such
    /// an error tells the master which server (`Message::Failed`), so that the death of the
    /// server's node, if that is the cause, is what the job reports or recovers from.
    pub fn unreachable_server(&self) -> Option<ServerId> {
        match self {
            HarpError::ServerUnreachable(server) | HarpError::RequestTimedOut { server, .. } => {
                Some(*server)
            }
            HarpError::TaskFailed { source, .. } => source
                .downcast_ref::<HarpError>()
                .and_then(HarpError::unreachable_server),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_core::{ExecutorId, TaskId};

    #[test]
    fn a_lost_server_is_named_directly_or_through_a_failed_task() {
        let lost = HarpError::ServerUnreachable(ServerId(2));
        assert_eq!(lost.unreachable_server(), Some(ServerId(2)));
        let silent = HarpError::RequestTimedOut {
            server: ServerId(1),
            request: "read",
            after_ms: 5000,
        };
        assert_eq!(silent.unreachable_server(), Some(ServerId(1)));
        let task = |source: AppError| HarpError::TaskFailed {
            task: TaskId(7),
            executor: ExecutorId(3),
            source,
        };
        assert_eq!(
            task(Box::new(HarpError::ServerUnreachable(ServerId(4)))).unreachable_server(),
            Some(ServerId(4))
        );
        // Any other failure, of the runtime or of the app, names no server.
        assert_eq!(task("the app gave up".into()).unreachable_server(), None);
        assert_eq!(HarpError::MasterUnreachable.unreachable_server(), None);
    }
}
