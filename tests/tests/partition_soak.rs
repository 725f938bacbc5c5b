//! A soak of network faults (not in CI: `cargo test --test partition_soak -- --ignored
//! --nocapture`, `HARP_SOAK_ROUNDS=N` rounds, 3 by default, `HARP_SOAK_SEED=S` for other
//! ones; about 40 s a round): each round runs the counter on five nodes on hosts of their
//! own (`NetHosts`), in a job that recovers any node (`--recover-workers
//! --scar-fraction`), and while it trains strikes up to three faults, 2.5 s apart: a node
//! cut off the network, off the master only, off every other node, or off one other node
//! only, killed, or a blip shorter than the lease. The job must end well, its counter as
//! the losses allow (the rows of lost shards at most their sums, every other row exact),
//! with one recovery per node lost (declared dead, or evicted) and none for a blip. A
//! second soak strikes only the server nodes of a job with `--scar-fraction` alone (two
//! worker nodes, three server nodes; no cut between nodes, which such a job does not
//! survive), where the rows must also miss exactly what the recoveries reported lost
//! (`network_faults_on_server_nodes_keep_the_loss_reports_exact`). A third strikes only
//! the worker nodes of a job with `--recover-workers` alone (three worker nodes, two
//! server nodes), cuts between a worker node and a server node among them (the worker
//! node is evicted), where every row must end exact
//! (`network_faults_on_worker_nodes_with_worker_recovery_alone_keep_every_row_exact`); a
//! fifth strikes the same, in a job whose executors carry state and that writes a
//! consistent checkpoint every 250 iterations, so that a dead node's executors are made
//! from their checkpointed states, and checks that each names a checkpoint the job wrote
//! (`network_faults_on_worker_nodes_recovered_from_consistent_checkpoints_keep_every_row_exact`).
//! A fourth mixes the first one's faults with scale events (a node asked to leave by SIGTERM,
//! a node joining from a spare host), with 200 KB of state per executor that every move
//! carries, where every node no fault struck must exit 0
//! (`network_faults_and_scale_events_while_a_recoverable_job_trains`).

use harp_tests::{harp_binary, read_json_lines, wait_exit, MasterProcess, NetHosts};
use std::collections::BTreeSet;
use std::process::Child;
use std::time::Duration;

const HOSTS: usize = 5;

/// A job that recovers any node: worker nodes, and server nodes from SCAR's running
/// checkpoint.
const RECOVER_ANY: [&str; 5] = [
    "--recover-workers",
    "--scar-fraction",
    "0.25",
    "--servers",
    "5",
];

/// A fault on the network (host indexes), or a scale event.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The host's link to the bridge goes down.
    OffTheNetwork(usize),
    /// It reaches the other hosts, not the master.
    OffTheMaster(usize),
    /// It reaches the master, no other host.
    OffTheOthers(usize),
    /// These two hosts reach everything but each other.
    Between(usize, usize),
    /// The host's node process is killed (SIGKILL).
    Killed(usize),
    /// The host is off the network for 700 ms, shorter than the lease: nobody dies.
    Blip(usize),
    /// The host's node is asked to leave (SIGTERM): its load moves away, it exits 0.
    Leave(usize),
    /// A node starts on the spare host (the last one) and joins the running job.
    Join,
}

impl Fault {
    /// Strikes it; `join` starts a node on the spare host.
    fn apply(self, hosts: &NetHosts, nodes: &mut Vec<Child>, join: &dyn Fn() -> Child) {
        match self {
            Fault::Leave(h) => harp_tests::send_signal(nodes[h].id(), "TERM"),
            Fault::Join => nodes.push(join()),
            Fault::Killed(h) => {
                let _ = nodes[h].kill();
            }
            Fault::Blip(h) => {
                hosts.partition(h);
                std::thread::sleep(Duration::from_millis(700));
                hosts.heal(h);
            }
            Fault::OffTheNetwork(h) => hosts.partition(h),
            Fault::OffTheMaster(h) => hosts.cut_from_gateway(h, true),
            Fault::OffTheOthers(h) => {
                for other in (0..hosts.len()).filter(|o| *o != h) {
                    hosts.cut_between(h, other, true);
                }
            }
            Fault::Between(a, b) => hosts.cut_between(a, b, true),
        }
    }

