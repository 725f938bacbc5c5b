//! The master's roster of node processes while the job runs, and the scale events that change
//! it: a node that joins a running job is given load by a re-balancing; a node that leaves
//! (it got SIGTERM, or `harp scale --remove` named it) gives its load away, every other node
//! drains what it still had in flight to it, and then it is dismissed and exits (a leave
//! whose move another node's failure cut short is tried again, [`LEAVE_TRIES`] scale events
//! at most, once the recovery is over; a recovered node is forgotten; a node that asks to
//! leave while it holds the job's last worker or server waits for a node to join that can
//! take its load); `harp scale`
//! commands arrive on the master's endpoint like nodes do ([`accepting`], from the moment
//! the master listens: the first nodes take the job's places, a command while the job
//! still starts is refused at once, and the job's exit waits for the answers owed;
//! [`scale_clients`]).
//!
//! A node that left is remembered as departed, so its closed link and its silent lease are
//! not reported as a death. An outside scheduler's desired node count ([`desired`]) grows and
//! shrinks the job through the same paths.

mod accepting;
mod desired;
mod scale_clients;

pub(crate) use accepting::Accepting;
pub(crate) use desired::{count_joins, follow_desired};

use super::identity::AppIdentity;
use super::pending::{Pending, PendingReplies};
use super::proxies::{take_over_wait, ServerNodeProxy, WorkerLink, WorkerProxy};
use super::state_transfer::MasterCourier;
use crate::app::App;
use crate::control::{EventSink, JobControl, JobEvent, ScaleEvent};
use crate::error::HarpError;
use crate::job::spawn;
use crate::master::MasterMsg;
use harp_core::{MemberInfo, MembershipView, NodeId, NodeRoles, ServerId, WorkerId};
use harp_net::{Incoming, Link};
use harp_wire::{Assignment, JobInfoWire, Message, ServerPlace};
use ractor::ActorRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// One node process of the job.
pub(crate) struct NodeEntry {
    pub id: u32,
    pub link: Link,
    pub roles: NodeRoles,
    /// Replies the master waits for from this node.
    pub pending: Arc<PendingReplies>,
    /// What it held when it joined, for the report of its death.
    pub holdings: String,
    /// What the launcher of its process named it (`Ready::launch_id`; 0: nothing).
    pub launch_id: u64,
}

/// The nodes of the job: those that joined and have not left, and those that left.
#[derive(Default)]
pub(crate) struct Roster {
    nodes: BTreeMap<u32, NodeEntry>,
    departed: BTreeSet<u32>,
    /// Nodes declared dead whose loss the job survived (a server recovered from SCAR's
    /// running checkpoint): a second report of the same death is ignored.
    dead: BTreeSet<u32>,
    /// The job ended: nodes exiting now are not dying.
    ended: bool,
    /// Nodes asked to leave whose leave is not finished.
    leaving: BTreeSet<u32>,
    /// Nodes that asked to leave (SIGTERM) while they held the job's last worker or last
    /// server: each leaves once a node joins that can take its load ([`serve_leaves`]).
    waiting_to_leave: BTreeSet<u32>,
    /// Links between nodes that a node reported broken (`Message::ServerAwaited`).
    pub(crate) broken_links: super::eviction::BrokenLinks,
    /// The counters of the nodes gone, summed (a node that left sent its own before it was
    /// dismissed, one that died is counted from its last report), and every live node's
    /// last report; the job's end adds the live nodes' (`job_counters.rs`).
    pub(crate) node_reports: super::job_counters::NodeReports,
    next_id: u32,
}

pub(crate) type SharedRoster = Arc<Mutex<Roster>>;

pub(crate) fn lock(roster: &SharedRoster) -> std::sync::MutexGuard<'_, Roster> {
    roster.lock().unwrap_or_else(|p| p.into_inner())
}

impl Roster {
    pub(crate) fn new(first_free_id: u32) -> Self {
        Self {
            next_id: first_free_id,
            ..Self::default()
        }
    }

    pub(crate) fn insert(&mut self, entry: NodeEntry) {
        self.next_id = self.next_id.max(entry.id + 1);
        self.nodes.insert(entry.id, entry);
    }

