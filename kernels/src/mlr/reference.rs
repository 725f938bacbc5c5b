//! Plain MLR reference: triple loops with f64 accumulation and no GEMM. Slow but
//! obviously correct; the tests check the fast path against it.

use super::{validate, MlrShape};
use crate::error::{check_len, KernelError};

/// Plain reference: triple loops, f64 accumulation, no GEMM; same contract as
/// [`gradient`](super::gradient). Allocates its own f64 buffers on every call.
///
/// # Errors
/// The same as [`gradient`](super::gradient).
pub fn gradient_reference(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
    grad: &mut [f32],
) -> Result<f64, KernelError> {
    let rows = validate(shape, x, labels, w)?;
    check_len("grad", w.len(), grad.len())?;
    let (features, classes) = (shape.features, shape.classes);

    let mut acc = vec![0.0f64; features * classes];
    let mut z = vec![0.0f64; classes];
    let mut loss = 0.0f64;
    for (xi, &label) in x.chunks_exact(features).zip(labels).take(rows) {
        let label = label as usize;
        // z = x_i W
        for (c, zc) in z.iter_mut().enumerate() {
            *zc = (0..features)
                .map(|j| f64::from(xi[j]) * f64::from(w[j * classes + c]))
                .sum();
        }
        // log-sum-exp, stable.
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
        loss += lse - z[label];
        // acc += x_iᵀ (softmax(z) - onehot(label))
        for (c, &zc) in z.iter().enumerate() {
            let d = (zc - lse).exp() - if c == label { 1.0 } else { 0.0 };
            for (j, &xij) in xi.iter().enumerate() {
                acc[j * classes + c] += f64::from(xij) * d;
            }
        }
    }
    for (g, a) in grad.iter_mut().zip(&acc) {
        *g = *a as f32;
    }
    Ok(loss)
}
