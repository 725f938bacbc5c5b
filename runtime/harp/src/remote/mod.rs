//! Jobs across processes: the master in one process, each node (a worker, a server or both)
//! in its own `harp node` process, talking over QUIC links (harp-net) in harp-wire frames.
//!
//! The master and worker actors are the same as in process; proxies (`proxies`) stand for
//! the actors of other processes, so the protocol logic does not know where a peer lives.
//! Each link's answers resolve the requests that wait for them (`pending`).
//!
//! Start-up: a node dials the master and says `Hello` (job identity and protocol version are
//! checked); the master answers `Welcome` with the node's id, and once every expected node
//! joined sends each one its `Assign`ment (worker, executors, server, shards) and the
//! `Placement` (which server holds which shard, and where it listens). Nodes dial the nodes
//! whose servers they need, create their executors, and report `Ready`; then the driver
//! starts. Until then a stop, or a node process that its launcher reports exited
//! (`NodeFailure::Exited`), ends the start at once and the nodes that joined hear why. A node's lease is renewed by heartbeats; a node that stops renewing, or whose
//! connection breaks, is dead (`failures`): a server-only node of a job with SCAR's
//! running checkpoint is recovered from it (its shards re-created on the live servers); a
//! worker node of a job that recovers workers is recovered too (its executors created again
//! on the live workers, the micro-tasks whose flushes the master had not committed run
//! again: flushes are staged on the servers and committed by the master,
//! `FlushStaged`/`CommitFlush`/`DropStaged`/`CreateExecutor`); any other death ends the
//! job with an error naming the node and what it held.
//!
//! SCAR's checkpoint rounds and fault injection reach the servers of node processes through
//! the master's link to each node (`CheckpointDistances`/`Distances`,
//! `CheckpointSave`/`Saved`, `ResetRows`/`ResetDone`, `Dump`/`DumpRows`; the re-created
//! shards of a failed server as `TakeOverShard`/`TookOver`).
//!
//! Consistent checkpoints ([`run_job_across_consistent`]) are captured by the master as in
//! one process: each worker node sends its executors' saved states and keeps running them
//! (`SaveExecutor`/`ExecutorSaved`; a large state is parked on the node and the master
//! fetches it, `state_transfer`), and the rows come from every server node (`Dump`, in
//! parts: `row_parts`).
//! At the job's end the master sums every live node's counters into `JobStats`
//! (`StatsQuery`/`Stats`: `job_counters`).
//! A resumed job assigns its workers no executors; the master puts the checkpoint's rows
//! into the servers (`ResetRows`) and has each worker adopt its executors from their saved
//! states (`AdoptExecutor`; a large state the master parks, and the node fetches it from
//! the master's endpoint) before the driver starts.
//!
//! While the job runs (`roster`): a node may join (it gets an empty assignment, the other
//! nodes learn its server from a new `Placement`, and a re-balancing gives it load); a node
//! may leave (`Leaving`, or `harp scale --remove`: its load moves away, every other node
//! answers `DrainServer` once nothing it sent there is unanswered and, with worker
//! recovery, once it reported every flush it staged, whose commits the master then waits
//! for; and the master dismisses it with `JobEnded`); and `harp scale` connects like a
//! node with neither role and sends a `ScaleCommand`.

pub(crate) mod codec;
mod eviction;
mod executor_moves;
mod failures;
mod fault_delays;
mod greeting;
mod identity;
mod job_counters;
pub(crate) mod lease;
mod listen_addr;
mod master_side;
mod master_start;
mod node_side;
mod pending;
mod proxies;
mod roster;
mod row_parts;
mod scale_client;
mod server_links;
mod state_transfer;

pub use fault_delays::{
    APPLY_ANSWER_DELAY_VAR, DRAIN_ANSWER_DELAY_VAR, HAND_OFF_ANSWER_DELAY_VAR, JOIN_DELAY_VAR,
    RELEASED_STATE_SERVE_DELAY_VAR, STAGED_REPORT_DELAY_VAR,
};
pub use lease::{MAX_LEASE_TIMEOUT_MS, MIN_LEASE_TIMEOUT_MS};
pub use listen_addr::{check_bind_reaches, default_bind, dialable};
pub use master_side::{
    run_job_across, run_job_across_consistent, run_job_across_controlled, run_job_across_watched,
    ClusterOptions, NodeFailure,
};
pub use node_side::{run_node, run_node_leaving, run_node_with, NODE_LAUNCH_ID_VAR};
pub use roster::{NodeLauncher, NODES_STARTED_MAX};
pub use scale_client::{send_scale_command, ScaleError};

use harp_net::JobCredentials;
use harp_wire::JobId;

/// The job identity every node derives from the job's authority certificate.
pub fn job_id(creds: &JobCredentials) -> JobId {
    let der = creds.ca_cert().as_ref();
    let mut out = [0u8; 16];
    for (half, seed) in [
        (0usize, 0x9E37_79B9_7F4A_7C15u64),
        (8, 0xD1B5_4A32_D192_ED03),
    ] {
        let mut h = seed;
        for b in der {
            h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01B3);
            h ^= h >> 29;
        }
        out[half..half + 8].copy_from_slice(&h.to_le_bytes());
    }
    out
}
