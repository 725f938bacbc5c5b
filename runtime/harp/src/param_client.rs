//! The executor's handle on the parameter server (Litz `PSGet`/`PSUpdate`).
//!
//! Reads go through the node's cache under the version rule and may wait on a server; other
//! executors' micro-tasks run meanwhile. Updates are validated (width, finite values) and
//! aggregated into the node's update log; they reach the servers at the next flush, before
//! the task's completion is reported.

use crate::error::HarpError;
use crate::node::ParamStore;
use crate::table::{Element, Table};
use harp_core::{ExecutorId, ParamKey, RowData, RowKind, TaskId, Version};
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

/// A row read from the parameter server. Cheap to clone; derefs to `&[T]`.
#[derive(Debug, Clone)]
pub struct Row<T> {
    data: Arc<RowData>,
    _element: PhantomData<fn() -> T>,
}

/// The element type's name of rows of `kind`, as [`Element::NAME`] spells it.
fn kind_name(kind: RowKind) -> &'static str {
    match kind {
        RowKind::F32 => f32::NAME,
        RowKind::I64 => i64::NAME,
    }
}

/// `data` as a row of `table`: its values, if they have the table's kind and width.
fn row_values<'d, T: Element>(data: &'d RowData, table: &Table<T>) -> Result<&'d [T], HarpError> {
    match T::slice(data) {
        Some(values) if values.len() == table.width() => Ok(values),
        Some(values) => Err(HarpError::WidthMismatch {
            table: table.name().to_string(),
            expected: table.width(),
            found: values.len(),
        }),
        None => Err(HarpError::TableKindMismatch {
            table: table.name().to_string(),
            expected: kind_name(data.kind()),
            requested: T::NAME,
        }),
    }
}

impl<T: Element> Row<T> {
    fn new(data: Arc<RowData>, table: &Table<T>) -> Result<Self, HarpError> {
        row_values(&data, table)?;
        Ok(Self {
            data,
            _element: PhantomData,
        })
    }

    pub fn as_slice(&self) -> &[T] {
        // Row::new checked the kind, so the slice is always present.
        T::slice(&self.data).unwrap_or(&[])
    }
}

impl<T: Element> Deref for Row<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

/// A micro-task's access to the parameter server.
pub struct ParamClient {
    store: Arc<ParamStore>,
    version: Version,
    task: TaskId,
    executor: ExecutorId,
    keys: Vec<ParamKey>,
}

impl ParamClient {
    pub(crate) fn new(
        store: Arc<ParamStore>,
        version: Version,
        task: TaskId,
        executor: ExecutorId,
    ) -> Self {
        Self {
            store,
            version,
            task,
            executor,
            keys: Vec::new(),
        }
    }

