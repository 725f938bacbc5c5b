//! Consistent checkpoints on the command line (`--checkpoint-dir`, `--checkpoint-every`,
//! `--checkpoint-keep`, `--resume`; the job runs them in `processes.rs`, in one process or
//! across processes): reporting what they did — one line per checkpoint on the terminal and
//! one metrics record each.

use crate::metrics::MetricsWriter;
use anyhow::Result;
use harp::{CheckpointOutcome, ConsistentReport};

/// Prints and records `report`: the checkpoint resumed from, then every due checkpoint.
pub fn report(report: &ConsistentReport, metrics: Option<&MetricsWriter>) -> Result<()> {
    if let Some(r) = &report.resumed {
        eprintln!(
            "resumed from checkpoint {} in {} (version {})",
            r.seq,
            r.dir.display(),
            r.version
        );
        for (seq, why) in &r.skipped {
            eprintln!("  passed over checkpoint {seq}: {why}");
        }
    }
    for c in &report.checkpoints {
        match c.outcome {
            CheckpointOutcome::Written => eprintln!(
                "checkpoint {} (iteration {}): written, {} bytes, paused {:.1} ms, wrote in {:.1} ms",
                c.seq, c.iteration, c.bytes, c.pause_ms, c.write_ms
            ),
            CheckpointOutcome::Failed => eprintln!(
                "checkpoint {} (iteration {}): FAILED ({}); training went on",
                c.seq,
                c.iteration,
                c.error.as_deref().unwrap_or("unknown error")
            ),
            CheckpointOutcome::Skipped => eprintln!(
                "checkpoint {} (iteration {}): skipped, the previous one was still being written",
                c.seq, c.iteration
            ),
        }
    }
    if !report.checkpoints.is_empty() {
        eprintln!(
            "checkpoints: {} written ({} bytes), {} failed, {} skipped",
            report.written, report.bytes, report.failed, report.skipped
        );
    }
    if let Some(w) = metrics {
        if let Some(r) = &report.resumed {
            w.write(&serde_json::json!({ "event": "resumed", "from": r }))?;
        }
        for c in &report.checkpoints {
            w.write(&serde_json::json!({ "event": "checkpoint", "checkpoint": c }))?;
        }
    }
    Ok(())
}
