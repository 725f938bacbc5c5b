//! The LibSVM / SVMlight text loader: `label index:value index:value ...` lines,
//! 1-based indices, streamed line by line (plain or gzip) into sparse rows and
//! densified once the feature count is known.
//!
//! Accepted: blank lines; `#` comments (whole-line or trailing); indices in any
//! order (each at most once per line); labels that are non-negative integers, also
//! written as integral floats (`3.0`); `qid:N` tokens, which are skipped.

use std::io::BufRead;
use std::path::Path;

use super::dataset::{Dataset, MAX_DENSE_VALUES};
use super::error::{DataError, Location};
use super::gzip;

/// How to size a LibSVM dataset; `None` means "infer from the file".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LibsvmOptions {
    /// The number of features; when given, an index above it is an error.
    /// Inferred as the largest index seen.
    pub num_features: Option<usize>,
    /// The number of classes; when given, a label at or above it is an error.
    /// Inferred as the largest label + 1.
    pub num_classes: Option<usize>,
}

/// The largest feature index this loader stores (columns are kept as `u32`).
const MAX_INDEX: u64 = u32::MAX as u64;

/// Longest excerpt of a bad token quoted in an error message, in characters.
const MAX_QUOTED_CHARS: usize = 40;

/// Loads a LibSVM file (plain or gzip, detected by content) into a dense [`Dataset`].
pub fn load_libsvm(path: &Path, opts: &LibsvmOptions) -> Result<Dataset, DataError> {
    let reader = gzip::open_reader(path)?;
    parse_libsvm_reader(reader, path, opts)
}

/// Parses LibSVM text from `reader`; `name` is the file named in errors and the
/// dataset's `source`. The text must already be decompressed.
pub fn parse_libsvm_reader<R: BufRead>(
    mut reader: R,
    name: &Path,
    opts: &LibsvmOptions,
) -> Result<Dataset, DataError> {
    if opts.num_features == Some(0) {
        return Err(DataError::invalid(format!(
            "{}: num_features must be at least 1",
            name.display()
        )));
    }
    if opts.num_classes == Some(0) {
        return Err(DataError::invalid(format!(
            "{}: num_classes must be at least 1",
            name.display()
        )));
    }
    let max_index = opts
        .num_features
        .map_or(MAX_INDEX, |n| (n as u64).min(MAX_INDEX));

    let mut sparse = SparseRows::default();
    let mut line = Vec::new();
    let mut line_no = 0usize;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| DataError::Io {
                path: name.to_path_buf(),
                source,
            })?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let parser = LineParser {
            path: name,
            line: line_no,
            max_index,
            num_classes: opts.num_classes,
        };
        parser.parse(&line, &mut sparse)?;
    }
    sparse.into_dataset(name, opts)
}

/// Rows parsed so far, in sparse form.
#[derive(Default)]
struct SparseRows {
    labels: Vec<u32>,
    /// `entries[row_ends[r - 1]..row_ends[r]]` are row `r`'s (0-based column, value) pairs.
    row_ends: Vec<usize>,
    entries: Vec<(u32, f32)>,
    /// The largest 0-based column seen, if any.
    max_column: Option<u32>,
    max_label: u32,
    /// The 1-based line of the first row with the largest label.
    max_label_line: usize,
}

impl SparseRows {
    fn into_dataset(self, name: &Path, opts: &LibsvmOptions) -> Result<Dataset, DataError> {
        let rows = self.labels.len();
        if rows == 0 {
            return Err(DataError::Empty {
                path: name.to_path_buf(),
            });
        }
        let num_features = match (opts.num_features, self.max_column) {
            (Some(n), _) => n,
            (None, Some(column)) => column as usize + 1,
            (None, None) => {
                return Err(DataError::NoFeatures {
                    path: name.to_path_buf(),
                })
            }
        };
        let num_classes = opts.num_classes.unwrap_or(self.max_label as usize + 1);
        let too_large = || DataError::TooLarge {
            path: name.to_path_buf(),
            rows,
            num_features,
        };
        let total = rows
            .checked_mul(num_features)
            .filter(|&total| total <= MAX_DENSE_VALUES)
            .ok_or_else(too_large)?;
        let weights = num_features.checked_mul(num_classes);
        if weights.is_none_or(|weights| weights > MAX_DENSE_VALUES) {
            return Err(DataError::TooManyClasses {
                path: name.to_path_buf(),
                at: Location::Line(self.max_label_line),
                label: u64::from(self.max_label),
                num_classes,
                num_features,
                max: MAX_DENSE_VALUES,
            });
        }
        let mut features: Vec<f32> = Vec::new();
        features.try_reserve_exact(total).map_err(|_| too_large())?;
        features.resize(total, 0.0);

        let mut start = 0;
        for (dense, &end) in features.chunks_exact_mut(num_features).zip(&self.row_ends) {
            for &(column, value) in self.entries.get(start..end).unwrap_or(&[]) {
                if let Some(slot) = dense.get_mut(column as usize) {
                    *slot = value;
                }
            }
            start = end;
        }
        Ok(Dataset::from_valid_parts(
            features,
            self.labels,
            num_features,
            num_classes,
            name.display().to_string(),
        ))
    }
}

