//! Squared error and RMSE of a factorization over a rating set.

use super::{validate_ratings, Ratings};
use crate::error::KernelError;

/// `Σ_j (values[j] − p_{users[j]}·q_{items[j]})²`, accumulated in `f64` (each dot
/// product too). Shards of a rating set can be summed and combined into an RMSE.
///
/// # Errors
/// [`KernelError::ZeroDimension`] if `rank` is 0; [`KernelError::LengthMismatch`] if
/// `p`/`q` are not whole rows or the rating slices differ in length;
/// [`KernelError::IndexOutOfRange`] for an id without a row;
/// [`KernelError::InvalidValue`] for a non-finite rating.
pub fn squared_error_sum(
    rank: usize,
    ratings: Ratings<'_>,
    p: &[f32],
    q: &[f32],
) -> Result<f64, KernelError> {
    validate_ratings(rank, ratings, p, q)?;
    let k = rank;
    let mut sum = 0.0f64;
    for ((&u, &i), &r) in ratings.users.iter().zip(ratings.items).zip(ratings.values) {
        let (u, i) = (u as usize * k, i as usize * k);
        let pred: f64 = p[u..u + k]
            .iter()
            .zip(&q[i..i + k])
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let e = f64::from(r) - pred;
        sum += e * e;
    }
    Ok(sum)
}

/// Root-mean-square error `sqrt(squared_error_sum / n)` over the `n` ratings.
///
/// # Errors
/// [`KernelError::ZeroDimension`] (`what = "ratings"`) for an empty rating set;
/// otherwise as [`squared_error_sum`].
pub fn rmse(rank: usize, ratings: Ratings<'_>, p: &[f32], q: &[f32]) -> Result<f64, KernelError> {
    let sum = squared_error_sum(rank, ratings, p, q)?;
    if ratings.values.is_empty() {
        return Err(KernelError::ZeroDimension { what: "ratings" });
    }
    Ok((sum / ratings.values.len() as f64).sqrt())
}
