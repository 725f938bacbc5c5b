//! Jobs across processes from the command line: the master side of `--processes N` (which
//! starts its own `harp node` children) and `--listen/--nodes` (which waits for nodes started
//! by hand), and the `harp node` side.

use super::ClusterArgs;
use anyhow::{anyhow, bail, Context, Result};
use harp::{
    App, ClusterOptions, ConsistentOptions, ConsistentReport, JobConfig, JobCredentials, JobEvent,
    JobOutcome, NodeLauncher,
};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs `app` in process, or across processes when `--processes` or `--nodes` is given,
/// with consistent checkpoints when `consistent` is given (their report is returned).
/// Every event of the job (a node joining or leaving, an injected fault, a recovery) goes
/// to `on_event` as it happens; all of them have when this returns, whether or not the job
/// succeeded.
pub fn execute<A: App>(
    app: Arc<A>,
    cluster: &ClusterArgs,
    collect_params: bool,
    on_event: impl Fn(&JobEvent) + Send + 'static,
    consistent: Option<&ConsistentOptions>,
) -> Result<(JobOutcome<A>, Option<ConsistentReport>)> {
    let runtime = cluster.runtime()?;
    cluster.validate_scar()?;
    cluster.validate_worker_recovery()?;
    let (control, inbox) = harp::job_control();
    let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    let inbox = inbox.with_events(events_tx);
    let (job_ended, reporting) = report_events(&runtime, events, on_event);
    let signals = runtime.spawn(super::signals::stop_on_signals(control));
    let result = match cluster.node_count()? {
        None => {
            let job: JobConfig = cluster.job_config(collect_params);
            let options = consistent.cloned().unwrap_or_default();
            let app_name = app.name().to_string();
            runtime
                .block_on(harp::run_job_consistent_controlled(
                    app, &job, &options, inbox,
                ))
                .map_err(|e| with_resume_hint(e, consistent, &app_name))
                .map(|(outcome, report)| (outcome, consistent.map(|_| report)))
        }
        Some(nodes) => across(
            app,
            cluster,
            nodes,
            &runtime,
            collect_params,
            consistent,
            inbox,
        ),
    };
    // The job told every event before it ended: the reporter hands on those still queued.
    let _ = job_ended.send(());
    let _ = runtime.block_on(reporting);
    signals.abort();
    result
}

/// Hands each of the job's events to `on_event` as it comes until the job has ended (the
/// returned sender is sent to or dropped), then those still queued, and ends.
fn report_events(
    runtime: &tokio::runtime::Runtime,
    mut events: tokio::sync::mpsc::UnboundedReceiver<JobEvent>,
    on_event: impl Fn(&JobEvent) + Send + 'static,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (ended_tx, mut ended) = tokio::sync::oneshot::channel::<()>();
    let reporting = runtime.spawn(async move {
        loop {
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Some(event) => on_event(&event),
                    None => return,
                },
                _ = &mut ended => break,
            }
        }
        while let Ok(event) = events.try_recv() {
            on_event(&event);
        }
    });
    (ended_tx, reporting)
}

/// A stopped job that wrote checkpoints says how to go on from them; one that wrote none
/// (its last one given up after --stop-wait, say) says so rather than offer a `--resume`
/// that would be refused. The error stays inside (`downcast_ref::<harp::HarpError>`), for
/// the stopped job's checkpoint report.
fn with_resume_hint(
    error: harp::HarpError,
    consistent: Option<&ConsistentOptions>,
    app: &str,
) -> anyhow::Error {
    let dir = consistent.and_then(|c| c.checkpoint_dir.as_ref());
    let hint = match (&error, dir) {
        (harp::HarpError::Stopped { .. }, Some(dir)) if harp::resumable(dir, app) => format!(
            "{error}; to go on from the newest checkpoint in {dir}, run the same command with --resume {dir}",
            dir = dir.display()
        ),
        (harp::HarpError::Stopped { .. }, Some(dir)) => format!(
            "{error}; {dir} holds no complete checkpoint of this job to go on from",
            dir = dir.display()
        ),
        _ => return error.into(),
    };
    // The hint holds the error's text, which `main` therefore does not print twice.
    anyhow::Error::new(error).context(hint)
}

