//! Mutation fuzzing of the data loaders: bad input gets a typed error that names the file,
//! never a panic, and never an allocation out of proportion to the input.
//!
//! Each format starts from a small valid file, which must load. Every case then applies one
//! to four random mutations (flipped, deleted, duplicated and swapped bytes and lines, and
//! numbers replaced by edge values such as 0, -1, 2^32 - 1 and 2^64) and loads the result.
//! Whatever comes back is checked:
//! - an error names the file it is about, and a line number, if any, lies inside the file;
//! - a success holds what the loader promises (ids in range, offsets consistent, values
//!   finite and in range, no duplicates);
//! - no single allocation exceeds [`ALLOCATION_CAP`]. The test binary's allocator refuses
//!   larger requests, which aborts the process after printing the format and seed. A loader
//!   that sizes a buffer from a header it has not checked against the data (a few bytes
//!   claiming billions of documents) fails here, not on a user's machine.
//!
//! Replay a case with `HARP_FUZZ_SEED=<seed> cargo test -p harp-apps --test data_fuzz`; run
//! more cases with `HARP_FUZZ_CASES=<n>`.

use harp_apps::data::{
    load_idx_pair_from_bytes, parse_docword_reader, parse_libsvm_reader, parse_ratings_reader,
    parse_vocab_reader, DataError, Dataset, DocwordCounts, LibsvmOptions, RatingRange, RatingsData,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// The largest single allocation a loader may make for one of these inputs (each under a
/// few kilobytes).
const ALLOCATION_CAP: usize = 256 << 20;

const DEFAULT_CASES: u64 = 20_000;

thread_local! {
    /// The case this thread is loading, for the allocator's report: (format, seed).
    static CASE: Cell<Option<(&'static str, u64)>> = const { Cell::new(None) };
}

/// The system allocator, refusing any request above [`ALLOCATION_CAP`] made while a case
/// is loading.
struct CappedAllocator;

impl CappedAllocator {
    fn refuses(size: usize) -> bool {
        if size <= ALLOCATION_CAP {
            return false;
        }
        let Ok(Some((format, seed))) = CASE.try_with(Cell::get) else {
            return false;
        };
        // Formatted on the stack: allocating here would re-enter the allocator.
        let mut line = [0u8; 256];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        let _ = writeln!(
            cursor,
            "data_fuzz: the {format} loader asked for {size} bytes at once (cap {ALLOCATION_CAP}); \
             replay: HARP_FUZZ_SEED={seed} cargo test -p harp-apps --test data_fuzz"
        );
        let written = cursor.position() as usize;
        let _ = std::io::stderr().write_all(&line[..written]);
        true
    }
}

// SAFETY: every call is passed on to `System` unchanged, or refused with a null pointer,
// which `GlobalAlloc` allows.
unsafe impl GlobalAlloc for CappedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::refuses(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::refuses(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::refuses(new_size) {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: CappedAllocator = CappedAllocator;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// The seeds to run: `HARP_FUZZ_SEED` alone, or `0..HARP_FUZZ_CASES`.
fn seeds() -> std::ops::Range<u64> {
    match env_u64("HARP_FUZZ_SEED") {
        Some(seed) => seed..seed + 1,
        None => 0..env_u64("HARP_FUZZ_CASES").unwrap_or(DEFAULT_CASES),
    }
}

/// Numbers that sit on the loaders' edges.
const EDGE_NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "-0",
    "2",
    "255",
    "256",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e40",
    "-1e40",
    "nan",
    "inf",
    "0.5",
    "3.0",
    "1e-45",
];

/// Bits of syntax the formats use or might trip on.
const EDGE_TOKENS: &[&str] = &[
    " ", "\t", "\n", "\r\n", ":", ",", "#", "qid:3", "0x10", "\u{feff}", "é", "1:", ":1", "::",
    ",,",
];

/// A copy of `base` with one to four random mutations.
fn mutate(base: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut bytes = base.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = bytes.len();
        let at = if len == 0 {
            0
        } else {
            rng.random_range(0..len)
        };
        match rng.random_range(0..9) {
            0 if len > 0 => bytes[at] = rng.random(),
            1 if len > 0 => {
                let end = (at + rng.random_range(1..=16)).min(len);
                bytes.drain(at..end);
            }
            2 => bytes.truncate(at),
            3 => {
                let token = EDGE_TOKENS[rng.random_range(0..EDGE_TOKENS.len())];
                bytes.splice(at..at, token.bytes());
            }
            4 => replace_number(&mut bytes, rng),
            5 => duplicate_line(&mut bytes, rng),
            6 => swap_lines(&mut bytes, rng),
            7 => bytes.insert(at, 0xff),
            _ => replace_number(&mut bytes, rng),
        }
    }
    bytes
}

/// Replaces one run of digits (a random one) with an edge number.
fn replace_number(bytes: &mut Vec<u8>, rng: &mut StdRng) {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            runs.push(start..i);
        } else {
            i += 1;
        }
    }
    if runs.is_empty() {
        return;
    }
    let run = runs[rng.random_range(0..runs.len())].clone();
    let number = EDGE_NUMBERS[rng.random_range(0..EDGE_NUMBERS.len())];
    bytes.splice(run, number.bytes());
}

/// The byte ranges of `bytes`' lines, each with its newline.
fn line_ranges(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            ranges.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < bytes.len() {
        ranges.push(start..bytes.len());
    }
    ranges
}

fn duplicate_line(bytes: &mut Vec<u8>, rng: &mut StdRng) {
    let lines = line_ranges(bytes);
    if lines.is_empty() {
        return;
    }
    let line = lines[rng.random_range(0..lines.len())].clone();
    let copy = bytes[line.clone()].to_vec();
    let to = lines[rng.random_range(0..lines.len())].start;
    bytes.splice(to..to, copy);
}

fn swap_lines(bytes: &mut Vec<u8>, rng: &mut StdRng) {
    let lines = line_ranges(bytes);
    if lines.len() < 2 {
        return;
    }
    let mut order: Vec<std::ops::Range<usize>> = lines.clone();
    let (a, b) = (
        rng.random_range(0..order.len()),
        rng.random_range(0..order.len()),
    );
    order.swap(a, b);
    *bytes = order.into_iter().flat_map(|r| bytes[r].to_vec()).collect();
}

/// Overwrites one of the first `words` big-endian u32 words (an IDX header) with an edge
/// size, or else applies the text mutations.
fn mutate_binary(base: &[u8], rng: &mut StdRng, words: usize) -> Vec<u8> {
    let mut bytes = mutate(base, rng);
    if rng.random_bool(0.5) && bytes.len() >= 4 * words {
        let edges = [0, 1, 2, 255, 256, 1 << 16, 1 << 31, u32::MAX - 1, u32::MAX];
        let word = rng.random_range(0..words);
        let value: u32 = edges[rng.random_range(0..edges.len())];
        bytes[4 * word..4 * word + 4].copy_from_slice(&value.to_be_bytes());
    }
    bytes
}

/// Loads one case under the allocation cap; a panic fails the test with the input.
fn load<T>(format: &'static str, seed: u64, input: &[u8], run: impl FnOnce() -> T) -> T {
    CASE.with(|c| c.set(Some((format, seed))));
    let result = catch_unwind(AssertUnwindSafe(run));
    CASE.with(|c| c.set(None));
    result.unwrap_or_else(|_| {
        panic!(
            "the {format} loader panicked on seed {seed}; input: {:?}\n\
             replay: HARP_FUZZ_SEED={seed} cargo test -p harp-apps --test data_fuzz",
            String::from_utf8_lossy(input)
        )
    })
}

/// An error must name `file` and, if it gives a line, one of the input's lines.
fn check_error(format: &str, seed: u64, input: &[u8], file: &str, err: &DataError) {
    let text = err.to_string();
    assert!(
        text.contains(file),
        "{format} seed {seed}: the error does not name {file}: {text}"
    );
    let lines = line_ranges(input).len().max(1);
    if let DataError::Syntax { line, .. } | DataError::FeatureIndexOutOfRange { line, .. } = err {
        assert!(
            (1..=lines).contains(line),
            "{format} seed {seed}: line {line} of a {lines}-line input: {text}"
        );
    }
}

fn check_dataset(what: &str, data: &Dataset) {
    assert!(data.num_features >= 1 && data.num_classes >= 1, "{what}");
    assert_eq!(
        data.features.len(),
        data.labels.len() * data.num_features,
        "{what}"
    );
    assert!(
        data.labels.iter().all(|&l| (l as usize) < data.num_classes),
        "{what}"
    );
    assert!(data.features.iter().all(|v| v.is_finite()), "{what}");
}

fn check_docword(what: &str, counts: &DocwordCounts) {
    let offsets = &counts.doc_offsets;
    assert!(offsets.len() >= 2, "{what}: D >= 1");
    assert_eq!(offsets[0], 0, "{what}");
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{what}");
    assert_eq!(offsets.last(), Some(&counts.words.len()), "{what}");
    assert_eq!(counts.words.len(), counts.counts.len(), "{what}");
    assert!(counts.num_words >= 1, "{what}");
    assert!(
        counts
            .words
            .iter()
            .all(|&w| (w as usize) < counts.num_words),
        "{what}"
    );
    assert!(counts.counts.iter().all(|&c| c >= 1), "{what}");
    for d in offsets.windows(2) {
        let words = &counts.words[d[0]..d[1]];
        assert!(
            words.windows(2).all(|p| p[0] < p[1]),
            "{what}: a document's words ascend, each once"
        );
    }
}

fn check_ratings(what: &str, data: &RatingsData, range: RatingRange) {
    let n = data.len();
    assert!(data.users.len() == n && data.items.len() == n, "{what}");
    assert!(
        data.users.iter().all(|&u| (u as usize) < data.num_users()),
        "{what}"
    );
    assert!(
        data.items.iter().all(|&i| (i as usize) < data.num_items()),
        "{what}"
    );
    assert!(
        data.values
            .iter()
            .all(|&v| v.is_finite() && v >= range.min && v <= range.max),
        "{what}"
    );
    assert!(data.user_ids.windows(2).all(|w| w[0] < w[1]), "{what}");
    assert!(data.item_ids.windows(2).all(|w| w[0] < w[1]), "{what}");
    let mut pairs: Vec<(u32, u32)> = data
        .users
        .iter()
        .copied()
        .zip(data.items.iter().copied())
        .collect();
    pairs.sort_unstable();
    assert!(
        pairs.windows(2).all(|w| w[0] != w[1]),
        "{what}: a (user, item) pair rated twice"
    );
}

/// Counts how the cases ended, and insists both ends were reached (else the mutations are
/// too weak, or too strong, to say much).
#[derive(Default)]
struct Outcomes {
    accepted: u64,
    refused: u64,
}

impl Outcomes {
    fn add<T>(&mut self, result: &Result<T, DataError>) {
        match result {
            Ok(_) => self.accepted += 1,
            Err(_) => self.refused += 1,
        }
    }

    fn assert_both(&self, format: &str) {
        eprintln!(
            "{format}: {} accepted, {} refused",
            self.accepted, self.refused
        );
        let cases = self.accepted + self.refused;
        if cases >= 200 {
            assert!(
                self.accepted > 0 && self.refused > cases / 4,
                "{format}: {} accepted, {} refused: the mutations do not exercise the loader",
                self.accepted,
                self.refused
            );
        }
    }
}

const DOCWORD: &str = "5\n8\n12\n1 1 3\n1 4 1\n1 8 2\n2 2 1\n2 3 7\n3 1 1\n3 5 2\n3 6 1\n\
                       4 7 4\n5 1 1\n5 2 2\n5 8 9\n";

#[test]
fn docword_loader_survives_mutations() {
    let file = Path::new("fuzz-docword.txt");
    let base = parse_docword_reader(DOCWORD.as_bytes(), file).expect("the base file loads");
    check_docword("base", &base);
    let mut outcomes = Outcomes::default();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xD0C);
        let input = mutate(DOCWORD.as_bytes(), &mut rng);
        let result = load("docword", seed, &input, || {
            parse_docword_reader(&input[..], file)
        });
        match &result {
            Ok(counts) => check_docword(&format!("docword seed {seed}"), counts),
            Err(e) => check_error("docword", seed, &input, "fuzz-docword.txt", e),
        }
        outcomes.add(&result);
    }
    outcomes.assert_both("docword");
}

