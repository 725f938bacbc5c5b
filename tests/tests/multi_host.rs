//! A job spread over several hosts: the master here, listening on every interface, node
//! processes beside it that join over loopback, and node processes on hosts of their own
//! (network namespaces, `harp_tests::NetHosts`) that reach the master and each other only
//! over a network. Every other test runs its processes on loopback, where a node's
//! address means the same to every process; here it does not.
//!
//! Needs root and iproute2 (the tests print `skipping: ...` and pass where namespaces
//! cannot be created).

use harp_tests::{harp_binary, read_json_lines, wait_exit, MasterProcess, NetHosts};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn stderr_of(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits for `nodes` (the ones still in the job, on hosts 0, 1, ...), each of which must
/// exit 0, and returns the master's last metrics record in `dir`, a job of `tasks` tasks.
fn others_exit_0_and_the_report(nodes: Vec<Child>, dir: &Path, tasks: u64) -> serde_json::Value {
    for (i, mut child) in nodes.into_iter().enumerate() {
        let status = wait_exit(&mut child, "a node");
        assert!(
            status.success(),
            "node on host {i} ended with {status:?}: {}",
            stderr_of(child)
        );
    }
    let records = read_json_lines(&dir.join("metrics.jsonl"));
    let report = records.last().unwrap().clone();
    assert_eq!(report["tasks"], tasks, "{report}");
    report
}

/// Checks the counter's verdict in the master's metrics `report`: every row at most its
/// sum where a loss is allowed, every other row exact (the master fails otherwise; this
/// checks that the record says so too).
fn assert_within_the_loss(report: &serde_json::Value) {
    let verdict = &report["verdict"];
    assert_eq!(
        verdict["exact"].as_u64().unwrap() + verdict["below"].as_u64().unwrap(),
        verdict["rows"].as_u64().unwrap(),
        "{report}"
    );
}

/// The counter's last line in the master's `stderr` (`counter: N tasks, ...`).
fn counter_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("counter: "))
        .expect("the counter's line")
}

/// Run options of a job that recovers any of three nodes.
const RECOVER_ANY: [&str; 5] = [
    "--recover-workers",
    "--scar-fraction",
    "0.25",
    "--servers",
    "3",
];

/// Starts a node on each of hosts 0, 1 and 2 (the one on host 2 with `third_role`),
/// joined to `master` over the hosts' network, and returns them once all three are in the
/// job and it has trained for a second.
fn three_nodes_training(
    hosts: &NetHosts,
    master: &MasterProcess,
    third_role: &[&str],
    run_args: &[&str],
) -> Vec<Child> {
    let harp = harp_binary!();
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let roles = [&[][..], &[][..], third_role];
    let nodes = (0..3)
        .map(|host| master.join(hosts.command(host, &harp), &join, roles[host], run_args))
        .collect();
    master.wait_for_nodes(&BTreeSet::from([0, 1, 2]));
    std::thread::sleep(Duration::from_millis(1000));
    nodes
}

