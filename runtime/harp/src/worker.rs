//! Worker actors and the executor loops they host.
//!
//! A worker creates its executors (the app loads their input partitions), runs one loop per
//! executor (an async task owning the executor and taking its micro-tasks in order), and
//! counts the micro-tasks it holds. When that count drops to zero the worker's node flushes
//! its update log (Litz §4.4: "flush when all micro-tasks on a worker are finished"); the
//! flush book then releases the completions whose updates are applied, and those go to the
//! master.
//!
//! **Staged flushes** (a job that recovers worker nodes: [`NodeShared::staging`]): a node
//! stages one flush at a time, and only when no micro-task is half-way through its updates,
//! so each flush carries exactly the updates of the tasks it covers, all of them. Once every
//! part is staged, the node reports the flush, the servers that hold its parts and those
//! tasks' completions to the master ([`MasterMsg::FlushStaged`]), which commits the flush
//! and only then hands the completions to the driver. A task is thus applied entirely or not
//! at all: if the node dies, the master either commits the flush as a whole or drops it and
//! runs its tasks again (`remote/failures.rs`).
//!
//! Executors move between workers (Litz §4.4): [`WorkerMsg::Release`] lets the executor's
//! running micro-task finish, takes its pending ones back out of its queue and hands the
//! executor and those tasks to the master, which gives them to the new worker with
//! [`WorkerMsg::Adopt`]. Other executors' tasks keep running meanwhile. An executor whose
//! state is still on its way from another node ([`WorkerMsg::Expect`]) has the micro-tasks
//! dispatched to it meanwhile kept here until it arrives ([`WorkerMsg::Forget`] drops them
//! when it will not). A consistent checkpoint asks an executor for its saved state without
//! taking it away ([`WorkerMsg::Save`], answered between two of its micro-tasks).

use crate::app::{App, Completion, Executor};
use crate::error::HarpError;
use crate::master::MasterMsg;
use crate::node::ParamStore;
use crate::param_client::ParamClient;
use futures::FutureExt;
use harp_core::{ExecutorId, FlushBook, TaskId, Version, WorkerId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Notify};

/// One dispatched micro-task on its way to an executor.
pub(crate) struct TaskEnvelope<Args> {
    pub task: TaskId,
    pub executor: ExecutorId,
    pub version: Version,
    pub args: Args,
}

/// Messages a worker handles.
pub(crate) enum WorkerMsg<A: App> {
    Run(Vec<TaskEnvelope<A::Args>>),
    /// Give `executor` up once its running micro-task finished.
    Release {
        executor: ExecutorId,
        reply: oneshot::Sender<Result<ReleasedExecutor<A>, HarpError>>,
    },
    /// Host an executor that moved here, with the micro-tasks it had not started; answer
    /// on `adopted` once it runs here (or why it cannot).
    Adopt {
        executor: ExecutorId,
        released: ReleasedExecutor<A>,
        adopted: oneshot::Sender<Result<(), HarpError>>,
    },
    /// `executor` is on its way here (its state is being fetched from its old node): keep
    /// the micro-tasks dispatched to it until [`WorkerMsg::Adopt`] brings it.
    Expect {
        executor: ExecutorId,
    },
    /// Send `executor`'s saved state (`Executor::save_state`) between two of its
    /// micro-tasks, keeping it here (a consistent checkpoint's capture).
    Save {
        executor: ExecutorId,
        reply: oneshot::Sender<Result<Vec<u8>, HarpError>>,
    },
    /// `executor` will not arrive after all (its move failed): drop the micro-tasks kept for
    /// it, which the master dispatches again. Sent before [`WorkerMsg::Create`] makes it here
    /// afresh, so none of them runs twice.
    Forget {
        executor: ExecutorId,
    },
    /// Create `executor` again here: its worker died with it (worker recovery across
    /// processes). The node makes it with `App::recover_executor`, from `saved` when the
    /// master found it in a consistent checkpoint, and answers on `created` once it runs
    /// there; micro-tasks sent after this run on it. Only a worker node's proxy carries it:
    /// a worker in the master's process refuses.
    Create {
        executor: ExecutorId,
        saved: Option<CheckpointedState>,
        created: oneshot::Sender<Result<(), HarpError>>,
    },
}

