//! Distances between a parameter's current value and its saved value (SCAR §5.4.2: "save
//! the parameters which have changed the most since they were previously saved").
//!
//! All arithmetic is done in `f64`. Differences of `i64` counters are taken exactly (in
//! `i128`) before conversion, and differences of `f32` values are exact-sign in `f64`, so
//! for [`Norm::L1`], [`Norm::L2`] and [`Norm::LInf`] a distance is `0` exactly when the rows
//! are equal, and `distance(a, b) == distance(b, a)` bit for bit.

use super::ScarError;
use crate::rows::RowData;
use serde::{Deserialize, Serialize};

/// How the size of a change to a row is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Norm {
    /// Euclidean norm of the element-wise difference (the default; SCAR's analysis, §5.3,
    /// is stated for it).
    #[default]
    L2,
    /// Sum of absolute element-wise differences.
    L1,
    /// Largest absolute element-wise difference (`0` for empty rows).
    LInf,
    /// SCAR's distance for LDA's document-topic count rows (§5.5.1, "Latent Dirichlet
    /// Allocation"): "a scaled total variation between document-topic distributions", where
    /// "we scale the total variation norm of each document-topic distribution by the length
    /// of the document it corresponds to".
    ///
    /// Reading used here: each row is normalised into a distribution by its total mass
    /// (`p = a / Σa`, `q = b / Σb`), the total variation is `TV = ½ Σ |pᵢ − qᵢ|`, and it is
    /// scaled by the document length, taken as the row's total mass `L`:
    /// `distance = L · TV`. In LDA a document's length does not change while its tokens are
    /// re-sampled, so both rows have the same mass `L` and the distance equals
    /// `½ Σ |aᵢ − bᵢ|`, half the L1 distance of the counts. The paper does not say which
    /// row's mass to use when the two differ; this uses `L = max(Σa, Σb)`, which keeps the
    /// distance symmetric. A row of mass `0` has no distribution; it is treated as the zero
    /// vector (so against a row of mass `L` the distance is `L / 2`, again `½ Σ |aᵢ − bᵢ|`),
    /// and two rows of mass `0` are at distance `0`. Entries must be non-negative (counts or
    /// probabilities), else [`ScarError::NotADistribution`]. Unlike the other norms, distance
    /// `0` does not imply equal rows: proportional rows of different mass, such as `[1, 1]`
    /// and `[2, 2]`, are the same distribution and so at distance `0`.
    ScaledTotalVariation,
}

impl Norm {
    /// The distance between `current` and `saved` under this norm; see [`distance`].
    pub fn distance(self, current: &RowData, saved: &RowData) -> Result<f64, ScarError> {
        distance(self, current, saved)
    }

    /// The norm of a whole perturbation from the distances of its rows: the norm of the
    /// concatenated difference vector. `L2` combines rows as `√(Σ dᵣ²)`, `L1` and
    /// `ScaledTotalVariation` (a positive linear combination of per-row norms, §5.5.1) as
    /// `Σ dᵣ`, `LInf` as `max dᵣ`. No rows give `0`.
    pub fn aggregate<I: IntoIterator<Item = f64>>(self, row_distances: I) -> f64 {
        let rows = row_distances.into_iter();
        match self {
            Norm::L2 => rows.map(|d| d * d).sum::<f64>().sqrt(),
            Norm::L1 | Norm::ScaledTotalVariation => rows.sum(),
            Norm::LInf => rows.fold(0.0, f64::max),
        }
    }
}

/// The distance between a row's `current` value and its `saved` value under `norm`.
///
/// Errors: rows of different kind or width ([`ScarError::RowMismatch`]); a NaN or infinite
/// `f32` element ([`ScarError::NonFiniteValue`]); for
/// [`Norm::ScaledTotalVariation`], a negative element ([`ScarError::NotADistribution`]).
/// The result is always finite and `>= 0`.
pub fn distance(norm: Norm, current: &RowData, saved: &RowData) -> Result<f64, ScarError> {
    match (current, saved) {
        (RowData::F32(a), RowData::F32(b)) if a.len() == b.len() => {
            check_finite("current", a)?;
            check_finite("saved", b)?;
            of_rows(norm, a, b)
        }
        (RowData::I64(a), RowData::I64(b)) if a.len() == b.len() => of_rows(norm, a, b),
        _ => Err(ScarError::RowMismatch {
            current_kind: current.kind(),
            current_width: current.width(),
            saved_kind: saved.kind(),
            saved_width: saved.width(),
        }),
    }
}

/// A row element: `f32` parameters or `i64` counters.
trait Elem: Copy {
    fn to_f64(self) -> f64;
    /// `|self − other|`, with the difference taken exactly where the type allows.
    fn abs_diff_f64(self, other: Self) -> f64;
}

