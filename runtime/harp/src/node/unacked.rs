//! Flush parts a node sent and its servers have not acknowledged yet, kept to be sent
//! again to the shards' new owners if the server fails (jobs that outlive a lost server:
//! `ParamStore::awaiting_lost_servers`).
//!
//! A part can be applied and even saved by the server without its acknowledgement ever
//! reaching the node: a server killed between applying a part (and a checkpoint save
//! after it) and sending the answer. Its shards then come back from the checkpoint's
//! image, which holds that part's deltas for every row saved after it was applied, and
//! sending the whole part again would count those twice. The master tells the nodes, with
//! each save in the image, which parts the server had applied before it and at which save
//! epoch (`server/applied_parts.rs`); [`Unacked::saved`] then drops the saved rows from each
//! such part still held here, so what goes again is exactly what the image lacks. A part
//! applied at epoch `a` is in a row saved at epoch `e` exactly when `a < e`.
//!
//! Pure: no IO, no clock.

use harp_core::{ParamKey, RowData, ServerId};
use std::collections::{HashMap, HashSet};

/// The flush parts of one node that wait for an acknowledgement, by part number.
#[derive(Debug, Default)]
pub(crate) struct Unacked {
    parts: HashMap<u64, Held>,
}

/// One part held until it is acknowledged.
#[derive(Debug)]
struct Held {
    server: ServerId,
    updates: Vec<(ParamKey, RowData)>,
    /// The server's save epoch when it applied the part, once known (from a save that
    /// lists it, or an acknowledgement refused after the server was declared dead).
    applied_at: Option<u64>,
}

impl Unacked {
    /// Keeps part `seq`, sent to `server` (applied there at epoch `applied_at`, if known).
    pub(crate) fn keep(
        &mut self,
        seq: u64,
        server: ServerId,
        updates: Vec<(ParamKey, RowData)>,
        applied_at: Option<u64>,
    ) {
        let held = Held {
            server,
            updates,
            applied_at,
        };
        self.parts.insert(seq, held);
    }

    /// Takes part `seq` out (acknowledged, to be sent again, or its flush failed): what is
    /// left of its deltas, and its server.
    pub(crate) fn take(&mut self, seq: u64) -> Option<(ServerId, Vec<(ParamKey, RowData)>)> {
        self.parts
            .remove(&seq)
            .map(|held| (held.server, held.updates))
    }

    /// The keys part `seq` still carries (none if it is not held).
    pub(crate) fn keys(&self, seq: u64) -> impl Iterator<Item = ParamKey> + '_ {
        let updates = self
            .parts
            .get(&seq)
            .map_or(&[][..], |held| &held.updates[..]);
        updates.iter().map(|(key, _)| *key)
    }

    /// `server`'s save at epoch `epoch` of `keys` is in the checkpoint's image, and before
    /// it the server had applied the parts `applied` (`(part number, epoch)`, this node's
    /// only): each of those still held here loses its rows that the save holds.
    pub(crate) fn saved(
        &mut self,
        server: ServerId,
        epoch: u64,
        keys: &[ParamKey],
        applied: impl IntoIterator<Item = (u64, u64)>,
    ) {
        for (seq, at) in applied {
            if let Some(held) = self.parts.get_mut(&seq) {
                if held.server == server {
                    held.applied_at = Some(held.applied_at.map_or(at, |known| known.min(at)));
                }
            }
        }
        let mut saved: Option<HashSet<ParamKey>> = None;
        for held in self.parts.values_mut() {
            let in_save = held.server == server && held.applied_at.is_some_and(|a| a < epoch);
            if in_save && !keys.is_empty() {
                let saved = saved.get_or_insert_with(|| keys.iter().copied().collect());
                held.updates.retain(|(key, _)| !saved.contains(key));
            }
        }
    }

    /// Parts held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_core::TableId;

    fn key(row: u64) -> ParamKey {
        ParamKey::new(TableId(0), row)
    }

    fn part(rows: &[u64]) -> Vec<(ParamKey, RowData)> {
        rows.iter()
            .map(|r| (key(*r), RowData::F32(vec![1.0])))
            .collect()
    }

    fn rows_of(updates: &[(ParamKey, RowData)]) -> Vec<u64> {
        updates.iter().map(|(k, _)| k.row).collect()
    }

    #[test]
    fn a_part_the_server_applied_before_a_save_loses_the_rows_that_save_holds() {
        let s = ServerId(3);
        let mut unacked = Unacked::default();
        unacked.keep(7, s, part(&[1, 2, 3]), None);
        // Save 5 of rows 1 and 9, after part 7 was applied at epoch 4.
        unacked.saved(s, 5, &[key(1), key(9)], [(7, 4)]);
        // A later save (its message without the applied parts) of row 3.
        unacked.saved(s, 6, &[key(3)], []);
        let (server, left) = unacked.take(7).unwrap();
        assert_eq!((server, rows_of(&left)), (s, vec![2]));
        assert_eq!(unacked.len(), 0);
    }

    #[test]
    fn only_saves_after_the_apply_by_the_parts_own_server_take_rows() {
        let (s, other) = (ServerId(3), ServerId(4));
        let mut unacked = Unacked::default();
        unacked.keep(1, s, part(&[1, 2]), None);
        unacked.keep(2, s, part(&[1, 2]), None);
        unacked.keep(3, other, part(&[1, 2]), None);
        // Part 1 applied at epoch 5: a save at epoch 5 was before it.
        unacked.saved(s, 5, &[key(1)], [(1, 5)]);
        // Another server's save that lists part 3 (forwarded there, say): not its server.
        unacked.saved(other, 9, &[key(2)], [(1, 2)]);
        // A save of `s` that lists no part: part 2's apply epoch is unknown, so it keeps
        // row 2; part 1 (applied at 5) loses it, and keeps row 1 (saved at 5, before it).
        unacked.saved(s, 6, &[key(2)], []);
        assert_eq!(rows_of(&unacked.take(1).unwrap().1), vec![1]);
        assert_eq!(rows_of(&unacked.take(2).unwrap().1), vec![1, 2]);
        assert_eq!(rows_of(&unacked.take(3).unwrap().1), vec![1, 2]);
    }

    #[test]
    fn an_apply_epoch_learned_from_a_refused_acknowledgement_counts_as_well() {
        let s = ServerId(0);
        let mut unacked = Unacked::default();
        unacked.keep(4, s, part(&[1, 2]), Some(2));
        unacked.saved(s, 3, &[key(2)], []);
        assert_eq!(rows_of(&unacked.take(4).unwrap().1), vec![1]);
        assert!(unacked.take(4).is_none());
    }
}
