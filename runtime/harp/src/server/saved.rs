//! A server's in-memory copy of SCAR's running checkpoint (SCAR §5.4.2–5.4.3, DESIGN §2.4):
//! the *saved* value of every parameter row the server holds, against which checkpoint
//! distances are measured ("each PS node keeps an in-memory cache of the current
//! checkpoint, which is updated whenever a new partial checkpoint is saved").
//!
//! [`SavedCopy`] owns that copy and its three operations: the distance of each held row from
//! its saved value ([`SavedCopy::distances`]), saving selected rows
//! ([`SavedCopy::save`]: their current values become their saved values and are returned
//! for the caller to write to storage), and moving a shard's saved rows with the shard
//! ([`SavedCopy::take_shard`], [`SavedCopy::insert`]).
//!
//! **What is stored.** The running checkpoint starts as the initial values `w⁽⁰⁾`. A row
//! is stored here only once a checkpoint round saves it; a row absent from the copy has its
//! table's initial value ([`initial_row`]) as its saved value. So a row that was never
//! saved costs nothing here, and a row that was never read nor updated (its current value
//! is still the initial one) is at distance 0. Saved values are `Arc`s shared with the
//! row's current value when saved, so a save copies nothing; the server's next update of
//! that row copies it (copy-on-write), as a save would have.
//!
//! **Invariant.** Every key stored here is a row of the server's [`ShardStore`]: a save
//! stores only rows that exist, and a shard's rows and saved rows leave and arrive together
//! (`ShardStore::take_shard` / `ShardStore::insert_shard`).
//!
//! [`ShardStore`]: super::store::ShardStore

use crate::error::HarpError;
use crate::table::{initial_row, initial_row_into, TableSet};
use harp_core::scar::{distance, ScarError};
use harp_core::{shard_of, CoreError, KeyMap, ParamKey, RowData, ShardId};
use std::sync::Arc;

/// Rows with their saved values, ascending by key: what a save returns for storage, and
/// what travels with a moving shard.
pub(crate) type SavedRows = Vec<(ParamKey, Arc<RowData>)>;

/// The saved values of the rows a server holds (absent: the row's initial value).
#[derive(Debug, Default)]
pub(crate) struct SavedCopy {
    rows: KeyMap<Arc<RowData>>,
}

impl SavedCopy {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Rows stored (saved at least once).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The saved value of `key`, or `None` when it is the row's initial value.
    #[cfg(test)]
    pub(crate) fn get(&self, key: ParamKey) -> Option<&Arc<RowData>> {
        self.rows.get(&key)
    }

    /// The distance of each `current` row from its saved value under its table's norm
    /// (`harp_core::scar::distance(norm, current, saved)`), ascending by key.
    ///
    /// Every given row is reported, at distance 0 too: SCAR saves a fraction `r` of *all*
    /// parameters (`⌈r·n⌉`, §5.4.2), and a round-robin walk must see every key. Rows that do
    /// not exist yet are not given and not reported: their current value is their initial
    /// value, which is their saved value.
    ///
    /// Errors: a row of an unknown table ([`HarpError::UnknownTable`]); a row the norm
    /// cannot measure (a non-finite value, a mismatch with the saved value, a negative count
    /// under scaled total variation), named by key.
    pub(crate) fn distances<'a>(
        &self,
        current: impl Iterator<Item = (ParamKey, &'a Arc<RowData>)>,
        tables: &TableSet,
    ) -> Result<Vec<(ParamKey, f64)>, HarpError> {
        let mut out = Vec::with_capacity(current.size_hint().0);
        // The initial value of a never-saved row, written into one buffer.
        let mut initial = RowData::F32(Vec::new());
        for (key, value) in current {
            let spec = tables.get(key.table)?;
            let measured = match self.rows.get(&key) {
                Some(saved) => distance(spec.norm, value, saved),
                None => {
                    initial_row_into(spec, key.row, &mut initial);
                    distance(spec.norm, value, &initial)
                }
            };
            out.push((key, measured.map_err(|e| scar_error(key, e))?));
        }
        out.sort_unstable_by_key(|&(key, _)| key);
        Ok(out)
    }