const VOCAB: &str = "space\nshuttle\norbit\ngod\nbelief\nlaunch\nmoon\natheism\n";

#[test]
fn vocab_loader_survives_mutations() {
    let (file, docword) = (Path::new("fuzz-vocab.txt"), Path::new("fuzz-docword.txt"));
    assert_eq!(
        parse_vocab_reader(VOCAB.as_bytes(), file, 8, docword)
            .expect("the base file loads")
            .len(),
        8
    );
    let mut outcomes = Outcomes::default();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x70CAB);
        let input = mutate(VOCAB.as_bytes(), &mut rng);
        // W as a header might declare it, edge values included.
        let expected = match rng.random_range(0..4) {
            0 => 8,
            1 => rng.random_range(0..12),
            2 => u32::MAX as usize,
            _ => line_ranges(&input).len(),
        };
        let result = load("vocab", seed, &input, || {
            parse_vocab_reader(&input[..], file, expected, docword)
        });
        match &result {
            Ok(words) => {
                assert_eq!(words.len(), expected, "vocab seed {seed}");
                assert!(
                    words.iter().all(|w| !w.trim().is_empty()),
                    "vocab seed {seed}: an empty word"
                );
            }
            Err(e) => check_error("vocab", seed, &input, "fuzz-vocab.txt", e),
        }
        outcomes.add(&result);
    }
    outcomes.assert_both("vocab");
}

