//! SCAR's fault injection (in one process): faults are applied exactly at the iteration
//! boundary they name (every micro-task after it sees them, none before), a loss of
//! parameters is recovered from the running checkpoint partially or fully, and each
//! injection is reported.

use harp::{
    Fault, FaultTiming, HarpError, Injection, InjectionReport, JobConfig, Recovery, ScarOptions,
    Selection,
};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_apps::data::synthetic_classification;
use harp_apps::mlr::{MlrApp, MlrConfig, Quiet};
use harp_tests::{runtime, Threads};
use std::sync::Arc;

const ITERATIONS: u32 = 12;

fn job(scar: Option<ScarOptions>) -> JobConfig {
    JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 2,
        shards_per_server: 4,
        collect_params: true,
        scar,
    }
}

/// The MLR jobs: one executor, so each iteration is one task and its training loss is a
/// function of the weights alone. With several executors a task of iteration `k` may read
/// another task's iteration-`k` update when that task finished first (stale-synchronous
/// reads may be fresher than the bound), so the loss history depends on timing: under load
/// a fault-free run and a faulted one differed by 3e-3 before the fault (CI, 2 workers × 2
/// executors). The servers and shards stay many, so faults still span shards and nodes.
fn mlr_job(scar: Option<ScarOptions>) -> JobConfig {
    JobConfig {
        workers: 1,
        executors_per_worker: 1,
        ..job(scar)
    }
}

/// Full-batch MLR on a small synthetic set: one iteration per epoch; its training losses.
fn mlr_losses(scar: Option<ScarOptions>) -> (Vec<f64>, Vec<InjectionReport>) {
    let data = synthetic_classification(800, 32, 4, 3).unwrap();
    let (train, test) = data.split_tail_fraction(0.25).unwrap();
    let config = MlrConfig {
        epochs: ITERATIONS,
        lr: 0.5,
        batch: train.rows(),
        staleness: 0,
        block_features: Some(8),
        weight_per_row: false,
    };
    let app =
        Arc::new(MlrApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet)).unwrap());
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app, &mlr_job(scar)))
        .unwrap();
    let losses = outcome.driver.history().iter().map(|m| m.loss).collect();
    (losses, outcome.stats.injections)
}

fn scar_with(fault: Fault, at_iteration: u64, recovery: Recovery) -> ScarOptions {
    ScarOptions {
        period: 4,
        fraction: 1.0,
        selection: Selection::Full,
        recovery,
        inject: vec![Injection {
            at_iteration,
            fault,
            timing: FaultTiming::BeforeRound,
        }],
    }
}

#[test]
fn a_fault_is_applied_exactly_at_its_iteration_boundary() {
    let (baseline, none) = mlr_losses(None);
    assert!(none.is_empty());
    assert!(
        baseline[ITERATIONS as usize - 1] < baseline[0],
        "{baseline:?}"
    );
    for (at, fault) in [
        (
            5u64,
            Fault::ResetToInitial {
                fraction: 1.0,
                seed: 1,
            },
        ),
        (
            7,
            Fault::Perturb {
                norm: 20.0,
                seed: 2,
            },
        ),
    ] {
        let (losses, reports) = mlr_losses(Some(scar_with(fault.clone(), at, Recovery::Partial)));
        assert_eq!(reports.len(), 1, "{fault:?}");
        assert_eq!(reports[0].at_iteration, at);
        assert!(reports[0].perturbation_l2 > 0.0, "{:?}", reports[0]);
        // history[k] is the loss at the weights after k iterations: the same up to the
        // boundary, and the fault shows in the first loss measured after it.
        let at = at as usize;
        for k in 0..at {
            assert!(
                (losses[k] - baseline[k]).abs() < 1e-4,
                "{fault:?}: iteration {k} before the fault differs: {} vs {}",
                losses[k],
                baseline[k]
            );
        }
        assert!(
            losses[at] > baseline[at] + 0.05,
            "{fault:?}: iteration {at} does not see the fault: {} vs {}",
            losses[at],
            baseline[at]
        );
        if matches!(fault, Fault::ResetToInitial { .. }) {
            // Every weight back at its initial value: the loss is the initial loss.
            assert!(
                (losses[at] - baseline[0]).abs() < 1e-4,
                "{} vs {}",
                losses[at],
                baseline[0]
            );
        }
    }
}

