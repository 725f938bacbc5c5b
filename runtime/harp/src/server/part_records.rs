//! Per named flush part, the keys of it a server applied: the record under both
//! [`ForwardedParts`](super::forwarded_parts) and [`DirectParts`](super::direct_parts).
//!
//! A record is released once its node holds no older part ([`PartRecords::release`], from
//! the `held_from` every named part carries), split by shard when a shard moves
//! ([`PartRecords::take_shard`]) and joined by what a moved shard brings
//! ([`PartRecords::insert`]). It is bounded in parts and in keys ([`Bound`]); past either,
//! the parts recorded longest ago are forgotten first, whichever node sent them (a part
//! recorded long ago is the likeliest to be acknowledged already), the newest always stays,
//! and each forgotten part is counted.
//!
//! The keys of one part are kept in any [`PartKeys`]: a set where a part sent again is
//! checked against them, a plain list where they are only carried along.
//!
//! Pure: no IO, no clock.

use super::applied_parts::PartId;
use super::forwarded_parts::MovedPartKeys;
use harp_core::{shard_of, ParamKey, ShardId};
use std::collections::{BTreeMap, HashSet};

/// The keys of one part a server applied.
pub(crate) trait PartKeys: Default + Extend<ParamKey> {
    fn count(&self) -> usize;
    /// Takes out the keys of `shard` (of `num_shards`).
    fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> Vec<ParamKey>;
}

/// Keys carried along only: no hashing on the apply path.
impl PartKeys for Vec<ParamKey> {
    fn count(&self) -> usize {
        self.len()
    }

    fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> Vec<ParamKey> {
        let mut of_shard = Vec::new();
        self.retain(|key| {
            let stays = shard_of(*key, num_shards) != shard;
            if !stays {
                of_shard.push(*key);
            }
            stays
        });
        of_shard
    }
}

/// Keys a part sent again is checked against.
impl PartKeys for HashSet<ParamKey> {
    fn count(&self) -> usize {
        self.len()
    }

    fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> Vec<ParamKey> {
        let of_shard: Vec<ParamKey> = (self.iter())
            .filter(|key| shard_of(**key, num_shards) == shard)
            .copied()
            .collect();
        for key in &of_shard {
            self.remove(key);
        }
        of_shard
    }
}

/// How much a [`PartRecords`] keeps at most.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub parts: usize,
    pub keys: usize,
}

#[derive(Debug)]
struct Aged<K> {
    /// When the part was first recorded here (its place in [`PartRecords::order`]).
    order: u64,
    keys: K,
}

/// Per named part, the keys of it applied here; bounded, oldest forgotten first.
#[derive(Debug)]
pub(crate) struct PartRecords<K> {
    bound: Bound,
    parts: BTreeMap<PartId, Aged<K>>,
    /// The parts in the order they were first recorded, for forgetting the oldest.
    order: BTreeMap<u64, PartId>,
    next_order: u64,
    keys_kept: usize,
    /// Parts forgotten early because the record was past its bound.
    forgotten: u64,
}

impl<K: PartKeys> PartRecords<K> {
    pub(crate) fn new(bound: Bound) -> Self {
        Self {
            bound,
            parts: BTreeMap::new(),
            order: BTreeMap::new(),
            next_order: 0,
            keys_kept: 0,
            forgotten: 0,
        }
    }

    /// Keys of `part` applied here (none: nothing to remember). A part recorded already
    /// (pieces of it that meet here) gains the keys and keeps its age.
    pub(crate) fn add(&mut self, part: PartId, keys: impl IntoIterator<Item = ParamKey>) {
        let mut keys = keys.into_iter().peekable();
        if keys.peek().is_none() {
            return;
        }
        let order = &mut self.order;
        let next_order = &mut self.next_order;
        let aged = self.parts.entry(part).or_insert_with(|| {
            let order_here = *next_order;
            *next_order += 1;
            order.insert(order_here, part);
            Aged {
                order: order_here,
                keys: K::default(),
            }
        });
        let before = aged.keys.count();
        aged.keys.extend(keys);
        self.keys_kept += aged.keys.count() - before;
        self.bound();
    }

    /// The keys of `part` recorded here.
    pub(crate) fn get(&self, part: PartId) -> Option<&K> {
        self.parts.get(&part).map(|aged| &aged.keys)
    }

    /// Node `node` holds no part numbered below `held_from` any more: their records go.
    pub(crate) fn release(&mut self, node: u32, held_from: u64) {
        let below = PartId { node, seq: 0 }..PartId {
            node,
            seq: held_from,
        };
        // The common case: nothing of this node below `held_from` (one range probe).
        while let Some((&id, _)) = self.parts.range(below.clone()).next() {
            self.remove(id);
        }
    }

