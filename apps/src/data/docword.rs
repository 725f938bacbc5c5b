//! Bag-of-words corpora in the UCI "Bag of Words" layout: `docword.txt` (plain or gzip)
//! and `vocab.txt`, the input of `harp run lda`.
//!
//! `docword.txt`: line 1 is D (documents), line 2 is W (vocabulary size), line 3 is NNZ
//! (the number of entry lines that follow); then NNZ lines `docID wordID count`, ids
//! 1-based, separated by whitespace. Lines are usually sorted by document then word; the
//! loader does not require it. A document with no entry line is an empty document (it
//! still counts in D). `vocab.txt`: one word per line, line `i` is word id `i`.
//!
//! Refused, naming the file and the line: a header line that is not a positive integer
//! (D and W must be at least 1; NNZ may be 0), an entry line without exactly three
//! non-negative integers, a document id 0 or above D, a word id 0 or above W, a count of
//! 0, a second entry for the same (document, word) pair (naming the first line), more or
//! fewer entry lines than NNZ, a D that leaves more than [`MAX_EMPTY_DOCUMENTS`] documents
//! without an entry, a vocabulary whose line count is not W, and an empty word.
//! Blank lines are skipped (they do not count as entries).

use super::error::{non_negative_integer, quote, DataError};
use super::gzip;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// How many documents of a corpus may be empty beyond its entry lines: D may exceed NNZ
/// by at most this. Each document costs memory however empty it is (offsets here, topic
/// counts in LDA), so an unchecked D of 2^32 - 1 in a three-line file would ask for tens
/// of gigabytes.
pub const MAX_EMPTY_DOCUMENTS: usize = 1 << 20;

/// Entry lines and vocabulary words reserved from a header's counts before they arrive;
/// larger inputs grow as they are read.
const PRESIZED_ENTRIES: u64 = 1 << 20;
const PRESIZED_WORDS: usize = 1 << 16;

/// A corpus: documents as sparse word counts, and the vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub struct Corpus {
    /// Entries of document `d` are `doc_offsets[d]..doc_offsets[d + 1]` (D + 1 offsets).
    pub doc_offsets: Vec<usize>,
    /// 0-based word id of each entry, ascending within a document.
    pub words: Vec<u32>,
    /// Count (at least 1) of each entry.
    pub counts: Vec<u32>,
    /// Word `w` (0-based) is `vocab[w]`; W words.
    pub vocab: Vec<String>,
    /// Where the corpus came from, for messages.
    pub source: String,
}

impl Corpus {
    /// D, the number of documents (empty ones included).
    pub fn num_docs(&self) -> usize {
        self.doc_offsets.len().saturating_sub(1)
    }

    /// W, the vocabulary size.
    pub fn num_words(&self) -> usize {
        self.vocab.len()
    }

    /// The number of tokens: the sum of every count.
    pub fn num_tokens(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// The (word, count) entries of document `d` (empty past the last document).
    pub fn doc(&self, d: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        let range = match (self.doc_offsets.get(d), self.doc_offsets.get(d + 1)) {
            (Some(&start), Some(&end)) => start..end,
            _ => 0..0,
        };
        self.words[range.clone()]
            .iter()
            .copied()
            .zip(self.counts[range].iter().copied())
    }

    /// Tokens of each word over the whole corpus (W values).
    pub fn tokens_per_word(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.num_words()];
        for (&w, &c) in self.words.iter().zip(&self.counts) {
            out[w as usize] += u64::from(c);
        }
        out
    }
}

/// The two files of a corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocwordPaths {
    pub docword: PathBuf,
    pub vocab: PathBuf,
}

