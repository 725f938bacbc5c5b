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
//!   saved is lost. Its values at the failure died with the process, but the updates did
//!   not: before the recovery the master asks every live node what the dead server
//!   acknowledged to it since each row's last save (`Message::LostUpdatesQuery`; each node
//!   keeps that record, `node/lost_ledger.rs`), and the recovery report's `lost` is
//!   exactly those updates ([`query_lost_updates`]). In a job that also recovers worker
//!   nodes, parts are applied at their commit and nodes keep no such record: `lost` is
//!   `None` there;
//! - a node that held a worker, in a job that recovers worker nodes
//!   (`ClusterOptions::worker_recovery`, `harp run --recover-workers`): its executors are
//!   created again on the live workers and exactly the micro-tasks whose updates were not
//!   committed run again (below, `MasterMsg::WorkerLost`); if it held a server too, that
//!   server is recovered as above, which needs `ClusterOptions::scar` as well;
//! - any other death ends the job with `HarpError::NodeDied`, naming the node, what it
//!   held, and what would have let the job survive it.
//!
//! A killed node's peers often notice before the master: a node that fails because it lost
//! a server says which (`Message::Failed { unreachable_server }`), and the master holds that
//! failure until it has a verdict on the server's node ([`report_after_verdict`]), so the
//! death, not its symptom elsewhere, is what the job reports or recovers from. A server's
//! node that outlives the wait is alive to the master: the two nodes lost each other (a
//! partition between them), which ends the job as `HarpError::PeerLost` (a node that lost
//! its own server, which no link leads to: `HarpError::OwnServerStuck`). In a job with
//! server or worker recovery a node does not fail on a lost server: its traffic waits for
//! the server's shards to be re-created, and it tells the master so (`Message::ServerAwaited`),
//! which gives the server's node the same wait ([`peer_lost_unless_gone`]). If the
//! server's node is still alive then, the link between the two broke: the master evicts
//! one of the two (declares it dead and recovers it, `eviction.rs` says which) where the
//! job can recover it, and otherwise ends the job.
//!
//! **A worker node's death, exactly once (DESIGN §4, G2).** Re-running the micro-tasks a
//! dead worker had in flight is easy; applying each update exactly once is not. A flush is
//! split per server, so a node may die after some parts were applied and before others were
//! sent (its update log dies with it), and a task whose flush was applied but whose
//! completion was lost would be applied twice by its rerun, which flushes from another node
//! under another flush id. Nothing in the completions alone tells these cases apart. So a
//! job with worker recovery commits every flush through the master:
//!
//! 1. *Stage.* A node stages each part of a flush on its server (`Message::Apply` with
//!    `staged`, kept by the server under `(node, flush)`: `server/staging.rs`) instead of
//!    having it applied. It stages one flush at a time, and only when no micro-task is
//!    half-way through its updates, so a flush carries exactly the updates of the tasks it
//!    covers (`worker.rs`).
//! 2. *Report.* Once every part is acknowledged the node sends the master the flush, the
//!    servers that hold its parts and its tasks' completions (`Message::FlushStaged`).
//! 3. *Commit.* The master marks those tasks committing, tells each of those servers to apply
//!    the part (`Message::CommitFlush`; a second commit of the same `(node, flush)` is a
//!    no-op), waits for every acknowledgement on a spawned task, and only then hands the
//!    completions to the driver, so a task it dispatches next reads the committed updates
//!    although commits (master → server) and reads (worker → server) take different links.
//!    This is the cost: one more round trip per flush, and one flush at a time per node.
//!
//! The master handles its mailbox in order, and the death (`MasterMsg::WorkerLost`) is one
//! point in that order: a node's report handled before it is committed (its tasks complete
//! although the node is gone); a report handled after it is dropped. On the death the
//! master then has every server drop the node's uncommitted parts and refuse its later ones
//! (`Message::DropStaged`), makes each of its executors again on the least loaded live
//! worker (`Message::CreateExecutor`, `App::recover_executor`: with the state it saved in
//! the newest consistent checkpoint when the job writes them, which the master reads from
//! the checkpoint directory and the app may use or ignore; afresh otherwise, nothing of
//! the dead executor's state surviving), and dispatches again, in task order and to the new host,
//! every task of those executors that its task book (`master/task_book.rs`) holds as
//! dispatched and not committing (each keeps its id and version and is counted once in
//! flight). Every update is thus applied all-or-nothing and exactly once. A move in
//! progress to or from the dead worker ends the job with an error (the executor would have
//! no host), as does a death with no live worker left. Parts staged on a server that dies
//! before its commit are lost with it, like the updates it applied after its last saved
//! values (G3). The `WorkerRecovery` report (`JobStats::worker_recoveries`) names the node,
//! the executors and where they went, the tasks run again and when.

