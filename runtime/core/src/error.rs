//! The core's error type: every way an input to a core state machine can be invalid.

use crate::ids::{ExecutorId, ServerId, ShardId, WorkerId};
use crate::rows::RowKind;

/// An input the core refused. The state it was given to is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("row kind mismatch: expected {expected:?} of width {expected_width}, got {found:?} of width {found_width}")]
    RowMismatch {
        expected: RowKind,
        expected_width: usize,
        found: RowKind,
        found_width: usize,
    },
    #[error("unknown executor {0}")]
    UnknownExecutor(ExecutorId),
    #[error("unknown shard {0}")]
    UnknownShard(ShardId),
    #[error("no workers to place executors on")]
    NoWorkers,
    #[error("no servers to place shards on")]
    NoServers,
    #[error("worker {0} is not in the placement")]
    UnknownWorker(WorkerId),
    #[error("server {0} is not in the placement")]
    UnknownServer(ServerId),
    #[error("flush {0} is not in flight")]
    UnknownFlush(u64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