/// A node beside the master (joined over loopback, listening on every interface by
/// default) and nodes on two other hosts train one job; a node on a third host joins
/// while it runs, one on another host leaves by SIGTERM and the one beside the master by
/// `harp scale --remove`, which the test sends to the master's wildcard address. Each
/// executor carries 2 MB of state, which a move parks on the releasing node and the
/// adopting node fetches from it, across hosts. Every
/// counter ends exact and every node exits 0. Before, a node's default address was
/// loopback (no node on another host could join), and a node beside the master was
/// told to the others as `127.0.0.1:PORT`, which they could not reach: the job's start
/// failed with a handshake timeout.
#[test]
fn a_job_spans_the_masters_host_and_others_and_grows_and_shrinks_across_them() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // 4 executors, 2 tasks in flight each, 5 ms per task: at most 1,600 tasks/s on any
    // machine (over 6 s), so the job outlasts its scale events (about 2 s here).
    let run_args = [
        "run",
        "counter",
        "--tasks",
        "10000",
        "--executors-per-worker",
        "4",
        "--task-sleep-us",
        "5000",
        "--window",
        "2",
        "--threads",
        "2",
        // Large enough to be parked and fetched node to node when an executor moves.
        "--state-bytes",
        "2000000",
    ];
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "1", dir.path());
    let harp = harp_binary!();
    let local_join = format!("127.0.0.1:{}", master.port());
    let remote_join = format!("{}:{}", hosts.gateway(), master.port());
    let beside = master.join(Command::new(&harp), &local_join, &[], &run_args);
    let mut expected = BTreeSet::from([0]);
    master.wait_for_nodes(&expected);
    // Nodes 1, 2 and 3 on hosts 0, 1 and 2, one at a time (the ids follow the joins).
    let mut remote = Vec::new();
    for host in 0..2 {
        remote.push(master.join(hosts.command(host, &harp), &remote_join, &[], &run_args));
        expected.insert(host as u32 + 1);
        master.wait_for_nodes(&expected);
    }
    let leaving = remote.remove(0);
    harp_tests::send_signal(leaving.id(), "TERM");
    expected.remove(&1);
    master.wait_for_nodes(&expected);
    let out = master.scale(&["--remove", "0"]);
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("node 0 left"), "{}", out.describe());
    expected.remove(&0);
    master.wait_for_nodes(&expected);
    remote.push(master.join(hosts.command(2, &harp), &remote_join, &[], &run_args));
    expected.insert(3);
    master.wait_for_nodes(&expected);
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    for (what, child) in [("the node beside the master", beside), ("node 1", leaving)]
        .into_iter()
        .chain(remote.into_iter().map(|c| ("a node on another host", c)))
    {
        let mut child = child;
        let status = wait_exit(&mut child, what);
        assert!(
            status.success(),
            "{what} ended with {status:?}: {}",
            stderr_of(child)
        );
    }
    let records = read_json_lines(&dir.path().join("metrics.jsonl"));
    let report = records.last().unwrap();
    assert_eq!(report["exact"], true, "{report}");
    assert_eq!(report["tasks"], 10000);
    let events: Vec<_> = records.iter().filter(|r| r["event"] == "scale").collect();
    // Each event once (node 1's leave, begun by its SIGTERM, may end after node 0's).
    let mut causes: Vec<(String, u64)> = events
        .iter()
        .map(|e| {
            (
                e["cause"].as_str().unwrap().to_string(),
                e["node"].as_u64().unwrap(),
            )
        })
        .collect();
    causes.sort();
    let expected = [
        ("join", 1),
        ("join", 2),
        ("join", 3),
        ("leave", 0),
        ("leave", 1),
    ];
    let expected: Vec<(String, u64)> = expected.map(|(c, n)| (c.to_string(), n)).to_vec();
    assert_eq!(causes, expected, "{events:?}");
    assert!(events.iter().all(|e| e["ok"] == true), "{events:?}");
    // Node 0's executors left it for the other hosts, their states fetched from it there.
    let leave_0 = events
        .iter()
        .find(|e| e["cause"] == "leave" && e["node"] == 0)
        .map(|e| &e["report"])
        .unwrap();
    let moved = leave_0["executor_bytes_moved"].as_u64().unwrap();
    assert!(moved >= 2_000_000, "{leave_0}");
}

