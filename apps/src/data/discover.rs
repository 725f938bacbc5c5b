//! [`load_path`]: picks the loader for a user-given path. A directory must hold one
//! IDX images file (`*idx3-ubyte*`) and one IDX labels file (`*idx1-ubyte*`), plain
//! or gzip; any other file is read as LibSVM.

use std::path::{Path, PathBuf};

use super::dataset::Dataset;
use super::error::DataError;
use super::idx::load_idx_pair;
use super::libsvm::{load_libsvm, LibsvmOptions};

/// File-name fragment of an IDX images file.
const IMAGES_MARKER: &str = "idx3-ubyte";
/// File-name fragment of an IDX labels file.
const LABELS_MARKER: &str = "idx1-ubyte";
/// How many directory entries an error message lists at most.
const MAX_LISTED: usize = 20;

/// Loads a directory as an IDX pair, or a file as LibSVM (inferring its sizes).
pub fn load_path(path: &Path) -> Result<Dataset, DataError> {
    let metadata = std::fs::metadata(path).map_err(|e| DataError::from_io(path, e))?;
    if !metadata.is_dir() {
        return load_libsvm(path, &LibsvmOptions::default());
    }
    let (images, labels) = find_idx_pair(path)?;
    load_idx_pair(&images, &labels)
}

/// The single images file and single labels file in `dir`.
fn find_idx_pair(dir: &Path) -> Result<(PathBuf, PathBuf), DataError> {
    let io_error = |e| DataError::from_io(dir, e);
    let mut names: Vec<String> = Vec::new();
    let mut images: Vec<PathBuf> = Vec::new();
    let mut labels: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let entry_path = entry.path();
        // Follows symbolic links; skips sub-directories and anything unreadable.
        let is_file = std::fs::metadata(&entry_path).is_ok_and(|m| m.is_file());
        if is_file && name.contains(IMAGES_MARKER) {
            images.push(entry_path);
        } else if is_file && name.contains(LABELS_MARKER) {
            labels.push(entry_path);
        }
        names.push(name);
    }
    if let ([images], [labels]) = (images.as_slice(), labels.as_slice()) {
        return Ok((images.clone(), labels.clone()));
    }
    names.sort();
    images.sort();
    labels.sort();
    Err(DataError::DirectoryLayout {
        path: dir.to_path_buf(),
        message: format!(
            "expected exactly one *{IMAGES_MARKER}* file and one *{LABELS_MARKER}* file \
             (plain or .gz); found images [{}], labels [{}]; the directory holds [{}]",
            file_names(&images),
            file_names(&labels),
            listing(&names)
        ),
    })
}

fn file_names(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths
        .iter()
        .map(|p| {
            p.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        })
        .collect();
    listing(&names)
}

fn listing(names: &[String]) -> String {
    let mut shown = names
        .iter()
        .take(MAX_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX_LISTED {
        shown.push_str(&format!(", ... {} more", names.len() - MAX_LISTED));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::super::gzip::tests::gzip;
    use super::super::idx::tests::tiny_pair;
    use super::*;

    #[test]
    fn directory_with_a_pair_loads() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = tiny_pair();
        std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), gzip(&images)).unwrap();
        std::fs::write(dir.path().join("train-labels-idx1-ubyte"), labels).unwrap();
        std::fs::write(dir.path().join("README.md"), "notes").unwrap();
        std::fs::create_dir(dir.path().join("sub-idx3-ubyte")).unwrap(); // a directory: ignored
        let d = load_path(dir.path()).unwrap();
        assert_eq!((d.rows(), d.num_features, d.num_classes), (3, 6, 3));
        assert!(d.source.ends_with("train-images-idx3-ubyte.gz"));
    }

    #[test]
    fn directory_without_exactly_one_pair_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = tiny_pair();
        std::fs::write(dir.path().join("a-idx3-ubyte"), &images).unwrap();
        std::fs::write(dir.path().join("a-idx3-ubyte.gz"), gzip(&images)).unwrap();
        std::fs::write(dir.path().join("a-idx1-ubyte"), &labels).unwrap();
        let err = load_path(dir.path()).unwrap_err();
        assert!(matches!(err, DataError::DirectoryLayout { .. }));
        let message = err.to_string();
        assert!(
            message.starts_with(&dir.path().display().to_string()),
            "{message}"
        );
        assert!(
            message.contains("found images [a-idx3-ubyte, a-idx3-ubyte.gz], labels [a-idx1-ubyte]"),
            "{message}"
        );

        let empty = tempfile::tempdir().unwrap();
        let err = load_path(empty.path()).unwrap_err();
        assert!(
            err.to_string().contains("found images [], labels []"),
            "{err}"
        );
    }

    #[test]
    fn file_loads_as_libsvm_and_missing_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "1 2:3\n0 1:1\n").unwrap();
        let d = load_path(&file).unwrap();
        assert_eq!(d.row(0), &[0.0, 3.0]);
        let missing = dir.path().join("missing");
        let err = load_path(&missing).unwrap_err();
        assert!(matches!(err, DataError::NotFound { .. }));
        assert_eq!(err.to_string(), format!("{}: not found", missing.display()));
    }

    #[test]
    fn real_data_when_present() {
        let mnist = Path::new("/work/shared/data/mnist10k");
        if mnist.is_dir() {
            let d = load_path(mnist).unwrap();
            assert_eq!((d.rows(), d.num_features, d.num_classes), (10_000, 784, 10));
            let (train, test) = d.split_tail(2000).unwrap();
            assert_eq!((train.rows(), test.rows()), (8000, 2000));
        } else {
            println!("skipping: {} is absent", mnist.display());
        }
        let digits = Path::new("/work/shared/data/digits/digits.libsvm");
        if digits.is_file() {
            let d = load_path(digits).unwrap();
            assert_eq!((d.rows(), d.num_features, d.num_classes), (1797, 64, 10));
        } else {
            println!("skipping: {} is absent", digits.display());
        }
    }
}
