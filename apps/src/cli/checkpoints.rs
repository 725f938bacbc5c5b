//! Consistent checkpoints on the command line (`--checkpoint-dir`, `--checkpoint-every`,
//! `--checkpoint-keep`, `--resume`; the job runs them in `processes.rs`, in one process or
//! across processes): what they did. The checkpoint resumed from and each due checkpoint
//! are printed and recorded as they happen (`output.rs`, with [`resumed_lines`] and
//! [`checkpoint_line`]); [`report`] prints the sum at the end.

use harp::{CheckpointOutcome, CheckpointRecord, ConsistentReport, ResumeRecord};

/// The job resumed from `r`: its line, and one for each newer checkpoint passed over.
pub(super) fn resumed_lines(r: &ResumeRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "resumed from checkpoint {} in {} (version {})",
        r.seq,
        r.dir.display(),
        r.version
    )];
    for (seq, why) in &r.skipped {
        lines.push(format!("  passed over checkpoint {seq}: {why}"));
    }
    lines
}

/// A due checkpoint was written, failed or was skipped: its line.
pub(super) fn checkpoint_line(c: &CheckpointRecord) -> String {
    match c.outcome {
        CheckpointOutcome::Written => format!(
            "checkpoint {} (iteration {}): written, {} bytes, paused {:.1} ms, wrote in {:.1} ms",
            c.seq, c.iteration, c.bytes, c.pause_ms, c.write_ms
        ),
        CheckpointOutcome::Failed => format!(
            "checkpoint {} (iteration {}): FAILED ({}); training went on",
            c.seq,
            c.iteration,
            c.error.as_deref().unwrap_or("unknown error")
        ),
        CheckpointOutcome::Skipped => format!(
            "checkpoint {} (iteration {}): skipped, the previous one was still being written",
            c.seq, c.iteration
        ),
    }
}

/// Prints what `report`'s checkpoints came to, if any was due.
pub fn report(report: &ConsistentReport) {
    if !report.checkpoints.is_empty() {
        eprintln!(
            "checkpoints: {} written ({} bytes), {} failed, {} skipped",
            report.written, report.bytes, report.failed, report.skipped
        );
    }
}