/// A node beside the master bound to loopback (`--bind 127.0.0.1`) cannot be reached
/// from another host: the node there that must reach its server says so, naming the
/// address and the way out, and the job does not start (before: "handshake ... refused:
/// timed out", and nothing more).
#[test]
fn a_node_bound_to_loopback_is_named_to_the_node_on_another_host_that_cannot_reach_it() {
    let Some(hosts) = NetHosts::create(1) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run_args = ["run", "counter", "--tasks", "1000"];
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "2", dir.path());
    let harp = harp_binary!();
    let local_join = format!("127.0.0.1:{}", master.port());
    let remote_join = format!("{}:{}", hosts.gateway(), master.port());
    let beside = master.join(
        Command::new(&harp),
        &local_join,
        &["--bind", "127.0.0.1"],
        &run_args,
    );
    let elsewhere = master.join(hosts.command(0, &harp), &remote_join, &[], &run_args);
    let began = std::time::Instant::now();
    let (status, stderr) = master.finish();
    println!(
        "the master exited {:.1} s after both nodes started",
        began.elapsed().as_secs_f64()
    );
    assert!(!status.success(), "the job started: {stderr}");
    let (remote_err, beside_err) = (stderr_of(elsewhere), stderr_of(beside));
    let all = format!("master:\n{stderr}\nnode on another host:\n{remote_err}\nnode beside the master:\n{beside_err}");
    // Each node fails to reach the other's server and says why (unless the master, on
    // the other's failure, shut it down first); the master names the first failure it read.
    let told_why =
        |err: &str, why: &str| err.contains(why) || err.contains("shut down by the master");
    assert!(
        told_why(&remote_err, "it listens on 127.0.0.1:")
            && told_why(
                &remote_err,
                "a loopback address, which no process on another host can reach"
            ),
        "{all}"
    );
    assert!(
        told_why(
            &beside_err,
            "this node is bound to 127.0.0.1, a loopback address, from which"
        ),
        "{all}"
    );
    assert!(
        stderr.contains("failed to start")
            && stderr.contains("a loopback address")
            && stderr.contains("--bind 0.0.0.0"),
        "{all}"
    );
}

/// A network partition: a blip shorter than the lease costs nothing, then a node on
/// another host (a worker and a server) is cut off while the job trains, with `--recover-workers --scar-fraction`. Its lease runs out, the master
/// recovers its executors and shards on the nodes it still reaches, and the job ends with
/// every counter as the loss allows (the counter's verdict: rows of the lost shards at
/// most their sums, every other row exact). The cut-off node, alive all along, loses its
/// master and exits with an error; healed after that, it does not come back (no writes
/// from a node the job declared dead).
#[test]
fn a_node_cut_off_by_a_partition_is_recovered_from_and_stays_out() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // 6 executors, 2 tasks in flight each, 5 ms per task: at most 2,400 tasks/s, over 5 s.
    let run_args = [
        "run",
        "counter",
        "--tasks",
        "12000",
        "--executors-per-worker",
        "2",
        "--task-sleep-us",
        "5000",
        "--window",
        "2",
        "--threads",
        "2",
        "--scar-fraction",
        "0.25",
        "--recover-workers",
        "--lease-timeout-ms",
        "2000",
    ];
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let harp = harp_binary!();
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let mut nodes: Vec<Child> = (0..3)
        .map(|host| master.join(hosts.command(host, &harp), &join, &[], &run_args))
        .collect();
    master.wait_for_nodes(&BTreeSet::from([0, 1, 2]));
    // First a blip shorter than the lease on host 0: lost packets are sent again, and
    // nobody is declared dead.
    hosts.partition(0);
    std::thread::sleep(Duration::from_millis(700));
    hosts.heal(0);
    std::thread::sleep(Duration::from_millis(500));
    hosts.partition(2);
    let declared = master.wait_for_line(&["worker recovery: node"]);
    // Heal once the cut-off node's own links have run out of time too.
    std::thread::sleep(Duration::from_millis(3000));
    hosts.heal(2);
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    // Its lease or its link to the master, whichever runs out first (both take the lease;
    // the link's loss names quinn's cause, its idle timeout).
    let cut_off_cause = ["its lease expired", "lost: timed out"];
    assert!(
        cut_off_cause.iter().any(|c| declared.contains(c)),
        "{declared}"
    );
    let deaths = stderr
        .lines()
        .filter(|l| l.starts_with("worker recovery: node"));
    assert_eq!(
        deaths.count(),
        0,
        "more deaths than the cut-off node's: {stderr}"
    );
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("recovery: server"))
            .count(),
        1,
        "{stderr}"
    );
    let cut_off = nodes.remove(2);
    let cut_off_err = stderr_of(cut_off);
    assert!(
        cut_off_err.contains("lost the master"),
        "the cut-off node: {cut_off_err}"
    );
    let report = others_exit_0_and_the_report(nodes, dir.path(), 12000);
    assert_within_the_loss(&report);
    let line = counter_line(&stderr);
    println!("{declared}\n{line}");
}

