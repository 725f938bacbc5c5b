//! The master process of a job across processes: waits for its nodes (`master_start.rs`),
//! assigns them work, runs the driver, watches the nodes' leases, and collects the
//! parameters at the end.

use super::failures::{node_died, peer_lost_unless_gone, report_after_verdict};
use super::identity::AppIdentity;
use super::job_id;
use super::master_start::{accept_nodes, not_started, start_interrupted, wait_ready, JoinedNode};
use super::pending::{Pending, PendingReplies};
use super::proxies::{
    completions_from_wire, take_over_wait, ServerNodeProxy, WorkerLink, WorkerProxy,
};
use super::roster::{self, now_ms, NodeEntry, NodeLauncher, Roster, RosterContext};
use super::row_parts::InParts;
use super::state_transfer::{MasterCourier, StateDialer, StateOutbox};
use crate::app::{App, Driver, JobInfo};
use crate::consistent::{CheckpointLayout, ConsistentReport};
use crate::error::HarpError;
use crate::job::{
    consistent_start, finish_consistent_write, restore_resumed_rows, spawn, ConsistentStart,
    JobOutcome, JobStats, ParamDump,
};
use crate::master::{MasterActor, MasterArgs, MasterMsg, RouteTarget};
use crate::worker::{ExecutorBody, ReleasedExecutor, WorkerMsg};
use harp_core::{
    ExecutorId, ExecutorMap, MemberInfo, MembershipConfig, MembershipEvent, MembershipView, NodeId,
    NodeRoles, ServerId, ShardMap, WorkerId,
};
use harp_net::{Incoming, JobCredentials, Link, NetEndpoint};
use harp_wire::{
    Assignment, JobInfoWire, Message, NodeRole, Placement, ServerPlace, ShardPlace, WireCounters,
    NODE_ID_UNASSIGNED,
};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// The shape and rules of a job across processes.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Node processes to wait for; each runs a worker, a server or both (its `--role`).
    pub nodes: u32,
    /// Where the master listens for its nodes.
    pub listen: SocketAddr,
    pub executors_per_worker: u32,
    pub shards_per_server: u32,
    pub collect_params: bool,
    /// A node whose lease is not renewed for this long is dead.
    pub lease_timeout_ms: u64,
    /// How long to wait for every node to join.
    pub join_timeout_ms: u64,
    /// Starts more node processes for `harp scale --add N`; without one, `--add` is refused.
    pub launcher: Option<NodeLauncher>,
    /// The node count an outside scheduler wants (with `harp run --etcd`: the job's
    /// `/harp/jobs/<job>/desired_nodes` key). Each value sent grows the job through
    /// `launcher` or lets the most recently joined nodes leave; one value is applied at a
    /// time and the latest one wins; `None` asks for nothing.
    pub desired_nodes: Option<watch::Receiver<Option<u32>>>,
    /// SCAR's running checkpoint (rounds over the node processes' servers, fault
    /// injection); with it, the death of a node that holds only a server is recovered from
    /// the checkpoint instead of ending the job (with [`Self::worker_recovery`] too, the
    /// death of any node).
    pub scar: Option<crate::scar::ScarOptions>,
    /// Survive the death of worker nodes (`harp run --recover-workers`): every flush is
    /// staged on the servers and committed by the master (one more round trip per flush),
    /// so a dead worker's executors are re-created on the live workers and exactly the
    /// micro-tasks whose updates were not committed run again (`remote/failures.rs`). A
    /// node that is also a server needs `scar` too, to recover its shards.
    pub worker_recovery: bool,
    /// Consistent checkpoints into `checkpoint_dir` every `every` iterations, and resuming
    /// from the newest complete one in `resume_from`, as in one process (see
    /// [`run_job_across_consistent`]; a resume checks the executors per worker and the
    /// shards per server, and may have another number of nodes). Default: neither.
    pub consistent: crate::consistent::ConsistentOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            nodes: 2,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            executors_per_worker: 1,
            shards_per_server: 8,
            collect_params: false,
            lease_timeout_ms: 3_000,
            join_timeout_ms: 30_000,
            launcher: None,
            desired_nodes: None,
            scar: None,
            worker_recovery: false,
            consistent: crate::consistent::ConsistentOptions::default(),
        }
    }
}