    /// The hosts whose node may be declared dead for it, or leaves.
    fn touched(self) -> Vec<usize> {
        match self {
            Fault::OffTheNetwork(h)
            | Fault::OffTheMaster(h)
            | Fault::OffTheOthers(h)
            | Fault::Killed(h)
            | Fault::Leave(h) => vec![h],
            Fault::Between(a, b) => vec![a, b],
            Fault::Blip(_) | Fault::Join => Vec::new(),
        }
    }

    /// Whether it costs one node (one recovery).
    fn kills(self) -> bool {
        !matches!(self, Fault::Blip(_) | Fault::Leave(_) | Fault::Join)
    }
}

/// Which nodes a soak's faults strike, and what the job recovers.
#[derive(Clone, Copy, Debug)]
enum Soak {
    /// Five nodes with a worker and a server each, `--recover-workers --scar-fraction`;
    /// up to three faults, at least two nodes left untouched.
    AnyNode,
    /// Two worker nodes (hosts 0 and 1) and three server nodes (hosts 2 to 4),
    /// `--scar-fraction` only; up to two faults on server nodes (off the network, off the
    /// master only, killed, a blip), at least one left untouched. The lost-updates reports
    /// must stay exact (the counter's verdict checks them).
    ServerNodes,
    /// Three worker nodes (hosts 0 to 2) and two server nodes (hosts 3 and 4),
    /// `--recover-workers` only; up to two faults on worker nodes (any kind; a cut between
    /// nodes is between a worker node and a server node), at least one left untouched.
    /// No server is lost: every row must end exact.
    WorkerNodes,
    /// [`Soak::WorkerNodes`]'s job and faults, with 200 KB of state per executor
    /// (`--state-bytes`) and a consistent checkpoint every 250 iterations: a dead node's
    /// executors are made again from the newest checkpoint that holds their states (the
    /// counter's restore checks every byte), captured while faults strike. Every row must
    /// end exact.
    WorkerCheckpoints,
    /// [`Soak::AnyNode`]'s job and faults, and scale events among them: a node asked to
    /// leave, a node joining from a sixth host (once); up to four events, at least two
    /// nodes left untouched. Its executors carry 200 KB of state each (`--state-bytes`),
    /// so every move and recovery carries one.
    Elastic,
}

impl Soak {
    fn run_args(self) -> Vec<&'static str> {
        match self {
            Soak::AnyNode => harp_tests::busy_counter("60000", &RECOVER_ANY),
            // Executors carrying 200 KB of state, which moves inside the messages that
            // bring an executor to its new node (under the 1 MiB from which it is parked).
            Soak::Elastic => {
                let mut args = harp_tests::busy_counter("60000", &RECOVER_ANY);
                args.extend(["--state-bytes", "200000"]);
                args
            }
            Soak::ServerNodes => harp_tests::busy_counter("60000", &["--scar-fraction", "0.25"]),
            Soak::WorkerNodes => harp_tests::busy_counter("60000", &["--recover-workers"]),
            Soak::WorkerCheckpoints => {
                harp_tests::busy_counter("60000", &["--recover-workers", "--state-bytes", "200000"])
            }
        }
    }

    /// The soak whose nodes, faults and checks this one shares: a variant that only adds
    /// options to a job ([`Soak::WorkerCheckpoints`]) is its base's in everything else.
    fn base(self) -> Soak {
        match self {
            Soak::WorkerCheckpoints => Soak::WorkerNodes,
            other => other,
        }
    }

    /// What the master is given beyond the run's arguments (`dir`: the round's directory).
    fn master_args(self, dir: &std::path::Path) -> Vec<String> {
        match self {
            Soak::WorkerCheckpoints => vec![
                "--checkpoint-dir".into(),
                dir.join("checkpoints").display().to_string(),
                "--checkpoint-every".into(),
                "250".into(),
            ],
            _ => Vec::new(),
        }
    }

    /// `harp node` options of the node on `host`.
    fn role(self, host: usize) -> &'static [&'static str] {
        match (self.base(), host) {
            (Soak::AnyNode | Soak::Elastic, _) => &[],
            (Soak::ServerNodes, 0 | 1) | (Soak::WorkerNodes, 0..=2) => &["--role", "worker"],
            _ => &["--role", "server"],
        }
    }

    /// The line the master prints for each node it recovers.
    fn recovery_line(self) -> &'static str {
        match self.base() {
            Soak::ServerNodes => "recovery: server",
            _ => "worker recovery: node",
        }
    }

    /// The faults of round `seed`.
    fn faults(self, seed: u64) -> Vec<Fault> {
        let soak = self.base();
        let mut rng = harp::mix64(seed);
        let mut next = |n: usize| {
            rng = harp::mix64(rng);
            (rng % n as u64) as usize
        };
        let (mut untouched, keep, most): (Vec<usize>, usize, usize) = match soak {
            Soak::AnyNode => ((0..HOSTS).collect(), 2, 3),
            Soak::ServerNodes => ((2..HOSTS).collect(), 1, 2),
            Soak::Elastic => ((0..HOSTS).collect(), 2, 4),
            // The worker-node soaks.
            _ => ((0..3).collect(), 1, 2),
        };
        let mut joined = false;
        let mut faults = Vec::new();
        while faults.len() < most {
            let h = untouched[next(untouched.len())];
            // A server node cut off from a worker node is not evicted where flushes are
            // not staged (`remote/eviction.rs`): no such cut in a job without
            // `--recover-workers`, which would end as `PeerLost`.
            let kinds = match soak {
                Soak::ServerNodes => 4,
                Soak::Elastic => 8,
                _ => 6,
            };
            let fault = match next(kinds) {
                6 => Fault::Leave(h),
                7 if joined => Fault::Leave(h),
                7 => {
                    joined = true;
                    Fault::Join
                }
                0 => Fault::OffTheNetwork(h),
                1 => Fault::OffTheMaster(h),
                2 => Fault::Killed(h),
                3 => Fault::Blip(h),
                4 => Fault::OffTheOthers(h),
                _ if matches!(soak, Soak::WorkerNodes) => Fault::Between(h, 3 + next(2)),
                _ => {
                    let others: Vec<usize> =
                        untouched.iter().copied().filter(|o| *o != h).collect();
                    Fault::Between(h, others[next(others.len())])
                }
            };
            // A server node a worker node is cut off from stays in the job (it is never
            // struck itself in the worker-node soak).
            let struck: Vec<usize> = fault
                .touched()
                .into_iter()
                .filter(|t| untouched.contains(t))
                .collect();
            if untouched.len() - struck.len() < keep {
                break;
            }
            untouched.retain(|u| !struck.contains(u));
            faults.push(fault);
        }
        faults
    }
}

