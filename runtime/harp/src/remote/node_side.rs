//! A node process: joins the master, hosts the worker and the server it is assigned, talks to
//! the other nodes' servers through proxies, and serves its own server to them. Every node
//! also serves the executor states it parked for a move to the nodes that fetch them
//! ([`super::state_transfer`]).

use super::executor_moves::{
    recreate_executor, release_executor, save_executor, take_executor, Adoption, Rebuild,
};
use super::fault_delays::{fault_delay, JOIN_DELAY_VAR, STAGED_REPORT_DELAY_VAR};
use super::greeting::{greet, HELLO_WAIT};
use super::identity::AppIdentity;
use super::job_id;
use super::lease;
use super::listen_addr::{check_bind_reaches, dialable};
use super::proxies::{serve_server_request, tasks_from_wire, MasterProxy};
use super::row_parts::KeysInParts;
use super::server_links::{
    drain_server, forget_server, hand_off_shard, reach_new_servers, relocate_shard, Dialer, Orders,
    PassedOver, ServerProxies,
};
use super::state_transfer::{StateDialer, StateOutbox};
use crate::app::{App, JobInfo};
use crate::error::HarpError;
use crate::job::{create_executors, spawn};
use crate::node::{ParamStore, Routing, DEFAULT_REQUEST_DEADLINE, SERVER_RECOVERY_WAIT};
use crate::server::{ServerActor, ServerMsg};
use crate::worker::{NodeShared, StagedFlushes, WorkerActor, WorkerArgs, WorkerMsg};
use harp_core::{ExecutorId, FlushBook, NodeRoles, ServerId, ShardId, ShardMap, WorkerId};
use harp_net::{Incoming, JobCredentials, Link, NetEndpoint, TransportConfig};
use harp_wire::{
    check_welcome, Assignment, FrameLimits, Message, NodeRole, Placement, WireCounters,
    NODE_ID_UNASSIGNED,
};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

async fn next_message(
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    what: &str,
) -> Result<Message, HarpError> {
    match tokio::time::timeout(Duration::from_secs(30), incoming.recv()).await {
        Ok(Some(Ok(Message::Refused { reason }))) => Err(HarpError::Remote(format!(
            "the master refused this node: {reason}"
        ))),
        // The job will not run (its master could not set it up): the master's reason.
        Ok(Some(Ok(Message::Shutdown { reason }))) => Err(HarpError::Remote(format!(
            "shut down by the master before the job started: {reason}"
        ))),
        // The job was stopped before it started.
        Ok(Some(Ok(Message::JobEnded {
            message,
            stopped: Some(stopped),
            ..
        }))) => Err(stopped_by_master(message, stopped)),
        Ok(Some(Ok(message))) => Ok(message),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(None) => Err(HarpError::Remote(format!(
            "the master hung up while this node waited for {what}"
        ))),
        Err(_) => Err(HarpError::Remote(format!(
            "no {what} from the master within 30 s"
        ))),
    }
}

/// The master's stop, as this node reports it: the same [`HarpError::Stopped`] (reason, how
/// far the job got).
fn stopped_by_master(reason: String, stopped: harp_wire::StoppedWire) -> HarpError {
    HarpError::Stopped {
        reason,
        started: stopped.started,
        tasks_completed: stopped.tasks_completed,
        checkpoints: None,
    }
}

/// How long a node that cannot start waits for the master to hang up after telling it why.
const FAILED_ACK_WAIT: Duration = Duration::from_secs(2);

/// Tells the master why this node cannot take part (`error`), and waits a bounded time for it
/// to hang up, which it does once it has read that: a process that exits at once may take
/// the message with it, and the master then waits out its join deadline not knowing why.
async fn tell_master_failed(master_link: &Link, error: &HarpError) {
    let failed = Message::Failed {
        message: error.to_string(),
        unreachable_server: None,
    };
    if master_link.send(&failed).is_ok() {
        let closed = master_link.connection().quic().closed();
        let _ = tokio::time::timeout(FAILED_ACK_WAIT, closed).await;
    }
}