    /// The node of the job that runs in the process its launcher named `launch_id`, if it
    /// is still part of the job.
    pub(crate) fn launched_as(&self, launch_id: u64) -> Option<u32> {
        if launch_id == 0 {
            return None; // a process no launcher named
        }
        self.nodes
            .values()
            .find(|entry| entry.launch_id == launch_id)
            .map(|entry| entry.id)
    }

    /// Nodes that are part of the job now.
    pub(crate) fn live(&self) -> impl Iterator<Item = &NodeEntry> {
        self.nodes.values()
    }

    /// Whether `node` left the job or was already declared dead.
    pub(crate) fn is_gone(&self, node: u32) -> bool {
        self.departed.contains(&node) || self.dead.contains(&node)
    }

    /// The live nodes and their roles.
    pub(crate) fn live_roles(&self) -> BTreeMap<u32, NodeRoles> {
        self.nodes.iter().map(|(id, e)| (*id, e.roles)).collect()
    }

    /// Whether the job ended (see [`Self::end_job`]).
    pub(crate) fn job_ended(&self) -> bool {
        self.ended
    }

    /// The job ended: from now on a node that goes away is not a death.
    pub(crate) fn end_job(&mut self) {
        self.ended = true;
    }

    /// `node` died: it is no longer part of the job; its entry, the first time (none once
    /// the job ended).
    pub(crate) fn bury(&mut self, node: u32) -> Option<NodeEntry> {
        if self.ended || self.is_gone(node) {
            return None;
        }
        self.dead.insert(node);
        self.leaving.remove(&node);
        self.waiting_to_leave.remove(&node);
        let entry = self.nodes.remove(&node);
        if entry.is_some() {
            // It cannot be asked any more: counted from its last report, if it sent one.
            self.node_reports.count(node, None);
        }
        entry
    }

    fn depart(&mut self, node: u32) -> Option<NodeEntry> {
        self.departed.insert(node);
        self.leaving.remove(&node);
        self.waiting_to_leave.remove(&node);
        self.nodes.remove(&node)
    }

    /// Marks `node` leaving; its roles and link. Refused for a node not in the job or one
    /// already leaving.
    fn claim_leave(&mut self, node: u32) -> Result<LeavingNode, HarpError> {
        let Some(entry) = self.nodes.get(&node) else {
            return Err(HarpError::InvalidConfig(format!(
                "node {node} is not one of the job's nodes"
            )));
        };
        let found = LeavingNode {
            roles: entry.roles,
            link: entry.link.clone(),
            pending: entry.pending.clone(),
        };
        if !self.leaving.insert(node) {
            return Err(HarpError::InvalidConfig(format!(
                "node {node} is already leaving"
            )));
        }
        Ok(found)
    }

    /// Whether `node` asked to leave and waits for a node that can take its load.
    pub(crate) fn waits_to_leave(&self, node: u32) -> bool {
        self.waiting_to_leave.contains(&node)
    }

    /// What `node` holds that no other node of the job could take now (see [`last_held`]).
    fn holds_the_last(&self, node: u32) -> Option<&'static str> {
        last_held(node, &self.live_roles(), &self.leaving)
    }
}

/// What `node` holds that no other node of the job could take now: the last worker or the
/// last server among the nodes (`roles`) that are not `leaving` (`None`: it may leave, or
/// it is not one of them).
fn last_held(
    node: u32,
    roles: &BTreeMap<u32, NodeRoles>,
    leaving: &BTreeSet<u32>,
) -> Option<&'static str> {
    let own = roles.get(&node)?;
    let others = || {
        roles
            .iter()
            .filter(|(id, _)| **id != node && !leaving.contains(id))
            .map(|(_, r)| r)
    };
    match (
        own.worker && !others().any(|r| r.worker),
        own.server && !others().any(|r| r.server),
    ) {
        (true, true) => Some("the job's last worker and last server"),
        (true, false) => Some("the job's last worker"),
        (false, true) => Some("the job's last server"),
        (false, false) => None,
    }
}

