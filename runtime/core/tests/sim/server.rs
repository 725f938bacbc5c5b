//! A simulated parameter server: holds i64 rows of the shards it owns, answers reads and
//! applies flush batches, and checks each batch against the ground truth (the aggregated
//! delta equals the sum of the contributions it claims, none applied twice, right owner).

use super::bits::Bits;
use super::ghost::{Ghost, Value};
use super::{Kind, Violation};
use harp_core::{ParamKey, RowData, ServerId, ShardMap};
use std::collections::BTreeMap;

pub struct Server {
    pub id: ServerId,
    width: usize,
    rows: BTreeMap<ParamKey, Value>,
}

impl Server {
    pub fn new(id: ServerId, width: usize) -> Self {
        Self {
            id,
            width,
            rows: BTreeMap::new(),
        }
    }

    fn row(&mut self, key: ParamKey) -> &mut Value {
        let width = self.width;
        self.rows.entry(key).or_insert_with(|| Value {
            row: RowData::I64(vec![0; width]),
            contribs: Bits::default(),
        })
    }

    pub fn get(&mut self, keys: &[ParamKey]) -> Vec<Value> {
        keys.iter().map(|k| self.row(*k).clone()).collect()
    }

    /// The contributions applied to `key` so far.
    pub fn applied(&self, key: ParamKey) -> Option<&Bits> {
        self.rows.get(&key).map(|v| &v.contribs)
    }

    pub fn value(&self, key: ParamKey) -> Option<&Value> {
        self.rows.get(&key)
    }

    pub fn apply(
        &mut self,
        updates: Vec<(ParamKey, RowData, Bits)>,
        ghost: &Ghost,
        shards: &ShardMap,
    ) -> Result<(), Violation> {
        for (key, delta, contribs) in updates {
            if shards.server_of_key(key) != self.id {
                return Err(Violation::new(
                    Kind::Protocol,
                    format!("{} got a delta for {key}, owned by another server", self.id),
                ));
            }
            let expected = ghost.sum(&contribs);
            if delta.as_i64() != Some(expected.as_slice()) {
                return Err(Violation::new(
                    Kind::WrongValue,
                    format!(
                        "flushed delta for {key} is {delta:?}, but its contributions {:?} sum to {expected:?}",
                        contribs.iter().collect::<Vec<_>>()
                    ),
                ));
            }
            let value = self.row(key);
            if !contribs.is_disjoint(&value.contribs) {
                return Err(Violation::new(
                    Kind::Duplicate,
                    format!("a contribution to {key} was applied twice"),
                ));
            }
            value.row.add_assign(&delta).map_err(|e| {
                Violation::new(Kind::Protocol, format!("server refused a delta: {e}"))
            })?;
            value.contribs.union_with(&contribs);
        }
        Ok(())
    }
}