/// Joins the job whose master listens at `join`, runs what the master assigns, and returns
/// when the job ends: `Ok` if it ended well, [`HarpError::Stopped`] (the master's reason and
/// count) if the master's job was stopped.
///
/// The node listens for the other nodes at `bind` ([`default_bind`](crate::default_bind)
/// of `join`: every interface, so that nodes on other hosts reach it). A `bind` from which
/// the master cannot be reached (a loopback address for a master on another host) is
/// refused with [`HarpError::InvalidConfig`]; a `join` with a wildcard IP (`0.0.0.0:7000`)
/// dials this host.
pub async fn run_node<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    join: SocketAddr,
    bind: IpAddr,
) -> Result<(), HarpError> {
    run_node_with(app, creds, join, bind, NodeRoles::BOTH, |_| {}).await
}

/// [`run_node`] offering only `roles` (a worker, a server, or both), calling `joined` with
/// the node id the master assigned (e.g. to register the node with an outside membership
/// service).
pub async fn run_node_with<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    join: SocketAddr,
    bind: IpAddr,
    roles: NodeRoles,
    joined: impl FnOnce(u32),
) -> Result<(), HarpError> {
    run_node_leaving(
        app,
        creds,
        join,
        bind,
        roles,
        joined,
        std::future::pending(),
    )
    .await
}

