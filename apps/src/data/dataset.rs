//! [`Dataset`]: a dense, labelled, row-major feature matrix, with its validation
//! and the ways to cut it up (train/test tail split, near-equal partitions,
//! row slices) and to scale it.

use std::ops::Range;
use std::path::PathBuf;

use super::error::{DataError, Location};

/// The most feature values (rows × features) a loader or generator will allocate:
/// 2^31 f32 values, 8 GiB. Larger inputs are refused with a typed error instead of
/// risking an out-of-memory abort.
pub const MAX_DENSE_VALUES: usize = 1 << 31;

/// A labelled dense dataset: rows × num_features f32 features (row-major) and one class label per row.
///
/// Built through [`Dataset::new`] (or a loader), a dataset has at least one row and one
/// feature, `features.len() == rows * num_features`, every label below `num_classes`,
/// and only finite features. The fields are public; code that edits them must keep that.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Row-major values, `rows() * num_features` of them.
    pub features: Vec<f32>,
    /// One class label per row, each below `num_classes`.
    pub labels: Vec<u32>,
    /// Features per row.
    pub num_features: usize,
    /// The number of classes (labels are `0..num_classes`).
    pub num_classes: usize,
    /// Where the data came from (a path, or a description of a generator).
    pub source: String,
    /// For a dataset read from an IDX pair: each image's dimensions and the labels file.
    pub idx: Option<IdxOrigin>,
}

/// What an IDX pair says beyond the rows: the dimensions of one item (28 × 28 for MNIST;
/// their product is `num_features`) and the labels file (`source` names the images file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxOrigin {
    pub item_dims: Vec<u64>,
    pub labels_path: String,
}

impl Dataset {
    /// Builds a dataset, checking the invariants listed on [`Dataset`].
    ///
    /// Errors name `source` as the file: [`DataError::Empty`] for no rows,
    /// [`DataError::ShapeMismatch`] for lengths that disagree,
    /// [`DataError::LabelOutOfRange`] / [`DataError::NotFinite`] with the 0-based record,
    /// [`DataError::InvalidArgument`] for zero features or zero classes.
    pub fn new(
        features: Vec<f32>,
        labels: Vec<u32>,
        num_features: usize,
        num_classes: usize,
        source: impl Into<String>,
    ) -> Result<Self, DataError> {
        let source = source.into();
        let path = || PathBuf::from(&source);
        if num_features == 0 {
            return Err(DataError::invalid(format!(
                "{source}: a dataset needs at least one feature"
            )));
        }
        if num_classes == 0 {
            return Err(DataError::invalid(format!(
                "{source}: a dataset needs at least one class"
            )));
        }
        if labels.is_empty() {
            return Err(DataError::Empty { path: path() });
        }
        let expected = labels.len().checked_mul(num_features);
        if expected != Some(features.len()) {
            return Err(DataError::ShapeMismatch {
                path: path(),
                message: format!(
                    "{} feature values for {} rows x {} features",
                    features.len(),
                    labels.len(),
                    num_features
                ),
            });
        }
        if let Some((row, &label)) = labels
            .iter()
            .enumerate()
            .find(|(_, &label)| label as usize >= num_classes)
        {
            return Err(DataError::LabelOutOfRange {
                path: path(),
                at: Location::Record(row),
                label: u64::from(label),
                num_classes,
            });
        }
        if let Some(position) = features.iter().position(|v| !v.is_finite()) {
            return Err(DataError::NotFinite {
                path: path(),
                at: Location::Record(position / num_features),
                feature: position % num_features,
            });
        }
        Ok(Self::from_valid_parts(
            features,
            labels,
            num_features,
            num_classes,
            source,
        ))
    }

    /// Assembles a dataset whose invariants the caller has already established.
    pub(super) fn from_valid_parts(
        features: Vec<f32>,
        labels: Vec<u32>,
        num_features: usize,
        num_classes: usize,
        source: String,
    ) -> Self {
        Dataset {
            features,
            labels,
            num_features,
            num_classes,
            source,
            idx: None,
        }
    }

