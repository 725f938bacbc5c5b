//! Property tests of the docword and vocabulary parsers: any text is parsed into a
//! well-formed corpus (or vocabulary) or refused with a line of the file; a generated
//! corpus parses to exactly its entries, whatever the order of its lines; one broken line
//! of it is the line the error names.

use super::*;
use crate::data::broken_lines::{refused_at, with_line_replaced};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn parse(text: &str) -> Result<DocwordCounts, DataError> {
    parse_docword_reader(text.as_bytes(), Path::new("docword.txt"))
}

/// A corpus: D, W and its (document, word) → count entries, 0-based.
type Entries = BTreeMap<(u32, u32), u32>;

/// A valid docword text and what it holds: its entry lines in a shuffled order, some
/// followed by a blank line, and D with a few empty documents past the last one used.
fn docword_file() -> impl Strategy<Value = (String, u32, u32, Entries)> {
    (1u32..8, 1u32..12)
        .prop_flat_map(|(docs, words)| {
            (
                Just(docs),
                Just(words),
                proptest::collection::btree_map((0..docs, 0..words), 1u32..6, 0..40),
                any::<u64>(),
            )
        })
        .prop_map(|(docs, words, entries, seed)| {
            let mut lines: Vec<(u32, u32, u32)> =
                entries.iter().map(|(&(d, w), &c)| (d, w, c)).collect();
            lines.sort_by_key(|&(d, w, _)| harp::mix64(seed ^ (u64::from(d) << 32 | u64::from(w))));
            let mut text = format!("{docs}\n{words}\n{}\n", lines.len());
            for (n, (d, w, c)) in lines.iter().enumerate() {
                text.push_str(&format!("{} {}\t{c}\n", d + 1, w + 1));
                if n % 4 == 3 {
                    text.push('\n');
                }
            }
            (text, docs, words, entries)
        })
}

/// What a corpus's counts must be: documents in order, words ascending in each.
fn expected(docs: u32, words: u32, entries: &Entries) -> DocwordCounts {
    let mut doc_offsets = vec![0];
    for d in 0..docs {
        doc_offsets.push(entries.range((d, 0)..(d + 1, 0)).count() + doc_offsets[d as usize]);
    }
    DocwordCounts {
        doc_offsets,
        words: entries.keys().map(|&(_, w)| w).collect(),
        counts: entries.values().copied().collect(),
        num_words: words as usize,
    }
}

/// A docword text of random lines: a header of small numbers whose NNZ mostly counts the
/// lines, and entry lines of mostly small numbers (now and then junk, a field short or one
/// too many, a blank line), so that both the accepted and every refused path are reached.
fn docword_noise() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        12 => (0u32..5).prop_map(|n| n.to_string()),
        1 => prop_oneof![Just("x"), Just("-1"), Just("4294967296"), Just("1.0")]
            .prop_map(String::from),
    ];
    let line = prop_oneof![
        10 => proptest::collection::vec(number.clone(), 3),
        1 => proptest::collection::vec(number.clone(), 0..5),
    ];
    (
        (1u32..5, 1u32..5),
        proptest::collection::vec(line, 0..8),
        prop_oneof![6 => Just(None), 1 => (0usize..9).prop_map(Some)],
        prop_oneof![10 => Just(None), 1 => number.prop_map(Some)],
    )
        .prop_map(|((docs, words), lines, nnz, junk_header)| {
            let nnz = nnz.unwrap_or_else(|| lines.iter().filter(|l| !l.is_empty()).count());
            let mut text = match junk_header {
                None => format!("{docs}\n{words}\n{nnz}\n"),
                Some(junk) => format!("{junk}\n{words}\n"),
            };
            for fields in lines {
                text.push_str(&fields.join(" "));
                text.push('\n');
            }
            text
        })
}

