//! Aggregation of parameter updates between flushes (Litz §4.4, DESIGN §2.2).
//!
//! `update(key, delta)` adds into the log instead of going to a server. Deltas of the same
//! key are summed, so a flush sends at most one delta per key however many micro-tasks
//! touched it. The log is a plain single-threaded map; the shell keeps one per shard inside
//! a concurrent map so that tasks updating different shards never contend.

use crate::error::CoreError;
use crate::ids::ParamKey;
use crate::key_hash::KeyMap;
use crate::rows::RowData;

/// Aggregated, not yet flushed deltas.
#[derive(Debug, Default, Clone)]
pub struct UpdateLog {
    entries: KeyMap<RowData>,
    bytes: usize,
    records: u64,
}

impl UpdateLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `delta` into the entry for `key`. A delta whose kind or width differs from an
    /// earlier delta of the same key is refused and the log is unchanged.
    pub fn record(&mut self, key: ParamKey, delta: &RowData) -> Result<(), CoreError> {
        match self.entries.get_mut(&key) {
            Some(entry) => entry.add_assign(delta)?,
            None => {
                self.bytes += delta.bytes();
                self.entries.insert(key, delta.clone());
            }
        }
        self.records += 1;
        Ok(())
    }

    /// Like [`record`](Self::record) but takes ownership, avoiding a copy for new keys.
    pub fn record_owned(&mut self, key: ParamKey, delta: RowData) -> Result<(), CoreError> {
        match self.entries.get_mut(&key) {
            Some(entry) => entry.add_assign(&delta)?,
            None => {
                self.bytes += delta.bytes();
                self.entries.insert(key, delta);
            }
        }
        self.records += 1;
        Ok(())
    }

    /// Number of distinct keys waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of aggregated deltas waiting (the size bound of a flush).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many deltas were recorded since the log was created (before aggregation).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Takes every aggregated delta out of the log, sorted by key so a flush is deterministic.
    pub fn drain(&mut self) -> Vec<(ParamKey, RowData)> {
        self.bytes = 0;
        let mut out: Vec<_> = self.entries.drain().collect();
        out.sort_unstable_by_key(|(k, _)| *k);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;

    fn key(r: u64) -> ParamKey {
        ParamKey::new(TableId(0), r)
    }

    #[test]
    fn aggregates_per_key_and_drains_sorted() {
        let mut log = UpdateLog::new();
        log.record(key(2), &RowData::I64(vec![1, 1])).unwrap();
        log.record(key(1), &RowData::I64(vec![5, 0])).unwrap();
        log.record(key(2), &RowData::I64(vec![2, 3])).unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log.records(), 3);
        let drained = log.drain();
        assert_eq!(
            drained,
            vec![
                (key(1), RowData::I64(vec![5, 0])),
                (key(2), RowData::I64(vec![3, 4]))
            ]
        );
        assert!(log.is_empty());
        assert_eq!(log.bytes(), 0);
    }

    #[test]
    fn mismatched_delta_is_refused() {
        let mut log = UpdateLog::new();
        log.record(key(1), &RowData::F32(vec![1.0])).unwrap();
        assert!(log.record(key(1), &RowData::F32(vec![1.0, 2.0])).is_err());
        assert_eq!(log.records(), 1);
        assert_eq!(log.drain(), vec![(key(1), RowData::F32(vec![1.0]))]);
    }
}
