//! Plain f64 references for the update rules in [`super`]: same contracts, every
//! element computed in double precision straight from the textbook formula, then
//! rounded once to f32. Tests compare the fast rules against these. Each returns
//! the same errors as the rule it mirrors.

use super::{AdaGrad, Adam};
use crate::error::{check_len, KernelError};

/// Reference for [`add_assign`](super::add_assign): `dst += src`.
pub fn add_assign_reference(dst: &mut [f32], src: &[f32]) -> Result<(), KernelError> {
    axpy_reference(dst, 1.0, src)
}

/// Reference for [`axpy`](super::axpy): `dst += alpha * src`.
pub fn axpy_reference(dst: &mut [f32], alpha: f32, src: &[f32]) -> Result<(), KernelError> {
    check_len("src", dst.len(), src.len())?;
    for i in 0..dst.len() {
        dst[i] = (f64::from(dst[i]) + f64::from(alpha) * f64::from(src[i])) as f32;
    }
    Ok(())
}

/// Reference for [`adagrad_step`](super::adagrad_step).
pub fn adagrad_step_reference(
    w: &mut [f32],
    accum: &mut [f32],
    grad: &[f32],
    p: AdaGrad,
) -> Result<(), KernelError> {
    p.check_step([w.len(), accum.len(), grad.len()])?;
    let (lr, eps) = (f64::from(p.lr), f64::from(p.eps));
    for i in 0..w.len() {
        let g = f64::from(grad[i]);
        let a = f64::from(accum[i]) + g * g;
        accum[i] = a as f32;
        w[i] = (f64::from(w[i]) - lr * g / (a.sqrt() + eps)) as f32;
    }
    Ok(())
}

/// Reference for [`adam_step`](super::adam_step).
pub fn adam_step_reference(
    w: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
    step: u64,
    p: Adam,
) -> Result<(), KernelError> {
    p.check_step(step, [w.len(), m.len(), v.len(), grad.len()])?;
    let (lr, b1, b2, eps) = (
        f64::from(p.lr),
        f64::from(p.beta1),
        f64::from(p.beta2),
        f64::from(p.eps),
    );
    let t = step as f64;
    for i in 0..w.len() {
        let g = f64::from(grad[i]);
        let mi = b1 * f64::from(m[i]) + (1.0 - b1) * g;
        let vi = b2 * f64::from(v[i]) + (1.0 - b2) * g * g;
        let m_hat = mi / (1.0 - b1.powf(t));
        let v_hat = vi / (1.0 - b2.powf(t));
        m[i] = mi as f32;
        v[i] = vi as f32;
        w[i] = (f64::from(w[i]) - lr * m_hat / (v_hat.sqrt() + eps)) as f32;
    }
    Ok(())
}
