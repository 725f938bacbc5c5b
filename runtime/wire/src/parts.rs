//! Rows split into parts that each fit a message: a frame holds at most
//! [`FRAME_BYTES_MAX`](crate::FRAME_BYTES_MAX), so anything carrying rows of unbounded total
//! size (a server's answers from its rows, a flush, a shard's rows, a reset) goes in parts
//! of at most [`PART_BYTES`] of values, in order.

/// The most bytes of row values one part carries: far below the largest frame, so a part's
/// keys and framing always fit too.
pub const PART_BYTES: usize = 16 << 20;

/// Wire bytes a row's key and framing take besides its values (an estimate on the safe side).
const PER_ROW_BYTES: usize = 64;

/// The most keys one part carries when a message holds keys only (a message of keys split
/// by [`split_rows`] with no values holds as many).
pub const KEYS_PER_PART: usize = PART_BYTES / PER_ROW_BYTES;

/// Splits `rows` into runs of at most [`PART_BYTES`] (`bytes` of each row), in order; a row
/// larger than that is a part of its own. Always at least one part (empty for no rows).
pub fn split_rows<R>(rows: Vec<R>, bytes: impl Fn(&R) -> usize) -> Vec<Vec<R>> {
    // Nearly always one part: keep the rows where they are.
    let total: usize = rows.iter().map(|row| bytes(row) + PER_ROW_BYTES).sum();
    if total <= PART_BYTES {
        return vec![rows];
    }
    let mut parts = vec![Vec::new()];
    let mut filled = 0;
    for row in rows {
        let size = bytes(&row) + PER_ROW_BYTES;
        let current = parts.last().map_or(0, Vec::len);
        if current > 0 && filled + size > PART_BYTES {
            parts.push(Vec::new());
            filled = 0;
        }
        filled += size;
        if let Some(last) = parts.last_mut() {
            last.push(row);
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ParamKeyWire, RowWire};

    fn row(values: usize) -> (ParamKeyWire, RowWire) {
        let key = ParamKeyWire { table: 0, row: 0 };
        (key, RowWire::F32(vec![0.0; values]))
    }

    fn value_bytes((_, row): &(ParamKeyWire, RowWire)) -> usize {
        row.value_bytes()
    }

    #[test]
    fn rows_split_into_bounded_parts_in_order_and_a_huge_row_goes_alone() {
        let quarter = PART_BYTES / 4 / 4; // a quarter of a part, in f32 values
        let rows = vec![
            row(quarter),
            row(quarter),
            row(quarter),
            row(quarter),
            row(PART_BYTES), // 4× a part on its own
            row(1),
        ];
        let parts = split_rows(rows.clone(), value_bytes);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        // Four quarters and their keys overflow one part by the keys alone.
        assert_eq!(sizes, [3, 1, 1, 1]);
        for part in &parts {
            let bytes: usize = part.iter().map(value_bytes).sum();
            assert!(part.len() == 1 || bytes <= PART_BYTES, "{bytes}");
        }
        let flat: Vec<_> = parts.into_iter().flatten().collect();
        assert_eq!(flat, rows, "the parts hold every row once, in order");
    }

    #[test]
    fn rows_that_fit_one_part_are_that_part() {
        let rows = vec![row(3), row(1000), row(0)];
        assert_eq!(split_rows(rows.clone(), value_bytes), vec![rows]);
    }

    #[test]
    fn no_rows_is_one_empty_part() {
        let parts = split_rows(Vec::<(ParamKeyWire, RowWire)>::new(), value_bytes);
        assert_eq!(parts, vec![Vec::new()]);
    }
}
