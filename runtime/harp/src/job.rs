//! Running a job in one process: the in-process cluster.
//!
//! [`run_job`] starts M server actors, the master actor and N worker actors (each hosting
//! `executors_per_worker` executors) on the caller's tokio runtime, all of them on one node
//! (one parameter cache, one update log). It returns when the driver finishes, with the
//! driver itself, counters, and optionally every parameter row. [`run_job_consistent`]
//! also takes consistent checkpoints and resumes from them (`consistent.rs`, `resume.rs`).

use crate::app::{App, Driver, JobInfo};
use crate::consistent::{CheckpointLayout, ConsistentOptions, ConsistentReport};
use crate::error::HarpError;
use crate::master::{ConsistentSetup, MasterActor, MasterArgs, MasterMsg, ResumeStart, WriteSetup};
use crate::node::{NodeStats, ParamStore, Routing};
use crate::resume::ResumePoint;
use crate::server::ServerActor;
use crate::table::{Element, Table};
use crate::worker::{NodeShared, WorkerActor, WorkerArgs};
use harp_core::{ExecutorMap, FlushBook, ParamKey, RowData, ServerId, ShardMap, WorkerId};
use ractor::{Actor, ActorRef};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

/// The shape of an in-process job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobConfig {
    pub workers: u32,
    pub servers: u32,
    pub executors_per_worker: u32,
    /// Logical shards per server at start (shards, not servers, are what move).
    pub shards_per_server: u32,
    /// Read every parameter row back from the servers when the job ends.
    pub collect_params: bool,
    /// SCAR's running checkpoint and the partial recovery of failed servers (`None`: no
    /// checkpoint; a failed server ends the job).
    pub scar: Option<crate::scar::ScarOptions>,
}

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            workers: 1,
            servers: 1,
            executors_per_worker: 1,
            shards_per_server: 8,
            collect_params: false,
            scar: None,
        }
    }
}

impl JobConfig {
    pub fn num_executors(&self) -> u32 {
        self.workers.saturating_mul(self.executors_per_worker)
    }

    /// Refuses shapes the runtime cannot run.
    pub fn validate(&self) -> Result<(), HarpError> {
        let bad = |what: &str| Err(HarpError::InvalidConfig(what.to_string()));
        if self.workers == 0 {
            return bad("a job needs at least one worker");
        }
        if self.servers == 0 {
            return bad("a job needs at least one server");
        }
        if self.executors_per_worker == 0 {
            return bad("a worker needs at least one executor");
        }
        if self.shards_per_server == 0 {
            return bad("a server needs at least one shard");
        }
        if self
            .workers
            .checked_mul(self.executors_per_worker)
            .is_none()
            || self.servers.checked_mul(self.shards_per_server).is_none()
        {
            return bad("too many executors or shards");
        }
        if let Some(scar) = &self.scar {
            scar.validate()?;
        }
        Ok(())
    }
}

/// Counters of a finished job.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct JobStats {
    pub tasks_completed: u64,
    pub final_version: u64,
    pub elapsed_s: f64,
    /// Rows held in the caches of the nodes live at the end (summed over them).
    pub cached_rows: usize,
    /// The nodes' parameter traffic: in one process its one node's counters; across
    /// processes the sum over the nodes counted (`nodes_counted`).
    pub node: NodeStats,
    /// The servers' counters, summed: in one process every server live at the end and those
    /// fault injection crashed, as they were at the crash; across processes those of the
    /// nodes counted.
    pub servers: crate::server::ServerStats,
    /// How many nodes' counters `node`, `servers` and `cached_rows` sum: 1 in one process;
    /// across processes the nodes that left (asked as they went) and those live at the end,
    /// that answered, and those that died or did not answer, from the counters they last
    /// sent unasked (every second while they ran); one that never sent any is left out,
    /// and logged.
    pub nodes_counted: u32,
    /// Of `nodes_counted`, how many were counted from their last report rather than asked:
    /// what they did in the last second or so before they died is missing. 0 in one
    /// process.
    pub nodes_counted_from_reports: u32,
    /// What SCAR's running checkpoint did (all zero without one).
    pub checkpoints: crate::scar::CheckpointStats,
    /// Every failed server recovered from, in order.
    pub recoveries: Vec<crate::scar::ServerRecovery>,
    /// Every dead worker node recovered from, in order (jobs across processes with
    /// `ClusterOptions::worker_recovery`; empty in one process).
    pub worker_recoveries: Vec<crate::scar::WorkerRecovery>,
    /// Every fault injected (`ScarOptions::inject`), in order.
    pub injections: Vec<crate::scar::InjectionReport>,
    /// The job's parameter shards (fixed for its run): a row's shard is
    /// [`shard_of`](crate::shard_of)`(key, shards)`, which is how the shards a recovery
    /// names map to rows.
    pub shards: u32,
}

