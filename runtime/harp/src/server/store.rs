//! A server's parameter storage: the rows of the shards it hosts, their optimizer state, and
//! the application of update rules.
//!
//! Rows are created with their table's initial value the first time they are read or
//! updated. A delta of the wrong kind or width is refused and counted; the row is unchanged.
//!
//! The store also keeps the server's copy of SCAR's running checkpoint ([`SavedCopy`]) and
//! moves a shard's saved rows with its rows ([`ShardStore::take_shard`],
//! [`ShardStore::insert_shard`]), so a shard's saved values are always where its rows are.

use super::applied_parts::PartId;
use super::forwarded_parts::MovedPartKeys;
use super::saved::{SavedCopy, SavedRows};
use crate::error::HarpError;
use crate::table::{initial_row, TableSet, TableSpec, UpdateRule};
use harp_core::{shard_of, CoreError, KeyMap, ParamKey, RowData, ShardId};
use harp_kernels::optim;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

/// Optimizer state kept beside a parameter row.
#[derive(Debug, Clone)]
enum OptState {
    None,
    AdaGrad { accum: Vec<f32> },
    Adam { m: Vec<f32>, v: Vec<f32>, step: u64 },
}

impl OptState {
    /// The optimizer state of a row that starts now under `spec`'s rule.
    fn fresh(spec: &TableSpec) -> Self {
        match spec.rule {
            UpdateRule::Add => OptState::None,
            UpdateRule::AdaGrad(_) => OptState::AdaGrad {
                accum: vec![0.0; spec.width],
            },
            UpdateRule::Adam(_) => OptState::Adam {
                m: vec![0.0; spec.width],
                v: vec![0.0; spec.width],
                step: 0,
            },
        }
    }
}

#[derive(Debug, Clone)]
struct StoredRow {
    value: Arc<RowData>,
    opt: OptState,
}

/// The rows of one shard, with their optimizer state and their saved values (SCAR's running
/// checkpoint), on their way to another server.
#[derive(Debug, Default)]
pub(crate) struct ShardRows {
    rows: Vec<(ParamKey, StoredRow)>,
    /// Saved values of the rows that have one (every key is one of `rows`).
    saved: SavedRows,
    /// A move's: the forwarded parts whose keys of the shard the old owner applied
    /// (`server/forwarded_parts.rs`); none for a shard restored from the checkpoint.
    parts: MovedPartKeys,
}

impl ShardRows {
    /// The same rows, with the record of forwarded parts applied to them.
    pub(crate) fn with_parts(mut self, parts: MovedPartKeys) -> Self {
        self.parts = parts;
        self
    }

    /// Takes the record of forwarded parts applied to the rows out.
    pub(crate) fn take_parts(&mut self) -> MovedPartKeys {
        std::mem::take(&mut self.parts)
    }

    /// The record of forwarded parts as the wire carries it.
    pub(crate) fn parts_to_wire(&self) -> Vec<harp_wire::PartKeysWire> {
        self.parts
            .iter()
            .map(|(part, keys)| harp_wire::PartKeysWire {
                node: part.node,
                seq: part.seq,
                keys: keys.iter().map(|key| (*key).into()).collect(),
            })
            .collect()
    }

    /// A record of forwarded parts that came over the wire.
    pub(crate) fn parts_from_wire(parts: Vec<harp_wire::PartKeysWire>) -> MovedPartKeys {
        parts
            .into_iter()
            .map(|part| {
                let id = PartId {
                    node: part.node,
                    seq: part.seq,
                };
                (id, part.keys.into_iter().map(ParamKey::from).collect())
            })
            .collect()
    }

