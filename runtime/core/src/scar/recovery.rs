//! Partial recovery (SCAR §5.4.1): restore only the lost parameters from the running
//! checkpoint, and measure the perturbation `δ` that restoring them causes.
//!
//! Restoring a lost parameter replaces its value at the failure with its saved value, so
//! each restored row contributes `distance(value at failure, saved value)` to `δ`; rows
//! that were not lost keep their live values and contribute nothing. That is why partial
//! recovery perturbs less than full recovery (Theorem 5.4.1), and with a uniformly random
//! lost fraction `p`, `E‖δ'‖² = p‖δ‖²` (Theorem 5.4.2).

use super::distance::{distance, Norm};
use super::ScarError;
use crate::ids::ParamKey;
use crate::rows::RowData;
use serde::{Deserialize, Serialize};

/// What a partial recovery restores and how far it moves the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The norm `perturbation` is measured in.
    pub norm: Norm,
    /// Lost parameters (rows).
    pub keys_lost: usize,
    /// Lost parameters that had a saved value and are restored.
    pub keys_restored: usize,
    /// Scalar values in the restored rows.
    pub values_restored: usize,
    /// Bytes of the restored rows.
    pub bytes_restored: usize,
    /// Lost keys with no saved value, in ascending order. They are not in the restore set
    /// and not in `perturbation`: re-creating them (e.g. from their initial value) is the
    /// caller's decision.
    pub unsaved: Vec<ParamKey>,
    /// `‖δ‖`: the norm of (restored − value at failure) over the restored rows, combined
    /// across rows by [`Norm::aggregate`] (L2: `√Σ dᵣ²`; L1 and scaled total variation:
    /// `Σ dᵣ`; L∞: `max dᵣ`).
    pub perturbation: f64,
}

/// The restore set of a partial recovery and its [`RecoveryReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryPlan {
    /// `(key, saved value)` for every lost key that has one, in ascending key order.
    pub restore: Vec<(ParamKey, RowData)>,
    pub report: RecoveryReport,
}

/// Plans the partial recovery of `lost` (each lost key with its value at the failure, as
/// far as the caller knows it, e.g. from a simulation) from the running checkpoint
/// `saved` (key → saved value, `None` if it was never saved), measuring `δ` in `norm`.
///
/// Errors: a key listed twice in `lost` ([`ScarError::DuplicateKey`]); a saved value whose
/// kind or width differs from the lost value, a non-finite value, or (for scaled total
/// variation) a negative one, reported as [`ScarError::AtKey`] naming the key.
pub fn plan_recovery(
    lost: &[(ParamKey, RowData)],
    saved: impl Fn(ParamKey) -> Option<RowData>,
    norm: Norm,
) -> Result<RecoveryPlan, ScarError> {
    let mut order: Vec<&(ParamKey, RowData)> = lost.iter().collect();
    order.sort_unstable_by_key(|(key, _)| *key);
    if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ScarError::DuplicateKey(w[0].0));
    }
    let mut restore = Vec::with_capacity(order.len());
    let mut unsaved = Vec::new();
    let mut row_distances = Vec::with_capacity(order.len());
    for &(key, ref at_failure) in order {
        match saved(key) {
            Some(value) => {
                let d = distance(norm, at_failure, &value).map_err(|e| e.at(key))?;
                row_distances.push(d);
                restore.push((key, value));
            }
            None => unsaved.push(key),
        }
    }
    let report = RecoveryReport {
        norm,
        keys_lost: lost.len(),
        keys_restored: restore.len(),
        values_restored: restore.iter().map(|(_, v)| v.width()).sum(),
        bytes_restored: restore.iter().map(|(_, v)| v.bytes()).sum(),
        unsaved,
        perturbation: norm.aggregate(row_distances),
    };
    Ok(RecoveryPlan { restore, report })
}

