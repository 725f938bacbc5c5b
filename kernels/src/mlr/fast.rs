//! Fast MLR path: two single-precision GEMMs (`matrixmultiply::sgemm`) around a
//! stable row-wise softmax, with all intermediates in [`MlrScratch`].

use super::softmax::{softmax_xent_in_place, xent_and_argmax};
use super::{validate, MlrScratch, MlrShape};
use crate::error::{check_len, KernelError};

/// Fast path. `x`: rows×features row-major (rows = `labels.len()`); `labels[i] < classes`;
/// `w`: features×classes row-major; `grad`: features×classes row-major, OVERWRITTEN with
///   `grad = sum_i x_iᵀ (softmax(x_i W) - onehot(y_i))`      (a SUM over the batch, not a mean)
///
/// Returns the SUM over the batch of the cross-entropy loss `-ln softmax(x_i W)[y_i]`, as f64.
/// An empty batch yields an all-zero `grad` and loss 0. On error nothing is written.
///
/// # Errors
/// [`KernelError::ZeroDimension`] if `features` or `classes` is 0;
/// [`KernelError::LengthMismatch`] if `x`, `w` or `grad` do not match the shape;
/// [`KernelError::LabelOutOfRange`] (naming the first bad row) if a label is `>= classes`;
/// [`KernelError::ShapeOverflow`] if a buffer size overflows `usize`.
pub fn gradient(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
    grad: &mut [f32],
    scratch: &mut MlrScratch,
) -> Result<f64, KernelError> {
    gradient_scaled(shape, x, labels, w, 1.0, grad, scratch)
}

/// [`gradient`] with the result multiplied by `alpha` inside the GEMM (no extra pass):
/// `grad = alpha * sum_i x_iᵀ (softmax(x_i W) - onehot(y_i))`. An SGD step writes its
/// update directly with `alpha = -lr / rows`. The returned loss is not scaled.
///
/// # Errors
/// As [`gradient`].
pub fn gradient_scaled(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
    alpha: f32,
    grad: &mut [f32],
    scratch: &mut MlrScratch,
) -> Result<f64, KernelError> {
    let rows = validate(shape, x, labels, w)?;
    check_len("grad", w.len(), grad.len())?;
    if rows == 0 {
        grad.fill(0.0);
        return Ok(0.0);
    }
    let probs = logits(shape, rows, x, w, scratch)?;

    // P - Y, row by row, accumulating the loss.
    let mut loss = 0.0f64;
    for (row, &label) in probs.chunks_exact_mut(shape.classes).zip(labels) {
        // `validate` checked label < classes == row.len().
        let label = label as usize;
        loss += softmax_xent_in_place(row, label);
        row[label] -= 1.0;
    }

    // grad (F×C) = Xᵀ (F×B) · (P - Y) (B×C). Xᵀ is read straight out of `x` by
    // swapping its strides (row stride 1, column stride `features`).
    let (f, c) = (shape.features as isize, shape.classes as isize);
    // SAFETY: dimensions and strides describe exactly the validated buffers:
    // Xᵀ element (j, i) is x[i*features + j] < rows*features = x.len();
    // (P - Y) is rows×classes = probs.len() row-major; grad is features×classes =
    // grad.len() row-major with non-aliasing strides. beta = 0 means grad's old
    // contents are never read. All sizes are lengths of live slices, so the `as isize`
    // casts cannot wrap.
    unsafe {
        matrixmultiply::sgemm(
            shape.features,
            rows,
            shape.classes,
            alpha,
            x.as_ptr(),
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
    Ok(loss)
}

/// Evaluation: returns (number of rows whose argmax class == label, summed cross-entropy loss).
///
/// Ties in the argmax go to the lowest class index. Same input contract as [`gradient`].
///
/// # Errors
/// [`KernelError::ZeroDimension`] if `features` or `classes` is 0;
/// [`KernelError::LengthMismatch`] if `x`, `w` do not match the shape;
/// [`KernelError::LabelOutOfRange`] (naming the first bad row) if a label is `>= classes`;
/// [`KernelError::ShapeOverflow`] if a buffer size overflows `usize`.
pub fn evaluate(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
    scratch: &mut MlrScratch,
) -> Result<(usize, f64), KernelError> {
    let rows = validate(shape, x, labels, w)?;
    if rows == 0 {
        return Ok((0, 0.0));
    }
    let logits = logits(shape, rows, x, w, scratch)?;
    let mut correct = 0usize;
    let mut loss = 0.0f64;
    for (row, &label) in logits.chunks_exact(shape.classes).zip(labels) {
        // `validate` checked label < classes == row.len().
        let (row_loss, predicted) = xent_and_argmax(row, label as usize);
        loss += row_loss;
        correct += usize::from(predicted == label as usize);
    }
    Ok((correct, loss))
}

/// Computes `X · W` (rows×classes) into the scratch buffer and returns it.
/// Inputs must already be validated by [`validate`] with `rows > 0`.
fn logits<'s>(
    shape: MlrShape,
    rows: usize,
    x: &[f32],
    w: &[f32],
    scratch: &'s mut MlrScratch,
) -> Result<&'s mut [f32], KernelError> {
    let len = rows
        .checked_mul(shape.classes)
        .ok_or(KernelError::ShapeOverflow { what: "logits" })?;
    let out = scratch.logits(len);
    let (f, c) = (shape.features as isize, shape.classes as isize);
    // SAFETY: X is rows×features = x.len() row-major, W is features×classes = w.len()
    // row-major, `out` is rows×classes = out.len() row-major (non-aliasing strides);
    // all three lengths were checked. beta = 0 means `out`'s stale contents are never
    // read. All sizes are lengths of live slices, so the `as isize` casts cannot wrap.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            shape.features,
            shape.classes,
            1.0,
            x.as_ptr(),
            f,
            1,
            w.as_ptr(),
            c,
            1,
            0.0,
            out.as_mut_ptr(),
            c,
            1,
        );
    }
    Ok(out)
}