    /// The version this task was dispatched with.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn task(&self) -> TaskId {
        self.task
    }

    pub fn executor(&self) -> ExecutorId {
        self.executor
    }

    fn check_table<T: Element>(&self, table: &Table<T>) -> Result<(), HarpError> {
        let spec = self.store.tables.get(table.id())?;
        if spec.kind != T::KIND {
            return Err(HarpError::TableKindMismatch {
                table: spec.name.to_string(),
                expected: kind_name(spec.kind),
                requested: T::NAME,
            });
        }
        if spec.width != table.width() {
            return Err(HarpError::WidthMismatch {
                table: spec.name.to_string(),
                expected: spec.width,
                found: table.width(),
            });
        }
        Ok(())
    }

    /// Reads one row (Litz `PSGet`).
    pub async fn get<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
    ) -> Result<Row<T>, HarpError> {
        let mut rows = self.get_many(table, &[row]).await?;
        rows.pop()
            .ok_or_else(|| HarpError::InvalidConfig("empty reply for one row".into()))
    }

    /// Reads several rows of one table at once; one request per server at most.
    pub async fn get_many<T: Element>(
        &mut self,
        table: &Table<T>,
        rows: &[u64],
    ) -> Result<Vec<Row<T>>, HarpError> {
        self.set_keys(table, rows)?;
        let data = self.store.read(&self.keys, self.version).await?;
        data.into_iter().map(|d| Row::new(d, table)).collect()
    }

    /// Reads several rows and copies them, concatenated in order, into `out` (cleared first).
    pub async fn get_many_into<T: Element>(
        &mut self,
        table: &Table<T>,
        rows: &[u64],
        out: &mut Vec<T>,
    ) -> Result<(), HarpError> {
        self.set_keys(table, rows)?;
        let width = table.width();
        out.clear();
        out.resize(rows.len() * width, T::default());
        // Each row is copied straight out of the cache, without a reference to it.
        let mut copy = |i: usize, data: &Arc<RowData>| {
            let values = row_values(data, table)?;
            match out.get_mut(i * width..(i + 1) * width) {
                Some(place) => {
                    place.copy_from_slice(values);
                    Ok(())
                }
                None => Err(HarpError::InvalidConfig(format!(
                    "a read visited row position {i} of {}",
                    rows.len()
                ))),
            }
        };
        self.store.visit(&self.keys, self.version, &mut copy).await
    }

    /// Checks `table` and sets `self.keys` to the keys of its `rows`.
    fn set_keys<T: Element>(&mut self, table: &Table<T>, rows: &[u64]) -> Result<(), HarpError> {
        self.check_table(table)?;
        self.keys.clear();
        self.keys
            .extend(rows.iter().map(|r| ParamKey::new(table.id(), *r)));
        Ok(())
    }

    /// Adds `delta` to one row (Litz `PSUpdate`); under a table's update rule it is a gradient.
    pub fn update<T: Element>(
        &mut self,
        table: &Table<T>,
        row: u64,
        delta: &[T],
    ) -> Result<(), HarpError> {
        self.check_table(table)?;
        self.check_delta(table, row, delta)?;
        self.store
            .record(ParamKey::new(table.id(), row), T::into_row(delta.to_vec()))
    }

    /// Updates several rows of one table; `deltas` holds one row after another.
    pub fn update_many<T: Element>(
        &mut self,
        table: &Table<T>,
        rows: &[u64],
        deltas: &[T],
    ) -> Result<(), HarpError> {
        self.check_table(table)?;
        let width = table.width();
        if deltas.len() != rows.len() * width {
            return Err(HarpError::BatchShapeMismatch {
                table: table.name().to_string(),
                rows: rows.len(),
                values: deltas.len(),
                width,
            });
        }
        // Copy and check each row while it is hot in cache; record only if every row is valid.
        let mut staged = Vec::with_capacity(rows.len());
        for (row, delta) in rows.iter().zip(deltas.chunks_exact(width)) {
            let copy = delta.to_vec();
            self.check_delta(table, *row, &copy)?;
            staged.push((ParamKey::new(table.id(), *row), T::into_row(copy)));
        }
        self.store.record_many(staged)
    }

    /// Like [`update_many`](Self::update_many), but takes one owned row per key and records
    /// them without copying (for tasks that compute each row's delta in its own buffer).
    pub fn update_many_owned<T: Element>(
        &mut self,
        table: &Table<T>,
        rows: &[u64],
        deltas: Vec<Vec<T>>,
    ) -> Result<(), HarpError> {
        self.check_table(table)?;
        if deltas.len() != rows.len() {
            return Err(HarpError::BatchShapeMismatch {
                table: table.name().to_string(),
                rows: rows.len(),
                values: deltas.iter().map(Vec::len).sum(),
                width: table.width(),
            });
        }
        for (row, delta) in rows.iter().zip(&deltas) {
            self.check_delta(table, *row, delta)?;
        }
        let staged = rows
            .iter()
            .zip(deltas)
            .map(|(row, delta)| (ParamKey::new(table.id(), *row), T::into_row(delta)))
            .collect();
        self.store.record_many(staged)
    }

    fn check_delta<T: Element>(
        &self,
        table: &Table<T>,
        row: u64,
        delta: &[T],
    ) -> Result<(), HarpError> {
        let reject = |e: HarpError| {
            self.store
                .counters
                .updates_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        };
        if delta.len() != table.width() {
            return reject(HarpError::WidthMismatch {
                table: table.name().to_string(),
                expected: table.width(),
                found: delta.len(),
            });
        }
        // No short-circuit: a plain fold vectorizes, and bad rows are rare.
        if !delta.iter().fold(true, |ok, v| ok & v.is_finite()) {
            return reject(HarpError::NonFiniteUpdate {
                table: table.name().to_string(),
                row,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, TableSet, UpdateRule};

    fn f32_table(width: usize) -> Table<f32> {
        TableSet::new()
            .dense_f32("w", width, UpdateRule::Add, Init::Zeros)
            .unwrap()
    }

    #[test]
    fn a_row_of_the_tables_kind_and_width_is_its_values() {
        let data = RowData::F32(vec![1.0, 2.0]);
        assert_eq!(row_values(&data, &f32_table(2)).unwrap(), &[1.0, 2.0]);
    }

    #[test]
    fn a_row_of_another_width_names_both_widths() {
        let error = row_values(&RowData::F32(vec![1.0; 3]), &f32_table(2)).unwrap_err();
        assert!(
            matches!(&error, HarpError::WidthMismatch { table, expected: 2, found: 3 } if table == "w"),
            "{error:?}"
        );
    }

    #[test]
    fn a_row_of_another_kind_names_the_kind_it_holds() {
        let error = row_values(&RowData::I64(vec![1, 2]), &f32_table(2)).unwrap_err();
        assert!(
            matches!(
                &error,
                HarpError::TableKindMismatch { table, expected: "i64", requested: "f32" }
                    if table == "w"
            ),
            "{error:?}"
        );
    }
}
