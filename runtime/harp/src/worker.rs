//! Worker actors and the executor loops they host.
//!
//! A worker creates its executors (the app loads their input partitions), runs one loop per
//! executor (an async task owning the executor and taking its micro-tasks in order), and
//! counts the micro-tasks it holds. When that count drops to zero the worker's node flushes
//! its update log (Litz §4.4: "flush when all micro-tasks on a worker are finished"); the
//! flush book then releases the completions whose updates are applied, and those go to the
//! master.

use crate::app::{App, Completion, Executor};
use crate::error::HarpError;
use crate::master::MasterMsg;
use crate::node::ParamStore;
use crate::param_client::ParamClient;
use futures::FutureExt;
use harp_core::{ExecutorId, FlushBook, TaskId, Version, WorkerId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

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
}

/// What every worker of one node shares: the parameter plumbing, the flush book, the master.
pub(crate) struct NodeShared<A: App> {
    pub store: Arc<ParamStore>,
    pub book: Mutex<FlushBook<Completion<A::Output>>>,
    pub master: ActorRef<MasterMsg<A>>,
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

pub(crate) struct WorkerArgs<A: App> {
    pub id: WorkerId,
    /// The executors this worker hosts, already created.
    pub executors: Vec<(ExecutorId, A::Executor)>,
    pub node: Arc<NodeShared<A>>,
}

pub(crate) struct WorkerState<A: App> {
    id: WorkerId,
    loops: HashMap<ExecutorId, mpsc::UnboundedSender<TaskEnvelope<A::Args>>>,
    running: Arc<AtomicUsize>,
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
        let running = Arc::new(AtomicUsize::new(0));
        let mut loops = HashMap::new();
        for (id, executor) in args.executors {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(executor_loop::<A>(
                id,
                executor,
                rx,
                args.node.clone(),
                running.clone(),
            ));
            loops.insert(id, tx);
        }
        Ok(WorkerState {
            id: args.id,
            loops,
            running,
        })
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
                state.running.fetch_add(tasks.len(), Ordering::AcqRel);
                for task in tasks {
                    let Some(tx) = state.loops.get(&task.executor) else {
                        return Err(format!("{} does not host {}", state.id, task.executor).into());
                    };
                    if tx.send(task).is_err() {
                        return Err(format!("executor loop of {} ended", state.id).into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs one executor's micro-tasks in order until the worker drops its sender.
async fn executor_loop<A: App>(
    id: ExecutorId,
    mut executor: A::Executor,
    mut tasks: mpsc::UnboundedReceiver<TaskEnvelope<A::Args>>,
    node: Arc<NodeShared<A>>,
    running: Arc<AtomicUsize>,
) {
    while let Some(envelope) = tasks.recv().await {
        let TaskEnvelope {
            task,
            executor: _,
            version,
            args,
        } = envelope;
        let mut ps = ParamClient::new(node.store.clone(), version, task, id);
        let outcome = AssertUnwindSafe(executor.run_task(args, &mut ps))
            .catch_unwind()
            .await;
        let failure = match outcome {
            Ok(Ok(output)) => {
                node.book().task_finished(
                    task,
                    Completion {
                        task,
                        executor: id,
                        dispatched_at: version,
                        output,
                    },
                );
                None
            }
            Ok(Err(source)) => Some(source),
            Err(panic) => Some(panic_message(panic).into()),
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
            tokio::spawn(node.clone().flush_and_report());
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
