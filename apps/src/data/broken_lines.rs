//! Test support for the text loaders' property tests: a valid file with one line broken,
//! and the check that the loader refuses it naming that line.

use super::DataError;
use proptest::test_runner::TestCaseError;

/// `lines` joined by newlines, with line `at` (0-based) replaced by `replaced`.
pub(crate) fn with_line_replaced(lines: &[&str], at: usize, replaced: String) -> String {
    let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    changed[at] = replaced;
    changed.join("\n")
}

/// `parsed` must be a syntax error naming line `line` (1-based).
pub(crate) fn refused_at<T: std::fmt::Debug>(
    parsed: Result<T, DataError>,
    line: usize,
) -> Result<(), TestCaseError> {
    match parsed {
        Err(DataError::Syntax { line: named, .. }) if named == line => Ok(()),
        other => Err(TestCaseError::fail(format!(
            "line {line} was broken: {other:?}"
        ))),
    }
}