const RATINGS: &str =
    "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n1,1029,3.0,1260759179\n\
                       1,1061,3.0,1260759182\n2,10,4.0,835355493\n2,17,5.0,835355681\n\
                       3,31,0.5,1298861675\n4,10,4.5,949810582\n7,1061,1.0,1011208045\n";

#[test]
fn ratings_loader_survives_mutations() {
    let file = Path::new("fuzz-ratings.csv");
    let range = RatingRange::default();
    let base = parse_ratings_reader(RATINGS.as_bytes(), file, range).expect("the base file loads");
    check_ratings("base", &base, range);
    let mut outcomes = Outcomes::default();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5A7E);
        let input = mutate(RATINGS.as_bytes(), &mut rng);
        let result = load("ratings", seed, &input, || {
            parse_ratings_reader(&input[..], file, range)
        });
        match &result {
            Ok(data) => check_ratings(&format!("ratings seed {seed}"), data, range),
            Err(e) => check_error("ratings", seed, &input, "fuzz-ratings.csv", e),
        }
        outcomes.add(&result);
    }
    outcomes.assert_both("ratings");
}

const LIBSVM: &str = "# digits, abridged\n3 1:0.5 4:1 7:0.25\n0 2:1 3:0.75 # trailing\n\n\
                      1 qid:2 1:1 8:0.5\n2.0 5:0.125\n4 6:1 7:1 8:1\n";

