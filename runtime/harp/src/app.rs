//! The programming model a user implements (Litz Table 4.1).
//!
//! | Litz API | harp |
//! |---|---|
//! | `DispatchInitialTasks()` (driver, app) | [`Driver::dispatch_initial_tasks`] |
//! | `HandleTaskCompletion(result)` (driver, app) | [`Driver::handle_task_completion`] |
//! | `DispatchTask(executor, args)` (driver, framework) | [`DriverContext::dispatch`] |
//! | `RunTask(args)` (executor, app) | [`Executor::run_task`] |
//! | `SignalTaskCompletion(result)` (executor, framework) | returning `Ok(output)` from `run_task` |
//! | `PSGet(key)` (executor, framework) | [`ParamClient::get`](crate::ParamClient::get), [`get_many`](crate::ParamClient::get_many) |
//! | `PSUpdate(key, update)` (executor, framework) | [`ParamClient::update`](crate::ParamClient::update), [`update_many`](crate::ParamClient::update_many) |
//!
//! An [`App`] ties a driver type and an executor type together, declares the parameter
//! tables and creates drivers and executors; the runtime creates each executor on the
//! worker that hosts it, so the same app runs in one process or across many.

use crate::error::{AppError, HarpError};
use crate::param_client::ParamClient;
use crate::table::TableSet;
use harp_core::{ExecutorId, TaskId, Version};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

/// What task arguments and task outputs must be: sendable between threads and, for jobs
/// that span processes, serializable.
pub trait Payload: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> Payload for T {}

/// Facts about the job every driver and executor may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// Executors in the job, numbered `0..num_executors`.
    pub num_executors: u32,
    /// Workers at job start.
    pub num_workers: u32,
    /// Servers at job start.
    pub num_servers: u32,
}

/// An ML application: its tables, its driver and its executors.
pub trait App: Send + Sync + 'static {
    /// Arguments of one micro-task.
    type Args: Payload;
    /// Result of one micro-task, handed to the driver.
    type Output: Payload;
    type Driver: Driver<Self>;
    type Executor: Executor<Self>;

    /// A short name for logs and errors.
    fn name(&self) -> &str;
    /// Every parameter table the app reads or updates.
    fn tables(&self) -> &TableSet;
    /// What every node of a job across processes must share with the master besides the
    /// tables (hyperparameters its executors use, the size of its input), one line each,
    /// such as `lr 0.5`. A node whose settings differ from the job's refuses to join and
    /// names the first that differs. None by default.
    fn settings(&self) -> Vec<String> {
        Vec::new()
    }
    /// Creates the driver (on the master).
    fn create_driver(&self, job: &JobInfo) -> Result<Self::Driver, AppError>;
    /// Creates executor `id` on the worker that hosts it (typically: loads its input partition).
    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<Self::Executor, AppError>;

    /// Re-creates executor `id` from what its [`Executor::save_state`] wrote, on the worker
    /// it moved to or after a restart. The default creates it afresh (re-reading its input
    /// partition from the dataset's path) and restores the state into it. The state is
    /// handed over, so an executor may keep (part of) its buffer instead of copying it.
    fn restore_executor(
        &self,
        id: ExecutorId,
        job: &JobInfo,
        state: Vec<u8>,
    ) -> Result<Self::Executor, AppError> {
        let mut executor = self.create_executor(id, job)?;
        executor.restore_state(&state)?;
        Ok(executor)
    }

    /// Re-creates executor `id` after its worker node died (worker recovery across
    /// processes), on the live worker that takes it over. `saved` is the state it saved in
    /// the job's newest complete consistent checkpoint, when the job writes them and one
    /// holds it (`None` otherwise).
    ///
    /// That state is *older than the tables*: the micro-tasks the executor ran after the
    /// checkpoint whose updates were committed are not run again, so the tables hold their
    /// updates while the saved state does not hold their effect on the executor. (Its
    /// uncommitted micro-tasks are run again on the new executor, after this.) Only an app
    /// that can reconcile the two should restore it; the default ignores `saved` and
    /// creates the executor afresh ([`create_executor`](Self::create_executor)), as an
    /// executor whose state lives in the tables or is re-read from its input needs. LDA
    /// restores its topic assignments and marks them as not counted by the tables, which
    /// its resync then counts, so a dead node's documents keep the sampling they had at the
    /// checkpoint instead of starting again from their initial topics.
    fn recover_executor(
        &self,
        id: ExecutorId,
        job: &JobInfo,
        saved: Option<Vec<u8>>,
    ) -> Result<Self::Executor, AppError> {
        let _ = saved;
        self.create_executor(id, job)
    }
}

