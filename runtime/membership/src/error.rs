//! The shell's error type: every way a membership backend call can fail.
//!
//! One variant per operating condition, so the caller (the master or a node) can say what
//! went wrong in one line and decide whether to retry. Every call of a backend has a deadline
//! and fails with [`MembershipBackendError::DeadlineExceeded`] instead of hanging.

use harp_core::{MembershipError, NodeId};

/// A membership backend call that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipBackendError {
    /// The core view refused the input (duplicate node, job full, unknown node, bad config).
    #[error(transparent)]
    Rejected(#[from] MembershipError),
    /// The etcd endpoint is not of the form `http://HOST:PORT`.
    #[error("invalid etcd endpoint {endpoint:?}: {message}")]
    InvalidEndpoint { endpoint: String, message: String },
    /// The job name cannot be part of an etcd key (empty, or holds `/`).
    #[error("invalid job name {job:?}: must be non-empty and hold no '/'")]
    InvalidJob { job: String },
    /// etcd could not be reached (connection refused, reset, no leader, ...).
    #[error("etcd unavailable at {endpoint}: {message}")]
    EtcdUnavailable { endpoint: String, message: String },
    /// etcd answered, but with an error.
    #[error("etcd {operation} failed: {message}")]
    Etcd {
        operation: &'static str,
        message: String,
    },
    /// A call did not finish within its deadline.
    #[error("{operation} timed out after {deadline_ms} ms")]
    DeadlineExceeded {
        operation: &'static str,
        deadline_ms: u64,
    },
    /// A node tried to register under an id whose key is still held (by a live node, or by a
    /// dead one whose lease has not expired yet).
    #[error("{0} is already registered")]
    AlreadyRegistered(NodeId),
    /// The node's lease is gone: it expired (the node was declared dead, or could not
    /// renew it in time) or the master removed the node. The node must register again.
    #[error("lease of {0} lost: it expired or was revoked")]
    LeaseLost(NodeId),
    /// The node is not registered.
    #[error("{0} is not registered")]
    UnknownNode(NodeId),
    /// The watch stream ended or its history was compacted away: membership changes may
    /// have been missed, so the watcher must not go on as if it saw them all.
    #[error("membership watch lost: {0}")]
    WatchLost(String),
    /// The desired node count under a job's `desired_nodes` key is not a usable count
    /// (not a decimal number, zero, or more than the cap); the value is ignored.
    #[error("invalid desired node count {value:?} under {key}: {reason}")]
    InvalidDesiredNodes {
        key: String,
        /// The value as written (lossily decoded, cut to a readable length).
        value: String,
        reason: String,
    },
    /// The embedded membership service has stopped.
    #[error("membership service stopped")]
    Stopped,
}