/// [`run_node_with`], leaving the job gracefully once `leave` completes (e.g. on SIGTERM):
/// the node tells the master, which moves its executors and shards to the other nodes and
/// then dismisses it; it returns `Ok` once dismissed. If the node holds the job's last
/// worker or last server, the master says so and the node keeps serving until a node that
/// can take its load joins; then it leaves as above. If the master refuses for another
/// reason, the node logs why and keeps serving.
pub async fn run_node_leaving<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    join: SocketAddr,
    bind: IpAddr,
    roles: NodeRoles,
    joined: impl FnOnce(u32),
    leave: impl std::future::Future<Output = ()>,
) -> Result<(), HarpError> {
    if !roles.worker && !roles.server {
        return Err(HarpError::InvalidConfig(
            "a node must offer a worker, a server or both".into(),
        ));
    }
    let join = dialable(join);
    check_bind_reaches(bind, join)?;
    let job = job_id(creds);
    let identity = creds.issue_node()?;
    // Until the welcome says the job's lease, an idle timeout that does not cut the
    // master's short (QUIC takes the shorter of the two ends'): the master link's is the
    // lease the master set.
    let endpoint = NetEndpoint::bind(
        SocketAddr::new(bind, 0),
        creds,
        &identity,
        TransportConfig {
            idle_timeout_ms: IDLE_TIMEOUT_BEFORE_WELCOME_MS,
            ..TransportConfig::default()
        },
    )?;
    let listen_addr = endpoint.local_addr()?;
    let counters = Arc::new(WireCounters::new());
    let limits = FrameLimits::default();
    let role = NodeRole {
        worker: roles.worker,
        server: roles.server,
        master: false,
    };
    let hello = |node_id| harp_wire::hello(job, node_id, role, listen_addr.to_string());
    if let Some(delay) = fault_delay(JOIN_DELAY_VAR) {
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            "fault injection: joining the job late"
        );
        tokio::time::sleep(delay).await;
    }
    let conn = endpoint.connect(join).await?;
    let (master_link, mut from_master) =
        Link::open(conn, &hello(NODE_ID_UNASSIGNED), limits, counters.clone()).await?;
    let welcome = match next_message(&mut from_master, "a welcome").await? {
        Message::Welcome(w) => w,
        other => {
            return Err(HarpError::Remote(format!(
                "expected a welcome, got {:?}",
                other.kind()
            )))
        }
    };
    check_welcome(&welcome, job).map_err(|e| HarpError::Remote(e.to_string()))?;
    // Links to the other nodes break after the job's lease of silence too, not sooner, and
    // a dial waits for a peer silent for less than the lease.
    endpoint.set_transport(&node_transport(welcome.lease_timeout_ms))?;
    if let Err(e) = AppIdentity::of(&*app).check(&welcome) {
        tell_master_failed(&master_link, &e).await;
        return Err(e);
    }
    let me = welcome.assigned_node_id;
    joined(me);
    let assignment = match next_message(&mut from_master, "an assignment").await? {
        Message::Assign(a) => a,
        other => {
            return Err(HarpError::Remote(format!(
                "expected an assignment, got {:?}",
                other.kind()
            )))
        }
    };
    let placement = match next_message(&mut from_master, "the placement").await? {
        Message::Placement(p) => p,
        other => {
            return Err(HarpError::Remote(format!(
                "expected the placement, got {:?}",
                other.kind()
            )))
        }
    };
    let outbox = Arc::new(StateOutbox::default());
    let dialer = Dialer {
        peers: StateDialer {
            endpoint: endpoint.clone(),
            hello: hello(me),
            counters: counters.clone(),
            master_ip: join.ip(),
            lease_timeout_ms: welcome.lease_timeout_ms,
        },
        me,
        master_addr: join,
    };
    let started = start_node(
        app.clone(),
        &assignment,
        &placement,
        (me, job, welcome.lease_timeout_ms),
        master_link.clone(),
        &dialer,
        outbox.clone(),
    )
    .await;
    let (worker, node, servers, store) = match started {
        Ok(parts) => parts,
        Err(e) => {
            tell_master_failed(&master_link, &e).await;
            return Err(e);
        }
    };
    master_link.send(&Message::Ready {
        node_id: me,
        launch_id: launch_id(),
    })?;
    tracing::info!(
        node = me,
        worker = ?assignment.worker,
        executors = assignment.executors.len(),
        server = ?assignment.server,
        shards = assignment.shards.len(),
        "joined the job"
    );
    let heartbeat = {
        let link = master_link.clone();
        let every = Duration::from_millis(welcome.heartbeat_interval_ms.max(10));
        crate::spawn::spawn(async move {
            let mut seq = 0;
            loop {
                tokio::time::sleep(every).await;
                seq += 1;
                if link
                    .send(&Message::Heartbeat {
                        node_id: me,
                        lease_seq: seq,
                    })
                    .is_err()
                {
                    return;
                }
            }
        })
    };
    let info = JobInfo {
        num_executors: assignment.job.num_executors,
        num_workers: assignment.job.num_workers,
        num_servers: assignment.job.num_servers,
    };
    let local_server = servers.get(&ServerId(me)).cloned();
    // Its counters, unasked, in case it dies (`job_counters.rs`).
    let reports = crate::spawn::spawn(super::job_counters::report_every(
        master_link.clone(),
        store.clone(),
        local_server.clone(),
    ));
    let mut servers = servers;
    let result = serve_master::<A>(
        &mut from_master,
        (&worker, &node),
        local_server.as_ref(),
        (&master_link, me, leave),
        (&app, &info),
        (&store, &mut servers, &dialer, &outbox),
    )
    .await;
    heartbeat.abort();
    reports.abort();
    let parked_wait = lease::outlasting_verdict(PARKED_WAIT, welcome.lease_timeout_ms);
    if outbox.waiting() > 0 && !outbox.wait_empty(parked_wait).await {
        tracing::warn!(
            node = me,
            states = outbox.waiting(),
            "exiting with executor states nobody fetched"
        );
    }
    let wire = counters.snapshot();
    tracing::info!(
        node = me,
        frames_decoded = wire.frames_decoded,
        payload_bytes = wire.payload_bytes_decoded,
        frames_by_kind = ?wire.frames_by_kind,
        "node done"
    );
    worker.stop(None);
    for server in servers.values() {
        server.stop(None);
    }
    // The master and the other nodes hear of the close now, not after their idle timeout.
    endpoint.close_and_drain(CLOSE_DRAIN_WAIT).await;
    result
}

/// How long a node that is done waits for its connections' closes to go out.
const CLOSE_DRAIN_WAIT: Duration = Duration::from_millis(500);

type Started<A> = (
    ActorRef<WorkerMsg<A>>,
    Arc<NodeShared<A>>,
    ServerProxies,
    Arc<ParamStore>,
);

/// How long a node that is done waits for the executor states it parked to be fetched
/// (under a long lease, a lease and a second: `lease::outlasting_verdict`).
const PARKED_WAIT: Duration = Duration::from_secs(30);