/// Decides which micro-tasks run and reacts to their completion. Lives on the master.
pub trait Driver<A: App + ?Sized>: Send + 'static {
    /// Called once when the job starts.
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, A::Args>,
    ) -> Result<(), AppError>;

    /// Called once per completed micro-task, after all of its updates were applied. Tasks
    /// dispatched from here observe every update of this task and of every task whose
    /// completion was handled before.
    fn handle_task_completion(
        &mut self,
        completion: Completion<A::Output>,
        ctx: &mut DriverContext<'_, A::Args>,
    ) -> Result<(), AppError>;

    /// Serializes the driver's state (checkpoints, master moves).
    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        Err("this driver does not support saving its state".into())
    }

    /// Restores state written by [`save_state`](Self::save_state).
    fn restore_state(&mut self, _state: &[u8]) -> Result<(), AppError> {
        Err("this driver does not support restoring its state".into())
    }
}

/// Runs micro-tasks against its slice of the input data and its own state. Lives on a worker;
/// the runtime may move it between workers, using the state hooks.
pub trait Executor<A: App + ?Sized>: Send + 'static {
    /// Runs one micro-task. The task reads and updates parameters through `ps`; reads may wait
    /// on the parameter server, and other executors' tasks run meanwhile.
    fn run_task(
        &mut self,
        args: A::Args,
        ps: &mut ParamClient,
    ) -> impl Future<Output = Result<A::Output, AppError>> + Send;

    /// Serializes the executor's state (not its input data, which is re-read from the dataset).
    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        Err("this executor does not support saving its state".into())
    }

    /// Restores state written by [`save_state`](Self::save_state).
    fn restore_state(&mut self, _state: &[u8]) -> Result<(), AppError> {
        Err("this executor does not support restoring its state".into())
    }

    /// [`save_state`](Self::save_state) for an executor that leaves this worker (a move
    /// between processes): it is consumed, so it may hand over its own buffers instead of
    /// copying them. The default saves a copy.
    fn into_saved_state(self) -> Result<Vec<u8>, AppError>
    where
        Self: Sized,
    {
        self.save_state()
    }
}

/// A completed micro-task as the driver sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion<O> {
    pub task: TaskId,
    pub executor: ExecutorId,
    /// The version the task was dispatched with.
    pub dispatched_at: Version,
    pub output: O,
}

/// The driver's view of the framework while it handles an event.
pub struct DriverContext<'a, Args> {
    version: Version,
    num_executors: u32,
    dispatched: &'a mut Vec<(ExecutorId, Args)>,
    finish: &'a mut bool,
    iteration: &'a mut Option<u64>,
}

impl<'a, Args> DriverContext<'a, Args> {
    pub(crate) fn new(
        version: Version,
        num_executors: u32,
        dispatched: &'a mut Vec<(ExecutorId, Args)>,
        finish: &'a mut bool,
        iteration: &'a mut Option<u64>,
    ) -> Self {
        Self {
            version,
            num_executors,
            dispatched,
            finish,
            iteration,
        }
    }

    /// Dispatches a micro-task to `executor` (Litz `DispatchTask`). It is tagged with the
    /// current version.
    pub fn dispatch(&mut self, executor: ExecutorId, args: Args) -> Result<(), HarpError> {
        if executor.0 >= self.num_executors {
            return Err(HarpError::UnknownExecutor(executor, self.num_executors));
        }
        self.dispatched.push((executor, args));
        Ok(())
    }

    /// Executors in the job, numbered `0..num_executors`.
    pub fn num_executors(&self) -> u32 {
        self.num_executors
    }

    /// The version tasks dispatched now are tagged with.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Reports that the app's iteration `iteration` (counted from 1) is complete: every
    /// update of its micro-tasks is applied. SCAR's running checkpoint (`JobConfig::scar`)
    /// runs its rounds on these iterations, every `r·C` of them; a report of an iteration at
    /// or before the last one reported is ignored. Apps that do not report iterations get
    /// no checkpoint rounds.
    pub fn iteration_completed(&mut self, iteration: u64) {
        if self.iteration.is_none_or(|last| iteration > last) {
            *self.iteration = Some(iteration);
        }
    }

    /// Ends the job once this call returns. Tasks still running are abandoned. A job also
    /// ends when no task is running and the driver dispatched none.
    pub fn finish(&mut self) {
        *self.finish = true;
    }
}