    /// The number of rows (examples).
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// The features of row `i`.
    ///
    /// # Panics
    /// When `i >= self.rows()`, like slice indexing; use [`Dataset::get_row`] to check.
    pub fn row(&self, i: usize) -> &[f32] {
        let start = i * self.num_features;
        &self.features[start..start + self.num_features]
    }

    /// The features of row `i`, or `None` when `i` is out of range.
    pub fn get_row(&self, i: usize) -> Option<&[f32]> {
        let start = i.checked_mul(self.num_features)?;
        let end = start.checked_add(self.num_features)?;
        self.features.get(start..end)
    }

    /// The features (row-major) and labels of the rows in `range`, or `None` when the range
    /// is out of bounds.
    pub fn batch(&self, range: Range<usize>) -> Option<(&[f32], &[u32])> {
        let start = range.start.checked_mul(self.num_features)?;
        let end = range.end.checked_mul(self.num_features)?;
        Some((self.features.get(start..end)?, self.labels.get(range)?))
    }

    /// Keeps the first rows for training and the last `test_rows` as held-out; error if test_rows == 0 or >= rows.
    pub fn split_tail(mut self, test_rows: usize) -> Result<(Dataset, Dataset), DataError> {
        let rows = self.rows();
        if test_rows == 0 || test_rows >= rows {
            return Err(DataError::invalid(format!(
                "{}: cannot hold out {test_rows} of {rows} rows (need 1..={})",
                self.source,
                rows.saturating_sub(1)
            )));
        }
        let train_rows = rows - test_rows;
        let test_features = self.features.split_off(train_rows * self.num_features);
        let test_labels = self.labels.split_off(train_rows);
        self.features.shrink_to_fit();
        self.labels.shrink_to_fit();
        let test = Dataset {
            idx: self.idx.clone(),
            ..Dataset::from_valid_parts(
                test_features,
                test_labels,
                self.num_features,
                self.num_classes,
                self.source.clone(),
            )
        };
        Ok((self, test))
    }

    /// Same, with test_rows = round(rows * fraction); error if the result would leave either side empty.
    pub fn split_tail_fraction(self, fraction: f64) -> Result<(Dataset, Dataset), DataError> {
        if !fraction.is_finite() || fraction <= 0.0 || fraction >= 1.0 {
            return Err(DataError::invalid(format!(
                "{}: held-out fraction {fraction} is not strictly between 0 and 1",
                self.source
            )));
        }
        let rows = self.rows();
        // `rows * fraction` is within [0, rows], so the cast cannot saturate.
        let test_rows = (rows as f64 * fraction).round() as usize;
        if test_rows == 0 || test_rows >= rows {
            return Err(DataError::invalid(format!(
                "{}: held-out fraction {fraction} of {rows} rows gives {test_rows} test rows, \
                 leaving one side empty",
                self.source
            )));
        }
        self.split_tail(test_rows)
    }

    /// The contiguous row range of part `index` of `parts` near-equal parts (the first rows%parts parts get one extra row). parts==0 or index>=parts → error.
    ///
    /// When `parts > rows` the last parts are empty ranges.
    pub fn partition_range(&self, parts: usize, index: usize) -> Result<Range<usize>, DataError> {
        partition_range(self.rows(), parts, index)
    }

