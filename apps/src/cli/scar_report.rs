//! What SCAR did during a `harp run`: one line per checkpoint summary, injected fault and
//! server recovery on the terminal, and the same records in the metrics file; also each
//! dead worker node recovered from (`--recover-workers`).

use crate::metrics::MetricsWriter;
use anyhow::Result;
use harp::JobStats;

/// Prints and records `stats`' checkpoint rounds, injections and recoveries (nothing when
/// the job kept no running checkpoint).
pub fn report(stats: &JobStats, metrics: Option<&MetricsWriter>) -> Result<()> {
    worker_recoveries(stats, metrics)?;
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
    for f in &stats.injections {
        let image = match (f.recovery, f.image_round) {
            (None, _) => String::new(),
            (Some(_), Some(round)) => format!(", from the image of round {round}"),
            (Some(_), None) => ", from initial values (no round had ended)".into(),
        };
        eprintln!(
            "fault: {} at iteration {}{}: {} rows chosen, {} replaced, perturbation {:.4} (L2){image}",
            f.fault,
            f.at_iteration,
            f.recovery
                .map(|r| format!(" ({r:?} recovery)"))
                .unwrap_or_default(),
            f.rows_chosen,
            f.rows_replaced,
            f.perturbation_l2
        );
    }
    for r in &stats.recoveries {
        eprintln!(
            "recovery: server {} failed at {:.3}s -> {} shards re-created, {} rows restored in {:.3}s",
            r.server,
            r.detected_at_s,
            r.shards.len(),
            r.rows_restored,
            r.duration_s
        );
    }
    if let Some(w) = metrics {
        w.write(&serde_json::json!({ "event": "checkpoints", "stats": c }))?;
        for f in &stats.injections {
            w.write(f)?;
        }
        for r in &stats.recoveries {
            w.write(&serde_json::json!({ "event": "recovery", "report": r }))?;
        }
    }
    Ok(())
}

/// Prints and records each dead worker node the job recovered from.
fn worker_recoveries(stats: &JobStats, metrics: Option<&MetricsWriter>) -> Result<()> {
    for r in &stats.worker_recoveries {
        let moved: Vec<String> = r
            .executors
            .iter()
            .map(|(executor, worker)| format!("executor {executor} -> worker {worker}"))
            .collect();
        // A node that held no executor when it died (its last one was moving away).
        let moved = if moved.is_empty() {
            "no executor (it held none)".to_string()
        } else {
            moved.join(", ")
        };
        eprintln!(
            "worker recovery: node {} died at {:.3}s ({}); re-created {}; {} micro-tasks run again; executors running again after {:.3}s",
            r.node,
            r.detected_at_s,
            r.cause,
            moved,
            r.tasks_rerun,
            r.duration_s
        );
        if let Some(w) = metrics {
            w.write(&serde_json::json!({ "event": "worker_recovery", "report": r }))?;
        }
    }
    Ok(())
}