#[test]
fn libsvm_loader_survives_mutations() {
    let file = Path::new("fuzz-digits.libsvm");
    let sized = LibsvmOptions {
        num_features: Some(8),
        num_classes: Some(5),
    };
    check_dataset(
        "base",
        &parse_libsvm_reader(LIBSVM.as_bytes(), file, &sized).expect("the base file loads"),
    );
    let mut outcomes = Outcomes::default();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x11B5);
        let input = mutate(LIBSVM.as_bytes(), &mut rng);
        // Inferring the feature count densifies to the largest index a mutation writes
        // (up to 2^31 values, by design), so the feature count is always given here.
        let opts = LibsvmOptions {
            num_features: Some(rng.random_range(1..=12)),
            num_classes: [None, Some(rng.random_range(1..=6))][rng.random_range(0..2)],
        };
        let result = load("libsvm", seed, &input, || {
            parse_libsvm_reader(&input[..], file, &opts)
        });
        match &result {
            Ok(data) => {
                check_dataset(&format!("libsvm seed {seed}"), data);
                assert_eq!(Some(data.num_features), opts.num_features);
            }
            Err(e) => check_error("libsvm", seed, &input, "fuzz-digits.libsvm", e),
        }
        outcomes.add(&result);
    }
    outcomes.assert_both("libsvm");
}

/// An IDX file of unsigned bytes.
fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

#[test]
fn idx_loader_survives_mutations() {
    let pixels: Vec<u8> = (0..4 * 3 * 3).map(|i| (i * 37 % 256) as u8).collect();
    let images = idx(&[4, 3, 3], &pixels);
    let labels = idx(&[4], &[2, 0, 1, 2]);
    let (images_name, labels_name) = ("fuzz-images-idx3-ubyte", "fuzz-labels-idx1-ubyte");
    check_dataset(
        "base",
        &load_idx_pair_from_bytes(&images, images_name, &labels, labels_name)
            .expect("the base pair loads"),
    );
    let mut outcomes = Outcomes::default();
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x1D8);
        let (mut image_input, mut label_input) = (images.clone(), labels.clone());
        let blamed = if rng.random_bool(0.7) {
            image_input = mutate_binary(&images, &mut rng, 4);
            images_name
        } else {
            label_input = mutate_binary(&labels, &mut rng, 2);
            labels_name
        };
        if rng.random_bool(0.3) {
            // Compressed, then sometimes damaged after compression.
            image_input = gzip(&image_input);
            label_input = gzip(&label_input);
            if rng.random_bool(0.5) {
                let at = rng.random_range(0..image_input.len());
                image_input[at] ^= 1 << rng.random_range(0..8);
            }
        }
        let result = load("idx", seed, &image_input, || {
            load_idx_pair_from_bytes(&image_input, images_name, &label_input, labels_name)
        });
        match &result {
            Ok(data) => check_dataset(&format!("idx seed {seed}"), data),
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains(images_name) || text.contains(labels_name),
                    "idx seed {seed} (mutated {blamed}): the error names neither file: {text}"
                );
            }
        }
        outcomes.add(&result);
    }
    outcomes.assert_both("idx");
}