    /// Saves `keys`: each row's current value (`current(key)`; `None` for a row that does
    /// not exist yet, whose value is its initial value) becomes its saved value. Returns
    /// `(key, saved value)` for every distinct key, ascending, for the caller to write to
    /// storage.
    ///
    /// Errors, saving nothing: a key of an unknown table ([`HarpError::UnknownTable`]).
    pub(crate) fn save(
        &mut self,
        keys: &[ParamKey],
        current: impl Fn(ParamKey) -> Option<Arc<RowData>>,
        tables: &TableSet,
    ) -> Result<SavedRows, HarpError> {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        for key in &keys {
            tables.get(key.table)?;
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            match current(key) {
                Some(value) => {
                    self.rows.insert(key, value.clone());
                    out.push((key, value));
                }
                None => {
                    // Not created yet: at its initial value, which absence already means.
                    self.rows.remove(&key);
                    let spec = tables.get(key.table)?;
                    out.push((key, Arc::new(initial_row(spec, key.row))));
                }
            }
        }
        Ok(out)
    }

    /// The stored saved rows of `shard` (of `num_shards`), ascending by key; rows of the
    /// shard not listed are at their initial value.
    pub(crate) fn rows_of_shard(&self, shard: ShardId, num_shards: u32) -> SavedRows {
        let mut out: SavedRows = self
            .rows
            .iter()
            .filter(|(key, _)| shard_of(**key, num_shards) == shard)
            .map(|(key, value)| (*key, value.clone()))
            .collect();
        out.sort_unstable_by_key(|(key, _)| *key);
        out
    }

    /// Removes and returns the stored saved rows of `shard` (of `num_shards`), ascending by
    /// key, to travel with the shard.
    pub(crate) fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> SavedRows {
        let out = self.rows_of_shard(shard, num_shards);
        for (key, _) in &out {
            self.rows.remove(key);
        }
        out
    }

    /// Takes in the saved rows of a shard that arrived here.
    pub(crate) fn insert(&mut self, rows: SavedRows) {
        self.rows.extend(rows);
    }
}