/// [`execute`] across processes: `nodes` node processes.
fn across<A: App>(
    app: Arc<A>,
    cluster: &ClusterArgs,
    nodes: u32,
    runtime: &tokio::runtime::Runtime,
    collect_params: bool,
    consistent: Option<&ConsistentOptions>,
    control: harp::ControlInbox,
) -> Result<(JobOutcome<A>, Option<ConsistentReport>)> {
    let app_name = app.name().to_string();
    let (creds, creds_dir, own_dir) = match &cluster.credentials {
        Some(dir) => {
            let (creds, created) = JobCredentials::load_or_generate(dir, app.name())?;
            if created {
                eprintln!(
                    "created the job's credentials in {} (give each node's machine a copy: harp node --credentials DIR)",
                    dir.display()
                );
            }
            (creds, dir.clone(), false)
        }
        None => {
            let dir = unique_temp_dir()?;
            let creds = JobCredentials::generate(app.name())?;
            creds.save(&dir)?;
            (creds, dir, true)
        }
    };
    let listen = cluster
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let spawn_children = cluster.processes.is_some();
    let children = Arc::new(Mutex::new(Children::default()));
    // With --etcd, the job's desired_nodes key feeds this (see `watch_etcd`).
    let (desired_tx, desired_rx) = tokio::sync::watch::channel(None);
    let options = ClusterOptions {
        nodes,
        listen,
        executors_per_worker: cluster.executors_per_worker,
        shards_per_server: cluster.shards_per_server,
        collect_params,
        lease_timeout_ms: cluster.lease_timeout_ms,
        launcher: spawn_children.then(|| launcher(children.clone(), creds_dir.clone())),
        desired_nodes: cluster.etcd.is_some().then_some(desired_rx),
        scar: cluster.scar_options(),
        worker_recovery: cluster.recover_workers,
        consistent: consistent.cloned().unwrap_or_default(),
        ..ClusterOptions::default()
    };
    // Deaths the master hears of from outside its links: etcd's, and its own children's
    // exits (at once, instead of after the lease timeout).
    let (failures_tx, failures) = tokio::sync::mpsc::unbounded_channel();
    watch_etcd(runtime, cluster, &creds, desired_tx, failures_tx.clone())?;
    let exits = runtime.spawn(watch_exits(children.clone(), failures_tx));
    let listening = |addr: SocketAddr| {
        let mut children = lock(&children);
        children.master = Some(addr);
        if spawn_children {
            for _ in 0..nodes {
                if let Err(e) = children.spawn(&creds_dir) {
                    children.error.get_or_insert(e);
                }
            }
            eprintln!(
                "master listening on {addr}; grow or shrink the job with: harp scale --job {} --credentials {} --add N | --remove NODE",
                join_hint(addr),
                creds_dir.display()
            );
        } else {
            eprintln!(
                "master listening on {addr}; start {nodes} nodes with: harp node --join {} --credentials {} -- <the same run arguments>",
                join_hint(addr),
                creds_dir.display()
            );
        }
    };
    let result = runtime.block_on(harp::run_job_across_consistent(
        app, &creds, &options, listening, failures, control,
    ));
    // The nodes exit now the job has ended: that is no death.
    exits.abort();
    let (spawned, spawn_error) = {
        let mut children = lock(&children);
        (std::mem::take(&mut children.spawned), children.error.take())
    };
    reap(spawned);
    if own_dir {
        let _ = std::fs::remove_dir_all(&creds_dir);
    }
    if let Some(e) = spawn_error {
        return Err(e);
    }
    let (outcome, report) = result.map_err(|e| with_resume_hint(e, consistent, &app_name))?;
    Ok((outcome, consistent.map(|_| report)))
}