/// Every parameter row at the end of a job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamDump {
    pub rows: BTreeMap<ParamKey, RowData>,
}

impl ParamDump {
    /// One row of a table, if it was ever read or updated.
    pub fn row<T: Element>(&self, table: &Table<T>, row: u64) -> Option<&[T]> {
        self.rows
            .get(&ParamKey::new(table.id(), row))
            .and_then(T::slice)
    }

    /// Every row of a table, by row key.
    pub fn table<'a, T: Element>(
        &'a self,
        table: &'a Table<T>,
    ) -> impl Iterator<Item = (u64, &'a [T])> + 'a {
        self.rows
            .iter()
            .filter(move |(k, _)| k.table == table.id())
            .filter_map(|(k, v)| T::slice(v).map(|s| (k.row, s)))
    }
}

/// What a finished job hands back.
pub struct JobOutcome<A: App> {
    pub driver: A::Driver,
    pub stats: JobStats,
    pub params: Option<ParamDump>,
}

pub(crate) async fn spawn<T: Actor>(
    actor: T,
    args: T::Arguments,
) -> Result<ActorRef<T::Msg>, HarpError> {
    Actor::spawn(None, actor, args)
        .await
        .map(|(r, _handle)| r)
        .map_err(|e| HarpError::ActorSpawn(e.to_string()))
}

/// Runs `app` to completion on an in-process cluster shaped by `config`.
pub async fn run_job<A: App>(app: Arc<A>, config: &JobConfig) -> Result<JobOutcome<A>, HarpError> {
    let (_, inbox) = crate::control::job_control();
    run_job_controlled(app, config, inbox).await
}

/// Like [`run_job`], and carries out the scale commands of the [`JobControl`] that `control`
/// belongs to while the job runs (executors and shards move; micro-tasks keep running).
///
/// [`JobControl`]: crate::JobControl
pub async fn run_job_controlled<A: App>(
    app: Arc<A>,
    config: &JobConfig,
    control: crate::control::ControlInbox,
) -> Result<JobOutcome<A>, HarpError> {
    let none = ConsistentOptions::default();
    run_job_inner(app, config, control, &none)
        .await
        .map(|(outcome, _)| outcome)
}

/// Like [`run_job`], taking consistent checkpoints into `options.checkpoint_dir` and/or
/// resuming from the newest complete one in `options.resume_from` (see
/// [`ConsistentOptions`]); returns what the checkpoints did too. A resume needs the
/// checkpoint's executors per worker and shards per server; its workers and servers may
/// differ in number from the checkpointed job's (the checkpoint's executors and shards are
/// spread over them).
pub async fn run_job_consistent<A: App>(
    app: Arc<A>,
    config: &JobConfig,
    options: &ConsistentOptions,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    let (_, inbox) = crate::control::job_control();
    run_job_inner(app, config, inbox, options).await
}

/// [`run_job_consistent`], also carrying out the commands of the [`JobControl`] that
/// `control` belongs to (scale commands, and [`JobControl::stop`], which ends the job with
/// [`HarpError::Stopped`] once the checkpoint being written, if any, is written).
///
/// [`JobControl`]: crate::JobControl
/// [`JobControl::stop`]: crate::JobControl::stop
pub async fn run_job_consistent_controlled<A: App>(
    app: Arc<A>,
    config: &JobConfig,
    options: &ConsistentOptions,
    control: crate::control::ControlInbox,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    run_job_inner(app, config, control, options).await
}

async fn run_job_inner<A: App>(
    app: Arc<A>,
    config: &JobConfig,
    mut control: crate::control::ControlInbox,
    options: &ConsistentOptions,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    // The event of every scale command answered by the end is told before this returns.
    let told = control.commands_told();
    let result = run_job_body(app, config, control, options).await;
    told.wait().await;
    result
}