/// An executor's state as a consistent checkpoint holds it.
pub(crate) struct CheckpointedState {
    /// The checkpoint's number (the iteration it was taken at).
    pub checkpoint: u64,
    pub state: Vec<u8>,
}

/// An executor on its way between workers, with the micro-tasks it had not started.
pub(crate) struct ReleasedExecutor<A: App> {
    pub executor: ExecutorBody<A>,
    pub pending: Vec<TaskEnvelope<A::Args>>,
}

/// An executor in motion: the object itself (within a process), its saved state (between
/// processes; the receiving node restores it with `App::restore_executor`), or where that
/// state waits to be fetched (a state too large to relay through the master).
pub(crate) enum ExecutorBody<A: App> {
    Live(A::Executor),
    Saved(Vec<u8>),
    Parked(harp_wire::StateFetch),
}

impl<A: App> ExecutorBody<A> {
    /// Bytes of saved state this body carries or names (0 for a live object).
    pub(crate) fn state_bytes(&self) -> u64 {
        match self {
            ExecutorBody::Live(_) => 0,
            ExecutorBody::Saved(state) => state.len() as u64,
            ExecutorBody::Parked(fetch) => fetch.bytes,
        }
    }
}

/// One executor's queue, shared by the worker (which fills it) and the executor's loop.
struct Inbox<A: App> {
    queue: Mutex<InboxState<A>>,
    wake: Notify,
}

struct InboxState<A: App> {
    tasks: VecDeque<TaskEnvelope<A::Args>>,
    release: Option<oneshot::Sender<Result<ReleasedExecutor<A>, HarpError>>>,
    /// Requests for its saved state, answered before its next micro-task.
    saves: Vec<oneshot::Sender<Result<Vec<u8>, HarpError>>>,
    closed: bool,
}

impl<A: App> Inbox<A> {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(InboxState {
                tasks: VecDeque::new(),
                release: None,
                saves: Vec::new(),
                closed: false,
            }),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState<A>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, task: TaskEnvelope<A::Args>) {
        self.lock().tasks.push_back(task);
        self.wake.notify_one();
    }

    fn ask_release(&self, reply: oneshot::Sender<Result<ReleasedExecutor<A>, HarpError>>) {
        self.lock().release = Some(reply);
        self.wake.notify_one();
    }

    fn ask_save(&self, reply: oneshot::Sender<Result<Vec<u8>, HarpError>>) {
        self.lock().saves.push(reply);
        self.wake.notify_one();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }
}

/// What an executor's loop does next.
enum Next<A: App> {
    Run(TaskEnvelope<A::Args>),
    Release(
        oneshot::Sender<Result<ReleasedExecutor<A>, HarpError>>,
        Vec<TaskEnvelope<A::Args>>,
    ),
    Save(Vec<oneshot::Sender<Result<Vec<u8>, HarpError>>>),
    Wait,
    Stop,
}

/// What every worker of one node shares: the parameter plumbing, the flush book, the master.
pub(crate) struct NodeShared<A: App> {
    pub store: Arc<ParamStore>,
    pub book: Mutex<FlushBook<Completion<A::Output>>>,
    pub master: ActorRef<MasterMsg<A>>,
    /// With worker recovery: flushes are staged and committed by the master (module doc).
    pub staging: Option<StagedFlushes>,
    /// Where the executor loops run, and the node's own runtime (`executor_runtime.rs`).
    pub executors_on: crate::executor_runtime::ExecutorRuntime,
}

/// How a node of a job that recovers worker nodes flushes (see the module doc).
pub(crate) struct StagedFlushes {
    /// This node's id: servers keep its parts under it.
    node: u32,
    /// One flush is staged at a time, so each report carries exactly its flush's tasks.
    turn: tokio::sync::Mutex<()>,
    /// Micro-tasks running now (they may have recorded part of their updates). Changed and
    /// read under the flush book's lock, so no task starts while a flush drains the log.
    in_progress: AtomicUsize,
    /// Fault injection for tests: how long each flush waits, staged, before its report.
    report_delay: Option<std::time::Duration>,
}

impl StagedFlushes {
    pub(crate) fn new(node: u32) -> Self {
        Self {
            node,
            turn: tokio::sync::Mutex::new(()),
            in_progress: AtomicUsize::new(0),
            report_delay: None,
        }
    }

