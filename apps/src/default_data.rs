//! The default dataset, embedded in the binary so that `harp run mlr` needs no files:
//! mnist10k (10,000 MNIST digits; see `apps/data/mnist10k/README.md`).

use crate::data::{load_idx_pair_from_bytes, DataError, Dataset};

const IMAGES: &[u8] = include_bytes!("../data/mnist10k/t10k-images-idx3-ubyte.gz");
const LABELS: &[u8] = include_bytes!("../data/mnist10k/t10k-labels-idx1-ubyte.gz");

/// The name `--data` shows for the default dataset.
pub const DEFAULT_DATASET_NAME: &str = "mnist10k (built in)";

/// Decodes the embedded mnist10k (raw pixel values 0..255).
pub fn mnist10k() -> Result<Dataset, DataError> {
    load_idx_pair_from_bytes(
        IMAGES,
        "built-in mnist10k images",
        LABELS,
        "built-in mnist10k labels",
    )
}