/// The most node processes a master's launcher is asked to start at once (`harp scale
/// --add N`, one step towards a desired size): a launcher starts them on the master's
/// machine, and a typo (`--add 100000`) must not flood it with processes.
pub const NODES_STARTED_MAX: u32 = 256;

/// Starts `n` more node processes (e.g. `harp node --join` children of the master); what
/// `harp scale --add N` calls, with `n` at most [`NODES_STARTED_MAX`].
#[derive(Clone)]
pub struct NodeLauncher(pub Arc<dyn Fn(u32) -> Result<(), String> + Send + Sync>);

impl std::fmt::Debug for NodeLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeLauncher")
    }
}

/// What the roster's tasks share.
pub(crate) struct RosterContext<A: App> {
    pub roster: SharedRoster,
    pub master: ActorRef<MasterMsg<A>>,
    pub control: JobControl,
    pub membership: Arc<Mutex<MembershipView>>,
    pub started: Instant,
    /// The app every node must run: in each `Welcome`.
    pub identity: AppIdentity,
    pub job: harp_wire::JobId,
    pub job_info: JobInfoWire,
    pub lease_timeout_ms: u64,
    pub join_timeout_ms: u64,
    pub launcher: Option<NodeLauncher>,
    /// Where each scale event is told (the job's [`crate::JobEvent`]s).
    pub events: EventSink,
    /// Where each node's reader reports a node asking to leave.
    pub leaving: mpsc::UnboundedSender<u32>,
    /// The job keeps SCAR's running checkpoint: a dead server node is recovered from it.
    pub server_recovery: bool,
    /// The job recovers dead worker nodes (`ClusterOptions::worker_recovery`).
    pub worker_recovery: bool,
    /// The master's end of parked executor states (a joining worker's proxy gets it).
    pub courier: MasterCourier,
}

/// How long the master waits for the other nodes to drain a leaving server (see [`drain`]
/// for the jobs that wait longer; under a lease over 14 s, a lease and a second:
/// `lease::outlasting_verdict`), and how often it says it still waits.
const DRAIN_WAIT: Duration = Duration::from_secs(15);

/// A node joins the running job: it gets an empty assignment and the placement; once it is
/// ready the other nodes learn its server (`MasterMsg::AddServer`, sent by [`enlist`]) and
/// a re-balancing gives it load.
async fn admit<A: App>(
    ctx: &Arc<RosterContext<A>>,
    link: Link,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    roles: NodeRoles,
    listen_addr: String,
) {
    let began = Instant::now();
    let id = {
        let mut roster = lock(&ctx.roster);
        let id = roster.next_id;
        roster.next_id += 1;
        id
    };
    let server = roles.server.then(|| ServerPlace {
        server: id,
        node_id: id,
        listen_addr: listen_addr.clone(),
    });
    let welcome = ctx.identity.welcome(ctx.job, id, ctx.lease_timeout_ms);
    if link.send(&welcome).is_err() {
        return;
    }
    tracing::info!(node = id, addr = %link.remote_addr(), "node joined the running job");
    await_link_verdicts(ctx, id).await;
    let assignment = Assignment {
        job: ctx.job_info,
        worker: roles.worker.then_some(id),
        executors: Vec::new(),
        server: roles.server.then_some(id),
        shards: Vec::new(),
        server_recovery: ctx.server_recovery,
        worker_recovery: ctx.worker_recovery,
    };
    let (tx, rx) = oneshot::channel();
    // Under the roster's lock: a death the wait above saw was told to the master in the
    // same critical section as it left the roster (`failures.rs::node_died`), so the
    // placement follows it.
    let asked = {
        let _roster = lock(&ctx.roster);
        ctx.master.send_message(MasterMsg::AddNode {
            node: id,
            link: link.clone(),
            assignment,
            server,
            reply: tx,
        })
    };
    let placed = asked.is_ok() && matches!(rx.await, Ok(Ok(())));
    if !placed {
        link.close("the job is ending");
        return;
    }
    let launch_id = match wait_ready(id, &mut incoming, ctx.join_timeout_ms).await {
        Ok(launch_id) => launch_id,
        Err(e) => {
            tracing::warn!(node = id, error = %e, "a joining node did not get ready; it gets no load");
            lock(&ctx.roster).depart(id);
            let _ = ctx.master.send_message(MasterMsg::ForgetNode(id));
            link.close("not ready");
            return;
        }
    };
    if let Err(e) = enlist(ctx, id, link, incoming, roles, listen_addr, launch_id).await {
        tracing::warn!(node = id, error = %e, "could not take a joining node in");
        lock(&ctx.roster).depart(id);
        let _ = ctx.master.send_message(MasterMsg::ForgetNode(id));
        return;
    }
    let worker = roles.worker.then_some(WorkerId(id));
    let server = roles.server.then_some(ServerId(id));
    let result = ctx.control.node_joined(worker, server).await;
    report(ctx, "join", Some(id), began, &result);
    retry_waiting_leaves(ctx);
}

