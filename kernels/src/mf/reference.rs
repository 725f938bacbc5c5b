//! Plain `f64` references for the MF kernels: same contracts and errors, every
//! quantity computed in double precision and rounded once to `f32` when stored.

use super::{factor_rows, validate_als, validate_csr, validate_ratings, Csr, Ratings, Sgd};
use crate::error::KernelError;

/// Reference for [`sgd_step`](super::sgd_step): the same sequential updates in `f64`,
/// factors rounded to `f32` after each rating.
pub fn sgd_step_reference(
    rank: usize,
    sgd: Sgd,
    ratings: Ratings<'_>,
    p: &mut [f32],
    q: &mut [f32],
) -> Result<(), KernelError> {
    sgd.validate()?;
    validate_ratings(rank, ratings, p, q)?;
    let (lr, lambda) = (f64::from(sgd.lr), f64::from(sgd.lambda));
    let k = rank;
    for j in 0..ratings.values.len() {
        let (u, i) = (ratings.users[j] as usize * k, ratings.items[j] as usize * k);
        let pred: f64 = (0..k)
            .map(|m| f64::from(p[u + m]) * f64::from(q[i + m]))
            .sum();
        let e = f64::from(ratings.values[j]) - pred;
        for m in 0..k {
            let (pa, qb) = (f64::from(p[u + m]), f64::from(q[i + m]));
            p[u + m] = (pa + lr * (e * qb - lambda * pa)) as f32;
            q[i + m] = (qb + lr * (e * pa - lambda * qb)) as f32;
        }
    }
    Ok(())
}

/// Reference for [`als_half_step`](super::als_half_step): the full normal matrix in
/// `f64`, Cholesky in `f64`, solution rounded to `f32`.
pub fn als_half_step_reference(
    rank: usize,
    lambda: f32,
    csr: Csr<'_>,
    fixed: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let rows = validate_als(rank, lambda, csr, fixed, out)?;
    let k = rank;
    let mut x = vec![0.0f32; rows * k];
    for row in 0..rows {
        let (s, e) = (csr.offsets[row] as usize, csr.offsets[row + 1] as usize);
        if s == e {
            continue;
        }
        let (mut a, b) = assemble(k, f64::from(lambda), csr, fixed, row);
        let mut l = vec![0.0f64; k * k];
        for j in 0..k {
            let d = a[j * k + j] - (0..j).map(|m| l[j * k + m].powi(2)).sum::<f64>();
            if !(d > 0.0 && d.is_finite()) {
                return Err(KernelError::NotPositiveDefinite { row });
            }
            l[j * k + j] = d.sqrt();
            for i in j + 1..k {
                let s: f64 = (0..j).map(|m| l[i * k + m] * l[j * k + m]).sum();
                l[i * k + j] = (a[i * k + j] - s) / l[j * k + j];
            }
        }
        a.clear();
        let mut y = vec![0.0f64; k];
        for i in 0..k {
            let s: f64 = (0..i).map(|m| l[i * k + m] * y[m]).sum();
            y[i] = (b[i] - s) / l[i * k + i];
        }
        for i in (0..k).rev() {
            let s: f64 = (i + 1..k).map(|m| l[m * k + i] * y[m]).sum();
            y[i] = (y[i] - s) / l[i * k + i];
        }
        for (o, v) in x[row * k..(row + 1) * k].iter_mut().zip(&y) {
            *o = *v as f32;
        }
    }
    out.copy_from_slice(&x);
    Ok(())
}

/// The `f64` normal equations `(A, b)` of CSR row `row` of an ALS half-step:
/// `A = Σ q_c q_cᵀ + λ n_u I` (full `rank × rank`, row-major), `b = Σ r q_c`. Tests use
/// it to check the residual `A x − b` of a solution.
///
/// # Errors
/// As [`als_half_step`](super::als_half_step)'s validation of `rank`, `csr` and
/// `fixed` (not `lambda`, any finite value is accepted), plus
/// [`KernelError::IndexOutOfRange`] (`what = "row"`) if `row` is not a CSR row.
pub fn normal_equations(
    rank: usize,
    lambda: f32,
    csr: Csr<'_>,
    fixed: &[f32],
    row: usize,
) -> Result<(Vec<f64>, Vec<f64>), KernelError> {
    if !lambda.is_finite() {
        return Err(KernelError::InvalidHyperparameter {
            what: "lambda",
            value: lambda,
        });
    }
    let cols = factor_rows("fixed", fixed.len(), rank)?;
    let rows = validate_csr(csr, cols)?;
    if row >= rows {
        return Err(KernelError::IndexOutOfRange {
            what: "row",
            position: 0,
            index: row as u64,
        });
    }
    Ok(assemble(rank, f64::from(lambda), csr, fixed, row))
}

/// [`normal_equations`] without validation.
fn assemble(
    k: usize,
    lambda: f64,
    csr: Csr<'_>,
    fixed: &[f32],
    row: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (s, e) = (csr.offsets[row] as usize, csr.offsets[row + 1] as usize);
    let mut a = vec![0.0f64; k * k];
    let mut b = vec![0.0f64; k];
    for j in s..e {
        let c = csr.cols[j] as usize * k;
        let r = f64::from(csr.values[j]);
        for i in 0..k {
            let qi = f64::from(fixed[c + i]);
            for m in 0..k {
                a[i * k + m] += qi * f64::from(fixed[c + m]);
            }
            b[i] += r * qi;
        }
    }
    for i in 0..k {
        a[i * k + i] += lambda * (e - s) as f64;
    }
    (a, b)
}