    /// Copies rows `range` into a new Dataset (same num_features/num_classes/source).
    ///
    /// An empty or out-of-bounds range is [`DataError::InvalidArgument`].
    pub fn slice(&self, range: Range<usize>) -> Result<Dataset, DataError> {
        let rows = self.rows();
        if range.start >= range.end || range.end > rows {
            return Err(DataError::invalid(format!(
                "{}: row range {}..{} is empty or outside 0..{rows}",
                self.source, range.start, range.end
            )));
        }
        let features = self
            .features
            .get(range.start * self.num_features..range.end * self.num_features)
            .map(<[f32]>::to_vec);
        let labels = self.labels.get(range.clone()).map(<[u32]>::to_vec);
        match (features, labels) {
            (Some(features), Some(labels)) => Ok(Dataset {
                idx: self.idx.clone(),
                ..Dataset::from_valid_parts(
                    features,
                    labels,
                    self.num_features,
                    self.num_classes,
                    self.source.clone(),
                )
            }),
            _ => Err(DataError::ShapeMismatch {
                path: PathBuf::from(&self.source),
                message: format!(
                    "{} feature values and {} labels do not fit {} features per row",
                    self.features.len(),
                    self.labels.len(),
                    self.num_features
                ),
            }),
        }
    }

    /// Multiplies every feature by 1/max|x| (no-op when all zero); returns the scale used.
    ///
    /// The returned scale is 1.0 for the no-op.
    pub fn scale_to_unit(&mut self) -> f32 {
        let max_abs = self.features.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        if max_abs == 0.0 || !max_abs.is_finite() {
            return 1.0;
        }
        let scale = 1.0 / max_abs;
        for v in &mut self.features {
            *v *= scale;
        }
        scale
    }
}

