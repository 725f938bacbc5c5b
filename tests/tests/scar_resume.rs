//! A job resumed from a consistent checkpoint with SCAR's running checkpoint on starts its
//! image from the resumed rows: losing every parameter at the first iteration after the
//! resume (before any round ran) restores the values the job resumed with, so the
//! perturbation is only the few updates since, not everything the job had learned (which an
//! image of initial values would restore to).

use harp::{
    ConsistentOptions, Fault, FaultTiming, Injection, JobConfig, Recovery, RowData, ScarOptions,
    Selection,
};
use harp_apps::counter::{CounterApp, CounterConfig};
use harp_tests::{runtime, Threads};
use std::path::Path;
use std::sync::Arc;

/// Tasks of the whole job; two executors run one task each per iteration.
const TASKS: u64 = 2_000;
/// A consistent checkpoint every this many iterations.
const EVERY: u64 = 400;

fn counter() -> Arc<CounterApp> {
    Arc::new(
        CounterApp::new(CounterConfig {
            tasks: TASKS,
            rows: 200,
            // The lost rows are not put back exactly: no task may insist they are.
            losses_expected: true,
            ..CounterConfig::default()
        })
        .unwrap(),
    )
}

fn job(scar: Option<ScarOptions>) -> JobConfig {
    JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 1,
        shards_per_server: 4,
        collect_params: true,
        scar,
    }
}

/// The committed checkpoint directories in `dir`, ascending by sequence number.
fn checkpoints(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("MANIFEST.json").is_file())
        .collect();
    found.sort();
    found
}

fn l2(rows: impl IntoIterator<Item = RowData>) -> f64 {
    rows.into_iter()
        .map(|row| match row {
            RowData::F32(v) => v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>(),
            RowData::I64(v) => v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>(),
        })
        .sum::<f64>()
        .sqrt()
}

#[test]
fn a_loss_right_after_a_resume_restores_the_resumed_values() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    let rt = runtime(Threads::Multi(2));
    let write = ConsistentOptions {
        checkpoint_dir: Some(dir.clone()),
        every: EVERY,
        keep: 10,
        ..ConsistentOptions::default()
    };
    let (whole, _) = rt
        .block_on(harp::run_job_consistent(counter(), &job(None), &write))
        .unwrap();
    let final_norm = l2(whole.params.unwrap().rows.into_values());

    // Resume from the first checkpoint (iteration 400 of 1000): the later ones go (under
    // load some are skipped while the previous one is still being written; the first never
    // is).
    let saved = checkpoints(&dir);
    assert!(
        saved
            .first()
            .is_some_and(|first| first.ends_with(format!("ckpt-{EVERY:020}"))),
        "checkpoints written: {saved:?}"
    );
    for later in &saved[1..] {
        std::fs::remove_dir_all(later).unwrap();
    }
    let lose_everything = Injection {
        at_iteration: EVERY + 1,
        fault: Fault::Lose {
            fraction: 1.0,
            seed: 7,
        },
        timing: FaultTiming::BeforeRound,
    };
    let scar = ScarOptions {
        period: 8,
        fraction: 0.125,
        selection: Selection::Priority,
        recovery: Recovery::Partial,
        inject: vec![lose_everything],
    };
    let resume = ConsistentOptions {
        checkpoint_dir: None,
        resume_from: Some(dir.clone()),
        ..write
    };
    let (resumed, report) = rt
        .block_on(harp::run_job_consistent(
            counter(),
            &job(Some(scar)),
            &resume,
        ))
        .unwrap();
    assert_eq!(report.resumed.map(|r| r.version > 0), Some(true));
    let injections = &resumed.stats.injections;
    assert_eq!(injections.len(), 1, "{injections:?}");
    let fault = &injections[0];
    assert!(fault.rows_replaced > 0, "{fault:?}");
    println!(
        "perturbation {:.1}, final norm {final_norm:.1} ({:.4})",
        fault.perturbation_l2,
        fault.perturbation_l2 / final_norm
    );
    // The values at the resume are 40% of the final ones; restoring rows to their initial
    // values (zero) would move them by about that much. From the resumed values, only the
    // updates of the iterations since the resume are lost.
    assert!(
        fault.perturbation_l2 < 0.02 * final_norm,
        "perturbation {} against final values of norm {final_norm}: {fault:?}",
        fault.perturbation_l2
    );
}