/// A node's death reported from outside the job's links, which the master handles at once
/// (`failures` of [`run_job_across_watched`] and the other runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeFailure {
    /// An outside membership service (e.g. etcd) saw node `node` die: what it saw.
    Seen { node: u32, seen: String },
    /// The process its launcher named `launch_id` ([`NODE_LAUNCH_ID_VAR`]) exited (`how`:
    /// its exit status, e.g. `signal: 9 (SIGKILL)`). Report only exits that are not a
    /// clean end. While the job runs, the node it ran dies at once; a node that left the
    /// job, or a process that never got ready, is not the job's any more and the report is
    /// ignored. Before the job started (the master still waits for its nodes to join or
    /// get ready), the job cannot have all its nodes: the start ends with
    /// [`HarpError::NodeExitedBeforeStart`].
    ///
    /// [`NODE_LAUNCH_ID_VAR`]: crate::NODE_LAUNCH_ID_VAR
    Exited { launch_id: u64, how: String },
}

/// Runs `app` with its master here and `options.nodes` node processes (started elsewhere,
/// e.g. `harp node --join ADDR`). `listening` is called with the bound address once the
/// master accepts nodes.
pub async fn run_job_across<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
) -> Result<JobOutcome<A>, HarpError> {
    let (_keep, failures) = mpsc::unbounded_channel();
    run_job_across_watched(app, creds, options, listening, failures).await
}

/// [`run_job_across`], also ending the job when an outside membership service reports a node
/// failure on `failures`.
pub async fn run_job_across_watched<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
    failures: mpsc::UnboundedReceiver<NodeFailure>,
) -> Result<JobOutcome<A>, HarpError> {
    let (_control, inbox) = crate::control::job_control();
    run_job_across_controlled(app, creds, options, listening, failures, inbox).await
}

/// [`run_job_across_watched`], also carrying out the commands of the
/// [`JobControl`](crate::JobControl) that `control` belongs to: executors move between the
/// worker nodes and shards between the server nodes while micro-tasks keep running
/// (`rebalance_onto`, `scale_in`); `scale_out` is refused (the job grows when node
/// processes join it, `harp node --join` or `harp scale --add`, and those are given load).
pub async fn run_job_across_controlled<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
    failures: mpsc::UnboundedReceiver<NodeFailure>,
    control: crate::control::ControlInbox,
) -> Result<JobOutcome<A>, HarpError> {
    run_across(app, creds, options, listening, failures, control)
        .await
        .map(|(outcome, _)| outcome)
}

/// [`run_job_across_watched`] with `options.consistent`: consistent checkpoints of the whole
/// job (driver, held micro-tasks, every executor's state from its node, every server
/// node's rows) and resuming from one, e.g. after the master process died. Returns what the
/// checkpoints did too. A resumed job may have more or fewer worker and server nodes than
/// the checkpointed one: the checkpoint's executors and shards are spread over the nodes
/// that joined, and its executors are restored on them from their saved states before the
/// driver starts. Carries out the commands of the
/// [`JobControl`](crate::JobControl) that `control` belongs to, as
/// [`run_job_across_controlled`] does; [`JobControl::stop`](crate::JobControl::stop) ends
/// the job with [`HarpError::Stopped`], tells every node that joined, and also ends a job
/// that still waits for its nodes.
pub async fn run_job_across_consistent<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
    failures: mpsc::UnboundedReceiver<NodeFailure>,
    control: crate::control::ControlInbox,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    run_across(app, creds, options, listening, failures, control).await
}

async fn run_across<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
    failures: mpsc::UnboundedReceiver<NodeFailure>,
    mut control: crate::control::ControlInbox,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    // The event of every scale command answered by the end is told before this returns.
    let told = control.commands_told();
    let result = run_across_body(app, creds, options, listening, failures, control).await;
    told.wait().await;
    result
}

