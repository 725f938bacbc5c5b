//! The flush parts a server got forwarded by a shard's old owner, and which of their keys
//! it applied, so that a part its node sends again is not applied twice.
//!
//! A node sends a part to the server its routing names; if that server gave the shard away
//! meanwhile, it forwards the shard's keys to the new owner (`server/mod.rs`), which applies
//! them and answers through it. If the old owner dies before relaying that answer, the node
//! sends the part again once the dead server's shards are re-created elsewhere
//! (`node/mod.rs`, under the part's own id), and the moved shard's keys now route to the
//! server that applied them already. So a server remembers, for every part it got
//! forwarded, the keys it applied ([`ForwardedParts::applied`]), and applies a named part
//! only for the keys it has no record of ([`ForwardedParts::skip_applied`]).
//!
//! The record moves with a shard's rows ([`ForwardedParts::take_shard`]), so a shard moved
//! on before the node sends the part again still knows. A shard re-created from the running
//! checkpoint's image starts without one: the nodes drop from their parts what a save in
//! the image holds (`node/unacked.rs`).
//!
//! **Bounded.** Every named part carries the oldest part number its node still holds
//! unacknowledged ([`PartTag::held_from`]); the node never sends a part below it again, so
//! its record is forgotten ([`ForwardedParts::release`]). Only forwarded parts are recorded
//! (those of a move's few milliseconds), at most [`FORWARDED_PARTS_KEPT`] of them and
//! [`FORWARDED_PART_KEYS_KEPT`] keys; beyond that the parts recorded longest ago are
//! forgotten, whichever their node, and counted ([`part_records`](super::part_records)).
//!
//! A part the old owner applied itself, straight from its node, joins the record at the
//! hand-off: the old owner kept its keys ([`direct_parts`](super::direct_parts)) and sends
//! those of the shard with its rows ([`ForwardedParts::insert`]), so that part sent again
//! (its answer never left before the old owner died) is not applied twice either.
//!
//! Pure: no IO, no clock.

use super::applied_parts::PartId;
use super::part_records::{Bound, PartRecords};
use harp_core::{ParamKey, RowData, ShardId};
use std::collections::HashSet;

/// How many forwarded parts a server remembers at most (see the module doc).
pub(crate) const FORWARDED_PARTS_KEPT: usize = 4_096;

/// How many keys of forwarded parts a server remembers at most, all parts together (a
/// hashed key takes about 32 bytes).
pub(crate) const FORWARDED_PART_KEYS_KEPT: usize = 1 << 20;

/// A named flush part's id, with what its node and its way here say of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartTag {
    pub id: PartId,
    /// The oldest part number its node still held unacknowledged when it sent this one (at
    /// most `id.seq`).
    pub held_from: u64,
    /// Sent on by a shard's old owner, not by the node itself.
    pub forwarded: bool,
}

impl PartTag {
    /// The same part, as a server forwards it to a shard's new owner.
    pub(crate) fn forwarded(self) -> Self {
        PartTag {
            forwarded: true,
            ..self
        }
    }
}

/// The keys of a part a moved shard's old owner applied, on their way with its rows.
pub(crate) type MovedPartKeys = Vec<(PartId, Vec<ParamKey>)>;

/// Per forwarded part still held by its node, the keys of it this server applied.
#[derive(Debug)]
pub(crate) struct ForwardedParts {
    records: PartRecords<HashSet<ParamKey>>,
}

impl Default for ForwardedParts {
    fn default() -> Self {
        Self {
            records: PartRecords::new(Bound {
                parts: FORWARDED_PARTS_KEPT,
                keys: FORWARDED_PART_KEYS_KEPT,
            }),
        }
    }
}

impl ForwardedParts {
    /// Node `node` holds no part numbered below `held_from` any more: their records go.
    pub(crate) fn release(&mut self, node: u32, held_from: u64) {
        self.records.release(node, held_from);
    }

    /// Removes from `updates` (of part `part`) the keys this server applied already; how
    /// many it removed.
    pub(crate) fn skip_applied(
        &self,
        part: PartId,
        updates: &mut Vec<(ParamKey, RowData)>,
    ) -> usize {
        let Some(applied) = self.records.get(part) else {
            return 0;
        };
        let before = updates.len();
        updates.retain(|(key, _)| !applied.contains(key));
        before - updates.len()
    }

    /// This server applied `keys` of forwarded part `part` (none: nothing to remember).
    pub(crate) fn applied(&mut self, part: PartId, keys: impl IntoIterator<Item = ParamKey>) {
        self.records.add(part, keys);
    }

    /// Parts remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Takes out the keys of `shard` (of `num_shards`), which moves away with them.
    pub(crate) fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> MovedPartKeys {
        self.records.take_shard(shard, num_shards)
    }