    /// The same, holding each staged flush this long before it is reported (fault
    /// injection: a node killed meanwhile dies with staged parts the master never commits).
    pub(crate) fn with_report_delay(mut self, delay: Option<std::time::Duration>) -> Self {
        self.report_delay = delay;
        self
    }
}

impl<A: App> NodeShared<A> {
    fn book(&self) -> std::sync::MutexGuard<'_, FlushBook<Completion<A::Output>>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail(&self, error: HarpError) {
        // If the master is gone the job is over anyway.
        let _ = self.master.send_message(MasterMsg::Failed(error));
    }

    /// Flushes the update log and reports the completions it releases.
    async fn flush_and_report(self: Arc<Self>) {
        if let Some(staging) = &self.staging {
            return self.stage_and_report(staging).await;
        }
        // Beginning the flush and draining the log must happen as one step: if a later flush
        // could drain first, it would carry updates of tasks this flush covers, and this
        // flush's ack would release them before their updates were applied.
        let (flush, batches) = {
            let mut book = self.book();
            if book.unflushed_tasks() == 0 {
                return; // another flush already covers every finished task
            }
            let flush = book.begin_flush();
            (flush, self.store.drain_log())
        };
        if let Err(e) = self.store.apply(batches).await {
            return self.fail(e);
        }
        let released = self.book().flush_applied(flush);
        match released {
            Ok(released) if released.is_empty() => {}
            Ok(released) => {
                let completions = released.into_iter().map(|(_, c)| c).collect();
                if self
                    .master
                    .send_message(MasterMsg::Completed(completions))
                    .is_err()
                {
                    tracing::debug!("master gone; completions dropped");
                }
            }
            Err(e) => self.fail(e.into()),
        }
    }
}

impl<A: App> NodeShared<A> {
    /// Sends `message` to the master once every flush this node staged so far is reported
    /// (one being staged waits for its report; at once without worker recovery): it
    /// follows those reports into the master's mailbox, or onto the master link. A drained
    /// server's answer goes this way, so the master commits what was staged there before
    /// the server's node departs.
    pub(crate) async fn tell_master_after_staged_reports(&self, message: MasterMsg<A>) {
        let _turn = match &self.staging {
            Some(staging) => Some(staging.turn.lock().await),
            None => None,
        };
        if self.master.send_message(message).is_err() {
            tracing::debug!("master gone; a message after the staged reports was dropped");
        }
    }

    /// The staged flush (worker recovery): stages the update log on the servers, then
    /// reports the flush and its tasks' completions to the master, which commits it.
    async fn stage_and_report(&self, staging: &StagedFlushes) {
        let _turn = staging.turn.lock().await;
        let (flush, batches) = {
            let mut book = self.book();
            // A running task may have recorded part of its updates: this flush waits for
            // it (when it ends, the worker's count of held tasks drops to zero again and
            // another flush begins), so no task's updates are split between two flushes.
            if book.unflushed_tasks() == 0 || staging.in_progress.load(Ordering::Acquire) > 0 {
                return;
            }
            let flush = book.begin_flush();
            (flush, self.store.drain_log())
        };
        let servers = match self.store.stage(batches, staging.node, flush).await {
            Ok(servers) => servers,
            Err(e) => return self.fail(e),
        };
        if let Some(delay) = staging.report_delay {
            tokio::time::sleep(delay).await;
        }
        let released = self.book().flush_applied(flush);
        match released {
            // One flush at a time: exactly the tasks this flush covers.
            Ok(released) => {
                let completions = released.into_iter().map(|(_, c)| c).collect();
                let report = MasterMsg::FlushStaged {
                    node: staging.node,
                    flush,
                    servers,
                    completions,
                };
                if self.master.send_message(report).is_err() {
                    tracing::debug!("master gone; a staged flush was not reported");
                }
            }
            Err(e) => self.fail(e.into()),
        }
    }

