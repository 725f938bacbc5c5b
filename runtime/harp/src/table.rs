//! Parameter tables: typed, named tables of rows keyed by `u64`.
//!
//! An app declares its tables once, in a [`TableSet`], and keeps the typed handles
//! ([`Table<f32>`] for dense parameters, [`Table<i64>`] for counters). Every row of a table
//! has the table's width. Updates are additive unless the table declares a server-side
//! [`UpdateRule`]; then an update is a gradient and the server applies the rule, keeping the
//! optimizer state beside the parameter.

use crate::error::HarpError;
use harp_core::scar::Norm;
use harp_core::{RowData, RowKind, TableId};
use harp_kernels::optim::{AdaGrad, Adam};
use std::marker::PhantomData;
use std::sync::Arc;

/// Element types a table can hold.
pub trait Element: Copy + Default + Send + Sync + 'static {
    const KIND: RowKind;
    const NAME: &'static str;
    fn slice(row: &RowData) -> Option<&[Self]>;
    fn into_row(values: Vec<Self>) -> RowData;
    fn is_finite(&self) -> bool;
}

impl Element for f32 {
    const KIND: RowKind = RowKind::F32;
    const NAME: &'static str = "f32";
    fn slice(row: &RowData) -> Option<&[Self]> {
        row.as_f32()
    }
    fn into_row(values: Vec<Self>) -> RowData {
        RowData::F32(values)
    }
    fn is_finite(&self) -> bool {
        f32::is_finite(*self)
    }
}

impl Element for i64 {
    const KIND: RowKind = RowKind::I64;
    const NAME: &'static str = "i64";
    fn slice(row: &RowData) -> Option<&[Self]> {
        row.as_i64()
    }
    fn into_row(values: Vec<Self>) -> RowData {
        RowData::I64(values)
    }
    fn is_finite(&self) -> bool {
        true
    }
}

/// How a server applies an update to a row.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum UpdateRule {
    /// `row += delta` (the default; the only rule for counters).
    #[default]
    Add,
    /// The delta is a gradient; AdaGrad with its accumulator kept on the server.
    AdaGrad(AdaGrad),
    /// The delta is a gradient; Adam with its moments and step count kept on the server.
    Adam(Adam),
}

/// Initial value of a row the first time it is read or updated.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Init {
    #[default]
    Zeros,
    /// Uniform in `[-scale, scale]`, a pure function of `(seed, row, column)` so that the
    /// value does not depend on which server creates the row.
    Uniform { scale: f32, seed: u64 },
}

/// The declaration of one table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub id: TableId,
    pub name: Arc<str>,
    pub kind: RowKind,
    pub width: usize,
    pub rule: UpdateRule,
    pub init: Init,
    /// How SCAR's running checkpoint measures how far a row moved from its saved value
    /// (SCAR §5.4.2); [`Norm::L2`] unless set with [`TableSet::set_norm`].
    pub norm: Norm,
}

/// A typed handle to a declared table.
#[derive(Debug)]
pub struct Table<T> {
    id: TableId,
    width: usize,
    name: Arc<str>,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for Table<T> {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            width: self.width,
            name: self.name.clone(),
            _element: PhantomData,
        }
    }
}

impl<T: Element> Table<T> {
    pub fn id(&self) -> TableId {
        self.id
    }
    pub fn width(&self) -> usize {
        self.width
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Every table of an app, in declaration order (the order gives the ids).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableSet {
    specs: Vec<TableSpec>,
}

impl TableSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a table of dense `f32` rows.
    pub fn dense_f32(
        &mut self,
        name: &str,
        width: usize,
        rule: UpdateRule,
        init: Init,
    ) -> Result<Table<f32>, HarpError> {
        self.declare(name, width, rule, init)
    }

    /// Declares a table of `i64` counter rows (additive updates, zero initial values).
    pub fn counters_i64(&mut self, name: &str, width: usize) -> Result<Table<i64>, HarpError> {
        self.declare(name, width, UpdateRule::Add, Init::Zeros)
    }

    fn declare<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rule: UpdateRule,
        init: Init,
    ) -> Result<Table<T>, HarpError> {
        if width == 0 {
            return Err(HarpError::InvalidConfig(format!(
                "table '{name}' has width 0"
            )));
        }
        if self.specs.iter().any(|s| &*s.name == name) {
            return Err(HarpError::InvalidConfig(format!(
                "table '{name}' is declared twice"
            )));
        }
        if T::KIND == RowKind::I64 && rule != UpdateRule::Add {
            return Err(HarpError::InvalidConfig(format!(
                "counter table '{name}' only supports additive updates"
            )));
        }
        let id = u16::try_from(self.specs.len())
            .map(TableId)
            .map_err(|_| HarpError::InvalidConfig("more than 65536 tables".into()))?;
        let name: Arc<str> = Arc::from(name);
        self.specs.push(TableSpec {
            id,
            name: name.clone(),
            kind: T::KIND,
            width,
            rule,
            init,
            norm: Norm::default(),
        });
        Ok(Table {
            id,
            width,
            name,
            _element: PhantomData,
        })
    }

