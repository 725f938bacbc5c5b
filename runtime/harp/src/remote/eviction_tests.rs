//! Tests of `eviction.rs`: which end of a broken link the master evicts.

use super::*;

const BOTH_WAYS: Recovers = Recovers {
    workers: true,
    servers: true,
};

fn live(nodes: &[(u32, NodeRoles)]) -> BTreeMap<u32, NodeRoles> {
    nodes.iter().copied().collect()
}

fn links(pairs: &[(u32, u32)]) -> BrokenLinks {
    let mut links = BrokenLinks::default();
    for &(a, b) in pairs {
        links.report(a, b);
    }
    links
}

#[test]
fn a_node_cut_off_from_every_other_node_is_the_one_evicted() {
    let nodes = live(&[
        (0, NodeRoles::BOTH),
        (1, NodeRoles::BOTH),
        (2, NodeRoles::BOTH),
        (3, NodeRoles::BOTH),
    ]);
    // Node 1 lost 0, 2 and 3 (each reported from both ends, in any order).
    let broken = links(&[(1, 0), (0, 1), (2, 1), (1, 3), (3, 1), (1, 2)]);
    for pair in [(0, 1), (1, 0), (2, 1), (1, 3)] {
        assert_eq!(
            choose(pair, &broken, &nodes, BOTH_WAYS),
            Some(1),
            "{pair:?}"
        );
    }
}

#[test]
fn between_two_equal_ends_a_node_without_a_server_goes_first_then_the_later_one() {
    let nodes = live(&[
        (0, NodeRoles::BOTH),
        (1, NodeRoles::WORKER),
        (2, NodeRoles::BOTH),
    ]);
    // (0, 1): one link each; 1 holds no server.
    let broken = links(&[(0, 1)]);
    assert_eq!(choose((0, 1), &broken, &nodes, BOTH_WAYS), Some(1));
    assert_eq!(choose((1, 0), &broken, &nodes, BOTH_WAYS), Some(1));
    // Node 0 has two broken links, 1 and 2 one each: 0 goes, server or not.
    let broken = links(&[(0, 1), (2, 0)]);
    assert_eq!(choose((0, 1), &broken, &nodes, BOTH_WAYS), Some(0));
    assert_eq!(choose((2, 0), &broken, &nodes, BOTH_WAYS), Some(0));
    let only = links(&[(0, 2)]);
    assert_eq!(choose((0, 2), &only, &nodes, BOTH_WAYS), Some(2));
}

#[test]
fn only_a_node_the_job_recovers_is_evicted() {
    let nodes = live(&[
        (0, NodeRoles::WORKER),
        (1, NodeRoles::WORKER),
        (2, NodeRoles::SERVER),
        (3, NodeRoles::SERVER),
    ]);
    let broken = links(&[(0, 2)]);
    // --scar-fraction alone: nobody. The server-only end is recoverable, but its flushes
    // are not staged: a part it applied whose acknowledgement the broken link lost may be
    // in its saved rows, and would be applied twice.
    let servers_only = Recovers {
        workers: false,
        servers: true,
    };
    assert_eq!(choose((0, 2), &broken, &nodes, servers_only), None);
    // With --recover-workers too, flushes are staged and either end may go: one link
    // each, so the one without a server.
    assert_eq!(choose((0, 2), &broken, &nodes, BOTH_WAYS), Some(0));
    // The worker end has a second broken link: it goes; with that link the server's
    // instead, when the server is the common end.
    let worker_cut = links(&[(0, 2), (0, 3)]);
    assert_eq!(choose((0, 2), &worker_cut, &nodes, BOTH_WAYS), Some(0));
    let server_cut = links(&[(0, 2), (1, 2)]);
    assert_eq!(choose((0, 2), &server_cut, &nodes, BOTH_WAYS), Some(2));
    // --recover-workers alone: the worker end.
    let workers_only = Recovers {
        workers: true,
        servers: false,
    };
    assert_eq!(choose((0, 2), &broken, &nodes, workers_only), Some(0));
    // Neither: nobody.
    let nothing = Recovers {
        workers: false,
        servers: false,
    };
    assert_eq!(choose((0, 2), &broken, &nodes, nothing), None);
    // A node with a worker and a server needs both.
    let both = live(&[(0, NodeRoles::BOTH), (1, NodeRoles::BOTH)]);
    let pair = links(&[(0, 1)]);
    assert_eq!(choose((0, 1), &pair, &both, workers_only), None);
    assert_eq!(choose((0, 1), &pair, &both, servers_only), None);
    assert_eq!(choose((0, 1), &pair, &both, BOTH_WAYS), Some(1));
}