/// A row the distance cannot be measured on, as a runtime error naming the key.
fn scar_error(key: ParamKey, error: ScarError) -> HarpError {
    HarpError::Core(CoreError::InvalidArgument(format!(
        "checkpoint distance of row {key}: {error}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, UpdateRule};
    use harp_core::scar::Norm;
    use harp_core::TableId;
    use std::collections::HashMap;

    /// `u`: uniform-initialised f32 rows (L2); `c`: counters under scaled total variation.
    fn tables() -> (TableSet, TableId, TableId) {
        let mut set = TableSet::new();
        let init = Init::Uniform {
            scale: 1.0,
            seed: 3,
        };
        let u = set.dense_f32("u", 3, UpdateRule::Add, init).unwrap();
        let c = set.counters_i64("c", 2).unwrap();
        set.set_norm(c.id(), Norm::ScaledTotalVariation).unwrap();
        (set, u.id(), c.id())
    }

    fn row(values: &[f32]) -> Arc<RowData> {
        Arc::new(RowData::F32(values.to_vec()))
    }

    #[test]
    fn unsaved_rows_are_measured_against_their_initial_value_with_their_tables_norm() {
        let (set, u, c) = tables();
        let (ku, kc) = (ParamKey::new(u, 7), ParamKey::new(c, 2));
        let initial = initial_row(set.get(u).unwrap(), 7);
        let mut moved = initial.clone();
        moved
            .add_assign(&RowData::F32(vec![3.0, 4.0, 0.0]))
            .unwrap();
        let current = [
            (ku, Arc::new(moved)),
            (kc, Arc::new(RowData::I64(vec![8, 2]))),
        ];
        let copy = SavedCopy::new();
        let got = copy
            .distances(current.iter().map(|(k, v)| (*k, v)), &set)
            .unwrap();
        // Uniform init is not zero: measured against zeros, the first row would not be 5.
        assert!(initial.as_f32().unwrap().iter().any(|x| *x != 0.0));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, ku);
        assert!((got[0].1 - 5.0).abs() < 1e-5, "{got:?}");
        // Counters [8, 2] against the initial [0, 0] under scaled TV: mass 10 against the
        // zero vector, so 10 / 2.
        assert_eq!(got[1].0, kc);
        assert!((got[1].1 - 5.0).abs() < 1e-9, "{got:?}");

        // A row still at its initial value is at distance 0.
        let untouched = [(ku, Arc::new(initial))];
        let got = copy
            .distances(untouched.iter().map(|(k, v)| (*k, v)), &set)
            .unwrap();
        assert_eq!(got, vec![(ku, 0.0)]);
    }

    #[test]
    fn saved_rows_are_at_distance_zero_until_they_change() {
        let (set, u, _) = tables();
        let (a, b) = (ParamKey::new(u, 1), ParamKey::new(u, 2));
        let mut current: HashMap<ParamKey, Arc<RowData>> =
            [(a, row(&[1.0, 2.0, 3.0])), (b, row(&[5.0, 5.0, 5.0]))].into();
        let mut copy = SavedCopy::new();
        let saved = copy
            .save(&[b, a, b], |k| current.get(&k).cloned(), &set)
            .unwrap();
        assert_eq!(saved.len(), 2, "each key once");
        assert_eq!(saved[0], (a, row(&[1.0, 2.0, 3.0])));
        assert_eq!(copy.len(), 2);
        current.insert(a, row(&[1.0, 2.0, 1.0]));
        let got = copy.distances(current.iter().map(|(k, v)| (*k, v)), &set);
        assert_eq!(got.unwrap(), vec![(a, 2.0), (b, 0.0)]);
        assert_eq!(copy.get(a), Some(&row(&[1.0, 2.0, 3.0])));
    }

    #[test]
    fn saving_a_row_that_does_not_exist_returns_its_initial_value_and_stores_nothing() {
        let (set, u, _) = tables();
        let key = ParamKey::new(u, 40);
        let mut copy = SavedCopy::new();
        let saved = copy.save(&[key], |_| None, &set).unwrap();
        assert_eq!(*saved[0].1, initial_row(set.get(u).unwrap(), 40));
        assert_eq!(copy.len(), 0);
    }

    #[test]
    fn unknown_tables_and_unmeasurable_rows_are_refused() {
        let (set, u, _) = tables();
        let stray = ParamKey::new(TableId(9), 1);
        let good = ParamKey::new(u, 1);
        let mut copy = SavedCopy::new();
        let refused = copy.save(&[good, stray], |_| Some(row(&[0.0; 3])), &set);
        assert!(matches!(refused, Err(HarpError::UnknownTable(TableId(9)))));
        assert_eq!(copy.len(), 0, "nothing saved");
        let nan = [(good, row(&[f32::NAN, 0.0, 0.0]))];
        let err = copy
            .distances(nan.iter().map(|(k, v)| (*k, v)), &set)
            .unwrap_err();
        assert!(err.to_string().contains(&good.to_string()), "{err}");
    }

    #[test]
    fn a_shards_saved_rows_leave_and_arrive_together() {
        let (set, u, _) = tables();
        let keys: Vec<ParamKey> = (0..40).map(|r| ParamKey::new(u, r)).collect();
        let mut old = SavedCopy::new();
        old.save(&keys, |k| Some(row(&[k.row as f32; 3])), &set)
            .unwrap();
        let shard = ShardId(1);
        let expected: Vec<ParamKey> = keys
            .iter()
            .copied()
            .filter(|k| shard_of(*k, 3) == shard)
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(old.rows_of_shard(shard, 3).len(), expected.len());
        let moving = old.take_shard(shard, 3);
        assert_eq!(moving.iter().map(|(k, _)| *k).collect::<Vec<_>>(), expected);
        assert_eq!(old.len(), 40 - expected.len());
        assert!(old.rows_of_shard(shard, 3).is_empty());
        let mut new = SavedCopy::new();
        new.insert(moving);
        for key in expected {
            assert_eq!(new.get(key), Some(&row(&[key.row as f32; 3])));
        }
    }
}