async fn run_job_body<A: App>(
    app: Arc<A>,
    config: &JobConfig,
    control: crate::control::ControlInbox,
    options: &ConsistentOptions,
) -> Result<(JobOutcome<A>, ConsistentReport), HarpError> {
    config.validate()?;
    let executors_on = crate::executor_runtime::ExecutorRuntime::for_job()?;
    let started = Instant::now();
    let ConsistentStart {
        layout,
        mut setup,
        executors: mut executor_states,
        rows: resume_rows,
        driver: resume_driver,
        report,
    } = consistent_start(&*app, options, CheckpointLayout::of(config))?;
    let tables = Arc::new(app.tables().clone());
    let info = JobInfo {
        num_executors: layout.num_executors(),
        num_workers: config.workers,
        num_servers: config.servers,
    };

    let mut servers = BTreeMap::new();
    for s in 0..config.servers {
        let id = ServerId(s);
        servers.insert(id, spawn(ServerActor, (id, tables.clone())).await?);
    }
    let server_ids: Vec<ServerId> = servers.keys().copied().collect();
    let shard_map = ShardMap::round_robin(layout.num_shards(), &server_ids)?;
    let store = ParamStore::new(
        tables.clone(),
        Routing {
            shard_map: shard_map.clone(),
            servers: servers.clone(),
        },
    );
    let store = Arc::new(match &config.scar {
        Some(_) => store.awaiting_lost_servers(),
        None => store,
    });
    let resuming = resume_driver.is_some();
    if resuming {
        if let Err(e) = restore_resumed_rows(
            &servers,
            &shard_map,
            resume_rows,
            &mut setup,
            config.scar.is_some(),
        )
        .await
        {
            stop_servers(&store);
            return Err(e);
        }
    }

    let driver = match app.create_driver(&info).and_then(|mut driver| {
        if let Some(state) = &resume_driver {
            driver.restore_state(state)?;
        }
        Ok(driver)
    }) {
        Ok(d) => d,
        Err(e) => {
            stop_servers(&store);
            return Err(HarpError::DriverFailed(e));
        }
    };
    let (done_tx, done_rx) = oneshot::channel();
    let master = spawn(
        MasterActor::<A>::new(),
        MasterArgs {
            driver,
            info: info.clone(),
            tables: tables.clone(),
            scar: config.scar.clone(),
            // In one process workers cannot die apart from the master.
            worker_recovery: false,
            events: control.events(),
            done: done_tx,
        },
    )
    .await;
    let master = match master {
        Ok(m) => m,
        Err(e) => {
            stop_servers(&store);
            return Err(e);
        }
    };
    if let Some(setup) = setup {
        if master
            .send_message(MasterMsg::Consistent(Box::new(setup)))
            .is_err()
        {
            stop_servers(&store);
            return Err(HarpError::MasterUnreachable);
        }
    }
    let node = Arc::new(NodeShared {
        store: store.clone(),
        book: Mutex::new(FlushBook::new()),
        master: master.clone(),
        staging: None,
        executors_on,
    });

    let worker_ids: Vec<WorkerId> = (0..config.workers).map(WorkerId).collect();
    let executors = ExecutorMap::round_robin(info.num_executors, &worker_ids)?;
    let mut workers = BTreeMap::new();
    for id in &worker_ids {
        let ids = executors.executors_on(*id);
        // A resumed job creates no executor fresh: each comes from its saved state.
        let saved = resuming.then_some(&mut executor_states);
        let hosted = create_executors(&*app, &ids, &info, saved);
        let hosted = match hosted {
            Ok(hosted) => hosted,
            Err(e) => {
                shut_down(&master, workers.values(), &store);
                return Err(e);
            }
        };
        let args = WorkerArgs {
            id: *id,
            executors: hosted,
            node: node.clone(),
        };
        match spawn(WorkerActor::<A>::new(), args).await {
            Ok(w) => {
                workers.insert(*id, w);
            }
            Err(e) => {
                shut_down(&master, workers.values(), &store);
                return Err(e);
            }
        }
    }
    let started_by_commands = Arc::new(Mutex::new(crate::control::Started::default()));
    let stopping = crate::spawn::spawn(crate::control::forward_stop(
        control.stop_requested(),
        master.clone(),
    ));
    let control = crate::spawn::spawn(crate::control::serve(
        control,
        crate::control::ControlContext {
            node: node.clone(),
            master: master.clone(),
            tables,
            workers: worker_ids.clone(),
            servers: server_ids.clone(),
            started: started_by_commands.clone(),
            job_started: started,
        },
    ));
    let started_ok = master
        .send_message(MasterMsg::Start {
            workers: workers.clone(),
            executors,
            servers,
            shards: shard_map,
            routes: vec![crate::master::RouteTarget::Local(store.clone())],
            server_places: Vec::new(),
        })
        .is_ok();
    let end = if started_ok {
        done_rx.await.unwrap_or(Err(HarpError::MasterUnreachable))
    } else {
        Err(HarpError::MasterUnreachable)
    };
    control.abort();
    stopping.abort();
    let added = std::mem::take(
        &mut *started_by_commands
            .lock()
            .unwrap_or_else(|p| p.into_inner()),
    );
    for w in &added.workers {
        w.stop(None);
    }
    let mut end = match end {
        Ok(end) => end,
        Err(e) => {
            shut_down(&master, workers.values(), &store);
            return Err(e);
        }
    };
    finish_consistent_write(&mut end).await;
    let params = if config.collect_params {
        match dump_params(&store).await {
            Ok(params) => Some(params),
            Err(e) => {
                shut_down(&master, workers.values(), &store);
                return Err(e);
            }
        }
    } else {
        None
    };
    let stats = JobStats {
        tasks_completed: end.tasks_completed,
        final_version: end.final_version.0,
        elapsed_s: started.elapsed().as_secs_f64(),
        cached_rows: store.cached_rows(),
        node: store.stats(),
        servers: {
            let mut servers = crate::server::sum_server_stats(store.servers()).await;
            servers.add(&end.crashed_servers);
            servers
        },
        nodes_counted: 1,
        nodes_counted_from_reports: 0,
        checkpoints: end.checkpoints,
        recoveries: end.recoveries,
        worker_recoveries: end.worker_recoveries,
        injections: end.injections,
        shards: end.shards,
    };
    shut_down(&master, workers.values(), &store);
    let report = report.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok((
        JobOutcome {
            driver: end.driver,
            stats,
            params,
        },
        report,
    ))
}