async fn run_across_body<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    options: &ClusterOptions,
    listening: impl FnOnce(SocketAddr),
    mut failures: mpsc::UnboundedReceiver<NodeFailure>,
    control: crate::control::ControlInbox,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    options.consistent.validate()?;
    super::lease::check_lease(options.lease_timeout_ms)?;
    if options.nodes == 0 || options.executors_per_worker == 0 || options.shards_per_server == 0 {
        return Err(HarpError::InvalidConfig(
            "a job across processes needs at least one node, one executor per worker and one shard per server".into(),
        ));
    }
    let started = Instant::now();
    let identity = creds.issue_node()?;
    let endpoint = NetEndpoint::bind(
        options.listen,
        creds,
        &identity,
        super::lease::lease_transport(options.lease_timeout_ms),
    )?;
    listening(endpoint.local_addr()?);
    let job = job_id(creds);
    let counters = Arc::new(WireCounters::new());
    let courier = master_courier(&endpoint, job, &counters, options.lease_timeout_ms)?;
    let identity = AppIdentity::of(&*app);
    // Until the job starts, a stop or an exited node process ends the start; the nodes that
    // joined hear why (after a stop they exit 0). Other deaths reported meanwhile are
    // handled once the job runs.
    let stop_requested = control.stop_requested();
    tokio::pin!(stop_requested);
    let mut early_failures = Vec::new();
    let mut nodes = Vec::new();
    // Until the job runs, `harp scale` hears that it is starting; the first nodes to say
    // hello take its places, and later ones wait to join the running job.
    let (accepting, mut founders) = roster::Accepting::<A>::start(
        endpoint.clone(),
        (job, options.nodes),
        counters,
        courier.outbox.clone(),
    );
    let joined = tokio::select! {
        joined = accept_nodes(&mut founders, &identity, job, options, &mut nodes) => joined,
        why = start_interrupted(&mut stop_requested, &mut failures, &mut early_failures) => Err(why),
    };
    if let Err(e) = joined {
        return Err(not_started(&nodes, e).await);
    }

    // A node's worker and server take the node's id.
    let worker_ids: Vec<WorkerId> = nodes
        .iter()
        .filter(|n| n.roles.worker)
        .map(|n| WorkerId(n.id))
        .collect();
    let server_ids: Vec<ServerId> = nodes
        .iter()
        .filter(|n| n.roles.server)
        .map(|n| ServerId(n.id))
        .collect();
    if worker_ids.is_empty() || server_ids.is_empty() {
        let message = format!(
            "the {} nodes that joined offer {} workers and {} servers; a job needs at least one of each",
            nodes.len(),
            worker_ids.len(),
            server_ids.len()
        );
        return Err(not_started(&nodes, HarpError::InvalidConfig(message)).await);
    }
    let (num_workers, num_servers) = (worker_ids.len() as u32, server_ids.len() as u32);
    let layout = CheckpointLayout {
        workers: num_workers,
        executors_per_worker: options.executors_per_worker,
        servers: num_servers,
        shards_per_server: options.shards_per_server,
    };
    let ConsistentStart {
        layout,
        setup: mut consistent,
        executors: saved_executors,
        rows: saved_rows,
        driver: saved_driver,
        report,
    } = match consistent_start(&*app, &options.consistent, layout) {
        Ok(start) => start,
        Err(e) => return Err(not_started(&nodes, e).await),
    };
    // A resumed job has the checkpoint's executors and shards, over the nodes it has now.
    let info = JobInfo {
        num_executors: layout.num_executors(),
        num_workers,
        num_servers,
    };
    let executors = ExecutorMap::round_robin(info.num_executors, &worker_ids)?;
    let shards = ShardMap::round_robin(layout.num_shards(), &server_ids)?;
    // A resumed job's executors come from the checkpoint: the workers create none.
    let resuming = saved_driver.is_some();
    let placement = Placement {
        epoch: 1,
        num_shards: shards.num_shards(),
        shards: (0..shards.num_shards())
            .map(|s| ShardPlace {
                shard: s,
                server: shards
                    .server_of(harp_core::ShardId(s))
                    .map(|x| x.0)
                    .unwrap_or(0),
            })
            .collect(),
        servers: nodes
            .iter()
            .filter(|node| node.roles.server)
            .map(|node| ServerPlace {
                server: node.id,
                node_id: node.id,
                listen_addr: node.listen_addr.clone(),
            })
            .collect(),
    };
    for node in &nodes {
        let assignment = Assignment {
            job: JobInfoWire {
                num_executors: info.num_executors,
                num_workers,
                num_servers,
            },
            worker: node.roles.worker.then_some(node.id),
            executors: if resuming {
                Vec::new()
            } else {
                executors
                    .executors_on(WorkerId(node.id))
                    .iter()
                    .map(|e| e.0)
                    .collect()
            },
            server: node.roles.server.then_some(node.id),
            shards: shards
                .shards_on(ServerId(node.id))
                .iter()
                .map(|s| s.0)
                .collect(),
            server_recovery: options.scar.is_some(),
            worker_recovery: options.worker_recovery,
        };
        node.link.send(&Message::Assign(assignment))?;
        node.link.send(&Message::Placement(placement.clone()))?;
    }
    let ready = tokio::select! {
        ready = wait_ready(&mut nodes, options.join_timeout_ms) => ready,
        why = start_interrupted(&mut stop_requested, &mut failures, &mut early_failures) => Err(why),
    };
    if let Err(e) = ready {
        return Err(not_started(&nodes, e).await);
    }

    let driver = app
        .create_driver(&info)
        .and_then(|mut driver| {
            if let Some(state) = &saved_driver {
                driver.restore_state(state)?;
            }
            Ok(driver)
        })
        .map_err(HarpError::DriverFailed);
    let driver = match driver {
        Ok(driver) => driver,
        Err(e) => return Err(not_started(&nodes, e).await),
    };
    let (done_tx, done_rx) = oneshot::channel();
    let master = spawn(
        MasterActor::<A>::new(),
        MasterArgs {
            driver,
            info: info.clone(),
            tables: Arc::new(app.tables().clone()),
            scar: options.scar.clone(),
            worker_recovery: options.worker_recovery,
            events: control.events(),
            done: done_tx,
        },
    )
    .await?;
    let mut view = MembershipView::new(MembershipConfig::with_lease_timeout_ms(
        options.lease_timeout_ms,
    ))
    .map_err(|e| HarpError::InvalidConfig(e.to_string()))?;
    for node in &nodes {
        let info = MemberInfo::new(node.listen_addr.clone(), node.roles);
        view.handle_join(NodeId(node.id), info, now_ms(started))
            .map_err(|e| HarpError::InvalidConfig(e.to_string()))?;
    }
    // With a desired node count to follow, the roster's events also count the joins.
    let (events, joins) = match &options.desired_nodes {
        Some(_) => {
            let (events, joins) = roster::count_joins(control.events());
            (events, Some(joins))
        }
        None => (control.events(), None),
    };
    let (leaving_tx, leaving_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(RosterContext {
        roster: Arc::new(Mutex::new(Roster::new(nodes.len() as u32))),
        master: master.clone(),
        control: control.handle(),
        membership: Arc::new(Mutex::new(view)),
        started,
        identity,
        job,
        job_info: JobInfoWire {
            num_executors: info.num_executors,
            num_workers,
            num_servers,
        },
        lease_timeout_ms: options.lease_timeout_ms,
        join_timeout_ms: options.join_timeout_ms,
        launcher: options.launcher.clone(),
        events,
        leaving: leaving_tx,
        server_recovery: options.scar.is_some(),
        worker_recovery: options.worker_recovery,
        courier: courier.clone(),
    });
    let mut workers: BTreeMap<WorkerId, ActorRef<WorkerMsg<A>>> = BTreeMap::new();
    // The master reaches each node's server for hand-offs, commits, take-overs and SCAR's
    // requests (`ServerNodeProxy`); reads and flushes go node to node.
    let mut servers = BTreeMap::new();
    let mut routes = Vec::new();
    for node in nodes.iter_mut() {
        let pending = Arc::new(PendingReplies::default());
        if node.roles.worker {
            let proxy = spawn(
                WorkerProxy::<A>::new(),
                WorkerLink {
                    link: node.link.clone(),
                    pending: pending.clone(),
                    listen_addr: node.listen_addr.clone(),
                    courier: courier.clone(),
                },
            )
            .await?;
            workers.insert(WorkerId(node.id), proxy);
        }
        if node.roles.server {
            let id = ServerId(node.id);
            let take_over_wait = take_over_wait(options.lease_timeout_ms);
            let proxy = spawn(
                ServerNodeProxy,
                (id, node.link.clone(), pending.clone(), take_over_wait),
            )
            .await?;
            servers.insert(id, proxy);
        }
        routes.push(RouteTarget::Remote {
            node: node.id,
            link: node.link.clone(),
        });
        let incoming = std::mem::replace(&mut node.incoming, mpsc::unbounded_channel().1);
        roster::lock(&ctx.roster).insert(NodeEntry {
            id: node.id,
            link: node.link.clone(),
            roles: node.roles,
            pending: pending.clone(),
            holdings: holdings_of(node, &executors, &shards),
            launch_id: node.launch_id,
        });
        crate::spawn::spawn(read_node::<A>(node.id, incoming, ctx.clone(), pending));
    }
    drop(nodes);
    let outside_failures = {
        let ctx = ctx.clone();
        crate::spawn::spawn(async move {
            for failure in early_failures {
                outside_failure(&ctx, failure);
            }
            while let Some(failure) = failures.recv().await {
                outside_failure(&ctx, failure);
            }
        })
    };
    let leases = crate::spawn::spawn(watch_leases::<A>(ctx.clone()));
    let stopping = crate::spawn::spawn(crate::control::forward_stop(
        control.stop_requested(),
        master.clone(),
    ));
    let control = crate::spawn::spawn(crate::control::serve_across(
        control,
        master.clone(),
        workers.keys().copied().collect(),
        server_ids.clone(),
        started,
    ));
    accepting.run(ctx.clone());
    let leaves = crate::spawn::spawn(roster::serve_leaves(ctx.clone(), leaving_rx));
    let prepared = async {
        if resuming {
            restore_resumed_rows(
                &servers,
                &shards,
                saved_rows,
                &mut consistent,
                options.scar.is_some(),
            )
            .await?;
            adopt_saved_executors(&workers, &executors, saved_executors).await?;
        }
        if let Some(setup) = consistent {
            master
                .send_message(MasterMsg::Consistent(Box::new(setup)))
                .map_err(|_| HarpError::MasterUnreachable)?;
        }
        Ok::<(), HarpError>(())
    }
    .await;
    let started_ok = prepared.and_then(|()| {
        master
            .send_message(MasterMsg::Start {
                workers,
                executors,
                servers,
                shards,
                routes,
                server_places: placement.servers.clone(),
            })
            .map_err(|_| HarpError::MasterUnreachable)
    });
    let following = options
        .desired_nodes
        .clone()
        .zip(joins)
        .map(|(desired, joins)| {
            crate::spawn::spawn(roster::follow_desired(ctx.clone(), desired, joins))
        });

    let end = match started_ok {
        Ok(()) => done_rx.await.unwrap_or(Err(HarpError::MasterUnreachable)),
        Err(e) => Err(e),
    };
    // Nodes exit once the job ended: that is no death.
    roster::lock(&ctx.roster).end_job();
    outside_failures.abort();
    leases.abort();
    stopping.abort();
    control.abort();
    accepting.stop();
    leaves.abort();
    if let Some(following) = following {
        following.abort();
    }
    let live: Vec<(u32, Link, NodeRoles, Arc<PendingReplies>)> = roster::lock(&ctx.roster)
        .live()
        .map(|n| (n.id, n.link.clone(), n.roles, n.pending.clone()))
        .collect();
    let result = match end {
        Ok(mut end) => {
            finish_consistent_write(&mut end).await;
            // A failed collection still goes on to tell the nodes the job ended (with
            // its error): returning here would leave them waiting for the master.
            let params = if options.collect_params {
                let patience =
                    super::lease::outlasting_verdict(DUMP_DEADLINE, options.lease_timeout_ms);
                dump_params(&live, patience).await.map(Some)
            } else {
                Ok(None)
            };
            let elapsed_s = started.elapsed().as_secs_f64();
            let nodes: Vec<_> = (live.iter())
                .map(|(id, link, _, pending)| (*id, link, pending))
                .collect();
            let reports = std::mem::take(&mut roster::lock(&ctx.roster).node_reports);
            let counted = super::job_counters::collect(&nodes, reports).await;
            params.map(|params| JobOutcome {
                stats: JobStats {
                    tasks_completed: end.tasks_completed,
                    final_version: end.final_version.0,
                    elapsed_s,
                    cached_rows: counted.cached_rows as usize,
                    node: counted.node,
                    servers: counted.servers,
                    nodes_counted: counted.nodes,
                    nodes_counted_from_reports: counted.from_reports,
                    checkpoints: end.checkpoints,
                    recoveries: end.recoveries,
                    worker_recoveries: end.worker_recoveries,
                    injections: end.injections,
                    shards: end.shards,
                },
                driver: end.driver,
                params,
            })
        }
        Err(e) => Err(e),
    };
    let ended = match &result {
        Ok(_) => job_ended(true, String::new(), None),
        Err(e) => ended_by(e),
    };
    master.stop(None);
    tell_job_ended(live.iter().map(|(_, link, _, _)| link), &ended).await;
    // Closing the endpoint discards what is still queued: the `harp scale` answers go first.
    accepting.close_endpoint().await;
    let report = report.lock().unwrap_or_else(|p| p.into_inner()).clone();
    result.map(|outcome| (outcome, report))
}