    /// A micro-task begins: counted, under the book's lock, while flushes are staged.
    fn task_begins(&self) {
        if let Some(staging) = &self.staging {
            let _book = self.book();
            staging.in_progress.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A micro-task ended (`finished`: its completion, if it succeeded): recorded in the
    /// flush book and no longer counted as running, in one step.
    fn task_ends(&self, task: TaskId, finished: Option<Completion<A::Output>>) {
        let mut book = self.book();
        if let Some(completion) = finished {
            book.task_finished(task, completion);
        }
        if let Some(staging) = &self.staging {
            staging.in_progress.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

pub(crate) struct WorkerArgs<A: App> {
    pub id: WorkerId,
    /// The executors this worker hosts, already created.
    pub executors: Vec<(ExecutorId, A::Executor)>,
    pub node: Arc<NodeShared<A>>,
}

pub(crate) struct WorkerState<A: App> {
    id: WorkerId,
    loops: HashMap<ExecutorId, Arc<Inbox<A>>>,
    /// Executors on their way here, with the micro-tasks dispatched to them meanwhile (not
    /// counted as running until the executor arrives).
    arriving: HashMap<ExecutorId, Vec<TaskEnvelope<A::Args>>>,
    running: Arc<AtomicUsize>,
    node: Arc<NodeShared<A>>,
}

impl<A: App> WorkerState<A> {
    /// Starts `executor` here with its pending micro-tasks, then those dispatched to it while
    /// it was on its way.
    fn adopt(
        &mut self,
        executor: ExecutorId,
        released: ReleasedExecutor<A>,
    ) -> Result<(), HarpError> {
        if self.loops.contains_key(&executor) {
            return Err(HarpError::InvalidConfig(format!(
                "{} already hosts {executor}",
                self.id
            )));
        }
        let ReleasedExecutor {
            executor: body,
            mut pending,
        } = released;
        let ExecutorBody::Live(e) = body else {
            return Err(HarpError::InvalidConfig(format!(
                "{} got {executor} as saved state; the node restores it first",
                self.id
            )));
        };
        pending.extend(self.arriving.remove(&executor).unwrap_or_default());
        self.running.fetch_add(pending.len(), Ordering::AcqRel);
        let inbox = self.start_loop(executor, e);
        for task in pending {
            inbox.push(task);
        }
        Ok(())
    }

    fn start_loop(&mut self, id: ExecutorId, executor: A::Executor) -> Arc<Inbox<A>> {
        let inbox = Inbox::new();
        self.node.executors_on.spawn(executor_loop::<A>(
            id,
            executor,
            inbox.clone(),
            self.node.clone(),
            self.running.clone(),
        ));
        self.loops.insert(id, inbox.clone());
        inbox
    }
}

impl<A: App> Drop for WorkerState<A> {
    fn drop(&mut self) {
        for inbox in self.loops.values() {
            inbox.close();
        }
    }
}

pub(crate) struct WorkerActor<A>(PhantomData<fn() -> A>);

impl<A> WorkerActor<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: App> Actor for WorkerActor<A> {
    type Msg = WorkerMsg<A>;
    type State = WorkerState<A>;
    type Arguments = WorkerArgs<A>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = WorkerState {
            id: args.id,
            loops: HashMap::new(),
            arriving: HashMap::new(),
            running: Arc::new(AtomicUsize::new(0)),
            node: args.node,
        };
        for (id, executor) in args.executors {
            state.start_loop(id, executor);
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Run(tasks) => {
                // Count them all before any can finish, so the count cannot touch zero mid-batch.
                let arriving = if state.arriving.is_empty() {
                    0
                } else {
                    tasks
                        .iter()
                        .filter(|t| state.arriving.contains_key(&t.executor))
                        .count()
                };
                state
                    .running
                    .fetch_add(tasks.len() - arriving, Ordering::AcqRel);
                for task in tasks {
                    if let Some(kept) = state.arriving.get_mut(&task.executor) {
                        kept.push(task);
                        continue;
                    }
                    let Some(inbox) = state.loops.get(&task.executor) else {
                        // A routing bug, not a reason to kill the node: the job ends with it.
                        state.node.fail(HarpError::InvalidConfig(format!(
                            "{} was sent {} for {}, which it does not host",
                            state.id, task.task, task.executor
                        )));
                        return Ok(());
                    };
                    inbox.push(task);
                }
            }
            WorkerMsg::Release { executor, reply } => match state.loops.remove(&executor) {
                Some(inbox) => inbox.ask_release(reply),
                None if state.arriving.contains_key(&executor) => {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{executor} is still on its way to {}",
                        state.id
                    ))));
                }
                None => {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{} does not host {executor}",
                        state.id
                    ))));
                }
            },
            WorkerMsg::Expect { executor } => {
                if !state.loops.contains_key(&executor) {
                    state.arriving.entry(executor).or_default();
                }
            }
            WorkerMsg::Save { executor, reply } => match state.loops.get(&executor) {
                Some(inbox) => inbox.ask_save(reply),
                None => {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{} does not host {executor}",
                        state.id
                    ))));
                }
            },
            WorkerMsg::Forget { executor } => {
                if let Some(dropped) = state.arriving.remove(&executor) {
                    tracing::info!(%executor, tasks = dropped.len(), "an executor expected here will not arrive; the micro-tasks kept for it are dropped (the master dispatches them again)");
                }
            }
            WorkerMsg::Adopt {
                executor,
                released,
                adopted,
            } => {
                let _ = adopted.send(state.adopt(executor, released));
            }
            WorkerMsg::Create {
                executor, created, ..
            } => {
                let _ = created.send(Err(HarpError::InvalidConfig(format!(
                    "{} cannot create {executor}: executors are re-created only on worker nodes",
                    state.id
                ))));
            }
        }
        Ok(())
    }
}