async fn start_node<A: App>(
    app: Arc<A>,
    assignment: &Assignment,
    placement: &Placement,
    (me, job, lease_timeout_ms): (u32, harp_wire::JobId, u64),
    master_link: Link,
    dialer: &Dialer,
    outbox: Arc<StateOutbox>,
) -> Result<Started<A>, HarpError> {
    let tables = Arc::new(app.tables().clone());
    let mut servers: ServerProxies = BTreeMap::new();
    let mut local_servers = BTreeMap::new();
    if let Some(server) = assignment.server {
        let id = ServerId(server);
        let actor = spawn(ServerActor, (id, tables.clone())).await?;
        local_servers.insert(id, actor.clone());
        servers.insert(id, actor);
    }
    // Serve the local server, and parked executor states, to the other nodes.
    let local = local_servers.values().next().cloned();
    accept_peers(
        &dialer.peers.endpoint,
        local,
        outbox,
        dialer.peers.counters.clone(),
        job,
    );
    // Reach every other server through a proxy, all dialled at once.
    let others =
        (placement.servers.iter()).filter(|place| !servers.contains_key(&ServerId(place.server)));
    let dials = others.map(|place| async move {
        let id = ServerId(place.server);
        Ok::<_, HarpError>((id, dialer.connect(id, &place.listen_addr).await?))
    });
    let proxies = futures::future::try_join_all(dials).await?;
    servers.extend(proxies);
    let server_ids: Vec<ServerId> = servers.keys().copied().collect();
    let mut shard_map = ShardMap::round_robin(placement.num_shards, &server_ids)?;
    for place in &placement.shards {
        shard_map.assign(ShardId(place.shard), ServerId(place.server))?;
    }
    let store = ParamStore::new(
        tables,
        Routing {
            shard_map,
            servers: servers.clone(),
        },
    )
    .with_node_id(me)
    .with_request_deadline(request_deadline(lease_timeout_ms))
    .with_reroute_wait(lease::reroute_wait(SERVER_RECOVERY_WAIT, lease_timeout_ms));
    // With SCAR's running checkpoint the master recovers failed servers: a flush part or a
    // read a failed server left unanswered goes to its shards' new owners, and what each
    // server acknowledged since each row's last save is kept for the report of its loss
    // (not with staged flushes: a staged part is applied at its commit, at an epoch this
    // node never hears of). A job that recovers worker nodes waits too, without SCAR: no
    // recovery comes for a dead server's node (the job ends), but where the server's node
    // is alive and only the link to it broke, the master evicts this node if it holds no
    // server, and its tasks run again elsewhere; failing the task instead would end the
    // job, and its partial updates would stay in the update log for a later flush.
    let store = match (assignment.server_recovery, assignment.worker_recovery) {
        (true, false) => store.awaiting_lost_servers().with_lost_ledger(),
        (_, true) => store.awaiting_lost_servers(),
        (false, false) => store,
    };
    // A server whose traffic waits for a recovery: the master has the verdict on its node
    // (dead, and recovered; or alive, cut off from this node only: one of the two evicted,
    // or the job ends).
    let awaited_link = master_link.clone();
    let store = store.on_server_awaited(Box::new(move |server: ServerId| {
        let _ = awaited_link.send(&Message::ServerAwaited { server: server.0 });
    }));
    let store = Arc::new(store);
    let master = spawn(MasterProxy::<A>::new(), master_link).await?;
    let info = JobInfo {
        num_executors: assignment.job.num_executors,
        num_workers: assignment.job.num_workers,
        num_servers: assignment.job.num_servers,
    };
    let executors = create_executors(
        &*app,
        &assignment.executor_ids().collect::<Vec<_>>(),
        &info,
        None,
    )?;
    let node = Arc::new(NodeShared {
        store: store.clone(),
        book: Mutex::new(FlushBook::new()),
        master,
        // The master recovers dead worker nodes: flushes are staged and it commits them.
        staging: assignment
            .worker_recovery
            .then(|| StagedFlushes::new(me).with_report_delay(staged_report_delay())),
        executors_on: crate::executor_runtime::ExecutorRuntime::for_node(
            assignment.worker.is_some(),
        )?,
    });
    let worker = spawn(
        WorkerActor::<A>::new(),
        WorkerArgs {
            id: WorkerId(assignment.worker.unwrap_or(me)),
            executors,
            node: node.clone(),
        },
    )
    .await?;
    Ok((worker, node, servers, store))
}

