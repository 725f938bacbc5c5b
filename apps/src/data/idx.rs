//! The IDX loader (the MNIST file format): an images file and a labels file,
//! each plain or gzip (detected by content), read from disk or from memory
//! (for datasets embedded with `include_bytes!`).
//!
//! Layout: magic `00 00 08 NN` (unsigned bytes, `NN` dimensions), `NN` big-endian
//! u32 sizes, then exactly the product of the sizes in data bytes. Images have two
//! or more dimensions (the first counts images; the product of the rest is the
//! feature count, so any image shape works); labels have exactly one. The sizes are
//! checked against the bytes actually present before anything is allocated.

use std::path::Path;

use super::dataset::{Dataset, IdxOrigin, MAX_DENSE_VALUES};
use super::error::DataError;
use super::gzip;

/// The first three magic bytes: two zeros, then 0x08 for unsigned-byte data.
const MAGIC_PREFIX: [u8; 3] = [0x00, 0x00, 0x08];

/// Bytes in the magic number and in each dimension size.
const WORD_BYTES: usize = 4;

/// Loads an IDX images file and its labels file (each plain or gzip).
pub fn load_idx_pair(images: &Path, labels: &Path) -> Result<Dataset, DataError> {
    let image_bytes = std::fs::read(images).map_err(|e| DataError::from_io(images, e))?;
    let label_bytes = std::fs::read(labels).map_err(|e| DataError::from_io(labels, e))?;
    load_pair(&image_bytes, images, &label_bytes, labels)
}

/// Loads an IDX pair held in memory; the names stand for the files in errors and in
/// the dataset's `source`.
pub fn load_idx_pair_from_bytes(
    images: &[u8],
    images_name: &str,
    labels: &[u8],
    labels_name: &str,
) -> Result<Dataset, DataError> {
    load_pair(
        images,
        Path::new(images_name),
        labels,
        Path::new(labels_name),
    )
}

fn load_pair(
    images: &[u8],
    images_path: &Path,
    labels: &[u8],
    labels_path: &Path,
) -> Result<Dataset, DataError> {
    let images_plain = gzip::decode_bytes(images, images_path)?;
    let image_array = parse_idx(&images_plain, images_path, Role::Images)?;
    let labels_plain = gzip::decode_bytes(labels, labels_path)?;
    let label_array = parse_idx(&labels_plain, labels_path, Role::Labels)?;
    if image_array.count != label_array.count {
        return Err(DataError::ShapeMismatch {
            path: labels_path.to_path_buf(),
            message: format!(
                "{} labels, but {} holds {} images",
                label_array.count,
                images_path.display(),
                image_array.count
            ),
        });
    }
    if image_array.data.len() > MAX_DENSE_VALUES {
        return Err(DataError::TooLarge {
            path: images_path.to_path_buf(),
            rows: image_array.count,
            num_features: image_array.item_size,
        });
    }
    let features: Vec<f32> = image_array.data.iter().map(|&b| f32::from(b)).collect();
    let labels: Vec<u32> = label_array.data.iter().map(|&b| u32::from(b)).collect();
    let num_classes = labels.iter().max().map_or(1, |&max| max as usize + 1);
    let origin = IdxOrigin {
        item_dims: image_array.item_dims,
        labels_path: labels_path.display().to_string(),
    };
    Ok(Dataset {
        idx: Some(origin),
        ..Dataset::from_valid_parts(
            features,
            labels,
            image_array.item_size,
            num_classes,
            images_path.display().to_string(),
        )
    })
}

/// Which file of the pair is being read; they differ in the dimensions allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Images,
    Labels,
}

/// A validated IDX array: `count` items of `item_size` bytes each, back to back.
struct IdxArray<'a> {
    count: usize,
    item_size: usize,
    /// The dimensions of one item (the header's after the count).
    item_dims: Vec<u64>,
    data: &'a [u8],
}

