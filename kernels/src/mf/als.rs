//! ALS half-step: one regularized least-squares solve per row, by Cholesky.

use super::sgd::dot;
use super::{validate_als, Csr};
use crate::error::KernelError;

/// One ALS-WR half-step. For every row `u` of `csr` with `n_u` observed entries
/// `(c, r)`, solves
/// `(Σ_c q_c q_cᵀ + λ n_u I) x_u = Σ_c r q_c`
/// where `q_c` is row `c` of `fixed` (`cols × rank`), and writes `x_u` to row `u` of
/// `out` (`rows × rank`). Rows without entries get `x_u = 0`. The system is assembled
/// in `f32` (lower triangle) and factored in place by Cholesky.
///
/// For the user half-step pass the user→item CSR, `fixed = q` and `out = p`; for the
/// item half-step the item→user CSR, `fixed = p`, `out = q`.
///
/// # Errors
/// Before anything is written: [`KernelError::ZeroDimension`] if `rank` is 0;
/// [`KernelError::InvalidHyperparameter`] unless `lambda` is finite and positive;
/// [`KernelError::LengthMismatch`] if `fixed`/`out` are not whole rows, `out` does not
/// have one row per CSR row, `values` differs from `cols` in length or `offsets` is
/// empty; [`KernelError::IndexOutOfRange`] for a bad offset (first one not 0,
/// decreasing, last one not `cols.len()`) or a column without a row in `fixed`;
/// [`KernelError::InvalidValue`] for a non-finite rating or factor entry.
/// [`KernelError::NotPositiveDefinite`] if a factorization fails (only possible when
/// the `f32` system overflows); all rows are solved into scratch first, so nothing is
/// written then either.
pub fn als_half_step(
    rank: usize,
    lambda: f32,
    csr: Csr<'_>,
    fixed: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let rows = validate_als(rank, lambda, csr, fixed, out)?;
    let k = rank;
    let mut a = vec![0.0f32; k * k];
    let mut b = vec![0.0f32; k];
    let mut x = vec![0.0f32; rows * k];
    for (row, xr) in x.chunks_exact_mut(k).enumerate() {
        let (s, e) = (csr.offsets[row] as usize, csr.offsets[row + 1] as usize);
        if s == e {
            continue; // x_u = 0
        }
        a.fill(0.0);
        b.fill(0.0);
        for (&c, &r) in csr.cols[s..e].iter().zip(&csr.values[s..e]) {
            let qc = &fixed[c as usize * k..(c as usize + 1) * k];
            for (i, &qi) in qc.iter().enumerate() {
                let ai = &mut a[i * k..i * k + i + 1];
                for (av, &ql) in ai.iter_mut().zip(&qc[..=i]) {
                    *av += qi * ql;
                }
                b[i] += r * qi;
            }
        }
        let reg = lambda * (e - s) as f32;
        for i in 0..k {
            a[i * k + i] += reg;
        }
        if !cholesky_in_place(&mut a, k) {
            return Err(KernelError::NotPositiveDefinite { row });
        }
        solve_in_place(&a, k, &mut b);
        xr.copy_from_slice(&b);
    }
    out.copy_from_slice(&x);
    Ok(())
}

/// Factors the symmetric matrix whose lower triangle is in `a` (row-major `k × k`)
/// as `L Lᵀ`, overwriting the lower triangle with `L`. Returns false if a pivot is not
/// positive and finite.
fn cholesky_in_place(a: &mut [f32], k: usize) -> bool {
    for j in 0..k {
        let (head, tail) = a.split_at_mut((j + 1) * k);
        let rj = &mut head[j * k..j * k + j + 1];
        let d = rj[j] - dot(&rj[..j], &rj[..j]);
        if !(d > 0.0 && d.is_finite()) {
            return false;
        }
        let ljj = d.sqrt();
        rj[j] = ljj;
        let inv = 1.0 / ljj;
        let rj = &rj[..j];
        for ri in tail.chunks_exact_mut(k) {
            ri[j] = (ri[j] - dot(&ri[..j], rj)) * inv;
        }
    }
    true
}

/// Solves `L Lᵀ x = b` in place, with `L` the lower triangle of `l`.
fn solve_in_place(l: &[f32], k: usize, b: &mut [f32]) {
    for i in 0..k {
        let li = &l[i * k..i * k + i];
        b[i] = (b[i] - dot(li, &b[..i])) / l[i * k + i];
    }
    for i in (0..k).rev() {
        let mut s = b[i];
        for m in i + 1..k {
            s -= l[m * k + i] * b[m];
        }
        b[i] = s / l[i * k + i];
    }
}
