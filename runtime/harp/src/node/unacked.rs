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
//! A part goes again under its own number ([`Unacked::reroute`]: split by the shards' new
//! owners, each piece held as `(number, server)`), so a server that got its keys forwarded
//! by the dead one and applied them knows them (`server/forwarded_parts.rs`). Every part
//! sent says the oldest number held here ([`Unacked::held_from`]), below which no part goes
//! again; a number is given and its part kept in one step, and a part sent again stays held
//! while it is rerouted, so that bound never passes a part that may still go.
//!
//! Pure: no IO, no clock.

use harp_core::{ParamKey, RowData, ServerId};
use std::collections::{BTreeMap, HashSet};

/// A held part: its number and the server it went to (a part sent again may go to several).
pub(crate) type HeldPart = (u64, ServerId);

/// The flush parts of one node that wait for an acknowledgement.
#[derive(Debug, Default)]
pub(crate) struct Unacked {
    parts: BTreeMap<HeldPart, Held>,
    next: u64,
}

/// One part held until it is acknowledged.
#[derive(Debug)]
struct Held {
    updates: Vec<(ParamKey, RowData)>,
    /// The server's save epoch when it applied the part, once known (from a save that
    /// lists it, or an acknowledgement refused after the server was declared dead).
    applied_at: Option<u64>,
}

