//! Driving a running job from outside: grow it, shrink it, re-balance it, stop it.
//!
//! [`job_control`] makes a [`JobControl`] (kept by the caller, cloneable) and a
//! [`ControlInbox`] (handed to [`run_job_controlled`](crate::run_job_controlled) and the
//! other `*_controlled` runs). Every scale command is one scale event on the master: new
//! workers and servers join empty and get load by a re-balancing; removed ones give theirs
//! away and then take no more. One scale event runs at a time; a command issued while
//! another runs is refused with a clear error. [`JobControl::stop`] ends the job at once
//! with [`HarpError::Stopped`], also while it still starts (e.g. `harp run` on SIGTERM).
//! [`ControlInbox::with_events`] has the job tell its caller each [`JobEvent`] (scale
//! events, injected faults, recoveries) as it happens (`control/events.rs`).

use crate::app::App;
use crate::error::HarpError;
use crate::job::spawn;
use crate::master::{MasterMsg, ScaleReport};
use crate::scar::ServerRecovery;
use crate::server::ServerActor;
use crate::table::TableSet;
use crate::worker::{NodeShared, WorkerActor, WorkerArgs, WorkerMsg};
pub(crate) use events::EventSink;
pub use events::JobEvent;
use harp_core::{ServerId, WorkerId};
use live::LiveSet;
use ractor::ActorRef;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};

mod events;
mod live;
#[cfg(test)]
mod tests;

type Reply<T> = oneshot::Sender<Result<T, HarpError>>;

/// One scale event, as the metrics file records it: a node process joined or left a job
/// across processes, or a command of a [`JobControl`] was carried out or refused (in one
/// process or across processes).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScaleEvent {
    /// Always `"scale"`, to tell these lines from the app's.
    pub event: &'static str,
    /// `"join"` or `"leave"` for a node process; for a command: `"scale-out"`,
    /// `"scale-in"` or `"rebalance"`.
    pub cause: &'static str,
    /// The node that joined or left (`None` for a command).
    pub node: Option<u32>,
    /// Seconds from the start of the job to the start of the event.
    pub at_s: f64,
    /// Seconds the event took (for a leave: until its load had moved).
    pub duration_s: f64,
    pub ok: bool,
    pub error: Option<String>,
    /// What moved: counts, bytes, and every move.
    pub report: ScaleReport,
}

impl ScaleEvent {
    pub(crate) fn new(
        cause: &'static str,
        node: Option<u32>,
        began: std::time::Instant,
        job_started: std::time::Instant,
        result: &Result<ScaleReport, HarpError>,
    ) -> Self {
        Self {
            event: "scale",
            cause,
            node,
            at_s: began.saturating_duration_since(job_started).as_secs_f64(),
            duration_s: began.elapsed().as_secs_f64(),
            ok: result.is_ok(),
            error: result.as_ref().err().map(|e| e.to_string()),
            report: result.as_ref().cloned().unwrap_or_default(),
        }
    }
}

pub(crate) enum ControlRequest {
    ScaleOut {
        workers: u32,
        servers: u32,
        reply: Reply<ScaleReport>,
    },
    ScaleIn {
        workers: Vec<WorkerId>,
        servers: Vec<ServerId>,
        reply: Reply<ScaleReport>,
    },
    Members {
        reply: Reply<(Vec<WorkerId>, Vec<ServerId>)>,
    },
    Rebalance {
        workers: Vec<WorkerId>,
        servers: Vec<ServerId>,
        reply: Reply<ScaleReport>,
    },
    /// A node process joined a job across processes: give it load.
    NodeJoined {
        worker: Option<WorkerId>,
        server: Option<ServerId>,
        reply: Reply<ScaleReport>,
    },
    /// A node process is leaving a job across processes: move its load away (a scale-in
    /// the roster reports as the node's leave, not as a command).
    NodeLeaving {
        worker: Option<WorkerId>,
        server: Option<ServerId>,
        reply: Reply<ScaleReport>,
    },
    /// A node process left (or died and was recovered): its worker and server are no
    /// longer the job's.
    Forget {
        worker: Option<WorkerId>,
        server: Option<ServerId>,
    },
    /// Fault injection: fail a server and recover from it.
    CrashServer {
        server: ServerId,
        reply: Reply<ServerRecovery>,
    },
}

