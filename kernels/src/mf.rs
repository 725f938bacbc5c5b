//! Matrix factorization `R ≈ P Qᵀ` for explicit ratings (e.g. MovieLens): SGD updates,
//! ALS half-steps and RMSE.
//!
//! This module owns the rating layouts ([`Ratings`], [`Csr`]), the SGD hyperparameters
//! ([`Sgd`]) and the validation shared by the fast kernels (`sgd`, `als`, `loss`) and
//! the plain `f64` versions in [`reference`](mod@reference).
//!
//! # Layouts
//! `k = rank`. Everything is flat and row-major, factors in `f32`:
//! * `p`: `users × k`, row `u` = user `u`'s factor; `q`: `items × k`, row `i` = item
//!   `i`'s factor. The number of users (items) is `p.len() / k` (`q.len() / k`);
//! * [`Ratings`] (coordinate form, for SGD and RMSE): parallel slices `users[j]`,
//!   `items[j]`, `values[j]`, one rating per position;
//! * [`Csr`] (compressed rows, for ALS): the observed entries of one side, row `u`'s
//!   entries are `cols[offsets[u]..offsets[u+1]]` with ratings `values[..]` at the same
//!   positions. `offsets` has `rows + 1` entries, starts at 0, never decreases and
//!   ends at `cols.len()`. For the user half-step rows are users and columns items;
//!   for the item half-step, the transpose.
//!
//! Ids are `u32`; CSR offsets are `u32` too, so one call handles fewer than 2³² ratings.
//! Public functions never panic on bad input: lengths, ids, offsets, ratings and
//! hyperparameters are validated before anything is written.

mod als;
mod loss;
pub mod reference;
mod sgd;

pub use als::als_half_step;
pub use loss::{rmse, squared_error_sum};
pub use sgd::sgd_step;

use crate::error::{check_len, KernelError};

/// Ratings in coordinate form: rating `j` is `values[j]` for (`users[j]`, `items[j]`).
#[derive(Clone, Copy, Debug)]
pub struct Ratings<'a> {
    /// User id (row of `p`) of each rating.
    pub users: &'a [u32],
    /// Item id (row of `q`) of each rating.
    pub items: &'a [u32],
    /// The rating values (finite).
    pub values: &'a [f32],
}

/// The observed entries of one side in compressed-sparse-row form (see the [module
/// docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct Csr<'a> {
    /// `rows + 1` offsets into `cols` / `values`.
    pub offsets: &'a [u32],
    /// Column id of each entry (a row of the fixed factor matrix).
    pub cols: &'a [u32],
    /// Rating of each entry (finite).
    pub values: &'a [f32],
}

/// SGD hyperparameters: learning rate `lr` and L2 regularization `lambda`.
///
/// Per rating `r` of (u, i): `e = r − p_u·q_i`, then simultaneously
/// `p_u += lr (e q_i − λ p_u)` and `q_i += lr (e p_u − λ q_i)` (both from the old values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// Learning rate (finite, ≥ 0).
    pub lr: f32,
    /// L2 regularization λ (finite, ≥ 0).
    pub lambda: f32,
}

impl Sgd {
    /// Checks `lr` and `lambda` are finite and non-negative.
    ///
    /// # Errors
    /// [`KernelError::InvalidHyperparameter`] naming the first bad field.
    pub fn validate(&self) -> Result<(), KernelError> {
        non_negative("lr", self.lr)?;
        non_negative("lambda", self.lambda)
    }
}

fn non_negative(what: &'static str, value: f32) -> Result<(), KernelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(KernelError::InvalidHyperparameter { what, value })
    }
}

/// Number of `k`-wide rows in a factor matrix of length `len`.
pub(crate) fn factor_rows(what: &'static str, len: usize, k: usize) -> Result<usize, KernelError> {
    if k == 0 {
        return Err(KernelError::ZeroDimension { what: "rank" });
    }
    let rows = len / k;
    check_len(what, rows * k, len)?;
    Ok(rows)
}

/// Validates a rating set against the factor shapes; returns `(users, items)`.
pub(crate) fn validate_ratings(
    k: usize,
    ratings: Ratings<'_>,
    p: &[f32],
    q: &[f32],
) -> Result<(usize, usize), KernelError> {
    let users = factor_rows("p", p.len(), k)?;
    let items = factor_rows("q", q.len(), k)?;
    let n = ratings.values.len();
    check_len("users", n, ratings.users.len())?;
    check_len("items", n, ratings.items.len())?;
    ids_below("users", ratings.users, users)?;
    ids_below("items", ratings.items, items)?;
    all_finite("values", ratings.values)?;
    Ok((users, items))
}

/// Validates a CSR structure whose columns index `cols_bound` rows; returns its row count.
pub(crate) fn validate_csr(csr: Csr<'_>, cols_bound: usize) -> Result<usize, KernelError> {
    let nnz = csr.cols.len();
    check_len("values", nnz, csr.values.len())?;
    let Some((&last, _)) = csr.offsets.split_last() else {
        return Err(KernelError::LengthMismatch {
            what: "offsets",
            expected: 1,
            actual: 0,
        });
    };
    if csr.offsets[0] != 0 {
        return Err(bad_offset(0, csr.offsets[0]));
    }
    if let Some(j) = csr.offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(bad_offset(j + 1, csr.offsets[j + 1]));
    }
    if last as usize != nnz {
        return Err(bad_offset(csr.offsets.len() - 1, last));
    }
    ids_below("cols", csr.cols, cols_bound)?;
    all_finite("values", csr.values)?;
    Ok(csr.offsets.len() - 1)
}

fn bad_offset(position: usize, value: u32) -> KernelError {
    KernelError::IndexOutOfRange {
        what: "offsets",
        position,
        index: u64::from(value),
    }
}

fn ids_below(what: &'static str, ids: &[u32], bound: usize) -> Result<(), KernelError> {
    match ids.iter().position(|&id| id as usize >= bound) {
        Some(position) => Err(KernelError::IndexOutOfRange {
            what,
            position,
            index: u64::from(ids[position]),
        }),
        None => Ok(()),
    }
}

pub(crate) fn all_finite(what: &'static str, values: &[f32]) -> Result<(), KernelError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(position) => Err(KernelError::InvalidValue { what, position }),
        None => Ok(()),
    }
}

/// Validates ALS inputs; returns the number of rows.
pub(crate) fn validate_als(
    k: usize,
    lambda: f32,
    csr: Csr<'_>,
    fixed: &[f32],
    out: &[f32],
) -> Result<usize, KernelError> {
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(KernelError::InvalidHyperparameter {
            what: "lambda",
            value: lambda,
        });
    }
    let cols = factor_rows("fixed", fixed.len(), k)?;
    let rows = validate_csr(csr, cols)?;
    let out_len = rows
        .checked_mul(k)
        .ok_or(KernelError::ShapeOverflow { what: "out" })?;
    check_len("out", out_len, out.len())?;
    all_finite("fixed", fixed)?;
    Ok(rows)
}