proptest! {
    #[test]
    fn any_text_is_a_well_formed_corpus_or_refused_with_its_line(
        text in prop_oneof![docword_noise(), "[0-9 a-z\\-\\n]{0,200}"],
    ) {
        match parse(&text) {
            Ok(counts) => {
                let offsets = &counts.doc_offsets;
                prop_assert!(offsets.len() >= 2);
                prop_assert_eq!(offsets[0], 0);
                prop_assert!(offsets.windows(2).all(|o| o[0] <= o[1]));
                prop_assert_eq!(*offsets.last().unwrap(), counts.words.len());
                prop_assert_eq!(counts.words.len(), counts.counts.len());
                prop_assert!(counts.words.iter().all(|&w| (w as usize) < counts.num_words));
                prop_assert!(counts.counts.iter().all(|&c| c >= 1));
                for doc in offsets.windows(2) {
                    let words = &counts.words[doc[0]..doc[1]];
                    prop_assert!(words.windows(2).all(|w| w[0] < w[1]));
                }
            }
            Err(DataError::Syntax { line, .. }) => {
                prop_assert!(line >= 1 && line <= text.lines().count().max(1));
            }
            Err(DataError::ShapeMismatch { message, .. }) => {
                prop_assert!(message.starts_with("line "), "{}", message);
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn a_valid_corpus_parses_to_its_entries_in_any_line_order(
        (text, docs, words, entries) in docword_file(),
    ) {
        prop_assert_eq!(parse(&text).unwrap(), expected(docs, words, &entries));
    }

    #[test]
    fn one_broken_entry_line_is_named(
        (text, docs, words, entries) in docword_file(),
        pick in any::<prop::sample::Index>(),
        how in 0usize..6,
    ) {
        prop_assume!(!entries.is_empty());
        let lines: Vec<&str> = text.split('\n').collect();
        // Lines 4 on are entries (or blank).
        let entry_lines: Vec<usize> =
            (3..lines.len()).filter(|&n| !lines[n].trim().is_empty()).collect();
        let broken = entry_lines[pick.index(entry_lines.len())];
        let fields: Vec<&str> = lines[broken].split_whitespace().collect();
        let replaced = match how {
            0 => format!("{} {}", fields[0], fields[1]),
            1 => format!("{} {} {}", docs + 1, fields[1], fields[2]),
            2 => format!("{} {} {}", fields[0], words + 1, fields[2]),
            3 => format!("{} {} 0", fields[0], fields[1]),
            4 => format!("0 {} {}", fields[1], fields[2]),
            _ => format!("{} w{} {}", fields[0], fields[1], fields[2]),
        };
        let changed = with_line_replaced(&lines, broken, replaced);
        refused_at(parse(&changed), broken + 1)?;
    }

    #[test]
    fn a_duplicate_entry_names_both_lines(
        (text, _docs, _words, entries) in docword_file(),
        pick in any::<prop::sample::Index>(),
    ) {
        prop_assume!(!entries.is_empty());
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let entry_lines: Vec<usize> =
            (3..lines.len()).filter(|&n| !lines[n].trim().is_empty()).collect();
        let copied = entry_lines[pick.index(entry_lines.len())];
        // The same pair again at the end, with NNZ one higher.
        let nnz: usize = lines[2].parse().unwrap();
        lines[2] = (nnz + 1).to_string();
        lines.push(lines[copied].clone());
        let error = parse(&(lines.join("\n") + "\n")).unwrap_err();
        let DataError::Syntax { line, message, .. } = &error else {
            return Err(TestCaseError::fail(format!("{error:?}")));
        };
        prop_assert_eq!(*line, lines.len());
        let first = format!("(first on line {})", copied + 1);
        prop_assert!(message.contains(&first), "{}", message);
    }

    #[test]
    fn a_vocabulary_is_its_words_or_refused_with_its_line(
        words in proptest::collection::vec("[a-z]{1,4}", 0..8),
        blank in proptest::option::of(any::<prop::sample::Index>()),
        trailing_blanks in 0usize..3,
        expected in 0usize..9,
    ) {
        let mut lines: Vec<String> = words.iter().map(|w| format!(" {w}\t")).collect();
        if let Some(at) = blank {
            lines.insert(at.index(lines.len() + 1), String::new());
        }
        lines.extend(std::iter::repeat_n(String::new(), trailing_blanks));
        let text = lines.join("\n");
        let parsed = parse_vocab_reader(
            text.as_bytes(),
            Path::new("vocab.txt"),
            expected,
            Path::new("docword.txt"),
        );
        let inner_blank = blank.is_some_and(|at| at.index(words.len() + 1) < words.len());
        match parsed {
            Ok(vocab) => {
                prop_assert!(!inner_blank);
                prop_assert_eq!(vocab, words);
            }
            Err(DataError::Syntax { line, message, .. }) => {
                prop_assert!(inner_blank || words.len() > expected, "{}", message);
                prop_assert!(line >= 1 && line <= lines.len());
            }
            Err(DataError::ShapeMismatch { .. }) => {
                prop_assert!(!inner_blank && words.len() != expected);
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
    }
}