/// What a job starts from with consistent checkpoints: the master's setup (`None` when it
/// neither writes nor resumes) and, when resuming, the checkpoint's executor states, rows and
/// driver state (`driver` is `Some` exactly when resuming).
pub(crate) struct ConsistentStart<A: App> {
    /// The job's layout: the checkpoint's when resuming (its executors and shards, whatever
    /// the job's workers and servers), else the job's own.
    pub layout: CheckpointLayout,
    pub setup: Option<ConsistentSetup<A>>,
    pub executors: BTreeMap<harp_core::ExecutorId, Vec<u8>>,
    pub rows: Vec<(harp_core::ParamKey, harp_core::RowData)>,
    pub driver: Option<Vec<u8>>,
    pub report: Arc<Mutex<ConsistentReport>>,
}

/// Loads the checkpoint to resume from (checked against `layout`) and opens the directory
/// to write into, as `options` ask; in one process and across processes alike.
pub(crate) fn consistent_start<A: App>(
    app: &A,
    options: &ConsistentOptions,
    layout: CheckpointLayout,
) -> Result<ConsistentStart<A>, HarpError> {
    options.validate()?;
    let resume = match &options.resume_from {
        Some(dir) => Some(crate::resume::load(app, dir, options.keep, layout)?),
        None => None,
    };
    let layout = resume.as_ref().map_or(layout, |point| point.meta.layout);
    let write = checkpoint_writer(app, options, layout, resume.as_ref())?;
    // Worker recovery's states come from the resumed directory too when the job writes
    // elsewhere (or nowhere), until it has written a checkpoint of its own.
    let resumed_from = (resume.as_ref())
        .filter(|point| {
            (write.as_ref()).is_none_or(|w| !same_dir(w.store.dir(), point.store.dir()))
        })
        .map(|point| point.store.clone());
    let report = Arc::new(Mutex::new(ConsistentReport {
        resumed: resume.as_ref().map(|r| r.record.clone()),
        ..ConsistentReport::default()
    }));
    let mut start = ConsistentStart {
        layout,
        setup: None,
        executors: BTreeMap::new(),
        rows: Vec::new(),
        driver: None,
        report: report.clone(),
    };
    let resume_start = resume.map(|point| {
        start.executors = point.executors;
        start.rows = point.rows;
        start.driver = Some(point.driver);
        ResumeStart {
            held: point.held,
            iteration: point.meta.iteration,
            version: harp_core::Version(point.meta.version),
            next_task: point.meta.next_task,
            tasks_completed: point.meta.tasks_completed,
        }
    });
    if write.is_some() || resume_start.is_some() {
        start.setup = Some(ConsistentSetup {
            write,
            resume: resume_start,
            report,
            seed: None,
            resumed_from,
        });
    }
    Ok(start)
}