impl Elem for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn abs_diff_f64(self, other: Self) -> f64 {
        // Both are exact in f64; IEEE subtraction of distinct finite values is never 0.
        (f64::from(self) - f64::from(other)).abs()
    }
}

impl Elem for i64 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn abs_diff_f64(self, other: Self) -> f64 {
        (i128::from(self) - i128::from(other)).unsigned_abs() as f64
    }
}

fn check_finite(row: &'static str, values: &[f32]) -> Result<(), ScarError> {
    match values.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(ScarError::NonFiniteValue {
            row,
            index,
            value: f64::from(values[index]),
        }),
        None => Ok(()),
    }
}

fn of_rows<T: Elem>(norm: Norm, a: &[T], b: &[T]) -> Result<f64, ScarError> {
    let diffs = || a.iter().zip(b).map(|(&x, &y)| x.abs_diff_f64(y));
    Ok(match norm {
        Norm::L2 => diffs().map(|d| d * d).sum::<f64>().sqrt(),
        Norm::L1 => diffs().sum(),
        Norm::LInf => diffs().fold(0.0, f64::max),
        Norm::ScaledTotalVariation => scaled_total_variation(a, b)?,
    })
}

/// `max(Σa, Σb) · ½ Σ |aᵢ/Σa − bᵢ/Σb|`; see [`Norm::ScaledTotalVariation`].
fn scaled_total_variation<T: Elem>(a: &[T], b: &[T]) -> Result<f64, ScarError> {
    let mass = |row: &'static str, values: &[T]| -> Result<f64, ScarError> {
        let mut total = 0.0;
        for (index, &x) in values.iter().enumerate() {
            let value = x.to_f64();
            if value < 0.0 {
                return Err(ScarError::NotADistribution { row, index, value });
            }
            total += value;
        }
        Ok(total)
    };
    let (mass_a, mass_b) = (mass("current", a)?, mass("saved", b)?);
    let length = mass_a.max(mass_b);
    if length == 0.0 {
        return Ok(0.0);
    }
    let normalised = |x: T, total: f64| if total > 0.0 { x.to_f64() / total } else { 0.0 };
    let tv: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (normalised(x, mass_a) - normalised(y, mass_b)).abs())
        .sum::<f64>()
        * 0.5;
    Ok(length * tv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &[f32]) -> RowData {
        RowData::F32(v.to_vec())
    }

    fn i(v: &[i64]) -> RowData {
        RowData::I64(v.to_vec())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn norms_of_a_3_4_difference() {
        // current − saved = [3, -4, 0]
        let (cur, saved) = (f(&[4.0, -2.0, 1.0]), f(&[1.0, 2.0, 1.0]));
        assert!(close(distance(Norm::L2, &cur, &saved).unwrap(), 5.0));
        assert!(close(distance(Norm::L1, &cur, &saved).unwrap(), 7.0));
        assert!(close(distance(Norm::LInf, &cur, &saved).unwrap(), 4.0));
        let (cur, saved) = (i(&[10, 0, -3]), i(&[7, 4, -3]));
        assert!(close(distance(Norm::L2, &cur, &saved).unwrap(), 5.0));
        assert!(close(distance(Norm::L1, &cur, &saved).unwrap(), 7.0));
        assert!(close(distance(Norm::LInf, &cur, &saved).unwrap(), 4.0));
    }

    #[test]
    fn l2_is_the_default_norm() {
        assert_eq!(Norm::default(), Norm::L2);
    }

    #[test]
    fn equal_and_empty_rows_are_at_distance_zero() {
        for norm in [Norm::L2, Norm::L1, Norm::LInf, Norm::ScaledTotalVariation] {
            assert_eq!(distance(norm, &i(&[1, 2, 3]), &i(&[1, 2, 3])).unwrap(), 0.0);
            assert_eq!(
                distance(norm, &f(&[0.5, 2.0]), &f(&[0.5, 2.0])).unwrap(),
                0.0
            );
            assert_eq!(distance(norm, &f(&[]), &f(&[])).unwrap(), 0.0);
        }
    }

    #[test]
    fn counters_far_apart_do_not_overflow() {
        let d = distance(Norm::L1, &i(&[i64::MAX]), &i(&[i64::MIN])).unwrap();
        assert!(close(d, 2f64.powi(64) - 1.0));
        let d = distance(
            Norm::L2,
            &i(&[i64::MAX, i64::MAX]),
            &i(&[i64::MIN, i64::MIN]),
        )
        .unwrap();
        assert!(d.is_finite() && close(d, (2f64.powi(64) - 1.0) * 2f64.sqrt()));
    }

    #[test]
    fn tiny_f32_differences_are_not_lost() {
        let tiny = f32::from_bits(1); // smallest subnormal
        for norm in [Norm::L2, Norm::L1, Norm::LInf] {
            assert!(distance(norm, &f(&[tiny]), &f(&[0.0])).unwrap() > 0.0);
        }
    }

    #[test]
    fn scaled_total_variation_of_equal_length_documents_is_half_the_count_l1() {
        // Document of 10 tokens over 3 topics; two tokens moved from topic 0 to topic 2.
        // p = [.5 .3 .2], q = [.3 .3 .4]: TV = ½(.2 + 0 + .2) = .2, times length 10 = 2.
        let d = distance(Norm::ScaledTotalVariation, &i(&[5, 3, 2]), &i(&[3, 3, 4])).unwrap();
        assert!(close(d, 2.0), "{d}");
        // Same on f32 rows.
        let d = distance(
            Norm::ScaledTotalVariation,
            &f(&[5.0, 3.0, 2.0]),
            &f(&[3.0, 3.0, 4.0]),
        );
        assert!(close(d.unwrap(), 2.0));
    }

    #[test]
    fn scaled_total_variation_weights_longer_documents_more() {
        // Re-sampling one token moves TV by 1/len; the scaled distance is 1 either way
        // (§5.5.1: unscaled TV would favour short documents).
        let short = distance(Norm::ScaledTotalVariation, &i(&[2, 0]), &i(&[1, 1])).unwrap();
        let long = distance(Norm::ScaledTotalVariation, &i(&[20, 0]), &i(&[19, 1])).unwrap();
        assert!(close(short, 1.0) && close(long, 1.0), "{short} {long}");
        // Two tokens moved in the long document count twice as much as one in the short.
        let long2 = distance(Norm::ScaledTotalVariation, &i(&[20, 0]), &i(&[18, 2])).unwrap();
        assert!(close(long2, 2.0));
    }

    #[test]
    fn scaled_total_variation_with_different_masses() {
        // p = [1, 0], q = [0, 1]: TV = 1, scaled by max mass 4.
        let d = distance(Norm::ScaledTotalVariation, &i(&[4, 0]), &i(&[0, 2])).unwrap();
        assert!(close(d, 4.0));
        // Proportional rows are the same distribution.
        let d = distance(Norm::ScaledTotalVariation, &i(&[1, 1]), &i(&[2, 2])).unwrap();
        assert_eq!(d, 0.0);
        // A zero row against a row of mass 6: ½·(sum of p) · 6 = 3.
        let d = distance(Norm::ScaledTotalVariation, &i(&[0, 0]), &i(&[4, 2])).unwrap();
        assert!(close(d, 3.0));
        let d = distance(Norm::ScaledTotalVariation, &i(&[0, 0]), &i(&[0, 0])).unwrap();
        assert_eq!(d, 0.0);
    }

    #[test]
    fn scaled_total_variation_refuses_negative_counts() {
        let err = distance(Norm::ScaledTotalVariation, &i(&[1, 2]), &i(&[3, -1])).unwrap_err();
        assert_eq!(
            err,
            ScarError::NotADistribution {
                row: "saved",
                index: 1,
                value: -1.0
            }
        );
        // Other norms accept negative values.
        assert!(distance(Norm::L1, &i(&[1, 2]), &i(&[3, -1])).is_ok());
    }

    #[test]
    fn mismatched_rows_are_refused() {
        let err = distance(Norm::L2, &f(&[1.0, 2.0]), &f(&[1.0])).unwrap_err();
        assert!(matches!(
            err,
            ScarError::RowMismatch {
                current_width: 2,
                saved_width: 1,
                ..
            }
        ));
        let err = distance(Norm::L2, &f(&[1.0]), &i(&[1])).unwrap_err();
        assert!(matches!(err, ScarError::RowMismatch { .. }));
        assert!(err.to_string().contains("F32") && err.to_string().contains("I64"));
    }

    #[test]
    fn non_finite_values_are_refused() {
        let err = distance(Norm::L2, &f(&[1.0, f32::NAN]), &f(&[1.0, 1.0])).unwrap_err();
        assert!(matches!(
            err,
            ScarError::NonFiniteValue {
                row: "current",
                index: 1,
                ..
            }
        ));
        let err = distance(Norm::LInf, &f(&[1.0]), &f(&[f32::INFINITY])).unwrap_err();
        assert!(matches!(
            err,
            ScarError::NonFiniteValue { row: "saved", .. }
        ));
    }

    #[test]
    fn aggregate_is_the_norm_of_the_concatenation() {
        // Rows with differences [3] and [4]: the whole difference is [3, 4].
        assert!(close(Norm::L2.aggregate([3.0, 4.0]), 5.0));
        assert!(close(Norm::L1.aggregate([3.0, 4.0]), 7.0));
        assert!(close(Norm::LInf.aggregate([3.0, 4.0]), 4.0));
        assert!(close(Norm::ScaledTotalVariation.aggregate([3.0, 4.0]), 7.0));
        for norm in [Norm::L2, Norm::L1, Norm::LInf, Norm::ScaledTotalVariation] {
            assert_eq!(norm.aggregate(std::iter::empty()), 0.0);
        }
    }
}
