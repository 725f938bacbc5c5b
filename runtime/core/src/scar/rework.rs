//! Rework cost (SCAR §5.3.1, measured as in the experiments of §5.5).

use super::ScarError;
use serde::{Deserialize, Serialize};

/// The loss both runs must reach for rework cost to be measured.
///
/// SCAR §5.3.1 defines rework cost against `ε`-optimality; its experiments (§5.5.1) use a
/// fixed "convergence criteria" per model and dataset instead (e.g. `2.5×10⁴`
/// cross-entropy for MLR on MNIST), which the failure-free run reaches in roughly 60
/// iterations. Losses are minimised: a run reaches the criterion when its loss is `<=` it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConvergenceCriterion {
    /// A fixed loss, as in §5.5.1.
    Loss(f64),
    /// The loss the failure-free run has at its last recorded iteration.
    FailureFreeFinal,
}

/// A measured rework cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReworkCost {
    /// The perturbed run reached the criterion this many iterations after the failure-free
    /// run did. It can be negative: a perturbation may happen to help (§5.3).
    Iterations(i64),
    /// The perturbed run's record ends before it reaches the criterion: the rework cost is
    /// at least `at_least` (what it would be had the run reached it right after its last
    /// recorded iteration).
    NotReached { at_least: i64 },
}

impl ReworkCost {
    /// The rework cost, if the perturbed run reached the criterion.
    pub fn iterations(self) -> Option<i64> {
        match self {
            ReworkCost::Iterations(n) => Some(n),
            ReworkCost::NotReached { .. } => None,
        }
    }
}

/// The first index `i` with `losses[i] <= criterion`: with `losses[i]` the loss after `i`
/// iterations, the number of iterations the run needs to reach the criterion. NaN losses
/// never reach it.
pub fn iterations_to_reach(losses: &[f64], criterion: f64) -> Option<usize> {
    losses.iter().position(|&loss| loss <= criterion)
}

/// The rework cost of a failure: SCAR §5.3.1, eq. (5.4), defines it as
/// `π = κ(y, ε) − κ(w, ε)`, the number of iterations the perturbed run `y` needs to reach
/// `ε`-optimality minus the number the unperturbed run `w` needs. The experiments of §5.5
/// measure it as the extra iterations a run with a failure needs to reach the convergence
/// criterion; that is what this computes.
///
/// * `failure_free_losses[i]`: the failure-free run's loss after `i` iterations
///   (`[0]` is the initial loss).
/// * `failure_iteration` `T`: the iterations completed when the failure hit. Both runs are
///   identical until then, so the perturbed run is given from there on:
///   `perturbed_losses[j]` is its loss after `T + j` iterations, `[0]` being the state
///   right after recovery.
///
/// If the failure-free run reaches the criterion at or before `T`, training would have
/// stopped before the failure and the rework cost is `0`. Otherwise it is
/// `(T + j) − i`, with `i` and `j` the first indices at which the two curves reach the
/// criterion; [`ReworkCost::NotReached`] if the perturbed curve never does. NaN or
/// infinite perturbed losses (a diverged run) simply do not reach it.
///
/// Errors: an empty curve; a criterion that is not finite (including a non-finite final
/// failure-free loss for [`ConvergenceCriterion::FailureFreeFinal`]); a failure-free curve
/// that never reaches the criterion.
pub fn rework_cost(
    failure_free_losses: &[f64],
    perturbed_losses: &[f64],
    failure_iteration: usize,
    criterion: ConvergenceCriterion,
) -> Result<ReworkCost, ScarError> {
    let Some(&final_loss) = failure_free_losses.last() else {
        return Err(ScarError::EmptyLosses {
            run: "failure-free",
        });
    };
    if perturbed_losses.is_empty() {
        return Err(ScarError::EmptyLosses { run: "perturbed" });
    }
    let criterion = match criterion {
        ConvergenceCriterion::Loss(loss) => loss,
        ConvergenceCriterion::FailureFreeFinal => final_loss,
    };
    if !criterion.is_finite() {
        return Err(ScarError::InvalidCriterion(criterion));
    }
    let baseline = iterations_to_reach(failure_free_losses, criterion)
        .ok_or(ScarError::BaselineNotReached { criterion })?;
    if baseline <= failure_iteration {
        return Ok(ReworkCost::Iterations(0));
    }
    let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let start = signed(failure_iteration);
    Ok(match iterations_to_reach(perturbed_losses, criterion) {
        Some(j) => ReworkCost::Iterations(start + signed(j) - signed(baseline)),
        None => ReworkCost::NotReached {
            at_least: start + signed(perturbed_losses.len()) - signed(baseline),
        },
    })
}

