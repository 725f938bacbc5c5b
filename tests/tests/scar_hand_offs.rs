//! SCAR across processes while shards move: the master runs here (with the counter's
//! driver) and `harp node` processes run the workers and the servers; a server node is
//! killed while it hands its shards off (SIGTERM, then SIGKILL once the new owner holds
//! their rows), or while shards are handed to it, or while a leaving server hands it
//! shards. The job runs to its end: every row of another shard exact, every row of a
//! re-created shard at most its expected sum (no update applied twice). Shares its job
//! with `scar_processes.rs` (`scar_nodes/`).

use harp::{
    ClusterOptions, JobCredentials, JobEvent, ScaleEvent, ScarOptions, Selection, ServerRecovery,
};
use harp_apps::counter::CounterApp;
use harp_tests::{runtime, Threads};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod scar_nodes;
use scar_nodes::*;

/// A counter job of 2 worker and 2 server node processes (started by each test) whose shards
/// move mid-run, with its credentials in a directory kept while it runs.
struct MidMoveJob {
    _dir: tempfile::TempDir,
    credentials: std::path::PathBuf,
    creds: JobCredentials,
    app: Arc<Watched>,
    options: ClusterOptions,
}

fn mid_move_job(name: &str, tasks: u64) -> MidMoveJob {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("creds");
    let creds = JobCredentials::generate(name).unwrap();
    creds.save(&credentials).unwrap();
    let app = Arc::new(Watched {
        inner: CounterApp::new(counter_config(tasks, true)).unwrap(),
        completions: Arc::new(Mutex::new(Vec::new())),
    });
    let options = ClusterOptions {
        nodes: 4,
        executors_per_worker: 4,
        shards_per_server: SHARDS_PER_SERVER,
        collect_params: true,
        lease_timeout_ms: 3_000,
        join_timeout_ms: 20_000,
        // A partial image: rows it never saved start again at their initial value, so a
        // copy a hand-off left on a server would show if it were kept.
        scar: Some(ScarOptions {
            period: 2,
            fraction: 0.25,
            selection: Selection::Priority,
            ..ScarOptions::default()
        }),
        ..ClusterOptions::default()
    };
    MidMoveJob {
        _dir: dir,
        credentials,
        creds,
        app,
        options,
    }
}

