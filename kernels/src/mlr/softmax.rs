//! Numerically stable per-row softmax / cross-entropy helpers (f32 data, f64 loss).

/// Largest element of `row` (NaNs are skipped; `-inf` for an empty row).
#[inline]
fn row_max(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// Replaces the logits in `row` by their softmax probabilities and returns the
/// cross-entropy loss `-ln softmax(row)[label]`.
///
/// Stable: the row max is subtracted before exponentiating, and the loss is
/// `ln(sum exp(l - max)) - (l[label] - max)`, which never takes the log of a tiny
/// probability. `label` must be `< row.len()` (callers validate labels).
#[inline]
pub(crate) fn softmax_xent_in_place(row: &mut [f32], label: usize) -> f64 {
    let max = row_max(row);
    let shifted_label = row[label] - max;
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        let e = (*v - max).exp();
        *v = e;
        sum += e;
    }
    // sum >= 1 because the max element contributes exp(0) = 1.
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
    f64::from(sum).ln() - f64::from(shifted_label)
}

/// Cross-entropy loss `-ln softmax(row)[label]` and the argmax of `row` (first
/// index on ties; NaNs never win), without modifying the row. `label` must be
/// `< row.len()`.
#[inline]
pub(crate) fn xent_and_argmax(row: &[f32], label: usize) -> (f64, usize) {
    let mut best = 0;
    let mut max = f32::NEG_INFINITY;
    for (c, &v) in row.iter().enumerate() {
        if v > max {
            max = v;
            best = c;
        }
    }
    let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
    let loss = f64::from(sum).ln() - f64::from(row[label] - max);
    (loss, best)
}
