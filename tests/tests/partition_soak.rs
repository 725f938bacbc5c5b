//! A soak of network faults (not in CI: `cargo test --test partition_soak -- --ignored
//! --nocapture`, `HARP_SOAK_ROUNDS=N` rounds, 3 by default, `HARP_SOAK_SEED=S` for other
//! ones; about 40 s a round): each round runs the counter on five nodes on hosts of their
//! own (`NetHosts`), in a job that recovers any node (`--recover-workers
//! --scar-fraction`), and while it trains strikes up to three faults, 2.5 s apart: a node
//! cut off the network, off the master only, off every other node, or off one other node
//! only, killed, or a blip shorter than the lease. The job must end well, its counter as
//! the losses allow (the rows of lost shards at most their sums, every other row exact),
//! with one recovery per node lost (declared dead, or evicted) and none for a blip.

use harp_tests::{harp_binary, read_json_lines, MasterProcess, NetHosts};
use std::collections::BTreeSet;
use std::process::Child;
use std::time::Duration;

const HOSTS: usize = 5;

/// A fault on the network (host indexes).
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
}

impl Fault {
    fn apply(self, hosts: &NetHosts, nodes: &mut [Child]) {
        match self {
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
                for other in (0..HOSTS).filter(|o| *o != h) {
                    hosts.cut_between(h, other, true);
                }
            }
            Fault::Between(a, b) => hosts.cut_between(a, b, true),
        }
    }

    /// The hosts whose node may be declared dead for it.
    fn touched(self) -> Vec<usize> {
        match self {
            Fault::OffTheNetwork(h)
            | Fault::OffTheMaster(h)
            | Fault::OffTheOthers(h)
            | Fault::Killed(h) => vec![h],
            Fault::Between(a, b) => vec![a, b],
            Fault::Blip(_) => Vec::new(),
        }
    }

    /// Whether it costs one node (one recovery).
    fn kills(self) -> bool {
        !matches!(self, Fault::Blip(_))
    }
}

/// Up to three faults that leave at least two hosts untouched.
fn faults(seed: u64) -> Vec<Fault> {
    let mut rng = harp::mix64(seed);
    let mut next = |n: u64| {
        rng = harp::mix64(rng);
        (rng % n) as usize
    };
    let mut untouched: Vec<usize> = (0..HOSTS).collect();
    let mut faults = Vec::new();
    for _ in 0..3 {
        let h = untouched[next(untouched.len() as u64)];
        let fault = match next(6) {
            0 => Fault::OffTheNetwork(h),
            1 => Fault::OffTheMaster(h),
            2 => Fault::OffTheOthers(h),
            3 => Fault::Killed(h),
            4 => Fault::Blip(h),
            _ => {
                let others: Vec<usize> = untouched.iter().copied().filter(|o| *o != h).collect();
                Fault::Between(h, others[next(others.len() as u64)])
            }
        };
        let left = untouched.len() - fault.touched().len();
        if left < 2 {
            break;
        }
        untouched.retain(|u| !fault.touched().contains(u));
        faults.push(fault);
    }
    faults
}

#[test]
#[ignore = "a soak: run with --ignored"]
fn network_faults_while_a_recoverable_job_trains() {
    let rounds: u64 = std::env::var("HARP_SOAK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let first: u64 = std::env::var("HARP_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for seed in first..first + rounds {
        let Some(hosts) = NetHosts::create(HOSTS) else {
            return;
        };
        one_round(&hosts, seed);
    }
}

fn one_round(hosts: &NetHosts, seed: u64) {
    let faults = faults(seed);
    println!("seed {seed}: {faults:?}");
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let recover_any = [
        "--recover-workers",
        "--scar-fraction",
        "0.25",
        "--servers",
        "5",
    ];
    let run_args = harp_tests::busy_counter("60000", &recover_any);
    let master = MasterProcess::on_every_interface(harp_binary!(), &run_args, "5", dir.path());
    let join = format!("{}:{}", hosts.gateway(), master.port());
    let harp = harp_binary!();
    let mut nodes: Vec<Child> = (0..HOSTS)
        .map(|host| master.join(hosts.command(host, &harp), &join, &[], &run_args))
        .collect();
    master.wait_for_nodes(&(0..HOSTS as u32).collect::<BTreeSet<u32>>());
    for fault in &faults {
        std::thread::sleep(Duration::from_millis(2500));
        fault.apply(hosts, &mut nodes);
    }
    let (status, stderr) = master.finish();
    for mut node in nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
    assert!(status.success(), "seed {seed}: the master failed: {stderr}");
    let deaths = stderr
        .lines()
        .filter(|l| l.starts_with("worker recovery: node"))
        .count();
    let expected = faults.iter().filter(|f| f.kills()).count();
    assert_eq!(
        deaths, expected,
        "seed {seed}: one recovery per fault but blips: {stderr}"
    );
    let report = read_json_lines(&metrics).last().unwrap().clone();
    assert_eq!(report["tasks"], 60000, "seed {seed}: {report}");
    let verdict = &report["verdict"];
    assert_eq!(
        verdict["exact"].as_u64().unwrap() + verdict["below"].as_u64().unwrap(),
        verdict["rows"].as_u64().unwrap(),
        "seed {seed}: {report}"
    );
    for line in stderr
        .lines()
        .filter(|l| l.starts_with("worker recovery: node") || l.starts_with("counter: "))
    {
        println!("  {}", line.chars().take(200).collect::<String>());
    }
}