/// How long a joining node's placement waits for the verdicts on broken links at most
/// (under a lease over 9 s, a lease and a second: the verdict comes after as long).
const VERDICTS_WAIT: Duration = Duration::from_secs(10);
/// How often [`wait_until`] looks at the roster again.
pub(crate) const ROSTER_POLL: Duration = Duration::from_millis(10);

/// Looks at the roster every [`ROSTER_POLL`] until `holds` says yes (`true`) or `limit`
/// passed (`false`). The roster has no change notification: its deaths, leaves and links
/// reported broken come from many tasks, and the waits on them are rare and short.
pub(crate) async fn wait_until(
    roster: &SharedRoster,
    limit: Duration,
    holds: impl Fn(&Roster) -> bool,
) -> bool {
    // Tokio's clock: tests of these waits run on paused time.
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if holds(&lock(roster)) {
            return true;
        }
        tokio::time::sleep(ROSTER_POLL).await;
    }
    false
}

/// Holds joining node `id`'s placement while two live nodes lost the link between them and
/// the master's verdict (an eviction: `failures.rs::peer_lost_unless_gone`) is still to
/// come, for at most [`VERDICTS_WAIT`] (or the lease and a second). A node cut off from the others is in the placement
/// until its eviction; a joiner placed before it dials its server in vain and does not
/// start (the elastic partition soak's seed 23: a node joined 2.5 s after another was cut
/// off from every node, whose eviction came a second later). Placed after it, the joiner
/// finds its shards on their new owners.
async fn await_link_verdicts<A: App>(ctx: &RosterContext<A>, id: u32) {
    let settled = |roster: &Roster| {
        roster.job_ended() || !roster.broken_links.any_between(&roster.live_roles())
    };
    if settled(&lock(&ctx.roster)) {
        return;
    }
    tracing::info!(
        node = id,
        "a joining node waits for the verdict on a broken link between two nodes"
    );
    let limit = super::lease::outlasting_verdict(VERDICTS_WAIT, ctx.lease_timeout_ms);
    wait_until(&ctx.roster, limit, settled).await;
}