/// Parses one line into a [`SparseRows`].
struct LineParser<'a> {
    path: &'a Path,
    /// 1-based.
    line: usize,
    /// The largest allowed 1-based index.
    max_index: u64,
    num_classes: Option<usize>,
}

impl LineParser<'_> {
    fn parse(&self, text: &[u8], rows: &mut SparseRows) -> Result<(), DataError> {
        let content = match text.iter().position(|&b| b == b'#') {
            Some(comment) => &text[..comment],
            None => text,
        };
        let mut tokens = content
            .split(|b| b.is_ascii_whitespace())
            .filter(|token| !token.is_empty());
        let Some(label_token) = tokens.next() else {
            return Ok(()); // blank or comment-only line
        };
        let label = self.parse_label(label_token)?;

        let row_start = rows.entries.len();
        let mut previous: Option<u32> = None;
        let mut ascending = true;
        for token in tokens {
            let Some(colon) = token.iter().position(|&b| b == b':') else {
                return Err(self.syntax(format!("expected index:value, found '{}'", quote(token))));
            };
            let (index_text, value_text) = (&token[..colon], &token[colon + 1..]);
            if index_text == b"qid" {
                continue;
            }
            let column = self.parse_index(index_text)?;
            let value = self.parse_value(value_text, column)?;
            if previous.is_some_and(|p| p >= column) {
                ascending = false;
            }
            previous = Some(column);
            rows.entries.push((column, value));
        }

        let row_entries = &mut rows.entries[row_start..];
        if !ascending {
            row_entries.sort_unstable_by_key(|&(column, _)| column);
            if let Some(pair) = row_entries.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(self.syntax(format!(
                    "duplicate feature index {}",
                    u64::from(pair[0].0) + 1
                )));
            }
        }
        if let Some(&(last, _)) = row_entries.last() {
            rows.max_column = rows.max_column.max(Some(last));
        }
        if label > rows.max_label || rows.labels.is_empty() {
            rows.max_label = label;
            rows.max_label_line = self.line;
        }
        rows.labels.push(label);
        rows.row_ends.push(rows.entries.len());
        Ok(())
    }

    fn parse_label(&self, token: &[u8]) -> Result<u32, DataError> {
        let bad = || {
            self.syntax(format!(
                "label must be a non-negative integer, found '{}'",
                quote(token)
            ))
        };
        let text = std::str::from_utf8(token).map_err(|_| bad())?;
        let label = match text.parse::<u32>() {
            Ok(label) => label,
            Err(_) => {
                let float: f64 = text.parse().map_err(|_| bad())?;
                if !(float.is_finite()
                    && float >= 0.0
                    && float.fract() == 0.0
                    && float <= f64::from(u32::MAX))
                {
                    return Err(bad());
                }
                float as u32
            }
        };
        if let Some(num_classes) = self.num_classes {
            if label as usize >= num_classes {
                return Err(DataError::LabelOutOfRange {
                    path: self.path.to_path_buf(),
                    at: Location::Line(self.line),
                    label: u64::from(label),
                    num_classes,
                });
            }
        }
        Ok(label)
    }

    /// Parses a 1-based index and returns its 0-based column.
    fn parse_index(&self, text: &[u8]) -> Result<u32, DataError> {
        let index = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| self.syntax(format!("invalid feature index '{}'", quote(text))))?;
        if index == 0 || index > self.max_index {
            return Err(DataError::FeatureIndexOutOfRange {
                path: self.path.to_path_buf(),
                line: self.line,
                index,
                max: self.max_index as usize,
            });
        }
        // index <= MAX_INDEX = u32::MAX, so index - 1 fits.
        u32::try_from(index - 1).map_err(|_| DataError::FeatureIndexOutOfRange {
            path: self.path.to_path_buf(),
            line: self.line,
            index,
            max: self.max_index as usize,
        })
    }

    fn parse_value(&self, text: &[u8], column: u32) -> Result<f32, DataError> {
        let value = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<f32>().ok())
            .ok_or_else(|| {
                self.syntax(format!(
                    "invalid value '{}' for feature index {}",
                    quote(text),
                    u64::from(column) + 1
                ))
            })?;
        if !value.is_finite() {
            return Err(DataError::NotFinite {
                path: self.path.to_path_buf(),
                at: Location::Line(self.line),
                feature: column as usize,
            });
        }
        Ok(value)
    }

    fn syntax(&self, message: String) -> DataError {
        DataError::Syntax {
            path: self.path.to_path_buf(),
            line: self.line,
            message,
        }
    }
}