/// `JobEnded` for a job that ended with `error` (a stop is told as one).
pub(super) fn ended_by(error: &HarpError) -> Message {
    match error {
        HarpError::Stopped {
            reason,
            started,
            tasks_completed,
            ..
        } => job_ended(
            false,
            reason.clone(),
            Some(harp_wire::StoppedWire {
                started: *started,
                tasks_completed: *tasks_completed,
            }),
        ),
        e => job_ended(false, e.to_string(), None),
    }
}

fn job_ended(ok: bool, message: String, stopped: Option<harp_wire::StoppedWire>) -> Message {
    Message::JobEnded {
        ok,
        message,
        stopped,
    }
}

/// Sends `ended` on each of `links`, then gives the nodes a moment (at most 2 s in all) to
/// read it and hang up before the endpoint closes.
pub(super) async fn tell_job_ended<'a>(
    links: impl Iterator<Item = &'a Link> + Clone,
    ended: &Message,
) {
    for link in links.clone() {
        let _ = link.send(ended);
    }
    let deadline = Instant::now() + Duration::from_millis(2_000);
    for link in links {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, link.connection().quic().closed()).await;
    }
}

/// The master's end of parked executor states: it dials the nodes from its own endpoint
/// with a hello of the master's.
fn master_courier(
    endpoint: &NetEndpoint,
    job: harp_wire::JobId,
    counters: &Arc<WireCounters>,
    lease_timeout_ms: u64,
) -> Result<MasterCourier, HarpError> {
    let role = NodeRole {
        master: true,
        ..NodeRole::default()
    };
    let listen_addr = endpoint.local_addr()?.to_string();
    let hello = harp_wire::hello(job, NODE_ID_UNASSIGNED, role, listen_addr);
    Ok(MasterCourier {
        dialer: StateDialer {
            endpoint: endpoint.clone(),
            hello,
            counters: counters.clone(),
            // The master's host is this one.
            master_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            lease_timeout_ms,
        },
        outbox: Arc::new(StateOutbox::default()),
    })
}

