//! Sequential SGD over a batch of ratings.

use super::{validate_ratings, Ratings, Sgd};
use crate::error::KernelError;

/// One SGD pass over `ratings`, in order (see [`Sgd`] for the update). `p` is
/// `users × rank`, `q` is `items × rank`; both are updated in place.
///
/// # Errors
/// [`KernelError::ZeroDimension`] if `rank` is 0; [`Sgd::validate`]'s errors;
/// [`KernelError::LengthMismatch`] if `p`/`q` are not whole rows or the rating slices
/// differ in length; [`KernelError::IndexOutOfRange`] (first bad position) for a user
/// or item id without a row; [`KernelError::InvalidValue`] for a non-finite rating.
/// On error nothing is written.
pub fn sgd_step(
    rank: usize,
    sgd: Sgd,
    ratings: Ratings<'_>,
    p: &mut [f32],
    q: &mut [f32],
) -> Result<(), KernelError> {
    sgd.validate()?;
    validate_ratings(rank, ratings, p, q)?;
    let Sgd { lr, lambda } = sgd;
    let k = rank;
    for ((&u, &i), &r) in ratings.users.iter().zip(ratings.items).zip(ratings.values) {
        let (u, i) = (u as usize * k, i as usize * k);
        let pu = &mut p[u..u + k];
        let qi = &mut q[i..i + k];
        let e = r - dot(pu, qi);
        for (a, b) in pu.iter_mut().zip(qi.iter_mut()) {
            let (pa, qb) = (*a, *b);
            *a = pa + lr * (e * qb - lambda * pa);
            *b = qb + lr * (e * pa - lambda * qb);
        }
    }
    Ok(())
}

/// `a·b` with eight independent partial sums (so it vectorizes).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    acc.iter().sum::<f32>() + tail
}