/// The caller's end: commands to a running job.
#[derive(Clone)]
pub struct JobControl {
    tx: mpsc::UnboundedSender<ControlRequest>,
    /// Why the job is to stop, once someone asked (the first reason wins).
    stop: Arc<watch::Sender<Option<String>>>,
}

/// The job's end: pass it to [`run_job_controlled`](crate::run_job_controlled).
pub struct ControlInbox {
    pub(crate) rx: mpsc::UnboundedReceiver<ControlRequest>,
    /// For the runtime's own commands (nodes joining and leaving).
    tx: mpsc::UnboundedSender<ControlRequest>,
    stop: Arc<watch::Sender<Option<String>>>,
    /// Where the job tells its events as they happen.
    events: EventSink,
    /// Held by each scale command whose event is still to be told (`Teller::told`).
    untold: mpsc::Sender<()>,
    /// Completes once no one holds `untold` (taken by [`ControlInbox::commands_told`]).
    all_told: Option<mpsc::Receiver<()>>,
}

impl ControlInbox {
    /// The job sends every [`JobEvent`] (scale events, injected faults, server and worker
    /// recoveries) to `events` as it happens, in one process and across processes; all of
    /// them are sent before the run function returns.
    pub fn with_events(self, events: mpsc::UnboundedSender<JobEvent>) -> Self {
        Self {
            events: EventSink::to(events),
            ..self
        }
    }

    /// Where the job's parts send their events.
    pub(crate) fn events(&self) -> EventSink {
        self.events.clone()
    }

    /// What the run function awaits before it returns, so that the event of every scale
    /// command answered by then has been told (call before the inbox goes to `serve`).
    pub(crate) fn commands_told(&mut self) -> CommandsTold {
        CommandsTold(self.all_told.take())
    }

    /// Tells this inbox's scale commands as events (`job_started`: the origin of `at_s`).
    fn teller(&self, job_started: std::time::Instant) -> Teller {
        Teller {
            events: self.events(),
            untold: self.untold.clone(),
            job_started,
        }
    }

    /// A handle for the runtime's own commands to this inbox.
    pub(crate) fn handle(&self) -> JobControl {
        JobControl {
            tx: self.tx.clone(),
            stop: self.stop.clone(),
        }
    }

    /// Completes with the reason once the job is asked to stop ([`JobControl::stop`]).
    pub(crate) fn stop_requested(
        &self,
    ) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut asked = self.stop.subscribe();
        async move {
            let reason = match asked.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone(),
                Err(_) => None,
            };
            match reason {
                Some(reason) => reason,
                // Not reached: the inbox keeps the sender.
                None => std::future::pending().await,
            }
        }
    }
}

/// A control handle and the inbox it talks to.
pub fn job_control() -> (JobControl, ControlInbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = Arc::new(watch::Sender::new(None));
    let control = JobControl {
        tx: tx.clone(),
        stop: stop.clone(),
    };
    // Nothing is ever sent: the receiver only learns when the last sender is gone.
    let (untold, all_told) = mpsc::channel(1);
    (
        control,
        ControlInbox {
            rx,
            tx,
            stop,
            events: EventSink::default(),
            untold,
            all_told: Some(all_told),
        },
    )
}

/// How long a run function waits at its end for scale commands still to be told. Once the
/// master has stopped each is answered at once (it can no longer be carried out); the
/// bound only keeps a run from hanging on one that is not.
const TOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// See [`ControlInbox::commands_told`].
pub(crate) struct CommandsTold(Option<mpsc::Receiver<()>>);