/// The [`RecoveryReport`] of [`plan_recovery`], without the restore set.
pub fn recovery_report(
    lost: &[(ParamKey, RowData)],
    saved: impl Fn(ParamKey) -> Option<RowData>,
    norm: Norm,
) -> Result<RecoveryReport, ScarError> {
    plan_recovery(lost, saved, norm).map(|plan| plan.report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;
    use std::collections::HashMap;

    fn key(row: u64) -> ParamKey {
        ParamKey::new(TableId(1), row)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    fn checkpoint() -> HashMap<ParamKey, RowData> {
        HashMap::from([
            (key(1), RowData::F32(vec![0.0, 0.0])),
            (key(2), RowData::F32(vec![1.0, 1.0])),
            (key(3), RowData::F32(vec![5.0, 5.0])),
        ])
    }

    #[test]
    fn restores_saved_values_of_lost_keys_and_measures_the_perturbation() {
        let saved = checkpoint();
        let lost = vec![
            (key(3), RowData::F32(vec![5.0, 5.0])), // unchanged since saved: δ = 0
            (key(1), RowData::F32(vec![3.0, 4.0])), // δ row = [-3, -4], ‖·‖₂ = 5
            (key(9), RowData::F32(vec![1.0])),      // never saved
        ];
        let plan = plan_recovery(&lost, |k| saved.get(&k).cloned(), Norm::L2).unwrap();
        assert_eq!(
            plan.restore,
            vec![
                (key(1), RowData::F32(vec![0.0, 0.0])),
                (key(3), RowData::F32(vec![5.0, 5.0])),
            ]
        );
        let r = &plan.report;
        assert_eq!(r.norm, Norm::L2);
        assert_eq!((r.keys_lost, r.keys_restored), (3, 2));
        assert_eq!((r.values_restored, r.bytes_restored), (4, 16));
        assert_eq!(r.unsaved, vec![key(9)]);
        assert!(close(r.perturbation, 5.0));
    }

    #[test]
    fn rows_combine_by_the_norm() {
        let saved = checkpoint();
        // δ rows: key 1 → [3, 0] (3), key 2 → [0, 4] (4).
        let lost = vec![
            (key(1), RowData::F32(vec![3.0, 0.0])),
            (key(2), RowData::F32(vec![1.0, 5.0])),
        ];
        let get = |k| saved.get(&k).cloned();
        let r = |norm| recovery_report(&lost, get, norm).unwrap().perturbation;
        assert!(close(r(Norm::L2), 5.0));
        assert!(close(r(Norm::L1), 7.0));
        assert!(close(r(Norm::LInf), 4.0));
    }

    #[test]
    fn lda_rows_use_scaled_total_variation() {
        let saved = HashMap::from([(key(1), RowData::I64(vec![3, 3, 4]))]);
        let lost = vec![(key(1), RowData::I64(vec![5, 3, 2]))];
        let r = recovery_report(
            &lost,
            |k| saved.get(&k).cloned(),
            Norm::ScaledTotalVariation,
        )
        .unwrap();
        // Document of length 10, two tokens moved: 10 · ½(.2 + 0 + .2) = 2.
        assert!(close(r.perturbation, 2.0));
    }

    #[test]
    fn nothing_lost_restores_nothing() {
        let saved = checkpoint();
        let plan = plan_recovery(&[], |k| saved.get(&k).cloned(), Norm::L2).unwrap();
        assert!(plan.restore.is_empty());
        assert_eq!(plan.report.perturbation, 0.0);
        assert_eq!(plan.report.keys_lost, 0);
    }

    #[test]
    fn mismatched_saved_rows_and_duplicates_are_refused() {
        let saved = checkpoint();
        let lost = vec![(key(2), RowData::I64(vec![1, 1]))];
        let err = plan_recovery(&lost, |k| saved.get(&k).cloned(), Norm::L2).unwrap_err();
        match &err {
            ScarError::AtKey { key: k, source } => {
                assert_eq!(*k, key(2));
                assert!(matches!(**source, ScarError::RowMismatch { .. }));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("table-1/2"));
        let lost = vec![
            (key(2), RowData::F32(vec![1.0, 1.0])),
            (key(2), RowData::F32(vec![2.0, 1.0])),
        ];
        let err = plan_recovery(&lost, |k| saved.get(&k).cloned(), Norm::L2).unwrap_err();
        assert_eq!(err, ScarError::DuplicateKey(key(2)));
    }
}