    /// The rows as the wire carries them (to a server in another process), each with its
    /// saved value if it has one.
    pub(crate) fn to_wire(&self) -> Vec<harp_wire::ShardRowWire> {
        use harp_wire::OptStateWire;
        let saved: HashMap<ParamKey, &Arc<RowData>> = self
            .saved
            .iter()
            .map(|(key, value)| (*key, value))
            .collect();
        self.rows
            .iter()
            .map(|(key, row)| harp_wire::ShardRowWire {
                key: (*key).into(),
                value: (&*row.value).into(),
                saved: saved.get(key).map(|value| (&***value).into()),
                opt: match &row.opt {
                    OptState::None => OptStateWire::None,
                    OptState::AdaGrad { accum } => OptStateWire::AdaGrad {
                        accum: accum.clone(),
                    },
                    OptState::Adam { m, v, step } => OptStateWire::Adam {
                        m: m.clone(),
                        v: v.clone(),
                        step: *step,
                    },
                },
            })
            .collect()
    }

    /// Rows that came over the wire.
    pub(crate) fn from_wire(rows: Vec<harp_wire::ShardRowWire>) -> Self {
        use harp_wire::OptStateWire;
        let mut saved = SavedRows::new();
        let rows = rows
            .into_iter()
            .map(|r| {
                let key = ParamKey::from(r.key);
                if let Some(value) = r.saved {
                    saved.push((key, Arc::new(RowData::from(value))));
                }
                let opt = match r.opt {
                    OptStateWire::None => OptState::None,
                    OptStateWire::AdaGrad { accum } => OptState::AdaGrad { accum },
                    OptStateWire::Adam { m, v, step } => OptState::Adam { m, v, step },
                };
                let row = StoredRow {
                    value: Arc::new(RowData::from(r.value)),
                    opt,
                };
                (key, row)
            })
            .collect();
        Self {
            rows,
            saved,
            parts: Vec::new(),
        }
    }

