//! Training data for the apps: the dense [`Dataset`] type, loaders for LibSVM text
//! and IDX (MNIST) files, plain or gzip, a path-based loader that picks between them,
//! and a deterministic synthetic generator.
//!
//! All bad input comes back as a [`DataError`] that names the file and, where it
//! applies, the line or record; nothing here panics on malformed data.
//!
//! | file           | owns                                                     |
//! |----------------|----------------------------------------------------------|
//! | `dataset.rs`   | [`Dataset`], validation, splits, partitions, scaling     |
//! | `error.rs`     | [`DataError`], [`Location`]; the text loaders' shared field parsing and quoting |
//! | `libsvm.rs`    | [`load_libsvm`], [`parse_libsvm_reader`], [`LibsvmOptions`] |
//! | `idx.rs`       | [`load_idx_pair`], [`load_idx_pair_from_bytes`]          |
//! | `discover.rs`  | [`load_path`] (directory → IDX pair, file → LibSVM)      |
//! | `synthetic.rs` | [`synthetic_classification`]                             |
//! | `ratings.rs`   | [`load_ratings`]: MovieLens-style `ratings.csv`, [`RatingsData`] |
//! | `docword.rs`   | [`load_docword_dir`], [`load_docword`]: UCI bag-of-words `docword.txt[.gz]` + `vocab.txt`, [`Corpus`] |
//! | `gzip.rs`      | gzip detection by magic bytes and decompression          |
//! | `broken_lines.rs` | (tests) a valid file with one line broken, refused naming it |

#[cfg(test)]
mod broken_lines;
mod dataset;
mod discover;
mod docword;
mod error;
mod gzip;
mod idx;
mod libsvm;
mod ratings;
mod synthetic;

pub use dataset::{Dataset, IdxOrigin, MAX_DENSE_VALUES};
pub use discover::load_path;
pub use docword::{
    load_docword, load_docword_dir, parse_docword_reader, parse_vocab_reader, Corpus,
    DocwordCounts, DocwordPaths, MAX_EMPTY_DOCUMENTS,
};
pub use error::{DataError, Location};
pub use idx::{load_idx_pair, load_idx_pair_from_bytes};
pub use libsvm::{load_libsvm, parse_libsvm_reader, LibsvmOptions};
pub use ratings::{load_ratings, parse_ratings_reader, RatingRange, RatingsData};
pub use synthetic::synthetic_classification;