/// How long a node's reads and flushes wait for a server's answer in a job whose lease is
/// `lease_timeout_ms`: [`DEFAULT_REQUEST_DEADLINE`], or a lease and a second when that is
/// longer (when the master would declare a silent node dead), so a server silent for less
/// than the lease (a long pause, a network hiccup) fails no request.
fn request_deadline(lease_timeout_ms: u64) -> Duration {
    lease::outlasting_verdict(DEFAULT_REQUEST_DEADLINE, lease_timeout_ms)
}

/// A node's transport once it knows the job's lease: the job's links
/// ([`lease_transport`](super::lease::lease_transport)), and a dial that gives up after the
/// default 3 s or the lease when that is longer.
fn node_transport(lease_timeout_ms: u64) -> TransportConfig {
    let links = lease::lease_transport(lease_timeout_ms);
    TransportConfig {
        connect_timeout_ms: links.connect_timeout_ms.max(lease_timeout_ms),
        ..links
    }
}

/// The idle timeout of a node's endpoint until the master's welcome says the job's lease
/// (after which its links break after a lease of silence, as the master's do): long enough
/// never to cut the master link's idle timeout, the lease, short.
const IDLE_TIMEOUT_BEFORE_WELCOME_MS: u64 = 3_600_000;

/// [`STAGED_REPORT_DELAY_VAR`]'s delay, said once when there is one.
fn staged_report_delay() -> Option<Duration> {
    let delay = fault_delay(STAGED_REPORT_DELAY_VAR)?;
    tracing::warn!(
        node_delay_ms = delay.as_millis() as u64,
        "fault injection: staged flushes are reported late"
    );
    Some(delay)
}

/// What the launcher of this node's process named it ([`NODE_LAUNCH_ID_VAR`]), told to the
/// master with `Ready`: 0 (none) when unset; a value that is not a number greater than 0 is
/// reported and taken as none.
fn launch_id() -> u64 {
    let Ok(value) = std::env::var(NODE_LAUNCH_ID_VAR) else {
        return 0;
    };
    match value.trim().parse::<u64>() {
        Ok(id) if id > 0 => id,
        _ => {
            tracing::warn!(
                var = NODE_LAUNCH_ID_VAR,
                %value,
                "not a launch id (a number greater than 0); this process's exit will not be reported to the job"
            );
            0
        }
    }
}

/// The environment variable a launcher of node processes (`harp run --processes`) sets to
/// a number of its choosing, unique among the processes it starts, before it starts one:
/// the node tells the master, and the launcher's report that the process exited
/// ([`NodeFailure::Exited`](crate::NodeFailure::Exited)) then names that node, whose death
/// the master handles at once instead of after its lease timeout.
pub const NODE_LAUNCH_ID_VAR: &str = "HARP_NODE_LAUNCH_ID";

/// Accepts links from other nodes: serves the local server (if any) and the executor states
/// parked in `outbox` on each.
pub(super) fn accept_peers(
    endpoint: &NetEndpoint,
    local: Option<ActorRef<ServerMsg>>,
    outbox: Arc<StateOutbox>,
    counters: Arc<WireCounters>,
    job: harp_wire::JobId,
) {
    let endpoint = endpoint.clone();
    crate::spawn::spawn(async move {
        // Each handshake on a task of its own: a peer that stalls in it holds up no other
        // peer's dial (which gives up after its own deadline).
        while let Some(handshaking) = endpoint.accept_handshaking().await {
            let (local, outbox, counters) = (local.clone(), outbox.clone(), counters.clone());
            crate::spawn::spawn(async move {
                let Ok(conn) = handshaking.finish().await else {
                    return;
                };
                let Some(greeted) = greet(conn, counters, HELLO_WAIT).await else {
                    return;
                };
                if harp_wire::check_hello(&greeted.hello, job).is_ok() {
                    serve_peer(greeted.link, greeted.incoming, local, outbox).await
                } else {
                    greeted.link.close("expected a hello of this job")
                }
            });
        }
    });
}