/// A server node cut off from the master only, while the worker nodes still reach it
/// (`--scar-fraction`, no worker recovery): the master declares it dead, asks the workers
/// what it acknowledged to them since each row's last save, and re-creates its shards
/// elsewhere, while the workers, which do not know yet, go on sending it updates. A worker
/// therefore stops taking the dead server's acknowledgements the moment it answers the
/// master's question (what it acknowledges later dies with it and goes again to the
/// shards' new owner), so the recovery's report of the lost updates stays exact: the
/// counter's rows miss exactly what it says. Before, updates the cut-off server
/// acknowledged between a worker's answer and its reroute were lost and reported by
/// nobody, and the counter's verdict failed.
#[test]
fn a_server_node_cut_off_from_the_master_only_loses_exactly_what_its_recovery_reports() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // About 12 s.
    let run_args = harp_tests::busy_counter("24000", &["--scar-fraction", "0.25"]);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let mut nodes = three_nodes_training(&hosts, &master, &["--role", "server"], &run_args);
    hosts.cut_from_gateway(2, true);
    let declared = master.wait_for_line(&["recovery: server"]);
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let cut_off = nodes.remove(2);
    let _ = stderr_of(cut_off);
    let report = others_exit_0_and_the_report(nodes, dir.path(), 24000);
    let verdict = &report["verdict"];
    assert!(
        verdict["missing"].as_i64().unwrap() > 0,
        "the cut-off server lost updates: {report}"
    );
    assert_eq!(
        verdict["reported_lost"], verdict["missing"],
        "the recovery reported exactly what the rows miss: {report}"
    );
    let line = counter_line(&stderr);
    println!("{declared}\n{line}");
}

/// A worker node cut off from the master only, while it still reaches the servers
/// (`--recover-workers`): the master declares it dead, has the servers drop what it staged
/// and refuse what it stages later, and runs its uncommitted tasks again elsewhere. The
/// cut-off worker goes on running tasks and staging their updates until it notices it lost
/// the master, but nothing of that is committed: every counter ends exact.
#[test]
fn a_worker_node_cut_off_from_the_master_only_changes_nothing_after_its_death() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let (stderr, report) = cut_off_from_the_master(&hosts, &["--role", "worker"], &[]);
    assert_eq!(report["exact"], true, "{report}");
    assert!(!stderr.contains("recovery: server"), "{stderr}");
}

/// The same with a node that holds a server too (`--scar-fraction` as well): the other
/// workers go on staging flush parts on its server until they are rerouted, and the
/// master's commits of them fail with the server; such flushes count as the server's
/// loss. The rows of its shards end at most at their sums, every other row exact.
#[test]
fn a_node_with_a_worker_and_a_server_cut_off_from_the_master_only_loses_only_its_shards() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let extra = ["--scar-fraction", "0.25", "--servers", "3"];
    let (stderr, report) = cut_off_from_the_master(&hosts, &[], &extra);
    assert!(stderr.contains("recovery: server"), "{stderr}");
    assert_within_the_loss(&report);
}