use super::eviction::{self, Recovers};
use super::pending::Pending;
use super::roster::{self, RosterContext, SharedRoster};
use super::row_parts::InParts;
use crate::app::App;
use crate::error::HarpError;
use crate::master::{Acknowledged, MasterMsg};
use harp_core::{ParamKey, RowData, ServerId, WorkerId};
use harp_wire::{LostUpdatesResult, Message};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long the master waits for the live nodes' records of a dead server before it
/// recovers without them (and reports no `lost`).
const LOST_UPDATES_WAIT: Duration = Duration::from_secs(3);
/// How long after the death of a lost server's node a failure it caused is reported (the
/// death's own report, or its recovery, goes first).
const AFTER_VERDICT: Duration = Duration::from_millis(200);

/// Node `node` died (`cause`: how the master learnt it): recover its server or end the job.
///
/// Taken out of the roster and told to the master (`WorkerLost`, `ForgetNode`, ...) in one
/// critical section of the roster's lock: a joining node's placement (`roster.rs::admit`,
/// which sends `MasterMsg::AddNode` under the same lock once the verdicts it waits for
/// came) then follows the master's news of the death, and never names the dead node's
/// server. Apart, the joiner's wait saw the death (often on the same timer tick as the
/// verdict) and its `AddNode` overtook the `ForgetNode`: it dialled the dead server in vain
/// and did not start (`multi_host.rs::a_node_joining_while_another_is_cut_off_...`, about
/// one run in three).
pub(crate) fn node_died<A: App>(ctx: &RosterContext<A>, node: u32, cause: &str) {
    let logs = {
        let mut roster = roster::lock(&ctx.roster);
        let Some(entry) = roster.bury(node) else {
            return; // it left the job, or this death was already handled
        };
        buried_node_died(ctx, node, entry, cause)
    };
    logs.emit();
}

