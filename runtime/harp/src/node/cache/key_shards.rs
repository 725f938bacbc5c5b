//! A map keyed by [`ParamKey`] split into shards behind locks of their own, for callers that
//! touch many keys at once: they lock each shard once per batch of keys instead of once per
//! key (a task of a one-weight-per-row MLR job reads thousands of rows, and per-key locking
//! made two threads reading the same rows fight over the lock words).

use harp_core::{BuildKeyHasher, KeyMap, ParamKey};
use std::hash::BuildHasher;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Shards of the node cache's map (a power of two).
const SHARDS: usize = 16;

/// The map: a key lives in the shard its hash's bits 50..57 pick (the hash spreads them:
/// `harp_core::key_hash`'s tests), and in that shard's `KeyMap` under the same hash.
pub(crate) struct KeyShards<V> {
    shards: Box<[RwLock<KeyMap<V>>]>,
}

impl<V> Default for KeyShards<V> {
    fn default() -> Self {
        KeyShards {
            shards: (0..SHARDS)
                .map(|_| RwLock::new(KeyMap::default()))
                .collect(),
        }
    }
}

impl<V> KeyShards<V> {
    /// The shard of `key`: the hash's bits 50..57 shifted down to `log2(SHARDS)` bits, so
    /// always below `SHARDS` (the index of `group`'s buckets and of `shards`).
    fn shard_of(&self, key: &ParamKey) -> usize {
        let hash = BuildKeyHasher::default().hash_one(key);
        ((hash << 7) >> (64 - SHARDS.trailing_zeros())) as usize
    }

    /// The positions of `keys` grouped by shard: `(shard, positions)` for every shard that
    /// holds one of them, positions ascending within a shard.
    pub(crate) fn group<'k>(
        &self,
        keys: impl ExactSizeIterator<Item = &'k ParamKey>,
    ) -> Vec<(usize, Vec<usize>)> {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); SHARDS];
        for (i, key) in keys.enumerate() {
            groups[self.shard_of(key)].push(i);
        }
        groups
            .into_iter()
            .enumerate()
            .filter(|(_, positions)| !positions.is_empty())
            .collect()
    }

    /// Shard `shard` for reading; a lock poisoned by a panic elsewhere still gives its map
    /// (every write leaves it consistent).
    pub(crate) fn read(&self, shard: usize) -> RwLockReadGuard<'_, KeyMap<V>> {
        self.shards[shard]
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Shard `shard` for writing.
    pub(crate) fn write(&self, shard: usize) -> RwLockWriteGuard<'_, KeyMap<V>> {
        self.shards[shard]
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many values satisfy `counted`.
    pub(crate) fn count(&self, counted: impl Fn(&V) -> bool) -> usize {
        (0..SHARDS)
            .map(|s| self.read(s).values().filter(|v| counted(v)).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_core::TableId;

    #[test]
    fn groups_hold_every_position_once_each_in_its_keys_shard() {
        let map: KeyShards<u32> = KeyShards::default();
        let keys: Vec<ParamKey> = (0..1000).map(|r| ParamKey::new(TableId(1), r)).collect();
        let groups = map.group(keys.iter());
        let mut seen = vec![0u32; keys.len()];
        for (shard, positions) in &groups {
            assert!(positions.windows(2).all(|w| w[0] < w[1]));
            for &i in positions {
                seen[i] += 1;
                assert_eq!(map.shard_of(&keys[i]), *shard);
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(groups.len(), SHARDS, "1,000 dense keys leave a shard empty");
        for (_, positions) in &groups {
            assert!(
                positions.len() > 1000 / SHARDS / 2,
                "a shard gets too few keys"
            );
        }
    }

    #[test]
    fn a_value_written_in_its_shard_is_read_there_and_counted() {
        let map: KeyShards<u32> = KeyShards::default();
        let keys: Vec<ParamKey> = (0..50).map(|r| ParamKey::new(TableId(2), r)).collect();
        for (shard, positions) in map.group(keys.iter()) {
            let mut w = map.write(shard);
            for i in positions {
                w.insert(keys[i], i as u32);
            }
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(map.read(map.shard_of(key)).get(key), Some(&(i as u32)));
        }
        assert_eq!(map.count(|v| v % 2 == 0), 25);
    }
}
