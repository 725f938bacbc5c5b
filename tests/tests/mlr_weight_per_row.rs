//! MLR with one table row per weight (`MlrConfig::weight_per_row`, the parameter unit of
//! `harp-scar --parameter weight`): it trains exactly as the blocked layout does, and SCAR's
//! faults and checkpoints then act on single weights.

use harp::{Fault, FaultTiming, Injection, JobConfig, Recovery, ScarOptions, Selection};
use harp_apps::data::synthetic_classification;
use harp_apps::mlr::{MlrApp, MlrConfig, Quiet};
use harp_tests::{runtime, Threads};
use std::sync::Arc;

const EPOCHS: u32 = 8;
const FEATURES: usize = 24;
const CLASSES: usize = 4;

/// One executor (so each epoch's loss is a function of the weights alone), several servers
/// and shards.
fn job(scar: Option<ScarOptions>) -> JobConfig {
    JobConfig {
        workers: 1,
        servers: 2,
        executors_per_worker: 1,
        shards_per_server: 4,
        collect_params: true,
        scar,
    }
}

fn app(weight_per_row: bool) -> Arc<MlrApp> {
    let data = synthetic_classification(600, FEATURES, CLASSES, 11).unwrap();
    let (train, test) = data.split_tail_fraction(0.25).unwrap();
    let config = MlrConfig {
        epochs: EPOCHS,
        lr: 0.5,
        batch: train.rows(),
        staleness: 0,
        block_features: Some(1),
        weight_per_row,
    };
    Arc::new(MlrApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet)).unwrap())
}

#[test]
fn one_row_per_weight_trains_as_the_blocked_layout_does() {
    let run = |weight_per_row: bool| {
        let app = app(weight_per_row);
        let layout = app.layout();
        let outcome = runtime(Threads::Multi(2))
            .block_on(harp::run_job(app, &job(None)))
            .unwrap();
        let losses: Vec<f64> = outcome.driver.history().iter().map(|m| m.loss).collect();
        (layout, losses)
    };
    let (blocked_layout, blocked) = run(false);
    let (weight_layout, per_weight) = run(true);
    assert_eq!(
        (blocked_layout.rows(), blocked_layout.row_width()),
        (FEATURES, CLASSES)
    );
    assert_eq!(
        (weight_layout.rows(), weight_layout.row_width()),
        (FEATURES * CLASSES, 1)
    );
    assert_eq!(blocked.len(), EPOCHS as usize);
    assert!(
        blocked[EPOCHS as usize - 1] < 0.8 * blocked[0],
        "{blocked:?}"
    );
    for (epoch, (a, b)) in blocked.iter().zip(&per_weight).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "epoch {}: blocked {a} vs one row per weight {b}",
            epoch + 1
        );
    }
}

#[test]
fn a_fault_with_one_row_per_weight_loses_single_weights() {
    let weights = FEATURES * CLASSES;
    let scar = ScarOptions {
        period: 8,
        fraction: 0.125,
        selection: Selection::Priority,
        recovery: Recovery::Partial,
        inject: vec![Injection {
            at_iteration: 5,
            fault: Fault::Lose {
                fraction: 0.5,
                seed: 3,
            },
            // After the iteration's round: the master holds the job until that round has
            // ended, so at least one round completes. The 8 epochs are one micro-task each
            // and can all end before a round started at iteration 1 does (a CI run saw
            // rounds 0, skipped 7 with BeforeRound).
            timing: FaultTiming::AfterRound,
        }],
    };
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app(true), &job(Some(scar))))
        .unwrap();
    let reports = &outcome.stats.injections;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].rows_chosen, weights / 2, "{:?}", reports[0]);
    assert!(reports[0].rows_replaced <= weights / 2, "{:?}", reports[0]);
    assert!(reports[0].perturbation_l2 > 0.0, "{:?}", reports[0]);
    // A round every r·C = 1 iteration, each saving ⌈r·n⌉ single weights.
    let checkpoints = &outcome.stats.checkpoints;
    assert!(checkpoints.rounds > 0, "{checkpoints:?}");
    assert_eq!(
        checkpoints.rows_saved,
        checkpoints.rounds * (weights as u64).div_ceil(8),
        "{checkpoints:?}"
    );
}

/// A round due at the last iteration starts as the driver finishes: the job waits for it,
/// so it is counted and what it saved is in the checkpoint (before, the job ended at once
/// and the round, still running, was dropped: rounds 0).
#[test]
fn the_jobs_end_waits_for_the_round_of_its_last_iteration() {
    let weights = (FEATURES * CLASSES) as u64;
    // r·C = 8 = EPOCHS: the one round is due at the last epoch, and saves every row.
    let scar = ScarOptions {
        period: u64::from(EPOCHS),
        fraction: 1.0,
        selection: Selection::Full,
        ..ScarOptions::default()
    };
    for run in 0..5 {
        let outcome = runtime(Threads::Multi(2))
            .block_on(harp::run_job(app(true), &job(Some(scar.clone()))))
            .unwrap();
        let checkpoints = &outcome.stats.checkpoints;
        assert_eq!(checkpoints.last_iteration, Some(u64::from(EPOCHS)));
        assert_eq!(
            (checkpoints.rounds, checkpoints.rounds_unfinished),
            (1, 0),
            "run {run}: {checkpoints:?}"
        );
        assert_eq!(
            checkpoints.rows_saved, weights,
            "run {run}: {checkpoints:?}"
        );
        assert_eq!(checkpoints.rows_held, weights as usize, "run {run}");
    }
}

#[test]
fn harp_run_mlr_weight_per_row_injects_faults_on_single_weights() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.jsonl");
    let data = format!("synthetic:600,{FEATURES},{CLASSES},11");
    let argv = [
        "run",
        "mlr",
        "--quiet",
        "--data",
        &data,
        "--epochs",
        "6",
        "--batch",
        "450",
        "--weight-per-row",
        "--scar-fraction",
        "0.125",
        "--scar-period",
        "8",
        "--inject",
        "lose:0.5@3",
        "--metrics-out",
        metrics.to_str().expect("a UTF-8 temporary path"),
    ];
    if let Err(e) = harp_tests::run_cli(argv) {
        panic!("harp {argv:?} failed: {e:#}");
    }
    let lines = harp_tests::read_json_lines(&metrics);
    let faults: Vec<_> = lines
        .iter()
        .filter(|line| line.get("event").and_then(|e| e.as_str()) == Some("fault"))
        .collect();
    assert_eq!(faults.len(), 1, "{lines:#?}");
    assert_eq!(
        faults[0].get("rows_chosen").and_then(|n| n.as_u64()),
        Some((FEATURES * CLASSES / 2) as u64),
        "{:?}",
        faults[0]
    );
}