/// Runs the counter with `--recover-workers` (and `extra`) on nodes on hosts 0, 1 and 2
/// (the one on host 2 with `role`), cuts host 2 off from the master only once the job
/// runs, and returns the master's stderr and last metrics record after checking that the
/// master and the nodes still in the job succeeded and the cut-off node lost its master.
fn cut_off_from_the_master(
    hosts: &NetHosts,
    role: &[&str],
    extra: &[&str],
) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut run_args = harp_tests::busy_counter("16000", &["--recover-workers"]);
    run_args.extend(extra);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let mut nodes = three_nodes_training(hosts, &master, role, &run_args);
    hosts.cut_from_gateway(2, true);
    let declared = master.wait_for_line(&["worker recovery: node"]);
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let cut_off_err = stderr_of(nodes.remove(2));
    assert!(
        cut_off_err.contains("lost the master"),
        "the cut-off node: {cut_off_err}"
    );
    let report = others_exit_0_and_the_report(nodes, dir.path(), 16000);
    let line = counter_line(&stderr);
    println!("{declared}\n{line}");
    (stderr, report)
}

/// A node cut off from every other node while all of them still reach the master, in a
/// job that recovers any node (`--recover-workers --scar-fraction`): the master evicts it
/// (the common end of every broken link; declared dead, its executors and shards recovered
/// on the others) and the job goes on and ends with every counter as the loss allows.
/// Before, the job ended with `HarpError::PeerLost`.
#[test]
fn a_node_cut_off_from_the_other_nodes_only_is_evicted_and_the_job_goes_on() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let (dir, _, master, mut nodes) = recovering_any_node(&hosts);
    let cut = Instant::now();
    hosts.cut_between(2, 0, true);
    hosts.cut_between(2, 1, true);
    let stderr = host_2_evicted(master, &mut nodes, cut);
    assert_eq!(
        stderr.matches("evicted").count(),
        2,
        "one eviction, told as a worker and a server recovery: {stderr}"
    );
    let report = others_exit_0_and_the_report(nodes, dir.path(), 24000);
    assert_within_the_loss(&report);
    println!("{}", counter_line(&stderr));
}

/// A node that joins while another is cut off from every other node (in a job that recovers
/// any node): the master places it only once its verdict on the broken links came (the
/// cut-off node evicted), so the joiner is not handed a server it cannot reach, starts,
/// takes load, and exits 0 with the others. Before, it was placed at once, dialled the
/// cut-off node's server in vain and did not start (the elastic partition soak's seed 23).
#[test]
fn a_node_joining_while_another_is_cut_off_is_placed_after_the_eviction() {
    let Some(hosts) = NetHosts::create(4) else {
        return;
    };
    let (dir, run_args, master, mut nodes) = recovering_any_node(&hosts);
    let cut = Instant::now();
    for other in [0, 1, 3] {
        hosts.cut_between(2, other, true);
    }
    // The other nodes report their links to host 2 broken once those time out (a lease, 2 s,
    // of silence); the master's verdict comes a lease and a second (3 s) after that. The
    // node joins in between.
    std::thread::sleep(Duration::from_millis(4500));
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let joiner = master.join(hosts.command(3, &harp_binary!()), &join, &[], &run_args);
    let stderr = host_2_evicted(master, &mut nodes, cut);
    nodes.push(joiner);
    let report = others_exit_0_and_the_report(nodes, dir.path(), 24000);
    assert_within_the_loss(&report);
    let records = read_json_lines(&dir.path().join("metrics.jsonl"));
    let joined = records
        .iter()
        .find(|r| r["event"] == "scale" && r["cause"] == "join");
    assert!(
        joined.is_some_and(|j| j["ok"] == true),
        "the joiner took load: {records:?}"
    );
    println!("{}", counter_line(&stderr));
}