impl DocwordPaths {
    /// The files in `dir`: `docword.txt` or `docword.txt.gz`, else the one
    /// `docword.NAME.txt[.gz]` there is (the UCI collections' names); and `vocab.txt`, else
    /// `vocab.NAME.txt` for the same NAME.
    pub fn in_dir(dir: &Path) -> Result<Self, DataError> {
        let layout = |message: String| DataError::DirectoryLayout {
            path: dir.to_path_buf(),
            message,
        };
        let entries = std::fs::read_dir(dir).map_err(|e| DataError::from_io(dir, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| DataError::from_io(dir, e))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        let has = |name: &str| names.iter().any(|n| n == name);
        let (docword, middle) = if has("docword.txt") {
            ("docword.txt".to_string(), String::new())
        } else if has("docword.txt.gz") {
            ("docword.txt.gz".to_string(), String::new())
        } else {
            let named: Vec<&String> = names
                .iter()
                .filter(|n| {
                    n.starts_with("docword.") && (n.ends_with(".txt") || n.ends_with(".txt.gz"))
                })
                .collect();
            match named.as_slice() {
                [one] => {
                    let middle = one
                        .trim_start_matches("docword.")
                        .trim_end_matches(".gz")
                        .trim_end_matches(".txt");
                    (one.to_string(), format!("{middle}."))
                }
                [] => return Err(layout("no docword.txt or docword.txt.gz here".into())),
                many => {
                    return Err(layout(format!(
                        "several docword files ({}); name one with --docword",
                        many.iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        };
        let vocab = [format!("vocab.{middle}txt"), "vocab.txt".to_string()]
            .into_iter()
            .find(|name| has(name))
            .ok_or_else(|| layout(format!("{docword} is here but no vocab.{middle}txt")))?;
        Ok(Self {
            docword: dir.join(docword),
            vocab: dir.join(vocab),
        })
    }
}

/// Loads the corpus in directory `dir` (see [`DocwordPaths::in_dir`]).
pub fn load_docword_dir(dir: &Path) -> Result<Corpus, DataError> {
    load_docword(&DocwordPaths::in_dir(dir)?)
}

/// Loads a `docword` file (plain or gzip) and its vocabulary.
pub fn load_docword(paths: &DocwordPaths) -> Result<Corpus, DataError> {
    let reader = gzip::open_reader(&paths.docword)?;
    let counts = parse_docword_reader(reader, &paths.docword)?;
    let vocab = parse_vocab_reader(
        gzip::open_reader(&paths.vocab)?,
        &paths.vocab,
        counts.num_words,
        &paths.docword,
    )?;
    Ok(Corpus {
        doc_offsets: counts.doc_offsets,
        words: counts.words,
        counts: counts.counts,
        vocab,
        source: paths.docword.display().to_string(),
    })
}

/// What a `docword` file holds, before its vocabulary is read.
#[derive(Clone, Debug, PartialEq)]
pub struct DocwordCounts {
    /// D + 1 offsets into `words`/`counts` (see [`Corpus::doc_offsets`]).
    pub doc_offsets: Vec<usize>,
    pub words: Vec<u32>,
    pub counts: Vec<u32>,
    /// W as the header declares it.
    pub num_words: usize,
}

/// One entry line: 0-based ids, the count, and its 1-based line number.
struct Entry {
    doc: u32,
    word: u32,
    count: u32,
    line: usize,
}

/// Parses a `docword` text from `reader`; `name` is the file named in errors.
pub fn parse_docword_reader<R: BufRead>(
    reader: R,
    name: &Path,
) -> Result<DocwordCounts, DataError> {
    let syntax = |line: usize, message: String| DataError::Syntax {
        path: name.to_path_buf(),
        line,
        message,
    };
    let mut header: Vec<(u64, usize)> = Vec::with_capacity(3);
    let mut entries: Vec<Entry> = Vec::new();
    let mut sorted = true;
    let mut last_line = 0;
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        last_line = number;
        let line = line.map_err(|source| DataError::Io {
            path: name.to_path_buf(),
            source,
        })?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if header.len() < 3 {
            let what = ["D (documents)", "W (vocabulary size)", "NNZ (entry lines)"][header.len()];
            let value: u64 = text.parse().map_err(|_| {
                syntax(
                    number,
                    format!(
                        "expected the header's {what}, a non-negative integer, got {:?}",
                        quote(text)
                    ),
                )
            })?;
            if value == 0 && header.len() < 2 {
                return Err(syntax(number, format!("the header's {what} is 0")));
            }
            if header.len() < 2 && value > u64::from(u32::MAX) {
                return Err(syntax(
                    number,
                    format!("the header's {what} {value} is above 2^32 - 1"),
                ));
            }
            header.push((value, number));
            if header.len() == 3 {
                let nnz = header[2].0;
                // Pre-sized from the header only up to a bound: a few bytes may claim
                // billions of lines. Past it the vector grows as lines really arrive.
                entries.reserve(usize::try_from(nnz.min(PRESIZED_ENTRIES)).unwrap_or(0));
            }
            continue;
        }
        let (docs, words, nnz) = (header[0].0, header[1].0, header[2]);
        if entries.len() as u64 == nnz.0 {
            return Err(syntax(
                number,
                format!(
                    "more entry lines than the {} the header declares (line {})",
                    nnz.0, nnz.1
                ),
            ));
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [doc, word, count] = fields.as_slice() else {
            return Err(syntax(
                number,
                format!("expected `docID wordID count`, got {:?}", quote(text)),
            ));
        };
        let integer = |what: &str, field: &str| {
            non_negative_integer(what, field).map_err(|message| syntax(number, message))
        };
        let (doc, word, count) = (
            integer("document id", doc)?,
            integer("word id", word)?,
            integer("count", count)?,
        );
        if doc == 0 || doc > docs {
            return Err(syntax(
                number,
                format!("document id {doc} out of range (valid: 1..={docs}, the header's D)"),
            ));
        }
        if word == 0 || word > words {
            return Err(syntax(
                number,
                format!("word id {word} out of range (valid: 1..={words}, the header's W)"),
            ));
        }
        if count == 0 {
            return Err(syntax(number, "the count is 0".to_string()));
        }
        let count = u32::try_from(count)
            .map_err(|_| syntax(number, format!("the count {count} is above 2^32 - 1")))?;
        // doc <= D and word <= W, both checked to fit in u32 with the header.
        let entry = Entry {
            doc: (doc - 1) as u32,
            word: (word - 1) as u32,
            count,
            line: number,
        };
        if let Some(previous) = entries.last() {
            match (previous.doc, previous.word).cmp(&(entry.doc, entry.word)) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Err(duplicate(name, previous, &entry)),
                std::cmp::Ordering::Greater => sorted = false,
            }
        }
        entries.push(entry);
    }
    if header.len() < 3 {
        return Err(syntax(
            last_line.max(1),
            format!(
                "the file ends inside its header (D, W and NNZ on lines 1 to 3; found {} of them)",
                header.len()
            ),
        ));
    }
    let (docs, words, nnz) = (header[0].0 as usize, header[1].0 as usize, header[2]);
    if (entries.len() as u64) < nnz.0 {
        return Err(DataError::ShapeMismatch {
            path: name.to_path_buf(),
            message: format!(
                "line {}: the header declares {} entry lines (NNZ), the file has {}",
                nnz.1,
                nnz.0,
                entries.len()
            ),
        });
    }
    let empty_docs = docs.saturating_sub(entries.len());
    if empty_docs > MAX_EMPTY_DOCUMENTS {
        return Err(DataError::ShapeMismatch {
            path: name.to_path_buf(),
            message: format!(
                "line {}: the header declares D = {docs} documents, but only {} entry lines \
                 follow, so at least {empty_docs} documents would be empty (at most \
                 {MAX_EMPTY_DOCUMENTS} may be); is D right?",
                header[0].1,
                entries.len()
            ),
        });
    }
    if !sorted {
        entries.sort_by_key(|e| (e.doc, e.word));
        if let Some(pair) = entries
            .windows(2)
            .find(|p| (p[0].doc, p[0].word) == (p[1].doc, p[1].word))
        {
            let (first, second) = if pair[0].line < pair[1].line {
                (&pair[0], &pair[1])
            } else {
                (&pair[1], &pair[0])
            };
            return Err(duplicate(name, first, second));
        }
    }
    let mut doc_offsets = Vec::with_capacity(docs + 1);
    let mut next = 0;
    doc_offsets.push(0);
    for d in 0..docs as u32 {
        while entries.get(next).is_some_and(|e| e.doc == d) {
            next += 1;
        }
        doc_offsets.push(next);
    }
    Ok(DocwordCounts {
        doc_offsets,
        words: entries.iter().map(|e| e.word).collect(),
        counts: entries.iter().map(|e| e.count).collect(),
        num_words: words,
    })
}

fn duplicate(name: &Path, first: &Entry, second: &Entry) -> DataError {
    DataError::Syntax {
        path: name.to_path_buf(),
        line: second.line,
        message: format!(
            "document {} has word {} a second time (first on line {})",
            first.doc + 1,
            first.word + 1,
            first.line
        ),
    }
}

/// Parses a vocabulary of `expected` words (one per line) from `reader`; `name` is the file
/// named in errors, `docword` the file whose header declared `expected`.
pub fn parse_vocab_reader<R: BufRead>(
    reader: R,
    name: &Path,
    expected: usize,
    docword: &Path,
) -> Result<Vec<String>, DataError> {
    let mut vocab = Vec::with_capacity(expected.min(PRESIZED_WORDS));
    let mut trailing_blank: Option<usize> = None;
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|source| DataError::Io {
            path: name.to_path_buf(),
            source,
        })?;
        let word = line.trim();
        if word.is_empty() {
            trailing_blank.get_or_insert(number);
            continue;
        }
        if let Some(blank) = trailing_blank {
            return Err(DataError::Syntax {
                path: name.to_path_buf(),
                line: blank,
                message: "an empty word (line numbers are word ids)".into(),
            });
        }
        if vocab.len() == expected {
            return Err(DataError::Syntax {
                path: name.to_path_buf(),
                line: number,
                message: format!(
                    "more than the {expected} words {}'s header declares (W)",
                    docword.display()
                ),
            });
        }
        vocab.push(word.to_string());
    }
    if vocab.len() != expected {
        return Err(DataError::ShapeMismatch {
            path: name.to_path_buf(),
            message: format!(
                "{} words (lines), but {}'s header (line 2) declares W = {expected}",
                vocab.len(),
                docword.display()
            ),
        });
    }
    Ok(vocab)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DocwordCounts, DataError> {
        parse_docword_reader(text.as_bytes(), Path::new("docword.txt"))
    }

    fn vocab(text: &str, expected: usize) -> Result<Vec<String>, DataError> {
        parse_vocab_reader(
            text.as_bytes(),
            Path::new("vocab.txt"),
            expected,
            Path::new("docword.txt"),
        )
    }

    #[test]
    fn a_document_count_far_beyond_the_entries_is_refused_before_allocating() {
        // Three header lines claiming 2^32 - 1 documents: refused, naming D's line.
        let err = parse("4294967295\n10\n1\n1 1 1\n").unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, DataError::ShapeMismatch { .. })
                && text.contains("line 1")
                && text.contains("D = 4294967295"),
            "{text}"
        );
        // The bound itself is accepted: one entry and MAX_EMPTY_DOCUMENTS empty documents.
        let docs = MAX_EMPTY_DOCUMENTS + 1;
        let counts = parse(&format!("{docs}\n3\n1\n2 3 1\n")).unwrap();
        assert_eq!(counts.doc_offsets.len(), docs + 1);
        assert_eq!(&counts.doc_offsets[..3], &[0, 0, 1]);
        let err = parse(&format!("{}\n3\n1\n2 3 1\n", docs + 1)).unwrap_err();
        assert!(err.to_string().contains("is D right?"), "{err}");
    }

    #[test]
    fn parses_documents_in_order_with_empty_ones() {
        // Document 2 has no entries; the lines are out of order.
        let counts = parse("3\n4\n4\n3 1 2\n1 2 1\n1 4 5\n3 3 1\n").unwrap();
        assert_eq!(counts.doc_offsets, vec![0, 2, 2, 4]);
        assert_eq!(counts.words, vec![1, 3, 0, 2]);
        assert_eq!(counts.counts, vec![1, 5, 2, 1]);
        assert_eq!(counts.num_words, 4);
        let empty = parse("2\n5\n0\n").unwrap();
        assert_eq!(empty.doc_offsets, vec![0, 0, 0]);
        assert!(empty.words.is_empty());
    }

    #[test]
    fn bad_docword_lines_name_the_file_and_line() {
        for (text, needle) in [
            ("x\n2\n1\n1 1 1\n", "line 1: expected the header's D"),
            (
                "0\n2\n1\n1 1 1\n",
                "line 1: the header's D (documents) is 0",
            ),
            (
                "2\n0\n1\n1 1 1\n",
                "line 2: the header's W (vocabulary size) is 0",
            ),
            ("2\n2\n-1\n", "line 3: expected the header's NNZ"),
            ("2\n2\n", "line 2: the file ends inside its header"),
            ("2\n2\n1\n1 1\n", "line 4: expected `docID wordID count`"),
            (
                "2\n2\n1\n1 1 1 1\n",
                "line 4: expected `docID wordID count`",
            ),
            ("2\n2\n1\n1 a 1\n", "line 4: the word id \"a\" is not"),
            ("2\n2\n1\n1 1 -3\n", "line 4: the count \"-3\" is not"),
            (
                "2\n2\n1\n0 1 1\n",
                "line 4: document id 0 out of range (valid: 1..=2",
            ),
            ("2\n2\n1\n3 1 1\n", "line 4: document id 3 out of range"),
            (
                "2\n2\n1\n1 0 1\n",
                "line 4: word id 0 out of range (valid: 1..=2",
            ),
            ("2\n2\n1\n1 3 1\n", "line 4: word id 3 out of range"),
            ("2\n2\n1\n1 1 0\n", "line 4: the count is 0"),
            (
                "2\n2\n1\n1 1 1\n2 2 1\n",
                "line 5: more entry lines than the 1 the header declares (line 3)",
            ),
            (
                "2\n2\n3\n1 1 1\n",
                "line 3: the header declares 3 entry lines (NNZ), the file has 1",
            ),
            (
                "2\n2\n2\n1 2 1\n1 2 4\n",
                "line 5: document 1 has word 2 a second time (first on line 4)",
            ),
            (
                "2\n2\n3\n1 2 1\n2 1 1\n1 2 4\n",
                "line 6: document 1 has word 2 a second time (first on line 4)",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("docword.txt"), "{error}");
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_vocabulary_must_have_w_words() {
        assert_eq!(vocab("a\nb\n\n", 2).unwrap(), vec!["a", "b"]);
        for (text, expected, needle) in [
            ("a\nb\n", 3, "vocab.txt: shape mismatch: 2 words (lines), but docword.txt's header (line 2) declares W = 3"),
            ("a\nb\nc\n", 2, "vocab.txt: line 3: more than the 2 words docword.txt's header declares"),
            ("a\n\nb\n", 2, "vocab.txt: line 2: an empty word"),
        ] {
            let error = vocab(text, expected).unwrap_err().to_string();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }

    #[test]
    fn loads_a_directory_plain_or_gzip_and_counts_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let text = "2\n3\n3\n1 1 2\n1 3 1\n2 2 4\n";
        std::fs::write(
            dir.path().join("docword.txt.gz"),
            super::super::gzip::tests::gzip(text.as_bytes()),
        )
        .unwrap();
        std::fs::write(dir.path().join("vocab.txt"), "apple\nbanana\ncherry\n").unwrap();
        let corpus = load_docword_dir(dir.path()).unwrap();
        assert_eq!(corpus.num_docs(), 2);
        assert_eq!(corpus.num_words(), 3);
        assert_eq!(corpus.num_tokens(), 7);
        assert_eq!(corpus.doc(0).collect::<Vec<_>>(), vec![(0, 2), (2, 1)]);
        assert_eq!(corpus.doc(1).collect::<Vec<_>>(), vec![(1, 4)]);
        assert_eq!(corpus.tokens_per_word(), vec![2, 4, 1]);

        let named = tempfile::tempdir().unwrap();
        std::fs::write(named.path().join("docword.kos.txt"), text).unwrap();
        std::fs::write(named.path().join("vocab.kos.txt"), "a\nb\nc\n").unwrap();
        let paths = DocwordPaths::in_dir(named.path()).unwrap();
        assert!(paths.vocab.ends_with("vocab.kos.txt"));
        assert_eq!(load_docword(&paths).unwrap().vocab, vec!["a", "b", "c"]);

        let missing = tempfile::tempdir().unwrap();
        let error = load_docword_dir(missing.path()).unwrap_err().to_string();
        assert!(error.contains("no docword.txt"), "{error}");
        std::fs::write(missing.path().join("docword.txt"), text).unwrap();
        let error = load_docword_dir(missing.path()).unwrap_err().to_string();
        assert!(error.contains("no vocab.txt"), "{error}");
    }

    #[test]
    fn a_bad_vocabulary_in_a_directory_names_the_vocabulary_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("docword.txt"), "1\n3\n1\n1 3 1\n").unwrap();
        std::fs::write(dir.path().join("vocab.txt"), "a\nb\n").unwrap();
        let error = load_docword_dir(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("vocab.txt") && error.contains("W = 3"),
            "{error}"
        );
    }
}

#[cfg(test)]
#[path = "docword_props.rs"]
mod props;