#[test]
fn a_full_recovery_restores_every_row_and_a_partial_one_only_the_lost() {
    for recovery in [Recovery::Partial, Recovery::Full] {
        let fault = Fault::Lose {
            fraction: 0.25,
            seed: 5,
        };
        let (losses, reports) = mlr_losses(Some(scar_with(fault, 6, recovery)));
        assert_eq!(losses.len(), ITERATIONS as usize);
        let report = &reports[0];
        assert_eq!(report.fault, "lose");
        assert_eq!(report.recovery, Some(recovery));
        assert!(report.rows_chosen > 0);
        match recovery {
            Recovery::Partial => assert_eq!(report.rows_replaced, report.rows_chosen),
            Recovery::Full => {
                assert_eq!(report.rows_chosen, report.rows_replaced.div_ceil(4).max(1))
            }
        }
    }
}

#[test]
fn a_fault_after_its_iterations_round_recovers_from_that_rounds_image() {
    let (baseline, _) = mlr_losses(None);
    let at = 6u64;
    let lose = |period: u64, timing: FaultTiming| {
        let mut scar = scar_with(
            Fault::Lose {
                fraction: 0.5,
                seed: 9,
            },
            at,
            Recovery::Partial,
        );
        scar.period = period;
        scar.inject[0].timing = timing;
        let (losses, reports) = mlr_losses(Some(scar));
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].timing, timing);
        (losses, reports[0].perturbation_l2, reports[0].image_round)
    };
    // Every row saved at every iteration: after the round, the image holds the values at
    // the failure, so recovering loses nothing and training goes on as if nothing failed.
    let (after, after_l2, after_image) = lose(1, FaultTiming::AfterRound);
    assert_eq!(after_image, Some(at));
    assert_eq!(after_l2, 0.0);
    for (k, (l, b)) in after.iter().zip(&baseline).enumerate() {
        assert!((l - b).abs() < 1e-6, "iteration {k}: {l} vs {b}");
    }
    // Before it, the image is an earlier round's. (That round saved in the background
    // while iteration 6 ran, so how much of iteration 6 it holds depends on timing: on a
    // loaded machine all of it, and the loss costs nothing. So the perturbation is not
    // asserted; only which image the recovery used.)
    let (_, _, before_image) = lose(1, FaultTiming::BeforeRound);
    assert!(before_image < Some(at), "{before_image:?}");
    // No round due at that iteration (every 4th): the fault does not wait for one, and
    // recovers from an older image.
    let (_, late_l2, late_image) = lose(4, FaultTiming::AfterRound);
    assert!(late_image < Some(at), "{late_image:?}");
    assert!(late_l2 > 0.0);
}

#[test]
fn a_lost_fraction_of_counters_goes_back_to_its_saved_values() {
    // Counters only grow, so a restored row is never above its expected sum; with a
    // checkpoint of every row at every iteration, only increments after the last round
    // can be lost.
    let app = Arc::new(
        CounterApp::new(CounterConfig {
            tasks: 4_000,
            rows: 64,
            losses_expected: true,
            ..CounterConfig::default()
        })
        .unwrap(),
    );
    let scar = ScarOptions {
        period: 1,
        fraction: 1.0,
        selection: Selection::Full,
        recovery: Recovery::Partial,
        inject: vec![Injection {
            at_iteration: 200,
            fault: Fault::Lose {
                fraction: 0.5,
                seed: 3,
            },
            timing: FaultTiming::BeforeRound,
        }],
    };
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app.clone(), &job(Some(scar))))
        .unwrap();
    assert_eq!(outcome.stats.injections.len(), 1);
    let report = &outcome.stats.injections[0];
    assert_eq!(report.rows_chosen, 32);
    assert_eq!(report.rows_replaced, 32);
    let params = outcome.params.as_ref().unwrap();
    for (row, want) in outcome.driver.expected() {
        let got = params.row(app.counters(), *row).unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!(g <= w, "row {row}: {got:?} above the expected {want:?}");
        }
    }
}

#[test]
fn invalid_injections_are_refused_before_the_job_starts() {
    for fault in [
        Fault::Lose {
            fraction: 0.0,
            seed: 1,
        },
        Fault::ResetToInitial {
            fraction: 1.5,
            seed: 1,
        },
        Fault::Perturb {
            norm: f64::INFINITY,
            seed: 1,
        },
        Fault::Perturb {
            norm: -1.0,
            seed: 1,
        },
    ] {
        let app = Arc::new(CounterApp::new(CounterConfig::default()).unwrap());
        let result = runtime(Threads::Multi(2)).block_on(harp::run_job(
            app,
            &job(Some(scar_with(fault.clone(), 3, Recovery::Full))),
        ));
        assert!(
            matches!(&result, Err(HarpError::InvalidConfig(m)) if m.contains("fault injection")),
            "{fault:?}: {:?}",
            result.err()
        );
    }
}
