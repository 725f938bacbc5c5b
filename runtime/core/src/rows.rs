//! Row values of parameter tables and their additive aggregation.
//!
//! A table holds rows of one element kind (`f32` parameters or `i64` counters) and one
//! width. Deltas of the same key are summed element-wise; a delta whose kind or width does
//! not match is refused with [`CoreError::RowMismatch`] and nothing is changed.

use crate::error::CoreError;
use serde::{Deserialize, Serialize};

/// The element type of a table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RowKind {
    F32,
    I64,
}

/// One row's values (or one row's delta).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RowData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl RowData {
    /// A row of zeros.
    pub fn zeros(kind: RowKind, width: usize) -> Self {
        match kind {
            RowKind::F32 => RowData::F32(vec![0.0; width]),
            RowKind::I64 => RowData::I64(vec![0; width]),
        }
    }

    pub fn kind(&self) -> RowKind {
        match self {
            RowData::F32(_) => RowKind::F32,
            RowData::I64(_) => RowKind::I64,
        }
    }

    pub fn width(&self) -> usize {
        match self {
            RowData::F32(v) => v.len(),
            RowData::I64(v) => v.len(),
        }
    }

    /// Size of the values in bytes (for metrics and flush bounds).
    pub fn bytes(&self) -> usize {
        match self {
            RowData::F32(v) => v.len() * 4,
            RowData::I64(v) => v.len() * 8,
        }
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            RowData::F32(v) => Some(v),
            RowData::I64(_) => None,
        }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        match self {
            RowData::I64(v) => Some(v),
            RowData::F32(_) => None,
        }
    }

    /// Checks that `other` has this row's kind and width.
    pub fn check_compatible(&self, other: &RowData) -> Result<(), CoreError> {
        if self.kind() != other.kind() || self.width() != other.width() {
            return Err(CoreError::RowMismatch {
                expected: self.kind(),
                expected_width: self.width(),
                found: other.kind(),
                found_width: other.width(),
            });
        }
        Ok(())
    }

    /// Adds `delta` element-wise. Counters wrap on overflow rather than panic.
    pub fn add_assign(&mut self, delta: &RowData) -> Result<(), CoreError> {
        self.check_compatible(delta)?;
        match (self, delta) {
            (RowData::F32(a), RowData::F32(b)) => {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += *y;
                }
            }
            (RowData::I64(a), RowData::I64(b)) => {
                for (x, y) in a.iter_mut().zip(b) {
                    *x = x.wrapping_add(*y);
                }
            }
            // check_compatible rejected every other pairing above.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_matching_rows() {
        let mut a = RowData::I64(vec![1, 2]);
        a.add_assign(&RowData::I64(vec![10, -2])).unwrap();
        assert_eq!(a, RowData::I64(vec![11, 0]));
    }

    #[test]
    fn refuses_mismatch_and_leaves_row_unchanged() {
        let mut a = RowData::F32(vec![1.0, 2.0]);
        assert!(a.add_assign(&RowData::F32(vec![1.0])).is_err());
        assert!(a.add_assign(&RowData::I64(vec![1, 1])).is_err());
        assert_eq!(a, RowData::F32(vec![1.0, 2.0]));
    }
}
