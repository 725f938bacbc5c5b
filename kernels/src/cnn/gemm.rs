//! A bounds-checked front end to `matrixmultiply::sgemm`: every matrix is a slice
//! plus row and column strides, and the wrapper proves that the last element each
//! matrix touches lies inside its slice before calling the unsafe routine.

use crate::error::KernelError;

/// A read-only strided matrix view: element `(r, c)` is `data[r*rs + c*cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// Row-major view with `cols` columns.
    pub fn rows(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix with `cols` columns.
    pub fn transposed(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }
}

/// Checks that a `rows × cols` matrix with strides `rs`, `cs` fits in `len`
/// elements and that the strides are representable as `isize`.
fn check(
    what: &'static str,
    len: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
) -> Result<(), KernelError> {
    let last = (rows - 1)
        .checked_mul(rs)
        .and_then(|a| (cols - 1).checked_mul(cs).and_then(|b| a.checked_add(b)))
        .ok_or(KernelError::ShapeOverflow { what })?;
    if last >= len {
        return Err(KernelError::LengthMismatch {
            what,
            expected: last + 1,
            actual: len,
        });
    }
    if isize::try_from(rs).is_err() || isize::try_from(cs).is_err() {
        return Err(KernelError::ShapeOverflow { what });
    }
    Ok(())
}

/// `C = alpha · A·B + beta · C` with `A` `m × k`, `B` `k × n` and `C` `m × n`
/// (row-major with row stride `ldc`). With `beta == 0` the old contents of `C` are
/// never read. The callers pass views derived from validated shapes, so the checks
/// here only guard the `unsafe` call; they never fire on validated input.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), KernelError> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    check("gemm c", c.len(), m, n, ldc, 1)?;
    if m > 1 && ldc < n {
        return Err(KernelError::InvalidShape {
            what: "gemm c",
            reason: "rows overlap (row stride smaller than the row)",
        });
    }
    if k == 0 {
        for r in 0..m {
            for v in &mut c[r * ldc..r * ldc + n] {
                *v = if beta == 0.0 { 0.0 } else { beta * *v };
            }
        }
        return Ok(());
    }
    check("gemm a", a.data.len(), m, k, a.rs, a.cs)?;
    check("gemm b", b.data.len(), k, n, b.rs, b.cs)?;
    // SAFETY: `check` proved that every element the routine reads from A and B and
    // writes to C lies inside the respective slice, and that all strides fit in
    // isize. C's strides (ldc, 1) with ldc >= n when m > 1 (checked) address
    // distinct elements, and C is a unique borrow, so it aliases neither A nor B.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            ldc as isize,
            1,
        );
    }
    Ok(())
}