/// What `harp node --join` takes for a master listening at `addr`: on every interface,
/// any address of this host the nodes reach (on this host, loopback too).
fn join_hint(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("<an address of this host>:{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// The node processes the master started, and where they join.
#[derive(Default)]
struct Children {
    master: Option<SocketAddr>,
    spawned: Vec<Launched>,
    error: Option<anyhow::Error>,
}

/// A node process the master started, named by its launch id (`harp::NODE_LAUNCH_ID_VAR`:
/// 1, 2, ... in the order they were started).
struct Launched {
    launch_id: u64,
    child: Child,
    /// Its exit was seen (and, if it was not a clean one, reported to the job).
    exit_seen: bool,
}

impl Children {
    fn spawn(&mut self, creds_dir: &Path) -> Result<()> {
        let addr = self
            .master
            .ok_or_else(|| anyhow!("the master is not listening yet"))?;
        let launch_id = self.spawned.len() as u64 + 1;
        self.spawned.push(Launched {
            launch_id,
            child: spawn_node(addr, creds_dir, launch_id)?,
            exit_seen: false,
        });
        Ok(())
    }

    /// The children that exited since the last call and did not end cleanly: each one's
    /// launch id and exit status.
    fn new_failed_exits(&mut self) -> Vec<(u64, String)> {
        let mut failed = Vec::new();
        for launched in self.spawned.iter_mut().filter(|l| !l.exit_seen) {
            let status = match launched.child.try_wait() {
                Ok(Some(status)) => status,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(launch_id = launched.launch_id, error = %e, "cannot tell whether a node process exited");
                    continue;
                }
            };
            launched.exit_seen = true;
            if !status.success() {
                failed.push((launched.launch_id, status.to_string()));
            }
        }
        failed
    }
}

/// How often the master looks for node processes of its own that exited.
const EXIT_POLL: Duration = Duration::from_millis(25);

/// Until aborted: reports every node process the master started that exits without a
/// clean end (a crash, a SIGKILL) to the job, which handles the node's death at once
/// instead of after its lease expired, or, before the job started, ends the start instead
/// of waiting out the join timeout. A clean exit (a node that left) is not reported.
async fn watch_exits(
    children: Arc<Mutex<Children>>,
    failures: tokio::sync::mpsc::UnboundedSender<harp::NodeFailure>,
) {
    let mut every = tokio::time::interval(EXIT_POLL);
    loop {
        every.tick().await;
        let exited = lock(&children).new_failed_exits();
        for (launch_id, how) in exited {
            tracing::warn!(launch_id, %how, "a node process this master started exited");
            if failures
                .send(harp::NodeFailure::Exited { launch_id, how })
                .is_err()
            {
                return; // the job has ended
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `harp scale --add N` on a master that starts its own nodes: N more children.
fn launcher(children: Arc<Mutex<Children>>, creds_dir: PathBuf) -> NodeLauncher {
    NodeLauncher(Arc::new(move |n| {
        let mut children = lock(&children);
        for _ in 0..n {
            children.spawn(&creds_dir).map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }))
}

/// Starts `harp node` for this command line, joining the master at `addr`, its process
/// named `launch_id`.
fn spawn_node(addr: SocketAddr, creds_dir: &Path, launch_id: u64) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the harp executable to start nodes")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut command = Command::new(exe);
    command
        .arg("node")
        .arg("--join")
        // On this host: a master listening on every interface is dialled on loopback.
        .arg(harp::dialable(addr).to_string())
        .arg("--credentials")
        .arg(creds_dir)
        .arg("--")
        .args(args)
        .env(harp::NODE_LAUNCH_ID_VAR, launch_id.to_string())
        .stdin(Stdio::null());
    // A Ctrl-C in the terminal goes to the master only, which ends the nodes through the
    // job (`signals.rs`).
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().context("cannot start a node process")
}

/// Waits a little for the nodes to exit after the job, then stops the stragglers, and says
/// how the node processes ended (those that left the job earlier included).
fn reap(children: Vec<Launched>) {
    if children.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let total = children.len();
    let mut failed = Vec::new();
    for Launched { mut child, .. } in children {
        let pid = child.id();
        let ended = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Err(e) => break Err(e.to_string()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err("still running 5 s after the job; killed".into());
                }
            }
        };
        match ended {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("pid {pid}: {status}")),
            Err(why) => failed.push(format!("pid {pid}: {why}")),
        }
    }
    let detail = if failed.is_empty() {
        String::new()
    } else {
        format!(" ({})", failed.join("; "))
    };
    eprintln!(
        "node processes: {} of {total} exited 0{detail}",
        total - failed.len()
    );
}

fn unique_temp_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("harp-job-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// The etcd key prefix of a job: its id in hex.
#[cfg(feature = "etcd")]
fn etcd_job(creds: &JobCredentials) -> String {
    harp::remote::job_id(creds)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// With `--etcd`, watches the job's members in etcd and forwards each death to the master,
/// and follows the job's desired node count (each valid value goes to `desired`).
#[cfg(feature = "etcd")]
fn watch_etcd(
    runtime: &tokio::runtime::Runtime,
    cluster: &ClusterArgs,
    creds: &JobCredentials,
    desired: tokio::sync::watch::Sender<Option<u32>>,
    tx: tokio::sync::mpsc::UnboundedSender<harp::NodeFailure>,
) -> Result<()> {
    use harp_membership::{
        EtcdMembership, EtcdOptions, MembershipBackend, MembershipConfig, MembershipEvent,
    };
    let Some(endpoint) = &cluster.etcd else {
        return Ok(());
    };
    let config = MembershipConfig::with_lease_timeout_ms(cluster.lease_timeout_ms);
    let backend = runtime
        .block_on(EtcdMembership::connect(
            endpoint,
            &etcd_job(creds),
            config,
            EtcdOptions::default(),
        ))
        .map_err(|e| anyhow!("{e}"))?;
    // This run's nodes take ids an earlier run's may still hold in etcd.
    let stale = runtime
        .block_on(backend.clear_members())
        .map_err(|e| anyhow!("{e}"))?;
    if stale > 0 {
        eprintln!(
            "etcd: removed {stale} member records an earlier run of this job left under {}",
            backend.members_prefix()
        );
    }
    let mut watch = runtime
        .block_on(backend.watch())
        .map_err(|e| anyhow!("{e}"))?;
    follow_desired_nodes(runtime, &backend, desired)?;
    runtime.spawn(async move {
        let _backend = backend;
        loop {
            match watch.next().await {
                Ok(MembershipEvent::Died { node, .. }) => {
                    let _ = tx.send(harp::NodeFailure::Seen {
                        node: node.0,
                        seen: "its etcd lease expired".to_string(),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the etcd membership watch ended");
                    return;
                }
            }
        }
    });
    Ok(())
}

/// Watches `/harp/jobs/<job>/desired_nodes` (and says where it is): each valid count goes to
/// `desired`, which the master follows; malformed values are logged and skipped by the watch.
#[cfg(feature = "etcd")]
fn follow_desired_nodes(
    runtime: &tokio::runtime::Runtime,
    backend: &harp_membership::EtcdMembership,
    desired: tokio::sync::watch::Sender<Option<u32>>,
) -> Result<()> {
    let mut watch = runtime
        .block_on(backend.watch_desired_nodes())
        .map_err(|e| anyhow!("{e}"))?;
    let held = match watch.current() {
        Some(count) => format!(
            "; it holds {count} already (written before this run, e.g. for an earlier run of this job), which the job follows now"
        ),
        None => String::new(),
    };
    eprintln!(
        "desired size key: {} (put a node count there to grow or shrink the job{held})",
        watch.key()
    );
    let backend = backend.clone();
    runtime.spawn(async move {
        let _backend = backend;
        loop {
            match watch.next().await {
                Ok(count) => {
                    if desired.send(Some(count)).is_err() {
                        return; // the job is over
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the etcd watch of the desired node count ended; the job keeps its size");
                    return;
                }
            }
        }
    });
    Ok(())
}

#[cfg(not(feature = "etcd"))]
fn watch_etcd(
    _runtime: &tokio::runtime::Runtime,
    cluster: &ClusterArgs,
    _creds: &JobCredentials,
    _desired: tokio::sync::watch::Sender<Option<u32>>,
    _tx: tokio::sync::mpsc::UnboundedSender<harp::NodeFailure>,
) -> Result<()> {
    if cluster.etcd.is_some() {
        bail!("this harp was built without etcd support: build it with `--features etcd` (needs protoc; see scripts/install-test-deps.sh)");
    }
    Ok(())
}

/// Where and as what a `harp node` process joins a job (its command line, less the app).
pub struct NodeTarget {
    pub join: SocketAddr,
    pub credentials: PathBuf,
    pub bind: IpAddr,
    pub roles: harp::NodeRoles,
    pub cluster: ClusterArgs,
}

impl NodeTarget {
    /// `harp node`: builds the app (`build`: its data loaded), joins the master at `join`
    /// and runs the app there until the job ends; with `--etcd`, holds a lease in etcd while
    /// it runs. SIGTERM or SIGINT makes it leave from the start: one while it loads its data
    /// ends it without joining (an error: it never took part); one while it joins and gets
    /// ready makes it leave as soon as the job runs.
    pub fn run<A: App>(&self, build: impl FnOnce() -> Result<Arc<A>>) -> Result<()> {
        let runtime = self.cluster.runtime()?;
        let asked = {
            let _inside = runtime.enter();
            asked_to_leave(super::signals::StopSignals::install())
        };
        self.run_asked(&runtime, build, asked)
    }

    /// [`Self::run`], asked to leave by `asked` (the first stop signal's name).
    fn run_asked<A: App>(
        &self,
        runtime: &tokio::runtime::Runtime,
        build: impl FnOnce() -> Result<Arc<A>>,
        asked: tokio::sync::watch::Receiver<Option<&'static str>>,
    ) -> Result<()> {
        // Before the data loads: a bind that cannot reach the master is told at once.
        harp::check_bind_reaches(self.bind, self.join).map_err(|e| anyhow!("node: {e}"))?;
        let creds = JobCredentials::load(&self.credentials).map_err(|e| anyhow!("{e}"))?;
        let app = build()?;
        if let Some(name) = *asked.borrow() {
            bail!("node: got {name} while it loaded its data; it exits without joining the job");
        }
        runtime.block_on(node_with_membership(
            app,
            &creds,
            self.join,
            self.bind,
            self.roles,
            &self.cluster,
            leave_when_asked(asked),
        ))
    }
}

/// The name of the first stop signal, once one came (`None` before; never where signals
/// are unavailable). Call inside a tokio runtime.
fn asked_to_leave(
    signals: Option<super::signals::StopSignals>,
) -> tokio::sync::watch::Receiver<Option<&'static str>> {
    let (tx, asked) = tokio::sync::watch::channel(None);
    if let Some(signals) = signals {
        tokio::spawn(async move {
            let (_, name) = signals.first().await;
            // The value stays readable after the sender is gone.
            let _ = tx.send(Some(name));
        });
    }
    asked
}

#[cfg(feature = "etcd")]
async fn node_with_membership<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    join: SocketAddr,
    bind: IpAddr,
    roles: harp::NodeRoles,
    cluster: &ClusterArgs,
    leave: impl std::future::Future<Output = ()>,
) -> Result<()> {
    use harp_membership::{
        EtcdMembership, EtcdOptions, MemberInfo, MembershipBackend, MembershipConfig, NodeId,
    };
    let Some(endpoint) = &cluster.etcd else {
        return node_ended(
            harp::run_node_leaving(app, creds, join, bind, roles, |_| {}, leave).await,
        );
    };
    let config = MembershipConfig::with_lease_timeout_ms(cluster.lease_timeout_ms);
    let backend =
        EtcdMembership::connect(endpoint, &etcd_job(creds), config, EtcdOptions::default())
            .await
            .map_err(|e| anyhow!("node: {e}"))?;
    let (id_tx, id_rx) = tokio::sync::oneshot::channel::<u32>();
    let registration = tokio::spawn(async move {
        let id = id_rx.await.map_err(|_| anyhow!("node: never joined"))?;
        let info = MemberInfo::new(format!("node-{id}"), roles);
        let lease = backend.register(NodeId(id), info).await.map_err(|e| {
            tracing::warn!(node = id, error = %e, "node: no lease in etcd; the master tells this node's death by its link only");
            anyhow!("node: {e}")
        })?;
        Ok::<_, anyhow::Error>((backend, lease))
    });
    let joined = move |id| {
        let _ = id_tx.send(id);
    };
    let result =
        node_ended(harp::run_node_leaving(app, creds, join, bind, roles, joined, leave).await);
    if let Ok(Ok((_backend, lease))) = registration.await {
        if result.is_ok() {
            let _ = lease.leave().await;
        }
    }
    result
}

#[cfg(not(feature = "etcd"))]
async fn node_with_membership<A: App>(
    app: Arc<A>,
    creds: &JobCredentials,
    join: SocketAddr,
    bind: IpAddr,
    roles: harp::NodeRoles,
    cluster: &ClusterArgs,
    leave: impl std::future::Future<Output = ()>,
) -> Result<()> {
    if cluster.etcd.is_some() {
        bail!("this harp was built without etcd support: build it with `--features etcd`");
    }
    node_ended(harp::run_node_leaving(app, creds, join, bind, roles, |_| {}, leave).await)
}

/// How a `harp node` process ends: a job its master stopped (a scheduler's preemption,
/// Ctrl-C on the master) is a clean end for the node, which says why and exits 0, as after
/// a graceful leave; any other error fails it.
fn node_ended(result: std::result::Result<(), harp::HarpError>) -> Result<()> {
    match result {
        Ok(()) => Ok(()),
        Err(e @ harp::HarpError::Stopped { .. }) => {
            super::eprint_line(&format!("node: the master ended the job: {e}"));
            Ok(())
        }
        Err(e) => Err(anyhow!("node: {e}")),
    }
}

/// Completes once the process got SIGTERM or SIGINT (`asked`), also one that came before
/// (while the node joined): the node then leaves the job gracefully (its load moves to the
/// other nodes) and exits 0; the same signal again ends it at once. Never completes where
/// signals are unavailable.
async fn leave_when_asked(mut asked: tokio::sync::watch::Receiver<Option<&'static str>>) {
    let name = match asked.wait_for(Option::is_some).await {
        Ok(name) => (*name).unwrap_or("a stop signal"),
        Err(_) => return std::future::pending().await,
    };
    super::eprint_line(&format!(
        "harp node: got {name}: leaving the job (send it again to end at once)"
    ));
}

/// `harp scale`: asks the master at `job` to start `add` more nodes and to let `remove` go.
pub fn scale(job: SocketAddr, credentials: &Path, add: u32, remove: Vec<u32>) -> Result<()> {
    let creds = JobCredentials::load(credentials).map_err(|e| anyhow!("{e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let message = runtime
        .block_on(harp::send_scale_command(&creds, job, add, remove))
        .map_err(|e| anyhow!("scale: {e}"))?;
    println!("{message}");
    Ok(())
}

impl ClusterArgs {
    /// Node processes the job runs on, if it runs across processes.
    pub fn node_count(&self) -> Result<Option<u32>> {
        match (self.processes, self.nodes) {
            (Some(_), Some(_)) => bail!("give either --processes or --nodes, not both"),
            (Some(p), None) if p < 2 => {
                bail!("--processes counts the master too: it needs at least 2")
            }
            (Some(p), None) if p - 1 > harp::NODES_STARTED_MAX => bail!(
                "--processes {p}: a master starts at most {} node processes on its machine",
                harp::NODES_STARTED_MAX
            ),
            (Some(p), None) => Ok(Some(p - 1)),
            (None, Some(0)) => bail!("--nodes must be at least 1"),
            (None, n) => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests;