/// With `--recover-workers` alone (no SCAR: a node holding a server cannot be recovered), a
/// worker-only node cut off from one server node while both still reach the master: its
/// traffic for that server waits instead of failing its task, it tells the master, and the
/// master evicts it (its staged parts dropped, its uncommitted tasks run again on the
/// other workers); the job goes on and every counter ends exact. Before, the node's task
/// failed on the unreachable server and the job ended with `HarpError::PeerLost`.
#[test]
fn with_worker_recovery_alone_a_worker_node_cut_off_from_a_server_is_evicted() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run_args = harp_tests::busy_counter("16000", &["--recover-workers"]);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let mut nodes = three_nodes_training(&hosts, &master, &["--role", "worker"], &run_args);
    let cut = Instant::now();
    hosts.cut_between(2, 0, true);
    let stderr = host_2_evicted(master, &mut nodes, cut);
    assert_eq!(stderr.matches("evicted").count(), 1, "{stderr}");
    assert!(!stderr.contains("recovery: server"), "{stderr}");
    let report = others_exit_0_and_the_report(nodes, dir.path(), 16000);
    assert_eq!(report["exact"], true, "{report}");
    println!("{}", counter_line(&stderr));
}

/// With `--recover-workers` alone, two nodes that each hold a server lose each other:
/// neither may be evicted (its server's shards could not be re-created), so the job ends
/// as a partition between nodes once the master's wait is over, and says what would have
/// let it evict one.
#[test]
fn with_worker_recovery_alone_a_partition_between_server_nodes_ends_the_job_saying_why() {
    let Some(hosts) = NetHosts::create(2) else {
        return;
    };
    let stderr = partition_between_nodes(&hosts, &["--recover-workers"]);
    assert!(
        stderr.contains(
            "neither node may be evicted (a node holding a server is evicted only in a job \
             with --scar-fraction as well"
        ),
        "the master's verdict ended the job, and says why nobody was evicted: {stderr}"
    );
}

/// With `--recover-workers` alone, the only server node is cut off from both worker nodes
/// (each still reaches the master): the server node is the fault and may not be evicted,
/// so the job ends at the master's first verdict, naming it, and no worker node is
/// evicted. Before, the first worker node was evicted (its tasks run again), and the job
/// ended only when the second, the last worker node, could not be.
#[test]
fn with_worker_recovery_alone_a_server_node_cut_off_from_every_worker_ends_the_job_naming_it() {
    let Some(hosts) = NetHosts::create(3) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run_args = harp_tests::busy_counter("100000000", &["--recover-workers"]);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let nodes = nodes_with_roles(&hosts, &master, &["worker", "worker", "server"], &run_args);
    let servers = ids_with_role(&master, "server");
    assert_eq!(servers.len(), 1, "{servers:?}");
    let server = servers[0];
    std::thread::sleep(Duration::from_millis(1000));
    let cut = Instant::now();
    hosts.cut_between(2, 0, true);
    hosts.cut_between(2, 1, true);
    let (status, stderr) = master.finish();
    println!(
        "the job ended {:.1} s after the cut",
        cut.elapsed().as_secs_f64()
    );
    assert!(!status.success(), "{stderr}");
    let named = format!(
        "node {server} (a server only) lost its links to every worker node while it still \
         reaches the master, and it may not be evicted"
    );
    assert!(stderr.contains(&named), "{stderr}");
    assert!(
        !stderr.contains("evicted: its link"),
        "no worker node evicted: {stderr}"
    );
    assert!(!stderr.contains("worker recovery: node"), "{stderr}");
    for child in nodes {
        let _ = stderr_of(child);
    }
}

