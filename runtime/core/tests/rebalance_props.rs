//! Randomized checks of the re-balancing planner (`harp_core::rebalance`).
//!
//! Each property below generates clusters of up to 64 nodes and 1000 items with random
//! sizes, random skew, and random nodes joining and leaving, plans, and checks one of the
//! guarantees stated in the module doc against the plan. The minimum number of moves is
//! computed here from first principles and cross-checked by brute force on small clusters.

use harp_core::{
    balance, plan_rebalance, BalanceError, ExecutorId, ExecutorMap, Move, Placed, RebalanceError,
    RebalanceInput, RebalancePlan, ServerId, ShardId, ShardMap, WorkerId,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

/// A generated cluster: items with owners, and the live nodes after joins and leaves.
#[derive(Clone, Debug)]
struct Cluster {
    items: Vec<Placed<u32, u32>>,
    live: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
enum Fate {
    Stays,
    Leaves,
    Joins,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![6 => Just(Fate::Stays), 2 => Just(Fate::Leaves), 2 => Just(Fate::Joins)]
}

/// Sizes: tiny (many ties), moderate, or anything up to `u64::MAX` (sums overflow `u64`).
fn sizes(class: u8) -> BoxedStrategy<u64> {
    match class {
        0 => (0u64..4).boxed(),
        1 => (0u64..1_000_000).boxed(),
        _ => any::<u64>().boxed(),
    }
}

fn cluster(max_nodes: usize, max_items: usize) -> impl Strategy<Value = Cluster> {
    (1..=max_nodes, 0..=max_items, 0u8..4, 0u8..3).prop_flat_map(
        |(nodes, items, skew, size_class)| {
            (
                prop::collection::btree_set(0u32..10_000, nodes),
                prop::collection::vec(fate(), nodes),
                prop::collection::btree_set(any::<u32>(), items),
                prop::collection::vec((any::<prop::sample::Index>(), sizes(size_class)), items),
            )
                .prop_map(move |(nodes, fates, ids, picks)| {
                    let nodes: Vec<u32> = nodes.into_iter().collect();
                    let mut fates = fates;
                    // Somebody must hold the items now: a node that joins holds nothing.
                    if fates.iter().all(|f| matches!(f, Fate::Joins)) {
                        fates[0] = Fate::Stays;
                    }
                    let holders: Vec<u32> = nodes
                        .iter()
                        .zip(&fates)
                        .filter(|(_, f)| !matches!(f, Fate::Joins))
                        .map(|(n, _)| *n)
                        .collect();
                    let live = nodes
                        .iter()
                        .zip(&fates)
                        .filter(|(_, f)| !matches!(f, Fate::Leaves))
                        .map(|(n, _)| *n)
                        .collect();
                    let h = holders.len();
                    let items = ids
                        .into_iter()
                        .zip(picks)
                        .enumerate()
                        .map(|(i, (item, (pick, bytes)))| {
                            let owner = match skew {
                                0 => holders[pick.index(h)],
                                1 => holders[pick.index((h / 4).max(1))],
                                2 => holders[0],
                                _ => holders[i % h],
                            };
                            Placed { item, owner, bytes }
                        })
                        .collect();
                    Cluster { items, live }
                })
        },
    )
}

/// `n - Σ_v min(c(v), floor) - min(rem, |{v : c(v) > floor}|)` over the live nodes.
///
/// Any count-balanced result has exactly `rem` live nodes at `floor + 1`, the others at
/// `floor`. An item stays only if its owner is live, so at most `min(c(v), t(v))` stay on
/// `v`, where `t(v)` is `v`'s final count. Summing, what stays is at most
/// `Σ min(c(v), floor)` plus one for each `floor + 1` slot given to a node holding more than
/// `floor`, and there are at most `min(rem, |{v : c(v) > floor}|)` of those. Every other
/// item moves. (Brute force below confirms the bound is reached.)
fn min_moves<N: Ord>(n: usize, before: &BTreeMap<N, usize>, live: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let (floor, rem) = (n / live, n % live);
    let staying: usize = before.values().map(|c| (*c).min(floor)).sum();
    let above = before.values().filter(|c| **c > floor).count();
    n - staying - rem.min(above)
}

/// Checks every guarantee of the module doc for one plan; `what` names the item kind.
fn check_plan<I: Ord + Copy + Debug, N: Ord + Copy + Debug>(
    what: &str,
    items: &[Placed<I, N>],
    live: &[N],
    moves: &[Move<I, N>],
) -> Result<(), TestCaseError> {
    let live: BTreeSet<N> = live.iter().copied().collect();
    let n = items.len();
    let owner_before: BTreeMap<I, N> = items.iter().map(|p| (p.item, p.owner)).collect();
    let size: BTreeMap<I, u64> = items.iter().map(|p| (p.item, p.bytes)).collect();

    // (1) Placement: each move starts at the item's owner, each item moves at most once,
    // straight to a live node; afterwards every item has exactly one live owner.
    prop_assert!(
        moves.windows(2).all(|w| w[0].item < w[1].item),
        "{what}: moves are sorted by item and name each item once"
    );
    let mut owner_after = owner_before.clone();
    for m in moves {
        prop_assert_eq!(
            owner_before.get(&m.item),
            Some(&m.from),
            "{}: move starts at the owner",
            what
        );
        prop_assert_eq!(
            size[&m.item],
            m.bytes,
            "{}: move carries the item's size",
            what
        );
        prop_assert!(live.contains(&m.to), "{what}: {m:?} ends on a live node");
        prop_assert!(m.from != m.to, "{what}: {m:?} goes somewhere");
        owner_after.insert(m.item, m.to);
    }
    prop_assert_eq!(owner_after.len(), n);
    for (item, owner) in &owner_after {
        prop_assert!(
            live.contains(owner),
            "{what}: {item:?} ends on live {owner:?}"
        );
    }

    // (2) Counts differ by at most one; exactly `rem` nodes hold `floor + 1`.
    let count = |owners: &BTreeMap<I, N>| {
        let mut c: BTreeMap<N, usize> = live.iter().map(|v| (*v, 0)).collect();
        for o in owners.values() {
            if let Some(x) = c.get_mut(o) {
                *x += 1;
            }
        }
        c
    };
    let before = count(&owner_before);
    let after = count(&owner_after);
    prop_assert_eq!(
        after.values().sum::<usize>(),
        n,
        "{}: every item on exactly one live node",
        what
    );
    if n == 0 {
        prop_assert!(moves.is_empty());
        return Ok(());
    }
    let (floor, rem) = (n / live.len(), n % live.len());
    let ceil = floor + 1;
    prop_assert!(
        after.values().all(|c| *c == floor || *c == ceil),
        "{what}: counts {after:?} not within {floor}..={ceil}"
    );
    prop_assert_eq!(after.values().filter(|c| **c == ceil).count(), rem);

    // (3) Fewest moves.
    prop_assert_eq!(
        moves.len(),
        min_moves(n, &before, live.len()),
        "{}: move count",
        what
    );

    // (4) Stability.
    let senders: BTreeSet<N> = moves
        .iter()
        .map(|m| m.from)
        .filter(|v| live.contains(v))
        .collect();
    let receivers: BTreeSet<N> = moves.iter().map(|m| m.to).collect();
    prop_assert!(
        senders.is_disjoint(&receivers),
        "{what}: a node both sends and receives"
    );
    let above_floor = before.values().filter(|c| **c > floor).count();
    for v in &live {
        let (b, a) = (before[v], after[v]);
        let sent = moves.iter().filter(|m| m.from == *v).count();
        let got = moves.iter().filter(|m| m.to == *v).count();
        prop_assert_eq!(
            sent,
            b.saturating_sub(a),
            "{}: {:?} sends only its excess",
            what,
            v
        );
        prop_assert_eq!(
            got,
            a.saturating_sub(b),
            "{}: {:?} receives only its deficit",
            what,
            v
        );
        if b <= floor {
            prop_assert_eq!(sent, 0, "{}: {:?} at or below floor sent", what, v);
        }
        if b == ceil && sent > 0 {
            prop_assert!(
                sent == 1 && above_floor > rem,
                "{what}: {v:?} at ceil sent {sent} ({above_floor} above floor, {rem} slots)"
            );
        }
    }
    for m in moves {
        let forced = !live.contains(&m.from) || before[&m.from] > ceil;
        prop_assert!(
            forced || before[&m.to] < floor,
            "{what}: {m:?} moves between two in-bound nodes ({} -> {})",
            before[&m.from],
            before[&m.to]
        );
    }

    // (7) Bytes.
    let mut load: BTreeMap<N, u128> = live.iter().map(|v| (*v, 0)).collect();
    for p in items {
        if let Some(l) = load.get_mut(&p.owner) {
            *l += u128::from(p.bytes);
        }
    }
    // ceil slots: within each group, the nodes ending at ceil come before those ending at
    // floor in (bytes, id) order.
    if rem > 0 {
        for high in [true, false] {
            let group: Vec<&N> = live
                .iter()
                .filter(|v| (before[*v] > floor) == high)
                .collect();
            let keep_ceil = group
                .iter()
                .filter(|v| after[**v] == ceil)
                .map(|v| (load[*v], **v))
                .max();
            let drop_floor = group
                .iter()
                .filter(|v| after[**v] == floor)
                .map(|v| (load[*v], **v))
                .min();
            if let (Some(k), Some(d)) = (keep_ceil, drop_floor) {
                prop_assert!(k < d, "{what}: ceil slot to {k:?} over {d:?}");
            }
        }
    }
    // Largest leave: every item a live node sends outranks every item it keeps.
    let rank = |item: I| (size[&item], std::cmp::Reverse(item));
    for v in &senders {
        let sent_min = moves
            .iter()
            .filter(|m| m.from == *v)
            .map(|m| rank(m.item))
            .min();
        let kept_max = owner_after
            .iter()
            .filter(|(_, o)| *o == v)
            .map(|(i, _)| rank(*i))
            .max();
        if let (Some(s), Some(k)) = (sent_min, kept_max) {
            prop_assert!(s > k, "{what}: {v:?} sent {s:?} but kept {k:?}");
        }
    }
    // Least-loaded receive: replay the moves largest first; each lands on a node with room
    // that holds the fewest bytes at that moment.
    let mut room: BTreeMap<N, usize> = receivers
        .iter()
        .map(|v| (*v, after[v] - before[v]))
        .collect();
    let mut by_size: Vec<&Move<I, N>> = moves.iter().collect();
    by_size.sort_by_key(|m| (std::cmp::Reverse(m.bytes), m.item));
    for m in by_size {
        let best = room
            .iter()
            .filter(|(_, r)| **r > 0)
            .map(|(v, _)| (load[v], *v))
            .min();
        prop_assert_eq!(
            best,
            Some((load[&m.to], m.to)),
            "{}: {:?} not on the least-loaded receiver",
            what,
            m
        );
        *room.get_mut(&m.to).unwrap() -= 1;
        *load.get_mut(&m.to).unwrap() += u128::from(m.bytes);
    }
    Ok(())
}

fn executors(c: &Cluster) -> Vec<Placed<ExecutorId, WorkerId>> {
    c.items
        .iter()
        .map(|p| Placed {
            item: ExecutorId(p.item),
            owner: WorkerId(p.owner),
            bytes: p.bytes,
        })
        .collect()
}

fn shards(c: &Cluster) -> Vec<Placed<ShardId, ServerId>> {
    c.items
        .iter()
        .map(|p| Placed {
            item: ShardId(p.item),
            owner: ServerId(p.owner),
            bytes: p.bytes,
        })
        .collect()
}

fn typed_input(workers: &Cluster, servers: &Cluster) -> RebalanceInput {
    RebalanceInput {
        executors: executors(workers),
        shards: shards(servers),
        live_workers: workers.live.iter().map(|w| WorkerId(*w)).collect(),
        live_servers: servers.live.iter().map(|s| ServerId(*s)).collect(),
    }
}

/// The input with every move carried out.
fn after_plan(input: &RebalanceInput, plan: &RebalancePlan) -> RebalanceInput {
    let mut next = input.clone();
    let to_w: BTreeMap<_, _> = plan.executor_moves.iter().map(|m| (m.item, m.to)).collect();
    let to_s: BTreeMap<_, _> = plan.shard_moves.iter().map(|m| (m.item, m.to)).collect();
    for p in &mut next.executors {
        p.owner = to_w.get(&p.item).copied().unwrap_or(p.owner);
    }
    for p in &mut next.shards {
        p.owner = to_s.get(&p.item).copied().unwrap_or(p.owner);
    }
    next
}

fn has_live(c: &Cluster) -> bool {
    c.items.is_empty() || !c.live.is_empty()
}

/// The cluster's items as the master's [`ExecutorMap`]: executor `i` is the `i`-th item.
fn executor_map(c: &Cluster) -> ExecutorMap {
    let mut map = ExecutorMap::round_robin(c.items.len() as u32, &[WorkerId(0)]).unwrap();
    for (i, p) in c.items.iter().enumerate() {
        map.assign(ExecutorId(i as u32), WorkerId(p.owner)).unwrap();
    }
    map
}

/// The cluster's items as the master's [`ShardMap`]: shard `i` is the `i`-th item.
fn shard_map(c: &Cluster) -> ShardMap {
    let mut map = ShardMap::round_robin(c.items.len() as u32, &[ServerId(0)]).unwrap();
    for (i, p) in c.items.iter().enumerate() {
        map.assign(ShardId(i as u32), ServerId(p.owner)).unwrap();
    }
    map
}

fn plans_keep_every_guarantee_case(
    workers: &Cluster,
    servers: &Cluster,
) -> Result<(), TestCaseError> {
    let input = typed_input(workers, servers);
    match plan_rebalance(&input) {
        Ok(plan) => {
            prop_assert!(has_live(workers) && has_live(servers));
            let (e_moves, s_moves) = (&plan.executor_moves, &plan.shard_moves);
            check_plan("executors", &input.executors, &input.live_workers, e_moves)?;
            check_plan("shards", &input.shards, &input.live_servers, s_moves)?;
            prop_assert_eq!(plan.len(), e_moves.len() + s_moves.len());
            prop_assert_eq!(plan.is_empty(), e_moves.is_empty() && s_moves.is_empty());
            let bytes: u128 = e_moves
                .iter()
                .map(|m| u128::from(m.bytes))
                .chain(s_moves.iter().map(|m| u128::from(m.bytes)))
                .sum();
            prop_assert_eq!(plan.bytes_moved(), bytes);
            // (6) Idempotence.
            let again = plan_rebalance(&after_plan(&input, &plan)).unwrap();
            prop_assert!(again.is_empty(), "re-planning moved {:?}", again);
        }
        Err(RebalanceError::NoLiveWorker { executors }) => {
            prop_assert!(!has_live(workers));
            prop_assert_eq!(executors, workers.items.len());
        }
        Err(RebalanceError::NoLiveServer { shards }) => {
            prop_assert!(has_live(workers) && !has_live(servers));
            prop_assert_eq!(shards, servers.items.len());
        }
        Err(e) => prop_assert!(false, "unexpected error {e}"),
    }
    Ok(())
}

fn input_order_case(c: &Cluster, seed: u64) -> Result<(), TestCaseError> {
    let plan = balance(&c.items, &c.live);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut items = c.items.clone();
    items.shuffle(&mut rng);
    let mut live = c.live.clone();
    for _ in 0..rng.random_range(0..=live.len()) {
        let again = live[rng.random_range(0..live.len())];
        live.push(again);
    }
    live.shuffle(&mut rng);
    prop_assert_eq!(balance(&items, &live), plan);
    Ok(())
}

fn maps_settle_case(workers: &Cluster, servers: &Cluster) -> Result<(), TestCaseError> {
    let mut emap = executor_map(workers);
    let mut smap = shard_map(servers);
    let e_bytes = |e: ExecutorId| workers.items[e.0 as usize].bytes;
    let s_bytes = |s: ShardId| servers.items[s.0 as usize].bytes;
    let live_w: Vec<WorkerId> = workers.live.iter().map(|w| WorkerId(*w)).collect();
    let live_s: Vec<ServerId> = servers.live.iter().map(|s| ServerId(*s)).collect();

    let input = RebalanceInput::from_maps(&emap, e_bytes, &smap, s_bytes, &live_w, &live_s);
    prop_assert_eq!(input.executors.len(), workers.items.len());
    prop_assert_eq!(input.shards.len(), servers.items.len());
    let plan = plan_rebalance(&input).unwrap();
    plan.apply(&mut emap, &mut smap).unwrap();

    let per_worker: Vec<usize> = live_w.iter().map(|w| emap.executors_on(*w).len()).collect();
    let per_server: Vec<usize> = live_s.iter().map(|s| smap.shards_on(*s).len()).collect();
    let on_live_workers: usize = per_worker.iter().sum();
    let on_live_servers: usize = per_server.iter().sum();
    prop_assert_eq!(
        on_live_workers,
        emap.len(),
        "every executor on a live worker"
    );
    prop_assert_eq!(
        on_live_servers,
        smap.num_shards() as usize,
        "every shard on a live server"
    );
    let spread = |v: &[usize]| v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0);
    prop_assert!(spread(&per_worker) <= 1 && spread(&per_server) <= 1);

    let again = RebalanceInput::from_maps(&emap, e_bytes, &smap, s_bytes, &live_w, &live_s);
    prop_assert!(plan_rebalance(&again).unwrap().is_empty());
    Ok(())
}

fn duplicate_case(c: &Cluster, pick: usize, other: u32) -> Result<(), TestCaseError> {
    let mut dup = c.clone();
    let twin = Placed {
        owner: other,
        ..dup.items[pick]
    };
    dup.items.push(twin);
    let err = BalanceError::DuplicateItem(twin.item);
    prop_assert_eq!(balance(&dup.items, &dup.live), Err(err));
    let input = RebalanceInput {
        executors: executors(&dup),
        live_workers: dup.live.iter().map(|w| WorkerId(*w)).collect(),
        ..RebalanceInput::default()
    };
    let err = RebalanceError::DuplicateExecutor(ExecutorId(twin.item));
    prop_assert_eq!(plan_rebalance(&input), Err(err));
    Ok(())
}

fn no_live_server_case(c: &Cluster) -> Result<(), TestCaseError> {
    let input = RebalanceInput {
        shards: shards(c),
        ..RebalanceInput::default()
    };
    let result = plan_rebalance(&input);
    if c.items.is_empty() {
        prop_assert_eq!(result, Ok(RebalancePlan::default()));
    } else {
        let err = RebalanceError::NoLiveServer {
            shards: c.items.len(),
        };
        prop_assert_eq!(result, Err(err));
    }
    Ok(())
}

fn stale_case(c: &Cluster, pick: prop::sample::Index, elsewhere: u32) -> Result<(), TestCaseError> {
    let mut emap = executor_map(c);
    let mut smap = ShardMap::round_robin(1, &[ServerId(0)]).unwrap();
    let live: Vec<WorkerId> = c.live.iter().map(|w| WorkerId(*w)).collect();
    let input = RebalanceInput::from_maps(&emap, |_| 1, &smap, |_| 1, &live, &[ServerId(1)]);
    let plan = plan_rebalance(&input).unwrap();
    prop_assume!(!plan.executor_moves.is_empty());
    let stale = plan.executor_moves[pick.index(plan.executor_moves.len())];
    emap.assign(stale.item, WorkerId(elsewhere)).unwrap();
    let (emap_before, smap_before) = (emap.clone(), smap.clone());
    let err = plan.apply(&mut emap, &mut smap).unwrap_err();
    let expected = RebalanceError::StaleExecutorMove {
        executor: stale.item,
        planned_from: stale.from,
        actual: WorkerId(elsewhere),
    };
    prop_assert_eq!(err, expected);
    prop_assert_eq!(emap, emap_before);
    prop_assert_eq!(smap, smap_before);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// (1)–(4), (6), (7): placement, counts, fewest moves, stability, idempotence, bytes;
    /// and the errors when a side has items but no live node.
    #[test]
    fn plans_keep_every_guarantee(workers in cluster(64, 1000), servers in cluster(64, 1000)) {
        plans_keep_every_guarantee_case(&workers, &servers)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// (5) The plan does not depend on the order of items or live nodes, nor on repeats in
    /// the live list.
    #[test]
    fn input_order_does_not_change_the_plan(c in cluster(64, 1000), seed in any::<u64>()) {
        input_order_case(&c, seed)?;
    }

    /// Planning from the master's maps, applying, and planning again: the maps end balanced
    /// with everything on live nodes, and the second plan is empty.
    #[test]
    fn maps_settle_after_one_plan(workers in cluster(64, 1000), servers in cluster(64, 300)) {
        prop_assume!(!workers.live.is_empty() && !servers.live.is_empty());
        prop_assume!(!servers.items.is_empty());
        maps_settle_case(&workers, &servers)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A repeated item id is refused whatever else the input holds, and names the item.
    #[test]
    fn duplicate_items_are_refused(
        c in cluster(64, 300),
        pick in any::<prop::sample::Index>(),
        other in any::<u32>(),
    ) {
        prop_assume!(!c.items.is_empty());
        duplicate_case(&c, pick.index(c.items.len()), other)?;
    }

    /// With every server leaving, shards are refused with their count; with none, fine.
    #[test]
    fn no_live_node_is_an_error_only_with_items(c in cluster(64, 300)) {
        no_live_server_case(&c)?;
    }

    /// A plan made stale by a later move is refused and leaves both maps as they were.
    #[test]
    fn stale_plans_change_nothing(
        c in cluster(16, 200),
        pick in any::<prop::sample::Index>(),
        elsewhere in 10_000u32..,
    ) {
        prop_assume!(!c.live.is_empty());
        stale_case(&c, pick, elsewhere)?;
    }
}

/// Brute force on small clusters: the planner's move count equals the true minimum over
/// every count-balanced final placement, and so does [`min_moves`].
#[test]
fn move_count_is_the_true_minimum_on_small_clusters() {
    let holders = [0u32, 1, 2];
    let universe = [0u32, 1, 2, 3]; // node 3 holds nothing: it can only join
    let mut checked = 0usize;
    for n in 0..=5usize {
        for live_mask in 1u32..(1 << universe.len()) {
            let live: Vec<u32> = universe
                .iter()
                .copied()
                .filter(|v| live_mask & (1 << v) != 0)
                .collect();
            // Every final placement of the n items on live nodes with balanced counts.
            let finals: Vec<Vec<u32>> = assignments(n, &live)
                .into_iter()
                .filter(|f| {
                    let counts: Vec<usize> = live
                        .iter()
                        .map(|v| f.iter().filter(|o| *o == v).count())
                        .collect();
                    counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1
                })
                .collect();
            for initial in assignments(n, &holders) {
                let truth = finals
                    .iter()
                    .map(|f| f.iter().zip(&initial).filter(|(a, b)| a != b).count())
                    .min()
                    .unwrap_or(0);
                let items: Vec<Placed<u32, u32>> = initial
                    .iter()
                    .enumerate()
                    .map(|(i, o)| Placed {
                        item: i as u32,
                        owner: *o,
                        bytes: (i as u64 * 7) % 3,
                    })
                    .collect();
                let moves = balance(&items, &live).unwrap();
                assert_eq!(moves.len(), truth, "initial {initial:?} live {live:?}");
                let mut before: BTreeMap<u32, usize> = live.iter().map(|v| (*v, 0)).collect();
                for o in &initial {
                    if let Some(c) = before.get_mut(o) {
                        *c += 1;
                    }
                }
                assert_eq!(min_moves(n, &before, live.len()), truth);
                checked += 1;
            }
        }
    }
    assert!(checked > 5_000, "checked {checked} cases");
}

/// All `nodes.len()^n` ways to give each of `n` items a node.
fn assignments(n: usize, nodes: &[u32]) -> Vec<Vec<u32>> {
    let mut all = vec![Vec::new()];
    for _ in 0..n {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                nodes.iter().map(move |v| {
                    let mut next = prefix.clone();
                    next.push(*v);
                    next
                })
            })
            .collect();
    }
    all
}

/// Random sizes never overflow the planner: huge items on one node, many nodes joining.
#[test]
fn huge_sizes_do_not_overflow() {
    let mut rng = StdRng::seed_from_u64(7);
    let items: Vec<Placed<u32, u32>> = (0..1000)
        .map(|i| Placed {
            item: i,
            owner: 0,
            bytes: u64::MAX - rng.random_range(0..3),
        })
        .collect();
    let live: Vec<u32> = (0..64).collect();
    let moves = balance(&items, &live).unwrap();
    check_plan("huge", &items, &live, &moves).unwrap();
}