impl Unacked {
    /// Keeps a new part sent to `server`: its number.
    pub(crate) fn keep_new(&mut self, server: ServerId, updates: Vec<(ParamKey, RowData)>) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.keep((seq, server), updates, None);
        seq
    }

    /// Keeps part `part` (applied at epoch `applied_at` by its server, if known).
    pub(crate) fn keep(
        &mut self,
        part: HeldPart,
        updates: Vec<(ParamKey, RowData)>,
        applied_at: Option<u64>,
    ) {
        let held = Held {
            updates,
            applied_at,
        };
        self.parts.insert(part, held);
    }

    /// The oldest number of a part held (the next new one's if none is): no part below it
    /// is sent again.
    pub(crate) fn held_from(&self) -> u64 {
        self.parts.keys().next().map_or(self.next, |(seq, _)| *seq)
    }

    /// Takes part `part` out (acknowledged, or its flush failed): what is left of its
    /// deltas.
    pub(crate) fn take(&mut self, part: HeldPart) -> Option<Vec<(ParamKey, RowData)>> {
        self.parts.remove(&part).map(|held| held.updates)
    }

    /// The keys part `part` still carries (none if it is not held).
    pub(crate) fn keys(&self, part: HeldPart) -> impl Iterator<Item = ParamKey> + '_ {
        let updates = self
            .parts
            .get(&part)
            .map_or(&[][..], |held| &held.updates[..]);
        updates.iter().map(|(key, _)| *key)
    }

    /// The parts `parts` go again: each is split by the server `route` names for each key
    /// and held under its own number with its new server (pieces of one number that meet
    /// at one server are merged); the parts to send, with what is left of their deltas.
    pub(crate) fn reroute(
        &mut self,
        parts: &[HeldPart],
        route: impl Fn(ParamKey) -> ServerId,
    ) -> Vec<(HeldPart, Vec<(ParamKey, RowData)>)> {
        let mut pieces: BTreeMap<HeldPart, Vec<(ParamKey, RowData)>> = BTreeMap::new();
        for part in parts {
            let Some(held) = self.parts.remove(part) else {
                continue;
            };
            for (key, delta) in held.updates {
                pieces
                    .entry((part.0, route(key)))
                    .or_default()
                    .push((key, delta));
            }
        }
        pieces
            .into_iter()
            .map(|(part, updates)| {
                self.keep(part, updates.clone(), None);
                (part, updates)
            })
            .collect()
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
            if let Some(held) = self.parts.get_mut(&(seq, server)) {
                held.applied_at = Some(held.applied_at.map_or(at, |known| known.min(at)));
            }
        }
        let mut saved: Option<HashSet<ParamKey>> = None;
        for ((_, to), held) in self.parts.iter_mut() {
            let in_save = *to == server && held.applied_at.is_some_and(|a| a < epoch);
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
    use crate::test_support::rows::{key, part, rows_of};

    #[test]
    fn a_part_the_server_applied_before_a_save_loses_the_rows_that_save_holds() {
        let s = ServerId(3);
        let mut unacked = Unacked::default();
        unacked.keep((7, s), part(&[1, 2, 3]), None);
        // Save 5 of rows 1 and 9, after part 7 was applied at epoch 4.
        unacked.saved(s, 5, &[key(1), key(9)], [(7, 4)]);
        // A later save (its message without the applied parts) of row 3.
        unacked.saved(s, 6, &[key(3)], []);
        assert_eq!(rows_of(&unacked.take((7, s)).unwrap()), vec![2]);
        assert_eq!(unacked.len(), 0);
    }

    #[test]
    fn only_saves_after_the_apply_by_the_parts_own_server_take_rows() {
        let (s, other) = (ServerId(3), ServerId(4));
        let mut unacked = Unacked::default();
        unacked.keep((1, s), part(&[1, 2]), None);
        unacked.keep((2, s), part(&[1, 2]), None);
        unacked.keep((3, other), part(&[1, 2]), None);
        // Part 1 applied at epoch 5: a save at epoch 5 was before it.
        unacked.saved(s, 5, &[key(1)], [(1, 5)]);
        // Another server's save that lists part 3 (forwarded there, say): not its server.
        unacked.saved(other, 9, &[key(2)], [(1, 2)]);
        // A save of `s` that lists no part: part 2's apply epoch is unknown, so it keeps
        // row 2; part 1 (applied at 5) loses it, and keeps row 1 (saved at 5, before it).
        unacked.saved(s, 6, &[key(2)], []);
        assert_eq!(rows_of(&unacked.take((1, s)).unwrap()), vec![1]);
        assert_eq!(rows_of(&unacked.take((2, s)).unwrap()), vec![1, 2]);
        assert_eq!(rows_of(&unacked.take((3, other)).unwrap()), vec![1, 2]);
    }

    #[test]
    fn an_apply_epoch_learned_from_a_refused_acknowledgement_counts_as_well() {
        let s = ServerId(0);
        let mut unacked = Unacked::default();
        unacked.keep((4, s), part(&[1, 2]), Some(2));
        unacked.saved(s, 3, &[key(2)], []);
        assert_eq!(rows_of(&unacked.take((4, s)).unwrap()), vec![1]);
        assert!(unacked.take((4, s)).is_none());
    }

    #[test]
    fn a_part_sent_again_keeps_its_number_and_is_held_by_its_new_servers() {
        let (dead, a, b) = (ServerId(0), ServerId(1), ServerId(2));
        let mut unacked = Unacked::default();
        let first = unacked.keep_new(dead, part(&[1, 2, 3]));
        let second = unacked.keep_new(dead, part(&[2, 4]));
        assert_eq!((first, second, unacked.held_from()), (0, 1, 0));
        // Odd rows now route to `a`, even ones to `b`; part 0 goes again, part 1 not yet.
        let route = |key: ParamKey| if key.row % 2 == 1 { a } else { b };
        let again = unacked.reroute(&[(first, dead)], route);
        let sent: Vec<(HeldPart, Vec<u64>)> = again
            .iter()
            .map(|(part, updates)| (*part, rows_of(updates)))
            .collect();
        assert_eq!(sent, vec![((0, a), vec![1, 3]), ((0, b), vec![2])]);
        // Held under the same number while they go: nothing below it is released.
        assert_eq!(unacked.held_from(), 0);
        assert_eq!(unacked.len(), 3);
        assert!(unacked.take((first, dead)).is_none());
        unacked.take((0, a));
        assert_eq!(unacked.held_from(), 0);
        unacked.take((0, b));
        assert_eq!(unacked.held_from(), 1);
        unacked.take((1, dead));
        // None held: the next new part's number.
        assert_eq!(unacked.held_from(), 2);
    }

    #[test]
    fn pieces_of_one_part_that_meet_at_one_server_go_as_one() {
        let (dead_a, dead_b, new) = (ServerId(0), ServerId(1), ServerId(2));
        let mut unacked = Unacked::default();
        // A part sent again before, split between two servers that both died since.
        unacked.keep((5, dead_a), part(&[1]), None);
        unacked.keep((5, dead_b), part(&[2]), None);
        let again = unacked.reroute(&[(5, dead_a), (5, dead_b)], |_| new);
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].0, rows_of(&again[0].1)), ((5, new), vec![1, 2]));
        assert_eq!(unacked.len(), 1);
    }
}