    /// A moved shard's record arrived with its rows.
    pub(crate) fn insert(&mut self, moved: MovedPartKeys) {
        self.records.insert(moved);
    }

    /// Parts forgotten early so far (see [`FORWARDED_PARTS_KEPT`]).
    pub(crate) fn dropped(&self) -> u64 {
        self.records.forgotten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::rows::{key, part, rows_of};
    use harp_core::shard_of;

    fn id(node: u32, seq: u64) -> PartId {
        PartId { node, seq }
    }

    #[test]
    fn a_part_sent_again_keeps_only_the_keys_not_applied_here() {
        let mut record = ForwardedParts::default();
        record.applied(id(1, 7), [key(1), key(2)]);
        let mut again = part(&[1, 2, 3]);
        assert_eq!(record.skip_applied(id(1, 7), &mut again), 2);
        assert_eq!(rows_of(&again), vec![3]);
        // Another part of the same node, or the same number of another node: untouched.
        for other in [id(1, 8), id(2, 7)] {
            let mut updates = part(&[1, 2]);
            assert_eq!(record.skip_applied(other, &mut updates), 0);
            assert_eq!(rows_of(&updates), vec![1, 2]);
        }
    }

    #[test]
    fn a_node_holding_no_older_part_releases_only_its_own_older_records() {
        let mut record = ForwardedParts::default();
        record.applied(id(1, 3), [key(1)]);
        record.applied(id(1, 5), [key(1)]);
        record.applied(id(2, 1), [key(1)]);
        record.release(1, 5);
        let skipped = |part| record.skip_applied(part, &mut self::part(&[1]));
        assert_eq!(skipped(id(1, 3)), 0);
        assert_eq!(skipped(id(1, 5)), 1);
        assert_eq!(skipped(id(2, 1)), 1);
    }

    #[test]
    fn a_shards_record_moves_with_it_and_is_known_at_the_new_owner() {
        let num_shards = 4;
        let rows: Vec<u64> = (0..32).collect();
        let shard = shard_of(key(0), num_shards);
        let (of_shard, others): (Vec<u64>, Vec<u64>) = rows
            .iter()
            .partition(|r| shard_of(key(**r), num_shards) == shard);
        assert!(!others.is_empty());
        let mut old = ForwardedParts::default();
        old.applied(id(1, 9), rows.iter().map(|r| key(*r)));
        let moved = old.take_shard(shard, num_shards);
        let mut new = ForwardedParts::default();
        new.insert(moved);
        let mut at_new = part(&rows);
        assert_eq!(new.skip_applied(id(1, 9), &mut at_new), of_shard.len());
        assert_eq!(rows_of(&at_new), others);
        let mut at_old = part(&rows);
        assert_eq!(old.skip_applied(id(1, 9), &mut at_old), others.len());
        assert_eq!(rows_of(&at_old), of_shard);
    }

    #[test]
    fn a_part_none_of_whose_keys_were_applied_here_is_not_remembered() {
        let mut record = ForwardedParts::default();
        record.applied(id(1, 2), []);
        assert_eq!(record.len(), 0);
    }

    #[test]
    fn past_the_bound_the_parts_recorded_longest_ago_are_dropped_and_counted() {
        let mut record = ForwardedParts::default();
        // Node 2's parts first, then node 1's (lower ids, recorded later).
        let extra = 3;
        record.applied(id(2, 0), [key(0)]);
        for seq in 0..(FORWARDED_PARTS_KEPT + extra - 1) as u64 {
            record.applied(id(1, seq), [key(seq)]);
        }
        assert_eq!(record.dropped(), extra as u64);
        let skipped = |part, row| record.skip_applied(part, &mut self::part(&[row]));
        assert_eq!(
            skipped(id(2, 0), 0),
            0,
            "node 2's part, the oldest, is forgotten"
        );
        assert_eq!(skipped(id(1, 1), 1), 0);
        assert_eq!(skipped(id(1, 2), 2), 1, "the oldest kept");
        let newest = (FORWARDED_PARTS_KEPT + extra - 2) as u64;
        assert_eq!(skipped(id(1, newest), newest), 1);
    }

    #[test]
    fn past_the_key_bound_the_oldest_parts_are_dropped_too() {
        let mut record = ForwardedParts::default();
        let half = FORWARDED_PART_KEYS_KEPT as u64 / 2;
        record.applied(id(1, 0), (0..half).map(key));
        record.applied(id(1, 1), (half..2 * half).map(key));
        assert_eq!(record.dropped(), 0);
        record.applied(id(1, 2), [key(2 * half)]);
        assert_eq!((record.dropped(), record.len()), (1, 2));
    }
}