#[test]
fn the_last_worker_or_the_last_server_is_never_evicted() {
    // Node 0 is the only worker, node 1 the only server: neither may go.
    let nodes = live(&[(0, NodeRoles::WORKER), (1, NodeRoles::SERVER)]);
    let broken = links(&[(0, 1)]);
    assert_eq!(choose((0, 1), &broken, &nodes, BOTH_WAYS), None);
    // With another server, the server end may go, though it has fewer links.
    let nodes = live(&[
        (0, NodeRoles::WORKER),
        (1, NodeRoles::SERVER),
        (2, NodeRoles::SERVER),
    ]);
    let broken = links(&[(0, 1), (0, 2)]);
    assert_eq!(choose((0, 1), &broken, &nodes, BOTH_WAYS), Some(1));
}

#[test]
fn links_of_nodes_gone_do_not_count_and_a_gone_end_mends_its_link() {
    let nodes = live(&[
        (0, NodeRoles::BOTH),
        (1, NodeRoles::BOTH),
        (2, NodeRoles::BOTH),
    ]);
    // Node 3 is gone: its links to 0 do not make 0 the common end.
    let broken = links(&[(0, 3), (0, 3), (3, 0), (0, 1)]);
    assert_eq!(choose((0, 1), &broken, &nodes, BOTH_WAYS), Some(1));
    assert_eq!(choose((0, 3), &broken, &nodes, BOTH_WAYS), None);
    assert_eq!(choose((5, 1), &broken, &nodes, BOTH_WAYS), None);
    // A link to itself is no link.
    let mut selfish = BrokenLinks::default();
    selfish.report(2, 2);
    assert!(selfish.pairs.is_empty());
}