impl CommandsTold {
    /// Completes once every scale command the inbox took has been told (the inbox and each
    /// command's telling task hold a sender), or after [`TOLD_WAIT`].
    pub(crate) async fn wait(self) {
        let Some(mut all_told) = self.0 else {
            return;
        };
        let told = async { while all_told.recv().await.is_some() {} };
        if tokio::time::timeout(TOLD_WAIT, told).await.is_err() {
            tracing::warn!(
                "a scale command was still unanswered when the job ended; its event is not told"
            );
        }
    }
}

/// Until `stopped` completes, then has `master` end the job with [`HarpError::Stopped`]
/// (run on a task of its own while the job runs).
pub(crate) async fn forward_stop<A: App>(
    stopped: impl std::future::Future<Output = String>,
    master: ActorRef<MasterMsg<A>>,
) {
    let reason = stopped.await;
    let _ = master.send_message(MasterMsg::Stop { reason });
}

impl JobControl {
    async fn ask<T>(
        &self,
        request: impl FnOnce(Reply<T>) -> ControlRequest,
    ) -> Result<T, HarpError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(request(tx)).map_err(|_| not_running())?;
        rx.await.unwrap_or_else(|_| Err(not_running()))
    }

    /// Adds `workers` workers and `servers` servers and moves load onto them. Like every
    /// scale command, refused while another scale event runs ([`HarpError::ScaleBusy`]) or
    /// a server recovery is pending ([`HarpError::RecoveryPending`]); a refused scale-out
    /// starts no workers or servers. Across processes, start node processes instead.
    pub async fn scale_out(&self, workers: u32, servers: u32) -> Result<ScaleReport, HarpError> {
        self.ask(|reply| ControlRequest::ScaleOut {
            workers,
            servers,
            reply,
        })
        .await
    }

    /// Moves the load of these workers and servers onto the others; they take no more.
    /// Naming one that is not the job's, or one gone from it (it left, or it failed and was
    /// recovered), is refused with [`HarpError::InvalidConfig`] and moves nothing.
    pub async fn scale_in(
        &self,
        workers: &[WorkerId],
        servers: &[ServerId],
    ) -> Result<ScaleReport, HarpError> {
        let (workers, servers) = (workers.to_vec(), servers.to_vec());
        self.ask(|reply| ControlRequest::ScaleIn {
            workers,
            servers,
            reply,
        })
        .await
    }

    /// Re-balances onto exactly these workers and servers (each one of the job's); the
    /// others give their load away and keep nothing until a later command.
    pub async fn rebalance_onto(
        &self,
        workers: &[WorkerId],
        servers: &[ServerId],
    ) -> Result<ScaleReport, HarpError> {
        let (workers, servers) = (workers.to_vec(), servers.to_vec());
        self.ask(|reply| ControlRequest::Rebalance {
            workers,
            servers,
            reply,
        })
        .await
    }

    /// Fault injection (SCAR experiments): `server` fails now, as a crashed one would — every
    /// update it has not applied yet is dropped unacknowledged — and the job recovers: only
    /// its shards are re-created on the other servers from the running checkpoint, and the
    /// nodes resend what it never acknowledged. Answers with the recovery's report, whose
    /// [`ServerRecovery::lost`] measures what the failure cost. Refused (the job goes on)
    /// when the job keeps no running checkpoint (`JobConfig::scar`), `server` is not a live
    /// server, no other server that takes load is left, or a running scale event moves a
    /// shard from or to it. In one process only.
    pub async fn crash_server(&self, server: ServerId) -> Result<ServerRecovery, HarpError> {
        self.ask(|reply| ControlRequest::CrashServer { server, reply })
            .await
    }

    /// Stops the job: it ends with [`HarpError::Stopped`] naming `reason` (a job still
    /// starting stops starting). No more micro-tasks are handed out. A job that writes
    /// consistent checkpoints lets the micro-tasks in flight finish (for at most 20 s) and
    /// takes one last checkpoint, to resume from where it was stopped; any other ends at once (running
    /// micro-tasks finish on their nodes, but their completions are not handed to the
    /// driver). A checkpoint being written is finished, and every node process is told the
    /// job ended and exits. A second call changes nothing (the first reason is kept).
    pub fn stop(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.stop.send_if_modified(|stop| {
            let first = stop.is_none();
            if first {
                *stop = Some(reason);
            }
            first
        });
    }

    /// The workers and servers that take load now.
    pub async fn members(&self) -> Result<(Vec<WorkerId>, Vec<ServerId>), HarpError> {
        self.ask(|reply| ControlRequest::Members { reply }).await
    }

    /// A node process joined: re-balance onto the live set and its worker and server,
    /// waiting for a running scale event to end first.
    pub(crate) async fn node_joined(
        &self,
        worker: Option<WorkerId>,
        server: Option<ServerId>,
    ) -> Result<ScaleReport, HarpError> {
        self.when_idle(|reply| ControlRequest::NodeJoined {
            worker,
            server,
            reply,
        })
        .await
    }

    /// A node process is leaving: move the load of its worker and server away, waiting for
    /// a running scale event to end first.
    pub(crate) async fn node_leaving(
        &self,
        worker: Option<WorkerId>,
        server: Option<ServerId>,
    ) -> Result<ScaleReport, HarpError> {
        // A scale-in of its worker and server (the node is forgotten once it is gone).
        self.when_idle(|reply| ControlRequest::NodeLeaving {
            worker,
            server,
            reply,
        })
        .await
    }

    /// A node process left for good, or died and was recovered: later scale events leave
    /// its worker and server out, and commands naming them are refused.
    pub(crate) fn forget(&self, worker: Option<WorkerId>, server: Option<ServerId>) {
        let _ = self.tx.send(ControlRequest::Forget { worker, server });
    }

    /// Sends the request made by `request`, again while another scale event runs or a
    /// server recovery is pending (logged once per reason).
    async fn when_idle(
        &self,
        request: impl Fn(Reply<ScaleReport>) -> ControlRequest,
    ) -> Result<ScaleReport, HarpError> {
        let mut waits_for = None;
        loop {
            match self.ask(&request).await {
                Err(HarpError::ScaleBusy) => {}
                Err(HarpError::RecoveryPending(pending)) => {
                    if waits_for.as_ref() != Some(&pending) {
                        tracing::info!(%pending, "a scale event waits for a server recovery");
                        waits_for = Some(pending);
                    }
                }
                other => return other,
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await
        }
    }
}