/// Two links break at once between different pairs (worker node 0 and server node 2,
/// worker node 1 and server node 3; every node still reaches the master), in a job that
/// recovers any node: each worker node reports its own, and the two verdicts run at the
/// same moment. The first evicts a worker node; the second must see it gone, so the other
/// worker node is now the last one and its server node goes instead. The job ends well,
/// every row within what the server recovery lost. Before, both verdicts chose with the
/// other's victim still in the job: both worker nodes were evicted, and the job ended with
/// no worker left.
#[test]
fn two_links_broken_at_once_never_evict_the_last_worker_node() {
    let Some(hosts) = NetHosts::create(4) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run_args = harp_tests::busy_counter("16000", &RECOVER_ANY[..3]);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "4", dir.path());
    let roles = ["worker", "worker", "server", "server"];
    let nodes = nodes_with_roles(&hosts, &master, &roles, &run_args);
    // Node ids go by the order of joining: read which are the worker nodes.
    let workers: BTreeSet<String> = (ids_with_role(&master, "worker").iter())
        .map(u32::to_string)
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    std::thread::sleep(Duration::from_millis(1000));
    hosts.cut_between(0, 2, true);
    hosts.cut_between(1, 3, true);
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let field = |line: &str, name: &str| -> String {
        let value = line.split(&format!(" {name}=")).nth(1).unwrap_or("");
        value.split_whitespace().next().unwrap_or("").to_string()
    };
    // (node, peer, victim) of each eviction.
    let evictions: Vec<(String, String, String)> = stderr
        .lines()
        .filter(|l| l.contains("evicting one of them"))
        .map(|l| (field(l, "node"), field(l, "peer"), field(l, "victim")))
        .collect();
    assert_eq!(evictions.len(), 2, "two evictions: {stderr}");
    // One worker node and one server node, one for each broken link.
    let evicted_workers = (evictions.iter())
        .filter(|(_, _, victim)| workers.contains(victim))
        .count();
    assert_eq!(evicted_workers, 1, "{evictions:?}: {stderr}");
    let links: BTreeSet<BTreeSet<&String>> = (evictions.iter())
        .map(|(node, peer, _)| BTreeSet::from([node, peer]))
        .collect();
    assert_eq!(links.len(), 2, "{evictions:?}");
    // The evicted nodes exit 1 saying why; the others end well.
    let ends: Vec<_> = (nodes.into_iter())
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let failed: Vec<String> = (ends.iter())
        .filter(|out| !out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for err in &failed {
        assert!(
            err.contains("the master declared this node dead: evicted"),
            "{err}"
        );
    }
    let records = read_json_lines(&dir.path().join("metrics.jsonl"));
    let report = records.last().unwrap().clone();
    assert_eq!(report["tasks"], 16000, "{report}");
    assert_within_the_loss(&report);
    println!("{}", counter_line(&stderr));
}

/// Starts a node on each host N with `--role roles[N]`, joined to `master` over the
/// hosts' network, and returns them once all are in the job (their ids go by the order in
/// which they joined, not by host).
fn nodes_with_roles(
    hosts: &NetHosts,
    master: &MasterProcess,
    roles: &[&str],
    run_args: &[&str],
) -> Vec<Child> {
    let harp = harp_binary!();
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let nodes = (roles.iter().enumerate())
        .map(|(host, role)| {
            let role = ["--role", role];
            master.join(hosts.command(host, &harp), &join, &role, run_args)
        })
        .collect();
    master.wait_for_nodes(&(0..roles.len() as u32).collect());
    nodes
}

/// The ids of the job's nodes that hold exactly `role` (`worker`, `server` or
/// `worker+server`), as `harp scale` lists them.
fn ids_with_role(master: &MasterProcess, role: &str) -> Vec<u32> {
    let listed = master.scale(&[]).stdout;
    let listed = listed.trim().trim_start_matches("nodes:");
    (listed.split(", "))
        .filter_map(|entry| {
            let (id, rest) = entry.trim().split_once(' ')?;
            let roles = rest.trim_start_matches('(').split([',', ')']).next()?;
            (roles == role).then(|| id.parse().ok()).flatten()
        })
        .collect()
}

/// A job of 24,000 counter tasks that recovers any node ([`RECOVER_ANY`]) on nodes on hosts
/// 0, 1 and 2, training ([`three_nodes_training`]): its metrics directory, run options,
/// master and nodes.
fn recovering_any_node(
    hosts: &NetHosts,
) -> (
    tempfile::TempDir,
    Vec<&'static str>,
    MasterProcess,
    Vec<Child>,
) {
    let dir = tempfile::tempdir().unwrap();
    let run_args = harp_tests::busy_counter("24000", &RECOVER_ANY);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "3", dir.path());
    let nodes = three_nodes_training(hosts, &master, &[], &run_args);
    (dir, run_args, master, nodes)
}

