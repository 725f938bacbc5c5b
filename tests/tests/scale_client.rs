//! `harp scale` (`harp::send_scale_command`) against a job across processes whose master and
//! node run in this process and talk over QUIC exactly as processes do (issue 4):
//!
//! - a command that arrives while the job is still starting (its node is creating its
//!   executor) is answered at once that the job is starting, a typed error; it used to wait
//!   for a QUIC handshake nobody completed until the connect deadline;
//! - a command the master carries out as the job ends still gets its answer: the master's
//!   exit used to close its endpoint right after the nodes hung up, discarding the answer
//!   still queued, and the client only saw its connection lost.
//!
//! The tiny app here runs empty micro-tasks until the test stops it; creating an executor
//! waits until the test lets the setup go on.

use harp::{
    App, AppError, ClusterOptions, Completion, Driver, DriverContext, Executor, ExecutorId,
    HarpError, Init, JobCredentials, JobInfo, NodeLauncher, NodeRoles, ParamClient, TableSet,
    UpdateRule,
};
use harp_tests::{runtime, spawn_nodes, Threads};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// A gate threads wait at until it opens.
#[derive(Default)]
struct Latch {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Latch {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Opens its latch when dropped, so a failing test does not leave a thread waiting.
struct OpenOnDrop(Arc<Latch>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Empty micro-tasks, one after the other on each executor, until `stop`.
struct StepApp {
    tables: TableSet,
    /// Creating an executor waits for this.
    setup: Arc<Latch>,
    /// Told when an executor's creation begins (the job is setting up).
    creating: Arc<Notify>,
    /// Told when the driver dispatches its first tasks (the job runs).
    started: Arc<Notify>,
    /// The driver finishes the job at its next completion.
    stop: Arc<AtomicBool>,
}

impl StepApp {
    fn new(setup_open: bool) -> Self {
        let mut tables = TableSet::new();
        tables
            .dense_f32("t", 1, UpdateRule::Add, Init::Zeros)
            .unwrap();
        let setup = Arc::new(Latch::default());
        if setup_open {
            setup.open();
        }
        Self {
            tables,
            setup,
            creating: Arc::default(),
            started: Arc::default(),
            stop: Arc::default(),
        }
    }
}

struct StepDriver {
    started: Arc<Notify>,
    stop: Arc<AtomicBool>,
}

struct StepExecutor;

impl App for StepApp {
    type Args = ();
    type Output = ();
    type Driver = StepDriver;
    type Executor = StepExecutor;

    fn name(&self) -> &str {
        "steps"
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, _job: &JobInfo) -> Result<StepDriver, AppError> {
        Ok(StepDriver {
            started: self.started.clone(),
            stop: self.stop.clone(),
        })
    }

    fn create_executor(&self, _id: ExecutorId, _job: &JobInfo) -> Result<StepExecutor, AppError> {
        self.creating.notify_one();
        self.setup.wait();
        Ok(StepExecutor)
    }
}

impl Driver<StepApp> for StepDriver {
    fn dispatch_initial_tasks(&mut self, ctx: &mut DriverContext<'_, ()>) -> Result<(), AppError> {
        for e in 0..ctx.num_executors() {
            ctx.dispatch(ExecutorId(e), ())?;
        }
        self.started.notify_one();
        Ok(())
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<()>,
        ctx: &mut DriverContext<'_, ()>,
    ) -> Result<(), AppError> {
        if self.stop.load(Ordering::SeqCst) {
            ctx.finish();
        } else {
            ctx.dispatch(completion.executor, ())?;
        }
        Ok(())
    }
}

impl Executor<StepApp> for StepExecutor {
    async fn run_task(&mut self, _args: (), _ps: &mut ParamClient) -> Result<(), AppError> {
        // Paces the loop; nothing waits on it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    }
}

type MasterTask = tokio::task::JoinHandle<Result<harp::JobOutcome<StepApp>, HarpError>>;

/// Starts the master of a one-node job of `app`; returns it and where it listens.
async fn start_master(
    app: &Arc<StepApp>,
    creds: &Arc<JobCredentials>,
    launcher: Option<NodeLauncher>,
) -> (MasterTask, SocketAddr) {
    let options = ClusterOptions {
        nodes: 1,
        shards_per_server: 2,
        // A node blocked in its setup must not look dead.
        lease_timeout_ms: 30_000,
        launcher,
        ..ClusterOptions::default()
    };
    let (addr_tx, addr_rx) = oneshot::channel();
    let (app, creds) = (app.clone(), creds.clone());
    let master = tokio::spawn(async move {
        harp::run_job_across(app, &creds, &options, |addr| {
            let _ = addr_tx.send(addr);
        })
        .await
    });
    (master, addr_rx.await.expect("the master listens"))
}

/// Issue 4: while the master sets the job up (its node creates its executor), `harp scale`
/// is told at once that the job is starting; once the job runs, the same command is carried
/// out.
#[test]
fn a_command_while_the_job_starts_is_told_so_at_once() {
    let app = Arc::new(StepApp::new(false));
    let creds = Arc::new(JobCredentials::generate("scale-client").unwrap());
    let setup_goes_on = OpenOnDrop(app.setup.clone());
    runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master(&app, &creds, None).await;
        // The node runs on a runtime of its own: the creation of its executor holds that
        // thread until the test lets it go, not one of the master's.
        let node = {
            let (app, creds) = (app.clone(), creds.clone());
            std::thread::spawn(move || {
                runtime(Threads::Current).block_on(harp::run_node_with(
                    app,
                    &creds,
                    addr,
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    NodeRoles::BOTH,
                    |_| {},
                ))
            })
        };
        // Every node joined; the master waits for it to get ready: the job is starting.
        app.creating.notified().await;
        let error = harp::send_scale_command(&creds, addr, 0, vec![])
            .await
            .expect_err("the job does not run yet");
        assert_eq!(format!("{error:?}"), "JobStarting");
        assert_eq!(
            error.to_string(),
            "the job has not started yet: it is still starting; try again when it runs"
        );
        drop(setup_goes_on);
        app.started.notified().await;
        let nodes = harp::send_scale_command(&creds, addr, 0, vec![])
            .await
            .expect("the job runs");
        assert_eq!(nodes, "nodes: 0 (worker+server)");
        app.stop.store(true, Ordering::SeqCst);
        master.await.unwrap().expect("the job ends well");
        node.join().unwrap().expect("the node ends well");
    });
}

/// Jobs the answer-at-the-end scenario runs: the answer was lost in some of them before the
/// fix (see the test).
const ENDINGS: usize = 6;

/// Issue 4: `harp scale --add 1` whose launcher is still running when the job ends (it ends
/// the job and returns only once the node has exited: the master's exit is under way) gets
/// the master's answer; before the fix the master closed its endpoint as soon as the node
/// hung up and the client saw its connection lost.
#[test]
fn a_command_carried_out_as_the_job_ends_is_still_answered() {
    for ending in 0..ENDINGS {
        let app = Arc::new(StepApp::new(true));
        let creds = Arc::new(JobCredentials::generate("scale-client").unwrap());
        let node_exited = Arc::new(Latch::default());
        let _no_wait_left = OpenOnDrop(node_exited.clone());
        let launcher = {
            let (stop, node_exited) = (app.stop.clone(), node_exited.clone());
            NodeLauncher(Arc::new(move |_n| {
                stop.store(true, Ordering::SeqCst);
                // Starts nothing: returns once the job ended and its node exited. The
                // master's other tasks go on meanwhile.
                tokio::task::block_in_place(|| node_exited.wait());
                Ok(())
            }))
        };
        runtime(Threads::Multi(2)).block_on(async {
            let (master, addr) = start_master(&app, &creds, Some(launcher)).await;
            let nodes = spawn_nodes(&app, &creds, addr, &[NodeRoles::BOTH]);
            {
                let node_exited = node_exited.clone();
                tokio::spawn(async move {
                    for node in nodes {
                        let _ = node.await;
                    }
                    node_exited.open();
                });
            }
            app.started.notified().await;
            let answer = harp::send_scale_command(&creds, addr, 1, vec![]).await;
            let answer = answer.unwrap_or_else(|e| panic!("job {ending}: {e}"));
            assert_eq!(
                answer,
                "started 1 node processes; they get load as they join"
            );
            master.await.unwrap().expect("the job ends well");
        });
    }
}
