//! Hand-made cases for the planner; the randomized checks are in `tests/rebalance_props.rs`.

use super::*;
use std::collections::BTreeMap;

fn w(i: u32) -> WorkerId {
    WorkerId(i)
}

fn s(i: u32) -> ServerId {
    ServerId(i)
}

/// Executors `0..` with the given (owner, bytes).
fn executors(placed: &[(u32, u64)]) -> Vec<Placed<ExecutorId, WorkerId>> {
    placed
        .iter()
        .enumerate()
        .map(|(i, &(owner, bytes))| Placed {
            item: ExecutorId(i as u32),
            owner: w(owner),
            bytes,
        })
        .collect()
}

/// Final executor count per live worker after `moves`.
fn counts_after(
    placed: &[Placed<ExecutorId, WorkerId>],
    moves: &[Move<ExecutorId, WorkerId>],
) -> BTreeMap<WorkerId, usize> {
    let mut owner: BTreeMap<ExecutorId, WorkerId> =
        placed.iter().map(|p| (p.item, p.owner)).collect();
    for m in moves {
        owner.insert(m.item, m.to);
    }
    let mut counts = BTreeMap::new();
    for o in owner.values() {
        *counts.entry(*o).or_insert(0) += 1;
    }
    counts
}

#[test]
fn scale_out_from_one_worker_to_two_moves_exactly_half() {
    let placed = executors(&[(0, 1); 8]);
    let moves = plan_executors(&placed, &[w(0), w(1)]).unwrap();
    assert_eq!(moves.len(), 4);
    assert!(moves.iter().all(|m| m.from == w(0) && m.to == w(1)));
    let counts = counts_after(&placed, &moves);
    assert_eq!(counts[&w(0)], 4);
    assert_eq!(counts[&w(1)], 4);
}

#[test]
fn scale_out_with_an_odd_count_keeps_the_extra_item_where_it_is() {
    let placed = executors(&[(0, 1); 7]);
    let moves = plan_executors(&placed, &[w(0), w(1)]).unwrap();
    // w0 holds more than floor (3), so it keeps the ceil slot: 3 moves, not 4.
    assert_eq!(moves.len(), 3);
    let counts = counts_after(&placed, &moves);
    assert_eq!((counts[&w(0)], counts[&w(1)]), (4, 3));
}

#[test]
fn scale_in_spreads_only_the_leaving_workers_executors() {
    // 3 executors on each of w0, w1, w2; w1 leaves.
    let placed = executors(&[
        (0, 1),
        (1, 1),
        (2, 1),
        (0, 1),
        (1, 1),
        (2, 1),
        (0, 1),
        (1, 1),
        (2, 1),
    ]);
    let moves = plan_executors(&placed, &[w(0), w(2)]).unwrap();
    assert_eq!(moves.len(), 3);
    assert!(moves.iter().all(|m| m.from == w(1)));
    let counts = counts_after(&placed, &moves);
    assert_eq!(counts.get(&w(1)), None);
    let mut final_counts: Vec<usize> = counts.values().copied().collect();
    final_counts.sort();
    assert_eq!(final_counts, vec![4, 5]);
}

#[test]
fn a_join_that_cannot_improve_counts_moves_nothing() {
    // One executor per worker; a fifth worker joins: floor is 0, the four keep theirs.
    let placed = executors(&[(0, 1), (1, 1), (2, 1), (3, 1)]);
    let moves = plan_executors(&placed, &[w(0), w(1), w(2), w(3), w(4)]).unwrap();
    assert!(moves.is_empty());
}

#[test]
fn a_balanced_placement_with_everyone_live_moves_nothing() {
    let placed = executors(&[(0, 5), (1, 1), (2, 9), (0, 2), (1, 7)]);
    let moves = plan_executors(&placed, &[w(2), w(1), w(0)]).unwrap();
    assert!(moves.is_empty());
}