/// A short, printable excerpt of `bytes` for an error message.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(MAX_QUOTED_CHARS).collect();
    if text.chars().count() > MAX_QUOTED_CHARS {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    fn parse(text: &str, opts: LibsvmOptions) -> Result<Dataset, DataError> {
        parse_libsvm_reader(Cursor::new(text.as_bytes()), Path::new("mem.libsvm"), &opts)
    }

    fn parse_err(text: &str, opts: LibsvmOptions) -> DataError {
        match parse(text, opts) {
            Ok(d) => panic!("expected an error for {text:?}, got {d:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn parses_values_into_the_right_columns() {
        let text = "# header comment\n\
                    1 1:0.5 3:-2\n\
                    \n\
                    0 2:7 # trailing comment\r\n\
                    \t2.0   4:1e-3\t1:+4\n\
                    3 qid:7 2:1\n";
        let d = parse(text, LibsvmOptions::default()).unwrap();
        assert_eq!(d.rows(), 4);
        assert_eq!(d.num_features, 4);
        assert_eq!(d.num_classes, 4);
        assert_eq!(d.labels, vec![1, 0, 2, 3]);
        assert_eq!(d.row(0), &[0.5, 0.0, -2.0, 0.0]);
        assert_eq!(d.row(1), &[0.0, 7.0, 0.0, 0.0]);
        assert_eq!(d.row(2), &[4.0, 0.0, 0.0, 1e-3]);
        assert_eq!(d.row(3), &[0.0, 1.0, 0.0, 0.0]);
        assert_eq!(d.source, "mem.libsvm");
    }

    #[test]
    fn given_sizes_are_used() {
        let opts = LibsvmOptions {
            num_features: Some(6),
            num_classes: Some(5),
        };
        let d = parse("1 2:1\n0 1:1\n", opts).unwrap();
        assert_eq!((d.num_features, d.num_classes), (6, 5));
        assert_eq!(d.row(0), &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        // A row with only a label is all zeros.
        let d = parse("1 2:1\n0\n", LibsvmOptions::default()).unwrap();
        assert_eq!(d.row(1), &[0.0, 0.0]);
    }

    #[test]
    fn labels() {
        for good in ["0", "3", "3.0", "+2", "1e1"] {
            let d = parse(&format!("{good} 1:1\n"), LibsvmOptions::default()).unwrap();
            assert!(d.labels[0] <= 10, "{good}");
        }
        for bad in ["2.5", "-1", "abc", "nan", "inf", "-0.5", "4294967296"] {
            let err = parse_err(&format!("0 1:1\n{bad} 1:1\n"), LibsvmOptions::default());
            assert!(
                matches!(err, DataError::Syntax { line: 2, .. }),
                "{bad}: {err}"
            );
            assert!(
                err.to_string().starts_with("mem.libsvm: line 2: label"),
                "{err}"
            );
        }
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let cases = [
            ("0 1:1\n0 1:1 5\n", "expected index:value"),
            ("0 1:1\n0 x:1\n", "invalid feature index 'x'"),
            ("0 1:1\n0 -3:1\n", "invalid feature index '-3'"),
            (
                "0 1:1\n0 2:abc\n",
                "invalid value 'abc' for feature index 2",
            ),
            ("0 1:1\n0 2:\n", "invalid value ''"),
            ("0 1:1\n0 3:1 1:2 3:4\n", "duplicate feature index 3"),
            ("0 1:1\n0 1:1 1:2\n", "duplicate feature index 1"),
        ];
        for (text, needle) in cases {
            let err = parse_err(text, LibsvmOptions::default());
            let message = err.to_string();
            assert!(
                matches!(err, DataError::Syntax { line: 2, .. }),
                "{message}"
            );
            assert!(message.starts_with("mem.libsvm: line 2: "), "{message}");
            assert!(message.contains(needle), "{message} lacks {needle}");
        }
        // Bytes that are not UTF-8.
        let err = parse_libsvm_reader(
            Cursor::new(&b"0 1:1\n0 1:\xff\n"[..]),
            Path::new("mem.libsvm"),
            &LibsvmOptions::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("mem.libsvm: line 2: invalid value"),
            "{err}"
        );
        // Any order is fine when there are no duplicates.
        let d = parse("0 3:3 1:1 2:2\n", LibsvmOptions::default()).unwrap();
        assert_eq!(d.row(0), &[1.0, 2.0, 3.0]);
    }

    #[test]
    fn feature_index_out_of_range() {
        let err = parse_err("0 1:1\n\n0 0:1\n", LibsvmOptions::default());
        assert!(matches!(
            err,
            DataError::FeatureIndexOutOfRange {
                line: 3,
                index: 0,
                ..
            }
        ));
        assert!(err
            .to_string()
            .starts_with("mem.libsvm: line 3: feature index 0"));

        let opts = LibsvmOptions {
            num_features: Some(4),
            num_classes: None,
        };
        let err = parse_err("0 4:1\n0 5:1\n", opts);
        assert!(matches!(
            err,
            DataError::FeatureIndexOutOfRange {
                line: 2,
                index: 5,
                max: 4,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "mem.libsvm: line 2: feature index 5 out of range (valid: 1..=4)"
        );
        let err = parse_err("0 4294967296:1\n", LibsvmOptions::default());
        assert!(matches!(err, DataError::FeatureIndexOutOfRange { .. }));
    }

    #[test]
    fn label_out_of_range() {
        let opts = LibsvmOptions {
            num_features: None,
            num_classes: Some(2),
        };
        let err = parse_err("1 1:1\n# c\n2 1:1\n", opts);
        assert!(matches!(
            err,
            DataError::LabelOutOfRange {
                at: Location::Line(3),
                label: 2,
                num_classes: 2,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "mem.libsvm: line 3: label 2 out of range for 2 classes"
        );
    }

    #[test]
    fn not_finite() {
        for bad in ["nan", "NaN", "inf", "-inf", "1e39"] {
            let err = parse_err(&format!("0 1:1\n1 2:1 3:{bad}\n"), LibsvmOptions::default());
            assert!(
                matches!(
                    err,
                    DataError::NotFinite {
                        at: Location::Line(2),
                        feature: 2,
                        ..
                    }
                ),
                "{bad}: {err}"
            );
            assert!(err
                .to_string()
                .starts_with("mem.libsvm: line 2: non-finite"));
        }
    }

    #[test]
    fn empty_no_features_too_large_invalid() {
        for text in ["", "\n\n", "# only a comment\n   \n"] {
            let err = parse_err(text, LibsvmOptions::default());
            assert!(matches!(err, DataError::Empty { .. }));
            assert_eq!(err.to_string(), "mem.libsvm: no records");
        }
        let err = parse_err("0\n1\n", LibsvmOptions::default());
        assert!(matches!(err, DataError::NoFeatures { .. }));
        assert!(err.to_string().starts_with("mem.libsvm: no feature values"));

        let huge = LibsvmOptions {
            num_features: Some(usize::MAX),
            num_classes: None,
        };
        let err = parse_err("0 1:1\n1 1:1\n", huge);
        assert!(matches!(err, DataError::TooLarge { rows: 2, .. }));
        assert!(err.to_string().starts_with("mem.libsvm: dataset too large"));

        // A label so large that features x classes weights would not fit: refused before
        // any model is made, naming the line of the largest label.
        let err = parse_err("0 1:1\n4000000000 1:1\n7 1:1\n", LibsvmOptions::default());
        assert_eq!(
            err.to_string(),
            format!(
                "mem.libsvm: line 2: label 4000000000 makes 4000000001 classes; a model over 1 features would hold 1 x 4000000001 weights, more than {MAX_DENSE_VALUES}"
            )
        );
        let at_the_edge = format!("{} 1:1 2:1\n", MAX_DENSE_VALUES / 2 - 1);
        let fits = parse(&at_the_edge, LibsvmOptions::default());
        assert!(fits.is_ok(), "2 x 2^30 weights fit: {:?}", fits.err());
        let err = parse_err("0 3000000000:1\n", LibsvmOptions::default());
        assert!(matches!(err, DataError::TooLarge { .. }), "{err}");

        let zero = LibsvmOptions {
            num_features: Some(0),
            num_classes: None,
        };
        assert!(matches!(
            parse_err("0 1:1\n", zero),
            DataError::InvalidArgument { .. }
        ));
        let zero = LibsvmOptions {
            num_features: None,
            num_classes: Some(0),
        };
        assert!(matches!(
            parse_err("0 1:1\n", zero),
            DataError::InvalidArgument { .. }
        ));
    }

    #[test]
    fn files_plain_gzip_missing_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let text = "1 1:0.5 3:2\n0 2:1\n";
        let plain = dir.path().join("a.txt");
        std::fs::write(&plain, text).unwrap();
        let packed = dir.path().join("a.svm"); // gzip, detected by content
        std::fs::write(&packed, super::super::gzip::tests::gzip(text.as_bytes())).unwrap();
        let a = load_libsvm(&plain, &LibsvmOptions::default()).unwrap();
        let b = load_libsvm(&packed, &LibsvmOptions::default()).unwrap();
        assert_eq!(a.features, b.features);
        assert_eq!(a.labels, b.labels);
        assert_eq!(b.source, packed.display().to_string());

        let missing = dir.path().join("missing.libsvm");
        let err = load_libsvm(&missing, &LibsvmOptions::default()).unwrap_err();
        assert!(matches!(err, DataError::NotFound { .. }));
        assert!(err.to_string().contains("missing.libsvm"));

        let corrupt = dir.path().join("corrupt.gz");
        let mut bytes = super::super::gzip::tests::gzip(text.repeat(100).as_bytes());
        let middle = bytes.len() / 2;
        bytes.truncate(middle);
        std::fs::write(&corrupt, bytes).unwrap();
        let err = load_libsvm(&corrupt, &LibsvmOptions::default()).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }), "{err}");
        assert!(err.to_string().starts_with("cannot read "));
        assert!(err.to_string().contains("corrupt.gz"));

        // A directory is not a readable file.
        let err = load_libsvm(dir.path(), &LibsvmOptions::default()).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }), "{err}");
    }

    #[test]
    fn real_digits_when_present() {
        let path = Path::new("/work/shared/data/digits/digits.libsvm");
        if !path.exists() {
            println!("skipping: {} is absent", path.display());
            return;
        }
        let d = load_libsvm(path, &LibsvmOptions::default()).unwrap();
        assert_eq!(d.rows(), 1797);
        assert_eq!(d.num_features, 64);
        assert_eq!(d.num_classes, 10);
        // First line: "0 3:5 4:13 5:9 6:1 11:13 ..."
        assert_eq!(d.labels[0], 0);
        assert_eq!(&d.row(0)[..7], &[0.0, 0.0, 5.0, 13.0, 9.0, 1.0, 0.0]);
        assert_eq!(d.row(0)[10], 13.0);
        let nonzero = d.features.iter().filter(|&&v| v != 0.0).count();
        assert_eq!(nonzero, 58_736);
        let mut counts = [0usize; 10];
        for &label in &d.labels {
            counts[label as usize] += 1;
        }
        assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_libsvm_reader(Cursor::new(&bytes), Path::new("p"), &LibsvmOptions::default());
            let opts = LibsvmOptions { num_features: Some(3), num_classes: Some(2) };
            let _ = parse_libsvm_reader(Cursor::new(&bytes), Path::new("p"), &opts);
        }

        #[test]
        fn libsvm_like_text_never_panics(
            // Whitespace after every piece keeps indices to at most 3 digits, so no
            // case asks for a huge dense matrix.
            pieces in proptest::collection::vec(
                "([0-9]{1,3}|[-+.e:#a-z]{1,3}|[0-9]{1,3}:[-+0-9.einaf]{0,5})[ \t\n]",
                0..64,
            )
        ) {
            let text = pieces.concat();
            let _ = parse_libsvm_reader(Cursor::new(text.as_bytes()), Path::new("p"), &LibsvmOptions::default());
        }

        #[test]
        fn well_formed_rows_round_trip(
            rows in proptest::collection::vec(
                (0u32..5, proptest::collection::btree_map(1u64..20, -100i32..100, 0..6)),
                1..20,
            )
        ) {
            let mut text = String::new();
            for (label, entries) in &rows {
                text.push_str(&label.to_string());
                for (index, value) in entries {
                    text.push_str(&format!(" {index}:{value}"));
                }
                text.push('\n');
            }
            let opts = LibsvmOptions { num_features: Some(20), num_classes: Some(5) };
            let d = parse_libsvm_reader(Cursor::new(text.as_bytes()), Path::new("p"), &opts).unwrap();
            prop_assert_eq!(d.rows(), rows.len());
            for (r, (label, entries)) in rows.iter().enumerate() {
                prop_assert_eq!(d.labels[r], *label);
                let mut expected = [0.0f32; 20];
                for (index, value) in entries {
                    expected[(*index - 1) as usize] = *value as f32;
                }
                prop_assert_eq!(d.row(r), &expected[..]);
            }
        }
    }
}