    /// A shard re-created from SCAR's running checkpoint (partial recovery): each row at
    /// its saved value, which is also its saved value on the new owner, with fresh
    /// optimizer state (the checkpoint holds parameter values only). Rows not listed were
    /// never saved and start again at their initial value when first touched. A key of an
    /// unknown table is refused.
    pub(crate) fn restored(
        tables: &TableSet,
        saved: Vec<(ParamKey, Arc<RowData>)>,
    ) -> Result<Self, HarpError> {
        let mut rows = Vec::with_capacity(saved.len());
        for (key, value) in &saved {
            let spec = tables.get(key.table)?;
            let row = StoredRow {
                value: value.clone(),
                opt: OptState::fresh(spec),
            };
            rows.push((*key, row));
        }
        Ok(Self {
            rows,
            saved,
            parts: Vec::new(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Rows that carry a saved value.
    #[cfg(test)]
    pub(crate) fn saved_len(&self) -> usize {
        self.saved.len()
    }

    /// Bytes of values, optimizer state and saved values.
    pub(crate) fn bytes(&self) -> u64 {
        let values = |r: &StoredRow| match &*r.value {
            RowData::F32(v) => v.len() * 4,
            RowData::I64(v) => v.len() * 8,
        };
        let opt = |r: &StoredRow| match &r.opt {
            OptState::None => 0,
            OptState::AdaGrad { accum } => accum.len() * 4,
            OptState::Adam { m, v, .. } => (m.len() + v.len()) * 4 + 8,
        };
        let saved: usize = self.saved.iter().map(|(_, value)| value.bytes()).sum();
        self.rows
            .iter()
            .map(|(_, r)| (values(r) + opt(r)) as u64)
            .sum::<u64>()
            + saved as u64
    }
}

/// The spec of `key`'s table.
fn spec_of(tables: &TableSet, key: ParamKey) -> Result<&TableSpec, CoreError> {
    tables
        .get(key.table)
        .map_err(|_| CoreError::InvalidArgument(format!("unknown table in key {key}")))
}

/// The rows a server holds.
#[derive(Debug)]
pub(crate) struct ShardStore {
    tables: Arc<TableSet>,
    rows: KeyMap<StoredRow>,
    /// The saved values of SCAR's running checkpoint (keys: a subset of `rows`').
    saved: SavedCopy,
    rejected_updates: u64,
}

impl ShardStore {
    pub(crate) fn new(tables: Arc<TableSet>) -> Self {
        Self {
            tables,
            rows: KeyMap::default(),
            saved: SavedCopy::new(),
            rejected_updates: 0,
        }
    }

    fn spec(&self, key: ParamKey) -> Result<&TableSpec, CoreError> {
        spec_of(&self.tables, key)
    }

    /// The row of `key`, created at its initial value on first access (one lookup).
    fn row_mut(&mut self, key: ParamKey) -> Result<&mut StoredRow, CoreError> {
        match self.rows.entry(key) {
            Entry::Occupied(row) => Ok(row.into_mut()),
            Entry::Vacant(slot) => {
                let spec = spec_of(&self.tables, key)?;
                let value = Arc::new(initial_row(spec, key.row));
                let opt = OptState::fresh(spec);
                Ok(slot.insert(StoredRow { value, opt }))
            }
        }
    }

    /// The current value of `key` (created on first access).
    pub(crate) fn get(&mut self, key: ParamKey) -> Result<Arc<RowData>, CoreError> {
        Ok(self.row_mut(key)?.value.clone())
    }

    /// Refuses (and counts) a delta that names an unknown table or does not fit its rows'
    /// kind and width: what [`Self::apply`] would refuse, checked without touching a row.
    pub(crate) fn check_delta(&mut self, key: ParamKey, delta: &RowData) -> Result<(), CoreError> {
        let result = self.spec(key).and_then(|spec| {
            if delta.kind() == spec.kind && delta.width() == spec.width {
                return Ok(());
            }
            Err(CoreError::RowMismatch {
                expected: spec.kind,
                expected_width: spec.width,
                found: delta.kind(),
                found_width: delta.width(),
            })
        });
        if result.is_err() {
            self.rejected_updates += 1;
        }
        result
    }

    /// Applies one aggregated delta under the table's rule.
    pub(crate) fn apply(&mut self, key: ParamKey, delta: &RowData) -> Result<(), CoreError> {
        // An unknown table is refused and counted like a bad delta.
        let result = match self.spec(key).map(|spec| spec.rule) {
            Ok(rule) => self.apply_rule(key, rule, delta),
            Err(e) => Err(e),
        };
        if result.is_err() {
            self.rejected_updates += 1;
        }
        result
    }

    fn apply_rule(
        &mut self,
        key: ParamKey,
        rule: UpdateRule,
        delta: &RowData,
    ) -> Result<(), CoreError> {
        let row = self.row_mut(key)?;
        row.value.check_compatible(delta)?;
        let value = Arc::make_mut(&mut row.value);
        let kernel_result = match (rule, &mut row.opt, value, delta) {
            (UpdateRule::Add, _, value, delta) => return value.add_assign(delta),
            (
                UpdateRule::AdaGrad(p),
                OptState::AdaGrad { accum },
                RowData::F32(w),
                RowData::F32(g),
            ) => optim::adagrad_step(w, accum, g, p),
            (
                UpdateRule::Adam(p),
                OptState::Adam { m, v, step },
                RowData::F32(w),
                RowData::F32(g),
            ) => {
                *step += 1;
                optim::adam_step(w, m, v, g, *step, p)
            }
            _ => {
                return Err(CoreError::InvalidArgument(format!(
                    "update rule {rule:?} does not apply to row {key}"
                )))
            }
        };
        kernel_result.map_err(|e| CoreError::InvalidArgument(format!("row {key}: {e}")))
    }

    /// Updates refused since the server started.
    pub(crate) fn rejected_updates(&self) -> u64 {
        self.rejected_updates
    }

    /// The distance of every row held here from its saved value, ascending by key (see
    /// [`SavedCopy::distances`]).
    pub(crate) fn checkpoint_distances(&self) -> Result<Vec<(ParamKey, f64)>, HarpError> {
        let current = self.rows.iter().map(|(key, row)| (*key, &row.value));
        self.saved.distances(current, &self.tables)
    }

    /// Saves the current values of `keys` as their saved values and returns them (see
    /// [`SavedCopy::save`]). Creates no row.
    pub(crate) fn checkpoint_save(&mut self, keys: &[ParamKey]) -> Result<SavedRows, HarpError> {
        let rows = &self.rows;
        let current = |key: ParamKey| rows.get(&key).map(|row| row.value.clone());
        self.saved.save(keys, current, &self.tables)
    }

    /// The server's copy of the running checkpoint.
    #[cfg(test)]
    pub(crate) fn saved(&self) -> &SavedCopy {
        &self.saved
    }

    /// Removes and returns every row of `shard` (of `num_shards`), optimizer state and saved
    /// values included.
    pub(crate) fn take_shard(&mut self, shard: ShardId, num_shards: u32) -> ShardRows {
        let keys: Vec<ParamKey> = self
            .rows
            .keys()
            .filter(|k| shard_of(**k, num_shards) == shard)
            .copied()
            .collect();
        let mut rows: Vec<(ParamKey, StoredRow)> = keys
            .into_iter()
            .filter_map(|k| self.rows.remove(&k).map(|r| (k, r)))
            .collect();
        rows.sort_unstable_by_key(|(k, _)| *k);
        let saved = self.saved.take_shard(shard, num_shards);
        ShardRows {
            rows,
            saved,
            parts: Vec::new(),
        }
    }

    /// Sets the value of `key` (fault injection): to `value`, or to its initial value when
    /// `None`; optimizer state and saved value are kept. A value of the wrong kind or width
    /// is refused and nothing changes.
    pub(crate) fn reset(
        &mut self,
        key: ParamKey,
        value: Option<Arc<RowData>>,
    ) -> Result<(), CoreError> {
        let spec = self.spec(key)?;
        let value = match value {
            Some(value) => value,
            None => Arc::new(initial_row(spec, key.row)),
        };
        let row = self.row_mut(key)?;
        row.value.check_compatible(&value)?;
        row.value = value;
        Ok(())
    }

    /// Takes over the rows of a shard handed here, with their saved values.
    pub(crate) fn insert_shard(&mut self, shard: ShardRows) {
        self.rows.extend(shard.rows);
        self.saved.insert(shard.saved);
    }

    /// Every row's current value, sorted by key.
    pub(crate) fn dump(&self) -> Vec<(ParamKey, RowData)> {
        let mut out: Vec<_> = self
            .rows
            .iter()
            .map(|(k, r)| (*k, (*r.value).clone()))
            .collect();
        out.sort_unstable_by_key(|(k, _)| *k);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Init;
    use harp_core::TableId;
    use harp_kernels::optim::Adam;

    fn store() -> (ShardStore, ParamKey, ParamKey) {
        let mut set = TableSet::new();
        let w = set
            .dense_f32("w", 3, UpdateRule::Adam(Adam::default()), Init::Zeros)
            .unwrap();
        let c = set.counters_i64("c", 2).unwrap();
        let keys = (ParamKey::new(w.id(), 1), ParamKey::new(c.id(), 9));
        (ShardStore::new(Arc::new(set)), keys.0, keys.1)
    }

    #[test]
    fn a_shard_moves_with_its_optimizer_state() {
        let (mut a, w, c) = store();
        let (mut b, _, _) = store();
        let num_shards = 4;
        a.apply(w, &RowData::F32(vec![1.0, -1.0, 0.5])).unwrap();
        a.apply(c, &RowData::I64(vec![5, 6])).unwrap();
        let shard = shard_of(w, num_shards);
        let moved = a.take_shard(shard, num_shards);
        let expect_rows = if shard_of(c, num_shards) == shard {
            2
        } else {
            1
        };
        assert_eq!(moved.len(), expect_rows);
        assert!(moved.bytes() >= 3 * 4 * 3); // value, m and v of the Adam row
        assert!(a
            .dump()
            .iter()
            .all(|(k, _)| shard_of(*k, num_shards) != shard));
        b.insert_shard(moved);
        // The Adam step continues from the moved moments, exactly as if it had not moved.
        let (mut reference, _, _) = store();
        reference
            .apply(w, &RowData::F32(vec![1.0, -1.0, 0.5]))
            .unwrap();
        reference
            .apply(w, &RowData::F32(vec![0.3, 0.3, 0.3]))
            .unwrap();
        b.apply(w, &RowData::F32(vec![0.3, 0.3, 0.3])).unwrap();
        assert_eq!(b.get(w).unwrap(), reference.get(w).unwrap());
    }

    #[test]
    fn a_shards_saved_values_move_with_it_in_process_and_over_the_wire() {
        let (mut a, w, c) = store();
        let num_shards = 4;
        let shard = shard_of(w, num_shards);
        a.apply(w, &RowData::F32(vec![1.0, -1.0, 0.5])).unwrap();
        a.apply(c, &RowData::I64(vec![5, 6])).unwrap();
        let saved_rows = a.checkpoint_save(&[w, c]).unwrap();
        let saved_w = a.get(w).unwrap();
        assert_eq!(saved_rows[0], (w, saved_w.clone()));
        a.apply(w, &RowData::F32(vec![0.3, 0.3, 0.3])).unwrap();
        let before: Vec<(ParamKey, f64)> = a
            .checkpoint_distances()
            .unwrap()
            .into_iter()
            .filter(|(k, _)| shard_of(*k, num_shards) == shard)
            .collect();
        assert!(before.iter().any(|(k, d)| *k == w && *d > 0.0));

        let moved = a.take_shard(shard, num_shards);
        assert_eq!(
            moved.saved_len(),
            moved.len(),
            "every moved row had been saved"
        );
        assert!(a.saved().rows_of_shard(shard, num_shards).is_empty());
        assert!(a
            .checkpoint_distances()
            .unwrap()
            .iter()
            .all(|(k, _)| shard_of(*k, num_shards) != shard));
        let with_saved = moved.bytes();
        // Over the wire and back: the same rows, optimizer state and saved values.
        let moved = ShardRows::from_wire(moved.to_wire());
        assert_eq!(moved.bytes(), with_saved);
        let (mut b, _, _) = store();
        b.insert_shard(moved);
        assert_eq!(b.checkpoint_distances().unwrap(), before);
        assert_eq!(b.saved().get(w), Some(&saved_w));
    }

    #[test]
    fn counters_add_and_bad_deltas_are_refused_and_counted() {
        let (mut s, _, c) = store();
        s.apply(c, &RowData::I64(vec![2, 3])).unwrap();
        s.apply(c, &RowData::I64(vec![1, 1])).unwrap();
        assert!(s.apply(c, &RowData::I64(vec![1])).is_err());
        assert!(s.apply(c, &RowData::F32(vec![1.0, 1.0])).is_err());
        let unknown_table = ParamKey::new(TableId(99), 0);
        assert!(s.apply(unknown_table, &RowData::I64(vec![1, 1])).is_err());
        assert_eq!(*s.get(c).unwrap(), RowData::I64(vec![3, 4]));
        assert_eq!(s.rejected_updates(), 3);
    }

    #[test]
    fn adam_rule_moves_against_the_gradient() {
        let (mut s, w, _) = store();
        s.apply(w, &RowData::F32(vec![1.0, -1.0, 0.0])).unwrap();
        let v = s.get(w).unwrap();
        let v = v.as_f32().unwrap();
        assert!(v[0] < 0.0 && v[1] > 0.0 && v[2] == 0.0, "{v:?}");
    }
}