/// Issue 4's "a node that dies in the middle of a move", with SCAR. A server node gets
/// SIGTERM (a scheduler takes its machine back), so it hands its shards to the other server
/// node, and is SIGKILLed (the grace period is over) once the other node holds their rows
/// but before the master heard that the hand-offs were done (it answers late: fault
/// injection). The master re-creates those shards on the node that holds them, from the
/// running checkpoint (dropping what the hand-offs brought there, which the image does not
/// hold: while a hand-off is unconfirmed, no round saves the new owner's rows of it), and
/// the job runs to its end: every row of another shard exact, every row of a re-created
/// shard at most its expected sum (no update applied twice), and the updates the report
/// says were lost exactly what the counter misses (when the report can say: not once the
/// victim acknowledged updates it forwarded to the new owner). Before, a server failure
/// during a shard move from it ended the job.
#[test]
fn a_server_node_killed_while_it_hands_its_shards_off_is_recovered_on_their_new_owner() {
    let log = install_log();
    let MidMoveJob {
        _dir,
        credentials,
        creds,
        app,
        options,
    } = mid_move_job("scar-mid-move", TASKS);
    let outcome = runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master(app.clone(), creds, options).await;
        let mut victim = node_command(&addr, &credentials, "server", true, TASKS);
        victim.env(harp::remote::HAND_OFF_ANSWER_DELAY_VAR, "60000");
        let (mut victim, lines, _reader) = harp_tests::spawn_reading_stderr(&mut victim);
        // The other server node: the new owner of the victim's shards.
        let mut heir = node_command(&addr, &credentials, "server", true, TASKS);
        let (heir, heir_lines, _heir_reader) = harp_tests::spawn_reading_stderr(&mut heir);
        let mut others: Vec<Child> = ["worker", "worker"]
            .iter()
            .map(|role| node_process(&addr, &credentials, role, true, None))
            .collect();
        others.push(heir);
        while app.completions.lock().unwrap().len() < KILL_AFTER_COMPLETIONS / 2 {
            assert!(!master.is_finished(), "the job ended before the SIGTERM");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let term = Command::new("kill")
            .args(["-TERM", &victim.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        // The other server holds a shard of the victim's; the master does not know yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .expect("the victim hands a shard off");
            if line.contains("answering the hand-off late") {
                break;
            }
        }
        // Training goes on a while: the victim forwards its shards' traffic to their new
        // owner, and checkpoint rounds run (none may save what the new owner holds).
        let rounds_before = app.completions.lock().unwrap().len();
        while app.completions.lock().unwrap().len() < rounds_before + 400 {
            assert!(!master.is_finished(), "the job ended before the kill");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sigkill(&mut victim);
        let outcome = master.await.unwrap();
        for child in others.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        (outcome, heir_lines.try_iter().collect::<Vec<String>>())
    });
    let (outcome, heir_log) = outcome;
    // The new owner held rows a hand-off brought (the victim said so before it died), and
    // dropped them for the restored ones.
    assert!(
        heir_log
            .iter()
            .any(|l| l.contains("dropped the rows a failed server's hand-off left here")),
        "{heir_log:?}"
    );
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    assert_eq!(outcome.driver.inner.completed(), TASKS);
    let recoveries = &outcome.stats.recoveries;
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let report = &recoveries[0];
    // Every shard the victim held went to the one other server, which held their rows.
    assert_eq!(
        report.shards.len(),
        SHARDS_PER_SERVER as usize,
        "{report:?}"
    );
    let heirs: BTreeSet<u32> = report.shards.iter().map(|(_, to)| *to).collect();
    assert_eq!(heirs.len(), 1, "{report:?}");
    assert!(!heirs.contains(&report.server), "{report:?}");
    let lost_shards: BTreeSet<u32> = report.shards.iter().map(|(s, _)| *s).collect();
    let (_, missing_total) = check_the_counter(&outcome, &app, &lost_shards, 2 * SHARDS_PER_SERVER);
    // The updates lost are known exactly unless the victim acknowledged some it forwarded
    // to the new owner (then the report leaves them out, and says why).
    match &report.lost {
        Some(lost) => assert_eq!(
            lost.lost_sum, missing_total as f64,
            "reported lost updates against expected − final: {report:?}"
        ),
        None => assert!(
            log.first(&format!(
                "server-{} acknowledged a flush part it did not apply all by itself",
                report.server
            ))
            .is_some(),
            "the report leaves the lost updates out without saying why: {report:?}"
        ),
    }
    println!(
        "server {} killed mid-hand-off: {} shards re-created on server {:?}, {} rows restored, {missing_total} increments lost",
        report.server,
        report.shards.len(),
        heirs,
        report.rows_restored
    );
}

/// How shards come to the server node a mid-arrival test kills.
#[derive(Clone, Copy, PartialEq)]
enum Arrival {
    /// It joins the running job (2 servers there) and is given shards.
    Join,
    /// One of 3 servers is given SIGTERM; its shards move to the other two.
    ScaleIn,
}

impl Arrival {
    /// How many micro-tasks the counter runs: a leave runs two scale events, which must
    /// end before the job does.
    fn tasks(self) -> u64 {
        match self {
            Arrival::Join => TASKS,
            Arrival::ScaleIn => 3 * TASKS,
        }
    }

    /// How late the servers answer their hand-offs: long enough that the test kills the
    /// new owner before; short enough that a leave's two events end within the job.
    fn answer_delay_ms(self) -> u64 {
        match self {
            Arrival::Join => 30_000,
            Arrival::ScaleIn => 5_000,
        }
    }
}

/// A server node of a mid-arrival test, at info level (it says which node it is) and
/// answering its hand-offs late, whose stderr the test reads.
struct LoggedServer {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
    _reader: std::thread::JoinHandle<()>,
}

impl LoggedServer {
    fn start(addr: &str, credentials: &std::path::Path, arrival: Arrival) -> LoggedServer {
        let mut server = node_command(addr, credentials, "server", true, arrival.tasks());
        let delay = arrival.answer_delay_ms().to_string();
        server.env(harp::remote::HAND_OFF_ANSWER_DELAY_VAR, delay);
        server.env("HARP_LOG", "info");
        let (child, lines, reader) = harp_tests::spawn_reading_stderr(&mut server);
        LoggedServer {
            child,
            lines,
            log: Vec::new(),
            _reader: reader,
        }
    }

    /// Reads what it wrote since the last call.
    fn read(&mut self) {
        self.log.extend(self.lines.try_iter());
    }

    /// Its node's id, once it said which it is.
    fn id(&self) -> Option<u32> {
        let joined = self.log.iter().find(|l| l.contains("joined the job"))?;
        number_after(joined, " node=")
    }

    /// The shards it answered a hand-off of late, with the server it handed each to.
    fn handed_late(&self) -> Vec<(u32, u32)> {
        let late = self
            .log
            .iter()
            .filter(|l| l.contains("answering the hand-off late"));
        late.map(|line| {
            let shard = number_after(line, "shard=shard-").expect("the line names its shard");
            let to = number_after(line, "to=server-").expect("the line names the new owner");
            (shard, to)
        })
        .collect()
    }
}

/// The number right after `field` in `line`.
fn number_after(line: &str, field: &str) -> Option<u32> {
    let at = line.find(field)? + field.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Runs the counter on 2 workers and the servers of `arrival`, then SIGKILLs the server
/// node shards are on their way to once it holds one but before the master heard it does
/// (every old owner answers its hand-offs late, fault injection), after 200 more
/// completions of forwarding. Checks the recovery and the counter, and that a leaving
/// server left all the same.
fn kill_a_server_while_shards_come(arrival: Arrival) {
    let MidMoveJob {
        _dir,
        credentials,
        creds,
        app,
        mut options,
    } = mid_move_job("scar-mid-arrival", arrival.tasks());
    let servers_at_start = match arrival {
        Arrival::Join => 2,
        Arrival::ScaleIn => 3,
    };
    options.nodes = servers_at_start + 2;
    let (events, mut job_events) = tokio::sync::mpsc::unbounded_channel();
    let inbox = harp::job_control().1.with_events(events);
    let outcome = runtime(Threads::Multi(2)).block_on(async {
        let (master, addr) = start_master_with(app.clone(), creds, options, inbox).await;
        let mut servers: Vec<LoggedServer> = (0..servers_at_start)
            .map(|_| LoggedServer::start(&addr, &credentials, arrival))
            .collect();
        let mut workers: Vec<Child> = ["worker", "worker"]
            .iter()
            .map(|role| {
                let mut worker = node_command(&addr, &credentials, role, true, arrival.tasks());
                worker.stderr(Stdio::inherit()).spawn().unwrap()
            })
            .collect();
        while app.completions.lock().unwrap().len() < KILL_AFTER_COMPLETIONS / 2 {
            assert!(
                !master.is_finished(),
                "the job ended before the scale event"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match arrival {
            Arrival::Join => servers.push(LoggedServer::start(&addr, &credentials, arrival)),
            Arrival::ScaleIn => {
                let term = Command::new("kill")
                    .args(["-TERM", &servers[0].child.id().to_string()])
                    .status()
                    .unwrap();
                assert!(term.success());
            }
        }
        // A shard is on its new owner; the master does not know yet.
        let deadline = Instant::now() + Duration::from_secs(60);
        let victim = loop {
            assert!(Instant::now() < deadline, "no server handed a shard off");
            servers.iter_mut().for_each(LoggedServer::read);
            let late = servers.iter().flat_map(|s| s.handed_late()).next();
            if let Some((_, to)) = late {
                if let Some(at) = servers.iter().position(|s| s.id() == Some(to)) {
                    break at;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Training goes on a while: the old owners forward those shards to the new owner.
        // For 200 completions, or a second on a machine too loaded for them: the kill must
        // come well within the old owners' late answer (`answer_delay_ms`, 5 s for a leave).
        let before = app.completions.lock().unwrap().len();
        let forwarding_until = Instant::now() + Duration::from_secs(1);
        while app.completions.lock().unwrap().len() < before + 200
            && Instant::now() < forwarding_until
        {
            assert!(!master.is_finished(), "the job ended before the kill");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sigkill(&mut servers[victim].child);
        let outcome = master.await.unwrap();
        // The leaving server exits by itself.
        let left = (arrival == Arrival::ScaleIn).then(|| exit_within(&mut servers[0].child));
        let children = workers
            .iter_mut()
            .chain(servers.iter_mut().map(|s| &mut s.child));
        for child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
        servers.iter_mut().for_each(LoggedServer::read);
        (outcome, servers, left)
    });
    let (outcome, servers, left) = outcome;
    let outcome = outcome.unwrap_or_else(|e| panic!("the job failed: {e}"));
    assert_eq!(outcome.driver.inner.completed(), arrival.tasks());
    let recoveries = &outcome.stats.recoveries;
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let report = &recoveries[0];
    // Which server handed which shard to the dead one.
    let handed_to_victim: BTreeSet<(u32, u32)> = servers
        .iter()
        .flat_map(|s| {
            let from = s.id().expect("a server says which node it is");
            let late = s.handed_late().into_iter();
            late.filter(|(_, to)| *to == report.server)
                .map(move |(shard, _)| (shard, from))
        })
        .collect();
    let leaving = servers[0].id();
    for &(shard, to) in &report.shards {
        match handed_to_victim.iter().find(|(s, _)| *s == shard) {
            // On its way to the dead server: back to the server that handed it off.
            Some(&(_, from)) => assert_eq!(to, from, "{shard} of {report:?}"),
            // Its own: to a server that takes load (not the one leaving).
            None => assert!(
                arrival == Arrival::ScaleIn && Some(to) != leaving && to != report.server,
                "{shard} of {report:?}; handed to it: {handed_to_victim:?}"
            ),
        }
    }
    let went_back = report
        .shards
        .iter()
        .filter(|(s, _)| handed_to_victim.iter().any(|(handed, _)| handed == s));
    assert!(went_back.count() > 0, "{report:?}");
    // Every event was told before the job ended: the recovery once, as the stats have it.
    let told: Vec<JobEvent> = std::iter::from_fn(|| job_events.try_recv().ok()).collect();
    let recoveries_told: Vec<&ServerRecovery> = told
        .iter()
        .filter_map(|e| match e {
            JobEvent::ServerRecovered(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(recoveries_told, [report], "the recovery's event");
    if let (Some(exit), Some(leaving)) = (left, leaving) {
        let leaves = told.iter().filter_map(|e| match e {
            JobEvent::Scale(e) if e.cause == "leave" && e.node == Some(leaving) => Some(e.clone()),
            _ => None,
        });
        check_left_after_a_retry(leaves.collect(), exit, report.server);
    }
    let lost_shards: BTreeSet<u32> = report.shards.iter().map(|(s, _)| *s).collect();
    let num_shards = servers_at_start * SHARDS_PER_SERVER;
    let (_, missing_total) = check_the_counter(&outcome, &app, &lost_shards, num_shards);
    println!(
        "server {} killed while shards came: shards re-created {:?}, {} rows restored, {missing_total} increments lost",
        report.server, report.shards, report.rows_restored
    );
}

/// How a child process exited, within 10 s.
fn exit_within(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "it did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A leaving server whose moves to `dead` the death cut short: its leave's first scale
/// event failed saying so, the next one (after the recovery) moved the rest of its load,
/// and it exited 0.
fn check_left_after_a_retry(leaves: Vec<ScaleEvent>, exit: std::process::ExitStatus, dead: u32) {
    let summary: Vec<(bool, Option<&str>)> =
        leaves.iter().map(|e| (e.ok, e.error.as_deref())).collect();
    let [first, .., last] = &leaves[..] else {
        panic!("one leave event, not a failed one and a retry: {summary:?}");
    };
    let cut_short = format!("server-{dead} failed while");
    let why = first.error.as_deref().unwrap_or_default();
    assert!(!first.ok && why.contains(&cut_short), "{summary:?}");
    assert!(
        last.ok,
        "the leave was not tried again or failed: {summary:?}"
    );
    assert!(last.report.shards_moved > 0, "{:?}", last.report);
    assert!(exit.success(), "the leaving server exited {exit}");
}

/// A server node that joins a running job is given shards from the two servers there, and
/// is SIGKILLed after it holds some but before the master heard it does (both old owners
/// answer their hand-offs late, fault injection). The old owners gave the rows away and
/// forward those shards to the dead node; what they forwarded goes unanswered. The master
/// recovers the dead node by re-creating each shard that was on its way to it on the
/// server it came from, which holds the shard's requests until then and serves them after
/// (`server/stranded.rs`). The job runs to its end: every row of another shard exact, every
/// row of a re-created shard at most its expected sum (no update applied twice). Before,
/// such a death ended the job ("a scale event was moving a shard to it").
#[test]
fn a_server_node_killed_while_shards_are_handed_to_it_is_recovered_on_their_old_owners() {
    kill_a_server_while_shards_come(Arrival::Join);
}

/// The same when one of three servers is given SIGTERM and the one its shards move to
/// dies: the shards on their way go back to the leaving server, the dead server's own
/// shards go to the third. The leave's scale event fails once its other moves end; a
/// second one, after the recovery, moves the shards that came back to the third server,
/// and the leaving server exits 0. Before, it kept serving them until it was killed.
#[test]
fn a_server_node_killed_while_a_leaving_server_hands_it_shards_is_recovered() {
    kill_a_server_while_shards_come(Arrival::ScaleIn);
}