/// What the job's end needs to carry the commands out (one process: one node).
pub(crate) struct ControlContext<A: App> {
    pub node: Arc<NodeShared<A>>,
    pub master: ActorRef<MasterMsg<A>>,
    pub tables: Arc<TableSet>,
    pub workers: Vec<WorkerId>,
    pub servers: Vec<ServerId>,
    /// Every actor started by a command, stopped with the job.
    pub started: Arc<Mutex<Started<A>>>,
    /// When the job started: the origin of its scale events' `at_s`.
    pub job_started: std::time::Instant,
}

/// Actors started by scale-out commands.
pub(crate) struct Started<A: App> {
    pub workers: Vec<ActorRef<WorkerMsg<A>>>,
    pub servers: Vec<ActorRef<crate::server::ServerMsg>>,
}

impl<A: App> Default for Started<A> {
    fn default() -> Self {
        Self {
            workers: Vec::new(),
            servers: Vec::new(),
        }
    }
}

/// Serves commands until every [`JobControl`] is dropped or the job ends.
pub(crate) async fn serve<A: App>(mut inbox: ControlInbox, ctx: ControlContext<A>) {
    let teller = inbox.teller(ctx.job_started);
    let live: Live = Arc::new(Mutex::new(LiveSet::new(
        ctx.workers.clone(),
        ctx.servers.clone(),
    )));
    let mut next_worker = ctx.workers.iter().map(|w| w.0 + 1).max().unwrap_or(0);
    let mut next_server = ctx.servers.iter().map(|s| s.0 + 1).max().unwrap_or(0);
    while let Some(request) = inbox.rx.recv().await {
        match request {
            ControlRequest::Members { reply } => {
                let _ = reply.send(Ok(lock(&live).members()));
            }
            ControlRequest::NodeJoined { reply, .. }
            | ControlRequest::NodeLeaving { reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(
                    "a job in one process has no node processes".into(),
                )));
            }
            ControlRequest::Forget { .. } => {}
            ControlRequest::CrashServer { server, reply } => {
                crash_server(&ctx.master, &live, server, reply);
            }
            ControlRequest::ScaleOut {
                workers,
                servers,
                reply,
            } => {
                let reply = teller.told("scale-out", reply);
                // One the master would refuse starts nothing (only this loop starts scale
                // events and fails servers, so the answer holds until its `Rebalance`).
                if let Err(e) = can_scale(&ctx.master).await {
                    let _ = reply.send(Err(e));
                    continue;
                }
                let mut added = (Vec::new(), Vec::new());
                let mut failed = None;
                for _ in 0..workers {
                    let id = WorkerId(next_worker);
                    next_worker += 1;
                    let args = WorkerArgs {
                        id,
                        executors: Vec::new(),
                        node: ctx.node.clone(),
                    };
                    match spawn(WorkerActor::<A>::new(), args).await {
                        Ok(actor) => {
                            lock(&ctx.started).workers.push(actor.clone());
                            let _ = ctx.master.send_message(MasterMsg::AddWorker(id, actor));
                            added.0.push(id);
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                for _ in 0..servers {
                    let id = ServerId(next_server);
                    next_server += 1;
                    match spawn(ServerActor, (id, ctx.tables.clone())).await {
                        Ok(actor) => {
                            lock(&ctx.started).servers.push(actor.clone());
                            ctx.node.store.add_server(id, actor.clone());
                            let _ = ctx.master.send_message(MasterMsg::AddServer(id, actor));
                            added.1.push(id);
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                if let Some(e) = failed {
                    let _ = reply.send(Err(e));
                    continue;
                }
                let (mut w, mut s) = lock(&live).members();
                w.extend(added.0);
                s.extend(added.1);
                rebalance(&ctx.master, &live, w, s, reply);
            }
            ControlRequest::ScaleIn {
                workers,
                servers,
                reply,
            } => {
                let reply = teller.told("scale-in", reply);
                let known = (
                    |w: &WorkerId| w.0 < next_worker,
                    |s: &ServerId| s.0 < next_server,
                );
                let target = Target::Without(workers, servers);
                retarget(&ctx.master, &live, known, target, reply);
            }
            ControlRequest::Rebalance {
                workers,
                servers,
                reply,
            } => {
                let reply = teller.told("rebalance", reply);
                let known = (
                    |w: &WorkerId| w.0 < next_worker,
                    |s: &ServerId| s.0 < next_server,
                );
                let target = Target::Onto(workers, servers);
                retarget(&ctx.master, &live, known, target, reply);
            }
        }
    }
}

/// The answer to a command the job can no longer take (it ended, or never started).
fn not_running() -> HarpError {
    HarpError::InvalidConfig("the job is not running".into())
}

/// Tells the scale commands of [`JobControl`] as [`JobEvent::Scale`]s (`ControlInbox::teller`).
/// The runtime's own scale events across processes (a node joining or leaving) are told by
/// the roster instead, with the node.
struct Teller {
    events: EventSink,
    /// Held by each command until it is told (`CommandsTold`).
    untold: mpsc::Sender<()>,
    /// The origin of the events' `at_s`.
    job_started: std::time::Instant,
}

impl Teller {
    /// A reply for a command (`cause`: which) that, once answered, tells the outcome (a
    /// refused command too, with why) and passes it on to `reply`.
    fn told(&self, cause: &'static str, reply: Reply<ScaleReport>) -> Reply<ScaleReport> {
        let began = std::time::Instant::now();
        let (tx, answer) = oneshot::channel();
        let (events, untold, job_started) =
            (self.events.clone(), self.untold.clone(), self.job_started);
        crate::spawn::spawn(async move {
            // Until told: the run function waits for it.
            let _untold = untold;
            let result = answer.await.unwrap_or_else(|_| Err(not_running()));
            events.tell(JobEvent::Scale(ScaleEvent::new(
                cause,
                None,
                began,
                job_started,
                &result,
            )));
            let _ = reply.send(result);
        });
        tx
    }
}

/// Serves commands to a job across processes: executors move between the worker nodes and
/// shards between the server nodes; node processes that join get load, and node processes
/// that leave give theirs away. `scale_out` is refused: start node processes instead (`harp
/// node --join`, or `harp scale --add`). Each command of a [`JobControl`] is told as a
/// scale event once answered, as in one process (`job_started`: the origin of its `at_s`).
pub(crate) async fn serve_across<A: App>(
    mut inbox: ControlInbox,
    master: ActorRef<MasterMsg<A>>,
    workers: Vec<WorkerId>,
    servers: Vec<ServerId>,
    job_started: std::time::Instant,
) {
    let teller = inbox.teller(job_started);
    let live: Live = Arc::new(Mutex::new(LiveSet::new(workers.clone(), servers.clone())));
    // Every node that was ever the job's (one that went is also in the live set's gone).
    let mut known_workers: BTreeSet<WorkerId> = workers.into_iter().collect();
    let mut known_servers: BTreeSet<ServerId> = servers.into_iter().collect();
    while let Some(request) = inbox.rx.recv().await {
        let known = (
            |w: &WorkerId| known_workers.contains(w),
            |s: &ServerId| known_servers.contains(s),
        );
        match request {
            ControlRequest::Members { reply } => {
                let _ = reply.send(Ok(lock(&live).members()));
            }
            ControlRequest::CrashServer { reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(
                    "fault injection by message needs a job in one process; across processes, kill the node process".into(),
                )));
            }
            ControlRequest::ScaleOut { reply, .. } => {
                let reply = teller.told("scale-out", reply);
                let _ = reply.send(Err(HarpError::InvalidConfig(
                    "a job across processes grows when node processes join: start them with `harp node --join` or `harp scale --add`".into(),
                )));
            }
            ControlRequest::ScaleIn {
                workers: gone,
                servers: gone_servers,
                reply,
            } => {
                let target = Target::Without(gone, gone_servers);
                retarget(
                    &master,
                    &live,
                    known,
                    target,
                    teller.told("scale-in", reply),
                );
            }
            ControlRequest::NodeLeaving {
                worker,
                server,
                reply,
            } => {
                let target =
                    Target::Without(worker.into_iter().collect(), server.into_iter().collect());
                retarget(&master, &live, known, target, reply);
            }
            ControlRequest::Rebalance {
                workers: onto,
                servers: onto_servers,
                reply,
            } => {
                let target = Target::Onto(onto, onto_servers);
                retarget(
                    &master,
                    &live,
                    known,
                    target,
                    teller.told("rebalance", reply),
                );
            }
            ControlRequest::NodeJoined {
                worker,
                server,
                reply,
            } => {
                known_workers.extend(worker);
                known_servers.extend(server);
                let (mut onto_w, mut onto_s) = lock(&live).members();
                onto_w.extend(worker.filter(|w| !onto_w.contains(w)));
                onto_s.extend(server.filter(|s| !onto_s.contains(s)));
                rebalance(&master, &live, onto_w, onto_s, reply);
            }
            ControlRequest::Forget { worker, server } => {
                lock(&live).forget(worker, server);
            }
        }
    }
}

type Live = Arc<Mutex<LiveSet>>;

/// Whether the master would start a scale event now (`Err`: why not).
async fn can_scale<A: App>(master: &ActorRef<MasterMsg<A>>) -> Result<(), HarpError> {
    let (reply, answer) = oneshot::channel();
    master
        .send_message(MasterMsg::CanScale { reply })
        .map_err(|_| HarpError::MasterUnreachable)?;
    answer.await.unwrap_or(Err(HarpError::MasterUnreachable))
}

/// Fault injection in one process: has the master fail `server` and recover from it; once
/// it did, `server` is gone from the live set for good.
fn crash_server<A: App>(
    master: &ActorRef<MasterMsg<A>>,
    live: &Live,
    server: ServerId,
    reply: Reply<ServerRecovery>,
) {
    let message = |reply| MasterMsg::CrashServer { server, reply };
    let then = move |live: &mut LiveSet| live.forget(None, Some(server));
    ask_master(master, live, message, then, reply);
}

/// Sends the master the message `message` makes with a reply; a success it answers is
/// applied to the live set (`then`) before `reply` gets the answer.
fn ask_master<A: App, T: Send + 'static>(
    master: &ActorRef<MasterMsg<A>>,
    live: &Live,
    message: impl FnOnce(Reply<T>) -> MasterMsg<A>,
    then: impl FnOnce(&mut LiveSet) + Send + 'static,
    reply: Reply<T>,
) {
    let (tx, rx) = oneshot::channel();
    if master.send_message(message(tx)).is_err() {
        let _ = reply.send(Err(HarpError::MasterUnreachable));
        return;
    }
    let live = live.clone();
    crate::spawn::spawn(async move {
        let result = rx.await.unwrap_or(Err(HarpError::MasterUnreachable));
        if result.is_ok() {
            then(&mut lock(&live));
        }
        let _ = reply.send(result);
    });
}

/// Where a command wants the load: without some workers and servers, or onto exactly some.
enum Target {
    Without(Vec<WorkerId>, Vec<ServerId>),
    Onto(Vec<WorkerId>, Vec<ServerId>),
}

/// Checks every id of `target` against the job's (`known`: was this ever one of its
/// workers, of its servers; and it is not gone), then re-balances onto the live set the
/// target describes.
fn retarget<A: App>(
    master: &ActorRef<MasterMsg<A>>,
    live: &Live,
    (known_worker, known_server): (impl Fn(&WorkerId) -> bool, impl Fn(&ServerId) -> bool),
    target: Target,
    reply: Reply<ScaleReport>,
) {
    let (Target::Without(workers, servers) | Target::Onto(workers, servers)) = &target;
    let refusal = {
        let live = lock(live);
        let not_the_jobs =
            |what: String, kind: &str| Some(format!("{what} is not one of the job's {kind}"));
        let gone = |what: String, kind: &str| {
            Some(format!(
                "{what} is no longer one of the job's {kind}: it left, or it failed and was recovered"
            ))
        };
        if let Some(w) = workers.iter().find(|w| !known_worker(w)) {
            not_the_jobs(w.to_string(), "workers")
        } else if let Some(w) = workers.iter().find(|w| live.worker_gone(w)) {
            gone(w.to_string(), "workers")
        } else if let Some(s) = servers.iter().find(|s| !known_server(s)) {
            not_the_jobs(s.to_string(), "servers")
        } else if let Some(s) = servers.iter().find(|s| live.server_gone(s)) {
            gone(s.to_string(), "servers")
        } else {
            None
        }
    };
    if let Some(refusal) = refusal {
        let _ = reply.send(Err(HarpError::InvalidConfig(refusal)));
        return;
    }
    let (onto_w, onto_s) = match target {
        Target::Onto(w, s) => (w, s),
        Target::Without(gone_w, gone_s) => {
            // Every other live one (the live set holds none that went).
            let (w, s) = lock(live).members();
            (
                w.into_iter().filter(|w| !gone_w.contains(w)).collect(),
                s.into_iter().filter(|s| !gone_s.contains(s)).collect(),
            )
        }
    };
    rebalance(master, live, onto_w, onto_s, reply);
}

/// Asks the master to re-balance onto `workers` and `servers`; they become the live set
/// once it succeeded (less any that went meanwhile: [`LiveSet::settle`]).
fn rebalance<A: App>(
    master: &ActorRef<MasterMsg<A>>,
    live: &Live,
    workers: Vec<WorkerId>,
    servers: Vec<ServerId>,
    reply: Reply<ScaleReport>,
) {
    let (live_workers, live_servers) = (workers.clone(), servers.clone());
    let message = |reply| MasterMsg::Rebalance {
        live_workers,
        live_servers,
        reply,
    };
    let then = move |live: &mut LiveSet| live.settle(workers, servers);
    ask_master(master, live, message, then, reply);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