#[test]
fn when_too_many_workers_hold_ceil_the_heaviest_gives_one_up() {
    // Counts (2, 2, 0): floor 1, one ceil slot. w1 holds more bytes, so w1 sends one.
    let placed = executors(&[(0, 1), (0, 1), (1, 10), (1, 3)]);
    let moves = plan_executors(&placed, &[w(0), w(1), w(2)]).unwrap();
    assert_eq!(moves.len(), 1);
    assert_eq!((moves[0].from, moves[0].to), (w(1), w(2)));
    // Largest leaves.
    assert_eq!(moves[0].item, ExecutorId(2));
    assert_eq!(moves[0].bytes, 10);
}

#[test]
fn a_sender_gives_up_its_largest_items() {
    let placed = executors(&[(0, 1), (0, 50), (0, 3), (0, 40)]);
    let moves = plan_executors(&placed, &[w(0), w(1)]).unwrap();
    let moved: Vec<ExecutorId> = moves.iter().map(|m| m.item).collect();
    assert_eq!(moved, vec![ExecutorId(1), ExecutorId(3)]);
}

#[test]
fn movers_go_largest_first_to_the_least_loaded_receiver() {
    // w9 leaves with items of 10, 9, 8, 1 bytes; w0 and w1 are empty and take two each.
    let placed = executors(&[(9, 10), (9, 9), (9, 8), (9, 1)]);
    let moves = plan_executors(&placed, &[w(0), w(1)]).unwrap();
    let to: Vec<(u64, WorkerId)> = moves.iter().map(|m| (m.bytes, m.to)).collect();
    // 10 → w0 (tie by id); 9 → w1 (0 < 10); 8 → w1 (9 < 10); 1 → w0 (w1 is full).
    assert_eq!(to, vec![(10, w(0)), (9, w(1)), (8, w(1)), (1, w(0))]);
}

#[test]
fn input_order_does_not_change_the_plan() {
    let placed = executors(&[(0, 4), (0, 4), (0, 2), (3, 7), (3, 1), (0, 4), (1, 4)]);
    let live = [w(0), w(1), w(2)];
    let a = plan_executors(&placed, &live).unwrap();
    let mut reversed = placed.clone();
    reversed.reverse();
    let b = plan_executors(&reversed, &[w(2), w(0), w(1), w(0)]).unwrap();
    assert_eq!(a, b);
    assert!(a.windows(2).all(|p| p[0].item < p[1].item));
}

#[test]
fn removing_the_last_worker_is_refused_with_a_readable_error() {
    let placed = executors(&[(0, 1); 4]);
    let err = plan_executors(&placed, &[]).unwrap_err();
    assert_eq!(err, RebalanceError::NoLiveWorker { executors: 4 });
    let text = err.to_string();
    assert!(
        text.contains("4 executors would have nowhere to run"),
        "{text}"
    );
    let one = RebalanceError::NoLiveServer { shards: 1 }.to_string();
    assert!(one.contains("1 parameter shard would"), "{one}");
}

#[test]
fn no_live_node_is_fine_when_there_is_nothing_to_place() {
    assert_eq!(plan_executors(&[], &[]).unwrap(), vec![]);
    let plan = plan_rebalance(&RebalanceInput::default()).unwrap();
    assert!(plan.is_empty());
}

#[test]
fn duplicated_ids_are_refused() {
    let mut placed = executors(&[(0, 1), (1, 1)]);
    placed.push(Placed {
        item: ExecutorId(1),
        owner: w(0),
        bytes: 1,
    });
    assert_eq!(
        plan_executors(&placed, &[w(0)]).unwrap_err(),
        RebalanceError::DuplicateExecutor(ExecutorId(1))
    );
    let shards = vec![
        Placed {
            item: ShardId(3),
            owner: s(0),
            bytes: 1,
        };
        2
    ];
    assert_eq!(
        plan_shards(&shards, &[s(0)]).unwrap_err(),
        RebalanceError::DuplicateShard(ShardId(3))
    );
}