/// Serves one peer's link until it closes.
async fn serve_peer(
    link: Link,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    local: Option<ActorRef<ServerMsg>>,
    outbox: Arc<StateOutbox>,
) {
    let mut keys_in_parts = KeysInParts::default();
    while let Some(Ok(message)) = incoming.recv().await {
        match (message, &local) {
            (
                Message::FetchState {
                    request_id,
                    transfer,
                },
                _,
            ) => outbox.spawn_serve_fetch(&link, request_id, transfer),
            (message, Some(server)) => {
                if !serve_server_request((&link, &mut keys_in_parts), message, server) {
                    return;
                }
            }
            (message, None) => {
                tracing::debug!(kind = ?message.kind(), "a server request to a node without a server");
                link.close("this node has no server");
                return;
            }
        }
    }
}

/// What a node uses to carry out the master's orders: its parameter store, its links to the
/// servers, its dialer, and the executor states it parked.
type Plumbing<'a> = (
    &'a Arc<ParamStore>,
    &'a mut ServerProxies,
    &'a Dialer,
    &'a Arc<StateOutbox>,
);

/// Runs the master's orders until the job ends.
async fn serve_master<A: App>(
    from_master: &mut mpsc::UnboundedReceiver<Incoming>,
    (worker, node): (&ActorRef<WorkerMsg<A>>, &Arc<NodeShared<A>>),
    local_server: Option<&ActorRef<ServerMsg>>,
    (master_link, me, leave): (&Link, u32, impl std::future::Future<Output = ()>),
    (app, info): (&Arc<A>, &JobInfo),
    (store, servers, dialer, outbox): Plumbing<'_>,
) -> Result<(), HarpError> {
    let mut leave = std::pin::pin!(leave);
    let mut leaving = false;
    let mut keys_in_parts = KeysInParts::default();
    let mut passed_over = PassedOver::default();
    let mut in_hand: u64 = 0;
    loop {
        let next = tokio::select! {
            next = from_master.recv() => next,
            () = &mut leave, if !leaving => {
                leaving = true;
                tracing::info!(node = me, "leaving the job: asking the master to move this node's load away");
                master_link.send(&Message::Leaving { node_id: me })?;
                continue;
            }
        };
        let message = match next {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(HarpError::Remote(format!("lost the master: {e}"))),
            None => return Err(HarpError::Remote("lost the master".into())),
        };
        in_hand += 1;
        let orders = Orders {
            in_hand,
            queue: from_master,
        };
        match message {
            Message::RunTasks { tasks } => {
                let tasks = tasks_from_wire::<A>(tasks)?;
                worker
                    .send_message(WorkerMsg::Run(tasks))
                    .map_err(|_| HarpError::Remote("the worker stopped".into()))?;
            }
            Message::SaveExecutor {
                request_id,
                executor,
            } => save_executor(
                worker,
                (master_link, outbox),
                request_id,
                ExecutorId(executor),
            )?,
            Message::ReleaseExecutor {
                request_id,
                executor,
            } => release_executor(
                worker,
                master_link,
                outbox,
                request_id,
                ExecutorId(executor),
            )?,
            Message::AdoptExecutor {
                request_id,
                executor,
                state,
                fetch,
                pending,
            } => {
                let adoption = Adoption {
                    request_id,
                    executor: ExecutorId(executor),
                    pending: tasks_from_wire::<A>(pending)?,
                };
                take_executor(
                    (worker, master_link),
                    (app, info),
                    dialer,
                    (adoption, Rebuild::Moved),
                    (state, fetch),
                )?;
            }
            Message::CreateExecutor {
                request_id,
                executor,
                from_checkpoint,
                state,
                fetch,
            } => recreate_executor(
                (worker, master_link),
                (app, info),
                dialer,
                (me, request_id, ExecutorId(executor)),
                (from_checkpoint, (state, fetch)),
            )?,
            Message::HandOffShard {
                request_id,
                shard,
                num_shards,
                to_server,
            } => {
                let to_server = ServerId(to_server);
                passed_over
                    .reach_again(to_server, (store, servers, dialer), &orders)
                    .await;
                hand_off_shard(
                    local_server,
                    servers,
                    master_link,
                    request_id,
                    (ShardId(shard), num_shards, to_server),
                )
            }
            Message::Reroute { shard, server } => {
                let server = ServerId(server);
                passed_over
                    .reach_again(server, (store, servers, dialer), &orders)
                    .await;
                store.reroute(ShardId(shard), server)?;
            }
            Message::ShardRelocated {
                server,
                shard,
                to_server,
            } => {
                let to_id = ServerId(to_server);
                passed_over
                    .reach_again(to_id, (store, servers, dialer), &orders)
                    .await;
                relocate_shard(
                    local_server,
                    servers,
                    ServerId(server),
                    (ShardId(shard), to_id),
                );
            }
            Message::ServerLost { server } => {
                tracing::warn!(%server, "a server failed; its shards were re-created on the others");
                passed_over.forget(ServerId(server));
                forget_server(store, servers, ServerId(server));
            }
            Message::ServerLeft { server } => {
                tracing::debug!(%server, "a server left the job; its link is closed");
                passed_over.forget(ServerId(server));
                forget_server(store, servers, ServerId(server));
            }
            Message::RowsSaved {
                server,
                epoch,
                keys,
                applied,
            } => {
                let keys: Vec<harp_core::ParamKey> = keys.into_iter().map(Into::into).collect();
                let applied = super::codec::applied_from_wire(&applied);
                store.rows_saved(ServerId(server), epoch, &keys, &applied);
            }
            Message::LostUpdatesQuery { request_id, server } => {
                let link = master_link.clone();
                let lost = store.lost_updates(ServerId(server));
                crate::spawn::spawn(async move {
                    super::row_parts::answer_lost_updates(&link, request_id, lost).await
                });
            }
            message @ (Message::CheckpointDistances { .. }
            | Message::CheckpointSave { .. }
            | Message::ResetRows { .. }
            | Message::TakeOverShard { .. }
            | Message::CommitFlush { .. }
            | Message::DropStaged { .. }) => match local_server {
                Some(server) => {
                    if !serve_server_request((master_link, &mut keys_in_parts), message, server) {
                        tracing::warn!(node = me, "the local server stopped");
                    }
                }
                // Its reply is never sent: the master sees the request fail with the link.
                None => {
                    tracing::warn!(node = me, kind = ?message.kind(), "a server request to a node without a server")
                }
            },
            Message::Placement(placement) => {
                let passed = (&mut passed_over, &orders);
                reach_new_servers(&placement, (store, servers, dialer), passed).await;
            }
            Message::DrainServer { request_id, server } => {
                drain_server(servers, node, request_id, ServerId(server));
            }
            Message::Refused { reason } => {
                tracing::warn!(node = me, %reason, "the master did not let this node leave now; it keeps serving");
            }
            Message::StatsQuery { request_id } => {
                let (link, store) = (master_link.clone(), store.clone());
                let server = local_server.cloned();
                crate::spawn::spawn(async move {
                    let counters = super::job_counters::of_this_node(&store, server.as_ref()).await;
                    super::job_counters::answer(&link, request_id, &counters);
                });
            }
            Message::Dump { request_id, .. } => {
                let Some(server) = local_server else { continue };
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = server.send_message(ServerMsg::Dump { reply: tx });
                let link = master_link.clone();
                crate::spawn::spawn(async move {
                    if let Ok(rows) = rx.await {
                        let rows = super::codec::rows_to_wire(rows);
                        super::row_parts::send_dump(&link, request_id, rows).await;
                    }
                });
            }
            Message::JobEnded {
                ok,
                message,
                stopped,
            } => {
                master_link.close("job ended");
                return match (ok, stopped) {
                    (true, _) => Ok(()),
                    (false, Some(stopped)) => Err(stopped_by_master(message, stopped)),
                    (false, None) => Err(HarpError::Remote(format!(
                        "the master ended the job: {message}"
                    ))),
                };
            }
            Message::Shutdown { reason } => {
                master_link.close("shutdown");
                return Err(HarpError::Remote(format!(
                    "shut down by the master: {reason}"
                )));
            }
            other => tracing::debug!(kind = ?other.kind(), "ignored from the master"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_ten_seconds_or_a_lease_and_a_second_when_that_is_longer() {
        assert_eq!(request_deadline(3_000), Duration::from_secs(10));
        assert_eq!(request_deadline(9_000), Duration::from_secs(10));
        assert_eq!(request_deadline(30_000), Duration::from_secs(31));
    }
}