/// What handling a death has to log: written once the roster's lock is released, so that
/// a slow log sink (a stderr pipe nobody reads) never holds the roster up.
#[must_use]
#[derive(Default)]
struct DeathLogs(Vec<(u32, String, &'static str)>);

impl DeathLogs {
    fn warn(&mut self, node: u32, detail: String, what: &'static str) {
        self.0.push((node, detail, what));
    }

    fn emit(self) {
        for (node, detail, what) in self.0 {
            tracing::warn!(node, %detail, "{what}");
        }
    }
}

/// [`node_died`] for a node already taken out of the roster (`entry`), called with the
/// roster's lock held (nothing here waits, logs or takes that lock), e.g. in the same
/// critical section as the choice to evict it. The caller logs what it returns once the
/// lock is released.
fn buried_node_died<A: App>(
    ctx: &RosterContext<A>,
    node: u32,
    entry: roster::NodeEntry,
    cause: &str,
) -> DeathLogs {
    let mut logs = DeathLogs::default();
    let detail = format!("{cause}; it held {}", entry.holdings);
    // One rule for what the job survives, here and in the choice of whom to evict.
    let recovered = recovers(ctx).node(entry.roles);
    let worker_lost = entry.roles.worker && recovered;
    if worker_lost {
        logs.warn(
            node,
            detail.clone(),
            "a worker node died: re-creating its executors and running its uncommitted tasks again",
        );
        // Before its awaited replies fail: the master then learns of the death before a
        // move's failed answer from that node, which it would otherwise read as a failure of
        // a live node (`master/moves_under_recovery.rs`).
        let _ = ctx.master.send_message(MasterMsg::WorkerLost {
            node,
            cause: cause.to_string(),
        });
    }
    entry.pending.fail_all();
    // The node may be alive (cut off from the master, or evicted): it reads why it is out.
    entry
        .link
        .close(&format!("the master declared this node dead: {cause}"));
    if worker_lost && !entry.roles.server {
        // After `WorkerLost`: its executors have new workers by then.
        let _ = ctx.master.send_message(MasterMsg::ForgetNode(node));
        // Later scale events leave it out.
        ctx.control.forget(Some(WorkerId(node)), None);
        return logs;
    }
    // A server-only node, or one with a worker and a server (both recovered).
    if recovered {
        logs.warn(
            node,
            detail,
            "a server node died: re-creating its shards from the running checkpoint",
        );
        // Nodes that join later must not dial it.
        let _ = ctx.master.send_message(MasterMsg::ForgetNode(node));
        // Later scale events leave it out (the master starts none until its shards are
        // re-created).
        let worker = entry.roles.worker.then_some(WorkerId(node));
        ctx.control.forget(worker, Some(ServerId(node)));
        if ctx.worker_recovery {
            let _ = ctx.master.send_message(MasterMsg::ServerLost {
                server: ServerId(node),
                at_failure: None,
                acknowledged: None,
                reply: None,
            });
            return logs;
        }
        let roster = ctx.roster.clone();
        let master = ctx.master.clone();
        crate::spawn::spawn(async move {
            let acknowledged = query_lost_updates(&roster, node).await;
            let _ = master.send_message(MasterMsg::ServerLost {
                server: ServerId(node),
                at_failure: None,
                acknowledged: Some(acknowledged),
                reply: None,
            });
        });
        return logs;
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
    logs
}

/// Ends the job with `failure`, which node `node` raised (`message`) because it lost
/// `server` (a server's id is its node's), once the master has a verdict on that node. A
/// killed node's peers often notice before the master does; without the wait their
/// "server unreachable" could end the job first and hide the cause. So: if the node is
/// declared dead (or leaves) within its lease timeout and a second, the failure goes
/// [`AFTER_VERDICT`] later, after the death's own report (`NodeDied`, which ends a job
/// that cannot recover) or the start of its recovery; if it stays alive, the failure goes
/// then as [`HarpError::PeerLost`]: the two nodes lost each other, not the master (or, for
/// the node's own server, which no link leads to, as [`HarpError::OwnServerStuck`]).
pub(crate) async fn report_after_verdict<A: App>(
    ctx: std::sync::Arc<RosterContext<A>>,
    (node, server): (u32, u32),
    message: String,
) {
    let failure = match hold_for_verdict(&ctx.roster, server, verdict_limit(&ctx)).await {
        Verdict::NodeGone => HarpError::Remote(format!("node {node}: {message}")),
        Verdict::NoVerdict => {
            tracing::warn!(node, peer = server, %message, "a node lost a server whose node is still in the job");
            lost_a_live_server((node, server), message)
        }
    };
    let _ = ctx.master.send_message(MasterMsg::Failed(failure));
}

/// Node `node`'s traffic for `server` waits for a recovery (`Message::ServerAwaited`: its
/// link to the server's node broke, in a job with server or worker recovery). If the
/// server's node is declared dead or leaves within its lease timeout and a second, its
/// recovery or its leave reroutes that traffic and nothing more happens here. If it stays in the job, the link
/// between the two live nodes broke (a partition between them) and no recovery would come:
/// the master evicts one of them where the job can recover it (declared dead, as if it
/// had died: [`super::eviction`]), and otherwise ends the job as [`HarpError::PeerLost`],
/// both now rather than once the node's own wait (`lease::reroute_wait`, a minute or more) is over.
pub(crate) async fn peer_lost_unless_gone<A: App>(
    ctx: std::sync::Arc<RosterContext<A>>,
    (node, server): (u32, u32),
) {
    {
        let mut roster = roster::lock(&ctx.roster);
        if roster.is_gone(node) {
            return; // what a node declared dead still says does not end the job
        }
        roster.broken_links.report(node, server);
    }
    if hold_for_verdict(&ctx.roster, server, verdict_limit(&ctx)).await == Verdict::NodeGone {
        return;
    }
    let detail = HarpError::ServerUnreachable(ServerId(server)).to_string();
    // The choice and the eviction in one critical section: verdicts on two broken links
    // run at once (each worker node reports its own), and each must see the other's victim
    // gone. Chosen apart, two verdicts each kept "another worker" alive and evicted both
    // worker nodes, and the job ended with no worker left. (The death's messages to the
    // master go in it too: see `node_died`.)
    let (cut_off, evicted) = {
        let mut roster = roster::lock(&ctx.roster);
        // Gone since the wait ended (evicted for another broken link, say): its recovery or
        // its leave reroutes the traffic. And nodes close their links when the job ends.
        if roster.is_gone(node) || roster.is_gone(server) || roster.job_ended() {
            return;
        }
        let live = roster.live_roles();
        let pair = (node, server);
        let cut_off = eviction::kept_and_cut_off(pair, &roster.broken_links, &live, recovers(&ctx));
        let victim = cut_off
            .is_none()
            .then(|| eviction::choose(pair, &roster.broken_links, &live, recovers(&ctx)))
            .flatten();
        match victim.and_then(|v| Some((v, roster.bury(v)?))) {
            Some((victim, entry)) => {
                let other = if victim == node { server } else { node };
                let cause = format!(
                    "evicted: its link to node {other} broke while both still reached the \
                     master (a network partition between them, {detail})"
                );
                (
                    None,
                    Some((victim, buried_node_died(&ctx, victim, entry, &cause))),
                )
            }
            None => (cut_off, None),
        }
    };
    // Logged now that the roster's lock is released.
    if let Some((victim, logs)) = evicted {
        tracing::warn!(node, peer = server, victim, %detail, "two live nodes lost the link between them: evicting one of them");
        logs.emit();
        return;
    }
    if let Some(isolated) = cut_off {
        let detail = format!(
            "{detail}; node {isolated} (a server only) lost its links to every worker node \
             while it still reaches the master, and it may not be evicted ({}): evicting the \
             worker nodes one by one would not mend it",
            recovers(&ctx).why_no_eviction()
        );
        tracing::warn!(node, peer = server, isolated, %detail, "a server node is cut off from every worker node");
        end_as_peer_lost(&ctx, (node, server), detail);
        return;
    }
    let detail = format!(
        "{detail}; its traffic waited for a recovery, which comes only for a dead node, and \
         neither node may be evicted ({})",
        recovers(&ctx).why_no_eviction()
    );
    tracing::warn!(node, peer = server, %detail, "a node lost a server whose node is still in the job");
    end_as_peer_lost(&ctx, (node, server), detail);
}

/// Ends the job: `node` lost the server of node `peer`, which is still in the job.
fn end_as_peer_lost<A: App>(ctx: &RosterContext<A>, (node, peer): (u32, u32), detail: String) {
    let lost = lost_a_live_server((node, peer), detail);
    let _ = ctx.master.send_message(MasterMsg::Failed(lost));
}

/// What ends a job whose node `node` lost the server of node `peer`, still in the job: the
/// link between them broke ([`HarpError::PeerLost`]), or, for the node's own server, which
/// no link leads to, the server is stuck ([`HarpError::OwnServerStuck`]).
fn lost_a_live_server((node, peer): (u32, u32), detail: String) -> HarpError {
    if node == peer {
        HarpError::OwnServerStuck { node, detail }
    } else {
        HarpError::PeerLost { node, peer, detail }
    }
}

/// What the job recovers when a node dies.
fn recovers<A: App>(ctx: &RosterContext<A>) -> Recovers {
    Recovers {
        workers: ctx.worker_recovery,
        servers: ctx.server_recovery,
    }
}

/// How long the master waits for its verdict on a node another node lost: its lease
/// timeout and a second.
fn verdict_limit<A: App>(ctx: &RosterContext<A>) -> Duration {
    super::lease::verdict_after(ctx.lease_timeout_ms)
}

/// What [`hold_for_verdict`] waited for.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The node was declared dead or left; its own report went [`AFTER_VERDICT`] before.
    NodeGone,
    /// Still part of the job after the whole wait.
    NoVerdict,
}

/// Returns when a failure caused by losing `server` may be reported: [`AFTER_VERDICT`]
/// after its node is gone from the roster, or after `limit` if it is not gone by then.
async fn hold_for_verdict(roster: &SharedRoster, server: u32, limit: Duration) -> Verdict {
    if roster::wait_until(roster, limit, |r| r.is_gone(server)).await {
        tokio::time::sleep(AFTER_VERDICT).await;
        return Verdict::NodeGone;
    }
    Verdict::NoVerdict
}

/// Asks every live node what server node `server` acknowledged to it since each row's last
/// save, and puts the answers together; why not, if one node cannot say exactly or does not
/// answer in time.
async fn query_lost_updates(roster: &SharedRoster, server: u32) -> Acknowledged {
    let mut waits = Vec::new();
    for node in roster::lock(roster).live().filter(|n| n.id != server) {
        let (tx, rx) = oneshot::channel();
        let request_id = node
            .pending
            .register(Pending::LostUpdates(InParts::new(tx)));
        if node
            .link
            .send(&Message::LostUpdatesQuery { request_id, server })
            .is_err()
        {
            return Err(format!("node {} could not be asked", node.id));
        }
        waits.push((node.id, rx));
    }
    let deadline = tokio::time::Instant::now() + LOST_UPDATES_WAIT;
    let mut rows = Vec::new();
    for (node, rx) in waits {
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(LostUpdatesResult::Ok(reported))) => {
                rows.extend(reported.into_iter().map(|(key, sums)| {
                    let sums: Vec<(u64, RowData)> = sums
                        .into_iter()
                        .map(|(e, d)| (e, RowData::from(d)))
                        .collect();
                    (ParamKey::from(key), sums)
                }))
            }
            Ok(Ok(LostUpdatesResult::Inexact(why))) => return Err(format!("node {node}: {why}")),
            Ok(Err(_)) | Err(_) => {
                return Err(format!(
                    "node {node} did not say what the server acknowledged to it"
                ))
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::roster::Roster;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    const LIMIT: Duration = Duration::from_millis(2_000);

    fn roster() -> SharedRoster {
        Arc::new(Mutex::new(Roster::new(3)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_waits_for_the_death_of_the_lost_servers_node_then_goes_after_it() {
        let roster = roster();
        let started = Instant::now();
        let burier = roster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // The master's death handling: `node_died` buries, then reports.
            roster::lock(&burier).bury(2);
        });
        assert_eq!(hold_for_verdict(&roster, 2, LIMIT).await, Verdict::NodeGone);
        let held = started.elapsed();
        assert!(
            held >= Duration::from_millis(300) + AFTER_VERDICT,
            "reported {held:?} after the failure: before the death's own report"
        );
        assert!(
            held <= Duration::from_millis(300) + roster::ROSTER_POLL + AFTER_VERDICT,
            "held {held:?}: longer than the poll and the grace after the death"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_whose_server_stays_alive_goes_when_the_wait_ends() {
        let roster = roster();
        let started = Instant::now();
        assert_eq!(
            hold_for_verdict(&roster, 2, LIMIT).await,
            Verdict::NoVerdict
        );
        let held = started.elapsed();
        assert!(
            held >= LIMIT && held <= LIMIT + roster::ROSTER_POLL,
            "held {held:?}, the wait is {LIMIT:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_about_a_node_already_dead_goes_after_the_grace_only() {
        let roster = roster();
        roster::lock(&roster).bury(1);
        let started = Instant::now();
        assert_eq!(hold_for_verdict(&roster, 1, LIMIT).await, Verdict::NodeGone);
        assert_eq!(started.elapsed(), AFTER_VERDICT);
    }

    #[tokio::test(start_paused = true)]
    async fn another_nodes_death_is_no_verdict_on_the_lost_server() {
        let roster = roster();
        roster::lock(&roster).bury(1);
        assert_eq!(
            hold_for_verdict(&roster, 2, LIMIT).await,
            Verdict::NoVerdict
        );
    }

    #[test]
    fn a_node_that_lost_its_own_server_is_told_the_server_is_stuck_not_a_broken_link() {
        let own = lost_a_live_server((1, 1), "server-1 did not answer a flush".into());
        assert!(
            matches!(own, HarpError::OwnServerStuck { node: 1, .. }),
            "{own}"
        );
        assert_eq!(
            own.to_string(),
            "node 1's own server stopped answering it (server-1 did not answer a flush) while \
             node 1 still renews its lease with the master: the server is stuck, and the job \
             cannot go on without it"
        );
        let peer = lost_a_live_server((1, 2), "server-2 did not answer a read".into());
        assert!(
            matches!(
                peer,
                HarpError::PeerLost {
                    node: 1,
                    peer: 2,
                    ..
                }
            ),
            "{peer}"
        );
    }
}
