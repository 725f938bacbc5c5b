//! Dense (fully connected) layer `y = x·W + b`, forward and backward, as batch-level
//! sgemm calls (`W` is `inputs × outputs` row-major, see [`Dense`]).

use super::gemm::{sgemm, Mat};
use super::shape::Dense;
use super::LayerGrads;
use crate::error::{check_len, KernelError};

/// Forward: `y = x·W + b`, with `x` `batch × inputs`, `w` `inputs × outputs`, `b`
/// `outputs`, and `y` (overwritten) `batch × outputs`. On error nothing is written.
///
/// # Errors
/// As [`Dense::validate`]; [`KernelError::LengthMismatch`] if a slice does not match
/// the layer and batch.
pub fn dense_forward(
    layer: &Dense,
    batch: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    for row in y.chunks_exact_mut(d.o) {
        row.copy_from_slice(b);
    }
    // y (batch × o) += x (batch × i) · W (i × o)
    sgemm(
        d.batch,
        d.i,
        d.o,
        1.0,
        Mat::rows(x, d.i),
        Mat::rows(w, d.o),
        1.0,
        y,
        d.o,
    )
}

/// Backward: given `x`, `w` and the output gradient `dy` (`batch × outputs`),
/// overwrites `grads.dw = xᵀ·dy` (`inputs × outputs`), `grads.db` = column sums of
/// `dy`, and, when present, `grads.dx = dy·Wᵀ` (`batch × inputs`). Gradients are
/// sums over the batch. On error nothing is written.
///
/// # Errors
/// As [`Dense::validate`]; [`KernelError::LengthMismatch`] if a slice does not match
/// the layer and batch.
pub fn dense_backward(
    layer: &Dense,
    batch: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: LayerGrads<'_>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    let LayerGrads { dx, dw, db } = grads;
    d.lens().check_backward(
        [x.len(), w.len(), dy.len()],
        dx.as_deref().map(<[f32]>::len),
        [dw.len(), db.len()],
    )?;

    db.fill(0.0);
    for row in dy.chunks_exact(d.o) {
        for (acc, &g) in db.iter_mut().zip(row) {
            *acc += g;
        }
    }
    // dw (i × o) = xᵀ (i × batch) · dy (batch × o); with batch == 0 this zeroes dw.
    sgemm(
        d.i,
        d.batch,
        d.o,
        1.0,
        Mat::transposed(x, d.i),
        Mat::rows(dy, d.o),
        0.0,
        dw,
        d.o,
    )?;
    if let Some(dx) = dx {
        // dx (batch × i) = dy (batch × o) · Wᵀ (o × i)
        sgemm(
            d.batch,
            d.o,
            d.i,
            1.0,
            Mat::rows(dy, d.o),
            Mat::transposed(w, d.o),
            0.0,
            dx,
            d.i,
        )?;
    }
    Ok(())
}
