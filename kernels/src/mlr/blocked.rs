//! The MLR gradient with the weight matrix split into row blocks, as a parameter server
//! stores it: block `b` holds features `b*block_features ..` (up to `block_features` of
//! them) × classes, row-major. Reading the blocks in place and writing each block's update
//! into its own buffer saves the caller two copies of the whole matrix per minibatch.
//!
//! Blocks narrower than [`GATHER_BELOW_BLOCK_FEATURES`] are copied into one matrix first
//! (and the gradient copied back out): one GEMM per pass instead of one per block. With
//! one feature per block (SCAR's experiments), the per-block GEMMs spent about 70% of the
//! time packing the batch's columns; the two copies are of the weights only, far smaller
//! than the batch.

use super::fast::gradient_scaled;
use super::softmax::softmax_xent_in_place;
use super::{validate_batch, MlrScratch, MlrShape};
use crate::error::{check_len, KernelError};

/// Blocks of fewer features than this are assembled into one weight matrix for one GEMM
/// per pass (see the module docs); wider blocks are multiplied in place.
pub const GATHER_BELOW_BLOCK_FEATURES: usize = 32;

/// `grad_blocks[b] = alpha * X[:, block b]ᵀ (softmax(X W) - onehot(y))`, where `W` is the
/// concatenation of `w_blocks`; padding rows of the last block (features past
/// `shape.features`) are ignored in `w` and zeroed in `grad`. Returns the summed
/// cross-entropy loss (unscaled). An empty batch zeroes every gradient block.
///
/// # Errors
/// As [`gradient`](super::gradient), plus [`KernelError::LengthMismatch`] when the number of
/// blocks is not `ceil(features / block_features)` or a block is not
/// `block_features * classes` long, and [`KernelError::ZeroDimension`] for
/// `block_features == 0`.
#[allow(clippy::too_many_arguments)]
pub fn gradient_blocked(
    shape: MlrShape,
    block_features: usize,
    x: &[f32],
    labels: &[u32],
    w_blocks: &[&[f32]],
    alpha: f32,
    grad_blocks: &mut [&mut [f32]],
    scratch: &mut MlrScratch,
) -> Result<f64, KernelError> {
    let rows = validate_batch(shape, x, labels)?;
    if block_features == 0 {
        return Err(KernelError::ZeroDimension {
            what: "block_features",
        });
    }
    let blocks = shape.features.div_ceil(block_features);
    check_len("w blocks", blocks, w_blocks.len())?;
    check_len("grad blocks", blocks, grad_blocks.len())?;
    let block_len = block_features
        .checked_mul(shape.classes)
        .ok_or(KernelError::ShapeOverflow { what: "block" })?;
    for w in w_blocks {
        check_len("w block", block_len, w.len())?;
    }
    for g in grad_blocks.iter() {
        check_len("grad block", block_len, g.len())?;
    }
    if rows == 0 {
        grad_blocks.iter_mut().for_each(|g| g.fill(0.0));
        return Ok(0.0);
    }
    if block_features < GATHER_BELOW_BLOCK_FEATURES {
        return gradient_assembled(
            shape,
            block_features,
            x,
            labels,
            w_blocks,
            alpha,
            grad_blocks,
            scratch,
        );
    }
    let len = rows
        .checked_mul(shape.classes)
        .ok_or(KernelError::ShapeOverflow { what: "logits" })?;
    let probs = scratch.logits(len);
    let (f, c) = (shape.features as isize, shape.classes as isize);
    for (b, w) in w_blocks.iter().enumerate() {
        let first = b * block_features;
        let k = block_features.min(shape.features - first);
        let beta = if b == 0 { 0.0 } else { 1.0 };
        // SAFETY: X[:, first..first+k] is read at x[i*features + first + j] for i < rows,
        // j < k, all < rows*features = x.len(); W_b's first k rows lie in w (k*classes <=
        // block_len = w.len()); `probs` is rows×classes = probs.len(). beta = 0 on the first
        // block, so stale contents are never read. Sizes come from live slices: no wrap.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                k,
                shape.classes,
                1.0,
                x.as_ptr().add(first),
                f,
                1,
                w.as_ptr(),
                c,
                1,
                beta,
                probs.as_mut_ptr(),
                c,
                1,
            );
        }
    }
    let mut loss = 0.0f64;
    for (row, &label) in probs.chunks_exact_mut(shape.classes).zip(labels) {
        // validate_batch checked label < classes == row.len().
        let label = label as usize;
        loss += softmax_xent_in_place(row, label);
        row[label] -= 1.0;
    }
    for (b, grad) in grad_blocks.iter_mut().enumerate() {
        let first = b * block_features;
        let k = block_features.min(shape.features - first);
        // SAFETY: X[:, first..first+k]ᵀ element (j, i) is x[i*features + first + j] <
        // x.len(); (P - Y) is rows×classes = probs.len(); grad's first k rows lie in the
        // block (k*classes <= grad.len()). beta = 0: old contents are never read.
        unsafe {
            matrixmultiply::sgemm(
                k,
                rows,
                shape.classes,
                alpha,
                x.as_ptr().add(first),
                1,
                f,
                probs.as_ptr(),
                c,
                1,
                0.0,
                grad.as_mut_ptr(),
                c,
                1,
            );
        }
        grad[k * shape.classes..].fill(0.0);
    }
    Ok(loss)
}

/// [`gradient_blocked`] for narrow blocks, on inputs it validated: the blocks' first rows
/// copied into one `features × classes` matrix, the contiguous gradient, and each block's
/// part copied back (padding rows zeroed).
#[allow(clippy::too_many_arguments)]
fn gradient_assembled(
    shape: MlrShape,
    block_features: usize,
    x: &[f32],
    labels: &[u32],
    w_blocks: &[&[f32]],
    alpha: f32,
    grad_blocks: &mut [&mut [f32]],
    scratch: &mut MlrScratch,
) -> Result<f64, KernelError> {
    let len = shape
        .features
        .checked_mul(shape.classes)
        .ok_or(KernelError::ShapeOverflow { what: "w" })?;
    // Taken out of the scratch while the contiguous kernel borrows it for the logits.
    let mut w = std::mem::take(&mut scratch.assembled);
    let mut grad = std::mem::take(&mut scratch.assembled_grad);
    w.resize(len, 0.0);
    grad.resize(len, 0.0);
    let part = |b: usize| {
        let first = b * block_features;
        let k = block_features.min(shape.features - first);
        (first * shape.classes, k * shape.classes)
    };
    for (b, block) in w_blocks.iter().enumerate() {
        let (at, n) = part(b);
        w[at..at + n].copy_from_slice(&block[..n]);
    }
    let result = gradient_scaled(shape, x, labels, &w, alpha, &mut grad, scratch);
    if result.is_ok() {
        for (b, block) in grad_blocks.iter_mut().enumerate() {
            let (at, n) = part(b);
            block[..n].copy_from_slice(&grad[at..at + n]);
            block[n..].fill(0.0);
        }
    }
    scratch.assembled = w;
    scratch.assembled_grad = grad;
    result
}