/// A resumed job: each worker node adopts its executors from the checkpoint's saved states
/// (restored there with `App::restore_executor`) before the driver starts.
async fn adopt_saved_executors<A: App>(
    workers: &BTreeMap<WorkerId, ActorRef<WorkerMsg<A>>>,
    executors: &ExecutorMap,
    mut states: BTreeMap<ExecutorId, Vec<u8>>,
) -> Result<(), HarpError> {
    let mut answers = Vec::new();
    for (executor, worker) in executors.iter() {
        let state = states.remove(&executor).ok_or_else(|| {
            HarpError::InvalidConfig(format!("the checkpoint holds no state for {executor}"))
        })?;
        let actor = workers
            .get(&worker)
            .ok_or(HarpError::WorkerUnreachable(worker))?;
        let (adopted, answer) = oneshot::channel();
        actor
            .send_message(WorkerMsg::Adopt {
                executor,
                released: ReleasedExecutor {
                    executor: ExecutorBody::Saved(state),
                    pending: Vec::new(),
                },
                adopted,
            })
            .map_err(|_| HarpError::WorkerUnreachable(worker))?;
        answers.push((worker, answer));
    }
    for (worker, answer) in answers {
        answer
            .await
            .map_err(|_| HarpError::WorkerUnreachable(worker))??;
    }
    Ok(())
}

