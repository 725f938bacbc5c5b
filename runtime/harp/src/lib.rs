//! harp: an elastic runtime for distributed ML training.
//!
//! harp implements the Litz programming model: an app's [`Driver`] dispatches short
//! micro-tasks to many [`Executor`]s; executors read and update a sharded parameter server
//! through a [`ParamClient`]; versions decide when a cached parameter may be reused; updates
//! are aggregated on each node before they are sent. See `docs/ARCHITECTURE.md` for the map.
//!
//! ```text
//! App ─ tables, create_driver, create_executor
//!  ├─ Driver (master): dispatch_initial_tasks, handle_task_completion → ctx.dispatch(e, args)
//!  └─ Executor (workers): run_task(args, ps) → ps.get_many / ps.update_many
//! ```
//!
//! [`run_job`] runs an app on an in-process cluster (ractor actors: one master, N workers,
//! M servers); [`run_job_controlled`] does the same and takes scale commands from a
//! [`JobControl`] while it runs. Across processes, [`run_job_across`] (and its
//! `_controlled`, `_watched` and `_consistent` variants) runs the master and [`run_node`]
//! each node process, over QUIC.

pub mod app;
pub mod consistent;
pub mod control;
pub mod error;
mod executor_runtime;
pub mod job;
mod master;
mod node;
pub mod param_client;
pub mod remote;
mod resume;
pub mod scar;
mod server;
mod spawn;
pub mod table;
#[cfg(test)]
mod test_support;
mod worker;

pub use app::{App, Completion, Driver, DriverContext, Executor, JobInfo, Payload};
pub use consistent::{
    resumable, CheckpointOutcome, CheckpointRecord, ConsistentOptions, ConsistentReport,
    ResumeRecord, STOP_WAIT_DEFAULT,
};
pub use control::{job_control, ControlInbox, JobControl, JobEvent, ScaleEvent};
pub use error::{AppError, HarpError};
pub use executor_runtime::{EXECUTOR_THREADS_VAR, MAX_RUNTIME_THREADS};
/// The splitmix64 finalizer, for apps that derive seeds and hashes the way the runtime does.
pub use harp_core::key_hash::mix64;
pub use harp_core::scar::{Norm, Selection};
pub use harp_core::{shard_of, NodeRoles, ServerId, ShardId, WorkerId};
pub use harp_core::{ExecutorId, ParamKey, RowData, SspSchedule, TableId, TaskId, Version};
pub use harp_kernels::optim::{AdaGrad, Adam};
pub use harp_net::JobCredentials;
pub use job::{
    run_job, run_job_consistent, run_job_consistent_controlled, run_job_controlled, JobConfig,
    JobOutcome, JobStats, ParamDump,
};
pub use master::{MoveRecord, ScaleReport};
pub use node::NodeStats;
pub use param_client::{ParamClient, Row};
pub use remote::{
    check_bind_reaches, default_bind, dialable, run_job_across, run_job_across_consistent,
    run_job_across_controlled, run_job_across_watched, run_node, run_node_leaving, run_node_with,
    send_scale_command, ClusterOptions, NodeFailure, NodeLauncher, ScaleError,
    MAX_LEASE_TIMEOUT_MS, MIN_LEASE_TIMEOUT_MS, NODES_STARTED_MAX, NODE_LAUNCH_ID_VAR,
};
pub use scar::{
    CheckpointStats, Fault, FaultTiming, Injection, InjectionReport, LostValues, Recovery,
    ScarOptions, ServerRecovery, WorkerRecovery,
};
pub use server::ServerStats;
pub use table::{Element, Init, Table, TableSet, TableSpec, UpdateRule};
