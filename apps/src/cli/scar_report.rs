//! What SCAR did during a `harp run`: the terminal's line for each injected fault, server
//! recovery and dead worker node recovered from (`--recover-workers`), printed as it happens
//! by `output.rs` ([`fault_line`], [`recovery_line`], [`worker_recovery_line`]); and at the
//! end, one line and one record that sum up the checkpoint rounds ([`report`]).

use crate::metrics::MetricsWriter;
use anyhow::Result;
use harp::{InjectionReport, JobStats, ServerRecovery, WorkerRecovery};

/// Prints and records the summary of `stats`' checkpoint rounds (nothing when the job kept
/// no running checkpoint and nothing was injected or recovered).
pub fn report(stats: &JobStats, metrics: Option<&MetricsWriter>) -> Result<()> {
    let c = &stats.checkpoints;
    if c.rounds + c.rounds_failed + c.rounds_skipped + c.rounds_unfinished == 0
        && stats.injections.is_empty()
        && stats.recoveries.is_empty()
    {
        return Ok(());
    }
    let unfinished = match c.rounds_unfinished {
        0 => String::new(),
        n => format!(", {n} unfinished at the end"),
    };
    let saves_failed = match c.saves_failed {
        0 => String::new(),
        n => format!(", {n} server saves failed"),
    };
    eprintln!(
        "scar: {} checkpoint rounds ({} failed, {} skipped{unfinished}{saves_failed}), {} rows / {} bytes saved, {} rows held",
        c.rounds, c.rounds_failed, c.rounds_skipped, c.rows_saved, c.bytes_saved, c.rows_held
    );
    if let Some(w) = metrics {
        w.write(&serde_json::json!({ "event": "checkpoints", "stats": c }))?;
    }
    Ok(())
}

/// A warning for each fault `injected` asked for that is not among those that `struck` (its
/// iteration never came: the job ended before it).
pub(super) fn never_struck(
    injected: &[harp::Injection],
    struck: &[InjectionReport],
) -> Vec<String> {
    let mut struck_at: Vec<u64> = struck.iter().map(|f| f.at_iteration).collect();
    let mut lines = Vec::new();
    for injection in injected {
        match struck_at.iter().position(|&at| at == injection.at_iteration) {
            Some(found) => {
                struck_at.swap_remove(found);
            }
            None => lines.push(format!(
                "warning: the fault injected at iteration {} never struck: the job ended before that iteration",
                injection.at_iteration
            )),
        }
    }
    lines
}

/// An injected fault struck: the line printed for it.
pub(super) fn fault_line(f: &InjectionReport) -> String {
    let image = match (f.recovery, f.image_round) {
        (None, _) => String::new(),
        (Some(_), Some(round)) => format!(", from the image of round {round}"),
        (Some(_), None) => ", from initial values (no round had ended)".into(),
    };
    format!(
        "fault: {} at iteration {}{}: {} rows chosen, {} replaced, perturbation {:.4} (L2){image}",
        f.fault,
        f.at_iteration,
        f.recovery
            .map(|r| format!(" ({r:?} recovery)"))
            .unwrap_or_default(),
        f.rows_chosen,
        f.rows_replaced,
        f.perturbation_l2
    )
}

/// A failed server's shards were re-created: the line printed for it.
pub(super) fn recovery_line(r: &ServerRecovery) -> String {
    format!(
        "recovery: server {} failed at {:.3}s -> {} shards re-created, {} rows restored in {:.3}s",
        r.server,
        r.detected_at_s,
        r.shards.len(),
        r.rows_restored,
        r.duration_s
    )
}

/// A dead worker node's executors run again: the line printed for it.
pub(super) fn worker_recovery_line(r: &WorkerRecovery) -> String {
    let moved: Vec<String> = r
        .executors
        .iter()
        .map(|&(executor, worker)| {
            let from = r
                .restored_from_checkpoint
                .iter()
                .find(|(e, _)| *e == executor);
            match from {
                Some((_, checkpoint)) => {
                    format!("executor {executor} -> worker {worker} (from checkpoint {checkpoint})")
                }
                None => format!("executor {executor} -> worker {worker}"),
            }
        })
        .collect();
    // A node that held no executor when it died (its last one was moving away).
    let moved = if moved.is_empty() {
        "no executor (it held none)".to_string()
    } else {
        moved.join(", ")
    };
    format!(
        "worker recovery: node {} died at {:.3}s ({}); re-created {}; {} micro-tasks run again; executors running again after {:.3}s",
        r.node, r.detected_at_s, r.cause, moved, r.tasks_rerun, r.duration_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `--inject` fault whose iteration never came is warned about; one that struck,
    /// also a second one at the same iteration, is not.
    #[test]
    fn faults_that_never_struck_are_warned_about() {
        let at = |at_iteration| harp::Injection {
            at_iteration,
            fault: harp::Fault::Lose {
                fraction: 0.5,
                seed: 1,
            },
            timing: harp::FaultTiming::default(),
        };
        let struck = |at_iteration| InjectionReport {
            event: "fault",
            at_iteration,
            fault: "lose",
            recovery: None,
            rows_chosen: 1,
            rows_replaced: 1,
            perturbation_l2: 0.0,
            timing: harp::FaultTiming::default(),
            image_round: None,
        };
        let injected = [at(2), at(2), at(100_000)];
        let lines = never_struck(&injected, &[struck(2), struck(2)]);
        assert_eq!(
            lines,
            vec!["warning: the fault injected at iteration 100000 never struck: the job ended before that iteration"]
        );
        assert_eq!(
            never_struck(&injected[..1], &[struck(2)]),
            Vec::<String>::new()
        );
        assert_eq!(never_struck(&injected[..2], &[struck(2)]).len(), 1);
    }

    #[test]
    fn a_worker_recovery_line_names_the_checkpoint_each_executor_came_from() {
        let report = WorkerRecovery {
            node: 2,
            cause: "its lease expired".into(),
            executors: vec![(0, 1), (3, 1)],
            restored_from_checkpoint: vec![(3, 4)],
            tasks_rerun: 5,
            detected_at_s: 1.5,
            duration_s: 0.25,
        };
        assert_eq!(
            worker_recovery_line(&report),
            "worker recovery: node 2 died at 1.500s (its lease expired); re-created executor 0 -> worker 1, executor 3 -> worker 1 (from checkpoint 4); 5 micro-tasks run again; executors running again after 0.250s"
        );
        let none = WorkerRecovery {
            executors: Vec::new(),
            restored_from_checkpoint: Vec::new(),
            ..report
        };
        assert!(worker_recovery_line(&none).contains("re-created no executor (it held none);"));
    }
}
