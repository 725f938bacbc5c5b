//! Deterministic synthetic classification data: uniform features and labels from a
//! hidden random linear model, so softmax regression can learn them.
//!
//! Rows are generated in fixed chunks of [`CHUNK_ROWS`], each from its own random
//! stream keyed by (seed, chunk), so the output depends only on the arguments, never
//! on how many threads generated it. The chunks are spread over the available cores.

use std::ops::Range;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::dataset::{Dataset, MAX_DENSE_VALUES};
use super::error::DataError;

/// Rows per random stream (and per unit of parallel work).
const CHUNK_ROWS: usize = 256;

/// Logit noise is uniform in ±this; the clean logits have a standard deviation of about 1.
const NOISE_HALF_WIDTH: f32 = 0.2;

/// Stream number of the hidden weights; row chunk `k` uses stream `k + 1`.
const WEIGHTS_STREAM: u64 = 0;

/// `rows` × `features` features uniform in [-1, 1) and labels `argmax(x W + noise)` for a
/// hidden random `W` (features × classes), the same for the same arguments.
pub fn synthetic_classification(
    rows: usize,
    features: usize,
    classes: usize,
    seed: u64,
) -> Result<Dataset, DataError> {
    let source =
        format!("synthetic(rows={rows},features={features},classes={classes},seed={seed})");
    if rows == 0 || features == 0 || classes == 0 {
        return Err(DataError::invalid(format!(
            "{source}: rows, features and classes must all be at least 1"
        )));
    }
    if classes - 1 > u32::MAX as usize {
        return Err(DataError::invalid(format!(
            "{source}: labels are u32, so at most 2^32 classes"
        )));
    }
    let too_large = |what: &str| {
        DataError::invalid(format!(
            "{source}: {what} exceeds {MAX_DENSE_VALUES} values"
        ))
    };
    let total = rows
        .checked_mul(features)
        .filter(|&n| n <= MAX_DENSE_VALUES)
        .ok_or_else(|| too_large("rows x features"))?;
    let weight_count = features
        .checked_mul(classes)
        .filter(|&n| n <= MAX_DENSE_VALUES)
        .ok_or_else(|| too_large("features x classes"))?;

    let model = Model::random(features, classes, weight_count, seed);
    let mut xs: Vec<f32> = Vec::new();
    xs.try_reserve_exact(total)
        .map_err(|_| too_large("the feature matrix"))?;
    xs.resize(total, 0.0);
    let mut labels: Vec<u32> = Vec::new();
    labels
        .try_reserve_exact(rows)
        .map_err(|_| too_large("the label vector"))?;
    labels.resize(rows, 0);

    fill_parallel(&model, seed, &mut xs, &mut labels);
    Ok(Dataset::from_valid_parts(
        xs, labels, features, classes, source,
    ))
}

/// The hidden linear model.
struct Model {
    features: usize,
    classes: usize,
    /// Class-major (classes × features), so each class score is one contiguous dot product.
    weights_by_class: Vec<f32>,
}

impl Model {
    fn random(features: usize, classes: usize, weight_count: usize, seed: u64) -> Self {
        let mut rng = stream_rng(seed, WEIGHTS_STREAM);
        // x_j has variance 1/3 and w uniform in ±a has variance a²/3, so a logit has
        // variance features·a²/9; a = 3/√features makes it about 1.
        let half_width = 3.0 / (features as f32).sqrt();
        let weights_by_class = (0..weight_count)
            .map(|_| unit_symmetric(rng.next_u32()) * half_width)
            .collect();
        Model {
            features,
            classes,
            weights_by_class,
        }
    }

    /// The noisy argmax class of `x`.
    fn label(&self, x: &[f32], rng: &mut StdRng) -> u32 {
        let mut best_class = 0usize;
        let mut best_score = f32::NEG_INFINITY;
        for (class, w) in self
            .weights_by_class
            .chunks_exact(self.features)
            .take(self.classes)
            .enumerate()
        {
            let score = dot(x, w) + unit_symmetric(rng.next_u32()) * NOISE_HALF_WIDTH;
            if score > best_score {
                best_score = score;
                best_class = class;
            }
        }
        // classes <= 2^32 was checked, so the index fits.
        u32::try_from(best_class).unwrap_or(u32::MAX)
    }
}