/// The fractional number of iterations a run needs to reach `criterion`: the first crossing
/// of the loss curve, linearly interpolated between the last iteration above it and the first
/// at or below it (so `0.0` if the initial loss is already at or below it). A run that just
/// misses the criterion at iteration `i` and passes it early in iteration `i + 1` needs a bit
/// more than `i` iterations, not `i + 1`: whole iterations round every rework cost up by up
/// to one, which swamps the small costs of a good recovery.
pub fn fractional_iterations_to_reach(losses: &[f64], criterion: f64) -> Option<f64> {
    let first = iterations_to_reach(losses, criterion)?;
    if first == 0 {
        return Some(0.0);
    }
    let (above, at_or_below) = (losses[first - 1], losses[first]);
    // `above` > criterion >= `at_or_below` (`above` may be NaN or infinite: then the curve
    // came from nowhere, so the crossing is taken at the first iteration at or below).
    let drop = above - at_or_below;
    let part = if drop.is_finite() && drop > 0.0 {
        ((above - criterion) / drop).clamp(0.0, 1.0)
    } else {
        1.0
    };
    Some((first - 1) as f64 + part)
}

/// [`rework_cost`] with both crossings interpolated ([`fractional_iterations_to_reach`]):
/// `(T + j) − i` with fractional `i` and `j`. `Ok(None)` if the perturbed curve never reaches
/// the criterion; `Ok(Some(0.0))` if the failure-free run reached it at or before `T`. The same
/// errors as [`rework_cost`].
pub fn fractional_rework_cost(
    failure_free_losses: &[f64],
    perturbed_losses: &[f64],
    failure_iteration: usize,
    criterion: ConvergenceCriterion,
) -> Result<Option<f64>, ScarError> {
    // The whole-iteration measure checks the inputs and decides the two special cases.
    match rework_cost(
        failure_free_losses,
        perturbed_losses,
        failure_iteration,
        criterion,
    )? {
        ReworkCost::NotReached { .. } => return Ok(None),
        ReworkCost::Iterations(_) => {}
    }
    let criterion = match criterion {
        ConvergenceCriterion::Loss(loss) => loss,
        ConvergenceCriterion::FailureFreeFinal => {
            failure_free_losses.last().copied().unwrap_or(f64::NAN)
        }
    };
    let baseline = fractional_iterations_to_reach(failure_free_losses, criterion)
        .ok_or(ScarError::BaselineNotReached { criterion })?;
    if baseline <= failure_iteration as f64 {
        return Ok(Some(0.0));
    }
    Ok(fractional_iterations_to_reach(perturbed_losses, criterion)
        .map(|j| failure_iteration as f64 + j - baseline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractional_crossing_is_interpolated() {
        // 1.0 -> 0.5 crosses 0.6 at 4/5 of the way.
        let losses = [2.0, 1.0, 0.5, 0.1];
        let at = fractional_iterations_to_reach(&losses, 0.6).unwrap();
        assert!((at - 1.8).abs() < 1e-12, "{at}");
        assert_eq!(fractional_iterations_to_reach(&losses, 2.0), Some(0.0));
        assert_eq!(fractional_iterations_to_reach(&losses, 0.5), Some(2.0));
        assert_eq!(fractional_iterations_to_reach(&losses, 0.05), None);
        // Coming from NaN, the crossing is the first finite iteration at or below.
        assert_eq!(
            fractional_iterations_to_reach(&[f64::NAN, 0.5], 0.6),
            Some(1.0)
        );
    }

    #[test]
    fn fractional_rework_is_below_the_rounded_up_one() {
        // Failure-free: 100 - 10 i reaches 50 at exactly 5.
        let free: Vec<f64> = (0..12).map(|i| 100.0 - 10.0 * i as f64).collect();
        // Failure at T = 2, knocked back by 1.2 iterations' worth: 92, 82, ...
        let perturbed: Vec<f64> = (0..10).map(|j| 92.0 - 10.0 * j as f64).collect();
        let criterion = ConvergenceCriterion::Loss(50.0);
        assert_eq!(
            rework_cost(&free, &perturbed, 2, criterion).unwrap(),
            ReworkCost::Iterations(2)
        );
        let fractional = fractional_rework_cost(&free, &perturbed, 2, criterion)
            .unwrap()
            .unwrap();
        assert!((fractional - 1.2).abs() < 1e-9, "{fractional}");
        // Never reached: None; reached before the failure: 0.
        assert_eq!(
            fractional_rework_cost(&free, &[99.0; 3], 2, criterion).unwrap(),
            None
        );
        assert_eq!(
            fractional_rework_cost(&free, &[99.0; 3], 7, criterion).unwrap(),
            Some(0.0)
        );
    }

    /// A failure-free run whose loss is 100 − 10·i: reaches 50 after 5 iterations.
    fn baseline() -> Vec<f64> {
        (0..10).map(|i| 100.0 - 10.0 * i as f64).collect()
    }

    #[test]
    fn rework_is_the_delay_in_reaching_the_criterion() {
        // Failure after 3 iterations (loss 70) knocks the loss back to 90 (as at
        // iteration 1); the run then improves by 10 per iteration and reaches 50 after
        // 3 + 4 = 7 iterations instead of 5: 2 iterations of rework.
        let perturbed = [90.0, 80.0, 70.0, 60.0, 50.0, 40.0];
        let cost = rework_cost(&baseline(), &perturbed, 3, ConvergenceCriterion::Loss(50.0));
        assert_eq!(cost, Ok(ReworkCost::Iterations(2)));
    }

    #[test]
    fn a_helpful_perturbation_has_negative_rework() {
        // The failure at iteration 2 lands on loss 60 (better than 80): reaches 50 after
        // 2 + 1 = 3 iterations instead of 5.
        let cost = rework_cost(
            &baseline(),
            &[60.0, 50.0],
            2,
            ConvergenceCriterion::Loss(50.0),
        );
        assert_eq!(cost, Ok(ReworkCost::Iterations(-2)));
    }

    #[test]
    fn failure_free_final_loss_as_criterion() {
        // Final failure-free loss is 10, reached after 9 iterations. The perturbed run
        // resumes at iteration 4 with loss 100 (back to the start) and needs 9 more.
        let perturbed: Vec<f64> = (0..12).map(|j| 100.0 - 10.0 * j as f64).collect();
        let cost = rework_cost(
            &baseline(),
            &perturbed,
            4,
            ConvergenceCriterion::FailureFreeFinal,
        );
        // Reached after 4 + 9 = 13 iterations instead of 9: the 4 lost iterations.
        assert_eq!(cost, Ok(ReworkCost::Iterations(4)));
    }

    #[test]
    fn failure_after_convergence_costs_nothing() {
        let cost = rework_cost(&baseline(), &[1e9], 5, ConvergenceCriterion::Loss(50.0));
        assert_eq!(cost, Ok(ReworkCost::Iterations(0)));
    }

    #[test]
    fn a_run_that_never_converges_gives_a_lower_bound() {
        // Perturbed record covers iterations 3..=5 without reaching 50 (one NaN): the
        // earliest it could reach is iteration 6, one later than the baseline's 5.
        let cost = rework_cost(
            &baseline(),
            &[95.0, f64::NAN, 60.0],
            3,
            ConvergenceCriterion::Loss(50.0),
        )
        .unwrap();
        assert_eq!(cost, ReworkCost::NotReached { at_least: 1 });
        assert_eq!(cost.iterations(), None);
        assert_eq!(ReworkCost::Iterations(3).iterations(), Some(3));
    }

    #[test]
    fn rework_inputs_are_validated() {
        let c = ConvergenceCriterion::Loss(50.0);
        assert_eq!(
            rework_cost(&[], &[1.0], 0, c),
            Err(ScarError::EmptyLosses {
                run: "failure-free"
            })
        );
        assert_eq!(
            rework_cost(&baseline(), &[], 0, c),
            Err(ScarError::EmptyLosses { run: "perturbed" })
        );
        assert!(matches!(
            rework_cost(&baseline(), &[1.0], 0, ConvergenceCriterion::Loss(f64::NAN)),
            Err(ScarError::InvalidCriterion(_))
        ));
        assert!(matches!(
            rework_cost(
                &[1.0, f64::NAN],
                &[1.0],
                0,
                ConvergenceCriterion::FailureFreeFinal
            ),
            Err(ScarError::InvalidCriterion(_))
        ));
        assert_eq!(
            rework_cost(&baseline(), &[1.0], 0, ConvergenceCriterion::Loss(-1.0)),
            Err(ScarError::BaselineNotReached { criterion: -1.0 })
        );
    }

    #[test]
    fn iterations_to_reach_is_the_first_hit() {
        assert_eq!(iterations_to_reach(&[5.0, 3.0, 4.0, 2.0], 3.0), Some(1));
        assert_eq!(iterations_to_reach(&[5.0, 4.0], 3.0), None);
        assert_eq!(iterations_to_reach(&[], 3.0), None);
    }
}
