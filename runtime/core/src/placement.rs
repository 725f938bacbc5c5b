//! Placement: which worker hosts each executor, which server hosts each shard, and which
//! shard each parameter key belongs to.
//!
//! The master owns both maps. Initial placement is round-robin; later re-balancing (the
//! elasticity work) changes single entries with [`ExecutorMap::assign`] and
//! [`ShardMap::assign`]. Every executor and every shard always has exactly one owner.

use crate::error::CoreError;
use crate::ids::{ExecutorId, ParamKey, ServerId, ShardId, WorkerId};
use std::collections::BTreeMap;

/// The shard of `key` among `num_shards` shards (a fixed hash of table and row).
///
/// Rows of one table spread evenly over shards; the same key always maps to the same
/// shard, in every process, whatever the placement.
pub fn shard_of(key: ParamKey, num_shards: u32) -> ShardId {
    debug_assert!(num_shards > 0, "a job has at least one shard");
    let h = key.row ^ ((key.table.0 as u64) << 48) ^ 0x9E37_79B9_7F4A_7C15;
    // splitmix64 finalizer: cheap, well mixed, deterministic.
    let h = crate::key_hash::mix64(h);
    ShardId((h % num_shards.max(1) as u64) as u32)
}

/// executor → worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutorMap {
    owner: BTreeMap<ExecutorId, WorkerId>,
}

impl ExecutorMap {
    /// Executors `0..num_executors` dealt round-robin over `workers`.
    pub fn round_robin(num_executors: u32, workers: &[WorkerId]) -> Result<Self, CoreError> {
        if workers.is_empty() {
            return Err(CoreError::NoWorkers);
        }
        let owner = (0..num_executors)
            .map(|e| (ExecutorId(e), workers[e as usize % workers.len()]))
            .collect();
        Ok(Self { owner })
    }

    pub fn worker_of(&self, executor: ExecutorId) -> Result<WorkerId, CoreError> {
        self.owner
            .get(&executor)
            .copied()
            .ok_or(CoreError::UnknownExecutor(executor))
    }

    /// Executors hosted by `worker`, in id order.
    pub fn executors_on(&self, worker: WorkerId) -> Vec<ExecutorId> {
        self.owner
            .iter()
            .filter(|(_, w)| **w == worker)
            .map(|(e, _)| *e)
            .collect()
    }

    /// Moves `executor` to `worker`; returns its previous owner.
    pub fn assign(
        &mut self,
        executor: ExecutorId,
        worker: WorkerId,
    ) -> Result<WorkerId, CoreError> {
        match self.owner.get_mut(&executor) {
            Some(w) => Ok(std::mem::replace(w, worker)),
            None => Err(CoreError::UnknownExecutor(executor)),
        }
    }

    /// New hosts for the executors of a lost worker (worker recovery), placed as
    /// [`ShardMap::place_orphans`] places shards: each, in id order, on the worker of `live`
    /// that hosts the fewest executors at that point (ties: the lowest id); no other
    /// executor moves. Does not change the map; `lost` in `live` is ignored.
    pub fn place_orphans(
        &self,
        lost: WorkerId,
        live: &[WorkerId],
    ) -> Result<Vec<(ExecutorId, WorkerId)>, CoreError> {
        place_on_least_loaded(
            self.executors_on(lost),
            live.iter().copied().filter(|w| *w != lost),
            self.owner.values().copied(),
        )
        .ok_or(CoreError::NoWorkers)
    }

    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (ExecutorId, WorkerId)> + '_ {
        self.owner.iter().map(|(e, w)| (*e, *w))
    }
}

/// Places each of `orphans`, in the order given, on the node of `live` that holds the
/// fewest items at that point (counting `owners`, the owner of every item now; ties: the
/// lowest id). `None` when `live` is empty.
fn place_on_least_loaded<I, N: Ord + Copy>(
    orphans: Vec<I>,
    live: impl Iterator<Item = N>,
    owners: impl Iterator<Item = N>,
) -> Option<Vec<(I, N)>> {
    let mut load: BTreeMap<N, usize> = live.map(|n| (n, 0)).collect();
    for owner in owners {
        if let Some(count) = load.get_mut(&owner) {
            *count += 1;
        }
    }
    let mut placed = Vec::with_capacity(orphans.len());
    for item in orphans {
        let (&to, count) = load.iter_mut().min_by_key(|(id, count)| (**count, **id))?;
        *count += 1;
        placed.push((item, to));
    }
    Some(placed)
}

/// shard → server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardMap {
    owner: Vec<ServerId>,
}

impl ShardMap {
    /// Shards `0..num_shards` dealt round-robin over `servers`.
    pub fn round_robin(num_shards: u32, servers: &[ServerId]) -> Result<Self, CoreError> {
        if servers.is_empty() {
            return Err(CoreError::NoServers);
        }
        if num_shards == 0 {
            return Err(CoreError::InvalidArgument(
                "a job needs at least one shard".into(),
            ));
        }
        let owner = (0..num_shards as usize)
            .map(|s| servers[s % servers.len()])
            .collect();
        Ok(Self { owner })
    }