/// Takes a ready node in: its lease, its proxies on the master, its reader
/// (`launch_id`: what the launcher of its process named it).
async fn enlist<A: App>(
    ctx: &Arc<RosterContext<A>>,
    id: u32,
    link: Link,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    roles: NodeRoles,
    listen_addr: String,
    launch_id: u64,
) -> Result<(), HarpError> {
    {
        let mut view = ctx.membership.lock().unwrap_or_else(|p| p.into_inner());
        let info = MemberInfo::new(listen_addr.clone(), roles);
        view.handle_join(NodeId(id), info, now_ms(ctx.started))
            .map_err(|e| HarpError::InvalidConfig(e.to_string()))?;
    }
    let pending = Arc::new(PendingReplies::default());
    if roles.worker {
        let worker_link = WorkerLink {
            link: link.clone(),
            pending: pending.clone(),
            listen_addr: listen_addr.clone(),
            courier: ctx.courier.clone(),
        };
        let proxy = spawn(WorkerProxy::<A>::new(), worker_link).await?;
        let _ = ctx
            .master
            .send_message(MasterMsg::AddWorker(WorkerId(id), proxy));
    }
    if roles.server {
        let proxy = spawn(
            ServerNodeProxy,
            (
                ServerId(id),
                link.clone(),
                pending.clone(),
                take_over_wait(ctx.lease_timeout_ms),
            ),
        )
        .await?;
        let _ = ctx
            .master
            .send_message(MasterMsg::AddServer(ServerId(id), proxy));
    }
    let holdings = [
        roles.worker.then(|| format!("worker-{id}")),
        roles.server.then(|| format!("server-{id}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" and ")
        + " (joined while the job ran)";
    lock(&ctx.roster).insert(NodeEntry {
        id,
        link,
        roles,
        pending: pending.clone(),
        holdings,
        launch_id,
    });
    crate::spawn::spawn(super::master_side::read_node::<A>(
        id,
        incoming,
        ctx.clone(),
        pending,
    ));
    Ok(())
}

/// Waits for a node's `Ready`; returns what the launcher of its process named it.
pub(crate) async fn wait_ready(
    id: u32,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    timeout_ms: u64,
) -> Result<u64, HarpError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, incoming.recv()).await {
            Ok(Some(Ok(Message::Ready { launch_id, .. }))) => return Ok(launch_id),
            Ok(Some(Ok(Message::Heartbeat { .. }))) => continue,
            Ok(Some(Ok(Message::Failed { message, .. }))) => {
                return Err(HarpError::Remote(format!(
                    "node {id} failed to start: {message}"
                )))
            }
            Ok(Some(Ok(other))) => {
                tracing::debug!(node = id, kind = ?other.kind(), "ignored before ready");
            }
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(None) | Err(_) => {
                return Err(HarpError::NodeDied {
                    node: id,
                    detail: "it did not get ready".into(),
                })
            }
        }
    }
}

/// Carries out the leaves that nodes ask for (SIGTERM on the node), each in a task of its
/// own, until the job ends. A node that holds the job's last worker or last server cannot
/// leave now: it is told so, keeps serving, and leaves once a node joins that can take its
/// load (or once another node's leave failed, which may leave that node in the job): see
/// [`retry_waiting_leaves`].
pub(crate) async fn serve_leaves<A: App>(
    ctx: Arc<RosterContext<A>>,
    mut asked: mpsc::UnboundedReceiver<u32>,
) {
    while let Some(node) = asked.recv().await {
        // Decided and claimed under one lock: two nodes asking at once cannot both pass
        // as not the last.
        let decided = {
            let mut roster = lock(&ctx.roster);
            match roster.holds_the_last(node) {
                Some(what) => {
                    roster.waiting_to_leave.insert(node);
                    let link = roster.nodes.get(&node).map(|entry| entry.link.clone());
                    Err((what, link))
                }
                None => {
                    roster.waiting_to_leave.remove(&node);
                    Ok(roster.claim_leave(node))
                }
            }
        };
        match decided {
            Err((what, link)) => {
                tracing::warn!(
                    node,
                    "node {node} asked to leave, but it holds {what}: it leaves once a node that can take its load joins"
                );
                if let Some(link) = link {
                    let _ = link.send(&Message::Refused {
                        reason: format!(
                            "node {node} holds {what}; it leaves once a node that can take its load joins"
                        ),
                    });
                }
            }
            Ok(Err(e)) => tracing::warn!(node, error = %e, "a node could not leave"),
            Ok(Ok(claimed)) => {
                let ctx = ctx.clone();
                crate::spawn::spawn(async move {
                    if let Err(e) = carry_out_leave(&ctx, node, claimed).await {
                        tracing::warn!(node, error = %e, "a node could not leave");
                    }
                });
            }
        }
    }
}

/// Asks [`serve_leaves`] again for every node waiting to leave (see there): after a join,
/// or after a leave failed. Each either leaves now or goes on waiting.
fn retry_waiting_leaves<A: App>(ctx: &RosterContext<A>) {
    let waiting: Vec<u32> = lock(&ctx.roster).waiting_to_leave.iter().copied().collect();
    for node in waiting {
        let _ = ctx.leaving.send(node);
    }
}