/// Handles a death reported from outside the job's links while the job runs.
fn outside_failure<A: App>(ctx: &RosterContext<A>, failure: NodeFailure) {
    match failure {
        NodeFailure::Seen { node, seen } => node_died(ctx, node, &seen),
        NodeFailure::Exited { launch_id, how } => {
            let node = roster::lock(&ctx.roster).launched_as(launch_id);
            match node {
                Some(node) => node_died(ctx, node, &format!("its process exited ({how})")),
                None => tracing::debug!(
                    launch_id,
                    %how,
                    "a launched process exited that runs no node of the job (any more)"
                ),
            }
        }
    }
}

/// Reads one node's link for the master: completions, failures, heartbeats, replies, a
/// request to leave. Every message renews the node's lease. A closed link is a death unless
/// the node left the job.
pub(crate) async fn read_node<A: App>(
    node: u32,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    ctx: Arc<RosterContext<A>>,
    pending: Arc<PendingReplies>,
) {
    let master = &ctx.master;
    let cause = loop {
        let message = match incoming.recv().await {
            Some(Ok(message)) => message,
            Some(Err(e)) => break e.to_string(),
            None => break "its connection closed".to_string(),
        };
        {
            let mut view = ctx.membership.lock().unwrap_or_else(|p| p.into_inner());
            // A node already declared dead stays dead (the lease watcher reported it).
            let _ = view.handle_heartbeat(NodeId(node), now_ms(ctx.started));
        }
        let Some(message) = pending.resolve(message) else {
            continue;
        };
        match message {
            Message::Completed { completions } => match completions_from_wire::<A>(completions) {
                Ok(c) => {
                    let _ = master.send_message(MasterMsg::Completed(c));
                }
                Err(e) => {
                    let _ = master.send_message(MasterMsg::Failed(e));
                }
            },
            Message::FlushStaged {
                flush_id,
                servers,
                completions,
            } => match completions_from_wire::<A>(completions) {
                Ok(completions) => {
                    let _ = master.send_message(MasterMsg::FlushStaged {
                        node,
                        flush: flush_id,
                        servers: servers.into_iter().map(ServerId).collect(),
                        completions,
                    });
                }
                Err(e) => {
                    let _ = master.send_message(MasterMsg::Failed(e));
                }
            },
            // A node declared dead is no part of the job any more (its tasks may run again
            // elsewhere): what it still says does not end the job.
            Message::Failed { .. } if roster::lock(&ctx.roster).is_gone(node) => {}
            Message::Failed {
                message,
                unreachable_server,
            } => {
                match unreachable_server {
                    // The lost server's node most likely died: its death is the cause.
                    Some(server) => {
                        let lost = (node, server);
                        crate::spawn::spawn(report_after_verdict(ctx.clone(), lost, message));
                    }
                    None => {
                        let failure = HarpError::Remote(format!("node {node}: {message}"));
                        let _ = master.send_message(MasterMsg::Failed(failure));
                    }
                }
            }
            Message::ServerAwaited { server } => {
                crate::spawn::spawn(peer_lost_unless_gone(ctx.clone(), (node, server)));
            }
            Message::Leaving { .. } => {
                let _ = ctx.leaving.send(node);
            }
            Message::StatsReport { counters } => match super::job_counters::decode(&counters) {
                Ok(counters) => roster::lock(&ctx.roster)
                    .node_reports
                    .reported(node, counters),
                Err(e) => {
                    tracing::warn!(node, error = %e, "a node's report of its counters is ignored")
                }
            },
            Message::Heartbeat { .. } => {}
            other => tracing::debug!(node, kind = ?other.kind(), "ignored from a node"),
        }
    };
    // The death first (with worker recovery, the master hears of it before the replies
    // this fails), then the replies of a node that left, which `node_died` passes over.
    node_died(&ctx, node, &cause);
    pending.fail_all();
}

