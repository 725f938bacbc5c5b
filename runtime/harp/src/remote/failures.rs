//! What the master does when a node process dies: its lease expired, its link closed, or an
//! outside membership service (etcd) reported it. Every report of a death goes through
//! [`node_died`], which buries the node once (a second report of the same death is
//! ignored), fails every reply still awaited from it, and then either recovers or ends the
//! job:
//!
//! - a node that held only a server, in a job with SCAR's running checkpoint
//!   (`ClusterOptions::scar`): the master re-creates its shards on the live servers from the
//!   checkpoint's image (`MasterMsg::ServerLost`, the same partial recovery as in one
//!   process, `master/recovery.rs`), reroutes every node and then tells them the server is
//!   lost (`Message::ServerLost`), so the reads and flush parts it left unanswered go to
//!   the new owners (nodes of such a job keep each flush part until it is acknowledged:
//!   `Assignment::server_recovery`). What the server applied after its rows were last
//!   saved is lost; the values at the failure died with the process, so the recovery
//!   report's `lost` is `None` (it lists the shards and the rows restored);
//! - any other death ends the job with `HarpError::NodeDied`, naming the node, what it
//!   held, and what would have let the job survive it.
//!
//! **A worker node's death (not handled yet; the design, against DESIGN §4 G2).** Its
//! executors would be re-created on live workers (`App::create_executor`, or
//! `restore_executor` from a consistent checkpoint's saved state) and the micro-tasks in
//! flight on it dispatched again. The hard part is exactly-once application. Servers
//! could deduplicate `Apply` by `(node id, flush id)` (every flush now carries the sending
//! node's id), but that only stops a *retransmitted* part being applied twice: a rerun
//! task flushes from another node under a new flush id, so a task whose first flush was
//! applied but whose completion was lost with the node would be applied twice, and
//! skipping the rerun is no answer either, because a flush is split per server and the
//! node may have died after some parts were applied and before others were sent (its
//! update log died with it, so the rest cannot be resent). The master cannot tell these
//! cases apart from completions alone. What makes it decidable is committing flushes
//! through the master: a node *stages* each part on its server (`(node, flush)`, the task
//! ids it covers), reports the flush staged to the master once every part is, and the
//! master commits it (servers apply the staged parts, deduplicated by `(node, flush)`)
//! and only then hands the tasks' completions to the driver. On a worker's death the
//! master then knows, per task, whether its flush was committed (done, never rerun) or
//! not (servers drop that node's uncommitted staged parts, and the task runs again): every
//! update is applied exactly once and all-or-nothing, at the cost of one round trip
//! through the master per flush.

use super::roster::{self, RosterContext};
use crate::app::App;
use crate::error::HarpError;
use crate::master::MasterMsg;
use harp_core::ServerId;

/// Node `node` died (`cause`: how the master learnt it): recover its server or end the job.
pub(crate) fn node_died<A: App>(ctx: &RosterContext<A>, node: u32, cause: &str) {
    let Some(entry) = roster::lock(&ctx.roster).bury(node) else {
        return; // it left the job, or this death was already handled
    };
    entry.pending.fail_all();
    entry.link.close("declared dead");
    let detail = format!("{cause}; it held {}", entry.holdings);
    let server_only = entry.roles.server && !entry.roles.worker;
    let worker_recovered = ctx.worker_recovery && (!entry.roles.server || ctx.server_recovery);
    if entry.roles.worker && worker_recovered {
        tracing::warn!(node, %detail, "a worker node died: re-creating its executors and running its uncommitted tasks again");
        let _ = ctx.master.send_message(MasterMsg::WorkerLost {
            node,
            cause: cause.to_string(),
        });
        if !entry.roles.server {
            return;
        }
    }
    if ctx.server_recovery && (server_only || worker_recovered) {
        tracing::warn!(node, %detail, "a server node died: re-creating its shards from the running checkpoint");
        // Nodes that join later must not dial it.
        let _ = ctx.master.send_message(MasterMsg::ForgetServer(node));
        let _ = ctx.master.send_message(MasterMsg::ServerLost {
            server: ServerId(node),
            at_failure: None,
            reply: None,
        });
        return;
    }
    let hint = if entry.roles.worker && !ctx.worker_recovery {
        "; --recover-workers (ClusterOptions::worker_recovery) lets the job survive losing a worker node"
    } else if entry.roles.worker {
        "; it held a server too: recovering its shards needs --scar-fraction (SCAR's running checkpoint) beside --recover-workers"
    } else {
        "; --scar-fraction (SCAR's running checkpoint) lets the job recover a server node's shards"
    };
    let error = HarpError::NodeDied {
        node,
        detail: format!("{detail}{hint}"),
    };
    let _ = ctx.master.send_message(MasterMsg::Failed(error));
}