    pub fn num_shards(&self) -> u32 {
        self.owner.len() as u32
    }

    pub fn server_of(&self, shard: ShardId) -> Result<ServerId, CoreError> {
        self.owner
            .get(shard.0 as usize)
            .copied()
            .ok_or(CoreError::UnknownShard(shard))
    }

    /// The server that owns `key`'s shard.
    pub fn server_of_key(&self, key: ParamKey) -> ServerId {
        // shard_of returns a shard < num_shards, and the map has one entry per shard.
        self.owner[shard_of(key, self.num_shards()).0 as usize]
    }

    /// Shards hosted by `server`, in id order.
    pub fn shards_on(&self, server: ServerId) -> Vec<ShardId> {
        self.owner
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == server)
            .map(|(i, _)| ShardId(i as u32))
            .collect()
    }

    /// New owners for the shards of a lost server (SCAR partial recovery): each of `lost`'s
    /// shards, in id order, goes to the server of `live` that holds the fewest shards at
    /// that point (ties: the lowest id), so the survivors' counts end as even as the
    /// orphans allow and no other shard moves. Does not change the map; `lost` in `live` is
    /// ignored.
    pub fn place_orphans(
        &self,
        lost: ServerId,
        live: &[ServerId],
    ) -> Result<Vec<(ShardId, ServerId)>, CoreError> {
        self.place_orphans_pinned(lost, live, &BTreeMap::new())
    }

    /// [`place_orphans`](Self::place_orphans), except that an orphan `pinned` to a server
    /// of `live` (other than `lost`) goes there: a shard whose hand-off from `lost` to that
    /// server was under way when `lost` failed, which may hold its rows already. The other
    /// orphans go to the least loaded survivors, counting the pinned ones where they go.
    /// Pins of shards `lost` does not own, or to servers not in `live`, are ignored.
    pub fn place_orphans_pinned(
        &self,
        lost: ServerId,
        live: &[ServerId],
        pinned: &BTreeMap<ShardId, ServerId>,
    ) -> Result<Vec<(ShardId, ServerId)>, CoreError> {
        let survivors = || live.iter().copied().filter(move |s| *s != lost);
        if survivors().next().is_none() {
            return Err(CoreError::NoServers);
        }
        let pin_of = |shard: &ShardId| {
            pinned
                .get(shard)
                .copied()
                .filter(|to| *to != lost && live.contains(to))
        };
        let (kept, free): (Vec<ShardId>, Vec<ShardId>) = self
            .shards_on(lost)
            .into_iter()
            .partition(|shard| pin_of(shard).is_some());
        let owners = (0..self.owner.len()).map(|s| {
            let shard = ShardId(s as u32);
            pin_of(&shard)
                .filter(|_| kept.contains(&shard))
                .unwrap_or(self.owner[s])
        });
        let mut placed =
            place_on_least_loaded(free, survivors(), owners).ok_or(CoreError::NoServers)?;
        placed.extend(
            kept.iter()
                .filter_map(|shard| pin_of(shard).map(|to| (*shard, to))),
        );
        placed.sort_unstable_by_key(|(shard, _)| *shard);
        Ok(placed)
    }

    /// Moves `shard` to `server`; returns its previous owner.
    pub fn assign(&mut self, shard: ShardId, server: ServerId) -> Result<ServerId, CoreError> {
        match self.owner.get_mut(shard.0 as usize) {
            Some(s) => Ok(std::mem::replace(s, server)),
            None => Err(CoreError::UnknownShard(shard)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;

    #[test]
    fn a_lost_workers_executors_go_to_the_least_loaded_live_workers() {
        let workers = [WorkerId(0), WorkerId(1), WorkerId(2)];
        // 0 hosts executors 0, 3; 1 hosts 1, 4, 7; 2 (lost) hosts 2, 5, 6.
        let mut map = ExecutorMap::round_robin(8, &workers).unwrap();
        map.assign(ExecutorId(6), WorkerId(2)).unwrap();
        let before = map.clone();
        let placed = map
            .place_orphans(WorkerId(2), &[WorkerId(0), WorkerId(1), WorkerId(2)])
            .unwrap();
        assert_eq!(
            placed,
            vec![
                (ExecutorId(2), WorkerId(0)),
                (ExecutorId(5), WorkerId(0)), // 3 and 3: the lower id
                (ExecutorId(6), WorkerId(1)),
            ]
        );
        assert_eq!(map, before, "place_orphans must not change the map");
        assert_eq!(
            map.place_orphans(WorkerId(2), &[WorkerId(2)]),
            Err(CoreError::NoWorkers)
        );
    }

    #[test]
    fn orphans_go_to_the_least_loaded_survivors_and_nothing_else_moves() {
        for servers in 2u32..7 {
            for shards in 1u32..40 {
                let ids: Vec<ServerId> = (0..servers).map(ServerId).collect();
                let mut map = ShardMap::round_robin(shards, &ids).unwrap();
                // Unbalance the survivors a little so ties and loads both matter.
                if shards > 3 && servers > 2 {
                    map.assign(ShardId(0), ServerId(2)).unwrap();
                }
                for lost in 0..servers {
                    let before = map.clone();
                    let orphans = before.shards_on(ServerId(lost));
                    let placed = map.place_orphans(ServerId(lost), &ids).unwrap();
                    assert_eq!(map, before, "place_orphans must not change the map");
                    let moved: Vec<ShardId> = placed.iter().map(|(s, _)| *s).collect();
                    assert_eq!(moved, orphans, "each orphan placed once, in order");
                    let mut after = map.clone();
                    for (shard, to) in &placed {
                        assert_ne!(*to, ServerId(lost));
                        assert!(ids.contains(to));
                        after.assign(*shard, *to).unwrap();
                    }
                    assert!(after.shards_on(ServerId(lost)).is_empty());
                    // Greedy least-loaded: no survivor ends more than one above another
                    // unless it already was before any orphan came.
                    let counts: Vec<usize> = ids
                        .iter()
                        .filter(|s| **s != ServerId(lost))
                        .map(|s| after.shards_on(*s).len())
                        .collect();
                    let before_max = ids
                        .iter()
                        .filter(|s| **s != ServerId(lost))
                        .map(|s| before.shards_on(*s).len())
                        .max()
                        .unwrap();
                    let max = *counts.iter().max().unwrap();
                    let min = *counts.iter().min().unwrap();
                    assert!(max - min <= 1 || max == before_max, "{counts:?}");
                }
            }
        }
    }

    #[test]
    fn pinned_orphans_go_where_they_are_pinned_and_the_others_around_them() {
        for servers in 2u32..6 {
            for shards in 1u32..30 {
                let ids: Vec<ServerId> = (0..servers).map(ServerId).collect();
                let map = ShardMap::round_robin(shards, &ids).unwrap();
                for lost in 0..servers {
                    let lost = ServerId(lost);
                    let orphans = map.shards_on(lost);
                    // Pin every other orphan to the next server; also a pin of a shard the
                    // lost server does not own, one to itself and one to a server not live.
                    let mut pinned = BTreeMap::new();
                    for (i, shard) in orphans.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
                        pinned.insert(*shard, ServerId((lost.0 + 1 + i as u32) % servers));
                    }
                    let foreign = (0..shards)
                        .map(ShardId)
                        .find(|s| map.server_of(*s).ok() != Some(lost));
                    if let Some(foreign) = foreign {
                        pinned.insert(foreign, lost);
                    }
                    if let Some(last) = orphans.last() {
                        pinned.entry(*last).or_insert(ServerId(99));
                    }
                    let placed = map.place_orphans_pinned(lost, &ids, &pinned).unwrap();
                    let moved: Vec<ShardId> = placed.iter().map(|(s, _)| *s).collect();
                    assert_eq!(moved, orphans, "each orphan placed once, in order");
                    for (shard, to) in &placed {
                        assert_ne!(*to, lost);
                        assert!(ids.contains(to));
                        if let Some(pin) = pinned.get(shard).filter(|p| ids.contains(p)) {
                            if *pin != lost {
                                assert_eq!(to, pin, "{shard} was pinned");
                            }
                        }
                    }
                    // No pins: exactly place_orphans.
                    assert_eq!(
                        map.place_orphans_pinned(lost, &ids, &BTreeMap::new()),
                        map.place_orphans(lost, &ids)
                    );
                }
            }
        }
    }

    #[test]
    fn orphans_with_no_survivor_are_refused() {
        let map = ShardMap::round_robin(4, &[ServerId(0)]).unwrap();
        assert_eq!(
            map.place_orphans(ServerId(0), &[ServerId(0)]),
            Err(CoreError::NoServers)
        );
    }

    #[test]
    fn round_robin_gives_every_executor_one_owner() {
        let workers = [WorkerId(0), WorkerId(1), WorkerId(2)];
        let map = ExecutorMap::round_robin(10, &workers).unwrap();
        let total: usize = workers.iter().map(|w| map.executors_on(*w).len()).sum();
        assert_eq!(total, 10);
        assert_eq!(map.executors_on(WorkerId(0)).len(), 4);
        assert!(ExecutorMap::round_robin(3, &[]).is_err());
    }

    #[test]
    fn shard_hash_is_stable_and_spreads() {
        let mut counts = [0usize; 8];
        for row in 0..8000 {
            let s = shard_of(ParamKey::new(TableId(1), row), 8);
            assert_eq!(s, shard_of(ParamKey::new(TableId(1), row), 8));
            counts[s.0 as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven shard spread: {counts:?}");
        }
    }

    #[test]
    fn shard_assign_moves_one_shard() {
        let mut map = ShardMap::round_robin(4, &[ServerId(0), ServerId(1)]).unwrap();
        assert_eq!(map.assign(ShardId(0), ServerId(1)).unwrap(), ServerId(0));
        assert_eq!(map.shards_on(ServerId(1)).len(), 3);
        assert!(map.assign(ShardId(9), ServerId(0)).is_err());
    }
}