/// Ticks the membership view at its next lease deadline and reports every death (a node
/// that left is no longer in the view).
async fn watch_leases<A: App>(ctx: Arc<RosterContext<A>>) {
    loop {
        let now = now_ms(ctx.started);
        let (next, died) = {
            let mut view = ctx.membership.lock().unwrap_or_else(|p| p.into_inner());
            view.tick(now);
            let mut died = Vec::new();
            while let Some(event) = view.poll_event() {
                if let MembershipEvent::Died {
                    node,
                    last_seen_ms,
                    detected_at_ms,
                    ..
                } = event
                {
                    died.push((node, detected_at_ms.saturating_sub(last_seen_ms)));
                }
            }
            (view.next_deadline_ms(), died)
        };
        for (node, silent_ms) in died {
            let cause = format!("its lease expired after {silent_ms} ms without a heartbeat");
            node_died(&ctx, node.0, &cause);
        }
        // With no member left to watch, look again later (a node may join).
        let wait = match next {
            Some(next) => next.saturating_sub(now_ms(ctx.started)).max(1),
            None => ctx.lease_timeout_ms.max(1),
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// What a node holds, for the report of its death.
fn holdings_of(node: &JoinedNode, executors: &ExecutorMap, shards: &ShardMap) -> String {
    let id = node.id;
    let mut parts = Vec::new();
    if node.roles.worker {
        let n = executors.executors_on(WorkerId(id)).len();
        parts.push(format!("worker-{id} with {n} executors"));
    }
    if node.roles.server {
        let n = shards.shards_on(ServerId(id)).len();
        parts.push(format!("server-{id} with {n} shards"));
    }
    parts.join(" and ")
}

/// How long the master waits for one node's final parameter dump (a whole server's rows);
/// under a lease over 59 s, a lease and a second (`lease::outlasting_verdict`).
const DUMP_DEADLINE: Duration = Duration::from_secs(60);

/// The live server nodes' final parameters, each waited for `patience` at most.
async fn dump_params(
    nodes: &[(u32, Link, NodeRoles, Arc<PendingReplies>)],
    patience: Duration,
) -> Result<ParamDump, HarpError> {
    let mut dump = ParamDump::default();
    for (id, link, roles, pending) in nodes {
        if !roles.server {
            continue;
        }
        let (tx, rx) = oneshot::channel();
        let request_id = pending.register(Pending::Dump(InParts::new(tx)));
        link.send(&Message::Dump {
            request_id,
            server: *id,
        })?;
        let rows = match tokio::time::timeout(patience, rx).await {
            Ok(Ok(rows)) => rows,
            Ok(Err(_)) => {
                return Err(HarpError::NodeDied {
                    node: *id,
                    detail: "it went away during the final dump".into(),
                })
            }
            Err(_) => {
                return Err(HarpError::Remote(format!(
                    "node {id} did not send its parameters within {} s",
                    patience.as_secs()
                )))
            }
        };
        dump.rows.extend(rows);
    }
    Ok(dump)
}
