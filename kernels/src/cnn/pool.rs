//! 2×2 max pooling with stride 2, forward (recording argmax indices) and backward.
//!
//! `argmax[k]` is the index, within its input plane (`y·in_w + x`), of the input
//! element that produced output `k`. Ties go to the first element of the window in
//! row-major order; comparisons are `>`, so a NaN in a window's first position
//! propagates and later NaNs are skipped.

use super::shape::{MaxPool2x2, PoolDims};
use crate::error::{check_len, KernelError};

/// Forward max pooling: `y` and `argmax` (both `batch × channels × out_h × out_w`)
/// are overwritten. On error nothing is written.
///
/// # Errors
/// As [`MaxPool2x2::validate`]; [`KernelError::LengthMismatch`] if a slice does not
/// match the layer and batch.
pub fn maxpool2x2_forward(
    layer: &MaxPool2x2,
    batch: usize,
    x: &[f32],
    y: &mut [f32],
    argmax: &mut [u32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("x", d.x_len, x.len())?;
    check_len("y", d.y_len, y.len())?;
    check_len("argmax", d.y_len, argmax.len())?;
    let out_plane = d.oh * d.ow;
    if out_plane == 0 {
        return Ok(());
    }
    let planes = x
        .chunks_exact(d.in_plane)
        .zip(y.chunks_exact_mut(out_plane))
        .zip(argmax.chunks_exact_mut(out_plane));
    for ((xp, yp), ap) in planes {
        for (oy, (yrow, arow)) in yp
            .chunks_exact_mut(d.ow)
            .zip(ap.chunks_exact_mut(d.ow))
            .enumerate()
        {
            let top = 2 * oy * d.w;
            let r0 = &xp[top..top + d.w];
            let r1 = &xp[top + d.w..top + 2 * d.w];
            for (ox, (yv, av)) in yrow.iter_mut().zip(arow.iter_mut()).enumerate() {
                let c = 2 * ox;
                let mut best = r0[c];
                let mut at = top + c;
                for (v, idx) in [
                    (r0[c + 1], top + c + 1),
                    (r1[c], top + d.w + c),
                    (r1[c + 1], top + d.w + c + 1),
                ] {
                    if v > best {
                        best = v;
                        at = idx;
                    }
                }
                *yv = best;
                // `dims` checked that plane indices fit in u32.
                *av = at as u32;
            }
        }
    }
    Ok(())
}

/// Backward max pooling: `dx` (`batch × channels × in_h × in_w`) is overwritten
/// with `dy[k]` at the input element `argmax[k]` recorded by the forward pass and 0
/// elsewhere. Every index is checked to lie in its own 2×2 window before anything
/// is written.
///
/// # Errors
/// As [`MaxPool2x2::validate`]; [`KernelError::LengthMismatch`] if a slice does not
/// match the layer and batch; [`KernelError::IndexOutOfRange`] (naming the first
/// bad position) if an argmax lies outside its window.
pub fn maxpool2x2_backward(
    layer: &MaxPool2x2,
    batch: usize,
    argmax: &[u32],
    dy: &[f32],
    dx: &mut [f32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("argmax", d.y_len, argmax.len())?;
    check_len("dy", d.y_len, dy.len())?;
    check_len("dx", d.x_len, dx.len())?;
    check_argmax(&d, argmax)?;
    dx.fill(0.0);
    let out_plane = d.oh * d.ow;
    if out_plane == 0 {
        return Ok(());
    }
    let planes = dx
        .chunks_exact_mut(d.in_plane)
        .zip(dy.chunks_exact(out_plane))
        .zip(argmax.chunks_exact(out_plane));
    for ((dxp, dyp), ap) in planes {
        for (&g, &a) in dyp.iter().zip(ap) {
            // Checked above: `a` lies in its window, inside the plane; windows do
            // not overlap, so each input receives at most one gradient.
            dxp[a as usize] = g;
        }
    }
    Ok(())
}

/// Checks that every argmax points into its own 2×2 window (no divisions: each
/// index is compared with its window's four positions).
pub(crate) fn check_argmax(d: &PoolDims, argmax: &[u32]) -> Result<(), KernelError> {
    let out_plane = d.oh * d.ow;
    if out_plane == 0 {
        return Ok(());
    }
    let bad = |k: usize, a: u32| KernelError::IndexOutOfRange {
        what: "argmax",
        position: k,
        index: u64::from(a),
    };
    for (plane, ap) in argmax.chunks_exact(out_plane).enumerate() {
        for (oy, arow) in ap.chunks_exact(d.ow).enumerate() {
            let mut base = 2 * oy * d.w;
            for (ox, &a) in arow.iter().enumerate() {
                let off = (a as usize).wrapping_sub(base);
                if off > 1 && off.wrapping_sub(d.w) > 1 {
                    return Err(bad(plane * out_plane + oy * d.ow + ox, a));
                }
                base += 2;
            }
        }
    }
    Ok(())
}