fn parse_idx<'a>(bytes: &'a [u8], path: &Path, role: Role) -> Result<IdxArray<'a>, DataError> {
    let truncated = |expected_bytes: u64| DataError::Truncated {
        path: path.to_path_buf(),
        expected_bytes,
        found_bytes: bytes.len() as u64,
    };
    let shape = |message: String| DataError::ShapeMismatch {
        path: path.to_path_buf(),
        message,
    };

    let Some(&[m0, m1, m2, m3]) = bytes.first_chunk::<WORD_BYTES>() else {
        return Err(truncated(WORD_BYTES as u64));
    };
    let ndims = usize::from(m3);
    if [m0, m1, m2] != MAGIC_PREFIX {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            found: u32::from_be_bytes([m0, m1, m2, m3]),
        });
    }
    match role {
        Role::Labels if ndims != 1 => {
            return Err(shape(format!(
                "a labels file has 1 dimension, this one has {ndims}"
            )))
        }
        Role::Images if ndims < 2 => {
            return Err(shape(format!(
                "an images file has 2 or more dimensions, this one has {ndims} \
                 (are images and labels swapped?)"
            )))
        }
        _ => {}
    }

    let header_len = WORD_BYTES * (1 + ndims);
    let Some(header) = bytes.get(WORD_BYTES..header_len) else {
        return Err(truncated(header_len as u64));
    };
    let dims: Vec<u64> = header
        .chunks_exact(WORD_BYTES)
        .map(|w| u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    let dims_text = dims
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" x ");
    let count = dims.first().copied().unwrap_or(0);
    let item_size = dims
        .iter()
        .skip(1)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let total = item_size.and_then(|size| size.checked_mul(count));
    let (Some(item_size), Some(total)) = (item_size, total) else {
        return Err(shape(format!(
            "dimensions {dims_text} overflow a 64-bit size"
        )));
    };

    let data = bytes.get(header_len..).unwrap_or(&[]);
    let present = data.len() as u64;
    if total > present {
        return Err(truncated((header_len as u64).saturating_add(total)));
    }
    if total < present {
        return Err(shape(format!(
            "{} trailing bytes after the {dims_text} data",
            present - total
        )));
    }
    if count == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    if item_size == 0 {
        return Err(shape(format!("dimensions {dims_text} give zero features")));
    }
    // Both are at most `present`, which is a slice length, so they fit in usize.
    let as_usize =
        |v: u64| usize::try_from(v).map_err(|_| shape(format!("dimensions {dims_text} too large")));
    Ok(IdxArray {
        count: as_usize(count)?,
        item_size: as_usize(item_size)?,
        item_dims: dims.iter().skip(1).copied().collect(),
        data,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::gzip::tests::gzip;
    use super::super::Location;
    use super::*;
    use proptest::prelude::*;

    /// An IDX file of unsigned bytes with these dimensions and data.
    pub(in super::super) fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut out = vec![0, 0, 8, dims.len() as u8];
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out.extend_from_slice(data);
        out
    }

    /// 3 images of 2x3 pixels (pixel value = 10*image + position) and labels 2, 0, 1.
    pub(in super::super) fn tiny_pair() -> (Vec<u8>, Vec<u8>) {
        let pixels: Vec<u8> = (0..3u8)
            .flat_map(|i| (0..6u8).map(move |p| 10 * i + p))
            .collect();
        (idx(&[3, 2, 3], &pixels), idx(&[3], &[2, 0, 1]))
    }

    fn check_tiny(d: &Dataset) {
        assert_eq!(d.rows(), 3);
        assert_eq!(d.num_features, 6);
        assert_eq!(d.num_classes, 3);
        assert_eq!(d.labels, vec![2, 0, 1]);
        assert_eq!(d.row(1), &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0]);
    }

    fn load(images: &[u8], labels: &[u8]) -> Result<Dataset, DataError> {
        load_idx_pair_from_bytes(images, "img.idx", labels, "lab.idx")
    }

    fn load_err(images: &[u8], labels: &[u8]) -> DataError {
        match load(images, labels) {
            Ok(d) => panic!("expected an error, got {d:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn plain_and_gzip_bytes_load() {
        let (images, labels) = tiny_pair();
        let plain = load(&images, &labels).unwrap();
        check_tiny(&plain);
        assert_eq!(plain.source, "img.idx");
        check_tiny(&load(&gzip(&images), &gzip(&labels)).unwrap());
        check_tiny(&load(&gzip(&images), &labels).unwrap());
        check_tiny(&load(&images, &gzip(&labels)).unwrap());
    }

    #[test]
    fn plain_and_gzip_files_load() {
        let dir = tempfile::tempdir().unwrap();
        let (images, labels) = tiny_pair();
        let paths = [
            ("a-images-idx3-ubyte", images.clone()),
            ("a-labels-idx1-ubyte", labels.clone()),
            ("b-images-idx3-ubyte.gz", gzip(&images)),
            ("b-labels-idx1-ubyte.gz", gzip(&labels)),
        ]
        .map(|(name, bytes)| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        });
        check_tiny(&load_idx_pair(&paths[0], &paths[1]).unwrap());
        check_tiny(&load_idx_pair(&paths[2], &paths[3]).unwrap());
        let missing = dir.path().join("nope-idx1-ubyte");
        let err = load_idx_pair(&paths[0], &missing).unwrap_err();
        assert!(matches!(err, DataError::NotFound { .. }));
        assert!(err.to_string().contains("nope-idx1-ubyte"));
    }

    #[test]
    fn any_image_shape_and_two_dims() {
        let d = load(&idx(&[2, 5], &[1; 10]), &idx(&[2], &[0, 0])).unwrap();
        assert_eq!((d.rows(), d.num_features, d.num_classes), (2, 5, 1));
        let d = load(&idx(&[1, 2, 2, 2], &[7; 8]), &idx(&[1], &[9])).unwrap();
        assert_eq!((d.rows(), d.num_features, d.num_classes), (1, 8, 10));
    }

    #[test]
    fn bad_magic() {
        let (mut images, labels) = tiny_pair();
        images[2] = 0x0d; // float data
        let err = load_err(&images, &labels);
        assert!(matches!(
            err,
            DataError::BadMagic {
                found: 0x0000_0d03,
                ..
            }
        ));
        assert!(err
            .to_string()
            .starts_with("img.idx: bad idx magic 0x00000d03"));
        let (images, mut labels) = tiny_pair();
        labels[0] = 1;
        let err = load_err(&images, &labels);
        assert!(matches!(
            err,
            DataError::BadMagic {
                found: 0x0100_0801,
                ..
            }
        ));
        assert!(err.to_string().starts_with("lab.idx: "));
        // Text is not IDX.
        let err = load_err(b"1 1:2\n", &labels);
        assert!(matches!(err, DataError::BadMagic { .. }));
    }

    #[test]
    fn truncated() {
        let (images, labels) = tiny_pair();
        let err = load_err(&images[..images.len() - 1], &labels);
        assert!(matches!(
            err,
            DataError::Truncated {
                expected_bytes: 34,
                found_bytes: 33,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "img.idx: truncated: expected 34 bytes, found 33"
        );
        // Header cut short.
        let err = load_err(&images[..10], &labels);
        assert!(matches!(
            err,
            DataError::Truncated {
                expected_bytes: 16,
                ..
            }
        ));
        let err = load_err(&images, &labels[..2]);
        assert!(matches!(
            err,
            DataError::Truncated {
                expected_bytes: 4,
                ..
            }
        ));
        assert!(err.to_string().starts_with("lab.idx: truncated"));
        // Huge declared sizes are refused before allocating.
        let err = load_err(&idx(&[u32::MAX, 1000, 1000], &[0; 16]), &labels);
        assert!(matches!(err, DataError::Truncated { .. }), "{err}");
        let err = load_err(&idx(&[u32::MAX; 3], &[0; 16]), &labels);
        assert!(matches!(err, DataError::ShapeMismatch { .. }), "{err}");
        assert!(err.to_string().contains("overflow"));
        let err = load_err(&idx(&[u32::MAX; 200], &[0; 16]), &labels);
        assert!(matches!(err, DataError::ShapeMismatch { .. }), "{err}");
    }

    #[test]
    fn shape_mismatch() {
        let (images, labels) = tiny_pair();
        let mut long = images.clone();
        long.push(0);
        let err = load_err(&long, &labels);
        assert!(matches!(err, DataError::ShapeMismatch { .. }));
        assert_eq!(
            err.to_string(),
            "img.idx: shape mismatch: 1 trailing bytes after the 3 x 2 x 3 data"
        );

        let err = load_err(&images, &idx(&[2], &[0, 1]));
        assert!(matches!(err, DataError::ShapeMismatch { .. }));
        assert_eq!(
            err.to_string(),
            "lab.idx: shape mismatch: 2 labels, but img.idx holds 3 images"
        );

        // Swapped files.
        let err = load_err(&labels, &images);
        assert!(err
            .to_string()
            .starts_with("img.idx: shape mismatch: an images file"));
        let err = load_err(&images, &idx(&[3, 1], &[0, 1, 2]));
        assert!(err
            .to_string()
            .starts_with("lab.idx: shape mismatch: a labels file"));

        let err = load_err(&idx(&[3, 0, 3], &[]), &labels);
        assert!(err.to_string().contains("zero features"), "{err}");
    }

    #[test]
    fn empty() {
        let err = load_err(&idx(&[0, 2, 2], &[]), &idx(&[0], &[]));
        assert!(matches!(err, DataError::Empty { .. }));
        assert_eq!(err.to_string(), "img.idx: no records");
    }

    #[test]
    fn corrupt_gzip_is_io_error() {
        let (images, labels) = tiny_pair();
        let mut packed = gzip(&images);
        packed.truncate(packed.len() - 6);
        let err = load_err(&packed, &labels);
        assert!(matches!(err, DataError::Io { .. }), "{err}");
        assert!(err.to_string().starts_with("cannot read img.idx: "));
    }

    #[test]
    fn not_finite_and_label_errors_cannot_come_from_idx() {
        // Bytes are always finite and labels define the class count; these variants
        // come from Dataset::new on the same data.
        let d = load(&tiny_pair().0, &tiny_pair().1).unwrap();
        let err = Dataset::new(d.features, d.labels, 6, 2, "img.idx").unwrap_err();
        assert!(matches!(
            err,
            DataError::LabelOutOfRange {
                at: Location::Record(0),
                ..
            }
        ));
    }

    #[test]
    fn real_mnist10k_when_present() {
        let dir = Path::new("/work/shared/data/mnist10k");
        let images = dir.join("t10k-images-idx3-ubyte.gz");
        let labels = dir.join("t10k-labels-idx1-ubyte.gz");
        if !images.exists() || !labels.exists() {
            println!("skipping: {} is absent", dir.display());
            return;
        }
        let d = load_idx_pair(&images, &labels).unwrap();
        assert_eq!(d.rows(), 10_000);
        assert_eq!(d.num_features, 784);
        assert_eq!(d.num_classes, 10);
        let mean = d.features.iter().map(|&v| f64::from(v)).sum::<f64>() / d.features.len() as f64;
        assert!((mean - 33.44).abs() < 0.01, "mean pixel {mean}");
        let mut counts = [0usize; 10];
        for &label in &d.labels {
            counts[label as usize] += 1;
        }
        assert_eq!(
            counts,
            [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]
        );
        // The same bytes through the in-memory path.
        let from_bytes = load_idx_pair_from_bytes(
            &std::fs::read(&images).unwrap(),
            "embedded-images",
            &std::fs::read(&labels).unwrap(),
            "embedded-labels",
        )
        .unwrap();
        assert_eq!(from_bytes.features, d.features);
        assert_eq!(from_bytes.source, "embedded-images");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            images in proptest::collection::vec(any::<u8>(), 0..256),
            labels in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let _ = load(&images, &labels);
            let _ = load(&labels, &images);
            let _ = load(&gzip(&images), &labels);
        }

        #[test]
        fn random_bodies_behind_valid_headers_never_panic(
            ndims in 0u8..6,
            dims in proptest::collection::vec(any::<u32>(), 0..6),
            small_dims in proptest::collection::vec(0u32..5, 0..6),
            body in proptest::collection::vec(any::<u8>(), 0..128),
            count in 0u32..8,
            label_body in proptest::collection::vec(any::<u8>(), 0..10),
        ) {
            let labels = idx(&[count], &label_body);
            for d in [&dims, &small_dims] {
                let mut images = vec![0, 0, 8, ndims];
                for v in d.iter() {
                    images.extend_from_slice(&v.to_be_bytes());
                }
                images.extend_from_slice(&body);
                if let Ok(ds) = load(&images, &labels) {
                    prop_assert_eq!(ds.features.len(), ds.rows() * ds.num_features);
                    prop_assert!(ds.labels.iter().all(|&l| (l as usize) < ds.num_classes));
                }
            }
        }
    }
}