    /// Sets the norm SCAR's checkpoint distances use for `table`'s rows (e.g.
    /// [`Norm::ScaledTotalVariation`] for LDA's document-topic counts, SCAR §5.5.1).
    pub fn set_norm(&mut self, table: TableId, norm: Norm) -> Result<(), HarpError> {
        let spec = self
            .specs
            .get_mut(table.0 as usize)
            .ok_or(HarpError::UnknownTable(table))?;
        spec.norm = norm;
        Ok(())
    }

    pub fn get(&self, id: TableId) -> Result<&TableSpec, HarpError> {
        self.specs
            .get(id.0 as usize)
            .ok_or(HarpError::UnknownTable(id))
    }

    pub fn iter(&self) -> impl Iterator<Item = &TableSpec> {
        self.specs.iter()
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

/// The initial value of column `col` of row `row` under `init`.
pub(crate) fn init_value(init: Init, row: u64, col: usize) -> f32 {
    match init {
        Init::Zeros => 0.0,
        Init::Uniform { scale, seed } => {
            let h = harp_core::key_hash::mix64(
                seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (col as u64).rotate_left(32),
            );
            let unit = (h >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            (unit * 2.0 - 1.0) * scale
        }
    }
}

/// A fresh row of `spec` with its initial values.
pub(crate) fn initial_row(spec: &TableSpec, row: u64) -> RowData {
    match spec.kind {
        RowKind::I64 => RowData::zeros(RowKind::I64, spec.width),
        RowKind::F32 => match spec.init {
            Init::Zeros => RowData::zeros(RowKind::F32, spec.width),
            init => RowData::F32((0..spec.width).map(|c| init_value(init, row, c)).collect()),
        },
    }
}

/// Makes `out` the initial row of `spec`'s row `row` (as [`initial_row`]), reusing its
/// buffer when it has the row's kind: no allocation per row where many rows are measured
/// against their initial values (SCAR's checkpoint distances of never-saved rows).
pub(crate) fn initial_row_into(spec: &TableSpec, row: u64, out: &mut RowData) {
    match (spec.kind, &mut *out) {
        (RowKind::I64, RowData::I64(values)) => {
            values.clear();
            values.resize(spec.width, 0);
        }
        (RowKind::F32, RowData::F32(values)) => {
            values.clear();
            match spec.init {
                Init::Zeros => values.resize(spec.width, 0.0),
                init => values.extend((0..spec.width).map(|c| init_value(init, row, c))),
            }
        }
        _ => *out = initial_row(spec, row),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initial_row_written_into_a_buffer_of_any_kind_equals_a_fresh_one() {
        let mut set = TableSet::new();
        let init = Init::Uniform {
            scale: 0.5,
            seed: 11,
        };
        let u = set.dense_f32("u", 3, UpdateRule::Add, init).unwrap();
        let z = set.dense_f32("z", 5, UpdateRule::Add, Init::Zeros).unwrap();
        let c = set.counters_i64("c", 2).unwrap();
        let mut scratch = RowData::I64(vec![7; 9]);
        for (table, row) in [
            (u.id(), 4),
            (c.id(), 1),
            (u.id(), 9),
            (z.id(), 2),
            (c.id(), 0),
        ] {
            let spec = set.get(table).unwrap();
            initial_row_into(spec, row, &mut scratch);
            assert_eq!(scratch, initial_row(spec, row), "table {table:?} row {row}");
        }
    }

    #[test]
    fn declares_in_order_and_rejects_bad_declarations() {
        let mut set = TableSet::new();
        let w = set.dense_f32("w", 4, UpdateRule::Add, Init::Zeros).unwrap();
        let c = set.counters_i64("c", 2).unwrap();
        assert_eq!(w.id(), TableId(0));
        assert_eq!(c.id(), TableId(1));
        assert!(set.dense_f32("w", 4, UpdateRule::Add, Init::Zeros).is_err());
        assert!(set.counters_i64("z", 0).is_err());
    }

    #[test]
    fn tables_measure_checkpoint_distances_in_l2_unless_told_otherwise() {
        let mut set = TableSet::new();
        let w = set.dense_f32("w", 4, UpdateRule::Add, Init::Zeros).unwrap();
        let c = set.counters_i64("c", 2).unwrap();
        set.set_norm(c.id(), Norm::ScaledTotalVariation).unwrap();
        assert_eq!(set.get(w.id()).unwrap().norm, Norm::L2);
        assert_eq!(set.get(c.id()).unwrap().norm, Norm::ScaledTotalVariation);
        assert!(matches!(
            set.set_norm(TableId(9), Norm::L1),
            Err(HarpError::UnknownTable(TableId(9)))
        ));
    }

    #[test]
    fn uniform_init_is_deterministic_and_bounded() {
        let init = Init::Uniform {
            scale: 0.5,
            seed: 7,
        };
        for row in 0..100 {
            for col in 0..10 {
                let v = init_value(init, row, col);
                assert_eq!(v, init_value(init, row, col));
                assert!((-0.5..=0.5).contains(&v));
            }
        }
        assert_ne!(init_value(init, 1, 0), init_value(init, 2, 0));
    }
}
