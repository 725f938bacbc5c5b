//! How LDA's data is cut: word groups (rows of the word–topic table), vocabulary blocks
//! (contiguous runs of rows, one per executor, balanced by token count) and document
//! ranges (contiguous, balanced by token count). Every function is a pure function of the
//! corpus and the executor count, so every process computes the same layout.

use std::ops::Range;

/// Target values per word–topic row: a row is `G·K` `i64`s, so about 16 KiB.
const ROW_VALUES: usize = 2048;
/// At least this many rows when the vocabulary allows, so blocks can be balanced for up to
/// a few dozen executors.
const MIN_ROWS: usize = 256;

/// Words per row of the word–topic table: row `r` holds words `r·G .. (r+1)·G`, word-major
/// (`K` counts per word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordRows {
    words_per_row: usize,
    vocab: usize,
    topics: usize,
}

impl WordRows {
    /// `G = clamp(⌈V / 256⌉, 1, max(1, 2048 / K))`: at least 256 rows when `V` is large
    /// enough, rows of at most about 2048 values.
    pub fn new(vocab: usize, topics: usize) -> Self {
        let cap = (ROW_VALUES / topics.max(1)).max(1);
        let words_per_row = vocab.div_ceil(MIN_ROWS).clamp(1, cap);
        Self {
            words_per_row,
            vocab,
            topics,
        }
    }

    /// G.
    pub fn words_per_row(&self) -> usize {
        self.words_per_row
    }

    /// Values per row (`G·K`).
    pub fn width(&self) -> usize {
        self.words_per_row * self.topics
    }

    /// Rows of the table (`⌈V / G⌉`; the last may hold fewer than `G` words, its other
    /// values stay 0).
    pub fn rows(&self) -> usize {
        self.vocab.div_ceil(self.words_per_row)
    }

    /// The row holding word `w`.
    pub fn row_of(&self, word: u32) -> usize {
        word as usize / self.words_per_row
    }

    /// The words of the rows `rows`.
    pub fn words_of(&self, rows: &Range<usize>) -> Range<u32> {
        let start = (rows.start * self.words_per_row).min(self.vocab);
        let end = (rows.end * self.words_per_row).min(self.vocab);
        start as u32..end as u32
    }
}

/// `parts` contiguous ranges of `0..weights.len()` whose weight sums are as even as
/// cutting at the cumulative quantiles makes them: range `p` ends at the first index
/// where the running sum reaches `(p + 1)/parts` of the total. Ranges may be empty (more
/// parts than items, or one very heavy item); together they cover every index once.
pub fn balanced_ranges(weights: &[u64], parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1);
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = 0;
    let mut running: u128 = 0;
    let mut index = 0;
    for p in 0..parts {
        let target = total * (p as u128 + 1) / parts as u128;
        if p + 1 == parts {
            index = weights.len();
        } else {
            while index < weights.len() && running < target {
                running += u128::from(weights[index]);
                index += 1;
            }
        }
        ranges.push(start..index);
        start = index;
    }
    ranges
}

/// The vocabulary blocks: `blocks` contiguous ranges of word-topic rows, balanced by the
/// tokens of their words.
pub fn word_blocks(rows: &WordRows, tokens_per_word: &[u64], blocks: usize) -> Vec<Range<usize>> {
    let mut per_row = vec![0u64; rows.rows()];
    for (w, &n) in tokens_per_word.iter().enumerate() {
        per_row[rows.row_of(w as u32)] += n;
    }
    balanced_ranges(&per_row, blocks)
}

/// The documents of each executor: contiguous ranges balanced by token count.
pub fn doc_ranges(tokens_per_doc: &[u64], executors: usize) -> Vec<Range<usize>> {
    balanced_ranges(tokens_per_doc, executors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_hold_groups_of_words() {
        let rows = WordRows::new(3194, 20);
        assert_eq!(rows.words_per_row(), 13);
        assert_eq!(rows.rows(), 246);
        assert_eq!(rows.width(), 260);
        assert_eq!(rows.row_of(12), 0);
        assert_eq!(rows.row_of(13), 1);
        assert_eq!(rows.words_of(&(245..246)), 3185..3194);
        // Large vocabularies: rows capped near 2048 values.
        let big = WordRows::new(1_000_000, 20);
        assert_eq!(big.words_per_row(), 102);
        // Tiny ones: a word per row.
        assert_eq!(WordRows::new(10, 20).rows(), 10);
        assert_eq!(WordRows::new(10_000, 5000).words_per_row(), 1);
    }

    #[test]
    fn balanced_ranges_cover_everything_once_and_balance() {
        let weights: Vec<u64> = (0..100).map(|i| (i % 7) + 1).collect();
        for parts in [1, 2, 3, 7, 100, 150] {
            let ranges = balanced_ranges(&weights, parts);
            assert_eq!(ranges.len(), parts);
            let mut next = 0;
            for r in &ranges {
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, weights.len());
        }
        let ranges = balanced_ranges(&weights, 4);
        let total: u64 = weights.iter().sum();
        for r in ranges {
            let sum: u64 = weights[r].iter().sum();
            assert!(sum.abs_diff(total / 4) <= 7, "{sum} vs {}", total / 4);
        }
        assert_eq!(balanced_ranges(&[], 3), vec![0..0, 0..0, 0..0]);
    }

    #[test]
    fn word_blocks_balance_tokens_over_rows() {
        let rows = WordRows::new(1000, 20); // 4 words per row, 250 rows
        let tokens: Vec<u64> = (0..1000).map(|w| if w < 100 { 50 } else { 1 }).collect();
        let blocks = word_blocks(&rows, &tokens, 2);
        // 5000 tokens in the first 100 words, 900 after: the first block stops early.
        assert_eq!(blocks[0].start, 0);
        assert!(blocks[0].end <= 25 + 1, "{blocks:?}");
        assert_eq!(blocks[1].end, 250);
    }
}