/// Over random clusters and broken links: the choice is an end of the link, live and
/// recoverable, leaves a worker and a server, and never has fewer broken links than the
/// other end when both could go.
#[test]
fn over_random_clusters_the_choice_keeps_its_rules() {
    let all_roles = [NodeRoles::WORKER, NodeRoles::SERVER, NodeRoles::BOTH];
    for seed in 0..2_000u64 {
        let mut rng = harp_core::scar::SplitMix64::new(seed);
        let n = 2 + rng.next_u64() % 6;
        let nodes: BTreeMap<u32, NodeRoles> = (0..n as u32)
            .map(|id| (id, all_roles[(rng.next_u64() % 3) as usize]))
            .collect();
        let mut broken = BrokenLinks::default();
        for _ in 0..rng.next_u64() % 8 {
            broken.report((rng.next_u64() % n) as u32, (rng.next_u64() % n) as u32);
        }
        let recovers = Recovers {
            workers: rng.next_u64().is_multiple_of(2),
            servers: !rng.next_u64().is_multiple_of(4),
        };
        for &(a, b) in &broken.pairs {
            if let Some(kept) = kept_and_cut_off((a, b), &broken, &nodes, recovers) {
                assert!(kept == a || kept == b, "seed {seed}");
                assert_eq!(nodes[&kept], NodeRoles::SERVER, "seed {seed}");
                assert!(!may_go(kept, nodes[&kept], &nodes, recovers), "seed {seed}");
                let workers = nodes.iter().filter(|(_, r)| r.worker);
                assert!(workers.clone().count() >= 2, "seed {seed}");
                assert!(
                    workers.clone().all(|(w, _)| broken.has(kept, *w)),
                    "seed {seed}"
                );
            }
            let Some(victim) = choose((a, b), &broken, &nodes, recovers) else {
                continue;
            };
            assert!(victim == a || victim == b, "seed {seed}");
            let roles = nodes[&victim];
            assert!(
                !roles.server || recovers.workers,
                "seed {seed}: a server evicted from a job whose flushes are not staged"
            );
            assert!(
                recovers.node(roles),
                "seed {seed}: {victim} is not recoverable"
            );
            let rest = nodes.iter().filter(|(id, _)| **id != victim);
            assert!(
                !roles.worker || rest.clone().any(|(_, r)| r.worker),
                "seed {seed}: no worker left"
            );
            assert!(
                !roles.server || rest.clone().any(|(_, r)| r.server),
                "seed {seed}: no server left"
            );
            let other = if victim == a { b } else { a };
            if recovers.node(nodes[&other]) && (!nodes[&other].server || recovers.workers) {
                let other_left = nodes.iter().filter(|(id, _)| **id != other);
                let other_may_go = (!nodes[&other].worker
                    || other_left.clone().any(|(_, r)| r.worker))
                    && (!nodes[&other].server || other_left.clone().any(|(_, r)| r.server));
                if other_may_go {
                    assert!(
                        broken.count(victim, &nodes) >= broken.count(other, &nodes),
                        "seed {seed}: evicted {victim} with fewer broken links than {other}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_link_awaits_its_verdict_only_while_both_its_ends_are_live() {
    let broken = links(&[(0, 1)]);
    let all = live(&[
        (0, NodeRoles::BOTH),
        (1, NodeRoles::BOTH),
        (2, NodeRoles::BOTH),
    ]);
    assert!(broken.any_between(&all));
    // One end evicted (or gone): nothing is pending any more.
    let without_1 = live(&[(0, NodeRoles::BOTH), (2, NodeRoles::BOTH)]);
    assert!(!broken.any_between(&without_1));
    assert!(!BrokenLinks::default().any_between(&all));
}

#[test]
fn a_kept_server_node_cut_off_from_every_worker_node_ends_the_job_at_once() {
    let workers_only = Recovers {
        workers: true,
        servers: false,
    };
    let nodes = live(&[
        (0, NodeRoles::WORKER),
        (1, NodeRoles::WORKER),
        (2, NodeRoles::SERVER),
        (3, NodeRoles::SERVER),
    ]);
    // Server node 2 lost both worker nodes: it is the fault, and it may not go.
    let cut = links(&[(0, 2), (2, 1)]);
    for pair in [(0, 2), (2, 1)] {
        assert_eq!(
            kept_and_cut_off(pair, &cut, &nodes, workers_only),
            Some(2),
            "{pair:?}"
        );
    }
    // Before, the worker end went, then the other one could not: the job ended anyway.
    assert_eq!(choose((0, 2), &cut, &nodes, workers_only), Some(0));
    // One worker node still reaches it: evicting the other mends the job.
    let one = links(&[(0, 2)]);
    assert_eq!(kept_and_cut_off((0, 2), &one, &nodes, workers_only), None);
    assert_eq!(choose((0, 2), &one, &nodes, workers_only), Some(0));
    // With --scar-fraction too the server node may go: it is evicted instead.
    assert_eq!(kept_and_cut_off((0, 2), &cut, &nodes, BOTH_WAYS), None);
    assert_eq!(choose((0, 2), &cut, &nodes, BOTH_WAYS), Some(2));
    // A node that also runs a worker can carry the job on alone: not this rule.
    let mixed = live(&[
        (0, NodeRoles::WORKER),
        (1, NodeRoles::WORKER),
        (2, NodeRoles::BOTH),
        (3, NodeRoles::SERVER),
    ]);
    assert_eq!(kept_and_cut_off((0, 2), &cut, &mixed, workers_only), None);
    // With one worker node the two ends of the only link are not told apart.
    let pair = live(&[
        (0, NodeRoles::WORKER),
        (2, NodeRoles::SERVER),
        (3, NodeRoles::SERVER),
    ]);
    assert_eq!(kept_and_cut_off((0, 2), &one, &pair, workers_only), None);
}