/// Moves a node's load away, drains it, dismisses it. Refusals (the last worker or server,
/// an unknown node) go back to the node and to the caller.
pub(crate) async fn leave<A: App>(ctx: &Arc<RosterContext<A>>, node: u32) -> Result<(), HarpError> {
    let claimed = lock(&ctx.roster).claim_leave(node)?;
    carry_out_leave(ctx, node, claimed).await
}

/// A node claimed for its leave ([`Roster::claim_leave`]): its roles, its link and the
/// replies the master waits for on it.
struct LeavingNode {
    roles: NodeRoles,
    link: Link,
    pending: Arc<PendingReplies>,
}

/// [`leave`] for a node already marked leaving ([`Roster::claim_leave`]).
async fn carry_out_leave<A: App>(
    ctx: &Arc<RosterContext<A>>,
    node: u32,
    LeavingNode {
        roles,
        link,
        pending,
    }: LeavingNode,
) -> Result<(), HarpError> {
    let began = Instant::now();
    let worker = roles.worker.then_some(WorkerId(node));
    let server = roles.server.then_some(ServerId(node));
    if let Err(e) = give_load_away(ctx, node, worker, server).await {
        lock(&ctx.roster).leaving.remove(&node);
        let _ = link.send(&Message::Refused {
            reason: e.to_string(),
        });
        retry_waiting_leaves(ctx);
        return Err(e);
    }
    if roles.server {
        drain(ctx, node).await;
        if ctx.worker_recovery {
            await_commits_on(ctx, node).await;
        }
    }
    // Final now (its load is gone): counted with the job's, which the node takes along.
    let answered = super::job_counters::of_leaving_node(node, &link, &pending).await;
    lock(&ctx.roster).node_reports.count(node, answered);
    let entry = lock(&ctx.roster).depart(node);
    ctx.control.forget(worker, server);
    let _ = ctx.master.send_message(MasterMsg::NodeLeft(node));
    {
        let mut view = ctx.membership.lock().unwrap_or_else(|p| p.into_inner());
        let _ = view.handle_leave(NodeId(node), now_ms(ctx.started));
    }
    if let Some(entry) = entry {
        let _ = entry.link.send(&Message::JobEnded {
            ok: true,
            message: format!("node {node} left the job"),
            stopped: None,
        });
    }
    tracing::info!(
        node,
        seconds = began.elapsed().as_secs_f64(),
        "node left the job"
    );
    Ok(())
}

/// How many scale events a leave may take when failures of other nodes cut its moves short.
const LEAVE_TRIES: u32 = 3;