#[test]
fn plans_from_maps_apply_and_then_settle() {
    let mut emap = ExecutorMap::round_robin(10, &[w(0), w(1)]).unwrap();
    let mut smap = ShardMap::round_robin(6, &[s(0)]).unwrap();
    // w1 leaves, w2 and w3 join; s1 and s2 join.
    let live_w = [w(0), w(2), w(3)];
    let live_s = [s(0), s(1), s(2)];
    let input = RebalanceInput::from_maps(
        &emap,
        |e| u64::from(e.0) + 1,
        &smap,
        |_| 100,
        &live_w,
        &live_s,
    );
    let plan = plan_rebalance(&input).unwrap();
    assert_eq!(plan.shard_moves.len(), 4);
    // 5 executors leave w1; w0 keeps 4 (its ceil slot), so one more leaves w0.
    assert_eq!(plan.executor_moves.len(), 6);
    assert_eq!(plan.len(), 10);
    let expected_bytes: u128 = plan
        .executor_moves
        .iter()
        .map(|m| u128::from(m.item.0) + 1)
        .sum::<u128>()
        + 400;
    assert_eq!(plan.bytes_moved(), expected_bytes);

    plan.apply(&mut emap, &mut smap).unwrap();
    for worker in live_w {
        assert!((3..=4).contains(&emap.executors_on(worker).len()));
    }
    assert!(emap.executors_on(w(1)).is_empty());
    for server in live_s {
        assert_eq!(smap.shards_on(server).len(), 2);
    }
    let again = RebalanceInput::from_maps(&emap, |_| 1, &smap, |_| 1, &live_w, &live_s);
    assert!(plan_rebalance(&again).unwrap().is_empty());
}

#[test]
fn a_stale_plan_is_refused_and_changes_nothing() {
    let mut emap = ExecutorMap::round_robin(4, &[w(0)]).unwrap();
    let mut smap = ShardMap::round_robin(2, &[s(0)]).unwrap();
    let input = RebalanceInput::from_maps(&emap, |_| 1, &smap, |_| 1, &[w(0), w(1)], &[s(1)]);
    let plan = plan_rebalance(&input).unwrap();
    // Since planning, someone moved the first executor and shard 1 elsewhere.
    let moved = plan.executor_moves[0].item;
    emap.assign(moved, w(7)).unwrap();
    smap.assign(ShardId(1), s(5)).unwrap();
    let (emap_before, smap_before) = (emap.clone(), smap.clone());
    assert_eq!(
        plan.apply(&mut emap, &mut smap).unwrap_err(),
        RebalanceError::StaleExecutorMove {
            executor: moved,
            planned_from: w(0),
            actual: w(7),
        }
    );
    assert_eq!((&emap, &smap), (&emap_before, &smap_before));
    emap.assign(moved, w(0)).unwrap();
    let emap_before = emap.clone();
    let err = plan.apply(&mut emap, &mut smap).unwrap_err();
    assert_eq!(
        err,
        RebalanceError::StaleShardMove {
            shard: ShardId(1),
            planned_from: s(0),
            actual: s(5),
        }
    );
    assert!(err.to_string().starts_with("stale plan"));
    assert_eq!((&emap, &smap), (&emap_before, &smap_before));
}

#[test]
fn unknown_and_repeated_moves_are_refused() {
    let mut emap = ExecutorMap::round_robin(2, &[w(0)]).unwrap();
    let mut smap = ShardMap::round_robin(1, &[s(0)]).unwrap();
    let hop = |e: u32| Move {
        item: ExecutorId(e),
        from: w(0),
        to: w(1),
        bytes: 1,
    };
    let unknown = RebalancePlan {
        executor_moves: vec![hop(9)],
        shard_moves: vec![],
    };
    assert_eq!(
        unknown.apply(&mut emap, &mut smap).unwrap_err(),
        RebalanceError::UnknownExecutor(ExecutorId(9))
    );
    let twice = RebalancePlan {
        executor_moves: vec![hop(1), hop(1)],
        shard_moves: vec![],
    };
    assert_eq!(
        twice.apply(&mut emap, &mut smap).unwrap_err(),
        RebalanceError::DuplicateExecutorMove(ExecutorId(1))
    );
    let unknown_shard = RebalancePlan {
        executor_moves: vec![],
        shard_moves: vec![Move {
            item: ShardId(4),
            from: s(0),
            to: s(1),
            bytes: 1,
        }],
    };
    assert_eq!(
        unknown_shard.apply(&mut emap, &mut smap).unwrap_err(),
        RebalanceError::UnknownShard(ShardId(4))
    );
    assert_eq!(emap.executors_on(w(0)).len(), 2);
}