/// A resumed job, before anything runs: the checkpoint's rows into the servers and, with
/// SCAR's running checkpoint (`scar`), the image seeded with them
/// ([`crate::resume::seed_image`]).
pub(crate) async fn restore_resumed_rows<A: App>(
    servers: &BTreeMap<ServerId, ActorRef<crate::server::ServerMsg>>,
    shards: &ShardMap,
    rows: Vec<(harp_core::ParamKey, harp_core::RowData)>,
    setup: &mut Option<ConsistentSetup<A>>,
    scar: bool,
) -> Result<(), HarpError> {
    crate::resume::restore_rows(servers, shards, rows).await?;
    if let (true, Some(setup)) = (scar, setup.as_mut()) {
        setup.seed = Some(crate::resume::seed_image(servers).await?);
    }
    Ok(())
}

/// Waits for the last consistent checkpoint's write before the job reports.
pub(crate) async fn finish_consistent_write<A: App>(end: &mut crate::master::MasterEnd<A>) {
    if let Some(writing) = end.consistent.take().and_then(|c| c.writing) {
        if let Err(e) = writing.await {
            tracing::warn!(error = %e, "the last consistent checkpoint's write did not finish");
        }
    }
}

/// The store consistent checkpoints are written to: the resumed directory when
/// `checkpoint_dir` names it too (the stored job id continues), else a new directory (under
/// the resumed job's id, or a fresh one).
fn checkpoint_writer<A: App>(
    app: &A,
    options: &ConsistentOptions,
    layout: CheckpointLayout,
    resume: Option<&ResumePoint<A::Args>>,
) -> Result<Option<WriteSetup>, HarpError> {
    let Some(dir) = &options.checkpoint_dir else {
        return Ok(None);
    };
    let store = match resume {
        Some(point) if same_dir(point.store.dir(), dir) => point.store.clone(),
        Some(point) => harp_checkpoint::CheckpointStore::create(
            dir,
            point.store.identity().clone(),
            options.keep,
        )?,
        None => harp_checkpoint::CheckpointStore::create(
            dir,
            harp_checkpoint::JobIdentity::new(fresh_job_id(app.name()), app.name()),
            options.keep,
        )?,
    };
    Ok(Some(WriteSetup {
        store,
        every: options.every,
        layout,
        stop_wait: options.stop_wait,
    }))
}

/// Whether `a` and `b` name the same directory.
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A job id for a new checkpoint directory: the app, the time and the process.
fn fresh_job_id(app: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{app}-{nanos:x}-{:x}", std::process::id())
}

/// Creates the executors a worker hosts (the app loads their input partitions), or, given
/// a checkpoint's saved states, re-creates them from those (`App::restore_executor`).
pub(crate) fn create_executors<A: App>(
    app: &A,
    ids: &[harp_core::ExecutorId],
    info: &JobInfo,
    mut saved: Option<&mut BTreeMap<harp_core::ExecutorId, Vec<u8>>>,
) -> Result<Vec<(harp_core::ExecutorId, A::Executor)>, HarpError> {
    ids.iter()
        .map(|&id| {
            let created = match saved.as_deref_mut() {
                None => app.create_executor(id, info),
                Some(states) => {
                    let state = states.remove(&id).ok_or_else(|| {
                        HarpError::InvalidConfig(format!("the checkpoint holds no state for {id}"))
                    })?;
                    app.restore_executor(id, info, state)
                }
            };
            created
                .map(|e| (id, e))
                .map_err(|source| HarpError::ExecutorCreation {
                    executor: id,
                    source,
                })
        })
        .collect()
}

async fn dump_params(store: &ParamStore) -> Result<ParamDump, HarpError> {
    let mut dump = ParamDump::default();
    for rows in crate::server::dump_servers(store.servers()).await? {
        dump.rows.extend(rows);
    }
    Ok(dump)
}

fn stop_servers(store: &ParamStore) {
    for (_, server) in store.servers() {
        server.stop(None);
    }
}

fn shut_down<'a, A: App>(
    master: &ActorRef<MasterMsg<A>>,
    workers: impl Iterator<Item = &'a ActorRef<crate::worker::WorkerMsg<A>>>,
    store: &ParamStore,
) {
    master.stop(None);
    for w in workers {
        w.stop(None);
    }
    stop_servers(store);
}
