//! The flush parts a server applied straight from their node, and which of their keys, so
//! that a shard handed off carries the parts its rows hold and the new owner does not apply
//! one of them again when its node sends it a second time.
//!
//! A node sends a named part to server S, S applies it, and its answer never reaches the
//! node (the packets were lost, S was killed before they left). Meanwhile S handed one of
//! the part's shards, X, to server T: X's rows at T hold the part. Once S is declared dead
//! the node sends the part again, split by the shards' current owners, and X's keys go to
//! T. So S remembers, per named part it applied itself, the keys ([`DirectParts::applied`]:
//! a copy of the keys, no hashing, as the apply path is hot), and a hand-off of X takes the
//! keys of X out ([`DirectParts::take_shard`]) and sends them with the rows as T's record of
//! applied parts ([`forwarded_parts`](super::forwarded_parts), which a part sent again
//! consults, and which moves on with the shard).
//!
//! A shard re-created here from the running checkpoint's image loses what was applied to
//! its old rows, so the keys of that shard are dropped ([`DirectParts::take_shard`], its
//! result discarded). A part sent again *to S itself* is not checked here: a node sends a
//! part again only after its server was declared dead.
//!
//! **Bounded.** Every named part carries its node's `held_from` (the oldest part number it
//! still holds); records below it go ([`DirectParts::release`]). At most
//! [`DIRECT_PART_KEYS_KEPT`] keys are kept; beyond that the parts applied longest ago are
//! forgotten (the newest always stays), and counted ([`part_records`](super::part_records)).
//!
//! Pure: no IO, no clock.

use super::applied_parts::PartId;
use super::forwarded_parts::MovedPartKeys;
use super::part_records::{Bound, PartRecords};
use harp_core::{ParamKey, ShardId};

/// How many keys of directly applied parts a server keeps at most (16 bytes each).
pub(crate) const DIRECT_PART_KEYS_KEPT: usize = 1 << 20;

/// Per named part applied here straight from its node, the keys applied.
#[derive(Debug)]
pub(crate) struct DirectParts {
    records: PartRecords<Vec<ParamKey>>,
}

impl Default for DirectParts {
    fn default() -> Self {
        Self {
            records: PartRecords::new(Bound {
                parts: usize::MAX,
                keys: DIRECT_PART_KEYS_KEPT,
            }),
        }
    }
}

impl DirectParts {
    /// This server applied `keys` of part `part` (none: nothing to remember). A part that
    /// comes again (pieces of it sent again that meet here) adds its keys.
    pub(crate) fn applied(&mut self, part: PartId, keys: Vec<ParamKey>) {
        self.records.add(part, keys);
    }

    /// Node `node` holds no part numbered below `held_from` any more: their records go.
    pub(crate) fn release(&mut self, node: u32, held_from: u64) {
        self.records.release(node, held_from);
    }

    /// Takes out the keys of `shard` (of `num_shards`), which moves away with them (or,
    /// restored from the image, loses what they were applied to).
    pub(crate) fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> MovedPartKeys {
        self.records.take_shard(shard, num_shards)
    }

    /// Parts forgotten early so far (see [`DIRECT_PART_KEYS_KEPT`]).
    pub(crate) fn forgotten(&self) -> u64 {
        self.records.forgotten()
    }

    /// Parts remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::rows::key;
    use harp_core::shard_of;

    fn id(node: u32, seq: u64) -> PartId {
        PartId { node, seq }
    }

    fn keys(rows: &[u64]) -> Vec<ParamKey> {
        rows.iter().map(|r| key(*r)).collect()
    }

    /// Rows `0..32` split by their shard (of 4): those of `key(0)`'s shard, the others.
    fn split_by_shard() -> (ShardId, Vec<u64>, Vec<u64>) {
        let shard = shard_of(key(0), 4);
        let (of_shard, others) = (0..32).partition(|r| shard_of(key(*r), 4) == shard);
        (shard, of_shard, others)
    }

    #[test]
    fn a_handed_off_shard_takes_the_keys_of_it_each_part_applied() {
        let (shard, of_shard, others) = split_by_shard();
        assert!(!others.is_empty());
        let mut parts = DirectParts::default();
        parts.applied(id(1, 4), keys(&of_shard));
        parts.applied(id(2, 9), keys(&others));
        let moved = parts.take_shard(shard, 4);
        assert_eq!(moved, vec![(id(1, 4), keys(&of_shard))]);
        // Part 1/4 had only keys of the shard: nothing of it is left here.
        assert_eq!(parts.len(), 1);
        assert!(parts.take_shard(shard, 4).is_empty(), "taken once");
    }

    #[test]
    fn pieces_of_one_part_add_up_and_a_part_with_no_key_is_not_remembered() {
        let (shard, of_shard, _) = split_by_shard();
        let mut parts = DirectParts::default();
        parts.applied(id(1, 4), Vec::new());
        assert_eq!(parts.len(), 0);
        parts.applied(id(1, 4), keys(&of_shard[..1]));
        parts.applied(id(1, 4), keys(&of_shard[1..]));
        assert_eq!(
            parts.take_shard(shard, 4),
            vec![(id(1, 4), keys(&of_shard))]
        );
    }

    #[test]
    fn a_node_holding_no_older_part_releases_only_its_own_older_records() {
        let (shard, of_shard, _) = split_by_shard();
        let mut parts = DirectParts::default();
        for part in [id(1, 3), id(1, 5), id(2, 1)] {
            parts.applied(part, keys(&of_shard));
        }
        parts.release(1, 5);
        let left: Vec<PartId> = (parts.take_shard(shard, 4).into_iter())
            .map(|(id, _)| id)
            .collect();
        assert_eq!(left, vec![id(1, 5), id(2, 1)]);
    }

    #[test]
    fn past_the_bound_the_parts_applied_longest_ago_are_forgotten_and_counted() {
        let mut parts = DirectParts::default();
        let half = DIRECT_PART_KEYS_KEPT / 2;
        let many = |from: u64| (from..from + half as u64).map(key).collect::<Vec<_>>();
        // Node 2's part first, then two of node 1 (lower ids, applied later).
        parts.applied(id(2, 0), many(0));
        parts.applied(id(1, 0), many(1 << 40));
        assert_eq!(parts.forgotten(), 0);
        parts.applied(id(1, 1), vec![key(7)]);
        assert_eq!(parts.forgotten(), 1, "node 2's part, the oldest");
        assert_eq!(parts.len(), 2);
        // A single part over the bound is still kept: it is the newest.
        parts.applied(
            id(3, 0),
            many(1 << 41)
                .into_iter()
                .chain(many(1 << 42))
                .chain([key(9)])
                .collect(),
        );
        assert_eq!(parts.len(), 1);
        assert_eq!(parts.forgotten(), 3);
    }
}