/// Generates every chunk, one contiguous batch of chunks per thread.
fn fill_parallel(model: &Model, seed: u64, xs: &mut [f32], labels: &mut [u32]) {
    let chunks = labels.len().div_ceil(CHUNK_ROWS);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, chunks.max(1));
    let chunks_per_batch = chunks.div_ceil(threads).max(1);
    let batch_rows = chunks_per_batch * CHUNK_ROWS;
    let batch_values = batch_rows * model.features;

    let mut failed: Vec<usize> = Vec::new();
    std::thread::scope(|scope| {
        let batches = xs
            .chunks_mut(batch_values)
            .zip(labels.chunks_mut(batch_rows))
            .enumerate();
        for (batch, (batch_xs, batch_labels)) in batches {
            let first_chunk = batch * chunks_per_batch;
            let spawned = std::thread::Builder::new()
                .name(format!("synthetic-{batch}"))
                .spawn_scoped(scope, move || {
                    fill_batch(model, seed, first_chunk, batch_xs, batch_labels)
                });
            if spawned.is_err() {
                failed.push(batch);
            }
        }
    });
    // Threads that could not start: generate their batches here (same streams, same data).
    for batch in failed {
        let rows = batch_range(batch, batch_rows, labels.len());
        let values = rows.start * model.features..rows.end * model.features;
        if let (Some(batch_xs), Some(batch_labels)) = (xs.get_mut(values), labels.get_mut(rows)) {
            fill_batch(
                model,
                seed,
                batch * chunks_per_batch,
                batch_xs,
                batch_labels,
            );
        }
    }
}

fn batch_range(batch: usize, batch_rows: usize, rows: usize) -> Range<usize> {
    let start = (batch * batch_rows).min(rows);
    start..(start + batch_rows).min(rows)
}

/// Generates consecutive chunks starting at chunk number `first_chunk`.
fn fill_batch(model: &Model, seed: u64, first_chunk: usize, xs: &mut [f32], labels: &mut [u32]) {
    let chunk_values = CHUNK_ROWS * model.features;
    for (k, (chunk_xs, chunk_labels)) in xs
        .chunks_mut(chunk_values)
        .zip(labels.chunks_mut(CHUNK_ROWS))
        .enumerate()
    {
        let stream = (first_chunk + k) as u64 + 1;
        let mut rng = stream_rng(seed, stream);
        for (x, label) in chunk_xs.chunks_exact_mut(model.features).zip(chunk_labels) {
            fill_uniform(x, &mut rng);
            *label = model.label(x, &mut rng);
        }
    }
}

/// A random stream keyed by (seed, stream): distinct pairs give distinct ChaCha keys.
fn stream_rng(seed: u64, stream: u64) -> StdRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&stream.to_le_bytes());
    key[16..].copy_from_slice(b"harp.synthetic.1");
    StdRng::from_seed(key)
}

/// Fills `x` with values uniform in [-1, 1), two per 64 random bits.
fn fill_uniform(x: &mut [f32], rng: &mut StdRng) {
    let mut pairs = x.chunks_exact_mut(2);
    for pair in &mut pairs {
        let bits = rng.next_u64();
        pair[0] = unit_symmetric(bits as u32);
        pair[1] = unit_symmetric((bits >> 32) as u32);
    }
    for v in pairs.into_remainder() {
        *v = unit_symmetric(rng.next_u32());
    }
}

/// Maps 32 random bits to a float uniform in [-1, 1) using the top 24 bits.
fn unit_symmetric(bits: u32) -> f32 {
    const SCALE: f32 = 1.0 / (1u32 << 23) as f32;
    (bits >> 8) as f32 * SCALE - 1.0
}