/// Moves the load of the leaving `node` away: a scale event, tried again while the node is
/// still in the job when another node's failure cut one of its moves short (the recovery
/// may have put the item back on the leaving node: a shard on its way to a server that
/// died). The master starts the next one once that recovery is over. Each is reported.
async fn give_load_away<A: App>(
    ctx: &Arc<RosterContext<A>>,
    node: u32,
    worker: Option<WorkerId>,
    server: Option<ServerId>,
) -> Result<crate::ScaleReport, HarpError> {
    let mut tries = 1;
    loop {
        let began = Instant::now();
        let moved = ctx.control.node_leaving(worker, server).await;
        report(ctx, "leave", Some(node), began, &moved);
        match moved {
            Err(HarpError::MoveInterrupted(why))
                if tries < LEAVE_TRIES && lock(&ctx.roster).nodes.contains_key(&node) =>
            {
                tracing::warn!(node, %why, "a failure cut a move of this leave short: trying again");
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Asks every other node to answer once nothing it sent to `server` is unanswered (and,
/// with worker recovery, every flush it staged so far is reported). A node that does not
/// answer within [`DRAIN_WAIT`] (or a lease and a second, when longer: a node silent for
/// less than the lease is not given up on) is given up on, except in a job that recovers worker
/// nodes while it is still in the job: a flush it staged on `server` and has not reported
/// yet (one waiting on a lost server, say) would be lost with the server, so the wait goes
/// on until it answers, or dies or is evicted (its staged flushes are dropped then, and
/// its tasks run again: its waiters fail), or the job ends.
async fn drain<A: App>(ctx: &Arc<RosterContext<A>>, server: u32) {
    let mut waits = Vec::new();
    for other in lock(&ctx.roster).live().filter(|n| n.id != server) {
        let (tx, rx) = oneshot::channel();
        let request_id = other.pending.register(Pending::Drained(tx));
        if other
            .link
            .send(&Message::DrainServer { request_id, server })
            .is_ok()
        {
            waits.push((other.id, rx));
        }
    }
    let patience = super::lease::outlasting_verdict(DRAIN_WAIT, ctx.lease_timeout_ms);
    for (other, mut rx) in waits {
        // Answered, or the node is gone (its waiters fail).
        while tokio::time::timeout(patience, &mut rx).await.is_err() {
            let in_job = {
                let roster = lock(&ctx.roster);
                !roster.job_ended() && roster.nodes.contains_key(&other)
            };
            if !(ctx.worker_recovery && in_job) {
                tracing::warn!(
                    node = other,
                    server,
                    "a node did not drain a leaving server in time"
                );
                break;
            }
            tracing::warn!(
                node = other,
                server,
                "a node has not drained a leaving server yet: the server stays until it has (a flush it staged there and has not reported would be lost with it)"
            );
        }
    }
}

/// Waits until the flushes staged on the leaving `server` are committed: the nodes reported
/// them before they answered the drain, so the master holds every one by now, and a part
/// the server still held when its node departed would be lost with it. No time limit: a
/// commit that never ends holds the driver's completions too, and the master's end ends
/// the wait.
async fn await_commits_on<A: App>(ctx: &Arc<RosterContext<A>>, server: u32) {
    let (reply, applied) = oneshot::channel();
    let asked = MasterMsg::AwaitCommitsOn {
        server: ServerId(server),
        reply,
    };
    if ctx.master.send_message(asked).is_err() {
        return; // the job ended
    }
    let mut applied = applied;
    // Answered, or the master stopped (the job ended).
    while tokio::time::timeout(DRAIN_WAIT, &mut applied)
        .await
        .is_err()
    {
        tracing::warn!(
            server,
            "flushes staged on a leaving server are not committed yet: the server stays until they are"
        );
    }
}

/// Records a scale event: the log, and the events channel (the metrics file).
fn report<A: App>(
    ctx: &RosterContext<A>,
    cause: &'static str,
    node: Option<u32>,
    began: Instant,
    result: &Result<crate::ScaleReport, HarpError>,
) {
    let event = ScaleEvent::new(cause, node, began, ctx.started, result);
    match result {
        Ok(r) => tracing::info!(
            cause,
            ?node,
            executors_moved = r.executors_moved,
            shards_moved = r.shards_moved,
            bytes = r.shard_bytes_moved,
            seconds = event.duration_s,
            "scale event"
        ),
        Err(e) => tracing::warn!(cause, ?node, error = %e, "scale event failed"),
    }
    ctx.events.tell(JobEvent::Scale(event));
}

pub(crate) fn now_ms(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

#[cfg(test)]
mod last_held_tests {
    use super::*;

    fn roles(worker: bool, server: bool) -> NodeRoles {
        NodeRoles { worker, server }
    }

    #[test]
    fn a_node_holds_the_last_of_a_role_no_staying_node_offers() {
        let nodes = BTreeMap::from([
            (0, roles(true, true)),
            (1, roles(true, false)),
            (2, roles(false, true)),
        ]);
        let none = BTreeSet::new();
        assert_eq!(last_held(0, &nodes, &none), None, "1 works, 2 serves");
        assert_eq!(last_held(1, &nodes, &none), None);
        assert_eq!(
            last_held(1, &nodes, &BTreeSet::from([0])),
            Some("the job's last worker"),
            "a leaving node takes nothing"
        );
        assert_eq!(
            last_held(0, &nodes, &BTreeSet::from([1, 2])),
            Some("the job's last worker and last server")
        );
        assert_eq!(
            last_held(2, &nodes, &BTreeSet::from([0])),
            Some("the job's last server")
        );
        assert_eq!(last_held(7, &nodes, &none), None, "not a node of the job");
        let alone = BTreeMap::from([(4, roles(true, true))]);
        assert_eq!(
            last_held(4, &alone, &none),
            Some("the job's last worker and last server")
        );
    }
}