/// Part `index` of `rows` split into `parts` near-equal contiguous ranges.
pub(super) fn partition_range(
    rows: usize,
    parts: usize,
    index: usize,
) -> Result<Range<usize>, DataError> {
    if parts == 0 || index >= parts {
        return Err(DataError::invalid(format!(
            "partition {index} of {parts} parts does not exist"
        )));
    }
    let base = rows / parts;
    let extra = rows % parts;
    let start = index * base + index.min(extra);
    let len = base + usize::from(index < extra);
    Ok(start..start + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Dataset {
        // 5 rows x 2 features, row r = [r, -2r].
        let features = (0..5).flat_map(|r| [r as f32, -2.0 * r as f32]).collect();
        Dataset::new(features, vec![0, 1, 2, 0, 1], 2, 3, "small").unwrap()
    }

    #[test]
    fn new_validates() {
        let err = Dataset::new(vec![], vec![], 2, 3, "mem").unwrap_err();
        assert!(matches!(err, DataError::Empty { .. }));
        assert_eq!(err.to_string(), "mem: no records");

        let err = Dataset::new(vec![0.0; 3], vec![0, 0], 2, 3, "mem").unwrap_err();
        assert!(matches!(err, DataError::ShapeMismatch { .. }));
        assert!(err.to_string().starts_with("mem: shape mismatch"));

        let err = Dataset::new(vec![0.0; 4], vec![0, 3], 2, 3, "mem").unwrap_err();
        assert!(matches!(
            err,
            DataError::LabelOutOfRange {
                at: Location::Record(1),
                label: 3,
                num_classes: 3,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "mem: record 1: label 3 out of range for 3 classes"
        );

        let err = Dataset::new(vec![0.0, 1.0, f32::NAN, 0.0], vec![0, 0], 2, 3, "mem").unwrap_err();
        assert!(matches!(
            err,
            DataError::NotFinite {
                at: Location::Record(1),
                feature: 0,
                ..
            }
        ));
        assert!(err.to_string().contains("mem: record 1"));

        let err = Dataset::new(vec![], vec![0], 0, 3, "mem").unwrap_err();
        assert!(matches!(err, DataError::InvalidArgument { .. }));
        let err = Dataset::new(vec![0.0], vec![0], 1, 0, "mem").unwrap_err();
        assert!(matches!(err, DataError::InvalidArgument { .. }));
    }

    #[test]
    fn rows_and_row() {
        let d = small();
        assert_eq!(d.rows(), 5);
        assert_eq!(d.row(3), &[3.0, -6.0]);
        assert_eq!(d.get_row(4), Some(&[4.0f32, -8.0][..]));
        assert_eq!(d.get_row(5), None);
        assert_eq!(d.get_row(usize::MAX), None);
    }

    #[test]
    fn split_tail_keeps_order() {
        let (train, test) = small().split_tail(2).unwrap();
        assert_eq!(train.rows(), 3);
        assert_eq!(test.rows(), 2);
        assert_eq!(train.row(2), &[2.0, -4.0]);
        assert_eq!(test.row(0), &[3.0, -6.0]);
        assert_eq!(test.labels, vec![0, 1]);
        assert_eq!(test.num_classes, 3);
        assert_eq!(test.source, "small");

        for bad in [0, 5, 6] {
            let err = small().split_tail(bad).unwrap_err();
            assert!(matches!(err, DataError::InvalidArgument { .. }), "{bad}");
        }
    }

    #[test]
    fn split_tail_fraction_rounds() {
        let (train, test) = small().split_tail_fraction(0.3).unwrap(); // 1.5 -> 2
        assert_eq!((train.rows(), test.rows()), (3, 2));
        let (train, test) = small().split_tail_fraction(0.2).unwrap();
        assert_eq!((train.rows(), test.rows()), (4, 1));
        for bad in [0.0, 1.0, -0.1, 1.5, f64::NAN, 0.05, 0.95] {
            let err = small().split_tail_fraction(bad).unwrap_err();
            assert!(matches!(err, DataError::InvalidArgument { .. }), "{bad}");
        }
    }

    #[test]
    fn partition_ranges_cover_every_row_once() {
        for rows in 0..60 {
            for parts in 1..20 {
                let mut next = 0;
                let mut sizes = Vec::new();
                for index in 0..parts {
                    let r = partition_range(rows, parts, index).unwrap();
                    assert_eq!(r.start, next, "rows={rows} parts={parts} index={index}");
                    next = r.end;
                    sizes.push(r.len());
                }
                assert_eq!(next, rows);
                let max = sizes.iter().max().copied().unwrap_or(0);
                let min = sizes.iter().min().copied().unwrap_or(0);
                assert!(max - min <= 1);
                // The first rows % parts parts get the extra row.
                for (index, size) in sizes.iter().enumerate() {
                    assert_eq!(*size, rows / parts + usize::from(index < rows % parts));
                }
            }
        }
        let d = small();
        assert_eq!(d.partition_range(2, 0).unwrap(), 0..3);
        assert_eq!(d.partition_range(2, 1).unwrap(), 3..5);
        assert!(matches!(
            d.partition_range(0, 0),
            Err(DataError::InvalidArgument { .. })
        ));
        let err = d.partition_range(3, 3).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: partition 3 of 3 parts does not exist"
        );
    }

    #[test]
    fn slice_copies_rows() {
        let d = small();
        let s = d.slice(1..3).unwrap();
        assert_eq!(s.rows(), 2);
        assert_eq!(s.features, vec![1.0, -2.0, 2.0, -4.0]);
        assert_eq!(s.labels, vec![1, 2]);
        assert_eq!((s.num_features, s.num_classes), (2, 3));
        assert_eq!(s.source, "small");
        assert_eq!(d.slice(0..5).unwrap(), d);
        #[allow(clippy::reversed_empty_ranges)]
        let bad_ranges = [2..2, 3..1, 0..6, 7..9];
        for bad in bad_ranges {
            assert!(matches!(
                d.slice(bad.clone()),
                Err(DataError::InvalidArgument { .. })
            ));
        }
    }

    #[test]
    fn scale_to_unit() {
        let mut d = small();
        let scale = d.scale_to_unit();
        assert_eq!(scale, 1.0 / 8.0);
        assert_eq!(d.row(4), &[0.5, -1.0]);
        let mut zeros = Dataset::new(vec![0.0; 4], vec![0, 0], 2, 1, "z").unwrap();
        assert_eq!(zeros.scale_to_unit(), 1.0);
        assert_eq!(zeros.features, vec![0.0; 4]);
    }
}
