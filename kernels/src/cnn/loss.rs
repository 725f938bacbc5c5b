//! Softmax cross-entropy on a `batch × classes` row-major matrix of logits (the
//! batch is `labels.len()`): loss, logit gradient and accuracy count.

use crate::error::{check_len, KernelError};

/// Softmax cross-entropy with its logit gradient: overwrites `dlogits` with
/// `softmax(logits_i) − onehot(labels_i)` row by row and returns the SUM over the
/// batch of `−ln softmax(logits_i)[labels_i]`, as f64. Stable for large logits (the
/// row max is subtracted first). On error nothing is written.
///
/// # Errors
/// [`KernelError::ZeroDimension`] if `classes` is 0; [`KernelError::LengthMismatch`]
/// if `logits` or `dlogits` is not `labels.len() × classes`;
/// [`KernelError::LabelOutOfRange`] (naming the first bad row) if a label is
/// `>= classes`; [`KernelError::ShapeOverflow`] if the size overflows `usize`.
pub fn softmax_xent(
    classes: usize,
    logits: &[f32],
    labels: &[u32],
    dlogits: &mut [f32],
) -> Result<f64, KernelError> {
    softmax_xent_scaled(classes, logits, labels, 1.0, dlogits)
}

/// [`softmax_xent`] with the gradient multiplied by `scale` (e.g. `1/batch` for a
/// mean loss); the returned loss is not scaled.
///
/// # Errors
/// As [`softmax_xent`].
pub fn softmax_xent_scaled(
    classes: usize,
    logits: &[f32],
    labels: &[u32],
    scale: f32,
    dlogits: &mut [f32],
) -> Result<f64, KernelError> {
    validate(classes, logits, labels)?;
    check_len("dlogits", logits.len(), dlogits.len())?;
    let mut loss = 0.0f64;
    let rows = logits
        .chunks_exact(classes)
        .zip(dlogits.chunks_exact_mut(classes));
    for ((z, g), &label) in rows.zip(labels) {
        let label = label as usize;
        let max = row_max(z);
        let mut sum = 0.0f32;
        for (gv, &zv) in g.iter_mut().zip(z) {
            let e = (zv - max).exp();
            *gv = e;
            sum += e;
        }
        // sum >= 1: the max element contributes exp(0).
        let inv = scale / sum;
        for gv in g.iter_mut() {
            *gv *= inv;
        }
        g[label] -= scale;
        loss += f64::from(sum).ln() - f64::from(z[label] - max);
    }
    Ok(loss)
}

/// Evaluation: returns (number of rows whose argmax logit is the label, summed
/// cross-entropy loss). Ties in the argmax go to the lowest class; NaNs never win.
///
/// # Errors
/// As [`softmax_xent`] (without `dlogits`).
pub fn softmax_xent_evaluate(
    classes: usize,
    logits: &[f32],
    labels: &[u32],
) -> Result<(usize, f64), KernelError> {
    validate(classes, logits, labels)?;
    let mut correct = 0usize;
    let mut loss = 0.0f64;
    for (z, &label) in logits.chunks_exact(classes).zip(labels) {
        let label = label as usize;
        let mut best = 0;
        let mut max = f32::NEG_INFINITY;
        for (c, &v) in z.iter().enumerate() {
            if v > max {
                max = v;
                best = c;
            }
        }
        let sum: f32 = z.iter().map(|&v| (v - max).exp()).sum();
        loss += f64::from(sum).ln() - f64::from(z[label] - max);
        correct += usize::from(best == label);
    }
    Ok((correct, loss))
}

/// Checks `classes`, the logits length and every label.
pub(crate) fn validate(classes: usize, logits: &[f32], labels: &[u32]) -> Result<(), KernelError> {
    if classes == 0 {
        return Err(KernelError::ZeroDimension { what: "classes" });
    }
    let len = labels
        .len()
        .checked_mul(classes)
        .ok_or(KernelError::ShapeOverflow { what: "logits" })?;
    check_len("logits", len, logits.len())?;
    if let Some((row, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &label)| label as usize >= classes)
    {
        return Err(KernelError::LabelOutOfRange {
            row,
            label,
            classes,
        });
    }
    Ok(())
}

/// Largest element of `row` (NaNs skipped; `-inf` for an empty row).
#[inline]
fn row_max(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}