/// Rounds from `HARP_SOAK_SEED` (1) on, `HARP_SOAK_ROUNDS` (3) of them.
fn seeds() -> std::ops::Range<u64> {
    let rounds: u64 = std::env::var("HARP_SOAK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let first: u64 = std::env::var("HARP_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    first..first + rounds
}

/// Runs `soak`'s rounds (see [`seeds`]), each on `count` hosts of its own.
fn rounds(soak: Soak, count: usize) {
    for seed in seeds() {
        let Some(hosts) = NetHosts::create(count) else {
            return;
        };
        one_round(&hosts, soak, seed);
    }
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_while_a_recoverable_job_trains() {
    rounds(Soak::AnyNode, HOSTS);
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_on_server_nodes_keep_the_loss_reports_exact() {
    rounds(Soak::ServerNodes, HOSTS);
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_on_worker_nodes_with_worker_recovery_alone_keep_every_row_exact() {
    rounds(Soak::WorkerNodes, HOSTS);
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_on_worker_nodes_recovered_from_consistent_checkpoints_keep_every_row_exact() {
    rounds(Soak::WorkerCheckpoints, HOSTS);
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_and_scale_events_while_a_recoverable_job_trains() {
    // A sixth host for the node that joins.
    rounds(Soak::Elastic, HOSTS + 1);
}

fn one_round(hosts: &NetHosts, soak: Soak, seed: u64) {
    let faults = soak.faults(seed);
    println!("{soak:?} seed {seed}: {faults:?}");
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let run_args = soak.run_args();
    let master_args = soak.master_args(dir.path());
    let mut master_run_args = run_args.clone();
    master_run_args.extend(master_args.iter().map(String::as_str));
    let master =
        MasterProcess::on_every_interface(harp_binary!(), &master_run_args, "5", dir.path());
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let harp = harp_binary!();
    let mut nodes: Vec<Child> = (0..HOSTS)
        .map(|host| {
            master.join(
                hosts.command(host, &harp),
                &join,
                soak.role(host),
                &run_args,
            )
        })
        .collect();
    master.wait_for_nodes(&(0..HOSTS as u32).collect::<BTreeSet<u32>>());
    let join_spare = || master.join(hosts.command(HOSTS, &harp), &join, &[], &run_args);
    for fault in &faults {
        std::thread::sleep(Duration::from_millis(2500));
        fault.apply(hosts, &mut nodes, &join_spare);
    }
    let (status, stderr) = master.finish();
    // Every node no fault struck, every node that left and the one that joined end well
    // (the others are killed: a node cut off from the master may not notice for a while).
    let struck: BTreeSet<usize> = (faults.iter())
        .filter(|f| f.kills())
        .flat_map(|f| f.touched())
        .collect();
    let mut unwell = Vec::new();
    for (host, mut node) in nodes.into_iter().enumerate() {
        if struck.contains(&host) {
            let _ = node.kill();
            let _ = node.wait();
        } else if !wait_exit(&mut node, "a node").success() {
            unwell.push(host);
        }
    }
    assert!(status.success(), "seed {seed}: the master failed: {stderr}");
    // A node that joins while an earlier fault keeps a node of the job out of its reach
    // (cut off from the others or the network, or killed, and not yet declared dead) is
    // placed once the master's verdicts on the broken links it knows of came (seeds 23 and
    // 25 failed here before); if the links were not reported yet, it cannot dial that
    // node's server and does not start: a clean abort, which the master logs, giving it no
    // load, and the job goes on without it (a joiner does not pass such a server over).
    let join_at = faults.iter().position(|f| matches!(f, Fault::Join));
    let joiner_cut_off = join_at.is_some_and(|at| {
        faults[..at].iter().any(|f| {
            matches!(
                f,
                Fault::OffTheOthers(_) | Fault::OffTheNetwork(_) | Fault::Killed(_)
            )
        })
    });
    if unwell == [HOSTS]
        && joiner_cut_off
        && stderr.contains("a joining node did not get ready; it gets no load")
    {
        println!("  seed {seed}: the joiner could not reach a node cut off before it joined");
        unwell.clear();
    }
    assert!(
        unwell.is_empty(),
        "seed {seed}: the nodes on hosts {unwell:?} did not exit 0: {stderr}"
    );
    let recovered = |l: &&str| l.starts_with(soak.recovery_line());
    let deaths = stderr.lines().filter(recovered).count();
    let expected = faults.iter().filter(|f| f.kills()).count();
    assert_eq!(
        deaths, expected,
        "seed {seed}: one recovery per fault but blips: {stderr}"
    );
    let records = read_json_lines(&metrics);
    if matches!(soak, Soak::WorkerCheckpoints) {
        checked_restores(&records, seed);
    }
    let report = records.last().unwrap().clone();
    assert_eq!(report["tasks"], 60000, "seed {seed}: {report}");
    let verdict = &report["verdict"];
    assert_eq!(
        verdict["exact"].as_u64().unwrap() + verdict["below"].as_u64().unwrap(),
        verdict["rows"].as_u64().unwrap(),
        "seed {seed}: {report}"
    );
    if matches!(soak.base(), Soak::WorkerNodes) {
        assert_eq!(
            report["exact"], true,
            "seed {seed}: no server lost: {report}"
        );
    }
    for line in stderr
        .lines()
        .filter(|l| recovered(l) || l.starts_with("counter: "))
    {
        println!("  {}", line.chars().take(200).collect::<String>());
    }
}

/// A [`Soak::WorkerCheckpoints`] round's restores: every executor made from a checkpoint
/// names one the job wrote before (a multiple of 250 iterations). Prints how many of the
/// dead nodes' executors came from a checkpoint and how many afresh (a node that dies
/// before the first checkpoint has none).
fn checked_restores(records: &[serde_json::Value], seed: u64) {
    let written: BTreeSet<u64> = (records.iter())
        .filter(|r| r["event"] == "checkpoint" && r["checkpoint"]["outcome"] == "written")
        .map(|r| r["checkpoint"]["seq"].as_u64().unwrap())
        .collect();
    let (mut restored, mut afresh) = (0, 0);
    for recovery in records.iter().filter(|r| r["event"] == "worker_recovery") {
        let report = &recovery["report"];
        let executors = report["executors"].as_array().unwrap().len();
        for pair in report["restored_from_checkpoint"].as_array().unwrap() {
            let checkpoint = pair[1].as_u64().unwrap();
            assert!(
                checkpoint % 250 == 0 && written.contains(&checkpoint),
                "seed {seed}: restored from checkpoint {checkpoint}, written {written:?}: {report}"
            );
            restored += 1;
        }
        afresh += executors - report["restored_from_checkpoint"].as_array().unwrap().len();
    }
    println!(
        "  seed {seed}: {} checkpoints written; {restored} executors restored from one, {afresh} afresh",
        written.len()
    );
}
