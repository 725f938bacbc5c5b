//! A server's parameter storage: the rows of the shards it hosts, their optimizer state, and
//! the application of update rules.
//!
//! Rows are created with their table's initial value the first time they are read or
//! updated. A delta of the wrong kind or width is refused and counted; the row is unchanged.

use crate::table::{initial_row, TableSet, TableSpec, UpdateRule};
use harp_core::{shard_of, CoreError, ParamKey, RowData, ShardId};
use harp_kernels::optim;
use std::collections::HashMap;
use std::sync::Arc;

/// Optimizer state kept beside a parameter row.
#[derive(Debug, Clone)]
enum OptState {
    None,
    AdaGrad { accum: Vec<f32> },
    Adam { m: Vec<f32>, v: Vec<f32>, step: u64 },
}

#[derive(Debug, Clone)]
struct StoredRow {
    value: Arc<RowData>,
    opt: OptState,
}

/// The rows of one shard, with their optimizer state, on their way to another server.
#[derive(Debug, Default)]
pub(crate) struct ShardRows {
    rows: Vec<(ParamKey, StoredRow)>,
}

impl ShardRows {
    /// The rows as the wire carries them (to a server in another process).
    pub(crate) fn to_wire(&self) -> Vec<harp_wire::ShardRowWire> {
        use harp_wire::OptStateWire;
        self.rows
            .iter()
            .map(|(key, row)| harp_wire::ShardRowWire {
                key: (*key).into(),
                value: (&*row.value).into(),
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
        let rows = rows
            .into_iter()
            .map(|r| {
                let opt = match r.opt {
                    OptStateWire::None => OptState::None,
                    OptStateWire::AdaGrad { accum } => OptState::AdaGrad { accum },
                    OptStateWire::Adam { m, v, step } => OptState::Adam { m, v, step },
                };
                let row = StoredRow {
                    value: Arc::new(RowData::from(r.value)),
                    opt,
                };
                (ParamKey::from(r.key), row)
            })
            .collect();
        Self { rows }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes of values and optimizer state.
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
        self.rows
            .iter()
            .map(|(_, r)| (values(r) + opt(r)) as u64)
            .sum()
    }
}

/// The rows a server holds.
#[derive(Debug)]
pub(crate) struct ShardStore {
    tables: Arc<TableSet>,
    rows: HashMap<ParamKey, StoredRow>,
    rejected_updates: u64,
}

impl ShardStore {
    pub(crate) fn new(tables: Arc<TableSet>) -> Self {
        Self {
            tables,
            rows: HashMap::new(),
            rejected_updates: 0,
        }
    }

    fn spec(&self, key: ParamKey) -> Result<&TableSpec, CoreError> {
        self.tables
            .get(key.table)
            .map_err(|_| CoreError::InvalidArgument(format!("unknown table in key {key}")))
    }

    fn row_mut(&mut self, key: ParamKey) -> Result<&mut StoredRow, CoreError> {
        if !self.rows.contains_key(&key) {
            let spec = self.spec(key)?;
            let value = Arc::new(initial_row(spec, key.row));
            let opt = match spec.rule {
                UpdateRule::Add => OptState::None,
                UpdateRule::AdaGrad(_) => OptState::AdaGrad {
                    accum: vec![0.0; spec.width],
                },
                UpdateRule::Adam(_) => OptState::Adam {
                    m: vec![0.0; spec.width],
                    v: vec![0.0; spec.width],
                    step: 0,
                },
            };
            self.rows.insert(key, StoredRow { value, opt });
        }
        // Inserted just above when absent.
        self.rows
            .get_mut(&key)
            .ok_or_else(|| CoreError::InvalidArgument(format!("row {key} vanished")))
    }

    /// The current value of `key` (created on first access).
    pub(crate) fn get(&mut self, key: ParamKey) -> Result<Arc<RowData>, CoreError> {
        Ok(self.row_mut(key)?.value.clone())
    }

    /// Applies one aggregated delta under the table's rule.
    pub(crate) fn apply(&mut self, key: ParamKey, delta: &RowData) -> Result<(), CoreError> {
        let rule = self.spec(key)?.rule;
        let result = self.apply_rule(key, rule, delta);
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

    /// Removes and returns every row of `shard` (of `num_shards`), optimizer state included.
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
        ShardRows { rows }
    }

    /// Takes over the rows of a shard handed here.
    pub(crate) fn insert_shard(&mut self, shard: ShardRows) {
        self.rows.extend(shard.rows);
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
    fn counters_add_and_bad_deltas_are_refused_and_counted() {
        let (mut s, _, c) = store();
        s.apply(c, &RowData::I64(vec![2, 3])).unwrap();
        s.apply(c, &RowData::I64(vec![1, 1])).unwrap();
        assert!(s.apply(c, &RowData::I64(vec![1])).is_err());
        assert!(s.apply(c, &RowData::F32(vec![1.0, 1.0])).is_err());
        assert_eq!(*s.get(c).unwrap(), RowData::I64(vec![3, 4]));
        assert_eq!(s.rejected_updates(), 2);
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
