//! The data module's error type, [`DataError`], and [`Location`], the place in a
//! file (a 1-based text line or a 0-based record) that an error points at.
//!
//! Every variant that comes from a file names that file in its message, and the
//! line or record where that applies, so a user can go straight to the problem.

use std::fmt;
use std::path::PathBuf;

/// Where in an input an error was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// A 1-based line of a text file (LibSVM).
    Line(usize),
    /// A 0-based record (row) of a binary file or an in-memory dataset.
    Record(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(line) => write!(f, "line {line}"),
            Location::Record(record) => write!(f, "record {record}"),
        }
    }
}

/// Everything that can go wrong while loading, building or cutting a dataset.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file could not be opened, read or decompressed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system or the decompressor said.
        source: std::io::Error,
    },

    /// A LibSVM line is malformed (bad label, bad `index:value` token, duplicate index...).
    #[error("{}: line {line}: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong, quoting the offending token.
        message: String,
    },

    /// A LibSVM feature index is 0 (indices are 1-based) or above the allowed maximum.
    #[error("{}: line {line}: feature index {index} out of range (valid: 1..={max})", .path.display())]
    FeatureIndexOutOfRange {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// The 1-based index as written.
        index: u64,
        /// The largest allowed index (the feature count when one was given).
        max: usize,
    },

    /// A label is not below the number of classes.
    #[error("{}: {at}: label {label} out of range for {num_classes} classes", .path.display())]
    LabelOutOfRange {
        /// The file (or a dataset's `source`).
        path: PathBuf,
        /// The line or record holding the label.
        at: Location,
        /// The label as read.
        label: u64,
        /// The number of classes it must be below.
        num_classes: usize,
    },

    /// An IDX file does not start with `00 00 08 NN`.
    #[error("{}: bad idx magic 0x{found:08x} (expected 0x000008NN: unsigned bytes, NN dimensions)", .path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first four bytes, big-endian.
        found: u32,
    },

    /// Dimensions disagree: with the data length, with each other, or with the other file.
    #[error("{}: shape mismatch: {message}", .path.display())]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// Which sizes disagree.
        message: String,
    },

    /// The input ends before the size its header declares.
    #[error("{}: truncated: expected {expected_bytes} bytes, found {found_bytes}", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The size the header implies (after decompression).
        expected_bytes: u64,
        /// The size present (after decompression).
        found_bytes: u64,
    },

    /// The input holds no records.
    #[error("{}: no records", .path.display())]
    Empty {
        /// The file (or a dataset's `source`).
        path: PathBuf,
    },

    /// A NaN or infinite feature value.
    #[error("{}: {at}: non-finite value in feature column {feature} (0-based)", .path.display())]
    NotFinite {
        /// The file (or a dataset's `source`).
        path: PathBuf,
        /// The line or record holding the value.
        at: Location,
        /// The 0-based feature column (a LibSVM index minus one).
        feature: usize,
    },

    /// The path does not exist.
    #[error("{}: not found", .path.display())]
    NotFound {
        /// The missing path.
        path: PathBuf,
    },

    /// A LibSVM file has records but no feature values at all, and no feature count was given.
    #[error("{}: no feature values in any record (give the number of features explicitly)", .path.display())]
    NoFeatures {
        /// The file.
        path: PathBuf,
    },

    /// The dense matrix would exceed [`MAX_DENSE_VALUES`](super::MAX_DENSE_VALUES) values
    /// or could not be allocated.
    #[error("{}: dataset too large: {rows} rows x {num_features} features", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The number of rows.
        rows: usize,
        /// The number of features per row.
        num_features: usize,
    },

    /// The labels make more classes than a model over the features can hold: features x
    /// classes weights would exceed [`MAX_DENSE_VALUES`](super::MAX_DENSE_VALUES).
    #[error("{}: {at}: label {label} makes {num_classes} classes; a model over {num_features} features would hold {num_features} x {num_classes} weights, more than {max}", .path.display())]
    TooManyClasses {
        /// The file.
        path: PathBuf,
        /// Where the largest label is.
        at: Location,
        /// The largest label.
        label: u64,
        /// The classes it makes (the label + 1).
        num_classes: usize,
        /// The number of features.
        num_features: usize,
        /// The most weights a model may hold.
        max: usize,
    },

    /// A directory did not hold exactly one IDX images file and one IDX labels file.
    #[error("{}: {message}", .path.display())]
    DirectoryLayout {
        /// The directory.
        path: PathBuf,
        /// What was expected and what was found.
        message: String,
    },

    /// A caller passed a bad argument (no file involved).
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
}

impl DataError {
    /// Maps an I/O error on `path` to [`DataError::NotFound`] or [`DataError::Io`].
    pub(super) fn from_io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::NotFound { path }
        } else {
            DataError::Io { path, source }
        }
    }

    pub(super) fn invalid(message: impl Into<String>) -> Self {
        DataError::InvalidArgument {
            message: message.into(),
        }
    }
}

/// At most 40 characters of `text`, for messages quoting a text file's content.
pub(super) fn quote(text: &str) -> String {
    text.chars().take(40).collect()
}

/// A text field as a non-negative integer, or the message saying it is not one (`what` it
/// should be, the field quoted), for the caller's [`DataError::Syntax`] at its line.
pub(super) fn non_negative_integer(what: &str, field: &str) -> Result<u64, String> {
    field.parse::<u64>().map_err(|_| {
        format!(
            "the {what} {:?} is not a non-negative integer",
            quote(field)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_that_is_not_a_non_negative_integer_is_quoted() {
        assert_eq!(
            non_negative_integer("count", " 7"),
            Err("the count \" 7\" is not a non-negative integer".to_string())
        );
        assert_eq!(non_negative_integer("count", "7"), Ok(7));
        let long = "9".repeat(50);
        let said = non_negative_integer("word id", &long).unwrap_err();
        assert!(said.contains(&format!("{:?}", &long[..40])), "{said}");
    }

    #[test]
    fn location_display() {
        assert_eq!(Location::Line(3).to_string(), "line 3");
        assert_eq!(Location::Record(0).to_string(), "record 0");
    }

    #[test]
    fn io_not_found_maps_to_not_found() {
        let err = DataError::from_io(
            "/x/y",
            std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        );
        assert!(matches!(err, DataError::NotFound { .. }));
        assert_eq!(err.to_string(), "/x/y: not found");
        let err = DataError::from_io(
            "/x/y",
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no"),
        );
        assert!(matches!(err, DataError::Io { .. }));
        assert_eq!(err.to_string(), "cannot read /x/y: no");
    }
}