    /// Takes out the keys of `shard` (of `num_shards`), which move away with its rows (or,
    /// the shard restored from the image, lose what they were applied to).
    pub(crate) fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> MovedPartKeys {
        let mut moved = Vec::new();
        let mut emptied = Vec::new();
        for (id, aged) in &mut self.parts {
            let of_shard = aged.keys.take_shard(shard, num_shards);
            self.keys_kept -= of_shard.len();
            if !of_shard.is_empty() {
                moved.push((*id, of_shard));
            }
            if aged.keys.count() == 0 {
                emptied.push(*id);
            }
        }
        for id in emptied {
            self.remove(id);
        }
        moved
    }

    /// A moved shard's record arrived with its rows.
    pub(crate) fn insert(&mut self, moved: MovedPartKeys) {
        for (part, keys) in moved {
            self.add(part, keys);
        }
    }

    /// Parts forgotten early so far.
    pub(crate) fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Parts remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    fn remove(&mut self, id: PartId) {
        if let Some(aged) = self.parts.remove(&id) {
            self.order.remove(&aged.order);
            self.keys_kept -= aged.keys.count();
        }
    }

    fn bound(&mut self) {
        let past = |records: &Self| {
            records.parts.len() > records.bound.parts || records.keys_kept > records.bound.keys
        };
        while past(self) && self.parts.len() > 1 {
            let Some((_, oldest)) = self.order.pop_first() else {
                return;
            };
            if let Some(aged) = self.parts.remove(&oldest) {
                self.keys_kept -= aged.keys.count();
                self.forgotten += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::rows::key;

    fn id(node: u32, seq: u64) -> PartId {
        PartId { node, seq }
    }

    fn small(parts: usize, keys: usize) -> PartRecords<Vec<ParamKey>> {
        PartRecords::new(Bound { parts, keys })
    }

    #[test]
    fn past_the_part_bound_the_oldest_goes_whatever_its_node() {
        let mut records = small(2, usize::MAX);
        records.add(id(9, 0), [key(1)]);
        records.add(id(1, 5), [key(2)]);
        records.add(id(1, 6), [key(3)]);
        assert_eq!(records.forgotten(), 1);
        assert!(records.get(id(9, 0)).is_none(), "node 9's part, the oldest");
        assert!(records.get(id(1, 5)).is_some() && records.get(id(1, 6)).is_some());
    }

    #[test]
    fn a_part_that_gains_keys_keeps_its_age() {
        let mut records = small(2, usize::MAX);
        records.add(id(1, 0), [key(1)]);
        records.add(id(2, 0), [key(2)]);
        records.add(id(1, 0), [key(3)]);
        records.add(id(3, 0), [key(4)]);
        assert!(
            records.get(id(1, 0)).is_none(),
            "first recorded, first forgotten"
        );
        assert_eq!(records.get(id(2, 0)), Some(&vec![key(2)]));
    }

    #[test]
    fn the_key_bound_counts_keys_taken_away_and_released() {
        let mut records = small(usize::MAX, 4);
        records.add(id(1, 0), [key(1), key(2)]);
        records.add(id(1, 1), [key(3), key(4)]);
        // Released and taken keys no longer count against the bound.
        records.release(1, 1);
        let shard = shard_of(key(3), 1);
        assert_eq!(
            records.take_shard(shard, 1),
            vec![(id(1, 1), vec![key(3), key(4)])]
        );
        assert_eq!(records.len(), 0);
        records.add(id(2, 0), [key(5), key(6), key(7), key(8)]);
        assert_eq!(records.forgotten(), 0);
        records.add(id(2, 1), [key(9)]);
        assert_eq!(records.forgotten(), 1);
        // One part over the bound alone is kept: it is the newest.
        records.add(id(2, 2), (10..20).map(key));
        assert_eq!((records.len(), records.forgotten()), (1, 2));
    }

    #[test]
    fn a_set_counts_a_key_added_twice_once() {
        let mut records: PartRecords<HashSet<ParamKey>> =
            PartRecords::new(Bound { parts: 8, keys: 2 });
        records.add(id(1, 0), [key(1), key(2)]);
        records.add(id(1, 0), [key(1), key(2)]);
        assert_eq!(records.forgotten(), 0);
        assert_eq!(records.get(id(1, 0)).map(HashSet::len), Some(2));
    }
}
