//! ReLU forward and backward, element-wise over buffers of any shape.
//!
//! The backward pass takes the ReLU *output* `y` (not its input): `y > 0` exactly
//! where the input was positive, and keeping only `y` lets the forward run in place.
//! The derivative at 0 is taken as 0.

use crate::error::{check_len, KernelError};

/// `y = max(x, 0)` element-wise. A NaN input gives a NaN output.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if `y` and `x` differ in length.
pub fn relu_forward(x: &[f32], y: &mut [f32]) -> Result<(), KernelError> {
    check_len("y", x.len(), y.len())?;
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv = relu(xv);
    }
    Ok(())
}

/// `x = max(x, 0)` in place.
pub fn relu_in_place(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = relu(*v);
    }
}

/// `dx = dy` where `y > 0`, else 0, given the forward output `y`.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if `dy` or `dx` differs in length from `y`.
pub fn relu_backward(y: &[f32], dy: &[f32], dx: &mut [f32]) -> Result<(), KernelError> {
    check_len("dy", y.len(), dy.len())?;
    check_len("dx", y.len(), dx.len())?;
    for ((d, &g), &yv) in dx.iter_mut().zip(dy).zip(y) {
        *d = if yv > 0.0 { g } else { 0.0 };
    }
    Ok(())
}

/// [`relu_backward`] in place: `grad` holds `dy` on entry and `dx` on return.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if `grad` differs in length from `y`.
pub fn relu_backward_in_place(y: &[f32], grad: &mut [f32]) -> Result<(), KernelError> {
    check_len("grad", y.len(), grad.len())?;
    for (g, &yv) in grad.iter_mut().zip(y) {
        *g = if yv > 0.0 { *g } else { 0.0 };
    }
    Ok(())
}

/// `max(v, 0)`, passing NaN through (unlike `f32::max`); written as one select so
/// the loops vectorize.
#[inline]
fn relu(v: f32) -> f32 {
    if v <= 0.0 {
        0.0
    } else {
        v
    }
}
