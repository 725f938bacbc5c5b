//! Fast element-wise update rules: validated up front, then one slice-zip loop each
//! so the compiler can vectorize them.

use super::{AdaGrad, Adam};
use crate::error::{check_len, KernelError};

/// `dst += src` element-wise.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the slices differ in length.
pub fn add_assign(dst: &mut [f32], src: &[f32]) -> Result<(), KernelError> {
    check_len("src", dst.len(), src.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += s;
    }
    Ok(())
}

/// `dst += alpha * src` element-wise.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the slices differ in length.
pub fn axpy(dst: &mut [f32], alpha: f32, src: &[f32]) -> Result<(), KernelError> {
    check_len("src", dst.len(), src.len())?;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += alpha * s;
    }
    Ok(())
}

/// `accum += g²; w -= lr * g / (sqrt(accum) + eps)` (element-wise).
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the slices differ in length;
/// [`KernelError::InvalidHyperparameter`] if [`AdaGrad::validate`] fails.
pub fn adagrad_step(
    w: &mut [f32],
    accum: &mut [f32],
    grad: &[f32],
    p: AdaGrad,
) -> Result<(), KernelError> {
    p.check_step([w.len(), accum.len(), grad.len()])?;
    let AdaGrad { lr, eps } = p;
    for ((wi, ai), &g) in w.iter_mut().zip(accum.iter_mut()).zip(grad) {
        *ai += g * g;
        *wi -= lr * g / (ai.sqrt() + eps);
    }
    Ok(())
}

/// Standard Adam with bias correction; `step` is the 1-based step count of this row
/// AFTER this update (t).
///
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; w -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)`
///
/// # Errors
/// [`KernelError::ZeroStep`] if `step == 0`;
/// [`KernelError::InvalidHyperparameter`] if [`Adam::validate`] fails;
/// [`KernelError::LengthMismatch`] if the slices differ in length.
pub fn adam_step(
    w: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
    step: u64,
    p: Adam,
) -> Result<(), KernelError> {
    p.check_step(step, [w.len(), m.len(), v.len(), grad.len()])?;

    // Bias corrections in f64, hoisted out of the loop:
    // (m/bc1) / (sqrt(v/bc2) + eps) == (lr/bc1) * m / (sqrt(v) * (1/sqrt(bc2)) + eps).
    let t = step as f64;
    let bc1 = 1.0 - f64::from(p.beta1).powf(t);
    let bc2 = 1.0 - f64::from(p.beta2).powf(t);
    let step_size = (f64::from(p.lr) / bc1) as f32;
    let inv_sqrt_bc2 = (1.0 / bc2.sqrt()) as f32;
    let (b1, b2, eps) = (p.beta1, p.beta2, p.eps);
    let (one_minus_b1, one_minus_b2) = (1.0 - b1, 1.0 - b2);

    for (((wi, mi), vi), &g) in w.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(grad) {
        *mi = b1 * *mi + one_minus_b1 * g;
        *vi = b2 * *vi + one_minus_b2 * g * g;
        *wi -= step_size * *mi / (vi.sqrt() * inv_sqrt_bc2 + eps);
    }
    Ok(())
}