/// A dot product with eight independent accumulators, which the compiler vectorizes.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let a_chunks = a.chunks_exact(LANES);
    let b_chunks = b.chunks_exact(LANES);
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn deterministic_and_valid() {
        let a = synthetic_classification(1000, 17, 4, 7).unwrap();
        let b = synthetic_classification(1000, 17, 4, 7).unwrap();
        let c = synthetic_classification(1000, 17, 4, 8).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.features, c.features);
        assert_eq!(a.rows(), 1000);
        assert_eq!(a.num_features, 17);
        assert_eq!(a.num_classes, 4);
        assert_eq!(
            a.source,
            "synthetic(rows=1000,features=17,classes=4,seed=7)"
        );
        assert!(a.features.iter().all(|v| (-1.0..1.0).contains(v)));
        // Re-validating through the checked constructor succeeds.
        Dataset::new(
            a.features.clone(),
            a.labels.clone(),
            17,
            4,
            a.source.clone(),
        )
        .unwrap();
        // Every class shows up.
        for class in 0..4 {
            assert!(a.labels.contains(&class), "class {class} missing");
        }
    }

    #[test]
    fn independent_of_thread_count_and_prefix_stable() {
        // A shorter dataset is a prefix of a longer one with the same seed: rows depend
        // only on (seed, chunk), not on how work was split.
        let long = synthetic_classification(3 * CHUNK_ROWS + 5, 9, 3, 1).unwrap();
        let short = synthetic_classification(CHUNK_ROWS + 1, 9, 3, 1).unwrap();
        assert_eq!(short.features[..], long.features[..short.features.len()]);
        assert_eq!(short.labels[..], long.labels[..short.rows()]);
        // A serial run gives the same data as the parallel one.
        let model = Model::random(9, 3, 27, 1);
        let mut xs = vec![0.0; long.features.len()];
        let mut labels = vec![0; long.rows()];
        fill_batch(&model, 1, 0, &mut xs, &mut labels);
        assert_eq!(xs, long.features);
        assert_eq!(labels, long.labels);
    }

    #[test]
    fn bad_arguments() {
        for (r, f, c) in [
            (0, 1, 1),
            (1, 0, 1),
            (1, 1, 0),
            (usize::MAX, 2, 2),
            (1 << 20, 1 << 20, 2),
        ] {
            let err = synthetic_classification(r, f, c, 0).unwrap_err();
            assert!(matches!(err, DataError::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains("synthetic(rows="), "{err}");
        }
    }

    #[test]
    fn dot_matches_naive() {
        for n in [0, 1, 7, 8, 9, 31] {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-3, "{n}");
        }
    }

    /// Trains a few epochs of plain softmax regression and checks it beats chance by far.
    #[test]
    fn learnable_by_softmax_regression() {
        let (features, classes) = (20, 5);
        let data = synthetic_classification(6000, features, classes, 42).unwrap();
        let (train, test) = data.split_tail(1000).unwrap();
        let mut w = vec![0.0f32; features * classes];
        let learning_rate = 0.1;
        let mut probs = vec![0.0f32; classes];
        for _epoch in 0..5 {
            for i in 0..train.rows() {
                let x = train.row(i);
                for c in 0..classes {
                    probs[c] = (0..features).map(|j| x[j] * w[j * classes + c]).sum();
                }
                let max = probs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0;
                for p in probs.iter_mut() {
                    *p = (*p - max).exp();
                    total += *p;
                }
                for c in 0..classes {
                    let target = if train.labels[i] as usize == c {
                        1.0
                    } else {
                        0.0
                    };
                    let g = probs[c] / total - target;
                    for j in 0..features {
                        w[j * classes + c] -= learning_rate * g * x[j];
                    }
                }
            }
        }
        let correct = (0..test.rows())
            .filter(|&i| {
                let x = test.row(i);
                let scores: Vec<f32> = (0..classes)
                    .map(|c| (0..features).map(|j| x[j] * w[j * classes + c]).sum())
                    .collect();
                let best = (0..classes)
                    .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
                    .unwrap();
                best == test.labels[i] as usize
            })
            .count();
        let accuracy = correct as f64 / test.rows() as f64;
        println!("synthetic softmax accuracy: {accuracy:.3}");
        assert!(
            accuracy > 0.6,
            "accuracy {accuracy} is too close to chance (0.2)"
        );
    }

    /// The size the apps use; run with `cargo test --release -- --ignored large`.
    #[test]
    #[ignore]
    fn large_is_fast() {
        let start = Instant::now();
        let d = synthetic_classification(200_000, 1_000, 10, 3).unwrap();
        let seconds = start.elapsed().as_secs_f64();
        println!("200000 x 1000 x 10 in {seconds:.2} s");
        assert_eq!(d.features.len(), 200_000_000);
        let mut counts = [0usize; 10];
        for &label in &d.labels {
            counts[label as usize] += 1;
        }
        println!("class counts: {counts:?}");
    }
}