/// Takes the executor's next step from its inbox.
fn next_step<A: App>(inbox: &Inbox<A>) -> Next<A> {
    let mut queue = inbox.lock();
    if !queue.saves.is_empty() {
        return Next::Save(std::mem::take(&mut queue.saves));
    }
    if let Some(reply) = queue.release.take() {
        return Next::Release(reply, queue.tasks.drain(..).collect());
    }
    if let Some(task) = queue.tasks.pop_front() {
        return Next::Run(task);
    }
    if queue.closed {
        Next::Stop
    } else {
        Next::Wait
    }
}

/// Runs one executor's micro-tasks in order until its worker stops or gives it away.
async fn executor_loop<A: App>(
    id: ExecutorId,
    mut executor: A::Executor,
    inbox: Arc<Inbox<A>>,
    node: Arc<NodeShared<A>>,
    running: Arc<AtomicUsize>,
) {
    loop {
        let envelope = match next_step(&inbox) {
            Next::Run(envelope) => envelope,
            Next::Wait => {
                inbox.wake.notified().await;
                continue;
            }
            Next::Stop => return,
            Next::Save(replies) => {
                for reply in replies {
                    // The app's own error, as the checkpoint's record shows it.
                    let saved = executor.save_state().map_err(|source| {
                        HarpError::Remote(format!("{id} could not save its state: {source}"))
                    });
                    let _ = reply.send(saved);
                }
                continue;
            }
            Next::Release(reply, pending) => {
                // The tasks handed back are no longer this worker's to finish.
                let handed = pending.len();
                if handed > 0 && running.fetch_sub(handed, Ordering::AcqRel) == handed {
                    node.executors_on
                        .spawn_on_node(node.clone().flush_and_report());
                }
                let _ = reply.send(Ok(ReleasedExecutor {
                    executor: ExecutorBody::Live(executor),
                    pending,
                }));
                return;
            }
        };
        let TaskEnvelope {
            task,
            executor: _,
            version,
            args,
        } = envelope;
        let mut ps = ParamClient::new(node.store.clone(), version, task, id);
        node.task_begins();
        let outcome = AssertUnwindSafe(executor.run_task(args, &mut ps))
            .catch_unwind()
            .await;
        let failure = match outcome {
            Ok(Ok(output)) => {
                let completion = Completion {
                    task,
                    executor: id,
                    dispatched_at: version,
                    output,
                };
                node.task_ends(task, Some(completion));
                None
            }
            Ok(Err(source)) => {
                node.task_ends(task, None);
                Some(source)
            }
            Err(panic) => {
                node.task_ends(task, None);
                Some(panic_message(panic).into())
            }
        };
        if let Some(source) = failure {
            node.fail(HarpError::TaskFailed {
                task,
                executor: id,
                source,
            });
            return;
        }
        if running.fetch_sub(1, Ordering::AcqRel) == 1 {
            node.executors_on
                .spawn_on_node(node.clone().flush_and_report());
        }
    }
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".into());
    format!("panicked: {text}")
}