/// Waits for the master's eviction of the node on host 2 (`nodes[2]`, cut off from others
/// at `cut`), then for the job's end, which must be a success, and for the evicted node,
/// which must say why it is out (it leaves `nodes`); returns the master's stderr.
fn host_2_evicted(master: MasterProcess, nodes: &mut Vec<Child>, cut: Instant) -> String {
    let evicted = master.wait_for_line(&["worker recovery: node", "evicted"]);
    println!(
        "{:.1} s after the cut: {evicted}",
        cut.elapsed().as_secs_f64()
    );
    let (status, stderr) = master.finish();
    assert!(status.success(), "the master failed: {stderr}");
    let evicted_err = stderr_of(nodes.remove(2));
    assert!(
        evicted_err.contains("the master declared this node dead: evicted: its link to node"),
        "the evicted node says why it is out: {evicted_err}"
    );
    println!(
        "the evicted node: {}",
        evicted_err.lines().last().unwrap_or("")
    );
    stderr
}

/// Two nodes on other hosts that lose each other while both still reach the master (a
/// partition between nodes): neither is dead to the master, whose recovery has nothing to
/// recover, so the job fails, and says what happened (before: the symptom only, "task-N
/// on executor-M failed: server-1 is unreachable").
#[test]
fn nodes_that_lose_each_other_but_not_the_master_end_the_job_saying_so() {
    let Some(hosts) = NetHosts::create(2) else {
        return;
    };
    let stderr = partition_between_nodes(&hosts, &[]);
    assert!(
        stderr.contains("server-") && stderr.contains("is unreachable)"),
        "{stderr}"
    );
}

/// The same partition in a job with SCAR's running checkpoint, where a node does not fail
/// on a lost server but waits for its recovery: the node tells the master, whose verdict on
/// the server's node (alive) ends the job. Before, it ended only once the node's wait for a
/// recovery (`SERVER_RECOVERY_WAIT`, 60 s) was over, the job stuck meanwhile.
#[test]
fn with_scar_a_partition_between_nodes_ends_the_job_without_waiting_for_a_recovery() {
    let Some(hosts) = NetHosts::create(2) else {
        return;
    };
    let stderr = partition_between_nodes(&hosts, &["--scar-fraction", "0.25"]);
    assert!(
        stderr.contains(
            "its traffic waited for a recovery, which comes only for a dead node, and neither \
             node may be evicted (only a job that recovers worker nodes (--recover-workers)"
        ),
        "the master's verdict ended the job, not the node's own wait: {stderr}"
    );
}

/// Runs the counter on two nodes on `hosts` (with `extra` run options), cuts them off from
/// each other once both are in, and returns the master's stderr after checking that the
/// job failed as a partition between nodes and nobody died.
fn partition_between_nodes(hosts: &NetHosts, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut run_args = vec![
        "run",
        "counter",
        "--tasks",
        "100000000",
        "--task-sleep-us",
        "2000",
        "--lease-timeout-ms",
        "2000",
    ];
    run_args.extend(extra);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "2", dir.path());
    let harp = harp_binary!();
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let nodes: Vec<Child> = (0..2)
        .map(|host| master.join(hosts.command(host, &harp), &join, &[], &run_args))
        .collect();
    master.wait_for_nodes(&BTreeSet::from([0, 1]));
    let cut = Instant::now();
    hosts.isolate(&[0, 1], true);
    let (status, stderr) = master.finish();
    println!(
        "the job ended {:.1} s after the partition",
        cut.elapsed().as_secs_f64()
    );
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("still renews its lease with the master")
            && stderr.contains("a network partition between them"),
        "{stderr}"
    );
    assert!(!stderr.contains("died"), "nobody died: {stderr}");
    for child in nodes {
        let _ = stderr_of(child);
    }
    stderr
}
